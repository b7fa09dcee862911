package alloc

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gnt-cluster/gnt/fsm"
)

// MaxRoomMoves bounds how many reservations MakeRoom moves for one
// placement.
const MaxRoomMoves = 4

// roomBudget bounds the sets of reservations MakeRoom tries, and
// roomEvaluations the plans it works out in full (re-placing the moved
// reservations), so a call stays fast on any state; both are counts, so
// the answer stays deterministic.
const (
	roomBudget      = 200000
	roomEvaluations = 256
)

// RoomPlan is a placement that may need reservations moved first.
type RoomPlan struct {
	// Result is where the new instance goes; its Score is the group's
	// score after the placement and the moves.
	Result
	// Moves are the forthcoming instances to move, in the order they were
	// planned (each accounted for before the next was chosen); empty when
	// the instance fits as things are. A move changes the reservation's
	// record only: Kind is MoveRecreate for a single-node template and,
	// for drbd, MoveFailover, MoveReplaceSecondary, MoveFailoverReplace or
	// MoveRelocate by which nodes change; Forthcoming is always set.
	Moves []Move `json:"moves,omitempty"`
}

// MakeRoom places one instance as Allocate does and, when nothing fits,
// looks for a placement that becomes possible by moving forthcoming
// instances (reservations) to other nodes: a reservation is a record
// only, so moving it costs nothing, while moving a real instance would
// mean a migration. Real instances are never moved.
//
// A reservation may be moved when it has a primary node in a group the
// request may use (all its nodes in that group), every node of that
// group the request may use can run its hypervisor (fsm.HypervisorFits),
// it is not the request's Instance, and no running opcode holds its lock (the state records the
// locks of started opcodes: a reservation being committed, migrated or
// modified stays where it is). A reservation does not record whether its
// nodes were chosen by the allocator or by the operator (seed 001 leaves
// node choice to the allocator, and htools may move reservations freely
// within their group), so any reservation may move. Only the reservations
// on the new instance's nodes are moved, each to nodes of its own group
// other than those, under the rules of any placement (usable nodes, N+1
// for drbd, its template's disk with DRBD metadata), and the best
// placement for it there, largest memory first.
//
// Among the plans found, MakeRoom prefers groups by alloc_policy as
// Allocate does, then the fewest moves (at most MaxRoomMoves), then the
// lowest group score after the placement and the moves, then node names
// and the order of the reservations (by primary node, then name). For a drbd instance whose secondary also needs
// moves, that secondary is made able to back any primary, and each
// primary is paired with the secondary of least growth; plans are
// compared in full only for the most promising candidates (bounded, see
// roomEvaluations). With req.Nodes given, nothing is moved: the caller
// chose the nodes.
//
// Errors are Allocate's; when nothing fits, the shortage message says in
// addition whether moving reservations would not help (the instance does
// not fit even with every movable reservation gone), no plan within
// MaxRoomMoves was found, or reservations are locked.
func MakeRoom(st *fsm.State, req Request, opts Options) (RoomPlan, error) {
	t, nd, sc, skip, ferr := setUp(st, &req, opts)
	if ferr != nil {
		return RoomPlan{}, ferr
	}
	if c, ok := t.search(nd, sc); ok {
		return RoomPlan{Result: t.result(c)}, nil
	}
	msg := "cannot place " + req.describe(nd) + ": " + t.explain(nd, sc)
	fail := func(why string) (RoomPlan, error) {
		return RoomPlan{}, &fsm.Error{Code: fsm.CodeNoRes, Msg: msg + why}
	}
	if sc.pinned {
		return fail("")
	}
	rm := newRoom(st, t, nd, sc, skip)
	locked := ""
	if rm.locked > 0 {
		locked = fmt.Sprintf("; %d reservation(s) that might make room are locked by running jobs and stay", rm.locked)
	}
	if len(rm.res) == 0 {
		return fail(locked)
	}
	for lo := 0; lo < len(sc.groups); {
		hi := lo
		for hi < len(sc.groups) && t.groups[sc.groups[hi]].rank == t.groups[sc.groups[lo]].rank {
			hi++
		}
		groups := sc.groups[lo:hi]
		for k := 1; k <= MaxRoomMoves && rm.budget > 0; k++ {
			var cands []roomCand
			for _, g := range groups {
				cands = rm.candidates(cands, g, k)
			}
			if p, ok := rm.pick(cands); ok {
				return p, nil
			}
		}
		lo = hi
	}
	if !rm.helps() {
		return fail("; moving reservations would not help" + locked)
	}
	return fail(fmt.Sprintf("; no way was found to make room by moving up to %d reservations (each must fit elsewhere in its group)", MaxRoomMoves) + locked)
}

