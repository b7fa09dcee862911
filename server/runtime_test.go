package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestPollRuntime: a round asks each node with an agent address and
// records its driver and instances, or that it did not answer; a node
// without an agent address is not asked.
func TestPollRuntime(t *testing.T) {
	f := fsm.New()
	a := &fsmApplier{f: f}
	if r, _, _ := a.Apply(context.Background(), fsm.ClusterInit{Now: t0.UnixNano(), Name: "c", UUID: "cu", GroupUUID: "gu",
		Node: fsm.NodeSpec{Name: "node1", UUID: "u1", PrimaryIP: "192.0.2.1", Addrs: fsm.Addrs{Agent: "127.0.0.1:1811"}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	at := time.Unix(1_800_000_000, 0)
	asked := 0
	ok := func(ctx context.Context, n *fsm.Node) (rpc.NodeResult, error) {
		asked++
		if n.Name != "node1" {
			t.Errorf("asked %s", n.Name)
		}
		return rpc.NodeResult{Driver: "kvm", Accel: "tcg", AccelNote: "forced", Taps: "no: lacks CAP_NET_ADMIN",
			Instances: []rpc.NodeInstanceStatus{{UUID: "i1", Name: "inst1", State: rpc.NodeStateRunning}}}, nil
	}
	view := pollRuntime(context.Background(), f, ok, func() time.Time { return at })
	nr, found := view["u1"]
	if asked != 1 || !found || nr.Err != "" || nr.Driver != "kvm" || nr.Accel != "tcg" || nr.AccelNote != "forced" || nr.Taps != "no: lacks CAP_NET_ADMIN" || !nr.At.Equal(at) || nr.Instances["i1"].State != rpc.NodeStateRunning {
		t.Fatalf("asked %d, view %+v", asked, view)
	}
	failing := func(ctx context.Context, n *fsm.Node) (rpc.NodeResult, error) {
		return rpc.NodeResult{}, errors.New("connection refused")
	}
	view = pollRuntime(context.Background(), f, failing, func() time.Time { return at })
	if nr := view["u1"]; nr.Err != "connection refused" || nr.Instances != nil {
		t.Fatalf("view %+v", view)
	}
}

// TestRuntimeSeen: the placement a poll records is every instance's
// primary and admin state, and an empty state records an empty (not nil)
// map, so that an instance created after the poll is not yet known.
func TestRuntimeSeen(t *testing.T) {
	if seen := runtimeSeen(fsm.New()); seen == nil || len(seen) != 0 {
		t.Fatalf("seen of an empty state: %#v", seen)
	}
	st := &fsm.State{Instances: map[string]*fsm.Instance{"i1": {UUID: "i1", PrimaryNode: "u1", AdminState: fsm.AdminUp}}}
	if seen := placements(st); len(seen) != 1 || seen["i1"] != "u1/"+fsm.AdminUp {
		t.Fatalf("seen: %#v", seen)
	}
}

// TestRuntimeFingerprint: a node registering a new agent address
// changes the fingerprint; nothing changing keeps it.
func TestRuntimeFingerprint(t *testing.T) {
	f := fsm.New()
	a := &fsmApplier{f: f}
	if r, _, _ := a.Apply(context.Background(), fsm.ClusterInit{Now: t0.UnixNano(), Name: "c", UUID: "cu", GroupUUID: "gu",
		Node: fsm.NodeSpec{Name: "node1", UUID: "u1", PrimaryIP: "192.0.2.1"}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	fp := runtimeFingerprint(f)
	if runtimeFingerprint(f) != fp {
		t.Fatal("fingerprint of an unchanged state changed")
	}
	if r, _, _ := a.Apply(context.Background(), fsm.NodeRegister{Now: t0.UnixNano(), Node: fsm.NodeSpec{Name: "node1", UUID: "u1",
		PrimaryIP: "192.0.2.1", Addrs: fsm.Addrs{Agent: "127.0.0.1:1811"}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if runtimeFingerprint(f) == fp {
		t.Error("a node's new agent address left the fingerprint alone")
	}
}
