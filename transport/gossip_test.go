package transport

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

var testKey = bytes.Repeat([]byte{7}, 32)

// gossipIPs hands out loopback addresses private to this test process:
// 127.77.<pid-derived>.<n>.
var gossipIP atomic.Int32

func nextGossipIP() string {
	n := gossipIP.Add(1)
	return fmt.Sprintf("127.77.%d.%d", os.Getpid()%250+1, n%250+1)
}

// testTiming is LANGossipTiming: the tests run the settings gntd runs.
func testTiming() GossipTiming { return LANGossipTiming() }

func startMember(t testing.TB, name, ip string, port int, key []byte) *Gossip {
	t.Helper()
	g, err := NewGossip(GossipConfig{Name: name, BindIP: ip, Port: port, Key: key,
		Meta: Meta{Role: "node", Agent: ip + ":1811", Version: "test"}, Timing: testTiming(),
		Log: gossipLogger(t, name)})
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(g.Shutdown)
	return g
}

// gossipLogger sends a member's log to the test log (shown on failure);
// benchmarks drop it.
func gossipLogger(t testing.TB, name string) hclog.Logger {
	if tt, ok := t.(*testing.T); ok {
		return testLogger(tt, name)
	}
	return hclog.NewNullLogger()
}

// waitState waits until g sees member name in state want, and returns
// how long that took.
func waitState(t testing.TB, g *Gossip, name string, want MemberState, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		for _, m := range g.Members() {
			if m.Name == name && m.State == want {
				return time.Since(start)
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: %s not %s within %s; members: %+v", g.addr, name, want, timeout, g.Members())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func member(g *Gossip, name string) (Member, bool) {
	for _, m := range g.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

func TestGossipTableLayout(t *testing.T) {
	g := startMember(t, "solo", nextGossipIP(), 0, testKey)
	ms := g.Members()
	if len(ms) != 1 || ms[0].Name != "solo" || ms[0].State != StateAlive || ms[0].Addr != g.Addr() {
		t.Fatalf("members of a lone member: %+v", ms)
	}
	if ms[0].Meta.Role != "node" || ms[0].Since.IsZero() || time.Since(ms[0].Since) > time.Minute {
		t.Fatalf("own record: %+v", ms[0])
	}
}

// TestGossipLifecycle: members join and see each other alive with their
// meta; one that stops abruptly becomes suspect, then dead; one that
// leaves is left at once; a member restarted on its address is alive
// again.
func TestGossipLifecycle(t *testing.T) {
	var gs []*Gossip
	for i := 0; i < 4; i++ {
		gs = append(gs, startMember(t, fmt.Sprintf("m%d", i), nextGossipIP(), 0, testKey))
	}
	for _, g := range gs[1:] {
		if n, err := g.Join([]string{gs[0].Addr()}); err != nil || n != 1 {
			t.Fatalf("join: %d %v", n, err)
		}
	}
	for _, g := range gs {
		for i := range gs {
			waitState(t, g, fmt.Sprintf("m%d", i), StateAlive, 5*time.Second)
		}
	}
	m, _ := member(gs[0], "m3")
	if m.Meta.Agent != strings.Split(gs[3].Addr(), ":")[0]+":1811" || m.Meta.Role != "node" {
		t.Fatalf("meta of m3 as m0 sees it: %+v", m)
	}
	if err := gs[3].SetMeta(Meta{Role: "candidate", Version: "test"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if m, _ := member(gs[0], "m3"); m.Meta.Role == "candidate" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("meta change not seen")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Crash m2: suspect, then dead, everywhere.
	ip2 := gs[2].Addr()
	gs[2].Shutdown()
	changed := gs[0].Changed()
	waitState(t, gs[1], "m2", StateSuspect, 10*time.Second)
	waitState(t, gs[0], "m2", StateDead, 20*time.Second)
	waitState(t, gs[3], "m2", StateDead, 20*time.Second)
	select {
	case <-changed:
	default:
		t.Fatal("no change signalled")
	}
	dead, _ := member(gs[0], "m2")
	if time.Since(dead.Since) > 20*time.Second || dead.Addr != ip2 {
		t.Fatalf("dead record: %+v", dead)
	}

	// m3 leaves: left, without suspicion.
	if err := gs[3].Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, gs[0], "m3", StateLeft, 5*time.Second)

	// m2 comes back on its address: alive again (it refutes its death).
	host, port, _ := net.SplitHostPort(ip2)
	p, _ := strconv.Atoi(port)
	back := startMember(t, "m2", host, p, testKey)
	if _, err := back.Join([]string{gs[0].Addr()}); err != nil {
		t.Fatal(err)
	}
	waitState(t, gs[0], "m2", StateAlive, 10*time.Second)
	waitState(t, gs[1], "m2", StateAlive, 10*time.Second)
}

// TestGossipWrongKey: a member with another key cannot join.
func TestGossipWrongKey(t *testing.T) {
	a := startMember(t, "a", nextGossipIP(), 0, testKey)
	b := startMember(t, "b", nextGossipIP(), 0, bytes.Repeat([]byte{8}, 32))
	if n, err := b.Join([]string{a.Addr()}); err == nil || n != 0 {
		t.Fatalf("join with a wrong key: %d %v", n, err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, ok := member(a, "b"); ok {
		t.Fatal("a member with a wrong key got in")
	}
}

func TestGossipConfigErrors(t *testing.T) {
	ip := nextGossipIP()
	for name, c := range map[string]GossipConfig{
		"no ip":        {Name: "x", BindIP: "", Key: testKey},
		"unspecified":  {Name: "x", BindIP: "0.0.0.0", Key: testKey},
		"short key":    {Name: "x", BindIP: ip, Key: []byte("short")},
		"short accept": {Name: "x", BindIP: ip, Key: testKey, Accept: [][]byte{[]byte("short")}},
		"no name":      {BindIP: ip, Key: testKey},
		"meta":         {Name: "x", BindIP: ip, Key: testKey, Meta: Meta{Role: strings.Repeat("r", 600)}},
	} {
		c.Timing = testTiming()
		if g, err := NewGossip(c); err == nil {
			g.Shutdown()
			t.Errorf("%s: accepted", name)
		}
	}
	g := startMember(t, "x", ip, 0, testKey)
	if err := g.SetMeta(Meta{API: strings.Repeat("a", memberlist.MetaMaxSize)}); err == nil {
		t.Error("oversized meta accepted")
	}
}

// TestGossipKeyRenewal walks the keyring through a renewal of the key as
// gntds do (the new key accepted everywhere, then used, then the old one
// dropped): the members see each other alive at every step, a member
// holding only the old key is locked out at the end, and one holding only
// the new key gets in.
func TestGossipKeyRenewal(t *testing.T) {
	oldKey, newKey := testKey, bytes.Repeat([]byte{9}, 32)
	var gs []*Gossip
	for i := 0; i < 3; i++ {
		gs = append(gs, startMember(t, fmt.Sprintf("k%d", i), nextGossipIP(), 0, oldKey))
	}
	for _, g := range gs[1:] {
		if _, err := g.Join([]string{gs[0].Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	alive := func() {
		t.Helper()
		for _, g := range gs {
			for i := range gs {
				waitState(t, g, fmt.Sprintf("k%d", i), StateAlive, 10*time.Second)
			}
		}
	}
	alive()
	set := func(g *Gossip, primary []byte, accept ...[]byte) {
		t.Helper()
		if err := g.SetKeys(primary, accept...); err != nil {
			t.Fatal(err)
		}
	}
	// Trust: one member after the other accepts the new key.
	for _, g := range gs {
		set(g, oldKey, newKey)
	}
	// Use: one member sends with the new key before the others do.
	set(gs[0], newKey, oldKey)
	time.Sleep(time.Second) // several probe rounds
	alive()
	for _, g := range gs[1:] {
		set(g, newKey, oldKey)
	}
	// Done: the old key is dropped.
	for _, g := range gs {
		set(g, newKey)
		if ks := g.Keys(); len(ks) != 1 || !bytes.Equal(ks[0], newKey) {
			t.Fatalf("%s keeps keys %x", g.Addr(), ks)
		}
	}
	time.Sleep(time.Second)
	alive()
	old := startMember(t, "stale", nextGossipIP(), 0, oldKey)
	if n, err := old.Join([]string{gs[0].Addr()}); err == nil || n != 0 {
		t.Fatalf("a member with the dropped key joined: %d %v", n, err)
	}
	fresh := startMember(t, "fresh", nextGossipIP(), 0, newKey)
	if _, err := fresh.Join([]string{gs[1].Addr()}); err != nil {
		t.Fatal(err)
	}
	waitState(t, gs[0], "fresh", StateAlive, 10*time.Second)
	if _, ok := member(gs[0], "stale"); ok {
		t.Fatal("a member with the dropped key got in")
	}
	if err := gs[0].SetKeys([]byte("short")); err == nil {
		t.Fatal("a short key was accepted")
	}
}

// TestGossipDialFromOwnIP: streams leave from the member's address.
func TestGossipDialFromOwnIP(t *testing.T) {
	ip := nextGossipIP()
	ln, err := net.Listen("tcp", nextGossipIP()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bt, err := newBoundTransport(net.ParseIP(ip), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Shutdown()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		got <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		c.Close()
	}()
	c, err := bt.DialAddressTimeout(memberlist.Address{Addr: ln.Addr().String()}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if src := <-got; src != ip {
		t.Fatalf("stream came from %s, want %s", src, ip)
	}
}

func TestSuspicionTimeout(t *testing.T) {
	tm := LANGossipTiming()
	for _, c := range []struct {
		n        int
		min, max time.Duration
	}{
		{1, 1200 * time.Millisecond, 3600 * time.Millisecond},
		{6, 1200 * time.Millisecond, 3600 * time.Millisecond},
		{10, 1200 * time.Millisecond, 3600 * time.Millisecond},
		{100, 2400 * time.Millisecond, 7200 * time.Millisecond},
	} {
		min, max := tm.SuspicionTimeout(c.n)
		if min != c.min || max != c.max {
			t.Errorf("n=%d: %s..%s, want %s..%s", c.n, min, max, c.min, c.max)
		}
	}
}
