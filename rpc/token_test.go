package rpc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

func jobCount(b *rpctest.Backend) int {
	return readState(b, func(st *fsm.State) int { return len(st.Jobs) + len(st.Archived) })
}

// TestSubmitTokenHeader: a submission resent with its token answers with
// the first one's job, directly and through a follower; a bad token is
// refused with 400 and changes nothing.
func TestSubmitTokenHeader(t *testing.T) {
	leader, follower := pair(t)
	const tok = "gnt-0123456789abcdef"
	first := leader.do("PUT", "/2/tags?tag=a", "", rpc.HeaderSubmitToken, tok)
	mustOK(t, first)
	n := jobCount(leader.b)
	for _, e := range []*env{leader, follower} {
		r := e.do("PUT", "/2/tags?tag=a", "", rpc.HeaderSubmitToken, tok)
		mustOK(t, r)
		if string(r.body) != string(first.body) {
			t.Errorf("resent: job %s, want %s", r.body, first.body)
		}
		if r.header.Get(rpc.HeaderJobStatus) != fsm.StatusSuccess {
			t.Errorf("resent configuration job: status %q", r.header.Get(rpc.HeaderJobStatus))
		}
		// It took effect where the first made it, not at the resend.
		if got, want := r.header.Get(rpc.HeaderIndex), first.header.Get(rpc.HeaderIndex); got != want {
			t.Errorf("resent: index %s, want %s", got, want)
		}
	}
	// A job with a dependency, through POST /2/jobs.
	body := `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[` + string(first.body) + `,[]]]}]}`
	dep := leader.do("POST", "/2/jobs", body, rpc.HeaderSubmitToken, "dep-1")
	mustOK(t, dep)
	mustOK(t, leader.do("PUT", "/2/tags?tag=b", ""))
	if r := leader.do("POST", "/2/jobs", body, rpc.HeaderSubmitToken, "dep-1"); r.status != 200 || string(r.body) != string(dep.body) {
		t.Errorf("resent job with a dependency: %s, want job %s", r, dep.body)
	}
	if got := jobCount(leader.b); got != n+2 {
		t.Errorf("%d jobs, want %d (the first, the dependent one and tag b)", got, n+2)
	}

	for _, bad := range []string{strings.Repeat("t", fsm.MaxSubmitTokenLen+1), "with space", "a/b"} {
		for _, e := range []*env{leader, follower} {
			before := fingerprint(leader.b)
			checkErr(t, e.do("PUT", "/2/tags?tag=c", "", rpc.HeaderSubmitToken, bad), 400, "wrong_input", "token")
			if fingerprint(leader.b) != before {
				t.Errorf("token %q changed the state", bad)
			}
		}
	}
	// Two tokens in one request.
	req := httptest.NewRequest("PUT", "/2/tags?tag=c", nil)
	req.Header.Add(rpc.HeaderSubmitToken, "x")
	req.Header.Add(rpc.HeaderSubmitToken, "y")
	rec := httptest.NewRecorder()
	leader.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), rpc.HeaderSubmitToken) {
		t.Errorf("two tokens: %d %s", rec.Code, rec.Body)
	}
}

