package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// request is one request the fake API received.
type request struct {
	Method, Path string
	Query        url.Values
	Body         string
}

func (r request) String() string {
	s := r.Method + " " + r.Path
	if len(r.Query) > 0 {
		s += "?" + r.Query.Encode()
	}
	if r.Body != "" {
		s += " " + r.Body
	}
	return s
}

// fakeAPI is an httptest server that records requests and answers from
// canned responses. Writes nobody registered answer job id 7 submitted at
// index 42; GET /2/jobs/7 answers that job, finished with success.
type fakeAPI struct {
	srv *httptest.Server

	mu     sync.Mutex
	reqs   []request
	routes map[string][]response // "METHOD /path" -> answers in turn; the last repeats
}

type response struct {
	status int
	body   string
	index  string
}

const successJob = `{"id": 7, "status": "success", "ops": [{"OP_ID": "OP_TEST"}], "opstatus": ["success"],
  "opresult": [null], "oplog": [[]], "summary": ["TEST"]}`

func newFake(t testing.TB) *fakeAPI {
	t.Helper()
	f := &fakeAPI{routes: map[string][]response{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

// on registers answers for a method and path, given in turn.
func (f *fakeAPI) on(method, path string, status int, bodies ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range bodies {
		f.routes[method+" "+path] = append(f.routes[method+" "+path], response{status: status, body: b, index: "50"})
	}
}

func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.reqs = append(f.reqs, request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Body: string(body)})
	answers := f.routes[key]
	var resp response
	switch {
	case len(answers) > 0:
		resp = answers[0]
		if len(answers) > 1 {
			f.routes[key] = answers[1:]
		}
	case r.Method != http.MethodGet:
		resp = response{status: 200, body: "7", index: "42"}
	case r.URL.Path == "/2/jobs/7":
		resp = response{status: 200, body: successJob, index: "50"}
	default:
		resp = response{status: 404, body: `{"code": 404, "message": "no such resource: ` + r.URL.Path + `", "error_code": "not_found"}`}
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Gnt-Index", resp.index)
	w.Header().Set("X-Gnt-Known-Leader", "true")
	w.WriteHeader(resp.status)
	fmt.Fprint(w, resp.body)
}

// result is what one run of gnt did.
type result struct {
	stdout, stderr string
	err            error
	code           int
}

// gnt runs the client with the given environment variables (nothing is
// read from the real environment).
func gnt(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string { return env[k] }
	err := runEnv(context.Background(), append([]string{"gnt"}, args...),
		environment{stdout: &stdout, stderr: &stderr, getenv: getenv, plainHTTP: true})
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err, code: exitCode(err)}
}

// deadAddr returns an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
