package repair

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Balancing (maint_balance, and gnt cluster balance): the load of a node
// is its used/total of three resources: memory and vcpus of the instances
// running there as primaries and of the reservations there, and disk of
// every instance with a disk there (primary or secondary, drbd metadata
// included). The score of the cluster is the mean over the nodes that
// take part of fsm.LoadTerm, u_mem² + u_disk² + u_cpu², the allocator's
// score: lowest when every resource is used evenly. When the spread of
// one resource (its largest u less its smallest) is over
// maint_balance_thresh, a round makes moves greedily: each time the move
// that lowers the score most, if it lowers it by at least minGain, until
// the spreads are within the threshold, no move gains enough, or the round
// has maint_balance_max_moves moves. No two moves of a round touch the
// same node, so they run in parallel and each one's gain is what it was
// planned with.
//
// The moves, in the order preferred when they gain alike:
//   - a reservation (a forthcoming instance) moved in the configuration: a
//     drbd one to its secondary, a single-node one to the node of its
//     group with the lowest load term and its memory, disk and vcpus free
//     (as the allocator counts them; the job checks the placement in full).
//     A reservation is capacity promised to an instance that will run
//     there, so it counts in the load, and moving it costs nothing (seed
//     001: "wherever possible, moves of forthcoming instances are preferred
//     over moving real instances");
//   - a running drbd instance live-migrated to its secondary (memory and
//     vcpus move, the disks stay: the least invasive move there is);
//   - a running drbd instance given a new secondary, the node of its group
//     with the lowest load term and the disk free that takes drbd disks
//     (fsm.Node.NoDRBD is empty) (hbal's replace-disks
//     move, the only one that moves a real instance's disk: it copies
//     every disk, so it comes last).
//
// The first two are OP_INSTANCE_MIGRATE (which moves a reservation's
// record only), the third OP_INSTANCE_REPLACE_DISKS replace_new_secondary.
// Nodes that are down, drained, not vm_capable or being handled by maintd
// take no part; in maintd, nothing moves while the breaker is open or
// anything else was submitted this round. An instance whose balancing
// job failed stays where it is for balanceRetry: the job checks the move
// in full (the target's memory, N+1 for the new roles of the nodes), which
// the balancer does not repeat, and without this memory a move that fails
// would be proposed every round. Ganeti's beparam auto_balance: false
// keeps an instance out of balancing.

// balanceRetry is how long after a failed balancing job of an instance
// the balancer proposes no balancing move of that instance.
const balanceRetry = time.Hour

// balanceReason begins the reason text of every balancing job, which is
// how failedBalances tells them from maintd's other jobs.
const balanceReason = "balance: "

// BalanceReasonSource is the reason source of the jobs of gnt cluster
// balance (maintd's carry fsm.MaintdReasonSource).
const BalanceReasonSource = "gnt:cluster:balance"

// minGain is the least a balancing move must lower the sum of the nodes'
// terms by: a quarter of the threshold squared (moving a share of
// thresh/2 of one resource from a node to one thresh less loaded lowers
// the two nodes' terms by thresh²/2; the floor keeps a move's gain clear
// of rounding).
func minGain(thresh float64) float64 {
	return max(thresh*thresh/4, 1e-9)
}

// Kinds of balancing moves.
const (
	MoveReservation = "move-reservation"
	MoveMigrate     = "migrate"
	MoveSecondary   = "replace-secondary"
)

// kindRank orders the kinds of moves that gain alike.
var kindRank = map[string]int{MoveReservation: 0, MoveMigrate: 1, MoveSecondary: 2}

// BalanceMove is one move of a balancing plan.
type BalanceMove struct {
	// Instance is the instance's name (a nameless reservation's UUID).
	Instance string `json:"instance"`
	Kind     string `json:"kind"`
	// From and To are node names: the primary and its new node, or for a
	// new secondary the old secondary and the new one.
	From string `json:"from"`
	To   string `json:"to"`
	// ScoreBefore and ScoreAfter are the cluster's score around the move.
	ScoreBefore float64 `json:"score_before"`
	ScoreAfter  float64 `json:"score_after"`
	// Op is the opcode that makes the move (its reason not set).
	Op any `json:"opcode"`
}

