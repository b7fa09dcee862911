package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/repair"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/transport"
)

// Server is one gntd.
type Server struct {
	cfg  Config
	log  hclog.Logger
	dir  dataDir
	fsm  *fsm.FSM
	rfsm *raftFSM
	reg  *prometheus.Registry
	api  *rpc.Server

	mu          sync.Mutex
	node        *raftNode // nil while this gntd is not a candidate
	applier     *applier
	pacer       *jobs.Pacer // lets the applier wait for the executor
	stopApplier context.CancelFunc
	key         []byte // cluster key file contents: the key this gntd signs with
	keyOther    []byte // the other key accepted while cluster.key is renewed (keyrenew.go)
	joinKey     []byte
	id          identity
	candidates  []string // API addresses learnt from the last join answer
	established bool     // leadership established (after Barrier and LeaderEstablish)
	incarnation string   // drawn at New, in every status answer (incarnation.go)
	// maintd is the running maintd service (leader only), the epoch it
	// serves and the address its HTTP API listens on (maintd.go).
	maintd      *repair.Service
	maintdEpoch uint64
	maintdAddr  string
	// maintdHandler is the running maintd's HTTP API; maintdListen the
	// address of this gntd's maintd port (maintdport.go).
	maintdHandler http.Handler
	maintdListen  string
	maintdLeader  leaderMaintdCache
	peerStatus    map[string]peerHealth

	raftEvents chan struct{}
	// stopping is set when Run's context ends; lastRequest is when the
	// API last saw a request, in Unix nanoseconds (stopGate, drain);
	// stopped ends (stopAPI) once Raft is down, ending the API's long
	// waits (rpc.ServerOptions.Stopping).
	stopping    atomic.Bool
	lastRequest atomic.Int64
	stopped     context.Context
	stopAPI     context.CancelFunc
	faults      *transport.Faults // Raft fault injection, with --debug (faults.go)
	metrics     serverMetrics
	nodes       nodeCaller    // the node RPC client of the instance opcodes
	gossip      gossipState   // gossip.go
	diag        diagnoseState // the leader's self-diagnose poller (diagnose.go)
	conns       connLimiters  // the TCP servers' connection caps (netlimits.go)
	// restoring is set while a snapshot restore runs; leaderHold, while
	// above 0, keeps the leader services stopped, and leaderRunning says
	// whether they run (snapshot.go, monitorLeadership).
	restoring     atomic.Bool
	leaderHold    atomic.Int32
	leaderRunning atomic.Bool
	// rejoinFirst: Run rejoins before it starts Raft (amnesia.go).
	rejoinFirst bool
	tls         tlsState     // certificates and TLS configurations (tls.go)
	keyRot      keyRotation  // the leader's record of a renewal of cluster.key (keyrenew.go)
	runtime     runtimeState // the nodes' instances as their agents report them (runtime.go)
	osView      osViewState  // the nodes' OS definitions as their agents report them (osview.go)
}

// serverMetrics are the server's own Prometheus metrics.
type serverMetrics struct {
	// resume is the time from this gntd seeing itself elected to the
	// first job a previous leader started running again.
	resume prometheus.Gauge
	// ops are the durations and counters of metrics.go.
	ops *opMetrics
}

// New checks the data dir and prepares a gntd; Run starts it.
func New(cfg Config, log hclog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		levels, _ := ParseLogLevels(cfg.LogLevel) // checked by Validate
		log = NewLogger(cfg.Name, levels, cfg.LogJSON, nil)
	}
	s := &Server{
		cfg: cfg, log: log, dir: dataDir{cfg.DataDir}, fsm: fsm.New(),
		reg: prometheus.NewRegistry(), raftEvents: make(chan struct{}, 1),
		peerStatus: map[string]peerHealth{}, pacer: jobs.NewPacer(), incarnation: newIncarnation(),
	}
	s.gossip.kick = make(chan struct{}, 1)
	s.runtime.kick = make(chan struct{}, 1)
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), gossipCollector{s},
		diagnoseCollector{s})
	s.metrics.resume = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gnt_leader_resume_seconds",
		Help: "Seconds from this gntd's election to the first resumed job running, at its last leadership with started jobs."})
	s.reg.MustRegister(s.metrics.resume, stateCollector{s})
	s.metrics.ops = newOpMetrics(s.reg)
	s.setupConnLimits()
	s.reg.MustRegister(connCollector{s})
	s.rfsm = &raftFSM{fsm: s.fsm, log: log, ops: s.metrics.ops}
	s.nodes.s = s
	id, err := s.dir.open(cfg.Name)
	if err != nil {
		return nil, err
	}
	s.id = id
	if err := s.loadTLS(); err != nil {
		return nil, err
	}
	if err := s.loadKeys(); err != nil {
		return nil, err
	}
	if s.rejoinFirst, err = s.checkAmnesia(cfg.Rejoin); err != nil {
		return nil, err
	}
	s.stopped, s.stopAPI = context.WithCancel(context.Background())
	s.api = rpc.NewServer(s, rpc.ServerOptions{Logger: log.Named("api"), Metrics: s.reg, Stopping: s.stopped,
		Debug:      cfg.Debug,
		ForwardTLS: s.tls.store.ClientTLS(), ForwardFrom: s.localTCPAddr()})
	return s, nil
}

