package rpc_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/qlang"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// queryEnv is a cluster of node1, node2 and three instances.
func queryEnv(t *testing.T) *env {
	t.Helper()
	b := rpctest.NewCluster()
	addNode(t, b, "node2", "192.0.2.2")
	n1, n2 := nodeOf(b, "node1").UUID, nodeOf(b, "node2").UUID
	for _, i := range []fsm.Instance{
		{Name: "web1", UUID: "u1", PrimaryNode: n1, OS: "debian", AdminState: "up", DiskTemplate: "plain", MemoryMiB: 512, VCPUs: 1,
			Disks: []fsm.Disk{{UUID: "d1", SizeMiB: 1024, Mode: "rw"}}, Tags: []string{"web", "prod"}},
		{Name: "web2", UUID: "u2", PrimaryNode: n2, OS: "debian", AdminState: "down", DiskTemplate: "plain", MemoryMiB: 1024, VCPUs: 2,
			Tags: []string{"web"}},
		{Name: "db1", UUID: "u3", PrimaryNode: n2, OS: "centos", AdminState: "up", DiskTemplate: "plain", MemoryMiB: 4096, VCPUs: 8,
			Tags: []string{"db"}},
	} {
		if err := b.AddInstance(i); err != nil {
			t.Fatal(err)
		}
	}
	return newEnv(t, b)
}

func names(t *testing.T, res rpc.QueryResult) []string {
	t.Helper()
	var out []string
	for _, row := range res.Data {
		if row[0][0] != float64(rpc.QueryNormal) {
			t.Fatalf("name column %v", row[0])
		}
		out = append(out, row[0][1].(string))
	}
	return out
}

func TestQueryFilter(t *testing.T) {
	e := queryEnv(t)
	for _, tc := range []struct {
		method, path, body string
		want               []string
	}{
		{"GET", "/2/query/instance?fields=name", "", []string{"db1", "web1", "web2"}},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`"web" in tags and admin_state == "up"`), "", []string{"web1"}},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`be/memory >= 1024 or name =~ m/^WEB1$/i`), "", []string{"db1", "web1", "web2"}},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`["=","pnode","node2"]`), "", []string{"db1", "web2"}},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`not disk.count > 0`), "", []string{"db1", "web2"}},
		{"PUT", "/2/query/instance", `{"fields":["name"],"qfilter":["&",["=[]","tags","web"],[">","be/vcpus",1]]}`, []string{"web2"}},
		{"PUT", "/2/query/instance", `{"fields":["name"],"filter":["|",["==","name","db1"],["==","name","web2"]]}`, []string{"db1", "web2"}},
		{"PUT", "/2/query/instance?fields=name", `{"qfilter":null}`, []string{"db1", "web1", "web2"}},
		// Ganeti's client: both names, the same filter, and a reason.
		{"PUT", "/2/query/instance?reason=report", `{"fields":["name"],"qfilter":["=","os","centos"],"filter":["=","os","centos"]}`, []string{"db1"}},
		{"PUT", "/2/query/node", `{"fields":["name"],"qfilter":[">","pinst_cnt",1]}`, []string{"node2"}},
		{"GET", "/2/query/node?fields=name&filter=" + url.QueryEscape(`master_candidate and role == "M"`), "", []string{"node1"}},
		{"GET", "/2/query/node?fields=name&filter=" + url.QueryEscape(`offline or drained`), "", nil},
		{"GET", "/2/query/group?fields=name&filter=" + url.QueryEscape(`node_cnt == 2`), "", []string{"default"}},
		{"GET", "/2/query/group?fields=name&filter=" + url.QueryEscape(`node_cnt == 3`), "", nil},
	} {
		r := e.do(tc.method, tc.path, tc.body)
		if r.status != http.StatusOK {
			t.Errorf("%s %s %s: %s", tc.method, tc.path, tc.body, r)
			continue
		}
		if got := names(t, decode[rpc.QueryResult](t, r)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s %s: %q, want %q", tc.method, tc.path, tc.body, got, tc.want)
		}
	}
}

