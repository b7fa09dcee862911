package confd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestBenchUDP prints queries per second answered by one confd server on
// loopback, for NODE_ROLE_BYNAME and NODE_PIP_BY_INSTANCE_IP with 1, 8 and
// 64 concurrent clients, with p50/p99 latency, over a configuration of
// 1000 nodes and 20000 instances; and, in the same run, the same load
// against a raw UDP echo server (the physical reference) and the ratio.
// Figures, not assertions: it runs only with GNT_BENCH=1 (make bench), and
// fails only if the work was not done (wrong or missing answers).
func TestBenchUDP(t *testing.T) {
	if os.Getenv("GNT_BENCH") == "" {
		t.Skip("benchmark: set GNT_BENCH=1 (make bench) to run it")
	}
	d := 2 * time.Second
	if v := os.Getenv("GNT_BENCH_DURATION"); v != "" {
		if p, err := time.ParseDuration(v); err == nil {
			d = p
		}
	}
	f := bigFSM(t, 1000, 20000)
	confdAddr := startServers(t, fsmSource{f: f, master: "node0"})[0]
	echoAddr := startEcho(t)

	queries := []struct {
		name string
		typ  RequestType
		q    func(i int) Query
		want func(i int) string
	}{
		{"NODE_ROLE_BYNAME", ReqNodeRoleByName,
			func(i int) Query { return str(fmt.Sprintf("node%d", i%1000)) },
			func(i int) string {
				switch n := i % 1000; {
				case n == 0:
					return "0"
				case n%97 == 3:
					return "3"
				case n < 5:
					return "1"
				}
				return "4"
			}},
		{"NODE_PIP_BY_INSTANCE_IP", ReqNodePipByInstanceIP,
			func(i int) Query { return dict(func(q *Query) { q.HasIP, q.IP = true, benchInstIP(i%20000) }) },
			func(i int) string {
				n := (i % 20000) % 1000
				return strconv.Quote(fmt.Sprintf("10.%d.%d.%d", 1+n>>16, n>>8&255, n&255))
			}},
	}
	// The answers are right before anything is timed.
	m := NewMAC(testKey)
	for _, q := range queries {
		for _, i := range []int{0, 3, 4, 5, 999, 1234, 19999} {
			res, err := (&Client{Key: testKey, Peers: []string{confdAddr}}).Query(context.Background(), q.typ, q.q(i), 0)
			if err != nil || string(res.Reply.Answer) != q.want(i) || res.Reply.Serial != 1000 {
				t.Fatalf("%s %d: %+v %v, want %s", q.name, i, res, err, q.want(i))
			}
		}
	}
	t.Logf("one confd server (%d workers) on 127.0.0.1; 1000 nodes, 20000 instances; %v per cell", NewServer(ServerOptions{}).o.Workers, d)
	t.Logf("%-24s %7s %12s %12s %9s %9s %7s", "query", "clients", "confd q/s", "echo q/s", "p50", "p99", "ratio")
	for _, q := range queries {
		for _, clients := range []int{1, 8, 64} {
			echo := load(t, m, echoAddr, q.typ, q.q, clients, d, nil)
			conf := load(t, m, confdAddr, q.typ, q.q, clients, d, q.want)
			t.Logf("%-24s %7d %12.0f %12.0f %9v %9v %7.2f", q.name, clients, conf.rate, echo.rate,
				conf.p50.Round(time.Microsecond), conf.p99.Round(time.Microsecond), conf.rate/echo.rate)
			t.Logf("%-24s %7s %12s %12s %9v %9v   (echo latency)", "", "", "", "", echo.p50.Round(time.Microsecond), echo.p99.Round(time.Microsecond))
		}
	}
}

type loadResult struct {
	rate     float64
	p50, p99 time.Duration
}

