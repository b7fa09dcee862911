package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// setDriver re-registers a node as running another driver (gntd
// --hypervisor hv), as its gntd would.
func setDriver(t *testing.T, d *direct, name, hv string) {
	t.Helper()
	n := nodeState(d, name)
	r, _, _ := d.Apply(context.Background(), fsm.NodeRegister{Now: 5, Node: fsm.NodeSpec{Name: n.Name, PrimaryIP: n.PrimaryIP,
		Addrs: n.Addrs, Resources: n.Resources, Version: n.Version, Hypervisor: hv}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
}

// TestMovesKeepTheHypervisor: a drbd instance (of no hypervisor of its
// own: its primary's driver) neither fails over nor
// migrates to a secondary whose gntd runs another driver, and nothing
// changes; a failover that lets the allocator choose, or given a node,
// and a new secondary given by name take only nodes of its driver.
func TestMovesKeepTheHypervisor(t *testing.T) {
	d, _, _ := downCluster(t, "n4")
	// The test cluster has no default hypervisor: web1 runs under its
	// primary's driver.
	hv, other := "kvm", "fake"
	for _, n := range []string{"n1", "n2", "n4"} {
		setDriver(t, d, n, hv)
	}
	setDriver(t, d, "n3", other)
	for _, op := range []string{
		`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`,
		`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","iallocator":"hail"}`,
		`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`,
	} {
		res, _ := failed(t, d, op)
		if want := "but node n3 runs the " + other + " driver"; !strings.Contains(res, want) {
			t.Errorf("%s: %s, want it to say %q", op, res, want)
		}
		if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n2") || in.SecondaryNodes[0] != nodeUUID(d, "n3") {
			t.Fatalf("%s moved the instance: %+v", op, in)
		}
	}

	// A sharedfile instance fails over, by the allocator, only to a node
	// of its driver (n1 is the master, n3 runs the other).
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"vm1","disk_template":"sharedfile","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n2"}`)
	setDriver(t, d, "n1", other)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"vm1","iallocator":"hail"}`)
	if in := instanceState(d, "vm1"); in.PrimaryNode != nodeUUID(d, "n4") {
		t.Errorf("vm1 failed over to %s, want n4 (the only other node of %s)", in.PrimaryNode, hv)
	}
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"vm1","target_node":"n3"}`); !strings.Contains(res, "node n3 runs the "+other+" driver") {
		t.Errorf("failover to a node of another driver: %s", res)
	}
	// Nor is a new secondary given by name taken from another driver.
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","remote_node":"n1"}`); !strings.Contains(res, "node n1 runs the "+other+" driver") {
		t.Errorf("a new secondary of another driver: %s", res)
	}
}
