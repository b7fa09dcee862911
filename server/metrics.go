package server

import (
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// The metrics an operator alerts on (docs/metrics.md lists them with
// example alerts). Raft's and the state's gauges are read at scrape time
// (stateCollector); durations are histograms observed where they happen.

var (
	buildInfoDesc = prometheus.NewDesc("gnt_build_info",
		"Always 1; the labels say which gntd this is.", []string{"version", "commit", "goversion"}, nil)
	hasLeaderDesc = prometheus.NewDesc("gnt_raft_has_leader",
		"1 when this gntd knows a Raft leader, 0 otherwise (no leader, or not a member yet).", nil, nil)
	isLeaderDesc = prometheus.NewDesc("gnt_raft_is_leader",
		"1 on the Raft leader (the master), 0 elsewhere.", nil, nil)
	termDesc = prometheus.NewDesc("gnt_raft_term",
		"This gntd's current Raft term.", nil, nil)
	commitIndexDesc = prometheus.NewDesc("gnt_raft_commit_index",
		"The highest Raft log index this gntd knows committed.", nil, nil)
	appliedIndexDesc = prometheus.NewDesc("gnt_raft_applied_index",
		"The highest Raft log index this gntd's state machine applied.", nil, nil)
	lastIndexDesc = prometheus.NewDesc("gnt_raft_last_index",
		"The highest Raft log index in this gntd's log.", nil, nil)
	votersDesc = prometheus.NewDesc("gnt_raft_voters",
		"Voters in the Raft configuration as this gntd knows it.", nil, nil)
	followerContactDesc = prometheus.NewDesc("gnt_raft_follower_last_contact_seconds",
		"On the leader: seconds since each other member last answered the leader's status poll.", []string{"peer"}, nil)
	followerLagDesc = prometheus.NewDesc("gnt_raft_follower_applied_lag",
		"On the leader: log entries each other member had yet to apply at its last status poll (leader's commit index minus its applied index).", []string{"peer"}, nil)
	jobsDesc = prometheus.NewDesc("gnt_jobs",
		"Jobs in the queue (not archived), by status.", []string{"status"}, nil)
	incidentsDesc = prometheus.NewDesc("gnt_maintd_incidents",
		"maintd's incidents in the state, by repair status.", []string{"status"}, nil)
	breakerDesc = prometheus.NewDesc("gnt_repair_breaker_open",
		"On the leader: 1 when maintd's last round found the circuit breaker open (no automatic evacuation, fencing or failover), 0 when closed.", nil, nil)
)

// jobStatuses are every job status, so that each series exists at 0.
var jobStatuses = []string{fsm.StatusQueued, fsm.StatusWaiting, fsm.StatusRunning, fsm.StatusCanceling,
	fsm.StatusSuccess, fsm.StatusError, fsm.StatusCanceled}

// opMetrics are observed by the leader's executor, Raft's log store and
// snapshots, and OOB runs.
type opMetrics struct {
	leaderChanges prometheus.Counter
	storeCommit   prometheus.Histogram
	snapshotDur   prometheus.Histogram
	snapshotBytes prometheus.Gauge
	restoreDur    prometheus.Histogram
	opDuration    *prometheus.HistogramVec
	lockWait      *prometheus.HistogramVec
	oobRuns       *prometheus.CounterVec
}

func newOpMetrics(reg prometheus.Registerer) *opMetrics {
	m := &opMetrics{
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "gnt_raft_leader_changes_total",
			Help: "Changes of the Raft leader this gntd observed (to another member or to none)."}),
		storeCommit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gnt_raft_store_commit_seconds",
			Help:    "Time to write a batch of Raft log entries to raft.db (a bolt transaction with its fsync).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		snapshotDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gnt_raft_snapshot_seconds",
			Help:    "Time to encode and write a snapshot of the state (Persist), on this gntd.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		snapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gnt_raft_snapshot_bytes",
			Help: "Size of the last snapshot this gntd wrote."}),
		restoreDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gnt_raft_restore_seconds",
			Help:    "Time to restore the state from a snapshot (at start, or one installed by the leader).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gnt_job_duration_seconds",
			Help:    "On the leader: time from an opcode's start to its end, for opcodes the executor ran, by OP_ID and final status.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"opcode", "result"}),
		lockWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gnt_lock_wait_seconds",
			Help:    "On the leader: time an opcode waited for its locks, by the most significant lock level it asked for.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12)}, []string{"level"}),
		oobRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gnt_oob_runs_total",
			Help: "Out-of-band helper runs by the leader's executor, by command and result (success, failed, unsupported, timeout, bad_output, not_runnable)."},
			[]string{"command", "result"}),
	}
	reg.MustRegister(m.leaderChanges, m.storeCommit, m.snapshotDur, m.snapshotBytes, m.restoreDur, m.opDuration, m.lockWait, m.oobRuns)
	return m
}

// LockWait implements jobs.Metrics.
func (m *opMetrics) LockWait(level string, waited time.Duration) {
	m.lockWait.WithLabelValues(level).Observe(waited.Seconds())
}

// OpcodeDone implements jobs.Metrics.
func (m *opMetrics) OpcodeDone(opID, status string, took time.Duration) {
	m.opDuration.WithLabelValues(opID, status).Observe(took.Seconds())
}

