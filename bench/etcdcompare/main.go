// Command etcd-load is the etcd side of gnt's peer comparison
// (`make bench-etcd`): it drives a running 3-member etcd cluster with the
// same shape of load as gnt's TestBenchJobThroughput drives gnt (N clients,
// each with one write outstanding, for a fixed time, to the leader or
// spread over the members) and prints one line per case in the same form,
// so that both can be run side by side, on the same machine, at the same
// time of day.
//
// It is a separate Go module so that gnt's own module does not depend on
// etcd's client and gRPC.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.31:2379,127.0.0.32:2379,127.0.0.33:2379", "the members' client addresses, comma-separated")
	clients := flag.String("clients", "1,64,100", "client counts to run, comma-separated")
	targets := flag.String("targets", "leader,spread", "leader (every client sends to the leader) and/or spread (clients round-robin over the members)")
	duration := flag.Duration("d", 8*time.Second, "how long each case runs")
	valueSize := flag.Int("value", 256, "bytes per value")
	pids := flag.String("pids", "", "the members' process ids, comma-separated, to report their CPU per write")
	failover := flag.Bool("failover", false, "instead of the load cases, kill -9 the leader (its process id from -pids, in the order of -endpoints) while one client writes, and print the time from the kill to the first successful put begun after it")
	putTimeout := flag.Duration("put-timeout", 2*time.Second, "with -failover: how long one put may take before the client gives up on it and tries again")
	summarize := flag.String("summarize", "", "instead of running, read the BENCH lines in this file (etcd's and gnt's) and print each case's median rate and p50")
	flag.Parse()
	if *summarize != "" {
		f, err := os.Open(*summarize)
		if err == nil {
			err = summarizeLines(f, os.Stdout)
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcd-load:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if *failover {
		err = runFailover(strings.Split(*endpoints, ","), *pids, strings.Repeat("x", *valueSize), *putTimeout)
	} else {
		err = run(strings.Split(*endpoints, ","), *clients, *targets, *duration, *valueSize, *pids)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-load:", err)
		os.Exit(1)
	}
}

func run(endpoints []string, clientList, targetList string, d time.Duration, valueSize int, pidList string) error {
	counts, err := ints(clientList)
	if err != nil {
		return fmt.Errorf("-clients: %w", err)
	}
	pids, err := ints(pidList)
	if err != nil {
		return fmt.Errorf("-pids: %w", err)
	}
	leader, err := findLeader(endpoints)
	if err != nil {
		return err
	}
	value := strings.Repeat("x", valueSize)
	for _, target := range strings.Split(targetList, ",") {
		eps := endpoints
		switch target {
		case "leader":
			eps = []string{leader}
		case "spread":
		default:
			return fmt.Errorf("-targets: %q is neither leader nor spread", target)
		}
		for _, n := range counts {
			if err := runCase(eps, target, n, d, value, pids); err != nil {
				return err
			}
		}
	}
	return nil
}

// runCase runs n clients for d, one connection per member as gnt's
// clients keep one keep-alive connection each, and prints the result.
func runCase(eps []string, target string, n int, d time.Duration, value string, pids []int) error {
	conns := make([]*clientv3.Client, len(eps))
	for i, ep := range eps {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("connect to %s: %w", ep, err)
		}
		defer c.Close()
		conns[i] = c
	}
	// Warm the connections up, as gnt's benchmark does.
	for i, c := range conns {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Put(ctx, fmt.Sprintf("warm-%d", i), value)
		cancel()
		if err != nil {
			return fmt.Errorf("warm-up put to %s: %w", eps[i], err)
		}
	}
	s0, c0 := membersCPU(pids), selfCPU()
	var (
		done   atomic.Int64
		failed atomic.Int64
		mu     sync.Mutex
		lats   []time.Duration
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := conns[i%len(conns)]
			var local []time.Duration
			for j := 0; time.Now().Before(deadline); j++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				_, err := c.Put(ctx, fmt.Sprintf("b%d-%d", i, j%4), value)
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				local = append(local, time.Since(start))
				done.Add(1)
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	put := done.Load()
	if put == 0 {
		return errors.New("no put succeeded")
	}
	sort.Slice(lats, func(a, b int) bool { return lats[a] < lats[b] })
	cpu := ""
	if len(pids) > 0 {
		cpu = fmt.Sprintf(" cpu/put: etcds %.0fus client %.0fus", (membersCPU(pids)-s0)/float64(put)*1e6, (selfCPU()-c0)/float64(put)*1e6)
	}
	fmt.Printf("BENCH etcd to=%s clients=%d puts=%d failed=%d rate=%.0f puts/s p50=%v p99=%v max=%v%s\n",
		target, n, put, failed.Load(), float64(put)/d.Seconds(), pct(lats, 0.5), pct(lats, 0.99), pct(lats, 1), cpu)
	return nil
}

// runFailover measures what gnt's TestBenchFailover measures: one client
// (etcd's own, given every member) writes in a loop, the leader's process
// is killed with SIGKILL, and the time from the kill to the first
// successful put that began after it is printed. The caller restarts the
// killed member (the line names it) before the next round.
func runFailover(endpoints []string, pidList, value string, putTimeout time.Duration) error {
	pids, err := ints(pidList)
	if err != nil {
		return fmt.Errorf("-pids: %w", err)
	}
	if len(pids) != len(endpoints) {
		return fmt.Errorf("-pids: %d process ids for %d endpoints; give one per endpoint, in the same order", len(pids), len(endpoints))
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	if err := waitAllUp(c, endpoints); err != nil {
		return err
	}
	leader, err := findLeader(endpoints)
	if err != nil {
		return err
	}
	victim := -1
	for i, ep := range endpoints {
		if ep == leader {
			victim = i
		}
	}
	if victim < 0 {
		return fmt.Errorf("the leader %s is not one of %v", leader, endpoints)
	}
	var (
		killedAt  atomic.Int64
		recovered = make(chan time.Time, 1)
		done      = make(chan struct{})
		wg        sync.WaitGroup
	)
	defer wg.Wait()
	defer close(done)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), putTimeout)
			start := time.Now()
			_, err := c.Put(ctx, fmt.Sprintf("f-%d", n%32), value)
			cancel()
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			if k := killedAt.Load(); k != 0 && start.UnixNano() >= k {
				recovered <- time.Now()
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	killedAt.Store(t0.UnixNano())
	if err := syscall.Kill(pids[victim], syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %d (the leader, %s): %w", pids[victim], leader, err)
	}
	select {
	case t1 := <-recovered:
		fmt.Printf("BENCH etcd failover killed=%d endpoint=%s recovery=%v\n", victim+1, leader, t1.Sub(t0).Round(time.Millisecond))
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no successful put within 30s of killing the leader %s", leader)
	}
}

// waitAllUp waits until every member answers and knows the leader, and a
// put succeeds, as gnt's benchmark waits for its voters before a kill: a
// member restarted after the last kill has rejoined.
func waitAllUp(c *clientv3.Client, endpoints []string) error {
	var last error
	for try := 0; try < 100; try++ {
		up := 0
		for _, ep := range endpoints {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := c.Status(ctx, ep)
			cancel()
			if err != nil {
				last = err
			} else if st.Leader != 0 {
				up++
			}
		}
		if up == len(endpoints) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := c.Put(ctx, "up", "1")
			cancel()
			if err == nil {
				return nil
			}
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the members %v did not all come up (last error: %v)", endpoints, last)
}

// findLeader asks each member for its status and returns the address of
// the one that says it leads.
func findLeader(endpoints []string) (string, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	var last error
	for try := 0; try < 50; try++ {
		for _, ep := range endpoints {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := c.Status(ctx, ep)
			cancel()
			if err != nil {
				last = err
				continue
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				return ep, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "", fmt.Errorf("no member of %v says it leads (last error: %v)", endpoints, last)
}

func pct(lats []time.Duration, p float64) time.Duration {
	i := int(float64(len(lats)-1) * p)
	return lats[i].Round(10 * time.Microsecond)
}

func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// membersCPU is the user and system CPU, in seconds, the given processes
// have used so far (fields 14 and 15 of /proc/PID/stat, in clock ticks of
// 1/100 s).
func membersCPU(pids []int) float64 {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + k
	}
	return float64(ticks) / 100
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
