package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/qlang/jobfilter"
)

// Job filter rules, Ganeti's /2/filters (design-optables, doc/rapi.rst):
// GET lists them (uuid and uri, or every field with ?bulk=1), POST adds
// one and answers its UUID, GET/PUT/DELETE /2/filters/[uuid] read,
// replace (or create) and remove one. Changes need write access, are not
// jobs (as in Ganeti, so that a rule can never lock itself out) and honour
// ?dry-run=1: the rule is checked, nothing changes, and the answer is
// what it would have been. A body is Ganeti's: priority (0 to
// fsm.MaxFilterPriority, default 0), predicates (default [], every job),
// action (default CONTINUE), reason (a reason trail); any other field,
// a bad predicate, an unknown action or a priority out of range is
// refused with 400 naming it, and nothing changes.

// FilterRule is a filter rule as GET /2/filters/[uuid] (and ?bulk=1)
// answers it: Ganeti's FILTER_RULE_FIELDS.
type FilterRule struct {
	UUID        string            `json:"uuid"`
	Watermark   int64             `json:"watermark"`
	Priority    int               `json:"priority"`
	Predicates  json.RawMessage   `json:"predicates"`
	Action      any               `json:"action"`
	ReasonTrail []fsm.ReasonEntry `json:"reason_trail"`
}

// FilterRef is one element of GET /2/filters without bulk.
type FilterRef struct {
	UUID string `json:"uuid"`
	URI  string `json:"uri"`
}

func filterRule(f *fsm.JobFilter) FilterRule {
	return FilterRule{UUID: f.UUID, Watermark: f.Watermark, Priority: f.Priority, Predicates: f.Predicates,
		Action: jobfilter.Action{Name: f.Action, N: f.RateLimit}.JSON(), ReasonTrail: f.ReasonTrail}
}

// filterRoutes are the routes of this file; each honours ?dry-run=1.
func (s *Server) filterRoutes() []moreRoute {
	return []moreRoute{
		{AccessRead, "GET", "/2/filters", s.blockingRead(s.serveFilters), false},
		{AccessRead, "GET", "/2/filters/{uuid}", s.blockingRead(s.serveFilter), false},
		{AccessWrite, "POST", "/2/filters", s.handleFilterPut(false), true},
		{AccessWrite, "PUT", "/2/filters/{uuid}", s.handleFilterPut(true), true},
		{AccessWrite, "DELETE", "/2/filters/{uuid}", s.handleFilterDelete, true},
	}
}

func (s *Server) serveFilters(w http.ResponseWriter, r *http.Request) error {
	bulk, aerr := queryFlag(r.URL.Query(), "bulk")
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		fs := st.SortedFilters()
		if bulk {
			out := make([]FilterRule, len(fs))
			for i, f := range fs {
				out[i] = filterRule(f)
			}
			return out, nil
		}
		out := make([]FilterRef, len(fs))
		for i, f := range fs {
			out[i] = FilterRef{UUID: f.UUID, URI: "/2/filters/" + f.UUID}
		}
		return out, nil
	})
}

func (s *Server) serveFilter(w http.ResponseWriter, r *http.Request) error {
	uuid := r.PathValue("uuid")
	if e := fsm.ValidateFilterUUID("uuid", uuid); e != nil {
		writeError(w, FromFSM(e))
		return nil
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		f := st.Filters[uuid]
		if f == nil {
			return nil, FromFSM(&fsm.Error{Code: fsm.CodeNoEnt, Field: "uuid", Msg: "filter " + uuid + " does not exist"})
		}
		return filterRule(f), nil
	})
}

// filterRequest is the body of POST /2/filters and PUT /2/filters/[uuid].
type filterRequest struct {
	Priority   json.RawMessage `json:"priority"`
	Predicates json.RawMessage `json:"predicates"`
	Action     json.RawMessage `json:"action"`
	Reason     json.RawMessage `json:"reason"`
	// UUID is PUT's body parameter naming the filter (doc/rapi.rst); it
	// must be the path's. POST draws the uuid and refuses one.
	UUID json.RawMessage `json:"uuid"`
}

