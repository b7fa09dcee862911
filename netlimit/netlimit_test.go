package netlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeListener hands out the connections (or errors) pushed into it.
type fakeListener struct {
	conns  chan any
	closed chan struct{}
	once   sync.Once
}

func newFakeListener() *fakeListener {
	return &fakeListener{conns: make(chan any, 16), closed: make(chan struct{})}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		if err, ok := c.(error); ok {
			return nil, err
		}
		return c.(net.Conn), nil
	case <-f.closed:
		return nil, net.ErrClosed
	}
}

func (f *fakeListener) Close() error   { f.once.Do(func() { close(f.closed) }); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5080} }

// fakeConn is one end of a pipe with a remote address of our choosing;
// it records that it was closed.
type fakeConn struct {
	net.Conn
	remote net.Addr
	mu     sync.Mutex
	closes int
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error {
	c.mu.Lock()
	c.closes++
	c.mu.Unlock()
	return c.Conn.Close()
}
func (c *fakeConn) closedTimes() int { c.mu.Lock(); defer c.mu.Unlock(); return c.closes }

func newFakeConn(t *testing.T, addr string) *fakeConn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &fakeConn{Conn: a, remote: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))}
}

// step is one event of a table test: a connection arriving from From
// (admitted or refused for Refused; admitted after closing the Evicts-th
// admitted connection, idle, to make room), or Close, Idle or Busy
// (ConnState) of the k-th admitted connection (counted from 1).
type step struct {
	From              string
	Refused           *Reason
	Evicts            int
	Close, Idle, Busy int
}

var errMarker = errors.New("marker")

func refused(r Reason) *Reason { return &r }

