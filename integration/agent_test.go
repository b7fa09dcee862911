package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestNodeAgentLifecycle drives an instance's life on the nodes' agents
// over the network, as the leader's opcodes will: disks on both nodes of a
// drbd instance, OS install, start, a live migration from node21 to node22
// (the handoff goes agent to agent), a kill -9 and restart of node22's
// gntd that the running instance survives, an injected failure through
// the debug RPC, stop, remove. Every step is asked twice: the second time
// changes nothing. Requests are signed with the cluster key from a
// member's data dir; an unsigned one and a replayed one are refused.
func TestNodeAgentLifecycle(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 2, ExtraArgs: []string{"--debug"}})
	n21, n22 := c.Member("node21"), c.Member("node22")
	c.WaitAgent(n21, 30*time.Second)
	c.WaitAgent(n22, 30*time.Second)
	a21, a22 := c.NodeClient(n21), c.NodeClient(n22)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	uuidOf := func(name string) string {
		info, err := c.Client().Node(ctx, name)
		if err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
		return info.UUID
	}
	inst := fsm.Instance{
		Name: "web1.example.com", UUID: "5f0c6d2e-8a41-4b7e-9c3d-2a1b0e9f8d7c", DiskTemplate: "drbd",
		PrimaryNode: uuidOf("node21"), SecondaryNodes: []string{uuidOf("node22")},
		OS: "gnt-image+default", MemoryMiB: 512, VCPUs: 1, AdminState: "up",
		Disks: []fsm.Disk{
			{UUID: "8c1d9e2f-0000-4000-8000-000000000001", SizeMiB: 10240, Mode: "rw"},
			{UUID: "8c1d9e2f-0000-4000-8000-000000000002", SizeMiB: 1024, Mode: "rw"},
		},
		NICs: []fsm.NIC{{UUID: "nic0", MAC: "aa:00:00:4e:11:01"}},
	}
	twice := func(what string, op func() (rpc.NodeResult, error)) rpc.NodeResult {
		t.Helper()
		r, err := op()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !r.Changed || r.Driver != "fake" {
			t.Fatalf("%s: %+v", what, r)
		}
		again, err := op()
		if err != nil || again.Changed {
			t.Fatalf("%s again: %+v %v", what, again, err)
		}
		return r
	}
	status := func(a *rpc.NodeClient) rpc.NodeInstanceStatus {
		t.Helper()
		st, err := a.Status(ctx, inst)
		if err != nil {
			t.Fatalf("status on %s: %v", a.Node, err)
		}
		return st
	}

	for _, a := range []*rpc.NodeClient{a21, a22} {
		for _, d := range inst.Disks {
			twice("disk-create on "+a.Node, func() (rpc.NodeResult, error) { return a.DiskCreate(ctx, inst, d.UUID) })
		}
	}
	r := twice("os-install", func() (rpc.NodeResult, error) { return a21.InstallOS(ctx, inst, "job-1-op-0-install") })
	if !strings.Contains(r.Output, "gnt-image: wrote the marker of web1.example.com (gnt-image+default)") {
		t.Fatalf("os-install output: %q", r.Output)
	}
	twice("instance-start", func() (rpc.NodeResult, error) { return a21.Start(ctx, inst) })
	st := status(a21)
	if st.State != rpc.NodeStateRunning || st.BootID == "" || len(st.Disks) != 2 || !st.Disks[1].Attached {
		t.Fatalf("after start: %+v", st)
	}
	boot := st.BootID

	// An unsigned request, and a signed one sent twice.
	body, h, err := rpc.SignNodeRequest(c.NodeKey(n21), rpc.NodeRequest{Node: "node21", Nonce: rpc.NewNonce(), Op: rpc.NodeOpStatus, Instance: &inst}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nodeHTTP := &http.Client{Transport: rpc.NewNodeTransport(c.NodeTLS())}
	post := func(h http.Header) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+n21.AgentAddr()+rpc.NodePath, bytes.NewReader(body))
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := nodeHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ne rpc.NodeError
		json.NewDecoder(resp.Body).Decode(&ne)
		return resp.StatusCode, ne.ErrorCode
	}
	if code, ec := post(nil); code != http.StatusUnauthorized || ec != rpc.NodeCodeUnauthorized {
		t.Fatalf("unsigned: %d %s", code, ec)
	}
	if code, _ := post(h); code != http.StatusOK {
		t.Fatalf("signed: %d", code)
	}
	if code, ec := post(h); code != http.StatusUnauthorized || ec != rpc.NodeCodeReplayed {
		t.Fatalf("replayed: %d %s", code, ec)
	}

	// Live migration to the secondary.
	const mig = "job-2-op-0-migrate"
	twice("migrate-prepare", func() (rpc.NodeResult, error) { return a22.MigratePrepare(ctx, inst, mig, "node21") })
	twice("migrate-send", func() (rpc.NodeResult, error) { return a21.MigrateSend(ctx, inst, mig, "node22", n22.AgentAddr()) })
	twice("migrate-finish", func() (rpc.NodeResult, error) { return a22.MigrateFinish(ctx, inst, mig) })
	src, dst := status(a21), status(a22)
	if src.State != rpc.NodeStateStopped || src.Migration == nil || src.Migration.Phase != "sent" {
		t.Fatalf("source after migration: %+v", src)
	}
	if dst.State != rpc.NodeStateRunning || dst.BootID != boot || dst.OS != inst.OS || dst.Migration == nil || dst.Migration.Phase != "finished" {
		t.Fatalf("target after migration: %+v (boot id before: %s)", dst, boot)
	}

	// node22's gntd dies and comes back: the instance's record is still there.
	n22.Kill()
	if _, err := a22.Status(ctx, inst); !errors.Is(err, rpc.ErrNodeTransport) {
		t.Fatalf("status of a dead agent: %v", err)
	}
	n22.Start(t)
	c.WaitAgent(n22, 30*time.Second)
	if after := status(a22); after.State != rpc.NodeStateRunning || after.BootID != boot || len(after.Disks) != 2 || after.OS != inst.OS {
		t.Fatalf("after restart of node22: %+v", after)
	}

	// A one-time injected failure of stop, set through the debug RPC.
	if _, err := a22.SetFault(ctx, rpc.NodeFault{Op: rpc.NodeOpStop, Error: "guest ignores ACPI", Times: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = a22.Stop(ctx, inst, 10*time.Second, false)
	var ne *rpc.NodeError
	if !errors.Is(err, rpc.ErrNodeFailed) || !errors.As(err, &ne) || !strings.Contains(ne.Message, "guest ignores ACPI") || ne.Output == "" {
		t.Fatalf("stop with an injected failure: %v", err)
	}
	if st := status(a22); st.State != rpc.NodeStateRunning || st.LastOp == nil || st.LastOp.Error == "" {
		t.Fatalf("after the failed stop: %+v", st)
	}
	twice("instance-stop", func() (rpc.NodeResult, error) { return a22.Stop(ctx, inst, 10*time.Second, false) })

	for _, a := range []*rpc.NodeClient{a21, a22} {
		twice("instance-remove on "+a.Node, func() (rpc.NodeResult, error) { return a.Remove(ctx, inst) })
		if _, err := a.Status(ctx, inst); !errors.Is(err, rpc.ErrNodeNotFound) {
			t.Fatalf("status on %s after remove: %v", a.Node, err)
		}
		if list, err := a.List(ctx); err != nil || len(list) != 0 {
			t.Fatalf("list on %s after remove: %+v %v", a.Node, list, err)
		}
	}
}
