package rpc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

var nodeKey = rpc.NodeKey([]byte("0123456789abcdef0123456789abcdef01234567\n"))

// stubAgent records the requests it gets and answers with answer.
type stubAgent struct {
	mu     sync.Mutex
	reqs   []rpc.NodeRequest
	answer func(ctx context.Context, req rpc.NodeRequest) (rpc.NodeResult, error)
}

func (a *stubAgent) Call(ctx context.Context, req rpc.NodeRequest) (rpc.NodeResult, error) {
	a.mu.Lock()
	a.reqs = append(a.reqs, req)
	a.mu.Unlock()
	if a.answer != nil {
		return a.answer(ctx, req)
	}
	res := rpc.NodeResult{Driver: "stub", Changed: true, Output: "did " + req.Op}
	switch req.Op {
	case rpc.NodeOpStatus:
		res.Status = &rpc.NodeInstanceStatus{UUID: req.Instance.UUID, State: rpc.NodeStateRunning, Disks: []rpc.NodeDisk{}}
	case rpc.NodeOpList:
		res.Instances = []rpc.NodeInstanceStatus{{UUID: "u1", State: rpc.NodeStateStopped}}
	}
	return res, nil
}

func (a *stubAgent) calls() []rpc.NodeRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]rpc.NodeRequest(nil), a.reqs...)
}

func nodeServer(t *testing.T, o rpc.NodeServerOptions) (*httptest.Server, *stubAgent) {
	t.Helper()
	a := &stubAgent{}
	if o.Agent == nil {
		o.Agent = a
	}
	if o.Node == "" {
		o.Node = "node21"
	}
	if o.Key == nil {
		o.Key = func() []byte { return nodeKey }
	}
	srv := httptest.NewServer(rpc.NewNodeServer(o).Handler())
	t.Cleanup(srv.Close)
	return srv, a
}

func clientOf(srv *httptest.Server, node string) *rpc.NodeClient {
	return rpc.NewNodeClient(node, strings.TrimPrefix(srv.URL, "http://"), nodeKey)
}

func nodeInstance() fsm.Instance {
	return fsm.Instance{Name: "web1", UUID: "7d3c5a0e-1111-4222-8333-444455556666", OS: "debian",
		Disks: []fsm.Disk{{UUID: "disk-0", SizeMiB: 1024, Mode: "rw"}}}
}

