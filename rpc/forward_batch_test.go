package rpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

const forwardPath = "/2/gnt/forward"

// gatedLeader serves the leader's API through a test server that counts
// the requests it gets, by path, and holds batched forwards while gate is
// set, until it is closed. With refusal set, it answers every batch
// with that status and body instead of serving it.
type gatedLeader struct {
	ts      *httptest.Server
	mu      sync.Mutex
	gate    chan struct{}
	batches atomic.Int32
	plain   atomic.Int32
	refusal *result
}

func newGatedLeader(t *testing.T, h http.Handler) *gatedLeader {
	g := &gatedLeader{}
	g.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != forwardPath {
			g.plain.Add(1)
			h.ServeHTTP(w, r)
			return
		}
		g.batches.Add(1)
		g.mu.Lock()
		gate, refusal := g.gate, g.refusal
		g.mu.Unlock()
		if refusal != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(refusal.status)
			w.Write(refusal.body)
			return
		}
		if gate != nil {
			<-gate
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(g.ts.Close)
	t.Cleanup(g.open) // before Close, which waits for held requests
	return g
}

// open lets held batches through, if any are held.
func (g *gatedLeader) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

// refuse has every later batch answered with status and body.
func (g *gatedLeader) refuse(status int, body string) {
	g.mu.Lock()
	g.refusal = &result{status: status, body: []byte(body)}
	g.mu.Unlock()
}

func (g *gatedLeader) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedLeader) release() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

// followerOf is a follower whose leader is served at addr.
func followerOf(t *testing.T, leader *env, addr string) *env {
	fb := rpctest.NewReplica(leader.b, "node2")
	fb.SetLeader(addr, "node1", false)
	return newEnv(t, fb)
}

// gatedFollower is a follower of g; when the test ends, g lets held
// batches through before the follower's server closes (which waits for
// the requests they hold).
func gatedFollower(t *testing.T, leader *env, g *gatedLeader) *env {
	f := followerOf(t, leader, g.ts.Listener.Addr().String())
	t.Cleanup(g.open)
	return f
}

