package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/netlimit"
	"github.com/gnt-cluster/gnt/rpc"
)

// Connection limits of this gntd's TCP servers.
//
// The API, the node RPC and maintd each accept through their own
// netlimit.Limiter (Config.MaxConns overall, Config.MaxConnsPerIP from one
// client address), so that a flood of one of them leaves the others their
// places, and all of them together leave descriptors for Raft (whose port
// has small caps of its own), gossip, the data dir and the dials out
// (fdReserve). Gossip's TCP port (memberlist's own listener) has none. Their HTTP servers bound
// reading a request (netlimit.HTTPLimits) and writing its answer
// (WriteTimeout above the longest answer each one holds on purpose).

const (
	// fdReserve is the descriptors kept out of the connection caps.
	fdReserve = 1024
	// minConnCap is the lowest overall cap the descriptor limit lowers
	// a server's to.
	minConnCap = 64

	// apiWriteTimeout is above the longest answer the API holds: a
	// blocking query (?index=N&wait=D) waits up to rpc.MaxBlockWait; a
	// held submission or a follower's forwarded batch (rpc's
	// forwardTimeout) is shorter.
	apiWriteTimeout = rpc.MaxBlockWait + time.Minute
	// agentWriteTimeout is above the longest node operation
	// (rpc.DefaultNodeMaxOpTime), which answers at its end.
	agentWriteTimeout = rpc.DefaultNodeMaxOpTime + time.Minute
	// maintdWriteTimeout: maintd answers from memory at once.
	maintdWriteTimeout = time.Minute
)

// connLimiters are the limiters of the API, the node RPC, maintd and the
// Raft port, and the addresses their per-address caps spare.
type connLimiters struct {
	api, agent, maintd, raft *netlimit.Limiter
	hosts                    hostSet
}

// each calls f with each limiter and the server's name.
func (c *connLimiters) each(f func(name string, l *netlimit.Limiter)) {
	f("api", c.api)
	f("agent", c.agent)
	f("maintd", c.maintd)
	f("raft", c.raft)
}

// The Raft port's caps, within fdReserve: its peers are the candidates
// (spared by the per-address cap), each with a few connections (a pool of
// 3, pipelining, a snapshot); nobody else has anything to do there.
const (
	raftMaxConns      = 256
	raftMaxConnsPerIP = 32
)

// setupConnLimits raises the descriptor limit as far as allowed, lowers
// the overall caps when the three servers' would not leave fdReserve
// descriptors, and makes the limiters.
func (s *Server) setupConnLimits() {
	lim := s.cfg.connLimits()
	soft, hard, err := netlimit.RaiseFileLimit()
	if err != nil {
		s.log.Warn("cannot raise the open-file limit (RLIMIT_NOFILE) to its hard limit", "soft", soft, "hard", hard, "error", err)
	}
	lim = fitFileLimit(lim, soft, s.log)
	if soft > 0 {
		s.log.Info("open-file limit", "soft", soft, "hard", hard, "max_conns_per_server", capString(lim.MaxConns),
			"max_conns_per_ip", capString(lim.MaxConnsPerIP))
	}
	mk := func(name string, lim netlimit.Limits) *netlimit.Limiter {
		lg := s.log.Named(name)
		return netlimit.New(lim, netlimit.Options{
			Name:   name,
			Logf:   func(format string, args ...any) { lg.Warn(fmt.Sprintf(format, args...)) },
			Exempt: s.conns.hosts.has,
		})
	}
	s.conns.hosts.load = s.loadClusterHosts
	s.conns.api, s.conns.agent, s.conns.maintd = mk("api", lim), mk("agent", lim), mk("maintd", lim)
	s.conns.raft = mk("raft", netlimit.Limits{MaxConns: raftMaxConns, MaxConnsPerIP: raftMaxConnsPerIP})
}

// fitFileLimit lowers the overall cap (and the per-address one with it)
// so that the three servers' caps leave fdReserve of soft descriptors.
func fitFileLimit(lim netlimit.Limits, soft uint64, log hclog.Logger) netlimit.Limits {
	lim = lim.WithDefaults()
	if soft == 0 || lim.MaxConns < 0 {
		return lim
	}
	budget := minConnCap
	if soft > fdReserve+3*minConnCap {
		budget = int(min(soft-fdReserve, 1<<30)) / 3
	}
	if lim.MaxConns > budget {
		log.Warn("the connection cap leaves too few descriptors; lowering it", "max_conns", lim.MaxConns, "to", budget,
			"open_file_limit", soft, "servers", 3, "reserve", fdReserve)
		lim.MaxConns = budget
	}
	if lim.MaxConnsPerIP > lim.MaxConns {
		lim.MaxConnsPerIP = lim.MaxConns
	}
	return lim
}

