package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/locking"
)

// fastStrategy is a lock strategy in milliseconds, for tests.
var fastStrategy = locking.Strategy{Min: time.Millisecond, Max: 2 * time.Millisecond, Total: 6 * time.Millisecond}

func runExecutor(t *testing.T, d *direct, epoch uint64, concurrency int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: concurrency, Strategy: fastStrategy}).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("executor stopped with %v", err)
		}
	})
}

func submitMany(t *testing.T, d *direct, jobs ...[]string) []int64 {
	t.Helper()
	var c fsm.JobSubmitMany
	c.Now = time.Now().UnixNano()
	for _, ops := range jobs {
		var spec fsm.JobSpec
		for _, o := range ops {
			spec.Ops = append(spec.Ops, json.RawMessage(o))
			spec.UUIDs = append(spec.UUIDs, "")
		}
		c.Jobs = append(c.Jobs, spec)
	}
	r, _, _ := d.Apply(context.Background(), c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.JobIDs
}

func ts(t *fsm.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Unix(t[0], t[1]*1000)
}

func update(t *testing.T, d *direct, u fsm.JobUpdate) fsm.Response {
	t.Helper()
	u.Now = time.Now().UnixNano()
	r, _, _ := d.Apply(context.Background(), u)
	if r.Err != nil {
		t.Fatalf("%s: %v", u.Action, r.Err)
	}
	return r
}

// TestResumeAtRecordedStep: an opcode whose first two steps an old
// executor recorded is resumed at step 3 by the next one, and every step
// is recorded exactly once, with the epoch that ran it.
func TestResumeAtRecordedStep(t *testing.T) {
	d, old := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":4}`)
	update(t, d, fsm.JobUpdate{Epoch: old, JobID: id, Action: fsm.ActionStart})
	update(t, d, fsm.JobUpdate{Epoch: old, JobID: id, Action: fsm.ActionStep, Step: 0, StepName: "delay 1/4"})
	update(t, d, fsm.JobUpdate{Epoch: old, JobID: id, Action: fsm.ActionStep, Step: 1, StepName: "delay 2/4"})
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: 5, Node: "n1"})
	runExecutor(t, d, r.Epoch, 2)
	j := waitStatus(t, d.f, id, fsm.StatusSuccess)
	steps := j.Ops[0].Steps
	if len(steps) != 3 {
		t.Fatalf("%d steps recorded, want 3 (the fourth is recorded by the finish)", len(steps))
	}
	for k, want := range []struct {
		name  string
		epoch uint64
	}{{"delay 1/4", old}, {"delay 2/4", old}, {"delay 3/4", r.Epoch}} {
		if steps[k].Name != want.name || steps[k].Epoch != want.epoch {
			t.Errorf("step %d = %s by epoch %d, want %s by %d", k, steps[k].Name, steps[k].Epoch, want.name, want.epoch)
		}
	}
	var log []string
	for _, l := range j.Ops[0].Log {
		log = append(log, l.Msg)
	}
	if !resumedNote.MatchString(strings.Join(log, "\n")) {
		t.Errorf("no resumption, with its time, in the log: %q", log)
	}
}

// resumedNote is the log line of a resumed opcode, which says when it
// resumed (its entry is stamped when the step it precedes ends).
var resumedNote = regexp.MustCompile(`resumed by the executor of epoch \d+ after a leader change, at step \d+ of \d+ \(at \d\d:\d\d:\d\d\.\d{3} UTC\)`)

