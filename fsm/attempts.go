package fsm

import (
	"fmt"
	"strconv"
	"strings"
)

// The poison-job guard. Before an executor runs anything of a job that
// can reach the outside world, it records an attempt: its epoch, the time
// and the job's progress then (ActionStart for an opcode it starts,
// ActionAttempt for one an earlier executor started). When a later epoch
// records an attempt and the job has not progressed since the previous
// attempt, the previous epoch's leader was lost while the job ran and
// before it recorded anything: its run coincided with that leader's
// death. After PoisonDeaths such deaths in a row the job is failed by the
// attempt itself, in the same entry, instead of being run once more, so
// that a job that kills its executor (a crash, an out-of-memory) cannot
// take down leader after leader. Each attempt's epoch and time come from
// the proposer, so every replica decides alike.

// PoisonDeaths is the number of leader deaths in a row, with no progress
// of the job in between, after which the next attempt fails the job
// rather than running it again.
const PoisonDeaths = 2

// maxAttempts bounds the attempts a job keeps; the oldest go first (the
// guard needs only the last PoisonDeaths of them).
const maxAttempts = 16

// Attempt records that an executor started or resumed a job.
type Attempt struct {
	// Epoch is the executor epoch that made the attempt.
	Epoch uint64 `json:"epoch"`
	// Time is the proposer's time of the attempt.
	Time *Timestamp `json:"ts"`
	// OpIndex is the opcode it started or resumed.
	OpIndex int `json:"op_index"`
	// Progress is the job's progress when it was made: the steps recorded
	// and the opcodes that succeeded, over all its opcodes.
	Progress int `json:"progress"`
}

// progress counts what the job has recorded: every completed step and
// every successful opcode. It only grows.
func (j *Job) progress() int {
	n := 0
	for _, op := range j.Ops {
		n += len(op.Steps)
		if op.Status == StatusSuccess {
			n++
		}
	}
	return n
}

// AttemptedBy reports whether executor epoch recorded the job's last
// attempt: an executor records one attempt per job.
func (j *Job) AttemptedBy(epoch uint64) bool {
	return len(j.Attempts) > 0 && j.Attempts[len(j.Attempts)-1].Epoch == epoch
}

// noteAttempt records an attempt of executor epoch at opcode idx (once
// per epoch) and returns the epochs whose leaders were lost, in a row and
// oldest first, while the job ran without progress, up to this attempt.
func (j *Job) noteAttempt(epoch uint64, ts *Timestamp, idx int) []uint64 {
	if j.AttemptedBy(epoch) {
		return nil
	}
	next := Attempt{Epoch: epoch, Time: ts, OpIndex: idx, Progress: j.progress()}
	var deaths []uint64
	later := next
	for i := len(j.Attempts) - 1; i >= 0; i-- {
		a := j.Attempts[i]
		if a.Epoch >= later.Epoch || a.Progress != later.Progress {
			break
		}
		deaths = append([]uint64{a.Epoch}, deaths...)
		later = a
	}
	j.Attempts = append(j.Attempts, next)
	if len(j.Attempts) > maxAttempts {
		j.Attempts = append([]Attempt(nil), j.Attempts[len(j.Attempts)-maxAttempts:]...)
	}
	return deaths
}

// PoisonMessage is the result and log line of an opcode the poison-job
// guard failed, naming the epochs whose leaders were lost while it ran.
func PoisonMessage(epochs []uint64, epoch uint64) string {
	return fmt.Sprintf("failed by the poison-job guard: the leaders of executor epochs %s were lost while this job ran, "+
		"%d in a row with no step completed in between; the executor of epoch %d does not run it again",
		joinEpochs(epochs), len(epochs), epoch)
}

// joinEpochs writes 5, "5 and 6", or "5, 6 and 7".
func joinEpochs(epochs []uint64) string {
	s := make([]string, len(epochs))
	for i, e := range epochs {
		s[i] = strconv.FormatUint(e, 10)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// attempt records an executor's attempt on opcode idx of job (a clone
// being updated) and fails the opcode when the guard says so; it reports
// whether it did.
func (j *Job) attempt(op *OpState, epoch uint64, ts *Timestamp, idx int) bool {
	deaths := j.noteAttempt(epoch, ts, idx)
	if len(deaths) < PoisonDeaths {
		return false
	}
	msg := PoisonMessage(deaths, epoch)
	j.addLog(op, ts, msg)
	op.Status, op.Result, op.EndTS = StatusError, mustJSON(msg), ts
	j.PoisonEpochs = deaths
	return true
}
