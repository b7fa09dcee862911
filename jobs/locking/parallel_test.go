package locking

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// opLocks is what a typical instance opcode takes: the BGL shared, its
// instance exclusive, its primary node's resources shared.
func opLocks(inst, node string) []Request {
	return []Request{
		members(LevelCluster, Shared, BGL),
		ix(inst),
		members(LevelNodeRes, Shared, node),
	}
}

// TestIndependentRunInParallel: two owners on different instances hold
// their locks at the same time. Each waits, holding its locks, until the
// other holds its own; were the manager to serialise them, the second
// Acquire would block until the context's deadline and fail.
func TestIndependentRunInParallel(t *testing.T) {
	m := newTestManager(t)
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	var holding, checked sync.WaitGroup
	holding.Add(2)
	checked.Add(2)
	errs := make(chan error, 2)
	for o, inst := range map[int64]string{1: "inst1", 2: "inst2"} {
		go func() {
			err := m.Acquire(ctx, o, 0, opLocks(inst, "node1"), 0)
			holding.Done()
			if err == nil {
				holding.Wait()
				for _, li := range m.Snapshot() {
					if li.Name == "cluster/BGL" && len(li.Owners) != 2 {
						err = fmt.Errorf("BGL held by %v, want both owners", li.Owners)
					}
				}
			}
			checked.Done()
			checked.Wait()
			m.ReleaseAll(o)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("owner: %v", err)
		}
	}
	checkEmpty(t, m)
}

// TestConflictingSerialise: a second owner of the same instance waits
// until the first releases, and many owners of one instance are never
// inside together.
func TestConflictingSerialise(t *testing.T) {
	m := newTestManager(t)
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	if err := m.Acquire(ctx, 1, 0, opLocks("inst1", "node1"), 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Acquire(ctx, 2, 0, opLocks("inst1", "node2"), 0) }()
	for !hasPending(m, 2) { // owner 2 queues behind owner 1
		if ctx.Err() != nil {
			t.Fatal("owner 2 never queued for inst1")
		}
		time.Sleep(time.Millisecond)
	}
	if got := heldNames(m, 2); got != "cluster/[lockset]:IS cluster/BGL:S instance/[lockset]:IX" {
		t.Errorf("owner 2 holds %q while waiting for inst1", got)
	}
	m.ReleaseAll(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m.ReleaseAll(2)

	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for o := range int64(8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := m.Acquire(ctx, o, 0, opLocks("inst1", fmt.Sprint("node", o)), 0); err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				time.Sleep(10 * time.Microsecond)
				inside.Add(-1)
				m.ReleaseAll(o)
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d owners of inst1 inside at once", most.Load())
	}
	checkEmpty(t, m)
}
