package jobs

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
)

// mustBeDown refuses an operation on an instance that should be running.
func mustBeDown(in *fsm.Instance, what string) error {
	if in.AdminState == fsm.AdminUp {
		return &fsm.Error{Code: fsm.CodeState, Field: "instance_name",
			Msg: fmt.Sprintf("instance %s is up; shut it down before %s", in.Name, what)}
	}
	if in.Forthcoming {
		return &fsm.Error{Code: fsm.CodeState, Field: "instance_name",
			Msg: fmt.Sprintf("instance %s is forthcoming (a reservation): %s needs a real instance", in.Name, what)}
	}
	return nil
}

// diskSelection returns the instance's disks with the given indexes (all
// when none are given).
func diskSelection(in *fsm.Instance, idx []int) ([]fsm.Disk, error) {
	if len(idx) == 0 {
		return in.Disks, nil
	}
	var out []fsm.Disk
	for _, i := range idx {
		if i >= len(in.Disks) {
			return nil, &fsm.Error{Code: fsm.CodeInval, Field: "disks", Msg: fmt.Sprintf("instance %s has no disk %d", in.Name, i)}
		}
		out = append(out, in.Disks[i])
	}
	return out, nil
}

// reinstallSteps are OP_INSTANCE_REINSTALL's steps. Ganeti reinstalls only
// an instance marked down (CheckInstanceState INSTANCE_DOWN), on an online
// primary. gnt also reinstalls an instance marked up when an earlier
// opcode of the same job re-created its disks on new nodes because its
// primary was offline (harep's reinstall repair: OP_INSTANCE_RECREATE_DISKS
// with iallocator, then OP_INSTANCE_REINSTALL): it then runs nowhere, its
// disks are empty, and it is started once the OS is installed, since it
// is marked up. In Ganeti that repair fails at the reinstall ("is marked
// to be up, cannot reinstall") after the recreate moved the instance,
// leaving it marked up on empty disks (which the watcher would then boot);
// see reinstallAllowed.
func (e *Executor) reinstallSteps(o *fsm.OpInstanceReinstall) []Step {
	steps := []Step{
		{Name: "record the OS", Run: func(_ context.Context, sc *StepContext) (any, error) {
			in, _, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if _, err := e.reinstallAllowed(sc, in); err != nil {
				return nil, err
			}
			changed := false
			expect := in.SerialNo
			if o.OSType != "" && o.OSType != in.OS {
				in.OS = o.OSType
				changed = true
			}
			if len(o.OSParams) > 0 {
				// As Ganeti's reinstall: the instance keeps the OS
				// parameters it is installed with ("default" or null
				// removes one).
				p := make(map[string]any, len(in.OSParams)+len(o.OSParams))
				for k, v := range in.OSParams {
					p[k] = v
				}
				for k, v := range o.OSParams {
					if v == nil || v == "default" {
						delete(p, k)
					} else {
						p[k] = v
					}
				}
				in.OSParams = p
				changed = true
			}
			if changed {
				put(sc, in, expect)
			}
			return nil, nil
		}},
		{Name: "install the OS", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			up, err := e.reinstallAllowed(sc, in)
			if err != nil {
				return nil, err
			}
			node := nodes[in.PrimaryNode]
			if err := e.usable(node, "reinstalling "+in.Name); err != nil {
				return nil, err
			}
			if up {
				// Nothing was to run on the new primary; another job may
				// have started the instance since the recreate.
				r, err := e.statusOf(ctx, sc, node, in)
				if err != nil {
					return nil, err
				}
				if err == nil && r.State == "running" {
					return nil, &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("Instance %s is running on %s, cannot reinstall", in.Name, node.Name)}
				}
			}
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpStop, Instance: in, Force: true}); err != nil {
				return nil, err
			}
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpOSInstall, Instance: in, OpID: opID(sc)}); err != nil {
				return nil, err
			}
			sc.Logf("reinstalled %s with OS %s on %s", in.Name, in.OS, node.Name)
			if up {
				e.assembleSecondaries(ctx, sc, in)
				if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpStart, Instance: in}); err != nil {
					return nil, err
				}
				sc.Logf("%s is marked up: started on %s", in.Name, node.Name)
			}
			return nil, nil
		}},
	}
	if o.Start {
		steps = append(steps, startStep(e, o.Ref(), false))
	}
	return steps
}

