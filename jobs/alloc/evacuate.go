package alloc

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// EvacMode says which instances of a node an evacuation moves (Ganeti's
// node-evacuate modes and RAPI values).
type EvacMode string

// Evacuation modes.
const (
	EvacPrimary   EvacMode = "primary-only"   // instances with the node as primary
	EvacSecondary EvacMode = "secondary-only" // drbd instances with the node as secondary
	EvacAll       EvacMode = "all"            // both
)

// Kinds of moves, each a sequence of opcodes for the caller to run.
// Moves of forthcoming instances touch the configuration only (Ganeti
// lets failover, migrate and replace-disks act on them that way).
const (
	// MoveFailover: the drbd instance moves to its secondary, which
	// becomes its primary, the old primary its secondary:
	// OP_INSTANCE_MIGRATE with allow_failover (a failover if it is not
	// running or the old primary is down).
	MoveFailover = "failover"
	// MoveReplaceSecondary: the drbd instance gets NewSecondary instead
	// of its secondary: OP_INSTANCE_REPLACE_DISKS, replace_new_secondary.
	MoveReplaceSecondary = "replace_secondary"
	// MoveFailoverReplace: MoveFailover, then MoveReplaceSecondary to
	// NewSecondary (mode all, for an instance with the node as primary).
	MoveFailoverReplace = "failover_replace"
	// MoveRelocate: the drbd instance goes to two new nodes, as hail's
	// change-all: replace the secondary with NewPrimary, fail over to it,
	// replace the secondary with NewSecondary.
	MoveRelocate = "relocate"
	// MoveRecreate: a plain or diskless instance goes to NewPrimary:
	// OP_INSTANCE_RECREATE_DISKS with the new node (the disks are created
	// empty), then OP_INSTANCE_REINSTALL for a plain instance. The data of
	// a plain instance is lost, so it is planned only with
	// Options.AllowRecreate (or for a forthcoming instance, which has no
	// data).
	MoveRecreate = "recreate"
)

// Move is where one instance of an evacuated node goes. Node fields are
// UUIDs (empty when there is none), with their names beside them.
type Move struct {
	Instance         string `json:"instance"` // name; the UUID for a nameless forthcoming instance
	InstanceUUID     string `json:"instance_uuid"`
	Kind             string `json:"kind"`
	Forthcoming      bool   `json:"forthcoming,omitempty"`
	OldPrimary       string `json:"old_primary"`
	OldSecondary     string `json:"old_secondary,omitempty"`
	NewPrimary       string `json:"new_primary"`
	NewSecondary     string `json:"new_secondary,omitempty"`
	OldPrimaryName   string `json:"old_primary_name"`
	OldSecondaryName string `json:"old_secondary_name,omitempty"`
	NewPrimaryName   string `json:"new_primary_name"`
	NewSecondaryName string `json:"new_secondary_name,omitempty"`
	// NewGroup is the name of the group a change of group moves the
	// instance to; empty for moves within the instance's group.
	NewGroup string `json:"new_group,omitempty"`
	// Failover moves a running instance to its new primary stopped (a
	// stop, then a start there) rather than by live migration
	// (OP_GROUP_EVACUATE's force_failover).
	Failover bool `json:"failover,omitempty"`
}

// Failure is an instance that cannot be moved, and why.
type Failure struct {
	Instance     string `json:"instance"`
	InstanceUUID string `json:"instance_uuid"`
	Reason       string `json:"reason"`
	// Code is insufficient_resources when nothing can take the instance,
	// wrong_state when it cannot move whatever the resources (a plain
	// instance without AllowRecreate, a drbd instance without a usable
	// secondary, a secondary whose primary is down).
	Code fsm.Code `json:"code"`
}

// Plan is an evacuation: the moves in the order they were planned (each
// accounted for before the next was chosen, so they are meant to run in
// that order) and the instances that cannot be moved.
type Plan struct {
	Node     string    `json:"node"` // UUID
	NodeName string    `json:"node_name"`
	Mode     EvacMode  `json:"mode"`
	Moves    []Move    `json:"moves"`
	Failed   []Failure `json:"failed,omitempty"`
}

