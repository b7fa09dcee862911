package rpc_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
	"github.com/hashicorp/go-hclog"
)

// TestFollowerHoldsWritesThroughALeaderChange: the gntd a follower
// forwards to has stepped down (it answers forwarded requests 503
// no_leader, having applied nothing). The follower holds the request, as
// when no leader is known, instead of passing the 503 on, and once it
// learns the new leader the request goes there and succeeds: batched
// writes and consistent reads (forwarded alone). Without a new
// leader within the hold, the answer is 503 no_leader.
func TestFollowerHoldsWritesThroughALeaderChange(t *testing.T) {
	lb := rpctest.NewCluster()
	leader := newEnv(t, lb)

	// The deposed leader: a replica that knows no leader.
	db := rpctest.NewReplica(lb, "node3")
	dsrv := rpc.NewServer(db, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: testHold,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})})
	var refused atomic.Int32
	deposed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refused.Add(1)
		dsrv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(deposed.Close)

	fb := rpctest.NewReplica(lb, "node2")
	fsrv := rpc.NewServer(fb, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: rpc.DefaultHoldTimeout,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})})
	fts := httptest.NewServer(fsrv.Handler())
	t.Cleanup(fts.Close)

	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/2/tags?tag=held", ""},                              // batched
		{"GET", "/2/info?consistent=1", ""},                          // a consistent read
		{"POST", "/2/nodes/node1/modify", `{"master_capable":true}`}, // Ganeti's verb
	} {
		fb.SetLeader(deposed.Listener.Addr().String(), "node3", false)
		refused.Store(0)
		done := make(chan result, 1)
		go func() { done <- doHTTP(t, fts.URL, c.method, c.path, c.body) }()
		waitFor(t, "the deposed leader to refuse a forward", func() bool { return refused.Load() > 0 })
		fb.SetLeader(leader.addr(), "node1", false)
		r := <-done
		if r.status == http.StatusServiceUnavailable {
			t.Errorf("%s %s: the follower passed the deposed leader's refusal on: %s", c.method, c.path, r)
			continue
		}
		if r.status != http.StatusOK {
			t.Errorf("%s %s: %s", c.method, c.path, r)
		}
	}
	if tags := readState(lb, func(st *fsm.State) []string { return st.Cluster.Tags }); len(tags) != 1 || tags[0] != "held" {
		t.Errorf("cluster tags %v", tags)
	}

	// No new leader within the hold: 503 no_leader, saying why.
	short := newEnv(t, rpctest.NewReplica(lb, "node4"))
	short.b.SetLeader(deposed.Listener.Addr().String(), "node3", false)
	r := short.do("PUT", "/2/tags?tag=late", "")
	checkGanetiError(t, "deposed leader, no new one", r.status, r.body, http.StatusServiceUnavailable, "no_leader")
	if ae := r.apiError(t); !strings.Contains(ae.Message, "no longer the leader") || !strings.Contains(ae.Message, "waited") {
		t.Errorf("message %q", ae.Message)
	}
}