// room is one MakeRoom call's search.
type room struct {
	t  *table
	nd need
	sc *scope
	// res are the movable reservations, by primary node then name; on
	// holds, per row, the indices of those that use the node.
	res    []inst
	on     [][]int32
	locked int
	budget int
	// lb holds per group what bounds the growth of a re-placement from
	// below (see bounds), built when first needed.
	lb map[int32]*groupBounds
	// secs is, for a drbd request, per group, the secondaries that could
	// back any primary as things are, by growth; made holds the
	// secondaries that become so by moves, by the number of moves.
	secs map[int32][]secCand
	made map[int32][][]madeSec
	// fits caches fitsWithout per row (0 unknown, 1 yes, 2 no); mark is
	// a scratch per-row flag; fresh is the new instance.
	fits  []int8
	mark  []bool
	fresh inst
}

// roomCand is a placement that needs moves: rows, the reservations to
// move (indices into room.res, ascending) and a lower bound of the
// group's score after it.
type roomCand struct {
	pri, sec int32
	g        int32
	set      []int32
	lb       float64
}

// madeSec is a node that can back any primary once set is moved, and the
// growth of the group's Σ contrib that costs (moves and its disk).
type madeSec struct {
	row   int32
	set   []int32
	delta float64
}

func newRoom(st *fsm.State, t *table, nd need, sc *scope, skip string) *room {
	rm := &room{t: t, nd: nd, sc: sc, on: make([][]int32, len(t.rows)), budget: roomBudget,
		lb: map[int32]*groupBounds{}, mark: make([]bool, len(t.rows)),
		fresh: inst{mem: nd.mem, cpu: nd.cpu, disk: nd.disk, pri: -1}}
	if nd.drbd {
		rm.fresh.template = TemplateDRBD
	}
	inScope := make([]bool, len(t.groups))
	for _, g := range sc.groups {
		inScope[g] = true
	}
	// Reservations are taken by primary node (rows are in name order),
	// then by name: sorting a few per node is cheaper than all by name.
	byRow := make([][]*fsm.Instance, len(t.rows))
	for _, i := range st.Instances {
		if i.Forthcoming && i.PrimaryNode != "" && i.UUID != skip {
			if k, ok := t.byUUID[i.PrimaryNode]; ok {
				byRow[k] = append(byRow[k], i)
			}
		}
	}
	var cands []*fsm.Instance
	for _, l := range byRow {
		slices.SortFunc(l, func(a, b *fsm.Instance) int {
			return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.UUID, b.UUID))
		})
		cands = append(cands, l...)
	}
	for _, i := range cands {
		in := t.instance(i)
		if in.pri < 0 || len(in.secs) != len(i.SecondaryNodes) {
			continue // a node the table does not know
		}
		g := t.rows[in.pri].group
		if !inScope[g] || !t.allRun(g, fsm.PlacementHypervisor(st, i)) {
			continue // out of scope, or some node it could move to cannot run it
		}
		same := true
		for _, s := range in.secs {
			same = same && t.rows[s].group == g
		}
		switch {
		case !same:
			continue
		case in.template == TemplateDRBD && len(in.secs) != 1:
			continue
		case in.template != TemplateDRBD && (len(in.secs) > 0 || in.template != TemplatePlain && in.template != TemplateDiskless):
			continue
		}
		if st.InstanceLockHolder(i.Name, i.UUID, 0) != 0 {
			rm.locked++
			continue
		}
		k := int32(len(rm.res))
		rm.res = append(rm.res, in)
		rm.on[in.pri] = append(rm.on[in.pri], k)
		for _, s := range in.secs {
			rm.on[s] = append(rm.on[s], k)
		}
	}
	return rm
}

// allRun says whether every usable node of group g can run hypervisor
// hv: a reservation is moved only within its group, to any of them.
func (t *table) allRun(g int32, hv string) bool {
	for _, k := range t.groups[g].members {
		if r := &t.rows[k]; r.bad == "" && !fsm.HypervisorFits(r.hv, hv) {
			return false
		}
	}
	return true
}

