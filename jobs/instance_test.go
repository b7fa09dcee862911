package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// fakeNodes is an in-memory stand-in for the node agents: per node, the
// instances it holds, with the agents' idempotence.
type fakeNodes struct {
	mu    sync.Mutex
	disks map[string]map[string]bool // node/instance -> disk uuids
	run   map[string]bool            // node/instance running
	os    map[string]string          // node/instance -> op id of the last install
	calls []string
	fail  map[string]error // op@node -> error
	// down holds nodes whose gntd does not answer: every call to them
	// fails as the node RPC does when it cannot reach a node.
	down map[string]bool
	// started holds the hypervisor parameters each start call carried
	// (node/instance -> hvparams), startedWith the whole instance.
	started     map[string]map[string]any
	startedWith map[string]fsm.Instance
	// startPool is the uid pool each start call carried.
	startPool map[string][]fsm.UIDRange
	// shutdowns holds the stop and reboot calls' grace: "op timeout
	// force" each.
	shutdowns []string
	// bridges holds each node's bridges (bridges-exist); a node not in
	// it has every bridge.
	bridges map[string][]string
	// drbd gives the drbd device a status reports for a disk present on
	// a node (nil, or false: none, as the fake driver reports); seen
	// holds the instance each call carried.
	drbd func(node, disk string) (fsm.DRBDDevice, bool)
	seen []NodeCall
	// mig holds each node's record of the instance's last migration
	// (node/instance); a target prepared or received reports incoming
	// or received.
	mig map[string]NodeMigration
}

func newFakeNodes() *fakeNodes {
	return &fakeNodes{disks: map[string]map[string]bool{}, run: map[string]bool{}, os: map[string]string{}, fail: map[string]error{}, down: map[string]bool{}}
}

func (f *fakeNodes) Call(_ context.Context, node *fsm.Node, c NodeCall) (NodeReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c.Op+"@"+node.Name)
	f.seen = append(f.seen, c)
	if f.down[node.Name] {
		return NodeReply{}, &NodeCallError{Code: "transport", Msg: "connection refused"}
	}
	if err := f.fail[c.Op+"@"+node.Name]; err != nil {
		return NodeReply{}, err
	}
	if c.Op == NodeOpBridgesExist {
		missing := map[string]string{}
		if have, ok := f.bridges[node.Name]; ok {
			for _, b := range c.Bridges {
				if !slices.Contains(have, b) {
					missing[b] = "does not exist"
				}
			}
		}
		return NodeReply{MissingBridges: missing}, nil
	}
	key := node.Name + "/" + c.Instance.UUID
	changed := true
	switch c.Op {
	case NodeOpStatus:
		var disks []string
		paths := map[string]string{}
		var devs map[string]fsm.DRBDDevice
		for d, ok := range f.disks[key] {
			if ok {
				disks = append(disks, d)
				paths[d] = "/disks/" + node.Name + "/" + d
				if f.drbd == nil {
					continue
				}
				if dev, ok := f.drbd(node.Name, d); ok {
					if devs == nil {
						devs = map[string]fsm.DRBDDevice{}
					}
					devs[d] = dev
				}
			}
		}
		var mig *NodeMigration
		if m, ok := f.mig[key]; ok {
			mig = &m
			if m.Role == "target" && (m.Phase == "prepared" || m.Phase == "received") {
				state := map[string]string{"prepared": "incoming", "received": "received"}[m.Phase]
				return NodeReply{State: state, Disks: disks, DiskPaths: paths, DRBD: devs, Migration: mig}, nil
			}
		}
		switch {
		case f.run[key]:
			return NodeReply{State: "running", Disks: disks, DiskPaths: paths, DRBD: devs, Migration: mig}, nil
		case f.disks[key] != nil || f.os[key] != "":
			return NodeReply{State: "stopped", Disks: disks, DiskPaths: paths, DRBD: devs}, nil
		}
		return NodeReply{}, &NodeCallError{Code: "not_found", Msg: "no such instance"}
	case NodeOpDiskCreate:
		if f.disks[key] == nil {
			f.disks[key] = map[string]bool{}
		}
		changed = !f.disks[key][c.Disk]
		f.disks[key][c.Disk] = true
	case NodeOpDiskAttach:
		if !f.disks[key][c.Disk] {
			return NodeReply{}, &NodeCallError{Code: "not_found", Msg: "no disk " + c.Disk}
		}
	case NodeOpDiskDetach:
	case NodeOpDiskGrow:
		if !f.disks[key][c.Disk] {
			return NodeReply{}, &NodeCallError{Code: "not_found", Msg: "no disk " + c.Disk}
		}
	case NodeOpDiskReplace:
		if !f.disks[key][c.Disk] {
			if f.disks[key] == nil {
				f.disks[key] = map[string]bool{}
			}
			f.disks[key][c.Disk] = true
		}
	case NodeOpOSInstall:
		changed = f.os[key] != c.OpID
		f.os[key] = c.OpID
	case NodeOpStart:
		if f.started == nil {
			f.started = map[string]map[string]any{}
		}
		f.started[key] = c.Instance.HVParams
		if f.startedWith == nil {
			f.startedWith = map[string]fsm.Instance{}
		}
		f.startedWith[key] = *c.Instance
		if f.startPool == nil {
			f.startPool = map[string][]fsm.UIDRange{}
		}
		f.startPool[key] = c.UIDPool
		changed = !f.run[key]
		f.run[key] = true
	case NodeOpStop:
		f.shutdowns = append(f.shutdowns, fmt.Sprintf("%s %v %v", c.Op, c.Timeout, c.Force))
		changed = f.run[key]
		f.run[key] = false
	case NodeOpReboot:
		f.shutdowns = append(f.shutdowns, fmt.Sprintf("%s/%s %v %v", c.Op, c.RebootType, c.Timeout, c.Force))
		f.run[key] = true
	case NodeOpRemove:
		if f.run[key] {
			return NodeReply{}, &NodeCallError{Code: "wrong_state", Msg: "running"}
		}
		delete(f.disks, key)
		delete(f.os, key)
	case NodeOpMigratePrepare:
		if f.mig == nil {
			f.mig = map[string]NodeMigration{}
		}
		f.mig[key] = NodeMigration{ID: c.Migration, Role: "target", Phase: "prepared"}
	case NodeOpMigrateAbort:
		if m, ok := f.mig[key]; ok && m.ID == c.Migration {
			m.Phase = "aborted"
			f.mig[key] = m
		}
	case NodeOpMigrateSend:
		changed = f.run[key]
		f.run[key] = false
	case NodeOpMigrateFinish:
		if m, ok := f.mig[key]; ok && m.ID == c.Migration {
			m.Phase = "finished"
			f.mig[key] = m
		}
		changed = !f.run[key]
		f.run[key] = true
	default:
		return NodeReply{}, &NodeCallError{Code: "not_supported", Msg: c.Op}
	}
	return NodeReply{Changed: changed}, nil
}

