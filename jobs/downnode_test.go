package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// The instance opcodes harep submits for instances of a node that is down
// (offline, drained, or dead in gossip and then fenced), run against
// nodes whose gntd does not answer.

// deadSet is the liveness the executor sees: the nodes named are dead.
type deadSet struct {
	mu    sync.Mutex
	nodes map[string]bool
}

func (d *deadSet) set(name string, dead bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nodes == nil {
		d.nodes = map[string]bool{}
	}
	d.nodes[name] = dead
}

func (d *deadSet) dead(n *fsm.Node) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodes[n.Name]
}

// runningOn returns the nodes the fake agents run the instance on,
// leaving out nodes that are down (their state is what it was when they
// went down).
func (f *fakeNodes) runningOn(in *fsm.Instance) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k, v := range f.run {
		node, uuid, _ := strings.Cut(k, "/")
		if v && uuid == in.UUID && !f.down[node] {
			out = append(out, node)
		}
	}
	return out
}

// setDown makes a node's gntd stop (or start again) answering.
func (f *fakeNodes) setDown(node string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[node] = down
}

// setFail makes an operation on a node fail (nil: succeed again).
func (f *fakeNodes) setFail(opAtNode string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, opAtNode)
		return
	}
	f.fail[opAtNode] = err
}

// callsTo returns the agent calls made to a node.
func (f *fakeNodes) callsTo(node string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasSuffix(c, "@"+node) {
			out = append(out, c)
		}
	}
	return out
}

// downCluster is instanceSetup with n1 (the master), n2, n3 and more,
// an executor with fake agents and liveness, and a running drbd instance
// web1 on n2 (primary) and n3 (secondary).
func downCluster(t *testing.T, more ...string) (*direct, *fakeNodes, *deadSet) {
	t.Helper()
	return downClusterWith(t, nil, more...)
}

// downClusterWith is downCluster with an executor that tweak changes.
func downClusterWith(t *testing.T, tweak func(*Executor), more ...string) (*direct, *fakeNodes, *deadSet) {
	t.Helper()
	d, epoch := instanceSetup(t, append([]string{"n3"}, more...)...)
	nodes := newFakeNodes()
	dead := &deadSet{}
	ex := &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes, Dead: dead.dead}
	if tweak != nil {
		tweak(ex)
	}
	runExecutorWith(t, ex)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n2","snode":"n3"}`)
	nodes.mu.Lock()
	nodes.calls, nodes.seen = nil, nil
	nodes.mu.Unlock()
	return d, nodes, dead
}

// setNode applies an OP_NODE_SET_PARAMS (offline, drained...) to a node.
func setNode(t *testing.T, d *direct, name, flags string) {
	t.Helper()
	runOK(t, d, `{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"`+name+`","auto_promote":true,`+flags+`}`)
}

// failed runs one opcode that must fail and returns its result and log.
func failed(t *testing.T, d *direct, op string) (string, string) {
	t.Helper()
	j := finished(t, d, submitUUID(t, d, op))
	if j.Status != fsm.StatusError {
		t.Fatalf("%s: %s, want error\n%s", op, j.Status, jobLog(j))
	}
	return opResult(j, 0), jobLog(j)
}

func nodeUUID(d *direct, name string) string { return nodeState(d, name).UUID }

// TestFailoverOfflinePrimary: harep's failover of an instance whose
// primary is offline and does not answer goes on without stopping it
// there (Ganeti: "Node is marked offline"), swaps the roles and starts
// the instance on the old secondary; the offline node is never called.
func TestFailoverOfflinePrimary(t *testing.T) {
	d, nodes, _ := downCluster(t)
	nodes.setDown("n2", true)
	setNode(t, d, "n2", `"offline":true`)
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","shutdown_timeout":120,"ignore_consistency":false}`)
	in := instanceState(d, "web1")
	if in.PrimaryNode != nodeUUID(d, "n3") || in.SecondaryNodes[0] != nodeUUID(d, "n2") || in.AdminState != fsm.AdminUp {
		t.Fatalf("after failover: %+v", in)
	}
	if r := nodes.runningOn(in); len(r) != 1 || r[0] != "n3" {
		t.Errorf("running on %v", r)
	}
	if c := nodes.callsTo("n2"); len(c) != 0 {
		t.Errorf("calls to the offline node: %v", c)
	}
	if log := jobLog(j); !strings.Contains(log, "WARNING: Could not shutdown instance web1 on node n2, proceeding anyway; please make sure node n2 is down; error details: Node is marked offline") {
		t.Errorf("log:\n%s", log)
	}
}

// TestFailoverDeadPrimary: a primary that is dead in gossip but not
// offline may still run the instance: the failover stops unless
// ignore_consistency, and the dead node is not called either way.
func TestFailoverDeadPrimary(t *testing.T) {
	d, nodes, dead := downCluster(t)
	nodes.setDown("n2", true)
	dead.set("n2", true)
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","shutdown_timeout":120}`)
	if !strings.Contains(res, "node n2 is dead but not marked offline, so the instance may still run there") {
		t.Errorf("result %s", res)
	}
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n2") {
		t.Fatalf("failover without ignore_consistency moved the instance: %+v", in)
	}
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","ignore_consistency":true}`)
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n3") {
		t.Fatalf("failover with ignore_consistency: %+v", in)
	}
	if !strings.Contains(jobLog(j), "proceeding anyway; please make sure node n2 is down; error details: node n2 is dead (not called)") {
		t.Errorf("log:\n%s", jobLog(j))
	}
	if c := nodes.callsTo("n2"); len(c) != 0 {
		t.Errorf("calls to the dead node: %v", c)
	}
}

