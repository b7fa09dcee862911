package jobs

import (
	"context"
	"fmt"
	"slices"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
)

// Node-wide opcodes: their first step plans the moves and records the
// plan as its result; then there is one step per move, built from the
// recorded plan, so a new leader resumes the evacuation at the first move
// not recorded. A move run again finds its earlier effects in place (the
// agents' operations are idempotent and keyed by a per-move id; the
// configuration is re-read and only changed where it is not yet so).

// planned returns the plan step and, once the plan is recorded, one step
// per move; before that a placeholder that the executor replaces when the
// plan step is recorded.
func (e *Executor) planned(st *fsm.OpState, plan Step, move func(alloc.Move) []Step) []Step {
	var p alloc.Plan
	if ok, err := recordedPlan(st, &p); err != nil || !ok {
		return []Step{plan, {Name: "moves", Run: func(context.Context, *StepContext) (any, error) {
			return nil, fmt.Errorf("the plan was not recorded")
		}}}
	}
	steps := []Step{plan}
	for _, m := range p.Moves {
		steps = append(steps, move(m)...)
	}
	if len(p.Moves) == 0 {
		steps = append(steps, Step{Name: "nothing to move", Run: func(_ context.Context, sc *StepContext) (any, error) {
			if p.NodeName == "" {
				sc.Logf("no instance to move")
				return nil, nil
			}
			sc.Logf("no instance to move off %s", p.NodeName)
			return nil, nil
		}})
	}
	return steps
}

func (e *Executor) evacuateSteps(o *fsm.OpNodeEvacuate, st *fsm.OpState) []Step {
	plan := Step{Name: "plan", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		// The allocators of iallocator (or the cluster's default list)
		// in order (iallocate.go).
		p, err := e.evacuatePlanWith(ctx, sc, o.IAllocator, o.NodeName, alloc.EvacMode(o.EvacMode()))
		if err != nil {
			return nil, err
		}
		logMoves(sc, p)
		return p, nil
	}}
	return e.moveSteps(st, plan)
}

// logMoves says what each move of a plan does.
func logMoves(sc *StepContext, p alloc.Plan) {
	for _, m := range p.Moves {
		to := ""
		if m.NewGroup != "" {
			to = " in group " + m.NewGroup
		}
		sc.Logf("%s: %s -> primary %s, secondary %s%s", m.Instance, m.Kind, m.NewPrimaryName, m.NewSecondaryName, to)
	}
}

// changeGroupSteps is OP_INSTANCE_CHANGE_GROUP: the plan of the
// allocators (change-group), then its moves as a node evacuation runs
// them (moveSteps).
func (e *Executor) changeGroupSteps(o *fsm.OpInstanceChangeGroup, st *fsm.OpState) []Step {
	return e.moveSteps(st, Step{Name: "plan", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		p, err := e.changeGroupPlanWith(ctx, sc, o.IAllocator, []string{o.Ref()}, "", o.TargetGroups)
		if err != nil {
			return nil, err
		}
		logMoves(sc, p)
		return p, nil
	}})
}

// groupEvacuateSteps is OP_GROUP_EVACUATE: the plan of the allocators
// (change-group of every instance with a node in the group), then its
// moves as a node evacuation runs them (moveSteps), one after another;
// with force_failover a running instance moves stopped (stop, start on
// its new primary) instead of by live migration, as Ganeti turns the
// answer's migrations into failovers.
func (e *Executor) groupEvacuateSteps(o *fsm.OpGroupEvacuate, st *fsm.OpState) []Step {
	return e.moveSteps(st, Step{Name: "plan", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		p, err := e.changeGroupPlanWith(ctx, sc, o.IAllocator, nil, o.GroupName, o.TargetGroups)
		if err != nil {
			return nil, err
		}
		for k := range p.Moves {
			p.Moves[k].Failover = o.ForceFailover
		}
		logMoves(sc, p)
		return p, nil
	}})
}