func (f *fakeNodes) running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k, v := range f.run {
		if v {
			out = append(out, k)
		}
	}
	return out
}

// instanceSetup is a cluster of two (or more) nodes with 4 GiB and 100
// GiB each.
func instanceSetup(t *testing.T, more ...string) (*direct, uint64) {
	d, epoch := setup(t)
	for k, n := range append([]string{"n2"}, more...) {
		r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 3, UUIDs: []string{n},
			Ops: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"OP_ID":"OP_NODE_ADD","node_name":%q,"primary_ip":"192.0.2.%d"}`, n, k+2))}})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	for i, n := range append([]string{"n1", "n2"}, more...) {
		r, _, _ := d.Apply(context.Background(), fsm.NodeRegister{Now: 4, Node: fsm.NodeSpec{Name: n, PrimaryIP: fmt.Sprintf("192.0.2.%d", i+1),
			Addrs: fsm.Addrs{Agent: fmt.Sprintf("192.0.2.%d:1811", i+1)}, Resources: fsm.Resources{MemoryMiB: 4096, DiskMiB: 102400, CPUs: 4}}})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return d, epoch
}

func submitUUID(t *testing.T, d *direct, op string) int64 {
	t.Helper()
	r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: time.Now().UnixNano(), Ops: []json.RawMessage{json.RawMessage(op)},
		UUIDs: []string{fmt.Sprintf("%08x-0000-4000-8000-000000000000", time.Now().UnixNano()&0xffffffff)}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.JobID
}

func instanceState(d *direct, name string) *fsm.Instance {
	var out *fsm.Instance
	d.f.Read(func(s *fsm.State, _ uint64) {
		if i := s.LookupInstance(name); i != nil {
			c := *i
			out = &c
		}
	})
	return out
}

// TestInstanceLifecycle: a drbd instance is placed, its disks created on
// both nodes, started, migrated, failed over, rebooted, stopped and
// removed; the configuration follows each step and the agents end empty.
func TestInstanceLifecycle(t *testing.T) {
	d, epoch := instanceSetup(t)
	nodes := newFakeNodes()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	run := func(op string) *fsm.Job { t.Helper(); return runOK(t, d, op) }
	run(`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":10240}],"beparams":{"memory":512},"os_type":"debian","nics":[{"ip":"198.51.100.7"}]}`)
	in := instanceState(d, "web1")
	if in == nil || in.AdminState != fsm.AdminUp || len(in.SecondaryNodes) != 1 || in.PrimaryNode == in.SecondaryNodes[0] ||
		len(in.Disks) != 1 || !strings.HasPrefix(in.NICs[0].MAC, "aa:00:00:") {
		t.Fatalf("web1 after create: %+v", in)
	}
	primary := in.PrimaryNode
	if r := nodes.running(); len(r) != 1 || !strings.HasPrefix(r[0], primary+"/") {
		t.Fatalf("running after create: %v (primary %s)", r, primary)
	}
	run(`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	in = instanceState(d, "web1")
	if in.PrimaryNode == primary || in.SecondaryNodes[0] != primary {
		t.Fatalf("migrate did not swap: %+v", in)
	}
	if r := nodes.running(); len(r) != 1 || !strings.HasPrefix(r[0], in.PrimaryNode+"/") {
		t.Fatalf("running after migrate: %v", r)
	}
	run(`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`)
	if in = instanceState(d, "web1"); in.PrimaryNode != primary {
		t.Fatalf("failover did not swap back: %+v", in)
	}
	run(`{"OP_ID":"OP_INSTANCE_REBOOT","instance_name":"web1","reboot_type":"soft"}`)
	run(`{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"}`)
	if in = instanceState(d, "web1"); in.AdminState != fsm.AdminDown || len(nodes.running()) != 0 {
		t.Fatalf("after shutdown: %+v, running %v", in, nodes.running())
	}
	run(`{"OP_ID":"OP_INSTANCE_REMOVE","instance_name":"web1"}`)
	if in = instanceState(d, "web1"); in != nil {
		t.Fatalf("web1 still recorded: %+v", in)
	}
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	if len(nodes.disks) != 0 {
		t.Fatalf("disks left on nodes: %v", nodes.disks)
	}
}

// TestShutdownTimeouts: an opcode's shutdown timeout reaches the node's
// stop or reboot call; none leaves the node's default (0), and 0 is
// Ganeti's "no grace": the guest is destroyed at once (force).
func TestShutdownTimeouts(t *testing.T) {
	d, epoch := instanceSetup(t)
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	run := func(op string) { t.Helper(); runOK(t, d, op) }
	run(`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian"}`)
	for _, op := range []string{
		`{"OP_ID":"OP_INSTANCE_REBOOT","instance_name":"web1"}`,
		`{"OP_ID":"OP_INSTANCE_REBOOT","instance_name":"web1","reboot_type":"soft","shutdown_timeout":7}`,
		`{"OP_ID":"OP_INSTANCE_REBOOT","instance_name":"web1","reboot_type":"full","shutdown_timeout":0}`,
		`{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1","timeout":30}`,
		`{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"web1"}`,
		`{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1","timeout":0}`,
		`{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"web1"}`,
		`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","shutdown_timeout":2.5}`,
		`{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"}`,
	} {
		run(op)
	}
	want := []string{
		"instance-reboot/hard 0s false",
		"instance-reboot/soft 7s false",
		"instance-reboot/full 0s true",
		"instance-stop 30s false",
		"instance-stop 0s true",
		"instance-stop 2.5s false",
		"instance-stop 0s false",
	}
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	if !slices.Equal(nodes.shutdowns, want) {
		t.Errorf("stop and reboot calls\n got %q\nwant %q", nodes.shutdowns, want)
	}
}

// TestInstanceCreateRefusals: placement that cannot be satisfied names
// the resource; operations in the wrong state fail with the reason and
// change nothing.
// TestAgentGetsFilledHVParams: an instance's hypervisor parameters reach
// the agent filled (its own over the cluster's), and a global one is
// refused at submission.
func TestAgentGetsFilledHVParams(t *testing.T) {
	d, epoch := instanceSetup(t)
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_CLUSTER_SET_PARAMS","nicparams":{"link":"br5"},"osparams":{"debian":{"dist":"d"}},"beparams":{"auto_balance":false},
		"uid_pool":[[1000,1009]]}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"hv1","disk_template":"diskless","pnode":"n1","hypervisor":"fake","hvparams":{"kernel_path":"/k"},
		"os_type":"debian","osparams":{"mirror":"m"},"nics":[{"mode":"bridged"},{"link":"br6","vlan":".4"}]}`)
	in := instanceState(d, "hv1")
	if in == nil || in.Hypervisor != "fake" || in.HVParams["kernel_path"] != "/k" {
		t.Fatalf("hv1 = %+v", in)
	}
	nodes.mu.Lock()
	got := nodes.started["n1/"+in.UUID]
	nodes.mu.Unlock()
	if got["kernel_path"] != "/k" || got["acpi"] != true {
		t.Fatalf("start carried hvparams %v", got)
	}
	nodes.mu.Lock()
	sent := nodes.startedWith["n1/"+in.UUID]
	pool := nodes.startPool["n1/"+in.UUID]
	nodes.mu.Unlock()
	if p := pool; fsm.FormatUIDPool(p) != "1000-1009" {
		t.Errorf("start carried the uid pool %v, want the cluster's 1000-1009", p)
	}
	if sent.OSParams["dist"] != "d" || sent.OSParams["mirror"] != "m" || sent.BEParams["auto_balance"] != false {
		t.Errorf("start carried osparams %v beparams %v", sent.OSParams, sent.BEParams)
	}
	if len(sent.NICs) != 2 || sent.NICs[0].Link != "br5" || sent.NICs[1].Mode != fsm.NICModeBridged || sent.NICs[1].Link != "br6" || sent.NICs[1].VLAN != ".4" {
		t.Errorf("start carried NICs %+v", sent.NICs)
	}
	if st := instanceState(d, "hv1"); st.NICs[0].Link != "" || len(st.OSParams) != 1 {
		t.Errorf("filling changed the record: %+v", st)
	}
	// Disk parameters: a file instance's copy carries its template's,
	// its primary's group's over the cluster's.
	runOK(t, d, `{"OP_ID":"OP_CLUSTER_SET_PARAMS","diskparams":{"file":{"format":"qcow2"}}}`)
	fin := *in
	fin.DiskTemplate = fsm.DTFile
	if got := (&Executor{FSM: d.f}).filled(&fin).DiskParams; got["format"] != fsm.DiskFormatQcow2 {
		t.Errorf("a file instance's filled diskparams %v", got)
	}
	r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 9, UUIDs: []string{"u"},
		Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"hv2","disk_template":"diskless","hvparams":{"migration_port":1}}`)}})
	if r.Err == nil || r.Err.Field != "hvparams.migration_port" {
		t.Fatalf("global hvparam at create: %v", r.Err)
	}
}