// EvacuatePlan plans moving the instances off a node (name or UUID), in
// mode, as Ganeti's hail node-evacuate does as far as the model allows:
//
//   - primary-only: a drbd instance fails over to its secondary
//     (MoveFailover), which must take nodes, have the memory and vcpus
//     and keep N+1; a plain instance is re-created on the best node of its
//     group (MoveRecreate) only with Options.AllowRecreate (hail refuses
//     plain instances); a diskless one is re-created there (no data).
//   - secondary-only: a drbd instance gets the best new secondary of its
//     group (MoveReplaceSecondary), which must have the disk and back the
//     primary's memory (N+1); its primary must be up to copy the disks.
//   - all: both; a drbd instance with the node as primary fails over and
//     gets a new secondary (MoveFailoverReplace), or, when its secondary
//     cannot take it over, moves to the best new pair of its group
//     (MoveRelocate, hail's change-all).
//
// Instances never leave their node group, and move only to nodes that
// can run their hypervisor (fsm.PlacementHypervisor, checked with
// fsm.HypervisorFits as for new instances). Real instances are planned
// before forthcoming ones, each set by name; a forthcoming instance that
// cannot move as above may be re-placed on any pair of its group
// (MoveRelocate), as it has no data. Every planned move is accounted for
// before the next is chosen; what an instance uses on the way (during a
// relocation's intermediate steps) is not, and the evacuated node itself
// is not checked for N+1 when it remains an instance's secondary.
//
// The plan holds every move that could be planned. The error is nil when
// no instance failed; otherwise an *fsm.Error naming each instance that
// cannot be moved and why (insufficient_resources when any failed for
// lack of resources, wrong_state otherwise). Other errors: wrong_input for
// an unknown mode, unknown_entity for an unknown node.
func EvacuatePlan(st *fsm.State, node string, mode EvacMode, opts Options) (Plan, error) {
	switch mode {
	case EvacPrimary, EvacSecondary, EvacAll:
	default:
		return Plan{}, inval("mode", "evacuation mode %q is not one of %s, %s, %s", mode, EvacPrimary, EvacSecondary, EvacAll)
	}
	n := st.LookupNode(node)
	if n == nil {
		for _, x := range st.Nodes { // a state built without its indexes
			if x.Name == node {
				n = x
				break
			}
		}
	}
	if n == nil {
		return Plan{}, &fsm.Error{Code: fsm.CodeNoEnt, Field: "node", Msg: fmt.Sprintf("node %s does not exist", node)}
	}
	t := buildTable(st, opts, "", n.UUID, TemplatePlain)
	t.noScore = true
	e := &evac{t: t, n: t.byUUID[n.UUID], mode: mode, opts: opts}
	var todo []inst
	consider := func(i *fsm.Instance) {
		onPri := i.PrimaryNode == n.UUID
		onSec := false
		for _, s := range i.SecondaryNodes {
			onSec = onSec || s == n.UUID
		}
		if onPri && mode != EvacSecondary || onSec && mode != EvacPrimary {
			in := t.instance(i)
			in.hv = fsm.PlacementHypervisor(st, i)
			todo = append(todo, in)
		}
	}
	if u, ok := st.Usage(); ok {
		for _, id := range u.Instances(n.UUID) {
			consider(st.Instances[id])
		}
	} else {
		for _, i := range st.Instances {
			consider(i)
		}
	}
	plan := Plan{Node: n.UUID, NodeName: n.Name, Mode: mode, Moves: []Move{}}
	planEach(&plan, todo, e.one)
	return plan, failedError(plan.Failed, fmt.Sprintf("cannot evacuate %d of %d instances from %s (%s)", len(plan.Failed), len(todo), n.Name, mode))
}

// planEach plans the instances of todo one after the other, each move
// accounted for before the next is chosen: real instances before
// forthcoming ones, then by name (and UUID). It adds the moves to plan
// and the failures, named, to plan.Failed.
func planEach(plan *Plan, todo []inst, one func(*inst) (Move, *Failure)) {
	sort.Slice(todo, func(a, b int) bool {
		x, y := &todo[a], &todo[b]
		if x.forthcoming != y.forthcoming {
			return !x.forthcoming
		}
		return x.name < y.name || x.name == y.name && x.uuid < y.uuid
	})
	for k := range todo {
		in := &todo[k]
		mv, fail := one(in)
		if fail != nil {
			fail.Instance, fail.InstanceUUID = in.name, in.uuid
			plan.Failed = append(plan.Failed, *fail)
			continue
		}
		plan.Moves = append(plan.Moves, mv)
	}
}

