package oob

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The OOB commands (Ganeti's OOB_* constants).
const (
	PowerOn     = "power-on"
	PowerOff    = "power-off"
	PowerCycle  = "power-cycle"
	PowerStatus = "power-status"
	Health      = "health"
)

// Commands lists the OOB commands in Ganeti's order.
var Commands = []string{PowerOn, PowerOff, PowerCycle, PowerStatus, Health}

// ValidCommand reports whether c is one of the OOB commands.
func ValidCommand(c string) bool {
	for _, x := range Commands {
		if c == x {
			return true
		}
	}
	return false
}

// ChangesPower reports whether a command changes a node's power state
// (everything but power-status and health).
func ChangesPower(c string) bool { return c == PowerOn || c == PowerOff || c == PowerCycle }

// Health item statuses (Ganeti's OOB_STATUS_*).
const (
	StatusOK       = "OK"
	StatusWarning  = "WARNING"
	StatusCritical = "CRITICAL"
	StatusUnknown  = "UNKNOWN"
)

// validStatus reports whether s is one of the four health statuses.
func validStatus(s string) bool {
	return s == StatusOK || s == StatusWarning || s == StatusCritical || s == StatusUnknown
}

// HealthItem is one line of a health answer: an item the helper watches
// (say "Ambient Temp") and its status.
type HealthItem struct {
	Item   string
	Status string
}

// MarshalJSON writes the protocol's [item, status] pair.
func (h HealthItem) MarshalJSON() ([]byte, error) { return json.Marshal([2]string{h.Item, h.Status}) }

// Result is what a helper answered to a command that succeeded.
type Result struct {
	Command string
	// Powered is the answer of power-status.
	Powered bool
	// Health is the answer of health.
	Health []HealthItem
}

// Payload is the result in the protocol's JSON form, as Ganeti's opcode
// result carries it: {"powered": bool} for power-status, the list of
// [item, status] pairs for health, null for the other commands.
func (r Result) Payload() any {
	switch r.Command {
	case PowerStatus:
		return map[string]bool{"powered": r.Powered}
	case Health:
		if r.Health == nil {
			return []HealthItem{}
		}
		return r.Health
	}
	return nil
}

// ErrorKind classifies why a helper run did not give a result.
type ErrorKind int

// Error kinds.
const (
	// KindFailed: the helper exited 1 (its message is on stderr), or died
	// of a signal it was not sent by the runner.
	KindFailed ErrorKind = iota + 1
	// KindUnsupported: the helper exited with a status other than 0 and 1,
	// which the protocol defines as unsupported or undefined.
	KindUnsupported
	// KindTimeout: the helper did not finish within the bound and was
	// killed with its process group.
	KindTimeout
	// KindBadOutput: exit 0, but stdout is not what the command must print
	// (or the helper flooded it and was killed).
	KindBadOutput
	// KindNotRunnable: the program was refused by the whitelist (not
	// inside the OOB programs directory, missing, not a safe executable
	// file) or could not be started.
	KindNotRunnable
)

// String names the kind in metrics' labels: failed, unsupported, timeout,
// bad_output, not_runnable.
func (k ErrorKind) String() string {
	switch k {
	case KindFailed:
		return "failed"
	case KindUnsupported:
		return "unsupported"
	case KindTimeout:
		return "timeout"
	case KindBadOutput:
		return "bad_output"
	case KindNotRunnable:
		return "not_runnable"
	}
	return "error"
}

// Error is a helper run that gave no result. Its message is the design's
// (doc/design-oob.rst, "Error Handling"): "OOB program execution failed
// (...)" for a non-zero exit, "OOB program execution timeout exceeded, OOB
// program execution aborted" for the time bound; output that does not fit
// the command is quoted.
type Error struct {
	Kind    ErrorKind
	Command string
	// Exit is the exit status (-1 when the helper was killed by a signal
	// or never ran).
	Exit int
	// Detail is the helper's message (stderr), or what is wrong with its
	// output, or why it could not run.
	Detail string
	// Timeout is the bound that was exceeded (KindTimeout).
	Timeout time.Duration
	// Cause is why the helper was not run, when the whitelist refused it
	// (a *RefusedError); Unwrap returns it.
	Cause error
}

// Unwrap returns the cause of a refusal (nil otherwise).
func (e *Error) Unwrap() error { return e.Cause }

// Error implements error.
func (e *Error) Error() string {
	switch e.Kind {
	case KindTimeout:
		msg := "OOB program execution timeout exceeded, OOB program execution aborted"
		if e.Timeout > 0 {
			msg += fmt.Sprintf(" (after %v)", e.Timeout)
		}
		return msg
	case KindUnsupported:
		d := fmt.Sprintf("exit status %d: %s is unsupported or undefined", e.Exit, e.Command)
		if e.Detail != "" {
			d += ": " + e.Detail
		}
		return "OOB program execution failed (" + d + ")"
	case KindBadOutput:
		return "Check of out-of-band payload failed due to " + e.Detail
	}
	return "OOB program execution failed (" + e.Detail + ")"
}

// AsError returns err as an *Error when it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Outcome is what the runner saw of one helper run; Interpret turns it
// into a result.
type Outcome struct {
	// Exit is the exit status, -1 when the helper died of a signal.
	Exit int
	// Signal names the signal that killed the helper, if one did.
	Signal string
	Stdout []byte
	Stderr []byte
	// TimedOut: the runner killed the helper at the time bound.
	TimedOut bool
	Timeout  time.Duration
	// Flooded: the helper wrote more than the runner reads on stdout and
	// was killed.
	Flooded bool
	// Limit is the number of stdout bytes the runner reads.
	Limit int
}

// Interpret applies the protocol to a finished run of command: exit 0 is
// success with the command's JSON on stdout, exit 1 failure with the
// message on stderr, any other status unsupported. It is pure, so every
// case is a table test (protocol_test.go) and a fuzz target.
func Interpret(command string, o Outcome) (Result, error) {
	switch {
	case o.TimedOut:
		return Result{}, &Error{Kind: KindTimeout, Command: command, Exit: -1, Timeout: o.Timeout}
	case o.Flooded:
		return Result{}, &Error{Kind: KindBadOutput, Command: command, Exit: o.Exit,
			Detail: fmt.Sprintf("%s printed more than %d bytes on stdout; the helper was killed (output starts with %s)",
				command, o.Limit, Quote(o.Stdout))}
	case o.Exit == 0:
		r, err := ParseOutput(command, o.Stdout)
		if err != nil {
			return Result{}, &Error{Kind: KindBadOutput, Command: command, Detail: err.Error()}
		}
		return r, nil
	case o.Exit == 1:
		return Result{}, &Error{Kind: KindFailed, Command: command, Exit: 1, Detail: message(o.Stderr, "exit status 1, nothing on stderr")}
	case o.Exit < 0:
		sig := o.Signal
		if sig == "" {
			sig = "a signal"
		}
		return Result{}, &Error{Kind: KindFailed, Command: command, Exit: -1,
			Detail: "killed by " + sig + stderrSuffix(o.Stderr)}
	}
	return Result{}, &Error{Kind: KindUnsupported, Command: command, Exit: o.Exit, Detail: message(o.Stderr, "")}
}

func stderrSuffix(b []byte) string {
	if m := message(b, ""); m != "" {
		return ": " + m
	}
	return ""
}

// maxMessage bounds the part of stderr that goes into an error message.
const maxMessage = 1024

// message is the helper's stderr as one trimmed line of bounded length,
// or def when it printed nothing.
func message(b []byte, def string) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if s == "" {
		return def
	}
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ; ")), " ")
	if len(s) > maxMessage {
		s = s[:maxMessage] + "..."
	}
	return s
}

