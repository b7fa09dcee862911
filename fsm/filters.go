package fsm

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Job filter rules (Ganeti's design-optables): a replicated list of rules
// the leader's job queue applies to every job that has not started, on
// submission and whenever it picks jobs to run. The state keeps the
// rules; the predicates' query-language expressions are checked by the
// proposer and evaluated by the queue (package qlang/jobfilter), which
// decides from this state alone. Apply checks the shape of a rule again
// and records its watermark (the highest job id used so far).
//
// While a rule that can hold or refuse a job (PAUSE, REJECT, RATE_LIMIT)
// exists, no submission takes the configuration fast path: every job
// waits in the queue for the executor, which applies the rules.
//
// Every change of the list is a configuration change: it bumps the
// cluster's serial number.

// Filter actions (Ganeti's names).
const (
	FilterAccept    = "ACCEPT"
	FilterPause     = "PAUSE"
	FilterReject    = "REJECT"
	FilterContinue  = "CONTINUE"
	FilterRateLimit = "RATE_LIMIT"
)

// Limits of the filter list.
const (
	MaxFilters           = 1000      // rules in the list
	MaxFilterPriority    = 1_000_000 // priorities are 0 to this
	MaxFilterRateLimit   = 1_000_000 // RATE_LIMIT n: 1 to this
	MaxFilterPredicates  = 32        // predicates of one rule
	MaxFilterPredicateSz = 16 << 10  // bytes of a rule's predicates (JSON)
)

// JobFilter is one filter rule.
type JobFilter struct {
	UUID string `json:"uuid"`
	// Watermark is the highest job id used when the rule was added or
	// last replaced.
	Watermark int64 `json:"watermark"`
	Priority  int   `json:"priority"`
	// Predicates are Ganeti's list of [name, expression], as JSON.
	Predicates json.RawMessage `json:"predicates"`
	Action     string          `json:"action"`
	// RateLimit is n of RATE_LIMIT n (0 for the other actions).
	RateLimit   int           `json:"rate_limit,omitempty"`
	ReasonTrail []ReasonEntry `json:"reason_trail"`
}

// Holds reports whether the rule can keep a job from running (PAUSE,
// REJECT, RATE_LIMIT).
func (f *JobFilter) Holds() bool {
	return f.Action == FilterPause || f.Action == FilterReject || f.Action == FilterRateLimit
}

// FilterPut adds a rule, or replaces the rule with this UUID (Ganeti's
// ReplaceFilter: POST /2/filters with a UUID drawn by the proposer, PUT
// /2/filters/[uuid]).
type FilterPut struct {
	Now        int64           `json:"now"`
	UUID       string          `json:"uuid"`
	Priority   int             `json:"priority"`
	Predicates json.RawMessage `json:"predicates"`
	Action     string          `json:"action"`
	RateLimit  int             `json:"rate_limit,omitempty"`
	Reason     []ReasonEntry   `json:"reason,omitempty"`
}

// FilterRemove removes a rule.
type FilterRemove struct {
	Now  int64  `json:"now"`
	UUID string `json:"uuid"`
}

// CommandType implementations.
func (FilterPut) CommandType() CommandType    { return CmdFilterPut }
func (FilterRemove) CommandType() CommandType { return CmdFilterRemove }

// CheckFilter checks a rule's priority, action and the shape of its
// predicates (a list of at most MaxFilterPredicates lists, each starting
// with jobid, opcode or reason and holding one expression); the
// expressions themselves are the proposer's to check.
func CheckFilter(priority int, action string, rateLimit int, predicates json.RawMessage, reason []ReasonEntry) *Error {
	if priority < 0 || priority > MaxFilterPriority {
		return errf(CodeInval, "priority", "a filter's priority is 0 to %d, got %d", MaxFilterPriority, priority)
	}
	switch action {
	case FilterAccept, FilterPause, FilterReject, FilterContinue:
		if rateLimit != 0 {
			return errf(CodeInval, "action", "action %s takes no number", action)
		}
	case FilterRateLimit:
		if rateLimit < 1 || rateLimit > MaxFilterRateLimit {
			return errf(CodeInval, "action", "RATE_LIMIT takes a number of jobs from 1 to %d, got %d", MaxFilterRateLimit, rateLimit)
		}
	default:
		return errf(CodeInval, "action", "unknown action %q (known: ACCEPT, PAUSE, REJECT, CONTINUE, RATE_LIMIT)", action)
	}
	if len(predicates) > MaxFilterPredicateSz {
		return errf(CodeInval, "predicates", "a filter's predicates are at most %d bytes of JSON, got %d", MaxFilterPredicateSz, len(predicates))
	}
	if e := CheckJSON(predicates); e != nil {
		return &Error{Code: CodeInval, Field: "predicates", Msg: "predicates: " + e.Msg}
	}
	var preds []json.RawMessage
	if err := json.Unmarshal(predicates, &preds); err != nil || preds == nil {
		return errf(CodeInval, "predicates", "predicates must be a list of [name, expression]")
	}
	if len(preds) > MaxFilterPredicates {
		return errf(CodeInval, "predicates", "a filter has at most %d predicates, got %d", MaxFilterPredicates, len(preds))
	}
	for i, p := range preds {
		var parts []json.RawMessage
		var name string
		if err := json.Unmarshal(p, &parts); err != nil || len(parts) != 2 || json.Unmarshal(parts[0], &name) != nil {
			return errf(CodeInval, "predicates", "predicate %d must be [name, expression]", i)
		}
		switch name {
		case "jobid", "opcode", "reason":
		default:
			return errf(CodeInval, "predicates", "predicate %d: unknown predicate %q (known: jobid, opcode, reason)", i, name)
		}
	}
	return checkReasons(reason)
}

// checkReasons checks a reason trail as an opcode's is checked.
func checkReasons(trail []ReasonEntry) *Error {
	c := OpCommon{Reason: trail}
	return c.validateCommon()
}

// ValidateFilterUUID checks a filter rule's UUID: the 36-character
// 8-4-4-4-12 form of lower- or upper-case hex digits.
func ValidateFilterUUID(field, u string) *Error {
	if len(u) != 36 {
		return errf(CodeInval, field, "a filter UUID has the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (36 characters), got %d characters", len(u))
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return errf(CodeInval, field, "a filter UUID has '-' at offset %d, got %q", i, c)
			}
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return errf(CodeInval, field, "a filter UUID holds hex digits; %q at offset %d is not one", c, i)
		}
	}
	return nil
}

