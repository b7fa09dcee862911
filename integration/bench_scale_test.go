package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// TestBenchScale builds a 1,000-node, 20,000-instance state through the
// API of a 3-candidate cluster and reports each candidate's RSS, the size
// of the leader's Raft snapshot, the time a restarted follower takes from
// its start to answering with the whole state, and the time a follower
// that needs the leader's snapshot takes to catch up.
//
// The cheapest real path to that state: the 997 other nodes are added
// with OP_NODE_ADD (on loopback addresses nobody listens on: they stay
// down, as nodes that never joined), and the instances are diskless
// forthcoming reservations (configuration only, no OS install) placed on
// the three candidates, which report enough memory for them. Both go in
// jobs of many opcodes from several clients at once.
//
// GNT_BENCH_NODES and GNT_BENCH_INSTANCES change the scale;
// GNT_BENCH_ARGS='--memory-limit 0' with GOGC=400 in the environment
// measures the gntds without the memory limit.
func TestBenchScale(t *testing.T) {
	benchOnly(t)
	nodes := benchInts(t, "GNT_BENCH_NODES", "1000")[0]
	instances := benchInts(t, "GNT_BENCH_INSTANCES", "20000")[0]
	const trailing = 200
	c := NewCluster(t, ClusterOptions{Candidates: 3, ExtraArgs: benchArgs("--memory-mib", "4000000", "--cpus", "4096",
		"--raft-snapshot-threshold", "400", "--raft-trailing-logs", strconv.Itoa(trailing))})
	leader := c.WaitLeader(10 * time.Second)
	subnet := strings.Join(strings.Split(leader.IP, ".")[:2], ".")

	start := time.Now()
	var jobs [][]map[string]any
	var ops []map[string]any
	flush := func(per int) {
		if len(ops) > 0 && (per == 0 || len(ops) >= per) {
			jobs = append(jobs, ops)
			ops = nil
		}
	}
	for i := 0; i < nodes-len(c.Members); i++ {
		ops = append(ops, map[string]any{"OP_ID": "OP_NODE_ADD", "node_name": fmt.Sprintf("bn%04d", i),
			"primary_ip": fmt.Sprintf("%s.%d.%d", subnet, 1+i/200, 1+i%200), "master_candidate": false})
		flush(50)
	}
	flush(0)
	runScaleJobs(t, c, jobs)
	nodeTime := time.Since(start)
	jobs = nil
	cands := c.Candidates()
	for i := 0; i < instances; i++ {
		ops = append(ops, map[string]any{"OP_ID": "OP_INSTANCE_CREATE", "instance_name": fmt.Sprintf("bi%05d", i),
			"disk_template": "diskless", "pnode": cands[i%len(cands)].Name, "forthcoming": true, "start": false,
			"beparams": map[string]any{"memory": 128}})
		flush(100)
	}
	flush(0)
	runScaleJobs(t, c, jobs)
	build := time.Since(start)
	c.WaitConverged(120 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	insts, err := c.Client().Instances(ctx, false)
	if err != nil || len(insts) != instances {
		t.Fatalf("%d instances after the build (err %v), want %d", len(insts), err, instances)
	}
	t.Logf("built %d nodes in %v and %d instances in %v", nodes, nodeTime.Round(time.Millisecond), instances, (build - nodeTime).Round(time.Millisecond))
	report := func(what string) string {
		var parts []string
		for _, m := range c.Candidates() {
			parts = append(parts, fmt.Sprintf("%s=%dMiB(anon=%d,file=%d)", m.Name, vmRSS(m)>>20,
				procStatus(m, "RssAnon")>>20, procStatus(m, "RssFile")>>20))
		}
		return what + " " + strings.Join(parts, " ")
	}
	rssBuilt := report("rss_built")
	heapProfiles(t, c, "scale-built")

	// A follower restarts from its own snapshot and log: the time from its
	// start to its answering at the leader's applied index.
	leader = c.WaitLeader(10 * time.Second)
	f := c.Followers(leader)[0]
	f.Stop()
	lst, err := c.Status(leader)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	f.Start(t)
	restart := waitApplied(t, c, f, lst.AppliedIndex, t0)

	// A follower that needs the leader's snapshot: stop it, write entries
	// until the leader's newest snapshot is past the follower's index by
	// more than the trailing logs, start it, wait for the leader's index.
	leader = c.WaitLeader(10 * time.Second)
	f = c.Followers(leader)[1]
	fst, err := c.Status(f)
	if err != nil {
		t.Fatal(err)
	}
	f.Stop()
	cl := c.NewClient([]string{leader.APIAddr()})
	var snap snapshotMeta
	for n := 0; ; n++ {
		if snap = newestSnapshot(leader); snap.Index > fst.AppliedIndex+trailing+50 {
			break
		}
		if n > 20000 {
			t.Fatalf("no leader snapshot past index %d after %d writes (newest %+v)", fst.AppliedIndex+trailing, n, snap)
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := cl.AddTags(wctx, "cluster", "", []string{fmt.Sprintf("catchup-%d", n)}, "")
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		if n%100 == 99 {
			time.Sleep(500 * time.Millisecond) // let the snapshot timer run
		}
	}
	lst, err = c.Status(leader)
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	f.Start(t)
	catchup := waitApplied(t, c, f, lst.AppliedIndex, t0)
	if got := newestSnapshot(f); got.Index < snap.Index {
		t.Errorf("%s caught up but its newest snapshot is at %d, before the leader's %d: it did not install the leader's snapshot", f.Name, got.Index, snap.Index)
	}
	c.WaitConverged(120 * time.Second)
	heapProfiles(t, c, "scale-restarted")
	lines := []string{
		fmt.Sprintf("BENCH scale nodes=%d instances=%d build=%v %s", nodes, instances, build.Round(time.Millisecond), rssBuilt),
		fmt.Sprintf("BENCH scale snapshot=%.1fMB (leader %s, index %d)", float64(snap.Size)/1e6, leader.Name, snap.Index),
		fmt.Sprintf("BENCH scale follower_restart=%v snapshot_catchup=%v", restart.Round(time.Millisecond), catchup.Round(time.Millisecond)),
		report("BENCH scale rss_after_restarts"),
	}
	for _, l := range lines {
		t.Log(l)
		fmt.Println(l)
	}
}

// runScaleJobs submits jobs from 8 clients spread over the candidates
// and fails the test unless every job succeeds.
func runScaleJobs(t *testing.T, c *Cluster, jobs [][]map[string]any) {
	t.Helper()
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex
		errors []string
	)
	srv := c.Servers()
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl := c.NewClient(append(srv[i%len(srv):], srv[:i%len(srv)]...))
			for {
				k := int(next.Add(1)) - 1
				if k >= len(jobs) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				id, meta, err := cl.SubmitJobHeld(ctx, jobs[k], "bench: scale", time.Minute)
				if err == nil && meta.JobStatus != "success" {
					var job rpc.JobInfo
					job, err = cl.WaitJob(ctx, id, meta.Index)
					if err == nil && job.Status != "success" {
						var res []string
						for _, r := range job.OpResult {
							res = append(res, string(r))
						}
						err = fmt.Errorf("job %d: %s: %.400s", id, job.Status, strings.Join(res, "; "))
					}
				}
				cancel()
				if err != nil {
					mu.Lock()
					errors = append(errors, err.Error())
					mu.Unlock()
					return
				}
			}
		}(i)
	}
	wg.Wait()
	if len(errors) > 0 {
		t.Fatalf("%d clients failed: %v", len(errors), errors)
	}
}

