package jobs

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
	"github.com/gnt-cluster/gnt/jobs/locking"
	"github.com/gnt-cluster/gnt/oob"
)

// Applier replicates a command and returns its response (implemented by
// the server's Raft apply helper).
type Applier interface {
	Apply(ctx context.Context, cmd fsm.Command) (fsm.Response, uint64, error)
}

// DefaultConcurrency is the number of jobs the executor runs at once when
// none is configured (Ganeti's default maximum of running jobs).
const DefaultConcurrency = 20

// Executor runs executor jobs on the leader.
type Executor struct {
	FSM   *fsm.FSM
	Apply Applier
	// Epoch is the executor epoch the leader started with LeaderEstablish;
	// every update carries it.
	Epoch uint64
	// Concurrency bounds the jobs started at once (resumed jobs always
	// run: they already hold their locks).
	Concurrency int
	// Locks is the lock manager; nil means a new one. It lives as long as
	// the leadership: a new leader rebuilds it from the started jobs.
	Locks *locking.Manager
	// Strategy gives the lock attempt timeouts; zero means Ganeti's.
	Strategy locking.Strategy
	Clock    func() time.Time
	// Sleep waits for d or until ctx ends (injectable for tests).
	Sleep func(ctx context.Context, d time.Duration) error
	Log   hclog.Logger
	// Nodes reaches the node agents (instance opcodes).
	Nodes NodeCaller
	// Dead reports nodes that liveness says are dead (nil: none are).
	Dead func(*fsm.Node) bool
	// Steps gives an opcode's steps; nil means this gntd's opcodes. Tests
	// set it to run opcodes with steps of their own.
	Steps func(fsm.Opcode) ([]Step, error)
	// IAllocators runs the external allocators of this gntd; nil runs the
	// built-in only (a list naming another allocator fails for it).
	IAllocators *iallocator.Runner
	// OOB runs out-of-band helpers (OP_OOB_COMMAND, OP_CLUSTER_EPO); nil
	// means an oob.Runner with the design's bounds.
	OOB *oob.Runner
	// Leadership hands the master role away before the master's node is
	// powered off; nil refuses to power it off.
	Leadership Leadership
	// Probe tells whether a node's gntd answers (OP_CLUSTER_EPO on waits
	// for it); nil makes that wait fail.
	Probe NodeProbe
	// OnResumed, when set, is called once with the number of started jobs
	// the executor found and the time from Run's start until the first of
	// them was running again (zero when there were none).
	OnResumed func(jobs int, took time.Duration)
	// Debug is set on a gntd started with --debug: only then does the
	// executor run debugging opcodes (OP_TEST_CRASH).
	Debug bool
	// Metrics, when set, is told how long lock acquisitions waited and
	// how long each opcode the executor ran took.
	Metrics Metrics
	// Crash kills this gntd for OP_TEST_CRASH, the way its mode says; nil
	// means for real (os.Exit, or a panic in the job's goroutine). Tests
	// set it to stop the executor instead.
	Crash func(mode string)
	// Incarnation is this gntd's incarnation (a random id drawn at its
	// start), recorded with each attempt for the poison-job guard.
	Incarnation string
	// Incarnations asks the earlier leaders of a job it resumes for
	// their incarnation, so that leaders that only stepped down are not
	// counted as deaths (survivors.go); nil counts every one.
	Incarnations IncarnationProbe
	// Pacer, when set, hears of every pick so the applier can let the
	// updates of the jobs it launched ride the next Raft entry (pacer.go).
	Pacer *Pacer

	resumeOnce sync.Once
	started    time.Time
	// filters and rejects belong to Run's goroutine (filters.go).
	filters filterCache
	rejects []filterReject
}

// ErrFenced means a newer leader's executor took over.
var ErrFenced = errors.New("executor fenced by a newer epoch")

// errNotRunnable means the job cannot run now (a dependency has not
// finished); the dispatcher looks at it again when the state changes.
var errNotRunnable = errors.New("job is not runnable yet")

