package fsm

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// ArchivedJob is what stays of a job once archived: enough to answer
// "how did job N end" and to decide dependencies on it, without its
// opcodes' inputs and logs.
type ArchivedJob struct {
	ID         int64      `json:"id"`
	Status     string     `json:"status"`
	Summary    []string   `json:"summary"`
	OpStatus   []string   `json:"opstatus"`
	Priority   int        `json:"priority"`
	ReceivedTS *Timestamp `json:"received_timestamp"`
	StartTS    *Timestamp `json:"start_timestamp"`
	EndTS      *Timestamp `json:"end_timestamp"`
	ArchivedTS *Timestamp `json:"archived_timestamp"`
	// Error is the result of the first failed opcode, cut to
	// maxArchivedError bytes.
	Error string `json:"error,omitempty"`
	// Token and SubmitIndex are the job's submission token and creation
	// index, kept so that a resent submission still finds its job.
	Token       string `json:"token,omitempty"`
	SubmitIndex uint64 `json:"submit_index,omitempty"`
}

const maxArchivedError = 512

func archivedFrom(j *Job, now *Timestamp) *ArchivedJob {
	a := &ArchivedJob{ID: j.ID, Status: j.Status, Summary: j.Summary, Priority: j.Priority(),
		ReceivedTS: j.ReceivedTS, StartTS: j.StartTS, EndTS: j.EndTS, ArchivedTS: now, Token: j.Token, SubmitIndex: j.SubmitIndex}
	for _, op := range j.Ops {
		a.OpStatus = append(a.OpStatus, op.Status)
		if a.Error == "" && op.Status == StatusError && len(op.Result) > 0 {
			a.Error = string(op.Result)
			if len(a.Error) > maxArchivedError {
				a.Error = a.Error[:maxArchivedError]
			}
		}
	}
	return a
}

// newJob decodes and validates the opcodes of one job with id id, the
// first of whose submission has id first, and resolves its
// dependencies. It does not store the job.
func (s *State) newJob(spec JobSpec, id, first int64, ts *Timestamp) (*Job, []Opcode, *Error) {
	ops, e := parseOps(spec.Ops)
	if e != nil {
		return nil, nil, e
	}
	if len(spec.UUIDs) != len(ops) {
		return nil, nil, errf(CodeInval, "uuids", "submission carries %d UUIDs for %d opcodes", len(spec.UUIDs), len(ops))
	}
	job := &Job{ID: id, ReceivedTS: ts, Status: StatusQueued}
	for i, op := range ops {
		if sc, ok := op.(stateChecked); ok {
			if e := sc.checkState(s); e != nil {
				if len(ops) > 1 {
					e = &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d: %s", i, e.Msg)}
				}
				return nil, nil, e
			}
		}
		deps, _ := op.Common().Dependencies() // validated by parseOps
		resolved, e := s.resolveDeps(deps, id, first)
		if e != nil {
			if len(ops) > 1 {
				e = &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d: %s", i, e.Msg)}
			}
			return nil, nil, e
		}
		job.Ops = append(job.Ops, &OpState{
			Input: spec.Ops[i], Status: StatusQueued, Priority: op.Common().PriorityOr(PrioNormal),
			Log: []LogEntry{}, UUID: spec.UUIDs[i], Depends: resolved, parsed: op,
		})
		job.Summary = append(job.Summary, op.Summary())
	}
	return job, ops, nil
}

// queue stores a job for the executor.
func (s *State) queue(job *Job) {
	job.Executor = true
	s.store(job)
	s.touched = append(s.touched, job.ID)
	s.NextJobID = job.ID + 1
	s.pending++
	s.execPending[job.ID] = struct{}{}
	s.queuedAt = s.applying
}

// store records a new job, the index that creates it and its submission
// token.
func (s *State) store(job *Job) {
	job.SubmitIndex = s.applying
	s.Jobs[job.ID] = job
	if job.Token != "" {
		s.byToken[job.Token] = job.ID
	}
}

// MaxSubmitTokenLen is the longest submission token accepted.
const MaxSubmitTokenLen = 64

