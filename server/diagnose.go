package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gnt-cluster/gnt/agent"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/repair"
	"github.com/gnt-cluster/gnt/rpc"
)

// The leader's self-diagnose poller: every interval it asks each node
// that is not offline for its self-diagnose report (the node RPC's
// diagnose, carrying the cluster's diagnose command: nodes that are not
// candidates hold no configuration), verifies the report (signature, node,
// age) and keeps the latest verified result per node in memory, for
// maintd. Rejected reports are counted by reason and logged, at most once
// per reason per diagnoseLogEvery, whichever nodes they come from (the
// next line says how many occurrences on which nodes were not logged: a
// thousand nodes failing alike make one line, not a thousand). Results are observations, not
// state: they are dropped when a leadership's poller starts and stops, and
// rebuilt by polling.

// Defaults of the poller.
const (
	DefaultDiagnoseInterval    = 60 * time.Second
	DefaultDiagnoseConcurrency = 16
	// diagnosePollTimeout bounds one poll: the node's command may take
	// agent.DefaultDiagnoseTimeout.
	diagnosePollTimeout = agent.DefaultDiagnoseTimeout + 15*time.Second
	// diagnoseLogEvery is how often the same problem is logged.
	diagnoseLogEvery = 5 * time.Minute
)

// DiagnoseResult is the latest verified self-diagnose result of a node.
type DiagnoseResult struct {
	Node string `json:"node"`
	// Time is when the node collected the result (the report's
	// timestamp), Received when the leader verified it.
	Time     time.Time `json:"time"`
	Received time.Time `json:"received"`
	// Status is Ok, live-repair, evacuate or evacuate-failover; Command
	// the repair command the node asks for; Details the collector's
	// details (nil when none).
	Status  string          `json:"status"`
	Command string          `json:"command,omitempty"`
	Details json.RawMessage `json:"details,omitempty"`
	// Raw is the whole result in canonical form (keys sorted, compact):
	// the same node reporting the same Raw is the same incident.
	Raw json.RawMessage `json:"raw"`
}

// Poll outcomes, the result label of gnt_diagnose_polls_total.
const (
	diagnoseVerified = "verified"
	diagnoseRejected = "rejected"
	diagnoseFailed   = "failed"
)

// diagnoseState is the poller's memory: the results and the counters,
// which the metrics and DiagnoseResults read.
type diagnoseState struct {
	mu       sync.Mutex
	results  map[string]DiagnoseResult
	polls    map[string]uint64 // by outcome
	rejected map[string]uint64 // by rpc.ReportRejectReason
	logged   map[string]time.Time
	skipped  map[string]int // occurrences not logged since the last log, by kind
	// skippedNodes are the nodes of those occurrences, by kind.
	skippedNodes map[string]map[string]bool
}

func (d *diagnoseState) resetResults() {
	d.mu.Lock()
	d.results = nil
	d.mu.Unlock()
}

// DiagnoseResults returns the latest verified self-diagnose result of each
// node that the leader's poller reached in this leadership (none on a
// gntd that is not the leader). A node that stopped answering keeps its
// last result: Time says how old it is.
func (s *Server) DiagnoseResults() map[string]DiagnoseResult { return s.diag.latest() }

func (d *diagnoseState) latest() map[string]DiagnoseResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]DiagnoseResult, len(d.results))
	for n, r := range d.results {
		out[n] = r
	}
	return out
}

// diagnoseClient is what the poller needs of the node RPC.
type diagnoseClient interface {
	// Diagnose asks node for its report of the named command.
	Diagnose(ctx context.Context, node *fsm.Node, command string) (rpc.SignedDiagnoseReport, error)
}

// nodeDiagnoser is the poller's diagnoseClient over the node RPC, with
// the instance opcodes' clients.
type nodeDiagnoser struct{ n *nodeCaller }