func (e *Executor) defaults() {
	if e.Clock == nil {
		e.Clock = time.Now
	}
	if e.Sleep == nil {
		e.Sleep = sleepCtx
	}
	if e.Log == nil {
		e.Log = hclog.NewNullLogger()
	}
	if e.Concurrency <= 0 {
		e.Concurrency = DefaultConcurrency
	}
	if e.Locks == nil {
		e.Locks = locking.NewManager()
	}
	if e.Strategy.Min == 0 && e.Strategy.Max == 0 && e.Strategy.Total == 0 {
		e.Strategy = locking.DefaultStrategy()
	}
}

// Run dispatches runnable jobs until ctx ends or the executor is fenced.
func (e *Executor) Run(ctx context.Context) error {
	e.defaults()
	e.started = time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		running = map[int64]bool{}
		fenced  error
		wg      sync.WaitGroup
		wake    = make(chan struct{}, 1)
	)
	// Idle workers end with ctx, so cancel it before waiting for them.
	defer func() { cancel(); wg.Wait() }()
	e.Pacer.start()
	defer e.Pacer.stop()
	resumed := e.rebuildLocks(ctx)
	if len(resumed) == 0 {
		e.resumeOnce.Do(func() {
			if e.OnResumed != nil {
				e.OnResumed(0, 0)
			}
		})
	}
	runOne := func(t jobTask) {
		jctx := e.Pacer.withToken(ctx, t.gen)
		err := e.runJob(jctx, t.id, t.resume)
		GiveBack(jctx)
		e.Locks.ReleaseAll(t.id)
		mu.Lock()
		delete(running, t.id)
		if errors.Is(err, ErrFenced) && fenced == nil {
			fenced = err
			cancel()
		} else if err != nil && !errors.Is(err, errNotRunnable) && ctx.Err() == nil {
			e.Log.Warn("job interrupted", "job", t.id, "error", err)
		}
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// Jobs run on workers that stay for the executor's term: a new
	// goroutine's stack grows, by copying, to the depth a job's update
	// needs, and that copying was 3 % of the leader's CPU with no-op jobs.
	// There are at most as many workers as jobs ever ran at once.
	idle := make(chan jobTask) // unbuffered: a send succeeds only to an idle worker
	launch := func(id int64, resume bool, gen uint64) {
		if ctx.Err() != nil {
			return // ending: a job picked meanwhile is the next leader's
		}
		running[id] = true
		t := jobTask{id: id, resume: resume, gen: gen}
		select {
		case idle <- t:
			return
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				runOne(t)
				select {
				case t = <-idle:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	mu.Lock()
	for _, id := range resumed {
		launch(id, true, 0)
	}
	mu.Unlock()
	// One timer for every wait below rather than a new one per wait: the
	// loop turns once per committed entry under load.
	tick := time.NewTimer(time.Second)
	defer tick.Stop()
	for {
		changed := e.FSM.Changed()
		mu.Lock()
		free := e.Concurrency - len(running)
		mu.Unlock()
		var (
			runnable []int64
			at       uint64
			hold     bool
		)
		e.FSM.Read(func(s *fsm.State, index uint64) {
			// Filter rules are looked at even with every slot taken:
			// a REJECT does not wait for a free slot.
			if hold = s.FiltersHold(); free > 0 || hold {
				runnable, at = e.pick(s, free, running, &mu), index
			}
		})
		if rejects := e.rejects; len(rejects) > 0 {
			e.rejects = nil
			e.rejectJobs(ctx, rejects)
		}
		mu.Lock()
		if fenced != nil {
			mu.Unlock()
			return fenced
		}
		fresh := runnable[:0]
		for _, id := range runnable {
			if !running[id] {
				fresh = append(fresh, id)
			}
		}
		full := len(running)+len(fresh) >= e.Concurrency
		// The pacer counts the tokens before any launched job can give
		// its token back.
		e.Pacer.picked(at, len(fresh), full)
		for _, id := range fresh {
			launch(id, false, at)
		}
		mu.Unlock()
		// With every slot taken only the end of a job matters; otherwise
		// look again when the queue changes, a job ends, or after a second.
		if full && !hold {
			changed = nil
		}
		tick.Reset(time.Second)
		select {
		case <-changed:
		case <-wake:
		case <-ctx.Done():
		case <-tick.C:
		}
		if ctx.Err() != nil {
			mu.Lock()
			err := fenced
			mu.Unlock()
			return err
		}
	}
}

// jobTask is a job for one of Run's workers.
type jobTask struct {
	id     int64
	resume bool
	gen    uint64
}

// pick chooses up to n jobs to start: started jobs first (a job another
// executor started and this one has not resumed), then by priority, then
// by id; jobs whose next opcode waits for a dependency are skipped. While
// filter rules can hold jobs, pickFiltered applies them (filters.go).
func (e *Executor) pick(s *fsm.State, n int, running map[int64]bool, mu *sync.Mutex) []int64 {
	if s.FiltersHold() {
		out, rejects := e.pickFiltered(s, n, running, mu)
		e.rejects = append(e.rejects, rejects...)
		return out
	}
	var (
		started []int64
		best    pickHeap // the n best unstarted jobs so far, the worst on top
	)
	mu.Lock()
	s.EachExecutorJob(func(j *fsm.Job) {
		if running[j.ID] {
			return
		}
		idx := j.CurrentOp()
		if idx < 0 {
			return
		}
		if j.Ops[idx].Status == fsm.StatusRunning {
			started = append(started, j.ID)
			return
		}
		c := pickCand{j.ID, j.Priority()}
		if len(best) == n && !c.before(best[0]) {
			return
		}
		if v, _ := s.CheckDependencies(j, idx); v == fsm.DepWait {
			return
		}
		if len(best) < n {
			heap.Push(&best, c)
		} else {
			best[0] = c
			heap.Fix(&best, 0)
		}
	})
	mu.Unlock()
	slices.Sort(started)
	out := started
	if len(out) < n {
		sort.Slice(best, func(a, b int) bool { return best[a].before(best[b]) })
		for _, c := range best[:min(len(best), n-len(out))] {
			out = append(out, c.id)
		}
	}
	return out
}

// pickCand is an unstarted job pick considers.
type pickCand struct {
	id   int64
	prio int
}

// before orders candidates by priority, then by id.
func (c pickCand) before(d pickCand) bool {
	return c.prio < d.prio || c.prio == d.prio && c.id < d.id
}

// pickHeap is a max-heap of candidates: the one to drop first on top.
type pickHeap []pickCand

func (h pickHeap) Len() int           { return len(h) }
func (h pickHeap) Less(a, b int) bool { return h[b].before(h[a]) }
func (h pickHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *pickHeap) Push(x any)        { *h = append(*h, x.(pickCand)) }
func (h *pickHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// rebuildLocks re-takes, for every job with a running opcode, the locks
// its opcode recorded when it started, before anything else is started:
// they were held together under the previous leader, so they are granted
// at once. It returns the ids of those jobs.
func (e *Executor) rebuildLocks(ctx context.Context) []int64 {
	var started []*fsm.Job
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		for _, j := range s.ExecutorJobs() {
			if idx := j.CurrentOp(); idx >= 0 && j.Ops[idx].Status == fsm.StatusRunning {
				started = append(started, j)
			}
		}
	})
	ids := make([]int64, 0, len(started))
	for _, j := range started {
		op := j.Ops[j.CurrentOp()]
		if len(op.Locks) > 0 {
			reqs := toRequests(op.Locks)
			if err := e.Locks.Acquire(ctx, j.ID, op.Priority, reqs, time.Second); err != nil {
				e.Log.Error("re-taking the locks of a started job", "job", j.ID, "locks", fsm.DescribeLocks(op.Locks), "error", err)
			}
		}
		ids = append(ids, j.ID)
	}
	if len(ids) > 0 {
		e.Log.Info("resuming started jobs", "jobs", len(ids), "epoch", e.Epoch)
	}
	return ids
}

func (e *Executor) noteResumed(n int) {
	e.resumeOnce.Do(func() {
		took := time.Since(e.started)
		e.Log.Info("first resumed job running", "after", took, "started_jobs", n)
		if e.OnResumed != nil {
			e.OnResumed(n, took)
		}
	})
}

// update replicates one job update and maps a fencing refusal to ErrFenced.
func (e *Executor) update(ctx context.Context, u fsm.JobUpdate) (fsm.Response, error) {
	u.Epoch = e.Epoch
	u.Now = e.Clock().UnixNano()
	resp, _, err := e.Apply.Apply(ctx, u)
	if err != nil {
		return resp, err
	}
	if e.Metrics != nil && resp.Err == nil {
		e.observeOpcode(u, resp.Job)
	}
	if resp.Err != nil {
		if resp.Err.Code == fsm.CodeFenced {
			return resp, ErrFenced
		}
		return resp, resp.Err
	}
	return resp, nil
}

// checkEpoch refuses to act in the outside world once the state shows a
// newer executor epoch: the deposed leader's outstanding work stops here
// instead of being repeated by two leaders.
func (e *Executor) checkEpoch() error {
	var cur uint64
	e.FSM.Read(func(s *fsm.State, _ uint64) { cur = s.Epoch })
	if cur != e.Epoch {
		return ErrFenced
	}
	return nil
}

// objectName is the name of the node or instance with this UUID, or the
// UUID when there is none.
func (e *Executor) objectName(uuid string) string {
	name := uuid
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if n := s.Nodes[uuid]; n != nil {
			name = n.Name
		} else if in := s.Instances[uuid]; in != nil {
			name = in.Name
		}
	})
	return name
}