// CheckSubmitToken says what is wrong with a submission token: it must be
// 1 to MaxSubmitTokenLen characters, each a letter, a digit or one of
// "-_.:".
func CheckSubmitToken(tok string) *Error {
	if tok == "" || len(tok) > MaxSubmitTokenLen {
		return errf(CodeInval, "token", "a submission token has 1 to %d characters, not %d", MaxSubmitTokenLen, len(tok))
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return errf(CodeInval, "token", "a submission token may hold letters, digits and -_.: only; %q is at offset %d", c, i)
		}
	}
	return nil
}

// ManyJobToken is the token job k of a JobSubmitMany with token tok
// records: tok itself for the first job, tok#k for the others ('#' is
// never in a client's token, so these name no other submission).
func ManyJobToken(tok string, k int) string {
	if k == 0 {
		return tok
	}
	return tok + "#" + strconv.Itoa(k)
}

// JobByToken returns the id of the job a submission with this token
// created, while the state holds it (active or archived).
func (s *State) JobByToken(tok string) (int64, bool) {
	id, ok := s.byToken[tok]
	return id, ok
}

// Resent says whether a submission with token tok (empty: no token) was
// applied before: applying it again creates nothing and answers with what
// the first made, so checks of its content need not run.
func (s *State) Resent(tok string) bool {
	_, ok := s.byToken[tok]
	return tok != "" && ok
}

func (s *State) queueFull(n int) *Error {
	if s.pending+n > MaxPendingJobs {
		return errf(CodeQueueFull, "", "the job queue is full (%d unfinished jobs, limit %d); wait for jobs to finish", s.pending, MaxPendingJobs)
	}
	return nil
}

func (s *State) applyJobSubmit(c *JobSubmit) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	if c.Token != "" {
		if e := CheckSubmitToken(c.Token); e != nil {
			return Response{Err: e}
		}
		if id, ok := s.byToken[c.Token]; ok {
			// A resent submission: answer with the job the first one
			// made, and the index that made it, and change nothing. A
			// token that made several jobs at once is not this one's.
			if _, many := s.byToken[ManyJobToken(c.Token, 1)]; many {
				return Response{Err: errf(CodeState, "token", "submission %q was applied before with several jobs, and this resend has one", c.Token)}
			}
			return Response{JobID: id, Job: s.Jobs[id], Index: s.submitIndex(id)}
		}
	}
	ts := TimestampFromNanos(c.Now)
	job, ops, e := s.newJob(JobSpec{Ops: c.Ops, UUIDs: c.UUIDs}, s.NextJobID, s.NextJobID, ts)
	if e != nil {
		return Response{Err: e}
	}
	job.Token = c.Token
	// The fast path applies a configuration-only job at once. A job with
	// dependencies, or one whose locks a running opcode holds, waits in
	// the queue like any other.
	// A job that mixes dry-run opcodes with real ones is queued too: its
	// opcodes are applied one at a time (ActionApply), each dry run
	// dropped on its own.
	fast := true
	dry := 0
	for i, op := range ops {
		if IsDryRun(op) {
			dry++
		}
		if !IsConfigOnly(op) || len(job.Ops[i].Depends) > 0 || s.heldLocksConflict(op.Locks(s)) {
			fast = false
			break
		}
	}
	if dry > 0 && dry < len(ops) {
		fast = false
	}
	// Filter rules are applied by the executor's queue.
	if s.FiltersHold() {
		fast = false
	}
	if !fast {
		// A dry run of configuration opcodes that waits in the queue
		// (for locks or filter rules) is checked now as well, against
		// the configuration as it is, so that one the checks refuse is
		// refused as on the fast path (LogVersion 25): a submission
		// error, not a job failing later. One with dependencies waits
		// for what they change.
		if checkNow(job, ops) {
			if e := applyConfigOps(s.begin(c.Now), ops, c.UUIDs, nil); e != nil {
				return Response{Err: e}
			}
		}
		if e := s.queueFull(1); e != nil {
			return Response{Err: e}
		}
		s.queue(job)
		return Response{JobID: job.ID, Job: job}
	}
	t := s.begin(c.Now)
	dryRun := dry > 0 // then every opcode is a dry run
	if e := applyConfigOps(t, ops, c.UUIDs, func(i int, res any) {
		o := job.Ops[i]
		o.StartTS, o.ExecTS = ts, ts
		for _, l := range t.logs {
			job.LogSerial++
			o.Log = append(o.Log, LogEntry{Serial: job.LogSerial, Time: *ts, Type: LogMessage, Msg: l})
		}
		if dryRun {
			res = dryRunResult(ops[i], res, t.logs)
		}
		o.Result = mustJSON(res)
		o.Status = StatusSuccess
		o.EndTS = ts
		o.parsed = nil // only the executor wants it, and it never sees this job
	}); e != nil {
		return Response{Err: e}
	}
	if !dryRun {
		t.commit()
	}
	job.StartTS, job.EndTS = ts, ts
	job.Status = StatusSuccess
	s.store(job)
	s.touched = append(s.touched, job.ID)
	s.NextJobID++
	s.finish(job.ID, ts)
	return Response{JobID: job.ID, Job: job}
}

