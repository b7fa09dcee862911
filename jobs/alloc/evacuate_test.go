package alloc

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// moveString is a move as "inst kind primary/secondary".
func moveString(m Move) string {
	s := m.Instance + " " + m.Kind + " " + m.NewPrimaryName
	if m.NewSecondaryName != "" {
		s += "/" + m.NewSecondaryName
	}
	return s
}

func TestEvacuatePlan(t *testing.T) {
	// Four 8 GiB nodes; n1 is evacuated.
	base := func() *cluster {
		c := newCluster()
		for _, n := range []string{"n1", "n2", "n3", "n4"} {
			c.node(n, "g", 8*gib, 100*gib, 8)
		}
		return c
	}
	tests := []struct {
		name   string
		c      *cluster
		node   string
		mode   EvacMode
		opts   Options
		moves  []string
		failed []string // "inst: reason substring"
		code   fsm.Code
	}{
		{
			name: "primary-only: drbd fails over, diskless moves, plain is refused",
			c: base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("p1", TemplatePlain, "n1", "", 1*gib, 10*gib, 1).
				inst("z1", TemplateDiskless, "n1", "", 1*gib, 0, 1).
				inst("s1", TemplateDRBD, "n3", "n1", 1*gib, 10*gib, 1), // a secondary: left alone
			node: "n1", mode: EvacPrimary,
			moves:  []string{"d1 failover n2/n1", "z1 recreate n4"}, // n3 holds s1
			failed: []string{"p1: instances of disk template plain cannot be relocated"},
			code:   fsm.CodeState,
		},
		{
			name: "primary-only with allow recreate",
			c: base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("p1", TemplatePlain, "n1", "", 1*gib, 10*gib, 1),
			node: "n1", mode: EvacPrimary, opts: Options{AllowRecreate: true},
			moves: []string{"d1 failover n2/n1", "p1 recreate n3"},
		},
		{
			name: "secondary-only: a new secondary, never the primary",
			c:    base().inst("d2", TemplateDRBD, "n2", "n1", 2*gib, 10*gib, 2),
			node: "n1", mode: EvacSecondary,
			moves: []string{"d2 replace_secondary n2/n3"},
		},
		{
			name: "all: failover and a new secondary; replace secondaries; recreate",
			c: base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("d2", TemplateDRBD, "n3", "n1", 2*gib, 10*gib, 2).
				inst("p1", TemplatePlain, "n1", "", 1*gib, 10*gib, 1),
			node: "n1", mode: EvacAll, opts: Options{AllowRecreate: true},
			moves: []string{"d1 failover_replace n2/n4", "d2 replace_secondary n3/n2", "p1 recreate n4"},
		},
		{
			name: "the secondary lacks memory: primary-only fails",
			c: base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("big", TemplatePlain, "n2", "", 7*gib, 1*gib, 1),
			node: "n1", mode: EvacPrimary,
			failed: []string{"d1: its secondary node n2 cannot take it over: has 1024 MiB free memory, needs 2048"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "the secondary lacks memory: all relocates to a new pair",
			c: base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("big", TemplatePlain, "n2", "", 7*gib, 1*gib, 1),
			node: "n1", mode: EvacAll,
			moves: []string{"d1 relocate n3/n4"},
		},
		{
			name: "the secondary keeps N+1 memory for others",
			c: base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("x", TemplateDRBD, "n3", "n2", 7*gib, 1*gib, 1),
			node: "n1", mode: EvacPrimary,
			failed: []string{"d1: its secondary node n2 cannot take it over: has 8192 MiB free memory, needs 9216 (2048 for the instance, 7168 kept for N+1)"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "a dead node's instances fail over; relocation needs it up",
			c: base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("d3", TemplateDRBD, "n1", "n3", 2*gib, 10*gib, 2).
				inst("big", TemplatePlain, "n3", "", 7*gib, 1*gib, 1),
			node: "n1", mode: EvacAll, opts: Options{Dead: map[string]bool{uuid("n1"): true}},
			moves:  []string{"d1 failover_replace n2/n4"},
			failed: []string{"d3: its secondary node n3 cannot take it over: has 1024 MiB free memory, needs 2048"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "a drained secondary takes nothing",
			c:    base().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).withNode("n2", drained),
			node: "n1", mode: EvacPrimary,
			failed: []string{"d1: its secondary node n2 is drained"},
			code:   fsm.CodeState,
		},
		{
			name: "an offline primary cannot feed a new secondary; a forthcoming one needs no copy",
			c: base().withNode("n2", offline).
				inst("d2", TemplateDRBD, "n2", "n1", 2*gib, 10*gib, 2).
				inst("f2", TemplateDRBD, "n2", "n1", 2*gib, 10*gib, 2, forthcoming),
			node: "n1", mode: EvacSecondary,
			moves:  []string{"f2 replace_secondary n2/n3"},
			failed: []string{"d2: its primary node n2 is offline: its disks cannot be copied to a new secondary"},
			code:   fsm.CodeState,
		},
		{
			name: "moves are accounted as they are planned",
			c: base().withNode("n3", offline).withNode("n4", offline).
				inst("p1", TemplatePlain, "n1", "", 5*gib, 10*gib, 1).
				inst("p2", TemplatePlain, "n1", "", 5*gib, 10*gib, 1),
			node: "n1", mode: EvacPrimary, opts: Options{AllowRecreate: true},
			moves:  []string{"p1 recreate n2"},
			failed: []string{"p2: no node can take it: no node has 5120 MiB free memory: n2 has 3072; n3, n4 are offline; n1 is being evacuated"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "real instances are planned before forthcoming ones",
			c: base().withNode("n3", offline).withNode("n4", offline).
				inst("a-res", TemplatePlain, "n1", "", 5*gib, 10*gib, 1, forthcoming).
				inst("b-real", TemplatePlain, "n1", "", 5*gib, 10*gib, 1),
			node: "n1", mode: EvacPrimary, opts: Options{AllowRecreate: true},
			moves:  []string{"b-real recreate n2"},
			failed: []string{"a-res: no node can take it"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "a forthcoming plain instance moves without allow recreate",
			c:    base().inst("res", TemplatePlain, "n1", "", 5*gib, 10*gib, 1, forthcoming),
			node: "n1", mode: EvacAll,
			moves: []string{"res recreate n2"},
		},
		{
			name: "a new secondary keeps N+1",
			c: base().inst("d2", TemplateDRBD, "n2", "n1", 3*gib, 10*gib, 1).
				inst("x", TemplateDRBD, "n2", "n3", 6*gib, 1*gib, 1),
			node: "n1", mode: EvacSecondary,
			moves: []string{"d2 replace_secondary n2/n4"},
		},
		{
			name: "no new secondary",
			c: base().withNode("n4", notVM).
				inst("d2", TemplateDRBD, "n2", "n1", 3*gib, 10*gib, 1).
				inst("x", TemplateDRBD, "n2", "n3", 6*gib, 1*gib, 1),
			node: "n1", mode: EvacSecondary,
			failed: []string{"d2: no drbd secondary for a primary on n2: too little free memory to take over as secondary (N+1): n3 has 8192 MiB free, needs 9216; n4 is not vm_capable; n1 is being evacuated"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "no new secondary without DRBD",
			c: base().withNode("n3", noDRBD).
				inst("d2", TemplateDRBD, "n2", "n1", 2*gib, 10*gib, 2),
			node: "n1", mode: EvacSecondary,
			moves: []string{"d2 replace_secondary n2/n4"}, // n3 would score as well
		},
		{
			name: "no node with DRBD for a new secondary: the reason is named",
			c:    base().withNode("n3", noDRBD).withNode("n4", noDRBD).inst("d2", TemplateDRBD, "n2", "n1", 2*gib, 10*gib, 2),
			node: "n1", mode: EvacSecondary, code: fsm.CodeNoRes,
			failed: []string{"d2: no drbd secondary for a primary on n2: n2 cannot be its own secondary; n1 is being evacuated; n3, n4 are without DRBD (node n3 has no DRBD (no /proc/drbd); node n4 has no DRBD (no /proc/drbd))"},
		},
		{
			name: "all: failover, then a new secondary with DRBD; a plain one may go without",
			c: base().withNode("n3", noDRBD).
				inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("z1", TemplateDiskless, "n1", "", 1*gib, 0, 1),
			node: "n1", mode: EvacAll,
			moves: []string{"d1 failover_replace n2/n4", "z1 recreate n3"},
		},
		{
			name: "all: relocation to a new pair with DRBD",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				node("n3", "g", 8*gib, 100*gib, 8, noDRBD).node("n4", "g", 8*gib, 100*gib, 8).node("n5", "g", 8*gib, 100*gib, 8).
				inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2).
				inst("big", TemplatePlain, "n2", "", 7*gib, 1*gib, 1),
			node: "n1", mode: EvacAll,
			moves: []string{"d1 relocate n4/n5"},
		},
		{
			name: "hypervisors: recreated only on a node of its driver (the node it ran on is kvm)",
			c:    hvNodes().inst("z1", TemplateDiskless, "n1", "", 1*gib, 0, 1),
			node: "n1", mode: EvacPrimary,
			moves: []string{"z1 recreate n3"}, // n2 runs fake
		},
		{
			name: "hypervisors: its own, the node it ran on not knowing its driver",
			c: hvNodes().withNode("n1", runs("")).
				inst("z1", TemplateDiskless, "n1", "", 1*gib, 0, 1, hvIs("kvm")),
			node: "n1", mode: EvacPrimary,
			moves: []string{"z1 recreate n3"},
		},
		{
			name: "hypervisors: no failover to a secondary of another driver",
			c:    hvNodes().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2),
			node: "n1", mode: EvacPrimary,
			failed: []string{"d1: its secondary node n2 is running another hypervisor"},
			code:   fsm.CodeState,
		},
		{
			name: "hypervisors: all: a new pair of its driver instead",
			c:    hvNodes().inst("d1", TemplateDRBD, "n1", "n2", 2*gib, 10*gib, 2),
			node: "n1", mode: EvacAll,
			moves: []string{"d1 relocate n3/n4"},
		},
		{
			name: "hypervisors: a new secondary of its driver",
			c:    hvNodes().inst("d2", TemplateDRBD, "n3", "n1", 2*gib, 10*gib, 2),
			node: "n1", mode: EvacSecondary,
			moves: []string{"d2 replace_secondary n3/n4"}, // not n2
		},
		{
			name: "hypervisors: none of its driver left",
			c: hvNodes().withNode("n3", runs("fake")).withNode("n4", runs("fake")).
				inst("z1", TemplateDiskless, "n1", "", 1*gib, 0, 1),
			node: "n1", mode: EvacPrimary,
			failed: []string{"z1: no node can take it:"},
			code:   fsm.CodeNoRes,
		},
		{
			name: "an empty node",
			c:    base().inst("d2", TemplateDRBD, "n2", "n3", 3*gib, 10*gib, 1),
			node: uuid("n1"), mode: EvacAll,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshotOf(tc.c.st)
			plan, err := EvacuatePlan(tc.c.st, tc.node, tc.mode, tc.opts)
			if snapshotOf(tc.c.st) != before {
				t.Fatal("the state changed")
			}
			var got []string
			for _, m := range plan.Moves {
				got = append(got, moveString(m))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.moves) {
				t.Fatalf("moves %q, want %q", got, tc.moves)
			}
			if len(plan.Failed) != len(tc.failed) {
				t.Fatalf("failed %+v, want %q", plan.Failed, tc.failed)
			}
			for i, f := range plan.Failed {
				if s := f.Instance + ": " + f.Reason; !strings.HasPrefix(s, tc.failed[i]) {
					t.Fatalf("failure\n%q\nwant it to start with\n%q", s, tc.failed[i])
				}
			}
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe := wantCode(t, err, tc.code)
			for _, f := range plan.Failed {
				if !strings.Contains(fe.Msg, f.Instance+": "+f.Reason) {
					t.Fatalf("error %q does not name %s", fe.Msg, f.Instance)
				}
			}
			if plan.NodeName != "n1" || plan.Node != uuid("n1") || plan.Mode != tc.mode {
				t.Fatalf("plan header %s %s %s", plan.Node, plan.NodeName, plan.Mode)
			}
		})
	}
}

// hvNodes are four 8 GiB nodes: n1, n3 and n4 run kvm, n2 runs fake.
func hvNodes() *cluster {
	c := newCluster()
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		hv := "kvm"
		if n == "n2" {
			hv = "fake"
		}
		c.node(n, "g", 8*gib, 100*gib, 8, runs(hv))
	}
	return c
}

func hvIs(hv string) func(*fsm.Instance) { return func(i *fsm.Instance) { i.Hypervisor = hv } }

func (c *cluster) withNode(name string, mods ...func(*fsm.Node)) *cluster {
	for _, m := range mods {
		m(c.st.Nodes[uuid(name)])
	}
	return c
}

func TestEvacuatePlanBadInput(t *testing.T) {
	c := newCluster().node("n1", "g", 8*gib, 100*gib, 8)
	_, err := EvacuatePlan(c.st, "n1", "primary", Options{})
	wantCode(t, err, fsm.CodeInval)
	_, err = EvacuatePlan(c.st, "n9", EvacAll, Options{})
	wantCode(t, err, fsm.CodeNoEnt)
}

// TestEvacuateMovesApplied: after running a plan, the node holds nothing
// in the mode's scope but the failed instances.
func TestEvacuateMovesApplied(t *testing.T) {
	r := newRand(4)
	for trial := 0; trial < 100; trial++ {
		st := randomState(r, trial)
		o := randomOpts(r, st)
		o.AllowRecreate = true
		nodes := st.SortedNodes()
		n := nodes[r.IntN(len(nodes))]
		plan, _ := EvacuatePlan(st, n.UUID, EvacAll, o)
		after := copyState(st)
		apply(after, plan)
		failed := map[string]bool{}
		for _, f := range plan.Failed {
			failed[f.InstanceUUID] = true
		}
		for _, i := range after.Instances {
			on := i.PrimaryNode == n.UUID
			for _, s := range i.SecondaryNodes {
				on = on || s == n.UUID
			}
			if on && !failed[i.UUID] {
				t.Fatalf("trial %d: %s still on %s after the plan", trial, i.Name, n.Name)
			}
		}
		// Evacuating the result again has nothing more to move.
		again, _ := EvacuatePlan(after, n.UUID, EvacAll, o)
		if len(again.Moves)+len(again.Failed) != len(plan.Failed) {
			t.Fatalf("trial %d: a second plan has %d moves and %d failures after %d failures", trial, len(again.Moves), len(again.Failed), len(plan.Failed))
		}
	}
}

// apply changes the state as a plan's moves would.
func apply(st *fsm.State, p Plan) {
	for _, m := range p.Moves {
		i := st.Instances[m.InstanceUUID]
		i.PrimaryNode = m.NewPrimary
		if m.NewSecondary != "" {
			i.SecondaryNodes = []string{m.NewSecondary}
		} else {
			i.SecondaryNodes = []string{}
		}
	}
}

// TestEvacuateProperties: on random states, for every node and mode, a
// plan moves or reports every instance in scope, moves stay in their
// group on usable nodes, and after running the plan no node that received
// something is overcommitted or fails N+1.
func TestEvacuateProperties(t *testing.T) {
	r := newRand(3)
	moves, fails := 0, 0
	for trial := 0; trial < 150; trial++ {
		st := randomState(r, trial)
		o := randomOpts(r, st)
		o.AllowRecreate = r.IntN(2) == 0
		for _, n := range st.SortedNodes() {
			for _, mode := range []EvacMode{EvacPrimary, EvacSecondary, EvacAll} {
				plan, err := EvacuatePlan(st, n.Name, mode, o)
				if (err == nil) != (len(plan.Failed) == 0) {
					t.Fatalf("error %v with %d failures", err, len(plan.Failed))
				}
				checkPlan(t, st, n, mode, o, plan)
				moves += len(plan.Moves)
				fails += len(plan.Failed)
			}
		}
	}
	t.Logf("%d moves, %d failures checked", moves, fails)
	if moves < 1000 || fails < 100 {
		t.Fatalf("too few cases: %d moves, %d failures", moves, fails)
	}
}

func checkPlan(t *testing.T, st *fsm.State, n *fsm.Node, mode EvacMode, o Options, plan Plan) {
	t.Helper()
	var scope []string
	for _, i := range st.Instances {
		onSec := false
		for _, s := range i.SecondaryNodes {
			onSec = onSec || s == n.UUID
		}
		if i.PrimaryNode == n.UUID && mode != EvacSecondary || onSec && mode != EvacPrimary {
			scope = append(scope, i.UUID)
		}
	}
	var got []string
	for _, m := range plan.Moves {
		got = append(got, m.InstanceUUID)
	}
	for _, f := range plan.Failed {
		got = append(got, f.InstanceUUID)
	}
	sort.Strings(scope)
	sort.Strings(got)
	if fmt.Sprint(scope) != fmt.Sprint(got) {
		t.Fatalf("evacuating %s (%s): instances in scope %v, planned or failed %v", n.Name, mode, scope, got)
	}
	after := copyState(st)
	apply(after, plan)
	primaryTargets, diskTargets := map[string]bool{}, map[string]bool{}
	for _, m := range plan.Moves {
		i := st.Instances[m.InstanceUUID]
		group := st.Nodes[i.PrimaryNode].Group
		if m.OldPrimary != i.PrimaryNode {
			t.Fatalf("%s: old primary %s, state has %s", m.Instance, m.OldPrimary, i.PrimaryNode)
		}
		for _, target := range []string{m.NewPrimary, m.NewSecondary} {
			if target == "" || target == m.OldPrimary && m.Kind == MoveReplaceSecondary || target == n.UUID && m.Kind == MoveFailover {
				continue // a node the instance keeps
			}
			tn := st.Nodes[target]
			if target == n.UUID || !refUsable(tn, o) || tn.Group != group {
				t.Fatalf("%s (%s): moved to %s (usable %v, group %s, want %s)", m.Instance, m.Kind, tn.Name, refUsable(tn, o), tn.Group, group)
			}
		}
		if m.NewPrimary == m.NewSecondary {
			t.Fatalf("%s: primary and secondary %s", m.Instance, m.NewPrimary)
		}
		switch m.Kind {
		case MoveFailover:
			if i.DiskTemplate != TemplateDRBD || m.NewPrimary != i.SecondaryNodes[0] || m.NewSecondary != n.UUID || mode != EvacPrimary {
				t.Fatalf("bad failover %+v of %+v", m, i)
			}
			primaryTargets[m.NewPrimary] = true
		case MoveFailoverReplace:
			if i.DiskTemplate != TemplateDRBD || m.NewPrimary != i.SecondaryNodes[0] {
				t.Fatalf("bad failover_replace %+v", m)
			}
			primaryTargets[m.NewPrimary] = true
			diskTargets[m.NewSecondary] = true
		case MoveReplaceSecondary:
			if i.DiskTemplate != TemplateDRBD || m.NewPrimary != i.PrimaryNode || i.SecondaryNodes[0] != n.UUID {
				t.Fatalf("bad replace_secondary %+v", m)
			}
			diskTargets[m.NewSecondary] = true
		case MoveRelocate:
			if i.DiskTemplate != TemplateDRBD || mode != EvacAll && !i.Forthcoming {
				t.Fatalf("bad relocate %+v", m)
			}
			primaryTargets[m.NewPrimary], diskTargets[m.NewPrimary], diskTargets[m.NewSecondary] = true, true, true
		case MoveRecreate:
			if i.DiskTemplate == TemplateDRBD || i.DiskTemplate == TemplatePlain && !i.Forthcoming && !o.AllowRecreate || mode == EvacSecondary {
				t.Fatalf("bad recreate %+v (allow %v)", m, o.AllowRecreate)
			}
			primaryTargets[m.NewPrimary], diskTargets[m.NewPrimary] = true, true
		default:
			t.Fatalf("unknown kind %q", m.Kind)
		}
	}
	rt := refTable(after, "")
	for u := range primaryTargets {
		r := rt[u]
		if free := r.n.Resources.MemoryMiB - r.memUsed; free < r.rMem() || r.cpuUsed > r.cpuCap(o) {
			t.Fatalf("evacuating %s (%s): %s has %d MiB free, %d reserved, vcpus %d/%d", n.Name, mode, r.n.Name, free, r.rMem(), r.cpuUsed, r.cpuCap(o))
		}
	}
	for u := range diskTargets {
		r := rt[u]
		if r.diskUsed > r.n.Resources.DiskMiB || r.n.Resources.MemoryMiB-r.memUsed < r.rMem() {
			t.Fatalf("evacuating %s (%s): %s disk %d/%d, %d MiB free, %d reserved", n.Name, mode, r.n.Name, r.diskUsed, r.n.Resources.DiskMiB,
				r.n.Resources.MemoryMiB-r.memUsed, r.rMem())
		}
	}
}

// TestPureDoesNotChangeState: the state is read, never written.
func TestPureDoesNotChangeState(t *testing.T) {
	st := randomState(newRand(7), 0)
	before := snapshotOf(st)
	for i := 0; i < 50; i++ {
		Allocate(st, drbd(int64(512*(i%5+1)), 1024, 1), Options{})
		Capacity(st, plain(2048, 1024, 1), Options{MaxCapacity: 50})
		for _, n := range st.SortedNodes() {
			EvacuatePlan(st, n.Name, EvacAll, Options{AllowRecreate: true})
		}
		Usage(st, Options{})
	}
	if after := snapshotOf(st); after != before {
		t.Fatal("the state changed")
	}
}
