package rpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/gnt-cluster/gnt/fsm"
)

// SubmitJobsRequest is the body of POST /2/gnt/jobs: several jobs
// submitted at once, all or none, with consecutive ids. In each opcode's
// depends, -1 names the job submitted just before it in the list.
type SubmitJobsRequest struct {
	Jobs [][]json.RawMessage `json:"jobs"`
}

// SubmitJobsResponse is the answer of POST /2/gnt/jobs.
type SubmitJobsResponse struct {
	JobIDs []int64 `json:"job_ids"`
}

// ArchiveJobResponse is the answer of POST /2/gnt/jobs/{id}/archive.
type ArchiveJobResponse struct {
	Archived []int64 `json:"archived"`
}

// MaxJobsPerSubmission bounds POST /2/gnt/jobs (fsm.CheckSubmissionSize
// also bounds their opcodes).
const MaxJobsPerSubmission = fsm.MaxJobsPerSubmission

// applyCommand applies a queue command on the leader and answers with
// answer(resp), or the command's error. check runs first against the
// leader's state: a request that is wrong for it is refused without a
// Raft write.
func (s *Server) applyCommand(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command,
	check func(*fsm.State) *fsm.Error, answer func(fsm.Response) any) {
	s.applyCommandOr(w, r, body, cmd, func(st *fsm.State) (any, *fsm.Error) { return nil, check(st) }, answer)
}

// applyCommandOr is applyCommand whose check may answer instead of the
// command (a non-nil answer): nothing is applied then.
func (s *Server) applyCommandOr(w http.ResponseWriter, r *http.Request, body []byte, cmd fsm.Command,
	check func(*fsm.State) (any, *fsm.Error), answer func(fsm.Response) any) {
	many, ok := cmd.(fsm.JobSubmitMany)
	tokened := ok && many.Token != ""
	s.onLeaderChecked(w, r, body, nil, tokened, true, func() error {
		var (
			e   *fsm.Error
			ans any
		)
		s.b.FSM().Read(func(st *fsm.State, idx uint64) {
			setIndex(w, idx)
			ans, e = check(st)
		})
		if e != nil {
			writeError(w, FromFSM(e))
			return nil
		}
		if ans != nil {
			writeJSON(w, ans)
			return nil
		}
		resp, ok, err := s.applyHere(w, r, cmd)
		if ok {
			writeJSON(w, answer(resp))
		}
		return err
	})
}

// jobRequest reads the job id of the path and the request body; on bad
// input it answers the error and returns ok false.
func (s *Server) jobRequest(w http.ResponseWriter, r *http.Request) (id int64, body []byte, ok bool) {
	id, aerr := parseJobID(r)
	if aerr == nil {
		aerr = checkRequestText(r)
	}
	if reason := r.URL.Query().Get("reason"); aerr == nil && len(reason) > fsm.MaxReasonTextLen {
		aerr = badRequest("reason", "reason is %d bytes long; at most %d", len(reason), fsm.MaxReasonTextLen)
	}
	if aerr == nil {
		body, aerr = s.readBody(r)
	}
	if aerr != nil {
		writeError(w, aerr)
		return 0, nil, false
	}
	return id, body, true
}

// applyHere applies cmd through this gntd (the leader) and sets the index
// header. It answers failures itself and returns ok false then; it returns
// ErrNotLeader, without answering, when the request must be forwarded.
func (s *Server) applyHere(w http.ResponseWriter, r *http.Request, cmd fsm.Command) (fsm.Response, bool, error) {
	resp, idx, err := s.b.Apply(r.Context(), cmd)
	if errors.Is(err, ErrNotLeader) {
		return resp, false, ErrNotLeader
	}
	if err != nil {
		writeError(w, asAPIError(err))
		return resp, false, nil
	}
	if resp.Index != 0 {
		idx = resp.Index // a resent submission took effect where its job was made
	}
	setIndex(w, idx)
	if resp.Err != nil {
		writeError(w, FromFSM(resp.Err))
		return resp, false, nil
	}
	return resp, true, nil
}

// handleJobCancel is DELETE /2/jobs/{id}: a queued or waiting job is
// canceled at once, a running one at its next step boundary. The answer
// is Ganeti's [success, message]; canceling a finished job is an error.
func (s *Server) handleJobCancel(w http.ResponseWriter, r *http.Request) {
	id, body, ok := s.jobRequest(w, r)
	if !ok {
		return
	}
	who := "gnt:library:rlib2"
	if reason := r.URL.Query().Get("reason"); reason != "" {
		who = fmt.Sprintf("gnt:user (%s)", reason)
	}
	cmd := fsm.JobCancel{Now: s.b.Now().UnixNano(), JobID: id, Who: who}
	// A job that has finished is not canceled: Ganeti answers 200
	// [false, why], as its client expects; a job that does not exist is
	// 404.
	check := func(st *fsm.State) (any, *fsm.Error) {
		if j := st.Jobs[id]; j != nil && fsm.Finalized(j.Status) {
			return []any{false, fmt.Sprintf("Job %d is already %s; only queued, waiting and running jobs can be canceled", id, j.Status)}, nil
		}
		if a := st.Archived[id]; a != nil && st.Jobs[id] == nil {
			return []any{false, fmt.Sprintf("Job %d is archived: it is already %s", id, a.Status)}, nil
		}
		return nil, st.CheckCancel(id)
	}
	s.applyCommandOr(w, r, body, cmd, check, func(resp fsm.Response) any {
		if resp.Job != nil && resp.Job.Status == fsm.StatusCanceled {
			return []any{true, fmt.Sprintf("Job %d canceled", id)}
		}
		return []any{true, fmt.Sprintf("Job %d will be canceled at its next step boundary", id)}
	})
}