// BalancePlan is what PlanBalance decides.
type BalancePlan struct {
	Moves []BalanceMove `json:"moves"`
	// Score is the score before the moves, Spread the largest spread of a
	// resource then ("memory 12%").
	Score  float64 `json:"score"`
	Spread string  `json:"spread"`
	// Notes say, in words, why the plan is what it is; End, when set,
	// why it stops where it does.
	Notes []string `json:"notes"`
	End   string   `json:"end,omitempty"`
}

// BalanceInput is what PlanBalance plans from.
type BalanceInput struct {
	State *fsm.State
	// Threshold is the spread over which moves are made; MaxMoves the
	// most moves (at least 1).
	Threshold float64
	MaxMoves  int
	// Out says, by node UUID, which nodes take no part besides those the
	// state says are offline, drained, not vm_capable or dead.
	Out map[string]bool
	// Now is the time (Unix nanoseconds) failed balancing jobs are
	// remembered from.
	Now int64
}

// bnode is one node's load.
type bnode struct {
	n                 *fsm.Node
	mem, disk, cpu    int64
	memT, diskT, cpuT int64
	free              free // as the allocator counts it
	touched           bool
}

func (b *bnode) term(dm, dd, dc int64) float64 {
	return fsm.LoadTerm(b.mem+dm, b.memT, b.disk+dd, b.diskT, b.cpu+dc, b.cpuT)
}

// cand is a possible move.
type cand struct {
	in       *fsm.Instance
	kind     string
	from, to *bnode
	// moved: what moves from from to to.
	mem, disk, cpu int64
	gain           float64 // Σ term change (negative is better)
	name           string
}

// PlanBalance plans the balancing moves of the state. It is pure: the
// same input gives the same plan.
func PlanBalance(in BalanceInput) BalancePlan {
	b := newBalancer(in)
	return b.plan()
}

type balancer struct {
	in     BalanceInput
	st     *fsm.State
	nodes  []*bnode // by name
	byUUID map[string]*bnode
	insts  []*fsm.Instance
	failed map[string]*fsm.Job
	out    BalancePlan
}

func (b *balancer) note(format string, args ...any) {
	b.out.Notes = append(b.out.Notes, fmt.Sprintf(format, args...))
}

func newBalancer(in BalanceInput) *balancer {
	b := &balancer{in: in, st: in.State, byUUID: map[string]*bnode{}}
	st := in.State
	for _, n := range st.SortedNodes() {
		if !n.VMCapable || n.Offline || n.Drained || n.Liveness == fsm.LivenessDead || in.Out[n.UUID] ||
			n.Resources.MemoryMiB <= 0 {
			continue
		}
		x := &bnode{n: n, memT: n.Resources.MemoryMiB, diskT: n.Resources.DiskMiB,
			cpuT: int64(n.Resources.CPUs) * fsm.DefaultVCPURatio}
		b.nodes = append(b.nodes, x)
		b.byUUID[n.UUID] = x
	}
	b.insts = st.SortedInstances()
	for _, i := range b.insts {
		counts := i.Forthcoming || i.AdminState == fsm.AdminUp
		if p := b.byUUID[i.PrimaryNode]; p != nil {
			if counts {
				p.mem += i.MemoryMiB
				p.cpu += int64(i.VCPUs)
			}
			_, d := fsm.InstanceUsage(i, i.PrimaryNode)
			p.disk += d
		}
		for _, s := range i.SecondaryNodes {
			if x := b.byUUID[s]; x != nil {
				_, d := fsm.InstanceUsage(i, s)
				x.disk += d
			}
		}
	}
	room := freeOf(st, b.insts)
	for _, x := range b.nodes {
		x.free = room[x.n.UUID]
	}
	b.failed = failedBalances(st, in.Now)
	return b
}

// score is the mean of the nodes' terms.
func (b *balancer) score() float64 {
	var s float64
	for _, x := range b.nodes {
		s += x.term(0, 0, 0)
	}
	return s / float64(len(b.nodes))
}

// spread returns the resource with the largest spread, the spread and
// its most and least loaded nodes.
func (b *balancer) spread() (what string, sp float64, hi, lo *bnode, hiU, loU float64) {
	res := []struct {
		name string
		u    func(x *bnode) (float64, bool)
	}{
		{"memory", func(x *bnode) (float64, bool) { return share(x.mem, x.memT) }},
		{"disk", func(x *bnode) (float64, bool) { return share(x.disk, x.diskT) }},
		{"vcpus", func(x *bnode) (float64, bool) { return share(x.cpu, x.cpuT) }},
	}
	sp = -1
	for _, r := range res {
		var h, l *bnode
		var hu, lu float64
		for _, x := range b.nodes {
			u, ok := r.u(x)
			if !ok {
				continue
			}
			if h == nil || u > hu {
				h, hu = x, u
			}
			if l == nil || u < lu {
				l, lu = x, u
			}
		}
		if h != nil && hu-lu > sp {
			what, sp, hi, lo, hiU, loU = r.name, hu-lu, h, l, hu, lu
		}
	}
	return
}

