package repair

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// harep: Ganeti's instance autorepair (src/Ganeti/HTools/Program/Harep.hs
// and doc/design-autorepair.rst) as a pure planner. Each pass reads every
// instance's state from its tags, resolves finished repairs, and starts
// the repairs that the tags allow for instances on down nodes. What Ganeti
// does with one OpTagsSet/OpTagsDel job after another, the plan does in
// tag edits and new repairs that the round commits at once.
//
// Choices where Ganeti and the design leave room:
//
//   - A pending tag with no jobs is a request (an external tool's
//     "once-off"): it allows its own type for this instance even without
//     an enable tag. If the instance needs no repair, it is resolved as a
//     success with no jobs; if it needs a repair beyond both the request
//     and the policy, it is resolved as enoperm; otherwise the repair
//     runs under the request's id and start time.
//   - A repair's pending tag names the type actually run (the needed
//     one), which may be less than the request's.
//   - An enoperm result is written once per need: while the instance's
//     current state comes from an enoperm result for the same type,
//     nothing is added (Ganeti writes a fresh one on every run).
//   - Like Ganeti, every edit of an instance's tags removes the tags its
//     current state supersedes (older repairs' results), so an instance
//     carries the tag of its current repair state and little else.
//   - Groups of repair tags (by id) are ordered by their earliest time;
//     at the same second a result comes before a pending repair (a
//     repair that ends and the next one that starts share a second).
//   - Only the primary node is fenced: it is where the instance may still
//     run. A secondary that is dead in gossip is replaced without
//     fencing.
//   - A suspended instance is left alone, pending jobs included (the
//     design); Ganeti's harep resolves pending repairs even then. A
//     failed one shows Failure rather than Suspended: both are left
//     alone, and the failure is what needs an operator.
//   - A pending repair whose jobs all succeeded on an instance that still
//     needs a repair is resolved and the next repair starts in the same
//     pass (the design's failover, then a new secondary). Like Ganeti,
//     a repair that succeeds without changing what the instance needs is
//     started again at the next pass.

// maxJobIDDigits is the length of the longest job id (int64): a pending
// tag written before its job id is known must leave room for it.
const maxJobIDDigits = 19

// maxJobDelay is the longest OP_TEST_DELAY fsm accepts (seconds).
const maxJobDelay = 3600

// harepComment is the comment of every opcode harep submits (Ganeti's
// "automated repairs by harep <version>").
const harepComment = "automated repairs by harep (gnt)"

// PlanHarep plans one harep pass. It is a pure function of its input:
// no clock, no randomness, and the same input gives the same plan
// (instances, tag edits and repairs ordered by name). It calls in.Down
// once per node and in.Fence only for nodes whose instances it is about
// to repair, at most once per node. With a nil Down no node is down;
// with a nil Fence no node can be fenced.
//
// The plan's tag edits and its repairs' tags are consistent whatever
// order the round applies them in.
func PlanHarep(in HarepInput) HarepPlan {
	p := newPlanner(in)
	var plan HarepPlan
	s := in.State
	if s == nil || s.Cluster == nil {
		return plan
	}
	if e := p.cluster.edit(fsm.TagCluster, ""); e != nil {
		plan.Tags = append(plan.Tags, *e)
	}
	for _, g := range s.SortedGroups() {
		if e := p.groups[g.UUID].edit(fsm.TagNodeGroup, g.Name); e != nil {
			plan.Tags = append(plan.Tags, *e)
		}
	}
	// Sorted by name, with the names beside the pointers: the sort is a
	// good part of a pass over a large cluster.
	type named struct {
		name string
		inst *fsm.Instance
	}
	insts := make([]named, 0, len(s.Instances))
	for _, inst := range s.Instances {
		if !inst.Forthcoming {
			insts = append(insts, named{inst.Name, inst})
		}
	}
	slices.SortFunc(insts, func(a, b named) int { return strings.Compare(a.name, b.name) })
	plan.Instances = make([]InstanceStatus, 0, len(insts))
	for _, ni := range insts {
		inst := ni.inst
		st, edit, rep := p.instance(inst)
		plan.Instances = append(plan.Instances, st)
		if len(edit.Add) > 0 || len(edit.Remove) > 0 {
			plan.Tags = append(plan.Tags, edit)
		}
		if rep != nil {
			plan.Repairs = append(plan.Repairs, *rep)
		}
	}
	plan.Wake = p.wake
	return plan
}

