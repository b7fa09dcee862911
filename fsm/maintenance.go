package fsm

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The maintenance state: maintd's incidents and round, the repair limits
// the operator set, and the fencing records of harep. As in Ganeti it is
// one top-level entry of the configuration ("maintenance"), so it survives
// a failover with everything else; gnt's own fields carry a gnt_ prefix.
//
// Incident and round changes are written by the leader's maintd with
// RepairRound (fenced by the executor epoch); operators change the
// parameters with OP_CLUSTER_SET_PARAMS and cancel or forget incidents
// with MaintIncident. Neither changes the configuration serial_no unless
// it also changes tags (which are configuration).

// Self-diagnose actions, ordered by how invasive they are.
const (
	ActionOk               = "Ok"
	ActionLiveRepair       = "live-repair"
	ActionEvacuate         = "evacuate"
	ActionEvacuateFailover = "evacuate-failover"
)

// ActionRank orders the self-diagnose actions (Ok 0 ... evacuate-failover
// 3); an unknown action ranks -1.
func ActionRank(a string) int {
	switch a {
	case ActionOk:
		return 0
	case ActionLiveRepair:
		return 1
	case ActionEvacuate:
		return 2
	case ActionEvacuateFailover:
		return 3
	}
	return -1
}

// Incident repair statuses, in Ganeti's order; a status after pending is
// final.
const (
	IncidentNoted     = "noted"
	IncidentPending   = "pending"
	IncidentCanceled  = "canceled"
	IncidentFailed    = "failed"
	IncidentCompleted = "completed"
)

// IncidentFinal reports whether an incident status is final (after pending).
func IncidentFinal(status string) bool {
	switch status {
	case IncidentCanceled, IncidentFailed, IncidentCompleted:
		return true
	}
	return false
}

// maintd's node tag prefixes (followed by the incident id) and the reason
// source of every opcode it submits.
const (
	MaintdReadyTagPrefix  = "maintd:repairready:"
	MaintdFailedTagPrefix = "maintd:repairfailed:"
	MaintdReasonSource    = "gnt:daemon:maintd"
)

// Defaults of the maintenance parameters.
const (
	DefaultRoundDelay       = 300 // seconds, Ganeti's maintdDefaultRoundDelay
	DefaultBalanceThreshold = 0.1
	DefaultBalanceMaxMoves  = 5
	MaxBalanceMaxMoves      = 1000
	DefaultDeadGrace        = 60.0 // seconds
	DefaultBreakerShare     = 0.3
	DefaultBreakerNodes     = 10
	DefaultMaxEvacuations   = 1
	DefaultRoundJobLimit    = 50
	DefaultRepairJobDelay   = 10.0 // seconds, harep's --job-delay
	DefaultDiagnoseInterval = 60.0 // seconds
)

// MaxIncidentOriginalBytes bounds an incident's original (the node's
// self-diagnose result as JSON); RepairRound refuses a new incident with
// a longer one, so maintd checks reports against it before noting them.
const MaxIncidentOriginalBytes = 16 << 10

// Incident is one repair event maintd observed, with Ganeti's JSON keys.
type Incident struct {
	UUID string `json:"uuid"`
	// Node is the node's name (as Ganeti's maintd records it); NodeUUID
	// its UUID.
	Node     string `json:"node"`
	NodeUUID string `json:"node_uuid"`
	// Original is the self-diagnose result exactly as the collector
	// reported it (canonical JSON): the same node and the same original
	// are the same incident.
	Original     json.RawMessage `json:"original"`
	Action       string          `json:"action"`
	RepairStatus string          `json:"repair-status"`
	Jobs         []int64         `json:"jobs"`
	// Tag is the tag added to the node when the incident ends, or to be
	// added if it succeeds.
	Tag      string  `json:"tag"`
	SerialNo int64   `json:"serial_no"`
	CTime    float64 `json:"ctime"`
	MTime    float64 `json:"mtime"`
	// Reason says, in words, what maintd last decided for the incident.
	Reason string `json:"gnt_reason,omitempty"`
}

