package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

type probeFunc func(ctx context.Context, n *fsm.Node) error

func (f probeFunc) Alive(ctx context.Context, n *fsm.Node) error { return f(ctx, n) }

// bmcProbe says a node is back when its helper says it is powered.
func bmcProbe(b *bmc) NodeProbe {
	return probeFunc(func(_ context.Context, n *fsm.Node) error {
		if b.power(n.Name) != "on" {
			return errors.New("connection refused")
		}
		return nil
	})
}

func stepNames(j *fsm.Job, i int) string {
	var names []string
	for _, s := range j.Ops[i].Steps {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// TestEPOOffOn: an EPO of the whole cluster powers off the nodes, then
// the master candidates while a majority of them stays up; the reverse
// powers them on, candidates first, and waits for each.
func TestEPOOffOn(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	var mu sync.Mutex
	var slept []time.Duration
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Probe: bmcProbe(b),
		Sleep: func(ctx context.Context, dur time.Duration) error {
			mu.Lock()
			slept = append(slept, dur)
			mu.Unlock()
			return ctx.Err()
		}})
	j := finished(t, d, submit(t, d, withReason(`{"OP_ID":"OP_CLUSTER_EPO","all":true}`)))
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("epo off: %s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	for name, want := range map[string]bool{"n1": true, "n2": false, "n3": true, "n4": false, "n5": false} {
		if got := nodeState(d, name).Powered; got != want || (b.power(name) == "on") != want {
			t.Errorf("%s: powered %v (bmc %s), want %v", name, got, b.power(name), want)
		}
	}
	if got := stepNames(j, 0); got != "plan,power-off n4,power-off n5,power-off n2" {
		t.Errorf("steps %s (the last, done, is recorded by the finish)", got)
	}
	log := jobLog(j)
	for _, want := range []string{
		"nodes to power off, in order: n4, n5, n2",
		"Node n3 stays on: powering it off would leave fewer than a majority of the 3 master candidates running",
		"Node n1 (the master) stays on",
		`Powered off node n2 (powered: true -> false; reason trail: gnt:user "bad fan"`,
		"EPO off done",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// The opcode's result is the plan.
	if r := opResult(j, 0); !strings.Contains(r, `"power":["n4","n5","n2"]`) {
		t.Errorf("result %s", r)
	}

	j = finished(t, d, submit(t, d, `{"OP_ID":"OP_CLUSTER_EPO","on":true,"groups":true,"names":["default"]}`))
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("epo on: %s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	for _, name := range []string{"n1", "n2", "n3", "n4", "n5"} {
		if !nodeState(d, name).Powered || b.power(name) != "on" {
			t.Errorf("%s not back on", name)
		}
	}
	if got := stepNames(j, 0); got != "plan,power-on n2,power-on n4,power-on n5,wait for n2,wait for n4,wait for n5,wait for n3" {
		t.Errorf("steps %s", got)
	}
	if log := jobLog(j); !strings.Contains(log, "Node n4 became available") || !strings.Contains(log, "Node n3 is already in desired power state, skipping") {
		t.Errorf("log:\n%s", log)
	}
	mu.Lock()
	if fmt.Sprint(slept) != "[2s 2s]" {
		t.Errorf("power delays %v", slept)
	}
	mu.Unlock()
}

// TestEPOStopsAndStartsInstances: an EPO off shuts the instances on its
// nodes down before powering any node off, without recording them as
// down; the EPO on powers the nodes on and starts the instances again.
func TestEPOStopsAndStartsInstances(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	if r, _, _ := d.Apply(context.Background(), fsm.NodeRegister{Now: 4, Node: fsm.NodeSpec{Name: "n4", Addrs: fsm.Addrs{Agent: "192.0.2.4:1811"}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	// An instance on n4, recorded by a step as an instance create would,
	// and running there.
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2}`)
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStart})
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStep, Step: 0, StepName: "create",
		Changes: []fsm.StepChange{{InstancePut: &fsm.InstancePut{Instance: fsm.Instance{Name: "web1", UUID: "i1",
			PrimaryNode: "n4", DiskTemplate: fsm.DTDiskless, AdminState: fsm.AdminUp}}}}})
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionFinish, Status: fsm.StatusSuccess})
	agents := newFakeNodes()
	agents.run["n4/i1"] = true
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep, Probe: bmcProbe(b), Nodes: agents})
	// A dry run shows the plan and touches nothing.
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_CLUSTER_EPO","names":["n4","n5"],"dry_run":true}`))
	if j.Status != fsm.StatusSuccess || !strings.Contains(jobLog(j), "instances to shut down: web1") || len(b.calls()) != 0 {
		t.Errorf("dry run: %s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	j = finished(t, d, submit(t, d, `{"OP_ID":"OP_CLUSTER_EPO","names":["n4","n5"]}`))
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("EPO off: %s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	if names := stepNames(j, 0); !strings.HasPrefix(names, "plan,shut down web1,") {
		t.Errorf("steps %s: the instance must go down before any node", names)
	}
	if len(agents.running()) != 0 || nodeState(d, "n4").Powered {
		t.Errorf("after EPO off: running %v, n4 powered %v", agents.running(), nodeState(d, "n4").Powered)
	}
	var admin string
	d.f.Read(func(s *fsm.State, _ uint64) { admin = s.LookupInstance("web1").AdminState })
	if admin != fsm.AdminUp {
		t.Errorf("web1 recorded %s after EPO off; it must stay up (no_remember)", admin)
	}
	j = finished(t, d, submit(t, d, `{"OP_ID":"OP_CLUSTER_EPO","names":["n4"],"on":true}`))
	if j.Status != fsm.StatusSuccess || !nodeState(d, "n4").Powered || b.power("n4") != "on" {
		t.Fatalf("EPO on: %s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	if r := agents.running(); len(r) != 1 || r[0] != "n4/i1" {
		t.Errorf("after EPO on: running %v", r)
	}
}

func rawOps(ops ...string) (out []json.RawMessage) {
	for _, o := range ops {
		out = append(out, json.RawMessage(o))
	}
	return out
}

// TestEPOHandover: with --all, the master's node goes last, after its role
// moved to a candidate that stays up (here: candidates without a helper).
func TestEPOHandover(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	if r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 4, Ops: rawOps(
		`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n2","ndparams":{"oob_program":"!"}}`,
		`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n3","ndparams":{"oob_program":"!"}}`), UUIDs: []string{"", ""}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	var first *runningExecutor
	l := &fakeLeadership{t: t, d: d, old: func() *runningExecutor { return first }}
	l.newCfg = func(epoch uint64) *Executor {
		return &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep, Leadership: l}
	}
	first = startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep, Leadership: l})
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_CLUSTER_EPO","all":true}`))
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	if got := stepNames(j, 0); got != "plan,power-off n4,power-off n5,hand over the master role of n1,power-off n1" {
		t.Errorf("steps %s", got)
	}
	if nodeState(d, "n1").Powered || b.power("n1") != "off" || nodeState(d, "n1").Offline {
		t.Errorf("n1 powered %v offline %v bmc %s", nodeState(d, "n1").Powered, nodeState(d, "n1").Offline, b.power("n1"))
	}
	var master string
	d.f.Read(func(s *fsm.State, _ uint64) { master = s.NodeName(s.Cluster.MasterNode) })
	if master != "n2" {
		t.Errorf("master is %s", master)
	}
	if log := jobLog(j); !strings.Contains(log, "Node n2 does not support out-of-band handling") ||
		!strings.Contains(log, "the master role moves from n1 to one of n2, n3 before n1 is powered off, last") {
		t.Errorf("log:\n%s", log)
	}
}

// TestEPOWaitTimeout: a node that does not come back fails the EPO on
// after the wait timeout, naming it.
func TestEPOWaitTimeout(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	old := epoPollInterval
	epoPollInterval = 10 * time.Millisecond
	defer func() { epoPollInterval = old }()
	if r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 5, Ops: rawOps(`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n5","powered":false}`), UUIDs: []string{""}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Probe: probeFunc(func(context.Context, *fsm.Node) error {
		return errors.New("connection refused")
	})})
	start := time.Now()
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_CLUSTER_EPO","on":true,"names":["n5"],"wait_timeout":1}`))
	if j.Status != fsm.StatusError || !strings.Contains(opResult(j, 0), "time exceeded while waiting for node n5 to become reachable again (1s): connection refused") {
		t.Errorf("%s %s", j.Status, opResult(j, 0))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v", took)
	}
}