type planner struct {
	in      HarepInput
	s       *fsm.State
	now     int64 // Unix seconds, as in tags
	nowNS   int64
	nodes   map[string]*nodeInfo
	fences  map[string]FenceState
	cluster objectTags
	groups  map[string]*objectTags
	// orphan stands for a node the state does not know.
	orphan nodeInfo
	// tmpl are the pass's opcodes with the instance name left out
	// (opTemplates).
	tmpl map[string]opTemplate
	// wake is the earliest time (Unix seconds) at which a tag read by
	// the pass changes what it decides (HarepPlan.Wake).
	wake int64
}

// noteWake keeps the earliest future wake time of the pass.
func (p *planner) noteWake(o objectTags) {
	if o.wake > p.now && (p.wake == 0 || o.wake < p.wake) {
		p.wake = o.wake
	}
}

// nodeInfo is what a pass needs of a node, looked up once.
type nodeInfo struct {
	name string
	down NodeDown // down when down.Why is set
	skip bool     // maintd handles it
	// group is the node's group's autorepair tags (nil when none).
	group *objectTags
	// problems are the cluster's and the group's malformed tags, shared
	// by the statuses of the node's instances: clipped, so that
	// appending copies.
	problems []string
}

func newPlanner(in HarepInput) *planner {
	p := &planner{in: in, s: in.State, now: in.Now.Unix(), nowNS: in.Now.UnixNano(),
		nodes: map[string]*nodeInfo{}, fences: map[string]FenceState{}, groups: map[string]*objectTags{}}
	if p.s == nil || p.s.Cluster == nil {
		return p
	}
	p.cluster = readObject(p.s.Cluster.Tags, p.now, "the cluster")
	p.noteWake(p.cluster)
	problems := map[string][]string{}
	for u, g := range p.s.Groups {
		o := readObject(g.Tags, p.now, "node group "+g.Name)
		p.noteWake(o)
		p.groups[u] = &o
		problems[u] = slices.Clip(append(slices.Clip(p.cluster.problems), o.problems...))
	}
	p.orphan = nodeInfo{problems: slices.Clip(p.cluster.problems)}
	for u, n := range p.s.Nodes {
		ni := &nodeInfo{name: n.Name, skip: in.Skip[u], group: p.groups[n.Group], problems: problems[n.Group]}
		if ni.group == nil {
			ni.problems = p.orphan.problems
		}
		if in.Down != nil {
			ni.down = in.Down(u)
		}
		p.nodes[u] = ni
	}
	p.tmpl = p.opTemplates()
	return p
}

// node returns what the pass knows of a node.
func (p *planner) node(u string) *nodeInfo {
	if ni := p.nodes[u]; ni != nil {
		return ni
	}
	return &p.orphan
}

// policy is the autorepair policy of an object: suspended, or the most
// destructive repair type allowed ("" none).
type policy struct {
	suspended bool
	forever   bool
	until     int64
	allowed   string
	from      string // "the cluster", "node group g1", "the instance"
}

// objectTags is what one object's autorepair tags say.
type objectTags struct {
	pol      *policy  // nil: the object has no say
	expired  []string // expired suspensions, to remove
	problems []string // malformed tags
	// wake is when the earliest suspension still in force ends (Unix
	// seconds; 0: none): the plan changes then.
	wake int64
}

func (o objectTags) edit(kind, name string) *fsm.TagEdit {
	if len(o.expired) == 0 {
		return nil
	}
	return &fsm.TagEdit{Kind: kind, Name: name, Remove: o.expired}
}

// readObject resolves one object's policy tags as Ganeti's getArPolicy:
// a permanent suspension, else the latest suspension still in the future,
// else the least destructive enabled type, else no say.
func readObject(tags []string, now int64, from string) objectTags {
	o, _ := readTags(tags, now, from)
	return o
}