func TestQueryShape(t *testing.T) {
	e := queryEnv(t)
	r := e.do("GET", "/2/query/node?fields=name,mtotal,xyz,pinst_list,offline", "")
	mustOK(t, r)
	// The exact JSON of Ganeti's shape: fields, then per item [status, value].
	var raw struct {
		Fields []map[string]string `json:"fields"`
		Data   [][][]any           `json:"data"`
	}
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	wantFields := []map[string]string{
		{"name": "name", "title": "Node", "kind": "text", "doc": "Node name"},
		{"name": "mtotal", "title": "MTotal", "kind": "unit", "doc": "Total amount of memory of physical machine"},
		{"name": "xyz", "title": "xyz", "kind": "unknown", "doc": "Unknown field 'xyz'"},
		{"name": "pinst_list", "title": "PriInstances", "kind": "other", "doc": "List of instances with this node as primary"},
		{"name": "offline", "title": "Offline", "kind": "bool", "doc": "Whether node is marked offline"},
	}
	if !reflect.DeepEqual(raw.Fields, wantFields) {
		t.Errorf("fields %v", raw.Fields)
	}
	// The fake's nodes report no resources: mtotal is "no data"; the
	// unknown field is status 1 with null, not an error.
	want := [][][]any{
		{{0.0, "node1"}, {2.0, nil}, {1.0, nil}, {0.0, []any{"web1"}}, {0.0, false}},
		{{0.0, "node2"}, {2.0, nil}, {1.0, nil}, {0.0, []any{"db1", "web2"}}, {0.0, false}},
	}
	if !reflect.DeepEqual(raw.Data, want) {
		t.Errorf("data %v\nwant %v", raw.Data, want)
	}

	// A node marked offline: its unreported resources are "offline" (4);
	// powered, null without an OOB helper, stays "unavailable" (3).
	resp, _, err := e.b.ApplyCommand(jobSubmit(e.b, `{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"node2","offline":true,"auto_promote":true}`))
	if err != nil || resp.Err != nil {
		t.Fatalf("offlining node2: %v %v", err, resp.Err)
	}
	res := decode[rpc.QueryResult](t, e.do("GET", "/2/query/node?fields=name,mfree,powered&filter=offline", ""))
	if want := [][][2]any{{{0.0, "node2"}, {4.0, nil}, {3.0, nil}}}; !reflect.DeepEqual(res.Data, want) {
		t.Errorf("offline node2: %v", res.Data)
	}

	// Jobs: the node add of queryEnv is job 1, the offlining job 2.
	r = e.do("GET", "/2/query/job?fields=id,status,summary", "")
	res = decode[rpc.QueryResult](t, r)
	if len(res.Data) != 2 || res.Data[0][0] != [2]any{0.0, 1.0} || res.Data[0][1][0] != 0.0 || res.Data[0][2][0] != 0.0 {
		t.Errorf("jobs %s", r)
	}
	if r := e.do("GET", "/2/query/job?fields=id&filter="+url.QueryEscape("id > 1"), ""); !reflect.DeepEqual(decode[rpc.QueryResult](t, r).Data, [][][2]any{{{0.0, 2.0}}}) {
		t.Errorf("jobs above 1: %s", r)
	}
}

