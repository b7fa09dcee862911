package alloc

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// GroupChange is a change of node group resolved against a state: the
// instances to move and the groups they may go to.
type GroupChange struct {
	// Instances are the instances to move, by name (a nameless
	// reservation by its UUID), sorted.
	Instances []string
	// Targets are the UUIDs of the groups they may go to, sorted by name.
	Targets []string
	// From is the group being evacuated (its UUID), or "" for a change
	// of group of instances (each leaves its own groups).
	From string
}

// GroupInstances names the instances with a node (primary or secondary)
// in group g (a UUID), sorted, as Ganeti's group evacuation takes them.
func GroupInstances(st *fsm.State, g string) []string {
	var out []string
	for u, i := range st.Instances {
		for _, n := range append([]string{i.PrimaryNode}, i.SecondaryNodes...) {
			if nd := st.Nodes[n]; nd != nil && nd.Group == g {
				out = append(out, instanceKey(u, i))
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func instanceKey(uuid string, i *fsm.Instance) string {
	if i.Name == "" {
		return uuid
	}
	return i.Name
}

// instanceGroups returns the UUIDs of the groups of an instance's nodes.
func instanceGroups(st *fsm.State, i *fsm.Instance) []string {
	var out []string
	for _, n := range append([]string{i.PrimaryNode}, i.SecondaryNodes...) {
		if nd := st.Nodes[n]; nd != nil && !slices.Contains(out, nd.Group) {
			out = append(out, nd.Group)
		}
	}
	return out
}

// findInstance finds an instance by name or UUID, or nil.
func findInstance(st *fsm.State, ref string) *fsm.Instance {
	u, _ := resolveInstance(st, ref)
	return st.Instances[u]
}

func lookupGroup(st *fsm.State, ref string) *fsm.Group {
	if g := st.LookupGroup(ref); g != nil {
		return g
	}
	for _, g := range st.Groups { // a state built without its indexes
		if g.Name == ref {
			return g
		}
	}
	return nil
}

// ResolveGroupChange checks a change of group as Ganeti's
// OP_INSTANCE_CHANGE_GROUP (from "": instances) and OP_GROUP_EVACUATE
// (from, a group name or UUID: every instance with a node in it) do:
// every instance and target group must exist; a target may not be the
// evacuated group nor, for a change of group, a group the instance has a
// node in. Without targets, every other group is one (the evacuated
// group, or the instances' own groups, left out); there must be one.
// Errors are *fsm.Error naming the field.
func ResolveGroupChange(st *fsm.State, instances []string, from string, targets []string) (GroupChange, error) {
	var gc GroupChange
	own := map[string]bool{}
	if from != "" {
		g := lookupGroup(st, from)
		if g == nil {
			return gc, &fsm.Error{Code: fsm.CodeNoEnt, Field: "group_name", Msg: fmt.Sprintf("node group %s does not exist", from)}
		}
		gc.From, own[g.UUID] = g.UUID, true
		instances = GroupInstances(st, g.UUID)
	}
	for _, ref := range instances {
		i := findInstance(st, ref)
		if i == nil {
			return gc, &fsm.Error{Code: fsm.CodeNoEnt, Field: "instance_name", Msg: fmt.Sprintf("instance %s does not exist", ref)}
		}
		gc.Instances = append(gc.Instances, instanceKey(i.UUID, i))
		if from != "" {
			continue
		}
		for _, g := range instanceGroups(st, i) {
			own[g] = true
		}
	}
	sort.Strings(gc.Instances)
	for k, ref := range targets {
		g := lookupGroup(st, ref)
		field := fmt.Sprintf("target_groups.%d", k)
		switch {
		case g == nil:
			return gc, &fsm.Error{Code: fsm.CodeNoEnt, Field: field, Msg: fmt.Sprintf("target group %s does not exist", ref)}
		case g.UUID == gc.From:
			return gc, &fsm.Error{Code: fsm.CodeInval, Field: field, Msg: fmt.Sprintf("group %s is the group being evacuated and cannot be a target", g.Name)}
		case own[g.UUID]:
			return gc, &fsm.Error{Code: fsm.CodeInval, Field: field, Msg: fmt.Sprintf("group %s cannot be a target: instance %s has nodes in it already", g.Name, strings.Join(gc.Instances, ", "))}
		}
		if !slices.Contains(gc.Targets, g.UUID) {
			gc.Targets = append(gc.Targets, g.UUID)
		}
	}
	if len(targets) == 0 {
		for u := range st.Groups {
			if !own[u] {
				gc.Targets = append(gc.Targets, u)
			}
		}
		if len(gc.Targets) == 0 {
			var names []string
			for u := range own {
				if g := st.Groups[u]; g != nil {
					names = append(names, g.Name)
				}
			}
			sort.Strings(names)
			return gc, &fsm.Error{Code: fsm.CodeInval, Field: "target_groups", Msg: fmt.Sprintf("there are no possible target groups: the cluster has no node group but %s", strings.Join(names, ", "))}
		}
	}
	sort.Slice(gc.Targets, func(a, b int) bool {
		x, y := st.Groups[gc.Targets[a]], st.Groups[gc.Targets[b]]
		return x.Name < y.Name || x.Name == y.Name && x.UUID < y.UUID
	})
	return gc, nil
}

// ChangeGroupPlan plans moving the instances of gc to nodes of its target
// groups, as Ganeti's hail answers a change-group request: each instance
// goes to the target group where it scores best (the policy ranks first:
// unallocable groups take nothing), on nodes that have its memory, disk
// and vcpus, keep N+1 and can run its hypervisor (fsm.PlacementHypervisor,
// as evacuation). A drbd instance moves to
// two new nodes of one group that take drbd disks (MoveRelocate: its disks are copied from its
// primary, which must be up); a diskless one is re-created on one node
// (MoveRecreate: it has no data). Real plain and file instances cannot
// change group (their data would stay behind; hail refuses them too), nor
// can those of other templates. A forthcoming instance moves in the
// configuration only, to a placement of its template. Every planned move
// is accounted for before the next is chosen; real instances are planned
// before forthcoming ones, by name.
//
// The plan holds every move that could be planned; the error, as
// EvacuatePlan's, names each instance that cannot move and why.
func ChangeGroupPlan(st *fsm.State, gc GroupChange, opts Options) (Plan, error) {
	t := buildTable(st, opts, "", "", TemplatePlain)
	plan := Plan{Mode: EvacAll, Moves: []Move{}}
	if g := st.Groups[gc.From]; g != nil {
		plan.NodeName = "group " + g.Name
	}
	var todo []inst
	for _, ref := range gc.Instances {
		i := findInstance(st, ref)
		if i == nil {
			return plan, &fsm.Error{Code: fsm.CodeNoEnt, Field: "instance_name", Msg: fmt.Sprintf("instance %s does not exist", ref)}
		}
		in := t.instance(i)
		in.hv = fsm.PlacementHypervisor(st, i)
		todo = append(todo, in)
	}
	var targets []int32
	for _, u := range gc.Targets {
		if g, ok := t.groupRef(u); ok {
			targets = append(targets, g)
		}
	}
	sort.SliceStable(targets, func(a, b int) bool { return t.groups[targets[a]].rank < t.groups[targets[b]].rank })
	planEach(&plan, todo, func(in *inst) (Move, *Failure) { return t.changeGroup(in, targets) })
	what := "instance(s)"
	if plan.NodeName != "" {
		what = "instance(s) of " + plan.NodeName
	}
	return plan, failedError(plan.Failed, fmt.Sprintf("cannot change the group of %d of %d %s", len(plan.Failed), len(todo), what))
}

// changeGroup places one instance in the best of the target groups it
// has no node in, on nodes that can run its hypervisor (the others are
// marked for the time of the call), and accounts for it there.
func (t *table) changeGroup(in *inst, targets []int32) (Move, *Failure) {
	defer t.unmark(t.markHypervisor(in.hv))
	mv := Move{Instance: in.name, InstanceUUID: in.uuid, Forthcoming: in.forthcoming}
	if in.pri < 0 {
		return mv, failState("it has no nodes, so no group to leave")
	}
	mv.OldPrimary, mv.OldPrimaryName = t.rows[in.pri].uuid, t.rows[in.pri].name
	if len(in.secs) > 0 {
		mv.OldSecondary, mv.OldSecondaryName = t.rows[in.secs[0]].uuid, t.rows[in.secs[0]].name
	}
	sc := &scope{}
	for _, g := range targets {
		if g == t.rows[in.pri].group || len(in.secs) > 0 && g == t.rows[in.secs[0]].group || t.groups[g].rank == 2 {
			continue
		}
		sc.groups = append(sc.groups, g)
	}
	if len(sc.groups) == 0 {
		return mv, failState("no target group is open to it (each is its own group or unallocable)")
	}
	nd := need{mem: in.mem, disk: in.disk, cpu: in.cpu}
	kind := MoveRecreate
	switch {
	case in.template == TemplateDRBD:
		if !in.forthcoming {
			if b := t.rows[in.pri].bad; b == badOffline || b == badDead {
				return mv, failState("its primary node %s is %s: its disks cannot be copied to the new group", t.rows[in.pri].name, b)
			}
			if len(in.secs) != 1 {
				return mv, failState("it has no secondary node")
			}
		}
		nd.drbd, kind = true, MoveRelocate
		defer t.unmark(t.markNoDRBD())
	case in.forthcoming || in.template == TemplateDiskless:
	case in.template == TemplatePlain || in.template == TemplateFile:
		return mv, failState("instances of disk template %s cannot change group: their data would stay behind (re-created empty)", in.template)
	default:
		return mv, failState("instances of disk template %s cannot change group", templateName(in.template))
	}
	t.remove(in, in.pri, in.secs)
	c, ok := t.search(nd, sc)
	if !ok {
		why := t.explain(nd, sc)
		t.add(in, in.pri, in.secs)
		return mv, failRes("no target group can take it: %s", why)
	}
	var secs []int32
	if c.sec >= 0 {
		secs = []int32{c.sec}
	}
	t.add(in, c.pri, secs)
	mv.NewGroup = t.groups[c.g].name
	return t.moved(mv, kind, c.pri, c.sec), nil
}
