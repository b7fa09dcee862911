// Package jobfilter is the logic of Ganeti's job filter rules
// (design-optables): parsing and checking a rule's predicates and action,
// and deciding which rule of a chain applies to a job. A predicate is
// [name, expression] with name jobid (field id; the value "watermark"
// stands for the rule's watermark), opcode (OP_ID and every field of an
// opcode; true when one opcode of the job matches) or reason (source,
// reason, timestamp of a reason-trail entry; true when one entry of one
// opcode matches); the expression is a list-form query-language filter
// (package qlang). It does no I/O and works on plain values, so that the
// API checks a rule and the leader's job queue applies it with the same
// code.
package jobfilter

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gnt-cluster/gnt/qlang"
)

// Actions, Ganeti's names.
const (
	Accept    = "ACCEPT"
	Pause     = "PAUSE"
	Reject    = "REJECT"
	Continue  = "CONTINUE"
	RateLimit = "RATE_LIMIT"
)

// Predicate names.
const (
	PredJobID  = "jobid"
	PredOpcode = "opcode"
	PredReason = "reason"
)

// Bounds on a rule.
const (
	MaxPredicates = 32        // predicates of one rule
	MaxPriority   = 1_000_000 // priorities are 0 to MaxPriority
	MaxRateLimit  = 1_000_000 // RATE_LIMIT n: 1 to MaxRateLimit
)

// Action is a rule's action; N is the limit of RATE_LIMIT (0 otherwise).
type Action struct {
	Name string
	N    int
}

// String is the action as gnt filter and Ganeti's gnt-filter write it.
func (a Action) String() string {
	if a.Name == RateLimit {
		return RateLimit + " " + strconv.Itoa(a.N)
	}
	return a.Name
}

// JSON is the action in Ganeti's JSON form: a string, or
// ["RATE_LIMIT", n].
func (a Action) JSON() any {
	if a.Name == RateLimit {
		return []any{RateLimit, a.N}
	}
	return a.Name
}

// CheckAction checks an action given by name and limit.
func CheckAction(name string, n int) error {
	switch name {
	case Accept, Pause, Reject, Continue:
		if n != 0 {
			return fmt.Errorf("action %s takes no number", name)
		}
		return nil
	case RateLimit:
		if n < 1 || n > MaxRateLimit {
			return fmt.Errorf("RATE_LIMIT takes a number of jobs from 1 to %d, got %d", MaxRateLimit, n)
		}
		return nil
	}
	return fmt.Errorf("unknown action %q (known: ACCEPT, PAUSE, REJECT, CONTINUE, [\"RATE_LIMIT\", n])", name)
}

// ParseAction reads an action in Ganeti's JSON form (decoded): "ACCEPT",
// "PAUSE", "REJECT", "CONTINUE" or ["RATE_LIMIT", n] with n a positive
// integer.
func ParseAction(v any) (Action, error) {
	switch x := v.(type) {
	case string:
		if x == RateLimit {
			return Action{}, fmt.Errorf("RATE_LIMIT needs its number of jobs: [\"RATE_LIMIT\", n]")
		}
		return Action{Name: x}, CheckAction(x, 0)
	case []any:
		if len(x) != 2 || x[0] != RateLimit {
			return Action{}, fmt.Errorf("an action list must be [\"RATE_LIMIT\", n], got %s", describe(v))
		}
		f, ok := asInt(x[1])
		if !ok {
			return Action{}, fmt.Errorf("RATE_LIMIT takes an integer number of jobs, got %s", describe(x[1]))
		}
		if f < 1 || f > MaxRateLimit {
			return Action{}, fmt.Errorf("RATE_LIMIT takes a number of jobs from 1 to %d, got %d", MaxRateLimit, f)
		}
		return Action{Name: RateLimit, N: int(f)}, nil
	}
	return Action{}, fmt.Errorf("an action is a string (ACCEPT, PAUSE, REJECT, CONTINUE) or [\"RATE_LIMIT\", n], got %s", describe(v))
}

// ParseActionText reads an action as gnt-filter's --action takes it:
// ACCEPT, PAUSE, REJECT, CONTINUE or "RATE_LIMIT n".
func ParseActionText(s string) (Action, error) {
	f := strings.Fields(s)
	if len(f) == 2 && f[0] == RateLimit {
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return Action{}, fmt.Errorf("RATE_LIMIT takes an integer number of jobs, got %q", f[1])
		}
		if err := CheckAction(RateLimit, n); err != nil {
			return Action{}, err
		}
		return Action{Name: RateLimit, N: n}, nil
	}
	if len(f) != 1 {
		return Action{}, fmt.Errorf("an action is ACCEPT, PAUSE, REJECT, CONTINUE or \"RATE_LIMIT n\", got %q", s)
	}
	return ParseAction(f[0])
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case float64:
		if n != float64(int64(n)) {
			return 0, false
		}
		return int64(n), true
	case int:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	s := string(b)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// Job is what the predicates see of a job: its id, each opcode's fields
// (as decoded from its JSON, OP_ID included) and each opcode's reason
// trail as rows of source, reason and timestamp.
type Job struct {
	ID      int64
	Ops     []map[string]any
	Reasons [][]qlang.Row
}