func TestInstanceCreateRefusals(t *testing.T) {
	d, epoch := instanceSetup(t)
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	big := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"big","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":8192}}`)
	j := waitStatus(t, d.f, big, fsm.StatusError)
	if !strings.Contains(string(j.Ops[0].Result), "memory") {
		t.Errorf("result %s does not name the memory shortage", j.Ops[0].Result)
	}
	plain := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"p1","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":256},"start":false}`)
	waitStatus(t, d.f, plain, fsm.StatusSuccess)
	mig := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"p1"}`)
	j = waitStatus(t, d.f, mig, fsm.StatusError)
	if !strings.Contains(string(j.Ops[0].Result), "needs drbd") || !strings.Contains(string(j.Ops[0].Result), "logical volumes local to its node") {
		t.Errorf("migrate of plain: %s", j.Ops[0].Result)
	}
	// A reservation takes the memory: a real instance that would need it
	// does not fit, and committing the reservation does.
	res := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","disk_template":"diskless","beparams":{"memory":3800},"forthcoming":true,"pnode":"n2"}`)
	waitStatus(t, d.f, res, fsm.StatusSuccess)
	if in := instanceState(d, "res1"); in == nil || !in.Forthcoming {
		t.Fatalf("res1 = %+v", in)
	}
	other := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"other","disk_template":"diskless","beparams":{"memory":1024},"pnode":"n2"}`)
	waitStatus(t, d.f, other, fsm.StatusError)
	commit := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","commit":true}`)
	waitStatus(t, d.f, commit, fsm.StatusSuccess)
	if in := instanceState(d, "res1"); in == nil || in.Forthcoming || in.AdminState != fsm.AdminUp {
		t.Fatalf("res1 after commit = %+v", in)
	}
}