// waitApplied waits until m answers its status at applied index idx or
// later and returns the time since t0.
func waitApplied(t *testing.T, c *Cluster, m *Member, idx uint64, t0 time.Time) time.Duration {
	t.Helper()
	for time.Since(t0) < 5*time.Minute {
		if !m.Running() {
			t.Fatalf("%s exited:\n%s", m.Name, m.log.Tail(40))
		}
		if st, err := c.status(m, false); err == nil && st.AppliedIndex >= idx {
			return time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not reach applied index %d", m.Name, idx)
	return 0
}

// vmRSS is a running member's resident set (VmRSS of /proc/PID/status)
// in bytes, 0 if it cannot be read.
func vmRSS(m *Member) int64 { return procStatus(m, "VmRSS") }

// procStatus is a size field of a running member's /proc/PID/status (VmRSS,
// RssAnon, RssFile...) in bytes, 0 if it cannot be read.
func procStatus(m *Member, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.PID()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// snapshotMeta is what the benchmark reads of a Raft snapshot's meta.json.
type snapshotMeta struct {
	Index uint64
	Size  int64
}

// newestSnapshot is the member's Raft snapshot of the highest index.
func newestSnapshot(m *Member) snapshotMeta {
	dir := filepath.Join(m.DataDir, "raft", "snapshots")
	entries, _ := os.ReadDir(dir)
	var metas []snapshotMeta
	for _, e := range entries {
		if !e.IsDir() || filepath.Ext(e.Name()) == ".tmp" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "meta.json"))
		if err != nil {
			continue
		}
		var sm snapshotMeta
		if json.Unmarshal(b, &sm) == nil {
			metas = append(metas, sm)
		}
	}
	if len(metas) == 0 {
		return snapshotMeta{}
	}
	sort.Slice(metas, func(i, j int) bool { return metas[i].Index < metas[j].Index })
	return metas[len(metas)-1]
}