// shutDownEarlier reports whether an earlier opcode of this job shut the
// instance down (and would record it down) successfully.
func (e *Executor) shutDownEarlier(sc *StepContext, in *fsm.Instance) bool {
	for i := sc.OpIndex - 1; i >= 0; i-- {
		st := sc.Job.Ops[i]
		op, perr := st.Opcode()
		sd, ok := op.(*fsm.OpInstanceShutdown)
		if perr != nil || !ok || st.Status != fsm.StatusSuccess || sd.NoRemember {
			continue
		}
		same := false
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if x := s.LookupInstance(sd.Ref()); x != nil && x.UUID == in.UUID {
				same = true
			}
		})
		if same {
			return true
		}
	}
	return false
}

// reinstallAllowed refuses to reinstall an instance that should be
// running, except one marked up whose disks an earlier opcode of this job
// re-created on new nodes, moving it off its offline primary (see
// reinstallSteps); it returns true for that one.
func (e *Executor) reinstallAllowed(sc *StepContext, in *fsm.Instance) (bool, error) {
	err := mustBeDown(in, "reinstalling it")
	if err == nil || in.Forthcoming || in.AdminState != fsm.AdminUp {
		return false, err
	}
	if sc.DryRun() && e.shutDownEarlier(sc, in) {
		// A dry run of Ganeti's reinstall job (shutdown, reinstall,
		// start): the shutdown before only said what it would do, so
		// the instance is still recorded up.
		return false, nil
	}
	for i := sc.OpIndex - 1; i >= 0; i-- {
		st := sc.Job.Ops[i]
		if st.Status != fsm.StatusSuccess {
			continue
		}
		op, perr := st.Opcode()
		rd, ok := op.(*fsm.OpInstanceRecreateDisks)
		if perr != nil || !ok {
			continue
		}
		var res recreateResult
		if ok, _ := recordedPlan(st, &res); !ok || !res.Moved {
			continue
		}
		same := false
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if x := s.LookupInstance(rd.Ref()); x != nil && x.UUID == in.UUID {
				same = true
			}
		})
		if same && res.Primary == in.PrimaryNode {
			if sc.Index == 0 {
				sc.Logf("%s is marked up but runs nowhere: opcode %d of this job re-created its disks on new nodes; it is started after the install", in.Name, i+1)
			}
			return true, nil
		}
	}
	return false, err
}

// replaceDisksSteps are OP_INSTANCE_REPLACE_DISKS's steps: one for
// replace_on_primary and replace_on_secondary; for replace_new_secondary
// the choice of the new secondary, recorded, then the replacement.
func (e *Executor) replaceDisksSteps(o *fsm.OpInstanceReplaceDisks, st *fsm.OpState) []Step {
	if o.Mode != fsm.ReplaceNewSecondary {
		return []Step{e.replaceDisksStep(o)}
	}
	choose := Step{Name: "choose the new secondary", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		return e.chooseSecondary(ctx, sc, o)
	}}
	var c secondaryChoice
	if ok, err := recordedPlan(st, &c); err != nil || !ok {
		return []Step{choose, {Name: "replace the secondary", Run: func(context.Context, *StepContext) (any, error) {
			return nil, fmt.Errorf("the new secondary was not recorded")
		}}}
	}
	// check reads the instance for the next steps and refuses what can
	// no longer go on: the primary must answer (the new secondary is
	// synchronised from it), and the node chosen stays the choice after
	// a leader change (its disks may be there already), so when it can
	// no longer take the instance the opcode fails instead of choosing
	// another. Once it is recorded, the node only has to answer
	// (syncSecondary): a node drained since still gets its disks.
	check := func(recorded bool) (*fsm.Instance, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if err := needDRBD(in, "replacing disks"); err != nil {
			return nil, err
		}
		if err := e.usable(nodes[in.PrimaryNode], "replacing the secondary of "+in.Name); err != nil {
			return nil, err
		}
		if recorded {
			return in, nil
		}
		var newNode *fsm.Node
		e.FSM.Read(func(s *fsm.State, _ uint64) { newNode = s.Nodes[c.New] })
		if err := e.takesSecondary(newNode, c.NewName); err != nil {
			return nil, err
		}
		return in, nil
	}
	// The new secondary is recorded first (the state gives it its drbd
	// minors), then its disks are created and synchronised: a dry run,
	// which records nothing, goes through both in the first.
	drop := func(ctx context.Context, sc *StepContext, in *fsm.Instance) error {
		expect := in.SerialNo
		changed, err := e.dropSecondary(ctx, sc, in, c.Old, c.New)
		if err == nil && changed {
			put(sc, in, expect)
		}
		return err
	}
	return []Step{choose,
		{Name: "record the new secondary " + c.NewName, Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, err := check(false)
			if err != nil {
				return nil, err
			}
			if err := drop(ctx, sc, in); err != nil || !sc.dryRun {
				return nil, err
			}
			return nil, e.syncSecondary(ctx, sc, in, c.New, c.Old)
		}},
		{Name: "replace the secondary by " + c.NewName, Run: func(ctx context.Context, sc *StepContext) (any, error) {
			if sc.dryRun {
				return nil, nil
			}
			in, err := check(true)
			if err != nil {
				return nil, err
			}
			return nil, e.syncSecondary(ctx, sc, in, c.New, c.Old)
		}}}
}

