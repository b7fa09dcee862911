package rpc_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// TestFilterRoutes: /2/filters with Ganeti's shapes: POST answers the new
// rule's UUID, GET lists uuid and uri (every field with bulk=1), GET of
// one answers its fields with the action in Ganeti's form, PUT replaces
// or creates, DELETE removes; dry-run=1 checks and changes nothing.
func TestFilterRoutes(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	r := e.do("POST", "/2/filters", `{"priority":1,"predicates":[["opcode",["=","OP_ID","OP_INSTANCE_REPLACE_DISKS"]]],"action":["RATE_LIMIT",10],"reason":[["gnt:client","",1409249801259897000]]}`)
	var uuid string
	if r.status != http.StatusOK || json.Unmarshal(r.body, &uuid) != nil || fsm.ValidateFilterUUID("", uuid) != nil {
		t.Fatalf("POST: %s", r)
	}
	r = e.do("GET", "/2/filters", "")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `[{"uuid":"`+uuid+`","uri":"/2/filters/`+uuid+`"}]` {
		t.Fatalf("GET list: %s", r)
	}
	var rule map[string]any
	r = e.do("GET", "/2/filters/"+uuid, "")
	if err := json.Unmarshal(r.body, &rule); err != nil {
		t.Fatalf("GET one: %s", r)
	}
	trail, _ := json.Marshal(rule["reason_trail"])
	if rule["uuid"] != uuid || rule["priority"] != float64(1) || rule["watermark"] != float64(0) ||
		!strings.HasPrefix(string(trail), `[["gnt:client","",1409249801259897000],["gnt:library:rlib2","POST /2/filters",`) {
		t.Errorf("GET one: %s", r)
	}
	if a, _ := json.Marshal(rule["action"]); string(a) != `["RATE_LIMIT",10]` {
		t.Errorf("action %s", a)
	}
	r = e.do("GET", "/2/filters?bulk=1", "")
	if !strings.Contains(string(r.body), `"predicates":[["opcode",["=","OP_ID","OP_INSTANCE_REPLACE_DISKS"]]]`) {
		t.Errorf("GET bulk: %s", r)
	}

	const other = "b296f0c9-4809-46a8-b928-5ccf7720fa8c"
	before := configState(t, b)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/2/filters?dry-run=1", `{"action":"PAUSE"}`},
		{"PUT", "/2/filters/" + other + "?dry-run=1", `{"action":"REJECT"}`},
		{"PUT", "/2/filters/" + uuid + "?dry-run=1", `{"action":"REJECT"}`},
		{"DELETE", "/2/filters/" + uuid + "?dry-run=1", ""},
	} {
		if r := e.do(c.method, c.path, c.body); r.status != http.StatusOK {
			t.Errorf("%s %s: %s", c.method, c.path, r)
		}
	}
	r = e.do("DELETE", "/2/filters/"+other+"?dry-run=1", "")
	checkErr(t, r, http.StatusNotFound, string(fsm.CodeNoEnt), "uuid")
	if configState(t, b) != before || strings.Count(string(e.do("GET", "/2/filters", "").body), "uuid") != 1 {
		t.Fatal("a dry run changed the filters")
	}

	r = e.do("PUT", "/2/filters/"+other, `{"action":"PAUSE","predicates":[["jobid",[">","id","watermark"]]]}`)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `"`+other+`"` {
		t.Fatalf("PUT new: %s", r)
	}
	// doc/rapi.rst: PUT takes the uuid as a body parameter too.
	r = e.do("PUT", "/2/filters/"+other, `{"action":"REJECT","uuid":"`+other+`"}`)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `"`+other+`"` {
		t.Fatalf("PUT replace: %s", r)
	}
	if r = e.do("GET", "/2/filters/"+other, ""); !strings.Contains(string(r.body), `"action":"REJECT"`) || !strings.Contains(string(r.body), `"predicates":[]`) {
		t.Errorf("after replace: %s", r)
	}
	if r = e.do("DELETE", "/2/filters/"+other, ""); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "null" {
		t.Errorf("DELETE: %s", r)
	}
	checkErr(t, e.do("GET", "/2/filters/"+other, ""), http.StatusNotFound, string(fsm.CodeNoEnt), "uuid")
	checkErr(t, e.do("DELETE", "/2/filters/"+other, ""), http.StatusNotFound, string(fsm.CodeNoEnt), "uuid")
}

