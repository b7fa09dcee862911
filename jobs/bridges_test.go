package jobs

import (
	"slices"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// callsSince returns the agent calls made after the first n.
func (f *fakeNodes) callsSince(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls[n:]...)
}

func (f *fakeNodes) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// bridgesSetup runs an executor whose nodes n1 and n2 both have br0
// (more nodes have every bridge until nodes.bridges says otherwise).
func bridgesSetup(t *testing.T, more ...string) (*direct, *fakeNodes) {
	t.Helper()
	d, epoch := instanceSetup(t, more...)
	nodes := newFakeNodes()
	nodes.bridges = map[string][]string{"n1": {"br0"}, "n2": {"br0"}}
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	return d, nodes
}

// TestBridgesCheckedFirst: a bridged NIC whose bridge the node lacks is
// refused, naming the NIC, the bridge and the node, before anything is
// done: a create records nothing and creates no disk (the primary's
// agent is asked first), a modify adding such a NIC changes nothing, and
// a migration or failover to a node without the instance's bridge leaves
// it running where it is (a node evacuation's move too). With the
// bridges there, each goes on.
func TestBridgesCheckedFirst(t *testing.T) {
	d, nodes := bridgesSetup(t)
	create := func(name, nics string) string {
		return `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"` + name + `","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n1","snode":"n2","nics":` + nics + `}`
	}
	for _, c := range []struct{ nics, want string }{
		{`[{"mode":"bridged","link":"br0"},{"mode":"bridged","link":"nosuch"}]`, `NIC 1 of instance web1: bridge "nosuch" (its link) does not exist on node n1`},
		// No link: the cluster's nicparams link, gnt-br0.
		{`[{}]`, `NIC 0 of instance web1: bridge "gnt-br0" (its link) does not exist on node n1`},
	} {
		before := nodes.callCount()
		res, log := failed(t, d, create("web1", c.nics))
		if !strings.Contains(res+log, c.want) {
			t.Errorf("create with NICs %s: %s\n%s\nwant %q", c.nics, res, log, c.want)
		}
		if in := instanceState(d, "web1"); in != nil {
			t.Errorf("create with NICs %s recorded web1: %+v", c.nics, in)
		}
		if calls := nodes.callsSince(before); !slices.Equal(calls, []string{"bridges-exist@n1"}) {
			t.Errorf("create with NICs %s: agent calls %v, want the bridge check only", c.nics, calls)
		}
	}
	// A routed NIC has no bridge to check.
	before := nodes.callCount()
	runOK(t, d, create("web2", `[{"mode":"routed","ip":"198.51.100.9"}]`))
	if calls := nodes.callsSince(before); slices.Contains(calls, "bridges-exist@n1") {
		t.Errorf("routed NIC: bridges checked: %v", calls)
	}

	before = nodes.callCount()
	runOK(t, d, create("web1", `[{"mode":"bridged","link":"br0"}]`))
	if calls := nodes.callsSince(before); len(calls) < 2 || calls[0] != "bridges-exist@n1" || calls[1] != "disk-create@n1" {
		t.Errorf("create on br0: agent calls %v, want the bridge check, then the disks", calls)
	}

	res, log := failed(t, d, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"web1","nics":[["add",-1,{"mode":"bridged","link":"br9"}]]}`)
	if want := `NIC 1 of instance web1: bridge "br9" (its link) does not exist on node n1`; !strings.Contains(res+log, want) {
		t.Errorf("modify adding a NIC on br9: %s\n%s\nwant %q", res, log, want)
	}
	if in := instanceState(d, "web1"); len(in.NICs) != 1 {
		t.Errorf("NICs after the refused modify: %+v", in.NICs)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"web1","nics":[["add",-1,{"mode":"bridged","link":"br0"}]]}`)
	if in := instanceState(d, "web1"); len(in.NICs) != 2 {
		t.Errorf("NICs after adding one on br0: %+v", in.NICs)
	}

	// n2 loses br0: neither migration nor failover goes there.
	nodes.mu.Lock()
	nodes.bridges["n2"] = nil
	nodes.mu.Unlock()
	primary := instanceState(d, "web1").PrimaryNode
	for _, op := range []string{
		`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`,
		`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`,
		`{"OP_ID":"OP_NODE_EVACUATE","node_name":"n1","mode":"primary-only"}`,
	} {
		before := nodes.callCount()
		res, log := failed(t, d, op)
		if want := `NIC 0 of instance web1: bridge "br0" (its link) does not exist on node n2`; !strings.Contains(res+log, want) {
			t.Errorf("%s: %s\n%s\nwant %q", op, res, log, want)
		}
		if calls := nodes.callsSince(before); !slices.Equal(calls, []string{"bridges-exist@n2"}) {
			t.Errorf("%s: agent calls %v, want the bridge check only", op, calls)
		}
		if in := instanceState(d, "web1"); in.PrimaryNode != primary || in.AdminState != fsm.AdminUp {
			t.Errorf("%s moved web1: %+v", op, in)
		}
	}
	web1 := instanceState(d, "web1").UUID
	if r := nodes.running(); !slices.Contains(r, "n1/"+web1) || slices.Contains(r, "n2/"+web1) {
		t.Errorf("running after the refused moves: %v", r)
	}
	nodes.mu.Lock()
	nodes.bridges["n2"] = []string{"br0"}
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	if r := nodes.running(); slices.Contains(r, "n1/"+web1) || !slices.Contains(r, "n2/"+web1) {
		t.Errorf("running after the migration: %v", r)
	}
}

