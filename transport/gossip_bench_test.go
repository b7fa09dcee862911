package transport

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The gossip benchmarks start many in-process members on loopback
// addresses and print figures; they assert only that the work was done.
// Run them with `make bench` (GNT_BENCH=1). GNT_BENCH_GOSSIP_SIZES (e.g.
// "6,50,100") and GNT_BENCH_GOSSIP_TRIALS override the defaults.

func benchOnly(t *testing.T) {
	if os.Getenv("GNT_BENCH") == "" {
		t.Skip("benchmark: set GNT_BENCH=1 (make bench) to run it")
	}
}

// stockGossipTiming is memberlist's DefaultLANConfig, for comparison.
func stockGossipTiming() GossipTiming {
	return GossipTiming{
		ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond,
		SuspicionMult: 4, SuspicionMaxMult: 6,
		GossipInterval: 200 * time.Millisecond, GossipNodes: 3, RetransmitMult: 4,
		PushPull: 30 * time.Second, TCPTimeout: 10 * time.Second,
		GossipToTheDead: 30 * time.Second, Poll: 100 * time.Millisecond, TCPPings: true,
	}
}

func benchSizes(def []int) []int {
	v := os.Getenv("GNT_BENCH_GOSSIP_SIZES")
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err == nil && n >= 3 {
			out = append(out, n)
		}
	}
	return out
}

// benchTiming applies GNT_BENCH_GOSSIP_TIMING overrides to t, e.g.
// "probe=250ms,probe_timeout=125ms,suspicion=5,suspicion_max=3,gossip=200ms,gossip_nodes=3",
// for trying settings without rebuilding.
func benchTiming(t GossipTiming) (GossipTiming, string) {
	v := os.Getenv("GNT_BENCH_GOSSIP_TIMING")
	if v == "" {
		return t, ""
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(kv), "=")
		d, _ := time.ParseDuration(val)
		n, _ := strconv.Atoi(val)
		switch k {
		case "probe":
			t.ProbeInterval = d
		case "probe_timeout":
			t.ProbeTimeout = d
		case "suspicion":
			t.SuspicionMult = n
		case "suspicion_max":
			t.SuspicionMaxMult = n
		case "gossip":
			t.GossipInterval = d
		case "gossip_nodes":
			t.GossipNodes = n
		case "retransmit":
			t.RetransmitMult = n
		case "push_pull":
			t.PushPull = d
		case "tcp_pings":
			t.TCPPings = val == "on"
		}
	}
	return t, "(" + v + ")"
}

func benchTrials(def int) int {
	if n, err := strconv.Atoi(os.Getenv("GNT_BENCH_GOSSIP_TRIALS")); err == nil && n > 0 {
		return n
	}
	return def
}

// TestBenchGossipDetection measures, with n in-process members, the time
// from stopping one member abruptly (no Leave) to the first member (the
// one a leader would read) and to every member recording it dead, with
// gntd's settings and, for comparison, memberlist's stock ones.
func TestBenchGossipDetection(t *testing.T) {
	benchOnly(t)
	tm, label := benchTiming(LANGossipTiming())
	for _, n := range benchSizes([]int{6, 50, 100}) {
		runDetection(t, n, benchTrials(5), "lan"+label, tm, load{})
	}
	if label != "" {
		return
	}
	for _, n := range benchSizes([]int{6, 50}) {
		runDetection(t, n, benchTrials(5), "stock", stockGossipTiming(), load{})
	}
}

// TestBenchGossipLoaded is the detection benchmark on a loaded machine,
// counting false deaths: members other than the stopped one that any
// member recorded dead. The load is twice as many CPU burners as CPUs,
// either other processes (load=procs: what a node sharing its machine
// sees; the kernel schedules the members' threads fairly against them)
// or goroutines in the members' own process (load=goroutines: harsher,
// since Go's scheduler queues every member's wake-up behind them, and
// all hundred members share what is left of the process).
func TestBenchGossipLoaded(t *testing.T) {
	benchOnly(t)
	tm, label := benchTiming(LANGossipTiming())
	burners := runtime.NumCPU()
	if n, err := strconv.Atoi(os.Getenv("GNT_BENCH_GOSSIP_BURNERS")); err == nil && n > 0 {
		burners = n
	}
	for _, n := range benchSizes([]int{100}) {
		if os.Getenv("GNT_BENCH_GOSSIP_LOAD") != "goroutines" {
			runDetection(t, n, benchTrials(5), "lan"+label, tm, load{procs: burners})
		}
		if os.Getenv("GNT_BENCH_GOSSIP_LOAD") != "procs" {
			runDetection(t, n, benchTrials(5), "lan"+label, tm, load{goroutines: burners})
		}
	}
}