// checkNow says whether a queued job is a dry run of configuration
// opcodes alone with no dependencies, which its submission checks.
func checkNow(job *Job, ops []Opcode) bool {
	for i, op := range ops {
		if !IsDryRun(op) || !IsConfigOnly(op) || len(job.Ops[i].Depends) > 0 {
			return false
		}
	}
	return true
}

// applyConfigOps applies configuration opcodes in t, in order, each with
// its UUID, and calls done (when not nil) with each one's result while t's
// logs are its own; it stops at the first refusal, which names the opcode
// when there are several.
func applyConfigOps(t *txn, ops []Opcode, uuids []string, done func(i int, res any)) *Error {
	for i, op := range ops {
		t.logs = nil
		res, e := op.(configOp).apply(t, uuids[i])
		if e != nil {
			if len(ops) > 1 {
				e = &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d (%s): %s", i, op.Common().OpID, e.Msg)}
			}
			return e
		}
		if done != nil {
			done(i, res)
		}
	}
	return nil
}

func (s *State) applyJobSubmitMany(c *JobSubmitMany) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	if e := CheckSubmissionSize(len(c.Jobs), func(k int) int { return len(c.Jobs[k].Ops) }); e != nil {
		return Response{Err: e}
	}
	if c.Token != "" {
		if e := CheckSubmitToken(c.Token); e != nil {
			return Response{Err: e}
		}
		if _, ok := s.byToken[c.Token]; ok {
			return s.resentMany(c)
		}
	}
	if e := s.queueFull(len(c.Jobs)); e != nil {
		return Response{Err: e}
	}
	ts := TimestampFromNanos(c.Now)
	first := s.NextJobID
	jobs := make([]*Job, len(c.Jobs))
	for k, spec := range c.Jobs {
		job, ops, e := s.newJob(spec, first+int64(k), first, ts)
		if e == nil && checkNow(job, ops) {
			// As a single submission's queued dry run (applyJobSubmit).
			e = applyConfigOps(s.begin(c.Now), ops, spec.UUIDs, nil)
		}
		if e != nil {
			return Response{Err: &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("job %d of the submission: %s", k, e.Msg)}}
		}
		if c.Token != "" {
			job.Token = ManyJobToken(c.Token, k)
		}
		jobs[k] = job
	}
	r := Response{}
	for _, job := range jobs {
		s.queue(job)
		r.JobIDs = append(r.JobIDs, job.ID)
	}
	return r
}

// resentMany answers a JobSubmitMany whose token names jobs already made:
// with their ids, and the index that made them, changing nothing. A
// resend must carry as many jobs as the first submission; when one of
// them is no longer held (dropped from the archive), or the resend names
// more or fewer jobs than were made, it is refused.
func (s *State) resentMany(c *JobSubmitMany) Response {
	r := Response{}
	for k := range c.Jobs {
		id, ok := s.byToken[ManyJobToken(c.Token, k)]
		if !ok {
			return Response{Err: errf(CodeState, "token", "submission %q was applied before, but job %d of it is no longer held (or it had fewer jobs than this resend)", c.Token, k)}
		}
		r.JobIDs = append(r.JobIDs, id)
	}
	if _, more := s.byToken[ManyJobToken(c.Token, len(c.Jobs))]; more {
		return Response{Err: errf(CodeState, "token", "submission %q was applied before with more jobs than the %d of this resend", c.Token, len(c.Jobs))}
	}
	r.Index = s.submitIndex(r.JobIDs[0])
	return r
}

