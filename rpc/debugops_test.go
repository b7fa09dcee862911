package rpc_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// newDebugEnv is newEnv with ServerOptions.Debug (gntd --debug) as given.
func newDebugEnv(t *testing.T, b *rpctest.Backend, debug bool) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := rpc.NewServer(b, rpc.ServerOptions{HoldTimeout: testHold, Metrics: reg, Debug: debug, AuthDisabled: true,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &env{t: t, b: b, srv: srv, ts: ts, c: rpc.NewClient([]string{ts.Listener.Addr().String()}), reg: reg}
}

// TestDebugOpcodesNeedDebug: OP_TEST_CRASH is refused with a 400 naming
// --debug, changing nothing, by a gntd without --debug, through either
// submission path and in any position; with --debug it is queued.
func TestDebugOpcodesNeedDebug(t *testing.T) {
	crash := `{"OP_ID":"OP_TEST_CRASH"}`
	delay := `{"OP_ID":"OP_TEST_DELAY","duration":0}`
	cases := []struct{ name, path, body, msg string }{
		{"one opcode", "/2/jobs", `{"ops":[` + crash + `]}`, "OP_TEST_CRASH is a debugging opcode"},
		{"second opcode", "/2/jobs", `{"ops":[` + delay + `,` + crash + `]}`, "opcode 1: OP_TEST_CRASH is a debugging opcode"},
		{"with options", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_CRASH","mode":"panic","times":1}]}`, "started with --debug"},
		{"many jobs", "/2/gnt/jobs", `{"jobs":[[` + delay + `],[` + crash + `]]}`, "job 1: OP_TEST_CRASH is a debugging opcode"},
	}
	b := rpctest.NewCluster()
	e := newDebugEnv(t, b, false)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fingerprint(b)
			calls := b.ApplyCalls()
			r := e.do("POST", tc.path, tc.body)
			checkErr(t, r, 400, wrong, "OP_ID")
			if ae := r.apiError(t); !strings.Contains(ae.Message, tc.msg) {
				t.Errorf("message %q does not say %q", ae.Message, tc.msg)
			}
			if after := fingerprint(b); after != before || b.ApplyCalls() != calls {
				t.Errorf("state changed (%s -> %s) or Apply called", before, after)
			}
		})
	}
	d := newDebugEnv(t, rpctest.NewCluster(), true)
	for _, tc := range cases {
		if r := d.do("POST", tc.path, tc.body); r.status != 200 {
			t.Errorf("%s with --debug: %s", tc.name, r)
		}
	}
	if r := d.do("POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_CRASH","mode":"abort"}]}`); r.status != 400 || !strings.Contains(string(r.body), `"mode"`) {
		t.Errorf("a bad mode with --debug: %s", r)
	}
}