func (s *Server) setKey(key []byte) { s.setKeys(key, nil) }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.APIAddr())
	if err != nil {
		return fmt.Errorf("API listener: %w", err)
	}
	handler := s.gate(s.api.Handler())
	// Raft's own timings (commit, dispatch, replication, FSM apply)
	// through go-metrics, on /metrics and, with --debug, kept in memory
	// for ten seconds on /debug/raft-metrics.
	var inm *metrics.InmemSink
	if s.cfg.Debug {
		inm = metrics.NewInmemSink(10*time.Second, time.Minute)
	}
	var extra metrics.MetricSink
	if inm != nil {
		extra = inm
	}
	if bridged, err := bridgeRaftMetrics(s.reg, extra); err != nil {
		s.log.Warn("raft metrics", "error", err)
	} else if !bridged {
		inm = nil // another Server of this process has them
	}
	if s.cfg.Debug {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/raft-metrics", func(w http.ResponseWriter, r *http.Request) {
			if inm == nil {
				http.Error(w, "raft metrics are kept by another gntd of this process", http.StatusNotFound)
				return
			}
			data, err := inm.DisplayMetrics(w, r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(data)
		})
		s.faults = &transport.Faults{}
		mux.Handle("/debug/faults", faultsHandler(s.faults))
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.Handle("/", handler)
		handler = debugGuard(mux)
	}
	ln, srv := limitedServer(s.conns.api, ln, s.stopGate(handler), apiWriteTimeout)
	// HTTPS only: a client certificate of the cluster CA is optional
	// (gntds and admins present one; RAPI users authenticate with a
	// password instead).
	go srv.Serve(tls.NewListener(ln, s.tls.store.ServerTLS(tls.VerifyClientCertIfGiven)))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()

	actx, stopAgent := context.WithCancel(ctx)
	agentDone, err := s.startAgent(actx)
	if err != nil {
		stopAgent()
		return err
	}
	defer func() { stopAgent(); <-agentDone }()

	mctx, stopMaintdPort := context.WithCancel(ctx)
	maintdPortDone, err := s.startMaintdPort(mctx)
	if err != nil {
		stopMaintdPort()
		return err
	}
	defer func() { stopMaintdPort(); <-maintdPortDone }()

	cctx, stopConfd := context.WithCancel(ctx)
	confdDone, err := s.startConfd(cctx)
	if err != nil {
		stopConfd()
		return err
	}
	defer func() { stopConfd(); <-confdDone }()
	if s.rejoinFirst {
		if err := s.rejoin(ctx); err != nil {
			return err
		}
	}
	if s.dir.hasRaft() {
		if err := s.startRaft(false); err != nil {
			return err
		}
	}
	s.log.Info("gntd started", "api", s.cfg.APIAddr(), "raft", s.cfg.RaftAddr(), "data_dir", s.cfg.DataDir,
		"candidate", s.raftNode() != nil, "cluster", s.id.ClusterName)

	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); s.runtimeLoop(ctx) }()
	go func() { defer wg.Done(); s.osLoop(ctx) }()
	go func() { defer wg.Done(); s.monitorLeadership(ctx) }()
	go func() { defer wg.Done(); s.joinLoop(ctx) }()
	go func() { defer wg.Done(); s.gossipLoop(ctx) }()
	<-ctx.Done()
	s.stopping.Store(true)
	s.handOff()
	wg.Wait()
	s.stopRaft(false)
	s.stopAPI()
	s.drain()
	s.log.Info("gntd stopped")
	return nil
}