func share(used, total int64) (float64, bool) {
	if total <= 0 {
		return 0, false
	}
	return float64(used) / float64(total), true
}

func (b *balancer) plan() BalancePlan {
	if len(b.nodes) < 2 {
		return b.out
	}
	what, sp, hi, lo, hiU, loU := b.spread()
	b.out.Score = b.score()
	b.out.Spread = fmt.Sprintf("%s %.0f%%", what, 100*sp)
	thresh := b.in.Threshold
	if sp <= thresh {
		return b.out
	}
	b.note("balancing: %s load spread %.0f%% (%s %.0f%%, %s %.0f%%) is over the threshold %.0f%%",
		what, 100*sp, hi.n.Name, 100*hiU, lo.n.Name, 100*loU, 100*thresh)
	for _, i := range b.insts {
		if j := b.failed[i.UUID]; j != nil {
			b.note("balancing: leaving %s where it is: its balancing job %d failed less than %v ago", instRef(i), j.ID, balanceRetry)
		}
	}
	gain := minGain(thresh)
	for len(b.out.Moves) < max(b.in.MaxMoves, 1) {
		c := b.best()
		if c == nil || -c.gain < gain {
			if len(b.out.Moves) == 0 {
				b.note("balancing: no move of a reservation, migration to a secondary or new secondary lowers the nodes' load terms by at least %.5f", gain)
			}
			break
		}
		before := b.score()
		c.from.mem, c.from.disk, c.from.cpu = c.from.mem-c.mem, c.from.disk-c.disk, c.from.cpu-c.cpu
		c.to.mem, c.to.disk, c.to.cpu = c.to.mem+c.mem, c.to.disk+c.disk, c.to.cpu+c.cpu
		c.from.touched, c.to.touched = true, true
		if p := b.byUUID[c.in.PrimaryNode]; p != nil {
			p.touched = true
		}
		if c.kind == MoveReservation && len(c.in.SecondaryNodes) == 0 {
			c.to.free.mem, c.to.free.disk, c.to.free.vcpus = c.to.free.mem-c.mem, c.to.free.disk-c.disk, c.to.free.vcpus-c.cpu
		}
		if c.kind == MoveSecondary {
			c.to.free.disk -= c.disk
		}
		after := b.score()
		b.out.Moves = append(b.out.Moves, BalanceMove{Instance: c.name, Kind: c.kind, From: c.from.n.Name, To: c.to.n.Name,
			ScoreBefore: before, ScoreAfter: after, Op: moveOp(c)})
		if w, s, _, _, _, _ := b.spread(); s <= thresh {
			b.out.End = fmt.Sprintf("balancing: the largest spread is %s %.0f%% after %d moves, within the threshold", w, 100*s, len(b.out.Moves))
			break
		}
	}
	return b.out
}

func instRef(i *fsm.Instance) string {
	if i.Name == "" {
		return i.UUID
	}
	return i.Name
}

// moveOp is the opcode of a move.
func moveOp(c *cand) any {
	ref := fsm.OpInstanceRef{InstanceName: c.in.Name}
	if c.in.Name == "" {
		ref = fsm.OpInstanceRef{InstanceUUID: c.in.UUID}
	}
	if c.kind == MoveSecondary {
		o := fsm.OpInstanceReplaceDisks{OpInstanceRef: ref, Mode: fsm.ReplaceNewSecondary, RemoteNode: c.to.n.Name}
		o.OpID = "OP_INSTANCE_REPLACE_DISKS"
		return o
	}
	o := fsm.OpInstanceMigrate{OpInstanceRef: ref}
	if len(c.in.SecondaryNodes) == 0 {
		o.TargetNode = c.to.n.Name
	}
	o.OpID = "OP_INSTANCE_MIGRATE"
	return o
}