// RepairParams are gnt's limits on automatic repair (none of them exists
// in Ganeti).
type RepairParams struct {
	// DeadGrace is how long (seconds) a node must be dead in gossip before
	// harep treats it as down.
	DeadGrace float64 `json:"dead_grace"`
	// The circuit breaker opens when more than BreakerShare of the nodes,
	// or more than BreakerNodes nodes (0: no count limit), are unhealthy.
	BreakerShare float64 `json:"breaker_share"`
	BreakerNodes int     `json:"breaker_nodes"`
	// BreakerOverrideUntil (Unix seconds) keeps the breaker closed until
	// then, whatever it counts: an operator's override.
	BreakerOverrideUntil int64 `json:"breaker_override_until"`
	// MaxEvacuations is how many nodes may be evacuated at once.
	MaxEvacuations int `json:"max_evacuations"`
	// RoundJobLimit is how many jobs one round may submit.
	RoundJobLimit int `json:"round_job_limit"`
	// JobDelay (seconds) is the OP_TEST_DELAY harep puts before its
	// repair opcodes, as Ganeti's harep --job-delay.
	JobDelay float64 `json:"job_delay"`
	// DiagnoseInterval (seconds) is how often the leader polls every
	// node's self-diagnose collector.
	DiagnoseInterval float64 `json:"diagnose_interval"`
}

// DefaultRepairParams are the limits of a new cluster.
func DefaultRepairParams() RepairParams {
	return RepairParams{
		DeadGrace: DefaultDeadGrace, BreakerShare: DefaultBreakerShare, BreakerNodes: DefaultBreakerNodes,
		MaxEvacuations: DefaultMaxEvacuations, RoundJobLimit: DefaultRoundJobLimit,
		JobDelay: DefaultRepairJobDelay, DiagnoseInterval: DefaultDiagnoseInterval,
	}
}

// Fence records that harep asked for a dead node to be powered off before
// failing its instances over: the job that does it, and the death it
// answers (the node's LivenessSince), so a failed fencing is not retried
// for the same death.
type Fence struct {
	Node      string  `json:"node"` // node name
	JobID     int64   `json:"job_id"`
	DeadSince int64   `json:"dead_since"`
	CTime     float64 `json:"ctime"`
}

// Maintenance is maintd's state, Ganeti's top-level "maintenance" entry.
type Maintenance struct {
	RoundDelay       int64       `json:"roundDelay"`
	Jobs             []int64     `json:"jobs"`
	Balance          bool        `json:"balance"`
	BalanceThreshold float64     `json:"balanceThreshold"`
	Evacuated        []string    `json:"evacuated"`
	Incidents        []*Incident `json:"incidents"`
	SerialNo         int64       `json:"serial_no"`
	CTime            float64     `json:"ctime"`
	MTime            float64     `json:"mtime"`

	Repair RepairParams `json:"gnt_repair"`
	// Round counts the rounds that submitted or resolved something;
	// LastRound is when the last of them was recorded (Unix seconds).
	Round     int64   `json:"gnt_round"`
	LastRound float64 `json:"gnt_last_round"`
	// Fences are harep's fencing records by node UUID.
	Fences map[string]*Fence `json:"gnt_fences"`
	// Harep says whether maintd does harep's work (instance autorepair
	// by tags); nil, in a record written before the switch existed,
	// means on, as it was then. A new cluster's is off (seed 002: "The
	// default will be to do neither of those tasks").
	Harep *bool `json:"gnt_harep,omitempty"`
	// BalanceMaxMoves is how many balancing moves one round makes at
	// most (no two touching the same node); 0, in a record written
	// before it existed, means DefaultBalanceMaxMoves.
	BalanceMaxMoves int `json:"gnt_balance_max_moves,omitempty"`
}

// MaxMoves is how many balancing moves one round makes at most.
func (m *Maintenance) MaxMoves() int {
	if m.BalanceMaxMoves <= 0 {
		return DefaultBalanceMaxMoves
	}
	return m.BalanceMaxMoves
}

// HarepOn reports whether maintd does harep's work.
func (m *Maintenance) HarepOn() bool { return m.Harep == nil || *m.Harep }

// DefaultMaintenance is the maintenance state of a new cluster.
func DefaultMaintenance() *Maintenance {
	return &Maintenance{
		RoundDelay: DefaultRoundDelay, BalanceThreshold: DefaultBalanceThreshold,
		Jobs: []int64{}, Evacuated: []string{}, Incidents: []*Incident{},
		Repair: DefaultRepairParams(), Fences: map[string]*Fence{},
	}
}