// failedError is nil without failures, else an *fsm.Error: head, then
// the first failures with their reasons; insufficient_resources when
// any failed for lack of resources, wrong_state otherwise.
func failedError(failed []Failure, head string) error {
	if len(failed) == 0 {
		return nil
	}
	code := fsm.CodeState
	var parts []string
	for i, f := range failed {
		if f.Code == fsm.CodeNoRes {
			code = fsm.CodeNoRes
		}
		if i < maxListed {
			parts = append(parts, f.Instance+": "+f.Reason)
		}
	}
	return &fsm.Error{Code: code, Msg: head + ": " + strings.Join(parts, "; ") + more(len(failed))}
}

// evac plans the moves off one node on a table it changes as it goes.
type evac struct {
	t    *table
	n    int32
	mode EvacMode
	opts Options
}

func failRes(format string, args ...any) *Failure {
	return &Failure{Code: fsm.CodeNoRes, Reason: fmt.Sprintf(format, args...)}
}

func failState(format string, args ...any) *Failure {
	return &Failure{Code: fsm.CodeState, Reason: fmt.Sprintf(format, args...)}
}

// one plans the move of one instance: only to nodes that can run its
// hypervisor (the others are marked for the time of the call).
func (e *evac) one(in *inst) (Move, *Failure) {
	t := e.t
	defer t.unmark(t.markHypervisor(in.hv))
	mv := Move{Instance: in.name, InstanceUUID: in.uuid, Forthcoming: in.forthcoming}
	if in.pri >= 0 {
		mv.OldPrimary, mv.OldPrimaryName = t.rows[in.pri].uuid, t.rows[in.pri].name
	}
	if len(in.secs) > 0 {
		mv.OldSecondary, mv.OldSecondaryName = t.rows[in.secs[0]].uuid, t.rows[in.secs[0]].name
	}
	if in.pri != e.n { // the node is the instance's secondary
		if in.pri < 0 && in.forthcoming {
			return e.relocate(mv, in, failState("it has no primary node"))
		}
		if in.template != TemplateDRBD || len(in.secs) != 1 || in.pri < 0 {
			return mv, failState("disk template %s has no secondary to replace", templateName(in.template))
		}
		newSec, fail := e.replaceSecondary(in, in.pri)
		if fail != nil && in.forthcoming {
			return e.relocate(mv, in, fail)
		}
		if fail != nil {
			return mv, fail
		}
		return e.t.moved(mv, MoveReplaceSecondary, in.pri, newSec), nil
	}
	switch in.template {
	case TemplateDRBD:
		if len(in.secs) != 1 {
			if in.forthcoming {
				return e.relocate(mv, in, failState("it has no secondary node"))
			}
			return mv, failState("it has no secondary node to fail over to")
		}
		s := in.secs[0]
		if fail := e.failover(in, s); fail != nil {
			if e.mode == EvacAll || in.forthcoming {
				return e.relocate(mv, in, fail)
			}
			return mv, fail
		}
		if e.mode != EvacAll {
			return e.t.moved(mv, MoveFailover, s, e.n), nil
		}
		newSec, fail := e.replaceSecondary(in, s)
		if fail != nil {
			e.undoFailover(in, s)
			return e.relocate(mv, in, fail)
		}
		return e.t.moved(mv, MoveFailoverReplace, s, newSec), nil
	case TemplatePlain, TemplateDiskless:
		if in.template == TemplatePlain && !in.forthcoming && !e.opts.AllowRecreate {
			return mv, failState("instances of disk template plain cannot be relocated (re-creating its disks elsewhere, empty, needs allow recreate)")
		}
		return e.recreate(mv, in)
	default:
		if in.forthcoming && len(in.secs) == 0 {
			return e.recreate(mv, in)
		}
		return mv, failState("instances of disk template %s cannot be relocated", templateName(in.template))
	}
}

func templateName(t string) string {
	if t == "" {
		return "(none)"
	}
	return t
}

// moved completes mv with its kind and new nodes (rows; sec -1: none).
func (t *table) moved(mv Move, kind string, pri, sec int32) Move {
	mv.Kind = kind
	mv.NewPrimary, mv.NewPrimaryName = t.rows[pri].uuid, t.rows[pri].name
	if sec >= 0 {
		mv.NewSecondary, mv.NewSecondaryName = t.rows[sec].uuid, t.rows[sec].name
	}
	return mv
}

