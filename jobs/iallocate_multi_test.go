package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
)

// onN1 speaks Ganeti's iallocator protocol: it places every instance of a
// multi-allocate request on n1, heedless of room; named "partial" it
// leaves the last one unplaced.
var onN1 = pyAllocator("multi-allocate", `
ins = r["instances"]
n = len(ins) - 1 if os.path.basename(sys.argv[0]) == "partial" else len(ins)
print(json.dumps({"success": True, "info": "", "result": [[[i["name"], ["n1"]] for i in ins[:n]], [i["name"] for i in ins[n:]]]}))
`)

// pyAllocator is a python program speaking Ganeti's iallocator protocol:
// it reads the input (d, its request r), refuses a request of another
// mode than mode, and answers one of mode with body.
func pyAllocator(mode, body string) string {
	return `#!/usr/bin/python3
import json, os, sys
d = json.load(open(sys.argv[1]))
r = d["request"]
if r["type"] != "` + mode + `":
    print(json.dumps({"success": False, "info": "mode %s not supported" % r["type"], "result": []}))
    sys.exit(0)` + body
}

func multiSetup(t *testing.T) (*fsm.FSM, *iallocator.Runner) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 for the test allocator")
	}
	d := &direct{f: fsm.New()}
	d.Apply(context.Background(), fsm.ClusterInit{Now: 1, Name: "c", UUID: "u1", GroupUUID: "g1",
		Node: fsm.NodeSpec{Name: "n1", UUID: "n1", PrimaryIP: "192.0.2.1", Resources: fsm.Resources{MemoryMiB: 8192, DiskMiB: 100000, CPUs: 4}}})
	dir := filepath.Join(t.TempDir(), "iallocators")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"py": onN1, "partial": onN1, "garbage": "#!/bin/sh\necho 'Traceback: oops'\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d.f, &iallocator.Runner{Dir: dir, Owner: os.Geteuid(), TempDir: t.TempDir()}
}

func noDead(st *fsm.State) alloc.Options { return AllocOptions(st, nil) }

