// Package netlimit bounds what one client can take of a TCP server: a
// net.Listener wrapper that caps the connections open at once, overall and
// per client IP address, closing an idle kept-alive connection to make
// room or else the new connection as soon as it is accepted; the timeouts
// and header limit of an http.Server; and raising the process's open-file
// limit.
//
// The wrapper is a plain net.Listener, so that TLS goes on top of it
// (tls.NewListener(limiter.Wrap(ln), cfg)): a connection over a cap is
// refused before any handshake is spent on it. It imports nothing of the
// project.
package netlimit

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Defaults of Limits: well below the descriptors a gntd has (servers
// raise RLIMIT_NOFILE to its hard limit, commonly 20,000 and more), and
// per client address far above what one host of the cluster or one
// operator's tools open (a follower forwards writes to the leader over a
// few connections; a load generator of 256 clients opens 256).
const (
	DefaultMaxConns      = 4096
	DefaultMaxConnsPerIP = 512
	// DefaultLogEvery is the shortest time between two log lines about
	// refused connections; the refusals in between are summed up.
	DefaultLogEvery = 10 * time.Second
)

// Limits are the caps of a Limiter. Zero means the default; a negative
// value means no cap.
type Limits struct {
	// MaxConns caps the connections open at once through the Limiter.
	MaxConns int
	// MaxConnsPerIP caps those of them from one client IP address.
	MaxConnsPerIP int
}

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxConnsPerIP == 0 {
		l.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	return l
}

// Validate says what is wrong with explicit caps: a per-address cap above
// the overall one can never be reached, which is most likely a mistake.
func (l Limits) Validate() error {
	l = l.WithDefaults()
	if l.MaxConns > 0 && l.MaxConnsPerIP > l.MaxConns {
		return fmt.Errorf("the per-address connection cap (%d) is above the overall cap (%d)", l.MaxConnsPerIP, l.MaxConns)
	}
	return nil
}

// Reason is why a connection was refused.
type Reason int

// The reasons a connection is refused.
const (
	// OverAll: MaxConns connections were open.
	OverAll Reason = iota
	// OverPerIP: MaxConnsPerIP connections from the same address were open.
	OverPerIP
	numReasons
)

// String names the reason as metrics label it.
func (r Reason) String() string {
	switch r {
	case OverAll:
		return "max_conns"
	case OverPerIP:
		return "max_conns_per_ip"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// Options are the optional parts of a Limiter.
type Options struct {
	// Name says which server the log lines are about ("api").
	Name string
	// Logf receives the log lines about refused connections, at most one
	// per LogEvery; the refusals meanwhile are counted in the next line
	// (or in the one Close writes). Default: no log.
	Logf func(format string, args ...any)
	// LogEvery is the shortest time between two lines; default
	// DefaultLogEvery.
	LogEvery time.Duration
	// OnRefuse, when set, is called for each refused connection, outside
	// the Limiter's lock.
	OnRefuse func(r Reason, addr netip.Addr)
	// Exempt, when set, says which client addresses the per-address cap
	// does not apply to (the cluster's own hosts); their connections
	// still count in the overall cap. It is called on every accept and
	// must be quick.
	Exempt func(addr netip.Addr) bool
	// Now is the clock of the log's rate limit; default time.Now.
	Now func() time.Time
}

// Stats are a Limiter's counters.
type Stats struct {
	// Open is the number of connections open now (Idle of them between
	// two requests); Refused counts the connections refused since the
	// Limiter was made, by Reason, and Evicted the idle ones closed to
	// make room for a new one.
	Open, Idle int
	Refused    [numReasons]uint64
	Evicted    [numReasons]uint64
	// MaxConns and MaxConnsPerIP are the caps in force (-1: none).
	MaxConns, MaxConnsPerIP int
}

// Limiter counts the open connections of the listeners it wraps (one
// server may listen again, as maintd does at each leadership, and keep its
// counters). Its methods are safe for concurrent use.
type Limiter struct {
	lim  Limits
	opts Options

	mu      sync.Mutex
	open    int
	perIP   map[netip.Addr]int
	refused [numReasons]uint64
	evicted [numReasons]uint64
	// idle holds the connections ConnState saw idle, oldest first, and
	// idleByIP the same by client address.
	idle     list.List
	idleByIP map[netip.Addr]*list.List

	// The log's rate limit: when the last line was written, and what was
	// refused since, by reason, with the last address.
	lastLog time.Time
	pending [numReasons]uint64
	lastIP  netip.Addr
	timer   *time.Timer
}

// New returns a Limiter with the given caps.
func New(lim Limits, opts Options) *Limiter {
	if opts.LogEvery <= 0 {
		opts.LogEvery = DefaultLogEvery
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Limiter{lim: lim.WithDefaults(), opts: opts, perIP: map[netip.Addr]int{}, idleByIP: map[netip.Addr]*list.List{}}
}

// Limits returns the caps in force, defaults filled in.
func (l *Limiter) Limits() Limits { return l.lim }

// Stats returns the counters.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.open, Idle: l.idle.Len(), Refused: l.refused, Evicted: l.evicted, MaxConns: l.lim.MaxConns, MaxConnsPerIP: l.lim.MaxConnsPerIP}
}

// Wrap returns a listener that accepts from ln within the Limiter's caps.
// When a cap is reached and a connection it counts is idle (see
// ConnState), the oldest such (of the same address for the per-address
// cap) is closed to make room: a kept-alive connection a client no longer
// uses must not lock out its next one. Otherwise Accept closes the new
// connection at once (with a reset, so that the refusal costs neither
// side a TIME_WAIT socket) and goes on to the next; a connection it
// returns frees its place when closed. A nil Limiter returns ln itself.
func (l *Limiter) Wrap(ln net.Listener) net.Listener {
	if l == nil {
		return ln
	}
	return &listener{Listener: ln, l: l}
}

// Flush writes the log line of the refusals not logged yet, if any.
func (l *Limiter) Flush() {
	l.mu.Lock()
	line, args := l.summaryLocked()
	l.mu.Unlock()
	if line != "" && l.opts.Logf != nil {
		l.opts.Logf(line, args...)
	}
}

// addrOf returns the IP address of a connection's remote end; the zero
// Addr for a connection that has none (a Unix socket).
func addrOf(c net.Conn) netip.Addr {
	var ap netip.AddrPort
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		if a == nil {
			return netip.Addr{}
		}
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.Addr{}
		}
	}
	return ap.Addr().Unmap()
}

// admit takes a place for c, from addr, closing an idle connection to
// make room if need be, or says why not.
func (l *Limiter) admit(c net.Conn, addr netip.Addr) (admitted *conn, why Reason) {
	perIP := l.lim.MaxConnsPerIP > 0 && !(l.opts.Exempt != nil && l.opts.Exempt(addr))
	l.mu.Lock()
	needAll := l.lim.MaxConns > 0 && l.open >= l.lim.MaxConns
	needIP := perIP && l.perIP[addr] >= l.lim.MaxConnsPerIP
	ipIdle := l.idleByIP[addr]
	switch {
	case needAll && l.idle.Len() == 0:
		why = OverAll
	case needIP && (ipIdle == nil || ipIdle.Len() == 0):
		why = OverPerIP
	default:
		var victim *conn
		if needIP {
			// The oldest idle one of this address frees an overall
			// place too.
			victim = ipIdle.Front().Value.(*conn)
			l.evicted[OverPerIP]++
		} else if needAll {
			victim = l.idle.Front().Value.(*conn)
			l.evicted[OverAll]++
		}
		if victim != nil {
			l.releaseLocked(victim)
		}
		l.open++
		l.perIP[addr]++
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close()
		}
		return &conn{Conn: c, l: l, addr: addr}, 0
	}
	l.refused[why]++
	l.pending[why]++
	l.lastIP = addr
	var line string
	var args []any
	if now := l.opts.Now(); now.Sub(l.lastLog) >= l.opts.LogEvery {
		line, args = l.summaryLocked()
		l.lastLog = now
	} else if l.timer == nil && l.opts.Logf != nil {
		// Refusals that come within LogEvery of the last line are
		// logged when it has passed, even when no more come.
		l.timer = time.AfterFunc(l.opts.LogEvery-now.Sub(l.lastLog), func() {
			l.mu.Lock()
			l.timer = nil
			l.lastLog = l.opts.Now()
			l.mu.Unlock()
			l.Flush()
		})
	}
	l.mu.Unlock()
	if line != "" && l.opts.Logf != nil {
		l.opts.Logf(line, args...)
	}
	if l.opts.OnRefuse != nil {
		l.opts.OnRefuse(why, addr)
	}
	return nil, why
}

