package transport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Errors returned by connections and dials that Faults interferes with.
var (
	// ErrBlocked is returned by a dial to, and by reads and writes on a
	// connection with, a blocked peer.
	ErrBlocked = errors.New("transport: peer blocked by fault injection")
	// ErrDropped is returned by a write that Faults dropped.
	ErrDropped = errors.New("transport: write dropped by fault injection")
)

// Faults is a set of network faults that the stream layers wrapped with it
// (WrapStreamLayer) apply to their connections. It is meant for tests and
// chaos runs: give each node its own Faults, so that isolating a node is
// BlockAll on its Faults, or Block of its address on every other node's.
//
// Peers are identified by IP (see the package comment): Block of
// "127.0.0.12:1817" cuts every connection to or from 127.0.0.12, whatever
// the ports. A peer given by host name rather than IP matches only dials to
// that name.
//
// The zero value is ready to use and has no faults. A Faults is safe for
// concurrent use and may be shared by several wrapped layers.
type Faults struct {
	mu       sync.Mutex
	blockAll bool
	blocked  map[string]bool // peer keys, see peerKey
	cutTo    map[string]bool // peer keys whose inbound half is cut (CutTo)
	delay    time.Duration
	dropRate float64
	rand     func() float64 // nil: math/rand/v2
	conns    map[*faultConn]struct{}
}

// Block cuts peer (a Raft address, host:port, or a bare host) off: dials to
// it fail at once with ErrBlocked, connections from it are closed as soon as
// they are accepted, and open connections to or from it are closed, so that
// their pending and later reads and writes fail. A blocked dial fails at
// once, like a refused connection; it does not hang the way a dropped SYN
// would.
func (f *Faults) Block(peer string) {
	key := peerKey(peer)
	f.mu.Lock()
	if f.blocked == nil {
		f.blocked = make(map[string]bool)
	}
	f.blocked[key] = true
	victims := f.matchingLocked(func(c *faultConn) bool { return c.has(key) })
	f.mu.Unlock()
	closeAll(victims)
}

// Unblock undoes Block(peer) and CutTo(peer). It does not undo BlockAll;
// Heal does.
func (f *Faults) Unblock(peer string) {
	key := peerKey(peer)
	f.mu.Lock()
	delete(f.blocked, key)
	delete(f.cutTo, key)
	victims := f.matchingLocked(func(c *faultConn) bool { return c.has(key) && c.lost.Load() })
	f.mu.Unlock()
	closeAll(victims)
}

// CutTo makes a one-way cut: everything this node sends to peer is lost,
// while what peer sends still arrives. Dials to peer fail with ErrBlocked
// (as a SYN that never arrives would, but at once) and connections this
// node dialed to peer are closed; on connections peer dialed, this node's
// writes are discarded while reporting success, so peer's requests are
// received and acted on but their answers never reach it (peer's reads
// wait until their deadline). It is the asymmetric case that a symmetric
// Block cannot show: a node that hears its peer but cannot be heard.
func (f *Faults) CutTo(peer string) {
	key := peerKey(peer)
	f.mu.Lock()
	if f.cutTo == nil {
		f.cutTo = make(map[string]bool)
	}
	f.cutTo[key] = true
	victims := f.matchingLocked(func(c *faultConn) bool { return c.dialed && c.has(key) })
	f.mu.Unlock()
	closeAll(victims)
}

// BlockAll blocks every peer, as Block does for one, isolating the node.
func (f *Faults) BlockAll() {
	f.mu.Lock()
	f.blockAll = true
	victims := f.matchingLocked(func(*faultConn) bool { return true })
	f.mu.Unlock()
	closeAll(victims)
}

// Heal removes every fault: blocks, cuts, BlockAll, delay and drop rate,
// and closes the connections that lost writes to a cut (their streams are
// broken; Raft dials again at once). The random source set by SetRand
// stays.
func (f *Faults) Heal() {
	f.mu.Lock()
	f.blockAll = false
	f.blocked = nil
	f.cutTo = nil
	f.delay = 0
	f.dropRate = 0
	victims := f.matchingLocked(func(c *faultConn) bool { return c.lost.Load() })
	f.mu.Unlock()
	closeAll(victims)
}

// SetDelay adds d of latency before each write on every connection; 0
// removes it. Reads are not delayed: the delay is paid once, by the sender.
func (f *Faults) SetDelay(d time.Duration) {
	f.mu.Lock()
	f.delay = max(d, 0)
	f.mu.Unlock()
}

// SetDropRate makes each write fail with probability p (clamped to [0, 1]):
// the write returns ErrDropped and the connection is closed. TCP never loses
// bytes silently; packet loss that TCP cannot repair shows up as a broken
// connection, and dropping bytes from a stream would only desynchronise its
// framing. Raft sees a failed RPC and dials again.
func (f *Faults) SetDropRate(p float64) {
	f.mu.Lock()
	f.dropRate = min(max(p, 0), 1)
	f.mu.Unlock()
}

// SetRand sets the random source of SetDropRate: r returns a number in
// [0, 1). It is called with Faults' lock held, so it need not be safe for
// concurrent use (a (*rand.Rand).Float64 with a fixed seed will do). nil
// restores the default source, math/rand/v2.
func (f *Faults) SetRand(r func() float64) {
	f.mu.Lock()
	f.rand = r
	f.mu.Unlock()
}