func TestQueryFields(t *testing.T) {
	e := queryEnv(t)
	for _, res := range []string{"instance", "node", "group", "job"} {
		all := decode[rpc.QueryFieldsResult](t, e.do("GET", "/2/query/"+res+"/fields", ""))
		if len(all.Fields) < 10 {
			t.Errorf("%s: only %d fields", res, len(all.Fields))
		}
		seen := map[string]bool{}
		var some []string
		for _, f := range all.Fields {
			if seen[f.Name] || f.Title == "" || strings.ContainsAny(f.Title, " \t") || f.Doc == "" || f.Kind == "unknown" {
				t.Errorf("%s: bad field definition %+v", res, f)
			}
			seen[f.Name] = true
			some = append(some, f.Name)
		}
		// Every field listed can be queried, with a known status.
		r := e.do("GET", "/2/query/"+res+"?fields="+strings.Join(some, ","), "")
		for _, row := range decode[rpc.QueryResult](t, r).Data {
			for i, v := range row {
				if v[0] == float64(rpc.QueryUnknown) {
					t.Errorf("%s: listed field %s is unknown to the query", res, some[i])
				}
			}
		}
	}
	sel := decode[rpc.QueryFieldsResult](t, e.do("GET", "/2/query/instance/fields?fields=name,bogus", ""))
	want := []rpc.QueryFieldDef{
		{Name: "name", Title: "Instance", Kind: "text", Doc: "Instance name"},
		{Name: "bogus", Title: "bogus", Kind: "unknown", Doc: "Unknown field 'bogus'"},
	}
	if !reflect.DeepEqual(sel.Fields, want) {
		t.Errorf("selected fields %+v", sel.Fields)
	}
}

// TestQueryFieldsDocumented: every field an object serves has a written
// definition (a field added to an object needs one in handlers_query.go).
func TestQueryFieldsDocumented(t *testing.T) {
	for res, fields := range rpc.UndocumentedQueryFields() {
		if len(fields) > 0 {
			t.Errorf("%s: fields without a definition in the query table: %v", res, fields)
		}
	}
}

func TestQueryBad(t *testing.T) {
	e := queryEnv(t)
	before := fingerprint(e.b)
	long := strings.Repeat("x,", rpc.MaxQueryFields) + "x"
	for _, tc := range []struct {
		method, path, body string
		status             int
		field, msg         string
	}{
		{"GET", "/2/query/instance", "", 400, "fields", "missing 'fields' query argument"},
		{"GET", "/2/query/widget?fields=name", "", 404, "resource", `unknown query resource "widget" (known: filter, group, instance, job, network, node)`},
		{"GET", "/2/query/widget/fields", "", 404, "resource", `unknown query resource "widget"`},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`name == `), "", 400, "filter", "at position 9: expected a quoted string, an integer, true or false after \"==\", found end of filter"},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`bogus == 1`), "", 400, "filter", `unknown field "bogus"`},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`name == 1`), "", 400, "filter", `cannot compare field "name" (kind text) with 1: expected a string`},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(`["=","name"`), "", 400, "filter", "list-form filter in JSON"},
		{"GET", "/2/query/instance?fields=name&filter=" + url.QueryEscape(strings.Repeat("not ", 11)+"name"), "", 400, "filter", "nested too deep: at most 10 levels"},
		{"GET", "/2/query/instance?fields=" + long, "", 400, "fields", "257 fields requested, at most 256"},
		{"GET", "/2/query/instance/fields?fields=" + long, "", 400, "fields", "at most 256"},
		{"PUT", "/2/query/instance", ``, 400, "", "must be a JSON object"},
		{"PUT", "/2/query/instance", `[1]`, 400, "", "must be a JSON object"},
		{"PUT", "/2/query/instance", `{"fields":["name"],"qfiltre":null}`, 400, "", `unknown field "qfiltre"`},
		{"PUT", "/2/query/instance", `{"qfilter":null}`, 400, "fields", "no fields requested"},
		{"PUT", "/2/query/instance", `{"fields":"name"}`, 400, "", "must be a JSON object"},
		{"PUT", "/2/query/instance", `{"fields":["name"],"qfilter":"name == 1"}`, 400, "qfilter", "expected a non-empty list"},
		{"PUT", "/2/query/instance", `{"fields":["name"],"qfilter":["~","name","x"]}`, 400, "qfilter", `unknown operator "~"`},
		{"PUT", "/2/query/instance", `{"fields":["name"],"qfilter":["?","name"],"filter":["?","os"]}`, 400, "filter", "qfilter and filter (its former name) differ"},
		{"PUT", "/2/query/instance", `{"fields":["name"]} {}`, 400, "", "more than one JSON value"},
		{"PUT", "/2/query/instance?dry-run=1", `{"fields":["name"]}`, 400, "dry-run", ""},
		{"POST", "/2/query/instance", `{"fields":["name"]}`, 405, "", ""},
	} {
		r := e.do(tc.method, tc.path, tc.body)
		if r.status != tc.status {
			t.Errorf("%s %s %s: %s, want %d", tc.method, tc.path, tc.body, r, tc.status)
			continue
		}
		ae := r.apiError(t)
		if ae.Field != tc.field || !strings.Contains(ae.Message, tc.msg) || ae.Explain == "" {
			t.Errorf("%s %s %s: %+v, want field %q and %q", tc.method, tc.path, tc.body, ae, tc.field, tc.msg)
		}
	}
	if after := fingerprint(e.b); after != before {
		t.Errorf("state changed: %s -> %s", before, after)
	}
}

