package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Loopback addresses used by this package's tests. They stay clear of the dev
// cluster's 127.0.0.11-13 and 127.0.0.21+; every listener uses port 0.
const (
	ipA = "127.0.0.101"
	ipB = "127.0.0.102"
	ipC = "127.0.0.103"
)

func newLayer(t *testing.T, ip string, opts ...Option) *StreamLayer {
	t.Helper()
	s, err := NewTCPStreamLayer(net.JoinHostPort(ip, "0"), opts...)
	if err != nil {
		t.Fatalf("NewTCPStreamLayer(%s): %v", ip, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// acceptOne accepts one connection on l in the background and, for TLS,
// runs the server side of the handshake, as raft's first read would.
func acceptOne(t *testing.T, l raft.StreamLayer) <-chan net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(ch)
			return
		}
		if tc, ok := c.(*tls.Conn); ok {
			tc.Handshake() // the test looks at the result later
		}
		ch <- c
	}()
	return ch
}

func waitConn(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("accept failed")
		}
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted within 5s")
		return nil
	}
}

func dial(t *testing.T, from raft.StreamLayer, to net.Addr) net.Conn {
	t.Helper()
	c, err := from.Dial(raft.ServerAddress(to.String()), time.Second)
	if err != nil {
		t.Fatalf("dial %v: %v", to, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg on w and reads it back on r.
func roundTrip(t *testing.T, w, r net.Conn, msg string) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := w.Write([]byte(msg))
		errc <- err
	}()
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
}

func remoteIP(c net.Conn) string {
	return c.RemoteAddr().(*net.TCPAddr).IP.String()
}

func TestDialLeavesFromBindIP(t *testing.T) {
	a := newLayer(t, ipA)
	b := newLayer(t, ipB)

	accepted := acceptOne(t, b)
	ca := dial(t, a, b.Addr())
	cb := waitConn(t, accepted)

	if got := remoteIP(cb); got != ipA {
		t.Fatalf("B sees connection from %s, want A's bind IP %s", got, ipA)
	}
	if got := ca.LocalAddr().(*net.TCPAddr).IP.String(); got != ipA {
		t.Fatalf("dialed connection's local IP is %s, want %s", got, ipA)
	}
	roundTrip(t, ca, cb, "ping")
	roundTrip(t, cb, ca, "pong")
}

func TestAddr(t *testing.T) {
	s := newLayer(t, ipA)
	addr := s.Addr().(*net.TCPAddr)
	if addr.IP.String() != ipA || addr.Port == 0 {
		t.Fatalf("Addr() = %v, want %s with the chosen port", addr, ipA)
	}

	adv := newLayer(t, ipA, WithAdvertise("127.0.0.104:1817"))
	if got := adv.Addr().String(); got != "127.0.0.104:1817" {
		t.Fatalf("Addr() with advertise = %s", got)
	}

	for _, tc := range []struct {
		bind string
		opts []Option
	}{
		{"0.0.0.0:0", nil},
		{ipA + ":0", []Option{WithAdvertise("0.0.0.0:1817")}},
		{ipA + ":0", []Option{WithAdvertise("127.0.0.104:0")}},
		{ipA + ":0", []Option{WithTLS(&tls.Config{}, nil)}},
	} {
		s, err := NewTCPStreamLayer(tc.bind, tc.opts...)
		if err == nil {
			s.Close()
			t.Errorf("NewTCPStreamLayer(%s, %d options) succeeded, want error", tc.bind, len(tc.opts))
		}
	}

	// Bound to every address, a node must advertise one; its dials then
	// leave from wherever the kernel chooses.
	wild := newLayer(t, "0.0.0.0", WithAdvertise("127.0.0.104:1817"))
	if wild.localIP != nil {
		t.Fatalf("localIP = %v for a wildcard bind, want none", wild.localIP)
	}
}

func TestTLS(t *testing.T) {
	server, client := testTLSConfigs(t)
	a := newLayer(t, ipA, WithTLS(server, client))
	b := newLayer(t, ipB, WithTLS(server, client))

	accepted := acceptOne(t, b)
	ca := dial(t, a, b.Addr())
	cb := waitConn(t, accepted)
	if _, ok := cb.(*tls.Conn); !ok {
		t.Fatalf("accepted %T, want *tls.Conn", cb)
	}
	if got := remoteIP(cb); got != ipA {
		t.Fatalf("B sees connection from %s, want %s", got, ipA)
	}
	roundTrip(t, ca, cb, "secret")
	roundTrip(t, cb, ca, "reply")

	// A dialer without the cluster's certificate is refused.
	plain := newLayer(t, ipC, WithTLS(server, &tls.Config{RootCAs: client.RootCAs}))
	accepted = acceptOne(t, b)
	c, err := plain.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err == nil {
		// TLS 1.3 clients learn of a rejected certificate on their first read.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil {
		t.Fatal("dial without a client certificate succeeded")
	}
	t.Logf("dial without a client certificate: %v", err)
	if cb := waitConn(t, accepted); cb.(*tls.Conn).Handshake() == nil {
		t.Fatal("server accepted a handshake without a client certificate")
	}
}

// testTLSConfigs returns mutual-TLS configs built on one self-signed
// certificate valid for every IP the tests use.
func testTLSConfigs(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gnt raft test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, ip := range []string{ipA, ipB, ipC} {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS13,
	}
	return server, client
}

func TestPeerKey(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.12:1817":    "127.0.0.12",
		"127.0.0.12":         "127.0.0.12",
		"[::1]:1817":         "::1",
		"[0:0::1]:1":         "::1",
		"node1.example:1817": "node1.example",
		"node1.example":      "node1.example",
	} {
		if got := peerKey(in); got != want {
			t.Errorf("peerKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPeerClosed: an accepted connection that the peer closes, or resets,
// is reported once with the peer's IP; one this side closes, or whose read
// deadline passes, is not.
func TestPeerClosed(t *testing.T) {
	seen := make(chan string, 8)
	server := newLayer(t, ipA, WithPeerClosed(func(ip string) { seen <- ip }))
	client := newLayer(t, ipB)
	dial := func() (net.Conn, net.Conn) {
		ch := acceptOne(t, server)
		c, err := client.Dial(raft.ServerAddress(server.Addr().String()), time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c, waitConn(t, ch)
	}
	readAll := func(s net.Conn) {
		buf := make([]byte, 16)
		for i := 0; i < 3; i++ {
			s.Read(buf) // the error is what the layer sees
		}
	}
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case ip := <-seen:
			if !want {
				t.Fatalf("%s: reported %s", what, ip)
			}
			if ip != ipB {
				t.Fatalf("%s: reported %s, want %s", what, ip, ipB)
			}
		case <-time.After(100 * time.Millisecond):
			if want {
				t.Fatalf("%s: not reported", what)
			}
		}
	}

	c, s := dial()
	c.Close()
	readAll(s) // EOF, then EOF again: reported once
	expect("peer closed", true)
	expect("peer closed, read again", false)

	c, s = dial()
	c.(*net.TCPConn).SetLinger(0) // close with a reset
	c.Close()
	readAll(s)
	expect("peer reset", true)

	c, s = dial()
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	var werr error
	for i := 0; i < 50 && werr == nil; i++ { // answering a peer that is gone
		_, werr = s.Write([]byte("answer"))
		time.Sleep(time.Millisecond)
	}
	if werr == nil {
		t.Fatal("writes to a reset connection kept succeeding")
	}
	expect("peer reset, seen by a write", true)

	_, s = dial()
	s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	readAll(s)
	expect("read deadline", false)

	_, s = dial()
	s.Close()
	readAll(s)
	expect("closed by this side", false)
}

// TestProbe: a listening port answers, a closed one is refused.
func TestProbe(t *testing.T) {
	target := newLayer(t, ipA)
	prober := newLayer(t, ipB)
	addr := target.Addr().String()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := prober.Probe(addr, time.Second); err != nil {
		t.Fatalf("probe of a listening port: %v", err)
	}
	target.Close()
	err := prober.Probe(addr, time.Second)
	if !Refused(err) {
		t.Fatalf("probe of a closed port: %v, want a refusal", err)
	}
	if Refused(nil) || Refused(io.EOF) {
		t.Fatal("Refused is true for an error that is not a refusal")
	}
}

// countingListener counts the connections accepted through it.
type countingListener struct {
	net.Listener
	n chan struct{}
}

func (c *countingListener) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err == nil {
		c.n <- struct{}{}
	}
	return conn, err
}

// TestWithListener: the layer accepts through the wrapper it is given.
func TestWithListener(t *testing.T) {
	cl := &countingListener{n: make(chan struct{}, 1)}
	srv := newLayer(t, ipA, WithListener(func(l net.Listener) net.Listener { cl.Listener = l; return cl }))
	cli := newLayer(t, ipB)
	ch := acceptOne(t, srv)
	dial(t, cli, srv.Addr())
	waitConn(t, ch)
	select {
	case <-cl.n:
	default:
		t.Fatal("the connection was not accepted through the wrapper")
	}
}
