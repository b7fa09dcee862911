package server

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/transport"
)

// GossipKeyLabel is the label the gossip key is derived with from the
// cluster key (rpc.DeriveKey: 32 bytes, so AES-256-GCM).
const GossipKeyLabel = "gnt gossip v1"

// Gossip roles in the node meta.
const (
	gossipRoleCandidate = "candidate" // runs a Raft server
	gossipRoleNode      = "node"
)

// gossipState is this gntd's gossip member and what it knows to join.
type gossipState struct {
	member atomic.Pointer[transport.Gossip]
	kick   chan struct{} // wakes gossipLoop: a key, new seeds

	mu    sync.Mutex
	seeds []string // candidates' gossip addresses from the last join answer

	recorded atomic.Uint64 // liveness changes this gntd recorded as leader
}

// gossipMember returns the running gossip member, or nil.
func (s *Server) gossipMember() *transport.Gossip { return s.gossip.member.Load() }

// kickGossip wakes gossipLoop without blocking.
func (s *Server) kickGossip() {
	select {
	case s.gossip.kick <- struct{}{}:
	default:
	}
}

// setGossipSeeds records the candidates' gossip addresses a join answer
// gave, and wakes gossipLoop when they changed.
func (s *Server) setGossipSeeds(addrs []string) {
	addrs = append([]string(nil), addrs...)
	sort.Strings(addrs)
	s.gossip.mu.Lock()
	changed := !equalStrings(s.gossip.seeds, addrs)
	s.gossip.seeds = addrs
	s.gossip.mu.Unlock()
	if changed {
		s.kickGossip()
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// gossipLoop runs this gntd's gossip member, candidates and plain nodes
// alike: it starts the member once the cluster key is known (the gossip
// key derives from it), keeps the role in its meta current, joins the
// gossip addresses it knows where it sees no live member (every GossipJoin
// interval, so partitions heal and restarted nodes are found), and leaves
// the cluster when ctx ends.
func (s *Server) gossipLoop(ctx context.Context) {
	var (
		g       *transport.Gossip
		lastErr string
	)
	defer func() {
		if g != nil {
			s.gossip.member.Store(nil)
			if err := g.Leave(2 * time.Second); err != nil {
				s.log.Debug("gossip leave", "error", err)
			}
		}
	}()
	for {
		if g == nil {
			var err error
			g, err = s.startGossip()
			switch {
			case err != nil && err.Error() != lastErr:
				lastErr = err.Error()
				s.log.Error("gossip member not started; retrying", "error", err)
			case g != nil:
				s.gossip.member.Store(g)
				s.log.Info("gossip member started", "addr", g.Addr())
			}
		}
		wait := time.Second // no key yet, or the port was busy
		if g != nil {
			s.syncGossipKeys(g)
			if err := g.SetMeta(s.gossipMeta()); err != nil {
				s.log.Warn("gossip meta", "error", err)
			}
			s.joinGossip(ctx, g)
			wait = s.cfg.Timing().GossipJoin
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.gossip.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// startGossip starts the gossip member, or returns nil while this gntd
// has no cluster key.
func (s *Server) startGossip() (*transport.Gossip, error) {
	keys := s.gossipKeys()
	if keys == nil {
		return nil, nil
	}
	return transport.NewGossip(transport.GossipConfig{
		Name: s.cfg.Name, BindIP: s.cfg.Bind, Port: s.cfg.GossipPort,
		Key: keys[0], Accept: keys[1:], Meta: s.gossipMeta(),
		Timing: s.cfg.Timing().Gossip, Log: s.log.Named("gossip"),
	})
}

// gossipKeys are the gossip keys, derived from the cluster keys: the one
// messages are encrypted with first, then the other one accepted during a
// renewal of cluster.key; nil without a cluster key.
func (s *Server) gossipKeys() [][]byte {
	return s.acceptedKeys(func(k []byte) []byte { return rpc.DeriveKey(k, GossipKeyLabel) })
}

// syncGossipKeys brings the member's keyring to the cluster keys (a
// renewal of cluster.key moved on).
func (s *Server) syncGossipKeys(g *transport.Gossip) {
	want := s.gossipKeys()
	have := g.Keys()
	same := len(want) == len(have)
	for i := 0; same && i < len(want); i++ {
		same = bytes.Equal(want[i], have[i])
	}
	if same || len(want) == 0 {
		return
	}
	if err := g.SetKeys(want[0], want[1:]...); err != nil {
		s.log.Error("gossip keys", "error", err)
		return
	}
	s.log.Info("gossip keys changed", "keys", len(want))
}

func (s *Server) gossipMeta() transport.Meta {
	m := transport.Meta{Role: gossipRoleNode, Agent: s.cfg.Addrs().Agent, Version: Version}
	if s.raftNode() != nil {
		m.Role, m.API = gossipRoleCandidate, s.cfg.APIAddr()
	}
	return m
}

// gossipTargets are the gossip addresses this gntd knows of: every node's
// as registered in its state (candidates hold it) and the candidates'
// from the last join answer (plain nodes hold no state).
func (s *Server) gossipTargets(self string) []string {
	set := map[string]bool{}
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		for _, n := range st.Nodes {
			if n.Name != s.cfg.Name && n.Addrs.Gossip != "" {
				set[n.Addrs.Gossip] = true
			}
		}
	})
	s.gossip.mu.Lock()
	for _, a := range s.gossip.seeds {
		set[a] = true
	}
	s.gossip.mu.Unlock()
	delete(set, self)
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// maxParallelJoins bounds the joins one round runs at once (a join to a
// machine that is down waits for the TCP timeout).
const maxParallelJoins = 8

// joinGossip joins the known addresses at which g sees no live member.
func (s *Server) joinGossip(ctx context.Context, g *transport.Gossip) {
	live := map[string]bool{}
	for _, m := range g.Members() {
		if m.State == transport.StateAlive || m.State == transport.StateSuspect {
			live[m.Addr] = true
		}
	}
	var todo []string
	for _, a := range s.gossipTargets(g.Addr()) {
		if !live[a] {
			todo = append(todo, a)
		}
	}
	if len(todo) == 0 {
		return
	}
	var (
		wg     sync.WaitGroup
		sem    = make(chan struct{}, maxParallelJoins)
		joined atomic.Int32
	)
	for _, a := range todo {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if n, err := g.Join([]string{a}); err != nil {
				s.log.Debug("gossip join", "addr", a, "error", err)
			} else {
				joined.Add(int32(n))
			}
		}()
	}
	wg.Wait()
	if n := joined.Load(); n > 0 {
		s.log.Debug("gossip joined", "members", n, "tried", len(todo))
	}
}

// gossipStatus is this gntd's view of the gossip members for its status,
// or nil while its member is not running.
func (s *Server) gossipStatus() *rpc.GossipStatus {
	g := s.gossipMember()
	if g == nil {
		return nil
	}
	ms := g.Members()
	out := &rpc.GossipStatus{Addr: g.Addr(), Members: make([]rpc.GossipMember, 0, len(ms)), Unknown: []string{}}
	for _, m := range ms {
		out.Members = append(out.Members, rpc.GossipMember{Name: m.Name, Addr: m.Addr, State: string(m.State),
			Since: float64(m.Since.UnixNano()) / 1e9, Role: m.Meta.Role, API: m.Meta.API, Agent: m.Meta.Agent,
			Version: m.Meta.Version})
	}
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if st.Initialized() {
			for _, m := range unknownMembers(st, ms) {
				out.Unknown = append(out.Unknown, m.Name)
			}
		}
	})
	return out
}

// gossipCollector exports this gntd's gossip view to Prometheus.
type gossipCollector struct{ s *Server }

var (
	gossipMembersDesc = prometheus.NewDesc("gnt_gossip_members",
		"Gossip members as this gntd sees them, by state.", []string{"state"}, nil)
	gossipUnknownDesc = prometheus.NewDesc("gnt_gossip_unknown_members",
		"Live gossip members that are not nodes of the configuration (reported, never added); 0 on a gntd that holds no state.", nil, nil)
	gossipEventsDesc = prometheus.NewDesc("gnt_gossip_events_total",
		"Member events (join, leave, update) memberlist reported to this gntd.", nil, nil)
	livenessRecordedDesc = prometheus.NewDesc("gnt_liveness_changes_recorded_total",
		"Node liveness changes this gntd recorded in the state as leader.", nil, nil)
)

func (gossipCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gossipMembersDesc
	ch <- gossipUnknownDesc
	ch <- gossipEventsDesc
	ch <- livenessRecordedDesc
}

func (c gossipCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(livenessRecordedDesc, prometheus.CounterValue, float64(c.s.gossip.recorded.Load()))
	st := c.s.gossipStatus()
	if st == nil {
		return
	}
	counts := map[string]int{}
	for _, state := range []transport.MemberState{transport.StateAlive, transport.StateSuspect, transport.StateDead, transport.StateLeft} {
		counts[string(state)] = 0
	}
	for _, m := range st.Members {
		counts[m.State]++
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(gossipMembersDesc, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(gossipUnknownDesc, prometheus.GaugeValue, float64(len(st.Unknown)))
	if g := c.s.gossipMember(); g != nil {
		ch <- prometheus.MustNewConstMetric(gossipEventsDesc, prometheus.CounterValue, float64(g.Events()))
	}
}
