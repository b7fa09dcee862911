package repair

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Balancing (maint_balance): when the memory load of the nodes (the
// memory of the instances running there as primaries and of the
// reservations there, over the node's memory) differs by more than
// maint_balance_thresh between the most and the least loaded node, a round
// moves one instance off the most loaded node, the move that narrows that
// spread most, and only if it narrows it by at least half the threshold.
// The moves are: a running drbd instance live-migrated to its secondary
// (Ganeti's maintd runs hbal's first step instead; gnt has no hbal, and
// one migration to a node the instance already has its disks on is the
// least invasive move there is), or a reservation (a forthcoming
// instance) moved in the configuration, a drbd one to its secondary,
// another to the least loaded node of its group with its memory and disk
// free (as the allocator counts them; the job checks the placement in
// full). A reservation is memory promised to an instance that will run
// there, so it counts in the load, and moving it costs nothing, so it is
// preferred to a migration that narrows the spread no more (seed 001:
// "wherever possible, moves of forthcoming instances are preferred over
// moving real instances"). Both are OP_INSTANCE_MIGRATE, which moves a
// reservation's record only. Nodes that are down, drained, not vm_capable
// or being handled by maintd take no part; nothing moves while the
// breaker is open or anything else was submitted this round. An instance
// whose balancing job failed stays where it is for balanceRetry: the
// job checks the move in full (the target's memory, N+1 for the new roles
// of a drbd reservation's nodes), which the balancer does not repeat, and
// without this memory a move that fails would be proposed every round.

// balanceRetry is how long after a failed balancing job of an instance
// maintd proposes no balancing move of that instance.
const balanceRetry = time.Hour

// balanceReason begins the reason text of every balancing job, which is
// how failedBalances tells them from maintd's other migrations.
const balanceReason = "balance: "

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

// balance plans at most one balancing move.
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
	var order []*nodeLoad // by node name
	for _, n := range r.st.SortedNodes() {
		if !n.VMCapable || skip[n.UUID] || r.down(n).Why != "" || n.Liveness == fsm.LivenessDead || n.Resources.MemoryMiB <= 0 {
			continue
		}
		loads[n.UUID] = &nodeLoad{n: n}
		order = append(order, loads[n.UUID])
	}
	if len(loads) < 2 {
		return
	}
	insts := r.st.SortedInstances()
	for _, in := range insts {
		if !in.Forthcoming && in.AdminState != fsm.AdminUp {
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
		inst   *fsm.Instance
		to     *nodeLoad
		target string // the opcode's target_node, for a reservation of one node
		after  float64
	}
	try := func(in *fsm.Instance, to *nodeLoad, target string, best **move) {
		hi.used -= in.MemoryMiB
		to.used += in.MemoryMiB
		l2, h2 := spread(loads)
		after := h2.share() - l2.share()
		hi.used += in.MemoryMiB
		to.used -= in.MemoryMiB
		if *best == nil || after < (*best).after {
			*best = &move{inst: in, to: to, target: target, after: after}
		}
	}
	var mig, res *move
	var room map[string]free
	failed := r.failedBalances()
	for _, in := range insts {
		if in.PrimaryNode != hi.n.UUID {
			continue
		}
		if ab, _ := fsm.FilledBE(r.st.Cluster, in)["auto_balance"].(bool); !ab {
			// Ganeti's beparam auto_balance: false keeps the instance
			// out of balancing.
			continue
		}
		if j := failed[in.UUID]; j != nil {
			name := in.Name
			if name == "" {
				name = in.UUID
			}
			r.note("balancing: leaving %s on %s: its balancing job %d failed less than %v ago", name, hi.n.Name, j.ID, balanceRetry)
			continue
		}
		switch {
		case in.Forthcoming && in.DiskTemplate == fsm.DTDrbd && len(in.SecondaryNodes) == 1:
			if to := loads[in.SecondaryNodes[0]]; to != nil {
				try(in, to, "", &res)
			}
		case in.Forthcoming && len(in.SecondaryNodes) == 0:
			if room == nil {
				room = r.freeOf(insts)
			}
			if to := roomiest(order, hi, in, room); to != nil {
				try(in, to, to.n.Name, &res)
			}
		case !in.Forthcoming && in.AdminState == fsm.AdminUp && in.DiskTemplate == fsm.DTDrbd && len(in.SecondaryNodes) == 1:
			if to := loads[in.SecondaryNodes[0]]; to != nil {
				try(in, to, "", &mig)
			}
		}
	}
	best := mig
	if res != nil && (mig == nil || res.after <= mig.after) {
		best = res
	}
	if best == nil || before-best.after < thresh/2 {
		r.note("balancing: memory load spread %.0f%% (%s %.0f%%, %s %.0f%%) is over the threshold %.0f%%, but no migration to a secondary or move of a reservation narrows it enough",
			100*before, hi.n.Name, 100*hi.share(), lo.n.Name, 100*lo.share(), 100*thresh)
		return
	}
	o := fsm.OpInstanceMigrate{OpInstanceRef: fsm.OpInstanceRef{InstanceName: best.inst.Name}, TargetNode: best.target}
	what, name := "migrating", best.inst.Name
	if best.inst.Forthcoming {
		what = "moving reservation"
		if name == "" {
			name = best.inst.UUID
			o.OpInstanceRef = fsm.OpInstanceRef{InstanceUUID: name}
		}
	}
	o.OpID, o.Reason = "OP_INSTANCE_MIGRATE", r.reason(fmt.Sprintf(balanceReason+"%s from %s to %s", name, hi.n.Name, best.to.n.Name))
	if _, err := r.addJob(o); err != nil {
		if !errors.Is(err, errPostponed) {
			r.note("balancing: %s %s not submitted: %v", what, name, err)
		}
		return
	}
	why := ""
	if best == res && mig != nil {
		why = fmt.Sprintf(" (a configuration change, preferred to migrating %s: spread %.0f%%)", mig.inst.Name, 100*mig.after)
	}
	r.note("balancing: %s %s from %s (memory load %.0f%%) to %s (%.0f%%): spread %.0f%% -> %.0f%%%s",
		what, name, hi.n.Name, 100*hi.share(), best.to.n.Name, 100*best.to.share(), 100*before, 100*best.after, why)
	r.moved(name)
}

// failedBalances returns, by instance UUID, the newest of maintd's
// balancing jobs that ended in error less than balanceRetry ago.
func (r *round) failedBalances() map[string]*fsm.Job {
	out := map[string]*fsm.Job{}
	for _, j := range r.st.Jobs {
		if j.Status != fsm.StatusError || len(j.Ops) != 1 || j.EndTS == nil {
			continue
		}
		if r.now-j.EndTS.UnixNano() >= int64(balanceRetry) {
			continue
		}
		r.wakeAt(j.EndTS.UnixNano() + int64(balanceRetry))
		op, err := j.Ops[0].Opcode()
		if err != nil {
			continue
		}
		m, ok := op.(*fsm.OpInstanceMigrate)
		if !ok || !balancing(m.Reason) {
			continue
		}
		ref := m.InstanceUUID
		if ref == "" {
			ref = m.InstanceName
		}
		in := r.st.LookupInstance(ref)
		if in == nil {
			continue
		}
		if prev := out[in.UUID]; prev == nil || prev.ID < j.ID {
			out[in.UUID] = j
		}
	}
	return out
}

// balancing reports whether a reason trail is that of a balancing move of
// maintd's.
func balancing(trail []fsm.ReasonEntry) bool {
	for _, e := range trail {
		if e.Source == fsm.MaintdReasonSource && strings.HasPrefix(e.Text, balanceReason) {
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
func (r *round) freeOf(insts []*fsm.Instance) map[string]free {
	out := make(map[string]free, len(r.st.Nodes))
	u, indexed := r.st.Usage()
	for _, n := range r.st.Nodes {
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

// roomiest is the least loaded node of hi's group, other than hi, with
// the memory, disk and vcpus free for the single-node reservation in; nil
// when none has.
func roomiest(order []*nodeLoad, hi *nodeLoad, in *fsm.Instance, room map[string]free) *nodeLoad {
	mem, disk := fsm.InstanceUsage(in, in.PrimaryNode)
	var best *nodeLoad
	for _, l := range order {
		f := room[l.n.UUID]
		if l == hi || l.n.Group != hi.n.Group || f.mem < mem || f.disk < disk || f.vcpus < int64(in.VCPUs) {
			continue
		}
		if best == nil || l.share() < best.share() {
			best = l
		}
	}
	return best
}
