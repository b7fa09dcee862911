package main

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// TestAgainstTheRealAPI runs the client against the real API handlers
// over an in-memory state machine, to keep the client and docs/api.md's
// server in agreement on paths, bodies and answers.
func TestAgainstTheRealAPI(t *testing.T) {
	b := rpctest.NewCluster()
	srv := httptest.NewServer(rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true}).Handler())
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	b.SetLeader(addr, "node1", true)

	for _, step := range []struct {
		args []string
		code int
		want []string // substrings of stdout+stderr
	}{
		{[]string{"node", "add", "node2", "--primary-ip", "192.0.2.2"}, 0, []string{"Node node2 added as master candidate"}},
		{[]string{"node", "add", "node3", "--primary-ip", "192.0.2.3", "--master-capable", "no", "--node-parameters", "ssh_port=2222"}, 0, nil},
		{[]string{"node", "list", "--no-headers", "--fields", "name,role,master_capable"}, 0, []string{"node1 M Y\nnode2 C Y\nnode3 R N\n"}},
		{[]string{"node", "modify", "node2", "--drained", "yes"}, 0, []string{"Modified node node2\n", " - drained -> True\n"}},
		{[]string{"node", "modify", "node2", "--offline", "yes", "--master-candidate", "yes"}, 1, []string{"Failure: can't set the node into more than one state"}},
		{[]string{"node", "role", "node2"}, 0, []string{"drained\n"}},
		{[]string{"node", "role", "node2", "regular"}, 0, []string{" - drained -> False\n"}},
		{[]string{"node", "info", "node3"}, 0, []string{"Node name: node3\n", "  master_capable: False\n", "    - ssh_port: 2222\n"}},
		{[]string{"node", "info", "node9"}, 1, []string{"Failure: node \"node9\" does not exist"}},
		{[]string{"group", "add", "g1", "--alloc-policy", "last_resort"}, 0, nil},
		{[]string{"group", "modify", "g1", "--alloc-policy", "preferred"}, 0, []string{"Modified node group g1\n - alloc_policy -> preferred\n"}},
		{[]string{"group", "info", "g1"}, 0, []string{"Group: g1\n", "Allocation policy: preferred\n"}},
		{[]string{"group", "remove", "g1"}, 0, nil},
		{[]string{"cluster", "modify", "--candidate-pool-size", "3"}, 0, []string{" - candidate_pool_size -> 3\n"}},
		{[]string{"cluster", "add-tags", "b", "a"}, 0, nil},
		{[]string{"cluster", "list-tags"}, 0, []string{"a\nb\n"}},
		{[]string{"node", "add-tags", "node2", "x"}, 0, nil},
		{[]string{"node", "list-tags", "node2"}, 0, []string{"x\n"}},
		{[]string{"cluster", "info"}, 0, []string{"Cluster name: cluster.example.com\n", "Master node: node1\n", "Tags: a, b\n", "candidate pool size: 3\n", "uid pool: (empty)\n"}},
		{[]string{"cluster", "modify", "--uid-pool", "1000-1009,1020", "--add-uids", "3000"}, 0, []string{" - uid_pool -> 1000-1009, 1020, 3000\n"}},
		{[]string{"cluster", "modify", "--remove-uids", "1000-1004"}, 1, []string{"1000-1004 is not a range of the uid pool (1000-1009, 1020, 3000)"}},
		{[]string{"cluster", "modify", "--add-uids", "1005"}, 1, []string{"ranges 1000-1009 and 1005 overlap"}},
		{[]string{"cluster", "modify", "--uid-pool", "0-5"}, 2, []string{"--uid-pool: range 0-5: user id 0 is below 1 (uid 0 is root's and is reserved)"}},
		{[]string{"cluster", "modify", "--add-uids", "1-2-3"}, 2, []string{"--add-uids: \"1-2-3\" is not a user id"}},
		{[]string{"cluster", "info"}, 0, []string{"uid pool: 1000-1009, 1020, 3000\n"}},
		{[]string{"--reason", "test", "job", "info", "1"}, 0, []string{"- Job ID: 1\n", "    - Opcode: OP_NODE_ADD\n"}},
		{[]string{"--submit", "node", "remove", "node3", "--force"}, 0, []string{"JobID: "}},
		{[]string{"--consistent", "job", "list"}, 0, []string{"NODE_REMOVE(node3)"}},
		{[]string{"instance", "list"}, 0, nil},
	} {
		r := gnt(t, nil, append([]string{"--server", addr, "--timeout", "5s"}, step.args...)...)
		out := r.stdout + r.stderr
		if r.code != step.code {
			t.Errorf("gnt %s: exit %d, want %d\n%s", strings.Join(step.args, " "), r.code, step.code, out)
			continue
		}
		for _, w := range step.want {
			if !strings.Contains(out, w) {
				t.Errorf("gnt %s: output lacks %q:\n%s", strings.Join(step.args, " "), w, out)
			}
		}
	}

	// A job the executor runs: gnt follows it while it changes.
	id, _, err := rpc.NewClient([]string{addr}).SubmitJob(t.Context(), []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": 0}}, "")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = b.UpdateJob(id, 0, fsm.ActionStart, "", nil, "delaying")
		time.Sleep(100 * time.Millisecond)
		_ = b.UpdateJob(id, 0, fsm.ActionFinish, fsm.StatusError, "delay interrupted", "giving up")
	}()
	start := time.Now()
	r := gnt(t, nil, "--server", addr, "--timeout", "5s", "job", "watch", strconv.FormatInt(id, 10))
	if r.code != 1 || !strings.Contains(r.stdout, " delaying\n") || !strings.Contains(r.stdout, " giving up\n") ||
		r.stderr != "Failure: job "+strconv.FormatInt(id, 10)+" failed: delay interrupted\n" {
		t.Errorf("job watch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("job watch took %v: the blocking reads should return as the job changes", d)
	}
}