// TestFailoverShutdownFails: a reachable primary that fails to stop the
// instance stops the failover, unless ignore_consistency (Ganeti's
// warning); a drained secondary is not a failover target.
func TestFailoverShutdownFails(t *testing.T) {
	d, nodes, _ := downCluster(t)
	nodes.setFail("instance-stop@n2", &NodeCallError{Code: "failed", Msg: "hypervisor hung"})
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`)
	if !strings.Contains(res, "could not shut down instance web1 on node n2") || !strings.Contains(res, "hypervisor hung") {
		t.Errorf("result %s", res)
	}
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","ignore_consistency":true}`)
	if !strings.Contains(jobLog(j), "WARNING: Could not shutdown instance web1 on node n2, proceeding anyway") {
		t.Errorf("log:\n%s", jobLog(j))
	}
	// web1 now has n3 as primary, n2 as secondary.
	nodes.setFail("instance-stop@n2", nil)
	setNode(t, d, "n2", `"drained":true`)
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`); !strings.Contains(res, "Can't use drained node n2") {
		t.Errorf("failover to a drained node: %s", res)
	}
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`); !strings.Contains(res, "Can't use drained node n2") {
		t.Errorf("migration to a drained node: %s", res)
	}
}

// TestMigrateFallsBackToFailover: OP_INSTANCE_MIGRATE refuses an offline
// primary, and with allow_failover fails over instead, as Ganeti; the
// choice is recorded as the opcode's first step.
func TestMigrateFallsBackToFailover(t *testing.T) {
	d, nodes, _ := downCluster(t, "n4")
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"db1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"pnode":"n4","snode":"n3","start":false}`)
	nodes.setDown("n2", true)
	setNode(t, d, "n2", `"offline":true`)
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`); !strings.Contains(res, "node n2 is offline; use failover") {
		t.Errorf("migration from an offline primary: %s", res)
	}
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1","allow_failover":true}`)
	in := instanceState(d, "web1")
	if in.PrimaryNode != nodeUUID(d, "n3") {
		t.Fatalf("after migrate with allow_failover: %+v", in)
	}
	if r := nodes.runningOn(in); len(r) != 1 || r[0] != "n3" {
		t.Errorf("running on %v", r)
	}
	var names []string
	for _, s := range j.Ops[0].Steps {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "migrate or fail over,stop on the primary,switch to the secondary" {
		t.Errorf("steps %v (the last, start, is recorded by the finish)", names)
	}
	if log := jobLog(j); !strings.Contains(log, "Can't migrate (migrating web1: node n2 is offline), fallback to failover") {
		t.Errorf("log:\n%s", log)
	}
	// A stopped instance is failed over, not started.
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"db1","allow_failover":true}`)
	if in := instanceState(d, "db1"); in.PrimaryNode != nodeUUID(d, "n3") || in.AdminState != fsm.AdminDown {
		t.Fatalf("db1 after migrate with allow_failover: %+v", in)
	}
	if log := jobLog(j); !strings.Contains(log, "Instance is marked down or offline, fallback to failover") || !strings.Contains(log, "db1 is down by configuration: not starting it") {
		t.Errorf("log:\n%s", log)
	}
	// A running instance whose primary answers is migrated.
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"db1"}`)
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"db1","allow_failover":true}`)
	if in := instanceState(d, "db1"); in.PrimaryNode != nodeUUID(d, "n4") {
		t.Fatalf("db1 after migrate: %+v", in)
	}
	names = nil
	for _, s := range j.Ops[0].Steps {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "migrate or fail over,prepare the target,move the running instance" {
		t.Errorf("steps %v", names)
	}
}

// TestReplaceSecondaryOfOfflineNode: harep's replace_new_secondary with
// the allocator, for an instance whose secondary is offline and does not
// answer: the allocator picks a node that is neither of the instance's
// nor down (drained, dead), the choice is the opcode's first recorded
// step, the disks are created there, and the old secondary is never
// called (its copy is left behind, as the log says).
func TestReplaceSecondaryOfOfflineNode(t *testing.T) {
	d, nodes, dead := downCluster(t, "n4", "n5")
	nodes.setDown("n3", true)
	setNode(t, d, "n3", `"offline":true`)
	setNode(t, d, "n4", `"drained":true`)
	dead.set("n5", true)
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","iallocator":"hail"}`)
	in := instanceState(d, "web1")
	if in.PrimaryNode != nodeUUID(d, "n2") || in.SecondaryNodes[0] != nodeUUID(d, "n1") {
		t.Fatalf("after replace: primary %s secondary %v", in.PrimaryNode, in.SecondaryNodes)
	}
	nodes.mu.Lock()
	if len(nodes.disks["n1/"+in.UUID]) != 1 {
		t.Errorf("disks on the new secondary: %v", nodes.disks)
	}
	nodes.mu.Unlock()
	if c := nodes.callsTo("n3"); len(c) != 0 {
		t.Errorf("calls to the offline old secondary: %v", c)
	}
	// The choice, then the new secondary recorded; the last step (its
	// disks created) is recorded by the finish.
	if steps := j.Ops[0].Steps; len(steps) != 2 || steps[0].Name != "choose the new secondary" || steps[1].Name != "record the new secondary n1" ||
		!strings.Contains(string(steps[0].Result), `"new_secondary_name":"n1"`) || !strings.Contains(string(steps[0].Result), `"old_secondary_name":"n3"`) {
		t.Errorf("recorded steps %+v", steps)
	}
	log := jobLog(j)
	for _, want := range []string{
		"Selected new secondary for instance 'web1': n1",
		"Old secondary n3 is offline: it is not contacted",
		"WARNING: the old secondary n3 is offline and was not contacted: its devices of web1's disks are not taken down",
		"WARNING: the old node n3 is offline: its copy of web1's disks is left there; remove it by hand when the node is back",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// Nothing left to choose from: the allocator says why.
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","iallocator":"hail"}`)
	if !strings.Contains(res, "cannot choose a new secondary with the allocator (hail)") {
		t.Errorf("result %s", res)
	}
}