// readTags reads an object's autorepair tags: its policy (readObject)
// and its pending and result tags.
func readTags(tags []string, now int64, from string) (objectTags, []*record) {
	var o objectTags
	var recs []*record
	var susp *policy
	allowed := ""
	for _, text := range tags {
		t, ok, err := ParseTag(text)
		if !ok {
			continue
		}
		if err != nil {
			o.problems = append(o.problems, err.Error())
			continue
		}
		switch t.Kind {
		case TagPending, TagResult:
			recs = append(recs, &record{Tag: t, text: text})
		case TagEnable:
			if allowed == "" || TypeRank(t.Type) < TypeRank(allowed) {
				allowed = t.Type
			}
		case TagSuspend:
			switch {
			case t.Forever:
				susp = &policy{suspended: true, forever: true, from: from}
			case t.Until <= now:
				o.expired = append(o.expired, text)
			case susp == nil || !susp.forever && t.Until > susp.until:
				susp = &policy{suspended: true, until: t.Until, from: from}
			}
			if t.Until > now && (o.wake == 0 || t.Until < o.wake) {
				o.wake = t.Until
			}
		}
	}
	switch {
	case susp != nil:
		o.pol = susp
	case allowed != "":
		o.pol = &policy{allowed: allowed, from: from}
	}
	return o, recs
}

// record is a parsed pending or result tag with its text.
type record struct {
	Tag
	text string
}

// rank orders a repair's tags as Ganeti's (result, time) key: pending
// (no result) first, then enoperm, success, failure.
func (r *record) rank() int {
	if r.Kind == TagPending {
		return -1
	}
	return ResultRank(r.Result)
}

// tagState is an instance's repair state as its tags say.
type tagState struct {
	state string // StateHealthy, StatePending or StateFailed
	cur   *record
	// stale are the repair tags the current state supersedes.
	stale []string
	// conflict, when set, says why the tags cannot be trusted: an
	// unfinished repair is older than another repair's tags.
	conflict string
}

// initialState is Ganeti's setInitialState: the repair tags grouped by
// repair id and the groups taken from the oldest; within a group the
// highest (result, time) decides; the earliest failure wins; an unfinished
// repair followed by another one is an error (Ganeti stops; gnt leaves
// the instance alone); otherwise the newest group decides.
func initialState(recs []*record) tagState {
	ts := tagState{state: StateHealthy}
	if len(recs) == 0 {
		return ts
	}
	slices.SortFunc(recs, func(a, b *record) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		if c := cmp.Compare(a.rank(), b.rank()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Time, b.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(len(a.Jobs), len(b.Jobs)); c != 0 {
			return c
		}
		return strings.Compare(a.text, b.text)
	})
	type group struct {
		win *record // the group's last record
		min int64
	}
	groups := make([]group, 0, len(recs))
	for i, r := range recs {
		if i == 0 || r.ID != recs[i-1].ID {
			groups = append(groups, group{win: r, min: r.Time})
			continue
		}
		g := &groups[len(groups)-1]
		g.win = r
		g.min = min(g.min, r.Time)
	}
	slices.SortStableFunc(groups, func(a, b group) int {
		if c := cmp.Compare(a.min, b.min); c != 0 {
			return c
		}
		ap, bp := a.win.Kind == TagPending, b.win.Kind == TagPending
		if ap != bp {
			if bp {
				return -1
			}
			return 1
		}
		return strings.Compare(a.win.ID, b.win.ID)
	})
	for _, g := range groups {
		switch ts.state {
		case StateFailed:
			continue // the earliest failure stays
		case StatePending:
			ts.conflict = fmt.Sprintf("unfinished repair %s (tag %s) is older than repair %s (tag %s)",
				ts.cur.ID, ts.cur.text, g.win.ID, g.win.text)
			return ts
		}
		ts.cur = g.win
		switch {
		case g.win.Kind == TagPending:
			ts.state = StatePending
		case g.win.Result == ResultFailure:
			ts.state = StateFailed
		default:
			ts.state = StateHealthy
		}
	}
	for _, r := range recs {
		if r != ts.cur {
			ts.stale = append(ts.stale, r.text)
		}
	}
	sort.Strings(ts.stale)
	return ts
}

// need is the repair an instance's condition calls for.
type need struct {
	typ  string
	why  string // "primary node2 offline"
	pnd  bool   // the primary node is down
	dead string // the primary's UUID when it is down only in gossip
}

