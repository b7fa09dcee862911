package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestClusterLifecycle drives a cluster of 3 candidates and 2 plain nodes
// through its configuration life: roles read on every candidate, flags,
// tags, groups, bad input, master failover, master_candidate flag ↔ Raft
// membership, and node removal.
func TestClusterLifecycle(t *testing.T) {
	start := time.Now()
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2})
	t.Logf("cluster of 3 candidates + 2 nodes up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	cl := c.Client()
	cands := c.Candidates()
	plain := []*Member{c.Member("node21"), c.Member("node22")}

	// ---- Raft peers and roles, read on every candidate.
	peers := c.WaitVoters(3, 30*time.Second)
	if ids := peerIDs(peers, ""); !slices.Equal(ids, []string{"node11", "node12", "node13"}) {
		t.Fatalf("raft peers %v, want node11..13", ids)
	}
	for _, m := range cands {
		var ps []rpc.Peer
		meta, err := c.ClientFor(m).Do(ctx, http.MethodGet, "/2/raft/peers", nil, nil, &ps)
		if err != nil {
			t.Fatalf("peers on %s: %v", m.Name, err)
		}
		if v := peerIDs(ps, "voter"); len(v) != 3 {
			t.Errorf("%s: want 3 voters, got %+v", m.Name, ps)
		}
		if l := peerLeader(ps); l != leader.Name {
			t.Errorf("%s: peers name leader %q, want %s", m.Name, l, leader.Name)
		}
		if !meta.KnownLeader {
			t.Errorf("%s: X-Gnt-Known-Leader false on a healthy cluster", m.Name)
		}
	}
	idx := consistentIndex(ctx, t, c)
	checkRoles(ctx, t, c, idx, map[string]string{leader.Name: "M", "node21": "R", "node22": "R"}, "C")
	for _, m := range cands {
		for name, want := range map[string]string{leader.Name: "master", "node21": "regular"} {
			var role string
			if _, err := readOn(ctx, c, m, "/2/nodes/"+name+"/role", nil, idx, &role); err != nil || role != want {
				t.Errorf("%s: role of %s = %q (%v), want %s", m.Name, name, role, err, want)
			}
		}
	}

	// ---- Tags on the cluster, a node and a group.
	tagStart := time.Now()
	for _, obj := range []struct{ kind, name string }{{fsm.TagCluster, ""}, {fsm.TagNode, "node21"}, {fsm.TagNodeGroup, "default"}} {
		what := obj.kind + " " + obj.name
		id, meta, err := cl.AddTags(ctx, obj.kind, obj.name, []string{"env:test", "owner:qa"}, "lifecycle test")
		if err != nil {
			t.Fatalf("add tags to %s: %v", what, err)
		}
		expectJobSuccess(ctx, t, c, id, "add tags to "+what)
		checkTagsEverywhere(ctx, t, c, obj.kind, obj.name, meta.Index, []string{"env:test", "owner:qa"})
		id, meta, err = cl.RemoveTags(ctx, obj.kind, obj.name, []string{"owner:qa"}, "")
		if err != nil {
			t.Fatalf("remove tag from %s: %v", what, err)
		}
		expectJobSuccess(ctx, t, c, id, "remove tag from "+what)
		checkTagsEverywhere(ctx, t, c, obj.kind, obj.name, meta.Index, []string{"env:test"})
		refusedUnchanged(ctx, t, c, false, "removing a missing tag from "+what, func() {
			_, _, err := cl.RemoveTags(ctx, obj.kind, obj.name, []string{"never-set"}, "")
			expectAPIError(t, err, http.StatusNotFound, string(fsm.CodeNoEnt), "tags", "removing a missing tag from "+what)
		})
	}
	t.Logf("tags on cluster, node and group, checked on every candidate, in %v", time.Since(tagStart).Round(time.Millisecond))

	// ---- Node groups.
	id, _, err := cl.AddGroup(ctx, map[string]any{"group_name": "rack2", "alloc_policy": "last_resort"}, "")
	if err != nil {
		t.Fatalf("group add: %v", err)
	}
	expectJobSuccess(ctx, t, c, id, "group add")
	id, meta, err := cl.ModifyGroup(ctx, "rack2", map[string]any{"alloc_policy": "preferred", "ndparams": map[string]any{"ssh_port": 2222}}, "")
	if err != nil {
		t.Fatalf("group modify: %v", err)
	}
	expectJobSuccess(ctx, t, c, id, "group modify")
	for _, m := range cands {
		var g rpc.GroupInfo
		if _, err := readOn(ctx, c, m, "/2/groups/rack2", nil, meta.Index, &g); err != nil {
			t.Fatalf("%s: group rack2: %v", m.Name, err)
		}
		if g.AllocPolicy != "preferred" || fmt.Sprint(g.CustomNDParams["ssh_port"]) != "2222" || g.NodeCnt != 0 {
			t.Errorf("%s: group rack2 = %+v, want alloc_policy preferred, ssh_port 2222, no nodes", m.Name, g)
		}
	}
	id, meta, err = cl.RemoveGroup(ctx, "rack2", "")
	if err != nil {
		t.Fatalf("group remove: %v", err)
	}
	expectJobSuccess(ctx, t, c, id, "group remove")
	for _, m := range cands {
		var gs []rpc.NameURI
		if _, err := readOn(ctx, c, m, "/2/groups", nil, meta.Index, &gs); err != nil || len(gs) != 1 || gs[0].Name != "default" {
			t.Errorf("%s: groups after removal = %+v (%v), want only default", m.Name, gs, err)
		}
		_, err := readOn(ctx, c, m, "/2/groups/rack2", nil, meta.Index, nil)
		expectAPIError(t, err, http.StatusNotFound, string(fsm.CodeNoEnt), "group_name", m.Name+": removed group")
	}

	// ---- Node flags: drained and offline show as roles D and O everywhere.
	for _, f := range []struct {
		node, flag, letter, role string
	}{{"node21", "drained", "D", "drained"}, {"node22", "offline", "O", "offline"}} {
		id, meta, err := cl.ModifyNode(ctx, f.node, map[string]any{f.flag: true}, "")
		if err != nil {
			t.Fatalf("set %s on %s: %v", f.flag, f.node, err)
		}
		expectJobSuccess(ctx, t, c, id, "set "+f.flag)
		checkRoles(ctx, t, c, meta.Index, map[string]string{leader.Name: "M", f.node: f.letter}, "")
		for _, m := range cands {
			var role string
			if _, err := readOn(ctx, c, m, "/2/nodes/"+f.node+"/role", nil, meta.Index, &role); err != nil || role != f.role {
				t.Errorf("%s: role of %s = %q (%v), want %s", m.Name, f.node, role, err, f.role)
			}
		}
		id, meta, err = cl.ModifyNode(ctx, f.node, map[string]any{f.flag: false}, "")
		if err != nil {
			t.Fatalf("clear %s on %s: %v", f.flag, f.node, err)
		}
		expectJobSuccess(ctx, t, c, id, "clear "+f.flag)
		checkRoles(ctx, t, c, meta.Index, map[string]string{leader.Name: "M", "node21": "R", "node22": "R"}, "C")
	}

	// ---- Bad input: the right 4xx, and nothing changes.
	badStart := time.Now()
	runBadInput(ctx, t, c, leader)
	t.Logf("bad-input table checked on every candidate in %v", time.Since(badStart).Round(time.Millisecond))

	// ---- Demoting a candidate below the pool size needs auto_promote.
	follower := c.Followers(leader)[0]
	refusedUnchanged(ctx, t, c, false, "refused demotion", func() {
		_, _, err := cl.ModifyNode(ctx, follower.Name, map[string]any{"master_candidate": false}, "")
		expectAPIError(t, err, http.StatusConflict, string(fsm.CodeState), "auto_promote", "demoting a candidate without auto_promote")
		_, _, err = cl.SetNodeRole(ctx, follower.Name, "regular", false, false, "")
		expectAPIError(t, err, http.StatusConflict, string(fsm.CodeState), "auto_promote", "role regular without auto-promote")
	})

	// ---- Master failover to a named voter.
	followers := c.Followers(leader)
	target := followers[len(followers)-1] // the last follower by name
	_, err = cl.MasterFailover(ctx, leader.Name)
	expectAPIError(t, err, http.StatusConflict, string(fsm.CodeState), "target", "failover to the current master")
	_, err = cl.MasterFailover(ctx, "node99")
	expectAPIError(t, err, http.StatusNotFound, string(fsm.CodeNoEnt), "target", "failover to an unknown node")
	_, err = cl.MasterFailover(ctx, "node22")
	expectAPIError(t, err, http.StatusConflict, string(fsm.CodeState), "target", "failover to a plain node")
	foStart := time.Now()
	newMaster, err := c.ClientFor(follower).MasterFailover(ctx, target.Name) // sent to a follower: forwarded
	if err != nil || newMaster != target.Name {
		t.Fatalf("master-failover --to %s: got %q, %v", target.Name, newMaster, err)
	}
	foAnswer := time.Since(foStart)
	foAll := c.Eventually(10*time.Second, 20*time.Millisecond, "every candidate reports the new master", func() error {
		for _, m := range cands {
			var info rpc.ClusterInfo
			if _, err := c.ClientFor(m).Do(ctx, http.MethodGet, "/2/info", nil, nil, &info); err != nil {
				return fmt.Errorf("%s: %v", m.Name, err)
			}
			if info.Master != target.Name || info.Leader != target.Name {
				return fmt.Errorf("%s reports master %q, leader %q", m.Name, info.Master, info.Leader)
			}
		}
		if l := c.Leader(); l != target {
			return fmt.Errorf("established leader is %v", l)
		}
		return nil
	})
	t.Logf("master-failover %s -> %s: answered in %v, reported by every candidate after %v",
		leader.Name, target.Name, foAnswer.Round(time.Millisecond), (foAnswer + foAll).Round(time.Millisecond))
	oldMaster := leader
	leader = target
	idx = consistentIndex(ctx, t, c)
	checkRoles(ctx, t, c, idx, map[string]string{leader.Name: "M", oldMaster.Name: "C", "node21": "R", "node22": "R"}, "C")

	// ---- master_candidate=false takes a candidate out of Raft (auto_promote
	// puts a plain node in its place); setting it back adds it again, first
	// as non-voter, then as voter.
	demoted := oldMaster
	lc := c.ClientFor(leader)
	id, meta, err = cl.ModifyNode(ctx, demoted.Name, map[string]any{"master_candidate": false, "auto_promote": true}, "")
	if err != nil {
		t.Fatalf("demote %s with auto_promote: %v", demoted.Name, err)
	}
	demoteAt := time.Now()
	job := expectJobSuccess(ctx, t, c, id, "demote with auto_promote")
	var nodes []rpc.NodeInfo
	if _, err := lc.Do(ctx, http.MethodGet, "/2/nodes", url.Values{"bulk": {"1"}, "consistent": {"1"}}, nil, &nodes); err != nil {
		t.Fatal(err)
	}
	var promoted, other *Member
	mcCount := 0
	for _, n := range nodes {
		if n.MasterCandidate {
			mcCount++
		}
		if n.Name == demoted.Name && (n.MasterCandidate || n.Role != "R") {
			t.Errorf("demoted %s is %s (mc %v), want R", n.Name, n.Role, n.MasterCandidate)
		}
		for _, p := range plain {
			if n.Name == p.Name && n.MasterCandidate {
				promoted = p
			}
		}
	}
	for _, p := range plain {
		if p != promoted {
			other = p
		}
	}
	if promoted == nil || mcCount != 3 {
		t.Fatalf("auto_promote promoted no plain node (%d candidates); job log %+v", mcCount, job.OpLog)
	}
	t.Logf("demoting %s with auto_promote promoted %s", demoted.Name, promoted.Name)
	var sawPromotedNonvoter bool
	removed := c.Eventually(15*time.Second, 25*time.Millisecond, demoted.Name+" leaves the Raft configuration", func() error {
		ps, err := lc.Peers(ctx)
		if err != nil {
			return err
		}
		if s := peerSuffrage(ps, promoted.Name); s == "nonvoter" {
			sawPromotedNonvoter = true
		}
		if s := peerSuffrage(ps, demoted.Name); s != "" {
			return fmt.Errorf("%s is still a %s: %+v", demoted.Name, s, ps)
		}
		return nil
	})
	t.Logf("%s out of the Raft configuration %v after the demotion", demoted.Name, removed.Round(time.Millisecond))
	joined := c.Eventually(30*time.Second, 25*time.Millisecond, promoted.Name+" joins Raft as a voter", func() error {
		ps, err := lc.Peers(ctx)
		if err != nil {
			return err
		}
		s := peerSuffrage(ps, promoted.Name)
		if s == "nonvoter" {
			sawPromotedNonvoter = true
		}
		if s != "voter" {
			return fmt.Errorf("%s is %q: %+v", promoted.Name, s, ps)
		}
		return nil
	})
	t.Logf("promoted %s is a voter %v after the demotion (seen as non-voter first: %v)",
		promoted.Name, time.Since(demoteAt).Round(time.Millisecond), sawPromotedNonvoter)
	_ = joined
	if !sawPromotedNonvoter {
		t.Errorf("%s became a voter without being seen as a non-voter first", promoted.Name)
	}
	c.Eventually(15*time.Second, 50*time.Millisecond, demoted.Name+"'s gntd stops its Raft server", func() error {
		st, err := c.Status(demoted)
		if err != nil {
			return err
		}
		if st.Candidate {
			return fmt.Errorf("%s still runs Raft (%s)", demoted.Name, st.RaftState)
		}
		return nil
	})
	// A demoted candidate answers no state reads, and says who does.
	if res := rawAPI(ctx, c.HTTP(), "GET", c.URL(demoted, "/2/nodes"), nil); res.Err != nil || res.Status != http.StatusServiceUnavailable ||
		res.API.ErrorCode != rpc.CodeNotCandidate || !strings.Contains(res.API.Message, leader.APIAddr()) {
		t.Errorf("reading from demoted %s: %d %s %q (%v); want 503 %s naming the candidates", demoted.Name,
			res.Status, res.API.ErrorCode, res.API.Message, res.Err, rpc.CodeNotCandidate)
	}

	id, _, err = cl.ModifyNode(ctx, demoted.Name, map[string]any{"master_candidate": true}, "")
	if err != nil {
		t.Fatalf("promote %s again: %v", demoted.Name, err)
	}
	repromoteAt := time.Now()
	expectJobSuccess(ctx, t, c, id, "promote again")
	var suffrages []string
	c.Eventually(30*time.Second, 25*time.Millisecond, demoted.Name+" back in Raft as a voter", func() error {
		ps, err := lc.Peers(ctx)
		if err != nil {
			return err
		}
		s := peerSuffrage(ps, demoted.Name)
		if s != "" && (len(suffrages) == 0 || suffrages[len(suffrages)-1] != s) {
			suffrages = append(suffrages, s)
			t.Logf("%s is a %s %v after being promoted again", demoted.Name, s, time.Since(repromoteAt).Round(time.Millisecond))
		}
		if s != "voter" {
			return fmt.Errorf("%s is %q", demoted.Name, s)
		}
		return nil
	})
	if len(suffrages) == 0 || suffrages[0] != "nonvoter" {
		t.Errorf("%s went through suffrages %v; want non-voter first, then voter", demoted.Name, suffrages)
	}
	c.WaitVoters(4, 10*time.Second)

	// The promoted plain node steps down again (4 candidates > pool of 3:
	// no auto_promote needed) and leaves Raft.
	id, _, err = cl.ModifyNode(ctx, promoted.Name, map[string]any{"master_candidate": false}, "")
	if err != nil {
		t.Fatalf("demote %s: %v", promoted.Name, err)
	}
	expectJobSuccess(ctx, t, c, id, "demote the promoted node")
	left := c.Eventually(15*time.Second, 25*time.Millisecond, promoted.Name+" leaves Raft", func() error {
		ps, err := lc.Peers(ctx)
		if err != nil {
			return err
		}
		if s := peerSuffrage(ps, promoted.Name); s != "" {
			return fmt.Errorf("%s is still a %s", promoted.Name, s)
		}
		return nil
	})
	t.Logf("%s left Raft %v after its demotion", promoted.Name, left.Round(time.Millisecond))
	c.WaitVoters(3, 10*time.Second)
	// The candidate that left Raft and came back must hold the same state
	// as the others.
	_, convergedAfterReadd := expectConverged(ctx, t, c, 15*time.Second, "after "+demoted.Name+" left Raft and was added again")

	// ---- Removing a plain node.
	_, _, err = cl.RemoveNode(ctx, leader.Name, "")
	expectAPIError(t, err, http.StatusConflict, string(fsm.CodeState), "node_name", "removing the master")
	_, _, err = cl.RemoveNode(ctx, "node99", "")
	expectAPIError(t, err, http.StatusNotFound, string(fsm.CodeNoEnt), "node_name", "removing an unknown node")
	id, meta, err = cl.RemoveNode(ctx, other.Name, "lifecycle test")
	if err != nil {
		t.Fatalf("node remove %s: %v", other.Name, err)
	}
	expectJobSuccess(ctx, t, c, id, "node remove")
	for _, m := range cands {
		var list []rpc.IDURI
		if _, err := readOn(ctx, c, m, "/2/nodes", nil, meta.Index, &list); err != nil {
			t.Fatalf("%s: nodes: %v", m.Name, err)
		}
		var names []string
		for _, x := range list {
			names = append(names, x.ID)
		}
		want := []string{"node11", "node12", "node13", promoted.Name}
		sort.Strings(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: nodes after removing %s = %v, want %v", m.Name, other.Name, names, want)
		}
		_, err := readOn(ctx, c, m, "/2/nodes/"+other.Name, nil, meta.Index, nil)
		expectAPIError(t, err, http.StatusNotFound, string(fsm.CodeNoEnt), "node_name", m.Name+": removed node")
	}
	finalWait := 15 * time.Second
	if !convergedAfterReadd {
		finalWait = 2 * time.Second // already reported; do not wait for it again
	}
	if h, ok := expectConverged(ctx, t, c, finalWait, "at the end"); ok {
		t.Logf("all candidates converged on state %.12s", h)
	}
	t.Logf("whole test %v", time.Since(start).Round(time.Millisecond))
}

