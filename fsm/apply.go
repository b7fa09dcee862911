package fsm

import (
	"encoding/json"
	"fmt"
)

func (s *State) applyClusterInit(c *ClusterInit) *Error {
	if s.Cluster != nil {
		return errf(CodeState, "", "cluster %q is already initialised", s.Cluster.Name)
	}
	if e := ValidateHostname("cluster_name", c.Name); e != nil {
		return e
	}
	if c.UUID == "" || c.GroupUUID == "" || c.Node.UUID == "" {
		return errf(CodeInval, "", "cluster init needs cluster, group and node UUIDs")
	}
	if e := ValidateHostname("node.name", c.Node.Name); e != nil {
		return e
	}
	if e := validateIP("node.primary_ip", c.Node.PrimaryIP, true); e != nil {
		return e
	}
	if e := validateNDParams("ndparams", c.NDParams); e != nil {
		return e
	}
	pool, voters := c.CandidatePoolSize, c.MaxVoters
	if pool == 0 {
		pool = DefaultCandidatePoolSize
	}
	if voters == 0 {
		voters = DefaultMaxVoters
	}
	if pool < 1 || voters < 1 || voters%2 == 0 {
		return errf(CodeInval, "", "candidate_pool_size must be positive and max_raft_voters odd, got %d and %d", pool, voters)
	}
	ts := secs(c.Now)
	sip := c.Node.SecondaryIP
	if sip == "" {
		sip = c.Node.PrimaryIP
	}
	nd := DefaultNDParams()
	for k, v := range c.NDParams {
		nd[k] = v
	}
	s.Cluster = &Cluster{
		Name: c.Name, UUID: c.UUID, SerialNo: 1, CTime: ts, MTime: ts,
		CandidatePoolSize: pool, MaxVoters: voters, DefaultIAllocator: "hail",
		NDParams: nd, Tags: []string{}, MasterNode: c.Node.UUID,
	}
	s.Groups[c.GroupUUID] = &Group{
		Name: DefaultGroupName, UUID: c.GroupUUID, AllocPolicy: AllocPreferred,
		NDParams: map[string]any{}, Tags: []string{}, SerialNo: 1, CTime: ts, MTime: ts,
	}
	s.Nodes[c.Node.UUID] = &Node{
		Name: c.Node.Name, UUID: c.Node.UUID, Group: c.GroupUUID,
		PrimaryIP: c.Node.PrimaryIP, SecondaryIP: sip,
		MasterCandidate: true, MasterCapable: true, VMCapable: true, Powered: true,
		NDParams: map[string]any{}, Tags: []string{},
		Resources: c.Node.Resources, Addrs: c.Node.Addrs, Version: c.Node.Version,
		SerialNo: 1, CTime: ts, MTime: ts,
	}
	s.reindex()
	return nil
}

func (s *State) applyLeaderEstablish(c *LeaderEstablish) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	n := s.LookupNode(c.Node)
	if n == nil {
		return Response{Err: errf(CodeNoEnt, "node", "leader node %q is not in the configuration", c.Node)}
	}
	s.Epoch++
	if s.Cluster.MasterNode != n.UUID {
		t := s.begin(c.Now)
		t.clusterRW().MasterNode = n.UUID
		t.commit()
	}
	return Response{Epoch: s.Epoch}
}

func (s *State) applyNodeRegister(c *NodeRegister) *Error {
	if s.Cluster == nil {
		return errf(CodeState, "", "cluster is not initialised")
	}
	n := s.LookupNode(c.Node.Name)
	if n == nil {
		return errf(CodeNoEnt, "name", "node %q is not in the cluster configuration; add it with 'gnt node add'", c.Node.Name)
	}
	if n.Addrs == c.Node.Addrs && n.Resources == c.Node.Resources && n.Version == c.Node.Version {
		return nil
	}
	t := s.begin(c.Now)
	w := t.nodeRW(n.UUID)
	w.Addrs, w.Resources, w.Version = c.Node.Addrs, c.Node.Resources, c.Node.Version
	t.commit()
	return nil
}

// parseOps decodes and validates every opcode of a submission.
func parseOps(raw []json.RawMessage) ([]Opcode, *Error) {
	if len(raw) == 0 {
		return nil, errf(CodeInval, "ops", "a job needs at least one opcode")
	}
	ops := make([]Opcode, len(raw))
	for i, r := range raw {
		op, err := ParseOpcode(r)
		if err != nil {
			e := AsError(err)
			if len(raw) > 1 {
				e = &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d: %s", i, e.Msg)}
			}
			return nil, e
		}
		ops[i] = op
	}
	return ops, nil
}

