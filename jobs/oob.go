package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/oob"
)

// Leadership hands the master role (Raft leadership) of this gntd to
// another master candidate. OP_OOB_COMMAND and OP_CLUSTER_EPO use it before
// they power off the master's node: this executor then loses its
// leadership, and the next leader resumes the opcode at its next step and
// powers the old master's node off. The server implements it.
type Leadership interface {
	// Transfer hands the leadership to the first of the named candidates
	// that takes it and returns the new leader's name.
	Transfer(ctx context.Context, to []string) (newLeader string, err error)
}

// NodeProbe tells whether a node's gntd answers again (EPO --on waits
// for it before it starts the node's instances). The server implements it.
type NodeProbe interface {
	Alive(ctx context.Context, n *fsm.Node) error
}

// Ganeti's query result statuses (constants.RS_*), as OP_OOB_COMMAND's
// result carries them per node.
const (
	rsNormal = 0
	rsNoData = 2
)

// oobEntry is one node's part of OP_OOB_COMMAND's result, Ganeti's
// [[RS_NORMAL, name], [status, payload]].
func oobEntry(name string, status int, payload any) []any {
	return []any{[]any{rsNormal, name}, []any{status, payload}}
}

func (e *Executor) runner() *oob.Runner {
	if e.OOB != nil {
		return e.OOB
	}
	return &oob.Runner{}
}

// programOf is a node's OOB helper, inherited cluster, group, node.
func programOf(s *fsm.State, n *fsm.Node) (string, bool) {
	var cluster, group map[string]any
	if s.Cluster != nil {
		cluster = s.Cluster.NDParams
	}
	if g := s.Groups[n.Group]; g != nil {
		group = g.NDParams
	}
	return oob.Program(cluster, group, n.NDParams)
}

// reasonText is the reason trail of an opcode for the log of a power
// change: who asked (the trail's sources) and why (their texts).
func reasonText(c *fsm.OpCommon) string {
	if len(c.Reason) == 0 {
		return "no reason trail"
	}
	parts := make([]string, len(c.Reason))
	for i, r := range c.Reason {
		parts[i] = r.Source + " " + strconv.Quote(r.Text)
	}
	return "reason trail: " + strings.Join(parts, "; ")
}

// target is a node an OOB step acts on.
type target struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
}

// oobPlan is what the first step of OP_OOB_COMMAND decides from the
// configuration and records; the other steps are built from the recorded
// plan, so a leader that resumes the opcode builds the same steps, whatever
// changed since (the master, for one).
type oobPlan struct {
	Command string   `json:"command"`
	Nodes   []target `json:"nodes"`
	// Master, when set, is the master's node, last in Nodes: its role is
	// handed to the first of HandoverTo that takes it before the command,
	// and (power-off without ignore_status) it is marked offline then.
	Master     *target  `json:"master,omitempty"`
	HandoverTo []string `json:"handover_to,omitempty"`
	Offline    bool     `json:"offline,omitempty"`
}