// Diagnose implements diagnoseClient.
func (c nodeDiagnoser) Diagnose(ctx context.Context, node *fsm.Node, command string) (rpc.SignedDiagnoseReport, error) {
	if node.Addrs.Agent == "" {
		return rpc.SignedDiagnoseReport{}, fmt.Errorf("node %s has not registered its agent address", node.Name)
	}
	cl, err := c.n.client(node)
	if err != nil {
		return rpc.SignedDiagnoseReport{}, err
	}
	return cl.Diagnose(ctx, command)
}

// diagnosePoller polls the nodes' self-diagnose reports.
type diagnosePoller struct {
	FSM    *fsm.FSM
	Client diagnoseClient
	// Key returns the diagnose report key (nil: none yet; no round runs).
	Key func() []byte
	// Accept, when set, returns more report keys reports are accepted
	// with (the other key while the cluster key is renewed).
	Accept func() [][]byte
	// Interval is read before each round (<= 0: DefaultDiagnoseInterval);
	// Command is the cluster's diagnose command, "" for the built-in.
	Interval func() time.Duration
	Command  func() string
	// MaxAge is the oldest report accepted; 0 means twice the interval
	// plus agent.DefaultDiagnoseMinInterval (the node may answer a
	// result it collected that long ago).
	MaxAge time.Duration
	// Concurrency bounds the polls under way (default
	// DefaultDiagnoseConcurrency); PollTimeout bounds one (default
	// diagnosePollTimeout).
	Concurrency int
	PollTimeout time.Duration
	State       *diagnoseState
	Log         hclog.Logger
	Clock       func() time.Time
	// Storage, when set, records each polled node's storage units after
	// its self-diagnose poll (storage.go).
	Storage *storageRecorder

	// The polls under way, by node name: a node that is slow to answer
	// (up to PollTimeout) is not polled again meanwhile, and does not hold
	// back the polls of the others (start).
	mu       sync.Mutex
	inflight map[string]bool
	// storageInflight are the nodes whose storage listing is under way.
	storageInflight map[string]bool
	// unreported holds, by node name, when each node without a recorded
	// storage report is asked again (startUnreported).
	unreported map[string]retryAt
	sem        chan struct{}
	polls      sync.WaitGroup
}

func (p *diagnosePoller) interval() time.Duration {
	if p.Interval != nil {
		if d := p.Interval(); d > 0 {
			return d
		}
	}
	return DefaultDiagnoseInterval
}