// submitIndex is the index of the entry that made job id, active or
// archived (0 when the state does not hold it).
func (s *State) submitIndex(id int64) uint64 {
	if j := s.Jobs[id]; j != nil {
		return j.SubmitIndex
	}
	if a := s.Archived[id]; a != nil {
		return a.SubmitIndex
	}
	return 0
}

// finish records a finalized job and archives the oldest finished jobs
// beyond the retention limit.
func (s *State) finish(id int64, now *Timestamp) {
	s.Finished = append(s.Finished, id)
	for len(s.Finished) > MaxFinishedJobs {
		s.archive(s.Finished[0], now)
	}
}

// archive moves a finalized job into the archive.
func (s *State) archive(id int64, now *Timestamp) {
	j := s.Jobs[id]
	if j == nil {
		return
	}
	delete(s.Jobs, id)
	s.touched = append(s.touched, id)
	if len(s.Finished) > 0 && s.Finished[0] == id {
		s.Finished = s.Finished[1:] // the common case: the oldest
	} else {
		for i, f := range s.Finished {
			if f == id {
				copy(s.Finished[i:], s.Finished[i+1:])
				s.Finished = s.Finished[:len(s.Finished)-1]
				break
			}
		}
	}
	a := archivedFrom(j, now)
	s.Archived[id] = a
	// Ids are archived mostly in increasing order; keep archOrder sorted.
	i := len(s.archOrder)
	for i > 0 && s.archOrder[i-1].ID > id {
		i--
	}
	s.archOrder = append(s.archOrder, nil)
	copy(s.archOrder[i+1:], s.archOrder[i:])
	s.archOrder[i] = a
	for len(s.archOrder) > MaxArchivedJobs {
		old := s.archOrder[0]
		if old.Token != "" {
			delete(s.byToken, old.Token)
		}
		delete(s.Archived, old.ID)
		delete(s.modIndex, old.ID)
		s.archOrder[0] = nil // let the dropped record go
		s.archOrder = s.archOrder[1:]
	}
}

func (s *State) applyJobArchive(c *JobArchive) Response {
	if c.Epoch != 0 && c.Epoch != s.Epoch {
		return Response{Err: errf(CodeFenced, "epoch", "archive from executor epoch %d refused: the current epoch is %d", c.Epoch, s.Epoch)}
	}
	ts := TimestampFromNanos(c.Now)
	var ids []int64
	for _, id := range c.IDs {
		if e := s.CheckArchive(id); e != nil {
			return Response{Err: e}
		}
		if s.Jobs[id] != nil { // else archived already: nothing to do
			ids = append(ids, id)
		}
	}
	if c.OlderThan > 0 {
		cut := c.Now - c.OlderThan
		for _, id := range s.Finished {
			j := s.Jobs[id]
			if j != nil && j.EndTS != nil && j.EndTS.UnixNano() < cut {
				ids = append(ids, id)
			}
		}
	}
	for _, id := range ids {
		s.archive(id, ts)
	}
	return Response{JobIDs: ids}
}

// canceledResult is Ganeti's result for opcodes canceled by request.
var canceledResult = json.RawMessage(`"Job canceled by request"`)