// planOOB checks OP_OOB_COMMAND against the configuration as LUOobCommand's
// CheckPrereq does and orders its nodes: by name, the master's node last.
func planOOB(s *fsm.State, o *fsm.OpOobCommand) (oobPlan, error) {
	p := oobPlan{Command: o.Command}
	masterUUID := ""
	if s.Cluster != nil {
		masterUUID = s.Cluster.MasterNode
	}
	skipsMaster := o.Command == oob.PowerOff || o.Command == oob.PowerCycle
	var nodes []*fsm.Node
	if refs := o.Nodes(); len(refs) > 0 {
		for _, r := range refs {
			n := s.LookupNode(r)
			if n == nil {
				return p, &fsm.Error{Code: fsm.CodeNoEnt, Field: "node_names", Msg: fmt.Sprintf("node %s does not exist", r)}
			}
			if _, ok := programOf(s, n); !ok {
				return p, &fsm.Error{Code: fsm.CodeState, Field: "node_names", Msg: fmt.Sprintf("Node %s does not support OOB commands", n.Name)}
			}
			nodes = append(nodes, n)
		}
	} else {
		// No names: every node with a helper (the design lists only those),
		// the master left out of power-off and power-cycle (as Ganeti).
		for _, n := range s.SortedNodes() {
			if _, ok := programOf(s, n); ok && !(skipsMaster && n.UUID == masterUUID) {
				nodes = append(nodes, n)
			}
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	var master *fsm.Node
	for _, n := range nodes {
		if skipsMaster && n.UUID == masterUUID {
			master = n
			continue
		}
		if o.Command == oob.PowerOff && !o.IgnoreStatus && !o.Confirm && !n.Offline {
			return p, &fsm.Error{Code: fsm.CodeState, Field: "node_names", Msg: fmt.Sprintf("Cannot power off node %s because it is not marked offline", n.Name)}
		}
		p.Nodes = append(p.Nodes, target{n.Name, n.UUID})
	}
	if master != nil {
		if !o.TransferLeadership {
			prog, _ := programOf(s, master)
			return p, &fsm.Error{Code: fsm.CodeInval, Field: "node_names", Msg: fmt.Sprintf(
				"Operating on the master node %s is not allowed for %s; run '%s %s %s' if you want to operate on the master regardless, or set transfer_leadership (gnt node power does) to hand the master role to another master candidate first",
				master.Name, o.Command, prog, o.Command, master.Name)}
		}
		taken := map[string]bool{master.UUID: true}
		for _, t := range p.Nodes {
			taken[t.UUID] = true
		}
		for _, n := range s.Candidates() {
			if !taken[n.UUID] && !n.Offline && n.Powered {
				p.HandoverTo = append(p.HandoverTo, n.Name)
			}
		}
		if len(p.HandoverTo) == 0 {
			return p, &fsm.Error{Code: fsm.CodeState, Field: "node_names", Msg: fmt.Sprintf(
				"no other master candidate stays up to take over the master role of %s", master.Name)}
		}
		p.Master = &target{master.Name, master.UUID}
		p.Offline = o.Command == oob.PowerOff && !o.IgnoreStatus
		p.Nodes = append(p.Nodes, *p.Master)
	}
	return p, nil
}

// recordedPlan decodes the plan an earlier executor recorded as the
// opcode's first step, if it did.
func recordedPlan(st *fsm.OpState, v any) (bool, error) {
	if st == nil || len(st.Steps) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(st.Steps[0].Result, v); err != nil {
		return false, fmt.Errorf("the recorded plan of this opcode cannot be read: %v", err)
	}
	return true, nil
}

// oobSteps are OP_OOB_COMMAND's steps: the plan, then one step per node in
// the plan's order (for the master's node, first the hand-over of its role
// and, for power-off, marking it offline), then a report whose result is
// the opcode's: Ganeti's list of [[RS_NORMAL, name], [status, payload]].
//
// How each step resumes after a leader change:
//   - plan: recorded with its result, so it never runs twice; an opcode
//     resumed before it was recorded plans again from the configuration;
//   - power-on, power-off: NoRepeat with a Check that asks the helper for
//     power-status: when the node is already in the wanted state the step
//     is recorded (with the powered record) without running again; when it
//     is not, or the status cannot be read, the command runs again, which
//     the protocol allows (asking for the state a node is in);
//   - power-cycle: NoRepeat without Check: a cycle that may have happened
//     cannot be told from one that did not, and a second cycle reboots the
//     node again, so the opcode fails naming the step;
//   - power-status, health: read-only, run again;
//   - hand-over: looks at who is master first, so it runs again safely; the
//     executor that hands its role away is deposed in the middle of it, and
//     the next leader records it;
//   - offline: the node_offline change asks for a state, so repeating it
//     is harmless;
//   - report: reads the recorded steps.
func (e *Executor) oobSteps(o *fsm.OpOobCommand, st *fsm.OpState) ([]Step, error) {
	var p oobPlan
	recorded, err := recordedPlan(st, &p)
	if err != nil {
		return nil, err
	}
	var perr error
	if !recorded {
		e.FSM.Read(func(s *fsm.State, _ uint64) { p, perr = planOOB(s, o) })
	}
	plan := Step{Name: "check nodes", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		if perr != nil {
			return nil, perr
		}
		names := make([]string, len(p.Nodes))
		for i, t := range p.Nodes {
			names[i] = t.Name
		}
		sc.Logf("%s on %s", o.Command, listOrNone(names))
		if p.Master != nil {
			sc.Logf("%s is the master node: its master role goes to one of %s first", p.Master.Name, strings.Join(p.HandoverTo, ", "))
		}
		return p, nil
	}}
	steps := []Step{plan}
	if perr != nil || (o.DryRun != nil && *o.DryRun) {
		return steps, nil
	}
	var entries []entryRef
	powerOns := 0
	for _, t := range p.Nodes {
		if p.Master != nil && t.UUID == p.Master.UUID {
			steps = append(steps, e.handoverStep(*p.Master, p.HandoverTo, o.Reason))
			if p.Offline {
				steps = append(steps, offlineStep(*p.Master))
			}
		}
		ps := powerStep{cmd: o.Command, node: t, timeout: time.Duration(o.TimeoutSeconds()) * time.Second,
			reason: &o.OpCommon, entry: true, confirm: o.Confirm}
		// The master's node was marked offline before (offlineStep).
		ps.markOffline = o.Confirm && !o.IgnoreStatus && (p.Master == nil || t.UUID != p.Master.UUID)
		if o.Command == oob.PowerOn {
			if powerOns > 0 {
				ps.delay = time.Duration(o.Delay() * float64(time.Second))
			}
			powerOns++
		}
		entries = append(entries, entryRef{len(steps), t.Name})
		steps = append(steps, e.nodeStep(ps))
	}
	// A last step answers for the whole opcode from the recorded entries
	// (a node step recorded by a Check after a leader change has none of
	// its own, so none of them can be the one that answers).
	steps = append(steps, Step{Name: "report", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		return e.collectEntries(sc, entries), nil
	}})
	return steps, nil
}

