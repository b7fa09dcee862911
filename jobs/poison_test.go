package jobs

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// leader is one simulated leader: a LeaderEstablish, then an executor
// whose OP_TEST_CRASH "kills" it by stopping it, as the death of its
// gntd would, leaving the state as the next leader finds it.
type leader struct {
	epoch   uint64
	crashed chan struct{}
	done    chan struct{} // closed when the executor has stopped
	cancel  context.CancelFunc
	once    sync.Once
}

// lead elects a new leader over d and starts its executor; steps, when
// set, replaces the opcodes' steps.
func lead(t *testing.T, d *direct, debug bool, steps func(fsm.Opcode) ([]Step, error)) *leader {
	t.Helper()
	return startLeader(t, d, func(ex *Executor, l *leader) {
		ex.Steps, ex.Debug, ex.Crash = steps, debug, func(string) { l.kill() }
	})
}

// startLeader elects a new leader over d and starts its executor, set up
// further by configure.
func startLeader(t *testing.T, d *direct, configure func(*Executor, *leader)) *leader {
	t.Helper()
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: time.Now().UnixNano(), Node: "n1", LogVersion: fsm.LogVersion})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &leader{epoch: r.Epoch, crashed: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	ex := &Executor{FSM: d.f, Apply: d, Epoch: r.Epoch, Concurrency: 2, Strategy: fastStrategy}
	configure(ex, l)
	go func() {
		if err := ex.Run(context.WithValue(ctx, leaderKey{}, l)); err != nil {
			t.Errorf("the executor of epoch %d stopped with %v", l.epoch, err)
		}
		close(l.done)
	}()
	t.Cleanup(l.stop)
	return l
}

// leaderKey is the context key of the leader whose executor runs a step.
type leaderKey struct{}

// kill is the leader's death: its executor stops where it is.
func (l *leader) kill() {
	l.once.Do(func() { close(l.crashed); l.cancel() })
}

// stop ends the leader's executor (when it did not die) and waits for it.
func (l *leader) stop() {
	l.cancel()
	<-l.done
}

// outcome waits until the leader dies (true) or job id is finalized
// (false).
func (l *leader) outcome(t *testing.T, d *direct, id int64) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-l.crashed:
			l.stop()
			return true
		case <-time.After(5 * time.Millisecond):
		}
		if j := readJob(d, id); fsm.Finalized(j.Status) {
			l.stop()
			return false
		}
	}
	t.Fatalf("the leader of epoch %d neither died nor finished job %d", l.epoch, id)
	return false
}

func readJob(d *direct, id int64) *fsm.Job {
	var j *fsm.Job
	d.f.Read(func(s *fsm.State, _ uint64) { j = s.Jobs[id] })
	return j
}

// failover elects leaders one after the other until job id is finalized,
// and returns the epochs whose leaders it killed.
func failover(t *testing.T, d *direct, id int64, steps func(fsm.Opcode) ([]Step, error)) []uint64 {
	t.Helper()
	var killed []uint64
	for range 10 {
		l := lead(t, d, true, steps)
		if !l.outcome(t, d, id) {
			return killed
		}
		killed = append(killed, l.epoch)
	}
	t.Fatalf("job %d killed 10 leaders: %v", id, killed)
	return nil
}

