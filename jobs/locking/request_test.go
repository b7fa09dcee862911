package locking

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestLevelNames(t *testing.T) {
	want := []string{"cluster", "instance", "nodegroup", "node", "node-res", "network"}
	for i, name := range want {
		l := Level(i)
		if l.String() != name {
			t.Errorf("Level(%d).String() = %q, want %q", i, l.String(), name)
		}
		got, err := ParseLevel(name)
		if err != nil || got != l {
			t.Errorf("ParseLevel(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := ParseLevel("node_res"); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), `"node_res"`) {
		t.Errorf("ParseLevel(node_res) error = %v", err)
	}
	if s := Level(9).String(); s != "level(9)" {
		t.Errorf("Level(9).String() = %q", s)
	}
	if Shared.String() != "shared" || Exclusive.String() != "exclusive" || Mode(7).String() != "mode(7)" {
		t.Errorf("mode names: %q %q %q", Shared, Exclusive, Mode(7))
	}
}

// TestCompatibilityMatrix spells out the multi-granularity matrix: row
// held, column asked.
func TestCompatibilityMatrix(t *testing.T) {
	modes := []gmode{gIS, gIX, gS, gX}
	want := map[gmode]string{
		gIS: "+++-",
		gIX: "++--",
		gS:  "+-+-",
		gX:  "----",
	}
	for _, a := range modes {
		var row strings.Builder
		for _, b := range modes {
			if compat(a, b) != compat(b, a) {
				t.Errorf("compat(%v,%v) is not symmetric", a, b)
			}
			if compat(a, b) {
				row.WriteByte('+')
			} else {
				row.WriteByte('-')
			}
		}
		if row.String() != want[a] {
			t.Errorf("%v: compatible with %s, want %s (IS IX S X)", a, row.String(), want[a])
		}
	}
}

func TestLub(t *testing.T) {
	for _, tc := range []struct{ a, b, want gmode }{
		{gNone, gIS, gIS}, {gIS, gNone, gIS}, {gIS, gIS, gIS}, {gIS, gIX, gIX}, {gIS, gS, gS},
		{gIX, gS, gX}, {gS, gIX, gX}, {gS, gX, gX}, {gIX, gIS, gIX}, {gS, gIS, gS}, {gX, gIS, gX},
	} {
		if got := lub(tc.a, tc.b); got != tc.want {
			t.Errorf("lub(%v,%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func stepStrings(steps []step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, wireName(s.level, s.name)+"="+s.mode.String())
	}
	return out
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name string
		reqs []Request
		want string
	}{
		{"one member", []Request{{Level: LevelInstance, Names: []string{"i1"}, Mode: Exclusive}},
			"instance/[lockset]=IX instance/i1=X"},
		{"whole level", []Request{{Level: LevelNode, Mode: Shared}}, "node/[lockset]=S"},
		{"BGL and members in level order", []Request{
			{Level: LevelNodeRes, Names: []string{"n2", "n1", "n2"}, Mode: Shared},
			{Level: LevelCluster, Names: []string{"BGL"}, Mode: Shared},
			{Level: LevelInstance, Names: []string{"b", "a"}, Mode: Exclusive},
		}, "cluster/[lockset]=IS cluster/BGL=S instance/[lockset]=IX instance/a=X instance/b=X node-res/[lockset]=IS node-res/n1=S node-res/n2=S"},
		{"duplicate level takes the stronger mode per name", []Request{
			{Level: LevelNode, Names: []string{"n1", "n2"}, Mode: Shared},
			{Level: LevelNode, Names: []string{"n2", "n3"}, Mode: Exclusive},
		}, "node/[lockset]=IX node/n1=S node/n2=X node/n3=X"},
		{"whole level absorbs members and takes the stronger mode", []Request{
			{Level: LevelNode, Mode: Shared},
			{Level: LevelNode, Names: []string{"n2"}, Mode: Exclusive},
		}, "node/[lockset]=X"},
		{"nothing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var names [][]string
			for _, r := range tc.reqs {
				names = append(names, append([]string(nil), r.Names...))
			}
			steps, err := normalize(tc.reqs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(stepStrings(steps), " "); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			for i, r := range tc.reqs {
				if !reflect.DeepEqual(names[i], append([]string(nil), r.Names...)) {
					t.Errorf("request %d names changed to %v", i, r.Names)
				}
			}
		})
	}
}

func TestNormalizeRejects(t *testing.T) {
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{Level: 6, Names: []string{"x"}}, "unknown level 6"},
		{Request{Level: -1}, "unknown level -1"},
		{Request{Level: LevelInstance, Names: []string{"i1", ""}}, "empty lock name at level instance"},
		{Request{Level: LevelCluster, Names: []string{"config"}}, `level cluster has only the lock "BGL", not "config"`},
		{Request{Level: LevelNode, Mode: 2}, "unknown mode 2 at level node"},
	} {
		_, err := normalize([]Request{{Level: LevelNode, Names: []string{"ok"}}, tc.req}, nil)
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.req, err, tc.want)
		}
	}
}