// TestNodeClientOps: every typed method sends its operation with its
// fields, signed, and the answer comes back.
func TestNodeClientOps(t *testing.T) {
	srv, agent := nodeServer(t, rpc.NodeServerOptions{Debug: true})
	c := clientOf(srv, "node21")
	ctx := context.Background()
	inst := nodeInstance()
	type call struct {
		op  string
		run func() (rpc.NodeResult, error)
		chk func(r rpc.NodeRequest) bool
	}
	calls := []call{
		{rpc.NodeOpStart, func() (rpc.NodeResult, error) { return c.Start(ctx, inst) }, nil},
		{rpc.NodeOpStop, func() (rpc.NodeResult, error) { return c.Stop(ctx, inst, 90*time.Second, true) },
			func(r rpc.NodeRequest) bool { return r.Timeout == 90 && r.Force }},
		{rpc.NodeOpReboot, func() (rpc.NodeResult, error) { return c.Reboot(ctx, inst, "j1", "soft") },
			func(r rpc.NodeRequest) bool { return r.OpID == "j1" && r.RebootType == "soft" }},
		{rpc.NodeOpRemove, func() (rpc.NodeResult, error) { return c.Remove(ctx, inst) }, nil},
		{rpc.NodeOpDiskCreate, func() (rpc.NodeResult, error) { return c.DiskCreate(ctx, inst, "disk-0") },
			func(r rpc.NodeRequest) bool { return r.Disk == "disk-0" }},
		{rpc.NodeOpDiskRemove, func() (rpc.NodeResult, error) { return c.DiskRemove(ctx, inst, "disk-0") }, nil},
		{rpc.NodeOpDiskAttach, func() (rpc.NodeResult, error) { return c.DiskAttach(ctx, inst, "disk-0") }, nil},
		{rpc.NodeOpDiskDetach, func() (rpc.NodeResult, error) { return c.DiskDetach(ctx, inst, "disk-0") }, nil},
		{rpc.NodeOpDiskReplace, func() (rpc.NodeResult, error) { return c.DiskReplace(ctx, inst, "disk-0", "j2") },
			func(r rpc.NodeRequest) bool { return r.OpID == "j2" && r.Disk == "disk-0" }},
		{rpc.NodeOpOSInstall, func() (rpc.NodeResult, error) { return c.InstallOS(ctx, inst, "j3") }, nil},
		{rpc.NodeOpMigratePrepare, func() (rpc.NodeResult, error) { return c.MigratePrepare(ctx, inst, "m1", "node22") },
			func(r rpc.NodeRequest) bool { return r.Migration == "m1" && r.PeerNode == "node22" }},
		{rpc.NodeOpMigrateSend, func() (rpc.NodeResult, error) {
			return c.MigrateSend(ctx, inst, "m1", "node22", "127.0.0.22:1811")
		}, func(r rpc.NodeRequest) bool { return r.Peer == "127.0.0.22:1811" && r.PeerNode == "node22" }},
		{rpc.NodeOpMigrateReceive, func() (rpc.NodeResult, error) {
			return c.MigrateReceive(ctx, rpc.NodeHandoff{Migration: "m1", Source: "node22", Instance: inst, BootID: "b"})
		}, func(r rpc.NodeRequest) bool { return r.Handoff.BootID == "b" && r.Instance == nil }},
		{rpc.NodeOpMigrateFinish, func() (rpc.NodeResult, error) { return c.MigrateFinish(ctx, inst, "m1") }, nil},
		{rpc.NodeOpMigrateAbort, func() (rpc.NodeResult, error) { return c.MigrateAbort(ctx, inst, "m1") }, nil},
		{rpc.NodeOpDebugFault, func() (rpc.NodeResult, error) {
			_, err := c.SetFault(ctx, rpc.NodeFault{Op: rpc.NodeOpStart, Error: "boom"})
			return rpc.NodeResult{Changed: true, Output: "did debug-fault"}, err
		}, func(r rpc.NodeRequest) bool { return r.Fault.Error == "boom" }},
	}
	for i, cl := range calls {
		res, err := cl.run()
		if err != nil || !res.Changed || res.Output != "did "+cl.op {
			t.Fatalf("%s: %+v %v", cl.op, res, err)
		}
		got := agent.calls()[i]
		if got.Op != cl.op || got.Node != "node21" || len(got.Nonce) < 8 {
			t.Fatalf("%s: the agent got %+v", cl.op, got)
		}
		if got.Instance != nil && got.Instance.UUID != inst.UUID {
			t.Fatalf("%s: instance %+v", cl.op, got.Instance)
		}
		if cl.chk != nil && !cl.chk(got) {
			t.Fatalf("%s: fields %+v", cl.op, got)
		}
	}
	st, err := c.Status(ctx, inst)
	if err != nil || st.UUID != inst.UUID || st.State != rpc.NodeStateRunning {
		t.Fatalf("status: %+v %v", st, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// Equal requests one after the other are distinct (nonce), so the
	// replay cache lets both through.
	for i := 0; i < 3; i++ {
		if _, err := c.Status(ctx, inst); err != nil {
			t.Fatalf("repeated status: %v", err)
		}
	}
}

// TestNodeClientErrors: the node's refusals arrive typed, with the
// output of a failed operation; no answer is a transport error.
func TestNodeClientErrors(t *testing.T) {
	inst := nodeInstance()
	ctx := context.Background()
	answers := map[string]error{
		rpc.NodeOpStart:      &rpc.NodeError{ErrorCode: rpc.NodeCodeFailed, Message: "instance-start failed", Output: "no bridge br0"},
		rpc.NodeOpStop:       rpc.NewNodeError(rpc.NodeCodeState, "incoming"),
		rpc.NodeOpStatus:     rpc.NewNodeError(rpc.NodeCodeNotFound, "instance %s", inst.UUID),
		rpc.NodeOpDiskAttach: rpc.NewNodeError(rpc.NodeCodeNotSupported, "no disk-attach script"),
		rpc.NodeOpRemove:     errors.New("disk full"),
	}
	a := &stubAgent{answer: func(_ context.Context, req rpc.NodeRequest) (rpc.NodeResult, error) {
		return rpc.NodeResult{}, answers[req.Op]
	}}
	srv, _ := nodeServer(t, rpc.NodeServerOptions{Agent: a})
	c := clientOf(srv, "node21")

	_, err := c.Start(ctx, inst)
	var ne *rpc.NodeError
	if !errors.Is(err, rpc.ErrNodeFailed) || !errors.As(err, &ne) || ne.Output != "no bridge br0" || ne.Op != rpc.NodeOpStart ||
		ne.Node != "node21" || ne.Status != http.StatusInternalServerError || !strings.Contains(err.Error(), "no bridge br0") {
		t.Fatalf("failed start: %#v", err)
	}
	if _, err := c.Stop(ctx, inst, 0, false); !errors.Is(err, rpc.ErrNodeState) || errors.Is(err, rpc.ErrNodeFailed) {
		t.Fatalf("stop: %v", err)
	}
	if _, err := c.Status(ctx, inst); !errors.Is(err, rpc.ErrNodeNotFound) {
		t.Fatalf("status: %v", err)
	}
	if _, err := c.DiskAttach(ctx, inst, "disk-0"); !errors.Is(err, rpc.ErrNodeNotSupported) {
		t.Fatalf("attach: %v", err)
	}
	if _, err := c.Remove(ctx, inst); !errors.Is(err, rpc.ErrNodeFailed) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("remove with a plain error: %v", err)
	}
	if _, err := clientOf(srv, "node22").Start(ctx, inst); !errors.As(err, &ne) || ne.ErrorCode != rpc.NodeCodeWrongNode {
		t.Fatalf("request for another node: %v", err)
	}
	if _, err := rpc.NewNodeClient("node21", strings.TrimPrefix(srv.URL, "http://"), []byte("wrong key")).Start(ctx, inst); !errors.Is(err, rpc.ErrNodeUnauthorized) {
		t.Fatalf("wrong key: %v", err)
	}

	// Nobody listening.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	_, err = rpc.NewNodeClient("node21", addr, nodeKey).Start(ctx, inst)
	var te *rpc.NodeTransportError
	if !errors.Is(err, rpc.ErrNodeTransport) || !errors.As(err, &te) || te.Addr != addr || errors.Is(err, rpc.ErrNodeFailed) {
		t.Fatalf("no listener: %v", err)
	}
}

// TestNodeOperationOutlivesCaller: a caller that gives up gets a transport
// error; the operation itself runs on to its end, so a retry finds it done.
func TestNodeOperationOutlivesCaller(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan error, 1)
	a := &stubAgent{answer: func(ctx context.Context, req rpc.NodeRequest) (rpc.NodeResult, error) {
		select {
		case <-release:
			finished <- ctx.Err()
		case <-ctx.Done():
			finished <- ctx.Err()
		}
		return rpc.NodeResult{Changed: true}, nil
	}}
	srv, _ := nodeServer(t, rpc.NodeServerOptions{Agent: a})
	c := clientOf(srv, "node21")
	c.OpTimeout = 100 * time.Millisecond
	_, err := c.Start(context.Background(), nodeInstance())
	if !errors.Is(err, rpc.ErrNodeTransport) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller's timeout: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-finished; err != nil {
		t.Fatalf("the operation's context ended with its caller: %v", err)
	}
}