func (s *State) applyJobCancel(c *JobCancel) Response {
	if e := s.CheckCancel(c.JobID); e != nil {
		return Response{Err: e}
	}
	old := s.Jobs[c.JobID]
	if c.Filter != "" {
		return s.filterReject(c, old)
	}
	if old.CancelRequested {
		return Response{JobID: old.ID, Job: old}
	}
	job := old.clone()
	ts := TimestampFromNanos(c.Now)
	who := c.Who
	if who == "" {
		who = "an operator"
	}
	started := false
	for _, op := range job.Ops {
		if op.Status == StatusRunning {
			started = true
		}
	}
	if started {
		// Canceled at the next step boundary; the opcodes not started
		// yet show canceling until then.
		job.CancelRequested = true
		for _, op := range job.Ops {
			if op.Status == StatusQueued || op.Status == StatusWaiting {
				op.Status = StatusCanceling
			}
		}
		job.addLog(job.Ops[job.CurrentOp()], ts, "cancel requested by "+who+"; the job stops at its next step boundary")
		return s.storeJob(job, ts)
	}
	cur := job.CurrentOp()
	job.addLog(job.Ops[cur], ts, "canceled by "+who+" before it started")
	job.cancelFrom(cur, ts)
	return s.storeJob(job, ts)
}

// filterReject cancels a job that has not started because the REJECT
// rule c.Filter applies to it (the executor decided so from the rules and
// the job); it is refused when the rule is no longer a REJECT rule, or
// the job started meanwhile.
func (s *State) filterReject(c *JobCancel, old *Job) Response {
	f := s.Filters[c.Filter]
	if f == nil || f.Action != FilterReject {
		return Response{Err: errf(CodeState, "filter", "filter %s is no longer a REJECT rule", c.Filter)}
	}
	cur := old.CurrentOp()
	if old.StartTS != nil || !old.Executor || cur < 0 || old.Ops[cur].Status != StatusQueued {
		return Response{Err: errf(CodeState, "job_id", "job %d has started; filter rules apply to jobs that have not", old.ID)}
	}
	job := old.clone()
	ts := TimestampFromNanos(c.Now)
	job.addLog(job.Ops[cur], ts, "rejected by filter rule "+c.Filter)
	for _, op := range job.Ops[cur:] {
		if !Finalized(op.Status) {
			op.Status, op.Result, op.EndTS = StatusCanceled, filterRejected(c.Filter), ts
		}
	}
	return s.storeJob(job, ts)
}

// addLog appends a log line to an opcode of the job.
func (j *Job) addLog(op *OpState, ts *Timestamp, lines ...string) {
	for _, l := range lines {
		j.LogSerial++
		op.Log = append(op.Log, LogEntry{Serial: j.LogSerial, Time: *ts, Type: LogMessage, Msg: l})
	}
}

// cancelFrom marks opcode idx and every later unfinished one canceled.
func (j *Job) cancelFrom(idx int, ts *Timestamp) {
	for _, op := range j.Ops[idx:] {
		if !Finalized(op.Status) {
			op.Status, op.Result, op.EndTS = StatusCanceled, canceledResult, ts
		}
	}
}

// storeJob stores a changed job, derives its status and keeps the queue
// indexes right.
func (s *State) storeJob(job *Job, ts *Timestamp) Response {
	job.Status = job.computeStatus()
	s.Jobs[job.ID] = job
	s.touched = append(s.touched, job.ID)
	if Finalized(job.Status) {
		job.EndTS = ts
		job.CancelRequested = false
		s.pending--
		delete(s.execPending, job.ID)
		s.finish(job.ID, ts)
		// Nothing runs a finished job's opcodes again: keep them as
		// their JSON input alone, as a restored state does (Opcode decodes
		// it if asked). At 20,000 instance creations retained the decoded
		// opcodes were 13 MB of the heap. job is this apply's own copy.
		for _, op := range job.Ops {
			op.parsed = nil
		}
	}
	s.trackHolding(job)
	return Response{JobID: job.ID, Job: job}
}

