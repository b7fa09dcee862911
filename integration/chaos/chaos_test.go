package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/integration"
)

// builtBin is a directory of binaries the harness built for this test
// binary (not one it was given), removed by TestMain.
var builtBin string

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(builtBin)
	}
	os.Exit(code)
}

// options are what the environment asks of the chaos tests.
type options struct {
	seed      uint64
	total     time.Duration // 0: the CI-sized run
	length    time.Duration // of one run in a series
	artifacts string
}

func getOptions(t *testing.T) options {
	o := options{seed: rand.Uint64() >> 1, length: time.Minute}
	if s := os.Getenv("GNT_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GNT_CHAOS_SEED=%q: %v", s, err)
		}
		o.seed = v
	}
	for env, dst := range map[string]*time.Duration{"GNT_CHAOS_DURATION": &o.total, "GNT_CHAOS_RUN_LENGTH": &o.length} {
		if s := os.Getenv(env); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s=%q: %v", env, s, err)
			}
			*dst = d
		}
	}
	o.artifacts = os.Getenv("GNT_CHAOS_ARTIFACTS")
	if o.artifacts == "" {
		o.artifacts, _ = filepath.Abs(filepath.Join("..", "artifacts"))
	}
	if bin := integration.Binaries(t); bin != os.Getenv("GNT_BIN_DIR") {
		builtBin = bin
	}
	return o
}

func say(format string, args ...any) { fmt.Printf("chaos: "+format+"\n", args...) }

// TestChaos runs the chaos suite. By default it makes the CI-sized run:
// one cluster of 5 candidates and 2 nodes, every fault kind once in a
// seeded order, network faults in process. GNT_CHAOS_DURATION (e.g. 20m;
// `make chaos DURATION=20m`) makes runs one after the other until that
// much time has passed, each a fresh cluster of 5 or 3 candidates taking
// random faults for GNT_CHAOS_RUN_LENGTH (default 1m); when iptables can
// be used (root, iptables installed) the series runs in a network
// namespace of its own and every other run makes its network faults with
// iptables. GNT_CHAOS_SEED replays a seed: run i of a series uses seed+i,
// and a series started with that seed replays that run first.
// GNT_CHAOS_ARTIFACTS is where failing runs keep their files (default
// integration/artifacts, which git ignores).
func TestChaos(t *testing.T) {
	o := getOptions(t)
	iptables := false
	if o.total > 0 {
		ok, why := iptablesUsable()
		switch {
		case ok && !inNetns():
			reexecInNetns(t, "TestChaos", o)
			return
		case ok:
			if err := enterNetns(); err != nil {
				t.Fatal(err)
			}
			iptables = true
		default:
			say("network faults in process only: iptables cannot be used (%s)", why)
		}
	}
	mode := "CI-sized run (GNT_CHAOS_DURATION unset)"
	if o.total > 0 {
		mode = fmt.Sprintf("runs for %v, %v of faults each", o.total, o.length)
	}
	say("seed %d (GNT_CHAOS_SEED=%d replays it); %s", o.seed, o.seed, mode)

	var reports []*Report
	start := time.Now()
	for i := 0; i == 0 || time.Since(start) < o.total; i++ {
		s := o.seed + uint64(i)
		rng := rand.New(rand.NewPCG(s, 1))
		cfg := Config{Seed: s, Nodes: 2, Clients: 6, Artifacts: o.artifacts, Network: InProcess,
			Logf: func(format string, args ...any) { say(fmt.Sprintf("run %d: ", i)+format, args...) }}
		if o.total == 0 {
			cfg.Candidates = 5
			cfg.Kinds = FaultKinds(5, cfg.Network)
			rng.Shuffle(len(cfg.Kinds), func(a, b int) { cfg.Kinds[a], cfg.Kinds[b] = cfg.Kinds[b], cfg.Kinds[a] })
			cfg.Length = 10 * time.Minute // ends with the last kind
			cfg.Hold = [2]time.Duration{1500 * time.Millisecond, 3 * time.Second}
			cfg.Gap = [2]time.Duration{time.Second, 2 * time.Second}
			cfg.LinearTimeout = 30 * time.Second
			cfg.SnapshotThreshold, cfg.TrailingLogs = 128, 64
		} else {
			cfg.Candidates = []int{5, 3}[rng.IntN(2)]
			snap := [][2]int{{0, 0}, {128, 64}, {1024, 256}}[rng.IntN(3)]
			cfg.SnapshotThreshold, cfg.TrailingLogs = snap[0], snap[1]
			cfg.Length = min(o.length, max(o.total-time.Since(start), 20*time.Second))
			cfg.Hold = [2]time.Duration{2 * time.Second, 6 * time.Second}
			cfg.Gap = [2]time.Duration{time.Second, 3 * time.Second}
			if iptables && i%2 == 1 {
				cfg.Network = IPTables
			}
		}
		reports = append(reports, series(t, i, cfg))
	}
	say("summary: %s", Summary(reports))
}