// oobDone counts an OOB helper run (oob.Runner.Done).
func (m *opMetrics) oobDone(command, result string) {
	m.oobRuns.WithLabelValues(command, result).Inc()
}

// timedLogStore measures raft.db's writes of log entries.
type timedLogStore struct {
	raft.LogStore
	obs prometheus.Observer
}

func (t timedLogStore) StoreLog(l *raft.Log) error {
	defer t.observe(time.Now())
	return t.LogStore.StoreLog(l)
}

func (t timedLogStore) StoreLogs(ls []*raft.Log) error {
	defer t.observe(time.Now())
	return t.LogStore.StoreLogs(ls)
}

// IsMonotonic passes the wrapped store's answer on (raft.MonotonicLogStore).
func (t timedLogStore) IsMonotonic() bool {
	m, ok := t.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (t timedLogStore) observe(start time.Time) {
	if t.obs != nil {
		t.obs.Observe(time.Since(start).Seconds())
	}
}

// stateCollector exports Raft's indexes, the job queue and maintd's
// incidents, read when scraped.
type stateCollector struct {
	s *Server
}

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{buildInfoDesc, hasLeaderDesc, isLeaderDesc, termDesc, commitIndexDesc, appliedIndexDesc,
		lastIndexDesc, votersDesc, followerContactDesc, followerLagDesc, jobsDesc, incidentsDesc, breakerDesc} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(buildInfoDesc, 1, rpc.Version, s.cfg.Commit, goVersion())
	r := s.raft()
	hasLeader, isLeader := 0.0, 0.0
	if r != nil {
		if addr, _ := r.LeaderWithID(); addr != "" {
			hasLeader = 1
		}
		if r.State() == raft.Leader {
			isLeader = 1
		}
		if term, err := strconv.ParseUint(r.Stats()["term"], 10, 64); err == nil {
			gauge(termDesc, float64(term))
		}
		commit := r.CommitIndex()
		gauge(commitIndexDesc, float64(commit))
		gauge(appliedIndexDesc, float64(r.AppliedIndex()))
		gauge(lastIndexDesc, float64(r.LastIndex()))
		if f := r.GetConfiguration(); f.Error() == nil {
			voters := 0
			for _, srv := range f.Configuration().Servers {
				if srv.Suffrage == raft.Voter {
					voters++
				}
			}
			gauge(votersDesc, float64(voters))
		}
		if isLeader == 1 {
			now := time.Now()
			s.mu.Lock()
			peers := make([]string, 0, len(s.peerStatus))
			for name := range s.peerStatus {
				peers = append(peers, name)
			}
			sort.Strings(peers)
			for _, name := range peers {
				h := s.peerStatus[name]
				if h.seen.IsZero() {
					continue
				}
				gauge(followerContactDesc, now.Sub(h.seen).Seconds(), name)
				lag := 0.0
				if commit > h.applied {
					lag = float64(commit - h.applied)
				}
				gauge(followerLagDesc, lag, name)
			}
			s.mu.Unlock()
		}
	}
	gauge(hasLeaderDesc, hasLeader)
	gauge(isLeaderDesc, isLeader)

	jobs := make(map[string]int, len(jobStatuses))
	for _, st := range jobStatuses {
		jobs[st] = 0
	}
	incidents := map[string]int{}
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		for _, j := range st.Jobs {
			jobs[j.Status]++
		}
		if m := st.Maint(); m != nil {
			for _, in := range m.Incidents {
				incidents[in.RepairStatus]++
			}
		}
	})
	for st, n := range jobs {
		gauge(jobsDesc, float64(n), st)
	}
	for st, n := range incidents {
		gauge(incidentsDesc, float64(n), st)
	}
	if svc := s.maintdService(); svc != nil {
		if last, _, _, _ := svc.Last(); last != nil {
			open := 0.0
			if last.Breaker.Open {
				open = 1
			}
			gauge(breakerDesc, open)
		}
	}
}

// raftMetricsOnce guards go-metrics' process-wide sink: hashicorp/raft
// and raft-boltdb report through the global go-metrics, so only the first
// Server of a process (the only one, in a gntd) exports them.
var raftMetricsOnce sync.Once

// bridgeRaftMetrics exports hashicorp/raft's and raft-boltdb's own
// go-metrics (gnt_raft_commitTime, gnt_raft_replication_appendEntries_rpc,
// gnt_raft_boltdb_storeLogs, ...) through reg, and through extra (the
// --debug in-memory view) when set. It reports whether this Server got
// them.
func bridgeRaftMetrics(reg prometheus.Registerer, extra metrics.MetricSink) (bridged bool, err error) {
	raftMetricsOnce.Do(func() {
		bridged = true
		var sink *gmprom.PrometheusSink
		sink, err = gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Expiration: time.Minute, Registerer: reg})
		if err != nil {
			return
		}
		cfg := metrics.DefaultConfig("gnt")
		cfg.EnableHostname, cfg.EnableRuntimeMetrics, cfg.EnableHostnameLabel = false, false, false
		var all metrics.MetricSink = sink
		if extra != nil {
			all = metrics.FanoutSink{sink, extra}
		}
		_, err = metrics.NewGlobal(cfg, all)
	})
	return bridged, err
}

func goVersion() string { return runtime.Version() }
