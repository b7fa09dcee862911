package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// pair is a leader and a follower sharing its state.
func pair(t *testing.T) (leader, follower *env) {
	t.Helper()
	lb := rpctest.NewCluster()
	leader = newEnv(t, lb)
	fb := rpctest.NewReplica(lb, "node2")
	fb.SetLeader(leader.addr(), "node1", false)
	fb.SetLastContact(40 * time.Millisecond)
	return leader, newEnv(t, fb)
}

func TestForwardWrites(t *testing.T) {
	leader, follower := pair(t)
	c := ctx(t)

	id, m, err := follower.c.AddNode(c, rpc.AddNodeRequest{NodeName: "node2", PrimaryIP: "192.0.2.2"}, "via follower")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, leader.b, id, m, "POST", "/2/nodes", "via follower")
	if leader.b.ApplyCalls() != 1 || follower.b.ApplyCalls() != 0 {
		t.Errorf("apply calls: leader %d, follower %d", leader.b.ApplyCalls(), follower.b.ApplyCalls())
	}
	if m.Server != follower.addr() || !m.KnownLeader || m.LastContact != 0 {
		t.Errorf("meta %+v: the leader's headers should come back", m)
	}

	// Every kind of write goes through.
	r := follower.do("PUT", "/2/nodes/node2/role", `"drained"`)
	mustOK(t, r)
	if !nodeOf(leader.b, "node2").Drained {
		t.Error("role not set")
	}
	if r := follower.do("PUT", "/2/tags?tag=fwd", ""); r.status != 200 {
		t.Errorf("tags: %s", r)
	}
	if master, err := follower.c.MasterFailover(c, "node2"); err != nil || master != "node2" {
		t.Errorf("failover %q %v", master, err)
	}
	// Errors of the leader come back as they are.
	r = follower.do("POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.9"}`)
	checkErr(t, r, 409, "already_exists", "node_name")

	// Bad input is forwarded as it came and refused by the leader
	// before any Raft write.
	calls := leader.b.ApplyCalls()
	r = follower.do("POST", "/2/nodes", `{"node_name":"node9","bogus":1}`)
	checkErr(t, r, 400, "wrong_input", "bogus")
	if leader.b.ApplyCalls() != calls {
		t.Error("bad input reached the leader")
	}

	// A forwarded request is never forwarded again.
	r = follower.do("PUT", "/2/tags?tag=x", "", rpc.HeaderForwarded, "1")
	checkErr(t, r, 503, rpc.CodeNoLeader, "")
}

func TestForwardJoin(t *testing.T) {
	leader, follower := pair(t)
	addNode(t, leader.b, "node3", "192.0.2.3")
	c := ctx(t)
	jr, err := follower.c.Join(c, follower.b.JoinKey(), rpc.JoinRequest{Node: fsm.NodeSpec{Name: "node3", PrimaryIP: "192.0.2.3",
		Addrs: fsm.Addrs{API: "192.0.2.3:5080"}}})
	if err != nil {
		t.Fatal(err)
	}
	if jr.ClusterUUID == "" || len(leader.b.Joins()) != 1 || len(follower.b.Joins()) != 0 {
		t.Errorf("join %+v, leader joins %d, follower joins %d", jr, len(leader.b.Joins()), len(follower.b.Joins()))
	}
	// The leader verifies again: with the leader's clock an hour ahead,
	// a request the follower accepts is refused there.
	leader.b.SetNow(func() time.Time { return time.Now().Add(time.Hour) })
	_, err = follower.c.Join(c, follower.b.JoinKey(), rpc.JoinRequest{Node: fsm.NodeSpec{Name: "node3"}})
	var ae *rpc.APIError
	if !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("leader accepted a request it should refuse: %v", err)
	}
	if len(leader.b.Joins()) != 1 {
		t.Error("join handled")
	}
}

func TestNoLeader(t *testing.T) {
	leader, _ := pair(t)
	fb := rpctest.NewReplica(leader.b, "node2")
	f := newEnv(t, fb)

	// No leader at all: bad input is refused at once, by the follower
	// itself, rather than after waiting for a leader.
	start := time.Now()
	r := f.do("POST", "/2/nodes", `{"node_name":"node9","bogus":1}`)
	checkErr(t, r, 400, "wrong_input", "bogus")
	if d := time.Since(start); d >= testHold {
		t.Errorf("bad input answered after %s, the hold time", d)
	}

	// A good write is held, then answered 503.
	start = time.Now()
	r = f.do("PUT", "/2/tags?tag=x", "")
	checkErr(t, r, 503, rpc.CodeNoLeader, "")
	if d := time.Since(start); d < testHold {
		t.Errorf("answered after %s", d)
	}

	// A leader appears while the request is held.
	go func() {
		time.Sleep(80 * time.Millisecond)
		fb.SetLeader(leader.addr(), "node1", false)
	}()
	r = f.do("PUT", "/2/tags?tag=x", "")
	mustOK(t, r)

	// The known leader cannot be dialed: retried until it can.
	fb.SetLeader(closedAddr(t), "node1", false)
	go func() {
		time.Sleep(80 * time.Millisecond)
		fb.SetLeader(leader.addr(), "node1", false)
	}()
	r = f.do("PUT", "/2/tags?tag=y", "")
	mustOK(t, r)

	// Bad input while the known leader cannot be reached is refused at
	// once too, not after the hold.
	fb.SetLeader(closedAddr(t), "node1", false)
	start = time.Now()
	r = f.do("POST", "/2/nodes", `{"node_name":"node9","bogus":1}`)
	checkErr(t, r, 400, "wrong_input", "bogus")
	if d := time.Since(start); d >= testHold {
		t.Errorf("bad input to an unreachable leader answered after %s, the hold time", d)
	}

	// ... or until the hold time is over.
	start = time.Now()
	r = f.do("PUT", "/2/tags?tag=z", "")
	checkErr(t, r, 503, rpc.CodeNoLeader, "")
	if d := time.Since(start); d < testHold {
		t.Errorf("answered after %s", d)
	}
	if tags := readState(leader.b, func(st *fsm.State) []string { return st.Cluster.Tags }); len(tags) != 2 {
		t.Errorf("tags %v", tags)
	}
}

func TestApplyNotLeaderAndIndeterminate(t *testing.T) {
	leader, _ := pair(t)
	// A gntd that believes it leads, but whose Apply finds out it does not.
	lb := leader.b
	xb := rpctest.NewReplica(lb, "node2")
	xb.SetLeader("", "node2", true)
	xb.SetApplyHook(func(fsm.Command) error {
		xb.SetLeader(leader.addr(), "node1", false)
		return rpc.ErrNotLeader
	})
	x := newEnv(t, xb)
	r := x.do("PUT", "/2/tags?tag=moved", "")
	mustOK(t, r)
	if xb.ApplyCalls() != 1 || lb.ApplyCalls() != 1 {
		t.Errorf("apply calls %d %d", xb.ApplyCalls(), lb.ApplyCalls())
	}
	if r.header.Get(rpc.HeaderIndex) != strconv.FormatUint(lb.FSM().Index(), 10) {
		t.Errorf("index %s", r.header.Get(rpc.HeaderIndex))
	}

	// A forwarded request that finds the receiver not leading after all.
	yb := rpctest.NewReplica(lb, "node3")
	yb.SetLeader("", "node3", true)
	yb.SetApplyHook(func(fsm.Command) error {
		yb.SetLeader(leader.addr(), "node1", false)
		return rpc.ErrNotLeader
	})
	y := newEnv(t, yb)
	r = y.do("PUT", "/2/tags?tag=again", "", rpc.HeaderForwarded, "1")
	checkErr(t, r, 503, rpc.CodeNoLeader, "")

	// Leadership lost mid-commit.
	lb.SetApplyHook(func(fsm.Command) error { return rpc.ErrIndeterminate })
	r = leader.do("PUT", "/2/tags?tag=maybe", "")
	checkErr(t, r, 503, rpc.CodeIndeterminate, "")
	lb.SetApplyHook(nil)
}

func TestConsistentRead(t *testing.T) {
	leader, follower := pair(t)
	// A follower that has no state yet: stale reads fail, consistent ones
	// are answered by the leader.
	sb := rpctest.New("node4")
	sb.SetLeader(leader.addr(), "node1", false)
	stale := newEnv(t, sb)
	checkErr(t, stale.do("GET", "/2/info", ""), 503, rpc.CodeUnavailable, "")
	r := stale.do("GET", "/2/info?consistent=1", "")
	mustOK(t, r)
	if info := decode[rpc.ClusterInfo](t, r); info.Name != "cluster.example.com" {
		t.Errorf("info %+v", info)
	}
	if leader.b.VerifyCalls() != 1 {
		t.Errorf("verify calls %d", leader.b.VerifyCalls())
	}
	if r.header.Get(rpc.HeaderIndex) != strconv.FormatUint(leader.b.FSM().Index(), 10) {
		t.Errorf("index %s", r.header.Get(rpc.HeaderIndex))
	}

	// On the leader itself.
	r = leader.do("GET", "/2/nodes?consistent=true&bulk=1", "")
	mustOK(t, r)
	if leader.b.VerifyCalls() != 2 || follower.b.VerifyCalls() != 0 {
		t.Errorf("verify calls %d %d", leader.b.VerifyCalls(), follower.b.VerifyCalls())
	}
	r = follower.do("GET", "/2/raft/peers?consistent=1", "")
	mustOK(t, r)
	if leader.b.VerifyCalls() != 3 {
		t.Errorf("verify calls %d", leader.b.VerifyCalls())
	}

	// A leader that cannot confirm its leadership refuses.
	leader.b.SetVerifyError(errors.New("no quorum"))
	checkErr(t, leader.do("GET", "/2/info?consistent=1", ""), 503, rpc.CodeNoLeader, "")
	checkErr(t, follower.do("GET", "/2/info?consistent=1", ""), 503, rpc.CodeNoLeader, "")
	leader.b.SetVerifyError(nil)

	// No leader: held, then 503; the stale read still works.
	follower.b.SetLeader("", "", false)
	checkErr(t, follower.do("GET", "/2/info?consistent=1", ""), 503, rpc.CodeNoLeader, "")
	mustOK(t, follower.do("GET", "/2/info", ""))
}

func TestBlockingQuery(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	idx := b.FSM().Index()

	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := tryAddNode(b, "node2", "192.0.2.2"); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	r := e.do("GET", "/2/nodes?index="+strconv.FormatUint(idx, 10)+"&wait=10s", "")
	mustOK(t, r)
	if d := time.Since(start); d < 90*time.Millisecond || d > 5*time.Second {
		t.Errorf("blocked %s", d)
	}
	got, _ := strconv.ParseUint(r.header.Get(rpc.HeaderIndex), 10, 64)
	if got <= idx {
		t.Errorf("index %d, want > %d", got, idx)
	}
	if nodes := decode[[]rpc.IDURI](t, r); len(nodes) != 2 {
		t.Errorf("nodes %v", nodes)
	}

	// Timing out answers the current state.
	idx = b.FSM().Index()
	start = time.Now()
	r = e.do("GET", "/2/info?index="+strconv.FormatUint(idx, 10)+"&wait=150ms", "")
	mustOK(t, r)
	if d := time.Since(start); d < 140*time.Millisecond {
		t.Errorf("returned after %s", d)
	}
	if r.header.Get(rpc.HeaderIndex) != strconv.FormatUint(idx, 10) {
		t.Errorf("index %s", r.header.Get(rpc.HeaderIndex))
	}

	// An index already passed answers at once.
	start = time.Now()
	mustOK(t, e.do("GET", "/2/info?index=1&wait=10s", ""))
	if d := time.Since(start); d > time.Second {
		t.Errorf("blocked %s on an old index", d)
	}
}

func TestJobWait(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	c := ctx(t)
	id, m, err := e.c.SubmitJob(c, []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": 1}}, "")
	if err != nil {
		t.Fatal(err)
	}
	path := "/2/jobs/" + strconv.FormatInt(id, 10) + "/wait"

	// Without previous info the answer is immediate.
	r := e.do("GET", path+"?fields=status,id", "")
	mustOK(t, r)
	if string(r.body) != `{"job_info":["queued",`+strconv.FormatInt(id, 10)+`],"log_entries":[]}`+"\n" {
		t.Errorf("wait %s", r.body)
	}
	// Unchanged: waits the timeout, then null.
	start := time.Now()
	r = e.do("GET", path+"?timeout=0.2", `{"fields":["status"],"previous_job_info":["queued"]}`)
	mustOK(t, r)
	if string(r.body) != "null\n" || time.Since(start) < 190*time.Millisecond {
		t.Errorf("wait %s after %s", r.body, time.Since(start))
	}
	// A change ends the wait.
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := b.UpdateJob(id, 0, fsm.ActionStart, "", nil, "starting"); err != nil {
			t.Error(err)
		}
	}()
	start = time.Now()
	r = e.do("GET", path+"?timeout=10", `{"fields":["status"],"previous_job_info":["queued"],"previous_log_serial":0}`)
	mustOK(t, r)
	w := decode[rpc.WaitJobResponse](t, r)
	if len(w.JobInfo) != 1 || string(w.JobInfo[0]) != `"running"` || len(w.LogEntries) != 1 || w.LogEntries[0].Msg != "starting" ||
		w.LogEntries[0].Serial != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("wait %s", r.body)
	}
	// New log entries count as a change even when the fields are equal.
	r = e.do("GET", path+"?fields=status", `{"previous_job_info":["running"]}`)
	if w := decode[rpc.WaitJobResponse](t, r); len(w.LogEntries) != 1 {
		t.Errorf("wait %s", r.body)
	}
	r = e.do("GET", path+"?fields=status&previous_log_serial=1&timeout=0", `{"previous_job_info":["running"]}`)
	if string(r.body) != "null\n" {
		t.Errorf("wait %s", r.body)
	}

	// WaitJob loops until the job is final.
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := b.UpdateJob(id, 0, fsm.ActionFinish, fsm.StatusSuccess, map[string]int{"slept": 1}, "done"); err != nil {
			t.Error(err)
		}
	}()
	job, err := e.c.WaitJob(c, id, m.Index)
	if err != nil {
		t.Fatal(err)
	}
	if job.Status != "success" || job.ID != id || string(job.OpResult[0]) != `{"slept":1}` || len(job.OpLog[0]) != 2 || job.EndTS == nil {
		t.Errorf("job %+v", job)
	}
	// A final job answers at once, even when unchanged.
	r = e.do("GET", path+"?fields=status&timeout=10", `{"previous_job_info":["success"]}`)
	if w := decode[rpc.WaitJobResponse](t, r); string(w.JobInfo[0]) != `"success"` {
		t.Errorf("wait %s", r.body)
	}
}

// TestSubmitHeld: POST /2/jobs?wait=D answers when the job is finalized,
// or with its status then when D passes; a configuration-only job is final
// at once, and a held submission sent to a follower is forwarded whole.
func TestSubmitHeld(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	c := ctx(t)
	delay := []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": 1}}

	// Nothing runs the job: the hold runs out and says it is still queued.
	start := time.Now()
	id, m, err := e.c.SubmitJobHeld(c, delay, "", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); m.JobStatus != fsm.StatusQueued || d < 200*time.Millisecond {
		t.Errorf("job %d: status %q after %s, want queued after the hold", id, m.JobStatus, d)
	}

	// The job finishes while the answer is held: the answer says so, with
	// the index of the state that showed it.
	next := readState(b, func(st *fsm.State) int64 { return st.NextJobID })
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := b.UpdateJob(next, 0, fsm.ActionFinish, fsm.StatusError, "boom"); err != nil {
			t.Error(err)
		}
	}()
	id, m, err = e.c.SubmitJobHeld(c, delay, "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if id != next || m.JobStatus != fsm.StatusError || m.Index != b.FSM().Index() {
		t.Errorf("job %d (want %d): status %q at index %d (state at %d)", id, next, m.JobStatus, m.Index, b.FSM().Index())
	}

	// A configuration-only job needs no hold.
	start = time.Now()
	_, m, err = e.c.SubmitJobHeld(c, []map[string]any{{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": []string{"held"}}}, "", 10*time.Second)
	if err != nil || m.JobStatus != fsm.StatusSuccess || time.Since(start) > 5*time.Second {
		t.Errorf("tag job: %v, status %q after %s", err, m.JobStatus, time.Since(start))
	}

	// Through a follower: the wait travels with the forwarded request.
	f := newEnv(t, rpctest.NewReplica(b, "node2"))
	f.b.SetLeader(e.addr(), "node1", false)
	next = readState(b, func(st *fsm.State) int64 { return st.NextJobID })
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := b.UpdateJob(next, 0, fsm.ActionFinish, fsm.StatusSuccess, nil); err != nil {
			t.Error(err)
		}
	}()
	if id, m, err = f.c.SubmitJobHeld(c, delay, "", 10*time.Second); err != nil || id != next || m.JobStatus != fsm.StatusSuccess {
		t.Errorf("through a follower: job %d (want %d) %q: %v", id, next, m.JobStatus, err)
	}
}

func TestJobWaitForUnknownJob(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	next := readState(b, func(st *fsm.State) int64 { return st.NextJobID })
	at := b.FSM().Index() + 1
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := tryAddNode(b, "node2", "192.0.2.2"); err != nil {
			t.Error(err)
		}
	}()
	job, err := e.c.WaitJob(ctx(t), next, at)
	if err != nil {
		t.Fatal(err)
	}
	if job.Status != "success" || job.Summary[0] != "NODE_ADD(node2)" {
		t.Errorf("job %+v", job)
	}
	// Without the index, an unknown job is 404 at once.
	r := e.do("GET", "/2/jobs/"+strconv.FormatInt(next+1, 10)+"/wait?fields=status", "")
	checkErr(t, r, http.StatusNotFound, "unknown_entity", "job_id")
	// With an index that never comes, 404 after the timeout.
	start := time.Now()
	r = e.do("GET", "/2/jobs/"+strconv.FormatInt(next+1, 10)+"/wait?fields=status&timeout=0.1&index="+strconv.FormatUint(at+10, 10), "")
	checkErr(t, r, http.StatusNotFound, "unknown_entity", "job_id")
	if time.Since(start) < 90*time.Millisecond {
		t.Errorf("did not wait for the index")
	}
}

func TestPeersFromLeader(t *testing.T) {
	leader, follower := pair(t)
	leader.b.SetPeers([]rpc.Peer{{ID: "node1", Leader: true, Known: true, AppliedIndex: 7}})
	follower.b.SetPeersError(rpc.ErrNotLeader)
	peers, err := follower.c.Peers(ctx(t))
	if err != nil || len(peers) != 1 || peers[0].AppliedIndex != 7 {
		t.Errorf("peers %+v %v", peers, err)
	}
	follower.b.SetPeersError(errors.New("raft is shut down"))
	checkErr(t, follower.do("GET", "/2/raft/peers", ""), 500, "internal_error", "")
}

// TestForwardBroken: a leader that takes the request and drops the
// connection. A write may have happened (indeterminate); a read is just
// not answered (no_leader, safe to retry).
func TestForwardBroken(t *testing.T) {
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer broken.Close()
	leader, _ := pair(t)
	fb := rpctest.NewReplica(leader.b, "node2")
	fb.SetLeader(broken.Listener.Addr().String(), "node1", false)
	f := newEnv(t, fb)
	checkErr(t, f.do("PUT", "/2/tags?tag=x", ""), 503, rpc.CodeIndeterminate, "")
	checkErr(t, f.do("GET", "/2/info?consistent=1", ""), 503, rpc.CodeNoLeader, "")
	// A tokened write is forwarded again until the hold time runs out,
	// then it is indeterminate all the same.
	n := jobCount(leader.b)
	r := f.do("PUT", "/2/tags?tag=x", "", rpc.HeaderSubmitToken, "broken-1")
	checkErr(t, r, 503, rpc.CodeIndeterminate, "")
	if jobCount(leader.b) != n {
		t.Error("a write the broken leader never passed on made a job")
	}
}

// TestForwardResent: a tokened write whose forward broke after the leader
// had applied it is forwarded again by the follower itself, and answered
// with the job the first forward made: the client sees one answer and the
// state one job.
func TestForwardResent(t *testing.T) {
	leader, _ := pair(t)
	var served atomic.Int32
	flaky := dropFirstAnswer(t, leader.srv.Handler(), &served)
	fb := rpctest.NewReplica(leader.b, "node2")
	fb.SetLeader(flaky.Listener.Addr().String(), "node1", false)
	f := newEnv(t, fb)

	n := jobCount(leader.b)
	r := f.do("PUT", "/2/tags?tag=once", "", rpc.HeaderSubmitToken, "resent-by-follower")
	mustOK(t, r)
	if served.Load() != 2 || jobCount(leader.b) != n+1 {
		t.Errorf("leader served %d times, %d new jobs; want 2 and 1", served.Load(), jobCount(leader.b)-n)
	}
	id := readState(leader.b, func(st *fsm.State) int64 { id, _ := st.JobByToken("resent-by-follower"); return id })
	if strings.TrimSpace(string(r.body)) != fmt.Sprint(id) {
		t.Errorf("answered job %s, the token names job %d", r.body, id)
	}
	// Without a token the follower does not forward it again.
	served.Store(0)
	checkErr(t, f.do("PUT", "/2/tags?tag=twice", ""), 503, rpc.CodeIndeterminate, "")
	if served.Load() != 1 {
		t.Errorf("an untokened write was forwarded %d times", served.Load())
	}
	// Nor a write whose handler does not honour the token (a cancel).
	served.Store(0)
	checkErr(t, f.do("DELETE", "/2/jobs/"+fmt.Sprint(id), "", rpc.HeaderSubmitToken, "cancel-1"), 503, rpc.CodeIndeterminate, "")
	if served.Load() != 1 {
		t.Errorf("a tokened cancel was forwarded %d times", served.Load())
	}
	// Several jobs at once are.
	served.Store(0)
	n = jobCount(leader.b)
	r = f.do("POST", "/2/gnt/jobs", `{"jobs":[[{"OP_ID":"OP_TEST_DELAY","duration":0}],[{"OP_ID":"OP_TEST_DELAY","duration":0}]]}`, rpc.HeaderSubmitToken, "many-by-follower")
	mustOK(t, r)
	if served.Load() != 2 || jobCount(leader.b) != n+2 {
		t.Errorf("several jobs: leader served %d times, %d new jobs; want 2 and 2", served.Load(), jobCount(leader.b)-n)
	}
	// The follower counts what it forwarded again: the tag write and the
	// several jobs.
	if m := f.do("GET", "/metrics", ""); !strings.Contains(string(m.body), "gnt_api_forward_resends_total 2\n") {
		t.Errorf("metrics lack gnt_api_forward_resends_total 2")
	}
}

// TestBodyLimitWithoutLength: a body streamed without Content-Length is
// cut at the limit too.
func TestBodyLimitWithoutLength(t *testing.T) {
	b := rpctest.NewCluster()
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, MaxBody: 64}).Handler()
	body := io.MultiReader(strings.NewReader(`{"node_name":"`), strings.NewReader(strings.Repeat("a", 100)+`"}`))
	req := httptest.NewRequest("POST", "/2/nodes", body)
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	checkErr(t, result{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}, 413, rpc.CodeTooLarge, "")
	rec = serve(h, "POST", "/2/nodes", []byte(`{"node_name":"node2","primary_ip":"192.0.2.2"}`))
	if rec.Code != 200 {
		t.Errorf("small body: %d %s", rec.Code, rec.Body)
	}
}

// TestStopping: once the gntd stops (ServerOptions.Stopping), a write
// held for a leader is refused at once with a retryable 503, and a held
// submission and a job wait answer with what they have, as on their
// timeout, instead of keeping the client until the gntd is gone.
func TestStopping(t *testing.T) {
	const hold = time.Minute // nothing here may wait for it
	lb := rpctest.NewCluster()
	stop, stopNow := context.WithCancel(context.Background())
	mk := func(b *rpctest.Backend) *env {
		srv := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: hold, Stopping: stop,
			Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})})
		ts := httptest.NewServer(srv.Handler())
		t.Cleanup(ts.Close)
		return &env{t: t, b: b, srv: srv, ts: ts, c: rpc.NewClient([]string{ts.Listener.Addr().String()})}
	}
	leader := mk(lb)
	follower := mk(rpctest.NewReplica(lb, "node2")) // knows no leader
	t.Cleanup(stopNow)                              // before the servers close, should the test fail early

	type answer struct {
		name string
		r    result
	}
	answers := make(chan answer, 3)
	// An OP_TEST_DELAY job nobody runs (the fake backend has no executor).
	r := leader.do("POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1}]}`)
	mustOK(t, r)
	var id int64
	if err := json.Unmarshal(r.body, &id); err != nil {
		t.Fatalf("job id %q: %v", r.body, err)
	}
	go func() { answers <- answer{"held write", follower.do("PUT", "/2/tags?tag=x", "")} }()
	go func() {
		answers <- answer{"held submission", leader.do("POST", "/2/jobs?wait=50s", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1}]}`)}
	}()
	go func() {
		answers <- answer{"job wait", leader.do("GET", fmt.Sprintf("/2/jobs/%d/wait?timeout=50", id),
			`{"fields":["status"],"previous_job_info":["queued"]}`)}
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case a := <-answers:
		t.Fatalf("%s answered before the stop: %v", a.name, a.r)
	default:
	}
	stopNow()
	for i := 0; i < 3; i++ {
		select {
		case a := <-answers:
			switch a.name {
			case "held write":
				checkErr(t, a.r, 503, rpc.CodeNoLeader, "")
				if ae := a.r.apiError(t); !strings.Contains(ae.Message, "stopping") {
					t.Errorf("held write refused with %q, which does not say the gntd is stopping", ae.Message)
				}
			case "held submission":
				mustOK(t, a.r)
				if st := a.r.header.Get(rpc.HeaderJobStatus); st != fsm.StatusQueued {
					t.Errorf("held submission answered with status %q, want %q", st, fsm.StatusQueued)
				}
			case "job wait":
				if a.r.status != 200 || strings.TrimSpace(string(a.r.body)) != "null" {
					t.Errorf("job wait answered %v, want null (as on its timeout)", a.r)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 3 requests still held 10 s after the stop", 3-i)
		}
	}
}
