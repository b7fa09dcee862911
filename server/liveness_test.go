package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/transport"
)

// fakeMembers is a memberSource whose view the test sets.
type fakeMembers struct {
	mu      sync.Mutex
	members []transport.Member
	started time.Time
	changed chan struct{}
}

func newFakeMembers(started time.Time) *fakeMembers {
	return &fakeMembers{started: started, changed: make(chan struct{}, 1)}
}

func (f *fakeMembers) Members() []transport.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]transport.Member(nil), f.members...)
}

func (f *fakeMembers) Changed() <-chan struct{} { return f.changed }
func (f *fakeMembers) Started() time.Time       { return f.started }

func (f *fakeMembers) set(ms ...transport.Member) {
	f.mu.Lock()
	f.members = ms
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// fsmApplier applies commands straight to an FSM, as the log would.
type fsmApplier struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
	cmds  []fsm.NodeLiveness
}

func (a *fsmApplier) Apply(_ context.Context, c fsm.Command) (fsm.Response, uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	data, err := fsm.Encode(c)
	if err != nil {
		return fsm.Response{}, 0, err
	}
	if nl, ok := c.(fsm.NodeLiveness); ok {
		a.cmds = append(a.cmds, nl)
	}
	a.index++
	return a.f.Apply(a.index, data).(fsm.Response), a.index, nil
}

func (a *fsmApplier) writes() []fsm.NodeLiveness {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]fsm.NodeLiveness(nil), a.cmds...)
}

var t0 = time.Unix(1_700_000_000, 0)

// livenessCluster is a state with node1 (master), node2, node3 and an
// established leader (epoch 1).
func livenessCluster(t *testing.T) (*fsm.FSM, *fsmApplier) {
	t.Helper()
	f := fsm.New()
	a := &fsmApplier{f: f}
	must := func(c fsm.Command) fsm.Response {
		r, _, err := a.Apply(context.Background(), c)
		if err != nil || r.Err != nil {
			t.Fatalf("%T: %v %v", c, err, r.Err)
		}
		return r
	}
	must(fsm.ClusterInit{Now: t0.UnixNano(), Name: "c", UUID: "cu", GroupUUID: "gu",
		Node: fsm.NodeSpec{Name: "node1", UUID: "u1", PrimaryIP: "192.0.2.1"}})
	ops := []json.RawMessage{
		json.RawMessage(`{"OP_ID":"OP_NODE_ADD","node_name":"node2","primary_ip":"192.0.2.2"}`),
		json.RawMessage(`{"OP_ID":"OP_NODE_ADD","node_name":"node3","primary_ip":"192.0.2.3"}`),
	}
	must(fsm.JobSubmit{Now: t0.UnixNano(), Ops: ops, UUIDs: []string{"u2", "u3"}})
	must(fsm.LeaderEstablish{Now: t0.UnixNano(), Node: "node1"})
	return f, a
}

func member(name string, st transport.MemberState, since time.Time) transport.Member {
	return transport.Member{Name: name, Addr: name + ":1818", State: st, Since: since}
}

func liveness(f *fsm.FSM) map[string]string {
	out := map[string]string{}
	f.Read(func(s *fsm.State, _ uint64) {
		for _, n := range s.SortedNodes() {
			out[n.Name] = fmt.Sprintf("%s@%d", n.Liveness, (n.LivenessSince-t0.UnixNano())/1e9)
		}
	})
	return out
}

func TestPlanLiveness(t *testing.T) {
	f, _ := livenessCluster(t)
	now := t0.Add(100 * time.Second)
	ms := []transport.Member{
		member("node1", transport.StateAlive, t0.Add(time.Second)),
		member("node2", transport.StateSuspect, t0.Add(2*time.Second)),
		member("stranger", transport.StateAlive, t0),
		member("gone", transport.StateDead, t0),
	}
	f.Read(func(st *fsm.State, _ uint64) {
		// node3 is not in gossip's view: left alone until settled.
		got := fmt.Sprint(planLiveness(st, ms, false, now))
		want := fmt.Sprint([]fsm.LivenessChange{
			{Node: "node1", State: "alive", Since: t0.Add(time.Second).UnixNano()},
			{Node: "node2", State: "suspect", Since: t0.Add(2 * time.Second).UnixNano()},
		})
		if got != want {
			t.Errorf("unsettled plan\n got %s\nwant %s", got, want)
		}
		got = fmt.Sprint(planLiveness(st, ms, true, now))
		want = fmt.Sprint([]fsm.LivenessChange{
			{Node: "node1", State: "alive", Since: t0.Add(time.Second).UnixNano()},
			{Node: "node2", State: "suspect", Since: t0.Add(2 * time.Second).UnixNano()},
			{Node: "node3", State: "dead", Since: now.UnixNano()},
		})
		if got != want {
			t.Errorf("settled plan\n got %s\nwant %s", got, want)
		}
		unknown := unknownMembers(st, ms)
		if len(unknown) != 1 || unknown[0].Name != "stranger" {
			t.Errorf("unknown members %+v (dead ones are not reported)", unknown)
		}
	})
	// Left counts as dead; a recorded state is not written again.
	for _, c := range []struct {
		state transport.MemberState
		want  string
	}{{transport.StateLeft, "dead"}, {transport.StateDead, "dead"}, {transport.StateAlive, "alive"}} {
		f.Read(func(st *fsm.State, _ uint64) {
			got := planLiveness(st, []transport.Member{member("node3", c.state, t0)}, false, now)
			if len(got) != 1 || got[0].State != c.want {
				t.Errorf("%s: %+v", c.state, got)
			}
		})
	}
}

