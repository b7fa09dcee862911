package rpc_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// TestGanetiShapes: / and /2 answer null as Ganeti's; POST
// /2/nodes/{n}/modify (the client's verb) works like PUT; a failed
// opcode's opresult is Ganeti's ["OpExecError", [msg]] or
// ["OpPrereqError", [msg, code]]; cancelling a finished job answers 200
// [false, why] and changes nothing, an unknown job is 404; reinstall
// takes Ganeti's legacy ?os=&nostartup= query.
func TestGanetiShapes(t *testing.T) {
	b := rpctest.NewCluster()
	addNode(t, b, "node2", "192.0.2.2")
	e := newEnv(t, b)
	for _, p := range []string{"/", "/2"} {
		if r := e.do("GET", p, ""); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "null" {
			t.Errorf("GET %s: %s, want 200 null", p, r)
		}
		r := e.do("POST", p, "")
		checkGanetiError(t, "POST "+p, r.status, r.body, http.StatusMethodNotAllowed, "method_not_allowed")
	}
	if r := e.do("GET", "/3", ""); r.status != http.StatusNotFound {
		t.Errorf("GET /3: %s", r)
	}

	if r := e.do("POST", "/2/nodes/node2/modify?wait=5s", `{"drained":true}`); r.status != http.StatusOK {
		t.Fatalf("POST modify: %s", r)
	}
	if !nodeOf(b, "node2").Drained {
		t.Error("POST /2/nodes/node2/modify did not drain node2")
	}

	// An executor opcode that failed with a message.
	resp, _, err := b.ApplyCommand(jobSubmit(b, `{"OP_ID":"OP_TEST_DELAY","duration":0}`, `{"OP_ID":"OP_TEST_DELAY","duration":0}`))
	if err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	failed := resp.JobID
	if err := b.UpdateJob(failed, 0, fsm.ActionFinish, fsm.StatusError, "step 1 of 1 (delay) failed: boom"); err != nil {
		t.Fatal(err)
	}
	j := decode[struct {
		Status   string            `json:"status"`
		OpResult []json.RawMessage `json:"opresult"`
	}](t, e.do("GET", fmt.Sprintf("/2/jobs/%d", failed), ""))
	if j.Status != fsm.StatusError || len(j.OpResult) != 2 ||
		string(j.OpResult[0]) != `["OpExecError",["step 1 of 1 (delay) failed: boom"]]` ||
		string(j.OpResult[1]) != `["OpExecError",["Error in previous opcode"]]` {
		t.Errorf("failed job: %s %s", j.Status, j.OpResult)
	}
	// A configuration opcode the state refused, queued behind a
	// dependency: Ganeti's prerequisite error with its code.
	resp, _, err = b.ApplyCommand(jobSubmit(b, fmt.Sprintf(`{"OP_ID":"OP_GROUP_REMOVE","group_name":"nosuch","depends":[[%d,[]]]}`, failed)))
	if err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	if err := b.UpdateJob(resp.JobID, 0, fsm.ActionApply, "", nil); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", fmt.Sprintf("/2/jobs/%d?fields=opresult", resp.JobID), "")
	if !strings.Contains(string(r.body), `["OpPrereqError",["`) || !strings.Contains(string(r.body), `","unknown_entity"]]`) {
		t.Errorf("refused configuration opcode: %s", r)
	}

	// Cancelling a finished job.
	before := configState(t, b)
	index := b.FSM().Index()
	r = e.do("DELETE", fmt.Sprintf("/2/jobs/%d", failed), "")
	var ans []any
	if err := json.Unmarshal(r.body, &ans); r.status != http.StatusOK || err != nil || len(ans) != 2 || ans[0] != false ||
		!strings.Contains(fmt.Sprint(ans[1]), "already error") {
		t.Errorf("cancel of a finished job: %s", r)
	}
	if b.FSM().Index() != index || configState(t, b) != before {
		t.Error("cancelling a finished job applied something")
	}
	if _, _, err := e.c.CancelJob(ctx(t), failed, ""); err == nil || !strings.Contains(err.Error(), "already error") {
		t.Errorf("client CancelJob of a finished job: %v", err)
	}
	r = e.do("DELETE", "/2/jobs/99999", "")
	checkGanetiError(t, "cancel of an unknown job", r.status, r.body, http.StatusNotFound, "unknown_entity")

	// Reinstall's legacy query (Ganeti's client without
	// instance-reinstall-reqv1) is honoured, not dropped.
	if err := b.AddInstance(fsm.Instance{Name: "inst1", UUID: "u1", PrimaryNode: nodeOf(b, "node1").UUID, OS: "debian",
		AdminState: "down", DiskTemplate: "plain", Tags: []string{}}); err != nil {
		t.Fatal(err)
	}
	// Either form makes Ganeti's one job: shut down, reinstall, start
	// (unless nostartup / "start": false).
	for _, c := range []struct {
		query, body, os string
		ops             []string
	}{
		{"os=debian-new&nostartup=1", "", `"os_type":"debian-new"`, []string{"SHUTDOWN", "REINSTALL"}},
		{"os=debian-new", "", `"os_type":"debian-new"`, []string{"SHUTDOWN", "REINSTALL", "STARTUP"}},
		{"nostartup=0", "", "", []string{"SHUTDOWN", "REINSTALL", "STARTUP"}},
		{"", "", "", []string{"SHUTDOWN", "REINSTALL", "STARTUP"}},
		{"", `{"os":"debian-new","start":false}`, `"os_type":"debian-new"`, []string{"SHUTDOWN", "REINSTALL"}},
		{"", `{"start":true,"osparams":{"dhcp":"yes"}}`, `"osparams":{"dhcp":"yes"}`, []string{"SHUTDOWN", "REINSTALL", "STARTUP"}},
		{"reason=because", `{"os":"debian-new"}`, `"os_type":"debian-new"`, []string{"SHUTDOWN", "REINSTALL", "STARTUP"}},
	} {
		r := e.do("POST", "/2/instances/inst1/reinstall?"+c.query, c.body)
		var id int64
		if err := json.Unmarshal(r.body, &id); err != nil {
			t.Fatalf("reinstall ?%s %s: %s", c.query, c.body, r)
		}
		j := jobOf(b, id)
		var got []string
		for _, s := range j.Summary {
			got = append(got, strings.TrimPrefix(s[:strings.IndexByte(s, '(')], "INSTANCE_"))
		}
		if strings.Join(got, ",") != strings.Join(c.ops, ",") {
			t.Errorf("reinstall ?%s %s: opcodes %v, want %v", c.query, c.body, got, c.ops)
		}
		if in := string(j.Ops[1].Input); !strings.Contains(in, c.os) || c.os == "" && strings.Contains(in, "os_type") {
			t.Errorf("reinstall ?%s %s: opcode %s, want %q", c.query, c.body, in, c.os)
		}
	}
	for _, c := range []struct{ query, body, field string }{
		{"", `{"osparams":["a"]}`, "osparams"},
		{"", `{"osparams":{"a/b":1}}`, "osparams.a/b"},
		{"", `{"os_type":"debian"}`, "os_type"},
		{"", `{"start":"yes"}`, "start"},
		{"", `{"os":3}`, "os"},
		{"", `{"os":"../../bin/sh"}`, "os_type"},
		{"os=", "", "os"},
	} {
		r := e.do("POST", "/2/instances/inst1/reinstall?"+c.query, c.body)
		checkErr(t, r, http.StatusBadRequest, string(fsm.CodeInval), c.field)
	}
	r = e.do("POST", "/2/instances/inst1/reinstall?os=debian", `{"start":true}`)
	checkErr(t, r, http.StatusBadRequest, string(fsm.CodeInval), "os")
	r = e.do("POST", "/2/instances/inst1/reinstall?nostartup=maybe", "")
	checkErr(t, r, http.StatusBadRequest, string(fsm.CodeInval), "nostartup")
}