// storedInstance is an instance's stored record by UUID (a copy), nil if
// there is none.
func (e *Executor) storedInstance(uuid string) *fsm.Instance {
	var in *fsm.Instance
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if i := s.Instances[uuid]; i != nil {
			c := *i
			in = &c
		}
	})
	return in
}

func (e *Executor) readJob(id int64) *fsm.Job {
	var job *fsm.Job
	e.FSM.Read(func(s *fsm.State, _ uint64) { job = s.Jobs[id] })
	return job
}

// runJob runs the job's opcodes from the first one that is not finished.
func (e *Executor) runJob(ctx context.Context, id int64, resume bool) error {
	for {
		// An executor that is ending (ctx cancelled: it stepped down or
		// was fenced) starts no opcode: the next leader runs it.
		if err := ctx.Err(); err != nil {
			return err
		}
		job := e.readJob(id)
		if job == nil || fsm.Finalized(job.Status) {
			return nil
		}
		idx := job.CurrentOp()
		if idx < 0 {
			return nil
		}
		if err := e.runOp(ctx, job, idx, resume); err != nil {
			var fe *fsm.Error
			if errors.As(err, &fe) && fe.Code == fsm.CodeState {
				// The job changed under us (an operator canceled a job
				// that had not recorded its start): look again.
				if cur := e.readJob(id); cur == nil || fsm.Finalized(cur.Status) {
					return nil
				}
			}
			return err
		}
		e.Locks.ReleaseAll(id)
		resume = false
	}
}

