package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// readSnapshotFile decodes a snapshot file gnt wrote.
func readSnapshotFile(t *testing.T, path string) (rpc.SnapshotHeader, *fsm.State) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, st, err := rpc.ReadSnapshot(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h, st
}

// comparable is the part of a state a restore must give back as it was
// saved: everything but what a leader changes by establishing itself
// (epoch, master node) and what gossip and maintd's rounds keep current
// (node liveness, maintd's round state; its incidents are compared).
func comparableState(t *testing.T, st *fsm.State) map[string]string {
	t.Helper()
	out := map[string]string{}
	put := func(k string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = string(b)
	}
	c := *st.Cluster
	c.MasterNode, c.MTime, c.SerialNo = "", 0, 0
	put("cluster", c)
	for _, g := range st.SortedGroups() {
		put("group "+g.Name, g)
	}
	for _, n := range st.SortedNodes() {
		cp := *n
		cp.Liveness, cp.LivenessSince = "", 0
		put("node "+n.Name, cp)
	}
	for _, i := range st.SortedInstances() {
		put("instance "+i.Name, i)
	}
	for _, id := range st.SortedJobIDs() {
		put(fmt.Sprintf("job %d", id), st.Jobs[id])
	}
	for id, a := range st.Archived {
		put(fmt.Sprintf("archived %d", id), a)
	}
	if st.Maintenance != nil {
		for _, in := range st.Maintenance.Incidents {
			put("incident "+in.UUID, in)
		}
	}
	for _, u := range st.SortedRAPIUsers() {
		put("rapi user "+u.Name, u)
	}
	return out
}

