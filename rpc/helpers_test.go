package rpc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

const testHold = 300 * time.Millisecond

// env is one API server over a fake backend, reachable over HTTP.
type env struct {
	t   *testing.T
	b   *rpctest.Backend
	srv *rpc.Server
	ts  *httptest.Server
	c   *rpc.Client
	reg *prometheus.Registry
}

func newEnv(t *testing.T, b *rpctest.Backend) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := rpc.NewServer(b, rpc.ServerOptions{
		AuthDisabled: true,
		HoldTimeout:  testHold,
		Metrics:      reg,
		Logger:       hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard}),
	})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &env{t: t, b: b, srv: srv, ts: ts, c: rpc.NewClient([]string{ts.Listener.Addr().String()}), reg: reg}
}

func (e *env) addr() string { return e.ts.Listener.Addr().String() }

// result is a raw HTTP answer.
type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// apiError decodes an error answer.
func (r result) apiError(t *testing.T) rpc.APIError {
	t.Helper()
	var ae rpc.APIError
	if err := json.Unmarshal(r.body, &ae); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	return ae
}

func (e *env) do(method, path, body string, hdr ...string) result {
	e.t.Helper()
	return doHTTP(e.t, e.ts.URL, method, path, body, hdr...)
}

func doHTTP(t *testing.T, base, method, path, body string, hdr ...string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: data}
}

// serve calls the handler directly, without a network.
func serve(h http.Handler, method, path string, body []byte, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
	return v
}

func mustOK(t *testing.T, r result) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("want 200, got %s", r)
	}
}

// fingerprint is the applied index and the digest of the state.
func fingerprint(b *rpctest.Backend) string {
	return fmt.Sprintf("%d/%s", b.FSM().Index(), b.FSM().Hash())
}

func readState[T any](b *rpctest.Backend, fn func(st *fsm.State) T) T {
	var out T
	b.FSM().Read(func(st *fsm.State, _ uint64) { out = fn(st) })
	return out
}

func nodeOf(b *rpctest.Backend, name string) *fsm.Node {
	return readState(b, func(st *fsm.State) *fsm.Node {
		n := st.LookupNode(name)
		if n == nil {
			return nil
		}
		c := *n
		return &c
	})
}

func jobOf(b *rpctest.Backend, id int64) *fsm.Job {
	return readState(b, func(st *fsm.State) *fsm.Job { return st.Jobs[id] })
}

func addNode(t *testing.T, b *rpctest.Backend, name, ip string, extra ...string) {
	t.Helper()
	if err := tryAddNode(b, name, ip, extra...); err != nil {
		t.Fatal(err)
	}
}

// tryAddNode is addNode for other goroutines than the test's.
func tryAddNode(b *rpctest.Backend, name, ip string, extra ...string) error {
	op := fmt.Sprintf(`{"OP_ID":"OP_NODE_ADD","node_name":%q,"primary_ip":%q%s}`, name, ip, strings.Join(extra, ""))
	resp, _, err := b.ApplyCommand(jobSubmit(b, op))
	if err == nil && resp.Err != nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("adding node %s: %w", name, err)
	}
	return nil
}

func closedAddr(t *testing.T) string {
	t.Helper()
	l := httptest.NewServer(http.NotFoundHandler())
	addr := l.Listener.Addr().String()
	l.Close()
	return addr
}

// serveReq calls the handler directly as if from the remote address.
func serveReq(h http.Handler, method, path string, body io.Reader, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, body)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// jobSubmit is the command submitting a job of the given opcodes.
func jobSubmit(b *rpctest.Backend, ops ...string) fsm.JobSubmit {
	c := fsm.JobSubmit{Now: time.Now().UnixNano()}
	for _, op := range ops {
		c.Ops = append(c.Ops, json.RawMessage(op))
		c.UUIDs = append(c.UUIDs, b.NewUUID())
	}
	return c
}

// dropFirstAnswer serves h through a test server that serves the first
// request it sees (while served, counted from 0, is 0) and drops the
// answer, closing the connection: the request took effect and the caller
// cannot know. Later requests are answered; resetting served to 0 drops
// the next answer too.
func dropFirstAnswer(t *testing.T, h http.Handler, served *atomic.Int32) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1) > 1 {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(ts.Close)
	return ts
}
