package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/agent"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestAgentTypesMirror: the node RPC's status and handoff types carry
// every field of the agent's, with the same JSON.
func TestAgentTypesMirror(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	st := agent.Status{
		UUID: "u", Name: "n", State: agent.StateReceived, OS: "debian", BootID: "b",
		Disks:     []agent.DiskStatus{{UUID: "d", SizeMiB: 5, Attached: true, Generation: "g"}},
		Migration: &agent.MigrationState{ID: "m", Role: agent.RoleTarget, Phase: agent.PhaseReceived, PeerNode: "p", Peer: "1.2.3.4:1811", Changed: at},
		LastOp:    &agent.LastOp{Op: agent.OpMigrateReceive, OpID: "o", At: at, Changed: true, Error: "e"},
	}
	same := func(what string, a, b any) {
		t.Helper()
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Fatalf("%s differs:\n%s\n%s", what, ja, jb)
		}
	}
	same("status", st, toNodeStatus(st))
	h := agent.Handoff{Migration: "m", Source: "s", Instance: fsm.Instance{Name: "i", UUID: "u"}, BootID: "b", OS: "debian", MemoryMiB: 7, Transferred: at}
	same("handoff", h, toNodeHandoff(h))
	same("handoff back", h, toHandoff(toNodeHandoff(h)))
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

const testClusterKey = "0123456789abcdef0123456789abcdef01234567\n"

// agentOnly is the agent part of a gntd, on 127.0.0.1 and a free port.
func agentOnly(t *testing.T, name string, cfg Config) (*Server, *rpc.NodeClient) {
	t.Helper()
	cfg.Name, cfg.Bind, cfg.AgentPort, cfg.Profile = name, "127.0.0.1", freePort(t), "dev"
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	s := &Server{cfg: cfg, log: hclog.NewNullLogger(), key: []byte(testClusterKey)}
	s.tls.store = testIdentity(t, name)
	ctx, cancel := context.WithCancel(context.Background())
	done, err := s.startAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.AgentPort))
	return s, rpc.NewNodeClientTLS(name, addr, rpc.NodeKey([]byte(testClusterKey)), rpc.NewNodeTransport(testIdentity(t, "leader").ClientTLS()))
}

