package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// submission is one tag-add job a client tried to submit.
type submission struct {
	client     int
	kind, name string // tagged object
	tag        string
	id         int64 // 0 when no id came back
	err        error
	start, end time.Time
}

// TestKillLeaderDuringSubmissions kills -9 the leader while 4 clients
// submit configuration jobs, and a few executor jobs are running. Every job
// whose id came back must be a success, with its effect on every
// candidate; the executor jobs must finish on the new leader; the killed
// member, restarted with its command line, must come back as a voter with
// the same state.
func TestKillLeaderDuringSubmissions(t *testing.T) {
	const (
		clients    = 4
		runFor     = 6 * time.Second
		killAfter  = 2 * time.Second
		maxPerCli  = 1500 // keeps every job within the queue's retention
		delayJobs  = 3
		delaySecs  = 1.0
		reqTimeout = 15 * time.Second
	)
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	old := c.WaitLeader(10 * time.Second)
	cands := c.Candidates()
	// Client i tags its own object; every client sends to all candidates,
	// starting at a different one (so some requests are forwarded).
	objects := []struct{ kind, name string }{{fsm.TagCluster, ""}, {fsm.TagNode, "node11"}, {fsm.TagNode, "node12"}, {fsm.TagNode, "node13"}}
	servers := c.Servers()

	var (
		mu   sync.Mutex
		subs []*submission
		wg   sync.WaitGroup
		clis []*rpc.Client
	)
	start := time.Now()
	stopAt := start.Add(runFor)
	for i := 0; i < clients; i++ {
		rot := append(append([]string(nil), servers[i%len(servers):]...), servers[:i%len(servers)]...)
		cl := c.NewClient(rot)
		clis = append(clis, cl)
		obj := objects[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < maxPerCli && time.Now().Before(stopAt); n++ {
				s := &submission{client: i, kind: obj.kind, name: obj.name, tag: fmt.Sprintf("c%d-%d", i, n), start: time.Now()}
				ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
				s.id, _, s.err = cl.AddTags(ctx, obj.kind, obj.name, []string{s.tag}, "failover test")
				cancel()
				s.end = time.Now()
				mu.Lock()
				subs = append(subs, s)
				mu.Unlock()
				if s.err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}

	// Executor jobs, started on the old leader just before it dies.
	time.Sleep(killAfter - 300*time.Millisecond)
	var delayIDs []int64
	var delayIdx uint64
	for i := 0; i < delayJobs; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
		id, meta, err := c.Client().SubmitJob(ctx, []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": delaySecs}}, "failover test")
		cancel()
		if err != nil {
			t.Errorf("submitting OP_TEST_DELAY: %v", err)
			continue
		}
		delayIDs = append(delayIDs, id)
		delayIdx = max(delayIdx, meta.Index)
	}
	time.Sleep(time.Until(start.Add(killAfter)))
	preKill := map[int64]string{}
	for _, id := range delayIDs {
		var j rpc.JobInfo
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.ClientFor(old).Do(ctx, http.MethodGet, fmt.Sprintf("/2/jobs/%d", id), nil, nil, &j)
		cancel()
		preKill[id] = j.Status
		if err != nil {
			preKill[id] = "unknown: " + err.Error()
		}
	}

	mark := c.LogLen()
	killAt := time.Now()
	old.Kill()
	killed := time.Since(killAt)
	newLeader := c.WaitLeader(15 * time.Second)
	elected := time.Since(killAt)
	t.Logf("killed leader %s (pid gone after %v); %s established as leader %v after the kill",
		old.Name, killed.Round(time.Millisecond), newLeader.Name, elected.Round(time.Millisecond))
	// The survivors saw the leader's connections end and its Raft port
	// refuse them, and stood for election without waiting out the
	// heartbeat timeout.
	if stood := c.LoggedSince(mark, leaderLossLine); len(stood) == 0 {
		t.Errorf("no survivor logged %q after the leader's process died", leaderLossLine)
	} else {
		t.Logf("stood for election on the refused port: %v", stood)
	}
	t.Logf("OP_TEST_DELAY jobs %v were %v when the leader died", delayIDs, preKill)
	// The new leader never heard from the dead member: /2/raft/peers must
	// not present made-up figures for it as known.
	if ps, err := c.ClientFor(newLeader).Peers(context.Background()); err != nil {
		t.Errorf("peers on the new leader: %v", err)
	} else {
		for _, p := range ps {
			if p.ID == old.Name && p.Known {
				t.Errorf("new leader %s reports dead %s as known (applied_index %d, last_contact_seconds %g); it never got a status from it",
					newLeader.Name, p.ID, p.AppliedIndex, p.LastContact)
			}
		}
	}
	wg.Wait()

	// Tally what the clients saw.
	var ok, failed []*submission
	var firstAfter time.Duration = -1
	for _, s := range subs {
		if s.err == nil {
			ok = append(ok, s)
			if s.start.After(killAt) && (firstAfter < 0 || s.end.Sub(killAt) < firstAfter) {
				firstAfter = s.end.Sub(killAt)
			}
		} else {
			failed = append(failed, s)
		}
	}
	byCode := map[string]int{}
	for _, s := range failed {
		var ae *rpc.APIError
		switch {
		case errors.As(s.err, &ae):
			byCode[ae.ErrorCode]++
		case errors.Is(s.err, context.DeadlineExceeded):
			byCode["client timeout"]++
		default:
			byCode["transport: "+shortErr(s.err)]++
		}
	}
	t.Logf("%d submissions in %v: %d returned an id, %d failed or indeterminate %v",
		len(subs), runFor, len(ok), len(failed), byCode)
	if firstAfter >= 0 {
		t.Logf("first job submitted after the kill succeeded %v after the kill", firstAfter.Round(time.Millisecond))
	} else {
		t.Errorf("no job submitted after the kill succeeded")
	}
	if len(ok) < 100 {
		t.Errorf("only %d jobs succeeded in %v", len(ok), runFor)
	}
	// The client resends a submission whose outcome it did not learn,
	// with its token (rpc.Client.Submit): none fails for want of a
	// leader, and none is left indeterminate.
	for _, s := range failed {
		t.Errorf("client %d tag %s: %v", s.client, s.tag, s.err)
	}

	// Every returned id is a success job carrying its own tag, read
	// through the new leader.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var jobs []rpc.JobInfo
	if _, err := c.Client().Do(ctx, http.MethodGet, "/2/jobs", url.Values{"bulk": {"1"}, "consistent": {"1"}}, nil, &jobs); err != nil {
		t.Fatalf("consistent job list: %v", err)
	}
	byID := map[int64]rpc.JobInfo{}
	jobsOfTag := map[string][]int64{}
	for _, j := range jobs {
		byID[j.ID] = j
		for _, raw := range j.Ops {
			var op struct {
				Tags []string `json:"tags"`
			}
			if json.Unmarshal(raw, &op) == nil && len(op.Tags) == 1 {
				jobsOfTag[op.Tags[0]] = append(jobsOfTag[op.Tags[0]], j.ID)
			}
		}
	}
	// Exactly once: no submission made two jobs, resent or not.
	for _, s := range subs {
		if ids := jobsOfTag[s.tag]; len(ids) > 1 {
			t.Errorf("client %d tag %s made %d jobs: %v", s.client, s.tag, len(ids), ids)
		}
	}
	var resent int64
	for _, cl := range clis {
		resent += cl.Resends()
	}
	t.Logf("%d submissions were resent with their token after an unknown outcome; every submission made one job", resent)
	seenID := map[int64]*submission{}
	bad := 0
	for _, s := range ok {
		if prev := seenID[s.id]; prev != nil {
			t.Errorf("job id %d returned for tag %s and for tag %s", s.id, prev.tag, s.tag)
		}
		seenID[s.id] = s
		j, found := byID[s.id]
		var problem string
		switch {
		case !found:
			problem = "missing from the consistent job list"
		case j.Status != fsm.StatusSuccess:
			problem = "status " + j.Status
		case len(j.Ops) != 1:
			problem = fmt.Sprintf("%d opcodes", len(j.Ops))
		default:
			var op struct {
				OpID string   `json:"OP_ID"`
				Kind string   `json:"kind"`
				Name string   `json:"name"`
				Tags []string `json:"tags"`
			}
			if err := json.Unmarshal(j.Ops[0], &op); err != nil || op.OpID != "OP_TAGS_SET" || op.Kind != s.kind ||
				op.Name != s.name || len(op.Tags) != 1 || op.Tags[0] != s.tag {
				problem = fmt.Sprintf("carries %s, not tag %s (%v)", j.Ops[0], s.tag, err)
			}
		}
		if problem != "" {
			bad++
			if bad <= 10 {
				t.Errorf("job %d (client %d, tag %s, answered %v after the kill): %s",
					s.id, s.client, s.tag, s.end.Sub(killAt).Round(time.Millisecond), problem)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d returned job ids in all are not successful jobs with their tag", bad)
	}
	// A single job read with ?consistent=1 as well, for each client's last.
	for i := 0; i < clients; i++ {
		for k := len(ok) - 1; k >= 0; k-- {
			if ok[k].client == i {
				expectJobSuccess(ctx, t, c, ok[k].id, fmt.Sprintf("client %d's last job", i))
				break
			}
		}
	}

	// The executor jobs started on the dead leader finish on the new one.
	for _, id := range delayIDs {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		j, err := c.Client().WaitJob(wctx, id, delayIdx)
		wcancel()
		if err != nil || j.Status != fsm.StatusSuccess {
			t.Errorf("OP_TEST_DELAY job %d (was %s at the kill): %v, status %q, result %s", id, preKill[id], err, j.Status, j.OpResult)
			continue
		}
		var notes []string
		for _, l := range j.OpLog {
			for _, e := range l {
				notes = append(notes, fmt.Sprint(e.Msg))
			}
		}
		var end string
		if j.EndTS != nil {
			end = fmt.Sprintf("%v after the kill", time.Unix(j.EndTS[0], j.EndTS[1]*1000).Sub(killAt).Round(time.Millisecond))
		}
		t.Logf("OP_TEST_DELAY job %d: success, finished %s; log %q", id, end, notes)
		if preKill[id] == fsm.StatusRunning && !strings.Contains(strings.Join(notes, "\n"), "resuming") {
			t.Errorf("job %d was running on the dead leader but its log does not say it was resumed: %q", id, notes)
		}
	}

	// Every successful tag is on every running candidate, read locally;
	// no tag appears that nobody submitted.
	c.WaitConverged(20 * time.Second)
	checkTags := func(when string, members []*Member) {
		t.Helper()
		want := map[string]map[string]bool{} // object -> tags
		submitted := map[string]bool{}
		for _, s := range subs {
			submitted[s.tag] = true
		}
		for _, s := range ok {
			key := s.kind + "/" + s.name
			if want[key] == nil {
				want[key] = map[string]bool{}
			}
			want[key][s.tag] = true
		}
		for _, m := range members {
			indeterminateApplied := 0
			for _, obj := range objects {
				path := "/2/tags"
				if obj.kind == fsm.TagNode {
					path = "/2/nodes/" + obj.name + "/tags"
				}
				var tags []string
				if _, err := c.ClientFor(m).Do(ctx, http.MethodGet, path, nil, nil, &tags); err != nil {
					t.Fatalf("%s: %s: tags on %s: %v", when, m.Name, path, err)
				}
				have := map[string]bool{}
				for _, tg := range tags {
					have[tg] = true
					if !submitted[tg] {
						t.Errorf("%s: %s: tag %q on %s was never submitted", when, m.Name, tg, path)
					}
				}
				key := obj.kind + "/" + obj.name
				var missing []string
				for tg := range want[key] {
					if !have[tg] {
						missing = append(missing, tg)
					}
				}
				if len(missing) > 0 {
					sort.Strings(missing)
					t.Errorf("%s: %s: %d acknowledged tags missing on %s, e.g. %v", when, m.Name, len(missing), path, missing[:min(5, len(missing))])
				}
				indeterminateApplied += len(have) - len(want[key])
			}
			t.Logf("%s: %s holds all %d acknowledged tags (+%d of the %d failed submissions took effect)",
				when, m.Name, len(ok), indeterminateApplied, len(failed))
		}
	}
	var running []*Member
	for _, m := range cands {
		if m.Running() {
			running = append(running, m)
		}
	}
	checkTags("after failover", running)

	// The killed member restarts with its command line and comes back as
	// a voter with the same state.
	ldr, err := c.Status(newLeader)
	if err != nil {
		t.Fatalf("status of %s: %v", newLeader.Name, err)
	}
	caughtUp := ldr.AppliedIndex // nothing is written meanwhile
	restartAt := time.Now()
	old.Start(t)
	c.WaitHTTP(old)
	c.Eventually(30*time.Second, 50*time.Millisecond, old.Name+" back as a caught-up voter", func() error {
		st, err := c.Status(old)
		if err != nil {
			return err
		}
		if !st.Candidate || st.RaftState != "follower" || st.Leader != newLeader.Name || st.AppliedIndex < caughtUp {
			return fmt.Errorf("%s: candidate %v, raft %s, leader %q, applied %d of %d",
				old.Name, st.Candidate, st.RaftState, st.Leader, st.AppliedIndex, caughtUp)
		}
		ps, err := c.ClientFor(newLeader).Peers(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.ID == old.Name {
				if p.Suffrage != "voter" {
					return fmt.Errorf("%s is a %s", p.ID, p.Suffrage)
				}
				if !p.Known || p.LastContact < 0 || p.LastContact > 2 || p.AppliedIndex < caughtUp {
					return fmt.Errorf("leader's view of %s: %+v", p.ID, p)
				}
				return nil
			}
		}
		return fmt.Errorf("%s not in the leader's peers %+v", old.Name, ps)
	})
	back := time.Since(restartAt)
	h := c.WaitConverged(30 * time.Second)
	t.Logf("restarted %s: a caught-up voter in the leader's peers %v after its restart; all 3 candidates converged on %.12s after %v",
		old.Name, back.Round(time.Millisecond), h, time.Since(restartAt).Round(time.Millisecond))
	c.WaitVoters(3, 10*time.Second)
	checkTags("after the restart", []*Member{old})
}

func shortErr(err error) string {
	s := err.Error()
	for _, k := range []string{"connection reset", "connection refused", "EOF", "broken pipe"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// TestGracefulStopHandsOff stops the leader with SIGTERM while a
// multi-step job runs: the leader hands leadership to another voter before
// it stops (no follower has to notice its absence), the job finishes on
// the new leader with each step recorded once, and a job submitted after
// the stop succeeds.
func TestGracefulStopHandsOff(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	old := c.WaitLeader(10 * time.Second)
	c.WaitVoters(3, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const repeat = 6
	id, _, err := c.Client().SubmitJob(ctx, []map[string]any{delayOp(0.2, repeat, nil)}, "graceful stop test")
	if err != nil {
		t.Fatal(err)
	}
	c.waitSteps(id, 1)
	// Clients keep submitting through the stop: a planned stop must cost
	// them nothing but a little time (their client moves to another
	// candidate on refusals that surely applied nothing).
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		okCount int
		stopped = make(chan struct{})
	)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl := c.NewClient(c.Servers())
			for n := 0; ; n++ {
				select {
				case <-stopped:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				_, meta, err := cl.SubmitJob(cctx, tagJob("node12", fmt.Sprintf("g%d-%d", i, n%8)), "graceful stop test")
				ccancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if meta.JobStatus != fsm.StatusSuccess {
					errs = append(errs, fmt.Errorf("job %s", meta.JobStatus))
				} else {
					okCount++
				}
				mu.Unlock()
			}
		}(i)
	}
	time.Sleep(300 * time.Millisecond)
	mark := c.LogLen()
	old.Stop()
	time.Sleep(500 * time.Millisecond)
	close(stopped)
	wg.Wait()
	t.Logf("%d jobs submitted by 4 clients through the stop succeeded, %d failed", okCount, len(errs))
	for _, err := range errs {
		t.Errorf("submission through a planned stop failed: %v", err)
	}
	if !strings.Contains(old.Log()[mark[old]:], "stopping: leadership handed over") {
		t.Errorf("the stopped leader did not hand leadership over:\n%s", old.log.Tail(30))
	}
	if stood := c.LoggedSince(mark, leaderLossLine); len(stood) != 0 {
		t.Errorf("%v stood for election although leadership was handed over", stood)
	}
	newLeader := c.WaitLeader(10 * time.Second)
	if newLeader == old {
		t.Fatalf("%s still leads after it stopped", old.Name)
	}
	if _, meta, err := c.Client().SubmitJob(ctx, tagJob("node12", "after-stop"), "graceful stop test"); err != nil || meta.JobStatus != fsm.StatusSuccess {
		t.Fatalf("job after the stop: %v (status %q)", err, meta.JobStatus)
	}
	j := c.waitFinal(id, 30*time.Second)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("delay job ended %s", j.Status)
	}
	checkSteps(t, j, repeat)
	old.Start(t)
	c.WaitHTTP(old)
	c.WaitConverged(30 * time.Second)
}