// TestCapacityWith: the list is tried in order; an external allocator's
// multi-allocate placements count while each fits after the ones before.
func TestCapacityWith(t *testing.T) {
	f, r := multiSetup(t)
	ctx := context.Background()
	spec := alloc.Request{Name: "probe", Template: fsm.DTDiskless, MemoryMiB: 2048, VCPUs: 1}
	res, err := CapacityWith(ctx, f, r, noDead, "garbage,py", spec, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.IAllocator != "py" || res.Count != 4 || res.Primaries["n1"] != 4 || len(res.Failed) != 1 ||
		!strings.Contains(res.Failed[0], "iallocator garbage failed: the answer is not a JSON object") ||
		!strings.HasPrefix(res.Limit, "iallocator py: placement 5 (n1) does not fit: ") {
		t.Errorf("garbage,py: %+v", res)
	}
	hail, err := CapacityWith(ctx, f, r, noDead, "hail", spec, "", "")
	if err != nil || hail.IAllocator != "hail" || hail.Count != 4 || len(hail.Failed) != 0 {
		t.Errorf("hail: %+v %v", hail, err)
	}
	if _, err := CapacityWith(ctx, f, r, noDead, "garbage", spec, "", ""); err == nil || !strings.Contains(err.Error(), "iallocator garbage: the answer is not a JSON object") {
		t.Errorf("garbage alone: %v, want its reason", err)
	}
	if _, err := CapacityWith(ctx, f, r, noDead, "../x", spec, "", ""); err == nil {
		t.Error("a list naming a path was accepted")
	}
}

// TestMultiAllocateWith: an external allocator's multi-allocate answer
// gives each placed instance's nodes and the names of those it could not
// place (which are not created: Ganeti's LUInstanceMultiAlloc); one that
// fails is logged and the next is tried; the built-in answers nil (each
// creation places itself).
func TestMultiAllocateWith(t *testing.T) {
	f, r := multiSetup(t)
	ctx := context.Background()
	reqs := []alloc.Request{{Name: "a", Template: fsm.DTDiskless, MemoryMiB: 128}, {Name: "b", Template: fsm.DTDiskless, MemoryMiB: 128}}
	logged := 0
	logf := func(string, ...any) { logged++ }
	got, failed, err := MultiAllocateWith(ctx, f, r, noDead, "garbage,py", reqs, "noop", "fake", logf)
	if err != nil || len(got) != 2 || strings.Join(got["a"], ",") != "n1" || strings.Join(got["b"], ",") != "n1" || len(failed) != 0 {
		t.Errorf("garbage,py: %v %v %v", got, failed, err)
	}
	if logged != 1 {
		t.Errorf("the failure of garbage was logged %d times, want once", logged)
	}
	got, failed, err = MultiAllocateWith(ctx, f, r, noDead, "partial,py", reqs, "noop", "fake", nil)
	if err != nil || len(got) != 1 || strings.Join(got["a"], ",") != "n1" || strings.Join(failed, ",") != "b" {
		t.Errorf("partial: %v %v %v, want a placed and b failed", got, failed, err)
	}
	if got, failed, err := MultiAllocateWith(ctx, f, r, noDead, "garbage,hail", reqs, "noop", "fake", nil); err != nil || got != nil || failed != nil {
		t.Errorf("garbage,hail: %v %v %v, want nil (the built-in: each creation places itself)", got, failed, err)
	}
	if _, _, err := MultiAllocateWith(ctx, f, r, noDead, "garbage", reqs, "noop", "fake", nil); err == nil || !strings.Contains(err.Error(), "the answer is not a JSON object") {
		t.Errorf("garbage alone: %v, want its reason", err)
	}
}

// toFirstTarget speaks Ganeti's iallocator protocol: it answers a
// change-group request by moving each instance to the first nodes, by
// name, of the first target group (as many as the instance has now).
var toFirstTarget = pyAllocator("change-group", `
g = r["target_groups"][0]
nodes = sorted(n for n, v in d["nodes"].items() if v["group"] == g)
moved = [[i, d["nodegroups"][g]["name"], nodes[:len(d["instances"][i]["nodes"])]] for i in r["instances"]]
print(json.dumps({"success": True, "info": "", "result": [moved, [], []]}))
`)

// TestChangeGroup: OP_INSTANCE_CHANGE_GROUP moves a running drbd instance
// to two nodes of another group (disks copied, migrated, the old copies
// removed), by the built-in and by an external allocator speaking the
// change-group protocol; OP_GROUP_EVACUATE empties a group; what cannot
// be honoured is refused by name and changes nothing.
func TestChangeGroup(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 for the test allocator")
	}
	d, epoch := instanceSetup(t, "n3", "n4")
	dir := filepath.Join(t.TempDir(), "iallocators")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "first"), []byte(toFirstTarget), 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := newFakeNodes()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes,
			IAllocators: &iallocator.Runner{Dir: dir, Owner: os.Geteuid(), TempDir: t.TempDir()}}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	runOK(t, d, `{"OP_ID":"OP_GROUP_ADD","group_name":"g2"}`)
	runOK(t, d, `{"OP_ID":"OP_GROUP_ADD","group_name":"g3"}`)
	runOK(t, d, `{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g2","nodes":["n3","n4"]}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n1","snode":"n2"}`)
	groupOf := func() (string, []string) {
		in := instanceState(d, "web1")
		var g string
		var names []string
		d.f.Read(func(s *fsm.State, _ uint64) {
			g = s.Groups[s.Nodes[in.PrimaryNode].Group].Name
			names = append(names, s.NodeName(in.PrimaryNode), s.NodeName(in.SecondaryNodes[0]))
		})
		return g, names
	}
	fails := func(op, want string) {
		t.Helper()
		before := instanceState(d, "web1")
		j := finished(t, d, submitUUID(t, d, op))
		if j.Status != fsm.StatusError || !strings.Contains(opResult(j, 0), want) {
			t.Errorf("%s: %s %q, want an error with %q", op, j.Status, opResult(j, 0), want)
		}
		if after := instanceState(d, "web1"); after.PrimaryNode != before.PrimaryNode || after.SerialNo != before.SerialNo {
			t.Errorf("%s changed web1: %+v", op, after)
		}
	}
	fails(`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"web1","target_groups":["default"]}`, "group default cannot be a target: instance web1 has nodes in it already")
	fails(`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"web1","target_groups":["nope"]}`, "target group nope does not exist")
	fails(`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"web1","target_groups":["g3"]}`, "no target group can take it")
	fails(`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"nope"}`, "node group nope does not exist")

	// The built-in: g3 has no nodes, so g2 it is.
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"web1"}`)
	if g, ns := groupOf(); g != "g2" || strings.Join(ns, ",") != "n3,n4" && strings.Join(ns, ",") != "n4,n3" {
		t.Fatalf("after change-group: web1 in %s on %v", g, ns)
	}
	if r := nodes.running(); len(r) != 1 || !strings.HasPrefix(r[0], instanceState(d, "web1").PrimaryNode+"/") {
		t.Errorf("running after change-group: %v", r)
	}
	if !strings.Contains(string(j.Ops[0].Result), `"jobs"`) {
		t.Errorf("result %s lacks Ganeti's jobs", j.Ops[0].Result)
	}
	// The external allocator moves it back.
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"web1","iallocator":"first","target_groups":["default"]}`)
	if g, ns := groupOf(); g != "default" || strings.Join(ns, ",") != "n1,n2" {
		t.Fatalf("after change-group by first: web1 in %s on %v", g, ns)
	}
	// A group evacuation with force_failover moves it out of default
	// again, stopped and started rather than migrated.
	nodes.mu.Lock()
	before := len(nodes.calls)
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_GROUP_EVACUATE","group_name":"default","target_groups":["g2"],"force_failover":true}`)
	if g, _ := groupOf(); g != "g2" {
		t.Fatalf("after evacuating default: web1 in %s", g)
	}
	nodes.mu.Lock()
	calls := strings.Join(nodes.calls[before:], " ")
	nodes.mu.Unlock()
	if strings.Contains(calls, "migrate") || !strings.Contains(calls, NodeOpStop+"@n") || !strings.Contains(calls, NodeOpStart+"@n") {
		t.Errorf("force_failover: the moves called %s, want a stop and a start and no migration", calls)
	}
	if r := nodes.running(); len(r) != 1 || !strings.HasPrefix(r[0], instanceState(d, "web1").PrimaryNode+"/") {
		t.Errorf("running after the evacuation: %v", r)
	}
	var old []string
	d.f.Read(func(s *fsm.State, _ uint64) { old = []string{s.LookupNode("n1").UUID, s.LookupNode("n2").UUID} })
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	if len(nodes.disks) == 0 {
		t.Fatal("no disks anywhere")
	}
	for k, ds := range nodes.disks {
		if len(ds) > 0 && (strings.HasPrefix(k, old[0]+"/") || strings.HasPrefix(k, old[1]+"/")) {
			t.Errorf("disks left behind in group default: %s %v", k, ds)
		}
	}
}