// helps says whether the instance fits once every movable reservation
// is gone: if not, no set of moves makes room.
func (rm *room) helps() bool {
	t := rm.t
	for k := range rm.res {
		r := &rm.res[k]
		t.unplace(r, r.pri, r.secs)
	}
	_, ok := t.search(rm.nd, rm.sc)
	for k := range rm.res {
		r := &rm.res[k]
		t.place(r, r.pri, r.secs)
	}
	return ok
}

func (rm *room) unplaceSet(set []int32) {
	for _, k := range set {
		r := &rm.res[k]
		rm.t.unplace(r, r.pri, r.secs)
	}
}

func (rm *room) placeSet(set []int32) {
	for _, k := range set {
		r := &rm.res[k]
		rm.t.place(r, r.pri, r.secs)
	}
}

// rowsOf lists the distinct rows of the reservations in set, after the
// given rows.
func (rm *room) rowsOf(set []int32, rows ...int32) []int32 {
	add := func(k int32) {
		if k >= 0 && !slices.Contains(rows, k) {
			rows = append(rows, k)
		}
	}
	for _, k := range set {
		r := &rm.res[k]
		add(r.pri)
		for _, s := range r.secs {
			add(s)
		}
	}
	return rows
}

// sumContrib is Σ contrib over the usable rows given.
func (rm *room) sumContrib(rows []int32) float64 {
	var q float64
	for _, k := range rows {
		if rm.t.rows[k].bad == "" {
			q += rm.t.rows[k].contrib()
		}
	}
	return q
}

// subsets calls f with each subset of items of size k, in lexicographic
// order, while the budget lasts; the slice f gets is reused.
func (rm *room) subsets(items []int32, k int, f func(set []int32)) {
	if k > len(items) {
		return
	}
	idx := make([]int, k)
	set := make([]int32, k)
	for i := range idx {
		idx[i] = i
	}
	for rm.budget > 0 {
		rm.budget--
		for i, x := range idx {
			set[i] = items[x]
		}
		f(set)
		i := k - 1
		for i >= 0 && idx[i] == len(items)-k+i {
			i--
		}
		if i < 0 {
			return
		}
		idx[i]++
		for j := i + 1; j < k; j++ {
			idx[j] = idx[j-1] + 1
		}
	}
}

// candidates adds to out the placements in group g that need exactly k
// moves, each with a lower bound of the group's score after it.
func (rm *room) candidates(out []roomCand, g int32, k int) []roomCand {
	t, nd := rm.t, rm.nd
	// What the candidates are compared with is read before any move
	// (madeSecondaries is read only with no moves in place).
	rm.bounds(g)
	if nd.drbd {
		rm.secondaries(g)
	}
	lo := k // a single-node instance: all moves on its node
	if nd.drbd {
		lo = 0
	}
	for _, p := range t.groups[g].members {
		if !t.usable(p, rm.sc.skip) || !rm.fitsWithout(p) {
			continue
		}
		for k1 := lo; k1 <= k && k1 <= len(rm.on[p]); k1++ {
			try := func(set []int32) {
				pre := rm.rowsOf(set, p)
				before := rm.sumContrib(pre)
				rm.unplaceSet(set)
				fits := t.fitsPrim(p, nd)
				var delta float64
				sec, secD := int32(-1), 0.0
				if fits {
					t.place(&rm.fresh, p, nil)
					delta = rm.sumContrib(pre) - before
					t.unplace(&rm.fresh, p, nil)
					if nd.drbd && k1 == k {
						sec, secD = rm.bestSecondary(g, p, pre)
					}
				}
				rm.placeSet(set)
				switch {
				case !fits:
				case !nd.drbd:
					out = append(out, rm.cand(g, p, -1, set, nil, delta, pre))
				case k1 == k && sec >= 0:
					out = append(out, rm.cand(g, p, sec, set, nil, delta+secD, pre))
				case k1 < k:
					if m := rm.madeFor(g, p, pre, k-k1); m != nil {
						out = append(out, rm.cand(g, p, m.row, set, m.set, delta+m.delta, rm.rowsOf(m.set, slices.Clone(pre)...)))
					}
				}
			}
			if k1 == 0 {
				try(nil)
			} else {
				rm.subsets(rm.on[p], k1, try)
			}
		}
	}
	return out
}

