package alloc

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

func TestCapacity(t *testing.T) {
	two := func() *cluster {
		return newCluster().node("a", "g", 8*gib, 100*gib, 8).node("b", "g", 8*gib, 100*gib, 8)
	}
	tests := []struct {
		name      string
		c         *cluster
		spec      Request
		opts      Options
		count     int
		order     string // primaries[/secondaries] in order
		prims     map[string]int
		secs      map[string]int
		groups    map[string]int
		limit     string
		truncated bool
	}{
		{
			name: "plain fills both nodes alternately",
			c:    two(), spec: plain(2*gib, 1*gib, 1), count: 8,
			order:  "a b a b a b a b",
			prims:  map[string]int{"a": 4, "b": 4},
			groups: map[string]int{"g": 8},
			limit:  "cannot place the instance (plain, 2048 MiB memory, 1024 MiB disk, 1 vcpus): no node has 2048 MiB free memory: a has 0, b has 0",
		},
		{
			name: "a forthcoming reservation takes its memory",
			c:    two().inst("res1", TemplatePlain, "a", "", 4*gib, 0, 0, forthcoming),
			spec: plain(2*gib, 1*gib, 1), count: 6,
			order:  "b b a b a b",
			prims:  map[string]int{"a": 2, "b": 4},
			groups: map[string]int{"g": 6},
			limit:  "cannot place the instance (plain, 2048 MiB memory, 1024 MiB disk, 1 vcpus): no node has 2048 MiB free memory: a has 0, b has 0",
		},
		{
			// Each node must keep free the memory of the other's
			// instances: together they hold half of what plain would.
			name: "N+1 halves a two-node cluster for drbd",
			c:    two(), spec: drbd(2*gib, 1*gib, 1), count: 4,
			order:  "a/b b/a a/b b/a",
			prims:  map[string]int{"a": 2, "b": 2},
			secs:   map[string]int{"a": 2, "b": 2},
			groups: map[string]int{"g": 4},
			limit: "cannot place the instance (drbd, 2048 MiB memory, 1152 MiB disk on each node, 1 vcpus): " +
				"N+1 redundancy would break (memory kept to take over the drbd instances of a failed peer): a has 4096 MiB free, needs 6144, b has 4096 MiB free, needs 6144",
		},
		{
			name: "vcpus bound it",
			c:    two(), spec: plain(1*gib, 1*gib, 3), count: 4,
			order: "a b a b", prims: map[string]int{"a": 2, "b": 2}, groups: map[string]int{"g": 4},
			limit: "cannot place the instance (plain, 1024 MiB memory, 1024 MiB disk, 3 vcpus): no node has 3 free vcpus: a has 2, b has 2",
		},
		{
			name: "preferred, then last_resort, never unallocable",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocLastResort).group("g3", fsm.AllocUnallocable).
				node("a", "g1", 4*gib, 100*gib, 8).node("b", "g2", 4*gib, 100*gib, 8).node("c", "g3", 64*gib, 100*gib, 8),
			spec: plain(2*gib, 1*gib, 1), count: 4,
			order:  "a a b b",
			prims:  map[string]int{"a": 2, "b": 2},
			groups: map[string]int{"g1": 2, "g2": 2},
			limit: "cannot place the instance (plain, 2048 MiB memory, 1024 MiB disk, 1 vcpus): in group g1: no node has 2048 MiB free memory: a has 0; " +
				"in group g2: no node has 2048 MiB free memory: b has 0; node group g3 is unallocable",
		},
		{
			name: "in one group",
			c:    newCluster().node("a", "g1", 4*gib, 100*gib, 8).node("b", "g2", 4*gib, 100*gib, 8),
			spec: Request{Template: TemplatePlain, MemoryMiB: 2 * gib, Group: "g2"}, count: 2,
			order: "b b", prims: map[string]int{"b": 2}, groups: map[string]int{"g2": 2},
			limit: "cannot place the instance (plain, 2048 MiB memory, 0 MiB disk, 0 vcpus): no node has 2048 MiB free memory: b has 0",
		},
		{
			name: "counting stops at MaxCapacity",
			c:    two(), spec: plain(1, 0, 0), opts: Options{MaxCapacity: 3}, count: 3,
			order: "a b a", prims: map[string]int{"a": 2, "b": 1}, groups: map[string]int{"g": 3},
			limit: "stopped counting at 3 instances", truncated: true,
		},
		{
			name: "nothing fits",
			c:    newCluster().node("a", "g", 8*gib, 100*gib, 8, offline),
			spec: plain(1*gib, 0, 0), count: 0, order: "", prims: map[string]int{}, groups: map[string]int{},
			limit: "cannot place the instance (plain, 1024 MiB memory, 0 MiB disk, 0 vcpus): a is offline",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Capacity(tc.c.st, tc.spec, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			order := ""
			for i, p := range res.Placements {
				if i > 0 {
					order += " "
				}
				order += p.Primary
				if p.Secondary != "" {
					order += "/" + p.Secondary
				}
			}
			if res.Count != tc.count || order != tc.order || res.Limit != tc.limit || res.Truncated != tc.truncated {
				t.Fatalf("got count %d order %q truncated %v limit\n%q\nwant %d %q %v\n%q", res.Count, order, res.Truncated, res.Limit,
					tc.count, tc.order, tc.truncated, tc.limit)
			}
			if !reflect.DeepEqual(res.Primaries, tc.prims) || !reflect.DeepEqual(res.Groups, tc.groups) ||
				tc.secs != nil && !reflect.DeepEqual(res.Secondaries, tc.secs) {
				t.Fatalf("per node %v/%v per group %v", res.Primaries, res.Secondaries, res.Groups)
			}
		})
	}
}

