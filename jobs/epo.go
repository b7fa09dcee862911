package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
		// A node whose gntd answered is up; its agent should answer its
		// first start soon after.
		agentWait := min(wait, epoAgentWait)
		for _, s := range p.Start {
			steps = append(steps, e.epoStartStep(s.Instance, agentWait))
		}
	}
	if len(steps) > 1 {
		steps = append(steps, Step{Name: "done", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			if p.On {
				// The nodes that did not come back and the instances
				// that did not start, each with its reason: EPO on
				// tries them all, then fails naming them.
				if failed := e.epoFailures(sc); len(failed) > 0 {
					return nil, fmt.Errorf("EPO on: %d of %d node(s) or instance(s) failed: %s", len(failed), len(p.Wait)+len(p.Start), strings.Join(failed, "; "))
				}
			}
			sc.Logf("EPO %s done", onOff(p.On))
			return rec, nil
		}})
	}
	return steps, nil
}

// epoFailure is the result of an EPO on step that failed without failing
// the job: a node that did not come back, an instance that did not start.
type epoFailure struct {
	Node     string `json:"node,omitempty"`
	Instance string `json:"instance,omitempty"`
	Error    string `json:"error"`
}

// epoFailures reads the failures the opcode's steps recorded so far.
func (e *Executor) epoFailures(sc *StepContext) []string {
	var out []string
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		for _, f := range recordedFailures(s, sc) {
			what := "instance " + f.Instance
			if f.Node != "" {
				what = "node " + f.Node
			}
			out = append(out, what+": "+f.Error)
		}
	})
	return out
}

// epoNodesNotBack are the nodes whose wait step of this opcode recorded
// that they did not come back.
func (e *Executor) epoNodesNotBack(sc *StepContext) map[string]bool {
	out := map[string]bool{}
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		for _, f := range recordedFailures(s, sc) {
			if f.Node != "" {
				out[f.Node] = true
			}
		}
	})
	return out
}

// recordedFailures are the epoFailures the opcode's steps recorded.
func recordedFailures(s *fsm.State, sc *StepContext) []epoFailure {
	j := s.Jobs[sc.Job.ID]
	if j == nil || sc.OpIndex >= len(j.Ops) {
		return nil
	}
	var out []epoFailure
	for _, r := range j.Ops[sc.OpIndex].Steps {
		var f epoFailure
		if len(r.Result) > 0 && json.Unmarshal(r.Result, &f) == nil && f.Error != "" {
			out = append(out, f)
		}
	}
	return out
}

// epoStartStep starts an instance after an EPO on. Its primary counts as
// up once its agent answers the start (a signed node RPC), whatever
// gossip says: gossip may still call a node dead that just came back.
// While the agent cannot be reached the start is tried again, for at
// most bound. A start that fails is recorded (epoFailure) and the EPO
// goes on with the next instance.
func (e *Executor) epoStartStep(name string, bound time.Duration) Step {
	return Step{Name: "start " + name, Run: func(ctx context.Context, sc *StepContext) (any, error) {
		err := e.epoStart(ctx, sc, name, bound)
		if err == nil {
			return nil, nil
		}
		if ctx.Err() != nil {
			return nil, err // this executor stops: the step runs again
		}
		sc.Logf("could not start %s: %v", name, err)
		return epoFailure{Instance: name, Error: err.Error()}, nil
	}}
}

func (e *Executor) epoStart(ctx context.Context, sc *StepContext, name string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	back := e.epoNodesNotBack(sc)
	for {
		in, nodes, err := e.instanceOf(name)
		if err != nil {
			return err
		}
		if in.Forthcoming {
			return fmt.Errorf("instance %s is forthcoming (a reservation); it does not run", in.Name)
		}
		node := nodes[in.PrimaryNode]
		switch {
		case node == nil:
			return fmt.Errorf("its primary node no longer exists")
		case node.Offline:
			return fmt.Errorf("its primary node %s is offline", node.Name)
		case back[node.Name]:
			return fmt.Errorf("its primary node %s did not come back", node.Name)
		}
		e.assembleSecondaries(ctx, sc, in)
		_, err = e.call(ctx, sc, node, NodeCall{Op: NodeOpStart, Instance: in})
		if err == nil {
			sc.Logf("%s runs on %s", in.Name, node.Name)
			return nil
		}
		var ne *NodeCallError
		if !errors.As(err, &ne) || ne.Code != "transport" || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent of its primary node %s did not answer within %v: %w", node.Name, bound, err)
		}
		if err := sc.Sleep(ctx, epoPollInterval); err != nil {
			return err
		}
	}
}

// epoAgentWait bounds how long EPO on retries the start of an instance
// whose primary's agent cannot be reached yet.
const epoAgentWait = 2 * time.Minute

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
				// Recorded; the EPO goes on with the other nodes and
				// instances, and fails at the end naming this one.
				err := fmt.Errorf("time exceeded while waiting for node %s to become reachable again (%v): %v", t.Name, timeout, last)
				sc.Logf("%v", err)
				return epoFailure{Node: t.Name, Error: err.Error()}, nil
			}
			if err := sc.Sleep(ctx, epoPollInterval); err != nil {
				return nil, err
			}
		}
	}}
}
