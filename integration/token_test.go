package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestSubmitResentAfterLostAnswer: a submission whose answer is lost after
// the cluster committed it is resent by the client with its token, and the
// resend answers with the job the first made. The answers are lost by a
// proxy in front of a follower, which forwards to the leader: every
// submission runs through real Raft twice and makes one job, a chain of
// three jobs in one submission (POST /2/gnt/jobs) included. A write
// without a token, its answer lost the same way, is not resent: the
// caller gets the error although the job exists, which is what tokens
// are for.
func TestSubmitResentAfterLostAnswer(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	// The proxy passes each request on and, the first time it sees a
	// request (by its token, or its tag when it has none), drops the
	// answer and closes the connection.
	var (
		mu      sync.Mutex
		seen    = map[string]int{}
		dropped = map[string]string{} // tag -> index of the answer dropped
	)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, c.URL(follower, r.URL.RequestURI()), bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := c.HTTP().Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		key := r.Header.Get(rpc.HeaderSubmitToken) + "|" + r.URL.Query().Get("tag")
		mu.Lock()
		seen[key]++
		first := seen[key] == 1
		if first {
			dropped[r.URL.Query().Get("tag")] = resp.Header.Get(rpc.HeaderIndex)
		}
		mu.Unlock()
		if first && r.Method != http.MethodGet {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	}))
	t.Cleanup(proxy.Close)
	cl := rpc.NewClient([]string{proxy.Listener.Addr().String()})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 20
	ids := map[int64]string{}
	for i := 0; i < n; i++ {
		tag := fmt.Sprintf("resent-%d", i)
		id, meta, err := cl.AddTags(ctx, fsm.TagCluster, "", []string{tag}, "token test")
		if err != nil {
			t.Fatalf("tag %s: %v", tag, err)
		}
		// The resend answers with the index where the tag was added (the
		// first answer's), not its own entry's.
		mu.Lock()
		want := dropped[tag]
		mu.Unlock()
		if got := fmt.Sprint(meta.Index); got != want {
			t.Errorf("tag %s: resend answered index %s, the first answer said %s", tag, got, want)
		}
		if prev, dup := ids[id]; dup {
			t.Fatalf("job %d returned for %s and %s", id, prev, tag)
		}
		ids[id] = tag
	}
	if cl.Resends() != n {
		t.Errorf("%d resends, want %d (one per submission)", cl.Resends(), n)
	}
	// Several jobs in one submission (a chain), its answer lost the same
	// way: resent once, made once.
	var chain [][]map[string]any
	for k := 0; k < 3; k++ {
		op := map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": 0, "comment": fmt.Sprintf("chain-%d", k)}
		if k > 0 {
			op["depends"] = []any{[]any{-1, []string{fsm.StatusSuccess}}}
		}
		chain = append(chain, []map[string]any{op})
	}
	chainIDs, _, err := cl.SubmitJobs(ctx, chain, "token test")
	if err != nil || len(chainIDs) != 3 {
		t.Fatalf("chain: %v %v", chainIDs, err)
	}
	if cl.Resends() != n+1 {
		t.Errorf("%d resends, want %d (one per submission)", cl.Resends(), n+1)
	}
	// Without a token: the error comes back, and the job was made.
	var id int64
	_, err = cl.Do(ctx, http.MethodPut, "/2/tags", url.Values{"tag": {"untokened"}}, nil, &id)
	if err == nil {
		t.Fatal("a write without a token was resent after its answer was lost")
	}
	t.Logf("untokened write, answer lost: %v", err)

	var jobs []rpc.JobInfo
	if _, err := c.Client().Do(ctx, http.MethodGet, "/2/jobs", url.Values{"bulk": {"1"}, "consistent": {"1"}}, nil, &jobs); err != nil {
		t.Fatal(err)
	}
	madeBy := map[string][]int64{}
	for _, j := range jobs {
		var op struct {
			Tags    []string `json:"tags"`
			Comment string   `json:"comment"`
		}
		if len(j.Ops) == 1 && json.Unmarshal(j.Ops[0], &op) == nil && len(op.Tags) == 1 {
			madeBy[op.Tags[0]] = append(madeBy[op.Tags[0]], j.ID)
		}
		if op.Comment != "" {
			madeBy[op.Comment] = append(madeBy[op.Comment], j.ID)
		}
	}
	for id, tag := range ids {
		if got := madeBy[tag]; len(got) != 1 || got[0] != id {
			t.Errorf("tag %s: jobs %v, want exactly job %d", tag, got, id)
		}
		expectJobSuccess(ctx, t, c, id, "resent submission "+tag)
	}
	for k, id := range chainIDs {
		name := fmt.Sprintf("chain-%d", k)
		if got := madeBy[name]; len(got) != 1 || got[0] != id {
			t.Errorf("%s: jobs %v, want exactly job %d", name, got, id)
		}
		expectJobSuccess(ctx, t, c, id, "resent chain's "+name)
	}
	if got := madeBy["untokened"]; len(got) != 1 {
		t.Errorf("the untokened write made jobs %v, want one", got)
	}
	t.Logf("%d submissions, each answered only on its resend through %s -> %s: %d jobs, one each", n, follower.Name, leader.Name, len(ids))
}
