package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/locking"
)

// holdReturns runs p.Hold(index, max) and returns the channel that gets its
// result.
func holdReturns(p *Pacer, index uint64, max time.Duration) <-chan bool {
	ch := make(chan bool, 1)
	go func() { ch <- p.Hold(context.Background(), index, max) }()
	return ch
}

// stillHeld fails the test if Hold has returned (a wait that must not end
// yet; a slow machine only makes it wait longer).
func stillHeld(t *testing.T, ch <-chan bool, what string) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("%s: Hold returned %v, want it still waiting", what, got)
	case <-time.After(30 * time.Millisecond):
	}
}

func wantHold(t *testing.T, ch <-chan bool, want bool, what string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: Hold returned %v, want %v", what, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Hold did not return", what)
	}
}

// TestPacerHold: Hold waits for a pick at the index and for every token of
// that pick, and for nothing else.
func TestPacerHold(t *testing.T) {
	const long = time.Hour
	var none *Pacer
	wantHold(t, holdReturns(none, 5, long), true, "nil pacer")
	p := NewPacer()
	wantHold(t, holdReturns(p, 5, long), true, "no executor")

	p.start()
	ch := holdReturns(p, 5, long)
	stillHeld(t, ch, "before any pick")
	p.picked(4, 0, false)
	stillHeld(t, ch, "after a pick at an older index")
	tokens := []context.Context{p.withToken(context.Background(), 5), p.withToken(context.Background(), 5)}
	p.picked(5, 2, false)
	stillHeld(t, ch, "two tokens out")
	GiveBack(tokens[0])
	GiveBack(tokens[0]) // a token counts once
	stillHeld(t, ch, "one token out")
	GiveBack(tokens[1])
	wantHold(t, ch, true, "every token back")

	// A second pick at the same index adds its tokens; a later pick
	// drops the earlier ones.
	same := p.withToken(context.Background(), 5)
	p.picked(5, 1, false)
	ch = holdReturns(p, 5, long)
	stillHeld(t, ch, "second pick's token out")
	GiveBack(same)
	wantHold(t, ch, true, "second pick's token back")
	old := p.withToken(context.Background(), 6)
	p.picked(6, 1, false)
	p.picked(7, 1, false)
	GiveBack(old) // of index 6: does not pay for index 7's
	ch = holdReturns(p, 7, long)
	stillHeld(t, ch, "token of the later pick out")
	p.picked(8, 0, true)
	wantHold(t, ch, true, "every slot taken")
	last := p.withToken(context.Background(), 9)
	p.picked(9, 1, true)
	ch = holdReturns(p, 10, long)
	stillHeld(t, ch, "every slot taken by a pick whose token is out")
	GiveBack(last)
	wantHold(t, ch, true, "every slot taken, every token back")

	p.picked(11, 1, false)
	wantHold(t, holdReturns(p, 11, 20*time.Millisecond), false, "bound ran out")
	p.stop()
	wantHold(t, holdReturns(p, 11, long), true, "executor stopped")
}

// TestPacerLockWait: a launched job gives its token back when it waits for
// a lock, and a job that takes its locks at once does not.
func TestPacerLockWait(t *testing.T) {
	p := NewPacer()
	p.start()
	m := locking.NewManager()
	bgl := []locking.Request{{Level: locking.LevelCluster, Names: []string{"BGL"}, Mode: locking.Exclusive}}
	free := p.withToken(context.Background(), 3)
	busy := p.withToken(context.Background(), 3)
	p.picked(3, 2, false)
	ch := holdReturns(p, 3, time.Hour)
	if err := m.Acquire(free, 1, 0, bgl, time.Second); err != nil {
		t.Fatal(err)
	}
	stillHeld(t, ch, "a job took its lock at once")
	GiveBack(free)
	stillHeld(t, ch, "a job has not started waiting")
	waited := make(chan error, 1)
	go func() { waited <- m.Acquire(busy, 2, 0, bgl, time.Hour) }()
	wantHold(t, ch, true, "the other job waits for the lock")
	m.ReleaseAll(1)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

// gated is an applier that queues commands until it is opened, like the
// leader's applier while an entry is being committed: a command counts as
// queued (its token is given back) before it is applied.
type gated struct {
	d    *direct
	open chan struct{}
}

func (g *gated) Apply(ctx context.Context, c fsm.Command) (fsm.Response, uint64, error) {
	GiveBack(ctx)
	select {
	case <-g.open:
	case <-ctx.Done():
		return fsm.Response{}, 0, ctx.Err()
	}
	return g.d.Apply(ctx, c)
}

// TestPacerExecutor: the executor reports its picks, and every job it
// launches gives its token back by queuing its first command, by
// sleeping, or by waiting for a lock, so Hold ends without its bound.
func TestPacerExecutor(t *testing.T) {
	d, epoch := setup(t)
	g := &gated{d: d, open: make(chan struct{})}
	p := NewPacer()
	m := locking.NewManager()
	if err := m.Acquire(context.Background(), 999, 0, []locking.Request{{Level: locking.LevelCluster, Names: []string{"BGL"}, Mode: locking.Exclusive}}, time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: g, Epoch: epoch, Concurrency: 8, Locks: m, Strategy: fastStrategy, Pacer: p}).Run(ctx)
	}()
	defer func() {
		cancel()
		close(g.open)
		<-done
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		active := p.active
		p.mu.Unlock()
		if active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the executor did not start")
		}
	}
	ids := submitMany(t, d,
		[]string{`{"OP_ID":"OP_TEST_DELAY","duration":0}`},
		[]string{`{"OP_ID":"OP_TEST_DELAY","duration":3600}`},
		[]string{`{"OP_ID":"OP_TEST_DELAY","duration":0,"no_locks":false}`},
	)
	index := d.f.QueuedAt()
	if index == 0 {
		t.Fatal("QueuedAt is 0 after jobs were queued")
	}
	wantHold(t, holdReturns(p, index, 5*time.Second), true, "three jobs launched")
	d.f.Read(func(s *fsm.State, _ uint64) {
		for _, id := range ids {
			if st := s.Jobs[id].Status; st != fsm.StatusQueued {
				t.Errorf("job %d is %s: the gate let an update through", id, st)
			}
		}
	})
}
