package repair

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// RoundInput is what one maintd round plans from. PlanRound is a pure
// function of it.
type RoundInput struct {
	State *fsm.State
	Now   time.Time
	// Diagnose holds the latest verified self-diagnose result of each
	// node, by node name.
	Diagnose map[string]Observation
	// NoQuorum, when not empty, says why the leader cannot act (it does
	// not reach a majority of the candidates): the round plans nothing.
	NoQuorum string
	// HoldJobs plans the bookkeeping of a round whose jobs are not due
	// yet (Due): new incidents are noted at once, finished jobs
	// resolved, acknowledged incidents forgotten, but no job is added
	// and the round is not counted. Incidents that wait say until when.
	HoldJobs bool
}

// Due reports whether a plan's jobs may be submitted at now: urgent
// repairs at once, the rest once the round delay (maint_round_delay) has
// passed since the last round. A plan that is not due is planned again
// with HoldJobs, and that is recorded instead.
func Due(st *fsm.State, p *RoundPlan, now time.Time) bool {
	if len(p.Command.Jobs) == 0 || p.Urgent {
		return true
	}
	m := st.Maint()
	next := time.Unix(0, int64(m.LastRound*1e9)).Add(time.Duration(m.RoundDelay) * time.Second)
	return !now.Before(next)
}

// Breaker is the circuit breaker's state in a round.
type Breaker struct {
	Open       bool     `json:"open"`
	Overridden bool     `json:"overridden,omitempty"`
	Unhealthy  []string `json:"unhealthy"` // node names
	Nodes      int      `json:"nodes"`     // nodes in the cluster
	// Limit is the most unhealthy nodes the breaker tolerates.
	Limit  int    `json:"limit"`
	Reason string `json:"reason,omitempty"`
}

// NodeStatus is what a round thinks of one node.
type NodeStatus struct {
	Name     string `json:"name"`
	Liveness string `json:"liveness,omitempty"`
	Offline  bool   `json:"offline,omitempty"`
	Drained  bool   `json:"drained,omitempty"`
	// Diagnose is the node's last self-diagnose status ("" none yet).
	Diagnose string `json:"diagnose,omitempty"`
	// Incident is the incident handled for the node this round.
	Incident string `json:"incident,omitempty"`
	Action   string `json:"action,omitempty"`
	// Down is why harep counts the node down ("" not down).
	Down string `json:"down,omitempty"`
	// Why explains what the round does, or does not do, about the node.
	Why string `json:"why,omitempty"`
}

// RoundPlan is the outcome of PlanRound.
type RoundPlan struct {
	// Command is the round to apply (the caller sets Epoch); it is empty
	// when there is nothing to record.
	Command fsm.RepairRound `json:"command"`
	// Waiting lists the previous round's jobs that have not finished:
	// no new job is submitted until they have.
	Waiting []int64 `json:"waiting,omitempty"`
	// Urgent is set when the round repairs instances of down nodes: it
	// should run at once rather than at the next round time.
	Urgent    bool             `json:"urgent"`
	NoQuorum  string           `json:"no_quorum,omitempty"`
	Breaker   Breaker          `json:"breaker"`
	Nodes     []NodeStatus     `json:"nodes"`
	Instances []InstanceStatus `json:"instances"`
	// Notes explain the round's decisions in order.
	Notes []string `json:"notes"`
	// Wake is the earliest time after the plan's Now at which the same
	// state gives another plan (a grace period or round delay running
	// out, a suspension or breaker override ending; Unix nanoseconds; 0:
	// none): the Service plans again then, or when the state changes.
	Wake int64 `json:"-"`
	// Refused, set by the Service, says why the state refused the last
	// round it tried to record, and since when (empty once one is
	// recorded). The planner keeps any one node's bad input out of the
	// round; this shows what it did not foresee.
	Refused string `json:"refused,omitempty"`
}

// Empty reports whether the plan records nothing.
func (p *RoundPlan) Empty() bool {
	c := &p.Command
	return len(c.Jobs) == 0 && len(c.Tags) == 0 && len(c.Incidents) == 0 && len(c.Fences) == 0 &&
		c.RoundJobs == nil && c.Evacuated == nil
}

// round is the planner's working state.
type round struct {
	in    RoundInput
	st    *fsm.State
	m     *fsm.Maintenance
	now   int64
	plan  *RoundPlan
	jobs  []fsm.JobSpec
	limit int
	nodes map[string]*NodeStatus // by node UUID
	// held says, by node name, why maintd leaves a node's incidents as
	// they are this round (heldNodes).
	held map[string]string
}

func (r *round) note(format string, args ...any) {
	r.plan.Notes = append(r.plan.Notes, fmt.Sprintf(format, args...))
}

// jobStatus is a job's status, from the queue or the archive; "" when the
// job is unknown.
func jobStatus(st *fsm.State, id int64) string {
	if j := st.Jobs[id]; j != nil {
		return j.Status
	}
	if a := st.Archived[id]; a != nil {
		return a.Status
	}
	return ""
}

// jobFinal reports whether a job has ended (an unknown job counts as ended
// in error).
func jobFinal(st *fsm.State, id int64) bool {
	s := jobStatus(st, id)
	return s == "" || fsm.Finalized(s)
}

// holdWhy says why a round planned with HoldJobs submits nothing: the
// round time (stable between rounds, so a reason that quotes it is
// recorded once).
func (r *round) holdWhy() postponed {
	next := time.Unix(0, int64(r.m.LastRound*1e9)).Add(time.Duration(r.m.RoundDelay) * time.Second)
	r.wakeAt(next.UnixNano())
	return postponed(fmt.Sprintf("jobs wait for the next round, due at %s (maint_round_delay %d s)", next.UTC().Format(time.RFC3339), r.m.RoundDelay))
}