// entryRef is a node step of OP_OOB_COMMAND: its index and node.
type entryRef struct {
	idx  int
	node string
}

// collectEntries gathers the node entries the opcode's recorded steps
// returned. A power-on or power-off that a leader recorded after a leader
// change (its Check found it done) has no result of its own: its entry is
// the plain success it stands for.
func (e *Executor) collectEntries(sc *StepContext, refs []entryRef) []any {
	out := []any{}
	var steps []fsm.StepRecord
	if j := e.readJob(sc.Job.ID); j != nil && sc.OpIndex < len(j.Ops) {
		steps = j.Ops[sc.OpIndex].Steps
	}
	for _, r := range refs {
		var v any
		if r.idx < len(steps) {
			_ = json.Unmarshal(steps[r.idx].Result, &v)
		}
		if v == nil {
			v = oobEntry(r.node, rsNormal, nil)
		}
		out = append(out, v)
	}
	return out
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "no nodes"
	}
	return strings.Join(s, ", ")
}

// powerStep describes one node step of an OOB opcode.
type powerStep struct {
	cmd     string
	node    target
	timeout time.Duration
	// delay is slept before the command (the power delay between two
	// power-ons).
	delay  time.Duration
	reason *fsm.OpCommon
	// entry: the step's result is the node's OP_OOB_COMMAND entry.
	entry bool
	// confirm (power-off, gnt_confirm): power-status must say the node
	// is off before the step records it; markOffline then marks it
	// offline too.
	confirm, markOffline bool
}

// How often, and how far apart, a confirmed power-off asks power-status
// before it gives up: a BMC may report the chassis on for a moment after
// it accepted the power-off.
var (
	powerConfirmAttempts = 5
	powerConfirmInterval = 2 * time.Second
)

// confirmOff asks the helper for power-status until it says the node is
// off; an error says the node is still powered or that its state cannot
// be told, and so that it is not fenced.
func (e *Executor) confirmOff(ctx context.Context, sc *StepContext, prog, name string, timeout time.Duration) error {
	var last string
	for i := 1; ; i++ {
		res, err := e.runner().Run(ctx, prog, oob.PowerStatus, name, timeout)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err != nil:
			last = fmt.Sprintf("power-status cannot tell whether it is off: %v", err)
		case res.Powered:
			last = "power-status still says it is powered"
		default:
			sc.Logf("power-status confirms that node %s is off", name)
			return nil
		}
		if i >= powerConfirmAttempts {
			return fmt.Errorf("node %s is not confirmed off after the power-off (%d power-status calls, %v apart): %s",
				name, i, powerConfirmInterval, last)
		}
		if err := sc.Sleep(ctx, powerConfirmInterval); err != nil {
			return err
		}
	}
}