// stopGate wraps the API for a clean stop. Once the gntd is stopping,
// every answer closes its connection, so that a client's next request
// opens a new one instead of going out on a kept-alive connection that
// the server's Shutdown may close under it (a write lost that way cannot
// be retried safely: the client cannot tell it was never read); and once
// Raft is stopped, every request is refused at once with a 503 that
// clients retry on another candidate.
func (s *Server) stopGate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.lastRequest.Store(time.Now().UnixNano())
		if s.stopping.Load() {
			w.Header().Set("Connection", "close")
			if s.raftNode() == nil {
				unavailable(w, rpc.CodeUnavailable, "this gntd is stopping; ask another master candidate")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// drain keeps the API refusing (stopGate) until no request came for
// 100 ms, for at most a second, so that the clients still sending here
// learn to go elsewhere before the listener closes: a connection the
// kernel accepted but the server never did is reset when the listener
// closes, after the client may have sent a write on it.
func (s *Server) drain() {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		quiet := time.Since(time.Unix(0, s.lastRequest.Load()))
		if quiet >= 100*time.Millisecond {
			return
		}
		time.Sleep(100*time.Millisecond - quiet)
	}
}

// handOff passes leadership to the most up-to-date other voter before a
// leader stops (SIGTERM, Ctrl-C: a restart, an upgrade), so that a planned
// stop costs the cluster one round of votes instead of a heartbeat timeout
// and an election. Raft bounds the transfer by its election timeout; when
// it fails (no other voter, none reachable) the stop goes on and the
// followers elect a leader as after a crash. The API keeps answering
// meanwhile: requests are forwarded to the new leader once it is known.
func (s *Server) handOff() {
	r := s.raft()
	if r == nil || r.State() != raft.Leader {
		return
	}
	start := time.Now()
	if err := r.LeadershipTransfer().Error(); err != nil {
		s.log.Warn("stopping as leader: no other voter took over; the followers will elect one", "error", err)
		return
	}
	took := time.Since(start)
	// The new leader's first heartbeat names it, a moment later.
	_, id := r.LeaderWithID()
	for deadline := time.Now().Add(200 * time.Millisecond); id == "" && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		_, id = r.LeaderWithID()
	}
	to := string(id)
	if to == "" {
		to = "(not yet known)"
	}
	s.log.Info("stopping: leadership handed over", "to", to, "took", took)
}

// unavailable answers 503 with the API's error body, code and message.
func unavailable(w http.ResponseWriter, code, msg string) {
	rpc.WriteError(w, &rpc.APIError{Status: http.StatusServiceUnavailable, Message: msg, Explain: msg, ErrorCode: code})
}