// detect is Ganeti's detectBroken: what repair the instance needs given
// which of its nodes (primary pn, secondary sn or nil) are down.
func (p *planner) detect(inst *fsm.Instance, pn, sn *nodeInfo) need {
	pok := pn.down.Why != ""
	sok := sn != nil && sn.down.Why != ""
	n := need{pnd: pok}
	if pok && pn.down.Dead {
		n.dead = inst.PrimaryNode
	}
	pwhy := func() string { return "primary " + pn.name + " " + pn.down.Why }
	swhy := func() string { return "secondary " + sn.name + " " + sn.down.Why }
	switch inst.DiskTemplate {
	case fsm.DTDrbd:
		switch {
		case pok && sok:
			n.typ, n.why = TypeReinstall, pwhy()+", "+swhy()
		case pok:
			n.typ, n.why = TypeFailover, pwhy()
		case sok:
			n.typ, n.why = TypeFixStorage, swhy()
		}
	case fsm.DTPlain:
		if pok {
			n.typ, n.why = TypeReinstall, pwhy()
		}
	case fsm.DTSharedFile:
		// Its disks are on every node: it fails over to a node the
		// allocator chooses (Ganeti's harep: failover with hail).
		if pok {
			n.typ, n.why = TypeFailover, pwhy()
		}
	}
	if n.typ == "" {
		n.dead = ""
	}
	return n
}

// resolve returns the policy of an instance: its own tags', else its
// primary node's group's, else the cluster's (nearest wins).
func (p *planner) resolve(inst objectTags, group *objectTags) *policy {
	switch {
	case inst.pol != nil:
		return inst.pol
	case group != nil && group.pol != nil:
		return group.pol
	case p.cluster.pol != nil:
		return p.cluster.pol
	}
	return noPolicy
}

var noPolicy = &policy{}