// errPostponed is what addJob's answers are when a job may not be added
// this round but may be in a later one: errJobLimit once the round has all
// the jobs it may submit, a postponed carrying the round time when the
// round is planned with HoldJobs.
var errPostponed = errors.New("postponed")

// postponed is an addJob answer that postpones a job: its text says why.
type postponed string

func (p postponed) Error() string        { return string(p) }
func (p postponed) Is(target error) bool { return target == errPostponed }

// errJobLimit is addJob's answer once the round has all the jobs it may
// submit.
var errJobLimit error = postponed("the round's job limit is reached")

// addJob adds a job to the round and returns its ref. It adds nothing and
// returns an error when the round's job limit is reached (errJobLimit),
// or when an opcode is one the FSM would refuse: one bad opcode would make
// it refuse the whole round, every node's repairs with it, so the caller
// spoils only what the job was for (the incident, the instance's repair).
func (r *round) addJob(ops ...any) (fsm.JobRef, error) {
	if r.in.HoldJobs {
		return 0, r.holdWhy()
	}
	if len(r.jobs) >= r.limit {
		return 0, errJobLimit
	}
	spec := fsm.JobSpec{}
	for i, op := range ops {
		b, err := json.Marshal(op)
		if err != nil {
			panic(err) // opcodes are plain structs
		}
		if _, err := fsm.ParseOpcode(b); err != nil {
			return 0, err
		}
		spec.Ops = append(spec.Ops, b)
		spec.UUIDs = append(spec.UUIDs, fsm.DeriveUUID("op", r.in.State.Cluster.UUID, fmt.Sprint(r.now), fmt.Sprint(len(r.jobs)), fmt.Sprint(i)))
	}
	r.jobs = append(r.jobs, spec)
	return fsm.RoundJob(len(r.jobs) - 1), nil
}

func (r *round) reason(text string) []fsm.ReasonEntry {
	return []fsm.ReasonEntry{{Source: fsm.MaintdReasonSource, Text: text, TimeNS: r.now}}
}

// oobProgram is the node's OOB helper as ndparams inherit it (node, group,
// cluster); "" when it has none.
func oobProgram(st *fsm.State, n *fsm.Node) string {
	levels := []map[string]any{n.NDParams}
	if g := st.Groups[n.Group]; g != nil {
		levels = append(levels, g.NDParams)
	}
	if st.Cluster != nil {
		levels = append(levels, st.Cluster.NDParams)
	}
	for _, l := range levels {
		if v, ok := l["oob_program"].(string); ok && v != "" {
			return v
		}
	}
	return ""
}

// PlanRound plans one maintd round as Ganeti's maintd does (resolve the
// previous round's jobs, forget acknowledged incidents, collect new ones,
// handle the most invasive incident of each node, run harep on the other
// nodes), within gnt's limits: nothing without quorum, the circuit breaker,
// the evacuation limit, the round's job limit and fencing before failover.
func PlanRound(in RoundInput) *RoundPlan {
	st := in.State
	r := &round{in: in, st: st, m: st.Maint(), now: in.Now.UnixNano(), plan: &RoundPlan{}, nodes: map[string]*NodeStatus{}}
	p := r.plan
	r.limit = r.m.Repair.RoundJobLimit
	if r.limit <= 0 {
		r.limit = fsm.DefaultRoundJobLimit
	}
	for _, n := range st.SortedNodes() {
		ns := NodeStatus{Name: n.Name, Liveness: n.Liveness, Offline: n.Offline, Drained: n.Drained}
		if o, ok := in.Diagnose[n.Name]; ok {
			ns.Diagnose = o.Status
		}
		ns.Down = r.down(n).Why
		p.Nodes = append(p.Nodes, ns)
	}
	for i := range p.Nodes {
		r.nodes[st.LookupNode(p.Nodes[i].Name).UUID] = &p.Nodes[i]
	}
	r.heldNodes()
	p.Breaker = r.breaker()
	if in.NoQuorum != "" {
		p.NoQuorum = in.NoQuorum
		r.note("no action: %s", in.NoQuorum)
		return p
	}

	// 1. The previous round's jobs.
	for _, id := range r.m.Jobs {
		if !jobFinal(st, id) {
			p.Waiting = append(p.Waiting, id)
		}
	}
	if len(p.Waiting) > 0 {
		r.note("waiting for the previous round's jobs %v", p.Waiting)
	} else if len(r.m.Jobs) > 0 {
		empty := []fsm.JobRef{}
		p.Command.RoundJobs = &empty
		r.resolveJobs()
	}

	// 2. Forget acknowledged incidents; 3. note new ones.
	r.cleanup()
	r.collect()
	if len(p.Waiting) > 0 {
		// Nothing new while they run, but every instance's state is
		// still shown (read from the state: its tags, its jobs).
		r.harep(r.evacuating(), fmt.Sprintf("waiting for the previous round's jobs %v", p.Waiting))
		r.finish()
		return p
	}

	// 4. Handle the incidents; 5. harep on the other nodes.
	skip := r.handleIncidents()
	hold := ""
	if !r.m.HarepOn() {
		hold = harepOff
	}
	r.harep(skip, hold)
	r.balance(skip)
	r.finish()
	return p
}

// heldNodes finds the nodes maintd cannot tag: a round may add a tag to a
// node for each of its incidents, and the state refuses a whole round
// that takes a node past fsm.MaxTagsPerObj, so such a node is left alone
// (no new incident, no action; a failure is recorded without its tag)
// and says why, while the round goes on for the others.
func (r *round) heldNodes() {
	r.held = map[string]string{}
	open := map[string]int{}
	for _, in := range r.m.Incidents {
		if !fsm.IncidentFinal(in.RepairStatus) {
			open[in.Node]++
		}
	}
	for _, n := range r.st.SortedNodes() {
		if need := open[n.Name] + 1; len(n.Tags)+need > fsm.MaxTagsPerObj {
			why := fmt.Sprintf("left alone: it has %d tags and maintd may add %d, more than the %d a node may have; remove some of its tags", len(n.Tags), need, fsm.MaxTagsPerObj)
			r.held[n.Name] = why
			r.nodes[n.UUID].Why = why
		}
	}
}