// Allocator choices that do not answer the probe are skipped, at most
// maxProbeSkips of them, each asked for at most probeTimeout.
const (
	maxProbeSkips = 3
	probeTimeout  = time.Second
)

// secondaryChoice is what the first step of replace_new_secondary
// decides and records: the instance's secondary and the node replacing
// it (UUIDs, with their names).
type secondaryChoice struct {
	Old     string `json:"old_secondary"`
	OldName string `json:"old_secondary_name"`
	New     string `json:"new_secondary"`
	NewName string `json:"new_secondary_name"`
}

// chooseSecondary checks replace_new_secondary as Ganeti's TLReplaceDisks
// does and picks the new secondary: remote_node, or the allocator's
// choice in the primary's group (Ganeti's relocation request: neither
// the primary nor the old secondary, and only a node that takes
// instances: online, not drained, vm_capable, not dead, with the disk and
// the N+1 memory). The old secondary may be down: it is not called.
func (e *Executor) chooseSecondary(ctx context.Context, sc *StepContext, o *fsm.OpInstanceReplaceDisks) (any, error) {
	in, nodes, err := e.instanceOf(o.Ref())
	if err != nil {
		return nil, err
	}
	if err := needDRBD(in, "replacing disks"); err != nil {
		return nil, err
	}
	if len(o.Disks) > 0 {
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "disks", Msg: "Cannot specify disks to be replaced: replace_new_secondary moves every disk"}
	}
	// The new secondary's disks are synchronised from the primary.
	if err := e.usable(nodes[in.PrimaryNode], "replacing the secondary of "+in.Name); err != nil {
		return nil, err
	}
	c := secondaryChoice{Old: in.SecondaryNodes[0], OldName: nodeName(nodes, in.SecondaryNodes[0])}
	var node *fsm.Node
	// pick is the built-in's choice, or with fixed the check of an
	// external allocator's (as a given node is checked: it must fit).
	pick := func(fixed string) (*fsm.Node, error) {
		var node *fsm.Node
		var err error
		exclude := []string{c.Old}
		for attempt := 0; ; attempt++ {
			e.FSM.Read(func(s *fsm.State, _ uint64) {
				if o.RemoteNode != "" {
					if node = s.LookupNode(o.RemoteNode); node == nil {
						err = &fsm.Error{Code: fsm.CodeNoEnt, Field: "remote_node", Msg: fmt.Sprintf("node %s does not exist", o.RemoteNode)}
					} else if ferr := fsm.CheckNodeHypervisor("remote_node", node, in.Name, fsm.PlacementHypervisor(s, in)); ferr != nil {
						node, err = nil, ferr
					}
					return
				}
				req := alloc.Request{Name: in.Name, Instance: in.UUID, Template: fsm.DTDrbd, MemoryMiB: in.MemoryMiB,
					VCPUs: in.VCPUs, Disks: diskSizes(in), Nodes: []string{in.PrimaryNode}, Exclude: exclude, Hypervisor: fsm.PlacementHypervisor(s, in)}
				if fixed != "" {
					req.Nodes, req.Exclude = []string{in.PrimaryNode, fixed}, nil
				}
				var res alloc.Result
				res, err = alloc.Allocate(s, req, e.allocOptions(s))
				if err == nil {
					node = s.Nodes[res.Secondary]
				}
			})
			// The allocator's choice must answer: a node whose death gossip
			// has not reported yet (a new leader records no liveness for a
			// grace period) would fail the opcode at its first disk. A few
			// unanswering nodes are skipped; then the choice stands.
			if err != nil || o.RemoteNode != "" || fixed != "" || e.Probe == nil || attempt >= maxProbeSkips {
				return node, err
			}
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			perr := e.Probe.Alive(pctx, node)
			cancel()
			if perr == nil {
				return node, nil
			}
			sc.Logf("Node %s does not answer (%v): not choosing it as the new secondary", node.Name, perr)
			exclude = append(exclude, node.UUID)
		}
	}
	if o.RemoteNode != "" {
		if node, err = pick(""); err != nil {
			return nil, err
		}
	} else {
		names, err := e.allocators(o.IAllocator)
		if err != nil {
			return nil, err
		}
		node, _, err = iallocator.Try(names, func(name string) (*fsm.Node, error) {
			if name == iallocator.Builtin {
				return pick("")
			}
			ans, err := e.runExternal(ctx, name, func(s *fsm.State) map[string]any {
				return iallocator.RelocateRequest(s, in, []string{c.OldName})
			})
			if err != nil {
				return nil, err
			}
			n, err := pick(ans.Nodes[0])
			if err != nil {
				return nil, fmt.Errorf("its choice %s is refused: %w", ans.Nodes[0], err)
			}
			return n, nil
		}, sc.Logf)
		if err != nil {
			return nil, fmt.Errorf("cannot choose a new secondary with the allocator (%s): %w", strings.Join(names, ","), err)
		}
	}
	switch node.UUID {
	case in.PrimaryNode:
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "remote_node", Msg: "The specified node is the primary node of the instance"}
	case c.Old:
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "remote_node", Msg: "The specified node is already the secondary node of the instance"}
	}
	if err := e.takesSecondary(node, node.Name); err != nil {
		return nil, err
	}
	c.New, c.NewName = node.UUID, node.Name
	if o.RemoteNode == "" {
		sc.Logf("Selected new secondary for instance '%s': %s", in.Name, c.NewName)
	}
	if old := nodes[c.Old]; old != nil && e.usable(old, "") != nil {
		sc.Logf("Old secondary %s is %s: it is not contacted, and its copy of the disks is left there", c.OldName, downWord(e, old))
	}
	return c, nil
}