// instance plans one instance: its status, the edit of its tags that
// needs no job, and the repair to start, if any.
func (p *planner) instance(inst *fsm.Instance) (InstanceStatus, fsm.TagEdit, *NewRepair) {
	st := InstanceStatus{Name: inst.Name, State: StateHealthy}
	edit := fsm.TagEdit{Kind: fsm.TagInstance, Name: inst.Name}

	// The instance's own tags: policy, repair records, problems.
	own, recs, tagged := p.readInstance(inst)
	pn := p.node(inst.PrimaryNode)
	var sn *nodeInfo
	skip := ""
	if pn.skip {
		skip = pn.name
	}
	for i, u := range inst.SecondaryNodes {
		n := p.node(u)
		if i == 0 {
			sn = n
		}
		if skip == "" && n.skip {
			skip = n.name
		}
	}
	st.Problems = pn.problems
	if len(own.problems) > 0 {
		st.Problems = append(st.Problems, own.problems...)
	}
	pol := p.resolve(own, pn.group)
	if !pol.suspended {
		st.Allowed = pol.allowed
	}
	if !tagged && skip == "" && pn.down.Why == "" && (sn == nil || sn.down.Why == "") {
		// The common case: no repair tag, no node down. Healthy.
		return st, edit, nil
	}

	ts := initialState(recs)
	st.State = ts.state
	if ts.cur != nil {
		st.Repair, st.Jobs = ts.cur.ID, ts.cur.Jobs
	}
	if skip != "" {
		st.Why = "node " + skip + " is being handled by maintd: left alone this round"
		return st, edit, nil
	}
	edit.Remove = append(edit.Remove, own.expired...)
	if ts.conflict != "" {
		st.Why = "conflicting repair tags: left alone until an operator removes one of them"
		st.Problems = append(st.Problems, ts.conflict)
		return st, edit, nil
	}
	if ts.state == StateFailed {
		st.FailureTag, st.Error, st.NextStep = ts.cur.text, p.firstError(ts.cur.Jobs, true), harepNextStep(inst.Name, ts.cur.text)
		st.Why = fmt.Sprintf("%s repair %s failed%s; %s", ts.cur.Type, ts.cur.ID, st.Error, st.NextStep)
		st.Error = strings.TrimPrefix(st.Error, ": ")
		return st, edit, nil
	}
	if pol.suspended {
		st.State = StateSuspended
		st.Why = "autorepair suspended by " + pol.from
		if !pol.forever {
			st.Why += " until " + time.Unix(pol.until, 0).UTC().Format(time.RFC3339)
		}
		return st, edit, nil
	}

	// A pending repair: wait for its jobs, or resolve it.
	var request *record
	prefix := ""
	if ts.state == StatePending {
		cur := ts.cur
		if len(cur.Jobs) == 0 {
			request = cur
		} else {
			done, status, id := p.jobsOutcome(cur.Jobs)
			if !done {
				st.Why = fmt.Sprintf("%s repair: job %d is %s", cur.Type, id, status)
				return st, edit, nil
			}
			edit.Remove = append(edit.Remove, cur.text)
			edit.Remove = append(edit.Remove, ts.stale...)
			if status != fsm.StatusSuccess {
				tag := p.resultTag(inst, cur.Type, cur.ID, ResultFailure, cur.Jobs)
				edit.Add = append(edit.Add, fsm.TagText{Text: tag})
				st.State = StateFailed
				st.FailureTag, st.Error, st.NextStep = tag, ended(id, status)+p.firstError([]int64{id}, false), harepNextStep(inst.Name, tag)
				st.Why = fmt.Sprintf("%s repair %s failed: %s; %s", cur.Type, cur.ID, st.Error, st.NextStep)
				return st, edit, nil
			}
			tag := p.resultTag(inst, cur.Type, cur.ID, ResultSuccess, cur.Jobs)
			edit.Add = append(edit.Add, fsm.TagText{Text: tag})
			st.State = StateHealthy
			prefix = fmt.Sprintf("%s repair %s succeeded", cur.Type, cur.ID)
			// Healthy now, with the new result as its current tag; it may
			// need the next repair at once (a failover, then a new
			// secondary).
			res := &record{Tag: Tag{Kind: TagResult, Type: cur.Type, ID: cur.ID, Time: p.now, Result: ResultSuccess, Jobs: cur.Jobs}, text: tag}
			ts = tagState{state: StateHealthy, cur: res}
		}
	}
	why := func(s string) string {
		if prefix == "" {
			return s
		}
		if s == "" {
			return prefix
		}
		return prefix + "; " + s
	}

	// A Healthy instance (or a request): does it need a repair?
	n := p.detect(inst, pn, sn)
	st.Needed = n.typ
	if n.typ == "" {
		if request != nil {
			edit.Remove = append(edit.Remove, request.text)
			edit.Remove = append(edit.Remove, ts.stale...)
			edit.Add = append(edit.Add, fsm.TagText{Text: p.resultTag(inst, request.Type, request.ID, ResultSuccess, nil)})
			st.State = StateHealthy
			prefix = fmt.Sprintf("%s repair %s resolved: the instance needs no repair", request.Type, request.ID)
		}
		st.Why = why("")
		return st, edit, nil
	}
	allowed, from := pol.allowed, "autorepair"
	if request != nil && TypeRank(request.Type) > TypeRank(allowed) {
		allowed, from = request.Type, "repair request "+request.ID
	}
	if TypeRank(n.typ) > TypeRank(allowed) {
		msg := "no autorepair tag"
		if allowed != "" {
			msg = fmt.Sprintf("%s allows %s, needs %s", from, allowed, n.typ)
		}
		st.State = StateNeedsRepair
		st.Why = why(msg + ": " + n.why)
		switch {
		case request != nil:
			edit.Remove = append(edit.Remove, request.text)
			edit.Remove = append(edit.Remove, ts.stale...)
			edit.Add = append(edit.Add, fsm.TagText{Text: p.resultTag(inst, request.Type, request.ID, ResultEnoperm, nil)})
		case ts.cur != nil && ts.cur.Kind == TagResult && ts.cur.Result == ResultEnoperm && ts.cur.Type == n.typ:
			// Said already: the enoperm result for this need stands.
		default:
			if ts.cur != nil {
				removeTag(&edit, ts.cur.text)
			}
			edit.Remove = append(edit.Remove, ts.stale...)
			id := derivedID(inst.UUID, "enoperm", n.typ, p.nowNS)
			edit.Add = append(edit.Add, fsm.TagText{Text: ResultTag(n.typ, id, p.now, ResultEnoperm, nil)})
			st.Repair, st.Jobs = id, nil
		}
		return st, edit, nil
	}

	// Allowed. A request keeps waiting for what blocks it; an instance
	// that is not pending stays in Needs repair.
	blocked := func(reason string) (InstanceStatus, fsm.TagEdit, *NewRepair) {
		st.State = StateNeedsRepair
		if request != nil {
			st.State = StatePending
		}
		st.Why = why(reason + " (needs " + n.typ + ": " + n.why + ")")
		return st, edit, nil
	}
	if p.in.NoNewRepairs != "" {
		return blocked(p.in.NoNewRepairs)
	}
	var fenceJob fsm.JobRef
	if n.dead != "" {
		f := p.fence(n.dead)
		if f.Blocked != "" {
			return blocked(f.Blocked)
		}
		fenceJob = f.Job
	}

	rep := &NewRepair{Instance: inst.Name, Type: n.typ, FenceJob: fenceJob, Ops: p.ops(inst, n.typ)}
	start := p.now
	if request != nil {
		rep.ID, start = request.ID, request.Time
		rep.RemoveTags = append(rep.RemoveTags, request.text)
	} else {
		rep.ID = derivedID(inst.UUID, "repair", n.typ, p.nowNS)
		if ts.cur != nil {
			rep.RemoveTags = append(rep.RemoveTags, ts.cur.text)
		}
	}
	if prefix == "" {
		// Otherwise the resolution's edit removed them already.
		rep.RemoveTags = append(rep.RemoveTags, ts.stale...)
	}
	rep.Pending = PendingTag(n.typ, rep.ID, start)
	if len(rep.Pending)+maxJobIDDigits > fsm.MaxTagLen {
		// Only a request's own id can be that long: the repair gets an id
		// of ours, which always fits with its job id.
		rep.ID = derivedID(inst.UUID, "repair", n.typ, p.nowNS)
		rep.Pending = PendingTag(n.typ, rep.ID, start)
	}
	st.State = StatePending
	st.Repair, st.Jobs = rep.ID, nil
	st.Why = why("starting " + n.typ + " repair: " + n.why)
	if fenceJob != 0 {
		st.Why += fmt.Sprintf(" (after fencing job %s)", refString(fenceJob))
	}
	return st, edit, rep
}