// best is the candidate move that lowers the score most, nil when none
// lowers it.
func (b *balancer) best() *cand {
	// The targets of single-node moves, by lowest term first.
	order := make([]*bnode, 0, len(b.nodes))
	for _, x := range b.nodes {
		if !x.touched {
			order = append(order, x)
		}
	}
	terms := make(map[*bnode]float64, len(order))
	for _, x := range order {
		terms[x] = x.term(0, 0, 0)
	}
	sort.SliceStable(order, func(i, j int) bool { return terms[order[i]] < terms[order[j]] })

	var best *cand
	consider := func(c cand) {
		c.gain = c.from.term(-c.mem, -c.disk, -c.cpu) + c.to.term(c.mem, c.disk, c.cpu) - terms[c.from] - terms[c.to]
		if c.gain >= 0 {
			return
		}
		if best == nil || c.gain < best.gain-1e-12 ||
			c.gain <= best.gain+1e-12 && kindRank[c.kind] < kindRank[best.kind] {
			cc := c
			best = &cc
		}
	}
	for _, i := range b.insts {
		p := b.byUUID[i.PrimaryNode]
		if p == nil || p.touched || b.failed[i.UUID] != nil {
			continue
		}
		if !i.Forthcoming && i.AdminState != fsm.AdminUp {
			continue
		}
		if ab, _ := fsm.FilledBE(b.st.Cluster, i)["auto_balance"].(bool); !ab {
			continue
		}
		name := instRef(i)
		_, disk := fsm.InstanceUsage(i, i.PrimaryNode)
		drbd := i.DiskTemplate == fsm.DTDrbd && len(i.SecondaryNodes) == 1
		// Only to nodes that can run its hypervisor, as every placement.
		hv := fsm.PlacementHypervisor(b.st, i)
		runs := func(x *bnode) bool { return fsm.HypervisorFits(x.n.Hypervisor, hv) }
		switch {
		case i.Forthcoming && drbd:
			if s := b.byUUID[i.SecondaryNodes[0]]; s != nil && !s.touched && runs(s) {
				consider(cand{in: i, kind: MoveReservation, from: p, to: s, mem: i.MemoryMiB, cpu: int64(i.VCPUs), name: name})
			}
		case i.Forthcoming && len(i.SecondaryNodes) == 0:
			mem, cpu := i.MemoryMiB, int64(i.VCPUs)
			for _, x := range order {
				if x != p && x.n.Group == p.n.Group && x.free.mem >= mem && x.free.disk >= disk && x.free.vcpus >= cpu && runs(x) {
					consider(cand{in: i, kind: MoveReservation, from: p, to: x, mem: mem, disk: disk, cpu: cpu, name: name})
					break
				}
			}
		case !i.Forthcoming && drbd:
			s := b.byUUID[i.SecondaryNodes[0]]
			if s == nil || s.touched {
				continue
			}
			if runs(s) {
				consider(cand{in: i, kind: MoveMigrate, from: p, to: s, mem: i.MemoryMiB, cpu: int64(i.VCPUs), name: name})
			}
			for _, x := range order {
				// Never to a node whose agent said it takes no drbd disks.
				if x != p && x != s && x.n.Group == p.n.Group && x.free.disk >= disk && runs(x) && x.n.NoDRBD() == "" {
					consider(cand{in: i, kind: MoveSecondary, from: s, to: x, disk: disk, name: name})
					break
				}
			}
		}
	}
	return best
}

// balance plans maintd's balancing moves.
func (r *round) balance(skip map[string]bool) {
	if !r.m.Balance {
		return
	}
	switch {
	case r.plan.Breaker.Open:
		r.note("balancing: not while the circuit breaker is open")
		return
	case len(r.jobs) > 0:
		r.note("balancing: not in a round that repairs or evacuates")
		return
	}
	out := map[string]bool{}
	for u := range skip {
		out[u] = true
	}
	for _, n := range r.st.SortedNodes() {
		if r.down(n).Why != "" {
			out[n.UUID] = true
		}
	}
	for _, j := range failedBalances(r.st, r.now) {
		r.wakeAt(j.EndTS.UnixNano() + int64(balanceRetry))
	}
	p := PlanBalance(BalanceInput{State: r.st, Threshold: r.m.BalanceThreshold, MaxMoves: r.m.MaxMoves(), Out: out, Now: r.now})
	for _, n := range p.Notes {
		r.note("%s", n)
	}
	var names []string
	for _, mv := range p.Moves {
		if _, err := r.addJob(mv.Opcode(fsm.MaintdReasonSource, r.now)); err != nil {
			if !errors.Is(err, errPostponed) {
				r.note("balancing: %s %s not submitted: %v", mv.Kind, mv.Instance, err)
			}
			break
		}
		r.note("balancing: %s %s from %s to %s: load score %.4f -> %.4f", mv.Kind, mv.Instance, mv.From, mv.To, mv.ScoreBefore, mv.ScoreAfter)
		names = append(names, mv.Instance)
	}
	if p.End != "" && len(names) == len(p.Moves) {
		r.note("%s", p.End)
	}
	if len(names) > 0 {
		r.moved(names...)
	}
}