// moveSteps is the plan step, then one step per move of the recorded plan
// (runMove), as node evacuation, change of group and group evacuation
// run them.
func (e *Executor) moveSteps(st *fsm.OpState, plan Step) []Step {
	layout := func(whole bool) []Step {
		return e.planned(st, plan, func(m alloc.Move) []Step {
			return e.moveStepsOf(m, fmt.Sprintf("%s %s", m.Kind, m.Instance), whole)
		})
	}
	steps := layout(false)
	if st != nil && !sameStepNames(st.Steps, steps) {
		// An older gntd started this job with one step per move, which
		// its recorded steps name: it goes on so, each move whole.
		steps = layout(true)
	}
	// The result is Ganeti's node-evac-res1 form, {"jobs": [[true, id],
	// ...]}: the jobs that did the moves. gnt does them in this job's
	// own steps, so the list names this job (a client that waits for
	// each finds it finished).
	last := &steps[len(steps)-1]
	run := last.Run
	last.Run = func(ctx context.Context, sc *StepContext) (any, error) {
		res, err := run(ctx, sc)
		if err != nil || sc.dryRun {
			return res, err
		}
		return map[string]any{"jobs": [][]any{{true, sc.Job.ID}}}, nil
	}
	return steps
}

func (e *Executor) nodeMigrateSteps(o *fsm.OpNodeMigrate, st *fsm.OpState) []Step {
	plan := Step{Name: "plan", Run: func(_ context.Context, sc *StepContext) (any, error) {
		p := alloc.Plan{Mode: alloc.EvacPrimary}
		var err error
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			n := s.LookupNode(o.NodeName)
			if n == nil {
				err = &fsm.Error{Code: fsm.CodeNoEnt, Field: "node_name", Msg: fmt.Sprintf("node %s does not exist", o.NodeName)}
				return
			}
			p.Node, p.NodeName = n.UUID, n.Name
			for _, in := range s.SortedInstances() {
				if in.PrimaryNode != n.UUID || in.DiskTemplate != fsm.DTDrbd || len(in.SecondaryNodes) != 1 || in.AdminState != fsm.AdminUp {
					continue
				}
				p.Moves = append(p.Moves, alloc.Move{Instance: in.Name, InstanceUUID: in.UUID, Kind: alloc.MoveFailover,
					OldPrimary: n.UUID, NewPrimary: in.SecondaryNodes[0], NewSecondary: n.UUID,
					OldPrimaryName: n.Name, NewPrimaryName: s.NodeName(in.SecondaryNodes[0]), NewSecondaryName: n.Name})
			}
		})
		if err != nil {
			return nil, err
		}
		sc.Logf("migrating %d instance(s) off %s", len(p.Moves), p.NodeName)
		return p, nil
	}}
	return e.planned(st, plan, func(m alloc.Move) []Step {
		return e.moveStepsOf(m, "migrate "+m.Instance, false)
	})
}

// movePhase is one part of a move, run on a working copy of the
// instance's record; it reports whether it changed the record, which the
// step then records.
type movePhase struct {
	name string
	run  func(ctx context.Context, sc *StepContext, in *fsm.Instance, nodes map[string]*fsm.Node) (bool, error)
}