// finish completes the command: the round's jobs, and the list to wait
// for.
func (r *round) finish() {
	c := &r.plan.Command
	c.Jobs = r.jobs
	if len(r.jobs) > 0 {
		refs := make([]fsm.JobRef, len(r.jobs))
		for k := range r.jobs {
			refs[k] = fsm.RoundJob(k)
		}
		c.RoundJobs = &refs
	}
	if !r.plan.Empty() && !r.in.HoldJobs {
		c.CountRound = true
	}
	c.Now = r.now
}

// summaryNames is how many names a summary line gives before "and N
// more" (the full list is in the plan's fields, e.g. Breaker.Unhealthy).
const summaryNames = 5

// FirstNames joins the first n names, and says how many more there are:
// "a, b, c and 990 more".
func FirstNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// wakeAt notes a time (Unix nanoseconds) at which the plan may change;
// RoundPlan.Wake is the earliest one after now.
func (r *round) wakeAt(t int64) {
	if t > r.now && (r.plan.Wake == 0 || t < r.plan.Wake) {
		r.plan.Wake = t
	}
}

// down says whether and why a node counts as down for harep: offline,
// drained, or dead in gossip for longer than the grace period.
func (r *round) down(n *fsm.Node) NodeDown {
	switch {
	case n.Offline:
		return NodeDown{Why: "offline"}
	case n.Drained:
		return NodeDown{Why: "drained"}
	case n.Liveness == fsm.LivenessDead:
		grace := time.Duration(r.m.Repair.DeadGrace * float64(time.Second))
		r.wakeAt(n.LivenessSince + int64(grace))
		if d := time.Duration(r.now - n.LivenessSince); d >= grace {
			return NodeDown{Why: "dead for " + d.Round(time.Second).String(), Dead: true, DeadSince: n.LivenessSince}
		}
	}
	return NodeDown{}
}

// breaker counts the unhealthy nodes: dead in gossip (offline or not), or
// with an active incident that asks for evacuation. It opens when more
// than the share (at least one node) or more than the count are.
func (r *round) breaker() Breaker {
	st, rp := r.st, r.m.Repair
	b := Breaker{Nodes: len(st.Nodes), Unhealthy: []string{}}
	evac := map[string]bool{}
	for _, in := range r.m.Incidents {
		if !fsm.IncidentFinal(in.RepairStatus) && fsm.ActionRank(in.Action) >= fsm.ActionRank(fsm.ActionEvacuate) {
			evac[in.Node] = true
		}
	}
	for _, n := range st.SortedNodes() {
		if n.Liveness == fsm.LivenessDead || evac[n.Name] {
			b.Unhealthy = append(b.Unhealthy, n.Name)
		}
	}
	// One unhealthy node never opens the breaker, however small the
	// cluster: repairing a single failure is what the repair is for.
	b.Limit = max(1, int(rp.BreakerShare*float64(b.Nodes)))
	if rp.BreakerNodes > 0 && rp.BreakerNodes < b.Limit {
		b.Limit = rp.BreakerNodes
	}
	if len(b.Unhealthy) > b.Limit {
		if rp.BreakerOverridden(r.now) {
			r.wakeAt(rp.BreakerOverrideUntil * int64(time.Second))
			b.Overridden = true
			b.Reason = fmt.Sprintf("%d of %d nodes unhealthy (limit %d), but an operator overrode the breaker until %s",
				len(b.Unhealthy), b.Nodes, b.Limit, time.Unix(rp.BreakerOverrideUntil, 0).UTC().Format(time.RFC3339))
		} else {
			b.Open = true
			b.Reason = fmt.Sprintf("circuit breaker open: %d of %d nodes unhealthy (%s), more than %d; no automatic evacuation, fencing or failover until fewer are, or an operator overrides it ('gnt repair breaker override')",
				len(b.Unhealthy), b.Nodes, FirstNames(b.Unhealthy, summaryNames), b.Limit)
		}
	}
	return b
}

func strp(s string) *string { return &s }