// TestPoisonJobStopsAfterTwoLeaders: a job that kills every executor
// running it kills two leaders; the third fails it, naming their epochs,
// without running it.
func TestPoisonJobStopsAfterTwoLeaders(t *testing.T) {
	d, _ := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_CRASH"}`, `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["after"]}`)
	killed := failover(t, d, id, nil)
	if len(killed) != fsm.PoisonDeaths {
		t.Fatalf("it killed the leaders of epochs %v, want %d of them", killed, fsm.PoisonDeaths)
	}
	j := readJob(d, id)
	if j.Status != fsm.StatusError || !reflect.DeepEqual(j.PoisonEpochs, killed) {
		t.Fatalf("job %s, poison epochs %v, want error and %v", j.Status, j.PoisonEpochs, killed)
	}
	want := fsm.PoisonMessage(killed, killed[len(killed)-1]+1)
	if !strings.Contains(string(j.Ops[0].Result), want) {
		t.Errorf("result %s, want %q", j.Ops[0].Result, want)
	}
	if j.Ops[1].Status != fsm.StatusError {
		t.Errorf("the next opcode is %s", j.Ops[1].Status)
	}
	d.f.Read(func(s *fsm.State, _ uint64) {
		if len(s.Cluster.Tags) != 0 {
			t.Errorf("the opcode after the poisoned one ran: tags %v", s.Cluster.Tags)
		}
	})
	// The leader that failed it goes on running other jobs.
	l := lead(t, d, true, nil)
	ok := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2}`)
	waitStatus(t, d.f, ok, fsm.StatusSuccess)
	l.stop()
}

// TestResumeAfterOneDeathRuns: a job whose first leader died while it ran
// is resumed by the next one and finishes.
func TestResumeAfterOneDeathRuns(t *testing.T) {
	d, _ := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_CRASH","times":1}`)
	killed := failover(t, d, id, nil)
	j := readJob(d, id)
	if len(killed) != 1 || j.Status != fsm.StatusSuccess || len(j.PoisonEpochs) != 0 {
		t.Fatalf("killed %v; job %s, poison epochs %v", killed, j.Status, j.PoisonEpochs)
	}
	if len(j.Attempts) != 2 || j.Attempts[0].Epoch != killed[0] {
		t.Errorf("attempts %+v", j.Attempts)
	}
}

// TestProgressResetsPoisonCount: each step of a three-step job kills the
// first leader that runs it; since every next leader records a step
// before it dies, the job is not failed and finishes after three deaths.
func TestProgressResetsPoisonCount(t *testing.T) {
	d, _ := setup(t)
	var (
		mu  sync.Mutex
		ran = map[int]bool{}
	)
	steps := func(fsm.Opcode) ([]Step, error) {
		var out []Step
		for k := range 3 {
			out = append(out, Step{Name: "once", Run: func(ctx context.Context, sc *StepContext) (any, error) {
				mu.Lock()
				first := !ran[k]
				ran[k] = true
				mu.Unlock()
				if first {
					ctx.Value(leaderKey{}).(*leader).kill()
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, nil
			}})
		}
		return out, nil
	}
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":3}`)
	killed := failover(t, d, id, steps)
	j := readJob(d, id)
	if len(killed) != 3 || j.Status != fsm.StatusSuccess {
		t.Fatalf("killed %v; job %s (%s)", killed, j.Status, j.Ops[0].Result)
	}
}

// TestAttemptRecordedBeforeSteps: an executor records its attempt, by the
// start record of an opcode it starts or the attempt record of one it
// resumes, before it even builds the opcode's steps; an inert opcode
// records none.
func TestAttemptRecordedBeforeSteps(t *testing.T) {
	d, _ := setup(t)
	fresh := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2}`)
	resumed := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":3}`)
	noop := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0}`)
	var epoch uint64
	d.f.Read(func(s *fsm.State, _ uint64) { epoch = s.Epoch })
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: resumed, Action: fsm.ActionStart})
	var (
		mu  sync.Mutex
		bad []string
	)
	steps := func(op fsm.Opcode) ([]Step, error) {
		o := op.(*fsm.OpTestDelay)
		id := map[int]int64{0: noop, 2: fresh, 3: resumed}[o.Repeat]
		var cur uint64
		d.f.Read(func(s *fsm.State, _ uint64) { cur = s.Epoch })
		if j := readJob(d, id); id != noop && !j.AttemptedBy(cur) {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("job %d: steps built before epoch %d's attempt (attempts %+v)", id, cur, j.Attempts))
			mu.Unlock()
		}
		return testDelaySteps(o)
	}
	l := lead(t, d, false, steps)
	for _, id := range []int64{fresh, resumed, noop} {
		waitStatus(t, d.f, id, fsm.StatusSuccess)
	}
	l.stop()
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	if got := epochsOf(readJob(d, fresh).Attempts); !reflect.DeepEqual(got, []uint64{l.epoch}) {
		t.Errorf("fresh job: attempts by %v, want [%d]", got, l.epoch)
	}
	if got := epochsOf(readJob(d, resumed).Attempts); !reflect.DeepEqual(got, []uint64{epoch, l.epoch}) {
		t.Errorf("resumed job: attempts by %v, want [%d %d]", got, epoch, l.epoch)
	}
	if a := readJob(d, noop).Attempts; len(a) != 0 {
		t.Errorf("a one-step OP_TEST_DELAY recorded attempts %+v", a)
	}
}

func epochsOf(as []fsm.Attempt) []uint64 {
	var out []uint64
	for _, a := range as {
		out = append(out, a.Epoch)
	}
	return out
}

// TestCancelBeforeResume: a cancel recorded while no leader ran the job
// is carried out by the next executor before it runs any step.
func TestCancelBeforeResume(t *testing.T) {
	d, epoch := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_CRASH"}`, `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["never"]}`)
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStart})
	if r, _, _ := d.Apply(context.Background(), fsm.JobCancel{Now: time.Now().UnixNano(), JobID: id}); r.Err != nil || r.Job.Status != fsm.StatusCanceling {
		t.Fatalf("cancel: %v %+v", r.Err, r.Job)
	}
	l := lead(t, d, true, nil)
	if l.outcome(t, d, id) {
		t.Fatal("the canceled job ran: it killed the leader")
	}
	j := readJob(d, id)
	if j.Status != fsm.StatusCanceled || j.Ops[1].Status != fsm.StatusCanceled || len(j.Ops[0].Steps) != 0 {
		t.Fatalf("job %s, opcodes %s and %s, steps %v", j.Status, j.Ops[0].Status, j.Ops[1].Status, j.Ops[0].Steps)
	}
	want := fmt.Sprintf("canceled as requested before the executor of epoch %d resumed it", l.epoch)
	if log := j.Ops[0].Log; len(log) == 0 || log[len(log)-1].Msg != want {
		t.Errorf("log %v, want it to end with %q", log, want)
	}
}