// fitsWithout says whether the instance's primary fits on row p once
// every movable reservation using p is gone (remembered per row).
func (rm *room) fitsWithout(p int32) bool {
	if rm.fits == nil {
		rm.fits = make([]int8, len(rm.t.rows))
	}
	if rm.fits[p] == 0 {
		rm.unplaceSet(rm.on[p])
		rm.fits[p] = 2
		if rm.t.fitsPrim(p, rm.nd) {
			rm.fits[p] = 1
		}
		rm.placeSet(rm.on[p])
	}
	return rm.fits[p] == 1
}

// bestSecondary returns the drbd secondary of least growth for primary
// p, with no more moves, and that growth; -1 when there is none. The
// table holds moves that changed the rows pre: those are judged as they
// are now, the others from the list made before any move.
func (rm *room) bestSecondary(g, p int32, pre []int32) (int32, float64) {
	t, nd := rm.t, rm.nd
	best, bestD := int32(-1), 0.0
	for _, s := range pre {
		rm.mark[s] = true
		if s != p && t.usable(s, rm.sc.skip) && t.rows[s].group == g && t.secGeneric(s, nd) && t.secFor(s, p, nd) {
			if d := t.deltaSec(s, nd); best < 0 || d < bestD || d == bestD && s < best {
				best, bestD = s, d
			}
		}
	}
	for _, c := range rm.secondaries(g) {
		if best >= 0 && (c.d > bestD || c.d == bestD && c.i > best) {
			break
		}
		if c.i != p && !rm.mark[c.i] && (c.universal || t.secFor(c.i, p, nd)) {
			best, bestD = c.i, c.d
			break
		}
	}
	for _, s := range pre {
		rm.mark[s] = false
	}
	return best, bestD
}

// madeFor returns the secondary of least growth for primary p among the
// nodes that can back any primary once k2 of their reservations move,
// leaving out the rows pre that the primary's moves change, and nodes
// whose moves would touch p; nil when there is none.
func (rm *room) madeFor(g, p int32, pre []int32, k2 int) *madeSec {
	made := rm.madeSecondaries(g)
	if k2 >= len(made) {
		return nil
	}
	for i := range made[k2] {
		m := &made[k2][i]
		if m.row != p && !slices.Contains(pre, m.row) && !rm.touches(m.set, p) {
			return m
		}
	}
	return nil
}

func (rm *room) touches(set []int32, row int32) bool {
	for _, k := range set {
		r := &rm.res[k]
		if r.pri == row || slices.Contains(r.secs, row) {
			return true
		}
	}
	return false
}

// cand builds a candidate: the union of the two sets, and its lower
// bound: the group's Σ contrib grown by delta, plus the least growth each
// moved reservation can cause where it goes.
func (rm *room) cand(g, p, s int32, set, more []int32, delta float64, changed []int32) roomCand {
	all := append(append(make([]int32, 0, len(set)+len(more)), set...), more...)
	slices.Sort(all)
	grp := &rm.t.groups[g]
	q := grp.q + delta
	b := rm.bounds(g)
	umin := b.umin
	// The moves left rows emptier than any row was: they count too.
	rm.unplaceSet(all)
	for _, k := range changed {
		r := &rm.t.rows[k]
		if k != p && k != s && r.bad == "" {
			umin[0] = min(umin[0], ratio(r.memUsed, r.memTotal))
			umin[1] = min(umin[1], ratio(r.diskUsed, r.diskTotal))
			umin[2] = min(umin[2], ratio(r.cpuUsed, r.cpuCap))
		}
	}
	rm.placeSet(all)
	for _, k := range all {
		q += b.least(&rm.res[k], umin)
	}
	return roomCand{pri: p, sec: s, g: g, set: all, lb: grp.score(q - grp.q)}
}

// groupBounds bounds from below the growth of placing something in a
// group: the least utilisation of each resource over its usable nodes and
// the largest total (0 when some node has none of it: growth can be 0).
type groupBounds struct {
	umin [3]float64
	tmax [3]int64
}