func TestLimiterTable(t *testing.T) {
	a, b, c := "10.0.0.1:4000", "10.0.0.2:4000", "10.0.0.3:4000"
	a6 := "[::ffff:10.0.0.1]:4001" // the same address, IPv4-mapped
	tests := []struct {
		name     string
		lim      Limits
		exempt   string
		steps    []step
		wantOpen int
		want     [numReasons]uint64
	}{
		{"under both caps", Limits{MaxConns: 3, MaxConnsPerIP: 2},
			"", []step{{From: a}, {From: b}, {From: a}}, 3, [numReasons]uint64{}},
		{"overall cap", Limits{MaxConns: 2, MaxConnsPerIP: 2},
			"", []step{{From: a}, {From: b}, {From: c, Refused: refused(OverAll)}, {From: a, Refused: refused(OverAll)}}, 2, [numReasons]uint64{1: 0, 0: 2}},
		{"per-address cap, others go on", Limits{MaxConns: 10, MaxConnsPerIP: 2},
			"", []step{{From: a}, {From: a}, {From: a, Refused: refused(OverPerIP)}, {From: b}, {From: b}, {From: b, Refused: refused(OverPerIP)}, {From: c}}, 5, [numReasons]uint64{0: 0, 1: 2}},
		{"IPv4-mapped is the same address", Limits{MaxConns: 10, MaxConnsPerIP: 1},
			"", []step{{From: a}, {From: a6, Refused: refused(OverPerIP)}}, 1, [numReasons]uint64{0: 0, 1: 1}},
		{"close frees the place", Limits{MaxConns: 10, MaxConnsPerIP: 1},
			"", []step{{From: a}, {From: a, Refused: refused(OverPerIP)}, {Close: 1}, {From: a}}, 1, [numReasons]uint64{0: 0, 1: 1}},
		{"close frees an overall place", Limits{MaxConns: 1, MaxConnsPerIP: 1},
			"", []step{{From: a}, {From: b, Refused: refused(OverAll)}, {Close: 1}, {From: b}}, 1, [numReasons]uint64{0: 1, 1: 0}},
		{"closing twice frees one place", Limits{MaxConns: 10, MaxConnsPerIP: 2},
			"", []step{{From: a}, {From: a}, {Close: 1}, {Close: 1}, {From: a}, {From: a, Refused: refused(OverPerIP)}}, 2, [numReasons]uint64{0: 0, 1: 1}},
		{"exempt address skips the per-address cap", Limits{MaxConns: 3, MaxConnsPerIP: 1},
			"10.0.0.1", []step{{From: a}, {From: a}, {From: a}, {From: a, Refused: refused(OverAll)}, {From: b, Refused: refused(OverAll)}}, 3, [numReasons]uint64{0: 2, 1: 0}},
		{"an idle connection of the address makes room", Limits{MaxConns: 10, MaxConnsPerIP: 2},
			"", []step{{From: a}, {From: a}, {Idle: 2}, {From: a, Evicts: 2}, {From: a, Refused: refused(OverPerIP)}}, 2, [numReasons]uint64{0: 0, 1: 1}},
		{"the oldest idle one goes first", Limits{MaxConns: 10, MaxConnsPerIP: 2},
			"", []step{{From: a}, {From: a}, {Idle: 2}, {Idle: 1}, {From: a, Evicts: 2}, {From: a, Evicts: 1}}, 2, [numReasons]uint64{}},
		{"another address's idle one does not make per-address room", Limits{MaxConns: 10, MaxConnsPerIP: 1},
			"", []step{{From: a}, {From: b}, {Idle: 2}, {From: a, Refused: refused(OverPerIP)}}, 2, [numReasons]uint64{0: 0, 1: 1}},
		{"any idle one makes overall room", Limits{MaxConns: 2, MaxConnsPerIP: 2},
			"", []step{{From: a}, {From: b}, {Idle: 1}, {From: c, Evicts: 1}, {From: c, Refused: refused(OverAll)}}, 2, [numReasons]uint64{0: 1, 1: 0}},
		{"a connection busy again is not closed", Limits{MaxConns: 10, MaxConnsPerIP: 1},
			"", []step{{From: a}, {Idle: 1}, {Busy: 1}, {From: a, Refused: refused(OverPerIP)}}, 1, [numReasons]uint64{0: 0, 1: 1}},
		{"a closed idle one is forgotten", Limits{MaxConns: 10, MaxConnsPerIP: 1},
			"", []step{{From: a}, {Idle: 1}, {Close: 1}, {From: a}, {From: a, Refused: refused(OverPerIP)}}, 1, [numReasons]uint64{0: 0, 1: 1}},
		{"no caps", Limits{MaxConns: -1, MaxConnsPerIP: -1},
			"", []step{{From: a}, {From: a}, {From: a}, {From: a}}, 4, [numReasons]uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts Options
			if tt.exempt != "" {
				ex := netip.MustParseAddr(tt.exempt)
				opts.Exempt = func(a netip.Addr) bool { return a == ex }
			}
			var refusals []Reason
			opts.OnRefuse = func(r Reason, _ netip.Addr) { refusals = append(refusals, r) }
			l := New(tt.lim, opts)
			fl := newFakeListener()
			ln := l.Wrap(fl)
			defer ln.Close()
			var admitted []net.Conn
			var fakes []*fakeConn
			gone := map[int]bool{} // closed by a step or to make room
			checkClosed := func(i int) {
				t.Helper()
				for k, f := range fakes {
					if closed := f.closedTimes() > 0; closed != gone[k] {
						t.Fatalf("step %d: connection %d closed: %v, want %v", i, k+1, closed, gone[k])
					}
				}
			}
			for i, s := range tt.steps {
				if s.Idle > 0 {
					l.ConnState(admitted[s.Idle-1], http.StateIdle)
					continue
				}
				if s.Busy > 0 {
					l.ConnState(admitted[s.Busy-1], http.StateActive)
					continue
				}
				if s.Close > 0 {
					if err := admitted[s.Close-1].Close(); err != nil && !errors.Is(err, io.ErrClosedPipe) {
						t.Fatalf("step %d: close: %v", i, err)
					}
					gone[s.Close-1] = true
					continue
				}
				fc := newFakeConn(t, s.From)
				fl.conns <- fc
				if s.Refused != nil {
					// A refused connection is closed, never returned: the
					// next Accept returns the marker that follows it.
					n := len(refusals)
					fl.conns <- errMarker
					if got, err := ln.Accept(); err != errMarker {
						t.Fatalf("step %d: a connection from %s over the cap was accepted (%v, %v)", i, s.From, got, err)
					}
					if fc.closedTimes() != 1 {
						t.Fatalf("step %d: the refused connection was closed %d times, want 1", i, fc.closedTimes())
					}
					if len(refusals) != n+1 || refusals[n] != *s.Refused {
						t.Fatalf("step %d: refusals %v, want one more %v", i, refusals, *s.Refused)
					}
					checkClosed(i)
					continue
				}
				got, err := ln.Accept()
				if err != nil {
					t.Fatalf("step %d: accept: %v", i, err)
				}
				if got.(*conn).Conn != fc {
					t.Fatalf("step %d: accepted another connection", i)
				}
				if s.Evicts > 0 {
					gone[s.Evicts-1] = true
				}
				checkClosed(i)
				admitted = append(admitted, got)
				fakes = append(fakes, fc)
			}
			st := l.Stats()
			if st.Idle > st.Open {
				t.Errorf("%d idle of %d open", st.Idle, st.Open)
			}
			if st.Open != tt.wantOpen || st.Refused != tt.want {
				t.Errorf("stats: open %d refused %v, want open %d refused %v", st.Open, st.Refused, tt.wantOpen, tt.want)
			}
			for _, c := range admitted {
				c.Close()
			}
			if st := l.Stats(); st.Open != 0 || st.Idle != 0 {
				t.Errorf("after closing everything %d connections are still counted (%d idle)", st.Open, st.Idle)
			}
		})
	}
}