// resolveJobs fails the incidents whose jobs of the previous round did not
// succeed, as Ganeti's maintd does: the node is tagged repairfailed and
// nothing more is done for the incident.
func (r *round) resolveJobs() {
	for _, id := range r.m.Jobs {
		if s := jobStatus(r.st, id); s == fsm.StatusSuccess {
			continue
		}
		for _, in := range r.m.Incidents {
			if fsm.IncidentFinal(in.RepairStatus) || !containsID(in.Jobs, id) {
				continue
			}
			why := fmt.Sprintf("job %d ended %s", id, orUnknown(jobStatus(r.st, id)))
			if e := JobError(r.st, id); e != "" {
				why = fmt.Sprintf("job %d failed: %s", id, e)
			}
			r.failIncident(in, why)
		}
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown (no such job)"
	}
	return s
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// failed records incidents failed this round, so one is failed once.
func (r *round) failIncident(in *fsm.Incident, why string) {
	for _, e := range r.plan.Command.Incidents {
		if e.UUID == in.UUID && e.Status == fsm.IncidentFailed {
			return
		}
	}
	if held := r.held[in.Node]; held != "" {
		why += "; node not tagged: " + held
		r.plan.Command.Incidents = append(r.plan.Command.Incidents, fsm.IncidentEdit{UUID: in.UUID, Status: fsm.IncidentFailed, Reason: strp(why)})
		r.note("incident %s on %s failed: %s", in.UUID, in.Node, why)
		return
	}
	tag := fsm.MaintdFailedTagPrefix + in.UUID
	r.plan.Command.Incidents = append(r.plan.Command.Incidents, fsm.IncidentEdit{UUID: in.UUID, Status: fsm.IncidentFailed, Reason: strp(why), Tag: strp(tag)})
	r.plan.Command.Tags = append(r.plan.Command.Tags, fsm.TagEdit{Kind: fsm.TagNode, Name: in.Node, Add: []fsm.TagText{{Text: tag}}})
	r.note("incident %s on %s failed: %s; node tagged %s", in.UUID, in.Node, why, tag)
}

// hasTag reports whether the node carries the tag.
func hasTag(n *fsm.Node, tag string) bool {
	i := sort.SearchStrings(n.Tags, tag)
	return i < len(n.Tags) && n.Tags[i] == tag
}

// observed reports whether the node's latest self-diagnose result is the
// incident's.
func (r *round) observed(in *fsm.Incident) bool {
	o, ok := r.in.Diagnose[in.Node]
	return ok && matches(in, o)
}

// matches reports whether an observation is the incident: the same
// output (compared as JSON values), or the same action and repair
// command. The seed asks collectors for stable output; one whose details
// change every time (a timestamp, a counter) must not open an incident
// per poll, so a node has at most one incident per action and command
// until an operator acknowledges it.
func matches(in *fsm.Incident, o Observation) bool {
	if sameJSON(in.Original, o.Original) {
		return true
	}
	var c struct {
		Command string `json:"command"`
		Digest  string `json:"gnt_sha256"`
	}
	_ = json.Unmarshal(in.Original, &c)
	if c.Digest != "" {
		// An oversized report, kept as its digest (oversized).
		return c.Digest == digest(o.Original)
	}
	return in.Action == o.Status && c.Command == o.Command
}

// digest is the hex SHA-256 of a report.
func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// oversized returns what an incident keeps of a self-diagnose report too
// long for the state (fsm.MaxIncidentOriginalBytes): its action, length
// and digest, so that the same report is recognised as the same incident.
func oversized(o Observation) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"status": o.Status, "gnt_bytes": len(o.Original), "gnt_sha256": digest(o.Original)})
	return b
}