// TestQueryLimitsDocumented keeps the query rows of docs/api.md's limits
// table in step with the constants.
func TestQueryLimitsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(string(doc), "\n") {
		if cells := strings.Split(l, "|"); len(cells) > 3 {
			rows[strings.TrimSpace(cells[1])] = cells[2]
		}
	}
	for row, want := range map[string][]string{
		"query filters (`/2/query`, `gnt ... --filter`)": {strconv.Itoa(qlang.MaxTextLen), strconv.Itoa(qlang.MaxDepth), strconv.Itoa(qlang.MaxNodes)},
		"fields of one query (`/2/query`)":               {strconv.Itoa(rpc.MaxQueryFields)},
	} {
		cell, ok := rows[row]
		if !ok {
			t.Errorf("docs/api.md has no row %q", row)
		}
		for _, w := range want {
			if !strings.Contains(cell, w) {
				t.Errorf("docs/api.md row %q says %q, not %s", row, cell, w)
			}
		}
	}
}

// TestQueryFilterRules: /2/query/filter, a resource of Ganeti's
// QR_VIA_RAPI, answers the rules of /2/filters with their fields, and
// takes a filter on them.
func TestQueryFilterRules(t *testing.T) {
	e := queryEnv(t)
	for _, body := range []string{
		`{"priority": 5, "action": "PAUSE", "predicates": [["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]]}`,
		`{"priority": 9, "action": ["RATE_LIMIT", 2]}`,
	} {
		if r := e.do("POST", "/2/filters", body); r.status != http.StatusOK {
			t.Fatalf("POST /2/filters: %s", r)
		}
	}
	r := e.do("GET", "/2/query/filter?fields=priority,action,predicates,uuid,watermark,reason_trail", "")
	res := decode[rpc.QueryResult](t, r)
	if len(res.Fields) != 6 || len(res.Data) != 2 {
		t.Fatalf("GET /2/query/filter: %s", r)
	}
	for _, row := range res.Data {
		for i, v := range row {
			if v[0] != float64(rpc.QueryNormal) {
				t.Errorf("field %s of a rule: status %v", res.Fields[i].Name, v[0])
			}
		}
	}
	if res.Data[0][0][1] != 5.0 || res.Data[0][1][1] != "PAUSE" || !reflect.DeepEqual(res.Data[1][1][1], []any{"RATE_LIMIT", 2.0}) {
		t.Errorf("rules in order of priority: %s", r)
	}
	r = e.do("PUT", "/2/query/filter", `{"fields": ["priority"], "qfilter": [">", "priority", 6]}`)
	if got := decode[rpc.QueryResult](t, r).Data; !reflect.DeepEqual(got, [][][2]any{{{0.0, 9.0}}}) {
		t.Errorf("PUT with a filter: %s", r)
	}
	defs := decode[rpc.QueryFieldsResult](t, e.do("GET", "/2/query/filter/fields", "")).Fields
	if len(defs) != 6 {
		t.Errorf("field definitions: %+v", defs)
	}
}