func (rm *room) bounds(g int32) *groupBounds {
	if b := rm.lb[g]; b != nil {
		return b
	}
	b := &groupBounds{umin: [3]float64{1, 1, 1}}
	first := true
	for _, k := range rm.t.groups[g].members {
		r := &rm.t.rows[k]
		if r.bad != "" {
			continue
		}
		tot := [3]int64{r.memTotal, r.diskTotal, r.cpuCap}
		u := [3]float64{ratio(r.memUsed, r.memTotal), ratio(r.diskUsed, r.diskTotal), ratio(r.cpuUsed, r.cpuCap)}
		for i := range tot {
			switch {
			case tot[i] <= 0:
				b.tmax[i] = -1
			case b.tmax[i] >= 0:
				b.tmax[i] = max(b.tmax[i], tot[i])
			}
			if first || u[i] < b.umin[i] {
				b.umin[i] = u[i]
			}
		}
		first = false
	}
	rm.lb[g] = b
	return b
}

// least is a lower bound of the growth placing r causes anywhere in the
// group, given the least utilisations umin.
func (b *groupBounds) least(r *inst, umin [3]float64) float64 {
	lbGrow := func(i int, add int64) float64 {
		if b.tmax[i] <= 0 || add <= 0 {
			return 0
		}
		d := float64(add) / float64(b.tmax[i])
		return d * (2*max(umin[i], 0) + d)
	}
	v := lbGrow(0, r.mem) + lbGrow(1, r.disk) + lbGrow(2, r.cpu)
	if r.template == TemplateDRBD {
		v += lbGrow(1, r.disk)
	}
	return v
}

// secondaries lists, for a drbd request, the nodes of group g that could
// be its secondary as things are (before any move), by growth.
func (rm *room) secondaries(g int32) []secCand {
	if rm.secs == nil {
		rm.secs = map[int32][]secCand{}
	}
	if l, ok := rm.secs[g]; ok {
		return l
	}
	t, nd := rm.t, rm.nd
	var l []secCand
	for _, s := range t.groups[g].members {
		if t.usable(s, rm.sc.skip) && t.secGeneric(s, nd) {
			r := &t.rows[s]
			l = append(l, secCand{i: s, d: t.deltaSec(s, nd), universal: r.freeMem()-nd.mem >= r.rMem})
		}
	}
	slices.SortFunc(l, func(a, b secCand) int {
		if candLess(a, b) {
			return -1
		}
		if candLess(b, a) {
			return 1
		}
		return 0
	})
	rm.secs[g] = l
	return l
}

// madeSecondaries lists, per number of moves k, the nodes of group g
// that can back any primary of a drbd request once k of their
// reservations are moved (and not with fewer), each with its best set,
// by growth.
func (rm *room) madeSecondaries(g int32) [][]madeSec {
	if rm.made == nil {
		rm.made = map[int32][][]madeSec{}
	}
	if l, ok := rm.made[g]; ok {
		return l
	}
	t, nd := rm.t, rm.nd
	out := make([][]madeSec, MaxRoomMoves+1)
	backs := func(s int32) bool {
		r := &t.rows[s]
		return r.freeDisk() >= nd.disk && r.freeMem()-nd.mem >= r.rMem
	}
	for _, s := range t.groups[g].members {
		if !t.usable(s, rm.sc.skip) || len(rm.on[s]) == 0 || backs(s) {
			continue
		}
		for k := 1; k <= MaxRoomMoves && k <= len(rm.on[s]); k++ {
			var best *madeSec
			rm.subsets(rm.on[s], k, func(set []int32) {
				pre := rm.rowsOf(set, s)
				before := rm.sumContrib(pre)
				rm.unplaceSet(set)
				if backs(s) {
					t.rows[s].diskUsed += nd.disk
					d := rm.sumContrib(pre) - before
					t.rows[s].diskUsed -= nd.disk
					if best == nil || d < best.delta {
						best = &madeSec{row: s, set: slices.Clone(set), delta: d}
					}
				}
				rm.placeSet(set)
			})
			if best != nil {
				out[k] = append(out[k], *best)
				break
			}
		}
	}
	for _, l := range out {
		slices.SortStableFunc(l, func(a, b madeSec) int { return cmp.Compare(a.delta, b.delta) })
	}
	rm.made[g] = out
	return out
}