// TestCancelDuringResumedStep: while a resumed job's step runs, a cancel
// is recorded at once (it does not wait for the step), and the job stops
// at the next step boundary.
func TestCancelDuringResumedStep(t *testing.T) {
	d, epoch := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":3}`)
	update(t, d, fsm.JobUpdate{Epoch: epoch, JobID: id, Action: fsm.ActionStart})
	running, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	steps := func(fsm.Opcode) ([]Step, error) {
		step := Step{Name: "held", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			once.Do(func() { close(running) })
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}
		return []Step{step, step, step}, nil
	}
	l := lead(t, d, false, steps)
	<-running
	r, _, _ := d.Apply(context.Background(), fsm.JobCancel{Now: time.Now().UnixNano(), JobID: id})
	if r.Err != nil || r.Job.Status != fsm.StatusCanceling {
		t.Fatalf("cancel while the resumed step runs: %v %+v", r.Err, r.Job)
	}
	close(release)
	j := waitStatus(t, d.f, id, fsm.StatusCanceled)
	l.stop()
	if n := len(j.Ops[0].Steps); n != 1 {
		t.Errorf("%d steps recorded, want the one that ran when the cancel came", n)
	}
}

// TestTestCrashNeedsDebug: an executor of a gntd without --debug fails
// OP_TEST_CRASH instead of dying.
func TestTestCrashNeedsDebug(t *testing.T) {
	d, _ := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_CRASH"}`)
	l := lead(t, d, false, nil)
	if l.outcome(t, d, id) {
		t.Fatal("OP_TEST_CRASH killed a leader without --debug")
	}
	j := readJob(d, id)
	if j.Status != fsm.StatusError || !strings.Contains(string(j.Ops[0].Result), "runs only on a gntd started with --debug") {
		t.Errorf("job %s: %s", j.Status, j.Ops[0].Result)
	}
}

// fakeIncarnations answers every node's incarnation with inc, or with
// err, and counts the questions.
type fakeIncarnations struct {
	inc string
	err error
	mu  sync.Mutex
	n   int
}

func (f *fakeIncarnations) Incarnation(context.Context, *fsm.Node) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return f.inc, f.err
}

