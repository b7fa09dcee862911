package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// peerHealth is what the leader last learnt from a candidate's status.
type peerHealth struct {
	applied      uint64
	seen         time.Time
	healthySince time.Time
}

// membershipPlan is what one keeper round will change in the Raft
// configuration. It is computed by planMembership, a pure function.
type membershipPlan struct {
	add     []raft.Server // AddNonvoter (also updates an address)
	remove  []raft.ServerID
	promote []raft.ServerID
	demote  []raft.ServerID
}

type candidateInfo struct {
	name    string
	raft    string
	healthy bool // caught up and stable long enough to vote
}

// planMembership keeps the Raft configuration equal to the set of master
// candidates: candidates join as non-voters and become voters once healthy,
// up to maxVoters; servers that are no longer candidates leave. It never
// removes the leader itself, and removes at most one voter per round so a
// majority is never removed at once.
func planMembership(conf []raft.Server, cands []candidateInfo, self raft.ServerID, maxVoters int) membershipPlan {
	var p membershipPlan
	want := map[raft.ServerID]candidateInfo{}
	for _, c := range cands {
		want[raft.ServerID(c.name)] = c
	}
	have := map[raft.ServerID]raft.Server{}
	voters := 0
	for _, s := range conf {
		have[s.ID] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	removedVoter := false
	for _, s := range conf {
		if _, ok := want[s.ID]; ok || s.ID == self {
			continue
		}
		if s.Suffrage == raft.Voter {
			if removedVoter {
				continue
			}
			removedVoter = true
			voters--
		}
		p.remove = append(p.remove, s.ID)
	}
	names := make([]string, 0, len(want))
	for id := range want {
		names = append(names, string(id))
	}
	sort.Strings(names)
	for _, name := range names {
		c := want[raft.ServerID(name)]
		cur, ok := have[raft.ServerID(name)]
		if !ok || string(cur.Address) != c.raft {
			if raft.ServerID(name) != self {
				p.add = append(p.add, raft.Server{ID: raft.ServerID(name), Address: raft.ServerAddress(c.raft), Suffrage: raft.Nonvoter})
			}
			continue
		}
		if cur.Suffrage != raft.Voter && c.healthy && voters < maxVoters {
			p.promote = append(p.promote, cur.ID)
			voters++
		}
	}
	if voters > maxVoters {
		// Demote the last voters by name, never the leader.
		var vs []string
		for _, s := range conf {
			if s.Suffrage == raft.Voter && s.ID != self {
				vs = append(vs, string(s.ID))
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(vs)))
		for _, v := range vs {
			if voters <= maxVoters {
				break
			}
			p.demote = append(p.demote, raft.ServerID(v))
			voters--
		}
	}
	return p
}

// poolKeeper runs planMembership every PoolInterval on the leader and
// carries the plan out.
func (s *Server) poolKeeper(ctx context.Context, r *raft.Raft) {
	client := s.httpClient()
	tick := time.NewTicker(s.cfg.Timing().PoolInterval)
	defer tick.Stop()
	for {
		s.poolRound(ctx, r, client)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Server) poolRound(ctx context.Context, r *raft.Raft, client *http.Client) {
	cf := r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return
	}
	conf := cf.Configuration().Servers
	var nodes []*fsm.Node
	maxVoters := fsm.DefaultMaxVoters
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if st.Cluster != nil {
			maxVoters = st.Cluster.MaxVoters
		}
		for _, n := range st.Candidates() {
			c := *n
			nodes = append(nodes, &c)
		}
	})
	last := r.LastIndex()
	now := time.Now()
	var cands []candidateInfo
	for _, n := range nodes {
		if n.Addrs.Raft == "" {
			continue // not registered yet: its gntd has not joined
		}
		c := candidateInfo{name: n.Name, raft: n.Addrs.Raft}
		if n.Name != s.cfg.Name {
			c.healthy = s.checkPeer(ctx, client, n, last, now)
		}
		cands = append(cands, c)
	}
	p := planMembership(conf, cands, raft.ServerID(s.cfg.Name), maxVoters)
	timeout := 5 * time.Second
	for _, srv := range p.add {
		s.log.Info("adding candidate to raft as non-voter", "node", srv.ID, "address", srv.Address)
		if err := r.AddNonvoter(srv.ID, srv.Address, 0, timeout).Error(); err != nil {
			s.log.Warn("add non-voter", "node", srv.ID, "error", err)
		}
	}
	for _, id := range p.promote {
		s.log.Info("promoting caught-up candidate to voter", "node", id)
		addr := ""
		for _, srv := range conf {
			if srv.ID == id {
				addr = string(srv.Address)
			}
		}
		if err := r.AddVoter(id, raft.ServerAddress(addr), 0, timeout).Error(); err != nil {
			s.log.Warn("promote", "node", id, "error", err)
		}
	}
	for _, id := range p.demote {
		s.log.Info("demoting voter beyond the voter limit", "node", id)
		if err := r.DemoteVoter(id, 0, timeout).Error(); err != nil {
			s.log.Warn("demote", "node", id, "error", err)
		}
	}
	for _, id := range p.remove {
		s.log.Info("removing server that is no longer a master candidate", "node", id)
		if err := r.RemoveServer(id, 0, timeout).Error(); err != nil {
			s.log.Warn("remove", "node", id, "error", err)
		}
	}
}

// checkPeer asks a candidate's gntd for its status and reports whether it
// has been caught up for at least the stabilization time.
func (s *Server) checkPeer(ctx context.Context, client *http.Client, n *fsm.Node, last uint64, now time.Time) bool {
	var st rpc.Status
	ok := false
	if n.Addrs.API != "" {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+n.Addrs.API+"/2/gnt/status", nil)
		if resp, err := client.Do(req); err == nil {
			ok = resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&st) == nil && st.Candidate
			resp.Body.Close()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.peerStatus[n.Name]
	if !ok || st.Name != n.Name {
		h.healthySince = time.Time{}
		s.peerStatus[n.Name] = h
		return false
	}
	h.applied, h.seen = st.AppliedIndex, now
	if st.AppliedIndex+256 < last {
		h.healthySince = time.Time{}
	} else if h.healthySince.IsZero() {
		h.healthySince = now
	}
	s.peerStatus[n.Name] = h
	return !h.healthySince.IsZero() && now.Sub(h.healthySince) >= s.cfg.Timing().Stabilization
}

func (p membershipPlan) String() string {
	return fmt.Sprintf("add=%v remove=%v promote=%v demote=%v", p.add, p.remove, p.promote, p.demote)
}
