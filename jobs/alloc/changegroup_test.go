package alloc

import (
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// twoGroups is g1 (a1, a2) and g2 (b1, b2), 8 GiB nodes.
func twoGroups() *cluster {
	c := newCluster()
	for _, n := range []string{"a1", "a2"} {
		c.node(n, "g1", 8*gib, 100*gib, 8)
	}
	for _, n := range []string{"b1", "b2"} {
		c.node(n, "g2", 8*gib, 100*gib, 8)
	}
	return c
}

func TestChangeGroupPlan(t *testing.T) {
	tests := []struct {
		name      string
		c         *cluster
		instances []string
		from      string
		targets   []string
		moves     []string
		groups    []string // NewGroup of each move
		failed    []string // "inst: reason substring"
		code      fsm.Code
	}{
		{
			name:      "drbd goes to two nodes of the other group",
			c:         twoGroups().inst("d1", TemplateDRBD, "a1", "a2", 2*gib, 10*gib, 2),
			instances: []string{"d1"},
			moves:     []string{"d1 relocate b1/b2"}, groups: []string{"g2"},
		},
		{
			name:      "drbd goes only to nodes with DRBD",
			c:         twoGroups().node("b3", "g2", 8*gib, 100*gib, 8).withNode("b1", noDRBD).inst("d1", TemplateDRBD, "a1", "a2", 2*gib, 10*gib, 2),
			instances: []string{"d1"},
			moves:     []string{"d1 relocate b2/b3"}, groups: []string{"g2"},
		},
		{
			name:      "drbd: no target group with two nodes with DRBD",
			c:         twoGroups().withNode("b1", noDRBD).inst("d1", TemplateDRBD, "a1", "a2", 2*gib, 10*gib, 2),
			instances: []string{"d1"},
			failed:    []string{"d1: no target group can take it: ", "b1 is without DRBD (node b1 has no DRBD (no /proc/drbd))"},
			code:      fsm.CodeNoRes,
		},
		{
			name: "diskless is re-created; plain and file are refused by name",
			c: twoGroups().inst("z1", TemplateDiskless, "a1", "", 1*gib, 0, 1).
				inst("p1", TemplatePlain, "a1", "", 1*gib, 10*gib, 1).
				inst("f1", TemplateFile, "a2", "", 1*gib, 10*gib, 1).
				inst("s1", TemplateSharedFile, "a2", "", 1*gib, 10*gib, 1),
			instances: []string{"z1", "p1", "f1", "s1"},
			moves:     []string{"z1 recreate b1"}, groups: []string{"g2"},
			failed: []string{"f1: instances of disk template file cannot change group", "p1: instances of disk template plain cannot change group",
				"s1: instances of disk template sharedfile cannot change group"},
			code: fsm.CodeState,
		},
		{
			name:      "a plain reservation moves in the configuration",
			c:         twoGroups().inst("r1", TemplatePlain, "a1", "", 1*gib, 10*gib, 1, forthcoming),
			instances: []string{"r1"},
			moves:     []string{"r1 recreate b1"}, groups: []string{"g2"},
		},
		{
			name: "the second does not fit after the first (accounted in order)",
			c: twoGroups().inst("d1", TemplateDRBD, "a1", "a2", 6*gib, 10*gib, 2).
				inst("d2", TemplateDRBD, "a2", "a1", 6*gib, 10*gib, 2),
			instances: []string{"d1", "d2"},
			moves:     []string{"d1 relocate b1/b2"}, groups: []string{"g2"},
			failed: []string{"d2: no target group can take it"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "the hypervisor of the instance decides the node",
			c: func() *cluster {
				c := newCluster().node("a1", "g1", 8*gib, 100*gib, 8, runs("kvm"))
				c.node("b1", "g2", 8*gib, 100*gib, 8, runs("xen")).node("b2", "g2", 8*gib, 100*gib, 8, runs("kvm"))
				c.inst("z1", TemplateDiskless, "a1", "", 1*gib, 0, 1, func(i *fsm.Instance) { i.Hypervisor = "kvm" })
				c.inst("z2", TemplateDiskless, "a1", "", 1*gib, 0, 1, func(i *fsm.Instance) { i.Hypervisor = "lxc" })
				return c
			}(),
			instances: []string{"z1", "z2"},
			moves:     []string{"z1 recreate b2"}, groups: []string{"g2"},
			failed: []string{"z2: no target group can take it", "running another hypervisor"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "the best of several target groups; unallocable ones take nothing",
			c: twoGroups().group("g3", fsm.AllocUnallocable).node("c1", "g3", 64*gib, 100*gib, 8).
				node("c2", "g3", 64*gib, 100*gib, 8).
				inst("d1", TemplateDRBD, "a1", "a2", 2*gib, 10*gib, 2),
			instances: []string{"d1"},
			moves:     []string{"d1 relocate b1/b2"}, groups: []string{"g2"},
		},
		{
			name: "a primary that is offline cannot hand its disks over",
			c: newCluster().node("a1", "g1", 8*gib, 100*gib, 8, offline).node("a2", "g1", 8*gib, 100*gib, 8).
				node("b1", "g2", 8*gib, 100*gib, 8).node("b2", "g2", 8*gib, 100*gib, 8).
				inst("d1", TemplateDRBD, "a1", "a2", 2*gib, 10*gib, 2),
			instances: []string{"d1"},
			failed:    []string{"d1: its primary node a1 is offline"},
			code:      fsm.CodeState,
		},
		{
			name: "group evacuation takes every instance with a node in the group",
			c: twoGroups().node("c1", "g3", 8*gib, 100*gib, 8).node("c2", "g3", 8*gib, 100*gib, 8).
				inst("d1", TemplateDRBD, "a1", "a2", 1*gib, 10*gib, 1).
				inst("z1", TemplateDiskless, "a2", "", 1*gib, 0, 1).
				inst("other", TemplateDRBD, "b1", "b2", 1*gib, 10*gib, 1),
			from: "g1", targets: []string{"g3"},
			moves: []string{"d1 relocate c1/c2", "z1 recreate c2"}, groups: []string{"g3", "g3"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshotOf(tc.c.st)
			gc, err := ResolveGroupChange(tc.c.st, tc.instances, tc.from, tc.targets)
			if err != nil {
				t.Fatalf("ResolveGroupChange: %v", err)
			}
			p, err := ChangeGroupPlan(tc.c.st, gc, Options{})
			var got, groups []string
			for _, m := range p.Moves {
				got = append(got, moveString(m))
				groups = append(groups, m.NewGroup)
			}
			if strings.Join(got, ";") != strings.Join(tc.moves, ";") || strings.Join(groups, ";") != strings.Join(tc.groups, ";") {
				t.Errorf("moves %q to groups %q, want %q to %q", got, groups, tc.moves, tc.groups)
			}
			if len(tc.failed) == 0 {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
			} else {
				fe, ok := err.(*fsm.Error)
				if !ok || fe.Code != tc.code {
					t.Fatalf("error %v, want code %s", err, tc.code)
				}
				for _, f := range tc.failed {
					if !strings.Contains(fe.Msg, f) {
						t.Errorf("error %q lacks %q", fe.Msg, f)
					}
				}
			}
			if snapshotOf(tc.c.st) != before {
				t.Error("planning changed the state")
			}
		})
	}
}

func TestResolveGroupChangeRefuses(t *testing.T) {
	c := twoGroups().inst("d1", TemplateDRBD, "a1", "a2", 1*gib, 10*gib, 1)
	one := newCluster().node("a1", "g1", 8*gib, 100*gib, 8).inst("z1", TemplateDiskless, "a1", "", 1*gib, 0, 1)
	tests := []struct {
		name      string
		st        *fsm.State
		instances []string
		from      string
		targets   []string
		field     string
		code      fsm.Code
		msg       string
	}{
		{"unknown instance", c.st, []string{"nope"}, "", nil, "instance_name", fsm.CodeNoEnt, "instance nope does not exist"},
		{"unknown target", c.st, []string{"d1"}, "", []string{"g9"}, "target_groups.0", fsm.CodeNoEnt, "target group g9 does not exist"},
		{"own group as target", c.st, []string{"d1"}, "", []string{"g2", "g1"}, "target_groups.1", fsm.CodeInval, "group g1 cannot be a target: instance d1 has nodes in it"},
		{"evacuated group as target", c.st, nil, "g1", []string{"g1"}, "target_groups.0", fsm.CodeInval, "group g1 is the group being evacuated"},
		{"unknown evacuated group", c.st, nil, "g9", nil, "group_name", fsm.CodeNoEnt, "node group g9 does not exist"},
		{"no other group", one.st, []string{"z1"}, "", nil, "target_groups", fsm.CodeInval, "there are no possible target groups: the cluster has no node group but g1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ResolveGroupChange(tc.st, tc.instances, tc.from, tc.targets)
			fe, ok := err.(*fsm.Error)
			if !ok || fe.Code != tc.code || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("got %#v, want %s on %s with %q", err, tc.code, tc.field, tc.msg)
			}
		})
	}
}