func TestNilLimiterWrapsNothing(t *testing.T) {
	fl := newFakeListener()
	if got := (*Limiter)(nil).Wrap(fl); got != net.Listener(fl) {
		t.Errorf("a nil Limiter wrapped the listener: %T", got)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, tt := range []struct {
		lim  Limits
		want string
	}{
		{Limits{}, ""},
		{Limits{MaxConns: 10, MaxConnsPerIP: 10}, ""},
		{Limits{MaxConns: -1, MaxConnsPerIP: 10}, ""},
		{Limits{MaxConns: 10, MaxConnsPerIP: -1}, ""},
		{Limits{MaxConns: 10, MaxConnsPerIP: 11}, "per-address connection cap (11) is above the overall cap (10)"},
		{Limits{MaxConns: 100}, "per-address connection cap (512) is above the overall cap (100)"},
	} {
		err := tt.lim.Validate()
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want %q", tt.lim, err, tt.want)
		}
	}
}

// TestLogRateLimited: the first refusal is logged at once, those within
// LogEvery only summed up, and the sum is logged when the listener closes;
// every refusal is in a line.
func TestLogRateLimited(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	l := New(Limits{MaxConns: 10, MaxConnsPerIP: 1}, Options{
		Name: "api", LogEvery: time.Hour, Now: func() time.Time { return now },
		Logf: func(f string, args ...any) { mu.Lock(); lines = append(lines, fmt.Sprintf(f, args...)); mu.Unlock() },
	})
	addr := netip.MustParseAddr("10.0.0.1")
	if c, _ := l.admit(newFakeConn(t, "10.0.0.1:1"), addr); c == nil {
		t.Fatal("the first connection was refused")
	}
	for range 5 {
		if c, _ := l.admit(newFakeConn(t, "10.0.0.1:2"), addr); c != nil {
			t.Fatal("a connection over the per-address cap was admitted")
		}
	}
	mu.Lock()
	if len(lines) != 1 || !strings.Contains(lines[0], "api: refused 0 connection(s) over the cap of 10 open connections and 1 over the cap of 1 per client address (last from 10.0.0.1)") {
		t.Errorf("lines before the flush: %q", lines)
	}
	mu.Unlock()
	l.Wrap(newFakeListener()).Close()
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 2 || !strings.Contains(lines[1], "and 4 over the cap") {
		t.Errorf("lines after close: %q", lines)
	}
	if st := l.Stats(); st.Refused[OverPerIP] != 5 {
		t.Errorf("counted %d refusals, want 5", st.Refused[OverPerIP])
	}
}