func (s *State) applyJobUpdate(c *JobUpdate) Response {
	if c.Epoch != s.Epoch {
		return Response{Err: errf(CodeFenced, "epoch", "job update from executor epoch %d refused: the current epoch is %d", c.Epoch, s.Epoch)}
	}
	old := s.Jobs[c.JobID]
	if old == nil {
		return Response{Err: errf(CodeNoEnt, "job_id", "job %d does not exist", c.JobID)}
	}
	if Finalized(old.Status) {
		return Response{Err: errf(CodeState, "job_id", "job %d is already %s", c.JobID, old.Status)}
	}
	if c.OpIndex < 0 || c.OpIndex >= len(old.Ops) {
		return Response{Err: errf(CodeInval, "op_index", "job %d has no opcode %d", c.JobID, c.OpIndex)}
	}
	for i := 0; i < c.OpIndex; i++ {
		if old.Ops[i].Status != StatusSuccess {
			return Response{Err: errf(CodeState, "op_index", "opcode %d of job %d is %s; opcodes run in order", i, c.JobID, old.Ops[i].Status)}
		}
	}
	if e := c.validateSurvival(); e != nil {
		return Response{Err: e}
	}
	job := old.clone()
	op := job.Ops[c.OpIndex]
	ts := TimestampFromNanos(c.Now)
	notStarted := op.Status == StatusQueued || op.Status == StatusWaiting
	canceling := job.CancelRequested || op.Status == StatusCanceling
	start := func() {
		op.Status = StatusRunning
		op.StartTS, op.ExecTS = ts, ts
		if job.StartTS == nil {
			job.StartTS = ts
		}
	}
	var t *txn
	switch c.Action {
	case ActionWait:
		if op.Status != StatusQueued {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s, not queued", c.OpIndex, c.JobID, op.Status)}
		}
		op.Status = StatusWaiting
		if op.StartTS == nil {
			op.StartTS = ts
		}
		job.addLog(op, ts, c.Log...)
	case ActionStart:
		if !notStarted {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s, not queued", c.OpIndex, c.JobID, op.Status)}
		}
		start()
		op.Locks = c.Locks
		job.addLog(op, ts, c.Log...)
		job.attempt(op, c, ts, s.masterName())
	case ActionAttempt:
		if op.Status != StatusRunning {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s, not running: only a started opcode is resumed", c.OpIndex, c.JobID, op.Status)}
		}
		job.addLog(op, ts, c.Log...)
		if job.CancelRequested {
			job.addLog(op, ts, fmt.Sprintf("canceled as requested before the executor of epoch %d resumed it", c.Epoch))
			job.cancelFrom(c.OpIndex, ts)
			break
		}
		job.attempt(op, c, ts, s.masterName())
	case ActionStep:
		if op.Status != StatusRunning {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s, not running", c.OpIndex, c.JobID, op.Status)}
		}
		if c.Step < len(op.Steps) {
			return Response{Err: errf(CodeState, "step", "step %d of opcode %d of job %d is recorded already (%d steps done)", c.Step, c.OpIndex, c.JobID, len(op.Steps))}
		}
		if c.Step > len(op.Steps) {
			return Response{Err: errf(CodeState, "step", "step %d of opcode %d of job %d is out of order: %d steps are recorded", c.Step, c.OpIndex, c.JobID, len(op.Steps))}
		}
		op.Steps = append(op.Steps, StepRecord{Name: c.StepName, Result: c.Result, Epoch: c.Epoch, Time: ts})
		job.addLog(op, ts, c.Log...)
		if job.CancelRequested {
			job.addLog(op, ts, fmt.Sprintf("canceled after step %d (%s) as requested", c.Step+1, c.StepName))
			job.cancelFrom(c.OpIndex, ts)
		}
	case ActionFinish:
		if op.Status != StatusRunning && !notStarted {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s, not running", c.OpIndex, c.JobID, op.Status)}
		}
		if c.Status != StatusSuccess && c.Status != StatusError {
			return Response{Err: errf(CodeInval, "status", "final opcode status must be success or error, got %q", c.Status)}
		}
		if notStarted {
			start()
		}
		job.addLog(op, ts, c.Log...)
		op.Status, op.Result, op.EndTS = c.Status, c.Result, ts
		if canceling && op.Status == StatusSuccess && c.OpIndex+1 < len(job.Ops) {
			job.cancelFrom(c.OpIndex+1, ts)
		}
	case ActionCancel:
		job.addLog(op, ts, c.Log...)
		job.cancelFrom(c.OpIndex, ts)
	case ActionPriority:
		if !notStarted {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s; only waiting opcodes change priority", c.OpIndex, c.JobID, op.Status)}
		}
		if op.Priority > PrioHighest {
			op.Priority--
		}
		job.addLog(op, ts, c.Log...)
	case ActionApply:
		if op.Status != StatusRunning && !notStarted {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s", c.OpIndex, c.JobID, op.Status)}
		}
		parsed, err := ParseOpcode(op.Input)
		if err != nil {
			return Response{Err: AsError(err)}
		}
		cop, ok := parsed.(configOp)
		if !ok {
			return Response{Err: errf(CodeInval, "action", "%s is not a configuration opcode", parsed.Common().OpID)}
		}
		if notStarted {
			start()
		}
		t = s.begin(c.Now)
		res, e := cop.apply(t, op.UUID)
		job.addLog(op, ts, t.logs...)
		op.EndTS = ts
		dry := IsDryRun(parsed)
		if dry {
			res = dryRunResult(parsed, res, t.logs)
		}
		if e != nil || dry {
			t = nil // a dry run is checked and described; the configuration stays
		}
		if e != nil {
			op.Status, op.Result = StatusError, ErrorResult(e)
		} else {
			op.Status, op.Result = StatusSuccess, mustJSON(res)
			if canceling && c.OpIndex+1 < len(job.Ops) {
				job.cancelFrom(c.OpIndex+1, ts)
			}
		}
	default:
		return Response{Err: errf(CodeInval, "action", "unknown job update action %q", c.Action)}
	}
	if len(c.Changes) > 0 {
		if parsed, err := op.Opcode(); err == nil && IsDryRun(parsed) {
			return Response{Err: errf(CodeInval, "changes", "opcode %d of job %d is a dry run: it changes no configuration", c.OpIndex, c.JobID)}
		}
		if !(c.Action == ActionStep || (c.Action == ActionFinish && c.Status == StatusSuccess)) {
			return Response{Err: errf(CodeInval, "changes", "configuration changes ride only on a step record or a successful finish, not on %s", c.Action)}
		}
		t = s.begin(c.Now)
		t.job = c.JobID
		for k, ch := range c.Changes {
			if e := ch.apply(t); e != nil {
				return Response{Err: &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("change %d of step %q: %s", k, c.StepName, e.Msg)}}
			}
		}
	}
	if op.Status == StatusError {
		for _, rest := range job.Ops[c.OpIndex+1:] {
			rest.Status = StatusError
			rest.Result = mustJSON("Error in previous opcode")
			rest.EndTS = ts
		}
	}
	if t != nil {
		t.commit()
	}
	return s.storeJob(job, ts)
}