// handleJobArchive is POST /2/gnt/jobs/{id}/archive: a finished job moves
// to the archive, where its summary stays queryable.
func (s *Server) handleJobArchive(w http.ResponseWriter, r *http.Request) {
	id, body, ok := s.jobRequest(w, r)
	if !ok {
		return
	}
	cmd := fsm.JobArchive{Now: s.b.Now().UnixNano(), IDs: []int64{id}}
	check := func(st *fsm.State) *fsm.Error { return st.CheckArchive(id) }
	s.applyCommand(w, r, body, cmd, check, func(resp fsm.Response) any {
		return ArchiveJobResponse{Archived: nonNil(resp.JobIDs)}
	})
}

// handleSubmitJobs is POST /2/gnt/jobs.
func (s *Server) handleSubmitJobs(w http.ResponseWriter, r *http.Request) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req SubmitJobsRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		writeError(w, aerr)
		return
	}
	if len(req.Jobs) == 0 {
		writeError(w, badRequest("jobs", "no jobs given: the body must be {\"jobs\": [[opcode, ...], ...]}"))
		return
	}
	if aerr := checkToken(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	if e := fsm.CheckSubmissionSize(len(req.Jobs), func(k int) int { return len(req.Jobs[k]) }); e != nil {
		writeError(w, FromFSM(e))
		return
	}
	now := s.b.Now()
	token := r.Header.Get(HeaderSubmitToken)
	cmd := fsm.JobSubmitMany{Now: now.UnixNano(), Token: token}
	parsed := make([][]fsm.Opcode, 0, len(req.Jobs))
	for k, ops := range req.Jobs {
		raw := ops
		built, p, aerr := s.prepareOps(r, body, func(*http.Request, []byte) ([]any, *APIError) {
			out := make([]any, len(raw))
			for i, o := range raw {
				out[i] = o
			}
			return out, nil
		}, now)
		if aerr != nil {
			aerr.Message = fmt.Sprintf("job %d: %s", k, aerr.Message)
			writeError(w, aerr)
			return
		}
		if aerr := s.refuseDebugOps(built); aerr != nil {
			aerr.Message = fmt.Sprintf("job %d: %s", k, aerr.Message)
			writeError(w, aerr)
			return
		}
		spec := fsm.JobSpec{Ops: built, UUIDs: make([]string, len(built))}
		for i := range spec.UUIDs {
			spec.UUIDs[i] = s.b.NewUUID()
		}
		cmd.Jobs, parsed = append(cmd.Jobs, spec), append(parsed, p)
	}
	if e := checkRelativeDeps(parsed); e != nil {
		writeError(w, FromFSM(e))
		return
	}
	check := func(st *fsm.State) *fsm.Error {
		if st.Resent(token) {
			return nil // a resend answers with the jobs the first one made
		}
		return checkSubmission(st, cmd.Jobs, parsed)
	}
	s.applyCommand(w, r, body, cmd, check, func(resp fsm.Response) any {
		return SubmitJobsResponse{JobIDs: resp.JobIDs}
	})
}

// archivedAsJob renders an archived job's summary as a job, so every job
// field can be answered for it (inputs, results and logs are gone).
func archivedAsJob(a *fsm.ArchivedJob) *fsm.Job {
	j := &fsm.Job{ID: a.ID, Status: a.Status, Summary: a.Summary, ReceivedTS: a.ReceivedTS,
		StartTS: a.StartTS, EndTS: a.EndTS, Executor: true}
	for _, st := range a.OpStatus {
		j.Ops = append(j.Ops, &fsm.OpState{Status: st, Priority: a.Priority, Log: []fsm.LogEntry{}})
	}
	return j
}

// checkRelativeDeps refuses relative dependencies that point outside the
// submission, which needs no state.
func checkRelativeDeps(jobs [][]fsm.Opcode) *fsm.Error {
	for k, ops := range jobs {
		for i, op := range ops {
			deps, _ := op.Common().Dependencies()
			for _, d := range deps {
				if d.JobID < 0 && int64(k)+d.JobID < 0 {
					return &fsm.Error{Code: fsm.CodeInval, Field: "depends", Msg: fmt.Sprintf(
						"job %d of the submission, opcode %d: relative dependency %d points before the first job of the submission", k, i, d.JobID)}
				}
			}
		}
	}
	return nil
}