func runExecutorWith(t *testing.T, e *Executor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// runOK submits one opcode and waits for its job's success.
func runOK(t *testing.T, d *direct, op string) *fsm.Job {
	t.Helper()
	id := submitUUID(t, d, op)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var j *fsm.Job
		d.f.Read(func(s *fsm.State, _ uint64) { j = s.Jobs[id] })
		if j != nil && fsm.Finalized(j.Status) {
			if j.Status != fsm.StatusSuccess {
				t.Fatalf("%s: %s %s", op, j.Status, j.Ops[0].Result)
			}
			return j
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s did not finish", op)
	return nil
}

// TestNodeEvacuateAndMigrate: evacuating a node moves its drbd primary to
// the secondary and gives it a new secondary; migrating a node moves its
// running primaries to their secondaries; each move is a recorded step.
func TestNodeEvacuateAndMigrate(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"pnode":"n1","snode":"n2"}`)
	j := runOK(t, d, `{"OP_ID":"OP_NODE_EVACUATE","node_name":"n1"}`)
	in := instanceState(d, "web1")
	if in.PrimaryNode != "n2" || in.SecondaryNodes[0] != "n3" {
		t.Fatalf("after evacuating n1: primary %s secondary %v", in.PrimaryNode, in.SecondaryNodes)
	}
	if r := nodes.running(); len(r) != 1 || !strings.HasPrefix(r[0], "n2/") {
		t.Fatalf("running after evacuate: %v", r)
	}
	var names []string
	for _, s := range j.Ops[0].Steps {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ", "); got != "plan, failover_replace web1: move to n2, failover_replace web1: record the secondary n3" {
		t.Errorf("evacuation steps recorded: %s (the plan, then the move's parts, the last recorded by the finish)", got)
	}
	// Ganeti's node-evac-res1 result: the jobs that did the moves.
	if want := fmt.Sprintf(`{"jobs":[[true,%d]]}`, j.ID); string(j.Ops[0].Result) != want {
		t.Errorf("evacuation result %s, want %s", j.Ops[0].Result, want)
	}
	// Nothing to move off n3's primary role: the result names the job too.
	j = runOK(t, d, `{"OP_ID":"OP_NODE_EVACUATE","node_name":"n3","mode":"primary-only"}`)
	if want := fmt.Sprintf(`{"jobs":[[true,%d]]}`, j.ID); string(j.Ops[0].Result) != want {
		t.Errorf("empty evacuation result %s, want %s", j.Ops[0].Result, want)
	}
	runOK(t, d, `{"OP_ID":"OP_NODE_MIGRATE","node_name":"n2"}`)
	in = instanceState(d, "web1")
	if in.PrimaryNode != "n3" || in.SecondaryNodes[0] != "n2" {
		t.Fatalf("after migrating n2: primary %s secondary %v", in.PrimaryNode, in.SecondaryNodes)
	}
	// Nothing left to move: the plan says so.
	runOK(t, d, `{"OP_ID":"OP_NODE_MIGRATE","node_name":"n1"}`)
}

// TestInstanceChanges: reinstall, replace-disks (both sides and a new
// secondary), recreate-disks, rename and set-params, each recorded in the
// configuration and carried out on the agents.
func TestInstanceChanges(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"db1","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":512},"os_type":"debian","pnode":"n1","snode":"n2","start":false}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"db1","os_type":"alpine"}`)
	if in := instanceState(d, "db1"); in.OS != "alpine" {
		t.Errorf("OS after reinstall: %q", in.OS)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"db1","mode":"replace_new_secondary","remote_node":"n3"}`)
	if in := instanceState(d, "db1"); in.SecondaryNodes[0] != "n3" {
		t.Errorf("secondary after replace: %v", in.SecondaryNodes)
	}
	nodes.mu.Lock()
	if len(nodes.disks["n2/"+instanceState(d, "db1").UUID]) != 0 || len(nodes.disks["n3/"+instanceState(d, "db1").UUID]) != 1 {
		t.Errorf("disks after replace: %v", nodes.disks)
	}
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"db1","beparams":{"memory":1024,"vcpus":2},"disks":[["add",-1,{"size":2048}]]}`)
	in := instanceState(d, "db1")
	if in.MemoryMiB != 1024 || in.VCPUs != 2 || len(in.Disks) != 2 {
		t.Errorf("after set-params: mem %d vcpus %d disks %d", in.MemoryMiB, in.VCPUs, len(in.Disks))
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"db1"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_RENAME","instance_name":"db1","new_name":"db2"}`)
	if instanceState(d, "db1") != nil || instanceState(d, "db2") == nil {
		t.Errorf("rename did not take")
	}
	// A running instance is not reinstalled or renamed.
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"db2"}`)
	for _, op := range []string{`{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"db2"}`, `{"OP_ID":"OP_INSTANCE_RENAME","instance_name":"db2","new_name":"db3"}`} {
		id := submitUUID(t, d, op)
		j := waitStatus(t, d.f, id, fsm.StatusError)
		if !strings.Contains(string(j.Ops[0].Result), "is up; shut it down") {
			t.Errorf("%s: %s", op, j.Ops[0].Result)
		}
	}
}

// configOf is the instances and the config serial, for checking that a
// job changed no configuration.
func configOf(d *direct) string {
	var out string
	d.f.Read(func(s *fsm.State, _ uint64) {
		b, _ := json.Marshal(s.Instances)
		out = fmt.Sprintf("%d %s", s.Cluster.SerialNo, b)
	})
	return out
}

// TestInstanceCreateMakesRoom: an instance that fits nowhere is placed
// after the allocator moves a reservation (a record change in the same
// transaction as the new record, named in the log); a forthcoming
// instance makes room the same way; the dry run shows the moves and
// changes nothing; gnt_move_reservations=false fails with the shortage;
// real instances are never moved.
func TestInstanceCreateMakesRoom(t *testing.T) {
	d, epoch := instanceSetup(t, "n3", "n4")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	// Each node has 4096 MiB: n1 and n2 hold a 3000 MiB reservation, n3
	// and n4 a real 1000 MiB instance; no node has 3500 MiB free.
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","disk_template":"diskless","beparams":{"memory":3000},"forthcoming":true,"pnode":"n1"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res2","disk_template":"diskless","beparams":{"memory":3000},"forthcoming":true,"pnode":"n2"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"r3","disk_template":"diskless","beparams":{"memory":1000},"pnode":"n3","start":false}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"r4","disk_template":"diskless","beparams":{"memory":1000},"pnode":"n4","start":false}`)

	before := configOf(d)
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web","disk_template":"diskless","beparams":{"memory":3500},"dry_run":true}`)
	if log := logText(j); !strings.Contains(log, "dry run: reservation res1 would move from n1 to n3 to make room") || !strings.Contains(log, "dry run: web would go to [n1]") {
		t.Errorf("dry run log:\n%s", log)
	}
	var plan struct {
		Primary string `json:"primary_name"`
		Moves   []struct {
			Instance   string `json:"instance"`
			NewPrimary string `json:"new_primary_name"`
		} `json:"moves"`
	}
	if err := json.Unmarshal(j.Ops[0].Result, &plan); err != nil || plan.Primary != "n1" || len(plan.Moves) != 1 || plan.Moves[0].Instance != "res1" || plan.Moves[0].NewPrimary != "n3" {
		t.Errorf("dry run result %s (%v)", j.Ops[0].Result, err)
	}
	if configOf(d) != before {
		t.Fatal("the dry run changed the configuration")
	}

	optOut := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web","disk_template":"diskless","beparams":{"memory":3500},"gnt_move_reservations":false}`)
	j = waitStatus(t, d.f, optOut, fsm.StatusError)
	if res := string(j.Ops[0].Result); !strings.Contains(res, "no node has 3500 MiB free memory") || strings.Contains(res, "reservation") {
		t.Errorf("without moves: %s", res)
	}
	if configOf(d) != before {
		t.Fatal("a refused create changed the configuration")
	}

	// A reservation makes room for another reservation.
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res5","disk_template":"diskless","beparams":{"memory":3500},"forthcoming":true}`)
	if log := logText(j); !strings.Contains(log, "moved reservation res1 from n1 to n3 to make room") {
		t.Errorf("log:\n%s", log)
	}
	if in := instanceState(d, "res5"); in == nil || !in.Forthcoming || in.PrimaryNode != "n1" {
		t.Fatalf("res5 = %+v", in)
	}
	if in := instanceState(d, "res1"); !in.Forthcoming || in.PrimaryNode != "n3" {
		t.Fatalf("res1 after the move = %+v", in)
	}

	// A real instance: res2 moves to n4, the only node left with room.
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web","disk_template":"diskless","beparams":{"memory":3500}}`)
	if log := logText(j); !strings.Contains(log, "moved reservation res2 from n2 to n4 to make room") {
		t.Errorf("log:\n%s", log)
	}
	if in := instanceState(d, "web"); in == nil || in.PrimaryNode != "n2" || in.AdminState != fsm.AdminUp {
		t.Fatalf("web = %+v", in)
	}
	if steps := j.Ops[0].Steps; len(steps) == 0 || steps[0].Name != "allocate and record" {
		t.Fatalf("steps %+v", steps)
	}
	for _, name := range []string{"r3", "r4"} {
		if in := instanceState(d, name); in.PrimaryNode != "n"+name[1:] {
			t.Errorf("real instance %s moved to %s", name, in.PrimaryNode)
		}
	}
	// Nothing is left to move: the shortage says so, nothing changes.
	before = configOf(d)
	full := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"more","disk_template":"diskless","beparams":{"memory":3500}}`)
	j = waitStatus(t, d.f, full, fsm.StatusError)
	if res := string(j.Ops[0].Result); !strings.Contains(res, "no way was found to make room") {
		t.Errorf("a full cluster: %s", res)
	}
	if configOf(d) != before {
		t.Fatal("a refused create changed the configuration")
	}
}

// TestReservationMigrate: failover and migrate of a forthcoming instance
// move its record only (no agent is called): a drbd reservation swaps
// its nodes, another goes to target_node or where the allocator places
// it; a target that cannot take it is refused and nothing changes.
func TestReservationMigrate(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"resd","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":1024},"forthcoming":true,"pnode":"n1","snode":"n2"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"resp","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":1024},"forthcoming":true,"pnode":"n1"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"big","disk_template":"diskless","beparams":{"memory":3500},"pnode":"n3","start":false}`)
	nodes.mu.Lock()
	calls := len(nodes.calls)
	nodes.mu.Unlock()

	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"resd"}`)
	if in := instanceState(d, "resd"); in.PrimaryNode != "n2" || in.SecondaryNodes[0] != "n1" || !in.Forthcoming {
		t.Fatalf("resd after migrate: %+v", in)
	}
	if log := logText(j); !strings.Contains(log, "moved reservation resd from n1:n2 to n2:n1 (configuration only)") {
		t.Errorf("log:\n%s", log)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"resd"}`)
	if in := instanceState(d, "resd"); in.PrimaryNode != "n1" {
		t.Fatalf("resd after failover: %+v", in)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"resp","target_node":"n2"}`)
	if in := instanceState(d, "resp"); in.PrimaryNode != "n2" {
		t.Fatalf("resp after migrate to n2: %+v", in)
	}
	// Without a target the allocator chooses another node of its group:
	// n1 (n3 is full).
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"resp"}`)
	if in := instanceState(d, "resp"); in.PrimaryNode != "n1" {
		t.Fatalf("resp after failover: %+v", in)
	}
	nodes.mu.Lock()
	if len(nodes.calls) != calls {
		t.Errorf("moving reservations called the agents: %v", nodes.calls[calls:])
	}
	nodes.mu.Unlock()

	before := configOf(d)
	for op, want := range map[string]string{
		`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"resp","target_node":"n3"}`: "free memory",
		`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"resd","target_node":"n3"}`: "a drbd reservation moves to its secondary n2, not n3",
	} {
		id := submitUUID(t, d, op)
		j := waitStatus(t, d.f, id, fsm.StatusError)
		if !strings.Contains(string(j.Ops[0].Result), want) {
			t.Errorf("%s: %s, want %q", op, j.Ops[0].Result, want)
		}
	}
	if configOf(d) != before {
		t.Fatal("a refused move changed the configuration")
	}
}

