package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/oob"
)

// epoRecord is what the first step of OP_CLUSTER_EPO records: the plan
// (oob.PlanEPO) and the UUIDs of its nodes. The other steps are built from
// it, so a leader that resumes the EPO carries on with the same plan.
type epoRecord struct {
	Plan  oob.EPOPlan       `json:"plan"`
	UUIDs map[string]string `json:"uuids"`
}

// epoViews is the configuration as the EPO plan reads it.
func epoViews(s *fsm.State) ([]oob.NodeView, []oob.InstanceView, map[string]string) {
	var nodes []oob.NodeView
	uuids := map[string]string{}
	master := ""
	if s.Cluster != nil {
		master = s.Cluster.MasterNode
	}
	for _, n := range s.SortedNodes() {
		_, hasOOB := programOf(s, n)
		group := n.Group
		if g := s.Groups[n.Group]; g != nil {
			group = g.Name
		}
		nodes = append(nodes, oob.NodeView{Name: n.Name, Group: group, Master: n.UUID == master,
			Candidate: n.MasterCandidate, Offline: n.Offline, Powered: n.Powered, OOB: hasOOB})
		uuids[n.Name] = n.UUID
	}
	var insts []oob.InstanceView
	for _, i := range s.SortedInstances() {
		v := oob.InstanceView{Name: i.Name, Up: i.AdminState == fsm.AdminUp, Nodes: []string{s.NodeName(i.PrimaryNode)}}
		for _, sn := range i.SecondaryNodes {
			v.Nodes = append(v.Nodes, s.NodeName(sn))
		}
		insts = append(insts, v)
	}
	return nodes, insts, uuids
}

// epoSteps are OP_CLUSTER_EPO's steps, built from its plan: the plan
// itself; off: one power-off per node, and for the master's node (with
// all) the hand-over of its role before it; on: one power-on per node
// (with the power delay between them), then one wait per node until its
// gntd answers again; then a last step whose result is the plan. They
// resume as OP_OOB_COMMAND's (oobSteps); a wait simply waits again.
//
// Instances: an EPO off shuts the plan's instances down first, one step
// each, without recording them as down (Ganeti's no_remember); an EPO on
// starts each instance of the plan, one step each, once the nodes it
// needs answer again.
func (e *Executor) epoSteps(o *fsm.OpClusterEpo, st *fsm.OpState) ([]Step, error) {
	var rec epoRecord
	recorded, err := recordedPlan(st, &rec)
	if err != nil {
		return nil, err
	}
	var perr error
	if !recorded {
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			nodes, insts, uuids := epoViews(s)
			rec.UUIDs = uuids
			rec.Plan, perr = oob.PlanEPO(nodes, insts, oob.EPORequest{On: o.On, All: o.All, Groups: o.Groups, Names: o.Names})
		})
	}
	dry := o.DryRun != nil && *o.DryRun
	plan := Step{Name: "plan", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		if perr != nil {
			return nil, &fsm.Error{Code: fsm.CodeInval, Field: "names", Msg: perr.Error()}
		}
		for _, l := range rec.Plan.Describe() {
			sc.Logf("%s", l)
		}
		return rec, nil
	}}
	steps := []Step{plan}
	if perr != nil || dry {
		return steps, nil
	}
	timeout := time.Duration(fsm.OOBTimeout) * time.Second
	if o.Timeout > 0 {
		timeout = time.Duration(o.Timeout) * time.Second
	}
	node := func(name string) target { return target{Name: name, UUID: rec.UUIDs[name]} }
	p := rec.Plan
	if !p.On {
		// The instances first, without recording them as down (Ganeti's
		// no_remember), so EPO --on starts them again.
		for _, name := range p.Stop {
			st := stopStep(e, name, nil, false, true, true)
			st.Name = "shut down " + name
			steps = append(steps, st)
		}
		for _, name := range p.Power {
			if p.Handover != nil && name == p.Handover.Master {
				steps = append(steps, e.handoverStep(node(name), p.Handover.To, o.Reason))
			}
			steps = append(steps, e.nodeStep(powerStep{cmd: oob.PowerOff, node: node(name), timeout: timeout, reason: &o.OpCommon}))
		}
	} else {
		delay := time.Duration(fsm.OOBPowerDelay * float64(time.Second))
		if o.PowerDelay != nil {
			delay = time.Duration(*o.PowerDelay * float64(time.Second))
		}
		for i, name := range p.Power {
			ps := powerStep{cmd: oob.PowerOn, node: node(name), timeout: timeout, reason: &o.OpCommon}
			if i > 0 {
				ps.delay = delay
			}
			steps = append(steps, e.nodeStep(ps))
		}
		wait := time.Duration(fsm.EPOWaitTimeout) * time.Second
		if o.WaitTimeout > 0 {
			wait = time.Duration(o.WaitTimeout) * time.Second
		}
		for _, name := range p.Wait {
			steps = append(steps, e.waitStep(node(name), wait))
		}
		for _, s := range p.Start {
			st := startStep(e, s.Instance, true)
			st.Name = "start " + s.Instance
			steps = append(steps, st)
		}
	}
	if len(steps) > 1 {
		steps = append(steps, Step{Name: "done", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			sc.Logf("EPO %s done", onOff(p.On))
			return rec, nil
		}})
	}
	return steps, nil
}

// epoPollInterval is how often EPO on asks whether a node is back
// (Ganeti pings every 30 seconds; a probe is cheap).
var epoPollInterval = time.Second

// waitStep waits until the node's gntd answers (NodeProbe), as Ganeti's
// EPO waits for the node daemon's port.
func (e *Executor) waitStep(t target, timeout time.Duration) Step {
	return Step{Name: "wait for " + t.Name, Run: func(ctx context.Context, sc *StepContext) (any, error) {
		if e.Probe == nil {
			return nil, fmt.Errorf("this gntd cannot tell whether node %s is back", t.Name)
		}
		deadline := time.Now().Add(timeout)
		var last error
		for {
			var n fsm.Node
			found := false
			e.FSM.Read(func(s *fsm.State, _ uint64) {
				if x := s.Nodes[t.UUID]; x != nil {
					n, found = *x, true
				}
			})
			if !found {
				return nil, fmt.Errorf("node %s is no longer in the configuration", t.Name)
			}
			if last = e.Probe.Alive(ctx, &n); last == nil {
				sc.Logf("Node %s became available", t.Name)
				return nil, nil
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("time exceeded while waiting for node %s to become reachable again (%v): %v", t.Name, timeout, last)
			}
			if err := sc.Sleep(ctx, epoPollInterval); err != nil {
				return nil, err
			}
		}
	}}
}
