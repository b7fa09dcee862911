package rpc_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// checking is a backend that can check OOB helpers, as the server's is:
// every path but the good one is missing.
type checking struct {
	*rpctest.Backend
	good string
}

func (c checking) CheckOOBProgram(path string) error {
	if path == c.good {
		return nil
	}
	return errors.New("error stating out of band helper " + path + ": no such file or directory")
}

// TestPowercycle: POST /2/nodes/{name}/powercycle queues OP_OOB_COMMAND
// power-cycle; force hands the master role over first.
func TestPowercycle(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	addNode(t, b, "node2", "192.0.2.2")
	id, _, err := e.c.PowercycleNode(ctx(t), "node2", false, "fan noise")
	if err != nil {
		t.Fatal(err)
	}
	j := jobOf(b, id)
	var op map[string]any
	if err := json.Unmarshal(j.Ops[0].Input, &op); err != nil {
		t.Fatal(err)
	}
	if op["OP_ID"] != "OP_OOB_COMMAND" || op["command"] != "power-cycle" || op["transfer_leadership"] != nil ||
		len(op["node_names"].([]any)) != 1 || j.Status != fsm.StatusQueued {
		t.Errorf("job %s: %v", j.Status, op)
	}
	if !strings.Contains(string(j.Ops[0].Input), `["gnt:user","fan noise"`) {
		t.Errorf("no reason trail: %s", j.Ops[0].Input)
	}
	id, _, err = e.c.PowercycleNode(ctx(t), "node1", true, "")
	if err != nil {
		t.Fatal(err)
	}
	if in := string(jobOf(b, id).Ops[0].Input); !strings.Contains(in, `"transfer_leadership":true`) {
		t.Errorf("force: %s", in)
	}
	if r := e.do("POST", "/2/nodes/bad_name!/powercycle", ""); r.status != http.StatusBadRequest {
		t.Errorf("bad name: %s", r)
	}
	if r := e.do("GET", "/2/nodes/node2/powercycle", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %s", r)
	}
}

// TestOOBCheck: GET /2/gnt/oob-check reports each configured helper with
// its nodes, as the answering gntd finds it; a backend that cannot check
// answers 501.
func TestOOBCheck(t *testing.T) {
	b := rpctest.NewCluster()
	addNode(t, b, "node2", "192.0.2.2")
	addNode(t, b, "node3", "192.0.2.3")
	for _, op := range []string{
		`{"OP_ID":"OP_CLUSTER_SET_PARAMS","ndparams":{"oob_program":"/usr/lib/gnt/oob"}}`,
		`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"node2","ndparams":{"oob_program":"/opt/missing"}}`,
		`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"node3","ndparams":{"oob_program":"!"}}`,
	} {
		if r, _, _ := b.ApplyCommand(fsm.JobSubmit{Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	srv := rpc.NewServer(checking{Backend: b, good: "/usr/lib/gnt/oob"}, rpc.ServerOptions{AuthDisabled: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	got, err := rpc.NewClient([]string{ts.Listener.Addr().String()}).OOBCheck(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := rpc.OOBCheck{Node: "node1", Programs: []rpc.OOBProgramCheck{
		{Path: "/opt/missing", Nodes: []string{"node2"}, Error: "error stating out of band helper /opt/missing: no such file or directory"},
		{Path: "/usr/lib/gnt/oob", Nodes: []string{"node1"}},
	}}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("got  %s\nwant %s", gj, wj)
	}
	// Powered is shown only for nodes with a helper.
	e := newEnv(t, b)
	nodes, err := e.c.Nodes(ctx(t), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if (n.Powered != nil) != (n.Name != "node3") {
			t.Errorf("%s: powered %v", n.Name, n.Powered)
		}
	}
	if r := e.do("GET", "/2/gnt/oob-check", ""); r.status != http.StatusNotImplemented {
		t.Errorf("plain backend: %s", r)
	}
}

// TestOOBProgramVetted: every way of setting oob_program through the API
// is refused with 400 naming oob_program and the backend's reason when
// the gntd's whitelist refuses the helper, and nothing changes; a helper
// it accepts, the "!" opt-out, "" and "default" are set. A backend that
// cannot check refuses every helper.
func TestOOBProgramVetted(t *testing.T) {
	b := rpctest.NewCluster()
	addNode(t, b, "node2", "192.0.2.2")
	const good = "/etc/gnt/oob-programs/ipmi"
	srv := rpc.NewServer(checking{Backend: b, good: good}, rpc.ServerOptions{AuthDisabled: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	serial := func() int64 { return readState(b, func(st *fsm.State) int64 { return st.Cluster.SerialNo }) }
	jobs := func() int { return readState(b, func(st *fsm.State) int { return len(st.Jobs) }) }
	refusal := "error stating out of band helper /bin/sh: no such file or directory"
	for _, c := range []struct{ name, method, path, body, msg string }{
		{"cluster", "PUT", "/2/modify", `{"ndparams":{"oob_program":"/bin/sh"}}`, "oob_program: " + refusal},
		{"node", "PUT", "/2/nodes/node2/modify", `{"ndparams":{"oob_program":"/bin/sh"}}`, "oob_program: " + refusal},
		{"new group", "POST", "/2/groups", `{"group_name":"g2","ndparams":{"oob_program":"/bin/sh"}}`, "oob_program: " + refusal},
		{"group", "PUT", "/2/groups/default/modify", `{"ndparams":{"oob_program":"/bin/sh"}}`, "oob_program: " + refusal},
		{"escaped key", "PUT", "/2/modify", `{"ndparams":{"oob\u005fprogram":"/bin/sh"}}`, "oob_program: " + refusal},
		{"job", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0},{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"node2","ndparams":{"oob_program":"/bin/sh"}}]}`, "opcode 1: oob_program: " + refusal},
		{"jobs", "POST", "/2/gnt/jobs", `{"jobs":[[{"OP_ID":"OP_CLUSTER_SET_PARAMS","ndparams":{"oob_program":"/bin/sh"}}]]}`, "job 0: oob_program: " + refusal},
	} {
		s0, j0 := serial(), jobs()
		r := doHTTP(t, ts.URL, c.method, c.path, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %s", c.name, r)
			continue
		}
		if ae := r.apiError(t); ae.Field != "oob_program" || ae.Message != c.msg {
			t.Errorf("%s: field %q message %q, want %q", c.name, ae.Field, ae.Message, c.msg)
		}
		if serial() != s0 || jobs() != j0 {
			t.Errorf("%s: the refusal changed the state", c.name)
		}
	}
	for _, v := range []string{good, "!", "", "default"} {
		s0 := serial()
		if r := doHTTP(t, ts.URL, "PUT", "/2/modify", `{"ndparams":{"oob_program":"`+v+`"}}`); r.status != http.StatusOK || serial() == s0 {
			t.Errorf("%q: %s", v, r)
		}
	}
	e := newEnv(t, b)
	r := e.do("PUT", "/2/nodes/node2/modify", `{"ndparams":{"oob_program":"`+good+`"}}`)
	if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Field != "oob_program" || !strings.Contains(ae.Message, "this gntd cannot check OOB helpers") {
		t.Errorf("a backend that cannot check: %s", r)
	}
	if r := e.do("PUT", "/2/nodes/node2/modify", `{"ndparams":{"oob_program":"!"}}`); r.status != http.StatusOK {
		t.Errorf("opt-out on a backend that cannot check: %s", r)
	}
}