func (m *Maintenance) clone() *Maintenance {
	x := *m
	x.Jobs = append([]int64{}, m.Jobs...)
	x.Evacuated = cloneStrings(m.Evacuated)
	x.Incidents = make([]*Incident, len(m.Incidents))
	for i, in := range m.Incidents {
		c := *in
		c.Jobs = append([]int64{}, in.Jobs...)
		x.Incidents[i] = &c
	}
	x.Fences = make(map[string]*Fence, len(m.Fences))
	for k, f := range m.Fences {
		c := *f
		x.Fences[k] = &c
	}
	return &x
}

// normalize fills what an older snapshot or a zero value lacks.
func (m *Maintenance) normalize() {
	if m.Jobs == nil {
		m.Jobs = []int64{}
	}
	if m.Evacuated == nil {
		m.Evacuated = []string{}
	}
	if m.Incidents == nil {
		m.Incidents = []*Incident{}
	}
	if m.Fences == nil {
		m.Fences = map[string]*Fence{}
	}
}

// Maint returns the maintenance state (the defaults when none was ever
// written). Callers must not modify it.
func (s *State) Maint() *Maintenance {
	if s.Maintenance == nil {
		return defaultMaint
	}
	return s.Maintenance
}

var defaultMaint = DefaultMaintenance()

// Incident returns the incident with the given id, or nil.
func (m *Maintenance) Incident(id string) *Incident {
	for _, in := range m.Incidents {
		if in.UUID == id {
			return in
		}
	}
	return nil
}

// BreakerOverridden reports whether an operator's override keeps the
// circuit breaker closed at nowNS.
func (p RepairParams) BreakerOverridden(nowNS int64) bool {
	return p.BreakerOverrideUntil > 0 && p.BreakerOverrideUntil*1e9 > nowNS
}

// JobRef names a job in a RepairRound: a positive value is a job id, a
// negative one the job of the round's Jobs at index -ref-1 (so -1 is its
// first job), whose id is known only when the round is applied.
type JobRef = int64

// RoundJob is the ref of the round's job k.
func RoundJob(k int) JobRef { return JobRef(-k - 1) }

// TagText is a tag to add; when Jobs is not empty the resolved job ids,
// joined by '+', are appended to Text (harep's pending and result tags
// and maintd's end with the job list).
type TagText struct {
	Text string   `json:"text"`
	Jobs []JobRef `json:"jobs,omitempty"`
	// WithJobs appends the job list even when Jobs is empty (a pending
	// tag with no job yet ends in ':').
	WithJobs bool `json:"with_jobs,omitempty"`
}

// TagEdit adds and removes tags of one object. Removing a tag that is not
// there and adding one that is are no-ops: an operator may have changed
// the tags since the round was planned.
type TagEdit struct {
	Kind   string    `json:"kind"` // cluster, nodegroup, node, instance
	Name   string    `json:"name"` // name or UUID; empty for the cluster
	Add    []TagText `json:"add,omitempty"`
	Remove []string  `json:"remove,omitempty"`
}

// IncidentEdit creates, changes or forgets an incident.
type IncidentEdit struct {
	// New creates the incident (status noted unless set).
	New    *Incident `json:"new,omitempty"`
	UUID   string    `json:"uuid,omitempty"`
	Status string    `json:"status,omitempty"`
	// AddJobs are appended to the incident's jobs.
	AddJobs []JobRef `json:"add_jobs,omitempty"`
	Reason  *string  `json:"reason,omitempty"`
	// Tag replaces the incident's tag (a failed incident's is the
	// repairfailed tag its node got).
	Tag    *string `json:"tag,omitempty"`
	Forget bool    `json:"forget,omitempty"`
}

// FenceEdit records or clears a fencing record.
type FenceEdit struct {
	NodeUUID  string `json:"node_uuid"`
	Clear     bool   `json:"clear,omitempty"`
	Job       JobRef `json:"job,omitempty"`
	DeadSince int64  `json:"dead_since,omitempty"`
}

// RepairRound is what one maintd round decided, applied in one
// transaction: the jobs it submits (together, so they run in parallel),
// the tags that name them, the incidents and fencing records that follow
// them, and maintd's list of jobs to wait for. Jobs, tags and incidents
// commit together or not at all, so a leader that dies in the middle of a
// round leaves either no trace of it or all of it: no repair job without
// the pending tag that accounts for it.
type RepairRound struct {
	Now       int64          `json:"now"`
	Epoch     uint64         `json:"epoch"`
	Jobs      []JobSpec      `json:"jobs,omitempty"`
	Tags      []TagEdit      `json:"tags,omitempty"`
	Incidents []IncidentEdit `json:"incidents,omitempty"`
	Fences    []FenceEdit    `json:"fences,omitempty"`
	// RoundJobs, when not nil, replaces maintd's list of jobs to wait for.
	RoundJobs *[]JobRef `json:"round_jobs,omitempty"`
	// Evacuated, when not nil, replaces the list of instances moved
	// without load data (Ganeti's "evacuated").
	Evacuated *[]string `json:"evacuated,omitempty"`
	// CountRound counts a round (Round+1, LastRound = Now).
	CountRound bool `json:"count_round,omitempty"`
}