// interposed is an Applier that lets a test act just before a command
// is applied.
type interposed struct {
	*direct
	before func(fsm.Command)
}

func (a *interposed) Apply(ctx context.Context, c fsm.Command) (fsm.Response, uint64, error) {
	if a.before != nil {
		a.before(c)
	}
	return a.direct.Apply(ctx, c)
}

// TestMakeRoomStaleMoveReplans: the reservation a create planned to move
// changes after the plan (an operator tags it) and before the record:
// the state refuses the whole step, changing nothing, and the step plans
// again and succeeds with the reservation's new record.
func TestMakeRoomStaleMoveReplans(t *testing.T) {
	d, epoch := instanceSetup(t)
	runAlone := func(op string) {
		t.Helper()
		e := &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 1, Strategy: fastStrategy, Nodes: newFakeNodes()}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		runOK(t, d, op)
		cancel()
		<-done
	}
	runAlone(`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","disk_template":"diskless","beparams":{"memory":3000},"forthcoming":true,"pnode":"n1"}`)
	runAlone(`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"a","disk_template":"diskless","beparams":{"memory":700},"pnode":"n2","start":false}`)

	var refused, tagged bool
	var before string
	ap := &interposed{direct: d}
	ap.before = func(c fsm.Command) {
		u, ok := c.(fsm.JobUpdate)
		if !ok || len(u.Changes) == 0 || u.Changes[0].ReservationMove == nil {
			return
		}
		if !tagged {
			tagged = true
			r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 10, UUIDs: []string{""},
				Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"instance","name":"res1","tags":["moved-meanwhile"]}`)}})
			if r.Err != nil {
				t.Errorf("tagging: %v", r.Err)
			}
			before = configOf(d)
			return
		}
		// The second attempt: the first was refused and changed nothing.
		refused = configOf(d) == before
	}
	runExecutorWith(t, &Executor{FSM: d.f, Apply: ap, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: newFakeNodes()})
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web","disk_template":"diskless","beparams":{"memory":3500}}`)
	if !tagged || !refused {
		t.Fatalf("the stale move was not refused whole (tagged %v, unchanged after %v)", tagged, refused)
	}
	in := instanceState(d, "res1")
	if in.PrimaryNode != "n2" || len(in.Tags) != 1 || !in.Forthcoming {
		t.Fatalf("res1 = %+v", in)
	}
	if web := instanceState(d, "web"); web == nil || web.PrimaryNode != "n1" {
		t.Fatalf("web = %+v", web)
	}
	if log := logText(j); !strings.Contains(log, "moved reservation res1 from n1 to n2 to make room") {
		t.Errorf("log:\n%s", log)
	}
}

