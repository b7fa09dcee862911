package server

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/oob"
)

// monitorLeadership starts the leader-only services when this gntd becomes
// the Raft leader and stops them when it is not. raft.State is the truth;
// observer events only wake the loop early, and a short tick covers any
// event that was dropped. Only one leaderLoop ever runs.
func (s *Server) monitorLeadership(ctx context.Context) {
	var (
		cancel context.CancelFunc
		done   chan struct{}
	)
	stop := func() {
		if cancel != nil {
			cancel()
			<-done
			cancel, done = nil, nil
		}
		s.leaderRunning.Store(false)
	}
	defer stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.raftEvents:
		case <-tick.C:
		}
		r := s.raft()
		leader := r != nil && r.State() == raft.Leader
		held := s.leaderHold.Load() > 0 // a snapshot restore (snapshot.go)
		if done != nil {
			select {
			case <-done: // the loop gave up (e.g. lost leadership mid-establish)
				cancel()
				cancel, done = nil, nil
				s.leaderRunning.Store(false)
			default:
			}
		}
		switch {
		case leader && held && cancel != nil:
			s.log.Info("stopping leader services for a snapshot restore")
			stop()
		case leader && !held && cancel == nil:
			s.leaderRunning.Store(true)
			lctx, c := context.WithCancel(ctx)
			cancel, done = c, make(chan struct{})
			go func(d chan struct{}) {
				defer close(d)
				s.leaderLoop(lctx, r)
			}(done)
		case !leader && cancel != nil:
			s.log.Info("lost leadership; stopping leader services")
			stop()
		}
	}
}

// leaderLoop establishes leadership (Barrier, then LeaderEstablish, which
// records the master and starts a new executor epoch) and runs the
// leader-only services until ctx ends or leadership is lost.
func (s *Server) leaderLoop(ctx context.Context, r *raft.Raft) {
	start := time.Now()
	var epoch, term uint64
	for {
		if ctx.Err() != nil || r.State() != raft.Leader {
			return
		}
		term = r.CurrentTerm()
		if err := r.Barrier(10 * time.Second).Error(); err != nil {
			s.log.Warn("barrier failed", "error", err)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		initialized := false
		s.fsm.Read(func(st *fsm.State, _ uint64) { initialized = st.Initialized() })
		if !initialized {
			// Cluster init is in progress; wait for it.
			wctx, c := context.WithTimeout(ctx, time.Second)
			s.fsm.WaitIndex(wctx, s.fsm.Index())
			c()
			continue
		}
		resp, _, err := s.Apply(ctx, fsm.LeaderEstablish{Now: time.Now().UnixNano(), Node: s.cfg.Name, LogVersion: fsm.LogVersion})
		if err != nil {
			s.log.Warn("establishing leadership", "error", err)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		if resp.Err != nil {
			s.log.Error("establishing leadership refused", "error", resp.Err)
			sleepCtx(ctx, time.Second)
			continue
		}
		epoch = resp.Epoch
		if r.CurrentTerm() != term {
			// Leadership changed hands meanwhile: this gntd leads again,
			// but in which term the epoch began is not known. The log
			// says 0 rather than a term it may not have led.
			term = 0
		}
		break
	}
	s.mu.Lock()
	s.established = true
	s.peerStatus = map[string]peerHealth{}
	s.mu.Unlock()
	s.log.Info("leadership established", "epoch", epoch, "term", term, "took", time.Since(start))
	defer func() {
		s.mu.Lock()
		s.established = false
		s.mu.Unlock()
	}()

	svcs := []leaderService{
		{name: "executor", run: func(ctx context.Context, epoch uint64) error {
			ex := &jobs.Executor{FSM: s.fsm, Apply: s, Epoch: epoch, Concurrency: s.cfg.ExecutorConcurrency,
				Log: s.log.Named("executor"), Nodes: &s.nodes, Dead: nodeDead, Leadership: leadershipHandover{s}, Probe: apiProbe{client: s.httpClient()}, Pacer: s.pacer,
				Incarnation: s.incarnation, Incarnations: incarnationProbe{s},
				OOB:         &oob.Runner{Programs: s.oobPrograms(), Done: s.metrics.ops.oobDone},
				IAllocators: s.iallocators(),
				Debug:       s.cfg.Debug,
				Metrics:     s.metrics.ops,
				OnResumed: func(n int, _ time.Duration) {
					if n > 0 {
						took := time.Since(start)
						s.metrics.resume.Set(took.Seconds())
						s.log.Info("started jobs resumed", "jobs", n, "since_elected", took)
					}
				}}
			return ex.Run(ctx)
		}},
		{name: "raft-membership", run: func(ctx context.Context, _ uint64) error { s.poolKeeper(ctx, r); return nil }},
		{name: "job-archiver", run: func(ctx context.Context, epoch uint64) error {
			return (&jobs.Archiver{FSM: s.fsm, Apply: s, Epoch: epoch, MaxAge: s.cfg.JobArchiveAge.Duration,
				Log: s.log.Named("archiver")}).Run(ctx)
		}},
		{name: "liveness", run: s.runLiveness},                   // liveness.go
		{name: "maintd", run: s.runMaintd},                       // maintd.go
		s.diagnoseService(s.diagnoseInterval, s.diagnoseCommand), // diagnose.go
	}
	if err := runLeaderServices(ctx, s.log, epoch, svcs); err != nil {
		s.log.Warn("leader services stopped", "error", err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
