package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// JobFields are the fields of a job object (GET /2/jobs/{id}), in
// Ganeti's order; /2/jobs/{id}/wait accepts any of them.
var JobFields = []string{
	"id", "status", "priority", "ops", "opstatus", "opresult", "oplog", "opstart", "opexec",
	"opend", "oppriority", "summary", "received_ts", "start_ts", "end_ts",
}

// GntJobFields are gnt's additions to a job object: per opcode the
// completed steps, the locks held and the resolved dependencies; whether
// the job is archived or a cancel is pending; the executor attempts on it
// and, when the poison-job guard failed it, the executor epochs whose
// leaders were lost while it ran.
var GntJobFields = []string{"gnt_opsteps", "gnt_oplocks", "gnt_opdepends", "gnt_archived", "gnt_cancel_requested",
	"gnt_attempts", "gnt_poison_epochs"}

// JobBulkFields are the fields of each job of GET /2/jobs?bulk=1.
var JobBulkFields = []string{"id", "ops", "status", "summary", "opstatus", "received_ts", "start_ts", "end_ts", "priority", "gnt_archived"}

// Limits of GET /2/jobs/{id}/wait (Ganeti's _WFJC_TIMEOUT is 10 s).
const (
	DefaultJobWait = 10 * time.Second // without ?timeout=
	MaxJobWait     = 60 * time.Second // longer timeouts are cut to this
)

var knownJobField = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range JobFields {
		m[f] = true
	}
	for _, f := range GntJobFields {
		m[f] = true
	}
	return m
}()

// allJobFields is what GET /2/jobs/{id} answers.
var allJobFields = append(append([]string(nil), JobFields...), GntJobFields...)

// jobView is a job as the API shows it: from the active queue, or
// rebuilt from an archived summary.
type jobView struct {
	*fsm.Job
	archived bool
}

// ganetiFailure is a failed opcode's result in Ganeti's form: the state
// machine's refusals are ["OpPrereqError", [message, error code]] already;
// the executor's failures, recorded as a message, become
// ["OpExecError", [message]].
func ganetiFailure(result json.RawMessage) any {
	var msg string
	if json.Unmarshal(result, &msg) != nil {
		return result
	}
	return []any{"OpExecError", []string{msg}}
}

// jobField returns one query field of a job.
func jobField(j jobView, f string) any {
	perOp := func(fn func(op *fsm.OpState) any) []any {
		out := make([]any, len(j.Ops))
		for i, op := range j.Ops {
			out[i] = fn(op)
		}
		return out
	}
	switch f {
	case "id":
		return j.ID
	case "status":
		return j.Status
	case "priority":
		return j.Priority()
	case "ops":
		return perOp(func(op *fsm.OpState) any { return op.Input })
	case "opstatus":
		return perOp(func(op *fsm.OpState) any { return op.Status })
	case "opresult":
		return perOp(func(op *fsm.OpState) any {
			if len(op.Result) == 0 {
				return nil
			}
			if op.Status == fsm.StatusError {
				return ganetiFailure(op.Result)
			}
			return op.Result
		})
	case "oplog":
		return perOp(func(op *fsm.OpState) any {
			if op.Log == nil {
				return []fsm.LogEntry{}
			}
			return op.Log
		})
	case "opstart":
		return perOp(func(op *fsm.OpState) any { return op.StartTS })
	case "opexec":
		return perOp(func(op *fsm.OpState) any { return op.ExecTS })
	case "opend":
		return perOp(func(op *fsm.OpState) any { return op.EndTS })
	case "oppriority":
		return perOp(func(op *fsm.OpState) any { return op.Priority })
	case "summary":
		return nonNil(j.Summary)
	case "received_ts":
		return j.ReceivedTS
	case "start_ts":
		return j.StartTS
	case "end_ts":
		return j.EndTS
	case "gnt_opsteps":
		return perOp(func(op *fsm.OpState) any { return nonNil(op.Steps) })
	case "gnt_oplocks":
		return perOp(func(op *fsm.OpState) any { return nonNil(op.Locks) })
	case "gnt_opdepends":
		return perOp(func(op *fsm.OpState) any { return nonNil(op.Depends) })
	case "gnt_archived":
		return j.archived
	case "gnt_cancel_requested":
		return j.CancelRequested
	case "gnt_attempts":
		return nonNil(j.Attempts)
	case "gnt_poison_epochs":
		return nonNil(j.PoisonEpochs)
	}
	return nil
}

func jobObject(j jobView, fields []string) map[string]any {
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		out[f] = jobField(j, f)
	}
	return out
}

func parseJobID(r *http.Request) (int64, *APIError) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("job_id", "job id must be a positive integer, got %q", r.PathValue("id"))
	}
	return id, nil
}

// serveJobs lists the jobs of the active queue; with ?archived=1 (a gnt
// extension) the archived ones too.
func (s *Server) serveJobs(w http.ResponseWriter, r *http.Request) error {
	archived, aerr := queryFlag(r.URL.Query(), "archived")
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return serveList(s, w, r, func(st *fsm.State) []jobRef { return jobRefs(st, archived) }, jobEntry,
		func(*fsm.State) func(jobRef) any { return jobBulkObject })
}

