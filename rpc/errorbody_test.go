package rpc_test

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// checkGanetiError checks an error answer has Ganeti's body: code (the
// HTTP status), message and explain (non-empty strings), plus gnt's
// error_code. Ganeti's client reads code, message and explain of every
// error and fails with a KeyError when one is missing.
func checkGanetiError(t *testing.T, layer string, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d: %s", layer, status, wantStatus, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: body %q is not a JSON object: %v", layer, body, err)
	}
	if c, ok := m["code"].(float64); !ok || int(c) != status {
		t.Errorf("%s: code %v, want %d: %s", layer, m["code"], status, body)
	}
	for _, k := range []string{"message", "explain", "error_code"} {
		if s, ok := m[k].(string); !ok || s == "" {
			t.Errorf("%s: %s is %v, want a non-empty string: %s", layer, k, m[k], body)
		}
	}
	if wantCode != "" && m["error_code"] != wantCode {
		t.Errorf("%s: error_code %v, want %s", layer, m["error_code"], wantCode)
	}
}

// TestErrorBodiesOfEveryLayer: the router, authentication, body limits,
// input checks, the state machine, holds for a leader and forwarding all
// answer errors with Ganeti's body.
func TestErrorBodiesOfEveryLayer(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	big := strings.Repeat("x", rpc.DefaultMaxBody+1)
	for _, c := range []struct {
		layer, method, path, body string
		status                    int
		code                      string
	}{
		{"router 404", "GET", "/nowhere", "", 404, "not_found"},
		{"router 405", "PATCH", "/2/info", "", 405, "method_not_allowed"},
		{"router 405 on a write route", "GET", "/2/modify", "", 405, "method_not_allowed"},
		{"query check", "GET", "/2/instances?bulk=maybe", "", 400, "wrong_input"},
		{"body limit", "POST", "/2/instances", big, 413, "body_too_large"},
		{"body check", "POST", "/2/instances", `[1]`, 400, "wrong_input"},
		{"state: unknown object", "GET", "/2/instances/nosuch", "", 404, "unknown_entity"},
		{"state: unknown job", "GET", "/2/jobs/12345", "", 404, ""},
		{"dry run refused", "POST", "/2/gnt/master-failover?dry-run=1", "{}", 400, "wrong_input"},
	} {
		r := e.do(c.method, c.path, c.body)
		checkGanetiError(t, c.layer, r.status, r.body, c.status, c.code)
	}

	// Authentication: 401 without credentials, 403 for a reader's write.
	ab := authBackend(t)
	srv, _ := authServer(t, ab, nil)
	for _, c := range []struct {
		layer, method, path string
		id                  identity
		status              int
	}{
		{"auth 401", "PUT", "/2/tags?tag=a", anonymous, 401},
		{"auth 401 bad password", "GET", "/2/info", badPassword, 401},
		{"auth 403", "PUT", "/2/tags?tag=a", readUser, 403},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		c.id.set(req)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		checkGanetiError(t, c.layer, rec.Code, rec.Body.Bytes(), c.status, "")
	}

	// Holds: no leader known within the hold time.
	nb := rpctest.NewCluster()
	nb.SetLeader("", "", false)
	ne := newEnv(t, nb)
	r := ne.do("PUT", "/2/tags?tag=a", "")
	checkGanetiError(t, "hold without a leader", r.status, r.body, 503, "no_leader")

	// Forwarding: the known leader cannot be reached within the hold.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	fb := rpctest.NewReplica(rpctest.NewCluster(), "node2")
	fb.SetLeader(dead, "node1", false)
	fe := newEnv(t, fb)
	r = fe.do("PUT", "/2/tags?tag=a", "")
	checkGanetiError(t, "forward to an unreachable leader", r.status, r.body, 503, "no_leader")
	r = fe.do("GET", "/2/info?consistent=1", "")
	checkGanetiError(t, "consistent read through an unreachable leader", r.status, r.body, 503, "no_leader")
}