func (f *fakeIncarnations) asked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// stepDownTwice runs a job whose step holds until released under two
// leaders of gntd incarnation "inc-1" that step down (their executors
// stop, their gntd lives on) while it runs; a third leader, asking probe
// for their incarnation, then resumes it with the step released. It
// returns the job once finalized, and the epochs of the two leaders.
func stepDownTwice(t *testing.T, probe IncarnationProbe) (*fsm.Job, []uint64) {
	t.Helper()
	d, _ := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2}`)
	running, release := make(chan struct{}, 4), make(chan struct{})
	steps := func(fsm.Opcode) ([]Step, error) {
		step := Step{Name: "held", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			running <- struct{}{}
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}
		return []Step{step}, nil
	}
	var epochs []uint64
	for range fsm.PoisonDeaths {
		l := leadAs(t, d, "inc-1", probe, steps)
		<-running
		l.stop() // a step-down: the executor stops, the gntd runs on
		epochs = append(epochs, l.epoch)
	}
	close(release)
	l := leadAs(t, d, "inc-2", probe, steps)
	var j *fsm.Job
	for j = readJob(d, id); !fsm.Finalized(j.Status); j = readJob(d, id) {
		time.Sleep(5 * time.Millisecond)
	}
	l.stop()
	return j, epochs
}

// leadAs is lead with the executor's incarnation and incarnation probe.
func leadAs(t *testing.T, d *direct, inc string, probe IncarnationProbe, steps func(fsm.Opcode) ([]Step, error)) *leader {
	t.Helper()
	return startLeader(t, d, func(ex *Executor, _ *leader) {
		ex.Steps, ex.Incarnation, ex.Incarnations = steps, inc, probe
	})
}

// TestSteppedDownLeadersAreNoDeaths: two leaders that stepped down while
// a job ran, their gntd still running with the incarnation their attempts
// recorded, are not counted as deaths: the third leader marks them
// survived and runs the job to success.
func TestSteppedDownLeadersAreNoDeaths(t *testing.T) {
	probe := &fakeIncarnations{inc: "inc-1"}
	j, epochs := stepDownTwice(t, probe)
	if j.Status != fsm.StatusSuccess || len(j.PoisonEpochs) != 0 {
		t.Fatalf("job %s, poison epochs %v, log %v", j.Status, j.PoisonEpochs, j.Ops[0].Log)
	}
	if len(j.Attempts) != 3 || j.Attempts[0].Incarnation != "inc-1" || j.Attempts[2].Incarnation != "inc-2" || j.Attempts[0].Node != "n1" {
		t.Fatalf("attempts %+v", j.Attempts)
	}
	// The row ends at the latest survivor: the leader of the second
	// epoch is marked, and the first is behind it.
	if !j.Attempts[1].Survived || j.Attempts[1].Epoch != epochs[1] {
		t.Errorf("attempts %+v: epoch %d not marked survived", j.Attempts, epochs[1])
	}
	// Only the third leader asked (two suspects would fail the job); the
	// second, with one suspect, did not need to.
	if n := probe.asked(); n != fsm.PoisonDeaths {
		t.Errorf("the leaders were asked %d times, want %d", n, fsm.PoisonDeaths)
	}
}

// TestRestartedOrSilentLeadersAreDeaths: when the earlier leaders' gntds
// answer with another incarnation (they restarted) or do not answer, the
// guard fails the job as before.
func TestRestartedOrSilentLeadersAreDeaths(t *testing.T) {
	for name, probe := range map[string]*fakeIncarnations{
		"restarted": {inc: "inc-9"},
		"silent":    {err: context.DeadlineExceeded},
	} {
		t.Run(name, func(t *testing.T) {
			j, epochs := stepDownTwice(t, probe)
			if j.Status != fsm.StatusError || !reflect.DeepEqual(j.PoisonEpochs, epochs) {
				t.Fatalf("job %s, poison epochs %v, want error and %v", j.Status, j.PoisonEpochs, epochs)
			}
			for _, a := range j.Attempts {
				if a.Survived {
					t.Errorf("attempt %+v marked survived", a)
				}
			}
		})
	}
}