// TestLivenessReconciler: nothing is written during the grace period;
// then gossip's view is recorded in one command per round, changes are
// picked up from events, and unknown members are never added.
func TestLivenessReconciler(t *testing.T) {
	f, a := livenessCluster(t)
	fm := newFakeMembers(time.Now())
	fm.set(member("node1", transport.StateAlive, t0.Add(time.Second)),
		member("node2", transport.StateAlive, t0.Add(2*time.Second)),
		member("node3", transport.StateDead, t0.Add(3*time.Second)),
		member("stranger", transport.StateAlive, t0))
	r := &livenessReconciler{FSM: f, Apply: a, Members: fm, Epoch: 1, Grace: 300 * time.Millisecond, Interval: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	time.Sleep(150 * time.Millisecond)
	if w := a.writes(); len(w) != 0 {
		t.Fatalf("wrote during the grace period: %+v", w)
	}
	waitFor(t, func() bool { return len(a.writes()) == 1 })
	if got := fmt.Sprint(liveness(f)); got != "map[node1:alive@1 node2:alive@2 node3:dead@3]" {
		t.Fatalf("after the first round: %s", got)
	}
	if w := a.writes()[0]; w.Epoch != 1 || len(w.Changes) != 3 {
		t.Fatalf("first write %+v", w)
	}
	// An event: node2 suspect, node3 back.
	fm.set(member("node1", transport.StateAlive, t0.Add(time.Second)),
		member("node2", transport.StateSuspect, t0.Add(10*time.Second)),
		member("node3", transport.StateAlive, t0.Add(11*time.Second)))
	waitFor(t, func() bool { return len(a.writes()) == 2 })
	if got := fmt.Sprint(liveness(f)); got != "map[node1:alive@1 node2:suspect@10 node3:alive@11]" {
		t.Fatalf("after the event: %s", got)
	}
	if w := a.writes()[1]; len(w.Changes) != 2 {
		t.Fatalf("second write carries unchanged nodes: %+v", w)
	}
	f.Read(func(st *fsm.State, _ uint64) {
		if st.LookupNode("stranger") != nil {
			t.Fatal("a gossip member that is no node was added")
		}
	})
}

// TestLivenessReconcilerFenced: a newer leader's epoch stops the
// reconciler with jobs.ErrFenced.
func TestLivenessReconcilerFenced(t *testing.T) {
	f, a := livenessCluster(t)
	if r, _, _ := a.Apply(context.Background(), fsm.LeaderEstablish{Now: t0.UnixNano(), Node: "node2"}); r.Epoch != 2 {
		t.Fatalf("epoch %d", r.Epoch)
	}
	fm := newFakeMembers(time.Now())
	fm.set(member("node1", transport.StateDead, t0))
	r := &livenessReconciler{FSM: f, Apply: a, Members: fm, Epoch: 1, Grace: 0, Interval: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, jobs.ErrFenced) {
		t.Fatalf("Run = %v, want ErrFenced", err)
	}
	if got := liveness(f)["node1"]; got != "@-1700000000" {
		t.Fatalf("fenced write changed the state: %s", got)
	}
}

// TestLivenessUnsettledGossip: a node gossip has not heard of is not
// declared dead while the gossip member is younger than the grace period.
func TestLivenessUnsettledGossip(t *testing.T) {
	f, a := livenessCluster(t)
	fm := newFakeMembers(time.Now().Add(time.Hour)) // just started, as far as the reconciler can tell
	fm.set(member("node1", transport.StateAlive, t0))
	r := &livenessReconciler{FSM: f, Apply: a, Members: fm, Epoch: 1, Grace: time.Minute, Interval: time.Hour}
	if err := r.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(liveness(f)); got != "map[node1:alive@0 node2:@-1700000000 node3:@-1700000000]" {
		t.Fatalf("unsettled round: %s", got)
	}
}

func TestLivenessGrace(t *testing.T) {
	tm := transport.LANGossipTiming()
	if g := livenessGrace(tm, 6); g != 2*(300*time.Millisecond+3600*time.Millisecond) {
		t.Errorf("grace at 6 nodes %s", g)
	}
	if g6, g100 := livenessGrace(tm, 6), livenessGrace(tm, 100); g100 <= g6 {
		t.Errorf("grace does not grow with the cluster: %s, %s", g6, g100)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