// waitOpStatus waits until the first opcode of job id has status want.
func waitOpStatus(t *testing.T, f *fsm.FSM, id int64, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var st string
		f.Read(func(s *fsm.State, _ uint64) { st = s.Jobs[id].Ops[0].Status })
		if st == want {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("opcode 0 of job %d did not become %s", id, want)
}

// overlap reports whether two opcodes ran at the same time.
func overlap(a, b *fsm.OpState) bool {
	return ts(a.ExecTS).Before(ts(b.EndTS)) && ts(b.ExecTS).Before(ts(a.EndTS))
}

// TestLocksSerialiseConflictsOnly: two jobs that lock the same node run
// one after the other; a job on another node runs alongside them.
func TestLocksSerialiseConflictsOnly(t *testing.T) {
	d, epoch := setup(t)
	op := func(node string) string {
		return fmt.Sprintf(`{"OP_ID":"OP_TEST_DELAY","duration":0.2,"no_locks":false,"on_nodes":[%q]}`, node)
	}
	a := submit(t, d, op("n1"))
	b := submit(t, d, op("n1"))
	c := submit(t, d, op("n2"))
	runExecutor(t, d, epoch, 4)
	ja := waitStatus(t, d.f, a, fsm.StatusSuccess)
	jb := waitStatus(t, d.f, b, fsm.StatusSuccess)
	jc := waitStatus(t, d.f, c, fsm.StatusSuccess)
	if overlap(ja.Ops[0], jb.Ops[0]) {
		t.Errorf("jobs %d and %d both held node n1: %v-%v and %v-%v", a, b,
			ts(ja.Ops[0].ExecTS), ts(ja.Ops[0].EndTS), ts(jb.Ops[0].ExecTS), ts(jb.Ops[0].EndTS))
	}
	if !overlap(ja.Ops[0], jc.Ops[0]) && !overlap(jb.Ops[0], jc.Ops[0]) {
		t.Errorf("job %d (node n2) ran alone; it conflicts with nothing", c)
	}
	locks, _ := json.Marshal(ja.Ops[0].Locks)
	if string(locks) != `[{"level":"cluster","names":["BGL"]},{"level":"node","names":["n1"],"exclusive":true}]` {
		t.Errorf("recorded locks %s", locks)
	}
}

// TestDependencyChainRunsInOrder: jobs submitted together, each
// depending on the one before, run one after the other.
func TestDependencyChainRunsInOrder(t *testing.T) {
	d, epoch := setup(t)
	var jobs [][]string
	for i := 0; i < 10; i++ {
		dep := ""
		if i > 0 {
			dep = `,"depends":[[-1,["success"]]]`
		}
		jobs = append(jobs, []string{`{"OP_ID":"OP_TEST_DELAY","duration":0.01` + dep + `}`})
	}
	ids := submitMany(t, d, jobs...)
	runExecutor(t, d, epoch, 8)
	var prev *fsm.Job
	for _, id := range ids {
		j := waitStatus(t, d.f, id, fsm.StatusSuccess)
		if prev != nil && ts(j.Ops[0].StartTS).Before(ts(prev.EndTS)) {
			t.Errorf("job %d started at %v, before job %d ended at %v", j.ID, ts(j.Ops[0].StartTS), prev.ID, ts(prev.EndTS))
		}
		prev = j
	}
}

// TestDependencyVerdicts: a dependency that failed fails the dependent
// job with Ganeti's message; one that was canceled cancels it.
func TestDependencyVerdicts(t *testing.T) {
	d, epoch := setup(t)
	failing := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"fail":true}`)
	canceled := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0}`)
	if r, _, _ := d.Apply(context.Background(), fsm.JobCancel{Now: 5, JobID: canceled}); r.Err != nil {
		t.Fatal(r.Err)
	}
	onFail := submit(t, d, fmt.Sprintf(`{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[%d,["success"]]]}`, failing))
	onCancel := submit(t, d, fmt.Sprintf(`{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[%d,[]]]}`, canceled))
	onError := submit(t, d, fmt.Sprintf(`{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[%d,["error"]]]}`, failing))
	runExecutor(t, d, epoch, 4)
	j := waitStatus(t, d.f, onFail, fsm.StatusError)
	if want := fmt.Sprintf(`"Dependency job %d finished with status 'error', not one of 'success'"`, failing); string(j.Ops[0].Result) != want {
		t.Errorf("result %s, want %s", j.Ops[0].Result, want)
	}
	waitStatus(t, d.f, onCancel, fsm.StatusCanceled)
	waitStatus(t, d.f, onError, fsm.StatusSuccess)
}

