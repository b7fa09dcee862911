package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
)

// allocators is the list of allocators an opcode's iallocator asks for:
// its own list, or the cluster's default_iallocator, or the built-in.
func (e *Executor) allocators(opcode string) ([]string, error) {
	var def string
	e.FSM.Read(func(s *fsm.State, _ uint64) { def = s.Cluster.DefaultIAllocator })
	names, err := iallocator.Resolve(opcode, def)
	if err != nil {
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "iallocator", Msg: err.Error()}
	}
	return names, nil
}

// runExternal runs the external allocator name on the input message of
// the current state with the request request builds, and returns the
// validated answer. The program runs outside the state's read lock, on
// this leader, in the step that calls it.
func (e *Executor) runExternal(ctx context.Context, name string, request func(s *fsm.State) map[string]any) (*iallocator.Answer, error) {
	return RunExternal(ctx, e.FSM, e.IAllocators, e.allocOptions, name, request)
}

// RunExternal runs the external allocator name with runner r on the
// input message of f's current state (the allocator's options from
// opts) with the request request builds, and returns the validated
// answer. The program runs outside the state's read lock.
func RunExternal(ctx context.Context, f *fsm.FSM, r *iallocator.Runner, opts func(*fsm.State) alloc.Options, name string,
	request func(s *fsm.State) map[string]any) (*iallocator.Answer, error) {
	if r == nil {
		return nil, fmt.Errorf("this gntd runs no external allocators")
	}
	var (
		in   *iallocator.Input
		data []byte
		err  error
	)
	f.Read(func(s *fsm.State, _ uint64) {
		in = iallocator.NewInput(s, opts(s), request(s))
		data, err = json.Marshal(in)
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the input message: %v", err)
	}
	out, err := r.Run(ctx, name, data)
	if err != nil {
		return nil, err
	}
	return iallocator.ParseResponse(in, out)
}

// MaxExternalCapacity is how many instances an external allocator is
// asked to place at most when it counts the capacity (one multi-allocate
// request of that many copies of the specification).
const MaxExternalCapacity = 1000

// CapacityResult is a capacity answer with the allocator that gave it.
type CapacityResult struct {
	alloc.CapacityResult
	// IAllocator is the allocator that counted; Failed says why each
	// allocator before it in the list did not.
	IAllocator string   `json:"iallocator"`
	Failed     []string `json:"iallocators_failed,omitempty"`
}

// CapacityWith counts how many instances of spec fit with the
// allocators of list ("" is the cluster's default_iallocator), tried in
// order as a placement tries them: the built-in counts with
// alloc.Capacity; an external allocator is asked, in mode multi-allocate,
// to place MaxExternalCapacity copies of spec, and its placements are
// counted with alloc.CheckCapacity, which keeps them only as long as each
// fits after the ones before it, as the built-in would accept them. The
// first allocator that answers gives the count.
func CapacityWith(ctx context.Context, f *fsm.FSM, r *iallocator.Runner, opts func(*fsm.State) alloc.Options, list string, spec alloc.Request, os, hv string) (CapacityResult, error) {
	var (
		def  string
		ferr error
	)
	f.Read(func(s *fsm.State, _ uint64) {
		if !s.Initialized() {
			ferr = &fsm.Error{Code: fsm.CodeState, Msg: "cluster is not initialised"}
			return
		}
		def = s.Cluster.DefaultIAllocator
	})
	if ferr != nil {
		return CapacityResult{}, ferr
	}
	names, err := iallocator.Resolve(list, def)
	if err != nil {
		return CapacityResult{}, &fsm.Error{Code: fsm.CodeInval, Field: "iallocator", Msg: err.Error()}
	}
	var failed []string
	res, name, err := iallocator.Try(names, func(name string) (alloc.CapacityResult, error) {
		if name == iallocator.Builtin {
			var (
				res alloc.CapacityResult
				err error
			)
			f.Read(func(s *fsm.State, _ uint64) { res, err = alloc.Capacity(s, spec, opts(s)) })
			return res, err
		}
		reqs := make([]alloc.Request, MaxExternalCapacity)
		for k := range reqs {
			reqs[k] = spec
			reqs[k].Name = fmt.Sprintf("capacity-probe-%d", k+1)
		}
		ans, err := RunExternal(ctx, f, r, opts, name, func(*fsm.State) map[string]any {
			return iallocator.MultiAllocateRequest(reqs, os, hv)
		})
		if err != nil {
			return alloc.CapacityResult{}, err
		}
		places := make([]alloc.Placement, len(ans.Allocated))
		for k, p := range ans.Allocated {
			places[k].Primary = p.Nodes[0]
			if len(p.Nodes) > 1 {
				places[k].Secondary = p.Nodes[1]
			}
		}
		var res alloc.CapacityResult
		f.Read(func(s *fsm.State, _ uint64) { res, err = alloc.CheckCapacity(s, spec, places, opts(s)) })
		if err != nil {
			return res, err
		}
		switch {
		case res.Limit != "":
			res.Limit = "iallocator " + name + ": " + res.Limit
		case res.Count == MaxExternalCapacity:
			res.Truncated, res.Limit = true, fmt.Sprintf("stopped counting at %d instances", MaxExternalCapacity)
		default:
			res.Limit = fmt.Sprintf("iallocator %s placed %d of %d", name, res.Count, MaxExternalCapacity)
		}
		return res, nil
	}, func(format string, args ...any) { failed = append(failed, fmt.Sprintf(format, args...)) })
	if err != nil {
		return CapacityResult{}, err
	}
	return CapacityResult{CapacityResult: res, IAllocator: name, Failed: failed}, nil
}

// MultiAllocateWith places the instances of a multi-allocation with the
// allocators of list ("" is the cluster's default_iallocator), tried in
// order: the built-in answers nil (each creation job then places its
// instance itself, one after another, as a single creation does); an
// external allocator is sent one multi-allocate request of every
// instance, and its answer gives each placed instance's nodes, by name,
// and the names of those it could not place (failed), as Ganeti's
// LUInstanceMultiAlloc takes them: the placed ones are created, the
// failed ones reported. os and hv go into the request; each creation job
// checks its nodes as given nodes are checked.
func MultiAllocateWith(ctx context.Context, f *fsm.FSM, r *iallocator.Runner, opts func(*fsm.State) alloc.Options, list string,
	reqs []alloc.Request, os, hv string, logf func(format string, args ...any)) (placed map[string][]string, failed []string, err error) {
	var def string
	f.Read(func(s *fsm.State, _ uint64) {
		if s.Cluster != nil {
			def = s.Cluster.DefaultIAllocator
		}
	})
	names, err := iallocator.Resolve(list, def)
	if err != nil {
		return nil, nil, &fsm.Error{Code: fsm.CodeInval, Field: "iallocator", Msg: err.Error()}
	}
	ans, _, err := iallocator.Try(names, func(name string) (*iallocator.Answer, error) {
		if name == iallocator.Builtin {
			return nil, nil
		}
		return RunExternal(ctx, f, r, opts, name, func(*fsm.State) map[string]any {
			return iallocator.MultiAllocateRequest(reqs, os, hv)
		})
	}, logf)
	if err != nil || ans == nil {
		return nil, nil, err
	}
	placed = make(map[string][]string, len(ans.Allocated))
	for _, p := range ans.Allocated {
		placed[p.Name] = p.Nodes
	}
	return placed, append([]string{}, ans.Failed...), nil
}

// allocateWith places one instance with the allocators of list (an
// opcode's iallocator; "" is the cluster's default): for each in turn,
// the built-in places with fixed(nil) (no nodes given: it chooses), an
// external one is asked in mode allocate and its nodes are checked with
// fixed (which must accept them as the built-in would accept given
// nodes: they exist, are usable, fit, keep N+1). The first that answers wins; when all fail, the error names
// each one and its reason.
func allocateWith[T any](e *Executor, ctx context.Context, sc *StepContext, list string, req alloc.Request, os, hv string,
	fixed func(nodes []string) (T, error)) (T, error) {
	var zero T
	names, err := e.allocators(list)
	if err != nil {
		return zero, err
	}
	v, name, err := iallocator.Try(names, func(name string) (T, error) {
		if name == iallocator.Builtin {
			return fixed(nil)
		}
		ans, err := e.runExternal(ctx, name, func(*fsm.State) map[string]any {
			return iallocator.AllocateRequest(req, os, hv, nil, nil)
		})
		if err != nil {
			return zero, err
		}
		v, err := fixed(ans.Nodes)
		if err != nil {
			return zero, fmt.Errorf("its choice %s is refused: %w", strings.Join(ans.Nodes, ", "), err)
		}
		return v, nil
	}, sc.Logf)
	if err == nil && len(names) > 1 {
		sc.Logf("placed by iallocator %s", name)
	}
	return v, err
}

// evacInstances names the instances an evacuation of node n in mode
// moves, sorted (a nameless reservation by its UUID, as in the input).
func evacInstances(s *fsm.State, n *fsm.Node, mode alloc.EvacMode) []string {
	var out []string
	for u, i := range s.Instances {
		pri := i.PrimaryNode == n.UUID
		sec := slices.Contains(i.SecondaryNodes, n.UUID)
		if (pri && mode != alloc.EvacSecondary) || (sec && mode != alloc.EvacPrimary) {
			name := i.Name
			if name == "" {
				name = u
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// evacuationPlan turns an external allocator's node-evacuate answer into
// the moves gnt runs itself (answerPlan): an instance moves within its
// group, never onto the evacuated node.
func evacuationPlan(s *fsm.State, node string, mode alloc.EvacMode, ans *iallocator.Answer) (alloc.Plan, error) {
	n := s.LookupNode(node)
	if n == nil {
		return alloc.Plan{}, &fsm.Error{Code: fsm.CodeNoEnt, Field: "node_name", Msg: fmt.Sprintf("node %s does not exist", node)}
	}
	p := alloc.Plan{Node: n.UUID, NodeName: n.Name, Mode: mode}
	return answerPlan(s, p, ans, "cannot evacuate "+n.Name, func(in *fsm.Instance, nd *fsm.Node) error {
		if cur := s.Nodes[in.PrimaryNode]; cur != nil && nd.Group != cur.Group {
			return fmt.Errorf("the answer moves %s to node %s, outside its group", in.Name, nd.Name)
		}
		if nd.UUID == n.UUID {
			return fmt.Errorf("the answer leaves %s on %s, the node being evacuated", in.Name, n.Name)
		}
		return nil
	})
}

// changeGroupPlan turns an external allocator's change-group answer into
// the moves gnt runs itself (answerPlan): an instance moves to nodes of a
// target group it has no node in (the answer's validation checked the
// group and that its nodes are of it).
func changeGroupPlan(s *fsm.State, gc alloc.GroupChange, ans *iallocator.Answer) (alloc.Plan, error) {
	p := alloc.Plan{Mode: alloc.EvacAll}
	head := "cannot change the group of the instance(s)"
	if g := s.Groups[gc.From]; g != nil {
		p.NodeName, head = "group "+g.Name, "cannot evacuate group "+g.Name
	}
	return answerPlan(s, p, ans, head, func(in *fsm.Instance, nd *fsm.Node) error {
		for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
			if cur := s.Nodes[u]; cur != nil && cur.Group == nd.Group {
				return fmt.Errorf("the answer moves %s to node %s, in a group it has a node in already", in.Name, nd.Name)
			}
		}
		return nil
	})
}

// answerPlan turns an external allocator's evacuation answer (modes
// node-evacuate and change-group) into the moves of p that gnt runs
// itself (its jobs are validated but not run: each instance's new nodes
// say which move it is), each new node checked by check: to its secondary
// (failover), to a new secondary (replace_secondary), to its secondary
// and a new secondary (failover_replace) or to two new nodes (relocate);
// a plain or diskless instance is re-created only when it is forthcoming
// (a real one's data would be lost, which the built-in refuses too).
// Instances the answer could not move fail the plan (head, then each with
// the allocator's reason).
func answerPlan(s *fsm.State, p alloc.Plan, ans *iallocator.Answer, head string, check func(in *fsm.Instance, nd *fsm.Node) error) (alloc.Plan, error) {
	var failed []string
	for _, f := range ans.NotMoved {
		reason := f.Reason
		if reason == "" {
			reason = "no reason given"
		}
		failed = append(failed, fmt.Sprintf("%s: %s", f.Name, reason))
	}
	for _, mv := range ans.Moved {
		in := s.LookupInstance(mv.Name)
		if in == nil {
			return alloc.Plan{}, fmt.Errorf("the answer moves instance %s, which does not exist", mv.Name)
		}
		var uuids []string
		for _, nn := range mv.Nodes {
			nd := s.LookupNode(nn)
			if nd == nil {
				return alloc.Plan{}, fmt.Errorf("the answer moves %s to node %s, which does not exist", mv.Name, nn)
			}
			if err := check(in, nd); err != nil {
				return alloc.Plan{}, err
			}
			uuids = append(uuids, nd.UUID)
		}
		m := alloc.Move{Instance: mv.Name, InstanceUUID: in.UUID, Forthcoming: in.Forthcoming,
			OldPrimary: in.PrimaryNode, OldPrimaryName: s.NodeName(in.PrimaryNode), NewPrimary: uuids[0], NewPrimaryName: s.NodeName(uuids[0])}
		if g := s.Groups[s.Nodes[uuids[0]].Group]; g != nil && s.Nodes[in.PrimaryNode] != nil && s.Nodes[in.PrimaryNode].Group != g.UUID {
			m.NewGroup = g.Name
		}
		if len(in.SecondaryNodes) > 0 {
			m.OldSecondary, m.OldSecondaryName = in.SecondaryNodes[0], s.NodeName(in.SecondaryNodes[0])
		}
		if len(uuids) > 1 {
			m.NewSecondary, m.NewSecondaryName = uuids[1], s.NodeName(uuids[1])
		}
		switch {
		case in.DiskTemplate != fsm.DTDrbd:
			if !in.Forthcoming && in.DiskTemplate != fsm.DTDiskless {
				failed = append(failed, fmt.Sprintf("%s: a %s instance would be re-created empty on %s (its data lost); move it yourself", mv.Name, in.DiskTemplate, m.NewPrimaryName))
				continue
			}
			m.Kind = alloc.MoveRecreate
		case len(uuids) != 2:
			return alloc.Plan{}, fmt.Errorf("the answer gives drbd instance %s %d node(s)", mv.Name, len(uuids))
		case m.NewPrimary == m.OldPrimary && m.NewSecondary == m.OldSecondary:
			return alloc.Plan{}, fmt.Errorf("the answer leaves %s where it is", mv.Name)
		case m.NewPrimary == m.OldSecondary && m.NewSecondary == m.OldPrimary:
			m.Kind = alloc.MoveFailover
		case m.NewPrimary == m.OldPrimary:
			m.Kind = alloc.MoveReplaceSecondary
		case m.NewPrimary == m.OldSecondary:
			m.Kind = alloc.MoveFailoverReplace
		default:
			m.Kind = alloc.MoveRelocate
		}
		p.Moves = append(p.Moves, m)
	}
	if len(failed) > 0 {
		return p, &fsm.Error{Code: fsm.CodeNoRes, Msg: fmt.Sprintf("%s: %s", head, strings.Join(failed, "; "))}
	}
	return p, nil
}

// evacuatePlanWith is the plan of an evacuation by the allocators of
// list, tried in order (planWith; the built-in: alloc.EvacuatePlan).
func (e *Executor) evacuatePlanWith(ctx context.Context, sc *StepContext, list, node string, mode alloc.EvacMode) (alloc.Plan, error) {
	return e.planWith(ctx, sc, list, func(s *fsm.State) (alloc.Plan, error) {
		return alloc.EvacuatePlan(s, node, mode, e.allocOptions(s))
	}, func(s *fsm.State) map[string]any {
		var insts []string
		if n := s.LookupNode(node); n != nil {
			insts = evacInstances(s, n, mode)
		}
		return iallocator.NodeEvacuateRequest(insts, string(mode))
	}, func(s *fsm.State, ans *iallocator.Answer) (alloc.Plan, error) {
		return evacuationPlan(s, node, mode, ans)
	})
}

// planWith is a plan of moves by the allocators of list, tried in order
// until one answers: the built-in plans with builtin on the state; an
// external allocator is sent the request request builds, and its
// validated answer becomes the plan by fromAnswer.
func (e *Executor) planWith(ctx context.Context, sc *StepContext, list string, builtin func(s *fsm.State) (alloc.Plan, error),
	request func(s *fsm.State) map[string]any, fromAnswer func(s *fsm.State, ans *iallocator.Answer) (alloc.Plan, error)) (alloc.Plan, error) {
	names, err := e.allocators(list)
	if err != nil {
		return alloc.Plan{}, err
	}
	p, _, err := iallocator.Try(names, func(name string) (alloc.Plan, error) {
		var (
			p   alloc.Plan
			err error
		)
		if name == iallocator.Builtin {
			e.FSM.Read(func(s *fsm.State, _ uint64) { p, err = builtin(s) })
			return p, err
		}
		ans, err := e.runExternal(ctx, name, request)
		if err != nil {
			return p, err
		}
		e.FSM.Read(func(s *fsm.State, _ uint64) { p, err = fromAnswer(s, ans) })
		return p, err
	}, sc.Logf)
	return p, err
}

// changeGroupPlanWith is the plan of a change of group (Ganeti's
// OP_INSTANCE_CHANGE_GROUP: instances; OP_GROUP_EVACUATE: from, a group)
// by the allocators of list, tried in order: the built-in plans with
// alloc.ChangeGroupPlan; an external allocator is sent the change-group
// request Ganeti sends (the instances, the target group UUIDs) and its
// answer gives the moves. The instances and groups are checked first
// (alloc.ResolveGroupChange), so a bad request runs no allocator.
func (e *Executor) changeGroupPlanWith(ctx context.Context, sc *StepContext, list string, instances []string, from string, targets []string) (alloc.Plan, error) {
	if _, err := e.allocators(list); err != nil {
		return alloc.Plan{}, err
	}
	var (
		gc  alloc.GroupChange
		err error
	)
	e.FSM.Read(func(s *fsm.State, _ uint64) { gc, err = alloc.ResolveGroupChange(s, instances, from, targets) })
	if err != nil {
		return alloc.Plan{}, err
	}
	return e.planWith(ctx, sc, list, func(s *fsm.State) (alloc.Plan, error) {
		return alloc.ChangeGroupPlan(s, gc, e.allocOptions(s))
	}, func(*fsm.State) map[string]any {
		return iallocator.ChangeGroupRequest(gc.Instances, gc.Targets)
	}, func(s *fsm.State, ans *iallocator.Answer) (alloc.Plan, error) {
		return changeGroupPlan(s, gc, ans)
	})
}