// allocatorName is the iallocator list named in an opcode, for
// messages: "" is the cluster's default list.
func allocatorName(s string) string {
	if s == "" {
		return "the cluster's default"
	}
	return s
}

// takesSecondary refuses a node that cannot become a secondary (Ganeti's
// CheckNodeOnline, CheckNodeNotDrained, CheckNodeVmCapable; gnt adds
// dead nodes).
func (e *Executor) takesSecondary(n *fsm.Node, name string) error {
	why := ""
	switch {
	case n == nil:
		why = "no longer exists"
	case n.Offline:
		why = "is offline"
	case e.Dead != nil && e.Dead(n):
		why = "is dead"
	case n.Drained:
		why = "is drained"
	case !n.VMCapable:
		why = "is not vm_capable"
	}
	if why != "" {
		return &fsm.Error{Code: fsm.CodeState, Field: "remote_node", Msg: fmt.Sprintf("node %s %s: it cannot become the new secondary", name, why)}
	}
	return nil
}

// downWord says why a node an operation leaves alone is down.
func downWord(e *Executor, n *fsm.Node) string {
	if n.Offline {
		return "offline"
	}
	if e.Dead != nil && e.Dead(n) {
		return "dead"
	}
	return "down"
}

// replaceDisksStep is replace_on_primary and replace_on_secondary: the
// disks are recreated on that side and resynchronised from the other;
// replace_auto first finds the side whose disks are faulty.
func (e *Executor) replaceDisksStep(o *fsm.OpInstanceReplaceDisks) Step {
	return Step{Name: o.Mode, Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if err := needDRBD(in, "replacing disks"); err != nil {
			return nil, err
		}
		disks, err := diskSelection(in, o.Disks)
		if err != nil {
			return nil, err
		}
		node := nodes[in.PrimaryNode]
		switch o.Mode {
		case fsm.ReplaceOnSecondary:
			node = nodes[in.SecondaryNodes[0]]
		case fsm.ReplaceAuto:
			if node, disks, err = e.faultySide(ctx, sc, in, nodes); err != nil || node == nil {
				return nil, err
			}
		}
		if err := e.usable(node, "replacing disks of "+in.Name); err != nil {
			return nil, err
		}
		for _, d := range disks {
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskReplace, Instance: in, Disk: d.UUID, OpID: opID(sc)}); err != nil {
				return nil, err
			}
		}
		sc.Logf("replaced %d disk(s) of %s on %s", len(disks), in.Name, node.Name)
		// As Ganeti's replace-disks, the opcode ends when the new
		// storage is in sync again.
		return nil, e.waitForSync(ctx, sc, in, o.Mode)
	}}
}

