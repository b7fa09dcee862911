package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestQueuedDRBDOpsFailOnANodeWithoutDRBD: a job that puts drbd disks on
// a node whose agent said, after the job was submitted, that it takes no
// drbd disks (a new secondary given by name, a re-creation on given
// nodes) fails when it runs, before any agent is called and with the
// message a submission gets (fsm.State.CheckDRBDOp); the instance keeps
// its nodes.
func TestQueuedDRBDOpsFailOnANodeWithoutDRBD(t *testing.T) {
	var epoch uint64
	d, nodes, _ := downClusterWith(t, func(ex *Executor) { epoch = ex.Epoch }, "n4")
	why := "node n4 has no DRBD (no /proc/drbd: the drbd kernel module is not loaded)"
	if r, _, _ := d.Apply(context.Background(), fsm.NodeStorageReport{Now: 6, Epoch: epoch, Node: "n4", NoDRBD: why, Units: []fsm.StorageUnit{}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	before := instanceState(d, "web1")
	for _, c := range []struct{ op, want string }{
		{`{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","remote_node":"n4"}`,
			"a new drbd secondary needs DRBD on its node: " + why},
		{`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","nodes":["n2","n4"]}`,
			"re-creating drbd disks needs DRBD on both nodes: " + why},
	} {
		res, _ := failed(t, d, c.op)
		if !strings.Contains(res, c.want) {
			t.Errorf("%s: %s, want it to say %q", c.op, res, c.want)
		}
		if in := instanceState(d, "web1"); in.PrimaryNode != before.PrimaryNode || in.SecondaryNodes[0] != before.SecondaryNodes[0] {
			t.Errorf("%s moved the instance: %+v", c.op, in)
		}
		nodes.mu.Lock()
		if len(nodes.calls) > 0 {
			t.Errorf("%s called the agents: %v", c.op, nodes.calls)
		}
		nodes.mu.Unlock()
	}
}
