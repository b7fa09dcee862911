package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// Outcome is what a client learnt of an operation.
type Outcome string

// Outcomes.
const (
	OK            Outcome = "ok"
	Failed        Outcome = "failed"        // surely not applied
	Indeterminate Outcome = "indeterminate" // may have been applied, or may be later
)

// Kind is the kind of an operation.
type Kind string

// Operation kinds.
const (
	TagAdd    Kind = "tag-add"    // Value added to Object's tags
	TagDel    Kind = "tag-del"    // Value removed from Object's tags
	TagRead   Kind = "tag-read"   // Object's tags read into Values
	DrainSet  Kind = "drain-set"  // Object's (a node) drained flag set to Value
	DrainRead Kind = "drain-read" // Object's drained flag read into Value
	JobSubmit Kind = "job-submit" // jobs marked Markers submitted, JobIDs returned
	JobCancel Kind = "job-cancel" // job JobIDs[0], marked Markers[0], asked to cancel
)

// Read modes: which replica answers, and what it promises.
const (
	ModeDefault    = "default"    // the answering candidate's replica; says its index
	ModeConsistent = "consistent" // ?consistent=1: through the leader, linearizable
	ModeCLI        = "cli"        // gnt --consistent ..., linearizable, no index
	ModeConfd      = "confd"      // confd UDP: a candidate's replica, says its serial
)

// ModeHeld marks a job submission with ?wait=: answered when the job has
// ended (or the wait ran out), with its status in Op.Status.
const ModeHeld = "held"

// Op is one operation of the history. Times are nanoseconds since the
// start of the run, on the test's monotonic clock.
type Op struct {
	Client int      `json:"client"`
	Kind   Kind     `json:"kind"`
	Mode   string   `json:"mode,omitempty"`
	Object string   `json:"object,omitempty"` // "cluster", "node/NAME", "nodegroup/NAME"
	Value  string   `json:"value,omitempty"`  // tag, drained flag ("true"/"false")
	Values []string `json:"values,omitempty"` // tags read
	// Markers are the unique comments of the jobs submitted; JobIDs the
	// ids that came back.
	Markers []string `json:"markers,omitempty"`
	JobIDs  []int64  `json:"job_ids,omitempty"`
	Repeat  int      `json:"repeat,omitempty"` // OP_TEST_DELAY steps of each job
	// Status is the job status a held submission (?wait=) was answered
	// with: final, or where the job was when the wait ran out.
	Status string `json:"status,omitempty"`

	Outcome Outcome `json:"outcome"`
	// Code is the API error code of a failure (empty without one); Err the
	// error's text.
	Code string `json:"code,omitempty"`
	Err  string `json:"err,omitempty"`
	// Index is X-Gnt-Index of the answer: for a write, the Raft index it
	// was applied at; for a read, the index of the state it was read from.
	Index uint64 `json:"index,omitempty"`
	// Serial is a confd answer's configuration serial.
	Serial int64 `json:"serial,omitempty"`
	// Server is the member that answered (API or confd address); PID its
	// process id when asked, for confd (0 when it changed meanwhile).
	Server string `json:"server,omitempty"`
	PID    int    `json:"pid,omitempty"`

	Call   int64 `json:"call"`
	Return int64 `json:"return"`
}

// IsWrite reports whether the operation changes the state.
func (o *Op) IsWrite() bool {
	switch o.Kind {
	case TagAdd, TagDel, DrainSet, JobSubmit, JobCancel:
		return true
	}
	return false
}

// Describe is a one-line account of the operation for reports.
func (o *Op) Describe() string {
	s := fmt.Sprintf("client %d %s", o.Client, o.Kind)
	if o.Mode != "" {
		s += "(" + o.Mode + ")"
	}
	if o.Object != "" {
		s += " " + o.Object
	}
	switch {
	case o.Kind == TagRead:
		s += fmt.Sprintf(" -> %v", o.Values)
	case o.Kind == DrainRead:
		s += " -> " + o.Value
	case o.Value != "":
		s += " " + o.Value
	}
	if len(o.Markers) > 0 {
		s += fmt.Sprintf(" %v ids %v", o.Markers, o.JobIDs)
	}
	s += " " + string(o.Outcome)
	if o.Code != "" {
		s += " (" + o.Code + ")"
	}
	if o.Index > 0 {
		s += fmt.Sprintf(" @%d", o.Index)
	}
	if o.Serial > 0 {
		s += fmt.Sprintf(" serial %d", o.Serial)
	}
	if o.Server != "" {
		s += " from " + o.Server
	}
	return s + fmt.Sprintf(" [%.3fs, %.3fs]", float64(o.Call)/1e9, float64(o.Return)/1e9)
}

// Fault is one injected fault.
type Fault struct {
	Kind    string   `json:"kind"`
	Targets []string `json:"targets,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	Start   int64    `json:"start"` // ns since the start of the run
	End     int64    `json:"end"`   // healed at
	// Healing is when the heal began: for a pause, just before the
	// SIGCONT, the first moment the process can run again (it may answer
	// before End is taken).
	Healing int64 `json:"healing,omitempty"`
	// Effect is what was seen of the fault while it held, when watched.
	Effect string `json:"effect,omitempty"`
}

// History collects the operations of a run; safe for concurrent use.
type History struct {
	start time.Time

	mu  sync.Mutex
	ops []*Op
}

// NewHistory starts a history's clock.
func NewHistory(start time.Time) *History { return &History{start: start} }

// Now is the time since the start of the run, in nanoseconds.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records a finished operation.
func (h *History) Add(o *Op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

// Ops returns the operations, ordered by invocation.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	out := append([]*Op(nil), h.ops...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// writeJSONLines saves values one per line.
func writeJSONLines[T any](path string, vs []T) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// ReadHistory loads a history saved by a run (history.jsonl).
func ReadHistory(path string) ([]*Op, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ops []*Op
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		o := &Op{}
		if err := dec.Decode(o); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ops = append(ops, o)
	}
	return ops, nil
}