func (e *Executor) runOp(ctx context.Context, job *fsm.Job, idx int, resume bool) error {
	st := job.Ops[idx]
	op, err := st.Opcode()
	if err != nil {
		_, uerr := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
			Status: fsm.StatusError, Result: mustJSON(fmt.Sprintf("opcode cannot be decoded: %v", err))})
		return uerr
	}
	started := st.Status == fsm.StatusRunning
	resumed := started && resume // an earlier executor started it
	decl := st.Locks
	if !started {
		held, err := e.prepare(ctx, job, idx, op)
		if err != nil {
			return err
		}
		decl = held
		job = e.readJob(job.ID)
		if job == nil || fsm.Finalized(job.Status) || job.CurrentOp() != idx {
			return nil // canceled while it waited, or failed a dependency
		}
		st = job.Ops[idx]
		// The nodes' DRBD, checked as at submission (rpc's checkDRBDOps):
		// a node may have said it takes no drbd disks since the job was
		// queued, and balancing submits its moves without that check.
		// The opcode fails before anything of it runs, with the same
		// message.
		var derr *fsm.Error
		e.FSM.Read(func(s *fsm.State, _ uint64) { derr = s.CheckDRBDOp(op) })
		if derr != nil {
			_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
				Status: fsm.StatusError, Result: mustJSON(derr.Error())})
			return err
		}
	}
	if fsm.IsConfigOnly(op) {
		_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionApply})
		return err
	}
	// The poison-job guard (fsm/attempts.go): nothing of an opcode runs,
	// its steps are not even built, before this executor's attempt is
	// recorded, by the start record of an opcode it starts or by an
	// attempt record of one an earlier executor started. Either may come
	// back with the job failed by the guard, or canceled as requested.
	var rec *fsm.JobUpdate
	switch {
	case started && !job.AttemptedBy(e.Epoch):
		rec = &fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionAttempt}
	case !started && (len(decl) > 0 || !inert(op)):
		// An inert opcode without locks needs no start record: if the
		// leader dies before it finishes, the next one runs it again.
		rec = &fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionStart, Locks: decl}
	}
	record := func(rec fsm.JobUpdate) (bool, error) {
		resp, err := e.update(ctx, rec)
		if err != nil {
			return false, err
		}
		if resp.Job == nil || fsm.Finalized(resp.Job.Status) {
			return false, nil // failed by the guard, or canceled
		}
		job, st, started = resp.Job, resp.Job.Ops[idx], true
		return true, nil
	}
	if rec != nil {
		rec.Incarnation, rec.Survived = e.Incarnation, e.survivors(ctx, job)
		if goOn, err := record(*rec); !goOn {
			return err
		}
	}
	stepsOf := func(op fsm.Opcode, st *fsm.OpState) ([]Step, error) {
		if e.Steps != nil {
			return e.Steps(op)
		}
		return e.stepsFor(op, st)
	}
	steps, serr := stepsOf(op, st)
	if !started && serr == nil && len(steps) > 1 {
		// Steps of a test's own (Executor.Steps) may be several where
		// the opcode's are one: each step's record needs a started opcode.
		if goOn, err := record(fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionStart, Locks: decl,
			Incarnation: e.Incarnation, Survived: e.survivors(ctx, job)}); !goOn {
			return err
		}
	}
	var note []string
	if resumed {
		// The note is recorded with the step's result, so its entry is
		// stamped when the step ends; the text says when it resumed.
		note = []string{fmt.Sprintf("resumed by the executor of epoch %d after a leader change, at step %d of %d (at %s)",
			e.Epoch, len(st.Steps)+1, max(len(steps), 1), e.Clock().UTC().Format("15:04:05.000 MST"))}
		e.noteResumed(1)
	}
	if serr != nil {
		_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
			Status: fsm.StatusError, Log: note, Result: mustJSON(serr.Error())})
		return err
	}
	sc := &StepContext{Job: job, OpIndex: idx, Resumed: resume, dryRun: fsm.IsDryRun(op), sleep: func(ctx context.Context, d time.Duration) error {
		if d > 0 {
			GiveBack(ctx) // the next entry need not wait for this job
		}
		return e.Sleep(ctx, d)
	}}
	if sc.dryRun {
		sc.name = e.objectName
	}
	sc.stored = e.storedInstance
	var (
		result  any
		retries int
	)
	for k := len(st.Steps); k < len(steps); k++ {
		if err := e.checkEpoch(); err != nil {
			return err
		}
		if cur := e.readJob(job.ID); cur != nil && cur.CancelRequested && started {
			_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionCancel,
				Log: append(note, fmt.Sprintf("canceled before step %d (%s) as requested", k+1, steps[k].Name))})
			return err
		}
		sc.Index, sc.logs, sc.changes = k, note, nil
		note = nil
		var (
			res any
			err error
		)
		if skip, ferr := e.resumeCheck(ctx, sc, steps[k], resumed && k == len(st.Steps)); ferr != nil {
			_, uerr := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
				Status: fsm.StatusError, Log: sc.logs, Result: mustJSON(ferr.Error())})
			return uerr
		} else if skip {
			sc.Logf("step %d (%s) had taken effect before the leader change; not repeated", k+1, steps[k].Name)
		} else {
			res, err = steps[k].Run(ctx, sc)
		}
		if ctx.Err() != nil {
			return ctx.Err() // stepping down: the next leader resumes at this step
		}
		if err != nil {
			_, uerr := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
				Status: fsm.StatusError, Log: sc.logs,
				Result: mustJSON(fmt.Sprintf("step %d of %d (%s) failed: %v", k+1, len(steps), steps[k].Name, err))})
			return uerr
		}
		result = res
		if k == len(steps)-1 && !steps[k].Retry {
			break // the last step is recorded by finish
		}
		resp, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionStep,
			Step: k, StepName: steps[k].Name, Result: mustJSON(res), Log: sc.logs, Changes: sc.changes})
		if err != nil && steps[k].Retry && retries < maxStepRetries && conflict(err) {
			// Another job changed what the step decided on (say, took
			// the memory it placed the instance in): decide again.
			retries++
			k--
			continue
		}
		if err != nil {
			return e.changeRefused(ctx, job.ID, idx, k, steps, sc, err)
		}
		retries = 0
		if resp.Job != nil && fsm.Finalized(resp.Job.Status) {
			return nil // canceled at this step boundary
		}
		if resp.Job != nil {
			// An opcode whose later steps depend on what an earlier one
			// recorded (an evacuation's plan) gets them now.
			if more, err := stepsOf(op, resp.Job.Ops[idx]); err == nil {
				steps = more
			}
		}
	}
	if sc.dryRun && result == nil {
		// A dry run's result is what it would have done, unless its
		// steps answered with a plan of their own (create, EPO, OOB).
		result = map[string]any{"dry_run": true, "would": append([]string{}, sc.would...)}
	}
	last, name := len(steps)-1, ""
	if last >= 0 {
		name = steps[last].Name
		if steps[last].Retry {
			sc.logs, sc.changes = nil, nil // recorded with the step already
		}
	}
	if _, err = e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
		Status: fsm.StatusSuccess, Result: mustJSON(result), Log: sc.logs, StepName: name, Changes: sc.changes}); err != nil {
		return e.changeRefused(ctx, job.ID, idx, last, steps, sc, err)
	}
	return nil
}