// failover moves the instance's primary role from the evacuated node to
// its secondary s, or says why s cannot take it.
func (e *evac) failover(in *inst, s int32) *Failure {
	t, n := e.t, e.n
	r := &t.rows[s]
	if r.bad != "" {
		return failState("its secondary node %s is %s", r.name, r.bad)
	}
	t.remove(in, n, []int32{s})
	// Its disks are on s already: memory (keeping s's N+1 reserve) and
	// vcpus are what s must have.
	if r.freeMem()-in.mem < r.rMem || r.freeCPU() < in.cpu {
		var why string
		switch {
		case r.freeCPU() < in.cpu:
			why = fmt.Sprintf("has %d free vcpus, needs %d", r.freeCPU(), in.cpu)
		case r.rMem > 0:
			why = fmt.Sprintf("has %d MiB free memory, needs %d (%d for the instance, %d kept for N+1)", r.freeMem(), in.mem+r.rMem, in.mem, r.rMem)
		default:
			why = fmt.Sprintf("has %d MiB free memory, needs %d", r.freeMem(), in.mem)
		}
		t.add(in, n, []int32{s})
		return failRes("its secondary node %s cannot take it over: %s", r.name, why)
	}
	t.add(in, s, []int32{n})
	return nil
}

func (e *evac) undoFailover(in *inst, s int32) {
	e.t.remove(in, s, []int32{e.n})
	e.t.add(in, e.n, []int32{s})
}

// replaceSecondary gives the instance, whose primary is p, the best new
// secondary of p's group instead of the evacuated node, and returns it;
// a node without DRBD is never chosen.
func (e *evac) replaceSecondary(in *inst, p int32) (int32, *Failure) {
	t, n := e.t, e.n
	if b := t.rows[p].bad; !in.forthcoming && (b == badOffline || b == badDead) {
		return -1, failState("its primary node %s is %s: its disks cannot be copied to a new secondary", t.rows[p].name, b)
	}
	defer t.unmark(t.markNoDRBD())
	t.removeSec(in, p, n)
	nd := need{mem: in.mem, disk: in.disk, cpu: in.cpu, drbd: true}
	best, bestD := int32(-1), 0.0
	for _, k := range t.groups[t.rows[p].group].members {
		if k == p || !t.usable(k, nil) || !t.secGeneric(k, nd) || !t.secFor(k, p, nd) {
			continue
		}
		if d := t.deltaSec(k, nd); best < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if best < 0 {
		why := t.explainNewSecondary(p, nd)
		t.addSec(in, p, n)
		return -1, failRes("%s", why)
	}
	t.addSec(in, p, best)
	return best, nil
}

// relocate re-places a drbd instance on the best new pair of its group,
// after first failed (the reason the simpler moves were impossible), on
// nodes with DRBD.
func (e *evac) relocate(mv Move, in *inst, first *Failure) (Move, *Failure) {
	t, n := e.t, e.n
	if b := t.rows[n].bad; !in.forthcoming && (b == badOffline || b == badDead) {
		return mv, first // the disks can only be copied after a failover
	}
	defer t.unmark(t.markNoDRBD())
	nd := need{mem: in.mem, disk: in.disk, cpu: in.cpu, drbd: true}
	g := t.rows[n].group
	if in.pri >= 0 {
		g = t.rows[in.pri].group
	}
	t.remove(in, in.pri, in.secs)
	sc := &scope{groups: []int32{g}}
	c, ok := t.bestInGroup(g, nd, sc)
	if !ok {
		why := t.explainGroup(g, nd, sc)
		t.add(in, in.pri, in.secs)
		first.Reason += "; nor can it move to two other nodes: " + why
		return mv, first
	}
	t.add(in, c.pri, []int32{c.sec})
	kind := MoveRelocate
	if len(in.secs) == 1 && c.pri == in.secs[0] {
		kind = MoveFailoverReplace
	}
	return e.t.moved(mv, kind, c.pri, c.sec), nil
}

// recreate re-places a single-node instance on the best node of its group.
func (e *evac) recreate(mv Move, in *inst) (Move, *Failure) {
	t, n := e.t, e.n
	g := t.rows[n].group
	t.remove(in, n, nil)
	nd := need{mem: in.mem, disk: in.disk, cpu: in.cpu}
	sc := &scope{groups: []int32{g}}
	c, ok := t.bestInGroup(g, nd, sc)
	if !ok {
		why := t.explainGroup(g, nd, sc)
		t.add(in, n, nil)
		return mv, failRes("no node can take it: %s", why)
	}
	t.add(in, c.pri, nil)
	return e.t.moved(mv, MoveRecreate, c.pri, -1), nil
}