// movePhases are the parts of a move, each a step of its own: a part
// that gives a drbd instance a new secondary records it before the next
// part creates the disks there (dropSecondary, syncSecondary), so the
// state has given the new node its drbd minors first.
func (e *Executor) movePhases(m alloc.Move) []movePhase {
	failover := func(target string) movePhase {
		return movePhase{"move to " + nameOr(m, target), func(ctx context.Context, sc *StepContext, in *fsm.Instance, nodes map[string]*fsm.Node) (bool, error) {
			if in.PrimaryNode == target {
				return false, nil // moved already
			}
			if len(in.SecondaryNodes) != 1 || in.SecondaryNodes[0] != target {
				return false, fmt.Errorf("instance %s's secondary is no longer the planned %s", in.Name, nameOr(m, target))
			}
			return e.moveToSecondary(ctx, sc, in, nodes, m.Failover)
		}}
	}
	drop := func(old, next string) movePhase {
		return movePhase{"record the secondary " + nameOr(m, next), func(ctx context.Context, sc *StepContext, in *fsm.Instance, _ map[string]*fsm.Node) (bool, error) {
			return e.dropSecondary(ctx, sc, in, old, next)
		}}
	}
	sync := func(sec, old string) movePhase {
		return movePhase{"create the disks on " + nameOr(m, sec), func(ctx context.Context, sc *StepContext, in *fsm.Instance, _ map[string]*fsm.Node) (bool, error) {
			return false, e.syncSecondary(ctx, sc, in, sec, old)
		}}
	}
	switch m.Kind {
	case alloc.MoveRelocate:
		// hail's change-all: the secondary is replaced by the new
		// primary, the instance moves there, and the old primary (now
		// the secondary) is replaced by the new secondary.
		return []movePhase{drop(m.OldSecondary, m.NewPrimary), sync(m.NewPrimary, m.OldSecondary), failover(m.NewPrimary),
			drop(m.OldPrimary, m.NewSecondary), sync(m.NewSecondary, m.OldPrimary)}
	case alloc.MoveRecreate:
		return []movePhase{{"", func(ctx context.Context, sc *StepContext, in *fsm.Instance, nodes map[string]*fsm.Node) (bool, error) {
			return e.recreateOn(ctx, sc, in, nodes, m)
		}}}
	case alloc.MoveFailover:
		return []movePhase{failover(m.NewPrimary)}
	case alloc.MoveReplaceSecondary:
		return []movePhase{drop(m.OldSecondary, m.NewSecondary), sync(m.NewSecondary, m.OldSecondary)}
	case alloc.MoveFailoverReplace:
		// The evacuated node, the old primary, becomes the secondary
		// and is replaced.
		return []movePhase{failover(m.NewPrimary), drop(m.OldPrimary, m.NewSecondary), sync(m.NewSecondary, m.OldPrimary)}
	}
	return []movePhase{{"", func(context.Context, *StepContext, *fsm.Instance, map[string]*fsm.Node) (bool, error) {
		return false, fmt.Errorf("moving %s by %s is not known to this gntd; move it by hand", m.Instance, m.Kind)
	}}}
}

// nameOr is a node of a move by name where the move names it.
func nameOr(m alloc.Move, u string) string {
	switch u {
	case m.NewPrimary:
		return m.NewPrimaryName
	case m.NewSecondary:
		return m.NewSecondaryName
	case m.OldPrimary:
		return m.OldPrimaryName
	case m.OldSecondary:
		return m.OldSecondaryName
	}
	return u
}

// moveStepsOf are the steps of one move: one per part (a move of one
// part keeps the name given), or with whole the one step of the name
// given that runs every part, as gntd did before the parts (a job such
// a gntd started goes on so).

// sameStepNames reports whether the steps recorded after the first (the
// plan) are named as the steps built.
func sameStepNames(recorded []fsm.StepRecord, steps []Step) bool {
	for i := 1; i < len(recorded); i++ {
		if i >= len(steps) || recorded[i].Name != steps[i].Name {
			return false
		}
	}
	return true
}

func (e *Executor) moveStepsOf(m alloc.Move, name string, whole bool) []Step {
	phases := e.movePhases(m)
	if whole {
		return []Step{{Name: name, Run: func(ctx context.Context, sc *StepContext) (any, error) {
			return nil, e.runMove(ctx, sc, m, phases, -1)
		}}}
	}
	steps := make([]Step, len(phases))
	for k := range phases {
		n := name
		if len(phases) > 1 {
			n = name + ": " + phases[k].name
		}
		steps[k] = Step{Name: n, Run: func(ctx context.Context, sc *StepContext) (any, error) {
			return nil, e.runMove(ctx, sc, m, phases, k)
		}}
	}
	return steps
}

