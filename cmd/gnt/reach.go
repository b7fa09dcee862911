package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"
)

// reachLimit is how long a run waits for its first connection to any
// server before it gives up: the client fails over between addresses and
// follows jobs for minutes, but when nothing answers at all the user
// learns it at once.
var reachLimit = 3 * time.Second

// reachRecheck is how often the watch looks again, past reachLimit,
// whether the client has tried every address.
const reachRecheck = 100 * time.Millisecond

// reachWatch watches a run's connections: from the first request on, if
// no connection to any server has been made (TCP, and TLS handshake)
// within reachLimit, and every address has been tried, it cancels the run
// with an *unreachableError naming each address tried and why it failed.
// While an attempt is under way at the limit and an address is still
// untried (the one tried hangs until its dial or handshake times out),
// the watch waits for the next address: the failover to a live address
// stays. Once a connection was made the watch stays quiet: later
// failovers and long waits are the client's business.
type reachWatch struct {
	cancel    context.CancelCauseFunc
	limit     time.Duration
	servers   int       // how many addresses the client has
	pending   bool      // a connection attempt is under way
	pendingAt time.Time // when it began

	mu        sync.Mutex
	connected bool
	timer     *time.Timer
	errs      map[string]error // address -> last failure
	tried     []string         // addresses in the order first tried
	current   string           // the address the latest request went to
}

// watchReach returns ctx with the watch's connection trace and a cancel
// cause, and a stop function to call when the run ends.
func watchReach(ctx context.Context, limit time.Duration, servers int) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &reachWatch{cancel: cancel, limit: limit, servers: servers, errs: map[string]error{}}
	trace := &httptrace.ClientTrace{
		GetConn: w.start,
		DNSDone: func(i httptrace.DNSDoneInfo) {
			if i.Err != nil {
				w.fail(i.Err)
			}
		},
		GotConn:          func(httptrace.GotConnInfo) { w.ok() },
		ConnectDone:      w.connectDone,
		TLSHandshakeDone: w.tlsDone,
	}
	return httptrace.WithClientTrace(ctx, trace), func() {
		w.mu.Lock()
		if w.timer != nil {
			w.timer.Stop()
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// start runs as a request looks for a connection to hostPort: the first
// one arms the timer.
func (w *reachWatch) start(hostPort string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.current = hostPort
	w.pending, w.pendingAt = true, time.Now()
	if _, seen := w.errs[hostPort]; !seen {
		w.errs[hostPort] = nil
		w.tried = append(w.tried, hostPort)
	}
	if w.connected || w.timer != nil {
		return
	}
	w.timer = time.AfterFunc(w.limit, w.expire)
}

func (w *reachWatch) ok() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.connected = true
	w.pending = false
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *reachWatch) connectDone(_, _ string, err error) {
	if err != nil {
		w.fail(err)
	}
}

func (w *reachWatch) tlsDone(_ tls.ConnectionState, err error) {
	if err != nil {
		w.fail(fmt.Errorf("TLS handshake: %w", err))
	}
}

// fail records why the current address did not answer. The client tries
// its addresses one at a time, so the failure is the current one's (the
// dial names the resolved IP, the handshake nothing).
func (w *reachWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = false
	if w.current != "" {
		w.errs[w.current] = err
	}
}

func (w *reachWatch) expire() {
	w.mu.Lock()
	if w.connected {
		w.mu.Unlock()
		return
	}
	// An attempt under way is waited for while an address is still
	// untried, and the last address's own attempt for up to the limit:
	// a live server behind a hung one is still reached.
	if w.pending && (len(w.tried) < w.servers || time.Since(w.pendingAt) < w.limit) {
		w.timer = time.AfterFunc(reachRecheck, w.expire)
		w.mu.Unlock()
		return
	}
	ue := &unreachableError{limit: w.limit}
	for _, a := range w.tried {
		ue.addrs = append(ue.addrs, a)
		ue.errs = append(ue.errs, w.errs[a])
	}
	w.mu.Unlock()
	w.cancel(ue)
}

// unreachableError is a run in which no server could be reached.
type unreachableError struct {
	limit time.Duration
	addrs []string
	errs  []error // per address; nil when it neither answered nor failed
}

// Error implements error.
func (e *unreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no server answered within %v; tried %s", e.limit, strings.Join(e.addrs, ", "))
	for i, a := range e.addrs {
		why := "no answer"
		if e.errs[i] != nil {
			why = e.errs[i].Error()
		}
		fmt.Fprintf(&b, "\n  %s: %s", a, why)
	}
	b.WriteString("\n(is gntd running there? the addresses come from --server, $GNT_SERVER or ~/.config/gnt/servers)")
	return b.String()
}

// Unwrap gives the failures of the addresses, so that the report can
// recognise a certificate the client does not trust.
func (e *unreachableError) Unwrap() []error {
	var out []error
	for _, err := range e.errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// asUnreachable returns the run's cause when it was cancelled because no
// server answered.
func asUnreachable(ctx context.Context) (*unreachableError, bool) {
	var ue *unreachableError
	ok := errors.As(context.Cause(ctx), &ue)
	return ue, ok
}