// faultySide is replace_auto's choice, as Ganeti's: the side (primary or
// secondary) with faulty disks and those disks, where faulty means that
// the node's agent does not have the disk. Faulty disks on both sides
// cannot be replaced automatically; none faulty needs nothing (node nil).
func (e *Executor) faultySide(ctx context.Context, sc *StepContext, in *fsm.Instance, nodes map[string]*fsm.Node) (*fsm.Node, []fsm.Disk, error) {
	sides := []string{in.PrimaryNode, in.SecondaryNodes[0]}
	var faulty [2][]fsm.Disk
	for k, u := range sides {
		node := nodes[u]
		if err := e.usable(node, "checking the disks of "+in.Name); err != nil {
			return nil, nil, fmt.Errorf("cannot check the disks of %s on %s: %w", in.Name, nodeName(nodes, u), err)
		}
		r, err := e.statusOf(ctx, sc, node, in)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot check the disks of %s on %s: %w", in.Name, node.Name, err)
		}
		if sc.dryRun {
			continue // no agent is asked in a dry run: nothing is known faulty
		}
		present := make(map[string]bool, len(r.Disks))
		for _, d := range r.Disks {
			present[d] = true
		}
		for _, d := range in.Disks {
			if !present[d.UUID] {
				faulty[k] = append(faulty[k], d)
			}
		}
	}
	p, s := nodeName(nodes, sides[0]), nodeName(nodes, sides[1])
	switch {
	case len(faulty[0]) > 0 && len(faulty[1]) > 0:
		return nil, nil, fmt.Errorf("disks of %s are faulty on both the primary (%s) and the secondary (%s) node; cannot replace them automatically (use replace_on_primary or replace_on_secondary, or recreate the disks)", in.Name, p, s)
	case len(faulty[0]) > 0:
		sc.Logf("faulty disks on the primary %s: %s; replacing them there", p, diskIndexes(in, faulty[0]))
		return nodes[sides[0]], faulty[0], nil
	case len(faulty[1]) > 0:
		sc.Logf("faulty disks on the secondary %s: %s; replacing them there", s, diskIndexes(in, faulty[1]))
		return nodes[sides[1]], faulty[1], nil
	}
	sc.Logf("no disks of %s need replacement (every disk is present on %s and %s)", in.Name, p, s)
	return nil, nil, nil
}

// diskIndexes names disks by their index in the instance, as Ganeti's
// messages do ("0, 2").
func diskIndexes(in *fsm.Instance, ds []fsm.Disk) string {
	var out []string
	for _, d := range ds {
		for i, x := range in.Disks {
			if x.UUID == d.UUID {
				out = append(out, strconv.Itoa(i))
			}
		}
	}
	return strings.Join(out, ", ")
}

func diskSizes(in *fsm.Instance) []int64 {
	out := make([]int64, len(in.Disks))
	for i, d := range in.Disks {
		out[i] = d.SizeMiB
	}
	return out
}

