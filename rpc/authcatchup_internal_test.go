package rpc

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestLeaderIndexProbe: one question to the leader at a time; callers
// that come while one is in flight share the next, which is sent after
// it, so each gets an answer asked after it called; a caller whose
// context ends stops waiting.
func TestLeaderIndexProbe(t *testing.T) {
	var p leaderIndexProbe
	var mu sync.Mutex
	asked, inFlight, most := 0, 0, 0
	gate := make(chan struct{})
	ask := func(context.Context) (uint64, error) {
		mu.Lock()
		asked++
		n := uint64(asked)
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		if n == 1 {
			<-gate
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return n, nil
	}
	first := make(chan uint64)
	go func() {
		idx, _ := p.get(context.Background(), time.Minute, ask)
		first <- idx
	}()
	// Until the first question is in flight, the others would start it.
	p.until(func() bool { return p.cur != nil })
	const later = 20
	got := make(chan uint64, later)
	for range later {
		go func() {
			idx, _ := p.get(context.Background(), time.Minute, ask)
			got <- idx
		}()
	}
	p.until(func() bool { return p.next != nil })
	// A caller whose context ends stops waiting.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.get(ctx, time.Minute, ask); err == nil {
		t.Error("a caller with an ended context got an answer")
	}
	// Release the first question; the later callers get the next.
	close(gate)
	if idx := <-first; idx != 1 {
		t.Errorf("the first caller got the answer of question %d", idx)
	}
	for range later {
		if idx := <-got; idx < 2 {
			t.Errorf("a caller that came while question 1 was in flight got its answer")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("%d questions were in flight at once", most)
	}
}

// until polls cond under the probe's lock until it holds.
func (p *leaderIndexProbe) until(cond func() bool) {
	for {
		p.mu.Lock()
		ok := cond()
		p.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