// runMove carries out part k of a move of a plan on a working copy of
// the instance's record, recorded with the step when it changed (k -1:
// every part). A reservation moves whole in the first part (the others
// have nothing to do); a dry run goes through every part in the first
// step, on one working copy, since no part records anything.
func (e *Executor) runMove(ctx context.Context, sc *StepContext, m alloc.Move, phases []movePhase, k int) error {
	in, nodes, err := e.instanceOf(m.InstanceUUID)
	if err != nil {
		return err
	}
	expect := in.SerialNo
	if in.Forthcoming {
		if k > 0 {
			return nil
		}
		// A reservation has nothing on the nodes: only its record moves
		// (the state checks that it fits there).
		if m.NewPrimary != "" {
			in.PrimaryNode = m.NewPrimary
		}
		if m.NewSecondary != "" {
			in.SecondaryNodes = []string{m.NewSecondary}
		}
		sc.Logf("moved reservation %s from %s to %s (configuration only)", m.Instance,
			nodePair(m.OldPrimaryName, m.OldSecondaryName), nodePair(m.NewPrimaryName, m.NewSecondaryName))
		put(sc, in, expect)
		return nil
	}
	run := phases
	switch {
	case sc.dryRun && k > 0:
		return nil
	case !sc.dryRun && k >= 0:
		run = phases[k : k+1]
	}
	changed := false
	for _, p := range run {
		c, err := p.run(ctx, sc, in, nodes)
		if err != nil {
			return err
		}
		changed = changed || c
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
				nodes[u] = s.Nodes[u]
			}
		})
	}
	if changed {
		put(sc, in, expect)
	}
	return nil
}

// forthcoming reports whether ref names a forthcoming instance. The
// steps of failover and migrate are chosen by it when the opcode starts,
// holding the instance's lock: only a commit, which needs that lock,
// turns a reservation into a real instance, so a resumed opcode chooses
// the same steps.
func (e *Executor) forthcoming(ref string) bool {
	in, _, err := e.instanceOf(ref)
	return err == nil && in.Forthcoming
}

// reservationMoveStep is failover and migrate of a forthcoming instance,
// which Ganeti lets them act on in the configuration only: a reservation
// has nothing on its nodes. A drbd reservation swaps its primary and
// secondary; one of another template goes to target, or where the
// allocator places it in its group. The new nodes are checked as any
// placement (the reservation's own use left out), and the record changes
// as node evacuation moves reservations (runMove); maintd's balancer
// moves reservations this way.
func (e *Executor) reservationMoveStep(ref, target string) Step {
	return Step{Name: "move the reservation", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		var (
			m   alloc.Move
			err error
		)
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			in := s.LookupInstance(ref)
			if in == nil || !in.Forthcoming || s.Nodes[in.PrimaryNode] == nil {
				err = &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("instance %s is no longer a reservation with nodes", ref)}
				return
			}
			pri := s.Nodes[in.PrimaryNode]
			req := alloc.Request{Name: in.Name, Template: in.DiskTemplate, MemoryMiB: in.MemoryMiB, VCPUs: in.VCPUs, Instance: in.UUID,
				Hypervisor: fsm.PlacementHypervisor(s, in)}
			for _, d := range in.Disks {
				req.Disks = append(req.Disks, d.SizeMiB)
			}
			m = alloc.Move{Instance: in.Name, InstanceUUID: in.UUID, Forthcoming: true, Kind: alloc.MoveRecreate,
				OldPrimary: pri.UUID, OldPrimaryName: pri.Name}
			switch {
			case in.DiskTemplate == fsm.DTDrbd && len(in.SecondaryNodes) == 1:
				sec := s.Nodes[in.SecondaryNodes[0]]
				if sec == nil || target != "" && target != sec.Name && target != sec.UUID {
					err = &fsm.Error{Code: fsm.CodeInval, Field: "target_node", Msg: fmt.Sprintf("a drbd reservation moves to its secondary %s, not %s", s.NodeName(in.SecondaryNodes[0]), target)}
					return
				}
				m.Kind, m.OldSecondary, m.OldSecondaryName = alloc.MoveFailover, sec.UUID, sec.Name
				req.Nodes = []string{sec.UUID, pri.UUID}
			case target != "":
				req.Nodes = []string{target}
			default:
				req.Group, req.Exclude = pri.Group, []string{pri.UUID}
			}
			var res alloc.Result
			if res, err = alloc.Allocate(s, req, e.allocOptions(s)); err == nil {
				m.NewPrimary, m.NewPrimaryName, m.NewSecondary, m.NewSecondaryName = res.Primary, res.PrimaryName, res.Secondary, res.SecondaryName
			}
		})
		if err != nil {
			return nil, err
		}
		return m, e.runMove(ctx, sc, m, e.movePhases(m), 0) // a reservation: its first part moves it whole
	}}
}