// maxQuote bounds the output quoted in messages.
const maxQuote = 256

// Quote returns output as a Go-quoted string of at most maxQuote bytes,
// saying how much was left out, so that whatever a helper printed can go
// into a log line.
func Quote(b []byte) string {
	if len(b) <= maxQuote {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%s (and %d more bytes)", strconv.Quote(string(b[:maxQuote])), len(b)-maxQuote)
}

// ParseOutput checks and decodes what a helper printed on stdout after a
// successful command: nothing (or null) for power-on, power-off and
// power-cycle; {"powered": true|false} for power-status; a list of
// [item, status] pairs for health.
func ParseOutput(command string, stdout []byte) (Result, error) {
	r := Result{Command: command}
	switch command {
	case PowerOn, PowerOff, PowerCycle:
		t := bytes.TrimSpace(stdout)
		if len(t) != 0 && string(t) != "null" {
			return r, fmt.Errorf("%s is expected to not return payload but got %s", command, Quote(stdout))
		}
		return r, nil
	case PowerStatus:
		p, err := ParsePowerStatus(stdout)
		if err != nil {
			return r, err
		}
		r.Powered = p
		return r, nil
	case Health:
		items, err := ParseHealth(stdout)
		if err != nil {
			return r, err
		}
		r.Health = items
		return r, nil
	}
	return r, fmt.Errorf("unknown OOB command %q", command)
}

// ParsePowerStatus decodes power-status output: a JSON object whose
// "powered" member is a boolean. Other members are ignored.
func ParsePowerStatus(stdout []byte) (bool, error) {
	v, err := decodeOne(stdout)
	if err != nil {
		return false, fmt.Errorf("power-status is expected to return {\"powered\": true|false} but got %s: %v", Quote(stdout), err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return false, fmt.Errorf("power-status is expected to return a dict but got %s %s", jsonKind(v), Quote(stdout))
	}
	raw, ok := obj["powered"]
	if !ok {
		return false, fmt.Errorf("power-status is expected to return {\"powered\": true|false} but got %s (no \"powered\")", Quote(stdout))
	}
	p, ok := raw.(bool)
	if !ok {
		return false, fmt.Errorf("power-status is expected to return a boolean \"powered\" but got %s %s", jsonKind(raw), Quote(stdout))
	}
	return p, nil
}

// ParseHealth decodes health output: a JSON list of [item, status] pairs
// of strings, each status one of OK, WARNING, CRITICAL, UNKNOWN.
func ParseHealth(stdout []byte) ([]HealthItem, error) {
	v, err := decodeOne(stdout)
	if err != nil {
		return nil, fmt.Errorf("health is expected to return a list of [item, status] but got %s: %v", Quote(stdout), err)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("command 'health' is expected to return a list but got %s %s", jsonKind(v), Quote(stdout))
	}
	items := make([]HealthItem, 0, len(list))
	for i, e := range list {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("health entry %d is not an [item, status] pair: %s", i, Quote(stdout))
		}
		item, ok1 := pair[0].(string)
		status, ok2 := pair[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("health entry %d must hold two strings: %s", i, Quote(stdout))
		}
		if !validStatus(status) {
			return nil, fmt.Errorf("health item '%s' has invalid status '%s'", item, status)
		}
		items = append(items, HealthItem{Item: item, Status: status})
	}
	return items, nil
}

// decodeOne decodes exactly one JSON value, refusing empty input and
// anything after the value.
func decodeOne(b []byte) (any, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("no output")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "a dict"
	}
	return fmt.Sprintf("%T", v)
}