// readInstance reads an instance's autorepair tags: its policy and its
// repair records; ok is false when it has no autorepair tag at all.
func (p *planner) readInstance(inst *fsm.Instance) (own objectTags, recs []*record, ok bool) {
	for _, t := range inst.Tags {
		if strings.HasPrefix(t, AutorepairPrefix) {
			own, recs = readTags(inst.Tags, p.now, "the instance")
			p.noteWake(own)
			return own, recs, true
		}
	}
	return objectTags{}, nil, false
}

// removeTag removes a tag in an edit: one the edit adds is no longer
// added (the edit's removals apply before its additions), any other is
// removed.
func removeTag(e *fsm.TagEdit, text string) {
	for i, a := range e.Add {
		if a.Text == text {
			e.Add = append(e.Add[:i], e.Add[i+1:]...)
			return
		}
	}
	e.Remove = append(e.Remove, text)
}

// jobsOutcome sums up a repair's jobs as Ganeti's processPending: done
// is false while one of them is not finalized (id is that job, status
// its status); otherwise status is success when all of them succeeded,
// else the status of the first one that did not (id). A job the state no
// longer knows (neither queued nor archived) has status "" and counts as
// failed.
func (p *planner) jobsOutcome(ids []int64) (done bool, status string, id int64) {
	var bad string
	var badID int64
	for _, id := range ids {
		s := ""
		if j := p.s.Jobs[id]; j != nil {
			s = j.Status
		} else if a := p.s.Archived[id]; a != nil {
			s = a.Status
		}
		if s != "" && !fsm.Finalized(s) {
			return false, s, id
		}
		if s != fsm.StatusSuccess && badID == 0 {
			bad, badID = s, id
		}
	}
	if badID != 0 {
		return true, bad, badID
	}
	return true, fsm.StatusSuccess, ids[len(ids)-1]
}

// maxErrorText bounds the error text a status quotes from a job.
const maxErrorText = 200

// firstError quotes the error of the first of the jobs that failed (the
// job's first failed opcode's result), or "".
func (p *planner) firstError(ids []int64, withID bool) string {
	for _, id := range ids {
		if text := JobError(p.s, id); text != "" {
			if withID {
				return fmt.Sprintf(": job %d: %s", id, text)
			}
			return ": " + text
		}
	}
	return ""
}