// Opcode is the move's opcode with its reason trail: source (maintd's or
// BalanceReasonSource) at now (Unix nanoseconds).
func (mv BalanceMove) Opcode(source string, now int64) any {
	text := fmt.Sprintf(balanceReason+"%s %s from %s to %s", mv.Kind, mv.Instance, mv.From, mv.To)
	return withReason(mv.Op, []fsm.ReasonEntry{{Source: source, Text: text, TimeNS: now}})
}

// withReason sets the reason trail of a balancing opcode.
func withReason(op any, reason []fsm.ReasonEntry) any {
	switch o := op.(type) {
	case fsm.OpInstanceMigrate:
		o.Reason = reason
		return o
	case fsm.OpInstanceReplaceDisks:
		o.Reason = reason
		return o
	}
	return op
}

// failedBalances returns, by instance UUID, the newest of the balancing
// jobs that ended in error less than balanceRetry before now.
func failedBalances(st *fsm.State, now int64) map[string]*fsm.Job {
	out := map[string]*fsm.Job{}
	for _, j := range st.Jobs {
		if j.Status != fsm.StatusError || len(j.Ops) != 1 || j.EndTS == nil {
			continue
		}
		if now-j.EndTS.UnixNano() >= int64(balanceRetry) {
			continue
		}
		op, err := j.Ops[0].Opcode()
		if err != nil {
			continue
		}
		var ref fsm.OpInstanceRef
		var trail []fsm.ReasonEntry
		switch m := op.(type) {
		case *fsm.OpInstanceMigrate:
			ref, trail = m.OpInstanceRef, m.Reason
		case *fsm.OpInstanceReplaceDisks:
			ref, trail = m.OpInstanceRef, m.Reason
		default:
			continue
		}
		if !balancing(trail) {
			continue
		}
		key := ref.InstanceUUID
		if key == "" {
			key = ref.InstanceName
		}
		in := st.LookupInstance(key)
		if in == nil {
			continue
		}
		if prev := out[in.UUID]; prev == nil || prev.ID < j.ID {
			out[in.UUID] = j
		}
	}
	return out
}

// balancing reports whether a reason trail is that of a balancing move,
// maintd's or gnt cluster balance's.
func balancing(trail []fsm.ReasonEntry) bool {
	for _, e := range trail {
		if (e.Source == fsm.MaintdReasonSource || e.Source == BalanceReasonSource) && strings.HasPrefix(e.Text, balanceReason) {
			return true
		}
	}
	return false
}

// free is what a node has left as the allocator counts it.
type free struct{ mem, disk, vcpus int64 }

// freeOf is each node's free memory, disk and vcpus (its cpus times
// fsm.DefaultVCPURatio) as the allocator counts them: its totals less
// what every instance, real or forthcoming, running or not, takes of it.
func freeOf(st *fsm.State, insts []*fsm.Instance) map[string]free {
	out := make(map[string]free, len(st.Nodes))
	u, indexed := st.Usage()
	for _, n := range st.Nodes {
		f := free{n.Resources.MemoryMiB, n.Resources.DiskMiB, int64(n.Resources.CPUs) * fsm.DefaultVCPURatio}
		if indexed {
			use := u.Node(n.UUID)
			f.mem, f.disk, f.vcpus = f.mem-use.MemoryMiB, f.disk-use.DiskMiB, f.vcpus-use.VCPUs
		}
		out[n.UUID] = f
	}
	if !indexed {
		for _, in := range insts {
			for _, node := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
				if f, ok := out[node]; ok {
					mem, disk := fsm.InstanceUsage(in, node)
					f.mem, f.disk = f.mem-mem, f.disk-disk
					if node == in.PrimaryNode {
						f.vcpus -= int64(in.VCPUs)
					}
					out[node] = f
				}
			}
		}
	}
	return out
}