// TestBridgesDryRun: a dry run asks the node whether the bridges exist
// (the call only reads) and fails when one is missing, as a real run
// would, without recording or creating anything; with the bridges there
// it succeeds, having asked, and changes nothing.
func TestBridgesDryRun(t *testing.T) {
	d, nodes := bridgesSetup(t)
	create := func(link, dry string) string {
		return `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n1","snode":"n2","nics":[{"mode":"bridged","link":"` + link + `"}]` + dry + `}`
	}
	before, cfg := nodes.callCount(), configOf(d)
	res, log := failed(t, d, create("nosuch", `,"dry_run":true`))
	if want := `NIC 0 of instance web1: bridge "nosuch" (its link) does not exist on node n1`; !strings.Contains(res+log, want) {
		t.Errorf("dry run on a missing bridge: %s\n%s\nwant %q", res, log, want)
	}
	if calls := nodes.callsSince(before); !slices.Equal(calls, []string{"bridges-exist@n1"}) {
		t.Errorf("dry run: agent calls %v, want the bridge check only", calls)
	}
	before = nodes.callCount()
	runOK(t, d, create("br0", `,"dry_run":true`))
	if calls := nodes.callsSince(before); !slices.Equal(calls, []string{"bridges-exist@n1"}) {
		t.Errorf("dry run on br0: agent calls %v, want the bridge check only", calls)
	}
	if configOf(d) != cfg {
		t.Fatal("the dry runs changed the configuration")
	}

	runOK(t, d, create("br0", ""))
	nodes.mu.Lock()
	nodes.bridges["n2"] = nil
	nodes.mu.Unlock()
	for _, op := range []string{
		`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1","dry_run":true}`,
		`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","dry_run":true}`,
	} {
		before = nodes.callCount()
		res, log := failed(t, d, op)
		if want := `NIC 0 of instance web1: bridge "br0" (its link) does not exist on node n2`; !strings.Contains(res+log, want) {
			t.Errorf("%s: %s\n%s\nwant %q", op, res, log, want)
		}
		if calls := nodes.callsSince(before); !slices.Equal(calls, []string{"bridges-exist@n2"}) {
			t.Errorf("%s: agent calls %v, want the bridge check only", op, calls)
		}
	}
}

// TestBridgesRecreateDisks: recreate-disks onto other nodes asks the new
// primary whether the instance's bridges exist before it records the
// move or creates a disk; a missing bridge leaves the instance where it
// is.
func TestBridgesRecreateDisks(t *testing.T) {
	d, nodes := bridgesSetup(t, "n3")
	nodes.mu.Lock()
	nodes.bridges["n3"] = nil
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n1","start":false,"nics":[{"mode":"bridged","link":"br0"}]}`)
	before, cfg := nodes.callCount(), configOf(d)
	res, log := failed(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","nodes":["n3"]}`)
	if want := `NIC 0 of instance web1: bridge "br0" (its link) does not exist on node n3`; !strings.Contains(res+log, want) {
		t.Errorf("recreate onto n3: %s\n%s\nwant %q", res, log, want)
	}
	if calls := nodes.callsSince(before); !slices.Equal(calls, []string{"bridges-exist@n3"}) {
		t.Errorf("recreate onto n3: agent calls %v, want the bridge check only", calls)
	}
	if configOf(d) != cfg {
		t.Fatal("the refused recreate changed the configuration")
	}
	nodes.mu.Lock()
	nodes.bridges["n3"] = []string{"br0"}
	nodes.mu.Unlock()
	before = nodes.callCount()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","nodes":["n3"]}`)
	if calls := nodes.callsSince(before); len(calls) < 2 || calls[0] != "bridges-exist@n3" || calls[1] != "disk-create@n3" {
		t.Errorf("recreate onto n3 with br0: agent calls %v", calls)
	}
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n3") {
		t.Errorf("web1 after the recreate: primary %s", in.PrimaryNode)
	}
	// In place (no new nodes): no bridge to ask about.
	before = nodes.callCount()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1"}`)
	if calls := nodes.callsSince(before); slices.Contains(calls, "bridges-exist@n3") {
		t.Errorf("recreate in place asked about bridges: %v", calls)
	}
}