// gate lets a gntd that holds no state answer only what needs none.
func (s *Server) gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.raftNode() == nil {
			switch {
			case r.URL.Path == "/version", r.URL.Path == "/2/gnt/status", r.URL.Path == "/2/gnt/init", r.URL.Path == "/metrics":
			default:
				s.mu.Lock()
				cands := strings.Join(s.candidates, ", ")
				s.mu.Unlock()
				msg := "this gntd is not a master candidate and holds no cluster state"
				if cands != "" {
					msg += "; ask a candidate: " + cands
				}
				unavailable(w, rpc.CodeNotCandidate, msg)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) raftNode() *raftNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

func (s *Server) raft() *raft.Raft {
	if n := s.raftNode(); n != nil {
		return n.raft
	}
	return nil
}

// startRaft starts the local Raft server (bootstrap: as the one server of
// a new cluster).
func (s *Server) startRaft(bootstrap bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node != nil {
		return nil
	}
	if s.tls.store.Leaf() == nil {
		return errors.New("this gntd has no node certificate yet; Raft runs only over mutual TLS")
	}
	n, err := startRaft(&s.cfg, s.dir.raftPath(), s.rfsm, s.log, bootstrap, s.faults, s.conns.raft.Wrap, s.tls.store)
	if err != nil {
		return err
	}
	s.node = n
	go s.watchMembership(n.raft)
	n.raft.RegisterObserver(raft.NewObserver(make(chan raft.Observation, 16), false, func(o *raft.Observation) bool {
		if _, ok := o.Data.(raft.LeaderObservation); ok {
			s.metrics.ops.leaderChanges.Inc()
		}
		select {
		case s.raftEvents <- struct{}{}:
		default:
		}
		return false
	}))
	ctx, cancel := context.WithCancel(context.Background())
	if s.applier == nil {
		s.applier = newApplier(s.raft, s.reg)
		s.applier.hold = s.holdForExecutor
	}
	s.stopApplier = cancel
	go s.applier.run(ctx)
	return nil
}

// stopRaft shuts the local Raft server down; with archive set its state is
// moved aside (this node is no longer a candidate).
func (s *Server) stopRaft(archive bool) {
	s.mu.Lock()
	n := s.node
	s.node = nil
	stop := s.stopApplier
	s.mu.Unlock()
	if n == nil {
		return
	}
	if stop != nil {
		stop()
	}
	if err := n.shutdown(); err != nil {
		s.log.Warn("raft shutdown", "error", err)
	}
	if archive {
		if err := s.setRaftMember(""); err != nil {
			s.log.Error("clearing the Raft membership record", "error", err)
		}
		if err := s.dir.archiveRaft(time.Now()); err != nil {
			s.log.Error("archiving raft state", "error", err)
		}
	}
}

// holdForExecutor holds the applier's next entry, up to bound, while the
// executor reacts to entry index, when that entry queued jobs for it
// (jobs.Pacer).
func (s *Server) holdForExecutor(ctx context.Context, index uint64, bound time.Duration) (held, caught bool) {
	if s.fsm.QueuedAt() < index {
		return false, true
	}
	return true, s.pacer.Hold(ctx, index, bound)
}

// FSM implements rpc.Backend.
func (s *Server) FSM() *fsm.FSM { return s.fsm }

// Apply implements rpc.Backend and jobs.Applier.
func (s *Server) Apply(ctx context.Context, cmd fsm.Command) (fsm.Response, uint64, error) {
	s.mu.Lock()
	a := s.applier
	s.mu.Unlock()
	if a == nil {
		return fsm.Response{}, 0, rpc.ErrNotLeader
	}
	return a.Apply(ctx, cmd)
}

// Leader implements rpc.Backend.
func (s *Server) Leader() (string, bool) {
	r := s.raft()
	if r == nil {
		return "", false
	}
	if r.State() == raft.Leader {
		s.mu.Lock()
		est := s.established
		s.mu.Unlock()
		if est {
			return s.cfg.APIAddr(), true
		}
		return "", false
	}
	addr, id := r.LeaderWithID()
	if addr == "" {
		return "", false
	}
	return s.apiAddrOf(string(id), string(addr)), false
}

// apiAddrOf finds a node's API address: as it registered it, else on its
// Raft host with this gntd's API port.
func (s *Server) apiAddrOf(name, raftAddr string) string {
	var api string
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if n := st.LookupNode(name); n != nil {
			api = n.Addrs.API
		}
	})
	if api != "" {
		return api
	}
	host, _, err := net.SplitHostPort(raftAddr)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, fmt.Sprint(s.cfg.APIPort))
}

// LastContact implements rpc.Backend.
func (s *Server) LastContact() time.Duration {
	r := s.raft()
	if r == nil || r.State() == raft.Leader {
		return 0
	}
	lc := r.LastContact()
	if lc.IsZero() {
		return 0
	}
	return time.Since(lc)
}

