package rpc_test

import (
	"encoding/json"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// TestNodeLiveness: node objects carry gnt_liveness ("unknown" and a null
// time until a leader recorded one) and gnt_liveness_since.
func TestNodeLiveness(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	var obj map[string]any
	if err := json.Unmarshal(e.do("GET", "/2/nodes/node1", "").body, &obj); err != nil {
		t.Fatal(err)
	}
	if v, ok := obj["gnt_liveness"]; !ok || v != rpc.NodeLivenessUnknown {
		t.Errorf("gnt_liveness before any record: %v", v)
	}
	if v, ok := obj["gnt_liveness_since"]; !ok || v != nil {
		t.Errorf("gnt_liveness_since before any record: %v (present %v)", v, ok)
	}

	if r, _, err := b.ApplyCommand(fsm.LeaderEstablish{Now: b.Now().UnixNano(), Node: "node1"}); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	since := int64(1_700_000_123_500_000_000)
	r, _, err := b.ApplyCommand(fsm.NodeLiveness{Now: b.Now().UnixNano(), Epoch: b.Epoch(),
		Changes: []fsm.LivenessChange{{Node: "node1", State: fsm.LivenessDead, Since: since}}})
	if err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	n, err := e.c.Node(ctx(t), "node1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Liveness != "dead" || n.LivenessSince == nil || *n.LivenessSince != 1_700_000_123.5 {
		t.Errorf("node1 liveness %q since %v", n.Liveness, n.LivenessSince)
	}
	bulk, err := e.c.Nodes(ctx(t), true)
	if err != nil || len(bulk) != 1 || bulk[0].Liveness != "dead" {
		t.Errorf("bulk %+v %v", bulk, err)
	}
}