// metric reads an unlabelled metric of an env's /metrics.
func metric(t *testing.T, e *env, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(e.do("GET", "/metrics", "").body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// slots is the number of batches a follower keeps unsettled per leader
// (rpc's forwardSlots).
const slots = 3

// TestForwardBatched: while a follower's batch slots to the leader are
// all busy, the writes it gets wait and go to the leader in one batch.
// Each is answered as it would have been alone: its own status, headers
// and body, the jobs it made, its token honoured, its error its own.
func TestForwardBatched(t *testing.T) {
	leader, _ := pair(t)
	g := newGatedLeader(t, leader.srv.Handler())
	f := gatedFollower(t, leader, g)
	jobs0 := jobCount(leader.b)

	g.hold()
	type answer struct {
		i int
		r result
	}
	answers := make(chan answer, 32)
	send := func(i int, method, path, body string, hdr ...string) {
		go func() { answers <- answer{i, doHTTP(t, f.ts.URL, method, path, body, hdr...)} }()
	}
	// The first writes take the slots and are held at the leader.
	for i := 0; i < slots; i++ {
		send(100+i, "PUT", fmt.Sprintf("/2/tags?tag=slot%d", i), "")
	}
	waitFor(t, "a batch per slot at the leader", func() bool { return g.batches.Load() == slots })
	// Twenty more wait on the follower: tagged writes (two with tokens),
	// a job, and a bad one.
	for i := 0; i < 16; i++ {
		send(i, "PUT", fmt.Sprintf("/2/tags?tag=t%d", i), "")
	}
	send(16, "PUT", "/2/tags?tag=tok", "", rpc.HeaderSubmitToken, "batched-1")
	send(17, "PUT", "/2/tags?tag=tok2", "", rpc.HeaderSubmitToken, "batched-2")
	send(18, "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0}]}`)
	send(19, "POST", "/2/nodes", `{"node_name":"node9","bogus":1}`)
	waitFor(t, "20 writes queued on the follower", func() bool { return metric(t, f, "gnt_api_forward_queued") == 20 })
	if g.batches.Load() != slots {
		t.Fatalf("%d batches reached the leader while all %d slots were busy", g.batches.Load(), slots)
	}
	g.release()

	got := map[int]result{}
	for len(got) < 20+slots {
		select {
		case a := <-answers:
			got[a.i] = a.r
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d answered", len(got), 20+slots)
		}
	}
	if n := g.batches.Load(); n != slots+1 || g.plain.Load() != 0 {
		t.Errorf("the leader got %d batches and %d plain requests; want %d and 0", n, g.plain.Load(), slots+1)
	}
	if b, r := metric(t, f, "gnt_api_forward_batches_total"), metric(t, f, "gnt_api_forward_batched_requests_total"); b != slots+1 || r != 20+slots {
		t.Errorf("follower counted %v batches of %v requests; want %d of %d", b, r, slots+1, 20+slots)
	}
	ids := map[string]bool{}
	for i, r := range got {
		if i == 19 {
			continue
		}
		mustOK(t, r)
		id := strings.TrimSpace(string(r.body))
		if ids[id] {
			t.Errorf("request %d answered job %s twice", i, id)
		}
		ids[id] = true
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || jobOf(leader.b, n) == nil {
			t.Errorf("request %d: answer %q names no job of the leader", i, r.body)
		}
		if r.header.Get(rpc.HeaderIndex) == "" || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: headers %v lack the leader's", i, r.header)
		}
	}
	checkErr(t, got[19], 400, "wrong_input", "bogus")
	if n := jobCount(leader.b) - jobs0; n != 19+slots {
		t.Errorf("%d jobs made, want %d", n, 19+slots)
	}
	tags := readState(leader.b, func(st *fsm.State) []string { return st.Cluster.Tags })
	if len(tags) != 18+slots {
		t.Errorf("cluster tags %v, want %d", tags, 18+slots)
	}
	// A token is honoured inside a batch: sent again, it names the job
	// the first made.
	again := f.do("PUT", "/2/tags?tag=tok", "", rpc.HeaderSubmitToken, "batched-1")
	if !bytes.Equal(again.body, got[16].body) {
		t.Errorf("resent token answered %s, first %s", again.body, got[16].body)
	}
}

// TestForwardBatchedHeld: a held submission in a batch frees its slot
// once the leader has applied it, so writes behind it are not held too.
func TestForwardBatchedHeld(t *testing.T) {
	leader, _ := pair(t)
	g := newGatedLeader(t, leader.srv.Handler())
	f := gatedFollower(t, leader, g)
	held := make(chan result, slots)
	for i := 0; i < slots; i++ {
		go func() {
			held <- doHTTP(t, f.ts.URL, "POST", "/2/jobs?wait=3s", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1}]}`)
		}()
	}
	waitFor(t, "a held job per slot queued", func() bool { return jobCount(leader.b) == slots })
	// Every slot holds a job nothing runs; a tag write still goes through,
	// in a batch of its own, while they wait.
	mustOK(t, f.do("PUT", "/2/tags?tag=behind", ""))
	select {
	case r := <-held:
		t.Fatalf("a held submission answered before the write behind it: %s", r)
	default:
	}
	if g.batches.Load() != slots+1 {
		t.Errorf("%d batches; want %d", g.batches.Load(), slots+1)
	}
	for i := 0; i < slots; i++ {
		r := <-held
		mustOK(t, r)
		if s := r.header.Get(rpc.HeaderJobStatus); s != fsm.StatusQueued {
			t.Errorf("held job status %q, want queued after the hold", s)
		}
	}
}

// TestForwardBatchedAwaitHere: the leader answers a held submission that
// came in a batch as soon as its job is queued, and the follower waits for
// the job on its own replica: the batch does not stay open at the leader
// for the wait, a client that gives up ends it, and a client that waits
// gets the job's final status.
func TestForwardBatchedAwaitHere(t *testing.T) {
	leader, _ := pair(t)
	var open atomic.Int32 // batches the leader is serving
	h := leader.srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == forwardPath {
			open.Add(1)
			defer open.Add(-1)
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	f := followerOf(t, leader, ts.Listener.Addr().String())
	held := `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1}]}`

	// A client that gives up.
	jobs0 := jobCount(leader.b)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", f.ts.URL+"/2/jobs?wait=50s", strings.NewReader(held))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	waitFor(t, "the job queued", func() bool { return jobCount(leader.b) == jobs0+1 })
	waitFor(t, "the leader done with the batch", func() bool { return open.Load() == 0 })
	select {
	case err := <-gone:
		t.Fatalf("the held submission ended before its job did: %v", err)
	default:
	}
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the client's request ended without its cancel")
	}

	// A client that waits gets the status the job ends with.
	answer := make(chan result, 1)
	go func() { answer <- doHTTP(t, f.ts.URL, "POST", "/2/jobs?wait=20s", held) }()
	waitFor(t, "the job queued", func() bool { return jobCount(leader.b) == jobs0+2 })
	waitFor(t, "the leader done with the batch", func() bool { return open.Load() == 0 })
	id := readState(leader.b, func(st *fsm.State) int64 { return st.NextJobID - 1 })
	if err := leader.b.UpdateJob(id, 0, fsm.ActionFinish, fsm.StatusSuccess, nil); err != nil {
		t.Fatal(err)
	}
	r := <-answer
	mustOK(t, r)
	if got := r.header.Get(rpc.HeaderJobStatus); got != fsm.StatusSuccess {
		t.Errorf("job status %q, want success", got)
	}
	if strings.TrimSpace(string(r.body)) != fmt.Sprint(id) {
		t.Errorf("answer %s, want job %d", r.body, id)
	}
	if r.header.Get("X-Gnt-Await") != "" {
		t.Error("the leader's await header reached the client")
	}
	if idx, _ := strconv.ParseUint(r.header.Get(rpc.HeaderIndex), 10, 64); idx != leader.b.FSM().Index() {
		t.Errorf("index %d, want the state's %d where the job ended", idx, leader.b.FSM().Index())
	}
}

// TestForwardBatchLeaderHolds: a held submission in a batch from a
// follower that does not wait for it itself (a gntd from before
// X-Gnt-Await-Here) is held by the leader, as before: the batch's answer
// says "applied" at once, so the follower's slot is free, and carries the
// answer when the wait is over.
func TestForwardBatchLeaderHolds(t *testing.T) {
	leader, _ := pair(t)
	uvarint := func(b []byte, v int) []byte { return binary.AppendUvarint(b, uint64(v)) }
	str := func(b []byte, s string) []byte { return append(uvarint(b, len(s)), s...) }
	body := uvarint([]byte{1}, 1) // format version 1, one request
	body = str(str(body, "POST"), "/2/jobs?wait=300ms")
	body = str(uvarint(body, 0), `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1}]}`)
	r := doHTTP(t, leader.ts.URL, "POST", forwardPath, string(body), "Content-Type", "application/x-gnt-forward")
	mustOK(t, r)
	var kinds []byte
	for rd := bytes.NewReader(r.body); rd.Len() > 0; {
		n, err := binary.ReadUvarint(rd)
		if err != nil {
			t.Fatal(err)
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(rd, frame); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, frame[1]) // after the position, 0
		if frame[1] == 'r' && !bytes.Contains(frame, []byte(fsm.StatusQueued)) {
			t.Errorf("answer frame %q does not carry the status after the wait", frame)
		}
	}
	if string(kinds) != "ar" {
		t.Errorf("frames %q, want an applied frame and then the answer", kinds)
	}
}

// TestForwardBatchRefused: a leader that refuses a batch whole (400)
// served none of it; each write is forwarded alone and gets its own
// answer.
func TestForwardBatchRefused(t *testing.T) {
	leader, _ := pair(t)
	g := newGatedLeader(t, leader.srv.Handler())
	g.refuse(400, `{"code":400,"error_code":"wrong_input","message":"batched forward: request 0: header count is 300, more than 256"}`)
	f := gatedFollower(t, leader, g)
	mustOK(t, f.do("PUT", "/2/tags?tag=alone", ""))
	checkErr(t, f.do("POST", "/2/nodes", `{"node_name":"node9","bogus":1}`), 400, "wrong_input", "bogus")
	if g.batches.Load() != 2 || g.plain.Load() != 2 {
		t.Errorf("leader got %d batches and %d plain writes; want 2 and 2", g.batches.Load(), g.plain.Load())
	}
}

// TestForwardUnbatchable: a write with a header field longer than a
// batch carries is forwarded alone, and others still go in batches.
func TestForwardUnbatchable(t *testing.T) {
	leader, _ := pair(t)
	g := newGatedLeader(t, leader.srv.Handler())
	f := gatedFollower(t, leader, g)
	mustOK(t, f.do("PUT", "/2/tags?tag=long", "", "X-Long", strings.Repeat("x", 70000)))
	mustOK(t, f.do("PUT", "/2/tags?tag=short", ""))
	if g.plain.Load() != 1 || g.batches.Load() != 1 {
		t.Errorf("leader got %d plain writes and %d batches; want 1 and 1", g.plain.Load(), g.batches.Load())
	}
}

// TestForwardBatchUnsupported: a leader without batches (a gntd from
// before them answers 404) gets each write on its own, and the follower
// does not try a batch again for a while.
func TestForwardBatchUnsupported(t *testing.T) {
	leader, _ := pair(t)
	g := newGatedLeader(t, leader.srv.Handler())
	g.refuse(404, `{"code":404,"error_code":"not_found","message":"no such resource"}`)
	f := gatedFollower(t, leader, g)
	for i := 0; i < 3; i++ {
		mustOK(t, f.do("PUT", fmt.Sprintf("/2/tags?tag=old%d", i), ""))
	}
	if g.batches.Load() != 1 || g.plain.Load() != 3 {
		t.Errorf("old leader got %d batches and %d plain writes; want 1 and 3", g.batches.Load(), g.plain.Load())
	}
}

// TestForwardBatchBadInput: the leader refuses a damaged batch whole,
// before serving any of it, and answers a request it cannot serve inside
// a good batch with its own error.
func TestForwardBatchBadInput(t *testing.T) {
	leader, _ := pair(t)
	jobs0 := jobCount(leader.b)
	checkErr(t, leader.do("POST", forwardPath, "{}", "Content-Type", "application/json"), 415, "wrong_input", "Content-Type")
	checkErr(t, leader.do("POST", forwardPath, "\x01\x02\x03PUT", "Content-Type", "application/x-gnt-forward"), 400, "wrong_input", "")
	// Another version of the format is answered as by a gntd without
	// batches, so that the follower forwards each write alone.
	checkErr(t, leader.do("POST", forwardPath, "\x07", "Content-Type", "application/x-gnt-forward"), 404, rpc.CodeNotFound, "")
	checkErr(t, leader.do("GET", forwardPath, ""), 405, rpc.CodeMethod, "")
	// A batch holding a batch, a method no handler forwards, and a good
	// write: the first two get their own errors, the third is served.
	var b []byte
	b = append(b, 1, 3)
	b = append(append(append(b, 3), "PUT"...), byte(len(forwardPath)))
	b = append(append(b, forwardPath...), 0, 0)
	b = append(append(append(b, 5), "TRACE"...), 7)
	b = append(append(b, "/2/tags"...), 0, 0)
	b = append(append(append(b, 3), "PUT"...), 16)
	b = append(append(b, "/2/tags?tag=good"...), 0, 0)
	r := leader.do("POST", forwardPath, string(b), "Content-Type", "application/x-gnt-forward")
	if r.status != 200 || r.header.Get("Content-Type") != "application/x-gnt-forward" {
		t.Fatalf("batch answered %s", r)
	}
	for _, want := range []string{"a batched forward cannot hold another", `method \"TRACE\" cannot be forwarded`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("batch answer %q lacks %q", r.body, want)
		}
	}
	if jobCount(leader.b) != jobs0+1 {
		t.Errorf("%d jobs made; want the good write's only", jobCount(leader.b)-jobs0)
	}
}