// moveToSecondary makes a drbd instance's secondary its primary: a live
// migration when it should run (keyed by an id of this opcode and the
// instance, so a repeat is no effect), or with failover a stop on the
// primary and a start on the secondary, then the roles swap in the
// record.
func (e *Executor) moveToSecondary(ctx context.Context, sc *StepContext, in *fsm.Instance, nodes map[string]*fsm.Node, failover bool) (bool, error) {
	if err := needDRBD(in, "moving to the secondary"); err != nil {
		return false, err
	}
	src, dst := nodes[in.PrimaryNode], nodes[in.SecondaryNodes[0]]
	if err := e.usable(dst, "moving "+in.Name); err != nil {
		return false, err
	}
	if err := e.runsHypervisorOf(in, dst, "instance_name"); err != nil {
		return false, err
	}
	if err := e.checkBridges(ctx, sc, dst, in, nil); err != nil {
		return false, err
	}
	what := "migration"
	if in.AdminState != fsm.AdminUp || failover {
		what = "failover"
	}
	if what == "migration" {
		if err := e.readyForMigration(ctx, sc, in, dst); err != nil {
			return false, err
		}
	} else if err := e.checkTargetDisks(ctx, sc, in, dst, what, src != nil && src.Offline); err != nil {
		return false, err
	}
	if in.AdminState == fsm.AdminUp && failover {
		if err := e.stopForFailover(ctx, sc, in, src, false, nil); err != nil {
			return false, err
		}
		sc.Logf("%s: primary %s -> %s (failover: stopped, started there)", in.Name, src.Name, dst.Name)
		in.PrimaryNode, in.SecondaryNodes = in.SecondaryNodes[0], []string{in.PrimaryNode}
		e.assembleSecondaries(ctx, sc, in)
		_, err := e.call(ctx, sc, dst, NodeCall{Op: NodeOpStart, Instance: in})
		return true, err
	}
	if in.AdminState != fsm.AdminUp && in.DiskTemplate == fsm.DTDrbd && src != nil && e.usable(src, "") == nil {
		// A stopped instance's drbd devices may still be primary on its
		// primary (activated disks): the stop, no effect on the guest,
		// makes them secondary so that the new primary can start it.
		if _, err := e.call(ctx, sc, src, NodeCall{Op: NodeOpStop, Instance: in, Force: true}); err != nil {
			return false, err
		}
	}
	if in.AdminState == fsm.AdminUp {
		if err := e.usable(src, "migrating "+in.Name); err != nil {
			return false, fmt.Errorf("%v; fail the instance over instead", err)
		}
		id := fmt.Sprintf("%s-%s", opID(sc), in.UUID)
		if err := e.prepareMigration(ctx, sc, in, src, dst, id); err != nil {
			return false, err
		}
		for _, c := range []struct {
			node *fsm.Node
			call NodeCall
		}{
			{src, NodeCall{Op: NodeOpMigrateSend, Instance: in, Migration: id, PeerNode: dst.Name, Peer: dst.Addrs.Agent}},
			{dst, NodeCall{Op: NodeOpMigrateFinish, Instance: in, Migration: id}},
		} {
			if _, err := e.call(ctx, sc, c.node, c.call); err != nil {
				if c.call.Op == NodeOpMigrateSend {
					err = e.abortMigration(ctx, sc, in, src, dst, id, err)
				}
				return false, err
			}
		}
	}
	sc.Logf("%s: primary %s -> %s", in.Name, src.Name, dst.Name)
	in.PrimaryNode, in.SecondaryNodes = in.SecondaryNodes[0], []string{in.PrimaryNode}
	return true, nil
}