// ReasonRow is a reason-trail entry as the reason predicate sees it.
func ReasonRow(source, text string, ts int64) qlang.Row {
	return qlang.Row{"source": source, "reason": text, "timestamp": ts}
}

type predicate struct {
	name string
	f    *qlang.Filter
}

// Predicates are a rule's compiled predicates; all must match.
type Predicates []predicate

// Match tells whether every predicate holds for the job.
func (ps Predicates) Match(j *Job) bool {
	for _, p := range ps {
		if !p.match(j) {
			return false
		}
	}
	return true
}

func (p predicate) match(j *Job) bool {
	switch p.name {
	case PredJobID:
		return p.f.Match(qlang.Row{"id": j.ID})
	case PredOpcode:
		for _, op := range j.Ops {
			if p.f.Match(qlang.Row(op)) {
				return true
			}
		}
	case PredReason:
		for _, trail := range j.Reasons {
			for _, r := range trail {
				if p.f.Match(r) {
					return true
				}
			}
		}
	}
	return false
}

func jobIDSchema(field string) (qlang.Kind, bool) {
	return qlang.KindNumber, field == "id"
}

func opcodeSchema(field string) (qlang.Kind, bool) {
	if field == "OP_ID" {
		return qlang.KindText, true
	}
	return qlang.KindOther, field != ""
}

func reasonSchema(field string) (qlang.Kind, bool) {
	switch field {
	case "source", "reason":
		return qlang.KindText, true
	case "timestamp":
		return qlang.KindNumber, true
	}
	return "", false
}

// Compile checks predicates in Ganeti's form (decoded JSON: a list of
// [name, expression]) and compiles them for a rule with this watermark.
// Errors name the predicate by its index.
func Compile(preds any, watermark int64) (Predicates, error) {
	if preds == nil {
		return nil, nil
	}
	list, ok := preds.([]any)
	if !ok {
		return nil, fmt.Errorf("predicates must be a list of [name, expression], got %s", describe(preds))
	}
	if len(list) > MaxPredicates {
		return nil, fmt.Errorf("a rule has at most %d predicates, got %d", MaxPredicates, len(list))
	}
	out := make(Predicates, 0, len(list))
	for i, p := range list {
		pl, ok := p.([]any)
		if !ok || len(pl) == 0 {
			return nil, fmt.Errorf("predicate %d must be a list [name, expression], got %s", i, describe(p))
		}
		name, ok := pl[0].(string)
		if !ok {
			return nil, fmt.Errorf("predicate %d: its name must be a string (jobid, opcode or reason), got %s", i, describe(pl[0]))
		}
		var schema qlang.Schema
		switch name {
		case PredJobID:
			schema = jobIDSchema
		case PredOpcode:
			schema = opcodeSchema
		case PredReason:
			schema = reasonSchema
		default:
			return nil, fmt.Errorf("predicate %d: unknown predicate %q (known: jobid, opcode, reason)", i, name)
		}
		if len(pl) != 2 {
			return nil, fmt.Errorf("predicate %d (%s) takes exactly one expression, got %d", i, name, len(pl)-1)
		}
		expr := pl[1]
		if name == PredJobID {
			expr = withWatermark(expr, watermark, 0)
		}
		if expr == nil {
			return nil, fmt.Errorf("predicate %d (%s): the expression must be a list-form filter, got null", i, name)
		}
		f, err := qlang.Compile(expr, schema)
		if err != nil {
			return nil, fmt.Errorf("predicate %d (%s): %v", i, name, err)
		}
		out = append(out, predicate{name: name, f: f})
	}
	return out, nil
}

// withWatermark replaces the value "watermark" of comparisons by the
// rule's watermark (design-optables: "in all value positions").
func withWatermark(e any, wm int64, depth int) any {
	l, ok := e.([]any)
	if !ok || len(l) == 0 || depth > qlang.MaxDepth {
		return e
	}
	op, _ := l[0].(string)
	out := make([]any, len(l))
	copy(out, l)
	switch op {
	case qlang.OpOr, qlang.OpAnd, qlang.OpNot:
		for i := 1; i < len(out); i++ {
			out[i] = withWatermark(out[i], wm, depth+1)
		}
	default:
		if len(out) == 3 && out[2] == "watermark" {
			out[2] = wm
		}
	}
	return out
}

// Rule is a filter rule ready to be applied.
type Rule struct {
	UUID      string
	Watermark int64
	Priority  int
	Action    Action
	Preds     Predicates
}

// Sort orders a chain as Ganeti processes it: by priority (lowest first),
// then watermark, then UUID.
func Sort(chain []*Rule) {
	sort.Slice(chain, func(a, b int) bool {
		x, y := chain[a], chain[b]
		if x.Priority != y.Priority {
			return x.Priority < y.Priority
		}
		if x.Watermark != y.Watermark {
			return x.Watermark < y.Watermark
		}
		return x.UUID < y.UUID
	})
}

// Applies returns the rule of a sorted chain that applies to the job:
// the first whose predicates all match and whose action is not CONTINUE;
// nil when there is none (the job is accepted).
func Applies(chain []*Rule, j *Job) *Rule {
	for _, r := range chain {
		if r.Action.Name == Continue {
			continue
		}
		if r.Preds.Match(j) {
			return r
		}
	}
	return nil
}