// TestReplaceSecondaryRefusals: Ganeti's checks of replace_new_secondary.
func TestReplaceSecondaryRefusals(t *testing.T) {
	d, nodes, _ := downCluster(t, "n4")
	setNode(t, d, "n4", `"drained":true`)
	for op, want := range map[string]string{
		`"remote_node":"n2"`:              "The specified node is the primary node of the instance",
		`"remote_node":"n3"`:              "The specified node is already the secondary node of the instance",
		`"remote_node":"n4"`:              "node n4 is drained: it cannot become the new secondary",
		`"remote_node":"n9"`:              "node n9 does not exist",
		`"remote_node":"n1","disks":[0]`:  "Cannot specify disks to be replaced",
		`"iallocator":"hail","disks":[0]`: "Cannot specify disks to be replaced",
	} {
		res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary",`+op+`}`)
		if !strings.Contains(res, want) {
			t.Errorf("%s: %s, want %q", op, res, want)
		}
	}
	// The new secondary is synchronised from the primary: it must answer.
	nodes.setDown("n2", true)
	setNode(t, d, "n2", `"offline":true`)
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","iallocator":"hail"}`); !strings.Contains(res, "node n2 is offline") {
		t.Errorf("primary offline: %s", res)
	}
}

// TestReplaceSecondaryResumeKeepsChoice: a leader that resumes
// replace_new_secondary after the choice was recorded creates the disks
// on the recorded node, not on the one the allocator would pick now.
func TestReplaceSecondaryResumeKeepsChoice(t *testing.T) {
	d, epoch := instanceSetup(t, "n3", "n4")
	nodes := newFakeNodes()
	first := startExecutor(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"pnode":"n2","snode":"n3"}`)
	first.stop()
	id := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","iallocator":"hail"}`)
	// The old leader chose n4 and recorded it; the allocator would choose
	// n1 now (both are empty; ties go to the name).
	j := readJobCopy(d, id)
	op, _ := fsm.ParseOpcode(j.Ops[0].Input)
	var decl []fsm.LockDecl
	d.f.Read(func(s *fsm.State, _ uint64) { decl = op.Locks(s) })
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStart, Locks: decl})
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStep, Step: 0, StepName: "choose the new secondary",
		Result: mustJSON(secondaryChoice{Old: nodeUUID(d, "n3"), OldName: "n3", New: nodeUUID(d, "n4"), NewName: "n4"})})
	r, _, _ := d.Apply(t.Context(), fsm.LeaderEstablish{Now: 9, Node: "n1"})
	startExecutor(t, &Executor{FSM: d.f, Apply: d, Epoch: r.Epoch, Nodes: nodes})
	j = finished(t, d, id)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	in := instanceState(d, "web1")
	if in.SecondaryNodes[0] != nodeUUID(d, "n4") {
		t.Fatalf("secondary %v, want n4", in.SecondaryNodes)
	}
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	if len(nodes.disks["n4/"+in.UUID]) != 1 || len(nodes.disks["n1/"+in.UUID]) != 0 || len(nodes.disks["n3/"+in.UUID]) != 0 {
		t.Errorf("disks %v", nodes.disks)
	}
	if !strings.Contains(jobLog(j), "resumed by the executor of epoch") {
		t.Errorf("log:\n%s", jobLog(j))
	}
}