// TestAgentOverRPC: two gntd agents with fake drivers; an instance is
// created, started and migrated from one to the other through the node
// RPC (the handoff goes from agent to agent), and the drivers' errors
// arrive with their codes.
func TestAgentOverRPC(t *testing.T) {
	ctx := context.Background()
	_, c1 := agentOnly(t, "node21", Config{})
	_, c2 := agentOnly(t, "node22", Config{Debug: true})
	inst := fsm.Instance{Name: "web1", UUID: "0b8f5a44-1d2e-4c3b-9a8f-7e6d5c4b3a21", OS: "gnt-image+default", MemoryMiB: 256,
		Disks: []fsm.Disk{{UUID: "disk-a", SizeMiB: 1024, Mode: "rw"}}}
	// The dev profile's search path starts with <data-dir>/os, where the
	// agent installed the shipped gnt-image.
	rep, err := c1.OSList(ctx)
	if err != nil || len(rep.OSes) == 0 || rep.OSes[0].Name != "gnt-image" || !rep.OSes[0].Valid || len(rep.SearchPath) != 4 {
		t.Fatalf("os-list: %+v, %v", rep, err)
	}

	if _, err := c1.Start(ctx, inst); !errors.Is(err, rpc.ErrNodeState) {
		t.Fatalf("start without disks: %v", err)
	}
	if _, err := c1.Status(ctx, inst); !errors.Is(err, rpc.ErrNodeNotFound) {
		t.Fatalf("status of an unknown instance: %v", err)
	}
	for _, c := range []*rpc.NodeClient{c1, c2} {
		if r, err := c.DiskCreate(ctx, inst, "disk-a"); err != nil || !r.Changed || r.Driver != "fake" {
			t.Fatalf("disk-create on %s: %+v %v", c.Node, r, err)
		}
	}
	if r, err := c1.InstallOS(ctx, inst, "job-1"); err != nil || !strings.Contains(r.Output, "gnt-image: wrote the marker of web1 (gnt-image+default)") {
		t.Fatalf("os-install: %+v, %v", r, err)
	}
	bad := inst
	bad.OS = "nosuch"
	if _, err := c1.InstallOS(ctx, bad, "job-1b"); err == nil || !strings.Contains(err.Error(), "unknown OS: no OS nosuch in the search path") {
		t.Fatalf("os-install of an unknown OS: %v", err)
	}
	if _, err := c1.Start(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if r, err := c1.Start(ctx, inst); err != nil || r.Changed {
		t.Fatalf("second start: %+v %v", r, err)
	}
	st, err := c1.Status(ctx, inst)
	if err != nil || st.State != rpc.NodeStateRunning || st.OS != "gnt-image+default" || len(st.Disks) != 1 || !st.Disks[0].Attached {
		t.Fatalf("status: %+v %v", st, err)
	}
	boot := st.BootID

	if _, err := c2.MigratePrepare(ctx, inst, "mig-1", "node21"); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.MigrateSend(ctx, inst, "mig-1", "node22", c2.Addr); err != nil {
		t.Fatalf("send: %v", err)
	}
	if _, err := c2.MigrateFinish(ctx, inst, "mig-1"); err != nil {
		t.Fatal(err)
	}
	s1, _ := c1.Status(ctx, inst)
	s2, _ := c2.Status(ctx, inst)
	if s1.State != rpc.NodeStateStopped || s2.State != rpc.NodeStateRunning || s2.BootID != boot {
		t.Fatalf("after migration: node21 %+v, node22 %+v", s1, s2)
	}
	if _, err := c1.MigrateAbort(ctx, inst, "mig-1"); !errors.Is(err, rpc.ErrNodeState) {
		t.Fatalf("abort after send: %v", err)
	}

	// A handoff needs the target to be prepared for it.
	if _, err := c1.MigrateReceive(ctx, rpc.NodeHandoff{Migration: "mig-9", Instance: inst, BootID: "x"}); !errors.Is(err, rpc.ErrNodeState) {
		t.Fatalf("handoff without preparation: %v", err)
	}

	// Faults through the RPC need --debug; node22 has it.
	if _, err := c1.SetFault(ctx, rpc.NodeFault{Op: "instance-stop", Error: "x"}); err == nil {
		t.Fatal("debug-fault accepted without --debug")
	}
	faults, err := c2.SetFault(ctx, rpc.NodeFault{Op: "instance-stop", Error: "guest agent wedged", Times: 1})
	if err != nil || len(faults) != 1 || faults[0].Times != 1 {
		t.Fatalf("set fault: %+v %v", faults, err)
	}
	_, err = c2.Stop(ctx, inst, time.Second, false)
	var ne *rpc.NodeError
	if !errors.Is(err, rpc.ErrNodeFailed) || !errors.As(err, &ne) || ne.Output == "" {
		t.Fatalf("stop with an injected failure: %v", err)
	}
	if r, err := c2.Stop(ctx, inst, time.Second, false); err != nil || !r.Changed {
		t.Fatalf("stop after the one-time fault: %+v %v", r, err)
	}
	if faults, err := c2.SetFault(ctx, rpc.NodeFault{Clear: true}); err != nil || len(faults) != 0 {
		t.Fatalf("clear: %+v %v", faults, err)
	}

	// bridges-exist: the fake node has every bridge; a bad name is
	// refused by the decoder.
	if res, err := c1.Do(ctx, rpc.NodeRequest{Op: rpc.NodeOpBridgesExist, Bridges: []string{"br0", "xen-br0"}}); err != nil || len(res.MissingBridges) != 0 {
		t.Fatalf("bridges-exist: %v %v", res.MissingBridges, err)
	}
	if _, err := c1.Do(ctx, rpc.NodeRequest{Op: rpc.NodeOpBridgesExist, Bridges: []string{"br/0"}}); !errors.Is(err, rpc.ErrNodeBadRequest) {
		t.Fatalf("bridges-exist of a bad name: %v", err)
	}
}

// TestAgentExecDriver: with --hypervisor exec and no hooks directory the
// agent still serves, and every operation is "not supported".
func TestAgentExecDriver(t *testing.T) {
	_, c := agentOnly(t, "node21", Config{Hypervisor: HypervisorExec, HooksDir: t.TempDir() + "/missing"})
	inst := fsm.Instance{Name: "web1", UUID: "u1"}
	ctx := context.Background()
	if _, err := c.Start(ctx, inst); !errors.Is(err, rpc.ErrNodeNotSupported) {
		t.Fatalf("start: %v", err)
	}
	if _, err := c.MigrateReceive(ctx, rpc.NodeHandoff{Migration: "m", Instance: inst, BootID: "b"}); !errors.Is(err, rpc.ErrNodeNotSupported) {
		t.Fatalf("receive: %v", err)
	}
	if _, err := c.SetFault(ctx, rpc.NodeFault{Clear: true}); err == nil {
		t.Fatal("debug-fault without --debug")
	}
	// The scripts connect the NICs: no bridge is checked, and it says so.
	if r, err := c.Do(ctx, rpc.NodeRequest{Op: rpc.NodeOpBridgesExist, Bridges: []string{"br0"}}); err != nil || len(r.MissingBridges) != 0 || !strings.Contains(r.Output, "does not check bridges") {
		t.Fatalf("bridges-exist on exec: %+v %v", r, err)
	}
}

// TestHypervisorChoice: the dev profile defaults to the fake driver, any
// other to exec; an explicit choice wins.
func TestHypervisorChoice(t *testing.T) {
	for _, tc := range []struct{ profile, hv, want string }{
		{"dev", "", HypervisorFake}, {"lan", "", HypervisorExec}, {"", "", HypervisorExec},
		{"dev", HypervisorExec, HypervisorExec}, {"lan", HypervisorFake, HypervisorFake},
	} {
		c := Config{Profile: tc.profile, Hypervisor: tc.hv}
		if got := c.HypervisorName(); got != tc.want {
			t.Errorf("profile %q hypervisor %q: %s, want %s", tc.profile, tc.hv, got, tc.want)
		}
	}
}

// TestAgentOpsAreNodeOps: the node RPC offers every agent operation under
// its name, plus debug-fault and the operator commands (diagnose,
// repair-command), the OS list and the storage operations, and nothing
// else.
func TestAgentOpsAreNodeOps(t *testing.T) {
	want := map[string]bool{rpc.NodeOpDebugFault: true, string(agent.OpDiagnose): true, string(agent.OpRepairCommand): true, string(agent.OpOSList): true,
		string(agent.OpStorageList): true, string(agent.OpStorageModify): true, string(agent.OpStorageRepair): true}
	for _, op := range agent.Ops {
		want[string(op)] = true
	}
	got := map[string]bool{}
	for _, op := range rpc.NodeOps() {
		got[op] = true
		if !want[op] {
			t.Errorf("node RPC operation %s is no agent operation", op)
		}
	}
	for op := range want {
		if !got[op] {
			t.Errorf("agent operation %s is not offered by the node RPC", op)
		}
	}
}