// TestSubmitResends: Client.Submit resends a submission whose outcome it
// did not learn, and the resent one finds the job the first made; a
// write without a token is not resent.
func TestSubmitResends(t *testing.T) {
	lb := rpctest.NewCluster()
	e := newEnv(t, lb)
	c := ctx(t)

	// The leader commits the entry, then loses leadership before it can
	// answer: the outcome is indeterminate.
	var calls atomic.Int32
	lb.SetApplyHook(func(cmd fsm.Command) error {
		if calls.Add(1) == 1 {
			if _, _, err := lb.ApplyCommand(cmd); err != nil {
				t.Errorf("applying: %v", err)
			}
			return rpc.ErrIndeterminate
		}
		return nil
	})
	n := jobCount(lb)
	id, _, err := e.c.Submit(c, http.MethodPut, "/2/tags", url.Values{"tag": {"x"}}, nil)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if calls.Load() != 2 || jobCount(lb) != n+1 || e.c.Resends() != 1 {
		t.Errorf("%d applies, %d new jobs, %d resends; want 2, 1 and 1", calls.Load(), jobCount(lb)-n, e.c.Resends())
	}
	if got := readState(lb, func(st *fsm.State) int64 { id, _ := st.JobByToken(lastToken(st)); return id }); got != id {
		t.Errorf("submit returned job %d, the token names %d", id, got)
	}
	// Without a token the client gives the error back.
	calls.Store(0)
	var out int64
	if _, err := e.c.Do(c, http.MethodPut, "/2/tags", url.Values{"tag": {"y"}}, nil, &out); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("untokened write: %v", err)
	}
	lb.SetApplyHook(nil)

	// The connection breaks after the request was served.
	var served atomic.Int32
	broken := dropFirstAnswer(t, e.srv.Handler(), &served)
	bc := rpc.NewClient([]string{broken.Listener.Addr().String()})
	n = jobCount(lb)
	if _, _, err := bc.Submit(c, http.MethodPost, "/2/jobs", nil, map[string]any{"ops": []any{map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": 0}}}); err != nil {
		t.Fatalf("submit over a breaking connection: %v", err)
	}
	if served.Load() != 2 || jobCount(lb) != n+1 {
		t.Errorf("served %d times, %d new jobs; want 2 and 1", served.Load(), jobCount(lb)-n)
	}

	// Several jobs in one submission (POST /2/gnt/jobs), the chain's
	// dependency included: made once, answered with the same ids.
	served.Store(0)
	n = jobCount(lb)
	delay := map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": 0}
	chained := map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": 0, "depends": []any{[]any{-1, []string{}}}}
	ids, _, err := bc.SubmitJobs(c, [][]map[string]any{{delay}, {chained}}, "")
	if err != nil {
		t.Fatalf("submit jobs over a breaking connection: %v", err)
	}
	if served.Load() != 2 || jobCount(lb) != n+2 || len(ids) != 2 || ids[1] != ids[0]+1 {
		t.Errorf("served %d times, %d new jobs, ids %v; want 2, 2 and two consecutive", served.Load(), jobCount(lb)-n, ids)
	}
}

// TestSubmitJobsToken: POST /2/gnt/jobs resent with its token answers with
// the jobs and the index of the first one, through a follower too; a bad
// token is refused and changes nothing.
func TestSubmitJobsToken(t *testing.T) {
	leader, follower := pair(t)
	const body = `{"jobs":[[{"OP_ID":"OP_TEST_DELAY","duration":0}],[{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[-1,[]]]}]]}`
	first := leader.do("POST", "/2/gnt/jobs", body, rpc.HeaderSubmitToken, "many-1")
	mustOK(t, first)
	n := jobCount(leader.b)
	for _, e := range []*env{leader, follower} {
		r := e.do("POST", "/2/gnt/jobs", body, rpc.HeaderSubmitToken, "many-1")
		mustOK(t, r)
		if string(r.body) != string(first.body) {
			t.Errorf("resent: %s, want %s", r.body, first.body)
		}
		if got, want := r.header.Get(rpc.HeaderIndex), first.header.Get(rpc.HeaderIndex); got != want {
			t.Errorf("resent: index %s, want %s", got, want)
		}
	}
	if got := jobCount(leader.b); got != n {
		t.Errorf("resends made %d jobs", got-n)
	}
	for _, bad := range []string{"a#1", strings.Repeat("t", fsm.MaxSubmitTokenLen+1)} {
		for _, e := range []*env{leader, follower} {
			before := fingerprint(leader.b)
			checkErr(t, e.do("POST", "/2/gnt/jobs", body, rpc.HeaderSubmitToken, bad), 400, "wrong_input", "token")
			if fingerprint(leader.b) != before {
				t.Errorf("token %q changed the state", bad)
			}
		}
	}
}

// lastToken returns the token of the newest job.
func lastToken(st *fsm.State) string {
	var best *fsm.Job
	for _, j := range st.Jobs {
		if best == nil || j.ID > best.ID {
			best = j
		}
	}
	if best == nil {
		return ""
	}
	return best.Token
}

// TestSubmitUnsettled: a tokened write whose first try may have been
// applied, and whose resends then find no leader until the deadline, is
// reported indeterminate, not as a write that surely failed.
func TestSubmitUnsettled(t *testing.T) {
	lb := rpctest.NewCluster()
	e := newEnv(t, lb)
	var calls atomic.Int32
	lb.SetApplyHook(func(cmd fsm.Command) error {
		if calls.Add(1) == 1 {
			lb.ApplyCommand(cmd)
			lb.SetLeader("", "", false) // and no leader from now on
			return rpc.ErrIndeterminate
		}
		return rpc.ErrNotLeader
	})
	c, cancel := context.WithTimeout(context.Background(), 2*testHold)
	defer cancel()
	_, _, err := e.c.Submit(c, http.MethodPut, "/2/tags", url.Values{"tag": {"x"}}, nil)
	var ae *rpc.APIError
	if !errors.As(err, &ae) || ae.ErrorCode != rpc.CodeIndeterminate {
		t.Fatalf("unsettled submission: %v, want %s", err, rpc.CodeIndeterminate)
	}
	t.Logf("reported: %v", err)
	// Had no try been applied, no leader is no leader.
	lb2 := rpctest.NewCluster()
	e2 := newEnv(t, lb2)
	lb2.SetLeader("", "", false)
	c2, cancel2 := context.WithTimeout(context.Background(), 2*testHold)
	defer cancel2()
	_, _, err = e2.c.Submit(c2, http.MethodPut, "/2/tags", url.Values{"tag": {"x"}}, nil)
	if errors.As(err, &ae) && ae.ErrorCode == rpc.CodeIndeterminate {
		t.Fatalf("a write no server took is reported indeterminate: %v", err)
	}
}
