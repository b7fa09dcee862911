package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/jobs"
)

// leaderService is a service that runs only on the established leader:
// the job executor, the Raft membership keeper, the job archiver, and
// later maintd, harep and the liveness reconciler. run gets the executor
// epoch of the leadership; every write a service makes to the state
// carries it, so the state refuses the writes of a service whose leader
// was deposed (fsm.CodeFenced).
type leaderService struct {
	name string
	run  func(ctx context.Context, epoch uint64) error
}

// serviceRestartDelay is how long a failed service waits before it runs
// again.
var serviceRestartDelay = time.Second

// runLeaderServices runs every service for one leadership, started after
// the Barrier and LeaderEstablish, until ctx ends (step-down). It returns
// only when every service has returned, so two leaderships of one gntd
// never overlap. A service that reports jobs.ErrFenced ends them all: a
// newer leader exists, and the caller re-establishes leadership if this
// gntd is still the Raft leader. A service that fails otherwise is logged
// and run again after serviceRestartDelay; one broken service does not
// stop the others.
func runLeaderServices(ctx context.Context, log hclog.Logger, epoch uint64, svcs []leaderService) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		once   sync.Once
		fenced error
	)
	for _, svc := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := svc.run(ctx, epoch)
				switch {
				case ctx.Err() != nil:
					return
				case errors.Is(err, jobs.ErrFenced):
					log.Warn("leader service fenced by a newer leader; stopping all", "service", svc.name, "epoch", epoch)
					once.Do(func() { fenced = err; cancel() })
					return
				case err != nil:
					log.Error("leader service failed; restarting", "service", svc.name, "error", err)
				default:
					log.Warn("leader service returned; restarting", "service", svc.name)
				}
				t := time.NewTimer(serviceRestartDelay)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
	return fenced
}