// Run polls every interval until ctx ends. Results are dropped when it
// starts and when it ends.
func (p *diagnosePoller) Run(ctx context.Context) error {
	if p.Log == nil {
		p.Log = hclog.NewNullLogger()
	}
	if p.Clock == nil {
		p.Clock = time.Now
	}
	p.State.resetResults()
	defer p.State.resetResults()
	defer p.polls.Wait()
	var last time.Time
	for {
		// The interval is read again every second at most, so a shorter
		// one set by an operator applies without waiting out the old.
		interval := p.interval()
		if time.Since(last) >= interval {
			last = time.Now()
			p.start(ctx, interval)
		} else {
			p.startUnreported(ctx, interval)
		}
		t := time.NewTimer(max(min(interval-time.Since(last), time.Second), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// round polls every node that is not offline once, at most Concurrency at
// a time, and returns when every poll is done.
func (p *diagnosePoller) round(ctx context.Context, interval time.Duration) {
	p.start(ctx, interval)
	p.polls.Wait()
}

// start starts a poll of every node that is not offline and not still
// being polled, at most Concurrency under way at a time, and returns
// without waiting for them: one node that takes its whole PollTimeout to
// answer delays no other node's result (before, every round waited for
// the slowest node).
func (p *diagnosePoller) start(ctx context.Context, interval time.Duration) {
	key := p.Key()
	if len(key) == 0 {
		p.logLimited("", "no_key", "not polling self-diagnose reports: this gntd has no cluster key")
		return
	}
	command := ""
	if p.Command != nil {
		command = p.Command()
	}
	maxAge := p.MaxAge
	if maxAge <= 0 {
		maxAge = 2*interval + agent.DefaultDiagnoseMinInterval
	}
	var nodes []*fsm.Node
	known := map[string]bool{}
	p.FSM.Read(func(st *fsm.State, _ uint64) {
		for _, n := range st.SortedNodes() {
			known[n.Name] = true
			if !n.Offline {
				c := *n
				nodes = append(nodes, &c)
			}
		}
	})
	p.State.mu.Lock()
	for name := range p.State.results {
		if !known[name] {
			delete(p.State.results, name) // removed from the cluster
		}
	}
	p.State.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	for _, n := range nodes {
		if ctx.Err() != nil || p.inflight[n.Name] {
			continue
		}
		p.inflight[n.Name] = true
		p.spawn(ctx, p.inflight, n.Name, func() {
			p.poll(ctx, n, command, key, maxAge)
			p.startStorage(ctx, n)
		})
	}
}

// initLocked makes the poller's semaphore and maps on first use; p.mu
// is held.
func (p *diagnosePoller) initLocked() {
	if p.sem == nil {
		conc := p.Concurrency
		if conc <= 0 {
			conc = DefaultDiagnoseConcurrency
		}
		p.sem, p.inflight, p.unreported = make(chan struct{}, conc), map[string]bool{}, map[string]retryAt{}
	}
}

// unreportedFirstRetry is how soon a node without a storage report is
// asked again between two rounds; each further try waits twice as long,
// up to the round's interval.
const unreportedFirstRetry = 2 * time.Second

// retryAt is when a node is asked again, and the delay that led there.
type retryAt struct {
	at    time.Time
	delay time.Duration
}

// startUnreported asks the nodes that have no storage report recorded
// (a node just added, whose first report would otherwise wait up to a
// round's interval, a minute by default, with placement reading no free
// space there) for their storage units between rounds: each at most every
// unreportedFirstRetry at first, doubling after each try up to the
// interval, so that a node whose listing keeps failing is not asked
// more often than a round would.
func (p *diagnosePoller) startUnreported(ctx context.Context, interval time.Duration) {
	if p.Storage == nil || ctx.Err() != nil {
		return
	}
	var nodes []*fsm.Node
	p.FSM.Read(func(st *fsm.State, _ uint64) {
		for _, n := range st.SortedNodes() {
			if !n.Offline && n.Storage == nil {
				c := *n
				nodes = append(nodes, &c)
			}
		}
	})
	now := p.Clock()
	var due []*fsm.Node
	p.mu.Lock()
	p.initLocked()
	seen := map[string]bool{}
	for _, n := range nodes {
		seen[n.Name] = true
		r, ok := p.unreported[n.Name]
		if ok && now.Before(r.at) {
			continue
		}
		d := unreportedFirstRetry
		if ok {
			d = min(2*r.delay, interval)
		}
		p.unreported[n.Name] = retryAt{at: now.Add(d), delay: d}
		due = append(due, n)
	}
	for name := range p.unreported {
		if !seen[name] {
			delete(p.unreported, name) // reported, offline or removed
		}
	}
	p.mu.Unlock()
	for _, n := range due {
		p.startStorage(ctx, n)
	}
}

// startStorage records the node's storage units after its poll, in a
// goroutine of its own so that a slow LVM listing (up to
// agent.LVMTimeout) never delays the node's next self-diagnose poll; a
// node whose listing is still under way is not asked again meanwhile.
func (p *diagnosePoller) startStorage(ctx context.Context, n *fsm.Node) {
	if p.Storage == nil || ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	if p.storageInflight == nil {
		p.storageInflight = map[string]bool{}
	}
	busy := p.storageInflight[n.Name]
	p.storageInflight[n.Name] = true
	p.mu.Unlock()
	if busy {
		return
	}
	p.spawn(ctx, p.storageInflight, n.Name, func() { p.pollStorage(ctx, n) })
}

// spawn runs fn for the node named in a goroutine that p.polls counts,
// within the concurrency bound (p.sem), and unmarks the node in inflight
// (guarded by p.mu, marked by the caller) when it is done.
func (p *diagnosePoller) spawn(ctx context.Context, inflight map[string]bool, name string, fn func()) {
	p.polls.Add(1)
	go func() {
		defer func() {
			p.mu.Lock()
			delete(inflight, name)
			p.mu.Unlock()
			p.polls.Done()
		}()
		select {
		case <-ctx.Done():
			return
		case p.sem <- struct{}{}:
		}
		defer func() { <-p.sem }()
		fn()
	}()
}

// pollStorage records one node's storage units, within PollTimeout.
func (p *diagnosePoller) pollStorage(ctx context.Context, n *fsm.Node) {
	timeout := p.PollTimeout
	if timeout <= 0 {
		timeout = diagnosePollTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.Storage.record(sctx, n); err != nil {
		// A newer leader's epoch: this leadership's context ends soon.
		p.Log.Debug("storage units not recorded", "node", n.Name, "error", err)
	}
}

// poll asks one node and records what came of it.
func (p *diagnosePoller) poll(ctx context.Context, n *fsm.Node, command string, key []byte, maxAge time.Duration) {
	timeout := p.PollTimeout
	if timeout <= 0 {
		timeout = diagnosePollTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sr, err := p.Client.Diagnose(pctx, n, command)
	if err != nil {
		if ctx.Err() != nil {
			return // stepping down
		}
		p.count(diagnoseFailed, "")
		p.logLimited(n.Name, diagnoseFailed, "self-diagnose poll failed", "node", n.Name, "error", err)
		return
	}
	now := p.Clock()
	rep, err := rpc.VerifyDiagnoseReport(sr, rpc.DiagnoseVerify{Key: key, Node: n.Name, Now: now, MaxAge: maxAge})
	if err != nil && p.Accept != nil {
		for _, k := range p.Accept() {
			if r2, err2 := rpc.VerifyDiagnoseReport(sr, rpc.DiagnoseVerify{Key: k, Node: n.Name, Now: now, MaxAge: maxAge}); err2 == nil {
				rep, err = r2, nil
				break
			}
		}
	}
	var d agent.Diagnosis
	if err == nil {
		if d, err = agent.ParseDiagnose(rep.Data); err != nil {
			err = fmt.Errorf("%w: %v", rpc.ErrReportMalformed, err)
		}
	}
	if err != nil {
		reason := rpc.ReportRejectReason(err)
		p.count(diagnoseRejected, reason)
		p.logLimited(n.Name, reason, "self-diagnose report rejected", "node", n.Name, "reason", reason, "error", err)
		return
	}
	res := DiagnoseResult{Node: n.Name, Time: time.Unix(0, rep.Timestamp), Received: now,
		Status: d.Status, Command: d.Command, Details: d.Details, Raw: d.Canonical}
	p.count(diagnoseVerified, "")
	p.State.mu.Lock()
	if p.State.results == nil {
		p.State.results = map[string]DiagnoseResult{}
	}
	prev, had := p.State.results[n.Name]
	p.State.results[n.Name] = res
	p.State.mu.Unlock()
	switch {
	case !had && res.Status != agent.DiagnoseOk:
		p.Log.Info("self-diagnose", "node", n.Name, "status", res.Status, "result", string(res.Raw))
	case had && string(prev.Raw) != string(res.Raw):
		p.Log.Info("self-diagnose result changed", "node", n.Name, "status", res.Status, "was", prev.Status, "result", string(res.Raw))
	}
}

func (p *diagnosePoller) count(outcome, reason string) {
	s := p.State
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.polls == nil {
		s.polls, s.rejected = map[string]uint64{}, map[string]uint64{}
	}
	s.polls[outcome]++
	if reason != "" {
		s.rejected[reason]++
	}
}

// logLimited logs a warning at most once per kind per diagnoseLogEvery,
// saying how many were not logged since and on which nodes.
func (p *diagnosePoller) logLimited(node, kind, msg string, args ...any) {
	s := p.State
	now := time.Now()
	s.mu.Lock()
	if s.logged == nil {
		s.logged, s.skipped, s.skippedNodes = map[string]time.Time{}, map[string]int{}, map[string]map[string]bool{}
	}
	if last, ok := s.logged[kind]; ok && now.Sub(last) < diagnoseLogEvery {
		s.skipped[kind]++
		if node != "" {
			if s.skippedNodes[kind] == nil {
				s.skippedNodes[kind] = map[string]bool{}
			}
			if len(s.skippedNodes[kind]) < maxSkippedNodes {
				s.skippedNodes[kind][node] = true
			}
		}
		s.mu.Unlock()
		return
	}
	skipped, nodes := s.skipped[kind], s.skippedNodes[kind]
	s.logged[kind], s.skipped[kind], s.skippedNodes[kind] = now, 0, nil
	s.mu.Unlock()
	if skipped > 0 {
		names := make([]string, 0, len(nodes))
		for n := range nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		args = append(args, "not_logged_since", skipped)
		if len(names) > 0 {
			args = append(args, "on_nodes", repair.FirstNames(names, 5))
		}
	}
	p.Log.Warn(msg, args...)
}

// maxSkippedNodes bounds the node names kept for one kind's next line.
const maxSkippedNodes = 4096

// diagnoseService is the self-diagnose poller as a leader service.
// interval and command are read before each round: the cluster's
// collector interval and diagnose_data_collector_filename (nil: 60 s and
// the built-in).
func (s *Server) diagnoseService(interval func() time.Duration, command func() string) leaderService {
	return leaderService{name: "diagnose", run: func(ctx context.Context, epoch uint64) error {
		p := &diagnosePoller{
			FSM: s.fsm, Client: nodeDiagnoser{&s.nodes}, Key: s.diagnoseKey,
			Accept:   func() [][]byte { return s.otherKeys(rpc.DiagnoseKey) },
			Interval: interval, Command: command, State: &s.diag, Log: s.log.Named("diagnose"),
		}
		p.Storage = &storageRecorder{FSM: s.fsm, Apply: s, Epoch: epoch, List: nodeStorage{&s.nodes},
			Log: s.log.Named("storage"), Warn: p.logLimited, Clock: time.Now}
		return p.Run(ctx)
	}}
}

// diagnoseCollector exports the poller's counters and the nodes' latest
// statuses to Prometheus.
type diagnoseCollector struct{ s *Server }

var (
	diagnosePollsDesc = prometheus.NewDesc("gnt_diagnose_polls_total",
		"Self-diagnose polls this gntd made as leader, by result: verified, rejected (see gnt_diagnose_rejected_total) or failed (no answer).",
		[]string{"result"}, nil)
	diagnoseRejectedDesc = prometheus.NewDesc("gnt_diagnose_rejected_total",
		"Self-diagnose reports this gntd rejected as leader, by reason: unsigned, forged, wrong_node, stale, future, malformed.",
		[]string{"reason"}, nil)
	diagnoseNodesDesc = prometheus.NewDesc("gnt_diagnose_nodes",
		"Nodes by the status of their latest verified self-diagnose result (leader only).", []string{"status"}, nil)
)

// Describe implements prometheus.Collector.
func (diagnoseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- diagnosePollsDesc
	ch <- diagnoseRejectedDesc
	ch <- diagnoseNodesDesc
}

// Collect implements prometheus.Collector.
func (c diagnoseCollector) Collect(ch chan<- prometheus.Metric) {
	d := &c.s.diag
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range []string{diagnoseVerified, diagnoseRejected, diagnoseFailed} {
		ch <- prometheus.MustNewConstMetric(diagnosePollsDesc, prometheus.CounterValue, float64(d.polls[r]), r)
	}
	reasons := rpc.ReportRejectReasons()
	sort.Strings(reasons)
	for _, r := range reasons {
		ch <- prometheus.MustNewConstMetric(diagnoseRejectedDesc, prometheus.CounterValue, float64(d.rejected[r]), r)
	}
	byStatus := map[string]int{agent.DiagnoseOk: 0, agent.DiagnoseLiveRepair: 0, agent.DiagnoseEvacuate: 0, agent.DiagnoseEvacuateFailover: 0}
	for _, r := range d.results {
		byStatus[r.Status]++
	}
	for st, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(diagnoseNodesDesc, prometheus.GaugeValue, float64(n), st)
	}
}