// maxStepRetries bounds how often a Retry step decides again.
const maxStepRetries = 10

// conflict reports whether a refused step record says the configuration
// changed under the step (resources taken, a record changed since read).
func conflict(err error) bool {
	var fe *fsm.Error
	return errors.As(err, &fe) && (fe.Code == fsm.CodeNoRes || fe.Code == fsm.CodeState)
}

// changeRefused handles a step record the state refused: when it carried
// configuration changes that no longer fit the configuration (another job
// changed it), the opcode fails saying so; other errors (fencing, lost
// leadership) stop the job for the next leader.
func (e *Executor) changeRefused(ctx context.Context, id int64, idx, k int, steps []Step, sc *StepContext, err error) error {
	var fe *fsm.Error
	if len(sc.changes) == 0 || !errors.As(err, &fe) || fe.Code == fsm.CodeFenced {
		return err
	}
	if cur := e.readJob(id); cur == nil || fsm.Finalized(cur.Status) {
		return nil
	}
	_, uerr := e.update(ctx, fsm.JobUpdate{JobID: id, OpIndex: idx, Action: fsm.ActionFinish, Status: fsm.StatusError,
		Log:    sc.logs,
		Result: mustJSON(fmt.Sprintf("step %d of %d (%s): its configuration change was refused: %s", k+1, len(steps), steps[k].Name, fe.Msg))})
	return uerr
}