// expectConverged waits until every running candidate has applied the
// same index with the same state hash. Unlike Cluster.WaitConverged it
// does not stop the test: it reports, per candidate, what differs.
func expectConverged(ctx context.Context, t *testing.T, c *Cluster, timeout time.Duration, what string) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var detail []string
		hashes := map[string]bool{}
		ok := true
		for _, m := range c.Candidates() {
			if !m.Running() {
				continue
			}
			st, err := c.Status(m)
			if err != nil || !st.Candidate {
				ok = false
				detail = append(detail, fmt.Sprintf("%s: not a running candidate (%v)", m.Name, err))
				continue
			}
			hashes[st.FSMHash] = true
			var info rpc.ClusterInfo
			var jobs []rpc.JobIDURI
			_, ierr := c.ClientFor(m).Do(ctx, http.MethodGet, "/2/info", nil, nil, &info)
			_, jerr := c.ClientFor(m).Do(ctx, http.MethodGet, "/2/jobs", nil, nil, &jobs)
			detail = append(detail, fmt.Sprintf("%s: applied %d hash %.12s serial_no %d jobs %d %v %v",
				m.Name, st.AppliedIndex, st.FSMHash, info.SerialNo, len(jobs), ierr, jerr))
		}
		if ok && len(hashes) == 1 {
			for h := range hashes {
				return h, true
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: candidates did not converge within %v:\n  %s", what, timeout, strings.Join(detail, "\n  "))
			return "", false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runBadInput sends each malformed or refused request to every candidate
// and checks the answer and that the state did not change.
func runBadInput(ctx context.Context, t *testing.T, c *Cluster, leader *Member) {
	t.Helper()
	n21 := c.Member("node21")
	spareIP := strings.TrimSuffix(n21.IP, "21") + "99"
	huge := append([]byte(`{"node_name":"node31","primary_ip":"`+spareIP+`","ndparams":{"x":"`), bytes.Repeat([]byte("a"), 1<<20)...)
	huge = append(huge, []byte(`"}}`)...)
	longTag := strings.Repeat("t", fsm.MaxTagLen+1)
	js := func(s string) []byte { return []byte(s) }
	for _, tc := range []struct {
		name         string
		method, path string
		body         []byte
		status       int
		code, field  string
		// stateful refusals are decided by the state machine on the
		// leader: they go through Raft (the index moves) but change nothing.
		stateful bool
	}{
		{"unknown field", "POST", "/2/nodes", js(`{"node_name":"node31","primary_ip":"` + spareIP + `","colour":"red"}`), 400, "wrong_input", "colour", false},
		{"wrong type (bool)", "PUT", "/2/nodes/node21/modify", js(`{"drained":"yes"}`), 400, "wrong_input", "drained", false},
		{"wrong type (int)", "PUT", "/2/modify", js(`{"candidate_pool_size":"ten"}`), 400, "wrong_input", "candidate_pool_size", false},
		{"invalid node name", "POST", "/2/nodes", js(`{"node_name":"bad_name!","primary_ip":"` + spareIP + `"}`), 400, "wrong_input", "node_name", false},
		{"empty node name", "POST", "/2/nodes", js(`{"primary_ip":"` + spareIP + `"}`), 400, "wrong_input", "node_name", false},
		{"invalid IP", "POST", "/2/nodes", js(`{"node_name":"node31","primary_ip":"300.1.2.3"}`), 400, "wrong_input", "primary_ip", false},
		{"invalid group name", "POST", "/2/groups", js(`{"group_name":"bad group/"}`), 400, "wrong_input", "group_name", false},
		{"invalid JSON", "POST", "/2/nodes", js(`{"node_name":`), 400, "wrong_input", "", false},
		{"data after the JSON", "POST", "/2/groups", js(`{"group_name":"g1"} {}`), 400, "wrong_input", "", false},
		{"two states at once", "PUT", "/2/nodes/node21/modify", js(`{"drained":true,"offline":true}`), 400, "wrong_input", "", false},
		{"no modification", "PUT", "/2/nodes/node21/modify", js(`{}`), 400, "wrong_input", "", false},
		{"invalid role", "PUT", "/2/nodes/node21/role", js(`"superhero"`), 400, "wrong_input", "role", false},
		{"master role", "PUT", "/2/nodes/node21/role", js(`"master"`), 400, "wrong_input", "role", false},
		{"role not a string", "PUT", "/2/nodes/node21/role", js(`{"role":"regular"}`), 400, "wrong_input", "role", false},
		{"bad query flag", "PUT", "/2/nodes/node21/role?force=maybe", js(`"regular"`), 400, "wrong_input", "force", false},
		{"even voter count", "PUT", "/2/modify", js(`{"max_raft_voters":4}`), 400, "wrong_input", "max_raft_voters", false},
		{"tag too long", "PUT", "/2/tags?tag=" + longTag, nil, 400, "wrong_input", "tags", false},
		{"unknown opcode", "POST", "/2/jobs", js(`{"ops":[{"OP_ID":"OP_FROBNICATE"}]}`), 400, "wrong_input", "OP_ID", false},
		{"negative delay", "POST", "/2/jobs", js(`{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":-1}]}`), 400, "wrong_input", "duration", false},
		{"no opcodes", "POST", "/2/jobs", js(`{"ops":[]}`), 400, "wrong_input", "ops", false},
		{"oversized body", "POST", "/2/nodes", huge, 413, "body_too_large", "", false},
		{"method not allowed", "PATCH", "/2/nodes", nil, 405, "method_not_allowed", "", false},
		{"unknown path", "GET", "/2/frobnicators", nil, 404, "not_found", "", false},
		{"duplicate node name", "POST", "/2/nodes", js(`{"node_name":"node21","primary_ip":"` + spareIP + `"}`), 409, "already_exists", "node_name", true},
		{"duplicate primary IP", "POST", "/2/nodes", js(`{"node_name":"node31","primary_ip":"` + n21.IP + `"}`), 409, "resource_not_unique", "primary_ip", true},
		{"duplicate secondary IP", "PUT", "/2/nodes/node22/modify", js(`{"secondary_ip":"` + n21.IP + `"}`), 409, "resource_not_unique", "secondary_ip", true},
		{"duplicate group", "POST", "/2/groups", js(`{"group_name":"default"}`), 409, "already_exists", "group_name", true},
		{"unknown group", "POST", "/2/nodes", js(`{"node_name":"node31","primary_ip":"` + spareIP + `","group":"nosuchgroup"}`), 404, "unknown_entity", "group", true},
		{"unknown node", "PUT", "/2/nodes/node99/modify", js(`{"drained":true}`), 404, "unknown_entity", "node_name", true},
		{"tags of an unknown node", "PUT", "/2/nodes/node99/tags?tag=x", nil, 404, "unknown_entity", "name", true},
		{"master's flags", "PUT", "/2/nodes/" + leader.Name + "/modify", js(`{"drained":true}`), 400, "wrong_input", "", true},
		{"remove the default group", "DELETE", "/2/groups/default", nil, 409, "wrong_state", "group_name", true},
	} {
		refusedUnchanged(ctx, t, c, !tc.stateful, tc.name, func() {
			for _, m := range c.Candidates() {
				res := rawAPI(ctx, c.HTTP(), tc.method, c.URL(m, tc.path), tc.body)
				what := fmt.Sprintf("%s (%s %s on %s)", tc.name, tc.method, tc.path, m.Name)
				if len(what) > 200 {
					what = what[:200] + "..."
				}
				if res.Err != nil {
					t.Errorf("%s: %v", what, res.Err)
					continue
				}
				if res.Status != tc.status || res.API.ErrorCode != tc.code || (tc.field != "" && res.API.Field != tc.field) {
					t.Errorf("%s: got %d %s field %q (%s), want %d %s field %q", what, res.Status, res.API.ErrorCode,
						res.API.Field, res.API.Message, tc.status, tc.code, tc.field)
				}
				if res.API.Message == "" {
					t.Errorf("%s: error without a message: %s", what, res.Body)
				}
			}
		})
	}
}

// stateMark is what must not change when a request is refused.
type stateMark struct {
	serial  int64
	index   uint64
	hash    string
	nextJob int64
	term    uint64
}

// markState reads, through the leader, the config serial, the applied
// index, the state hash and the highest job id.
func markState(ctx context.Context, t *testing.T, c *Cluster) stateMark {
	t.Helper()
	var info rpc.ClusterInfo
	cl := c.Client()
	meta, err := cl.Do(ctx, http.MethodGet, "/2/info", url.Values{"consistent": {"1"}}, nil, &info)
	if err != nil {
		t.Fatalf("consistent info: %v", err)
	}
	var jobs []rpc.JobIDURI
	if _, err := cl.Do(ctx, http.MethodGet, "/2/jobs", url.Values{"consistent": {"1"}}, nil, &jobs); err != nil {
		t.Fatalf("consistent job list: %v", err)
	}
	var next int64
	for _, j := range jobs {
		next = max(next, j.ID)
	}
	l := c.Leader()
	if l == nil {
		t.Fatal("no established leader")
	}
	st, err := c.Status(l)
	if err != nil {
		t.Fatalf("status of leader %s: %v", l.Name, err)
	}
	return stateMark{serial: info.SerialNo, index: meta.Index, hash: st.FSMHash, nextJob: next, term: st.Term}
}

// diff says how the state moved since m was taken (problems), and what is
// worth a log line only (notes).
func (m stateMark) diff(ctx context.Context, t *testing.T, c *Cluster, sameIndex bool) (problems, notes []string) {
	t.Helper()
	now := markState(ctx, t, c)
	if now.serial != m.serial {
		problems = append(problems, fmt.Sprintf("config serial_no moved %d -> %d", m.serial, now.serial))
	}
	switch {
	case now.term != m.term:
		// A new leader's LeaderEstablish entry moves the epoch, so the
		// hash says nothing about the requests then; the serial and the
		// job ids still do.
		notes = append(notes, fmt.Sprintf("the leader changed (term %d -> %d); the state hash is not compared", m.term, now.term))
	case now.hash != m.hash:
		problems = append(problems, fmt.Sprintf("state hash changed %.12s -> %.12s", m.hash, now.hash))
	}
	if now.nextJob != m.nextJob {
		problems = append(problems, fmt.Sprintf("a job was created (highest id %d -> %d)", m.nextJob, now.nextJob))
	}
	if sameIndex && now.index != m.index {
		problems = append(problems, fmt.Sprintf("X-Gnt-Index moved %d -> %d although the request was refused before reaching Raft", m.index, now.index))
	}
	if !sameIndex && now.index != m.index {
		notes = append(notes, fmt.Sprintf("refused by the state machine; Raft index %d -> %d, state unchanged", m.index, now.index))
	}
	return problems, notes
}

// refusedUnchanged runs refuse (requests that must be refused without
// changing anything) and checks that the state did not move: the
// configuration's serial, the jobs, the state's hash (unless the leader
// changed) and, with sameIndex, the Raft index. The leader's own
// background writes can land meanwhile (a node's first storage report
// comes with the self-diagnose round after it joined), so a state that
// moved is tried again, three times at most: a refused request that wrote
// would move it every time.
func refusedUnchanged(ctx context.Context, t *testing.T, c *Cluster, sameIndex bool, what string, refuse func()) {
	t.Helper()
	for try := 1; ; try++ {
		before := markState(ctx, t, c)
		refuse()
		problems, notes := before.diff(ctx, t, c, sameIndex)
		for _, n := range notes {
			t.Logf("%s: %s", what, n)
		}
		if len(problems) == 0 {
			return
		}
		if try == 3 {
			for _, p := range problems {
				t.Errorf("%s: %s (on each of %d tries)", what, p, try)
			}
			return
		}
		t.Logf("%s: try %d: %s; a background write of the leader, or the requests? trying again", what, try, strings.Join(problems, "; "))
	}
}

// rawResult is one HTTP exchange with a member's API.
type rawResult struct {
	Status int
	Header http.Header
	Body   []byte
	API    rpc.APIError
	Err    error
}

// rawAPI sends a request with a raw body and decodes an error answer.
func rawAPI(ctx context.Context, client *http.Client, method, u string, body []byte) rawResult {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return rawResult{Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return rawResult{Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	res := rawResult{Status: resp.StatusCode, Header: resp.Header, Body: data, Err: err}
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(data, &res.API); err != nil {
			res.Err = fmt.Errorf("error answer %d is not JSON: %q", resp.StatusCode, data)
		}
	}
	return res
}

// readOn reads path from one member's own replica, after it applied
// index minIndex (0: no wait).
func readOn(ctx context.Context, c *Cluster, m *Member, path string, q url.Values, minIndex uint64, out any) (rpc.Meta, error) {
	if q == nil {
		q = url.Values{}
	}
	if minIndex > 0 && !q.Has("consistent") {
		q.Set("index", strconv.FormatUint(minIndex-1, 10))
		q.Set("wait", "5s")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	meta, err := c.ClientFor(m).Do(ctx, http.MethodGet, path, q, nil, out)
	if err == nil && minIndex > 0 && meta.Index < minIndex {
		err = fmt.Errorf("%s answered %s at index %d, before %d", m.Name, path, meta.Index, minIndex)
	}
	return meta, err
}

// consistentIndex returns the leader's applied index.
func consistentIndex(ctx context.Context, t *testing.T, c *Cluster) uint64 {
	t.Helper()
	meta, err := c.Client().Do(ctx, http.MethodGet, "/2/info", url.Values{"consistent": {"1"}}, nil, nil)
	if err != nil {
		t.Fatalf("consistent read: %v", err)
	}
	return meta.Index
}

// checkRoles reads /2/nodes?bulk=1 on every candidate, from its replica
// and with ?consistent=1, and compares the role letters: want names some
// nodes, the other candidates have role other (when not empty).
func checkRoles(ctx context.Context, t *testing.T, c *Cluster, index uint64, want map[string]string, other string) {
	t.Helper()
	for _, m := range c.Candidates() {
		for _, consistent := range []bool{false, true} {
			q := url.Values{"bulk": {"1"}}
			if consistent {
				q.Set("consistent", "1")
			}
			var nodes []rpc.NodeInfo
			meta, err := readOn(ctx, c, m, "/2/nodes", q, index, &nodes)
			if err != nil {
				t.Fatalf("%s: nodes (consistent %v): %v", m.Name, consistent, err)
			}
			if !meta.KnownLeader {
				t.Errorf("%s: X-Gnt-Known-Leader false", m.Name)
			}
			got := map[string]string{}
			masters := 0
			for _, n := range nodes {
				got[n.Name] = n.Role
				if n.Role == "M" {
					masters++
				}
				if (n.Role == "M" || n.Role == "C") != n.MasterCandidate {
					t.Errorf("%s: node %s has role %s but master_candidate %v", m.Name, n.Name, n.Role, n.MasterCandidate)
				}
				if n.Drained != (n.Role == "D") || n.Offline != (n.Role == "O") {
					t.Errorf("%s: node %s has role %s but drained %v offline %v", m.Name, n.Name, n.Role, n.Drained, n.Offline)
				}
			}
			if masters != 1 {
				t.Errorf("%s (consistent %v): %d masters in %v", m.Name, consistent, masters, got)
			}
			for name, role := range want {
				if got[name] != role {
					t.Errorf("%s (consistent %v): role of %s = %q, want %s (all: %v)", m.Name, consistent, name, got[name], role, got)
				}
			}
			if other != "" {
				for _, cm := range c.Candidates() {
					if _, ok := want[cm.Name]; !ok && got[cm.Name] != other {
						t.Errorf("%s (consistent %v): role of %s = %q, want %s", m.Name, consistent, cm.Name, got[cm.Name], other)
					}
				}
			}
		}
	}
}

// checkTagsEverywhere reads an object's tags on every candidate.
func checkTagsEverywhere(ctx context.Context, t *testing.T, c *Cluster, kind, name string, index uint64, want []string) {
	t.Helper()
	path := map[string]string{
		fsm.TagCluster: "/2/tags", fsm.TagNode: "/2/nodes/" + name + "/tags", fsm.TagNodeGroup: "/2/groups/" + name + "/tags",
	}[kind]
	for _, m := range c.Candidates() {
		for _, q := range []url.Values{nil, {"consistent": {"1"}}} {
			var tags []string
			if _, err := readOn(ctx, c, m, path, q, index, &tags); err != nil {
				t.Fatalf("%s: tags of %s %s: %v", m.Name, kind, name, err)
			}
			if !slices.Equal(tags, want) {
				t.Errorf("%s: tags of %s %s = %v, want %v (query %v)", m.Name, kind, name, tags, want, q)
			}
		}
	}
}

// expectJobSuccess reads a job through the leader: configuration jobs are
// final when their id comes back.
func expectJobSuccess(ctx context.Context, t *testing.T, c *Cluster, id int64, what string) rpc.JobInfo {
	t.Helper()
	var job rpc.JobInfo
	if _, err := c.Client().Do(ctx, http.MethodGet, "/2/jobs/"+strconv.FormatInt(id, 10), url.Values{"consistent": {"1"}}, nil, &job); err != nil {
		t.Fatalf("%s: job %d: %v", what, id, err)
	}
	if job.Status != fsm.StatusSuccess {
		t.Fatalf("%s: job %d is %s, want success at submission: %s", what, id, job.Status, job.OpResult)
	}
	return job
}

// expectAPIError checks an error's HTTP status, error_code and field.
func expectAPIError(t *testing.T, err error, status int, code, field, what string) {
	t.Helper()
	var ae *rpc.APIError
	if !errors.As(err, &ae) {
		t.Errorf("%s: got %v, want a %d %s API error", what, err, status, code)
		return
	}
	if ae.Status != status || ae.ErrorCode != code || (field != "" && ae.Field != field) {
		t.Errorf("%s: got %d %s field %q (%s), want %d %s field %q", what, ae.Status, ae.ErrorCode, ae.Field, ae.Message, status, code, field)
	}
}

// peerIDs lists the peers' ids (of one suffrage when given), sorted.
func peerIDs(ps []rpc.Peer, suffrage string) []string {
	var out []string
	for _, p := range ps {
		if suffrage == "" || p.Suffrage == suffrage {
			out = append(out, p.ID)
		}
	}
	sort.Strings(out)
	return out
}

func peerLeader(ps []rpc.Peer) string {
	for _, p := range ps {
		if p.Leader {
			return p.ID
		}
	}
	return ""
}

// peerSuffrage is a peer's suffrage, "" when it is not in the configuration.
func peerSuffrage(ps []rpc.Peer, id string) string {
	for _, p := range ps {
		if p.ID == id {
			return p.Suffrage
		}
	}
	return ""
}
