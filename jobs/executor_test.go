package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
)

// direct applies commands straight to an FSM, as Raft would on one node.
type direct struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
}

func (d *direct) Apply(_ context.Context, c fsm.Command) (fsm.Response, uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	data, err := fsm.Encode(c)
	if err != nil {
		return fsm.Response{}, 0, err
	}
	d.index++
	return d.f.Apply(d.index, data).(fsm.Response), d.index, nil
}

func setup(t *testing.T) (*direct, uint64) {
	d := &direct{f: fsm.New()}
	d.Apply(context.Background(), fsm.ClusterInit{Now: 1, Name: "c", UUID: "u1", GroupUUID: "g1", Node: fsm.NodeSpec{Name: "n1", UUID: "n1", PrimaryIP: "192.0.2.1"}})
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: 2, Node: "n1", LogVersion: fsm.LogVersion})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return d, r.Epoch
}

func submit(t *testing.T, d *direct, ops ...string) int64 {
	var raw []json.RawMessage
	var uuids []string
	for _, o := range ops {
		raw = append(raw, json.RawMessage(o))
		uuids = append(uuids, "")
	}
	r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 3, Ops: raw, UUIDs: uuids})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.JobID
}

func waitStatus(t *testing.T, f *fsm.FSM, id int64, want string) *fsm.Job {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var j *fsm.Job
		f.Read(func(s *fsm.State, _ uint64) { j = s.Jobs[id] })
		if j != nil && j.Status == want {
			return j
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("job %d did not reach %s", id, want)
	return nil
}

func TestExecutorRunsJobs(t *testing.T) {
	d, epoch := setup(t)
	ok := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0.01}`, `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["done"]}`)
	bad := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"fail":true}`, `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["never"]}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (&Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4}).Run(ctx)
	waitStatus(t, d.f, ok, fsm.StatusSuccess)
	j := waitStatus(t, d.f, bad, fsm.StatusError)
	if j.Ops[1].Status != fsm.StatusError {
		t.Errorf("second opcode of failed job: %s", j.Ops[1].Status)
	}
	d.f.Read(func(s *fsm.State, _ uint64) {
		if len(s.Cluster.Tags) != 1 || s.Cluster.Tags[0] != "done" {
			t.Errorf("cluster tags %v", s.Cluster.Tags)
		}
	})
}

// TestExecutorResumesAndIsFenced: a job left running by an old epoch is
// resumed by a new executor, and the old executor's updates are refused.
func TestExecutorResumesAndIsFenced(t *testing.T) {
	d, old := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0.05}`)
	// The old leader started the opcode, then died.
	if _, err := (&Executor{FSM: d.f, Apply: d, Epoch: old, Clock: time.Now}).update(context.Background(),
		fsm.JobUpdate{JobID: id, OpIndex: 0, Action: fsm.ActionStart}); err != nil {
		t.Fatal(err)
	}
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: 4, Node: "n1"})
	stale := &Executor{FSM: d.f, Apply: d, Epoch: old, Clock: time.Now}
	if _, err := stale.update(context.Background(), fsm.JobUpdate{JobID: id, OpIndex: 0, Action: fsm.ActionFinish, Status: fsm.StatusSuccess}); err != ErrFenced {
		t.Fatalf("stale executor update: %v, want ErrFenced", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- (&Executor{FSM: d.f, Apply: d, Epoch: r.Epoch, Concurrency: 1}).Run(ctx) }()
	j := waitStatus(t, d.f, id, fsm.StatusSuccess)
	if len(j.Ops[0].Log) == 0 {
		t.Errorf("resumed opcode has no log line about the resumption")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("current executor stopped with %v", err)
	}
	// A stale executor's Run stops with ErrFenced at its first write.
	submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0}`)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := stale.Run(sctx); err != ErrFenced {
		t.Fatalf("stale Run = %v, want ErrFenced", err)
	}
}

// TestPickOrder: pick returns started jobs first, then the n best queued
// ones by priority and id, skipping jobs that wait for a dependency and
// jobs already running, whatever the number of queued jobs.
func TestPickOrder(t *testing.T) {
	d, epoch := setup(t)
	delay := func(prio int) string {
		return fmt.Sprintf(`{"OP_ID":"OP_TEST_DELAY","duration":0,"priority":%d}`, prio)
	}
	var ids []int64
	for _, p := range []int{0, 5, -5, 0, -5, 10, 0} {
		ids = append(ids, submit(t, d, delay(p)))
	}
	// A high-priority job that waits for the last one to succeed.
	waiting := submit(t, d, fmt.Sprintf(`{"OP_ID":"OP_TEST_DELAY","duration":0,"priority":-20,"depends":[[%d,["success"]]]}`, ids[6]))
	// Start ids[5] (the lowest priority) as another executor would have.
	if r, _, _ := d.Apply(context.Background(), fsm.JobUpdate{Now: 4, Epoch: epoch, JobID: ids[5], OpIndex: 0, Action: fsm.ActionStart}); r.Err != nil {
		t.Fatal(r.Err)
	}
	e := &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 4}
	var mu sync.Mutex
	pick := func(n int, running map[int64]bool) (out []int64) {
		d.f.Read(func(s *fsm.State, _ uint64) { out = e.pick(s, n, running, &mu) })
		return out
	}
	want := []int64{ids[5], ids[2], ids[4], ids[0]}
	if got := pick(4, map[int64]bool{}); !slices.Equal(got, want) {
		t.Errorf("pick(4) = %v, want %v", got, want)
	}
	if got := pick(1, map[int64]bool{}); !slices.Equal(got, []int64{ids[5]}) {
		t.Errorf("pick(1) = %v, want only the started job", got)
	}
	if got := pick(3, map[int64]bool{ids[2]: true}); !slices.Equal(got, []int64{ids[5], ids[4], ids[0]}) {
		t.Errorf("pick(3) with %d running = %v", ids[2], got)
	}
	all := pick(100, map[int64]bool{})
	if slices.Contains(all, waiting) || len(all) != 7 {
		t.Errorf("pick(100) = %v: want the 7 jobs without the waiting %d", all, waiting)
	}
}

// TestPickFilters: with filter rules, pick passes over jobs a PAUSE rule
// applies to, reports those a REJECT rule applies to (the FSM then
// cancels them with a result naming the rule), runs at most n jobs under
// a RATE_LIMIT n rule counting the started ones, lets an earlier ACCEPT
// rule win, and ignores CONTINUE rules; removing the PAUSE rule lets its
// jobs run.
func TestPickFilters(t *testing.T) {
	d, epoch := setup(t)
	job := func(duration int, source string) int64 {
		return submit(t, d, fmt.Sprintf(`{"OP_ID":"OP_TEST_DELAY","duration":%d,"reason":[[%q,"r",1]]}`, duration, source))
	}
	maintd := []int64{job(0, "gnt:daemon:maintd"), job(0, "gnt:daemon:maintd")}
	rejected := job(7, "gnt:user")
	limited := []int64{job(1, "gnt:user"), job(1, "gnt:user"), job(1, "gnt:user")}
	put := func(uuid string, prio int, action string, n int, preds string) {
		t.Helper()
		if r, _, _ := d.Apply(context.Background(), fsm.FilterPut{Now: 5, UUID: uuid, Priority: prio, Action: action, RateLimit: n, Predicates: json.RawMessage(preds)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	const (
		pause  = "00000000-0000-4000-8000-000000000001"
		reject = "00000000-0000-4000-8000-000000000002"
		limit  = "00000000-0000-4000-8000-000000000003"
		accept = "00000000-0000-4000-8000-000000000004"
		cont   = "00000000-0000-4000-8000-000000000005"
	)
	put(cont, 0, fsm.FilterContinue, 0, `[]`)
	put(pause, 1, fsm.FilterPause, 0, `[["reason", ["=", "source", "gnt:daemon:maintd"]]]`)
	put(reject, 2, fsm.FilterReject, 0, `[["opcode", ["=", "duration", 7]]]`)
	put(limit, 3, fsm.FilterRateLimit, 2, `[["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]]`)
	e := &Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 10, Log: hclog.NewNullLogger(), Clock: time.Now}
	var mu sync.Mutex
	pick := func(n int, running map[int64]bool) (out []int64, rejects []filterReject) {
		d.f.Read(func(s *fsm.State, _ uint64) { out = e.pick(s, n, running, &mu) })
		rejects, e.rejects = e.rejects, nil
		return out, rejects
	}
	got, rejects := pick(10, map[int64]bool{})
	if !slices.Equal(got, limited[:2]) {
		t.Errorf("pick = %v, want the first two of %v (RATE_LIMIT 2)", got, limited)
	}
	if len(rejects) != 1 || rejects[0] != (filterReject{job: rejected, filter: reject}) {
		t.Errorf("rejects = %v, want job %d by %s", rejects, rejected, reject)
	}
	// One of the limited jobs runs: one more may start.
	if got, _ := pick(10, map[int64]bool{limited[0]: true}); !slices.Equal(got, limited[1:2]) {
		t.Errorf("with %d running: pick = %v", limited[0], got)
	}
	if got, _ := pick(10, map[int64]bool{limited[0]: true, limited[1]: true}); len(got) != 0 {
		t.Errorf("with two running: pick = %v, want none", got)
	}
	// The FSM carries out the REJECT, naming the rule.
	e.rejectJobs(context.Background(), rejects)
	var j *fsm.Job
	d.f.Read(func(s *fsm.State, _ uint64) { j = s.Jobs[rejected] })
	if j.Status != fsm.StatusCanceled || !strings.Contains(string(j.Ops[0].Result), reject) {
		t.Errorf("rejected job: %s %s", j.Status, j.Ops[0].Result)
	}
	// An ACCEPT rule before the others lets maintd's jobs run, limits
	// aside; without it and without the PAUSE rule, they fall under the
	// rate limit.
	put(accept, 0, fsm.FilterAccept, 0, `[["reason", ["=~", "source", "^gnt:daemon:"]]]`)
	if got, _ := pick(10, map[int64]bool{}); !slices.Equal(got, append(slices.Clone(maintd), limited[:2]...)) {
		t.Errorf("with ACCEPT: pick = %v", got)
	}
	for _, u := range []string{accept, pause} {
		if r, _, _ := d.Apply(context.Background(), fsm.FilterRemove{Now: 6, UUID: u}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got, _ := pick(10, map[int64]bool{}); !slices.Equal(got, maintd) {
		t.Errorf("without PAUSE: pick = %v, want %v", got, maintd)
	}
}

// TestExecutorFilters: the running executor keeps a job a PAUSE rule
// applies to queued while a later job runs to its end, and runs it once
// the rule is removed; with its only slot taken by a long job, it still
// cancels at once a job a REJECT rule applies to.
func TestExecutorFilters(t *testing.T) {
	d, epoch := setup(t)
	runExecutor(t, d, epoch, 1)
	put := func(c fsm.Command) {
		t.Helper()
		if r, _, _ := d.Apply(context.Background(), c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	const rule = "00000000-0000-4000-8000-0000000000aa"
	tags := `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["t"]}`
	put(fsm.FilterPut{Now: 1, UUID: rule, Action: fsm.FilterPause, Predicates: json.RawMessage(`[["opcode", ["=", "OP_ID", "OP_TAGS_SET"]]]`)})
	held := submit(t, d, tags)
	if j := finished(t, d, submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0}`)); j.Status != fsm.StatusSuccess {
		t.Fatalf("the other job: %s", j.Status)
	}
	if j := readJobCopy(d, held); j.Status != fsm.StatusQueued {
		t.Fatalf("held job %d is %s, want queued under the PAUSE rule", held, j.Status)
	}
	put(fsm.FilterRemove{Now: 2, UUID: rule})
	if j := finished(t, d, held); j.Status != fsm.StatusSuccess {
		t.Fatalf("held job after the rule's removal: %s %s", j.Status, j.Ops[0].Result)
	}

	// The only slot is taken; a REJECT does not wait for it.
	// (Two repeats: a single delay without locks records no start.)
	blocker := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":8,"repeat":3,"no_locks":true}`)
	deadline := time.Now().Add(20 * time.Second)
	for readJobCopy(d, blocker).Status != fsm.StatusRunning {
		if time.Now().After(deadline) {
			t.Fatalf("the blocker never ran: %+v", readJobCopy(d, blocker))
		}
		time.Sleep(5 * time.Millisecond)
	}
	put(fsm.FilterPut{Now: 3, UUID: rule, Action: fsm.FilterReject, Predicates: json.RawMessage(`[["opcode", ["=", "OP_ID", "OP_TAGS_SET"]]]`)})
	j := finished(t, d, submit(t, d, tags))
	if j.Status != fsm.StatusCanceled || !strings.Contains(string(j.Ops[0].Result), rule) {
		t.Fatalf("rejected job: %s %s", j.Status, j.Ops[0].Result)
	}
	if b := readJobCopy(d, blocker); b.Status != fsm.StatusRunning {
		t.Fatalf("the blocker is %s: the REJECT should not have waited for its slot", b.Status)
	}
	if r, _, _ := d.Apply(context.Background(), fsm.JobCancel{Now: 4, JobID: blocker}); r.Err != nil {
		t.Fatal(r.Err)
	}
	finished(t, d, blocker)
}