// cutWriter passes a batch's answer through until its first write, then
// flushes that and drops the connection: the follower has read part of
// the batch's answers when the stream breaks.
// swallowWriter sends the status line and headers of an answer and drops
// its body.
type swallowWriter struct {
	http.ResponseWriter
}

func (w *swallowWriter) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code)
	w.ResponseWriter.(http.Flusher).Flush()
}

func (w *swallowWriter) Write(b []byte) (int, error) { return len(b), nil }

func (w *swallowWriter) Flush() {}

// TestForwardBatchCut: a batch whose answer stream breaks after its first
// frames. A write answered before the break keeps its answer; one that was
// not is a forward that broke: untokened, indeterminate; with a token,
// forwarded again, and answered with the job the first forward made.
func TestForwardBatchCut(t *testing.T) {
	leader, _ := pair(t)
	h := leader.srv.Handler()
	var batches atomic.Int32
	gate := make(chan struct{})
	cutter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != forwardPath {
			h.ServeHTTP(w, r)
			return
		}
		switch n := batches.Add(1); {
		case n <= slots:
			<-gate // hold every slot while the next writes queue up
			h.ServeHTTP(w, r)
		case n == slots+1:
			// The leader serves the whole batch, but its answers are
			// lost: the stream breaks after the status line.
			h.ServeHTTP(&swallowWriter{ResponseWriter: w}, r)
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		default:
			h.ServeHTTP(w, r)
		}
	}))
	defer cutter.Close()
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	f := followerOf(t, leader, cutter.Listener.Addr().String())
	type answer struct {
		name string
		r    result
	}
	answers := make(chan answer, slots+2)
	send := func(name, method, path, body string, hdr ...string) {
		go func() { answers <- answer{name, doHTTP(t, f.ts.URL, method, path, body, hdr...)} }()
	}
	jobs0 := jobCount(leader.b)
	for i := 0; i < slots; i++ {
		send(fmt.Sprintf("slot%d", i), "PUT", fmt.Sprintf("/2/tags?tag=s%d", i), "")
	}
	waitFor(t, "a batch per slot at the leader", func() bool { return batches.Load() == slots })
	held := `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1}]}`
	send("held", "POST", "/2/jobs?wait=1s", held)
	send("held-token", "POST", "/2/jobs?wait=1s", held, rpc.HeaderSubmitToken, "cut-1")
	waitFor(t, "2 writes queued", func() bool { return metric(t, f, "gnt_api_forward_queued") == 2 })
	close(gate)
	got := map[string]result{}
	for len(got) < slots+2 {
		select {
		case a := <-answers:
			got[a.name] = a.r
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d answered", len(got), slots+2)
		}
	}
	for i := 0; i < slots; i++ {
		mustOK(t, got[fmt.Sprintf("slot%d", i)])
	}
	// Both held jobs were queued by the leader before the break, and
	// neither answer reached the follower.
	checkErr(t, got["held"], 503, rpc.CodeIndeterminate, "")
	mustOK(t, got["held-token"])
	id := readState(leader.b, func(st *fsm.State) int64 { id, _ := st.JobByToken("cut-1"); return id })
	if strings.TrimSpace(string(got["held-token"].body)) != fmt.Sprint(id) {
		t.Errorf("tokened write answered %s; its token names job %d", got["held-token"].body, id)
	}
	if n := jobCount(leader.b) - jobs0; n != slots+2 {
		t.Errorf("%d jobs made by the %d writes; want as many (the resend made none)", n, slots+2)
	}
	if batches.Load() != slots+2 {
		t.Errorf("%d batches; want %d (the tokened write forwarded again)", batches.Load(), slots+2)
	}
}

// TestForwardBatchStrangeAnswer: an answer to a batch that is not a
// batch's answer (a 200 of another type) settles nothing: an untokened
// write may have been applied, so it is indeterminate.
func TestForwardBatchStrangeAnswer(t *testing.T) {
	leader, _ := pair(t)
	strange := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "hello")
	}))
	defer strange.Close()
	f := followerOf(t, leader, strange.Listener.Addr().String())
	checkErr(t, f.do("PUT", "/2/tags?tag=strange", ""), 503, rpc.CodeIndeterminate, "")
}