// VerifyLeader implements rpc.Backend: a quorum round trip, then wait for
// the local state to apply everything committed before it.
func (s *Server) VerifyLeader(ctx context.Context) error {
	r := s.raft()
	if _, self := s.Leader(); r == nil || !self {
		return rpc.ErrNotLeader
	}
	commit := r.CommitIndex()
	if err := r.VerifyLeader().Error(); err != nil {
		return rpc.ErrNotLeader
	}
	for r.AppliedIndex() < commit {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// Now implements rpc.Backend.
func (s *Server) Now() time.Time { return time.Now() }

// NewUUID implements rpc.Backend.
func (s *Server) NewUUID() string { return uuid.NewString() }

// JoinKey implements rpc.Backend.
func (s *Server) JoinKey() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joinKey
}

// Status implements rpc.Backend.
func (s *Server) Status() rpc.Status {
	st := rpc.Status{Name: s.cfg.Name, Version: Version, Build: s.cfg.Build, RaftState: "none", Incarnation: s.incarnation}
	s.mu.Lock()
	st.ClusterUUID = s.id.ClusterUUID
	st.Established = s.established
	s.mu.Unlock()
	st.AppliedIndex = s.fsm.Index()
	st.Gossip = s.gossipStatus()
	st.Maintd = s.maintdStatus()
	r := s.raft()
	if r == nil {
		return st
	}
	st.Candidate = true
	// Raft's state and term are two atomics: read the term on both sides
	// of the state, so that the pair reported held at one instant (a
	// leader that steps down sets its state before the new term). Chaos
	// tests poll it to check that no two members lead in one term.
	for range 10 {
		term := r.CurrentTerm()
		state := r.State()
		st.RaftState, st.Term = strings.ToLower(state.String()), term
		if r.CurrentTerm() == term {
			break
		}
	}
	st.LastIndex = r.LastIndex()
	st.CommitIndex = r.CommitIndex()
	st.AppliedIndex = r.AppliedIndex()
	st.LastContact = s.LastContact().Seconds()
	_, id := r.LeaderWithID()
	st.Leader = string(id)
	st.LeaderAPI, _ = s.Leader()
	return st
}

// Peers implements rpc.Backend. Only the leader knows how far each peer
// has applied, so a follower that knows a leader lets the API forward;
// without a leader it answers from its own configuration.
func (s *Server) Peers(ctx context.Context) ([]rpc.Peer, error) {
	r := s.raft()
	if r == nil {
		return nil, rpc.ErrNotLeader
	}
	if addr, self := s.Leader(); !self && addr != "" {
		return nil, rpc.ErrNotLeader
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leader := r.LeaderWithID()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []rpc.Peer
	for _, srv := range f.Configuration().Servers {
		p := rpc.Peer{ID: string(srv.ID), Address: string(srv.Address), Leader: srv.ID == leader}
		switch srv.Suffrage {
		case raft.Voter:
			p.Suffrage = "voter"
		case raft.Nonvoter:
			p.Suffrage = "nonvoter"
		default:
			p.Suffrage = "staging"
		}
		if srv.ID == raft.ServerID(s.cfg.Name) {
			p.Known, p.AppliedIndex = true, r.AppliedIndex()
		} else if h, ok := s.peerStatus[string(srv.ID)]; ok && s.established && !h.seen.IsZero() {
			p.Known, p.AppliedIndex, p.LastContact = true, h.applied, time.Since(h.seen).Seconds()
		}
		out = append(out, p)
	}
	return out, nil
}

// TransferLeadership implements rpc.Backend.
func (s *Server) TransferLeadership(ctx context.Context, target string) (string, error) {
	r := s.raft()
	if r == nil || r.State() != raft.Leader {
		return "", rpc.ErrNotLeader
	}
	var f raft.Future
	if target == "" {
		f = r.LeadershipTransfer()
	} else {
		if target == s.cfg.Name {
			return "", &fsm.Error{Code: fsm.CodeState, Field: "target", Msg: fmt.Sprintf("node %s is already the master", target)}
		}
		cf := r.GetConfiguration()
		if err := cf.Error(); err != nil {
			return "", err
		}
		var found *raft.Server
		for _, srv := range cf.Configuration().Servers {
			if string(srv.ID) == target {
				srv := srv
				found = &srv
			}
		}
		if found == nil {
			return "", &fsm.Error{Code: fsm.CodeState, Field: "target", Msg: fmt.Sprintf("node %s is not a master candidate in the Raft group", target)}
		}
		if found.Suffrage != raft.Voter {
			return "", &fsm.Error{Code: fsm.CodeState, Field: "target", Msg: fmt.Sprintf("node %s is a non-voting candidate; only voters can become master", target)}
		}
		f = r.LeadershipTransferToServer(found.ID, found.Address)
	}
	if err := f.Error(); err != nil {
		return "", fmt.Errorf("leadership transfer: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, id := r.LeaderWithID(); id != "" && string(id) != s.cfg.Name {
			return string(id), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return "", errors.New("leadership transfer: no new leader within 10s")
}

// debugGuard lets only clients with a certificate of the cluster CA (gntds,
// admins) reach the --debug endpoints (/debug/...: fault injection, the
// profiler), which the API's route table does not cover.
func debugGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/debug/") && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]any{"code": http.StatusUnauthorized, "error_code": "unauthorized",
				"message": "the debug endpoints need a client certificate of the cluster CA",
				"explain": "the debug endpoints need a client certificate of the cluster CA"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
