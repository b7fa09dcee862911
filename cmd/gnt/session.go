package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// session is one command's connection to the cluster and its output.
type session struct {
	cfg            Config
	api            *rpc.Client
	stdout, stderr io.Writer
	// follow, when set, is the context jobs are followed under instead of
	// the command's: without an explicit --timeout a job is followed
	// until it ends (or the user interrupts), as Ganeti's commands do.
	follow context.Context
}

func newSession(cfg Config, stdout, stderr io.Writer) *session {
	api := newAPIClient(cfg, cfg.Servers)
	api.SetBasicAuth(cfg.Creds.User, cfg.Creds.Password)
	return &session{cfg: cfg, api: api, stdout: stdout, stderr: stderr}
}

// get reads path and returns the answer undecoded.
func (s *session) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	if s.cfg.Consistent {
		q = with(q, "consistent", "1")
	}
	var raw json.RawMessage
	_, err := s.api.Do(ctx, http.MethodGet, path, q, nil, &raw)
	return raw, err
}

// getInto reads path and decodes the answer into out; numbers are kept as
// json.Number when out holds interfaces.
func (s *session) getInto(ctx context.Context, path string, q url.Values, out any) (json.RawMessage, error) {
	raw, err := s.get(ctx, path, q)
	if err != nil {
		return nil, err
	}
	return raw, decode(raw, out)
}

func decode(raw json.RawMessage, out any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(out); err != nil {
		return fmt.Errorf("decoding the server's answer: %w", err)
	}
	return nil
}

func with(q url.Values, k, v string) url.Values {
	if q == nil {
		q = url.Values{}
	}
	q.Set(k, v)
	return q
}

// change sends a request that creates a job. With --submit it prints the
// job id and returns nil; otherwise it waits for the job, printing its log,
// and returns the finished job, or a *jobError if the job did not succeed.
func (s *session) change(ctx context.Context, method, path string, q url.Values, body any) (*job, error) {
	if s.cfg.Reason != "" {
		q = with(q, "reason", s.cfg.Reason)
	}
	if err := checkWrite(method, path, q, body); err != nil {
		return nil, err
	}
	id, meta, err := s.api.Submit(ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	if s.cfg.Submit {
		if s.cfg.JSON() {
			fmt.Fprintln(s.stdout, int64(id))
		} else {
			fmt.Fprintf(s.stdout, "JobID: %d\n", int64(id))
		}
		return nil, nil
	}
	j, raw, err := s.waitJob(ctx, int64(id), meta.Index)
	if err != nil {
		return nil, err
	}
	if s.cfg.JSON() {
		if err := printJSON(s.stdout, raw); err != nil {
			return nil, err
		}
	}
	if j.Status != fsm.StatusSuccess {
		return j, j.failure()
	}
	return j, nil
}

// waitJob follows a job until it is final, printing log entries as they
// come, and returns it with the server's answer. It polls GET /2/jobs/{id}
// with ?index=N&wait=: the answering candidate blocks until its replica
// has moved past index N, so each poll returns as soon as anything changed.
// The first poll waits for the index the job was submitted at, so that a
// lagging replica knows the job.
func (s *session) waitJob(ctx context.Context, id int64, submitIndex uint64) (*job, json.RawMessage, error) {
	ctx = s.followCtx(ctx)
	path := "/2/jobs/" + strconv.FormatInt(id, 10)
	// The job existed, without log, at the index it was submitted at: the
	// first poll waits for its first change after that.
	after := submitIndex
	var (
		serial   int64
		status   = "unknown"
		seen     bool
		notFound int
		lastOK   = time.Now()
	)
	for {
		q := url.Values{"index": {strconv.FormatUint(after, 10)}, "wait": {"5s"}}
		start := time.Now()
		var raw json.RawMessage
		// Followed without a time limit, a job is still given up when no
		// candidate answers for unreachableLimit.
		pctx, pcancel := context.WithDeadline(ctx, lastOK.Add(unreachableLimit))
		meta, err := s.api.Do(pctx, http.MethodGet, path, q, nil, &raw)
		pcancel()
		if err == nil {
			lastOK = time.Now()
		} else if pctx.Err() != nil && ctx.Err() == nil {
			return nil, nil, fmt.Errorf("job %d is %s and goes on without us: no candidate answered for %v; follow it with 'gnt job watch %d': %w",
				id, status, unreachableLimit, id, err)
		}
		if err != nil {
			var ae *rpc.APIError
			if !seen && errors.As(err, &ae) && ae.ErrorCode == string(fsm.CodeNoEnt) && notFound < 10 {
				// A replica that does not know the job yet.
				notFound++
				if sleep(ctx, 200*time.Millisecond) == nil {
					continue
				}
			}
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("job %d is %s and goes on without us; follow it with 'gnt job watch %d': %w", id, status, id, err)
			}
			return nil, nil, fmt.Errorf("following job %d: %w", id, err)
		}
		seen = true
		var j job
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, nil, fmt.Errorf("decoding job %d: %w", id, err)
		}
		status = j.Status
		w := s.stdout
		if s.cfg.JSON() {
			w = s.stderr
		}
		printed := printLog(w, &j, &serial)
		if fsm.Finalized(j.Status) {
			return &j, raw, nil
		}
		if meta.Index > after {
			after = meta.Index
		}
		// Guard against a server that answers at once: do not spin.
		if !printed && time.Since(start) < 100*time.Millisecond {
			if err := sleep(ctx, 250*time.Millisecond); err != nil {
				return nil, nil, fmt.Errorf("job %d is %s and goes on without us; follow it with 'gnt job watch %d': %w", id, status, id, err)
			}
		}
	}
}

