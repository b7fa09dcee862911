package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/rpc"
)

// applier is the one way gnt writes to Raft. Concurrent callers are packed
// into Batch entries: while up to maxInflight entries are being committed,
// new commands queue up and go out together in the next entry, so one fsync
// and one replication round trip serve many jobs. Errors keep their
// identity: rpc.ErrNotLeader when this gntd cannot apply, and
// rpc.ErrIndeterminate when leadership was lost mid-commit.
//
// One entry in flight beat two in alternating runs of the job benchmarks
// (2026-11-22): each entry costs the three candidates about 1 ms of CPU
// (two fsyncs and a bolt commit each, replication, an apply), so fuller
// entries leave more CPU for the jobs, and with less contention an entry
// commits sooner (4.4 ms instead of 6.1 ms at 64 waiting clients).
// Configuration jobs, 64 clients: 4,742 and 4,746/s against 4,079 and
// 4,053/s; no-op jobs, 64 held submitters: 3,379 and 3,457/s against
// 2,921 and 2,970/s; CPU per job about a sixth lower.
//
// After an entry that queued jobs for the executor commits, the next entry
// is held until the executor has queued those jobs' first records (at
// most as long as the last entry took to commit; jobs.Pacer), so a job
// that ends at once is recorded in the entry after its submission rather
// than the one after that: 43–44 commands per entry instead of 31, and
// 12–14 % more no-op jobs/s with 64 held clients on average over twelve
// alternating pairs of runs (2026-11-23; better in 10 and 11 of them).
type applier struct {
	raft        func() *raft.Raft
	reqs        chan *applyReq
	maxBatch    int
	maxBytes    int
	maxInflight int
	timeout     time.Duration

	// hold, when set, is called once after each entry commits, before
	// the next one is cut, with the entry's index (Server.holdForExecutor).
	hold     func(ctx context.Context, index uint64, bound time.Duration) (held, caught bool)
	last     atomic.Uint64 // the index of the last entry committed
	lastTook atomic.Int64  // how long it took, in nanoseconds

	batchSize prometheus.Histogram
	entries   prometheus.Counter
	commitDur prometheus.Histogram
	holdDur   prometheus.Histogram
	holdLate  prometheus.Counter
}

// maxHold bounds a hold for the executor (applier.hold).
const maxHold = 5 * time.Millisecond

type applyReq struct {
	data []byte
	done chan applyResult
}

type applyResult struct {
	resp  fsm.Response
	index uint64
	err   error
}

func newApplier(r func() *raft.Raft, reg *prometheus.Registry) *applier {
	a := &applier{
		raft: r, reqs: make(chan *applyReq, 4096),
		maxBatch: 512, maxBytes: 256 << 10, maxInflight: 1, timeout: 10 * time.Second,
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gnt_raft_apply_batch_commands", Help: "Commands per Raft log entry written by this gntd.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gnt_raft_apply_entries_total", Help: "Raft log entries written by this gntd.",
		}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gnt_raft_apply_seconds", Help: "Time from handing an entry to Raft until the state machine applied it.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 1.5, 20),
		}),
	}
	a.holdDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gnt_raft_apply_hold_seconds", Help: "Time the next entry was held for the executor to queue the updates of the jobs the last entry queued.",
		Buckets: prometheus.ExponentialBuckets(0.00002, 2, 12),
	})
	a.holdLate = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gnt_raft_apply_hold_timeouts_total", Help: "Holds that ended at their bound before the executor caught up.",
	})
	if reg != nil {
		reg.MustRegister(a.batchSize, a.entries, a.commitDur, a.holdDur, a.holdLate)
	}
	return a
}