// harepReinstall is the job harep submits for a reinstall repair: a
// delay, the disks re-created where the allocator puts them, the OS
// reinstalled.
func harepReinstall(t *testing.T, d *direct, name string) *fsm.Job {
	t.Helper()
	return finished(t, d, submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0}`,
		`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"`+name+`","iallocator":"hail"}`,
		`{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"`+name+`"}`))
}

// TestReinstallRepairBothNodesOffline: a drbd instance marked up whose
// primary and secondary are both offline (and do not answer) gets new
// nodes from the allocator, empty disks there, its OS installed on the
// new primary, and runs again; the offline nodes are never called.
func TestReinstallRepairBothNodesOffline(t *testing.T) {
	d, nodes, _ := downCluster(t, "n4", "n5")
	for _, n := range []string{"n2", "n3"} {
		nodes.setDown(n, true)
		setNode(t, d, n, `"offline":true`)
	}
	j := harepReinstall(t, d, "web1")
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s: %s\n%s", j.Status, opResult(j, 1)+opResult(j, 2), jobLog(j))
	}
	in := instanceState(d, "web1")
	var names []string
	d.f.Read(func(s *fsm.State, _ uint64) {
		for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
			names = append(names, s.NodeName(u))
		}
	})
	if len(names) != 2 || names[0] == names[1] || strings.ContainsAny(names[0]+names[1], "23") || in.AdminState != fsm.AdminUp {
		t.Fatalf("web1 on %v, admin_state %s", names, in.AdminState)
	}
	nodes.mu.Lock()
	for _, n := range names {
		if len(nodes.disks[n+"/"+in.UUID]) != 1 {
			t.Errorf("disks on %s: %v", n, nodes.disks)
		}
	}
	if got := nodes.os[names[0]+"/"+in.UUID]; got != opIDOf(j.ID, 2) {
		t.Errorf("OS install on %s: %q", names[0], got)
	}
	nodes.mu.Unlock()
	if r := nodes.runningOn(in); len(r) != 1 || r[0] != names[0] {
		t.Errorf("running on %v, want %s", r, names[0])
	}
	for _, n := range []string{"n2", "n3"} {
		if c := nodes.callsTo(n); len(c) != 0 {
			t.Errorf("calls to offline %s: %v", n, c)
		}
	}
	log := jobLog(j)
	for _, want := range []string{
		"WARNING: Primary node n2 offline, ignoring check that instance web1 is down",
		"Selected nodes for instance web1 via iallocator hail: " + strings.Join(names, ", "),
		"Changing the instance's nodes: what the older nodes have of its disks (n2, n3) is removed once the new disks are created",
		"WARNING: the old node n2 is offline: its copy of web1's disks is left there",
		"WARNING: the old node n3 is offline: its copy of web1's disks is left there",
		"web1 is marked up but runs nowhere: opcode 2 of this job re-created its disks on new nodes",
		"web1 is marked up: started on " + names[0],
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func opIDOf(job int64, op int) string { return opID(&StepContext{Job: &fsm.Job{ID: job}, OpIndex: op}) }

// TestReinstallRepairPlain: a plain instance marked up whose only node is
// offline is re-created and reinstalled elsewhere and runs again; one
// marked down is reinstalled and stays down.
func TestReinstallRepairPlain(t *testing.T) {
	d, nodes, _ := downCluster(t, "n4")
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"p1","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":256},"os_type":"debian","pnode":"n4"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"p2","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":256},"os_type":"debian","pnode":"n4","start":false}`)
	nodes.setDown("n4", true)
	setNode(t, d, "n4", `"offline":true`)
	before := len(nodes.callsTo("n4"))
	for _, c := range []struct {
		name    string
		running bool
	}{{"p1", true}, {"p2", false}} {
		j := harepReinstall(t, d, c.name)
		if j.Status != fsm.StatusSuccess {
			t.Fatalf("%s: %s %s\n%s", c.name, j.Status, opResult(j, 1)+opResult(j, 2), jobLog(j))
		}
		in := instanceState(d, c.name)
		if in.PrimaryNode == nodeUUID(d, "n4") || len(in.SecondaryNodes) != 0 {
			t.Errorf("%s on %s %v", c.name, in.PrimaryNode, in.SecondaryNodes)
		}
		if r := nodes.runningOn(in); (len(r) == 1) != c.running {
			t.Errorf("%s running on %v", c.name, r)
		}
	}
	if c := nodes.callsTo("n4"); len(c) != before {
		t.Errorf("calls to the offline node: %v", c[before:])
	}
}