// load runs clients closed-loop clients for d, each with its own socket,
// each request freshly signed (the server refuses replays). With want set,
// every reply is opened and checked.
func load(t *testing.T, _ *MAC, addr string, typ RequestType, query func(int) Query, clients int, d time.Duration, want func(int) string) loadResult {
	var (
		mu    sync.Mutex
		lats  []time.Duration
		wg    sync.WaitGroup
		fails []error
	)
	ua, _ := net.ResolveUDPAddr("udp", addr)
	deadline := time.Now().Add(d)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			conn, err := net.DialUDP("udp", nil, ua)
			if err != nil {
				mu.Lock()
				fails = append(fails, err)
				mu.Unlock()
				return
			}
			defer conn.Close()
			m := NewMAC(testKey)
			// Queries are prepared outside the loop so that the load
			// generator spends its time signing and sending, as a real
			// client does, not formatting.
			qs := make([][]byte, 64)
			for k := range qs {
				qs[k] = QueryJSON(query(c*7919 + k))
			}
			buf := make([]byte, maxDatagram)
			var msg, pkt []byte
			var my []time.Duration
			salt := []byte(strconv.FormatInt(time.Now().Unix(), 10))
			rs := "b" + strconv.Itoa(c) + "-"
			for n := 0; time.Now().Before(deadline); n++ {
				k := n % len(qs)
				rsalt := rs + strconv.Itoa(n)
				msg = AppendRequestMsg(msg[:0], typ, qs[k], rsalt)
				pkt = AppendEnvelope(pkt[:0], m, salt, msg)
				start := time.Now()
				if _, err := conn.Write(pkt); err != nil {
					continue
				}
				conn.SetReadDeadline(start.Add(time.Second))
				r, err := conn.Read(buf)
				if err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) {
						continue // lost: counted as not answered
					}
					return
				}
				my = append(my, time.Since(start))
				if want != nil && n%16 == 0 {
					reply, err := OpenReply(m, buf[:r], rsalt)
					if err == nil && string(reply.Answer) != want(c*7919+k) {
						err = fmt.Errorf("answer %s, want %s", reply.Answer, want(c*7919+k))
					}
					if err != nil {
						mu.Lock()
						fails = append(fails, err)
						mu.Unlock()
						return
					}
				}
			}
			mu.Lock()
			lats = append(lats, my...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("%s: %v", typ, fails[0])
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	if len(lats) == 0 {
		t.Fatalf("%s: no replies", typ)
	}
	return loadResult{rate: float64(len(lats)) / d.Seconds(), p50: lats[len(lats)/2], p99: lats[len(lats)*99/100]}
}

// startEcho runs a UDP echo server with as many reader goroutines as a
// confd server has workers.
func startEcho(t *testing.T) string {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	workers := NewServer(ServerOptions{}).o.Workers
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, maxDatagram)
			for {
				n, a, err := conn.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				conn.WriteToUDPAddrPort(buf[:n], a)
			}
		}()
	}
	t.Cleanup(func() { conn.Close(); wg.Wait() })
	return conn.LocalAddr().String()
}

// BenchmarkHandle is the server's work per request without the socket.
func BenchmarkHandle(b *testing.B) {
	f := bigFSM(b, 1000, 20000)
	for _, c := range []struct {
		name string
		typ  RequestType
		q    Query
	}{
		{"NODE_ROLE_BYNAME", ReqNodeRoleByName, str("node500")},
		{"NODE_PIP_BY_INSTANCE_IP", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP = true, benchInstIP(12345) })},
		{"NODE_INSTANCES", ReqNodeInstances, str("node500")},
	} {
		b.Run(c.name, func(b *testing.B) {
			now := time.Now()
			// A replay cache big enough for every request of the run: they
			// all carry the same second, more than one second of them.
			s := NewServer(ServerOptions{Key: testKey, Source: fsmSource{f: f, master: "node0"}, Now: func() time.Time { return now }, ReplayCapacity: 2*b.N + 1024})
			m := NewMAC(testKey)
			qj := QueryJSON(c.q)
			salt := []byte(strconv.FormatInt(now.Unix(), 10))
			pkts := make([][]byte, b.N)
			for i := range pkts {
				pkts[i] = AppendEnvelope(nil, m, salt, AppendRequestMsg(nil, c.typ, qj, "r"+strconv.Itoa(i)))
			}
			w := newWorker()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if s.handle(w, pkts[i], fuzzFrom) == nil {
					b.Fatalf("no reply: %v", s.Stats().Dropped)
				}
			}
		})
	}
}