// TestCommitCreatesWhatTheReservationDescribes: committing a drbd
// reservation by name alone creates its disks on both nodes, installs its
// OS and starts it; a commit naming other nodes or another OS is refused
// and changes nothing.
func TestCommitCreatesWhatTheReservationDescribes(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","disk_template":"drbd","disks":[{"size":1024}],"os_type":"debian","beparams":{"memory":512},"forthcoming":true,"pnode":"n2","snode":"n3"}`)
	if len(nodes.calls) != 0 {
		t.Fatalf("a reservation called the nodes: %v", nodes.calls)
	}
	for _, bad := range []struct{ op, want string }{
		{`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","commit":true,"pnode":"n1"}`, "nodes changed"},
		{`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","commit":true,"os_type":"other"}`, "for OS debian"},
	} {
		id := submitUUID(t, d, bad.op)
		j := waitStatus(t, d.f, id, fsm.StatusError)
		if !strings.Contains(string(j.Ops[0].Result), bad.want) {
			t.Errorf("%s: %s, want %q", bad.op, j.Ops[0].Result, bad.want)
		}
		if in := instanceState(d, "res1"); in == nil || !in.Forthcoming {
			t.Fatalf("after a refused commit: %+v", in)
		}
	}
	if in := instanceState(d, "res1"); in.Disks[0].DRBD != nil {
		t.Errorf("a reservation's disk holds a drbd id: %+v", in.Disks[0].DRBD)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","commit":true,"pnode":"n2"}`)
	in := instanceState(d, "res1")
	if in == nil || in.Forthcoming || in.AdminState != fsm.AdminUp {
		t.Fatalf("res1 after commit = %+v", in)
	}
	// Made real, its drbd disk gets its id, the executor its secret.
	if id := in.Disks[0].DRBD; id == nil || id.Port == 0 || len(id.Secret) != 40 || len(id.Ends) != 2 {
		t.Errorf("res1's disk after commit: %+v", id)
	}
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	for _, want := range []string{NodeOpDiskCreate + "@n2", NodeOpDiskCreate + "@n3", NodeOpOSInstall + "@n2", NodeOpStart + "@n2"} {
		if !slices.Contains(nodes.calls, want) {
			t.Errorf("commit made no %s call: %v", want, nodes.calls)
		}
	}
}

// TestReservationResultAndCommitChecks (seed 001): the job of a
// reservation answers the instance's UUID; creating a reservation that
// lacks an OS (a template that installs one) is refused naming what is
// missing, and changes nothing; with the OS given it is created.
func TestReservationResultAndCommitChecks(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":512},"forthcoming":true,"pnode":"n2"}`)
	in := instanceState(d, "res1")
	var uuid string
	if err := json.Unmarshal(j.Ops[0].Result, &uuid); err != nil || in == nil || uuid != in.UUID {
		t.Fatalf("reservation job result %s (%v), want the instance's UUID %+v", j.Ops[0].Result, err, in)
	}
	if len(in.Disks) != 1 || !in.Disks[0].Forthcoming {
		t.Errorf("a reservation's disks %+v: want them forthcoming", in.Disks)
	}
	id := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","commit":true}`)
	j = waitStatus(t, d.f, id, fsm.StatusError)
	if res := string(j.Ops[0].Result); !strings.Contains(res, "reservation res1 cannot be created: it lacks os_type (disk template plain installs an OS; or pass no_install)") {
		t.Errorf("commit without an OS: %s", res)
	}
	if in := instanceState(d, "res1"); in == nil || !in.Forthcoming || len(nodes.calls) != 0 {
		t.Fatalf("after the refused commit: %+v, node calls %v", in, nodes.calls)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"res1","commit":true,"os_type":"debian"}`)
	if in := instanceState(d, "res1"); in == nil || in.Forthcoming || in.OS != "debian" || in.Disks[0].Forthcoming {
		t.Fatalf("after the commit: %+v", in)
	}
}

// TestAlwaysFailover: an instance whose beparams say always_failover is
// failed over when asked to migrate (Ganeti's behaviour): no live
// migration call reaches the agents, and it ends on its secondary.
func TestAlwaysFailover(t *testing.T) {
	d, epoch := instanceSetup(t)
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"af1","disk_template":"drbd","disks":[{"size":1024}],"pnode":"n1","snode":"n2","beparams":{"always_failover":true}}`)
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"af1"}`)
	nodes.mu.Lock()
	calls := append([]string(nil), nodes.calls...)
	nodes.mu.Unlock()
	for _, c := range calls {
		if strings.HasPrefix(c, NodeOpMigrateSend) || strings.HasPrefix(c, NodeOpMigratePrepare) {
			t.Fatalf("a live migration call reached the agents: %v", calls)
		}
	}
	in := instanceState(d, "af1")
	var n2 string
	d.f.Read(func(s *fsm.State, _ uint64) { n2 = s.LookupNode("n2").UUID })
	if in.PrimaryNode != n2 {
		t.Fatalf("af1 is on %s after the migration, want n2; job %s", in.PrimaryNode, j.Ops[0].Result)
	}
	said := false
	for _, l := range j.Ops[0].Log {
		said = said || strings.Contains(l.Msg, "always fail over")
	}
	if !said {
		t.Errorf("the job's log does not say why: %v", j.Ops[0].Log)
	}
}

// TestSharedFileMigrate: a sharedfile instance (its disks on every node)
// live-migrates, or fails over, to the node given as target_node, which
// becomes its primary; without a target, or to its own primary, it is
// refused naming target_node.
func TestSharedFileMigrate(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"vm1","disk_template":"sharedfile","disks":[{"size":1024}],"beparams":{"memory":512},"pnode":"n1"}`)
	if in := instanceState(d, "vm1"); in.PrimaryNode != "n1" || len(in.SecondaryNodes) != 0 {
		t.Fatalf("created: primary %s secondaries %v", in.PrimaryNode, in.SecondaryNodes)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"vm1","target_node":"n3"}`)
	if in := instanceState(d, "vm1"); in.PrimaryNode != "n3" || len(in.SecondaryNodes) != 0 {
		t.Fatalf("after migrating to n3: primary %s secondaries %v", in.PrimaryNode, in.SecondaryNodes)
	}
	if r := nodes.running(); len(r) != 1 || !strings.HasPrefix(r[0], "n3/") {
		t.Fatalf("running after migrating: %v", r)
	}
	// Failover: stopped on n3, started on n2, which becomes its primary.
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"vm1","target_node":"n2"}`)
	if in := instanceState(d, "vm1"); in.PrimaryNode != "n2" || len(in.SecondaryNodes) != 0 {
		t.Fatalf("after failing over to n2: primary %s secondaries %v", in.PrimaryNode, in.SecondaryNodes)
	}
	if r := nodes.running(); len(r) != 1 || !strings.HasPrefix(r[0], "n2/") {
		t.Fatalf("running after the failover: %v", r)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"vm1","target_node":"n3"}`)
	for op, want := range map[string]string{
		`{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"vm1"}`:                   "give the node to fail it over to (target_node)",
		`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"vm1"}`:                    "give the node to migrate it to (target_node)",
		`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"vm1","target_node":"n3"}`: "already has n3 as its primary node",
	} {
		j := waitStatus(t, d.f, submitUUID(t, d, op), fsm.StatusError)
		if !strings.Contains(string(j.Ops[0].Result), want) {
			t.Errorf("%s: %s, want %q", op, j.Ops[0].Result, want)
		}
	}
}

// TestUnnamedReservations (seed 001): reservations may be unnamed — two
// of them, each answering its UUID, found by it; one is named by a rename
// through its UUID and then created; an unnamed one cannot be created
// (it lacks its name, and says so); a real instance still needs a name.
func TestUnnamedReservations(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4, Strategy: fastStrategy, Nodes: nodes})
	var uuids []string
	for i := 0; i < 2; i++ {
		j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","disk_template":"diskless","beparams":{"memory":256},"forthcoming":true}`)
		var u string
		if err := json.Unmarshal(j.Ops[0].Result, &u); err != nil {
			t.Fatalf("result %s: %v", j.Ops[0].Result, err)
		}
		if in := instanceState(d, u); in == nil || in.Name != "" || !in.Forthcoming {
			t.Fatalf("reservation %s: %+v", u, in)
		}
		uuids = append(uuids, u)
	}
	if uuids[0] == uuids[1] {
		t.Fatalf("two reservations with one UUID %s", uuids[0])
	}
	id := submitUUID(t, d, fmt.Sprintf(`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":%q,"commit":true}`, uuids[1]))
	if j := waitStatus(t, d.f, id, fsm.StatusError); !strings.Contains(string(j.Ops[0].Result), "it lacks instance_name") {
		t.Errorf("commit of an unnamed reservation: %s", j.Ops[0].Result)
	}
	runOK(t, d, fmt.Sprintf(`{"OP_ID":"OP_INSTANCE_RENAME","instance_uuid":%q,"new_name":"web7"}`, uuids[0]))
	if in := instanceState(d, "web7"); in == nil || in.UUID != uuids[0] || !in.Forthcoming {
		t.Fatalf("after the rename: %+v", in)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web7","commit":true}`)
	if in := instanceState(d, "web7"); in == nil || in.Forthcoming {
		t.Fatalf("after the commit: %+v", in)
	}
	if in := instanceState(d, uuids[1]); in == nil || in.Name != "" || !in.Forthcoming {
		t.Fatalf("the other reservation: %+v", in)
	}
	if _, err := fsm.ParseOpcode([]byte(`{"OP_ID":"OP_INSTANCE_CREATE","disk_template":"diskless"}`)); err == nil || !strings.Contains(err.Error(), "only a forthcoming instance") {
		t.Errorf("an unnamed real instance: %v", err)
	}
}