// jobEntry is a job's entry of the short listing.
func jobEntry(j jobRef) any { return JobIDURI{ID: j.id, URI: "/2/jobs/" + strconv.FormatInt(j.id, 10)} }

// jobBulkObject is a job's object of the bulk listing.
func jobBulkObject(j jobRef) any { return jobObject(j.view(), JobBulkFields) }

// jobRef is a job of a listing: of the active queue, or archived.
type jobRef struct {
	id   int64
	job  *fsm.Job
	arch *fsm.ArchivedJob
}

// view renders the job, an archived one from its summary.
func (j jobRef) view() jobView {
	if j.job != nil {
		return jobView{Job: j.job}
	}
	return jobView{Job: archivedAsJob(j.arch), archived: true}
}

// jobRefs lists the jobs of the active queue, and the archived ones
// with archived, by increasing id. It reads the archive by its ordered
// list alone, which a frozen view holds.
func jobRefs(st *fsm.State, archived bool) []jobRef {
	ids := st.SortedJobIDs()
	var arch []*fsm.ArchivedJob
	if archived {
		arch = st.ArchivedJobs()
	}
	out := make([]jobRef, 0, len(ids)+len(arch))
	for _, id := range ids {
		out = append(out, jobRef{id: id, job: st.Jobs[id]})
	}
	for _, a := range arch {
		out = append(out, jobRef{id: a.ID, arch: a})
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

// lookupJob finds a job of the active queue or, rendered from its
// summary, of the archive.
func lookupJob(st *fsm.State, id int64) (jobView, bool) {
	if j := st.Jobs[id]; j != nil {
		return jobView{Job: j}, true
	}
	if a := st.Archived[id]; a != nil {
		return jobView{Job: archivedAsJob(a), archived: true}, true
	}
	return jobView{}, false
}

func (s *Server) serveJob(w http.ResponseWriter, r *http.Request) error {
	id, aerr := parseJobID(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	later := false
	s.b.FSM().Read(func(st *fsm.State, _ uint64) {
		_, ok := lookupJob(st, id)
		later = !ok && s.unknownYet(st, id)
	})
	if later {
		return ErrNotLeader // a job newer than this replica: ask the leader
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		j, ok := lookupJob(st, id)
		if !ok {
			return nil, unknownEntity("job_id", "job %d does not exist", id)
		}
		return jobObject(j, allJobFields), nil
	})
}

// WaitJobRequest is the body of GET /2/jobs/{id}/wait.
type WaitJobRequest struct {
	Fields            []string        `json:"fields"`
	PreviousJobInfo   json.RawMessage `json:"previous_job_info,omitempty"`
	PreviousLogSerial *int64          `json:"previous_log_serial,omitempty"`
}

// WaitJobResponse is the answer of GET /2/jobs/{id}/wait when the job
// changed; the endpoint answers JSON null when it did not.
type WaitJobResponse struct {
	JobInfo    []json.RawMessage `json:"job_info"`
	LogEntries []fsm.LogEntry    `json:"log_entries"`
}

// parseWait reads the wait parameters from the body, or the query.
func parseWait(r *http.Request, body []byte) (req WaitJobRequest, prev []any, timeout time.Duration, aerr *APIError) {
	q := r.URL.Query()
	if len(bytes.TrimSpace(body)) > 0 {
		if aerr = decodeBody(body, &req); aerr != nil {
			return
		}
	}
	if req.Fields == nil && q.Has("fields") {
		req.Fields = []string{}
		for _, f := range strings.Split(q.Get("fields"), ",") {
			if f = strings.TrimSpace(f); f != "" {
				req.Fields = append(req.Fields, f)
			}
		}
	}
	if req.Fields == nil {
		aerr = badRequest("fields", "the 'fields' parameter must be a list of job fields")
		return
	}
	for _, f := range req.Fields {
		if !knownJobField[f] {
			aerr = badRequest("fields", "unknown job field %q (known: %s)", f, strings.Join(JobFields, ", "))
			return
		}
	}
	if req.PreviousLogSerial == nil && q.Has("previous_log_serial") {
		n, err := strconv.ParseInt(q.Get("previous_log_serial"), 10, 64)
		if err != nil {
			aerr = badRequest("previous_log_serial", "previous_log_serial must be an integer, got %q", q.Get("previous_log_serial"))
			return
		}
		req.PreviousLogSerial = &n
	}
	if p := bytes.TrimSpace(req.PreviousJobInfo); len(p) > 0 && string(p) != "null" {
		if err := json.Unmarshal(p, &prev); err != nil {
			aerr = badRequest("previous_job_info", "the 'previous_job_info' parameter must be a list")
			return
		}
		if prev == nil {
			prev = []any{}
		}
	}
	timeout = DefaultJobWait
	if q.Has("timeout") {
		secs, err := strconv.ParseFloat(q.Get("timeout"), 64)
		if err != nil || !finite(secs) || secs < 0 {
			aerr = badRequest("timeout", "timeout must be a non-negative number of seconds, got %q", q.Get("timeout"))
			return
		}
		timeout = min(time.Duration(secs*float64(time.Second)), MaxJobWait)
	}
	return
}

// handleJobWait is Ganeti's WaitForJobChangeOnce: it answers at once when
// the job is no longer queued, waiting or running, when the selected fields
// differ from previous_job_info, or when there are log entries newer than
// previous_log_serial; otherwise it waits for a change until the timeout
// and then answers null. With ?index=N (the index the job was submitted
// at) a job this gntd does not know yet is waited for.
func (s *Server) handleJobWait(w http.ResponseWriter, r *http.Request) {
	id, body, ok := s.jobRequest(w, r)
	if !ok {
		return
	}
	req, prev, timeout, aerr := parseWait(r, body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var prevRaw []byte
	if prev != nil {
		var buf bytes.Buffer
		if json.Compact(&buf, req.PreviousJobInfo) == nil {
			prevRaw = buf.Bytes()
		}
	}
	var minIndex uint64
	q := r.URL.Query()
	if q.Has("index") {
		n, err := strconv.ParseUint(q.Get("index"), 10, 64)
		if err != nil {
			writeError(w, badRequest("index", "query parameter index must be a non-negative integer, got %q", q.Get("index")))
			return
		}
		minIndex = n
	}
	f := s.b.FSM()
	if f == nil {
		writeError(w, &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeNotCandidate,
			Message: "this gntd is not a master candidate and holds no state"})
		return
	}
	serve := func() error {
		return s.waitJob(w, r, f, id, req, prev, prevRaw, timeout, minIndex)
	}
	// Read your writes: a replica behind a write this gntd answered, or
	// that does not know the job yet, has the leader answer.
	if s.caughtUp(r.Context()) {
		if err := serve(); !errors.Is(err, ErrNotLeader) {
			return
		}
	}
	s.onLeader(w, r, body, serve)
}

// waitJob is the local part of GET /2/jobs/{id}/wait; it returns
// ErrNotLeader without answering for a job newer than this replica while
// another gntd leads.
func (s *Server) waitJob(w http.ResponseWriter, r *http.Request, f *fsm.FSM, id int64, req WaitJobRequest, prev []any, prevRaw []byte,
	timeout time.Duration, minIndex uint64) error {
	wctx, wcancel := s.waitCtx(r.Context())
	defer wcancel()
	ctx, cancel := context.WithTimeout(wctx, timeout)
	defer cancel()
	for {
		jobCh := f.JobChanged(id)
		var (
			found, initialised, later bool
			status                    string
			info                      []byte
			logs                      []fsm.LogEntry
			idx                       uint64
			err                       error
		)
		f.Read(func(st *fsm.State, i uint64) {
			idx, initialised = i, st.Initialized()
			j, ok := lookupJob(st, id)
			if !ok {
				later = initialised && minIndex == 0 && s.unknownYet(st, id)
				return
			}
			found, status = true, j.Status
			vals := make([]any, len(req.Fields))
			for k, name := range req.Fields {
				vals[k] = jobField(j, name)
			}
			info, err = json.Marshal(vals)
			for _, op := range j.Ops {
				for _, l := range op.Log {
					if req.PreviousLogSerial == nil || l.Serial > *req.PreviousLogSerial {
						logs = append(logs, l)
					}
				}
			}
		})
		if later {
			return ErrNotLeader
		}
		setIndex(w, idx)
		if err != nil {
			writeError(w, asAPIError(err))
			return nil
		}
		if !found {
			if minIndex > 0 && idx < minIndex && ctx.Err() == nil {
				f.WaitIndex(ctx, minIndex-1)
				continue
			}
			if !initialised {
				writeError(w, notInitialised())
				return nil
			}
			writeError(w, unknownEntity("job_id", "job %d does not exist", id))
			return nil
		}
		// Unlike Ganeti, canceling counts as pending: here it can last a
		// whole step, and answering at once would make clients spin.
		pending := !fsm.Finalized(status)
		if !pending || len(logs) > 0 || prev == nil || !sameInfo(info, prevRaw, prev) {
			sort.Slice(logs, func(a, b int) bool { return logs[a].Serial < logs[b].Serial })
			if logs == nil {
				logs = []fsm.LogEntry{}
			}
			out, err := json.Marshal(map[string]any{"job_info": json.RawMessage(info), "log_entries": logs})
			if err != nil {
				writeError(w, asAPIError(err))
				return nil
			}
			writeRaw(w, http.StatusOK, out)
			return nil
		}
		if ctx.Err() != nil {
			writeRaw(w, http.StatusOK, []byte("null"))
			return nil
		}
		select {
		case <-jobCh:
		case <-ctx.Done():
		}
	}
}

// sameInfo reports whether the job info just read equals the client's
// previous_job_info: byte for byte (the client sent back what it got, the
// cheap and common case), or else as decoded JSON (a client that
// re-encoded it).
func sameInfo(info, prevRaw []byte, prev []any) bool {
	if prevRaw != nil && bytes.Equal(info, prevRaw) {
		return true
	}
	var cur []any
	if json.Unmarshal(info, &cur) != nil {
		return false
	}
	return reflect.DeepEqual(cur, prev)
}