func TestCapacityBadSpec(t *testing.T) {
	c := newCluster().node("a", "g", 8*gib, 100*gib, 8)
	for _, spec := range []Request{
		{Template: TemplatePlain},
		{Template: TemplateDiskless, VCPUs: 0, MemoryMiB: 0},
		{Template: "rbd", MemoryMiB: 1},
		{Template: TemplatePlain, MemoryMiB: 1, Group: "g3"},
	} {
		t.Run(fmt.Sprintf("%+v", spec), func(t *testing.T) {
			_, err := Capacity(c.st, spec, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			wantCode(t, err, map[bool]fsm.Code{true: fsm.CodeNoEnt, false: fsm.CodeInval}[spec.Group != ""])
		})
	}
}

// TestCapacityProperties: capacity N means that N allocations in a row
// succeed, on the nodes capacity lists, and the next one fails with the
// message capacity gives.
func TestCapacityProperties(t *testing.T) {
	r := newRand(2)
	total := 0
	for trial := 0; trial < 150; trial++ {
		st := randomState(r, trial)
		o := randomOpts(r, st)
		spec := randomRequest(r, st)
		spec.Nodes, spec.Exclude = nil, nil
		spec.MemoryMiB = int64(2+r.IntN(6)) * 512
		res, err := Capacity(st, spec, o)
		if spec.Group != "" && st.Groups[uuid(spec.Group)].AllocPolicy == fsm.AllocUnallocable {
			wantCode(t, err, fsm.CodeInval)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.Truncated {
			t.Fatalf("trial %d: truncated at %d", trial, res.Count)
		}
		if len(res.Placements) != res.Count {
			t.Fatalf("%d placements for a count of %d", len(res.Placements), res.Count)
		}
		sum := 0
		for _, v := range res.Groups {
			sum += v
		}
		if sum != res.Count {
			t.Fatalf("groups add up to %d, count %d", sum, res.Count)
		}
		for k := 0; k < res.Count; k++ {
			a, err := Allocate(st, spec, o)
			if err != nil {
				t.Fatalf("trial %d: allocation %d of %d failed: %v", trial, k+1, res.Count, err)
			}
			if want := res.Placements[k]; a.PrimaryName != want.Primary || a.SecondaryName != want.Secondary {
				t.Fatalf("trial %d: allocation %d on %v, capacity said %+v", trial, k+1, a.NodeNames(), want)
			}
			commit(st, fmt.Sprintf("cap%d", k), spec, a)
			checkNoOvercommit(t, st, o, a)
		}
		_, err = Allocate(st, spec, o)
		if fe := wantCode(t, err, fsm.CodeNoRes); fe.Msg != res.Limit {
			t.Fatalf("trial %d: the next allocation fails with\n%q\ncapacity said\n%q", trial, fe.Msg, res.Limit)
		}
		total += res.Count
	}
	if total < 300 {
		t.Fatalf("only %d instances placed in all trials", total)
	}
}

// TestCheckCapacity: another allocator's placements are counted as
// Capacity counts its own: the built-in's own placements give its own
// answer, and counting stops, naming why, at the first placement that
// does not fit after the ones before it or names a bad node.
func TestCheckCapacity(t *testing.T) {
	c := newCluster().node("a", "g", 8*gib, 100*gib, 8).node("b", "g", 8*gib, 100*gib, 8)
	for _, spec := range []Request{plain(2*gib, 1*gib, 1), drbd(2*gib, 1*gib, 1)} {
		want, err := Capacity(c.st, spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := CheckCapacity(c.st, spec, want.Placements, Options{})
		if err != nil {
			t.Fatal(err)
		}
		want.Limit = ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the built-in's own placements counted\n got %+v\nwant %+v", spec.Template, got, want)
		}
	}
	for _, tc := range []struct {
		name   string
		spec   Request
		places []Placement
		count  int
		limit  string
	}{
		{"a full node", plain(2*gib, 1*gib, 1), []Placement{{Primary: "a"}, {Primary: "a"}, {Primary: "a"}, {Primary: "a"}, {Primary: "a"}, {Primary: "b"}}, 4,
			"placement 5 (a) does not fit: too little free memory (2048 MiB needed): a has 0"},
		// b keeps 6 GiB for a's three instances: a fourth of its own
		// fits, a fifth breaks N+1.
		{"N+1 broken", drbd(2*gib, 1*gib, 1), []Placement{{"a", "b"}, {"a", "b"}, {"a", "b"}, {"b", "a"}, {"b", "a"}}, 4,
			"placement 5 (b, a) does not fit: "},
		{"an unknown node", plain(2*gib, 1*gib, 1), []Placement{{Primary: "a"}, {Primary: "zz"}}, 1,
			"placement 2 (zz) is refused: node zz does not exist"},
		{"a drbd placement without its secondary", drbd(2*gib, 1*gib, 1), []Placement{{Primary: "a"}}, 0,
			"placement 1 (a) is refused: the instance needs 2 node(s)"},
		{"one node twice", drbd(2*gib, 1*gib, 1), []Placement{{"a", "a"}}, 0,
			"placement 1 (a, a) is refused: the primary and secondary node must differ, got a twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckCapacity(c.st, tc.spec, tc.places, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != tc.count || !strings.HasPrefix(got.Limit, tc.limit) {
				t.Errorf("count %d limit %q, want %d and a limit beginning %q", got.Count, got.Limit, tc.count, tc.limit)
			}
		})
	}
}