// sameJSON reports whether two JSON texts encode the same value (object
// keys in any order, any spacing): the collector's output is compared as
// a JSON object, as the seed says.
func sameJSON(a, b json.RawMessage) bool {
	if string(a) == string(b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	cx, _ := json.Marshal(x)
	cy, _ := json.Marshal(y)
	return string(cx) == string(cy)
}

// cleanup forgets incidents: of nodes that are gone; failed ones whose
// repairfailed tag an operator removed (unconditionally, which restarts
// the flow if the problem is still observed); completed ones whose
// repairready tag was removed and canceled ones, once they are no longer
// observed.
func (r *round) cleanup() {
	for _, in := range r.m.Incidents {
		n := r.st.LookupNode(in.Node)
		why := ""
		switch {
		case r.held[in.Node] != "":
			// Kept as it is (a failure recorded without its tag
			// included) until the node can be tagged.
		case n == nil:
			why = "its node is gone"
		case in.RepairStatus == fsm.IncidentFailed && !hasTag(n, in.Tag):
			why = "an operator removed its tag " + in.Tag
		case in.RepairStatus == fsm.IncidentCompleted && !hasTag(n, in.Tag) && !r.observed(in):
			why = "an operator removed its tag " + in.Tag + " and it is no longer observed"
		case in.RepairStatus == fsm.IncidentCanceled && !r.observed(in):
			why = "it was canceled and is no longer observed"
		}
		if why != "" {
			r.plan.Command.Incidents = append(r.plan.Command.Incidents, fsm.IncidentEdit{UUID: in.UUID, Forget: true})
			r.note("incident %s on %s forgotten: %s", in.UUID, in.Node, why)
		}
	}
}

// forgotten reports whether this round forgets the incident.
func (r *round) forgotten(id string) bool {
	for _, e := range r.plan.Command.Incidents {
		if e.UUID == id && e.Forget {
			return true
		}
	}
	return false
}

// collect notes a new incident for every node whose self-diagnose asks for
// an action and that has no incident with the identical result.
func (r *round) collect() {
	names := make([]string, 0, len(r.in.Diagnose))
	for name := range r.in.Diagnose {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		o := r.in.Diagnose[name]
		n := r.st.LookupNode(name)
		if n == nil || n.Offline || fsm.ActionRank(o.Status) <= 0 || r.held[name] != "" {
			continue
		}
		known := false
		for _, in := range r.m.Incidents {
			if in.Node == n.Name && matches(in, o) && !r.forgotten(in.UUID) {
				known = true
				break
			}
		}
		if known {
			continue
		}
		id := fsm.DeriveUUID("incident", n.UUID, string(o.Original), fmt.Sprint(r.now))
		inc := &fsm.Incident{UUID: id, Node: n.Name, NodeUUID: n.UUID, Original: o.Original, Action: o.Status,
			RepairStatus: fsm.IncidentNoted, Tag: fsm.MaintdReadyTagPrefix + id, Reason: "observed"}
		if len(o.Original) > fsm.MaxIncidentOriginalBytes {
			// The state would refuse it, and the round with it: the
			// incident is failed at once, keeping only its digest.
			why := fmt.Sprintf("bad self-diagnose report: %d bytes, more than the %d an incident keeps; not acted on", len(o.Original), fsm.MaxIncidentOriginalBytes)
			inc.Original, inc.RepairStatus, inc.Reason, inc.Tag = oversized(o), fsm.IncidentFailed, why, fsm.MaintdFailedTagPrefix+id
			r.plan.Command.Incidents = append(r.plan.Command.Incidents, fsm.IncidentEdit{New: inc})
			r.plan.Command.Tags = append(r.plan.Command.Tags, fsm.TagEdit{Kind: fsm.TagNode, Name: n.Name, Add: []fsm.TagText{{Text: inc.Tag}}})
			r.nodes[n.UUID].Why = why
			r.note("new incident %s on %s failed: %s; node tagged %s", id, n.Name, why, inc.Tag)
			continue
		}
		r.plan.Command.Incidents = append(r.plan.Command.Incidents, fsm.IncidentEdit{New: inc})
		r.note("new incident %s on %s: %s", id, n.Name, o.Status)
	}
}

// active lists the incidents a round may act on (noted or pending, not
// forgotten or failed this round), including those noted this round.
func (r *round) active() []*fsm.Incident {
	var out []*fsm.Incident
	failed := map[string]bool{}
	for _, e := range r.plan.Command.Incidents {
		if e.Status == fsm.IncidentFailed || e.Forget {
			failed[e.UUID] = true
		}
	}
	for _, in := range r.m.Incidents {
		if !fsm.IncidentFinal(in.RepairStatus) && !failed[in.UUID] {
			out = append(out, in)
		}
	}
	for _, e := range r.plan.Command.Incidents {
		if e.New != nil && !fsm.IncidentFinal(e.New.RepairStatus) {
			x := *e.New
			x.CTime = float64(r.now) / 1e9
			out = append(out, &x)
		}
	}
	return out
}

// handleIncidents acts on the most invasive active incident of each node
// (ties: the older one) and returns the nodes harep must leave alone.
func (r *round) handleIncidents() map[string]bool {
	skip := map[string]bool{}
	best := map[string]*fsm.Incident{}
	for _, in := range r.active() {
		b := best[in.Node]
		if b == nil || fsm.ActionRank(in.Action) > fsm.ActionRank(b.Action) ||
			(fsm.ActionRank(in.Action) == fsm.ActionRank(b.Action) && in.CTime < b.CTime) {
			best[in.Node] = in
		}
	}
	names := make([]string, 0, len(best))
	for name := range best {
		names = append(names, name)
	}
	sort.Strings(names)
	// Nodes being evacuated already count against the limit.
	evacuating := 0
	for _, name := range names {
		if in := best[name]; in.RepairStatus == fsm.IncidentPending && fsm.ActionRank(in.Action) >= fsm.ActionRank(fsm.ActionEvacuate) {
			evacuating++
		}
	}
	maxEvac := r.m.Repair.MaxEvacuations
	for _, name := range names {
		in := best[name]
		n := r.st.LookupNode(name)
		if n == nil || r.held[name] != "" {
			continue
		}
		ns := r.nodes[n.UUID]
		ns.Incident, ns.Action = in.UUID, in.Action
		switch in.Action {
		case fsm.ActionLiveRepair:
			r.liveRepair(in, n, ns)
		case fsm.ActionEvacuate, fsm.ActionEvacuateFailover:
			skip[n.UUID] = true
			if in.RepairStatus == fsm.IncidentNoted {
				switch {
				case r.plan.Breaker.Open:
					ns.Why = "not evacuated: " + r.plan.Breaker.Reason
					continue
				case evacuating >= maxEvac:
					ns.Why = fmt.Sprintf("waiting: %d node(s) being evacuated, the limit is %d", evacuating, maxEvac)
					r.setReason(in, ns.Why)
					continue
				}
				evacuating++
			} else if r.plan.Breaker.Open {
				// Nothing moves while the breaker is open, but an
				// evacuation whose moves are all done is completed.
				if p, sec := r.st.NodeInstances(n.UUID); (n.Drained || n.Offline) && len(p) == 0 && len(sec) == 0 {
					r.complete(in, n, ns, "node evacuated")
					continue
				}
				ns.Why = "evacuation paused: " + r.plan.Breaker.Reason
				continue
			}
			r.evacuate(in, n, ns)
		}
	}
	return skip
}

func (r *round) setReason(in *fsm.Incident, why string) {
	if in.Reason == why {
		return
	}
	for _, e := range r.plan.Command.Incidents {
		if e.New != nil && e.New.UUID == in.UUID {
			e.New.Reason = why
			return
		}
	}
	r.plan.Command.Incidents = append(r.plan.Command.Incidents, fsm.IncidentEdit{UUID: in.UUID, Reason: strp(why)})
}

// update records a change of an active incident (new this round or not).
func (r *round) update(in *fsm.Incident, status string, job fsm.JobRef, why string) {
	cmd := &r.plan.Command
	for i := range cmd.Incidents {
		if e := cmd.Incidents[i].New; e != nil && e.UUID == in.UUID {
			// Noted this round: a new incident starts with its jobs.
			if status != "" {
				e.RepairStatus = status
			}
			e.Reason = why
			if job != 0 {
				// Refs cannot sit in a new incident; follow with an edit.
				cmd.Incidents = append(cmd.Incidents, fsm.IncidentEdit{UUID: in.UUID, AddJobs: []fsm.JobRef{job}})
			}
			return
		}
	}
	e := fsm.IncidentEdit{UUID: in.UUID, Status: status, Reason: strp(why)}
	if job != 0 {
		e.AddJobs = []fsm.JobRef{job}
	}
	cmd.Incidents = append(cmd.Incidents, e)
}

func (r *round) complete(in *fsm.Incident, n *fsm.Node, ns *NodeStatus, why string) {
	r.update(in, fsm.IncidentCompleted, 0, why)
	r.plan.Command.Tags = append(r.plan.Command.Tags, fsm.TagEdit{Kind: fsm.TagNode, Name: n.Name, Add: []fsm.TagText{{Text: in.Tag}}})
	ns.Why = why + "; node tagged " + in.Tag
	r.note("incident %s on %s completed: %s", in.UUID, n.Name, why)
}

// liveRepair runs the incident's repair command once; once its job
// succeeded (a failure fails the incident when the jobs are resolved), the
// incident is completed.
func (r *round) liveRepair(in *fsm.Incident, n *fsm.Node, ns *NodeStatus) {
	if len(in.Jobs) > 0 {
		r.complete(in, n, ns, fmt.Sprintf("repair command ran (jobs %v)", in.Jobs))
		return
	}
	var o struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(in.Original, &o)
	if o.Command == "" {
		r.failNoJob(in, n, ns, "live-repair without a command")
		return
	}
	op := map[string]any{"OP_ID": "OP_REPAIR_COMMAND", "node_name": n.Name, "command": o.Command,
		"input": string(in.Original), "reason": r.reason("incident " + in.UUID + ": live-repair")}
	ref, err := r.addJob(op)
	if errors.Is(err, errPostponed) {
		ns.Why = "waiting: " + err.Error()
		r.setReason(in, ns.Why)
		return
	}
	if err != nil {
		r.failNoJob(in, n, ns, "repair command refused: "+err.Error())
		return
	}
	r.update(in, fsm.IncidentPending, ref, "running repair command "+o.Command)
	ns.Why = "running repair command " + o.Command
	r.note("incident %s on %s: repair command %s", in.UUID, n.Name, o.Command)
}

func (r *round) failNoJob(in *fsm.Incident, n *fsm.Node, ns *NodeStatus, why string) {
	tag := fsm.MaintdFailedTagPrefix + in.UUID
	cmd := &r.plan.Command
	for i := range cmd.Incidents {
		if e := cmd.Incidents[i].New; e != nil && e.UUID == in.UUID {
			e.RepairStatus, e.Reason, e.Tag = fsm.IncidentFailed, why, tag
			cmd.Tags = append(cmd.Tags, fsm.TagEdit{Kind: fsm.TagNode, Name: n.Name, Add: []fsm.TagText{{Text: tag}}})
			ns.Why = why
			r.note("incident %s on %s failed: %s", in.UUID, n.Name, why)
			return
		}
	}
	r.failIncident(in, why)
	ns.Why = why
}

// evacuate drains the node, then moves its instances away: primaries by
// live migration (evacuate) or failover (evacuate-failover) to their drbd
// secondary followed by a new secondary, secondaries by replace-disks with
// a new secondary. A node with nothing left completes the incident.
func (r *round) evacuate(in *fsm.Incident, n *fsm.Node, ns *NodeStatus) {
	if !n.Drained && !n.Offline {
		ops, wait := r.drainOps(in, n)
		if wait != "" {
			ns.Why = "waiting: " + wait
			r.setReason(in, ns.Why)
			return
		}
		ref, err := r.addJob(ops...)
		if errors.Is(err, errPostponed) {
			ns.Why = "waiting: " + err.Error()
			r.setReason(in, ns.Why)
			return
		}
		if err != nil {
			r.failNoJob(in, n, ns, "cannot drain the node: "+err.Error())
			return
		}
		what := "draining " + n.Name
		if len(ops) > 1 {
			what += fmt.Sprintf(" (master candidate; %s promoted in its place)", ops[0].(fsm.OpNodeSetParams).NodeName)
		}
		r.update(in, fsm.IncidentPending, ref, what)
		ns.Why = what
		r.note("incident %s on %s: %s", in.UUID, n.Name, what)
		return
	}
	primaries, secondaries := r.st.NodeInstances(n.UUID)
	if len(primaries) == 0 && len(secondaries) == 0 {
		r.complete(in, n, ns, "node evacuated")
		return
	}
	var moved, stuck []string
	var wait error
	for _, name := range primaries {
		inst := r.st.LookupInstance(name)
		if inst.DiskTemplate != fsm.DTDrbd || len(inst.SecondaryNodes) != 1 {
			stuck = append(stuck, fmt.Sprintf("%s (%s: cannot be moved)", name, inst.DiskTemplate))
			continue
		}
		if sn := r.st.Nodes[inst.SecondaryNodes[0]]; sn == nil || r.down(sn).Why != "" {
			stuck = append(stuck, name+" (its secondary is down)")
			continue
		}
		var move any
		text := r.reason("incident " + in.UUID + ": evacuate " + n.Name)
		if in.Action == fsm.ActionEvacuate && inst.AdminState == fsm.AdminUp {
			o := fsm.OpInstanceMigrate{OpInstanceRef: fsm.OpInstanceRef{InstanceName: name}}
			o.OpID, o.Reason = "OP_INSTANCE_MIGRATE", text
			move = o
		} else {
			o := fsm.OpInstanceFailover{OpInstanceRef: fsm.OpInstanceRef{InstanceName: name}}
			o.OpID, o.Reason = "OP_INSTANCE_FAILOVER", text
			move = o
		}
		rd := fsm.OpInstanceReplaceDisks{OpInstanceRef: fsm.OpInstanceRef{InstanceName: name}, Mode: "replace_new_secondary", IAllocator: "hail"}
		rd.OpID, rd.Reason = "OP_INSTANCE_REPLACE_DISKS", text
		ref, err := r.addJob(move, rd)
		if errors.Is(err, errPostponed) {
			wait = err
			break
		}
		if err != nil {
			stuck = append(stuck, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		r.update(in, fsm.IncidentPending, ref, "evacuating "+n.Name)
		moved = append(moved, name)
	}
	for _, name := range secondaries {
		rd := fsm.OpInstanceReplaceDisks{OpInstanceRef: fsm.OpInstanceRef{InstanceName: name}, Mode: "replace_new_secondary", IAllocator: "hail"}
		rd.OpID, rd.Reason = "OP_INSTANCE_REPLACE_DISKS", r.reason("incident "+in.UUID+": evacuate "+n.Name)
		if wait != nil {
			break
		}
		ref, err := r.addJob(rd)
		if errors.Is(err, errPostponed) {
			wait = err
			break
		}
		if err != nil {
			stuck = append(stuck, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		r.update(in, fsm.IncidentPending, ref, "evacuating "+n.Name)
		moved = append(moved, name)
	}
	why := fmt.Sprintf("evacuating: moving %d instance(s)", len(moved))
	if len(stuck) > 0 {
		why += "; cannot move " + strings.Join(stuck, ", ")
		r.setReason(in, why)
	}
	if len(moved)+len(stuck) < len(primaries)+len(secondaries) && wait != nil {
		why += "; " + wait.Error()
	}
	ns.Why = why
	if len(moved) > 0 {
		r.note("incident %s on %s: moving %s", in.UUID, n.Name, strings.Join(moved, ", "))
		r.moved(moved...)
	}
}

// drainOps are the opcodes that drain a node for an evacuation, or why
// the node may not be drained yet. A master candidate is drained with
// auto_promote, as an operator would (a drain that shrinks the pool below
// its size is refused otherwise); when the pool needs a replacement, the
// first live eligible node (by name) is promoted explicitly before the
// drain, so that the replacement is one that can vote (the FSM's
// auto-promotion does not know which nodes are alive). Raft's voters are
// the candidates (up to max_raft_voters): a drain that would leave fewer
// live candidates than the cluster has live voters now waits, saying
// why, rather than weaken the majority. The master node is never drained
// (that needs a master failover first).
func (r *round) drainOps(in *fsm.Incident, n *fsm.Node) ([]any, string) {
	text := r.reason("incident " + in.UUID + ": drain " + n.Name)
	t := true
	drain := fsm.OpNodeSetParams{NodeName: n.Name, Drained: &t, Force: true}
	drain.OpID, drain.Reason = "OP_NODE_SET_PARAMS", text
	if !n.MasterCandidate {
		return []any{drain}, ""
	}
	c := r.st.Cluster
	if n.UUID == c.MasterNode {
		return nil, fmt.Sprintf("%s is the master node; move the master to another candidate first ('gnt cluster master-failover --to NODE')", n.Name)
	}
	drain.AutoPromote = true
	live := func(x *fsm.Node) bool { return !x.Offline && !x.Drained && x.Liveness != fsm.LivenessDead }
	cands, liveCands, eligible := 0, 0, 0
	var spare *fsm.Node
	for _, x := range r.st.SortedNodes() {
		if x.UUID == n.UUID {
			continue
		}
		if x.MasterCandidate {
			cands++
			if live(x) {
				liveCands++
			}
		}
		if x.MasterCapable && !x.Offline && !x.Drained {
			eligible++
			if !x.MasterCandidate && spare == nil && live(x) {
				spare = x
			}
		}
	}
	voters := c.MaxVoters
	if voters <= 0 {
		voters = fsm.DefaultMaxVoters
	}
	before := liveCands
	if live(n) {
		before++
	}
	before = min(before, voters)
	var ops []any
	after := liveCands
	if cands < min(eligible, c.CandidatePoolSize) && spare != nil {
		f := true
		promote := fsm.OpNodeSetParams{NodeName: spare.Name, MasterCandidate: &f}
		promote.OpID, promote.Reason = "OP_NODE_SET_PARAMS", r.reason("incident "+in.UUID+": promote "+spare.Name+" in place of "+n.Name)
		ops = append(ops, promote)
		after++
	}
	if after = min(after, voters); after < before {
		return nil, fmt.Sprintf("draining master candidate %s would leave %d live master candidate(s) to vote in Raft, fewer than the %d voting now; no live master-capable node can take its place (add one, or bring one back online), or drain it by hand",
			n.Name, after, before)
	}
	return append(ops, drain), ""
}

// maxEvacuated bounds the list of moved instances kept in the state.
const maxEvacuated = 1000

// moved adds instances the round moves to maintd's "evacuated" list
// (the round's own additions included), keeping the newest maxEvacuated.
func (r *round) moved(names ...string) {
	ev := r.m.Evacuated
	if r.plan.Command.Evacuated != nil {
		ev = *r.plan.Command.Evacuated
	}
	ev = append(append([]string{}, ev...), names...)
	if len(ev) > maxEvacuated {
		ev = ev[len(ev)-maxEvacuated:]
	}
	r.plan.Command.Evacuated = &ev
}

// evacuating returns the nodes with an active evacuation incident, by
// UUID: harep leaves their instances alone.
func (r *round) evacuating() map[string]bool {
	out := map[string]bool{}
	for _, in := range r.active() {
		if fsm.ActionRank(in.Action) >= fsm.ActionRank(fsm.ActionEvacuate) {
			if n := r.st.LookupNode(in.Node); n != nil {
				out[n.UUID] = true
			}
		}
	}
	return out
}

// harep runs harep's pass on the nodes maintd is not evacuating, with
// fencing for nodes that are down only in gossip. With hold set (harep
// is off, or the previous round's jobs run), it only reports each
// instance's state, saying hold for those that need a repair: no job,
// no fencing, no tag edit.
func (r *round) harep(skip map[string]bool, hold string) {
	fences := map[string]FenceState{}
	no := ""
	if r.plan.Breaker.Open {
		no = r.plan.Breaker.Reason
	}
	if hold != "" {
		no = hold
	}
	hp := PlanHarep(HarepInput{
		State: r.st, Now: r.in.Now, Skip: skip, NoNewRepairs: no,
		JobDelay: r.m.Repair.JobDelay, Reason: "harep-style repair by gnt maintd",
		Down: func(u string) NodeDown {
			if n := r.st.Nodes[u]; n != nil {
				return r.down(n)
			}
			return NodeDown{Why: "node is gone"}
		},
		Fence: func(u string) FenceState {
			if no != "" {
				return FenceState{Blocked: no}
			}
			if f, ok := fences[u]; ok {
				return f
			}
			f := r.fence(u)
			fences[u] = f
			return f
		},
	})
	r.plan.Instances = hp.Instances
	if hp.Wake > 0 {
		r.wakeAt(hp.Wake * int64(time.Second))
	}
	if hold != "" {
		// Each instance's state is still shown, but harep's tags are
		// left as they are and nothing is started.
		return
	}
	r.plan.Command.Tags = append(r.plan.Command.Tags, hp.Tags...)
	for _, rep := range hp.Repairs {
		if rep.FenceJob < 0 {
			// Depend on the fencing job of this round: Ganeti's relative
			// id counts back from the dependent job.
			k := int(-rep.FenceJob - 1)
			rel := k - len(r.jobs)
			rep.Ops = withDepends(rep.Ops, rel)
		} else if rep.FenceJob > 0 {
			rep.Ops = withDepends(rep.Ops, int(rep.FenceJob))
		}
		var ops []any
		for _, o := range rep.Ops {
			ops = append(ops, o)
		}
		ref, err := r.addJob(ops...)
		if err != nil {
			why := "waiting: " + err.Error()
			if errors.Is(err, errPostponed) {
				r.note("repair %s of %s postponed: %v", rep.Type, rep.Instance, err)
			} else {
				why = "repair not submitted: " + err.Error()
				r.note("repair %s of %s not submitted: %v", rep.Type, rep.Instance, err)
			}
			for i := range r.plan.Instances {
				if r.plan.Instances[i].Name == rep.Instance {
					r.plan.Instances[i].Why = why
				}
			}
			continue
		}
		r.plan.Urgent = true
		r.plan.Command.Tags = append(r.plan.Command.Tags, fsm.TagEdit{Kind: fsm.TagInstance, Name: rep.Instance,
			Add: []fsm.TagText{{Text: rep.Pending, Jobs: []fsm.JobRef{ref}, WithJobs: true}}, Remove: rep.RemoveTags})
		r.note("harep: %s repair %s of %s", rep.Type, rep.ID, rep.Instance)
	}
}

// harepOff is why instances are not repaired while maintd does not do
// harep's work.
const harepOff = "harep is off: maintd does not repair instances ('gnt cluster modify --maintd-harep yes' turns it on)"

// withDepends makes the first opcode of a job depend on job dep (an id,
// or negative: relative) having succeeded.
func withDepends(ops []json.RawMessage, dep int) []json.RawMessage {
	if len(ops) == 0 {
		return ops
	}
	var m map[string]any
	if err := json.Unmarshal(ops[0], &m); err != nil {
		return ops
	}
	m["depends"] = []any{[]any{dep, []string{fsm.StatusSuccess}}}
	b, _ := json.Marshal(m)
	out := append([]json.RawMessage{b}, ops[1:]...)
	return out
}

// fence decides how a node that is down only in gossip is fenced: a node
// without an OOB helper, or whose fencing for this death failed, is not;
// a fencing job running or done is waited for; otherwise the round powers
// it off (OP_OOB_COMMAND power-off with gnt_confirm: power-status must
// confirm the node is off, and only then is it marked offline; without
// it a node that is not offline is refused, as in Ganeti).
func (r *round) fence(u string) FenceState {
	n := r.st.Nodes[u]
	if n == nil {
		return FenceState{Blocked: "node is gone"}
	}
	if r.plan.Breaker.Open {
		return FenceState{Blocked: r.plan.Breaker.Reason}
	}
	if f := r.m.Fences[u]; f != nil && f.DeadSince == n.LivenessSince {
		switch s := jobStatus(r.st, f.JobID); {
		case s == fsm.StatusSuccess || !jobFinal(r.st, f.JobID):
			return FenceState{Job: f.JobID}
		default:
			why := fmt.Sprintf("fencing %s failed (job %d %s): not failed over; power it off and mark it offline by hand", n.Name, f.JobID, orUnknown(s))
			r.nodes[u].Why = why
			return FenceState{Blocked: why}
		}
	}
	if oobProgram(r.st, n) == "" {
		why := fmt.Sprintf("%s has no OOB helper, so it cannot be fenced: its instances are not failed over automatically", n.Name)
		r.nodes[u].Why = why
		return FenceState{Blocked: why}
	}
	op := fsm.OpOobCommand{NodeNames: []string{n.Name}, Command: "power-off", Confirm: true}
	op.OpID, op.Reason = "OP_OOB_COMMAND", r.reason("fence "+n.Name+": dead in gossip since "+time.Unix(0, n.LivenessSince).UTC().Format(time.RFC3339))
	ref, err := r.addJob(op)
	if errors.Is(err, errPostponed) {
		return FenceState{Blocked: "waiting: " + err.Error()}
	}
	if err != nil {
		why := fmt.Sprintf("cannot fence %s: %v", n.Name, err)
		r.nodes[u].Why = why
		return FenceState{Blocked: why}
	}
	r.plan.Command.Fences = append(r.plan.Command.Fences, fsm.FenceEdit{NodeUUID: u, Job: ref, DeadSince: n.LivenessSince})
	r.nodes[u].Why = "fencing: powering it off through its OOB helper"
	r.note("fencing %s (dead since %s)", n.Name, time.Unix(0, n.LivenessSince).UTC().Format(time.RFC3339))
	r.plan.Urgent = true
	return FenceState{Job: ref}
}