// CommandType implements Command.
func (RepairRound) CommandType() CommandType { return CmdRepairRound }

// Operator actions on an incident.
const (
	IncidentActionCancel = "cancel" // do nothing more for it; forget it once no longer observed
	IncidentActionForget = "forget" // forget it now (Ganeti's gnt-cluster remove-repair)
)

// MaintIncident is an operator's action on one incident.
type MaintIncident struct {
	Now    int64  `json:"now"`
	UUID   string `json:"uuid"`
	Action string `json:"action"`
}

// CommandType implements Command.
func (MaintIncident) CommandType() CommandType { return CmdMaintIncident }

func (s *State) maintRW() *Maintenance {
	if s.Maintenance == nil {
		return DefaultMaintenance()
	}
	return s.Maintenance.clone()
}

func (s *State) applyMaintIncident(c *MaintIncident) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	m := s.maintRW()
	idx := -1
	for i, in := range m.Incidents {
		if in.UUID == c.UUID {
			idx = i
		}
	}
	if idx < 0 {
		return Response{Err: errf(CodeNoEnt, "uuid", "no incident %q", c.UUID)}
	}
	in := m.Incidents[idx]
	switch c.Action {
	case IncidentActionCancel:
		if in.RepairStatus == IncidentCompleted || in.RepairStatus == IncidentFailed {
			return Response{Err: errf(CodeState, "uuid", "incident %s is %s already; remove its node tag %s to forget it", in.UUID, in.RepairStatus, in.Tag)}
		}
		in.RepairStatus = IncidentCanceled
		in.Reason = "canceled by an operator"
		in.SerialNo++
		in.MTime = secs(c.Now)
	case IncidentActionForget:
		m.Incidents = append(m.Incidents[:idx], m.Incidents[idx+1:]...)
	default:
		return Response{Err: errf(CodeInval, "action", "unknown incident action %q (cancel or forget)", c.Action)}
	}
	s.commitMaint(m, c.Now)
	return Response{}
}

func (s *State) commitMaint(m *Maintenance, now int64) {
	m.SerialNo++
	m.MTime = secs(now)
	if m.CTime == 0 {
		m.CTime = m.MTime
	}
	s.Maintenance = m
}

// resolveRef turns a JobRef into a job id given the ids of the round's
// jobs.
func resolveRef(r JobRef, ids []int64) (int64, *Error) {
	if r > 0 {
		return r, nil
	}
	k := int(-r - 1)
	if r == 0 || k >= len(ids) {
		return 0, errf(CodeInval, "jobs", "job reference %d names no job of the round (it has %d)", r, len(ids))
	}
	return ids[k], nil
}

// JoinJobs formats job ids as harep's tags do: joined by '+'.
func JoinJobs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, "+")
}

