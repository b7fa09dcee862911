package locking_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gnt-cluster/gnt/jobs/locking"
)

// acquireForOpcode is how an executor takes one opcode's locks with
// Ganeti's retry strategy: each attempt with a growing timeout (between
// attempts nothing is held, so other jobs can run); when the strategy is
// exhausted, raise the priority by one and start again; at the highest
// priority, block.
func acquireForOpcode(ctx context.Context, m *locking.Manager, s locking.Strategy, job int64, prio int, reqs []locking.Request) (int, error) {
	const highest = -20
	for n := 0; ; n++ {
		timeout, ok := s.Attempt(n)
		if !ok {
			if prio > highest {
				prio--
				n = -1
				continue
			}
			timeout = 0 // blocking
		}
		err := m.Acquire(ctx, job, prio, reqs, timeout)
		if !errors.Is(err, locking.ErrTimeout) {
			return prio, err
		}
	}
}

func Example() {
	m := locking.NewManager()
	ctx := context.Background()
	inst1 := []locking.Request{
		{Level: locking.LevelCluster, Names: []string{locking.BGL}, Mode: locking.Shared},
		{Level: locking.LevelInstance, Names: []string{"inst1"}, Mode: locking.Exclusive},
	}
	// Job 1 holds inst1; job 2 retries until job 1 is done.
	if err := m.Acquire(ctx, 1, 0, inst1, 0); err != nil {
		panic(err)
	}
	s := locking.Strategy{Min: time.Millisecond, Max: 15 * time.Millisecond, Total: 30 * time.Millisecond}
	done := make(chan error)
	go func() {
		_, err := acquireForOpcode(ctx, m, s, 2, 0, inst1)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // job 1 works; job 2's attempts time out
	m.ReleaseAll(1)
	fmt.Println("job 2:", <-done)
	for _, li := range m.Held(2) {
		fmt.Println(li.Name, li.Mode)
	}
	m.ReleaseAll(2)
	// Output:
	// job 2: <nil>
	// cluster/[lockset] shared
	// cluster/BGL shared
	// instance/[lockset] shared
	// instance/inst1 exclusive
}
