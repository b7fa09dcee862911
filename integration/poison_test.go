package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestPoisonJobFailsAfterTwoLeaders: a job that kills the gntd running it
// (OP_TEST_CRASH, gnt debug crash, with --debug) kills two leaders, each
// restarted at once so that quorum holds; the third leader fails it with
// the poison-job guard's message naming the two epochs, and the cluster
// goes on taking writes with no further deaths.
func TestPoisonJobFailsAfterTwoLeaders(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, ExtraArgs: []string{"--debug"}})
	c.WaitLeader(10 * time.Second)
	start := time.Now()
	out, err := c.GNT("--submit", "debug", "crash")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "JobID:")), 10, 64)
	if err != nil {
		t.Fatalf("job id from %q", out)
	}
	// Restart every member that dies, until the job is finalized.
	var died []string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for _, m := range c.Candidates() {
			if !m.Running() {
				died = append(died, m.Name)
				t.Logf("%s died %v after the submission; restarting it", m.Name, time.Since(start).Round(time.Millisecond))
				m.Start(t)
			}
		}
		if j, err := c.job(id); err == nil && fsm.Finalized(j.Status) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d not finalized within 3 minutes; members died: %v", id, died)
		}
		time.Sleep(25 * time.Millisecond)
	}
	failed := time.Since(start)
	// A member that crashed may not be reaped yet when the job's failure
	// is seen: collect deaths until every logged crash is accounted for.
	crashCount := func() int {
		n := 0
		for _, m := range c.Candidates() {
			n += strings.Count(m.Log(), "OP_TEST_CRASH: killing this gntd")
		}
		return n
	}
	for settle := time.Now().Add(10 * time.Second); time.Now().Before(settle); time.Sleep(25 * time.Millisecond) {
		for _, m := range c.Candidates() {
			if !m.Running() {
				died = append(died, m.Name)
				t.Logf("%s died %v after the submission; restarting it", m.Name, time.Since(start).Round(time.Millisecond))
				m.Start(t)
			}
		}
		if len(died) >= crashCount() {
			break
		}
	}
	// The next successful write.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.Client()
	var wrote time.Duration
	c.Eventually(time.Minute, 20*time.Millisecond, "a write after the poison job", func() error {
		wid, meta, err := cl.SubmitJob(ctx, []map[string]any{{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": []string{"after-poison"}}}, "poison test")
		if err != nil {
			return err
		}
		j, err := cl.WaitJob(ctx, wid, meta.Index)
		if err != nil {
			return err
		}
		if j.Status != fsm.StatusSuccess {
			return fmt.Errorf("write job %d ended %s: %s", wid, j.Status, j.OpResult)
		}
		wrote = time.Since(start)
		return nil
	})
	t.Logf("poison job %d: failed by the guard %v after its submission; the next successful write %v after it", id, failed.Round(time.Millisecond), wrote.Round(time.Millisecond))

	j, err := c.job(id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != fsm.StatusError || len(j.PoisonEpochs) != fsm.PoisonDeaths {
		t.Fatalf("job %d ended %s with poison epochs %v: %s", id, j.Status, j.PoisonEpochs, j.OpResult)
	}
	last := j.Attempts[len(j.Attempts)-1].Epoch
	want := fsm.PoisonMessage(j.PoisonEpochs, last)
	if len(j.OpResult) == 0 || !strings.Contains(string(j.OpResult[0]), want) {
		t.Errorf("result %s, want %q", j.OpResult, want)
	}
	if crashes := crashCount(); crashes != fsm.PoisonDeaths || len(died) != fsm.PoisonDeaths {
		t.Errorf("%d crashes logged and members %v died, want %d", crashes, died, fsm.PoisonDeaths)
	}
	out, err = c.GNT("job", "info", strconv.FormatInt(id, 10))
	wantInfo := fmt.Sprintf("Failed by the poison-job guard: the leaders of executor epochs %d, %d were lost while it ran", j.PoisonEpochs[0], j.PoisonEpochs[1])
	if err != nil || !strings.Contains(out, wantInfo) || !strings.Contains(out, "Executor attempts:") {
		t.Errorf("job info: %v, want %q in\n%s", err, wantInfo, out)
	}
	// More writes go through, and nobody dies any more.
	for i := range 5 {
		wid, meta, err := cl.SubmitJob(ctx, []map[string]any{delayOp(0, 2, nil)}, "after poison "+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if j, err := cl.WaitJob(ctx, wid, meta.Index); err != nil || j.Status != fsm.StatusSuccess {
			t.Fatalf("write %d: %v %+v", i, err, j)
		}
	}
	for _, m := range c.Candidates() {
		if !m.Running() {
			t.Errorf("%s died after the poison job was failed", m.Name)
		}
	}
}

// TestCrashOnceThenResumed: a job whose run kills one leader, by a panic
// in the executor's goroutine (gnt debug crash --mode panic --times 1),
// is resumed by the next leader and succeeds: one death is not a poison.
func TestCrashOnceThenResumed(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, ExtraArgs: []string{"--debug"}})
	first := c.WaitLeader(10 * time.Second)
	out, err := c.GNT("--submit", "debug", "crash", "--mode", "panic", "--times", "1")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "JobID:")), 10, 64)
	if err != nil {
		t.Fatalf("job id from %q", out)
	}
	j := c.waitFinal(id, time.Minute)
	if j.Status != fsm.StatusSuccess || len(j.PoisonEpochs) != 0 || len(j.Attempts) != 2 {
		t.Fatalf("job %d ended %s, attempts %+v, poison epochs %v: %s", id, j.Status, j.Attempts, j.PoisonEpochs, j.OpResult)
	}
	if first.Running() {
		t.Fatalf("the first leader %s survived", first.Name)
	}
	if log := first.Log(); !strings.Contains(log, "panic: OP_TEST_CRASH of job") {
		t.Errorf("%s did not die of the panic:\n%s", first.Name, lastLines(log, 30))
	}
	for _, m := range c.Candidates() {
		if m != first && !m.Running() {
			t.Errorf("%s died too", m.Name)
		}
	}
	first.Start(t)
	c.WaitConverged(30 * time.Second)
}

