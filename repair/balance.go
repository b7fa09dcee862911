package repair

import (
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
)

// Balancing (maint_balance): when the memory load of the nodes (the
// memory of the instances running there as primaries, over the node's
// memory) differs by more than maint_balance_thresh between the most and
// the least loaded node, a round live-migrates one drbd instance off the
// most loaded node to its secondary, the one that narrows that spread
// most, and only if it narrows it by at least half the threshold. Ganeti's
// maintd runs hbal's first step instead; gnt has no hbal, and one
// migration to a node the instance already has its disks on is the least
// invasive move there is. Nodes that are down, drained, not vm_capable or
// being handled by maintd take no part; nothing moves while the breaker
// is open or anything else was submitted this round.

// nodeLoad is the memory load of one node.
type nodeLoad struct {
	n    *fsm.Node
	used int64
}

func (l nodeLoad) share() float64 {
	if l.n.Resources.MemoryMiB <= 0 {
		return 0
	}
	return float64(l.used) / float64(l.n.Resources.MemoryMiB)
}

func spread(loads map[string]*nodeLoad) (lo, hi *nodeLoad) {
	for _, l := range loads {
		if lo == nil || l.share() < lo.share() || l.share() == lo.share() && l.n.Name < lo.n.Name {
			lo = l
		}
		if hi == nil || l.share() > hi.share() || l.share() == hi.share() && l.n.Name < hi.n.Name {
			hi = l
		}
	}
	return lo, hi
}

// balance plans at most one balancing migration.
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
	loads := map[string]*nodeLoad{}
	for _, n := range r.st.SortedNodes() {
		if !n.VMCapable || skip[n.UUID] || r.down(n).Why != "" || n.Liveness == fsm.LivenessDead || n.Resources.MemoryMiB <= 0 {
			continue
		}
		loads[n.UUID] = &nodeLoad{n: n}
	}
	if len(loads) < 2 {
		return
	}
	insts := r.st.SortedInstances()
	for _, in := range insts {
		if in.Forthcoming || in.AdminState != fsm.AdminUp {
			continue
		}
		if l := loads[in.PrimaryNode]; l != nil {
			l.used += in.MemoryMiB
		}
	}
	lo, hi := spread(loads)
	before := hi.share() - lo.share()
	thresh := r.m.BalanceThreshold
	if before <= thresh {
		return
	}
	type move struct {
		inst  *fsm.Instance
		to    *nodeLoad
		after float64
	}
	var best *move
	for _, in := range insts {
		if in.PrimaryNode != hi.n.UUID || in.Forthcoming || in.AdminState != fsm.AdminUp ||
			in.DiskTemplate != fsm.DTDrbd || len(in.SecondaryNodes) != 1 {
			continue
		}
		to := loads[in.SecondaryNodes[0]]
		if to == nil {
			continue
		}
		hi.used -= in.MemoryMiB
		to.used += in.MemoryMiB
		l2, h2 := spread(loads)
		after := h2.share() - l2.share()
		hi.used += in.MemoryMiB
		to.used -= in.MemoryMiB
		if best == nil || after < best.after {
			best = &move{inst: in, to: to, after: after}
		}
	}
	if best == nil || before-best.after < thresh/2 {
		r.note("balancing: memory load spread %.0f%% (%s %.0f%%, %s %.0f%%) is over the threshold %.0f%%, but no migration to a secondary narrows it enough",
			100*before, hi.n.Name, 100*hi.share(), lo.n.Name, 100*lo.share(), 100*thresh)
		return
	}
	o := fsm.OpInstanceMigrate{OpInstanceRef: fsm.OpInstanceRef{InstanceName: best.inst.Name}}
	o.OpID, o.Reason = "OP_INSTANCE_MIGRATE", r.reason(fmt.Sprintf("balance: %s from %s to %s", best.inst.Name, hi.n.Name, best.to.n.Name))
	if r.addJob(o) == 0 {
		return
	}
	r.note("balancing: migrating %s from %s (memory load %.0f%%) to %s (%.0f%%): spread %.0f%% -> %.0f%%",
		best.inst.Name, hi.n.Name, 100*hi.share(), best.to.n.Name, 100*best.to.share(), 100*before, 100*best.after)
	r.moved(best.inst.Name)
}
