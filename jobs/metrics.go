package jobs

import (
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/locking"
)

// Metrics receives the executor's measurements (the server exports them
// to Prometheus). Methods are called from the executor's workers and must
// not block.
type Metrics interface {
	// LockWait reports how long one acquisition of an opcode's locks
	// took, from the first attempt to the grant, by the most significant
	// level it asked for (locking.Level.String()). Acquisitions granted at
	// once are reported too, with their short wait.
	LockWait(level string, waited time.Duration)
	// OpcodeDone reports an opcode the executor ended: its OP_ID, its
	// final status (success, error, canceled) and the time from its
	// start record to its end.
	OpcodeDone(opID, status string, took time.Duration)
}

// observeOpcode reports an opcode that update u ended, if it did.
func (e *Executor) observeOpcode(u fsm.JobUpdate, j *fsm.Job) {
	switch u.Action {
	case fsm.ActionFinish, fsm.ActionApply, fsm.ActionCancel:
	default:
		return
	}
	if j == nil || u.OpIndex < 0 || u.OpIndex >= len(j.Ops) {
		return
	}
	st := j.Ops[u.OpIndex]
	if !fsm.Finalized(st.Status) || st.EndTS == nil {
		return
	}
	var took time.Duration
	if st.StartTS != nil {
		took = time.Duration(st.EndTS.UnixNano() - st.StartTS.UnixNano())
	}
	id := "unknown"
	if op, err := st.Opcode(); err == nil {
		id = op.Common().OpID
	}
	e.Metrics.OpcodeDone(id, st.Status, max(took, 0))
}

// lockLevel names the most significant level of reqs, for LockWait.
func lockLevel(reqs []locking.Request) string {
	if len(reqs) == 0 {
		return "none"
	}
	top := reqs[0].Level
	for _, r := range reqs[1:] {
		if r.Level < top {
			top = r.Level
		}
	}
	return top.String()
}