// pick works out the candidates in full, most promising first, and
// returns the best plan: the lowest score after the placement and the
// moves. It stops at a candidate whose lower bound cannot beat the best
// plan so far, or after roomEvaluations plans.
func (rm *room) pick(cands []roomCand) (RoomPlan, bool) {
	slices.SortStableFunc(cands, func(a, b roomCand) int {
		return cmp.Or(cmp.Compare(a.lb, b.lb), cmp.Compare(a.pri, b.pri), cmp.Compare(a.sec, b.sec), slices.Compare(a.set, b.set))
	})
	var best RoomPlan
	found := false
	for i := range cands {
		if i == roomEvaluations || found && cands[i].lb > best.Score {
			break
		}
		if p, ok := rm.evaluate(&cands[i]); ok && (!found || p.Score < best.Score) {
			best, found = p, true
		}
	}
	return best, found
}

// evaluate carries a candidate out on the table: the reservations of its
// set leave, the instance is placed, each reservation goes to the best
// place of its group that is not one of the instance's nodes (largest
// memory first); then everything is undone. It returns the plan and the
// group's score after it, or false when a reservation fits nowhere.
func (rm *room) evaluate(c *roomCand) (RoomPlan, bool) {
	t := rm.t
	var secs []int32
	if c.sec >= 0 {
		secs = []int32{c.sec}
	}
	order := slices.Clone(c.set)
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(rm.res[b].mem, rm.res[a].mem) })
	rm.unplaceSet(order)
	t.place(&rm.fresh, c.pri, secs)
	for _, k := range append([]int32{c.pri}, secs...) {
		rm.mark[k] = true
	}
	type placed struct {
		k        int32
		pri, sec int32
	}
	var done []placed
	ok := true
	for _, k := range order {
		r := &rm.res[k]
		g := t.rows[r.pri].group
		nd := need{mem: r.mem, disk: r.disk, cpu: r.cpu, drbd: r.template == TemplateDRBD}
		ch, found := t.bestInGroup(g, nd, &scope{groups: []int32{g}, skip: rm.mark})
		if !found {
			ok = false
			break
		}
		var to []int32
		if ch.sec >= 0 {
			to = []int32{ch.sec}
		}
		t.place(r, ch.pri, to)
		done = append(done, placed{k, ch.pri, ch.sec})
	}
	var plan RoomPlan
	if ok {
		grp := &t.groups[c.g]
		var q float64
		for _, m := range grp.members {
			if t.rows[m].bad == "" {
				q += t.rows[m].contrib()
			}
		}
		plan.Result = t.result(choice{pri: c.pri, sec: c.sec, g: c.g, delta: q - grp.q})
		for _, d := range done {
			plan.Moves = append(plan.Moves, rm.move(&rm.res[d.k], d.pri, d.sec))
		}
	}
	for i := len(done) - 1; i >= 0; i-- {
		d := done[i]
		var to []int32
		if d.sec >= 0 {
			to = []int32{d.sec}
		}
		t.unplace(&rm.res[d.k], d.pri, to)
	}
	for _, k := range append([]int32{c.pri}, secs...) {
		rm.mark[k] = false
	}
	t.unplace(&rm.fresh, c.pri, secs)
	rm.placeSet(order)
	return plan, ok
}

// move describes a reservation's move to pri (and sec).
func (rm *room) move(r *inst, pri, sec int32) Move {
	t := rm.t
	mv := Move{Instance: r.name, InstanceUUID: r.uuid, Forthcoming: true, Kind: MoveRecreate,
		OldPrimary: t.rows[r.pri].uuid, OldPrimaryName: t.rows[r.pri].name,
		NewPrimary: t.rows[pri].uuid, NewPrimaryName: t.rows[pri].name}
	if len(r.secs) == 1 {
		old := r.secs[0]
		mv.OldSecondary, mv.OldSecondaryName = t.rows[old].uuid, t.rows[old].name
		switch {
		case pri == old && sec == r.pri:
			mv.Kind = MoveFailover
		case pri == old:
			mv.Kind = MoveFailoverReplace
		case pri == r.pri:
			mv.Kind = MoveReplaceSecondary
		default:
			mv.Kind = MoveRelocate
		}
	}
	if sec >= 0 {
		mv.NewSecondary, mv.NewSecondaryName = t.rows[sec].uuid, t.rows[sec].name
	}
	return mv
}