// TestSnapshotRoundTrip: gnt cluster snapshot save streams a snapshot
// from the leader (asked through a follower); inspect checks it and shows
// what it holds; after more changes (tags, an instance, a job), restore
// puts the saved state back as one Raft operation: every replica drops
// the later changes, and a snapshot taken afterwards holds the same
// groups, nodes, instances, jobs, incidents and users as the saved one.
// A damaged file and a file of a newer log version are refused with
// nothing changed; without a terminal and without -f, restore refuses.
func TestSnapshotRoundTrip(t *testing.T) {
	state := ""
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1,
		ExtraArgs: []string{"--diagnose-min-interval", "500ms"},
		MemberArgs: func(name, dataDir string) []string {
			dir := dataDir + "-diagnose"
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			st := filepath.Join(filepath.Dir(dataDir), name+"-diagnose-state.json")
			if name == "node21" {
				state = st
			}
			if err := os.WriteFile(st, []byte(`{"status":"Ok"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "hw-check"), []byte("#!/bin/sh\ncat "+st+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{"--diagnose-commands-dir", dir}
		}})
	c.WaitLeader(10 * time.Second)
	for _, m := range c.Members {
		c.WaitAgent(m, 30*time.Second)
	}
	gnt := func(args ...string) string {
		t.Helper()
		out, err := c.GNT(args...)
		if err != nil {
			t.Fatalf("gnt %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	gnt("cluster", "modify", "--maintenance-interval", "1", "--diagnose-interval", "1s", "--diagnose-data-collector-filename", "hw-check")
	gnt("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "128", "--os-type", "debian", "-n", "node21", "saved1")
	gnt("cluster", "add-tags", "saved-tag")
	// An incident: node21 asks to be evacuated; maintd drains it (its
	// instance moves nowhere: it is the only vm-capable node, so the
	// incident fails or waits) and keeps the incident in the state.
	if err := os.WriteFile(state, []byte(`{"status":"evacuate","command":"","details":{"disk":"sda"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Eventually(60*time.Second, 200*time.Millisecond, "an incident in the replicated state", func() error {
		var list []incident
		if _, err := maintdGet(c.WaitLeader(10*time.Second), "/1/status", &list); err != nil {
			return err
		}
		if len(list) == 0 {
			return fmt.Errorf("no incident yet")
		}
		return nil
	})
	// Let maintd settle the incident before saving, so that the state
	// saved is the state restored (maintd goes on after the restore).
	if err := os.WriteFile(state, []byte(`{"status":"Ok"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	gnt("cluster", "modify", "--diagnose-data-collector-filename", "")
	time.Sleep(3 * time.Second) // settle: no assertion depends on it

	saved := filepath.Join(c.Dir, "saved.snap")
	follower := c.Followers(c.WaitLeader(10 * time.Second))[0]
	// Asked of a follower: it streams the leader's answer through.
	cmd := exec.Command(filepath.Join(c.Bin, "gnt"), "--server", follower.APIAddr(), "cluster", "snapshot", "save", saved)
	cmd.Env = append(os.Environ(), "GNT_SERVER=", "HOME="+c.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("snapshot save through %s: %v\n%s", follower.Name, err, out)
	}
	t.Logf("%s", out)
	if fi, err := os.Stat(saved); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v, mode %v; want mode 0600", err, fi.Mode())
	}
	h, savedState := readSnapshotFile(t, saved)
	if h.ClusterName != c.Name || h.LogVersion != fsm.LogVersion || h.Index == 0 || h.Term == 0 {
		t.Fatalf("header %+v", h)
	}
	if savedState.Maintenance == nil || len(savedState.Maintenance.Incidents) == 0 || len(savedState.Jobs) == 0 {
		t.Fatalf("the saved state has no incident or no job: %+v", savedState.CountObjects())
	}
	insp := gnt("cluster", "snapshot", "inspect", saved)
	for _, want := range []string{"Cluster:       " + c.Name, fmt.Sprintf("Raft index:    %d", h.Index), "(checked)",
		fmt.Sprintf("Instances:     %d", len(savedState.Instances)), fmt.Sprintf("Incidents:     %d", len(savedState.Maintenance.Incidents))} {
		if !strings.Contains(insp, want) {
			t.Errorf("inspect does not say %q:\n%s", want, insp)
		}
	}

	// Changes after the save.
	gnt("cluster", "add-tags", "later-tag")
	gnt("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "128", "--os-type", "debian", "-n", "node12", "later1")

	// Refusals change nothing.
	damaged := filepath.Join(c.Dir, "damaged.snap")
	data, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), data...)
	bad[len(bad)-10] ^= 1
	if err := os.WriteFile(damaged, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(c.Dir, "newer.snap")
	nl := strings.Replace(string(data), fmt.Sprintf(`"log_version":%d`, h.LogVersion), fmt.Sprintf(`"log_version":%d`, fsm.LogVersion+1), 1)
	if err := os.WriteFile(newer, []byte(nl), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{damaged: "sha256", newer: fmt.Sprintf("log version %d", fsm.LogVersion+1), saved: "stdin is not a terminal"} {
		args := []string{"cluster", "snapshot", "restore", file}
		if file != saved {
			args = append(args, "-f")
		}
		out, code := c.GNTExit(args...)
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("restore %s: exit %d, want a refusal saying %q:\n%s", filepath.Base(file), code, want, out)
		}
	}
	if !slices.Contains(mustTags(t, c.WaitLeader(10*time.Second)), "later-tag") {
		t.Fatal("a refused restore changed the state")
	}

	out2 := gnt("cluster", "snapshot", "restore", "-f", saved)
	t.Logf("%s", out2)
	c.WaitConverged(30 * time.Second)
	for _, m := range c.Candidates() {
		tags := mustTags(t, m)
		if slices.Contains(tags, "later-tag") || !slices.Contains(tags, "saved-tag") {
			t.Errorf("%s's replica after the restore has tags %v: want saved-tag, not later-tag", m.Name, tags)
		}
	}
	// The restored cluster works: a write after it.
	gnt("cluster", "add-tags", "after-restore")

	again := filepath.Join(c.Dir, "again.snap")
	gnt("cluster", "snapshot", "save", again)
	_, restored := readSnapshotFile(t, again)
	want, got := comparableState(t, savedState), comparableState(t, restored)
	for k, v := range want {
		if k == "cluster" {
			continue // its tags differ by after-restore: checked below
		}
		if got[k] != v {
			t.Errorf("%s differs after the restore:\nsaved    %s\nrestored %s", k, v, got[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "job ") {
			t.Errorf("%s is in the restored state, not in the saved one: %s", k, got[k])
		}
	}
	for _, id := range restored.SortedJobIDs() {
		if savedState.Jobs[id] == nil && (id < savedState.NextJobID) {
			t.Errorf("job %d of the restored state was not saved", id)
		}
	}
	if restored.NextJobID <= savedState.NextJobID {
		t.Errorf("next job id %d after the restore and a job, saved %d", restored.NextJobID, savedState.NextJobID)
	}
	if !reflect.DeepEqual(restored.Cluster.Tags, []string{"after-restore", "saved-tag"}) {
		t.Errorf("cluster tags after the restore: %v", restored.Cluster.Tags)
	}
}

// mustTags reads the cluster tags from a member's own replica.
func mustTags(t *testing.T, m *Member) []string {
	t.Helper()
	var tags []string
	var err error
	m.c.Eventually(10*time.Second, 100*time.Millisecond, "tags of "+m.Name, func() error {
		tags, err = localTags(m)
		return err
	})
	return tags
}

// TestRecoverMajorityLoss: of three candidates, two are killed and their
// data dirs deleted: the survivor has no majority and no leader. Stopped,
// `gntd recover` makes it the only voter of its Raft configuration; it
// refuses without --force when no terminal can confirm, and while its
// gntd runs. Started again, the survivor leads alone with every write
// acknowledged before the loss. The lost candidates come back as fresh
// gntds (empty data dir, the cluster key, --join) and are voters again,
// and a new candidate joins too.
func TestRecoverMajorityLoss(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	leader := c.WaitLeader(10 * time.Second)
	// /2/info names the gntd's build as its --version does.
	version, err := exec.Command(filepath.Join(c.Bin, "gntd"), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	info, ierr := c.Client().Info(context.Background())
	if want := strings.TrimPrefix(strings.TrimSpace(string(version)), "gntd version "); ierr != nil || info.GntVersion != want {
		t.Errorf("/2/info gnt_version %q (%v), want %q", info.GntVersion, ierr, want)
	}
	var acked []string
	for i := 0; i < 5; i++ {
		tag := fmt.Sprintf("acked-%d", i)
		c.addTag(t, tag)
		acked = append(acked, tag)
	}
	survivor := c.Followers(leader)[0]
	// Every acknowledged write is on a majority: on the survivor too once
	// it applied them (a write acknowledged by the other two only would
	// be lost with them; the test's point is what the survivor holds).
	c.WaitConverged(20 * time.Second)
	var lost []*Member
	for _, m := range c.Candidates() {
		if m != survivor {
			lost = append(lost, m)
		}
	}
	for _, m := range lost {
		m.Kill()
		if err := os.RemoveAll(m.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	gntd := filepath.Join(c.Bin, "gntd")
	recover := func(extra ...string) (string, error) {
		cmd := exec.Command(gntd, append([]string{"recover", "--data-dir", survivor.DataDir}, extra...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := recover("--force"); err == nil || !strings.Contains(out, "is locked") {
		t.Fatalf("recover while the gntd runs: %v, want a refusal naming it:\n%s", err, out)
	}
	survivor.Kill()
	if out, err := recover(); err == nil || !strings.Contains(out, "not a terminal") {
		t.Fatalf("recover without a terminal or --force: %v, want a refusal:\n%s", err, out)
	}
	out, err := recover("--force")
	if err != nil {
		t.Fatalf("recover: %v\n%s", err, out)
	}
	t.Logf("gntd recover: %s", out)
	if !strings.Contains(out, survivor.Name+"=Voter@") {
		t.Errorf("recover does not name the new configuration:\n%s", out)
	}
	survivor.Start(t)
	c.Eventually(30*time.Second, 100*time.Millisecond, survivor.Name+" leads alone", func() error {
		if l := c.Leader(); l != survivor {
			return fmt.Errorf("leader %v", l)
		}
		return nil
	})
	tags := mustTags(t, survivor)
	for _, a := range acked {
		if !slices.Contains(tags, a) {
			t.Errorf("the recovered state lacks the acknowledged write %s (has %v)", a, tags)
		}
	}
	c.addTag(t, "after-recover")

	// The lost candidates come back with empty data dirs.
	key, err := os.ReadFile(filepath.Join(survivor.DataDir, "cluster.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range lost {
		if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.DataDir, "cluster.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		// --join names the survivor (node11's own command line named
		// only itself: it made the cluster).
		for k := range m.Args {
			if m.Args[k] == "--join" {
				m.Args[k+1] = survivor.APIAddr()
			}
		}
		m.Start(t)
	}
	c.WaitVoters(3, 90*time.Second)

	// And a new candidate joins.
	s := strings.Split(survivor.IP, ".")
	m := c.newMember("node14", fmt.Sprintf("127.%s.0.14", s[1]), true, nil)
	c.Members = append(c.Members, m)
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.DataDir, "cluster.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.GNT("cluster", "modify", "--candidate-pool-size", "4"); err != nil {
		t.Fatalf("cluster modify: %v\n%s", err, out)
	}
	if out, err := c.GNT("node", "add", "--master-candidate", "yes", "--primary-ip", m.IP, m.Name); err != nil {
		t.Fatalf("node add %s: %v\n%s", m.Name, err, out)
	}
	m.Start(t)
	c.WaitVoters(4, 90*time.Second)
	c.addTag(t, "after-join")
	c.WaitConverged(30 * time.Second)
	for _, m := range c.Candidates() {
		tags := mustTags(t, m)
		for _, a := range append(acked, "after-recover", "after-join") {
			if !slices.Contains(tags, a) {
				t.Errorf("%s lacks %s", m.Name, a)
			}
		}
	}
}

// TestSnapshotRestoreIntoFreshCluster: a snapshot of one cluster restored
// into another, freshly initialised on a host of the same node name but
// with other addresses, another cluster key and another CA: the fresh
// cluster takes the saved configuration (tags, nodes, instances, jobs)
// and keeps its own identity, CA and its member's addresses, so it goes
// on working: a write, and a new node joins with a certificate of its CA.
func TestSnapshotRestoreIntoFreshCluster(t *testing.T) {
	a := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	a.WaitLeader(10 * time.Second)
	for _, m := range a.Members {
		a.WaitAgent(m, 30*time.Second)
	}
	for _, args := range [][]string{
		{"cluster", "add-tags", "from-a"},
		{"instance", "add", "-t", "plain", "--disk", "1G", "--memory", "128", "--os-type", "debian", "-n", "node21", "web1"},
	} {
		if out, err := a.GNT(args...); err != nil {
			t.Fatalf("gnt %v: %v\n%s", args, err, out)
		}
	}
	saved := filepath.Join(a.Dir, "a.snap")
	if out, err := a.GNT("cluster", "snapshot", "save", saved); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	_, savedState := readSnapshotFile(t, saved)
	for _, m := range a.Members {
		m.Kill()
	}

	b := NewCluster(t, ClusterOptions{Candidates: 1})
	bLeader := b.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before, err := b.Client().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.UUID == savedState.Cluster.UUID {
		t.Fatal("the two clusters have the same UUID")
	}
	out, err := b.GNT("cluster", "snapshot", "restore", "-f", saved)
	if err != nil {
		t.Fatalf("restore into the fresh cluster: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	after, err := b.Client().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.UUID != before.UUID || !slices.Contains(after.Tags, "from-a") {
		t.Errorf("after the restore: uuid %s (was %s), tags %v: want its own uuid and the saved tags", after.UUID, before.UUID, after.Tags)
	}
	var inst map[string]any
	if _, err := b.Client().Do(ctx, "GET", "/2/instances/web1", nil, nil, &inst); err != nil {
		t.Errorf("the saved instance web1: %v", err)
	}
	var node map[string]any
	if _, err := b.Client().Do(ctx, "GET", "/2/nodes/node11", nil, nil, &node); err != nil || node["pip"] != bLeader.IP {
		t.Errorf("node11 after the restore: %v, primary ip %v, want this cluster's %s", err, node["pip"], bLeader.IP)
	}
	b.addTag(t, "after-restore")

	// A new node joins the restored cluster: its CA is still this one's.
	s := strings.Split(bLeader.IP, ".")
	m := b.newMember("node22", fmt.Sprintf("127.%s.0.22", s[1]), false, nil)
	b.Members = append(b.Members, m)
	key, err := os.ReadFile(filepath.Join(bLeader.DataDir, "cluster.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.DataDir, "cluster.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := b.GNT("node", "add", "--primary-ip", m.IP, m.Name); err != nil {
		t.Fatalf("node add %s: %v\n%s", m.Name, err, out)
	}
	m.Start(t)
	b.WaitAgent(m, 60*time.Second)
}
