package fsm

import (
	"encoding/json"
	"fmt"
)

// Job and opcode statuses, Ganeti's strings in Ganeti's order.
const (
	StatusQueued    = "queued"
	StatusWaiting   = "waiting"
	StatusCanceling = "canceling"
	StatusRunning   = "running"
	StatusCanceled  = "canceled"
	StatusSuccess   = "success"
	StatusError     = "error"
)

// Priorities (Ganeti's OP_PRIO_*): lower is more urgent.
const (
	PrioHighest = -20
	PrioHigh    = -10
	PrioNormal  = 0
	PrioLow     = 10
	PrioLowest  = 19
)

// Finalized reports whether a job or opcode status is final.
func Finalized(status string) bool {
	return status == StatusCanceled || status == StatusSuccess || status == StatusError
}

// Timestamp is Ganeti's [seconds, microseconds] pair.
type Timestamp [2]int64

// TimestampFromNanos converts unix nanoseconds.
func TimestampFromNanos(ns int64) *Timestamp {
	return &Timestamp{ns / 1e9, (ns % 1e9) / 1e3}
}

// UnixNano is the timestamp in unix nanoseconds.
func (t Timestamp) UnixNano() int64 { return t[0]*1e9 + t[1]*1e3 }

// LogEntry is one opcode log line: Ganeti's [serial, timestamp, type, message].
type LogEntry struct {
	Serial int64
	Time   Timestamp
	Type   string
	Msg    string
}

// Log entry types.
const (
	LogMessage = "message"
)

// MarshalJSON writes the Ganeti array form.
func (l LogEntry) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{l.Serial, l.Time, l.Type, l.Msg})
}

// UnmarshalJSON reads the Ganeti array form.
func (l *LogEntry) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) != 4 {
		return fmt.Errorf("log entry has %d fields, want 4", len(raw))
	}
	if err := json.Unmarshal(raw[0], &l.Serial); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[1], &l.Time); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[2], &l.Type); err != nil {
		return err
	}
	return json.Unmarshal(raw[3], &l.Msg)
}

// OpState is one opcode of a job with its execution record.
type OpState struct {
	Input    json.RawMessage `json:"input"`
	Status   string          `json:"status"`
	Result   json.RawMessage `json:"result"`
	Log      []LogEntry      `json:"log"`
	Priority int             `json:"priority"`
	StartTS  *Timestamp      `json:"start_timestamp"`
	ExecTS   *Timestamp      `json:"exec_timestamp"`
	EndTS    *Timestamp      `json:"end_timestamp"`
	// UUID is drawn by the proposer for opcodes that create an object, so
	// that applying the opcode later stays deterministic.
	UUID string `json:"gnt_uuid,omitempty"`
	// Depends are the opcode's dependencies with relative job ids resolved
	// to absolute ones at submission.
	Depends []Dependency `json:"gnt_depends,omitempty"`
	// Locks are the locks the executor held when it started the opcode;
	// a new leader re-takes them before it starts anything else, and
	// configuration-only submissions that conflict with them wait in the
	// queue instead of taking the fast path.
	Locks []LockDecl `json:"gnt_locks,omitempty"`
	// Steps are the opcode's completed steps, in order. A new leader
	// resumes a running opcode at step len(Steps).
	Steps []StepRecord `json:"gnt_steps,omitempty"`

	// parsed is Input as the submission's Apply decoded it. It is not
	// part of the state (snapshots and restores leave it nil) and is
	// never changed after the job is stored.
	parsed Opcode
}

// Opcode returns the decoded Input. A job submitted since this gntd
// started carries the value Apply decoded at submission, so the executor
// does not decode every opcode a second time; callers must treat it as
// read-only.
func (o *OpState) Opcode() (Opcode, error) {
	if o.parsed != nil {
		return o.parsed, nil
	}
	return ParseOpcode(o.Input)
}

// StepRecord is one completed step of a multi-step opcode.
type StepRecord struct {
	Name   string          `json:"name"`
	Result json.RawMessage `json:"result,omitempty"`
	// Epoch is the executor epoch that recorded the step.
	Epoch uint64     `json:"epoch"`
	Time  *Timestamp `json:"ts"`
}

// Job is a submitted list of opcodes.
type Job struct {
	ID         int64      `json:"id"`
	Ops        []*OpState `json:"ops"`
	Status     string     `json:"status"`
	ReceivedTS *Timestamp `json:"received_timestamp"`
	StartTS    *Timestamp `json:"start_timestamp"`
	EndTS      *Timestamp `json:"end_timestamp"`
	// Summary is Ganeti's per-opcode summary, e.g. "NODE_ADD(node4)".
	Summary []string `json:"summary"`
	// Executor is true when the job needs the leader's executor; false when
	// every opcode only changes the configuration and was applied at submit.
	Executor bool `json:"executor"`
	// LogSerial is the last log serial used in this job.
	LogSerial int64 `json:"log_serial"`
	// CancelRequested is set when an operator asked to cancel the job
	// while an opcode was running; the executor stops it at the next step
	// boundary.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Token is the submission token the job was created with (see
	// JobSubmit.Token), empty when there was none.
	Token string `json:"token,omitempty"`
	// SubmitIndex is the Raft index of the entry that created the job (0
	// for jobs created before it was recorded): a resent submission
	// answers with it.
	SubmitIndex uint64 `json:"submit_index,omitempty"`
	// Attempts are the executor epochs that started or resumed the job,
	// oldest first (the poison-job guard, attempts.go).
	Attempts []Attempt `json:"gnt_attempts,omitempty"`
	// PoisonEpochs, set when the poison-job guard failed the job, are the
	// executor epochs whose leaders were lost while it ran.
	PoisonEpochs []uint64 `json:"gnt_poison_epochs,omitempty"`
}

// Priority is Ganeti's job priority: the minimum over unfinished opcodes.
func (j *Job) Priority() int {
	p := PrioLowest + 1
	for _, op := range j.Ops {
		if !Finalized(op.Status) && op.Priority < p {
			p = op.Priority
		}
	}
	if p > PrioLowest {
		if len(j.Ops) > 0 {
			return j.Ops[len(j.Ops)-1].Priority
		}
		return PrioNormal
	}
	return p
}

// computeStatus derives the job status from its opcodes as Ganeti does.
func (j *Job) computeStatus() string {
	status := StatusQueued
	all := true
	for _, op := range j.Ops {
		if op.Status == StatusSuccess {
			continue
		}
		all = false
		switch op.Status {
		case StatusError, StatusCanceling, StatusCanceled:
			return op.Status
		case StatusQueued:
		default:
			status = op.Status
		}
	}
	if all && len(j.Ops) > 0 {
		return StatusSuccess
	}
	if j.CancelRequested {
		return StatusCanceling
	}
	return status
}

// CurrentOp returns the index of the first opcode that has not succeeded,
// or -1 when there is none.
func (j *Job) CurrentOp() int {
	for i, op := range j.Ops {
		if op.Status != StatusSuccess {
			return i
		}
	}
	return -1
}

func (j *Job) clone() *Job {
	x := *j
	x.Ops = make([]*OpState, len(j.Ops))
	for i, op := range j.Ops {
		o := *op
		o.Log = append([]LogEntry(nil), op.Log...)
		o.Steps = append([]StepRecord(nil), op.Steps...)
		x.Ops[i] = &o
	}
	x.Summary = cloneStrings(j.Summary)
	x.Attempts = append([]Attempt(nil), j.Attempts...)
	x.PoisonEpochs = append([]uint64(nil), j.PoisonEpochs...)
	return &x
}
