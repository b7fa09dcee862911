package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

func delayOp(secs float64, repeat int, extra map[string]any) map[string]any {
	op := map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": secs}
	if repeat > 0 {
		op["repeat"] = repeat
	}
	for k, v := range extra {
		op[k] = v
	}
	return op
}

func stampTime(t *fsm.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Unix(t[0], t[1]*1000)
}

// job reads a job from any running candidate.
func (c *Cluster) job(id int64) (rpc.JobInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Client().Job(ctx, id)
}

// waitFinal waits until job id is finalized and returns it.
func (c *Cluster) waitFinal(id int64, timeout time.Duration) rpc.JobInfo {
	c.t.Helper()
	var j rpc.JobInfo
	c.Eventually(timeout, 50*time.Millisecond, fmt.Sprintf("job %d finished", id), func() error {
		var err error
		if j, err = c.job(id); err != nil {
			return err
		}
		if !fsm.Finalized(j.Status) {
			return fmt.Errorf("job %d is %s", id, j.Status)
		}
		return nil
	})
	return j
}

// waitSteps waits until the first opcode of job id recorded n steps.
func (c *Cluster) waitSteps(id int64, n int) {
	c.t.Helper()
	c.Eventually(20*time.Second, 20*time.Millisecond, fmt.Sprintf("job %d: %d recorded steps", id, n), func() error {
		j, err := c.job(id)
		if err != nil {
			return err
		}
		if len(j.OpSteps) == 0 || len(j.OpSteps[0]) < n {
			return fmt.Errorf("%d steps so far", len(j.OpSteps[0]))
		}
		return nil
	})
}

// checkSteps verifies that a finished multi-step OP_TEST_DELAY recorded
// each of its steps once, in order, and that the executor epochs that
// recorded them never go back.
func checkSteps(t *testing.T, j rpc.JobInfo, repeat int) {
	t.Helper()
	steps := j.OpSteps[0]
	if len(steps) != repeat-1 {
		t.Errorf("job %d recorded %d steps, want %d (the last is recorded by the finish)", j.ID, len(steps), repeat-1)
	}
	var last uint64
	for k, st := range steps {
		if want := fmt.Sprintf("delay %d/%d", k+1, repeat); st.Name != want {
			t.Errorf("job %d step %d is %q, want %q", j.ID, k, st.Name, want)
		}
		if st.Epoch < last {
			t.Errorf("job %d step %d recorded by epoch %d after epoch %d", j.ID, k, st.Epoch, last)
		}
		last = st.Epoch
	}
}

// TestJobsSurviveLeaderKill kills -9 the leader while a multi-step
// OP_TEST_DELAY holding a node lock and a chain of 20 dependent jobs
// run: every job finishes on the new leader, each step is recorded once,
// and the chain keeps its order.
func TestJobsSurviveLeaderKill(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	old := c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.Client()
	const repeat = 8
	long, _, err := cl.SubmitJob(ctx, []map[string]any{delayOp(0.5, repeat, map[string]any{"no_locks": false, "on_nodes": []string{"node12"}})}, "kill test")
	if err != nil {
		t.Fatal(err)
	}
	var chain [][]map[string]any
	for i := 0; i < 20; i++ {
		extra := map[string]any{}
		if i > 0 {
			extra["depends"] = []any{[]any{-1, []string{"success"}}}
		}
		chain = append(chain, []map[string]any{delayOp(0.15, 0, extra)})
	}
	chainIDs, _, err := cl.SubmitJobs(ctx, chain, "kill test chain")
	if err != nil {
		t.Fatal(err)
	}
	// Kill once the long job has recorded two steps.
	c.waitSteps(long, 2)
	old.Kill()
	t.Logf("killed leader %s", old.Name)
	newLeader := c.WaitLeader(15 * time.Second)
	t.Logf("new leader %s", newLeader.Name)
	for _, id := range append([]int64{long}, chainIDs...) {
		c.waitFinal(id, 60*time.Second)
	}
	j, err := c.job(long)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("long job %d ended %s: %s", long, j.Status, j.OpResult)
	}
	checkSteps(t, j, repeat)
	resumed := false
	for _, l := range j.OpLog[0] {
		resumed = resumed || strings.Contains(l.Msg, "resumed by the executor of epoch")
	}
	if !resumed {
		t.Errorf("job %d finished without a resumption in its log: %v", long, j.OpLog[0])
	}
	var prevEnd time.Time
	for k, id := range chainIDs {
		j, err := c.job(id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != fsm.StatusSuccess {
			t.Errorf("chain job %d (%d of 20) ended %s: %s", id, k+1, j.Status, j.OpResult)
			continue
		}
		if start := stampTime(j.OpStart[0]); k > 0 && start.Before(prevEnd) {
			t.Errorf("chain job %d started at %v, before its dependency ended at %v", id, start, prevEnd)
		}
		prevEnd = stampTime(j.EndTS)
	}
	// The killed member comes back with the same state.
	old.Start(t)
	c.WaitConverged(30 * time.Second)
}