// TestCancelRunningAtStepBoundary: a running multi-step job stops at its
// next step boundary; the steps it completed stay recorded.
func TestCancelRunningAtStepBoundary(t *testing.T) {
	d, epoch := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0.02,"repeat":200}`, `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["never"]}`)
	runExecutor(t, d, epoch, 2)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		d.f.Read(func(s *fsm.State, _ uint64) { n = len(s.Jobs[id].Ops[0].Steps) })
		if n >= 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r, _, _ := d.Apply(context.Background(), fsm.JobCancel{Now: time.Now().UnixNano(), JobID: id}); r.Err != nil || r.Job.Status != fsm.StatusCanceling {
		t.Fatalf("cancel: %v %+v", r.Err, r.Job)
	}
	j := waitStatus(t, d.f, id, fsm.StatusCanceled)
	if n := len(j.Ops[0].Steps); n < 2 || n >= 199 {
		t.Errorf("%d steps recorded; the cancel should have stopped it soon after step 2", n)
	}
	if j.Ops[1].Status != fsm.StatusCanceled {
		t.Errorf("second opcode %s", j.Ops[1].Status)
	}
	d.f.Read(func(s *fsm.State, _ uint64) {
		if len(s.Cluster.Tags) != 0 {
			t.Errorf("canceled opcode ran: tags %v", s.Cluster.Tags)
		}
	})
}

// TestLockTimeoutsRaisePriority: an opcode that cannot get its locks
// within the strategy's timeouts is recorded waiting, and its priority is
// raised by one each time the strategy runs out.
func TestLockTimeoutsRaisePriority(t *testing.T) {
	d, epoch := setup(t)
	holder := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0.3,"no_locks":false,"on_nodes":["n1"]}`)
	runExecutor(t, d, epoch, 4)
	waitOpStatus(t, d.f, holder, fsm.StatusRunning)
	waiter := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"no_locks":false,"on_nodes":["n1"],"priority":3}`)
	j := waitStatus(t, d.f, waiter, fsm.StatusSuccess)
	h := waitStatus(t, d.f, holder, fsm.StatusSuccess)
	if ts(j.Ops[0].ExecTS).Before(ts(h.EndTS)) {
		t.Errorf("waiter ran at %v, before the holder released n1 at %v", ts(j.Ops[0].ExecTS), ts(h.EndTS))
	}
	if j.Ops[0].Priority >= 3 {
		t.Errorf("priority stayed %d", j.Ops[0].Priority)
	}
	var log []string
	for _, l := range j.Ops[0].Log {
		log = append(log, l.Msg)
	}
	all := strings.Join(log, "\n")
	if !strings.Contains(all, "waiting for locks cluster/BGL(shared) node/n1(exclusive)") || !strings.Contains(all, "raising the priority to 2") {
		t.Errorf("log %q", log)
	}
}

// TestFastPathYieldsToRunningLocks: a configuration change that needs a
// lock a running opcode holds is queued and runs after it.
func TestFastPathYieldsToRunningLocks(t *testing.T) {
	d, epoch := setup(t)
	holder := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0.2,"no_locks":false,"on_nodes":["n1"]}`)
	runExecutor(t, d, epoch, 4)
	waitOpStatus(t, d.f, holder, fsm.StatusRunning)
	r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: time.Now().UnixNano(),
		Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n1","ndparams":{"spindle_count":3}}`)}, UUIDs: []string{""}})
	if r.Err != nil || r.Job.Status != fsm.StatusQueued {
		t.Fatalf("submission: %v %+v", r.Err, r.Job)
	}
	j := waitStatus(t, d.f, r.JobID, fsm.StatusSuccess)
	h := waitStatus(t, d.f, holder, fsm.StatusSuccess)
	if ts(j.EndTS).Before(ts(h.EndTS)) {
		t.Errorf("node change applied at %v while the delay held n1 until %v", ts(j.EndTS), ts(h.EndTS))
	}
}

// TestResumedJobsKeepTheirLocks: a new executor re-takes the locks of a
// job the old one started before it starts anything that conflicts.
func TestResumedJobsKeepTheirLocks(t *testing.T) {
	d, old := setup(t)
	a := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0.1,"repeat":3,"no_locks":false,"on_nodes":["n1"]}`)
	update(t, d, fsm.JobUpdate{Epoch: old, JobID: a, Action: fsm.ActionStart, Locks: []fsm.LockDecl{
		{Level: fsm.LockCluster, Names: []string{fsm.LockBGL}}, {Level: fsm.LockNode, Names: []string{"n1"}, Exclusive: true}}})
	// b is queued at a higher priority and would run first if a's locks
	// were forgotten.
	b := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"no_locks":false,"on_nodes":["n1"],"priority":-10}`)
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: 5, Node: "n1"})
	runExecutor(t, d, r.Epoch, 4)
	ja := waitStatus(t, d.f, a, fsm.StatusSuccess)
	jb := waitStatus(t, d.f, b, fsm.StatusSuccess)
	if ts(jb.Ops[0].ExecTS).Before(ts(ja.EndTS)) {
		t.Errorf("job %d took n1 at %v while resumed job %d held it until %v", b, ts(jb.Ops[0].ExecTS), a, ts(ja.EndTS))
	}
}