// powerOffChanges are the configuration changes of a power-off: powered
// false, and offline when the step marks the node offline and it is not.
func (e *Executor) powerOffChanges(sc *StepContext, p powerStep, name string) {
	sc.Change(fsm.StepChange{NodePowered: &fsm.NodePowered{Node: p.node.UUID, Powered: false}})
	if !p.markOffline {
		return
	}
	offline := false
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if n := s.Nodes[p.node.UUID]; n != nil {
			offline = n.Offline
		}
	})
	if !offline {
		sc.Change(fsm.StepChange{NodeOffline: &fsm.NodeOffline{Node: p.node.UUID, Offline: true}})
		sc.Logf("Marked node %s offline: it is confirmed off", name)
	}
}

// nodeView reads what a node step needs of the configuration.
func (e *Executor) nodeView(uuid string) (name, program string, powered, ok bool) {
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		n := s.Nodes[uuid]
		if n == nil {
			return
		}
		name, powered = n.Name, n.Powered
		program, ok = programOf(s, n)
	})
	return
}

// nodeStep runs the helper for one node (see oobSteps for how each
// command resumes).
func (e *Executor) nodeStep(p powerStep) Step {
	st := Step{Name: p.cmd + " " + p.node.Name}
	want := p.cmd == oob.PowerOn
	st.Run = func(ctx context.Context, sc *StepContext) (any, error) {
		name, prog, recorded, ok := e.nodeView(p.node.UUID)
		if name == "" {
			return nil, fmt.Errorf("node %s is no longer in the configuration", p.node.Name)
		}
		if !ok {
			return nil, &fsm.Error{Code: fsm.CodeState, Field: "node_names", Msg: fmt.Sprintf("Node %s does not support OOB commands", name)}
		}
		if p.delay > 0 {
			if err := sc.Sleep(ctx, p.delay); err != nil {
				return nil, err
			}
		}
		if oob.ChangesPower(p.cmd) {
			e.Log.Info("running OOB command", "command", p.cmd, "node", name, "program", prog, "reason", reasonText(p.reason))
		}
		res, err := e.runner().Run(ctx, prog, p.cmd, name, p.timeout)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch p.cmd {
		case oob.PowerOn, oob.PowerOff, oob.PowerCycle:
			if err != nil {
				sc.Logf("%s of node %s failed: %v", p.cmd, name, err)
				e.Log.Warn("OOB command failed", "command", p.cmd, "node", name, "error", err)
				return nil, fmt.Errorf("%s of node %s: %w", p.cmd, name, err)
			}
			if p.confirm {
				if err := e.confirmOff(ctx, sc, prog, name, p.timeout); err != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					sc.Logf("%s of node %s failed: %v", p.cmd, name, err)
					e.Log.Warn("OOB power-off not confirmed", "node", name, "error", err)
					return nil, fmt.Errorf("%s of node %s: %w", p.cmd, name, err)
				}
			}
			if p.cmd == oob.PowerCycle {
				sc.Logf("Power-cycled node %s (%s)", name, reasonText(p.reason))
			} else {
				if want {
					sc.Change(fsm.StepChange{NodePowered: &fsm.NodePowered{Node: p.node.UUID, Powered: want}})
				} else {
					e.powerOffChanges(sc, p, name)
				}
				sc.Logf("Powered %s node %s (powered: %v -> %v; %s)", onOff(want), name, recorded, want, reasonText(p.reason))
				e.Log.Info("node power changed", "node", name, "powered", want, "reason", reasonText(p.reason))
			}
		case oob.PowerStatus:
			if err != nil {
				sc.Logf("WARNING: Out-of-band power-status of node '%s' failed: %v", name, err)
				return e.entry(p, name, rsNoData, nil), nil
			}
			if res.Powered != recorded {
				sc.Logf("WARNING: Recorded power state (%v) of node '%s' does not match actual power state (%v)", recorded, name, res.Powered)
				e.Log.Warn("recorded power state does not match the node's", "node", name, "recorded", recorded, "actual", res.Powered)
			}
		case oob.Health:
			if err != nil {
				sc.Logf("WARNING: Out-of-band health of node '%s' failed: %v", name, err)
				return e.entry(p, name, rsNoData, nil), nil
			}
			for _, h := range res.Health {
				if h.Status == oob.StatusWarning || h.Status == oob.StatusCritical {
					sc.Logf("WARNING: Item '%s' on node '%s' has status '%s'", h.Item, name, h.Status)
					e.Log.Warn("OOB health item", "node", name, "item", h.Item, "status", h.Status)
				}
			}
		}
		return e.entry(p, name, rsNormal, res.Payload()), nil
	}
	switch p.cmd {
	case oob.PowerOn, oob.PowerOff:
		st.NoRepeat = true
		st.Check = func(ctx context.Context, sc *StepContext) (bool, error) {
			name, prog, recorded, ok := e.nodeView(p.node.UUID)
			if !ok {
				return false, nil // Run says why
			}
			res, err := e.runner().Run(ctx, prog, oob.PowerStatus, name, p.timeout)
			if err != nil {
				sc.Logf("after the leader change, the power state of node %s cannot be read (%v); asking for %s again", name, err, p.cmd)
				return false, nil
			}
			if res.Powered != want {
				return false, nil
			}
			if want {
				sc.Change(fsm.StepChange{NodePowered: &fsm.NodePowered{Node: p.node.UUID, Powered: want}})
			} else {
				e.powerOffChanges(sc, p, name)
			}
			sc.Logf("Powered %s node %s (powered: %v -> %v; %s); power-status confirmed it after the leader change",
				onOff(want), name, recorded, want, reasonText(p.reason))
			return true, nil
		}
	case oob.PowerCycle:
		st.NoRepeat = true
	}
	return st
}