// load is the CPU load a benchmark runs under.
type load struct{ procs, goroutines int }

func (l load) String() string {
	switch {
	case l.procs > 0:
		return fmt.Sprintf("%d-burner-procs", l.procs)
	case l.goroutines > 0:
		return fmt.Sprintf("%d-burner-goroutines", l.goroutines)
	}
	return "none"
}

// start starts the burners; the returned function stops them.
func (l load) start(t *testing.T) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < l.goroutines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := 0; j < 1_000_000; j++ {
					x += j
				}
			}
		}()
	}
	var cmds []*exec.Cmd
	for i := 0; i < l.procs; i++ {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("burner: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	return func() {
		close(stop)
		wg.Wait()
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
}

type benchCluster struct {
	t      *testing.T
	tm     GossipTiming
	log    hclog.Logger // warnings and errors of all members, to stderr
	mu     sync.Mutex
	gs     []*Gossip
	victim string // the member that may be dead now

	falseDeaths   atomic.Int64
	liveSuspected atomic.Int64
	seen          map[string]bool // (observer, member, since) of reported false states
	wg            sync.WaitGroup
	stop          chan struct{}
}

func runDetection(t *testing.T, n, trials int, label string, tm GossipTiming, ld load) {
	c := &benchCluster{t: t, tm: tm, seen: map[string]bool{}, stop: make(chan struct{}), log: benchLogger()}
	base := fmt.Sprintf("127.78.%d.", os.Getpid()%250+1)
	for i := 0; i < n; i++ {
		c.gs = append(c.gs, c.start(fmt.Sprintf("b%03d", i), base+strconv.Itoa(i+1), 0))
	}
	defer func() {
		close(c.stop)
		c.wg.Wait()
		var wg sync.WaitGroup
		for _, g := range c.gs {
			wg.Add(1)
			go func() { defer wg.Done(); g.Shutdown() }()
		}
		wg.Wait()
	}()
	// Members join one at a time, as nodes of a real cluster would, not
	// in one burst of a hundred alive broadcasts.
	for _, g := range c.gs[1:] {
		c.join(g)
		time.Sleep(30 * time.Millisecond)
	}
	if err := c.waitAll(func(ms []Member) bool { return countState(ms, StateAlive) == n }, 120*time.Second, "all alive"); err != nil {
		t.Fatal(err)
	}
	for _, g := range c.gs {
		c.wg.Add(1)
		go c.monitor(g)
	}
	stall := watchStalls(c.stop, &c.wg)
	idle := idleCPU(5 * time.Second)
	t.Logf("%d members converged; load %s on", n, ld)
	stopLoad := ld.start(t)
	defer stopLoad()
	if ld != (load{}) {
		time.Sleep(5 * time.Second) // loaded, before any kill: false suspicions show here too
	}

	var (
		first, all []time.Duration
		collapsed  string
	)
	for trial := 0; trial < trials && collapsed == ""; trial++ {
		vi := 1 + trial*7%(n-1) // never member 0, the observer
		v := c.gs[vi]
		name := memberName(v)
		c.mu.Lock()
		c.victim = name
		c.mu.Unlock()
		killed := time.Now()
		t.Logf("trial %d: stopping %s", trial, name)
		v.Shutdown()
		if err := c.waitOthers(vi, func(ms []Member) bool { return stateIn(ms, name) == StateDead }, 60*time.Second, name+" dead"); err != nil {
			collapsed = err.Error()
			break
		}
		var worst time.Duration
		for i, g := range c.gs {
			if i == vi {
				continue
			}
			d := sinceOf(g.Members(), name).Sub(killed)
			if i == 0 {
				first = append(first, d)
			}
			worst = max(worst, d)
		}
		all = append(all, worst)
		// Back on its address, so the next trial has n members again.
		host, port, _ := net.SplitHostPort(v.Addr())
		p, _ := strconv.Atoi(port)
		c.mu.Lock()
		c.gs[vi] = c.start(name, host, p)
		c.mu.Unlock()
		t.Logf("trial %d: %s dead everywhere; restarting it", trial, name)
		c.join(c.gs[vi])
		c.wg.Add(1)
		go c.monitor(c.gs[vi])
		if err := c.waitAll(func(ms []Member) bool { return countState(ms, StateAlive) == n }, 60*time.Second, name+" alive again"); err != nil {
			collapsed = err.Error()
		}
		c.mu.Lock()
		c.victim = ""
		c.mu.Unlock()
	}
	minT, maxT := tm.SuspicionTimeout(n)
	fmt.Printf("BENCH gossip_kill_to_dead members=%d timing=%s load=%s trials=%d observer_median=%s observer_max=%s all_median=%s all_max=%s suspicion=%s..%s live_suspected=%d false_deaths=%d idle_cpu=%.0f%% max_stall=%s\n",
		n, label, ld, len(all), ms(median(first)), ms(maxOf(first)), ms(median(all)), ms(maxOf(all)),
		minT.Round(time.Millisecond), maxT.Round(time.Millisecond), c.liveSuspected.Load(), c.falseDeaths.Load(), idle*100, ms(time.Duration(stall.Load())))
	if collapsed != "" {
		// A figure, not a test failure: the members did not settle again.
		fmt.Printf("BENCH gossip_kill_to_dead members=%d timing=%s load=%s did not settle: %s\n", n, label, ld, collapsed)
	}
}

func (c *benchCluster) start(name, ip string, port int) *Gossip {
	g, err := NewGossip(GossipConfig{Name: name, BindIP: ip, Port: port, Key: testKey,
		Meta: Meta{Role: "node", Version: "bench"}, Timing: c.tm, Log: c.log})
	if err != nil {
		c.t.Fatalf("starting %s: %v", name, err)
	}
	return g
}

// benchLogger drops the members' logs: a hundred members logging under
// churn would slow the process down and make the churn worse.
func benchLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Off, Output: io.Discard})
}