// harepNextStep is what an operator does about a failed harep repair:
// harep leaves the instance alone while the failure tag is there.
func harepNextStep(inst, tag string) string {
	return fmt.Sprintf("next step: fix the instance, then remove the tag to let harep repair it again: gnt instance remove-tags %s %s", inst, tag)
}

// JobError is the error of a job that failed, in words: its first failed
// opcode's result (from the queue, or as the archive keeps it), decoded
// from Ganeti's encoding (["OpPrereqError", [message, code]]) and cut to
// maxErrorText; "" when the job has none.
func JobError(st *fsm.State, id int64) string {
	text := ""
	if j := st.Jobs[id]; j != nil {
		for _, op := range j.Ops {
			if op.Status == fsm.StatusError && len(op.Result) > 0 {
				text = errorText(op.Result)
				break
			}
		}
	} else if a := st.Archived[id]; a != nil && a.Error != "" {
		text = errorText([]byte(a.Error))
	}
	if len(text) > maxErrorText {
		text = text[:maxErrorText] + "..."
	}
	return text
}

// errorText decodes an opcode's error result: a JSON string, Ganeti's
// [class, [message, ...]] ("class: message"), or else the raw text.
func errorText(raw []byte) string {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str
	}
	var enc []json.RawMessage
	if json.Unmarshal(raw, &enc) == nil && len(enc) == 2 {
		var class string
		var args []any
		if json.Unmarshal(enc[0], &class) == nil && json.Unmarshal(enc[1], &args) == nil && len(args) > 0 {
			if msg, ok := args[0].(string); ok {
				return class + ": " + msg
			}
		}
		if json.Unmarshal(enc[0], &class) == nil && json.Unmarshal(enc[1], &str) == nil {
			return class + ": " + str
		}
	}
	return strings.TrimSpace(string(raw))
}

// ended says how a job that did not succeed ended.
func ended(id int64, status string) string {
	switch status {
	case "":
		return fmt.Sprintf("job %d is unknown (neither queued nor archived)", id)
	case fsm.StatusCanceled:
		return fmt.Sprintf("job %d was canceled", id)
	}
	return fmt.Sprintf("job %d ended in %s", id, status)
}

// fence asks once per node which job fences it or why it cannot be.
func (p *planner) fence(node string) FenceState {
	if f, ok := p.fences[node]; ok {
		return f
	}
	f := FenceState{Blocked: "no fencing available"}
	if p.in.Fence != nil {
		f = p.in.Fence(node)
	}
	p.fences[node] = f
	return f
}

// resultTag is the result tag ending a repair now. Ganeti's tags are at
// most fsm.MaxTagLen characters: ours always fit (a 36-character id and
// one job), but a request's id or a long job list may not, so the oldest
// job ids are left out first and then the id is replaced by one derived
// from it. The tag must be written: a failure that is not recorded would
// be retried.
func (p *planner) resultTag(inst *fsm.Instance, typ, id, result string, jobs []int64) string {
	for k := 0; k <= len(jobs); k++ {
		if tag := ResultTag(typ, id, p.now, result, jobs[k:]); len(tag) <= fsm.MaxTagLen {
			return tag
		}
	}
	return ResultTag(typ, derivedID(inst.UUID, "long-id", id, 0), p.now, result, nil)
}

// opTemplate is an opcode of the pass in JSON, split where the
// instance's name goes.
type opTemplate struct {
	head, tail []byte
}

// failoverIAlloc is the key of the template of a failover whose target
// hail chooses (its OP_ID is OP_INSTANCE_FAILOVER).
const failoverIAlloc = "OP_INSTANCE_FAILOVER+hail"

