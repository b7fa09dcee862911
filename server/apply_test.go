package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// singleRaft starts a one-server Raft group in memory around a fresh FSM.
func singleRaft(t *testing.T) (*raft.Raft, *fsm.FSM) {
	t.Helper()
	f := fsm.New()
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	conf.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard})
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("n1")
	if err := raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(conf, &raftFSM{fsm: f, log: conf.Logger}, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	deadline := time.Now().Add(5 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r, f
}

// TestApplierBatchesAndAnswersEach: concurrent commands are packed into
// fewer log entries, and every caller gets its own response (success or
// its own refusal).
func TestApplierBatchesAndAnswersEach(t *testing.T) {
	r, f := singleRaft(t)
	reg := prometheus.NewRegistry()
	a := newApplier(func() *raft.Raft { return r }, reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	initCtx, stopInit := context.WithCancel(ctx)
	initDone := make(chan struct{})
	go func() { defer close(initDone); a.run(initCtx) }()
	resp, _, err := a.Apply(ctx, fsm.ClusterInit{Now: 1, Name: "c", UUID: "u", GroupUUID: "g", Node: fsm.NodeSpec{Name: "n1", UUID: "n1", PrimaryIP: "192.0.2.1"}})
	if err != nil || resp.Err != nil {
		t.Fatalf("init: %v %v", err, resp.Err)
	}
	// The applier stops, the commands below queue up, and it starts
	// again once all are queued: what it packs does not depend on how
	// the scheduler interleaves the callers (on a loaded machine they
	// came one by one, and nothing was there to batch).
	stopInit()
	<-initDone
	const n = 200
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for len(a.reqs) < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		a.run(ctx)
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			op := fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["t%d"]}`, i)
			if i%10 == 0 { // every tenth is refused by the state machine
				op = fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"node","name":"ghost%d","tags":["t"]}`, i)
			}
			resp, idx, err := a.Apply(ctx, fsm.JobSubmit{Now: 2, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}})
			switch {
			case err != nil:
				errs <- err
			case idx == 0:
				errs <- fmt.Errorf("command %d: no index", i)
			case i%10 == 0 && (resp.Err == nil || resp.Err.Code != fsm.CodeNoEnt):
				errs <- fmt.Errorf("command %d: want unknown_entity, got %+v", i, resp.Err)
			case i%10 != 0 && (resp.Err != nil || resp.Job == nil || resp.Job.Status != fsm.StatusSuccess):
				errs <- fmt.Errorf("command %d: %+v", i, resp.Err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	f.Read(func(s *fsm.State, _ uint64) {
		if got := len(s.Cluster.Tags); got != n-n/10 {
			t.Errorf("cluster has %d tags, want %d", got, n-n/10)
		}
	})
	var m dto.Metric
	if err := a.entries.Write(&m); err != nil {
		t.Fatal(err)
	}
	if entries := m.GetCounter().GetValue(); entries >= n {
		t.Errorf("%v log entries for %d concurrent commands: nothing was batched", entries, n+1)
	} else {
		t.Logf("%d commands in %v log entries", n+1, entries)
	}
}

// TestApplierNotLeader: a gntd that is not the leader refuses at once with
// rpc.ErrNotLeader (nothing was written, so the caller may go elsewhere).
func TestApplierNotLeader(t *testing.T) {
	r, _ := singleRaft(t)
	a := newApplier(func() *raft.Raft { return r }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.run(ctx)
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	_, _, err := a.Apply(ctx, fsm.LeaderEstablish{Now: 1, Node: "n1"})
	if !errors.Is(err, rpc.ErrNotLeader) {
		t.Fatalf("Apply after shutdown = %v, want ErrNotLeader", err)
	}
	none := newApplier(func() *raft.Raft { return nil }, nil)
	if _, _, err := none.Apply(ctx, fsm.LeaderEstablish{Now: 1, Node: "n1"}); !errors.Is(err, rpc.ErrNotLeader) {
		t.Fatalf("Apply without raft = %v, want ErrNotLeader", err)
	}
}

// TestApplyError: Raft's refusals before an entry is appended may be
// retried on the next leader; an entry that may commit is indeterminate.
func TestApplyError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{raft.ErrNotLeader, rpc.ErrNotLeader},
		{raft.ErrRaftShutdown, rpc.ErrNotLeader},
		{raft.ErrEnqueueTimeout, rpc.ErrNotLeader},
		{raft.ErrLeadershipTransferInProgress, rpc.ErrNotLeader},
		{raft.ErrLeadershipLost, rpc.ErrIndeterminate},
		{errors.New("disk on fire"), rpc.ErrIndeterminate},
	} {
		got := applyError(tc.err)
		if !errors.Is(got, tc.want) {
			t.Errorf("applyError(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if tc.want == rpc.ErrNotLeader && errors.Is(got, rpc.ErrIndeterminate) {
			t.Errorf("applyError(%v) is both not-leader and indeterminate", tc.err)
		}
	}
}

// TestApplierHold: after an entry commits, the applier calls hold with its
// index and how long it took (at most maxHold) before it cuts the next
// entry, so commands queued during the hold ride that entry.
func TestApplierHold(t *testing.T) {
	r, _ := singleRaft(t)
	a := newApplier(func() *raft.Raft { return r }, prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu     sync.Mutex
		armed  bool
		calls  []uint64
		bounds []time.Duration
		ride   func() // queues the commands that must ride the next entry
	)
	a.hold = func(ctx context.Context, index uint64, bound time.Duration) (bool, bool) {
		mu.Lock()
		if !armed {
			mu.Unlock()
			return false, true
		}
		calls, bounds = append(calls, index), append(bounds, bound)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			ride()
		}
		return true, true
	}
	go a.run(ctx)
	_, initIdx, err := a.Apply(ctx, fsm.ClusterInit{Now: 1, Name: "c", UUID: "u", GroupUUID: "g", Node: fsm.NodeSpec{Name: "n1", UUID: "n1", PrimaryIP: "192.0.2.1"}})
	if err != nil {
		t.Fatal(err)
	}
	tag := func(i int) fsm.Command {
		op := fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["t%d"]}`, i)
		return fsm.JobSubmit{Now: 2, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}}
	}
	const riders = 5
	results := make(chan error, riders+1)
	submit := func(i int) {
		resp, _, err := a.Apply(ctx, tag(i))
		if err == nil && resp.Err != nil {
			err = resp.Err
		}
		results <- err
	}
	ride = func() {
		for i := 1; i <= riders; i++ {
			go submit(i)
		}
		for len(a.reqs) < riders {
			time.Sleep(time.Millisecond)
		}
	}
	mu.Lock()
	armed = true
	mu.Unlock()
	before := counterValue(t, a.entries)
	go submit(0)
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	held := len(calls)
	mu.Unlock()
	if held == 0 {
		t.Fatal("no hold after the init entry committed")
	}
	for i := 0; i < riders; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := counterValue(t, a.entries) - before; got != 1 {
		t.Errorf("%d commands took %v entries, want 1: the commands queued during the hold did not ride the next entry", riders+1, got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) == 0 || calls[0] != initIdx {
		t.Fatalf("hold calls %v, want the first with the init entry's index %d", calls, initIdx)
	}
	if bounds[0] <= 0 || bounds[0] > maxHold {
		t.Errorf("hold bound %v, want the last commit's time, at most %v", bounds[0], maxHold)
	}
	var m dto.Metric
	if err := a.holdDur.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetHistogram().GetSampleCount(); n != uint64(len(calls)) {
		t.Errorf("hold histogram has %d samples for %d holds", n, len(calls))
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