// TestCancelRunningJob cancels a running multi-step job with the CLI: it
// stops at its next step boundary with its completed steps recorded;
// canceling it again is refused.
func TestCancelRunningJob(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	c.WaitLeader(10 * time.Second)
	out, err := c.GNT("--submit", "debug", "delay", "--repeat", "100", "0.1")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "JobID:")), 10, 64)
	if err != nil {
		t.Fatalf("job id from %q", out)
	}
	c.waitSteps(id, 1)
	out, err = c.GNT("job", "cancel", strconv.FormatInt(id, 10))
	if err != nil || !strings.Contains(out, "will be canceled") {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	c.Eventually(10*time.Second, 20*time.Millisecond, "job canceled", func() error {
		j, err := c.job(id)
		if err != nil {
			return err
		}
		if j.Status != fsm.StatusCanceled {
			return fmt.Errorf("job is %s", j.Status)
		}
		return nil
	})
	j, _ := c.job(id)
	if n := len(j.OpSteps[0]); n < 1 || n > 90 {
		t.Errorf("%d steps recorded", n)
	}
	out, code := c.GNTExit("job", "cancel", strconv.FormatInt(id, 10))
	if code != 1 || !strings.Contains(out, "already canceled") {
		t.Errorf("second cancel: exit %d\n%s", code, out)
	}
	out, err = c.GNT("job", "info", strconv.FormatInt(id, 10))
	if err != nil || !strings.Contains(out, "Steps done:") || !strings.Contains(out, "Status: canceled") {
		t.Errorf("job info: %v\n%s", err, out)
	}
	// A finished job can be archived and stays queryable.
	if out, err := c.GNT("job", "archive", strconv.FormatInt(id, 10)); err != nil {
		t.Fatalf("archive: %v\n%s", err, out)
	}
	out, err = c.GNT("job", "info", strconv.FormatInt(id, 10))
	if err != nil || !strings.Contains(out, "Archived:") || !strings.Contains(out, "Status: canceled") {
		t.Errorf("archived job info: %v\n%s", err, out)
	}
	out, _ = c.GNT("job", "list")
	if strings.Contains(out, strconv.FormatInt(id, 10)+" ") {
		t.Errorf("archived job still in the active list:\n%s", out)
	}
	out, _ = c.GNT("job", "list", "--archived", "--status", "canceled")
	if !strings.Contains(out, strconv.FormatInt(id, 10)) {
		t.Errorf("archived job missing from list --archived:\n%s", out)
	}
}

