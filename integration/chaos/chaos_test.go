package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestChaos runs the chaos suite. By default it makes the CI-sized run:
// one cluster of 5 candidates and 2 nodes, every fault kind once in a
// seeded order. GNT_CHAOS_DURATION (e.g. 20m; `make chaos DURATION=20m`)
// makes runs one after the other until that much time has passed, each a
// fresh cluster of 5 or 3 candidates taking random faults for
// GNT_CHAOS_RUN_LENGTH (default 1m). GNT_CHAOS_SEED replays a seed:
// run i of a series uses seed+i, and a series started with that seed
// replays that run first. GNT_CHAOS_ARTIFACTS is where failing runs keep
// their files (default integration/artifacts, which git ignores).
func TestChaos(t *testing.T) {
	seed := rand.Uint64() >> 1
	if s := os.Getenv("GNT_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GNT_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	var total time.Duration
	if s := os.Getenv("GNT_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("GNT_CHAOS_DURATION=%q: %v", s, err)
		}
		total = d
	}
	length := time.Minute
	if s := os.Getenv("GNT_CHAOS_RUN_LENGTH"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("GNT_CHAOS_RUN_LENGTH=%q: %v", s, err)
		}
		length = d
	}
	artifacts := os.Getenv("GNT_CHAOS_ARTIFACTS")
	if artifacts == "" {
		artifacts, _ = filepath.Abs(filepath.Join("..", "artifacts"))
	}
	say := func(format string, args ...any) { fmt.Printf("chaos: "+format+"\n", args...) }
	mode := "CI-sized run (GNT_CHAOS_DURATION unset)"
	if total > 0 {
		mode = fmt.Sprintf("runs for %v, %v of faults each", total, length)
	}
	say("seed %d (GNT_CHAOS_SEED=%d replays it); %s", seed, seed, mode)

	var reports []*Report
	start := time.Now()
	for i := 0; i == 0 || time.Since(start) < total; i++ {
		s := seed + uint64(i)
		rng := rand.New(rand.NewPCG(s, 1))
		cfg := Config{Seed: s, Nodes: 2, Clients: 6, Artifacts: artifacts,
			Logf: func(format string, args ...any) { say(fmt.Sprintf("run %d: ", i)+format, args...) }}
		if total == 0 {
			cfg.Candidates = 5
			cfg.Kinds = FaultKinds(5)
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
			cfg.Length = min(length, max(total-time.Since(start), 20*time.Second))
			cfg.Hold = [2]time.Duration{2 * time.Second, 6 * time.Second}
			cfg.Gap = [2]time.Duration{time.Second, 3 * time.Second}
		}
		say("run %d: seed %d, %d candidates, %d nodes, %d clients, raft snapshot threshold %d", i, s, cfg.Candidates, cfg.Nodes, cfg.Clients, cfg.SnapshotThreshold)
		rep := &Report{}
		t.Run(fmt.Sprintf("run%02d", i), func(t *testing.T) { RunOnce(t, cfg, rep) })
		reports = append(reports, rep)
		say("run %d: %s; %d leaderships; converged %v after healing; took %v", i, rep.Line(), rep.Leaderships, rep.Converged.Round(time.Millisecond), rep.Elapsed.Round(time.Second))
		if rep.Dir != "" {
			say("run %d: FAILED (seed %d); history, faults, logs, data dirs and Porcupine pages kept in %s", i, s, rep.Dir)
		}
	}
	say("summary: %s", Summary(reports))
}