// checkBodyUUID checks the body parameter uuid of a filter rule: on PUT
// (path is the path's uuid) it may repeat the path's; POST (path "")
// takes none.
func checkBodyUUID(body []byte, path string) *APIError {
	var req struct {
		UUID json.RawMessage `json:"uuid"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.UUID) == 0 || string(req.UUID) == "null" {
		return nil // no uuid; parseFilterRule reports a malformed body
	}
	if path == "" {
		return badRequest("uuid", "uuid is a body parameter of PUT /2/filters/[filter_uuid] only; POST /2/filters draws the filter's uuid")
	}
	var u string
	if err := json.Unmarshal(req.UUID, &u); err != nil || u != path {
		return badRequest("uuid", "the body's uuid %.60s differs from the path's %s", req.UUID, path)
	}
	return nil
}

// parseFilterRule checks the body of a filter rule as Ganeti's RAPI and
// its server do, and returns the command that stores it under uuid
// (which the caller has checked). Errors name the field.
func parseFilterRule(uuid string, body []byte, now int64) (fsm.FilterPut, *APIError) {
	var req filterRequest
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if aerr := decodeBody(body, &req); aerr != nil {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return fsm.FilterPut{}, badRequest("", "the body of a filter rule is a JSON object (priority, predicates, action, reason)")
		}
		return fsm.FilterPut{}, aerr
	}
	c := fsm.FilterPut{Now: now, UUID: uuid, Action: jobfilter.Continue, Predicates: json.RawMessage("[]")}
	if len(req.Priority) > 0 && string(req.Priority) != "null" {
		var p int64
		if err := json.Unmarshal(req.Priority, &p); err != nil || p < 0 || p > fsm.MaxFilterPriority {
			return c, badRequest("priority", "a filter's priority is an integer from 0 to %d, got %.40s", fsm.MaxFilterPriority, req.Priority)
		}
		c.Priority = int(p)
	}
	if len(req.Predicates) > 0 && string(req.Predicates) != "null" {
		if len(req.Predicates) > fsm.MaxFilterPredicateSz {
			return c, badRequest("predicates", "a filter's predicates are at most %d bytes of JSON, got %d", fsm.MaxFilterPredicateSz, len(req.Predicates))
		}
		v, err := decodeAny(req.Predicates)
		if err != nil {
			return c, badRequest("predicates", "predicates: %v", err)
		}
		if _, err := jobfilter.Compile(v, 0); err != nil {
			return c, badRequest("predicates", "%v", err)
		}
		compact := &bytes.Buffer{}
		if err := json.Compact(compact, req.Predicates); err != nil {
			return c, badRequest("predicates", "predicates: %v", err)
		}
		c.Predicates = compact.Bytes()
	}
	if len(req.Action) > 0 && string(req.Action) != "null" {
		v, err := decodeAny(req.Action)
		if err != nil {
			return c, badRequest("action", "action: %v", err)
		}
		a, err := jobfilter.ParseAction(v)
		if err != nil {
			return c, badRequest("action", "%v", err)
		}
		c.Action, c.RateLimit = a.Name, a.N
	}
	if len(req.Reason) > 0 && string(req.Reason) != "null" {
		if err := json.Unmarshal(req.Reason, &c.Reason); err != nil {
			return c, badRequest("reason", "reason must be a list of [source, text, timestamp_ns]: %v", err)
		}
	}
	if e := fsm.CheckFilter(c.Priority, c.Action, c.RateLimit, c.Predicates, c.Reason); e != nil {
		return c, FromFSM(e)
	}
	return c, nil
}

func decodeAny(raw []byte) (any, error) {
	if e := fsm.CheckJSON(raw); e != nil {
		return nil, errors.New(e.Msg)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// handleFilterPut is POST /2/filters (replace false: a new UUID) and PUT
// /2/filters/[uuid] (replace or create).
func (s *Server) handleFilterPut(replace bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		dry, aerr := queryFlag(r.URL.Query(), "dry-run")
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		uuid := r.PathValue("uuid")
		if replace {
			if e := fsm.ValidateFilterUUID("uuid", uuid); e != nil {
				writeError(w, FromFSM(e))
				return
			}
		}
		body, aerr := s.readBody(r)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		check := func(id string) (fsm.FilterPut, *APIError) {
			if id == "" {
				id = "00000000-0000-0000-0000-000000000000" // checked only
			}
			return parseFilterRule(id, body, s.b.Now().UnixNano())
		}
		if _, aerr := check(uuid); aerr != nil {
			writeError(w, aerr)
			return
		}
		if aerr := checkBodyUUID(body, uuid); aerr != nil {
			writeError(w, aerr)
			return
		}
		if dry {
			if uuid == "" {
				uuid = s.b.NewUUID()
			}
			writeJSON(w, uuid)
			return
		}
		s.onLeader(w, r, body, func() error {
			id := uuid
			if id == "" {
				id = s.b.NewUUID() // the proposer draws it
			}
			c, aerr := check(id)
			if aerr != nil {
				writeError(w, aerr)
				return nil
			}
			c.Reason = append(c.Reason, fsm.ReasonEntry{Source: "gnt:library:rlib2", Text: r.Method + " " + r.URL.Path, TimeNS: c.Now})
			return s.applyFilter(w, r, c, id)
		})
	}
}

func (s *Server) handleFilterDelete(w http.ResponseWriter, r *http.Request) {
	dry, aerr := queryFlag(r.URL.Query(), "dry-run")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	uuid := r.PathValue("uuid")
	if e := fsm.ValidateFilterUUID("uuid", uuid); e != nil {
		writeError(w, FromFSM(e))
		return
	}
	if dry {
		var exists bool
		s.b.FSM().Read(func(st *fsm.State, idx uint64) { _, exists = st.Filters[uuid]; setIndex(w, idx) })
		if !exists {
			writeError(w, FromFSM(&fsm.Error{Code: fsm.CodeNoEnt, Field: "uuid", Msg: "filter " + uuid + " does not exist"}))
			return
		}
		writeJSON(w, nil)
		return
	}
	s.onLeader(w, r, nil, func() error {
		return s.applyFilter(w, r, fsm.FilterRemove{Now: s.b.Now().UnixNano(), UUID: uuid}, nil)
	})
}

// applyFilter applies a filter command on the leader and answers with
// answer (the rule's UUID, or null for a removal).
func (s *Server) applyFilter(w http.ResponseWriter, r *http.Request, c fsm.Command, answer any) error {
	resp, idx, err := s.b.Apply(r.Context(), c)
	if errors.Is(err, ErrNotLeader) {
		return ErrNotLeader
	}
	if err != nil {
		writeError(w, asAPIError(err))
		return nil
	}
	if resp.Err != nil {
		writeError(w, FromFSM(resp.Err))
		return nil
	}
	setIndex(w, idx)
	writeJSON(w, answer)
	return nil
}