// join joins g to the first member, retrying: on a starved machine a
// push/pull may time out.
func (c *benchCluster) join(g *Gossip) {
	var err error
	for try := 0; try < 5; try++ {
		if _, err = g.Join([]string{c.gs[0].Addr()}); err == nil {
			return
		}
	}
	c.t.Fatalf("join: %v", err)
}

// monitor counts, as g sees them, live members other than the current
// victim that became suspect or dead.
func (c *benchCluster) monitor(g *Gossip) {
	defer c.wg.Done()
	self := memberName(g)
	for {
		select {
		case <-c.stop:
			return
		case <-g.done: // stopped: its frozen view is no one's
			return
		case <-g.Changed():
		}
		time.Sleep(500 * time.Millisecond) // at most two reads a second per member
		c.mu.Lock()
		victim := c.victim
		c.mu.Unlock()
		for _, m := range g.Members() {
			if m.Name == victim || (m.State != StateDead && m.State != StateSuspect) {
				continue
			}
			key := fmt.Sprintf("%s %s %s %d", self, m.Name, m.State, m.Since.UnixNano())
			c.mu.Lock()
			fresh := !c.seen[key]
			c.seen[key] = true
			c.mu.Unlock()
			if !fresh {
				continue
			}
			if m.State == StateDead {
				c.falseDeaths.Add(1)
				c.t.Logf("false death: %s recorded %s dead at %s", self, m.Name, m.Since.Format(time.StampMilli))
			} else if c.liveSuspected.Add(1) == 1 {
				c.t.Logf("first suspicion of a live member: %s suspects %s since %s", self, m.Name, m.Since.Format(time.StampMilli))
			}
		}
	}
}

func (c *benchCluster) waitAll(ok func([]Member) bool, timeout time.Duration, what string) error {
	return c.waitOthers(-1, ok, timeout, what)
}

func (c *benchCluster) waitOthers(skip int, ok func([]Member) bool, timeout time.Duration, what string) error {
	deadline := time.Now().Add(timeout)
	for {
		done := true
		c.mu.Lock()
		gs := append([]*Gossip(nil), c.gs...)
		c.mu.Unlock()
		for i, g := range gs {
			if i != skip && !ok(g.Members()) {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %s: %s", timeout, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// watchStalls records the longest delay of a 10 ms timer tick: how long
// the process (or the machine) at worst did not run a ready goroutine.
func watchStalls(stop chan struct{}, wg *sync.WaitGroup) *atomic.Int64 {
	var worst atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				if d := now.Sub(last) - 10*time.Millisecond; int64(d) > worst.Load() {
					worst.Store(int64(d))
				}
				last = now
			}
		}
	}()
	return &worst
}

// idleCPU is the CPU this process used over d, as a fraction of one core.
func idleCPU(d time.Duration) float64 {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start, t0 := cpu(), time.Now()
	time.Sleep(d)
	return float64(cpu()-start) / float64(time.Since(t0))
}

func memberName(g *Gossip) string {
	for _, m := range g.Members() {
		if m.Addr == g.Addr() {
			return m.Name
		}
	}
	return ""
}

func countState(ms []Member, s MemberState) int {
	n := 0
	for _, m := range ms {
		if m.State == s {
			n++
		}
	}
	return n
}

func stateIn(ms []Member, name string) MemberState {
	for _, m := range ms {
		if m.Name == name {
			return m.State
		}
	}
	return ""
}

func sinceOf(ms []Member, name string) time.Time {
	for _, m := range ms {
		if m.Name == name {
			return m.Since
		}
	}
	return time.Time{}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxOf(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func ms(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