// resumeCheck decides how to resume at a step that may have been in
// progress when the previous leader died (resumed is true only for the
// first step an executor runs of an opcode another one started). It
// returns skip when the step's effect is already there, and an error that
// fails the opcode when the step cannot be repeated safely.
func (e *Executor) resumeCheck(ctx context.Context, sc *StepContext, st Step, resumed bool) (skip bool, err error) {
	if !resumed || !st.NoRepeat {
		return false, nil
	}
	if st.Check == nil {
		return false, fmt.Errorf("cannot resume after a leader failover: step %d (%s) may have been in progress under the previous leader and cannot be repeated safely (executor epoch %d); check its effect by hand",
			sc.Index+1, st.Name, e.Epoch)
	}
	done, cerr := st.Check(ctx, sc)
	if cerr != nil {
		return false, fmt.Errorf("cannot resume after a leader failover: checking whether step %d (%s) took effect failed: %v",
			sc.Index+1, st.Name, cerr)
	}
	return done, nil
}

// prepare gets a queued opcode ready to run: it checks the dependencies
// and takes the opcode's locks, with Ganeti's growing timeouts; when the
// timeouts are used up it raises the opcode's priority by one and starts
// over (at the highest priority it waits without timeout). It returns the
// locks it holds.
//
// The locks an opcode needs are read from the state before they are
// waited for, and the state can change meanwhile: a job holding the
// instance's lock gives it a new secondary, say. So once they are
// granted they are read again, under them, and when the opcode now needs
// locks it does not hold, they are released and the new ones waited for
// (Ganeti's lock, verify, retry).
func (e *Executor) prepare(ctx context.Context, job *fsm.Job, idx int, op fsm.Opcode) ([]fsm.LockDecl, error) {
	var (
		verdict fsm.DepVerdict
		msg     string
		decl    []fsm.LockDecl
	)
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		verdict, msg = s.CheckDependencies(job, idx)
		decl = op.Locks(s)
	})
	switch verdict {
	case fsm.DepWait:
		return nil, errNotRunnable
	case fsm.DepCancel:
		_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionCancel, Log: []string{msg}})
		return nil, err
	case fsm.DepWrongStatus:
		_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
			Status: fsm.StatusError, Result: mustJSON(msg), Log: []string{msg}})
		return nil, err
	}
	if len(decl) == 0 {
		return nil, nil
	}
	reqs := toRequests(decl)
	prio := job.Ops[idx].Priority
	waiting := job.Ops[idx].Status == fsm.StatusWaiting
	if e.Metrics != nil {
		began := e.Clock()
		defer func() { e.Metrics.LockWait(lockLevel(reqs), e.Clock().Sub(began)) }()
	}
	for attempt := 0; ; attempt++ {
		timeout, ok := e.Strategy.Attempt(attempt)
		if !ok && prio > fsm.PrioHighest {
			resp, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionPriority,
				Log: []string{fmt.Sprintf("could not acquire locks %s in time; raising the priority to %d", fsm.DescribeLocks(decl), prio-1)}})
			if err != nil {
				return nil, err
			}
			if resp.Job != nil && (fsm.Finalized(resp.Job.Status) || resp.Job.CancelRequested) {
				return nil, nil
			}
			prio--
			e.Locks.SetPriority(job.ID, prio)
			attempt = -1
			continue
		}
		if !ok {
			timeout = 0 // blocking: the strategy is used up at the highest priority
		}
		err := e.Locks.Acquire(ctx, job.ID, prio, reqs, timeout)
		if err == nil {
			var now []fsm.LockDecl
			e.FSM.Read(func(s *fsm.State, _ uint64) { now = op.Locks(s) })
			if fsm.LocksCover(decl, now) {
				return decl, nil
			}
			e.Locks.ReleaseAll(job.ID)
			decl, reqs = now, toRequests(now)
			attempt = -1
			continue
		}
		if !errors.Is(err, locking.ErrTimeout) {
			return nil, err
		}
		if cur := e.readJob(job.ID); cur == nil || fsm.Finalized(cur.Status) {
			return nil, nil // canceled while waiting
		}
		if !waiting {
			if _, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionWait,
				Log: []string{"waiting for locks " + fsm.DescribeLocks(decl)}}); err != nil {
				return nil, err
			}
			waiting = true
		}
	}
}

// toRequests turns the state's lock declarations into lock manager
// requests.
func toRequests(decl []fsm.LockDecl) []locking.Request {
	out := make([]locking.Request, 0, len(decl))
	for _, d := range decl {
		lvl, err := locking.ParseLevel(d.Level)
		if err != nil {
			continue // the opcodes declare only known levels
		}
		mode := locking.Shared
		if d.Exclusive {
			mode = locking.Exclusive
		}
		out = append(out, locking.Request{Level: lvl, Names: d.Names, Mode: mode})
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