func (e *Executor) recreateDisksSteps(o *fsm.OpInstanceRecreateDisks, st *fsm.OpState) []Step {
	// The nodes the first step moved the instance off (recorded in its
	// result): the second removes what they have of it.
	var placed recreateResult
	recorded, recErr := recordedPlan(st, &placed)
	return []Step{
		// The placement is decided and recorded in one step, so a leader
		// that resumes the opcode creates the disks where it was put.
		{Name: "record the nodes", Retry: true, Run: func(ctx context.Context, sc *StepContext) (any, error) {
			return e.recreateNodes(ctx, sc, o)
		}},
		{Name: "create the disks", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			disks, err := diskSelection(in, o.Disks)
			if err != nil {
				return nil, err
			}
			for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
				node := nodes[u]
				if err := e.usable(node, "re-creating disks of "+in.Name); err != nil {
					return nil, err
				}
				for _, d := range disks {
					if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskCreate, Instance: in, Disk: d.UUID}); err != nil {
						return nil, err
					}
				}
			}
			sc.Logf("disks of %s are present on its nodes (missing ones created empty)", in.Name)
			// A drbd primary that kept its devices may still be connected
			// to a secondary the record no longer names: reconnectDRBD.
			act, err := e.reconnectDRBD(ctx, sc, in)
			if err != nil {
				return nil, err
			}
			if err := e.waitForSync(ctx, sc, in, "recreate-disks"); err != nil {
				return nil, err
			}
			// The nodes the first step moved the instance off: their
			// devices are taken down and their volumes removed (a
			// freed drbd minor there may be given to another disk).
			if recErr != nil {
				return nil, recErr
			}
			if recorded {
				for _, u := range placed.Left {
					e.removeLeftCopy(ctx, sc, in, u)
				}
			}
			return nil, e.settleDRBD(ctx, sc, in, act)
		}},
	}
}

// recreateResult is the recorded result of recreate-disks' first step:
// the instance's nodes, and whether they changed. A reinstall later in
// the same job reads it (reinstallAllowed). Left are the nodes the
// instance left (UUIDs): the second step removes what they have of it.
type recreateResult struct {
	Primary     string   `json:"primary"`
	Secondaries []string `json:"secondaries"`
	Moved       bool     `json:"moved,omitempty"`
	Left        []string `json:"left,omitempty"`
}

