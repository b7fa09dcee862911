package alloc

import (
	"fmt"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// Placement is one instance of a capacity answer: its nodes by name.
type Placement struct {
	Primary   string `json:"primary"`
	Secondary string `json:"secondary,omitempty"`
}

// CapacityResult answers how many instances of one specification fit
// (seed 003, "Cluster capacity calculation"): how many, on which nodes in
// the order they would be allocated, and the counts per node and group.
type CapacityResult struct {
	Count int `json:"count"`
	// Placements are the nodes of each instance, in allocation order.
	Placements []Placement `json:"placements"`
	// Primaries and Secondaries count, by node name, the instances a node
	// would hold as primary and as drbd secondary; Groups by group name.
	Primaries   map[string]int `json:"primaries"`
	Secondaries map[string]int `json:"secondaries,omitempty"`
	Groups      map[string]int `json:"groups"`
	// Limit says why one more does not fit: the message Allocate would
	// return for it, or that counting stopped at Options.MaxCapacity.
	Limit string `json:"limit"`
	// Truncated is set when counting stopped at Options.MaxCapacity: more
	// may fit.
	Truncated bool `json:"truncated,omitempty"`
}

// Capacity counts how many instances of spec fit in the cluster: it
// places them one after another, exactly as consecutive Allocate calls
// would (same choices, N+1 kept), on its own copy of the resource table,
// until one does not fit. So Count instances can be created one by one
// with Allocate and the next one fails, as long as the state does not
// change in between. Spec is a Request (its Name is used in Limit; Group,
// Nodes, Exclude and Instance restrict it as for Allocate). The error is
// Allocate's for a malformed spec; a spec asking for no memory, disk or
// vcpus is refused, as it would fit without end.
func Capacity(st *fsm.State, spec Request, opts Options) (CapacityResult, error) {
	nd, ferr := spec.check()
	if ferr != nil {
		return CapacityResult{}, ferr
	}
	if nd.mem == 0 && nd.disk == 0 && nd.cpu == 0 {
		return CapacityResult{}, inval("memory", "a capacity spec must ask for some memory, disk or vcpus")
	}
	skip, ferr := resolveInstance(st, spec.Instance)
	if ferr != nil {
		return CapacityResult{}, ferr
	}
	t := buildTable(st, opts, skip, "", spec.Template)
	t.markHypervisor(spec.Hypervisor)
	sc, ferr := t.scopeOf(&spec)
	if ferr != nil {
		return CapacityResult{}, ferr
	}
	limit := opts.MaxCapacity
	if limit <= 0 {
		limit = DefaultMaxCapacity
	}
	res := newCapacityResult(nd)
	in := inst{mem: nd.mem, cpu: nd.cpu, disk: nd.disk}
	shared, sharedWhy := t.sharedBound(spec.Template, nd)
	for {
		if shared >= 0 && res.Count == shared {
			res.Limit = "cannot place " + spec.describe(nd) + ": " + sharedWhy
			break
		}
		if res.Count == limit {
			res.Truncated = true
			res.Limit = fmt.Sprintf("stopped counting at %d instances", limit)
			break
		}
		c, ok := t.search(nd, sc)
		if !ok {
			res.Limit = "cannot place " + spec.describe(nd) + ": " + t.explain(nd, sc)
			break
		}
		res.place(t, c, &in)
	}
	return res, nil
}

// sharedBound is how many sharedfile instances of nd the shared
// directory takes: every node shares its one file system, so placing one
// on a node takes its disk off every node's room, which the table (one
// row per node) does not do. It is the least room a usable node
// reported, with why no more fit; -1 for other templates or when no node
// reported the shared directory.
func (t *table) sharedBound(template string, nd need) (int, string) {
	if template != TemplateSharedFile || nd.disk <= 0 {
		return -1, ""
	}
	best := int32(-1)
	for k := range t.rows {
		r := &t.rows[k]
		if r.bad != "" || r.unit == unitUnlimited {
			continue
		}
		if best < 0 || r.freeDisk() < t.rows[best].freeDisk() {
			best = int32(k)
		}
	}
	if best < 0 {
		return -1, ""
	}
	r := &t.rows[best]
	n := r.freeDisk() / nd.disk
	return int(min(n, int64(DefaultMaxCapacity)+1)), fmt.Sprintf("the shared file storage has room for %d such disks: %s has %d MiB free (%s)", n, r.name, r.freeDisk(), r.unit)
}

func newCapacityResult(nd need) CapacityResult {
	res := CapacityResult{Primaries: map[string]int{}, Groups: map[string]int{}, Placements: []Placement{}}
	if nd.drbd {
		res.Secondaries = map[string]int{}
	}
	return res
}

// place adds one instance in at choice c to the table and counts it.
func (res *CapacityResult) place(t *table, c choice, in *inst) {
	p := Placement{Primary: t.rows[c.pri].name}
	res.Primaries[p.Primary]++
	res.Groups[t.groups[c.g].name]++
	if c.sec >= 0 {
		t.add(in, c.pri, []int32{c.sec})
		p.Secondary = t.rows[c.sec].name
		res.Secondaries[p.Secondary]++
	} else {
		t.add(in, c.pri, nil)
	}
	res.Placements = append(res.Placements, p)
	res.Count++
}

// CheckCapacity counts the placements of instances of spec that another
// allocator made (an external one's multi-allocate answer, in its order)
// as Capacity counts its own: each must fit, N+1 kept, after the ones
// before it, exactly as if given to Allocate as its nodes; counting stops
// at the first that does not, which Limit names with its reason. The
// error is Allocate's for a malformed spec.
func CheckCapacity(st *fsm.State, spec Request, placements []Placement, opts Options) (CapacityResult, error) {
	t, nd, _, _, ferr := setUp(st, &spec, opts)
	if ferr != nil {
		return CapacityResult{}, ferr
	}
	res := newCapacityResult(nd)
	in := inst{mem: nd.mem, cpu: nd.cpu, disk: nd.disk}
	shared, sharedWhy := t.sharedBound(spec.Template, nd)
	for k, p := range placements {
		pin := spec
		pin.Nodes = []string{p.Primary}
		if p.Secondary != "" {
			pin.Nodes = append(pin.Nodes, p.Secondary)
		}
		if shared >= 0 && res.Count == shared {
			res.Limit = fmt.Sprintf("placement %d (%s) does not fit: %s", k+1, strings.Join(pin.Nodes, ", "), sharedWhy)
			break
		}
		if want := 1 + btoi(nd.drbd); len(pin.Nodes) != want {
			res.Limit = fmt.Sprintf("placement %d (%s) is refused: the instance needs %d node(s)", k+1, strings.Join(pin.Nodes, ", "), want)
			break
		}
		sc, ferr := t.scopeOf(&pin)
		if ferr != nil {
			res.Limit = fmt.Sprintf("placement %d (%s) is refused: %s", k+1, strings.Join(pin.Nodes, ", "), ferr.Msg)
			break
		}
		c, ok := t.search(nd, sc)
		if !ok {
			res.Limit = fmt.Sprintf("placement %d (%s) does not fit: %s", k+1, strings.Join(pin.Nodes, ", "), t.explain(nd, sc))
			break
		}
		res.place(t, c, &in)
	}
	return res, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