// entry is a node step's result: the node's OP_OOB_COMMAND entry, or
// nothing for steps of other opcodes.
func (e *Executor) entry(p powerStep, name string, status int, payload any) any {
	if !p.entry {
		return nil
	}
	return oobEntry(name, status, payload)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// handoverDeposedWait is how long the step that handed the master role
// away waits to be stopped (this executor losing its leadership).
var handoverDeposedWait = 30 * time.Second

// handoverStep moves the master role away from the master's node before it
// is powered off. It looks at who is master first: on the leader that
// runs on that node it hands the role over and waits to be deposed (the
// next leader resumes the opcode here); anywhere else it records that the
// role has moved.
func (e *Executor) handoverStep(m target, to []string, reason []fsm.ReasonEntry) Step {
	return Step{Name: "hand over the master role of " + m.Name, Run: func(ctx context.Context, sc *StepContext) (any, error) {
		master := ""
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if s.Cluster != nil {
				master = s.Cluster.MasterNode
			}
		})
		if master != m.UUID {
			var name string
			e.FSM.Read(func(s *fsm.State, _ uint64) { name = s.NodeName(master) })
			sc.Logf("The master role moved from %s to %s", m.Name, name)
			return map[string]string{"master": name}, nil
		}
		if e.Leadership == nil {
			return nil, errors.New("this gntd cannot hand the master role over")
		}
		e.Log.Info("handing the master role over before the master's node is powered off", "node", m.Name, "to", to,
			"reason", reasonText(&fsm.OpCommon{Reason: reason}))
		newLeader, err := e.Leadership.Transfer(ctx, to)
		if ctx.Err() != nil {
			return nil, ctx.Err() // deposed: the next leader goes on from here
		}
		if err != nil {
			return nil, fmt.Errorf("handing the master role of %s to one of %s: %w", m.Name, strings.Join(to, ", "), err)
		}
		t := time.NewTimer(handoverDeposedWait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("the master role went to %s, but this gntd still ran the executor %v later", newLeader, handoverDeposedWait)
		}
	}}
}

// offlineStep marks the former master's node offline, which it could not
// be while it was the master (OP_NODE_SET_PARAMS's rules, auto-promote).
func offlineStep(m target) Step {
	return Step{Name: "mark " + m.Name + " offline", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		sc.Change(fsm.StepChange{NodeOffline: &fsm.NodeOffline{Node: m.UUID, Offline: true}})
		sc.Logf("Marked node %s offline before powering it off", m.Name)
		return nil, nil
	}}
}