// TestHeldSubmission: a submission with ?wait= sent to a follower is
// forwarded to the leader, and its answer comes when the executor has run
// the job, with the final status; a hold shorter than the job answers with
// the job still running, and the job goes on.
func TestHeldSubmission(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	leader := c.WaitLeader(10 * time.Second)
	var follower *Member
	for _, m := range c.Members {
		if m != leader && m.cmd != nil {
			follower = m
			break
		}
	}
	cl := c.ClientFor(follower)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	delay := func(d float64) []map[string]any { return []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": d}} }
	start := time.Now()
	id, m, err := cl.SubmitJobHeld(ctx, delay(0.3), "", 20*time.Second)
	if err != nil || m.JobStatus != fsm.StatusSuccess {
		t.Fatalf("held submission: job %d %q: %v", id, m.JobStatus, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("answered after %s, before the job's 0.3 s delay ended", took)
	}
	id, m, err = cl.SubmitJobHeld(ctx, delay(2), "", 200*time.Millisecond)
	if err != nil || fsm.Finalized(m.JobStatus) {
		t.Fatalf("short hold: job %d %q: %v", id, m.JobStatus, err)
	}
	if j, err := cl.WaitJob(ctx, id, m.Index); err != nil || j.Status != fsm.StatusSuccess {
		t.Fatalf("job %d after the short hold: %v %s", id, err, j.Status)
	}

	// The leader's applier held the entry after each of these jobs'
	// submissions for the executor (jobs.Pacer), and holds nothing for
	// configuration jobs, which the executor never sees.
	holds := func() float64 {
		v, err := metricValue(leader, "gnt_raft_apply_hold_seconds_count")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h0 := holds()
	if h0 == 0 {
		t.Error("no hold for the executor after executor jobs")
	}
	for i := 0; i < 5; i++ {
		if _, m, err := cl.SubmitJobHeld(ctx, []map[string]any{{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": []string{fmt.Sprintf("h%d", i)}}}, "", 20*time.Second); err != nil || m.JobStatus != fsm.StatusSuccess {
			t.Fatalf("configuration job %d: %q %v", i, m.JobStatus, err)
		}
	}
	if h := holds(); h != h0 {
		t.Errorf("%v holds for 5 configuration jobs, want none", h-h0)
	}
}

// TestPausedLeaderCannotRecord pauses the leader (SIGSTOP) while a
// multi-step job runs, longer than an election; a new leader resumes the
// job; the old one, continued, cannot record progress: every step is
// recorded once and epochs never go back.
func TestPausedLeaderCannotRecord(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	old := c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const repeat = 10
	id, _, err := c.Client().SubmitJob(ctx, []map[string]any{delayOp(0.4, repeat, nil)}, "pause test")
	if err != nil {
		t.Fatal(err)
	}
	c.waitSteps(id, 1)
	mark := c.LogLen()
	old.Pause()
	paused := true
	defer func() {
		if paused {
			old.Resume()
		}
	}()
	others := c.Followers(old)
	oc := c.NewClient([]string{others[0].APIAddr(), others[1].APIAddr()})
	var newEpochStep bool
	c.Eventually(20*time.Second, 50*time.Millisecond, "a step recorded by the new leader", func() error {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		j, err := oc.Job(cctx, id)
		if err != nil {
			return err
		}
		steps := j.OpSteps[0]
		if len(steps) >= 2 && steps[len(steps)-1].Epoch > steps[0].Epoch {
			newEpochStep = true
			return nil
		}
		return fmt.Errorf("%d steps, none by a new epoch", len(steps))
	})
	old.Resume()
	paused = false
	j := c.waitFinal(id, 30*time.Second)
	if j.Status != fsm.StatusSuccess || !newEpochStep {
		t.Fatalf("job ended %s (steps by a new epoch: %v)", j.Status, newEpochStep)
	}
	checkSteps(t, j, repeat)
	c.WaitConverged(30 * time.Second)
	// A paused process keeps its connections and its listening port: the
	// followers waited out the heartbeat timeout, as they must.
	if stood := c.LoggedSince(mark, leaderLossLine); len(stood) != 0 {
		t.Errorf("%v took a paused leader for a dead process (%q)", stood, leaderLossLine)
	}
	for _, l := range strings.Split(old.Log(), "\n") {
		if strings.Contains(l, "executor") || strings.Contains(l, "leadership") {
			t.Logf("old leader: %s", l)
		}
	}
}

// TestJobWatchAcrossFailover follows a job with `gnt job watch` through
// the leader's death: the watch moves to another candidate and ends with
// the job's success.
func TestJobWatchAcrossFailover(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	old := c.WaitLeader(10 * time.Second)
	out, err := c.GNT("--submit", "debug", "delay", "--repeat", "6", "--duration", "500ms")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	id := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "JobID:"))
	// Watch through the leader first, then the others.
	servers := []string{old.APIAddr()}
	for _, m := range c.Followers(old) {
		servers = append(servers, m.APIAddr())
	}
	cmd := exec.Command(c.Bin+"/gnt", "--server", strings.Join(servers, ","), "job", "watch", id)
	cmd.Env = append(os.Environ(), "GNT_SERVER=", "HOME="+c.Dir)
	var buf lockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	c.Eventually(20*time.Second, 20*time.Millisecond, "watch printing steps", func() error {
		if !strings.Contains(buf.String(), "delay 1/6") {
			return fmt.Errorf("output so far: %q", buf.String())
		}
		return nil
	})
	old.Kill()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch failed: %v\n%s", err, buf.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("watch did not end\n%s", buf.String())
	}
	outText := buf.String()
	if !strings.Contains(outText, "delay 5/6") || !strings.Contains(outText, "resumed by the executor") {
		t.Errorf("watch output lacks the resumed steps:\n%s", outText)
	}
}