// CheckJobs validates a submission of jobs against the state without
// changing it: opcodes, and dependencies resolved as the submission's
// jobs would be numbered. The API runs it on the leader before a write,
// so input that is wrong for the current state costs no Raft round trip;
// Apply checks again.
func (s *State) CheckJobs(specs []JobSpec) *Error {
	ts := &Timestamp{}
	for k, spec := range specs {
		if _, _, e := s.newJob(spec, s.NextJobID+int64(k), s.NextJobID, ts); e != nil {
			if len(specs) > 1 {
				return &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("job %d of the submission: %s", k, e.Msg)}
			}
			return e
		}
	}
	return nil
}

// CheckCancel reports why job id cannot be canceled, or nil.
func (s *State) CheckCancel(id int64) *Error {
	j := s.Jobs[id]
	switch {
	case j == nil && s.Archived[id] != nil:
		return errf(CodeState, "job_id", "job %d is archived (it finished as %s)", id, s.Archived[id].Status)
	case j == nil:
		return errf(CodeNoEnt, "job_id", "job %d does not exist", id)
	case Finalized(j.Status):
		return errf(CodeState, "job_id", "job %d is already %s; only queued, waiting and running jobs can be canceled", id, j.Status)
	}
	return nil
}

// CheckArchive reports why job id cannot be archived, or nil.
func (s *State) CheckArchive(id int64) *Error {
	j := s.Jobs[id]
	switch {
	case j == nil && s.Archived[id] != nil:
		return nil
	case j == nil:
		return errf(CodeNoEnt, "job_id", "job %d does not exist", id)
	case !Finalized(j.Status):
		return errf(CodeState, "job_id", "job %d is %s; only finished jobs can be archived", id, j.Status)
	}
	return nil
}