// TestReplaceDisksAuto: replace_auto replaces the disks missing on one
// side there; with none missing it does nothing and succeeds; with disks
// missing on both sides it fails saying so, as Ganeti's.
func TestReplaceDisksAuto(t *testing.T) {
	d, nodes, _ := downCluster(t)
	in := instanceState(d, "web1")
	disk := in.Disks[0].UUID
	replaces := func() []string {
		nodes.mu.Lock()
		defer nodes.mu.Unlock()
		var out []string
		for _, c := range nodes.calls {
			if strings.HasPrefix(c, NodeOpDiskReplace+"@") {
				out = append(out, c)
			}
		}
		nodes.calls = nil
		return out
	}
	op := `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_auto"}`

	j := runOK(t, d, op)
	if r := replaces(); len(r) != 0 || !strings.Contains(jobLog(j), "no disks of web1 need replacement") {
		t.Errorf("nothing missing: replaced %v\n%s", r, jobLog(j))
	}

	nodes.mu.Lock()
	delete(nodes.disks["n3/"+in.UUID], disk)
	nodes.mu.Unlock()
	j = runOK(t, d, op)
	if r := replaces(); !slices.Equal(r, []string{NodeOpDiskReplace + "@n3"}) || !strings.Contains(jobLog(j), "faulty disks on the secondary n3: 0") {
		t.Errorf("missing on the secondary: replaced %v\n%s", r, jobLog(j))
	}

	nodes.mu.Lock()
	delete(nodes.disks["n3/"+in.UUID], disk)
	delete(nodes.disks["n2/"+in.UUID], disk)
	nodes.mu.Unlock()
	res, _ := failed(t, d, op)
	if !strings.Contains(res, "faulty on both the primary (n2) and the secondary (n3)") {
		t.Errorf("missing on both sides: %s", res)
	}
	if r := replaces(); len(r) != 0 {
		t.Errorf("missing on both sides: replaced %v", r)
	}
}

