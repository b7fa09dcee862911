package rpc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultAuthCatchUp is how long a follower waits, at most once per
// request, for its replica to apply the users the leader had when the
// request came, before it refuses credentials its replica does not know
// (ServerOptions.AuthCatchUp).
const DefaultAuthCatchUp = time.Second

// A RAPI user added (or given a new password, or write access) through
// one candidate is known to the leader as soon as the change is answered,
// but a follower's replica applies it a few milliseconds later. A client
// that uses the user on a follower at once must not be refused for that:
// a follower that would refuse credentials asks the leader for its applied
// index (the X-Gnt-Index of GET /version, which covers every change the
// leader has answered) and waits, bounded, until its replica has applied
// as much, then checks once more.
//
// The question costs the leader little (no authentication, no state), and
// a flood of wrong credentials cannot multiply it: a follower has at most
// one question in flight, and every request that comes while it is shares
// the next one. The wait is bounded by AuthCatchUp and the request's
// context; a wrong password is hashed a second time only when the user's
// record changed during the wait, and each refusal is counted once.

// leaderIndexProbe asks the leader for its applied index, one question
// at a time. Each caller gets the answer of a question sent after it
// called: the one it starts, or the one after the question in flight.
type leaderIndexProbe struct {
	mu   sync.Mutex
	cur  *indexAsk // in flight
	next *indexAsk // sent when cur is answered
}

// indexAsk is one question to the leader; done closes when idx and err
// are set.
type indexAsk struct {
	done chan struct{}
	idx  uint64
	err  error
}

// get returns the leader's applied index from a question sent after the
// call, or an error when it failed or ctx ended first. ask sends one
// question; it runs in a goroutine of its own, with a context that ends
// after timeout.
func (p *leaderIndexProbe) get(ctx context.Context, timeout time.Duration, ask func(context.Context) (uint64, error)) (uint64, error) {
	p.mu.Lock()
	var a *indexAsk
	switch {
	case p.cur == nil:
		a = &indexAsk{done: make(chan struct{})}
		p.cur = a
		go p.run(a, timeout, ask)
	case p.next != nil:
		a = p.next
	default:
		a = &indexAsk{done: make(chan struct{})}
		p.next = a
	}
	p.mu.Unlock()
	select {
	case <-a.done:
		return a.idx, a.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run sends a, then the question that waited for it, if any.
func (p *leaderIndexProbe) run(a *indexAsk, timeout time.Duration, ask func(context.Context) (uint64, error)) {
	for a != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		a.idx, a.err = ask(ctx)
		cancel()
		close(a.done)
		p.mu.Lock()
		a, p.cur, p.next = p.next, p.next, nil
		p.mu.Unlock()
	}
}

// leaderAppliedIndex asks the leader at addr for its applied index.
func (s *Server) leaderAppliedIndex(ctx context.Context, addr string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.baseURL(addr)+"/version", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.fwd.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("the leader answered GET /version with %s", resp.Status)
	}
	idx, err := strconv.ParseUint(resp.Header.Get(HeaderIndex), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the leader's %s header %q: %w", HeaderIndex, resp.Header.Get(HeaderIndex), err)
	}
	return idx, nil
}

// authCatchUp waits until the local replica has applied everything the
// leader had applied when asked, bounded by s.authWait and ctx (during an
// election, first for a leader to be known). It returns whether the
// replica is now past index, the index the refused credentials were
// checked at; the leader never waits.
func (s *Server) authCatchUp(ctx context.Context, index uint64) bool {
	addr, self := s.b.Leader()
	f := s.b.FSM()
	if self || f == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.authWait)
	defer cancel()
	for addr == "" {
		select {
		case <-ctx.Done():
			return f.Index() > index
		case <-time.After(leaderPoll):
		}
		if addr, self = s.b.Leader(); self {
			return f.Index() > index
		}
	}
	target, err := s.auth.leaderIndex.get(ctx, s.authWait, func(ctx context.Context) (uint64, error) {
		return s.leaderAppliedIndex(ctx, addr)
	})
	if err != nil {
		s.log.Debug("asking the leader for its index to check credentials", "leader", addr, "error", err)
		return f.Index() > index
	}
	if target > 0 {
		f.WaitIndex(ctx, target-1)
	}
	return f.Index() > index
}
