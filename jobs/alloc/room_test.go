package alloc

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// lockedBy records a running job that holds the named instances' locks,
// as the executor records an opcode it started.
func (c *cluster) lockedBy(job int64, names ...string) *cluster {
	if c.st.Jobs == nil {
		c.st.Jobs = map[int64]*fsm.Job{}
	}
	c.st.Jobs[job] = &fsm.Job{ID: job, Status: fsm.StatusRunning, Executor: true, Ops: []*fsm.OpState{{
		Status: fsm.StatusRunning,
		Locks:  []fsm.LockDecl{{Level: fsm.LockInstance, Names: names, Exclusive: true}},
	}}}
	return c
}

// moveText is "name old->new" with nodes as pri[:sec].
func moveText(m Move) string {
	nodes := func(p, s string) string {
		if s == "" {
			return p
		}
		return p + ":" + s
	}
	return m.Instance + " " + nodes(m.OldPrimaryName, m.OldSecondaryName) + "->" + nodes(m.NewPrimaryName, m.NewSecondaryName)
}

func TestMakeRoom(t *testing.T) {
	diskless := func(mem int64) Request { return Request{Template: TemplateDiskless, MemoryMiB: mem, VCPUs: 1} }
	tests := []struct {
		name    string
		c       *cluster
		req     Request
		pri     string
		sec     string
		moves   []string // moveText of each move, in order
		kinds   []string
		errCode fsm.Code
		errHas  []string
		errNot  []string
	}{
		{
			name: "fits as things are: no moves",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming),
			req: diskless(6 * gib), pri: "n2",
		},
		{
			name: "fits after one move",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplatePlain, "n1", "", 5*gib, 10*gib, 1, forthcoming).
				inst("a", TemplatePlain, "n2", "", 3*gib, 10*gib, 1),
			req: plain(6*gib, 10*gib, 1), pri: "n1",
			moves: []string{"res1 n1->n2"}, kinds: []string{MoveRecreate},
		},
		{
			name: "needs two moves",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 3*gib, 0, 1, forthcoming).
				inst("res2", TemplateDiskless, "n1", "", 3*gib, 0, 1, forthcoming).
				inst("a", TemplateDiskless, "n2", "", 2*gib, 0, 1),
			req: diskless(7 * gib), pri: "n1",
			moves: []string{"res1 n1->n2", "res2 n1->n2"},
		},
		{
			name: "the fewest moves",
			// n1 frees 5 GiB with two moves, n2 with one (res4 goes to
			// n4, which is too small of disk for the new instance).
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				node("n4", "g", 8*gib, 10*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 2*gib, 0, 1, forthcoming).
				inst("res2", TemplateDiskless, "n1", "", 2*gib, 0, 1, forthcoming).
				inst("res3", TemplateDiskless, "n1", "", 2*gib, 0, 1, forthcoming).
				inst("res4", TemplateDiskless, "n2", "", 5*gib, 0, 1, forthcoming),
			req: plain(5*gib, 50*gib, 1), pri: "n2",
			moves: []string{"res4 n2->n4"},
		},
		{
			name: "among equal numbers of moves, the best score",
			// Either reservation frees its node; res2's node is bigger, so
			// the instance goes there and res2 to the roomier n3.
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 16*gib, 100*gib, 8).
				node("n3", "g", 32*gib, 10*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 6*gib, 0, 1, forthcoming).
				inst("res2", TemplateDiskless, "n2", "", 14*gib, 0, 1, forthcoming),
			req: plain(6*gib, 50*gib, 1), pri: "n2",
			moves: []string{"res2 n2->n3"},
		},
		{
			name: "a reservation is not moved where a node of its group runs another driver",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8, runs("kvm")).node("n2", "g", 8*gib, 100*gib, 8, runs("fake")).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming),
			req:     Request{Template: TemplateDiskless, MemoryMiB: 6 * gib, VCPUs: 1, Exclude: []string{"n2"}},
			errCode: fsm.CodeNoRes,
		},
		{
			name: "real instances are never moved",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				node("n3", "g", 8*gib, 10*gib, 8).
				inst("a", TemplateDiskless, "n1", "", 5*gib, 0, 1).
				inst("b", TemplateDiskless, "n2", "", 5*gib, 0, 1, down),
			req:     plain(6*gib, 50*gib, 1),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"too little free memory (6144 MiB needed): n1 has 3072, n2 has 3072"},
			errNot:  []string{"reservation"},
		},
		{
			name: "real instances stay, the reservation moves",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				node("n3", "g", 8*gib, 10*gib, 8).
				inst("a", TemplateDiskless, "n1", "", 5*gib, 0, 1).
				inst("res1", TemplateDiskless, "n2", "", 5*gib, 0, 1, forthcoming),
			req: plain(6*gib, 50*gib, 1), pri: "n2",
			moves: []string{"res1 n2->n3"},
		},
		{
			name: "a locked reservation stays",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplatePlain, "n1", "", 5*gib, 10*gib, 1, forthcoming).
				inst("a", TemplatePlain, "n2", "", 3*gib, 10*gib, 1).lockedBy(7, "res1"),
			req:     plain(6*gib, 10*gib, 1),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"no node has 6144 MiB free memory", "1 reservation(s) that might make room are locked by running jobs and stay"},
		},
		{
			name: "the unlocked one moves instead",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				node("n3", "g", 8*gib, 10*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming).
				inst("res2", TemplateDiskless, "n2", "", 5*gib, 0, 1, forthcoming).lockedBy(7, "res1"),
			req: plain(6*gib, 50*gib, 1), pri: "n2",
			moves: []string{"res2 n2->n3"},
		},
		{
			name: "the whole instance level locked",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming).
				inst("a", TemplateDiskless, "n2", "", 5*gib, 0, 1).lockedBy(9),
			req:     diskless(6 * gib),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"locked by running jobs"},
		},
		{
			name: "a drbd reservation moves under N+1",
			// n3 backs big's 6 GiB for n4, so it cannot be res1's
			// primary (4 GiB would leave less than 6 free); n2 can, with
			// n3 as its secondary.
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				node("n3", "g", 8*gib, 100*gib, 8).node("n4", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDRBD, "n1", "n2", 4*gib, 1*gib, 1, forthcoming).
				inst("big", TemplateDRBD, "n4", "n3", 6*gib, 1*gib, 1).
				inst("a", TemplatePlain, "n2", "", 3*gib, 1*gib, 1),
			req: plain(6*gib, 1*gib, 1), pri: "n1",
			moves: []string{"res1 n1:n2->n2:n3"}, kinds: []string{MoveFailoverReplace},
		},
		{
			name: "a drbd instance: room on its secondary",
			// n2 cannot back n1's memory; n3 can, once res1 is gone from
			// it with the disk it takes.
			c: newCluster().node("n1", "g", 16*gib, 100*gib, 8).node("n2", "g", 16*gib, 100*gib, 8).
				node("n3", "g", 16*gib, 100*gib, 8).
				inst("res1", TemplatePlain, "n3", "", 1*gib, 80*gib, 1, forthcoming).
				inst("a", TemplatePlain, "n2", "", 15*gib, 10*gib, 1),
			req: drbd(4*gib, 50*gib, 1), pri: "n1", sec: "n3",
			moves: []string{"res1 n3->n2"},
		},
		{
			name: "one drbd reservation in the way of both nodes",
			// Only n1 and n2 have the vcpus for the primary; res1 takes
			// the memory of one and the disk of the other.
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				node("n3", "g", 8*gib, 100*gib, 8).node("n4", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDRBD, "n1", "n2", 6*gib, 90*gib, 1, forthcoming).
				inst("a", TemplatePlain, "n3", "", 1*gib, 1*gib, 1).inst("b", TemplatePlain, "n4", "", 1*gib, 1*gib, 1),
			req: drbd(6*gib, 50*gib, 8), pri: "n1", sec: "n2",
			moves: []string{"res1 n1:n2->n3:n4"}, kinds: []string{MoveRelocate},
		},
		{
			name: "moving every reservation would not help",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming),
			req:     diskless(9 * gib),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"no node has 9216 MiB free memory: n2 has 8192, n1 has 3072; moving reservations would not help"},
		},
		{
			name: "the reservation fits nowhere else",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming).
				inst("a", TemplateDiskless, "n2", "", 4*gib, 0, 1),
			req:     diskless(6 * gib),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"no way was found to make room by moving up to 4 reservations"},
		},
		{
			name: "reservations stay in their group",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocPreferred).
				node("n1", "g1", 8*gib, 100*gib, 8).node("m1", "g2", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming).
				inst("a", TemplateDiskless, "m1", "", 5*gib, 0, 1),
			req:     diskless(6 * gib),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"no way was found"},
		},
		{
			name: "nodes that take nothing take no reservation",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8, drained).
				node("n3", "g", 8*gib, 100*gib, 8, notVM).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming),
			req:     diskless(6 * gib),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"no way was found"},
		},
		{
			name: "given nodes: nothing moves",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 5*gib, 0, 1, forthcoming),
			req:     Request{Template: TemplateDiskless, MemoryMiB: 6 * gib, Nodes: []string{"n1"}},
			errCode: fsm.CodeNoRes,
			errNot:  []string{"reservation"},
		},
		{
			name: "preferred group before last_resort",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocLastResort).
				node("n1", "g1", 8*gib, 100*gib, 8).node("n2", "g1", 8*gib, 100*gib, 8).
				node("m1", "g2", 8*gib, 100*gib, 8).node("m2", "g2", 8*gib, 100*gib, 8).
				inst("res1", TemplateDiskless, "n1", "", 3*gib, 0, 1, forthcoming).
				inst("res2", TemplateDiskless, "n1", "", 3*gib, 0, 1, forthcoming).
				inst("a", TemplateDiskless, "n2", "", 2*gib, 0, 1).
				inst("res3", TemplateDiskless, "m1", "", 5*gib, 0, 1, forthcoming).
				inst("b", TemplateDiskless, "m2", "", 2*gib, 0, 1),
			req: diskless(7 * gib), pri: "n1",
			moves: []string{"res1 n1->n2", "res2 n1->n2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshotOf(tc.c.st)
			plan, err := MakeRoom(tc.c.st, tc.req, Options{})
			if snapshotOf(tc.c.st) != before {
				t.Fatal("MakeRoom changed the state")
			}
			if tc.errCode != "" {
				if err == nil {
					t.Fatalf("placed on %v with moves %v, want an error", plan.NodeNames(), plan.Moves)
				}
				fe := wantCode(t, err, tc.errCode)
				for _, s := range tc.errHas {
					if !strings.Contains(fe.Msg, s) {
						t.Errorf("error %q lacks %q", fe.Msg, s)
					}
				}
				for _, s := range tc.errNot {
					if strings.Contains(fe.Msg, s) {
						t.Errorf("error %q has %q", fe.Msg, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.PrimaryName != tc.pri || plan.SecondaryName != tc.sec {
				t.Errorf("placed on %v, want %s %s", plan.NodeNames(), tc.pri, tc.sec)
			}
			var got []string
			for i, m := range plan.Moves {
				got = append(got, moveText(m))
				if !m.Forthcoming {
					t.Errorf("move %v is not marked forthcoming", m)
				}
				if i < len(tc.kinds) && m.Kind != tc.kinds[i] {
					t.Errorf("move %s is %s, want %s", moveText(m), m.Kind, tc.kinds[i])
				}
			}
			if strings.Join(got, ", ") != strings.Join(tc.moves, ", ") {
				t.Errorf("moves %q, want %q", got, tc.moves)
			}
			again, _ := MakeRoom(tc.c.st, tc.req, Options{})
			if !reflect.DeepEqual(again, plan) {
				t.Errorf("not deterministic: %+v then %+v", plan, again)
			}
			applyRoom(tc.c.st, "new", tc.req, plan)
			checkRoom(t, tc.c.st, Options{}, plan)
		})
	}
}

// applyRoom records a plan: the moves, then the new instance.
func applyRoom(st *fsm.State, name string, req Request, p RoomPlan) {
	for _, m := range p.Moves {
		i := st.Instances[m.InstanceUUID]
		i.PrimaryNode, i.SecondaryNodes = m.NewPrimary, []string{}
		if m.NewSecondary != "" {
			i.SecondaryNodes = []string{m.NewSecondary}
		}
	}
	commit(st, name, req, p.Result)
}

// checkRoom: after a plan is recorded, the new instance's nodes and the
// moved reservations' new nodes are not overcommitted and pass N+1;
// reservations stay in their group, on usable nodes that are not the new
// instance's.
func checkRoom(t *testing.T, st *fsm.State, o Options, p RoomPlan) {
	t.Helper()
	checkNoOvercommit(t, st, o, p.Result)
	for _, m := range p.Moves {
		i := st.Instances[m.InstanceUUID]
		if !i.Forthcoming {
			t.Fatalf("moved %s, which is not forthcoming", m.Instance)
		}
		nodes := []string{m.NewPrimary}
		if m.NewSecondary != "" {
			nodes = append(nodes, m.NewSecondary)
		}
		for _, u := range nodes {
			n := st.Nodes[u]
			if !refUsable(n, o) || n.Group != st.Nodes[m.OldPrimary].Group || u == p.Primary || u == p.Secondary {
				t.Fatalf("%s moved to %s (group %s), which it may not use", m.Instance, n.Name, n.Group)
			}
		}
		checkNoOvercommit(t, st, o, Result{Primary: m.NewPrimary, Secondary: m.NewSecondary})
	}
}

// TestMakeRoomProperties: on random states (with some reservations locked
// by running jobs), MakeRoom agrees with Allocate when the instance fits
// as things are; a plan with moves, once recorded, overcommits none of
// the nodes it uses and moves only unlocked reservations within their
// group; and "would not help" is said only when the reference finds no
// placement even with every movable reservation gone.
func TestMakeRoomProperties(t *testing.T) {
	r := newRand(7)
	moved, plain, refused := 0, 0, 0
	for trial := 0; trial < 600; trial++ {
		st := randomState(r, trial)
		fillWithReservations(r, st)
		var locked []string
		for _, i := range st.SortedInstances() {
			if i.Forthcoming && r.IntN(6) == 0 {
				locked = append(locked, i.Name)
			}
		}
		if len(locked) > 0 {
			st.Jobs = map[int64]*fsm.Job{3: {ID: 3, Status: fsm.StatusRunning, Ops: []*fsm.OpState{{Status: fsm.StatusRunning,
				Locks: []fsm.LockDecl{{Level: fsm.LockInstance, Names: locked, Exclusive: true}}}}}}
		}
		o := randomOpts(r, st)
		for k := 0; k < 6; k++ {
			req := randomRequest(r, st)
			req.Nodes = nil
			// Bigger requests than randomRequest's, so that many need room.
			req.MemoryMiB *= int64(1 + r.IntN(4))
			before := snapshotOf(st)
			plan, err := MakeRoom(st, req, o)
			if snapshotOf(st) != before {
				t.Fatalf("trial %d: MakeRoom changed the state", trial)
			}
			res, aerr := Allocate(st, req, o)
			if aerr == nil {
				if err != nil || len(plan.Moves) > 0 || plan.Result != res {
					t.Fatalf("trial %d: %+v fits on %v, but MakeRoom gives %+v, %v", trial, req, res.NodeNames(), plan, err)
				}
				plain++
				continue
			}
			var fe *fsm.Error
			if err != nil && (!errors.As(err, &fe) || fe.Code != fsm.CodeNoRes) {
				continue // malformed requests: the tables test those
			}
			if err != nil {
				if strings.Contains(fe.Msg, "would not help") {
					if cands := refPlacements(withoutMovable(st, locked), req, o); len(cands) > 0 {
						t.Fatalf("trial %d: %+v: %v, but without the reservations it fits on %s/%s", trial, req, err, cands[0].p, cands[0].s)
					}
				}
				refused++
				continue
			}
			if len(plan.Moves) == 0 || len(plan.Moves) > MaxRoomMoves {
				t.Fatalf("trial %d: Allocate failed (%v) but MakeRoom placed with %d moves", trial, aerr, len(plan.Moves))
			}
			for _, m := range plan.Moves {
				for _, l := range locked {
					if m.Instance == l {
						t.Fatalf("trial %d: moved %s, which is locked", trial, l)
					}
				}
			}
			cp := copyState(st)
			applyRoom(cp, fmt.Sprintf("new%d", k), req, plan)
			checkRoom(t, cp, o, plan)
			moved++
		}
	}
	t.Logf("%d plans with moves, %d placements without, %d refusals", moved, plain, refused)
	if moved < 50 || refused < 50 {
		t.Fatalf("too few cases of each kind: %d with moves, %d refused", moved, refused)
	}
}

// withoutMovable is st without the reservations MakeRoom may move.
func withoutMovable(st *fsm.State, locked []string) *fsm.State {
	cp := copyState(st)
	for u, i := range cp.Instances {
		if !i.Forthcoming || i.PrimaryNode == "" || slices.Contains(locked, i.Name) || cp.Nodes[i.PrimaryNode] == nil {
			continue
		}
		g := cp.Nodes[i.PrimaryNode].Group
		same := true
		for _, s := range i.SecondaryNodes {
			same = same && cp.Nodes[s] != nil && cp.Nodes[s].Group == g
		}
		if same {
			delete(cp.Instances, u)
		}
	}
	return cp
}

// fillWithReservations adds forthcoming instances to a random state until
// its nodes are mostly full of them (the random states hold few).
func fillWithReservations(r *rand.Rand, st *fsm.State) {
	c := &cluster{st: st}
	rt := refTable(st, "")
	nodes := st.SortedNodes()
	for k, n := range nodes {
		free := n.Resources.MemoryMiB - rt[n.UUID].memUsed
		for j := 0; free > 512 && j < 1+r.IntN(4); j++ {
			mem := 512 * (1 + r.Int64N(free/512))
			free -= mem
			name := fmt.Sprintf("res%02d-%d", k, j)
			switch x := r.IntN(4); {
			case x == 0:
				c.inst(name, TemplateDiskless, n.Name, "", mem, 0, 1, forthcoming)
			case x == 1 && len(nodes) > 1:
				peer := nodes[(k+1+r.IntN(len(nodes)-1))%len(nodes)]
				if peer.Group == n.Group {
					c.inst(name, TemplateDRBD, n.Name, peer.Name, mem, int64(1+r.IntN(10))*gib, 1, forthcoming)
					break
				}
				fallthrough
			default:
				c.inst(name, TemplatePlain, n.Name, "", mem, int64(1+r.IntN(10))*gib, 1, forthcoming)
			}
		}
	}
}

// TestMakeRoomBound: every candidate's lower bound is at most the score
// its plan ends with, so pick, which stops at a bound that cannot beat
// the best plan so far, finds the plan that trying every candidate finds.
func TestMakeRoomBound(t *testing.T) {
	r := newRand(11)
	checked := 0
	for trial := 0; trial < 1000; trial++ {
		st := randomState(r, trial)
		fillWithReservations(r, st)
		o := randomOpts(r, st)
		for n := 0; n < 6; n++ {
			req := randomRequest(r, st)
			req.Nodes, req.Exclude = nil, nil
			req.MemoryMiB *= int64(1 + r.IntN(4))
			nd, ferr := req.check()
			if ferr != nil {
				continue
			}
			tb := buildTable(st, o, "", "", "")
			sc, ferr := tb.scopeOf(&req)
			if ferr != nil {
				continue
			}
			if _, ok := tb.search(nd, sc); ok {
				continue
			}
			rm := newRoom(st, tb, nd, sc, "")
			for k := 1; k <= MaxRoomMoves; k++ {
				var cands []roomCand
				for _, g := range sc.groups {
					if tb.groups[g].rank == tb.groups[sc.groups[0]].rank {
						cands = rm.candidates(cands, g, k)
					}
				}
				var best RoomPlan
				found := false
				for i := range cands {
					p, ok := rm.evaluate(&cands[i])
					if !ok {
						continue
					}
					if cands[i].lb > p.Score+1e-9 {
						t.Fatalf("trial %d: candidate %+v: bound %v above its score %v", trial, cands[i], cands[i].lb, p.Score)
					}
					if !found || p.Score < best.Score {
						best, found = p, true
					}
					checked++
				}
				got, ok := rm.pick(cands)
				if ok != found || found && len(cands) <= roomEvaluations && math.Abs(got.Score-best.Score) > 1e-9 {
					t.Fatalf("trial %d: pick found %+v (%v), trying all %+v (%v)", trial, got, ok, best, found)
				}
				if found {
					break
				}
			}
			fresh := buildTable(st, o, "", "", "")
			for k := range fresh.rows {
				a, b := &fresh.rows[k], &tb.rows[k]
				if a.memUsed != b.memUsed || a.diskUsed != b.diskUsed || a.cpuUsed != b.cpuUsed || a.rMem != b.rMem {
					t.Fatalf("trial %d: the search left row %s changed: %+v, fresh %+v", trial, a.name, *b, *a)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d candidates checked", checked)
	}
}