// hostSet is the addresses of the cluster's own hosts, which the
// per-address caps do not apply to: a follower forwards to the leader
// every write and consistent read it is sent, over as many connections
// as it has requests in flight, and the leader calls each node's RPC as
// jobs need. Their connections still count in the overall caps. The set
// is read again from the state at most once per hostSetAge.
type hostSet struct {
	load func() map[netip.Addr]bool

	mu  sync.Mutex
	at  time.Time
	set map[netip.Addr]bool
}

const hostSetAge = time.Second

func (h *hostSet) has(a netip.Addr) bool {
	if h.load == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := time.Now(); h.set == nil || now.Sub(h.at) >= hostSetAge {
		h.set, h.at = h.load(), now
	}
	return h.set[a]
}

// loadClusterHosts returns this gntd's own address and every node's
// registered ones (its gntd's endpoints, primary and secondary IPs).
func (s *Server) loadClusterHosts() map[netip.Addr]bool {
	set := map[netip.Addr]bool{}
	add := func(hostOrAddr string) {
		if h, _, err := net.SplitHostPort(hostOrAddr); err == nil {
			hostOrAddr = h
		}
		if a, err := netip.ParseAddr(hostOrAddr); err == nil && !a.IsUnspecified() {
			set[a.Unmap()] = true
		}
	}
	add(s.cfg.Bind)
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		for _, n := range st.Nodes {
			for _, a := range []string{n.PrimaryIP, n.SecondaryIP, n.Addrs.API, n.Addrs.Raft, n.Addrs.Agent, n.Addrs.Gossip} {
				add(a)
			}
		}
	})
	return set
}

func capString(n int) string {
	if n < 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

// limitedServer wraps ln in l and returns an HTTP server of h with the
// netlimit timeouts and the given WriteTimeout, which tells l its idle
// connections (closed first when a cap is reached).
func limitedServer(l *netlimit.Limiter, ln net.Listener, h http.Handler, write time.Duration) (net.Listener, *http.Server) {
	srv := &http.Server{Handler: h}
	configureHTTP(l, write)(srv)
	return l.Wrap(ln), srv
}

// configureHTTP returns what sets an HTTP server's limits and tells l its
// idle connections.
func configureHTTP(l *netlimit.Limiter, write time.Duration) func(*http.Server) {
	return func(srv *http.Server) {
		netlimit.HTTPLimits{WriteTimeout: write}.Configure(srv)
		srv.ConnState = l.ConnState
	}
}

// connCollector exports the limiters' counters.
type connCollector struct{ s *Server }

var (
	connOpenDesc = prometheus.NewDesc("gnt_net_connections_open",
		"Connections open now, by server (api, agent: the node RPC, maintd).", []string{"server"}, nil)
	connRefusedDesc = prometheus.NewDesc("gnt_net_connections_refused_total",
		"Connections closed on accept because a cap was reached, by server and cap (max_conns, max_conns_per_ip).", []string{"server", "reason"}, nil)
	connIdleDesc = prometheus.NewDesc("gnt_net_connections_idle",
		"Connections open now between two requests, by server.", []string{"server"}, nil)
	connEvictedDesc = prometheus.NewDesc("gnt_net_idle_connections_closed_total",
		"Idle kept-alive connections closed to make room for a new one when a cap was reached, by server and cap.", []string{"server", "reason"}, nil)
	connCapDesc = prometheus.NewDesc("gnt_net_connections_cap",
		"The connection caps in force, by server and cap (-1: none).", []string{"server", "cap"}, nil)
)

func (c connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connOpenDesc
	ch <- connIdleDesc
	ch <- connRefusedDesc
	ch <- connEvictedDesc
	ch <- connCapDesc
}

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.conns.each(func(name string, l *netlimit.Limiter) {
		st := l.Stats()
		ch <- prometheus.MustNewConstMetric(connOpenDesc, prometheus.GaugeValue, float64(st.Open), name)
		ch <- prometheus.MustNewConstMetric(connIdleDesc, prometheus.GaugeValue, float64(st.Idle), name)
		for _, r := range []netlimit.Reason{netlimit.OverAll, netlimit.OverPerIP} {
			ch <- prometheus.MustNewConstMetric(connRefusedDesc, prometheus.CounterValue, float64(st.Refused[r]), name, r.String())
			ch <- prometheus.MustNewConstMetric(connEvictedDesc, prometheus.CounterValue, float64(st.Evicted[r]), name, r.String())
		}
		ch <- prometheus.MustNewConstMetric(connCapDesc, prometheus.GaugeValue, float64(st.MaxConns), name, netlimit.OverAll.String())
		ch <- prometheus.MustNewConstMetric(connCapDesc, prometheus.GaugeValue, float64(st.MaxConnsPerIP), name, netlimit.OverPerIP.String())
	})
}