// TestChaosIptables is the CI-sized run of the network faults made with
// iptables rules, the gossip-only cut included, in a network namespace
// the test makes (the host's rules are never touched). It skips, saying
// why, without root or iptables.
func TestChaosIptables(t *testing.T) {
	if os.Getenv("GNT_CHAOS_DURATION") != "" {
		t.Skip("with GNT_CHAOS_DURATION, TestChaos alternates the two kinds of network faults")
	}
	ok, why := iptablesUsable()
	if !ok {
		say("SKIP the iptables run: %s", why)
		t.Skipf("iptables cannot be used: %s", why)
	}
	o := getOptions(t)
	if !inNetns() {
		reexecInNetns(t, "TestChaosIptables", o)
		return
	}
	if err := enterNetns(); err != nil {
		t.Fatal(err)
	}
	say("seed %d (GNT_CHAOS_SEED=%d replays it); CI-sized run, network faults with iptables in a network namespace", o.seed, o.seed)
	rng := rand.New(rand.NewPCG(o.seed, 1))
	cfg := Config{Seed: o.seed, Candidates: 5, Nodes: 2, Clients: 6, Artifacts: o.artifacts, Network: IPTables,
		Kinds: NetworkKinds(5, IPTables), Length: 10 * time.Minute, LinearTimeout: 30 * time.Second,
		Hold: [2]time.Duration{1500 * time.Millisecond, 3 * time.Second}, Gap: [2]time.Duration{time.Second, 2 * time.Second},
		SnapshotThreshold: 128, TrailingLogs: 64,
		Logf: func(format string, args ...any) { say("iptables run: "+format, args...) }}
	rng.Shuffle(len(cfg.Kinds), func(a, b int) { cfg.Kinds[a], cfg.Kinds[b] = cfg.Kinds[b], cfg.Kinds[a] })
	rep := series(t, 0, cfg)
	say("iptables summary: %s", Summary([]*Report{rep}))
}

// series makes run i of a series as a subtest and prints its line.
func series(t *testing.T, i int, cfg Config) *Report {
	say("run %d: seed %d, %d candidates, %d nodes, %d clients, network faults %s, raft snapshot threshold %d",
		i, cfg.Seed, cfg.Candidates, cfg.Nodes, cfg.Clients, cfg.Network, cfg.SnapshotThreshold)
	rep := &Report{}
	t.Run(fmt.Sprintf("run%02d", i), func(t *testing.T) { RunOnce(t, cfg, rep) })
	say("run %d: %s; %d leaderships; converged %v after healing; maintd: %d answers from %d epochs, first answer after the election %s, %d paused-leader handovers, answered at most %v after its status said not leader; took %v",
		i, rep.Line(), rep.Leaderships, rep.Converged.Round(time.Millisecond), rep.Maintd.Answers, rep.Maintd.Epochs,
		durations(rep.Maintd.AfterElection), rep.Maintd.Handovers, rep.Maintd.LateClose.Round(time.Millisecond), rep.Elapsed.Round(time.Second))
	if rep.Dir != "" {
		say("run %d: FAILED (seed %d); history, faults, logs, data dirs and Porcupine pages kept in %s", i, cfg.Seed, rep.Dir)
	}
	return rep
}

// reexecInNetns runs test name again in this test binary, in a new
// network namespace, with the same seed and binaries, and fails if it
// fails. Its output is this test's.
func reexecInNetns(t *testing.T, name string, o options) {
	args := []string{"--net", "--", os.Args[0], "-test.run", "^" + name + "$", "-test.count=1"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	if dl, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout", time.Until(dl).Round(time.Second).String())
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1", "GNT_CHAOS_SEED="+strconv.FormatUint(o.seed, 10),
		"GNT_BIN_DIR="+integration.Binaries(t), "GNT_CHAOS_ARTIFACTS="+o.artifacts)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s in a network namespace of its own: %v", name, err)
	}
}

// durations says the median and the largest of ds, and how many.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "never measured"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %v max %v (%d leaderships)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}
