package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// The benchmarks start real clusters and print figures; they assert only
// that the work was done, never how fast. Run them with `make bench`
// (GNT_BENCH=1).
//
// The load generator shares the machine's two cores with the three
// gntds, so it runs with the GC target gntd itself uses (GOGC=400, unless
// GOGC is set): the CPU it does not spend is left to the cluster under
// test, as it would be with the clients on other machines.
func benchOnly(t *testing.T) {
	if os.Getenv("GNT_BENCH") == "" {
		t.Skip("benchmark: set GNT_BENCH=1 (make bench) to run it")
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// benchList returns the comma-separated list in the environment variable
// env, or def: GNT_BENCH_TARGETS=leader GNT_BENCH_CLIENTS=64 narrows a
// run to the one case being studied.
func benchList(env, def string) []string {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

// benchInts is benchList for numbers.
func benchInts(t *testing.T, env, def string) []int {
	var out []int
	for _, s := range benchList(env, def) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("%s: %q is not a number", env, s)
		}
		out = append(out, n)
	}
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// benchArgs are the gntd flags of a benchmark cluster; with
// GNT_BENCH_PROFILE=DIR they add --debug so profileDuring can fetch CPU
// profiles. With GNT_BENCH_LOGS=1 the gntds log at debug level and
// TestBenchFailover prints the survivors' last 60 lines after each kill.
// GNT_BENCH_ARGS adds gntd flags (split at spaces) for experiments, say
// GNT_BENCH_ARGS='--raft-snapshot-threshold 1000000'.
func benchArgs(extra ...string) []string {
	lvl := "warn"
	if os.Getenv("GNT_BENCH_LOGS") != "" {
		lvl = "debug"
	}
	args := append([]string{"--profile", "lan", "--log-level", lvl}, extra...)
	args = append(args, strings.Fields(os.Getenv("GNT_BENCH_ARGS"))...)
	if os.Getenv("GNT_BENCH_PROFILE") != "" {
		args = append(args, "--debug")
	}
	return args
}

// profileDuring, with GNT_BENCH_PROFILE=DIR, fetches a CPU profile of
// every gntd over the next d into DIR/NAME-<member IP>.pprof (for `go tool
// pprof`), then, with GNT_BENCH_TRACE=1 as well, a one-second execution
// trace (.trace, for `go tool trace`), then Raft's timings (.raft.json);
// the returned function waits for them. The test process's own CPU profile
// goes to DIR/NAME-client.pprof. Without it, it does nothing.
func profileDuring(t *testing.T, c *Cluster, name string, d time.Duration) func() {
	dir := os.Getenv("GNT_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	// The load generator's own profile, beside the gntds'.
	if f, err := os.Create(fmt.Sprintf("%s/%s-client.pprof", dir, name)); err == nil {
		if err := pprof.StartCPUProfile(f); err == nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(d)
				pprof.StopCPUProfile()
				f.Close()
			}()
		} else {
			f.Close()
		}
	}
	for _, m := range c.Members {
		if m.cmd == nil {
			continue
		}
		wg.Add(1)
		go func(addr, ip string) {
			defer wg.Done()
			u := fmt.Sprintf("https://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds()))
			resp, err := c.HTTP().Get(u)
			if err != nil {
				t.Logf("profile of %s: %v", addr, err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if err := os.WriteFile(fmt.Sprintf("%s/%s-%s.pprof", dir, name, ip), b, 0o644); err != nil {
				t.Logf("profile of %s: %v", addr, err)
			}
			if os.Getenv("GNT_BENCH_TRACE") != "" {
				if resp, err := c.HTTP().Get("https://" + addr + "/debug/pprof/trace?seconds=1"); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					_ = os.WriteFile(fmt.Sprintf("%s/%s-%s.trace", dir, name, ip), b, 0o644)
				}
			}
			// Raft's own timings of the last ten seconds, beside it.
			if resp, err := c.HTTP().Get("https://" + addr + "/debug/raft-metrics"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				_ = os.WriteFile(fmt.Sprintf("%s/%s-%s.raft.json", dir, name, ip), b, 0o644)
			}
		}(m.APIAddr(), m.IP)
	}
	return wg.Wait
}

// heapProfiles, with GNT_BENCH_PROFILE=DIR, fetches a heap profile of
// every running gntd, after a collection, into DIR/NAME-<member IP>.heap
// (for `go tool pprof -sample_index=inuse_space`).
func heapProfiles(t *testing.T, c *Cluster, name string) {
	dir := os.Getenv("GNT_BENCH_PROFILE")
	if dir == "" {
		return
	}
	for _, m := range c.Members {
		if m.cmd == nil || !m.Running() {
			continue
		}
		resp, err := c.HTTP().Get("https://" + m.APIAddr() + "/debug/pprof/heap?gc=1")
		if err != nil {
			t.Logf("heap profile of %s: %v", m.Name, err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			err = os.WriteFile(fmt.Sprintf("%s/%s-%s.heap", dir, name, m.IP), b, 0o644)
		}
		if err != nil {
			t.Logf("heap profile of %s: %v", m.Name, err)
		}
	}
}

// applyStats reads the leader's applier metrics (gnt_raft_apply_*): Raft
// entries written, commands packed into them, the seconds the entries took
// from Raft's Apply to the state machine's answer, and the holds.
func applyStats(m *Member) map[string]float64 {
	v, _ := metricValues(m, "gnt_raft_apply_")
	return v
}

// metricValues reads the unlabelled metrics whose names begin with
// prefix from a gntd's /metrics (an empty map, not nil, with an error).
func metricValues(m *Member, prefix string) (map[string]float64, error) {
	out := map[string]float64{}
	resp, err := m.c.HTTP().Get(m.c.URL(m, "/metrics"))
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, nil
}

// applyDelta formats what the leader's applier did since a0 (applyStats):
// entries, commands per entry, time per entry, and the holds for the
// executor (jobs.Pacer): how many, their mean, how many ran out.
func applyDelta(m *Member, a0 map[string]float64, d time.Duration) string {
	a1 := applyStats(m)
	delta := func(k string) float64 { return a1[k] - a0[k] }
	entries := delta("gnt_raft_apply_seconds_count")
	if entries <= 0 {
		return ""
	}
	line := fmt.Sprintf("raft: %.0f entries/s, %.1f cmds/entry, %.2fms/entry", entries/d.Seconds(),
		delta("gnt_raft_apply_batch_commands_sum")/entries, delta("gnt_raft_apply_seconds_sum")/entries*1e3)
	if holds := delta("gnt_raft_apply_hold_seconds_count"); holds > 0 {
		line += fmt.Sprintf(", %.0f%% held %.0fus (%.0f ran out)", holds/entries*100,
			delta("gnt_raft_apply_hold_seconds_sum")/holds*1e6, delta("gnt_raft_apply_hold_timeouts_total"))
	}
	return line
}

// forwardStats sums the candidates' batched forwarding counters
// (gnt_api_forward_batches_total, gnt_api_forward_batched_requests_total).
func forwardStats(c *Cluster) (batches, requests float64) {
	for _, m := range c.Members {
		if m.cmd == nil {
			continue
		}
		v, _ := metricValues(m, "gnt_api_forward_batch")
		batches += v["gnt_api_forward_batches_total"]
		requests += v["gnt_api_forward_batched_requests_total"]
	}
	return batches, requests
}

// cpuSeconds returns the CPU time (user and system) the cluster's gntd
// processes and this test process have used so far. Per-job CPU is a
// steadier figure than the rate on a shared machine.
func cpuSeconds(c *Cluster) (servers, client float64) {
	for _, m := range c.Members {
		servers += processCPU(m)
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		client = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	return servers, client
}

// processCPU returns the CPU seconds (user and system) a member's gntd
// has used so far, or 0 if it is not running.
func processCPU(m *Member) float64 {
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name: utime and stime are the 12th and
	// 13th, in clock ticks (100 per second on Linux).
	rest := string(b)
	f := strings.Fields(rest[strings.LastIndexByte(rest, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// cpuPerJob formats the CPU used since (s0, c0) per job.
func cpuPerJob(c *Cluster, s0, c0 float64, jobs int64) string {
	s1, c1 := cpuSeconds(c)
	if jobs == 0 {
		return ""
	}
	return fmt.Sprintf("cpu/job: gntds %.0fus client %.0fus", (s1-s0)/float64(jobs)*1e6, (c1-c0)/float64(jobs)*1e6)
}

// tagJob is a configuration-only job: one tag on one node.
func tagJob(node string, tag string) []map[string]any {
	return []map[string]any{{"OP_ID": "OP_TAGS_SET", "kind": "node", "name": node, "tags": []string{tag}}}
}

// How a benchmark client learns a job's outcome.
const (
	holdSubmit = iota // POST /2/jobs?wait=: one request, answered when the job is final
	pollAfter         // POST /2/jobs, then blocking GETs of the job until it is final
	leanHold          // holdSubmit, sent by the lean load generator (leanclient_test.go)
)

// howNames name the ways in the benchmarks' lines.
var howNames = map[int]string{holdSubmit: "hold", pollAfter: "poll", leanHold: "hold"}

// loadGen names the load generator of a way.
func loadGen(how int) string {
	if how == leanHold {
		return "lean"
	}
	return "rpc"
}

// leanSubmit sends one held submission of ops with c and says whether
// the job succeeded.
func leanSubmit(c *leanClient, ops []map[string]any) error {
	body, err := json.Marshal(map[string]any{"ops": ops})
	if err != nil {
		return err
	}
	a, err := c.post("/2/jobs?wait=10s", body, 15*time.Second)
	switch {
	case err != nil:
		return err
	case a.code != http.StatusOK:
		return fmt.Errorf("HTTP %d: %s", a.code, a.body)
	case a.jobStatus != "success":
		return fmt.Errorf("job %s: %s", a.body, a.jobStatus)
	}
	return nil
}

// runJobs submits jobs from `clients` goroutines for d and returns the
// number that succeeded and each one's submitted-to-success latency. A
// job counts when its submission answered with status success (the
// server applies configuration jobs at submission, and holds the answer
// of a held submission until the job is final, and says so in
// X-Gnt-Job-Status); any other answer waits for the job.
func runJobs(t *testing.T, c *Cluster, clients int, d time.Duration, toLeader bool, how int, mk func(client, n int) []map[string]any) (int64, []time.Duration, int64) {
	var (
		done   atomic.Int64
		failed atomic.Int64
		mu     sync.Mutex
		lats   []time.Duration
		wg     sync.WaitGroup
	)
	leader := c.WaitLeader(10 * time.Second).APIAddr()
	mark := c.LogLen()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	defer func() {
		// A benchmark run has no faults: say what the members logged when
		// a client saw an error.
		if failed.Load() > 0 {
			for _, m := range c.Members {
				t.Logf("---- %s during the run (%d failed) ----\n%s", m.Name, failed.Load(), lastLines(strings.TrimRight(m.Log()[mark[m]:], "\n"), 40))
			}
		}
	}()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Each client talks to the leader, or to one candidate of its
			// own, spreading the load as real clients would (followers then
			// forward to the leader).
			srv := c.Servers()
			if toLeader {
				srv = []string{leader}
			}
			cl := c.NewClient(append(srv[i%len(srv):], srv[:i%len(srv)]...))
			lean := &leanClient{addr: srv[i%len(srv)], tls: c.AdminTLS()}
			defer lean.close()
			var local []time.Duration
			for n := 0; ctx.Err() == nil; n++ {
				start := time.Now()
				if how == leanHold {
					if err := leanSubmit(lean, mk(i, n)); err != nil {
						failed.Add(1)
						continue
					}
					local = append(local, time.Since(start))
					done.Add(1)
					continue
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				var (
					id   int64
					meta rpc.Meta
					err  error
				)
				if how == holdSubmit {
					id, meta, err = cl.SubmitJobHeld(rctx, mk(i, n), "", 10*time.Second)
				} else {
					id, meta, err = cl.SubmitJob(rctx, mk(i, n), "")
				}
				if err == nil && meta.JobStatus != "success" {
					var job rpc.JobInfo
					job, err = cl.WaitJob(rctx, id, meta.Index)
					if err == nil && job.Status != "success" {
						err = fmt.Errorf("job %d: %s", id, job.Status)
					}
				}
				rcancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				local = append(local, time.Since(start))
				done.Add(1)
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	return done.Load(), lats, failed.Load()
}

// TestBenchJobThroughput: end-to-end configuration jobs per second through
// a 3-candidate cluster (Raft with fsync), with 1, 64 and 256 clients, all
// sending to the leader and spread over the candidates.
func TestBenchJobThroughput(t *testing.T) {
	benchOnly(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2, ExtraArgs: benchArgs()})
	c.WaitLeader(10 * time.Second)
	nodes := []string{"node21", "node22"}
	mk := func(i, n int) []map[string]any { return tagJob(nodes[(i+n)%len(nodes)], fmt.Sprintf("b%d-%d", i, n%4)) }
	runJobs(t, c, 8, time.Second, false, holdSubmit, mk) // warm up connections
	gens := map[string]int{"rpc": holdSubmit, "lean": leanHold}
	for _, gen := range benchList("GNT_BENCH_GEN", "rpc,lean") {
		how, ok := gens[gen]
		if !ok {
			t.Fatalf("GNT_BENCH_GEN: %q is neither rpc nor lean", gen)
		}
		for _, target := range benchList("GNT_BENCH_TARGETS", "leader,spread") {
			for _, clients := range benchInts(t, "GNT_BENCH_CLIENTS", "1,64,256") {
				d := 8 * time.Second
				s0, c0 := cpuSeconds(c)
				b0, r0 := forwardStats(c)
				prof := profileDuring(t, c, fmt.Sprintf("jobs-%s-%s-%d", gen, target, clients), d-2*time.Second)
				n, lats, failed := runJobs(t, c, clients, d, target == "leader", how, mk)
				prof()
				if n == 0 {
					t.Fatalf("%d clients: no job succeeded", clients)
				}
				line := fmt.Sprintf("BENCH jobs to=%s clients=%d gen=%s jobs=%d failed=%d rate=%.0f jobs/s p50=%v p99=%v max=%v %s",
					target, clients, gen, n, failed, float64(n)/d.Seconds(), percentile(lats, 0.5).Round(10*time.Microsecond),
					percentile(lats, 0.99).Round(10*time.Microsecond), percentile(lats, 1).Round(10*time.Microsecond), cpuPerJob(c, s0, c0, n))
				if b1, r1 := forwardStats(c); b1 > b0 {
					line += fmt.Sprintf(" forwarded: %.0f in %.0f batches (%.1f per batch)", r1-r0, b1-b0, (r1-r0)/(b1-b0))
				}
				t.Log(line)
				fmt.Println(line)
			}
		}
	}
	// Every candidate ends with the same state.
	c.WaitConverged(30 * time.Second)
}

// TestBenchIdle: the CPU an idle cluster (3 candidates, 3 nodes, the LAN
// timers) uses, per member, over 20 seconds after it has settled: the
// cost of heartbeats, gossip and the leader's background loops, paid by
// every cluster all the time.
func TestBenchIdle(t *testing.T) {
	benchOnly(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 3, ExtraArgs: benchArgs()})
	leader := c.WaitLeader(10 * time.Second)
	time.Sleep(5 * time.Second)
	const d = 20 * time.Second
	before := make(map[string]float64)
	for _, m := range c.Members {
		before[m.Name] = processCPU(m)
	}
	prof := profileDuring(t, c, "idle", d)
	time.Sleep(d)
	prof()
	var total float64
	for _, m := range c.Members {
		used := (processCPU(m) - before[m.Name]) / d.Seconds() * 100
		total += used
		role := "node"
		switch {
		case m == leader:
			role = "leader"
		case m.Candidate:
			role = "candidate"
		}
		line := fmt.Sprintf("BENCH idle member=%s role=%s cpu=%.2f%% of a core", m.Name, role, used)
		t.Log(line)
		fmt.Println(line)
	}
	line := fmt.Sprintf("BENCH idle cluster members=%d cpu=%.2f%% of a core", len(c.Members), total)
	t.Log(line)
	fmt.Println(line)
}

// TestBenchFailover: time from kill -9 of the leader to the next
// successful job, over 10 kills, then from SIGTERM of the leader (a
// planned stop: it hands leadership over first) over 5 stops; the member
// is restarted and the cluster healed before the next round.
func TestBenchFailover(t *testing.T) {
	benchOnly(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1, ExtraArgs: benchArgs()})
	for _, run := range []struct {
		name   string
		rounds int
		stop   func(m *Member)
	}{{"failover", 10, (*Member).Kill}, {"graceful-stop", 5, (*Member).Stop}} {
		times := failoverRounds(t, c, run.rounds, run.stop)
		sorted := append([]time.Duration(nil), times...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		var parts []string
		for _, d := range times {
			parts = append(parts, d.Round(time.Millisecond).String())
		}
		n := len(sorted)
		line := fmt.Sprintf("BENCH %s rounds=%d median=%v max=%v all=[%s]", run.name, n,
			((sorted[(n-1)/2] + sorted[n/2]) / 2).Round(time.Millisecond), sorted[n-1].Round(time.Millisecond), strings.Join(parts, " "))
		t.Log(line)
		fmt.Println(line)
	}
}

// failoverRounds stops the leader with stop, rounds times, and returns
// for each round the time from the stop to the next successful job
// submitted after it.
func failoverRounds(t *testing.T, c *Cluster, rounds int, stop func(m *Member)) []time.Duration {
	var times []time.Duration
	for round := 0; round < rounds; round++ {
		leader := c.WaitLeader(20 * time.Second)
		c.WaitVoters(3, 30*time.Second)
		c.WaitConverged(30 * time.Second)
		cl := c.Client()
		var (
			stoppedAt atomic.Int64
			recovered = make(chan time.Time, 1)
			done      = make(chan struct{})
			wg        sync.WaitGroup
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				start := time.Now()
				_, meta, err := cl.SubmitJob(ctx, tagJob("node21", fmt.Sprintf("f%d-%d", round, n%32)), "")
				cancel()
				if err == nil && meta.JobStatus == "success" {
					if k := stoppedAt.Load(); k != 0 && start.UnixNano() >= k {
						select {
						case recovered <- time.Now():
						default:
						}
						return
					}
				} else if err != nil {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		time.Sleep(300 * time.Millisecond)
		t0 := time.Now()
		stoppedAt.Store(t0.UnixNano())
		go stop(leader)
		select {
		case t1 := <-recovered:
			times = append(times, t1.Sub(t0))
			t.Logf("round %d: stopped %s, next successful job after %v", round, leader.Name, t1.Sub(t0))
			if os.Getenv("GNT_BENCH_LOGS") != "" { // what the survivors did
				time.Sleep(300 * time.Millisecond)
				for _, m := range c.Members {
					if m != leader {
						t.Logf("---- %s t0=%s\n%s", m.Name, t0.UTC().Format(time.RFC3339Nano), m.log.Tail(60))
					}
				}
			}
		case <-time.After(30 * time.Second):
			close(done)
			wg.Wait()
			t.Fatalf("round %d: no successful job within 30s of stopping %s", round, leader.Name)
		}
		close(done)
		wg.Wait()
		for leader.Running() {
			time.Sleep(10 * time.Millisecond)
		}
		leader.Start(t)
		c.WaitHTTP(leader)
	}
	return times
}

// TestBenchNoopJobs: single-opcode no-op jobs (OP_TEST_DELAY of 0 s, run
// by the leader's executor: a submission and a finish record each) per
// second, submitted to the leader by 1 and 64 clients that each wait for
// their job's success.
func TestBenchNoopJobs(t *testing.T) {
	benchOnly(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, ExtraArgs: benchArgs("--executor-concurrency", "64")})
	c.WaitLeader(10 * time.Second)
	mk := func(int, int) []map[string]any {
		return []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": 0}}
	}
	runJobs(t, c, 8, time.Second, true, holdSubmit, mk) // warm up
	// Each submitter waits for its job's outcome: in one held request
	// (wait=hold), and for 64 also with a submission followed by blocking
	// GETs of the job (wait=poll), as before held submissions existed.
	for _, run := range []struct {
		clients int
		how     int
	}{{1, holdSubmit}, {64, holdSubmit}, {64, pollAfter}, {1, leanHold}, {64, leanHold}} {
		clients := run.clients
		how := howNames[run.how]
		d := 8 * time.Second
		s0, c0 := cpuSeconds(c)
		leader := c.WaitLeader(10 * time.Second)
		a0 := applyStats(leader)
		prof := profileDuring(t, c, fmt.Sprintf("noop-%s-%d-%s", loadGen(run.how), clients, how), d-4*time.Second)
		n, lats, failed := runJobs(t, c, clients, d, true, run.how, mk)
		prof()
		if n == 0 {
			t.Fatalf("%d clients: no job succeeded", clients)
		}
		line := fmt.Sprintf("BENCH noop-jobs clients=%d wait=%s gen=%s jobs=%d failed=%d rate=%.0f jobs/s p50=%v p99=%v %s %s",
			clients, how, loadGen(run.how), n, failed, float64(n)/d.Seconds(), percentile(lats, 0.5).Round(10*time.Microsecond),
			percentile(lats, 0.99).Round(10*time.Microsecond), cpuPerJob(c, s0, c0, n), applyDelta(leader, a0, d))
		t.Log(line)
		fmt.Println(line)
	}
	// Pipelined: 64 submitters send jobs without waiting for each one,
	// 20,000 in all; the rate is jobs finished per second from the first
	// submission to the last job's end.
	const total, clients = 20000, 64
	cl := c.NewClient([]string{c.WaitLeader(10 * time.Second).APIAddr()})
	var (
		next   atomic.Int64
		failed atomic.Int64
		last   atomic.Int64
		wg     sync.WaitGroup
	)
	s0, c0 := cpuSeconds(c)
	prof := profileDuring(t, c, "noop-pipelined", 3*time.Second)
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				id, _, err := cl.SubmitJob(ctx, mk(0, 0), "")
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				for {
					l := last.Load()
					if id <= l || last.CompareAndSwap(l, id) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	prof()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := cl.WaitJob(ctx, last.Load(), 0)
	if err != nil || j.Status != "success" {
		t.Fatalf("last job %d: %v %s", last.Load(), err, j.Status)
	}
	took := stampTime(j.EndTS).Sub(start)
	line := fmt.Sprintf("BENCH noop-jobs pipelined clients=%d jobs=%d failed=%d rate=%.0f jobs/s (first submission to last job's end %v) %s",
		clients, total, failed.Load(), float64(total-int(failed.Load()))/took.Seconds(), took.Round(time.Millisecond), cpuPerJob(c, s0, c0, total))
	t.Log(line)
	fmt.Println(line)
}

// TestBenchResume: with 20 multi-step jobs running and 1000 queued, kill
// -9 the leader; the new leader reports (gnt_leader_resume_seconds) the
// time from its election to the first started job running again. Five
// kills; the killed member is restarted in between.
func TestBenchResume(t *testing.T) {
	benchOnly(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, ExtraArgs: benchArgs("--executor-concurrency", "20")})
	c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := c.Client()
	var long [][]map[string]any
	for i := 0; i < 20; i++ {
		long = append(long, []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": 1, "repeat": 1000}})
	}
	if _, _, err := cl.SubmitJobs(ctx, long, "bench: running"); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < 2; b++ {
		var queued [][]map[string]any
		for i := 0; i < 500; i++ {
			queued = append(queued, []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": 0}})
		}
		if _, _, err := cl.SubmitJobs(ctx, queued, "bench: queued"); err != nil {
			t.Fatal(err)
		}
	}
	var times []time.Duration
	for round := 0; round < 5; round++ {
		leader := c.WaitLeader(20 * time.Second)
		c.WaitVoters(3, 30*time.Second)
		c.Eventually(30*time.Second, 50*time.Millisecond, "20 running jobs", func() error {
			jobs, err := cl.Jobs(ctx, true)
			if err != nil {
				return err
			}
			running, queued := 0, 0
			for _, j := range jobs {
				switch j.Status {
				case "running":
					running++
				case "queued":
					queued++
				}
			}
			if running != 20 || queued < 1000 {
				return fmt.Errorf("%d running, %d queued", running, queued)
			}
			return nil
		})
		leader.Kill()
		next := c.WaitLeader(20 * time.Second)
		var took float64
		c.Eventually(20*time.Second, 50*time.Millisecond, "resume metric", func() error {
			v, err := metricValue(next, "gnt_leader_resume_seconds")
			if err != nil {
				return err
			}
			if v == 0 {
				return fmt.Errorf("not resumed yet")
			}
			took = v
			return nil
		})
		times = append(times, time.Duration(took*float64(time.Second)))
		t.Logf("round %d: %s resumed the started jobs %v after its election", round, next.Name, times[len(times)-1])
		leader.Start(t)
		c.WaitHTTP(leader)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	line := fmt.Sprintf("BENCH resume running=20 queued=1000 kills=%d median=%v max=%v", len(times),
		times[len(times)/2].Round(10*time.Microsecond), times[len(times)-1].Round(10*time.Microsecond))
	t.Log(line)
	fmt.Println(line)
}

// metricValue reads one unlabelled metric from a member's /metrics.
func metricValue(m *Member, name string) (float64, error) {
	v, err := metricValues(m, name)
	if err != nil {
		return 0, err
	}
	x, ok := v[name]
	if !ok {
		return 0, fmt.Errorf("%s: no metric %s", m.Name, name)
	}
	return x, nil
}