// A drbd instance gets a new secondary in two parts, each a step of its
// own, because the new node's drbd minors come from the state: the
// state allocates them when the record naming the new secondary is
// stored, and the agents need them to create the disks there.
//
// dropSecondary is the first part: the old secondary's devices are taken
// down (disk-detach there with the record that still names it, as
// Ganeti's replace-disks detaches the old secondary's devices before it
// connects the new one), its volumes kept until the new secondary is in
// sync (syncSecondary removes them: until then they are a copy of the
// data should the primary fail), or that node is left with a warning
// when it is down; in gets the new secondary, which the caller records.
// It changes nothing when in's secondary is newSec already (a step run
// again).
func (e *Executor) dropSecondary(ctx context.Context, sc *StepContext, in *fsm.Instance, oldSec, newSec string) (bool, error) {
	if len(in.SecondaryNodes) == 1 && in.SecondaryNodes[0] == newSec {
		return false, nil
	}
	if len(in.SecondaryNodes) != 1 || in.SecondaryNodes[0] != oldSec {
		return false, fmt.Errorf("instance %s's secondary is no longer the planned %s", in.Name, oldSec)
	}
	var oldNode, newNode *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { oldNode, newNode = s.Nodes[oldSec], s.Nodes[newSec] })
	if err := e.usable(newNode, "creating "+in.Name+"'s new secondary"); err != nil {
		return false, err
	}
	switch {
	case oldNode == nil:
	case e.usable(oldNode, "") != nil:
		// Ganeti goes on with an old secondary that is offline (early
		// release) and only warns about what it could not remove there.
		sc.Logf("WARNING: the old secondary %s is %s and was not contacted: its devices of %s's disks are not taken down",
			oldNode.Name, downWord(e, oldNode), in.Name)
	case in.DiskTemplate == fsm.DTDrbd:
		for k, d := range in.Disks {
			if _, err := e.call(ctx, sc, oldNode, NodeCall{Op: NodeOpDiskDetach, Instance: in, Disk: d.UUID}); err != nil {
				sc.Logf("WARNING: disk/%d of %s is not taken down on the old secondary %s: %v", k, in.Name, oldNode.Name, err)
			}
		}
	}
	sc.Logf("%s: secondary -> %s", in.Name, newNode.Name)
	in.SecondaryNodes = []string{newSec}
	return true, nil
}

// syncSecondary is the second part: in's disks are created on its
// (recorded) secondary, the primary's drbd devices are connected to it
// (reconnectDRBD), and the resync is waited for; only then is the copy
// on the old secondary oldSec removed (removeLeftCopy), so that a
// failure before leaves it for a retry. Each call is idempotent, so the
// step runs again after a leader change.
func (e *Executor) syncSecondary(ctx context.Context, sc *StepContext, in *fsm.Instance, want, oldSec string) error {
	if len(in.SecondaryNodes) != 1 || in.SecondaryNodes[0] != want {
		return fmt.Errorf("instance %s's secondary is no longer the planned %s", in.Name, want)
	}
	var sec *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { sec = s.Nodes[want] })
	if err := e.usable(sec, "creating "+in.Name+"'s disks on its new secondary"); err != nil {
		return err
	}
	for _, d := range in.Disks {
		if _, err := e.call(ctx, sc, sec, NodeCall{Op: NodeOpDiskCreate, Instance: in, Disk: d.UUID}); err != nil {
			return err
		}
	}
	act, err := e.reconnectDRBD(ctx, sc, in)
	if err != nil {
		return err
	}
	if err := e.waitForSync(ctx, sc, in, "new secondary "+sec.Name); err != nil {
		return err
	}
	e.removeLeftCopy(ctx, sc, in, oldSec)
	return e.settleDRBD(ctx, sc, in, act)
}