// TestSteppedDownLeadersDoNotPoison: leadership is handed over twice
// (gnt cluster master-failover) while the first step of a slow job runs,
// each new leader resuming the step from its start; no gntd dies. The
// third leader asks the two before it for their incarnation over the
// node RPC, finds them running on, and does not count them as deaths:
// the job succeeds where the guard used to fail it.
func TestSteppedDownLeadersDoNotPoison(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	first := c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.Client()
	// Two steps of 20 s: the handovers happen while the first one runs.
	id, _, err := cl.SubmitJob(ctx, []map[string]any{delayOp(20, 2, nil)}, "stepped-down leaders")
	if err != nil {
		t.Fatal(err)
	}
	attempts := func(n int) {
		c.Eventually(time.Minute, 50*time.Millisecond, fmt.Sprintf("job %d attempted %d times", id, n), func() error {
			j, err := c.job(id)
			if err != nil {
				return err
			}
			if len(j.Attempts) < n {
				return fmt.Errorf("job %d is %s with attempts %+v", id, j.Status, j.Attempts)
			}
			return nil
		})
	}
	attempts(1)
	leaders := []string{first.Name}
	for _, to := range c.Followers(first) {
		m, err := c.Client().MasterFailover(ctx, to.Name)
		if err != nil || m != to.Name {
			t.Fatalf("master-failover to %s: %q, %v", to.Name, m, err)
		}
		leaders = append(leaders, to.Name)
		attempts(len(leaders))
	}
	j := c.waitFinal(id, 3*time.Minute)
	if j.Status != fsm.StatusSuccess || len(j.PoisonEpochs) != 0 {
		t.Fatalf("job %d ended %s, poison epochs %v, attempts %+v: %s", id, j.Status, j.PoisonEpochs, j.Attempts, j.OpResult)
	}
	survived := false
	for _, a := range j.Attempts {
		if a.Progress != 0 {
			t.Fatalf("attempts %+v: a step completed between the handovers, so the guard was not put to the test", j.Attempts)
		}
		if a.Incarnation == "" || a.Node == "" {
			t.Errorf("attempt %+v names no leader incarnation", a)
		}
		survived = survived || a.Survived
	}
	if !survived || len(j.Attempts) < len(leaders) {
		t.Errorf("attempts %+v under leaders %v: none marked survived", j.Attempts, leaders)
	}
	for _, m := range c.Candidates() {
		if !m.Running() {
			t.Errorf("%s died", m.Name)
		}
	}
}
