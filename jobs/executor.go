package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
)

// Applier replicates a command and returns its response (implemented by
// the server's Raft apply helper).
type Applier interface {
	Apply(ctx context.Context, cmd fsm.Command) (fsm.Response, uint64, error)
}

// Executor runs executor jobs on the leader.
type Executor struct {
	FSM   *fsm.FSM
	Apply Applier
	// Epoch is the executor epoch the leader started with LeaderEstablish;
	// every update carries it.
	Epoch       uint64
	Concurrency int
	Clock       func() time.Time
	// Sleep waits for d or until ctx ends (injectable for tests).
	Sleep func(ctx context.Context, d time.Duration) error
	Log   hclog.Logger
}

// ErrFenced means a newer leader's executor took over.
var ErrFenced = errors.New("executor fenced by a newer epoch")

// Run dispatches runnable jobs until ctx ends or the executor is fenced.
func (e *Executor) Run(ctx context.Context) error {
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
		e.Concurrency = 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		running = map[int64]bool{}
		fenced  error
		wg      sync.WaitGroup
		wake    = make(chan struct{}, 1)
	)
	defer wg.Wait()
	for {
		changed := e.FSM.Changed()
		var runnable []*fsm.Job
		e.FSM.Read(func(s *fsm.State, _ uint64) { runnable = s.ExecutorJobs() })
		// Started jobs first (resumption), then by priority, then by id.
		sort.SliceStable(runnable, func(a, b int) bool {
			ra, rb := runnable[a].StartTS != nil, runnable[b].StartTS != nil
			if ra != rb {
				return ra
			}
			return runnable[a].Priority() < runnable[b].Priority()
		})
		mu.Lock()
		if fenced != nil {
			mu.Unlock()
			return fenced
		}
		for _, j := range runnable {
			if len(running) >= e.Concurrency {
				break
			}
			if running[j.ID] {
				continue
			}
			running[j.ID] = true
			wg.Add(1)
			go func(id int64) {
				defer wg.Done()
				err := e.runJob(ctx, id)
				mu.Lock()
				delete(running, id)
				if errors.Is(err, ErrFenced) && fenced == nil {
					fenced = err
					cancel()
				} else if err != nil && ctx.Err() == nil {
					e.Log.Warn("job interrupted", "job", id, "error", err)
				}
				mu.Unlock()
				select {
				case wake <- struct{}{}:
				default:
				}
			}(j.ID)
		}
		mu.Unlock()
		// Look again when the queue changes, a job ends, or after a second.
		select {
		case <-changed:
		case <-wake:
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		if ctx.Err() != nil {
			mu.Lock()
			err := fenced
			mu.Unlock()
			return err
		}
	}
}

// update replicates one job update and maps a fencing refusal to ErrFenced.
func (e *Executor) update(ctx context.Context, u fsm.JobUpdate) (fsm.Response, error) {
	u.Epoch = e.Epoch
	u.Now = e.Clock().UnixNano()
	resp, _, err := e.Apply.Apply(ctx, u)
	if err != nil {
		return resp, err
	}
	if resp.Err != nil {
		if resp.Err.Code == fsm.CodeFenced {
			return resp, ErrFenced
		}
		return resp, resp.Err
	}
	return resp, nil
}

// runJob runs the job's opcodes from the first one that is not finished.
func (e *Executor) runJob(ctx context.Context, id int64) error {
	for {
		var job *fsm.Job
		e.FSM.Read(func(s *fsm.State, _ uint64) { job = s.Jobs[id] })
		if job == nil || fsm.Finalized(job.Status) {
			return nil
		}
		idx := -1
		for i, op := range job.Ops {
			if op.Status != fsm.StatusSuccess {
				idx = i
				break
			}
		}
		if idx < 0 {
			return nil
		}
		if err := e.runOp(ctx, job, idx); err != nil {
			return err
		}
	}
}

func (e *Executor) runOp(ctx context.Context, job *fsm.Job, idx int) error {
	st := job.Ops[idx]
	op, err := fsm.ParseOpcode(st.Input)
	if err != nil {
		if st.Status == fsm.StatusQueued {
			if _, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionStart}); err != nil {
				return err
			}
		}
		_, uerr := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
			Status: fsm.StatusError, Result: mustJSON(fmt.Sprintf("opcode cannot be decoded: %v", err))})
		return uerr
	}
	if fsm.IsConfigOnly(op) {
		_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionApply})
		return err
	}
	var resumeNote []string
	if st.Status == fsm.StatusQueued {
		if _, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionStart}); err != nil {
			return err
		}
	} else {
		resumeNote = []string{fmt.Sprintf("resuming %s after a leader change (executor epoch %d)", op.Common().OpID, e.Epoch)}
	}
	switch o := op.(type) {
	case *fsm.OpTestDelay:
		return e.testDelay(ctx, job.ID, idx, o, resumeNote)
	default:
		_, err := e.update(ctx, fsm.JobUpdate{JobID: job.ID, OpIndex: idx, Action: fsm.ActionFinish,
			Status: fsm.StatusError, Log: resumeNote,
			Result: mustJSON(fmt.Sprintf("opcode %s has no executor in this gntd", op.Common().OpID))})
		return err
	}
}

// testDelay is OP_TEST_DELAY: sleeping is idempotent, so a resumed delay
// simply sleeps again.
func (e *Executor) testDelay(ctx context.Context, id int64, idx int, o *fsm.OpTestDelay, log []string) error {
	repeat := o.Repeat
	if repeat == 0 {
		repeat = 1
	}
	d := time.Duration(o.Duration * float64(time.Second))
	for i := 0; i < repeat; i++ {
		if err := e.Sleep(ctx, d); err != nil {
			return err
		}
	}
	status, result := fsm.StatusSuccess, mustJSON(nil)
	if o.Fail {
		status, result = fsm.StatusError, mustJSON("test delay failed as requested")
	}
	_, err := e.update(ctx, fsm.JobUpdate{JobID: id, OpIndex: idx, Action: fsm.ActionFinish, Status: status, Result: result, Log: log})
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
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