// TestChangeGroupAnswerPlan: an external allocator's change-group answer
// becomes the moves gnt runs; one that keeps an instance in a group it
// has a node in is refused, and instances it could not move fail the
// plan with its reasons.
func TestChangeGroupAnswerPlan(t *testing.T) {
	d, epoch := instanceSetup(t, "n3", "n4")
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch})
	runOK(t, d, `{"OP_ID":"OP_GROUP_ADD","group_name":"g2"}`)
	runOK(t, d, `{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g2","nodes":["n3","n4"]}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"r1","disk_template":"drbd","disks":[{"size":1024}],"pnode":"n1","snode":"n2","forthcoming":true,"os_type":"noop"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"p1","disk_template":"plain","disks":[{"size":1024}],"pnode":"n1","forthcoming":true,"os_type":"noop"}`)
	moved := func(name, group string, nodes ...string) iallocator.Moved {
		return iallocator.Moved{Name: name, Group: group, Nodes: nodes}
	}
	for _, c := range []struct {
		name string
		ans  iallocator.Answer
		want string // the moves "instance:kind:primary:secondary:group", or the error
	}{
		{"relocate and re-create", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "g2", "n3", "n4"), moved("p1", "g2", "n4")}},
			"r1:relocate:n3:n4:g2 p1:recreate:n4::g2"},
		{"own group", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "default", "n2", "n1")}}, "error: the answer moves r1 to node n2, in a group it has a node in already"},
		{"not moved", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "g2", "n3", "n4")}, NotMoved: []iallocator.NotMoved{{Name: "p1", Reason: "g2 is full"}}},
			"error: cannot change the group of the instance(s): p1: g2 is full"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p alloc.Plan
			var err error
			d.f.Read(func(s *fsm.State, _ uint64) { p, err = changeGroupPlan(s, alloc.GroupChange{}, &c.ans) })
			var got []string
			for _, m := range p.Moves {
				got = append(got, strings.Join([]string{m.Instance, m.Kind, m.NewPrimaryName, m.NewSecondaryName, m.NewGroup}, ":"))
			}
			s := strings.Join(got, " ")
			if err != nil {
				s = "error: " + err.Error()
			}
			if s != c.want {
				t.Errorf("got %q, want %q", s, c.want)
			}
		})
	}
}
