package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// The self-diagnose collector (Ganeti's design-repaird "Self-diagnose data
// collector"): a whitelisted command prints one JSON object
//
//	{"status": "Ok"|"live-repair"|"evacuate"|"evacuate-failover",
//	 "command": "<repair command>", "details": <any JSON>}
//
// (command and details optional). The maintenance daemon treats the same
// node reporting the same object as the same incident, so the result is
// kept in a canonical form: compact, object keys sorted at every level,
// numbers as printed; fields other than these three are kept. Anything
// else the command does (not whitelisted, a timeout, a non-zero exit, no
// or too much output, not one such object) is reported as
// {"details":"<why>","status":"Ok"}, as Ganeti does: a broken collector
// never makes the cluster act.

// Diagnose statuses, Ganeti's repair actions from the least to the most
// invasive.
const (
	DiagnoseOk               = "Ok"
	DiagnoseLiveRepair       = "live-repair"
	DiagnoseEvacuate         = "evacuate"
	DiagnoseEvacuateFailover = "evacuate-failover"
)

// ValidDiagnoseStatus reports whether s is one of the four statuses.
func ValidDiagnoseStatus(s string) bool {
	switch s {
	case DiagnoseOk, DiagnoseLiveRepair, DiagnoseEvacuate, DiagnoseEvacuateFailover:
		return true
	}
	return false
}

// ErrBadDiagnose is matched by every ParseDiagnose refusal.
var ErrBadDiagnose = errors.New("not a self-diagnose result")

// Diagnosis is a self-diagnose result. Canonical is the whole object in
// canonical form (what is signed, compared and stored); Status, Command
// and Details are read from it (Details nil when absent).
type Diagnosis struct {
	Status    string
	Command   string
	Details   json.RawMessage
	Canonical json.RawMessage
}

// BuiltinDiagnosis is the built-in collector's result (the command name
// is empty): {"command":"","details":{},"status":"Ok"}.
func BuiltinDiagnosis() Diagnosis {
	return Diagnosis{Status: DiagnoseOk, Details: json.RawMessage(`{}`),
		Canonical: json.RawMessage(`{"command":"","details":{},"status":"Ok"}`)}
}

// OkDiagnosis is the result of a collector that could not report:
// {"details":"<why>","status":"Ok"}.
func OkDiagnosis(why string) Diagnosis {
	details, _ := canonicalJSON(why)
	canon, _ := canonicalJSON(map[string]any{"status": DiagnoseOk, "details": why})
	return Diagnosis{Status: DiagnoseOk, Details: details, Canonical: canon}
}

// canonicalJSON encodes v compactly with sorted object keys (maps are
// encoded sorted) and without HTML escaping.
func canonicalJSON(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte{'\n'})), nil
}

