package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Settings of the raft.NetworkTransport made by NewNetworkTransport.
const (
	maxPool    = 3                // idle connections kept per peer
	rpcTimeout = 10 * time.Second // bound of a dial and of an RPC's I/O (scaled up for snapshots)
)

// StreamLayer is a raft.StreamLayer over TCP, optionally with TLS. Its dials
// leave from the IP it listens on, so that peers and firewall rules see the
// node's own address as the source.
type StreamLayer struct {
	listener  net.Listener
	advertise net.Addr
	localIP   net.IP // nil when bound to an unspecified address
	serverTLS *tls.Config
	clientTLS *tls.Config
	closed    func(ip string) // WithPeerClosed's callback, or nil
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// Option configures NewTCPStreamLayer.
type Option func(*options)

type options struct {
	advertise string
	serverTLS *tls.Config
	clientTLS *tls.Config
	closed    func(ip string)
	wrap      func(net.Listener) net.Listener
}

// WithListener makes the layer accept through wrap(listener): a wrapper
// that caps connections (the server's netlimit) refuses them before any
// TLS handshake or Raft decoding is spent on them.
func WithListener(wrap func(net.Listener) net.Listener) Option {
	return func(o *options) { o.wrap = wrap }
}

// WithPeerClosed makes the layer call fn with the remote IP of every
// accepted connection that the peer ended: a read returned end of file or a
// reset, or a write a reset or a broken pipe; not a deadline and not the
// layer's own Close. A peer's process that dies (kill -9, a crash, the OOM
// killer) ends its connections at once, long before any timeout notices its
// silence; the caller decides what that means (server's leaderLoss probes
// the peer's port). fn runs on the goroutine that reads or writes the
// connection, once per connection, and must not block.
func WithPeerClosed(fn func(ip string)) Option {
	return func(o *options) { o.closed = fn }
}

// WithAdvertise makes Addr return addr (host:port, host an IP) instead of the
// bind address, for a node reachable under another address than the one it
// binds, such as behind NAT or when binding 0.0.0.0.
func WithAdvertise(addr string) Option {
	return func(o *options) { o.advertise = addr }
}

// WithTLS runs TLS over every connection: accepted connections use server and
// dialed ones use client. When client has no ServerName and verifies the
// peer, the host of the dialed address is used as ServerName. Both must be
// non-nil.
func WithTLS(server, client *tls.Config) Option {
	return func(o *options) {
		o.serverTLS = server
		o.clientTLS = client
	}
}

// NewTCPStreamLayer listens on bind (host:port; port 0 picks a free port) and
// returns the stream layer. The advertised address, bind or WithAdvertise,
// must have a specified IP, because peers dial it.
func NewTCPStreamLayer(bind string, opts ...Option) (*StreamLayer, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if (o.serverTLS == nil) != (o.clientTLS == nil) {
		return nil, errors.New("transport: tls needs both a server and a client config")
	}

	var advertise net.Addr
	if o.advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", o.advertise)
		if err != nil {
			return nil, fmt.Errorf("transport: advertise address: %w", err)
		}
		if a.IP == nil || a.IP.IsUnspecified() || a.Port == 0 {
			return nil, fmt.Errorf("transport: advertise address %q is not advertisable", o.advertise)
		}
		advertise = a
	}

	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("transport: listen: %w", err)
	}
	la, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("transport: listener address %v is not tcp", l.Addr())
	}
	if o.wrap != nil {
		l = o.wrap(l)
	}
	s := &StreamLayer{
		listener:  l,
		advertise: advertise,
		serverTLS: o.serverTLS,
		clientTLS: o.clientTLS,
		closed:    o.closed,
	}
	if !la.IP.IsUnspecified() {
		s.localIP = la.IP
	} else if advertise == nil {
		l.Close()
		return nil, fmt.Errorf("transport: bind address %q is not advertisable; use WithAdvertise", bind)
	}
	return s, nil
}

// Accept waits for the next incoming connection. With TLS the handshake runs
// on the connection's first read or write, not here, so that a slow peer
// does not hold up the accept loop.
func (s *StreamLayer) Accept() (net.Conn, error) {
	c, err := s.listener.Accept()
	if err != nil {
		return nil, err
	}
	if s.closed != nil {
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			c = &watchedConn{Conn: c, ip: a.IP.String(), closed: s.closed}
		}
	}
	if s.serverTLS != nil {
		return tls.Server(c, s.serverTLS), nil
	}
	return c, nil
}

// Close stops listening. Connections already made stay open; their owners
// close them.
func (s *StreamLayer) Close() error {
	return s.listener.Close()
}

// Addr returns the advertised address if one was given, else the address
// the layer listens on (with the port the kernel chose for port 0).
func (s *StreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.listener.Addr()
}

// Dial connects to a peer's Raft address from the layer's own IP within
// timeout, TLS handshake included.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := net.Dialer{}
	if s.localIP != nil {
		d.LocalAddr = &net.TCPAddr{IP: s.localIP}
	}
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	if s.clientTLS == nil {
		return c, nil
	}
	cfg := s.clientTLS
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		host, _, err := net.SplitHostPort(string(address))
		if err != nil {
			c.Close()
			return nil, err
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("transport: tls handshake with %s: %w", address, err)
	}
	return tc, nil
}

// Probe opens a TCP connection to address from the layer's own IP within
// timeout and closes it again (no TLS handshake): nil means something
// listens there. Refused tells a port nobody listens on from a peer that
// cannot be reached.
func (s *StreamLayer) Probe(address string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	if s.localIP != nil {
		d.LocalAddr = &net.TCPAddr{IP: s.localIP}
	}
	c, err := d.Dial("tcp", address)
	if err != nil {
		return err
	}
	return c.Close()
}

// Refused reports whether err is a refused connection: the peer's host
// answered, and no process listens on the port. A dead host, a dropped
// packet or a timeout is not a refusal.
func Refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// watchedConn reports, once, that the peer ended the connection.
type watchedConn struct {
	net.Conn
	ip     string
	closed func(ip string)
	once   sync.Once
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.check(err)
	return n, err
}

// Write is watched too: a peer that dies while its request is being
// answered shows as a reset on the answer, and the connection is then
// closed without another read.
func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.check(err)
	return n, err
}

func (c *watchedConn) check(err error) {
	if err != nil && peerEnded(err) {
		c.once.Do(func() { c.closed(c.ip) })
	}
}

// peerEnded tells the errors a peer causes (end of file, reset, broken
// pipe) from this side's own close and from deadlines.
func peerEnded(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// NewNetworkTransport returns a raft.NetworkTransport over stream with
// 3 pooled connections per peer and a 10 s bound on dials and RPC I/O. Raft's
// heartbeat fast path is part of raft.NetworkTransport and keeps working.
// Closing the transport closes stream.
func NewNetworkTransport(stream raft.StreamLayer, logger hclog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		Logger:  logger,
		MaxPool: maxPool,
		Timeout: rpcTimeout,
	})
}