// flakyAgents fails the first calls to some nodes as an agent that is not
// up yet does (transport), then answers as the fake agents do.
type flakyAgents struct {
	*fakeNodes
	mu      sync.Mutex
	refuse  map[string]int // node: calls still refused
	refused int
}

func (f *flakyAgents) Call(ctx context.Context, node *fsm.Node, c NodeCall) (NodeReply, error) {
	f.mu.Lock()
	if f.refuse[node.Name] > 0 {
		f.refuse[node.Name]--
		f.refused++
		f.mu.Unlock()
		return NodeReply{}, &NodeCallError{Code: "transport", Msg: "connection refused"}
	}
	f.mu.Unlock()
	return f.fakeNodes.Call(ctx, node, c)
}

// TestEPOOnStartsEveryInstance: after EPO on powered the nodes on, an
// instance starts once its primary's agent answers, even while gossip
// still calls the node dead (its first starts are refused: retried); an
// instance that cannot start does not stop the others; the job then fails
// naming it with its reason.
func TestEPOOnStartsEveryInstance(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	old := epoPollInterval
	epoPollInterval = 10 * time.Millisecond
	defer func() { epoPollInterval = old }()
	for i, n := range []string{"n4", "n5"} {
		if r, _, _ := d.Apply(context.Background(), fsm.NodeRegister{Now: int64(4 + i), Node: fsm.NodeSpec{Name: n, Addrs: fsm.Addrs{Agent: fmt.Sprintf("192.0.2.%d:1811", 4+i)}}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2}`)
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStart})
	var puts []fsm.StepChange
	for _, x := range [][3]string{{"a-web", "i1", "n4"}, {"b-web", "i2", "n5"}, {"c-web", "i3", "n4"}} {
		puts = append(puts, fsm.StepChange{InstancePut: &fsm.InstancePut{Instance: fsm.Instance{Name: x[0], UUID: x[1],
			PrimaryNode: x[2], DiskTemplate: fsm.DTDiskless, AdminState: fsm.AdminUp}}})
	}
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStep, Step: 0, StepName: "create", Changes: puts})
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionFinish, Status: fsm.StatusSuccess})
	for _, n := range []string{"n4", "n5"} {
		b.set(t, n+".power", "off\n")
		if r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 9, Ops: rawOps(fmt.Sprintf(`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":%q,"powered":false}`, n)), UUIDs: []string{""}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	agents := &flakyAgents{fakeNodes: newFakeNodes(), refuse: map[string]int{"n4": 3}}
	agents.fail["instance-start@n5"] = &NodeCallError{Code: "failed", Msg: "hypervisor refused: out of memory"}
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep, Probe: bmcProbe(b), Nodes: agents,
		// Gossip still says n4 and n5 are dead.
		Dead: func(n *fsm.Node) bool { return n.Name == "n4" || n.Name == "n5" }})
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_CLUSTER_EPO","names":["n4","n5"],"on":true}`))
	if j.Status != fsm.StatusError {
		t.Fatalf("EPO on: %s, want error naming b-web\n%s", j.Status, jobLog(j))
	}
	if res := opResult(j, 0); !strings.Contains(res, "EPO on: 1 of 5 node(s) or instance(s) failed: instance b-web: instance-start on n5: hypervisor refused: out of memory") || strings.Contains(res, "a-web") || strings.Contains(res, "c-web") {
		t.Errorf("result %s: want b-web alone with its reason", res)
	}
	r := agents.running()
	sort.Strings(r)
	if strings.Join(r, ",") != "n4/i1,n4/i3" {
		t.Errorf("running %v: want a-web and c-web on n4, started although gossip calls n4 dead and b-web failed before c-web", r)
	}
	if agents.refused != 3 {
		t.Errorf("%d refused calls, want the 3 the agent refused before it answered", agents.refused)
	}
	if names := stepNames(j, 0); !strings.HasSuffix(names, "start a-web,start b-web,start c-web") {
		t.Errorf("steps %s", names)
	}
}
