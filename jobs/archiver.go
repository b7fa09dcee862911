package jobs

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
)

// DefaultArchiveAge is how long finished jobs stay in the active queue
// before the leader archives them (Ganeti's watcher archives jobs older
// than six hours).
const DefaultArchiveAge = 6 * time.Hour

// Archiver moves finished jobs older than MaxAge into the archive, where
// a summary of each stays queryable, so the active queue, the state and
// its snapshots stay small. It runs on the leader; its writes carry the
// executor epoch.
type Archiver struct {
	FSM   *fsm.FSM
	Apply Applier
	Epoch uint64
	// MaxAge is the age after which a finished job is archived; zero or
	// less disables the archiver.
	MaxAge time.Duration
	// Interval between rounds; zero means MaxAge/10, at most a minute.
	Interval time.Duration
	Clock    func() time.Time
	Log      hclog.Logger
}

// Run archives old jobs every Interval until ctx ends or it is fenced.
func (a *Archiver) Run(ctx context.Context) error {
	if a.MaxAge <= 0 {
		<-ctx.Done()
		return nil
	}
	if a.Clock == nil {
		a.Clock = time.Now
	}
	if a.Log == nil {
		a.Log = hclog.NewNullLogger()
	}
	every := a.Interval
	if every <= 0 {
		every = min(a.MaxAge/10, time.Minute)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if err := a.round(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// round archives what is old enough; it writes only when there is
// something to archive.
func (a *Archiver) round(ctx context.Context) error {
	now := a.Clock()
	cut := now.Add(-a.MaxAge).UnixNano()
	due := false
	a.FSM.Read(func(s *fsm.State, _ uint64) {
		// Finished is in finishing order, so the oldest comes first.
		for _, id := range s.Finished {
			if j := s.Jobs[id]; j != nil && j.EndTS != nil {
				due = j.EndTS.UnixNano() < cut
				break
			}
		}
	})
	if !due {
		return nil
	}
	resp, _, err := a.Apply.Apply(ctx, fsm.JobArchive{Now: now.UnixNano(), Epoch: a.Epoch, OlderThan: int64(a.MaxAge)})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		a.Log.Warn("archiving jobs", "error", err)
		return nil
	}
	if resp.Err != nil {
		if resp.Err.Code == fsm.CodeFenced {
			return ErrFenced
		}
		a.Log.Warn("archiving jobs refused", "error", resp.Err)
		return nil
	}
	if len(resp.JobIDs) > 0 {
		a.Log.Info("archived finished jobs", "jobs", len(resp.JobIDs), "older_than", a.MaxAge)
	}
	return nil
}
