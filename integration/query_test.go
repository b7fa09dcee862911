package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// TestQuery: /2/query on real gntds, over HTTPS with the admin
// certificate. Two instances made with gnt; a PUT with a list-form
// filter through a follower right after the second was made sees it; a
// GET with a text filter on the leader; a node's reported memory has
// status normal; an unknown field is status 1, not an error; a bad
// filter is 400 naming the position; the field list describes each
// field; gnt instance list and node list filter through it.
func TestQuery(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	for _, i := range []struct{ name, mem string }{{"web1", "256"}, {"db1", "1024"}} {
		if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "1G", "--memory", i.mem, "--os-type", "debian", "-n", "node21", i.name); err != nil {
			t.Fatalf("instance add %s: %v\n%s", i.name, err, out)
		}
	}
	do := func(method, u string, body string) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, u, rd)
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.HTTP().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	query := func(method, u, body string) rpc.QueryResult {
		t.Helper()
		code, b := do(method, u, body)
		if code != http.StatusOK {
			t.Fatalf("%s %s %s: %d %s", method, u, body, code, b)
		}
		var res rpc.QueryResult
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&res); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return res
	}

	res := query("PUT", c.URL(follower, "/2/query/instance"),
		`{"fields":["name","be/memory","pnode","xyz"],"qfilter":["&",["==","pnode","node21"],[">=","be/memory",1024]]}`)
	want := [][][2]any{{{json.Number("0"), "db1"}, {json.Number("0"), json.Number("1024")}, {json.Number("0"), "node21"}, {json.Number("1"), nil}}}
	if !reflect.DeepEqual(res.Data, want) || res.Fields[3].Kind != "unknown" || res.Fields[1].Kind != "unit" {
		t.Errorf("follower PUT: %+v", res)
	}

	res = query("GET", c.URL(leader, "/2/query/instance?fields=name,disk.count&filter="+url.QueryEscape(`name =~ m/^WEB/i or be/memory > 2048`)), "")
	if len(res.Data) != 1 || res.Data[0][0][1] != "web1" || res.Data[0][1][1] != json.Number("1") {
		t.Errorf("leader GET: %+v", res)
	}

	res = query("GET", c.URL(leader, "/2/query/node?fields=name,mtotal,pinst_cnt&filter="+url.QueryEscape(`name == "node21"`)), "")
	if len(res.Data) != 1 || res.Data[0][1][0] != json.Number("0") || res.Data[0][2][1] != json.Number("2") {
		t.Errorf("node21: %+v", res)
	}

	if code, b := do("GET", c.URL(leader, "/2/query/instance?fields=name&filter="+url.QueryEscape(`name = web1`)), ""); code != http.StatusBadRequest ||
		!strings.Contains(string(b), `at position 8: expected a quoted string`) || !strings.Contains(string(b), `"explain"`) {
		t.Errorf("bad filter: %d %s", code, b)
	}

	// The CLI's --filter goes through the same query.
	if out, err := c.GNT("instance", "list", "--no-headers", "--fields", "name", "-F", `be/memory >= 1024 and "x" not in tags`); err != nil || out != "db1\n" {
		t.Errorf("gnt instance list -F: %v %q", err, out)
	}
	if out, err := c.GNT("node", "list", "--no-headers", "--fields", "name", "pinst_cnt > 1"); err != nil || out != "node21\n" {
		t.Errorf("gnt node list FILTER: %v %q", err, out)
	}

	code, b := do("GET", c.URL(follower, "/2/query/job/fields?fields=id,status"), "")
	var fields rpc.QueryFieldsResult
	if code != http.StatusOK || json.Unmarshal(b, &fields) != nil || len(fields.Fields) != 2 ||
		fields.Fields[0] != (rpc.QueryFieldDef{Name: "id", Title: "ID", Kind: "number", Doc: "Job ID"}) {
		t.Errorf("job fields: %d %s", code, b)
	}
}
