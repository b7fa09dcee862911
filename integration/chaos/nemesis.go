package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/integration"
	"github.com/gnt-cluster/gnt/server"
)

// Fault kinds. One is injected at a time, held, then healed.
const (
	KillLeader    = "kill-leader"    // kill -9 of the leader, restarted from its data dir
	KillFollower  = "kill-follower"  // kill -9 of a follower
	KillCandidate = "kill-candidate" // kill -9 of a random candidate
	KillAll       = "kill-all"       // kill -9 of every candidate at once, all restarted
	StopLeader    = "stop-leader"    // SIGTERM of the leader (it hands leadership over and drains), restarted
	PauseLeader   = "pause-leader"   // SIGSTOP of the leader, longer than the election timeout, then SIGCONT
	IsolateLeader = "isolate-leader" // the leader's Raft traffic cut off
	SplitMajority = "split"          // majority/minority partition
	Bridge        = "bridge"         // two halves, and one member that talks to both (5 candidates)
	Ring          = "ring"           // each member sees its two neighbours only (5 candidates)
	OneWay        = "one-way"        // what a member sends is lost, what it receives arrives
	Latency       = "latency"        // every Raft write delayed
	Loss          = "loss"           // Raft writes dropped at random (the connection breaks)
	Transfer      = "transfer"       // leadership handed to another voter (gnt cluster master-failover)
	GossipCut     = "gossip-cut"     // memberlist's UDP (1818/udp) dropped: one member's, or between two groups (iptables only)
)

// FaultKinds lists the faults a cluster of n candidates can take when
// network faults are made the given way (InProcess or IPTables): the
// gossip-only cut needs iptables (the in-process fault wrapper is the
// Raft transport's; gossip has none).
func FaultKinds(n int, network string) []string {
	kinds := []string{KillLeader, KillFollower, KillCandidate, KillAll, StopLeader, PauseLeader, IsolateLeader, SplitMajority, OneWay, Latency, Loss, Transfer}
	if n >= 5 {
		kinds = append(kinds, Bridge, Ring)
	}
	if network == IPTables {
		kinds = append(kinds, GossipCut)
	}
	return kinds
}

// NetworkKinds lists the faults that cut or lose network traffic.
func NetworkKinds(n int, network string) []string {
	var out []string
	for _, k := range FaultKinds(n, network) {
		switch k {
		case IsolateLeader, SplitMajority, Bridge, Ring, OneWay, Loss, GossipCut:
			out = append(out, k)
		}
	}
	return out
}

// nemesis injects faults into one cluster and heals them.
type nemesis struct {
	t    testing.TB
	c    *integration.Cluster
	h    *History
	rng  *rand.Rand
	logf func(format string, args ...any)
	net  network

	mu     sync.Mutex
	faults []Fault
	killed map[*integration.Member]bool
	paused map[*integration.Member]bool
}

func newNemesis(t testing.TB, c *integration.Cluster, h *History, seed uint64, net string, logf func(string, ...any)) *nemesis {
	n := &nemesis{t: t, c: c, h: h, rng: rand.New(rand.NewPCG(seed, 7)), logf: logf,
		killed: map[*integration.Member]bool{}, paused: map[*integration.Member]bool{}}
	n.net = inProcess{n}
	if net == IPTables {
		n.net = &ipTables{n: n}
	}
	return n
}

// Faults returns the faults injected so far.
func (n *nemesis) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.faults)
}

// schedule says what to inject and for how long.
type schedule struct {
	kinds    []string         // in this order, once each; nil: random kinds until the end
	until    time.Time        // no fault starts after this
	hold     [2]time.Duration // a fault lasts between these
	gap      [2]time.Duration // quiet time after healing
	warmup   time.Duration
	allKinds []string
}