func (s *State) applyRepairRound(c *RepairRound) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	if c.Epoch == 0 || c.Epoch != s.Epoch {
		return Response{Err: errf(CodeFenced, "epoch", "repair round from executor epoch %d refused: the current epoch is %d", c.Epoch, s.Epoch)}
	}
	if len(c.Jobs) > 0 {
		if e := s.queueFull(len(c.Jobs)); e != nil {
			return Response{Err: e}
		}
	}
	ts := TimestampFromNanos(c.Now)
	first := s.NextJobID
	jobs := make([]*Job, len(c.Jobs))
	ids := make([]int64, len(c.Jobs))
	for k, spec := range c.Jobs {
		job, _, e := s.newJob(spec, first+int64(k), first, ts)
		if e != nil {
			return Response{Err: &Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("job %d of the round: %s", k, e.Msg)}}
		}
		jobs[k], ids[k] = job, job.ID
	}
	ref := func(rs []JobRef) ([]int64, *Error) {
		out := make([]int64, 0, len(rs))
		for _, r := range rs {
			id, e := resolveRef(r, ids)
			if e != nil {
				return nil, e
			}
			out = append(out, id)
		}
		return out, nil
	}

	// Tags, staged in a transaction.
	t := s.begin(c.Now)
	for _, te := range c.Tags {
		list, e := t.tagList(te.Kind, te.Name)
		if e != nil {
			if e.Code == CodeNoEnt {
				continue // the object went away since the round was planned
			}
			return Response{Err: e}
		}
		for _, x := range te.Remove {
			if i := sort.SearchStrings(*list, x); i < len(*list) && (*list)[i] == x {
				*list = append((*list)[:i], (*list)[i+1:]...)
			}
		}
		for _, a := range te.Add {
			tag := a.Text
			if len(a.Jobs) > 0 || a.WithJobs {
				js, e := ref(a.Jobs)
				if e != nil {
					return Response{Err: e}
				}
				tag += JoinJobs(js)
			}
			if e := ValidateTag(tag); e != nil {
				return Response{Err: e}
			}
			i := sort.SearchStrings(*list, tag)
			if i < len(*list) && (*list)[i] == tag {
				continue
			}
			if len(*list) >= MaxTagsPerObj {
				return Response{Err: errf(CodeState, "tags", "too many tags on %s %s (at most %d per object)", te.Kind, te.Name, MaxTagsPerObj)}
			}
			*list = append(*list, "")
			copy((*list)[i+1:], (*list)[i:])
			(*list)[i] = tag
		}
	}

	// Maintenance: incidents, fences, round.
	m := s.maintRW()
	for _, ie := range c.Incidents {
		if ie.New != nil {
			in := *ie.New
			if in.UUID == "" || m.Incident(in.UUID) != nil {
				return Response{Err: errf(CodeInval, "incidents", "new incident needs a fresh uuid, got %q", in.UUID)}
			}
			if len(in.Original) > MaxIncidentOriginalBytes {
				return Response{Err: errf(CodeInval, "incidents", "incident original is %d bytes, at most %d", len(in.Original), MaxIncidentOriginalBytes)}
			}
			if in.RepairStatus == "" {
				in.RepairStatus = IncidentNoted
			}
			if in.Jobs == nil {
				in.Jobs = []int64{}
			}
			in.SerialNo, in.CTime, in.MTime = 1, secs(c.Now), secs(c.Now)
			m.Incidents = append(m.Incidents, &in)
			continue
		}
		idx := -1
		for i, in := range m.Incidents {
			if in.UUID == ie.UUID {
				idx = i
			}
		}
		if idx < 0 {
			return Response{Err: errf(CodeNoEnt, "incidents", "no incident %q", ie.UUID)}
		}
		if ie.Forget {
			m.Incidents = append(m.Incidents[:idx], m.Incidents[idx+1:]...)
			continue
		}
		in := m.Incidents[idx]
		if ie.Status != "" {
			in.RepairStatus = ie.Status
		}
		js, e := ref(ie.AddJobs)
		if e != nil {
			return Response{Err: e}
		}
		in.Jobs = append(in.Jobs, js...)
		if ie.Reason != nil {
			in.Reason = *ie.Reason
		}
		if ie.Tag != nil {
			if e := ValidateTag(*ie.Tag); e != nil {
				return Response{Err: e}
			}
			in.Tag = *ie.Tag
		}
		in.SerialNo++
		in.MTime = secs(c.Now)
	}
	for _, fe := range c.Fences {
		if fe.Clear {
			delete(m.Fences, fe.NodeUUID)
			continue
		}
		n := s.Nodes[fe.NodeUUID]
		if n == nil {
			continue
		}
		id, e := resolveRef(fe.Job, ids)
		if e != nil {
			return Response{Err: e}
		}
		m.Fences[fe.NodeUUID] = &Fence{Node: n.Name, JobID: id, DeadSince: fe.DeadSince, CTime: secs(c.Now)}
	}
	if c.RoundJobs != nil {
		js, e := ref(*c.RoundJobs)
		if e != nil {
			return Response{Err: e}
		}
		m.Jobs = js
	}
	if c.Evacuated != nil {
		m.Evacuated = cloneStrings(*c.Evacuated)
	}
	if c.CountRound {
		m.Round++
		m.LastRound = secs(c.Now)
	}

	// Everything validated: commit.
	t.commit()
	s.commitMaint(m, c.Now)
	r := Response{}
	for _, job := range jobs {
		s.queue(job)
		r.JobIDs = append(r.JobIDs, job.ID)
	}
	return r
}