// TestFilterBadInput: a bad rule is refused with 400 naming what is wrong
// and nothing changes.
func TestFilterBadInput(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	const u = "/2/filters/8b53f7de-f8e2-4470-99bd-1efe746e434f"
	before := configState(t, b)
	for _, c := range []struct {
		method, path, body, field, msg string
	}{
		{"POST", "/2/filters", `{"priority":-1}`, "priority", "0 to 1000000"},
		{"POST", "/2/filters", `{"priority":1000001}`, "priority", "0 to 1000000"},
		{"POST", "/2/filters", `{"priority":1.5}`, "priority", "integer"},
		{"POST", "/2/filters", `{"priority":"3"}`, "priority", "integer"},
		{"POST", "/2/filters", `{"action":"DROP"}`, "action", `unknown action "DROP"`},
		{"POST", "/2/filters", `{"action":["RATE_LIMIT",0]}`, "action", "from 1 to"},
		{"POST", "/2/filters", `{"action":["RATE_LIMIT"]}`, "action", "RATE_LIMIT"},
		{"POST", "/2/filters", `{"action":"RATE_LIMIT"}`, "action", "needs its number"},
		{"POST", "/2/filters", `{"action":7}`, "action", "an action is a string"},
		{"POST", "/2/filters", `{"predicates":{"jobid":1}}`, "predicates", "list"},
		{"POST", "/2/filters", `{"predicates":[["instance",["=","name","x"]]]}`, "predicates", `unknown predicate "instance"`},
		{"POST", "/2/filters", `{"predicates":[["jobid",["=","name",1]]]}`, "predicates", `unknown field "name"`},
		{"POST", "/2/filters", `{"predicates":[["reason",["=~","reason","("]]]}`, "predicates", "invalid regular expression"},
		{"POST", "/2/filters", `{"predicates":[["opcode",["~~","OP_ID","x"]]]}`, "predicates", "unknown operator"},
		{"POST", "/2/filters", `{"predicates":[["opcode"]]}`, "predicates", "exactly one expression"},
		{"POST", "/2/filters", `{"reason":"because"}`, "reason", "list"},
		{"POST", "/2/filters", `{"reason":[["","x",1]]}`, "reason", "empty source"},
		{"POST", "/2/filters", `{"action":"PAUSE","colour":"red"}`, "colour", "colour"},
		{"POST", "/2/filters", `[1]`, "", "JSON object"},
		{"PUT", "/2/filters/not-a-uuid", `{}`, "uuid", "36 characters"},
		{"PUT", u, `{"action":"PAUSE","action":"REJECT"}`, "action", ""},
		{"PUT", u, `{"uuid":"b296f0c9-4809-46a8-b928-5ccf7720fa8c"}`, "uuid", "differs from the path's"},
		{"PUT", u, `{"uuid":7}`, "uuid", "differs from the path's"},
		{"POST", "/2/filters", `{"uuid":"b296f0c9-4809-46a8-b928-5ccf7720fa8c"}`, "uuid", "PUT /2/filters/[filter_uuid] only"},
		{"POST", "/2/filters?dry-run=1", `{"action":"DROP"}`, "action", `unknown action "DROP"`},
		{"GET", "/2/filters?bulk=maybe", "", "bulk", "1 or 0"},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %s %s: %s", c.method, c.path, c.body, r)
			continue
		}
		ae := r.apiError(t)
		if ae.Field != c.field || !strings.Contains(ae.Message, c.msg) {
			t.Errorf("%s %s %s: field %q message %q, want %q containing %q", c.method, c.path, c.body, ae.Field, ae.Message, c.field, c.msg)
		}
	}
	if configState(t, b) != before || strings.TrimSpace(string(e.do("GET", "/2/filters", "").body)) != "[]" {
		t.Fatal("a refused rule changed the state")
	}
}

// FuzzFilterBody: any body of POST /2/filters is refused with a JSON
// error or stored as a rule that GET answers; never anything else.
func FuzzFilterBody(f *testing.F) {
	for _, s := range []string{
		`{"priority":0,"predicates":[["jobid",[">","id","watermark"]]],"action":"REJECT"}`,
		`{"predicates":[["reason",["=~","reason","maintenance pink bunny"]]],"action":"ACCEPT"}`,
		`{"action":["RATE_LIMIT",10],"predicates":[["opcode",["=","OP_ID","OP_INSTANCE_REPLACE_DISKS"]]]}`,
		`{"action":"DROP"}`, `{"priority":-1}`, `[]`, `{"reason":[["a","b",1]]}`, ``,
	} {
		f.Add([]byte(s))
	}
	b := rpctest.NewCluster()
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(h, "POST", "/2/filters", body)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		if rec.Code != http.StatusOK {
			return
		}
		var uuid string
		if err := json.Unmarshal(rec.Body.Bytes(), &uuid); err != nil {
			t.Fatalf("POST answered %s", rec.Body)
		}
		got := serve(h, "GET", "/2/filters/"+uuid, nil)
		if got.Code != http.StatusOK {
			t.Fatalf("GET of the new rule: %d %s", got.Code, got.Body)
		}
		serve(h, "DELETE", "/2/filters/"+uuid, nil)
	})
}