// ConnState is an http.Server's ConnState hook that tells the Limiter
// which of its connections wait idle between two requests (and may be
// closed to make room for a new one) and which serve one. Connections it
// does not count (of another listener) are ignored; a TLS connection is
// looked through.
func (l *Limiter) ConnState(nc net.Conn, st http.ConnState) {
	if l == nil {
		return
	}
	c := ours(nc)
	if c == nil || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.released {
		return
	}
	if st == http.StateIdle {
		if c.idleAll == nil {
			ip := l.idleByIP[c.addr]
			if ip == nil {
				ip = list.New()
				l.idleByIP[c.addr] = ip
			}
			c.idleAll, c.idleIP = l.idle.PushBack(c), ip.PushBack(c)
		}
		return
	}
	l.busyLocked(c)
}

// ours finds the connection the Limiter returned under nc (a TLS
// connection over it, say).
func ours(nc net.Conn) *conn {
	for range 8 {
		switch c := nc.(type) {
		case *conn:
			return c
		case interface{ NetConn() net.Conn }:
			nc = c.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// busyLocked takes c out of the idle lists.
func (l *Limiter) busyLocked(c *conn) {
	if c.idleAll == nil {
		return
	}
	l.idle.Remove(c.idleAll)
	if ip := l.idleByIP[c.addr]; ip != nil {
		ip.Remove(c.idleIP)
		if ip.Len() == 0 {
			delete(l.idleByIP, c.addr)
		}
	}
	c.idleAll, c.idleIP = nil, nil
}

// releaseLocked frees the place of c, once.
func (l *Limiter) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	l.busyLocked(c)
	l.open--
	if n := l.perIP[c.addr] - 1; n > 0 {
		l.perIP[c.addr] = n
	} else {
		delete(l.perIP, c.addr)
	}
}

// summaryLocked makes the log line of the pending refusals and clears
// them; "" when there are none.
func (l *Limiter) summaryLocked() (string, []any) {
	all, perIP := l.pending[OverAll], l.pending[OverPerIP]
	if all+perIP == 0 {
		return "", nil
	}
	l.pending = [numReasons]uint64{}
	return "%s: refused %d connection(s) over the cap of %d open connections and %d over the cap of %d per client address (last from %s)",
		[]any{l.name(), all, l.lim.MaxConns, perIP, l.lim.MaxConnsPerIP, l.lastIP}
}

func (l *Limiter) name() string {
	if l.opts.Name == "" {
		return "listener"
	}
	return l.opts.Name
}

// listener is a net.Listener within a Limiter's caps.
type listener struct {
	net.Listener
	l *Limiter
}

// Accept returns the next connection within the caps; connections over a
// cap are closed and never returned.
func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc, _ := ln.l.admit(c, addrOf(c)); lc != nil {
			return lc, nil
		}
		if tc, isTCP := c.(*net.TCPConn); isTCP {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

// Close closes the listener and logs the refusals not logged yet.
func (ln *listener) Close() error {
	err := ln.Listener.Close()
	ln.l.Flush()
	return err
}

// conn is an admitted connection; closing it frees its place once.
type conn struct {
	net.Conn
	l    *Limiter
	addr netip.Addr
	// Under l.mu: its elements in the idle lists while idle, and whether
	// its place was freed (closed, or closed to make room).
	idleAll, idleIP *list.Element
	released        bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return err
}

// CloseWrite half-closes the connection when the underlying one can
// (net/http does so before closing a connection it answered an error on).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("netlimit: the connection cannot be half-closed")
}

// NetConn returns the accepted connection itself.
func (c *conn) NetConn() net.Conn { return c.Conn }
