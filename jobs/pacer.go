package jobs

import (
	"context"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/jobs/locking"
)

// Pacer lets the leader's applier hold the next Raft entry back briefly
// while the executor reacts to the last one, so the updates of jobs that
// entry queued ride the entry right after it instead of the one after
// that.
//
// Without it, the applier cuts the next entry the moment the last one is
// applied, from the submissions queued meanwhile; the executor, woken by
// the same apply, is behind it (0.6–1.5 ms under load, mostly waiting for
// a core behind the request handlers the same apply woke), so a job that
// finishes at once (a no-op, a step with nothing to wait for) waits a
// whole entry's commit before its record is written, then a second one
// for that record to commit.
//
// The executor tells the pacer, after each pick, the applied index it
// picked at and how many jobs it launched; each launched job holds a
// token until it has queued its first command with the applier, or ends,
// waits for a lock, or sleeps in a step. Hold returns when the executor has reacted to an
// index and owes nothing for it, or when the bound runs out: a job whose
// first step takes long only costs the entry after its launch that bound.
type Pacer struct {
	mu     sync.Mutex
	active bool
	gen    uint64        // the applied index of the executor's last pick
	owed   int           // tokens of generation gen not yet given back
	full   bool          // every executor slot is taken: nothing to launch
	ch     chan struct{} // closed at the next change of the fields above
}

// NewPacer returns a pacer no executor reports to yet.
func NewPacer() *Pacer { return &Pacer{ch: make(chan struct{})} }

// changed wakes Hold; p.mu is held.
func (p *Pacer) changed() {
	close(p.ch)
	p.ch = make(chan struct{})
}

// Hold waits until the executor has reacted to index (picked at it or
// later) and every job it launched then has queued its first command, or
// until max has passed, or ctx ends. It returns at once when no executor
// runs. It reports whether the executor caught up (false: max ran out or
// ctx ended).
func (p *Pacer) Hold(ctx context.Context, index uint64, max time.Duration) bool {
	if p == nil {
		return true
	}
	var timer *time.Timer
	for {
		p.mu.Lock()
		// With every slot taken the executor does not look at the
		// state again until a job ends: only the jobs it launched count.
		done := !p.active || (p.gen >= index || p.full) && p.owed == 0
		ch := p.ch
		p.mu.Unlock()
		if done {
			return true
		}
		if timer == nil {
			timer = time.NewTimer(max)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// start marks an executor running; stop marks it gone.
func (p *Pacer) start() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.active, p.gen, p.owed, p.full = true, 0, 0, false
	p.changed()
	p.mu.Unlock()
}

func (p *Pacer) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.active = false
	p.changed()
	p.mu.Unlock()
}

// picked records a pick at applied index gen that launched n jobs, with
// every slot taken afterwards when full is set. Tokens of earlier picks
// no longer count.
func (p *Pacer) picked(gen uint64, n int, full bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	switch {
	case gen > p.gen:
		p.gen, p.owed = gen, n
	case gen == p.gen:
		p.owed += n
	}
	p.full = full
	p.changed()
	p.mu.Unlock()
}

// token is what one launched job gives back once.
type token struct {
	p    *Pacer
	gen  uint64
	once sync.Once
}

type tokenKey struct{}

// withToken gives ctx a token of generation gen, given back before the
// job waits for a lock too.
func (p *Pacer) withToken(ctx context.Context, gen uint64) context.Context {
	if p == nil {
		return ctx
	}
	t := &token{p: p, gen: gen}
	ctx = locking.WithWaitHook(ctx, t.giveBack)
	return context.WithValue(ctx, tokenKey{}, t)
}

// GiveBack returns the token ctx carries, if any, once: call it when the
// job has queued a command, ends, or is about to wait.
func GiveBack(ctx context.Context) {
	if t, _ := ctx.Value(tokenKey{}).(*token); t != nil {
		t.giveBack()
	}
}

func (t *token) giveBack() {
	t.once.Do(func() {
		p := t.p
		p.mu.Lock()
		if t.gen == p.gen && p.owed > 0 {
			p.owed--
			if p.owed == 0 {
				p.changed()
			}
		}
		p.mu.Unlock()
	})
}
