package server

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/transport"
)

// memberSource is what the liveness reconciler needs of gossip.
type memberSource interface {
	// Members lists every member with its state and the time it changed.
	Members() []transport.Member
	// Changed receives (coalesced) when a member's state changed.
	Changed() <-chan struct{}
	// Started is when the gossip member started.
	Started() time.Time
}

// livenessOf maps a gossip state to the liveness recorded for a node: a
// member that left (its gntd stopped cleanly) is as dead as one that
// stopped answering.
func livenessOf(s transport.MemberState) string {
	switch s {
	case transport.StateAlive:
		return fsm.LivenessAlive
	case transport.StateSuspect:
		return fsm.LivenessSuspect
	default:
		return fsm.LivenessDead
	}
}

// planLiveness compares gossip's view with the liveness recorded in the
// state and returns the changes to record, by node name. A node gossip
// does not know at all is dead only once settled (the gossip member has
// run long enough to have heard of every live node); until then it is left
// as recorded.
func planLiveness(st *fsm.State, members []transport.Member, settled bool, now time.Time) []fsm.LivenessChange {
	byName := make(map[string]transport.Member, len(members))
	for _, m := range members {
		byName[m.Name] = m
	}
	var out []fsm.LivenessChange
	for _, n := range st.SortedNodes() {
		m, known := byName[n.Name]
		var want string
		since := now
		switch {
		case known:
			want, since = livenessOf(m.State), m.Since
		case settled:
			want = fsm.LivenessDead
		default:
			continue
		}
		if want != n.Liveness {
			out = append(out, fsm.LivenessChange{Node: n.Name, State: want, Since: since.UnixNano()})
		}
	}
	return out
}

// unknownMembers are the live gossip members that are not nodes of the
// configuration.
func unknownMembers(st *fsm.State, members []transport.Member) []transport.Member {
	var out []transport.Member
	for _, m := range members {
		if (m.State == transport.StateAlive || m.State == transport.StateSuspect) && st.LookupNode(m.Name) == nil {
			out = append(out, m)
		}
	}
	return out
}

// livenessGrace is how long a new leader waits before recording liveness,
// and how long its gossip member must have run before a node it has not
// heard of counts as dead: twice the time a death takes to be detected in
// a cluster of n nodes (a probe interval plus the longest suspicion).
func livenessGrace(t transport.GossipTiming, n int) time.Duration {
	_, max := t.SuspicionTimeout(n)
	return 2 * (t.ProbeInterval + max)
}

// minLivenessGap is the shortest time between two rounds woken by gossip
// events, so a burst of changes is recorded in few writes.
const minLivenessGap = 100 * time.Millisecond

// livenessReconciler is the leader service that records what gossip says
// about each node in the state (fsm.NodeLiveness), fenced by the
// leadership's epoch. It runs a round when gossip reports a change and
// every Interval; gossip's events are hints, the round compares the whole
// view with the state.
type livenessReconciler struct {
	FSM      *fsm.FSM
	Apply    jobs.Applier
	Members  memberSource
	Epoch    uint64
	Grace    time.Duration
	Interval time.Duration
	Log      hclog.Logger
	Clock    func() time.Time
	// OnRecorded, if set, is told how many changes a round recorded.
	OnRecorded func(n int)

	unknown string // members last reported as not nodes, for logging changes
}

// Run waits out the grace period, then reconciles until ctx ends. It
// returns jobs.ErrFenced when a newer leader's epoch refused its write.
func (r *livenessReconciler) Run(ctx context.Context) error {
	grace := time.NewTimer(r.Grace)
	select {
	case <-ctx.Done():
		grace.Stop()
		return nil
	case <-grace.C:
	}
	tick := time.NewTicker(r.Interval)
	defer tick.Stop()
	for {
		last := time.Now()
		if err := r.round(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-r.Members.Changed():
			// At once, but at most one round per minLivenessGap.
			if wait := minLivenessGap - time.Since(last); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		}
	}
}

// round records the differences between gossip's view and the state in
// one command.
func (r *livenessReconciler) round(ctx context.Context) error {
	if r.Clock == nil {
		r.Clock = time.Now
	}
	if r.Log == nil {
		r.Log = hclog.NewNullLogger()
	}
	now := r.Clock()
	members := r.Members.Members()
	settled := now.Sub(r.Members.Started()) >= r.Grace
	var (
		changes []fsm.LivenessChange
		unknown []transport.Member
	)
	r.FSM.Read(func(st *fsm.State, _ uint64) {
		if !st.Initialized() {
			return
		}
		changes = planLiveness(st, members, settled, now)
		unknown = unknownMembers(st, members)
	})
	r.reportUnknown(unknown)
	if len(changes) == 0 {
		return nil
	}
	resp, _, err := r.Apply.Apply(ctx, fsm.NodeLiveness{Now: now.UnixNano(), Epoch: r.Epoch, Changes: changes})
	if err != nil {
		if ctx.Err() == nil {
			r.Log.Warn("recording liveness", "error", err)
		}
		return nil
	}
	if resp.Err != nil {
		if errors.Is(resp.Err, fsm.ErrFenced) {
			return jobs.ErrFenced
		}
		// A node removed since the state was read: the next round reads
		// it again.
		r.Log.Warn("recording liveness refused", "error", resp.Err)
		return nil
	}
	for _, c := range changes {
		r.Log.Info("node liveness", "node", c.Node, "state", c.State, "since", time.Unix(0, c.Since).Format(time.RFC3339Nano))
	}
	if r.OnRecorded != nil {
		r.OnRecorded(len(changes))
	}
	return nil
}

// reportUnknown logs the gossip members that are not nodes whenever that
// set changes (the metric and the status show it all the time).
func (r *livenessReconciler) reportUnknown(ms []transport.Member) {
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		names = append(names, m.Name+"@"+m.Addr)
	}
	sort.Strings(names)
	key := strings.Join(names, " ")
	if key == r.unknown {
		return
	}
	r.unknown = key
	if len(names) > 0 {
		r.Log.Warn("gossip members that are not nodes of the configuration (not added; 'gnt node add' them or stop them)", "members", names)
	}
}

// runLiveness is the liveness leader service: it waits for this gntd's
// gossip member, then runs the reconciler with the leadership's epoch.
func (s *Server) runLiveness(ctx context.Context, epoch uint64) error {
	for s.gossipMember() == nil {
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return nil
		}
	}
	n := 0
	s.fsm.Read(func(st *fsm.State, _ uint64) { n = len(st.Nodes) })
	tm := s.cfg.Timing()
	r := &livenessReconciler{
		FSM: s.fsm, Apply: s, Members: s.gossipMember(), Epoch: epoch,
		Grace: livenessGrace(tm.Gossip, n), Interval: tm.Liveness, Log: s.log.Named("liveness"),
		OnRecorded: func(n int) { s.gossip.recorded.Add(uint64(n)) },
	}
	r.Log.Debug("liveness reconciler waiting out its grace period", "grace", r.Grace)
	return r.Run(ctx)
}
