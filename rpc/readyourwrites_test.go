package rpc_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// TestReadYourWrites: a follower whose replica has not applied a write it
// answered serves later reads of anyone through the leader (the job, its
// wait, the tags); a job id above the replica's highest is asked of the
// leader instead of answering 404; reads of a replica that is not behind
// stay local.
func TestReadYourWrites(t *testing.T) {
	lb := rpctest.NewCluster()
	leader := newEnv(t, lb)
	// A replica that never catches up: its own state, which the leader's
	// writes never reach.
	fb := rpctest.New("node2")
	if err := fb.Init(context.Background(), rpc.InitRequest{ClusterName: "cluster.example.com"}); err != nil {
		t.Fatal(err)
	}
	fb.SetLeader(leader.addr(), "node1", false)
	follower := newEnv(t, fb)

	// Reads before any write through the follower are its own.
	r := follower.do("GET", "/2/tags", "")
	mustOK(t, r)
	if local := r.header.Get(rpc.HeaderIndex); local != strconv.FormatUint(fb.FSM().Index(), 10) {
		t.Errorf("a read of an up-to-date replica came from index %s, not its own %d", local, fb.FSM().Index())
	}

	// A job submitted through the leader is unknown to the replica: asked
	// of the leader, not 404.
	r = leader.do("PUT", "/2/tags?tag=theirs", "")
	mustOK(t, r)
	other := strings.TrimSpace(string(r.body))
	if r := follower.do("GET", "/2/jobs/"+other, ""); r.status != http.StatusOK {
		t.Errorf("a job newer than the replica, through the follower: %s", r)
	}
	if r := follower.do("GET", "/2/jobs/"+other+"/wait?fields=status", ""); r.status != http.StatusOK {
		t.Errorf("waiting on a job newer than the replica: %s", r)
	}
	if r := follower.do("GET", "/2/jobs/99999", ""); r.status != http.StatusNotFound {
		t.Errorf("a job that exists nowhere: %s", r)
	}

	// A write answered by the follower: every later read shows it.
	r = follower.do("PUT", "/2/tags?tag=mine", "")
	mustOK(t, r)
	id := strings.TrimSpace(string(r.body))
	for _, path := range []string{"/2/jobs/" + id, "/2/jobs/" + id + "/wait?fields=status", "/2/tags"} {
		r := follower.do("GET", path, "")
		if r.status != http.StatusOK {
			t.Errorf("GET %s after the write: %s", path, r)
			continue
		}
		if path == "/2/tags" && !strings.Contains(string(r.body), "mine") {
			t.Errorf("GET /2/tags after the write: %s", r.body)
		}
	}
	if fb.ApplyCalls() != 0 {
		t.Errorf("the follower applied %d commands itself", fb.ApplyCalls())
	}
}
