package rpc_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// writeRoutes are the endpoints FuzzCheckWrite sends its bodies to.
var writeRoutes = []struct{ method, path string }{
	{"POST", "/2/jobs"}, {"POST", "/2/instances"}, {"PUT", "/2/modify"}, {"POST", "/2/gnt/jobs"},
	{"PUT", "/2/instances/web1/modify"}, {"POST", "/2/groups"},
}

// FuzzCheckWrite: a client's CheckWrite never refuses what the API
// accepts, and what it refuses the API refuses with the same status,
// code and field.
func FuzzCheckWrite(f *testing.F) {
	for i, s := range []string{
		`{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2000000000}]}`,
		`{"instance_name":"web9","disks":[{"size":9223372036854775807},{"size":1}]}`,
		`{"candidate_pool_size":65,"default_iallocator":"x"}`,
		`{"jobs":[[{"OP_ID":"OP_TEST_DELAY","duration":0}],[]]}`,
		`{"beparams":{"memory":67108865}}`,
		`{"group_name":"g","group_name":"h"}`,
		`{"ops":[{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"],"tags":["b"]}]}`,
		"{\"os\":\"\xff\"}",
	} {
		f.Add([]byte(s), uint8(i))
	}
	b := rpctest.NewCluster()
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		rt := writeRoutes[int(which)%len(writeRoutes)]
		ce := rpc.CheckWrite(rt.method, rt.path, nil, body)
		rec := serve(h, rt.method, rt.path, body, "Content-Type", "application/json")
		if ce == nil {
			return
		}
		if rec.Code < 300 {
			t.Fatalf("%s %s %q: CheckWrite refuses (%v), the API accepts", rt.method, rt.path, body, ce)
		}
		var ae rpc.APIError
		if err := json.Unmarshal(rec.Body.Bytes(), &ae); err != nil {
			t.Fatalf("error answer %q", rec.Body)
		}
		if ae.Status != ce.Status || ae.ErrorCode != ce.ErrorCode || ae.Field != ce.Field {
			t.Fatalf("%s %s %q: CheckWrite %d %s [%s] %s; the API %d %s [%s] %s", rt.method, rt.path, body,
				ce.Status, ce.ErrorCode, ce.Field, ce.Message, ae.Status, ae.ErrorCode, ae.Field, ae.Message)
		}
	})
}