// rawNode sends body with the given headers and returns the status and
// the decoded error.
func rawNode(t *testing.T, srv *httptest.Server, method, path string, body []byte, h http.Header) (int, rpc.NodeError) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ne rpc.NodeError
	if resp.StatusCode != http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&ne); err != nil || ne.ErrorCode == "" || ne.Status != resp.StatusCode {
			t.Fatalf("error answer %d is not a node error: %v %+v", resp.StatusCode, err, ne)
		}
	}
	return resp.StatusCode, ne
}

func signed(t *testing.T, key []byte, body string, ts time.Time) ([]byte, http.Header) {
	t.Helper()
	h := http.Header{}
	h.Set(rpc.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(rpc.HeaderSignature, rpc.Sign(key, ts.Unix(), []byte(body)))
	return []byte(body), h
}

// TestNodeRPCBadInput: requests that are unsigned, stale, replayed,
// malformed, of unknown operations or for another node are refused with
// their code, and the agent is never called.
func TestNodeRPCBadInput(t *testing.T) {
	const start = `{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1","name":"web1"}}`
	now := time.Now()
	valid := func(body string) func() ([]byte, http.Header) {
		return func() ([]byte, http.Header) { return signed(t, nodeKey, body, now) }
	}
	cases := []struct {
		name   string
		method string
		path   string
		req    func() ([]byte, http.Header)
		status int
		code   string
		field  string
	}{
		{"unsigned", "POST", rpc.NodePath, func() ([]byte, http.Header) { return []byte(start), nil }, 401, rpc.NodeCodeUnauthorized, ""},
		{"signature over another body", "POST", rpc.NodePath, func() ([]byte, http.Header) {
			_, h := signed(t, nodeKey, start, now)
			return []byte(strings.Replace(start, "instance-start", "instance-stop", 1)), h
		}, 401, rpc.NodeCodeUnauthorized, ""},
		{"signed with another key", "POST", rpc.NodePath, func() ([]byte, http.Header) {
			return signed(t, rpc.DeriveKey([]byte("0123456789abcdef0123456789abcdef01234567\n"), rpc.JoinKeyLabel), start, now)
		}, 401, rpc.NodeCodeUnauthorized, ""},
		{"stale", "POST", rpc.NodePath, func() ([]byte, http.Header) { return signed(t, nodeKey, start, now.Add(-301*time.Second)) }, 401, rpc.NodeCodeUnauthorized, ""},
		{"from the future", "POST", rpc.NodePath, func() ([]byte, http.Header) { return signed(t, nodeKey, start, now.Add(400*time.Second)) }, 401, rpc.NodeCodeUnauthorized, ""},
		{"timestamp not a number", "POST", rpc.NodePath, func() ([]byte, http.Header) {
			b, h := signed(t, nodeKey, start, now)
			h.Set(rpc.HeaderTimestamp, "yesterday")
			return b, h
		}, 401, rpc.NodeCodeUnauthorized, ""},
		{"signature not hex", "POST", rpc.NodePath, func() ([]byte, http.Header) {
			b, h := signed(t, nodeKey, start, now)
			h.Set(rpc.HeaderSignature, "zz")
			return b, h
		}, 401, rpc.NodeCodeUnauthorized, ""},
		{"unknown op", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-explode","instance":{"uuid":"u1"}}`), 400, rpc.NodeCodeUnknownOp, "op"},
		{"no op", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab"}`), 400, rpc.NodeCodeUnknownOp, "op"},
		{"bad JSON", "POST", rpc.NodePath, valid(`{"node":"node21",`), 400, rpc.NodeCodeBadRequest, ""},
		{"not an object", "POST", rpc.NodePath, valid(`["instance-start"]`), 400, rpc.NodeCodeBadRequest, ""},
		{"empty", "POST", rpc.NodePath, valid(``), 400, rpc.NodeCodeBadRequest, ""},
		{"trailing data", "POST", rpc.NodePath, valid(start + `{}`), 400, rpc.NodeCodeBadRequest, ""},
		{"op of the wrong type", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":5}`), 400, rpc.NodeCodeBadRequest, "op"},
		{"instance of the wrong type", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":"web1"}`), 400, rpc.NodeCodeBadRequest, "instance"},
		{"timeout of the wrong type", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-stop","instance":{"uuid":"u1"},"timeout":"90s"}`), 400, rpc.NodeCodeBadRequest, "timeout"},
		{"negative timeout", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-stop","instance":{"uuid":"u1"},"timeout":-1}`), 400, rpc.NodeCodeBadRequest, "timeout"},
		{"reboot timeout beyond a day", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-reboot","instance":{"uuid":"u1"},"op_id":"x","timeout":86401}`), 400, rpc.NodeCodeBadRequest, "timeout"},
		{"timeout of an op without a shutdown", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1"},"timeout":5}`), 400, rpc.NodeCodeBadRequest, "timeout"},
		{"unknown field", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1"},"colour":"blue"}`), 400, rpc.NodeCodeBadRequest, "colour"},
		{"unknown instance field", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1","colour":"blue"}}`), 400, rpc.NodeCodeBadRequest, "colour"},
		{"no instance", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start"}`), 400, rpc.NodeCodeBadRequest, "instance"},
		{"instance without uuid", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"name":"web1"}}`), 400, rpc.NodeCodeBadRequest, "instance.uuid"},
		{"disk op without disk", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"disk-create","instance":{"uuid":"u1"}}`), 400, rpc.NodeCodeBadRequest, "disk"},
		{"field the op does not take", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1"},"disk":"d0"}`), 400, rpc.NodeCodeBadRequest, "disk"},
		{"reboot without op id", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-reboot","instance":{"uuid":"u1"}}`), 400, rpc.NodeCodeBadRequest, "op_id"},
		{"bad reboot type", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-reboot","instance":{"uuid":"u1"},"op_id":"x","reboot_type":"gentle"}`), 400, rpc.NodeCodeBadRequest, "reboot_type"},
		{"send without peer", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"migrate-send","instance":{"uuid":"u1"},"migration":"m","peer_node":"node22"}`), 400, rpc.NodeCodeBadRequest, "peer"},
		{"peer not host:port", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"migrate-send","instance":{"uuid":"u1"},"migration":"m","peer_node":"node22","peer":"node22"}`), 400, rpc.NodeCodeBadRequest, "peer"},
		{"receive without handoff", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"migrate-receive"}`), 400, rpc.NodeCodeBadRequest, "handoff"},
		{"uid pool on a stop", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-stop","instance":{"uuid":"u1"},"uid_pool":[[1000,1001]]}`), 400, rpc.NodeCodeBadRequest, "uid_pool"},
		{"uid pool with root", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1"},"uid_pool":[[0,1]]}`), 400, rpc.NodeCodeBadRequest, "uid_pool"},
		{"uid pool not pairs", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"migrate-prepare","instance":{"uuid":"u1"},"migration":"m","uid_pool":[[5]]}`), 400, rpc.NodeCodeBadRequest, "uid_pool.0"},
		{"storage-list with a name", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"storage-list","storage_name":"xenvg"}`), 400, rpc.NodeCodeBadRequest, "storage_name"},
		{"storage-modify without allocatable", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"storage-modify","storage_name":"/dev/sdb"}`), 400, rpc.NodeCodeBadRequest, "allocatable"},
		{"balloon without memory", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-balloon","instance":{"uuid":"u1"}}`), 400, rpc.NodeCodeBadRequest, "memory"},
		{"balloon to negative memory", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-balloon","instance":{"uuid":"u1"},"memory":-5}`), 400, rpc.NodeCodeBadRequest, "memory"},
		{"start with memory", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"instance-start","instance":{"uuid":"u1"},"memory":64}`), 400, rpc.NodeCodeBadRequest, "memory"},
		{"storage-repair without a name", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"storage-repair"}`), 400, rpc.NodeCodeBadRequest, "storage_name"},
		{"bridges-exist without bridges", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"bridges-exist"}`), 400, rpc.NodeCodeBadRequest, "bridges"},
		{"bridges-exist with an empty list", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"bridges-exist","bridges":[]}`), 400, rpc.NodeCodeBadRequest, "bridges"},
		{"bridges-exist with a long name", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"bridges-exist","bridges":["br0123456789abcd"]}`), 400, rpc.NodeCodeBadRequest, "bridges"},
		{"bridges-exist with a slash", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"bridges-exist","bridges":["br/0"]}`), 400, rpc.NodeCodeBadRequest, "bridges"},
		{"bridges-exist with an instance", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"bridges-exist","bridges":["br0"],"instance":{"uuid":"u1"}}`), 400, rpc.NodeCodeBadRequest, "instance"},
		{"status with bridges", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"status","instance":{"uuid":"u1"},"bridges":["br0"]}`), 400, rpc.NodeCodeBadRequest, "bridges"},
		{"storage-repair with allocatable", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"storage-repair","storage_name":"xenvg","allocatable":true}`), 400, rpc.NodeCodeBadRequest, "allocatable"},
		{"storage-modify with a long name", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"storage-modify","storage_name":"` + strings.Repeat("p", 129) + `","allocatable":false}`), 400, rpc.NodeCodeBadRequest, "storage_name"},
		{"repair without command", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"repair-command","input":"{}"}`), 400, rpc.NodeCodeBadRequest, "command"},
		{"command on status", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"status","instance":{"uuid":"u1"},"command":"x"}`), 400, rpc.NodeCodeBadRequest, "command"},
		{"input on diagnose", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"diagnose","command":"x","input":"{}"}`), 400, rpc.NodeCodeBadRequest, "input"},
		{"command of the wrong type", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"diagnose","command":["x"]}`), 400, rpc.NodeCodeBadRequest, "command"},
		{"input of the wrong type", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"repair-command","command":"x","input":{"status":"Ok"}}`), 400, rpc.NodeCodeBadRequest, "input"},
		{"no nonce", "POST", rpc.NodePath, valid(`{"node":"node21","op":"list"}`), 400, rpc.NodeCodeBadRequest, "nonce"},
		{"no node", "POST", rpc.NodePath, valid(`{"nonce":"0123456789ab","op":"list"}`), 400, rpc.NodeCodeBadRequest, "node"},
		{"for another node", "POST", rpc.NodePath, valid(strings.Replace(start, "node21", "node22", 1)), 421, rpc.NodeCodeWrongNode, ""},
		{"debug without --debug", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"debug-fault","fault":{"clear":true}}`), 403, rpc.NodeCodeNotAllowed, ""},
		{"GET", "GET", rpc.NodePath, valid(start), 405, rpc.CodeMethod, ""},
		{"another path", "POST", "/agent/v1/instance-start", valid(start), 404, rpc.CodeNotFound, ""},
		{"too large", "POST", rpc.NodePath, valid(`{"node":"node21","nonce":"0123456789ab","op":"list","x":"` + strings.Repeat("a", rpc.DefaultNodeMaxBody) + `"}`), 413, rpc.NodeCodeTooLarge, ""},
	}
	srv, agent := nodeServer(t, rpc.NodeServerOptions{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, h := tc.req()
			status, ne := rawNode(t, srv, tc.method, tc.path, body, h)
			if status != tc.status || ne.ErrorCode != tc.code || ne.Field != tc.field {
				t.Fatalf("got %d %s (field %q): %s; want %d %s (field %q)", status, ne.ErrorCode, ne.Field, ne.Message, tc.status, tc.code, tc.field)
			}
		})
	}
	if n := len(agent.calls()); n != 0 {
		t.Fatalf("the agent was called %d times: %+v", n, agent.calls())
	}

	t.Run("replayed", func(t *testing.T) {
		body, h := signed(t, nodeKey, start, now)
		if status, ne := rawNode(t, srv, "POST", rpc.NodePath, body, h); status != 200 {
			t.Fatalf("first: %d %+v", status, ne)
		}
		status, ne := rawNode(t, srv, "POST", rpc.NodePath, body, h)
		if status != 401 || ne.ErrorCode != rpc.NodeCodeReplayed {
			t.Fatalf("replay: %d %+v", status, ne)
		}
		if n := len(agent.calls()); n != 1 {
			t.Fatalf("the agent was called %d times", n)
		}
	})
	t.Run("no key yet", func(t *testing.T) {
		srv, agent := nodeServer(t, rpc.NodeServerOptions{Key: func() []byte { return nil }})
		body, h := signed(t, nodeKey, start, now)
		if status, ne := rawNode(t, srv, "POST", rpc.NodePath, body, h); status != 503 || ne.ErrorCode != rpc.NodeCodeNoKey {
			t.Fatalf("no key: %d %+v", status, ne)
		}
		if len(agent.calls()) != 0 {
			t.Fatal("the agent was called")
		}
	})
}