func (s *State) applyFilterPut(c *FilterPut) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	if e := ValidateFilterUUID("uuid", c.UUID); e != nil {
		return Response{Err: e}
	}
	if e := CheckFilter(c.Priority, c.Action, c.RateLimit, c.Predicates, c.Reason); e != nil {
		return Response{Err: e}
	}
	if s.Filters[c.UUID] == nil && len(s.Filters) >= MaxFilters {
		return Response{Err: errf(CodeInval, "uuid", "there are %d filters already; the limit is %d", len(s.Filters), MaxFilters)}
	}
	f := &JobFilter{UUID: c.UUID, Watermark: s.NextJobID - 1, Priority: c.Priority, Predicates: c.Predicates,
		Action: c.Action, RateLimit: c.RateLimit, ReasonTrail: c.Reason}
	if f.ReasonTrail == nil {
		f.ReasonTrail = []ReasonEntry{}
	}
	filters := make(map[string]*JobFilter, len(s.Filters)+1)
	for k, v := range s.Filters {
		filters[k] = v
	}
	filters[c.UUID] = f
	s.setFilters(c.Now, filters)
	return Response{}
}

func (s *State) applyFilterRemove(c *FilterRemove) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	if s.Filters[c.UUID] == nil {
		return Response{Err: errf(CodeNoEnt, "uuid", "filter %q does not exist", c.UUID)}
	}
	filters := make(map[string]*JobFilter, len(s.Filters))
	for k, v := range s.Filters {
		if k != c.UUID {
			filters[k] = v
		}
	}
	s.setFilters(c.Now, filters)
	return Response{}
}

// setFilters stores a new list (never changing the old map, which a
// frozen view may share) and bumps the cluster's serial number.
func (s *State) setFilters(now int64, filters map[string]*JobFilter) {
	if len(filters) == 0 {
		filters = nil
	}
	s.Filters = filters
	t := s.begin(now)
	t.clusterRW()
	t.commit()
}

// SortedFilters returns the rules in the order the queue applies them:
// by priority, then watermark, then UUID.
func (s *State) SortedFilters() []*JobFilter {
	out := make([]*JobFilter, 0, len(s.Filters))
	for _, f := range s.Filters {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if a.Watermark != b.Watermark {
			return a.Watermark < b.Watermark
		}
		return a.UUID < b.UUID
	})
	return out
}

// FiltersHold reports whether a rule that can hold or refuse a job
// exists; then every submission waits in the queue for the executor.
func (s *State) FiltersHold() bool {
	for _, f := range s.Filters {
		if f.Holds() {
			return true
		}
	}
	return false
}

// filterRejected is the result of the opcodes of a job a REJECT rule
// canceled.
func filterRejected(uuid string) json.RawMessage {
	return mustJSON(fmt.Sprintf("Job canceled by filter rule %s (REJECT)", uuid))
}
