package jobs

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// IncarnationProbe asks a node's gntd for its incarnation: the random id
// it drew when it started, which changes when it restarts.
type IncarnationProbe interface {
	Incarnation(ctx context.Context, n *fsm.Node) (string, error)
}

// SurvivorProbeTimeout bounds how long an executor waits for the earlier
// leaders of a job it resumes to tell their incarnation; one that has
// not answered by then counts as dead.
const SurvivorProbeTimeout = 2 * time.Second

// survivors returns the epochs among the job's suspect attempts (the
// leader deaths the poison-job guard would count, fsm.Job.SuspectAttempts)
// whose leaders still run with the incarnation their attempt recorded:
// they stepped down and did not die of the job. It asks only when the
// suspects would fail the job, and asks each leader at once, for at most
// SurvivorProbeTimeout; no answer, another incarnation or an attempt
// without one (an older build's) leaves an epoch a death.
func (e *Executor) survivors(ctx context.Context, job *fsm.Job) []uint64 {
	suspects := job.SuspectAttempts(e.Epoch)
	if len(suspects) < fsm.PoisonDeaths || e.Incarnations == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, SurvivorProbeTimeout)
	defer cancel()
	var (
		mu  sync.Mutex
		out []uint64
		wg  sync.WaitGroup
	)
	for _, a := range suspects {
		var n *fsm.Node
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if x := s.LookupNode(a.Node); x != nil {
				c := *x
				n = &c
			}
		})
		if a.Incarnation == "" || n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			inc, err := e.Incarnations.Incarnation(ctx, n)
			if err != nil || inc != a.Incarnation {
				e.Log.Info("poison-job guard: an earlier leader of the job did not live on", "job", job.ID,
					"epoch", a.Epoch, "node", a.Node, "incarnation", inc, "error", err)
				return
			}
			mu.Lock()
			out = append(out, a.Epoch)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(out) > 0 {
		slices.Sort(out)
		e.Log.Info("poison-job guard: earlier leaders of the job stepped down and live on", "job", job.ID, "epochs", out)
	}
	return out
}