// TestNodeDiagnoseAndRepairOps: diagnose carries the command name and
// answers the node's signed report; repair-command carries the command
// and its input and answers the output; a replayed diagnose request does
// not make the node run anything.
func TestNodeDiagnoseAndRepairOps(t *testing.T) {
	at := time.Now()
	a := &stubAgent{answer: func(_ context.Context, req rpc.NodeRequest) (rpc.NodeResult, error) {
		switch req.Op {
		case rpc.NodeOpDiagnose:
			r, err := rpc.NewDiagnoseReport(req.Node, at, json.RawMessage(`{"status":"live-repair","command":"fix"}`))
			r = r.Sign(reportKey)
			return rpc.NodeResult{Driver: "stub", Report: &r}, err
		case rpc.NodeOpRepairCommand:
			if req.Command == "refused" {
				return rpc.NodeResult{}, rpc.NewNodeError(rpc.NodeCodeNotAllowed, "command refused: not whitelisted")
			}
			return rpc.NodeResult{Driver: "stub", Changed: true, Output: "fixed with " + req.Input}, nil
		}
		return rpc.NodeResult{}, rpc.NewNodeError(rpc.NodeCodeUnknownOp, "%s", req.Op)
	}}
	srv, _ := nodeServer(t, rpc.NodeServerOptions{Agent: a})
	c := clientOf(srv, "node21")
	ctx := context.Background()
	rep, err := c.Diagnose(ctx, "check-hw")
	if err != nil {
		t.Fatal(err)
	}
	got, err := rpc.VerifyDiagnoseReport(rep, rpc.DiagnoseVerify{Key: reportKey, Node: "node21", Now: time.Now()})
	if err != nil || string(got.Data) != `{"status":"live-repair","command":"fix"}` {
		t.Fatalf("diagnose report: %+v %v", got, err)
	}
	if _, err := c.Diagnose(ctx, ""); err != nil {
		t.Fatal(err)
	}
	res, err := c.RepairCommand(ctx, "fix", `{"status":"live-repair"}`)
	if err != nil || res.Output != `fixed with {"status":"live-repair"}` {
		t.Fatalf("repair: %+v %v", res, err)
	}
	var ne *rpc.NodeError
	if _, err := c.RepairCommand(ctx, "refused", ""); !errors.As(err, &ne) || ne.ErrorCode != rpc.NodeCodeNotAllowed || ne.Status != http.StatusForbidden {
		t.Fatalf("refused repair: %v", err)
	}
	calls := a.calls()
	if len(calls) != 4 || calls[0].Command != "check-hw" || calls[1].Command != "" || calls[1].Op != rpc.NodeOpDiagnose ||
		calls[2].Command != "fix" || calls[2].Input != `{"status":"live-repair"}` {
		t.Fatalf("the agent got %+v", calls)
	}

	// A node that answers diagnose without a report.
	srv2, _ := nodeServer(t, rpc.NodeServerOptions{})
	if _, err := clientOf(srv2, "node21").Diagnose(ctx, ""); !errors.Is(err, rpc.ErrNodeTransport) {
		t.Fatalf("no report: %v", err)
	}

	body, h := signed(t, nodeKey, `{"node":"node21","nonce":"0123456789ab","op":"diagnose","command":"check-hw"}`, time.Now())
	if status, ne := rawNode(t, srv, "POST", rpc.NodePath, body, h); status != 200 {
		t.Fatalf("first: %d %+v", status, ne)
	}
	if status, ne := rawNode(t, srv, "POST", rpc.NodePath, body, h); status != 401 || ne.ErrorCode != rpc.NodeCodeReplayed {
		t.Fatalf("replayed diagnose: %d %+v", status, ne)
	}
	if n := len(a.calls()); n != 5 {
		t.Fatalf("the agent was called %d times", n)
	}
}