// blockedLocked reports whether a connection with these peer keys is cut.
func (f *Faults) blockedLocked(keys []string) bool {
	if f.blockAll {
		return true
	}
	for _, k := range keys {
		if f.blocked[k] {
			return true
		}
	}
	return false
}

func (f *Faults) isBlocked(keys []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blockedLocked(keys)
}

// isCut reports whether what this node sends on a connection with these
// peer keys is lost (CutTo).
func (f *Faults) isCut(keys []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if f.cutTo[k] {
			return true
		}
	}
	return false
}

// track wraps c and registers it, unless its peer is blocked (or, for a
// connection this node dialed, cut off by CutTo). Checking and registering
// under one lock means that a Block either sees the connection or is seen by
// it.
func (f *Faults) track(c net.Conn, keys []string, dialed bool) (*faultConn, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blockedLocked(keys) {
		return nil, false
	}
	if dialed {
		for _, k := range keys {
			if f.cutTo[k] {
				return nil, false
			}
		}
	}
	fc := &faultConn{Conn: c, f: f, keys: keys, dialed: dialed, closed: make(chan struct{})}
	if f.conns == nil {
		f.conns = make(map[*faultConn]struct{})
	}
	f.conns[fc] = struct{}{}
	return fc, true
}

func (f *Faults) forget(c *faultConn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

func (f *Faults) matchingLocked(match func(*faultConn) bool) []*faultConn {
	var out []*faultConn
	for c := range f.conns {
		if match(c) {
			out = append(out, c)
		}
	}
	return out
}

// beforeWrite returns the delay to add and whether to drop this write.
func (f *Faults) beforeWrite() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	drop := false
	if f.dropRate > 0 {
		r := f.rand
		if r == nil {
			r = rand.Float64
		}
		drop = r() < f.dropRate
	}
	return f.delay, drop
}

func closeAll(cs []*faultConn) {
	for _, c := range cs {
		c.Close()
	}
}

// peerKey turns a Raft address, or a bare host, into the key Faults matches
// on: the IP in canonical form, or the host name as given.
func peerKey(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.String()
	}
	return host
}

// faultConn is a connection subject to a Faults.
type faultConn struct {
	net.Conn
	f      *Faults
	keys   []string // who the peer is: remote IP, and the dialed host if named
	dialed bool     // this node dialed it (else it was accepted)
	// lost is set once a write was discarded by a one-way cut: the
	// stream is missing bytes its peer waits for, so the connection is
	// closed when the cut is lifted rather than left for the peer's
	// read deadline.
	lost   atomic.Bool
	once   sync.Once
	closed chan struct{}
}

func (c *faultConn) has(key string) bool {
	for _, k := range c.keys {
		if k == key {
			return true
		}
	}
	return false
}

func (c *faultConn) Read(b []byte) (int, error) {
	if c.f.isBlocked(c.keys) {
		c.Close()
		return 0, ErrBlocked
	}
	n, err := c.Conn.Read(b)
	if err != nil && c.f.isBlocked(c.keys) {
		err = ErrBlocked
	}
	return n, err
}

func (c *faultConn) Write(b []byte) (int, error) {
	delay, drop := c.f.beforeWrite()
	if drop {
		c.Close()
		return 0, ErrDropped
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
			if c.f.isBlocked(c.keys) {
				return 0, ErrBlocked
			}
			return 0, net.ErrClosed
		}
	}
	if c.f.isBlocked(c.keys) {
		c.Close()
		return 0, ErrBlocked
	}
	if c.f.isCut(c.keys) {
		c.lost.Store(true)
		return len(b), nil // lost on the way, unknown to the sender
	}
	n, err := c.Conn.Write(b)
	if err != nil && c.f.isBlocked(c.keys) {
		err = ErrBlocked
	}
	return n, err
}

func (c *faultConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.f.forget(c)
	})
	return c.Conn.Close()
}

// faultLayer is a raft.StreamLayer whose connections are subject to a Faults.
type faultLayer struct {
	inner raft.StreamLayer
	f     *Faults
}

// WrapStreamLayer returns inner with f applied to the connections it dials
// and accepts. A dialed connection's peer is the dialed address and the
// connection's remote IP; an accepted connection's peer is its remote IP only,
// its remote port being the dialer's ephemeral port. Peers that dial from
// their own IP (as StreamLayer does) can therefore be blocked by their Raft
// address on the accepting side too.
func WrapStreamLayer(inner raft.StreamLayer, f *Faults) raft.StreamLayer {
	return &faultLayer{inner: inner, f: f}
}

// Accept returns the next connection from a peer that is not blocked;
// connections from blocked peers are closed at once and not returned, so that
// the caller's accept loop does not see errors and back off.
func (l *faultLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.inner.Accept()
		if err != nil {
			return nil, err
		}
		fc, ok := l.f.track(c, []string{peerKey(c.RemoteAddr().String())}, false)
		if !ok {
			c.Close()
			continue
		}
		return fc, nil
	}
}

func (l *faultLayer) Close() error { return l.inner.Close() }

func (l *faultLayer) Addr() net.Addr { return l.inner.Addr() }

func (l *faultLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	keys := []string{peerKey(string(address))}
	if l.f.isBlocked(keys) || l.f.isCut(keys) {
		return nil, fmt.Errorf("dial %s: %w", address, ErrBlocked)
	}
	c, err := l.inner.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	if ip := peerKey(c.RemoteAddr().String()); ip != keys[0] {
		keys = append(keys, ip)
	}
	fc, ok := l.f.track(c, keys, true)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", address, ErrBlocked)
	}
	return fc, nil
}