// ParseDiagnose reads a self-diagnose command's output: one JSON object
// (surrounding whitespace allowed, nothing after it) with a "status" of
// the four, an optional string "command" and optional "details" of any
// JSON. Every refusal wraps ErrBadDiagnose.
func ParseDiagnose(out []byte) (Diagnosis, error) {
	bad := func(format string, args ...any) (Diagnosis, error) {
		return Diagnosis{}, fmt.Errorf("%w: %s", ErrBadDiagnose, fmt.Sprintf(format, args...))
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return bad("no output")
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return bad("not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("more than one JSON value (data after the object)")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return bad("not a JSON object")
	}
	d := Diagnosis{}
	switch s := obj["status"].(type) {
	case nil:
		if _, present := obj["status"]; present {
			return bad(`"status" is null`)
		}
		return bad(`no "status"`)
	case string:
		if !ValidDiagnoseStatus(s) {
			return bad(`unknown "status" %q; want Ok, live-repair, evacuate or evacuate-failover`, s)
		}
		d.Status = s
	default:
		return bad(`"status" is not a string`)
	}
	if c, present := obj["command"]; present {
		s, ok := c.(string)
		if !ok {
			return bad(`"command" is not a string`)
		}
		d.Command = s
	}
	canon, err := canonicalJSON(obj)
	if err != nil {
		return bad("%v", err)
	}
	d.Canonical = canon
	if det, present := obj["details"]; present {
		if d.Details, err = canonicalJSON(det); err != nil {
			return bad("%v", err)
		}
	}
	return d, nil
}

// DefaultDiagnoseMinInterval is the default shortest time between two
// runs of the self-diagnose command.
const DefaultDiagnoseMinInterval = 10 * time.Second

// diagnoseReasonOutput bounds how much of a failed command's stderr its
// reason quotes.
const diagnoseReasonOutput = 512

// DiagnoseConfig configures a Diagnoser.
type DiagnoseConfig struct {
	// Commands is the whitelist (Dir default DefaultDiagnoseDir, Timeout
	// default DefaultDiagnoseTimeout, output default 64 KiB: a command
	// that prints more is reported as broken).
	Commands Commands
	// MinInterval is the shortest time between two runs of the same
	// command: a collection within it returns the last result (default
	// DefaultDiagnoseMinInterval; negative: no caching).
	MinInterval time.Duration
	Now         func() time.Time
}

// Collected is one collection of the self-diagnose collector.
type Collected struct {
	// Command is the file name that was run, "" for the built-in.
	Command   string
	Diagnosis Diagnosis
	// At is when the collection finished.
	At time.Time
}

// Diagnoser runs the self-diagnose collector: at most one run at a time,
// and a command at most once per MinInterval; callers that ask meanwhile
// share the run or get its result.
type Diagnoser struct {
	cfg     DiagnoseConfig
	mu      sync.Mutex
	last    *Collected
	running *diagnoseRun
}

type diagnoseRun struct {
	command string
	done    chan struct{}
	res     Collected
}

// NewDiagnoser returns a Diagnoser with cfg's defaults filled in.
func NewDiagnoser(cfg DiagnoseConfig) *Diagnoser {
	if cfg.Commands.Dir == "" {
		cfg.Commands.Dir = DefaultDiagnoseDir
	}
	if cfg.Commands.Timeout <= 0 {
		cfg.Commands.Timeout = DefaultDiagnoseTimeout
	}
	if cfg.MinInterval == 0 {
		cfg.MinInterval = DefaultDiagnoseMinInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Diagnoser{cfg: cfg}
}

// Last returns the last collection, if any.
func (d *Diagnoser) Last() (Collected, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		return Collected{}, false
	}
	return *d.last, true
}

// Collect returns the result of the named command ("" for the built-in
// diagnose): the last one when it is of the same command and younger than
// MinInterval, else that of a new run (shared with every caller that asks
// for the same command while it runs; a caller asking for another command
// waits for the run to end first). It fails only when ctx ends first; the
// run then goes on, bounded by its timeout, and its result is kept.
func (d *Diagnoser) Collect(ctx context.Context, command string) (Collected, error) {
	for {
		d.mu.Lock()
		if l := d.last; l != nil && l.Command == command {
			if age := d.cfg.Now().Sub(l.At); age >= 0 && age < d.cfg.MinInterval {
				d.mu.Unlock()
				return *l, nil
			}
		}
		r := d.running
		if r == nil {
			r = &diagnoseRun{command: command, done: make(chan struct{})}
			d.running = r
			go d.run(r)
		}
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return Collected{}, ctx.Err()
		case <-r.done:
		}
		if r.command == command {
			return r.res, nil
		}
	}
}

// run runs r's command, not bound to any caller's context (callers share
// it), and records its result.
func (d *Diagnoser) run(r *diagnoseRun) {
	diag := d.diagnose(r.command)
	r.res = Collected{Command: r.command, Diagnosis: diag, At: d.cfg.Now()}
	d.mu.Lock()
	res := r.res
	d.last = &res
	d.running = nil
	d.mu.Unlock()
	close(r.done)
}

// diagnose runs the command and turns whatever happened into a result.
func (d *Diagnoser) diagnose(command string) Diagnosis {
	if command == "" {
		return BuiltinDiagnosis()
	}
	run, err := d.cfg.Commands.Run(context.Background(), OpDiagnose, command, nil)
	if err != nil {
		var oe *OpError
		if errors.As(err, &oe) {
			why := oe.Err.Error()
			if s := strings.TrimSpace(run.Stderr); s != "" {
				if len(s) > diagnoseReasonOutput {
					s = s[:diagnoseReasonOutput] + "..."
				}
				why += "; stderr: " + s
			}
			return OkDiagnosis("self-diagnose command " + why)
		}
		return OkDiagnosis("self-diagnose command " + command + ": " + err.Error())
	}
	if run.StdoutDropped > 0 {
		return OkDiagnosis(fmt.Sprintf("self-diagnose command %s printed more than %d bytes", command, d.cfg.Commands.maxOutput()))
	}
	diag, err := ParseDiagnose(run.Stdout)
	if err != nil {
		return OkDiagnosis(fmt.Sprintf("self-diagnose command %s: %v", command, err))
	}
	return diag
}