// unreachableLimit is how long a job is followed while no candidate
// answers.
var unreachableLimit = time.Minute

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// printLog prints the job's log entries with a serial above *serial, in
// Ganeti's format ("Mon Jan  2 15:04:05 2006 message"), and moves *serial.
func printLog(w io.Writer, j *job, serial *int64) bool {
	printed := false
	for _, entries := range j.OpLog {
		for _, l := range entries {
			if l.Serial <= *serial {
				continue
			}
			fmt.Fprintf(w, "%s %s\n", l.Time.time().Format(time.ANSIC), l.Msg)
			*serial = l.Serial
			printed = true
		}
	}
	return printed
}

// jobError is a job that ended without success.
type jobError struct {
	ID     int64
	Status string
	Msg    string
}

// Error implements error.
func (e *jobError) Error() string {
	if e.Status == fsm.StatusCanceled {
		return fmt.Sprintf("job %d was canceled", e.ID)
	}
	return fmt.Sprintf("job %d failed: %s", e.ID, e.Msg)
}

func (j *job) failure() error {
	msg := "unknown error"
	for i, st := range j.OpStatus {
		if st == fsm.StatusError && i < len(j.OpResult) {
			msg = resultMessage(j.OpResult[i])
			break
		}
	}
	return &jobError{ID: int64(j.ID), Status: j.Status, Msg: msg}
}

// resultMessage extracts the message of a failed opcode's result, which
// may be gnt's {"code", "field", "message"}, Ganeti's
// ["OpPrereqError", [message, code]] or a plain string.
func resultMessage(raw json.RawMessage) string {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str
	}
	var obj struct {
		Code    string `json:"code"`
		Field   string `json:"field"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		if obj.Field != "" {
			return obj.Message + " (field " + obj.Field + ")"
		}
		return obj.Message
	}
	var ganeti []json.RawMessage
	if json.Unmarshal(raw, &ganeti) == nil && len(ganeti) == 2 {
		var args []any
		if json.Unmarshal(ganeti[1], &args) == nil && len(args) > 0 {
			if m, ok := args[0].(string); ok {
				return m
			}
		}
		if json.Unmarshal(ganeti[1], &str) == nil {
			return str
		}
	}
	return string(raw)
}

// jobID is a job id, which Ganeti's RAPI sends as a number or a string.
type jobID int64

// UnmarshalJSON accepts 42 and "42".
func (id *jobID) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("job id: %w", err)
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return fmt.Errorf("job id %q: %w", n, err)
	}
	*id = jobID(v)
	return nil
}

// job is the API's job object (all fields; bulk listings leave some out).
type job struct {
	ID         jobID             `json:"id"`
	Status     string            `json:"status"`
	Priority   *int              `json:"priority"`
	Ops        []json.RawMessage `json:"ops"`
	OpStatus   []string          `json:"opstatus"`
	OpResult   []json.RawMessage `json:"opresult"`
	OpLog      [][]logEntry      `json:"oplog"`
	OpStart    []stamp           `json:"opstart"`
	OpExec     []stamp           `json:"opexec"`
	OpEnd      []stamp           `json:"opend"`
	OpPriority []int             `json:"oppriority"`
	Summary    []string          `json:"summary"`
	ReceivedTS stamp             `json:"received_ts"`
	StartTS    stamp             `json:"start_ts"`
	EndTS      stamp             `json:"end_ts"`
	OpSteps    [][]struct {
		Name  string `json:"name"`
		Epoch uint64 `json:"epoch"`
		Time  stamp  `json:"ts"`
	} `json:"gnt_opsteps"`
	OpLocks         [][]fsm.LockDecl   `json:"gnt_oplocks"`
	OpDepends       [][]fsm.Dependency `json:"gnt_opdepends"`
	Archived        bool               `json:"gnt_archived"`
	CancelRequested bool               `json:"gnt_cancel_requested"`
	Attempts        []struct {
		Epoch   uint64 `json:"epoch"`
		Time    stamp  `json:"ts"`
		OpIndex int    `json:"op_index"`
		Node    string `json:"node"`
		// Survived: a later leader found this one's gntd running on.
		Survived bool `json:"survived"`
	} `json:"gnt_attempts"`
	PoisonEpochs []uint64 `json:"gnt_poison_epochs"`
}

// stamp is Ganeti's [seconds, microseconds] timestamp; nil when not reached.
type stamp []float64

func (t stamp) time() time.Time {
	if len(t) == 0 {
		return time.Time{}
	}
	us := 0.0
	if len(t) > 1 {
		us = t[1]
	}
	return time.Unix(int64(t[0]), int64(us)*1000)
}

// logEntry is Ganeti's [serial, timestamp, type, message] log line.
type logEntry struct {
	Serial int64
	Time   stamp
	Type   string
	Msg    string
}

// UnmarshalJSON reads the array form; a message that is not text is kept
// as its JSON.
func (l *logEntry) UnmarshalJSON(b []byte) error {
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
	_ = json.Unmarshal(raw[1], &l.Time)
	_ = json.Unmarshal(raw[2], &l.Type)
	if json.Unmarshal(raw[3], &l.Msg) != nil {
		l.Msg = string(raw[3]) // Ganeti's non-message types carry data
	}
	return nil
}

// checkWrite runs the API's own checks of a write (rpc.CheckWrite: the
// limits of docs/api.md, strict JSON, each opcode's validation) before
// anything is sent: input that the API would refuse with a 400 is
// refused here with the same message.
func checkWrite(method, path string, q url.Values, body any) error {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case json.RawMessage:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return fmt.Errorf("encoding the request: %w", err)
		}
	}
	if aerr := rpc.CheckWrite(method, path, q, raw); aerr != nil {
		return aerr
	}
	return nil
}
