package repair

import (
	"encoding/json"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Autorepair types, least destructive first (Ganeti's harep).
const (
	TypeFixStorage = "fix-storage"
	TypeMigrate    = "migrate"
	TypeFailover   = "failover"
	TypeReinstall  = "reinstall"
)

// Instance repair states, named as Ganeti's harep prints them, plus
// Suspended (the seed's state, which Ganeti folded into the policy).
const (
	StateHealthy     = "Healthy"
	StateSuspended   = "Suspended"
	StateNeedsRepair = "Needs repair"
	StatePending     = "Pending repair"
	StateFailed      = "Failure"
)

// Repair results of result tags.
const (
	ResultEnoperm = "enoperm"
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// HarepReasonSource is the reason-trail source of harep's opcodes.
const HarepReasonSource = "harep"

// Observation is the latest verified self-diagnose result of one node.
type Observation struct {
	Node    string    // node name
	Time    time.Time // when the node collected it
	Status  string    // fsm.Action*: Ok, live-repair, evacuate, evacuate-failover
	Command string    // the repair command, for live-repair
	// Original is the collector's result as canonical JSON: the same node
	// and the same Original are the same incident.
	Original json.RawMessage
}

// NodeDown is why a node counts as down for harep, or empty when it is
// not down.
type NodeDown struct {
	Why string // "offline", "drained", "dead for 1m5s"
	// Dead is set when the node is down only because gossip says it is
	// dead (not offline, not drained): its instances may be failed over
	// only after it was fenced.
	Dead bool
	// DeadSince is the node's LivenessSince when Dead.
	DeadSince int64
}

// FenceState is what fencing says about a node that is down only in
// gossip.
type FenceState struct {
	// Job is the fencing job instances' repairs wait for: an existing
	// job id, or a fsm.RoundJob ref of the round being planned.
	Job fsm.JobRef
	// Blocked, when not empty, says why the node's instances are not
	// repaired: "node has no OOB helper", "fencing failed (job 12)",
	// "circuit breaker open".
	Blocked string
}

// HarepInput is what one harep pass plans from. The planner is a pure
// function of it.
type HarepInput struct {
	State *fsm.State
	Now   time.Time
	// Down says, for a node UUID, whether and why it counts as down.
	Down func(nodeUUID string) NodeDown
	// Skip holds node UUIDs maintd is handling (evacuations): instances
	// with a primary or secondary there are left alone this round.
	Skip map[string]bool
	// Fence answers, for a node that is down only because it is dead in
	// gossip, which job fences it or why it cannot be fenced.
	Fence func(nodeUUID string) FenceState
	// NoNewRepairs, when not empty, forbids starting repairs (the
	// circuit breaker is open, no quorum): pending repairs are still
	// resolved, and instances that need one say this.
	NoNewRepairs string
	// JobDelay is the OP_TEST_DELAY (seconds) before each repair's
	// opcodes; 0 for none.
	JobDelay float64
	// Reason is the reason-trail text of every opcode.
	Reason string
}

// InstanceStatus is what harep thinks of one instance.
type InstanceStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Allowed is the autorepair type the tags allow ("" none), Needed
	// the type the instance's condition needs ("" none).
	Allowed string `json:"allowed,omitempty"`
	Needed  string `json:"needed,omitempty"`
	// Repair is the id of the pending or last repair.
	Repair string  `json:"repair,omitempty"`
	Jobs   []int64 `json:"jobs,omitempty"`
	// Why explains the state: for an instance not being repaired, why
	// not (suspended, not allowed, breaker open, fencing failed...).
	Why string `json:"why,omitempty"`
	// Problems are malformed autorepair tags, reported and ignored.
	Problems []string `json:"problems,omitempty"`
	// For a failed repair: the failure tag harep leaves the instance
	// alone for, the failed job's error and the operator's next step.
	FailureTag string `json:"failure_tag,omitempty"`
	Error      string `json:"error,omitempty"`
	NextStep   string `json:"next_step,omitempty"`
}

// NewRepair is a repair harep starts this pass: its jobs are submitted
// with the round, and its pending tag names them.
type NewRepair struct {
	Instance string // instance name
	Type     string
	ID       string // the repair's uuid
	// Pending is the pending tag without its job list (it ends in ':');
	// the round appends the job ids.
	Pending string
	// RemoveTags are tags of the instance the pending tag replaces.
	RemoveTags []string
	// Ops are the repair job's opcodes, OP_TEST_DELAY first when
	// JobDelay is set, each with the reason trail.
	Ops []json.RawMessage
	// FenceJob, when not zero, is the fencing job the repair job must
	// wait for (success only).
	FenceJob fsm.JobRef
}

// HarepPlan is the outcome of one harep pass.
type HarepPlan struct {
	Instances []InstanceStatus
	// Tags are edits that need no new job: resolved pending repairs
	// (pending tag out, result tag in), enoperm results, expired
	// suspensions removed.
	Tags []fsm.TagEdit
	// Repairs are the repairs to start.
	Repairs []NewRepair
	// Wake is when (Unix seconds) a suspension tag read by the pass
	// ends, the earliest; 0 when none: planning again before then, on
	// the same state, gives the same plan.
	Wake int64
}
