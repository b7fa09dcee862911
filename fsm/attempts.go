package fsm

import (
	"fmt"
	"slices"
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
//
// A leader that only stepped down (a lost election on a loaded machine)
// did not die of the job. Each attempt records the leading node and its
// gntd's incarnation (a random id drawn once at its start); before its
// own attempt, the executor asks the leaders of the suspect epochs for
// their incarnation (SuspectAttempts), and names in its record the epochs
// whose leader answered with the same one (JobUpdate.Survived): those
// were not deaths, are marked so (Attempt.Survived) and break the row. No answer, or another incarnation
// (restarted, crashed), leaves the epoch a death. The evidence is in the
// entry, so apply stays deterministic.

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
	// Node is the master node when the attempt was made: the leader of
	// its epoch (since LogVersion 32).
	Node string `json:"node,omitempty"`
	// Incarnation is the incarnation of that leader's gntd, as its
	// executor gave it (JobUpdate.Incarnation; since LogVersion 32).
	Incarnation string `json:"incarnation,omitempty"`
	// Survived is set when a later executor found this attempt's leader
	// running with the same incarnation (JobUpdate.Survived): its epoch
	// is no death, now or for any later attempt (since LogVersion 32).
	Survived bool `json:"survived,omitempty"`
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

// SuspectAttempts returns the earlier attempts that an attempt of
// executor epoch would count as leader deaths, oldest first, unless its
// record names their epochs as survived: those in a row before it, of
// earlier epochs, with no progress of the job since. It returns none
// when epoch made the last attempt already.
func (j *Job) SuspectAttempts(epoch uint64) []Attempt {
	if j.AttemptedBy(epoch) {
		return nil
	}
	return j.suspects(epoch, nil) // marks nothing
}

// suspects walks back from an attempt of epoch at the job's progress now
// over the attempts without progress in between, stopping at one whose
// leader lived on (marked survived, or its epoch in survived, which it
// marks): that was not a death.
func (j *Job) suspects(epoch uint64, survived []uint64) []Attempt {
	var out []Attempt
	laterEpoch, progress := epoch, j.progress()
	for i := len(j.Attempts) - 1; i >= 0; i-- {
		a := &j.Attempts[i]
		if a.Epoch >= laterEpoch || a.Progress != progress || a.Survived {
			break
		}
		if slices.Contains(survived, a.Epoch) {
			a.Survived = true
			break
		}
		out = append([]Attempt{*a}, out...)
		laterEpoch = a.Epoch
	}
	return out
}

// noteAttempt records an attempt (once per epoch) and returns the epochs
// whose leaders were lost, in a row and oldest first, while the job ran
// without progress, up to this attempt; epochs in survived are not
// losses and end the row.
func (j *Job) noteAttempt(next Attempt, survived []uint64) []uint64 {
	if j.AttemptedBy(next.Epoch) {
		return nil
	}
	next.Progress = j.progress()
	var deaths []uint64
	for _, a := range j.suspects(next.Epoch, survived) {
		deaths = append(deaths, a.Epoch)
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

// attempt records the attempt of update c (start or attempt) on job (a
// clone being updated), made while node led, and fails the opcode when
// the guard says so; it reports whether it did.
func (j *Job) attempt(op *OpState, c *JobUpdate, ts *Timestamp, node string) bool {
	epoch := c.Epoch
	deaths := j.noteAttempt(Attempt{Epoch: epoch, Time: ts, OpIndex: c.OpIndex, Node: node, Incarnation: c.Incarnation}, c.Survived)
	if len(deaths) < PoisonDeaths {
		return false
	}
	msg := PoisonMessage(deaths, epoch)
	j.addLog(op, ts, msg)
	op.Status, op.Result, op.EndTS = StatusError, mustJSON(msg), ts
	j.PoisonEpochs = deaths
	return true
}

// maxIncarnation bounds JobUpdate.Incarnation (gntd draws 32 hex digits).
const maxIncarnation = 64

// validateSurvival checks the poison-job guard's evidence of an update:
// only a start or an attempt carries it; the incarnation is bounded, and
// the survived epochs are distinct earlier epochs, at most as many as a
// job keeps attempts.
func (c *JobUpdate) validateSurvival() *Error {
	if c.Incarnation == "" && len(c.Survived) == 0 {
		return nil
	}
	if c.Action != ActionStart && c.Action != ActionAttempt {
		return errf(CodeInval, "survived", "an incarnation and survived epochs ride only on a start or attempt record, not on %s", c.Action)
	}
	if len(c.Incarnation) > maxIncarnation {
		return errf(CodeInval, "incarnation", "incarnation is %d bytes long; the limit is %d", len(c.Incarnation), maxIncarnation)
	}
	if len(c.Survived) > maxAttempts {
		return errf(CodeInval, "survived", "%d survived epochs; the limit is %d (the attempts a job keeps)", len(c.Survived), maxAttempts)
	}
	for i, e := range c.Survived {
		if e == 0 || e >= c.Epoch {
			return errf(CodeInval, "survived", "survived epoch %d is not an earlier executor epoch than %d", e, c.Epoch)
		}
		if slices.Contains(c.Survived[:i], e) {
			return errf(CodeInval, "survived", "survived epoch %d is named twice", e)
		}
	}
	return nil
}

// masterName is the master node's name, empty before a leader recorded
// itself.
func (s *State) masterName() string {
	if m := s.Master(); m != nil {
		return m.Name
	}
	return ""
}