// recreateNodes is LUInstanceRecreateDisks' CheckPrereq and its change of
// nodes: the nodes given, or with iallocator the allocator's choice in
// the primary's group (nodes that are down take nothing; the instance's
// own resources are left out of the accounting). As in Ganeti the
// instance must not run, except when its nodes are replaced and its
// primary is offline: an offline node runs nothing, so an instance marked
// up whose primary is offline runs nowhere (harep's reinstall repair).
func (e *Executor) recreateNodes(ctx context.Context, sc *StepContext, o *fsm.OpInstanceRecreateDisks) (any, error) {
	in, nodes, err := e.instanceOf(o.Ref())
	if err != nil {
		return nil, err
	}
	move := o.IAllocator != "" || len(o.Nodes) > 0
	switch {
	case o.IAllocator != "" && len(o.Nodes) > 0:
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "iallocator", Msg: "give either nodes or iallocator, not both"}
	case len(in.Disks) == 0:
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "instance_name", Msg: fmt.Sprintf("Instance '%s' has no disks", in.Name)}
	}
	if old := nodes[in.PrimaryNode]; in.AdminState == fsm.AdminUp && move && old != nil && old.Offline && !in.Forthcoming {
		sc.Logf("WARNING: Primary node %s offline, ignoring check that instance %s is down", old.Name, in.Name)
	} else if err := mustBeDown(in, "re-creating its disks"); err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, d := range o.Disks {
		if seen[d] {
			return nil, &fsm.Error{Code: fsm.CodeInval, Field: "disks", Msg: fmt.Sprintf("Some disks have been specified more than once: %d", d)}
		}
		seen[d] = true
	}
	if move && len(o.Disks) > 0 {
		if len(seen) != len(in.Disks) {
			return nil, &fsm.Error{Code: fsm.CodeInval, Field: "disks", Msg: "Can't recreate disks partially and change the nodes at the same time"}
		}
	}
	if _, err := diskSelection(in, o.Disks); err != nil {
		return nil, err
	}
	if !move {
		return recreateResult{Primary: in.PrimaryNode, Secondaries: in.SecondaryNodes}, nil
	}
	var uuids, names []string
	if len(o.Nodes) == 0 {
		req := alloc.Request{Name: in.Name, Instance: in.UUID, Template: in.DiskTemplate, MemoryMiB: in.MemoryMiB,
			VCPUs: in.VCPUs, Disks: diskSizes(in)}
		place := func(fixed []string) (alloc.Result, error) {
			var res alloc.Result
			var err error
			e.FSM.Read(func(s *fsm.State, _ uint64) {
				r := req
				r.Hypervisor = fsm.PlacementHypervisor(s, in)
				if p := s.Nodes[in.PrimaryNode]; p != nil {
					r.Group = p.Group // Ganeti locks the primary's group and places there
				}
				r.Nodes = fixed
				res, err = alloc.Allocate(s, r, e.allocOptions(s))
			})
			return res, err
		}
		res, err := allocateWith(e, ctx, sc, o.IAllocator, req, in.OS, in.Hypervisor, place)
		if err != nil {
			return nil, fmt.Errorf("cannot compute nodes using iallocator '%s': %w", allocatorName(o.IAllocator), err)
		}
		uuids, names = res.Nodes(), res.NodeNames()
	}
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if len(o.Nodes) > 0 {
			if want := 1 + len(in.SecondaryNodes); len(o.Nodes) != want {
				err = &fsm.Error{Code: fsm.CodeInval, Field: "nodes", Msg: fmt.Sprintf("Instance %s currently has %d nodes, but %d replacement nodes were specified", in.Name, want, len(o.Nodes))}
				return
			}
			for _, n := range o.Nodes {
				nd := s.LookupNode(n)
				if nd == nil {
					err = &fsm.Error{Code: fsm.CodeNoEnt, Field: "nodes", Msg: fmt.Sprintf("node %s does not exist", n)}
					return
				}
				if err = e.usable(nd, "re-creating disks of "+in.Name); err != nil {
					return
				}
				if ferr := fsm.CheckNodeHypervisor("nodes", nd, in.Name, fsm.PlacementHypervisor(s, in)); ferr != nil {
					err = ferr
					return
				}
				uuids, names = append(uuids, nd.UUID), append(names, nd.Name)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if o.IAllocator != "" {
		sc.Logf("Selected nodes for instance %s via iallocator %s: %s", in.Name, o.IAllocator, strings.Join(names, ", "))
	}
	moved := uuids[0] != in.PrimaryNode || !slices.Equal(uuids[1:], in.SecondaryNodes)
	if uuids[0] != in.PrimaryNode {
		// The new primary starts the instance: its bridges are checked
		// before the move is recorded (Ganeti's _CheckNicsBridgesExist).
		var primary fsm.Node
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if n := s.Nodes[uuids[0]]; n != nil {
				primary = *n
			}
		})
		if err := e.checkBridges(ctx, sc, &primary, in, nil); err != nil {
			return nil, err
		}
	}
	var left []string
	if moved {
		var names []string
		for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
			if !slices.Contains(uuids, u) {
				left, names = append(left, u), append(names, nodeName(nodes, u))
			}
		}
		if len(left) > 0 {
			sc.Logf("Changing the instance's nodes: what the older nodes have of its disks (%s) is removed once the new disks are created", strings.Join(names, ", "))
		}
		expect := in.SerialNo
		in.PrimaryNode, in.SecondaryNodes = uuids[0], uuids[1:]
		put(sc, in, expect)
	}
	return recreateResult{Primary: in.PrimaryNode, Secondaries: in.SecondaryNodes, Moved: moved, Left: left}, nil
}

func (e *Executor) renameStep(o *fsm.OpInstanceRename) Step {
	return Step{Name: "rename", Run: func(_ context.Context, sc *StepContext) (any, error) {
		in, _, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if in.Name == o.NewName {
			return nil, nil
		}
		if in.AdminState == fsm.AdminUp {
			return nil, &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("instance %s is up; shut it down before renaming it", in.Name)}
		}
		expect, old := in.SerialNo, in.Name
		in.Name = o.NewName
		put(sc, in, expect)
		sc.Logf("renamed %s to %s", old, in.Name)
		return in.Name, nil
	}}
}

// checkNewBridges refuses a modification whose added or changed bridged
// NICs (of next, the instance as modified, against old) have no bridge on
// the instance's primary node, as Ganeti's modify checks the bridges of
// the NICs it adds or changes. A reservation (no node yet) is not
// checked, nor is an instance whose primary is offline or dead (it cannot
// answer; its start checks).
func (e *Executor) checkNewBridges(ctx context.Context, sc *StepContext, old, next *fsm.Instance) error {
	if next.Forthcoming || next.PrimaryNode == "" {
		return nil
	}
	before := map[string]fsm.NIC{}
	for _, n := range old.NICs {
		before[n.UUID] = n
	}
	changed := map[int]bool{}
	for k, n := range next.NICs {
		if b, ok := before[n.UUID]; !ok || b.Mode != n.Mode || b.Link != n.Link {
			changed[k] = true
		}
	}
	if len(changed) == 0 {
		return nil
	}
	var node *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { node = s.Nodes[next.PrimaryNode] })
	if err := e.usable(node, "checking the bridges of "+next.Name); err != nil {
		sc.Logf("WARNING: bridges of %s not checked: %v", next.Name, err)
		return nil
	}
	return e.checkBridges(ctx, sc, node, next, func(k int) bool { return changed[k] })
}