// opTemplates encodes each opcode harep may submit once per pass (they
// differ only in the instance's name): encoding them for every repair
// took a sizeable share of a pass over a large cluster.
func (p *planner) opTemplates() map[string]opTemplate {
	reason := p.in.Reason
	if reason == "" {
		reason = "harep (gnt) called"
	}
	common := func(id string) fsm.OpCommon {
		c := harepComment
		return fsm.OpCommon{OpID: id, Comment: &c, Reason: []fsm.ReasonEntry{{Source: HarepReasonSource, Text: reason, TimeNS: p.nowNS}}}
	}
	const mark = "\x00name\x00"
	ref := fsm.OpInstanceRef{InstanceName: mark}
	timeout := 120.0 // Ganeti's defaultShutdownTimeout
	onMaster := true
	// fsm refuses longer delays, and a refused opcode would fail the whole
	// round.
	delay := min(p.in.JobDelay, maxJobDelay)
	out := map[string]opTemplate{}
	for id, op := range map[string]any{
		"OP_TEST_DELAY":        &fsm.OpTestDelay{OpCommon: common("OP_TEST_DELAY"), Duration: delay, OnMaster: &onMaster},
		"OP_INSTANCE_FAILOVER": &fsm.OpInstanceFailover{OpCommon: common("OP_INSTANCE_FAILOVER"), OpInstanceRef: ref, ShutdownTimeout: &timeout},
		// A sharedfile instance has no secondary: hail chooses the node.
		failoverIAlloc: &fsm.OpInstanceFailover{OpCommon: common("OP_INSTANCE_FAILOVER"), OpInstanceRef: ref, ShutdownTimeout: &timeout, IAllocator: "hail"},
		"OP_INSTANCE_REPLACE_DISKS": &fsm.OpInstanceReplaceDisks{OpCommon: common("OP_INSTANCE_REPLACE_DISKS"), OpInstanceRef: ref,
			Mode: fsm.ReplaceNewSecondary, IAllocator: "hail"},
		"OP_INSTANCE_RECREATE_DISKS": &fsm.OpInstanceRecreateDisks{OpCommon: common("OP_INSTANCE_RECREATE_DISKS"), OpInstanceRef: ref, IAllocator: "hail"},
		"OP_INSTANCE_REINSTALL":      &fsm.OpInstanceReinstall{OpCommon: common("OP_INSTANCE_REINSTALL"), OpInstanceRef: ref},
	} {
		b, err := json.Marshal(op)
		if err != nil {
			panic(fmt.Sprintf("repair: encoding %s: %v", id, err)) // plain structs: cannot fail
		}
		q, _ := json.Marshal(mark)
		head, tail, _ := bytes.Cut(b, q)
		out[id] = opTemplate{head: head, tail: tail}
	}
	return out
}

// ops are a repair's opcodes (Ganeti's detectBroken), after the job
// delay when there is one.
func (p *planner) ops(inst *fsm.Instance, typ string) []json.RawMessage {
	var ids []string
	if p.in.JobDelay > 0 {
		ids = append(ids, "OP_TEST_DELAY")
	}
	switch typ {
	case TypeFailover:
		if inst.DiskTemplate == fsm.DTSharedFile {
			ids = append(ids, failoverIAlloc)
		} else {
			ids = append(ids, "OP_INSTANCE_FAILOVER")
		}
	case TypeFixStorage:
		ids = append(ids, "OP_INSTANCE_REPLACE_DISKS")
	case TypeReinstall:
		ids = append(ids, "OP_INSTANCE_RECREATE_DISKS", "OP_INSTANCE_REINSTALL")
	}
	name, _ := json.Marshal(inst.Name)
	out := make([]json.RawMessage, len(ids))
	for i, id := range ids {
		t := p.tmpl[id]
		b := make([]byte, 0, len(t.head)+len(name)+len(t.tail))
		b = append(b, t.head...)
		if t.tail != nil { // nil for OP_TEST_DELAY, which names no instance
			b = append(append(b, name...), t.tail...)
		}
		out[i] = b
	}
	return out
}

// derivedID is a repair id drawn from its inputs instead of at random, so
// the planner stays a pure function: a SHA-256 in the form of a UUID
// (version 8, RFC 9562's custom version).
func derivedID(instUUID, kind, typ string, nowNS int64) string {
	h := sha256.New()
	for _, s := range []string{instUUID, kind, typ} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(nowNS))
	h.Write(ts[:])
	sum := h.Sum(nil)
	sum[6] = sum[6]&0x0f | 0x80
	sum[8] = sum[8]&0x3f | 0x80
	x := hex.EncodeToString(sum[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// refString shows a job ref: a job id, or "round job k".
func refString(r fsm.JobRef) string {
	if r > 0 {
		return strconv.FormatInt(r, 10)
	}
	return "round#" + strconv.FormatInt(-r-1, 10)
}