// TestActivateDeactivateDisks: activation checks every disk on both
// nodes, attaches them on the primary and answers Ganeti's [node, disk,
// path] rows; a disk missing on a node fails it naming the node and what
// to do; deactivation refuses a running instance and detaches a stopped
// one's disks.
func TestActivateDeactivateDisks(t *testing.T) {
	d, nodes, _ := downCluster(t)
	in := instanceState(d, "web1")
	disk := in.Disks[0].UUID
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS","instance_name":"web1"}`)
	var rows [][]string
	if err := json.Unmarshal(j.Ops[0].Result, &rows); err != nil || len(rows) != 1 ||
		rows[0][0] != "n2" || rows[0][1] != "disk/0" || rows[0][2] != "/disks/n2/"+disk {
		t.Errorf("activate: %s (%v)", j.Ops[0].Result, err)
	}
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_DEACTIVATE_DISKS","instance_name":"web1","force":true}`)
	if !strings.Contains(res, "shut it down before deactivating its disks") {
		t.Errorf("deactivate of a running instance: %s", res)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"}`)
	nodes.mu.Lock()
	nodes.calls = nil
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_DEACTIVATE_DISKS","instance_name":"web1"}`)
	nodes.mu.Lock()
	calls := append([]string(nil), nodes.calls...)
	delete(nodes.disks["n3/"+in.UUID], disk)
	nodes.mu.Unlock()
	if !slices.Contains(calls, NodeOpDiskDetach+"@n2") {
		t.Errorf("deactivate: calls %v, want a disk-detach on n2", calls)
	}
	res, _ = failed(t, d, `{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS","instance_name":"web1"}`)
	if !strings.Contains(res, "disk 0 of web1 is missing on node n3") {
		t.Errorf("activate with a disk missing: %s", res)
	}
}

// TestQueryDataDiskStatus: the /info job (OP_INSTANCE_QUERY_DATA) gives
// each disk's status on the primary and the secondary as Ganeti's
// (dev_path, major, minor, sync_percent, estimated_time, is_degraded,
// ldisk_status), null where the node does not hold the disk or was not
// asked (static), and the instance's hypervisor and parameters.
func TestQueryDataDiskStatus(t *testing.T) {
	d, nodes, _ := downCluster(t)
	in := instanceState(d, "web1")
	disk := in.Disks[0].UUID
	type info struct {
		RunState any              `json:"run_state"`
		BEActual map[string]any   `json:"be_actual"`
		Disks    []map[string]any `json:"disks"`
	}
	query := func(static bool) info {
		t.Helper()
		op := `{"OP_ID":"OP_INSTANCE_QUERY_DATA","instances":["web1"],"static":` + strconv.FormatBool(static) + `}`
		j := runOK(t, d, op)
		var res map[string]info
		if err := json.Unmarshal(j.Ops[0].Result, &res); err != nil {
			t.Fatalf("%s: %v", j.Ops[0].Result, err)
		}
		return res["web1"]
	}
	got := query(false)
	want := func(node string) string {
		return `["/disks/` + node + `/` + disk + `",null,null,null,null,false,1]`
	}
	for field, node := range map[string]string{"pstatus": "n2", "sstatus": "n3"} {
		b, _ := json.Marshal(got.Disks[0][field])
		if string(b) != want(node) {
			t.Errorf("%s = %s, want %s", field, b, want(node))
		}
	}
	if got.RunState != "up" || got.BEActual["maxmem"] != float64(512) || got.BEActual["vcpus"] != float64(1) {
		t.Errorf("run_state %v, be_actual %v", got.RunState, got.BEActual)
	}

	nodes.mu.Lock()
	delete(nodes.disks["n3/"+in.UUID], disk)
	nodes.mu.Unlock()
	if s := query(false).Disks[0]["sstatus"]; s != nil {
		t.Errorf("sstatus of a disk the secondary lacks = %v, want null", s)
	}
	if st := query(true); st.Disks[0]["pstatus"] != nil || st.RunState != nil {
		t.Errorf("static: pstatus %v, run_state %v, want null", st.Disks[0]["pstatus"], st.RunState)
	}
}