func (e *Executor) setParamsSteps(o *fsm.OpInstanceSetParams) []Step {
	return []Step{
		{Name: "record the parameters", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, _, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			expect := in.SerialNo
			var cluster *fsm.Cluster
			e.FSM.Read(func(s *fsm.State, _ uint64) { cluster = s.Cluster })
			next, changes, perr := o.ApplyTo(cluster, in, func(k int) (string, string) {
				u := derivedUUID(in.UUID, fmt.Sprintf("nic-%s-%d", opID(sc), k))
				return u, derivedMAC(u, 0)
			})
			if perr != nil {
				return nil, perr
			}
			if err := e.checkNewBridges(ctx, sc, in, next); err != nil {
				return nil, err
			}
			in = next
			for _, d := range o.Disks {
				if d.Op != "add" {
					continue // a modification of name or mode: ApplyTo made it
				}
				k := len(in.Disks)
				mode := d.Params.Mode
				if mode == "" {
					mode = "rw"
				}
				uuid := derivedUUID(in.UUID, fmt.Sprintf("disk%d-%s", k, opID(sc)))
				in.Disks = append(in.Disks, fsm.Disk{UUID: uuid, Name: d.Params.Name, SizeMiB: d.Params.Size, Mode: mode})
				changes = append(changes, [2]any{fmt.Sprintf("disk/%d", k), fmt.Sprintf("add:size=%d,mode=%s", d.Params.Size, mode)})
			}
			if len(changes) > 0 {
				put(sc, in, expect)
			}
			return changes, nil
		}},
		{Name: "create new disks", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			added := 0
			for _, d := range o.Disks {
				if d.Op == "add" {
					added++
				}
			}
			if added == 0 {
				return nil, nil
			}
			for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
				node := nodes[u]
				if err := e.usable(node, "creating disks of "+in.Name); err != nil {
					return nil, err
				}
				// An added disk is hot-plugged where the instance runs;
				// one marked up but not running gets it at its next
				// start (an attach now would leave a drbd device
				// primary with no guest).
				running := false
				if in.AdminState == fsm.AdminUp && u == in.PrimaryNode {
					r, err := e.statusOf(ctx, sc, node, in)
					if err != nil {
						return nil, err
					}
					running = r.State == "running" || sc.dryRun
				}
				for _, d := range in.Disks[len(in.Disks)-added:] {
					if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskCreate, Instance: in, Disk: d.UUID}); err != nil {
						return nil, err
					}
					if running {
						if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskAttach, Instance: in, Disk: d.UUID}); err != nil {
							return nil, err
						}
					}
				}
			}
			// Ganeti's _PostAddDisk: the new drbd disks resync from
			// the primary, waited for unless wait_for_sync is false.
			if o.WaitForSync != nil && !*o.WaitForSync {
				if in.DiskTemplate == fsm.DTDrbd {
					sc.Logf("not waiting for the resync of the disks added to %s (wait_for_sync is false)", in.Name)
				}
				return nil, nil
			}
			return nil, e.waitForSync(ctx, sc, in, "modify")
		}},
		{Name: "set the runtime memory", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			if o.RuntimeMem == nil {
				return nil, nil
			}
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			var perr *fsm.Error
			e.FSM.Read(func(s *fsm.State, _ uint64) { perr = fsm.CheckRuntimeMem(s.Cluster, in, o.RuntimeMem) })
			if perr != nil {
				return nil, perr
			}
			node := nodes[in.PrimaryNode]
			if err := e.usable(node, "ballooning "+in.Name); err != nil {
				return nil, err
			}
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpBalloon, Instance: in, MemoryMiB: *o.RuntimeMem}); err != nil {
				return nil, err
			}
			return [][2]any{{"runtime_memory", *o.RuntimeMem}}, nil
		}},
	}
}