// run injects faults until the schedule ends or ctx does; every fault is
// healed before it returns.
func (n *nemesis) run(ctx context.Context, s schedule) {
	sleep(ctx, s.warmup)
	for i := 0; ctx.Err() == nil && time.Now().Before(s.until); i++ {
		var kind string
		if s.kinds != nil {
			if i >= len(s.kinds) {
				return
			}
			kind = s.kinds[i]
		} else {
			kind = s.allKinds[n.rng.IntN(len(s.allKinds))]
		}
		hold := between(n.rng, s.hold)
		if kind == PauseLeader {
			hold = min(hold, 3*time.Second) // paused clients wait on it
		}
		n.one(ctx, kind, hold)
		// Let the cluster find a leader before the next fault, so that
		// every fault meets a working cluster.
		n.waitLeader(ctx, 20*time.Second)
		sleep(ctx, between(n.rng, s.gap))
	}
}

func between(rng *rand.Rand, r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])))
}

// one injects a fault, holds it, and heals it.
func (n *nemesis) one(ctx context.Context, kind string, hold time.Duration) {
	targets, detail, heal := n.inject(ctx, kind)
	// The fault starts once it is in effect (the process is dead, the
	// rules are in), which is what recovery times are measured from.
	f := Fault{Kind: kind, Targets: targets, Detail: detail, Start: n.h.Now()}
	n.logf("%7.3fs fault %s %v %s (for %v)", secs(f.Start), kind, targets, detail, hold.Round(time.Millisecond))
	if kind == GossipCut {
		f.Effect = n.watchGossip(ctx, hold)
	} else {
		sleep(ctx, hold)
	}
	f.Healing = n.h.Now()
	heal()
	f.End = n.h.Now()
	if f.Effect != "" {
		n.logf("%7.3fs healed %s; %s", secs(f.End), kind, f.Effect)
	} else {
		n.logf("%7.3fs healed %s", secs(f.End), kind)
	}
	n.mu.Lock()
	n.faults = append(n.faults, f)
	n.mu.Unlock()
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

// waitLeader waits for an established leader and returns it (nil if none
// came in time).
func (n *nemesis) waitLeader(ctx context.Context, timeout time.Duration) *integration.Member {
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if l := n.c.Leader(); l != nil {
			return l
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return nil
}

// leaderOr returns the leader, or (when there is none) a random running
// candidate.
func (n *nemesis) leaderOr(ctx context.Context) (*integration.Member, string) {
	if l := n.waitLeader(ctx, 10*time.Second); l != nil {
		return l, ""
	}
	cands := n.running()
	return cands[n.rng.IntN(len(cands))], "no leader; a random candidate instead"
}

func (n *nemesis) running() []*integration.Member {
	var out []*integration.Member
	for _, m := range n.c.Candidates() {
		if m.Running() {
			out = append(out, m)
		}
	}
	return out
}

func (n *nemesis) others(m *integration.Member) []*integration.Member {
	var out []*integration.Member
	for _, o := range n.c.Candidates() {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

func names(ms []*integration.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// inject applies a fault and returns its targets, a detail, and how to
// heal it.
func (n *nemesis) inject(ctx context.Context, kind string) ([]string, string, func()) {
	cands := n.c.Candidates()
	switch kind {
	case KillLeader, KillFollower, KillCandidate:
		var m *integration.Member
		detail := ""
		switch kind {
		case KillLeader:
			m, detail = n.leaderOr(ctx)
		case KillFollower:
			l, _ := n.leaderOr(ctx)
			fs := n.others(l)
			m = fs[n.rng.IntN(len(fs))]
		default:
			m = cands[n.rng.IntN(len(cands))]
		}
		n.kill(m)
		return []string{m.Name}, detail, func() { n.start(m) }
	case StopLeader:
		m, detail := n.leaderOr(ctx)
		n.mu.Lock()
		n.killed[m] = true // restarted on healing, as a killed member is
		n.mu.Unlock()
		m.Stop()
		return []string{m.Name}, detail, func() { n.start(m) }
	case KillAll:
		for _, m := range cands {
			n.kill(m)
		}
		return names(cands), "", func() {
			for _, m := range cands {
				n.start(m)
			}
		}
	case PauseLeader:
		m, detail := n.leaderOr(ctx)
		n.mu.Lock()
		n.paused[m] = true
		n.mu.Unlock()
		m.Pause()
		return []string{m.Name}, detail, func() {
			m.Resume()
			n.mu.Lock()
			delete(n.paused, m)
			n.mu.Unlock()
		}
	case IsolateLeader:
		m, detail := n.leaderOr(ctx)
		n.net.block(m, n.others(m))
		return []string{m.Name}, detail, n.healAll
	case SplitMajority:
		l, _ := n.leaderOr(ctx)
		order := n.shuffled(cands)
		size := 1 + n.rng.IntN((len(cands)-1)/2) // a minority
		minority := order[:size]
		if n.rng.IntN(2) == 0 && !slices.Contains(minority, l) {
			// Half the time the leader is on the minority side.
			minority[0] = l
		}
		var majority []*integration.Member
		for _, m := range cands {
			if !slices.Contains(minority, m) {
				majority = append(majority, m)
			}
		}
		n.cut(minority, majority)
		return names(minority), "minority; majority " + strings.Join(names(majority), ","), n.healAll
	case Bridge:
		order := n.shuffled(cands)
		half := len(order) / 2
		a, bridge, b := order[:half], order[half], order[half+1:]
		n.cut(a, b)
		return names(order), fmt.Sprintf("%v | %s | %v", names(a), bridge.Name, names(b)), n.healAll
	case Ring:
		order := n.shuffled(cands)
		for i, m := range order {
			var far []*integration.Member
			for d := 2; d <= len(order)-2; d++ {
				far = append(far, order[(i+d)%len(order)])
			}
			n.net.block(m, far)
		}
		return names(order), "each sees its two neighbours", n.healAll
	case OneWay:
		l, _ := n.leaderOr(ctx)
		if n.rng.IntN(2) == 0 {
			n.net.cutTo(l, n.others(l))
			return []string{l.Name}, "the leader is not heard by the others, and hears them", n.healAll
		}
		fs := n.others(l)
		f := fs[n.rng.IntN(len(fs))]
		n.net.cutTo(f, []*integration.Member{l})
		return []string{f.Name}, "not heard by the leader " + l.Name + ", hears it", n.healAll
	case Transfer:
		l, detail := n.leaderOr(ctx)
		fs := n.others(l)
		to := fs[n.rng.IntN(len(fs))]
		tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		got, err := n.c.ClientFor(l).MasterFailover(tctx, to.Name)
		cancel()
		if err != nil {
			detail += fmt.Sprintf(" transfer to %s: %v", to.Name, err)
		} else {
			detail += " new master " + got
		}
		return []string{l.Name, to.Name}, strings.TrimSpace(detail), func() {}
	case GossipCut:
		all := n.c.Members
		if n.rng.IntN(2) == 0 {
			// One member's gossip UDP, the leader's half of the time.
			m := all[n.rng.IntN(len(all))]
			if n.rng.IntN(2) == 0 {
				if l := n.waitLeader(ctx, 5*time.Second); l != nil {
					m = l
				}
			}
			var rest []*integration.Member
			for _, o := range all {
				if o != m {
					rest = append(rest, o)
				}
			}
			n.net.gossipCut([]*integration.Member{m}, rest)
			return []string{m.Name}, "gossip UDP of " + m.Name + " cut off from every other member", n.healAll
		}
		order := n.shuffled(all)
		half := 1 + n.rng.IntN(len(order)-1)
		a, b := order[:half], order[half:]
		n.net.gossipCut(a, b)
		return names(order), fmt.Sprintf("gossip UDP cut between %v and %v", names(a), names(b)), n.healAll
	case Latency:
		d := time.Duration(10+n.rng.IntN(90)) * time.Millisecond
		for _, m := range cands {
			n.request(m, server.FaultRequest{Delay: d.String()})
		}
		return names(cands), "delay " + d.String() + " per write", n.healAll
	case Loss:
		p := 0.02 + 0.01*float64(n.rng.IntN(9))
		n.net.loss(cands, p)
		return names(cands), fmt.Sprintf("drop rate %.2f", p), n.healAll
	}
	n.t.Errorf("unknown fault kind %q", kind)
	return nil, "", func() {}
}

func (n *nemesis) shuffled(ms []*integration.Member) []*integration.Member {
	out := slices.Clone(ms)
	n.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// cut partitions a from b.
func (n *nemesis) cut(a, b []*integration.Member) {
	for _, m := range a {
		n.net.block(m, b)
	}
}

func raftAddrs(ms []*integration.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.RaftAddr())
	}
	return out
}

// watchGossip holds a gossip-only cut for d, watching what it does: the
// members the candidates' gossip does not see alive meanwhile, whether
// the Raft leader changed (it has no reason to: Raft's traffic is left
// alone), and how many gossip packets the rules dropped.
func (n *nemesis) watchGossip(ctx context.Context, d time.Duration) string {
	leaderTerm := func() string {
		for _, m := range n.running() {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := n.c.ClientFor(m).Status(sctx, false)
			cancel()
			if err == nil && st.RaftState == "leader" {
				return fmt.Sprintf("%s term %d", m.Name, st.Term)
			}
		}
		return "none"
	}
	before := leaderTerm()
	seen := map[string]bool{}
	end := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(end) {
		for _, m := range n.running() {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := n.c.ClientFor(m).Status(sctx, false)
			cancel()
			if err != nil || st.Gossip == nil {
				continue
			}
			for _, g := range st.Gossip.Members {
				if g.State != "alive" {
					seen[m.Name+" saw "+g.Name+" "+g.State] = true
				}
			}
		}
		sleep(ctx, min(250*time.Millisecond, time.Until(end)))
	}
	after := leaderTerm()
	var out []string
	if len(seen) == 0 {
		out = append(out, "every member stayed alive in every candidate's gossip")
	} else {
		out = append(out, "gossip: "+strings.Join(sortedKeys(seen), ", "))
	}
	if before == after {
		out = append(out, "raft leader unchanged ("+before+")")
	} else {
		out = append(out, "raft leader "+before+" -> "+after)
	}
	if c, ok := n.net.(interface{ dropped(proto string) int64 }); ok {
		out = append(out, fmt.Sprintf("%d gossip UDP packets dropped", c.dropped("udp")))
	}
	return strings.Join(out, "; ")
}

// request sends a fault request to a running member; a member that is
// down has no faults to set.
func (n *nemesis) request(m *integration.Member, req server.FaultRequest) {
	if !m.Running() {
		return
	}
	if err := m.Faults(req); err != nil {
		n.logf("fault request to %s: %v", m.Name, err)
	}
}

func (n *nemesis) kill(m *integration.Member) {
	n.mu.Lock()
	n.killed[m] = true
	n.mu.Unlock()
	m.Kill()
}

func (n *nemesis) start(m *integration.Member) {
	n.mu.Lock()
	was := n.killed[m]
	delete(n.killed, m)
	n.mu.Unlock()
	if was && !m.Running() {
		m.Start(n.t)
	}
}

// healAll resumes paused members, restarts killed ones and removes every
// network fault.
func (n *nemesis) healAll() {
	n.mu.Lock()
	var paused, killed []*integration.Member
	for m := range n.paused {
		paused = append(paused, m)
	}
	for m := range n.killed {
		killed = append(killed, m)
	}
	n.mu.Unlock()
	for _, m := range paused {
		m.Resume()
	}
	for _, m := range killed {
		n.start(m)
	}
	n.mu.Lock()
	clear(n.paused)
	n.mu.Unlock()
	n.net.heal(n.c.Candidates())
	for _, m := range n.c.Candidates() {
		if !m.Running() || slices.Contains(killed, m) {
			continue // a process just started has no faults
		}
		// A member that just started answers its API a moment later.
		for i := 0; i < 50; i++ {
			err := m.Heal()
			if err == nil || !isConnRefused(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
