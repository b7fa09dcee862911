package alloc

import (
	"fmt"
	"sort"

	"github.com/gnt-cluster/gnt/fsm"
)

// Result is where an instance goes.
type Result struct {
	Primary     string `json:"primary"` // node UUID
	PrimaryName string `json:"primary_name"`
	// Secondary is the drbd secondary's UUID; empty for other templates.
	Secondary     string `json:"secondary,omitempty"`
	SecondaryName string `json:"secondary_name,omitempty"`
	Group         string `json:"group"` // group UUID
	GroupName     string `json:"group_name"`
	// Score is the group's score after the placement: the mean over its
	// usable nodes of u_mem²+u_disk²+u_cpu² (0 empty, 3 full; lower is
	// more room and better balance). See the package comment.
	Score float64 `json:"score"`
}

// Nodes returns the UUIDs of the instance's nodes: the primary, then the
// secondary if any (the order of Ganeti's iallocator answer).
func (r Result) Nodes() []string {
	if r.Secondary == "" {
		return []string{r.Primary}
	}
	return []string{r.Primary, r.Secondary}
}

// NodeNames returns the names of the instance's nodes, primary first.
func (r Result) NodeNames() []string {
	if r.Secondary == "" {
		return []string{r.PrimaryName}
	}
	return []string{r.PrimaryName, r.SecondaryName}
}

// Allocate places one instance: it returns the nodes the allocator
// chooses, or, with req.Nodes, checks that the given nodes can take it.
// It changes nothing, so it is also the dry run; the caller creates the
// instance (recording it, forthcoming or real, makes its resources count
// for every later call).
//
// Errors are *fsm.Error: wrong_input for a malformed request (bad
// template, negative sizes, a secondary for a single-node template, nodes
// of two groups, an unallocable group), unknown_entity for a node, group
// or instance that does not exist, wrong_state for a given node that
// takes no instances (offline, drained, not vm_capable, dead), and
// insufficient_resources when nothing fits, its message naming the
// resource that is short on which nodes, and the nodes that were not
// candidates and why.
func Allocate(st *fsm.State, req Request, opts Options) (Result, error) {
	t, nd, sc, _, ferr := setUp(st, &req, opts)
	if ferr != nil {
		return Result{}, ferr
	}
	c, ok := t.search(nd, sc)
	if !ok {
		return Result{}, &fsm.Error{Code: fsm.CodeNoRes, Msg: "cannot place " + req.describe(nd) + ": " + t.explain(nd, sc)}
	}
	return t.result(c), nil
}

// setUp checks a placement request and builds what a call works on: the
// table (without the request's Instance, whose UUID it returns), what
// the request needs and where it may go.
func setUp(st *fsm.State, req *Request, opts Options) (*table, need, *scope, string, *fsm.Error) {
	nd, ferr := req.check()
	if ferr != nil {
		return nil, nd, nil, "", ferr
	}
	skip, ferr := resolveInstance(st, req.Instance)
	if ferr != nil {
		return nil, nd, nil, "", ferr
	}
	t := buildTable(st, opts, skip, "", req.Template)
	t.markHypervisor(req.Hypervisor)
	sc, ferr := t.scopeOf(req)
	if ferr != nil {
		return nil, nd, nil, "", ferr
	}
	return t, nd, sc, skip, nil
}

func (t *table) result(c choice) Result {
	g := &t.groups[c.g]
	r := Result{
		Primary: t.rows[c.pri].uuid, PrimaryName: t.rows[c.pri].name,
		Group: g.uuid, GroupName: g.name, Score: g.score(c.delta),
	}
	if c.sec >= 0 {
		r.Secondary, r.SecondaryName = t.rows[c.sec].uuid, t.rows[c.sec].name
	}
	return r
}

// resolveInstance returns the UUID of the instance ref names, or "".
func resolveInstance(st *fsm.State, ref string) (string, *fsm.Error) {
	if ref == "" {
		return "", nil
	}
	if i := st.LookupInstance(ref); i != nil {
		return i.UUID, nil
	}
	for _, i := range st.Instances { // a state built without its indexes
		if i.Name == ref {
			return i.UUID, nil
		}
	}
	return "", &fsm.Error{Code: fsm.CodeNoEnt, Field: "instance", Msg: fmt.Sprintf("instance %s does not exist", ref)}
}

func (t *table) nodeRef(field, ref string) (int32, *fsm.Error) {
	if k, ok := t.nodeIndex(ref); ok {
		return k, nil
	}
	return -1, &fsm.Error{Code: fsm.CodeNoEnt, Field: field, Msg: fmt.Sprintf("node %s does not exist", ref)}
}

// scopeOf turns the request's group, nodes and exclusions into a scope.
func (t *table) scopeOf(req *Request) (*scope, *fsm.Error) {
	sc := &scope{}
	if len(req.Exclude) > 0 {
		sc.skip = make([]bool, len(t.rows))
		for _, ref := range req.Exclude {
			k, err := t.nodeRef("exclude", ref)
			if err != nil {
				return nil, err
			}
			sc.skip[k] = true
		}
	}
	g := int32(-1)
	if req.Group != "" {
		var ok bool
		if g, ok = t.groupRef(req.Group); !ok {
			return nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "group", Msg: fmt.Sprintf("node group %s does not exist", req.Group)}
		}
	}
	if len(req.Nodes) == 0 {
		if g >= 0 {
			if t.groups[g].rank == 2 {
				return nil, inval("group", "node group %s is unallocable", t.groups[g].name)
			}
			sc.groups, sc.grouped = []int32{g}, true
			return sc, nil
		}
		for i := range t.groups {
			if t.groups[i].rank < 2 {
				sc.groups = append(sc.groups, int32(i))
			}
		}
		sort.SliceStable(sc.groups, func(a, b int) bool { return t.groups[sc.groups[a]].rank < t.groups[sc.groups[b]].rank })
		return sc, nil
	}
	sc.pinned = true
	var pins []int32
	for _, ref := range req.Nodes {
		k, err := t.nodeRef("nodes", ref)
		if err != nil {
			return nil, err
		}
		r := &t.rows[k]
		if sc.skip != nil && sc.skip[k] {
			return nil, inval("nodes", "node %s is both given and excluded", r.name)
		}
		if r.bad != "" {
			return nil, &fsm.Error{Code: fsm.CodeState, Field: "nodes", Msg: fmt.Sprintf("node %s is %s and takes no instances", r.name, r.bad)}
		}
		pins = append(pins, k)
	}
	if len(pins) == 2 && pins[0] == pins[1] {
		return nil, inval("nodes", "the primary and secondary node must differ, got %s twice", t.rows[pins[0]].name)
	}
	pg := t.rows[pins[0]].group
	if g >= 0 && g != pg {
		return nil, inval("nodes", "node %s is in group %s, not in the requested group %s", t.rows[pins[0]].name, t.groups[pg].name, t.groups[g].name)
	}
	if len(pins) == 2 && t.rows[pins[1]].group != pg {
		return nil, inval("nodes", "drbd nodes must be in one node group: %s is in %s, %s in %s",
			t.rows[pins[0]].name, t.groups[pg].name, t.rows[pins[1]].name, t.groups[t.rows[pins[1]].group].name)
	}
	sc.groups = []int32{pg}
	sc.prims = pins[:1]
	if len(pins) == 2 {
		sc.secs = pins[1:]
	}
	return sc, nil
}
