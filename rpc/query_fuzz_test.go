package rpc_test

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// FuzzQuery: any PUT body and any GET filter on /2/query is answered 200
// with Ganeti's result shape (one [status, value] per requested field) or
// with a JSON error, and never changes the state.
func FuzzQuery(f *testing.F) {
	for _, s := range []struct{ body, filter string }{
		{`{"fields":["name","tags"],"qfilter":["=[]","tags","a"]}`, `name == "node1"`},
		{`{"fields":["name"],"filter":["|",["=","name","x"],["!",["?","offline"]]]}`, `["<","pinst_cnt",2]`},
		{`{"fields":["name","bogus"],"qfilter":null}`, `not (offline or "x" in tags)`},
		{`{"fields":[]}`, `name =~ m/^n/i`},
		{`{`, `(`}, {`[]`, `["!"]`}, {``, ``},
	} {
		f.Add([]byte(s.body), s.filter)
	}
	b := rpctest.NewCluster()
	addNodeF(f, b)
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	before := b.FSM().Hash()
	check := func(t *testing.T, code int, hdr map[string][]string, body []byte, nfields int) {
		t.Helper()
		checkAnswer(t, code, hdr, body)
		if code != 200 {
			return
		}
		var res rpc.QueryResult
		if err := json.Unmarshal(body, &res); err != nil || (nfields >= 0 && len(res.Fields) != nfields) {
			t.Fatalf("answer %s: %v", body, err)
		}
		for _, row := range res.Data {
			if len(row) != len(res.Fields) {
				t.Fatalf("row %v for %d fields", row, len(res.Fields))
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, filter string) {
		var req struct {
			Fields []string `json:"fields"`
		}
		n := -1
		if json.Unmarshal(body, &req) == nil {
			n = len(req.Fields)
		}
		rec := serve(h, "PUT", "/2/query/node", body)
		check(t, rec.Code, rec.Header(), rec.Body.Bytes(), n)
		rec = serve(h, "GET", "/2/query/node?fields=name,offline&filter="+url.QueryEscape(filter), nil)
		check(t, rec.Code, rec.Header(), rec.Body.Bytes(), 2)
		if b.FSM().Hash() != before {
			t.Fatal("a query changed the state")
		}
	})
}