// Apply encodes cmd, replicates it and returns the state machine's response.
func (a *applier) Apply(ctx context.Context, cmd fsm.Command) (fsm.Response, uint64, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Response{}, 0, err
	}
	if r := a.raft(); r == nil || r.State() != raft.Leader {
		return fsm.Response{}, 0, rpc.ErrNotLeader
	}
	req := &applyReq{data: data, done: make(chan applyResult, 1)}
	select {
	case a.reqs <- req:
	case <-ctx.Done():
		return fsm.Response{}, 0, ctx.Err()
	}
	jobs.GiveBack(ctx)
	select {
	case res := <-req.done:
		return res.resp, res.index, res.err
	case <-ctx.Done():
		// The command is queued or in flight: its outcome is unknown.
		return fsm.Response{}, 0, fmt.Errorf("%w: %v", rpc.ErrIndeterminate, ctx.Err())
	}
}

// run packs queued commands into entries until ctx ends.
func (a *applier) run(ctx context.Context) {
	sem := make(chan struct{}, a.maxInflight)
	var (
		wg   sync.WaitGroup
		held uint64
	)
	defer wg.Wait()
	for {
		var first *applyReq
		select {
		case first = <-a.reqs:
		case <-ctx.Done():
			a.drain(rpc.ErrNotLeader)
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			first.done <- applyResult{err: rpc.ErrNotLeader}
			a.drain(rpc.ErrNotLeader)
			return
		}
		if last := a.last.Load(); a.hold != nil && last > held {
			held = last
			start := time.Now()
			// Holding longer than an entry takes to commit would cost
			// more than the executor's updates missing this entry.
			bound := min(time.Duration(a.lastTook.Load()), maxHold)
			if h, caught := a.hold(ctx, last, bound); h {
				a.holdDur.Observe(time.Since(start).Seconds())
				if !caught {
					a.holdLate.Inc()
				}
			}
		}
		batch := []*applyReq{first}
		size := len(first.data)
	fill:
		for len(batch) < a.maxBatch && size < a.maxBytes {
			select {
			case r := <-a.reqs:
				batch = append(batch, r)
				size += len(r.data)
			default:
				break fill
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a.commit(batch)
		}()
	}
}

func (a *applier) drain(err error) {
	for {
		select {
		case r := <-a.reqs:
			r.done <- applyResult{err: err}
		default:
			return
		}
	}
}

func (a *applier) commit(batch []*applyReq) {
	fail := func(err error) {
		for _, r := range batch {
			r.done <- applyResult{err: err}
		}
	}
	r := a.raft()
	if r == nil {
		fail(rpc.ErrNotLeader)
		return
	}
	data := batch[0].data
	if len(batch) > 1 {
		entries := make([][]byte, len(batch))
		for i, b := range batch {
			entries[i] = b.data
		}
		var err error
		if data, err = fsm.EncodeBatch(entries); err != nil {
			fail(err)
			return
		}
	}
	a.batchSize.Observe(float64(len(batch)))
	a.entries.Inc()
	start := time.Now()
	f := r.Apply(data, a.timeout)
	err := f.Error()
	took := time.Since(start)
	a.commitDur.Observe(took.Seconds())
	if err != nil {
		fail(applyError(err))
		return
	}
	idx := f.Index()
	a.lastTook.Store(int64(took))
	a.last.Store(idx)
	switch resp := f.Response().(type) {
	case fsm.Response:
		if len(batch) != 1 {
			fail(fmt.Errorf("batch of %d answered with one response: %v", len(batch), resp.Err))
			return
		}
		batch[0].done <- applyResult{resp: resp, index: idx}
	case fsm.BatchResponse:
		if len(resp) != len(batch) {
			fail(fmt.Errorf("batch of %d answered with %d responses", len(batch), len(resp)))
			return
		}
		for i, r := range batch {
			r.done <- applyResult{resp: resp[i], index: idx}
		}
	default:
		fail(fmt.Errorf("unexpected apply response %T", resp))
	}
}

// applyError says what a failed raft.Apply means for its commands:
// rpc.ErrNotLeader when Raft refused the entry before appending it (not
// the leader, shut down, a leadership transfer under way: the caller may
// send the commands to the next leader), rpc.ErrIndeterminate when the
// entry may have been appended and may yet commit.
func applyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return rpc.ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return rpc.ErrIndeterminate
	default:
		return fmt.Errorf("%w: %v", rpc.ErrIndeterminate, err)
	}
}