// TestRefusedOverTCP: over a real loopback listener, a connection over
// the per-address cap is closed by the server without a byte, while the
// admitted one is served.
func TestRefusedOverTCP(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(Limits{MaxConns: 10, MaxConnsPerIP: 1}, Options{})
	ln := l.Wrap(inner)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	first, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := first.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(first, buf); err != nil {
		t.Fatalf("the admitted connection was not served: %v", err)
	}
	// The refusal (a reset) may reach the client before its connect
	// returns, or its first read.
	if second, err := net.Dial("tcp", inner.Addr().String()); err == nil {
		defer second.Close()
		second.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := second.Read(buf); err == nil || n != 0 {
			t.Fatalf("the connection over the cap read %d bytes, err %v; want it closed", n, err)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the connection over the cap was left open")
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dialing over the cap: %v, want a reset", err)
	}
	if st := l.Stats(); st.Refused[OverPerIP] != 1 || st.Open != 1 {
		t.Fatalf("stats %+v, want one refusal and one open", st)
	}
	first.Close()
	// The place is free again once the server has seen the close.
	for l.Stats().Open != 0 {
		time.Sleep(time.Millisecond)
	}
	third, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	third.Write([]byte("y"))
	if _, err := io.ReadFull(third, buf); err != nil || buf[0] != 'y' {
		t.Fatalf("after the close, a new connection was not served: %v", err)
	}
}

func TestHTTPLimitsConfigure(t *testing.T) {
	var srv http.Server
	HTTPLimits{}.Configure(&srv)
	if srv.ReadHeaderTimeout != DefaultReadHeaderTimeout || srv.ReadTimeout != DefaultReadTimeout || srv.WriteTimeout != 0 ||
		srv.IdleTimeout != DefaultIdleTimeout || srv.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("defaults: %v %v %v %v %d", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: -1, WriteTimeout: time.Minute, IdleTimeout: 3 * time.Second, MaxHeaderBytes: 100}.Configure(&srv)
	if srv.ReadHeaderTimeout != time.Second || srv.ReadTimeout != 0 || srv.WriteTimeout != time.Minute ||
		srv.IdleTimeout != 3*time.Second || srv.MaxHeaderBytes != 100 {
		t.Errorf("explicit: %v %v %v %v %d", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
}

// TestHTTPHeaderLimit: headers over MaxHeaderBytes get 431 and nothing
// reaches the handler.
func TestHTTPHeaderLimit(t *testing.T) {
	called := false
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
	HTTPLimits{MaxHeaderBytes: 1024}.Configure(ts.Config)
	ts.Start()
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodGet, ts.URL, nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || called {
		t.Errorf("status %d, handler called %v; want 431 and not called", resp.StatusCode, called)
	}
}

// TestReadTimeoutSparesWaits: a handler that has read its request and
// then waits past ReadTimeout (a blocking query) still answers, with its
// context alive.
func TestReadTimeoutSparesWaits(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(300 * time.Millisecond) // six times ReadTimeout
		if err := r.Context().Err(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "done")
	}))
	HTTPLimits{ReadTimeout: 50 * time.Millisecond}.Configure(ts.Config)
	ts.Start()
	defer ts.Close()
	for _, body := range []string{"", "some body"} {
		resp, err := http.Post(ts.URL, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != "done" {
			t.Errorf("body %q: %d %q", body, resp.StatusCode, got)
		}
	}
}

func TestRaiseFileLimit(t *testing.T) {
	soft, hard, err := RaiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	if soft != hard || soft == 0 {
		t.Errorf("soft %d hard %d: want soft raised to hard", soft, hard)
	}
}

// TestIdleConnectionsMakeRoom: a client that leaves a kept-alive
// connection behind each request (a new http.Transport each time) is
// never locked out by the per-address cap: its idle connections are
// closed to make room; a connection that sends half a request is not.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(Limits{MaxConns: 10, MaxConnsPerIP: 3}, Options{})
	srv := HTTPLimits{}.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.ConnState = l.ConnState
	go srv.Serve(l.Wrap(inner))
	defer srv.Close()
	url := "http://" + inner.Addr().String() + "/"

	// One connection stuck in the middle of its request holds a place
	// that is never taken from it.
	stuck, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	io.WriteString(stuck, "GET / HT")
	for i := range 10 {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		// The server marks the connection idle once it has answered.
		for l.Stats().Idle < min(i+1, 2) {
			time.Sleep(time.Millisecond)
		}
	}
	st := l.Stats()
	if st.Evicted[OverPerIP] != 8 || st.Refused != [numReasons]uint64{} || st.Open != 3 {
		t.Errorf("stats %+v: want 8 idle connections closed to make room, none refused, 3 open", st)
	}
	stuck.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := stuck.Read(make([]byte, 1)); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection in the middle of its request was closed: %v", err)
	}
}

// TestReadTimeoutEndsSlowBody: a client that sends its headers and then
// trickles nothing of the body it announced loses its connection (it was
// held for ever with ReadHeaderTimeout alone).
func TestReadTimeoutEndsSlowBody(t *testing.T) {
	var handlerErr error
	done := make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, handlerErr = io.ReadAll(r.Body)
		close(done)
	}))
	HTTPLimits{ReadTimeout: 100 * time.Millisecond}.Configure(ts.Config)
	ts.Start()
	defer ts.Close()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) { // until the server closes it
		t.Fatal("the server held the connection of a body that never came for a minute")
	}
	<-done
	var ne net.Error
	if !errors.As(handlerErr, &ne) || !ne.Timeout() {
		t.Errorf("the handler's read of the body ended with %v, want a timeout", handlerErr)
	}
}