func (s *State) applyJobSubmit(c *JobSubmit) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	ops, e := parseOps(c.Ops)
	if e != nil {
		return Response{Err: e}
	}
	if len(c.UUIDs) != len(ops) {
		return Response{Err: errf(CodeInval, "uuids", "submission carries %d UUIDs for %d opcodes", len(c.UUIDs), len(ops))}
	}
	executor := false
	for _, op := range ops {
		if !IsConfigOnly(op) {
			executor = true
		}
	}
	ts := TimestampFromNanos(c.Now)
	job := &Job{ID: s.NextJobID, ReceivedTS: ts, Executor: executor}
	for i, op := range ops {
		job.Ops = append(job.Ops, &OpState{
			Input: c.Ops[i], Status: StatusQueued, Priority: op.Common().PriorityOr(PrioNormal),
			Log: []LogEntry{}, UUID: c.UUIDs[i],
		})
		job.Summary = append(job.Summary, op.Summary())
	}
	if executor {
		if s.pending >= MaxPendingJobs {
			return Response{Err: errf(CodeQueueFull, "", "the job queue is full (%d unfinished jobs); wait for jobs to finish", s.pending)}
		}
		job.Status = StatusQueued
		s.Jobs[job.ID] = job
		s.NextJobID++
		s.pending++
		s.execPending[job.ID] = struct{}{}
		return Response{JobID: job.ID, Job: job}
	}
	// Fast path: the whole job is one configuration transaction.
	t := s.begin(c.Now)
	dryRun := false
	for i, op := range ops {
		o := job.Ops[i]
		o.StartTS, o.ExecTS = ts, ts
		if d := op.Common().DryRun; d != nil && *d {
			dryRun = true
		}
		t.logs = nil
		res, e := op.(configOp).apply(t, c.UUIDs[i])
		if e != nil {
			if len(ops) > 1 {
				e = &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d (%s): %s", i, op.Common().OpID, e.Msg)}
			}
			return Response{Err: e}
		}
		for _, l := range t.logs {
			job.LogSerial++
			o.Log = append(o.Log, LogEntry{Serial: job.LogSerial, Time: *ts, Type: LogMessage, Msg: l})
		}
		o.Result = mustJSON(res)
		o.Status = StatusSuccess
		o.EndTS = ts
	}
	if !dryRun {
		t.commit()
	}
	job.StartTS, job.EndTS = ts, ts
	job.Status = StatusSuccess
	s.Jobs[job.ID] = job
	s.NextJobID++
	s.finish(job.ID)
	return Response{JobID: job.ID, Job: job}
}

// finish records a finalized job and drops the oldest finalized jobs
// beyond the retention limit.
func (s *State) finish(id int64) {
	s.Finished = append(s.Finished, id)
	for len(s.Finished) > MaxFinishedJobs {
		delete(s.Jobs, s.Finished[0])
		s.Finished = s.Finished[1:]
	}
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
	job := old.clone()
	op := job.Ops[c.OpIndex]
	ts := TimestampFromNanos(c.Now)
	addLog := func(lines []string) {
		for _, l := range lines {
			job.LogSerial++
			op.Log = append(op.Log, LogEntry{Serial: job.LogSerial, Time: *ts, Type: LogMessage, Msg: l})
		}
	}
	start := func() {
		op.Status = StatusRunning
		op.StartTS, op.ExecTS = ts, ts
		if job.StartTS == nil {
			job.StartTS = ts
		}
	}
	var t *txn
	switch c.Action {
	case ActionStart:
		if op.Status != StatusQueued && op.Status != StatusWaiting {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s, not queued", c.OpIndex, c.JobID, op.Status)}
		}
		start()
		addLog(c.Log)
	case ActionFinish:
		if op.Status != StatusRunning {
			return Response{Err: errf(CodeState, "action", "opcode %d of job %d is %s, not running", c.OpIndex, c.JobID, op.Status)}
		}
		if c.Status != StatusSuccess && c.Status != StatusError {
			return Response{Err: errf(CodeInval, "status", "final opcode status must be success or error, got %q", c.Status)}
		}
		addLog(c.Log)
		op.Status, op.Result, op.EndTS = c.Status, c.Result, ts
	case ActionApply:
		if op.Status != StatusRunning && op.Status != StatusQueued {
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
		if op.Status == StatusQueued {
			start()
		}
		t = s.begin(c.Now)
		res, e := cop.apply(t, op.UUID)
		addLog(t.logs)
		op.EndTS = ts
		if e != nil {
			t = nil
			op.Status, op.Result = StatusError, ErrorResult(e)
		} else {
			op.Status, op.Result = StatusSuccess, mustJSON(res)
		}
	default:
		return Response{Err: errf(CodeInval, "action", "unknown job update action %q", c.Action)}
	}
	if op.Status == StatusError {
		for _, rest := range job.Ops[c.OpIndex+1:] {
			rest.Status = StatusError
			rest.Result = mustJSON("Error in previous opcode")
			rest.EndTS = ts
		}
	}
	job.Status = job.computeStatus()
	if t != nil {
		t.commit()
	}
	s.Jobs[job.ID] = job
	if Finalized(job.Status) {
		job.EndTS = ts
		s.pending--
		delete(s.execPending, job.ID)
		s.finish(job.ID)
	}
	return Response{JobID: job.ID, Job: job}
}

// ErrorResult encodes an opcode failure as Ganeti does in opresult:
// ["OpPrereqError", [message, error code]].
func ErrorResult(e *Error) json.RawMessage {
	return mustJSON([]any{"OpPrereqError", []any{e.Msg, string(e.Code)}})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(err.Error())
	}
	return b
}