// removeLeftCopy removes what the node u, no longer one of in's nodes,
// has of it (an old secondary after the new one's sync, as Ganeti's
// _RemoveOldStorage; the nodes recreate-disks moved the instance off):
// the agent takes a drbd disk's device down there, finding its minor by
// its data volume since in's ends no longer name the node, and removes
// its volumes. A node that is down or fails is a warning: its copy is
// left there for the operator.
func (e *Executor) removeLeftCopy(ctx context.Context, sc *StepContext, in *fsm.Instance, u string) {
	if u == "" || u == in.PrimaryNode || slices.Contains(in.SecondaryNodes, u) {
		return
	}
	var old *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { old = s.Nodes[u] })
	switch {
	case old == nil:
	case e.usable(old, "") != nil:
		sc.Logf("WARNING: the old node %s is %s: its copy of %s's disks is left there; remove it by hand when the node is back", old.Name, downWord(e, old), in.Name)
	default:
		if _, err := e.call(ctx, sc, old, NodeCall{Op: NodeOpRemove, Instance: in}); err != nil {
			sc.Logf("WARNING: the old node %s keeps a copy of %s's disks: %v", old.Name, in.Name, err)
		}
	}
}

// recreateOn moves a plain or diskless instance to m.NewPrimary by
// re-creating it there: it is stopped on its old primary (when that
// answers), its disks are created empty on the new node and, for a plain
// instance, its OS installed again (the data stays behind: the planner
// proposes this for plain instances only when allowed to), then it is
// started when it should run. Each call is idempotent, so the step runs
// again after a leader change.
func (e *Executor) recreateOn(ctx context.Context, sc *StepContext, in *fsm.Instance, nodes map[string]*fsm.Node, m alloc.Move) (bool, error) {
	var dst *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { dst = s.Nodes[m.NewPrimary] })
	if err := e.usable(dst, "re-creating "+in.Name); err != nil {
		return false, err
	}
	if err := e.checkBridges(ctx, sc, dst, in, nil); err != nil {
		return false, err
	}
	if src := nodes[in.PrimaryNode]; src != nil && e.usable(src, "") == nil {
		if _, err := e.call(ctx, sc, src, NodeCall{Op: NodeOpStop, Instance: in, Force: true}); err != nil {
			return false, err
		}
	} else if src != nil {
		sc.Logf("%s is %s: %s is not stopped there", src.Name, downWord(e, src), in.Name)
	}
	in.PrimaryNode, in.SecondaryNodes = m.NewPrimary, []string{}
	for _, d := range in.Disks {
		if _, err := e.call(ctx, sc, dst, NodeCall{Op: NodeOpDiskCreate, Instance: in, Disk: d.UUID}); err != nil {
			return false, err
		}
	}
	if in.DiskTemplate == fsm.DTPlain {
		if _, err := e.call(ctx, sc, dst, NodeCall{Op: NodeOpOSInstall, Instance: in}); err != nil {
			return false, err
		}
	}
	if in.AdminState == fsm.AdminUp {
		if _, err := e.call(ctx, sc, dst, NodeCall{Op: NodeOpStart, Instance: in}); err != nil {
			return false, err
		}
	}
	if src := nodes[m.OldPrimary]; src != nil && e.usable(src, "") == nil {
		if _, err := e.call(ctx, sc, src, NodeCall{Op: NodeOpRemove, Instance: in}); err != nil {
			sc.Logf("the old primary %s keeps what it had of %s: %v", src.Name, in.Name, err)
		}
	}
	sc.Logf("%s re-created on %s", in.Name, dst.Name)
	return true, nil
}
