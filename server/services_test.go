package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/jobs"
)

// TestLeaderServicesStopTogether: every service runs with the epoch, and
// runLeaderServices returns only after all of them have returned.
func TestLeaderServicesStopTogether(t *testing.T) {
	var running, maxRunning atomic.Int32
	var epochs sync.Map
	svc := func(name string) leaderService {
		return leaderService{name: name, run: func(ctx context.Context, epoch uint64) error {
			epochs.Store(name, epoch)
			n := running.Add(1)
			for {
				m := maxRunning.Load()
				if n <= m || maxRunning.CompareAndSwap(m, n) {
					break
				}
			}
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // a slow shutdown
			running.Add(-1)
			return nil
		}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- runLeaderServices(ctx, hclog.NewNullLogger(), 7, []leaderService{svc("a"), svc("b"), svc("c")})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for running.Load() != 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("returned %v after a step-down", err)
	}
	if n := running.Load(); n != 0 {
		t.Fatalf("%d services still running after runLeaderServices returned", n)
	}
	if maxRunning.Load() != 3 {
		t.Fatalf("max running = %d, want 3", maxRunning.Load())
	}
	for _, name := range []string{"a", "b", "c"} {
		if e, _ := epochs.Load(name); e != uint64(7) {
			t.Errorf("service %s ran with epoch %v, want 7", name, e)
		}
	}
}

// TestLeaderServicesFenced: one fenced service stops all of them and the
// fencing error is returned.
func TestLeaderServicesFenced(t *testing.T) {
	var stopped atomic.Int32
	waiter := leaderService{name: "waiter", run: func(ctx context.Context, _ uint64) error {
		<-ctx.Done()
		stopped.Add(1)
		return nil
	}}
	fenced := leaderService{name: "fenced", run: func(ctx context.Context, _ uint64) error {
		return jobs.ErrFenced
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := runLeaderServices(ctx, hclog.NewNullLogger(), 1, []leaderService{waiter, fenced, waiter})
	if !errors.Is(err, jobs.ErrFenced) {
		t.Fatalf("err = %v, want ErrFenced", err)
	}
	if ctx.Err() != nil {
		t.Fatal("services did not stop before the test deadline")
	}
	if stopped.Load() != 2 {
		t.Fatalf("%d of 2 other services stopped", stopped.Load())
	}
}

// TestLeaderServicesRestart: a failing service is run again; the others
// keep running.
func TestLeaderServicesRestart(t *testing.T) {
	old := serviceRestartDelay
	serviceRestartDelay = time.Millisecond
	defer func() { serviceRestartDelay = old }()
	var runs, otherRuns atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	flaky := leaderService{name: "flaky", run: func(ctx context.Context, _ uint64) error {
		if runs.Add(1) == 3 {
			cancel()
		}
		return errors.New("boom")
	}}
	steady := leaderService{name: "steady", run: func(ctx context.Context, _ uint64) error {
		otherRuns.Add(1)
		<-ctx.Done()
		return nil
	}}
	if err := runLeaderServices(ctx, hclog.NewNullLogger(), 1, []leaderService{flaky, steady}); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 3 || otherRuns.Load() != 1 {
		t.Fatalf("flaky ran %d times (want 3), steady %d (want 1)", runs.Load(), otherRuns.Load())
	}
}