// TestRecreateRefusals: the instance must not run, except when its
// nodes are replaced and its primary is offline; a reinstall of an
// instance marked up needs the recreate in its own job.
func TestRecreateRefusals(t *testing.T) {
	d, nodes, dead := downCluster(t, "n4", "n5")
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"two","disk_template":"drbd","disks":[{"size":1024},{"size":1024}],"beparams":{"memory":256},"pnode":"n4","snode":"n5","start":false}`)
	isUp := "is up; shut it down before "
	// Primary online (drained, or dead but not offline): it may run there.
	setNode(t, d, "n2", `"drained":true`)
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","iallocator":"hail"}`); !strings.Contains(res, isUp+"re-creating its disks") {
		t.Errorf("drained primary: %s", res)
	}
	setNode(t, d, "n2", `"drained":false`)
	nodes.setDown("n2", true)
	dead.set("n2", true)
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","iallocator":"hail"}`); !strings.Contains(res, isUp+"re-creating its disks") {
		t.Errorf("dead primary: %s", res)
	}
	setNode(t, d, "n2", `"offline":true`)
	for op, want := range map[string]string{
		`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1"}`:                                    isUp + "re-creating its disks",
		`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","iallocator":"hail","disks":[0,0]}`:  "Some disks have been specified more than once",
		`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"two","iallocator":"hail","disks":[1]}`:     "Can't recreate disks partially and change the nodes at the same time",
		`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","iallocator":"hail","nodes":["n4"]}`: "give either nodes or iallocator",
		`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","nodes":["n4"]}`:                     "Instance web1 currently has 2 nodes, but 1 replacement nodes were specified",
		`{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","nodes":["n4","n2"]}`:                "node n2 is offline",
		`{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"web1"}`:                                         isUp + "reinstalling it",
	} {
		if res, _ := failed(t, d, op); !strings.Contains(res, want) {
			t.Errorf("%s: %s, want %q", op, res, want)
		}
	}
	// The recreate in a job of its own, the reinstall in another: the
	// instance marked up is not reinstalled (it may have been started).
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","nodes":["n4","n5"]}`)
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"web1"}`); !strings.Contains(res, isUp+"reinstalling it") {
		t.Errorf("reinstall in another job: %s", res)
	}
}

// fenceCluster is downCluster with every node under the scripted OOB
// helper and an executor that does not sleep.
func fenceCluster(t *testing.T, more ...string) (*direct, *fakeNodes, *deadSet, *bmc) {
	t.Helper()
	b := newBMC(t)
	d, nodes, dead := downClusterWith(t, func(e *Executor) { e.Sleep = noSleep; e.OOB = b.runner() }, more...)
	runOK(t, d, `{"OP_ID":"OP_CLUSTER_SET_PARAMS","ndparams":{"oob_program":"`+b.program+`"}}`)
	return d, nodes, dead, b
}

// TestFenceDeadNode: the leader's fencing of a node that is dead in
// gossip (not offline, its gntd not answering) powers it off through
// the helper, which runs on the leader; power-status confirms it, and
// only then is the node recorded unpowered and marked offline (a master
// candidate gives its place to another node). No node agent is called.
func TestFenceDeadNode(t *testing.T) {
	d, nodes, dead, b := fenceCluster(t, "n4")
	nodes.setDown("n2", true)
	dead.set("n2", true)
	wasCandidate := nodeState(d, "n2").MasterCandidate
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n2"],"gnt_confirm":true}`))
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	n2 := nodeState(d, "n2")
	if n2.Powered || !n2.Offline || n2.MasterCandidate || b.power("n2") != "off" {
		t.Fatalf("n2 after fencing: powered %v offline %v candidate %v (was %v), bmc %s", n2.Powered, n2.Offline, n2.MasterCandidate, wasCandidate, b.power("n2"))
	}
	if got := strings.Join(b.calls(), " "); got != "power-off_n2 power-status_n2" {
		t.Errorf("helper calls %s", got)
	}
	if c := nodes.callsTo("n2"); len(c) != 0 {
		t.Errorf("node agent calls: %v", c)
	}
	log := jobLog(j)
	for _, want := range []string{"power-status confirms that node n2 is off", "Marked node n2 offline: it is confirmed off", "Powered off node n2 (powered: true -> false"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if opResult(j, 0) != `[[[0,"n2"],[0,null]]]` {
		t.Errorf("result %s", opResult(j, 0))
	}
}