// TestNoRepeatStepsAfterFailover: a resumed opcode whose step in progress
// cannot be repeated either checks the world first (and records the step
// without running it when its effect is there) or fails with a reason
// naming the failover; it is never left running.
func TestNoRepeatStepsAfterFailover(t *testing.T) {
	d, old := setup(t)
	ran := map[string]int{}
	var mu = make(chan struct{}, 1)
	count := func(name string) {
		mu <- struct{}{}
		ran[name]++
		<-mu
	}
	steps := func(op fsm.Opcode) ([]Step, error) {
		o := op.(*fsm.OpTestDelay)
		first := Step{Name: "prepare", Run: func(context.Context, *StepContext) (any, error) { count("prepare"); return nil, nil }}
		move := Step{Name: "move", NoRepeat: true, Run: func(context.Context, *StepContext) (any, error) { count("move"); return nil, nil }}
		if o.Duration == 1 { // this opcode can check the world
			move.Check = func(context.Context, *StepContext) (bool, error) { return true, nil }
		}
		last := Step{Name: "finish", Run: func(context.Context, *StepContext) (any, error) { count("finish"); return nil, nil }}
		return []Step{first, move, last}, nil
	}
	checked := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":1}`)
	unchecked := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":2}`)
	for _, id := range []int64{checked, unchecked} {
		update(t, d, fsm.JobUpdate{Epoch: old, JobID: id, Action: fsm.ActionStart})
		update(t, d, fsm.JobUpdate{Epoch: old, JobID: id, Action: fsm.ActionStep, Step: 0, StepName: "prepare"})
	}
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: 5, Node: "n1"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: r.Epoch, Concurrency: 2, Strategy: fastStrategy, Steps: steps}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	jc := waitStatus(t, d.f, checked, fsm.StatusSuccess)
	if len(jc.Ops[0].Steps) != 2 || jc.Ops[0].Steps[1].Name != "move" {
		t.Errorf("checked opcode steps %+v", jc.Ops[0].Steps)
	}
	ju := waitStatus(t, d.f, unchecked, fsm.StatusError)
	if !strings.Contains(string(ju.Ops[0].Result), "cannot resume after a leader failover: step 2 (move)") {
		t.Errorf("unchecked opcode result %s", ju.Ops[0].Result)
	}
	mu <- struct{}{}
	defer func() { <-mu }()
	if ran["move"] != 0 || ran["prepare"] != 0 || ran["finish"] != 1 {
		t.Errorf("steps run: %v (move must not run again; prepare was recorded; finish once, for the checked opcode)", ran)
	}
}

// TestStepChangesRideOnTheRecord: configuration changes a step makes are
// applied with its record; one the configuration refuses fails the
// opcode, naming the step, and changes nothing.
func TestStepChangesRideOnTheRecord(t *testing.T) {
	d, epoch := setup(t)
	put := func(name, uuid string, serial int64) fsm.StepChange {
		return fsm.StepChange{InstancePut: &fsm.InstancePut{ExpectSerial: serial, Instance: fsm.Instance{
			Name: name, UUID: uuid, PrimaryNode: "n1", DiskTemplate: fsm.DTDiskless, AdminState: fsm.AdminDown, MemoryMiB: 128}}}
	}
	steps := func(op fsm.Opcode) ([]Step, error) {
		o := op.(*fsm.OpTestDelay)
		name := "web" + strconv.Itoa(o.Repeat)
		return []Step{
			{Name: "record", Run: func(_ context.Context, sc *StepContext) (any, error) {
				sc.Change(put(name, "u-"+name, 0))
				return nil, nil
			}},
			{Name: "start", Run: func(_ context.Context, sc *StepContext) (any, error) {
				in := put(name, "u-"+name, 1)
				in.InstancePut.Instance.AdminState = fsm.AdminUp
				if o.Fail { // a change computed from a stale record
					in.InstancePut.ExpectSerial = 0
				}
				sc.Change(in)
				return nil, nil
			}},
		}, nil
	}
	ok := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":1}`)
	bad := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2,"fail":true}`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 2, Strategy: fastStrategy, Steps: steps}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	waitStatus(t, d.f, ok, fsm.StatusSuccess)
	j := waitStatus(t, d.f, bad, fsm.StatusError)
	if !strings.Contains(string(j.Ops[0].Result), "step 2 of 2 (start): its configuration change was refused") {
		t.Errorf("result %s", j.Ops[0].Result)
	}
	d.f.Read(func(s *fsm.State, _ uint64) {
		if i := s.LookupInstance("web1"); i == nil || i.AdminState != fsm.AdminUp || i.SerialNo != 2 {
			t.Errorf("web1 = %+v", i)
		}
		if i := s.LookupInstance("web2"); i == nil || i.AdminState != fsm.AdminDown || i.SerialNo != 1 {
			t.Errorf("web2 = %+v (the refused change must not apply)", i)
		}
	})
}
