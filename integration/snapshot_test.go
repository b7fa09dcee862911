package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func snapshotCount(m *Member) int {
	entries, _ := os.ReadDir(filepath.Join(m.DataDir, "raft", "snapshots"))
	n := 0
	for _, e := range entries {
		if e.IsDir() && filepath.Ext(e.Name()) != ".tmp" {
			n++
		}
	}
	return n
}

// TestSnapshotInstallAndRestart: with a low snapshot threshold, a follower
// that was down while the leader compacted its log catches up through an
// installed snapshot (the state machine's Restore on the real path), and a
// leader killed after snapshotting comes back from its own snapshot. Every
// candidate ends with the same state, and nothing acknowledged is missing.
func TestSnapshotInstallAndRestart(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, ExtraArgs: []string{"--raft-snapshot-threshold", "40", "--raft-trailing-logs", "10"}})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	follower.Kill()
	cl := c.NewClient([]string{leader.APIAddr()})
	const jobs = 200
	for i := 0; i < jobs; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, meta, err := cl.AddTags(ctx, "cluster", "", []string{fmt.Sprintf("snap-%03d", i)}, "")
		cancel()
		if err != nil || meta.JobStatus != "success" {
			t.Fatalf("job %d: %v (status %q)", i, err, meta.JobStatus)
		}
	}
	c.Eventually(30*time.Second, 100*time.Millisecond, "the leader to take a snapshot", func() error {
		if snapshotCount(leader) == 0 {
			return fmt.Errorf("no snapshot in %s", leader.DataDir)
		}
		return nil
	})

	start := time.Now()
	follower.Start(t)
	c.WaitHTTP(follower)
	hash := c.WaitConverged(60 * time.Second)
	t.Logf("follower caught up through a snapshot in %v (state %.12s)", time.Since(start), hash)
	if snapshotCount(follower) == 0 {
		t.Errorf("%s converged but holds no snapshot: it did not catch up through InstallSnapshot", follower.Name)
	}
	tags, err := c.NewClient([]string{follower.APIAddr()}).ListTags(context.Background(), "cluster", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) != jobs {
		t.Errorf("follower has %d cluster tags after the snapshot, want %d", len(tags), jobs)
	}

	// The leader restarts from its own snapshot and log.
	leader.Kill()
	c.WaitLeader(10 * time.Second)
	leader.Start(t)
	c.WaitHTTP(leader)
	c.WaitVoters(3, 30*time.Second)
	c.WaitConverged(60 * time.Second)
	tags, err = c.NewClient([]string{leader.APIAddr()}).ListTags(context.Background(), "cluster", "")
	if err != nil || len(tags) != jobs {
		t.Errorf("restarted leader has %d cluster tags (err %v), want %d", len(tags), err, jobs)
	}
}