// TestFenceNotConfirmed: a helper whose power-off succeeds while
// power-status still says powered, or cannot say, fails the fencing: the
// node stays online and powered in the record.
func TestFenceNotConfirmed(t *testing.T) {
	d, _, dead, b := fenceCluster(t, "n4")
	dead.set("n4", true)
	for _, c := range []struct{ script, file, want string }{
		{"exit 0", "n4.power-off.sh", "node n4 is not confirmed off after the power-off (5 power-status calls, 2s apart): power-status still says it is powered"},
		{`echo "BMC unreachable" >&2; exit 1`, "n4.power-status.sh", "power-status cannot tell whether it is off: OOB program execution failed (BMC unreachable)"},
	} {
		b.set(t, c.file, c.script)
		j := finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n4"],"gnt_confirm":true}`))
		if j.Status != fsm.StatusError || !strings.Contains(opResult(j, 0), c.want) {
			t.Errorf("%s: %s %s, want %q", c.file, j.Status, opResult(j, 0), c.want)
		}
		if n := nodeState(d, "n4"); !n.Powered || n.Offline {
			t.Errorf("%s: n4 powered %v offline %v", c.file, n.Powered, n.Offline)
		}
		b.set(t, c.file, "")
		b.set(t, "n4.power", "on\n")
	}
	// With ignore_status the node is confirmed off, not marked offline.
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n4"],"gnt_confirm":true,"ignore_status":true}`))
	if n := nodeState(d, "n4"); j.Status != fsm.StatusSuccess || n.Powered || n.Offline {
		t.Errorf("ignore_status: %s, n4 powered %v offline %v\n%s", j.Status, n.Powered, n.Offline, jobLog(j))
	}
	// gnt_confirm is power-off's only.
	r, _, _ := d.Apply(t.Context(), fsm.JobSubmit{Now: 5, UUIDs: []string{""},
		Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_OOB_COMMAND","command":"power-on","node_names":["n4"],"gnt_confirm":true}`)}})
	if r.Err == nil || !strings.Contains(r.Err.Msg, "gnt_confirm goes with power-off only") {
		t.Errorf("power-on with gnt_confirm: %v", r.Err)
	}
}

// TestFenceResumed: a fencing power-off resumed after a leader change
// whose effect power-status confirms is recorded with the node marked
// offline, without powering it off again.
func TestFenceResumed(t *testing.T) {
	b := newBMC(t)
	d, _ := oobCluster(t, b)
	id := submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n4"],"gnt_confirm":true}`)
	b.set(t, "n4.power", "off\n")
	resumeAt(t, d, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Sleep: noSleep}, id, 1)
	j := finished(t, d, id)
	if n := nodeState(d, "n4"); j.Status != fsm.StatusSuccess || n.Powered || !n.Offline {
		t.Fatalf("%s powered %v offline %v\n%s", j.Status, n.Powered, n.Offline, jobLog(j))
	}
	if got := strings.Join(b.calls(), " "); got != "power-status_n4" {
		t.Errorf("helper calls %s", got)
	}
}

// TestFailoverWaitsForFencing: harep's failover of the instances of a
// dead node depends on the fencing job (relative id in one submission, or
// absolute): when the fencing fails the failover ends in error without
// running; when it succeeds the node is offline and the failover goes on
// without stopping the instance there.
func TestFailoverWaitsForFencing(t *testing.T) {
	d, nodes, dead, b := fenceCluster(t)
	nodes.setDown("n2", true)
	dead.set("n2", true)
	b.set(t, "n2.power-off.sh", "exit 0") // the BMC accepts, the node stays on
	fence := `{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n2"],"gnt_confirm":true}`
	// As maintd submits them: the repair job's first opcode (harep's
	// delay) depends on the fencing job of the same round.
	ids := submitMany(t, d, []string{fence},
		[]string{`{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[-1,["success"]]]}`,
			`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","shutdown_timeout":120}`})
	if j := finished(t, d, ids[0]); j.Status != fsm.StatusError {
		t.Fatalf("fencing: %s", j.Status)
	}
	j := finished(t, d, ids[1])
	if want := fmt.Sprintf("Dependency job %d finished with status 'error', not one of 'success'", ids[0]); j.Status != fsm.StatusError || opResult(j, 0) != want {
		t.Errorf("repair: %s %s, want %q", j.Status, opResult(j, 0), want)
	}
	if op := j.Ops[1]; op.Status == fsm.StatusSuccess || op.StartTS != nil || len(op.Steps) != 0 || len(op.Locks) != 0 {
		t.Errorf("the failover ran: %s, steps %+v, locks %+v", op.Status, op.Steps, op.Locks)
	}
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n2") {
		t.Errorf("web1 moved: %+v", in)
	}
	if c := nodes.callsTo("n3"); len(c) != 0 {
		t.Errorf("agent calls: %v", c)
	}

	// The fencing works this time; the failover names it by its id and
	// may be submitted before it ends.
	b.set(t, "n2.power-off.sh", "")
	fid := submit(t, d, fence)
	fo := submit(t, d, fmt.Sprintf(`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","shutdown_timeout":120,"depends":[[%d,["success"]]]}`, fid))
	if j := finished(t, d, fid); j.Status != fsm.StatusSuccess {
		t.Fatalf("fencing: %s %s", j.Status, opResult(j, 0))
	}
	j = finished(t, d, fo)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("failover: %s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	in := instanceState(d, "web1")
	if in.PrimaryNode != nodeUUID(d, "n3") || nodes.runningOn(in)[0] != "n3" {
		t.Errorf("web1 after failover: %+v, running on %v", in, nodes.runningOn(in))
	}
	if c := nodes.callsTo("n2"); len(c) != 0 {
		t.Errorf("calls to the fenced node: %v", c)
	}
	if !strings.Contains(jobLog(j), "error details: Node is marked offline") {
		t.Errorf("log:\n%s", jobLog(j))
	}
}

// TestMigrateCleanup: migrate with cleanup asks both nodes where the
// instance runs and records that, instead of migrating it; it needs both
// nodes to answer.
func TestMigrateCleanup(t *testing.T) {
	d, nodes, _ := downCluster(t)
	in := instanceState(d, "web1")
	cleanup := `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1","cleanup":true}`
	j := runOK(t, d, cleanup)
	if got := instanceState(d, "web1"); got.PrimaryNode != in.PrimaryNode || !strings.Contains(jobLog(j), "instance confirmed to be running on its primary node (n2)") {
		t.Errorf("cleanup of a running instance: primary %s\n%s", got.PrimaryNode, jobLog(j))
	}
	if c := nodes.callsTo("n3"); len(c) != 1 || c[0] != "status@n3" {
		t.Errorf("calls to the target: %v", c)
	}
	// A migration that ended on the target before its record.
	nodes.mu.Lock()
	nodes.run["n2/"+in.UUID], nodes.run["n3/"+in.UUID] = false, true
	nodes.mu.Unlock()
	j = runOK(t, d, cleanup)
	if got := instanceState(d, "web1"); got.PrimaryNode != nodeUUID(d, "n3") || !strings.Contains(jobLog(j), "instance running on secondary node (n3), updating config") {
		t.Errorf("cleanup after the move: primary %s\n%s", got.PrimaryNode, jobLog(j))
	}
	nodes.mu.Lock()
	nodes.run["n2/"+in.UUID] = true
	nodes.mu.Unlock()
	if res, _ := failed(t, d, cleanup); !strings.Contains(res, "seems to be running on two nodes") {
		t.Errorf("running on both: %s", res)
	}
	nodes.mu.Lock()
	nodes.run["n2/"+in.UUID], nodes.run["n3/"+in.UUID] = false, false
	nodes.mu.Unlock()
	if res, _ := failed(t, d, cleanup); !strings.Contains(res, "does not seem to be running at all (stopped on n3, stopped on n2)") {
		t.Errorf("running nowhere: %s", res)
	}
	nodes.setDown("n2", true)
	setNode(t, d, "n2", `"offline":true`)
	if res, _ := failed(t, d, cleanup); !strings.Contains(res, "cannot contact node n2") {
		t.Errorf("offline node: %s", res)
	}
}

// TestReplaceSecondarySkipsUnanswering: the allocator's choice for a new
// secondary must answer the probe; one that does not (dead, but not yet
// recorded so) is skipped and the next choice taken.
func TestReplaceSecondarySkipsUnanswering(t *testing.T) {
	var probed []string
	var mu sync.Mutex
	d, _, _ := downClusterWith(t, func(ex *Executor) {
		ex.Probe = probeFunc(func(_ context.Context, n *fsm.Node) error {
			mu.Lock()
			defer mu.Unlock()
			probed = append(probed, n.Name)
			if len(probed) == 1 {
				return errors.New("connection refused")
			}
			return nil
		})
	}, "n4")
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","iallocator":"hail"}`)
	mu.Lock()
	defer mu.Unlock()
	if len(probed) != 2 || probed[0] == probed[1] {
		t.Fatalf("probed %v, want two different nodes", probed)
	}
	in := instanceState(d, "web1")
	if in.SecondaryNodes[0] != nodeUUID(d, probed[1]) {
		t.Fatalf("secondary %v, want %s (the first answering choice)", in.SecondaryNodes, probed[1])
	}
	if !strings.Contains(jobLog(j), "Node "+probed[0]+" does not answer") {
		t.Errorf("log:\n%s", jobLog(j))
	}
}

// TestNodeEvacuateRelocateRecreate: evacuating a node moves a diskless
// instance by re-creating it on another node, a drbd instance whose
// secondary is offline to two new nodes (hail's change-all: new
// secondary, move there, new secondary again), and a forthcoming
// instance in the configuration only.
func TestNodeEvacuateRelocateRecreate(t *testing.T) {
	d, nodes, _ := downCluster(t, "n4", "n5")
	// web1 (drbd n2/n3) is downCluster's; its secondary n3 goes offline.
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"ds1","disk_template":"diskless","beparams":{"memory":256},"pnode":"n2"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","disk_template":"drbd","disks":[{"size":512}],"beparams":{"memory":256},"pnode":"n2","snode":"n4","forthcoming":true}`)
	nodes.setDown("n3", true)
	setNode(t, d, "n3", `"offline":true`)
	j := runOK(t, d, `{"OP_ID":"OP_NODE_EVACUATE","node_name":"n2","mode":"all"}`)
	log := jobLog(j)
	web1, ds1, res1 := instanceState(d, "web1"), instanceState(d, "ds1"), instanceState(d, "res1")
	if web1.PrimaryNode == "n2" || web1.PrimaryNode == "n3" || len(web1.SecondaryNodes) != 1 || web1.SecondaryNodes[0] == "n2" ||
		web1.SecondaryNodes[0] == "n3" || web1.SecondaryNodes[0] == web1.PrimaryNode {
		t.Fatalf("web1 after relocation: primary %s secondaries %v\n%s", web1.PrimaryNode, web1.SecondaryNodes, log)
	}
	if ds1.PrimaryNode == "n2" || len(ds1.SecondaryNodes) != 0 {
		t.Fatalf("ds1 after re-creation: primary %s secondaries %v\n%s", ds1.PrimaryNode, ds1.SecondaryNodes, log)
	}
	if res1.PrimaryNode == "n2" || !res1.Forthcoming {
		t.Fatalf("res1 after the move: primary %s forthcoming %v\n%s", res1.PrimaryNode, res1.Forthcoming, log)
	}
	running := strings.Join(nodes.running(), " ")
	for _, want := range []string{web1.PrimaryNode + "/" + web1.UUID, ds1.PrimaryNode + "/" + ds1.UUID} {
		if !strings.Contains(running, want) {
			t.Errorf("running %s, want %s", running, want)
		}
	}
	if strings.Contains(running, "n2/") {
		t.Errorf("still running on the evacuated n2: %s", running)
	}
	if c := nodes.callsTo("n3"); len(c) != 0 {
		t.Errorf("calls to the offline n3: %v", c)
	}
	for _, want := range []string{"web1: relocate", "ds1: recreate", "re-created on", "moved reservation res1 from n2:n4 to n4:n1 (configuration only)"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestReinstallJobAsGaneti: Ganeti's reinstall job (shutdown, reinstall,
// startup) on a running instance stops it, installs the OS, keeps the
// given OS parameters on the instance ("default" removes one) and starts
// it; the same job as a dry run calls no agent to act and changes
// nothing.
func TestReinstallJobAsGaneti(t *testing.T) {
	d, nodes, _ := downCluster(t, "n4")
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"p1","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":256},"os_type":"debian","pnode":"n4","osparams":{"keep":"1","drop":"2"}}`)
	job := func(dry string) *fsm.Job {
		return finished(t, d, submit(t, d, `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"p1"`+dry+`}`,
			`{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"p1","os_type":"debian2","osparams":{"dhcp":"yes","drop":"default"}`+dry+`}`,
			`{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"p1"`+dry+`}`))
	}
	before := instanceState(d, "p1")
	calls := len(nodes.callsTo("n4"))
	if j := job(`,"dry_run":true`); j.Status != fsm.StatusSuccess {
		t.Fatalf("dry run: %s %s\n%s", j.Status, opResult(j, 1), jobLog(j))
	}
	if after := instanceState(d, "p1"); after.SerialNo != before.SerialNo || after.OS != "debian" || after.AdminState != fsm.AdminUp {
		t.Errorf("dry run changed p1: %+v", after)
	}
	if c := nodes.callsTo("n4"); len(c) != calls {
		t.Errorf("dry run called n4: %v", c[calls:])
	}
	j := job("")
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s %s\n%s", j.Status, opResult(j, 1), jobLog(j))
	}
	in := instanceState(d, "p1")
	if in.OS != "debian2" || in.AdminState != fsm.AdminUp || fmt.Sprint(in.OSParams) != "map[dhcp:yes keep:1]" {
		t.Errorf("p1 after the reinstall: os %s admin %s osparams %v", in.OS, in.AdminState, in.OSParams)
	}
	nodes.mu.Lock()
	if got := nodes.os["n4/"+in.UUID]; got != opIDOf(j.ID, 1) {
		t.Errorf("OS install on n4: %q", got)
	}
	nodes.mu.Unlock()
	if r := nodes.runningOn(in); len(r) != 1 {
		t.Errorf("p1 running on %v", r)
	}
}

// TestSharedFileFailoverIAllocator: harep's failover of a sharedfile
// instance whose primary is fenced (offline) names no target_node but an
// iallocator: the first step chooses a node in the primary's group (never
// the primary) and records it, the instance is started there and becomes
// its primary, and the offline node is never called. A drbd instance
// with an iallocator fails over to its secondary.
func TestSharedFileFailoverIAllocator(t *testing.T) {
	d, nodes, _ := downCluster(t, "n4")
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"vm1","disk_template":"sharedfile","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n2"}`)
	nodes.mu.Lock()
	nodes.calls = nil
	nodes.mu.Unlock()
	nodes.setDown("n2", true)
	setNode(t, d, "n2", `"offline":true`)
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"vm1","shutdown_timeout":120,"iallocator":"hail"}`)
	var c failoverChoice
	if len(j.Ops[0].Steps) == 0 || json.Unmarshal(j.Ops[0].Steps[0].Result, &c) != nil || c.Target == "" {
		t.Fatalf("no recorded choice: %+v\n%s", j.Ops[0].Steps, jobLog(j))
	}
	in := instanceState(d, "vm1")
	if in.PrimaryNode != c.Target || c.Target == nodeUUID(d, "n2") || len(in.SecondaryNodes) != 0 || in.AdminState != fsm.AdminUp {
		t.Fatalf("after failover: primary %s, chosen %s (%s)", in.PrimaryNode, c.Target, c.TargetName)
	}
	if r := nodes.runningOn(in); len(r) != 1 || r[0] != c.TargetName {
		t.Errorf("running on %v, want %s", r, c.TargetName)
	}
	if c := nodes.callsTo("n2"); len(c) != 0 {
		t.Errorf("calls to the offline node: %v", c)
	}
	log := jobLog(j)
	for _, want := range []string{"Selected node " + c.TargetName + " to fail vm1 over to via iallocator hail", "error details: Node is marked offline"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// Without a target or an iallocator the failover is refused, naming both.
	if res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"vm1"}`); !strings.Contains(res, "give the node to fail it over to (target_node) or an iallocator to choose it") {
		t.Errorf("no target: %s", res)
	}
	// drbd: the secondary, whatever the allocator would say.
	setNode(t, d, "n2", `"offline":false`)
	nodes.setDown("n2", false)
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","iallocator":"hail"}`)
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n3") || !strings.Contains(jobLog(j), "web1 fails over to its secondary n3") {
		t.Errorf("drbd failover with an iallocator: primary %s\n%s", in.PrimaryNode, jobLog(j))
	}
}
