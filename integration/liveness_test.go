package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// cliLiveness parses `gnt node list`: node name -> its Liveness column
// (the last one).
func cliLiveness(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "Node ") || !strings.HasSuffix(lines[0], " Liveness") {
		t.Fatalf("node list has no Liveness column:\n%s", out)
	}
	live := map[string]string{}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) >= 2 {
			live[f[0]] = f[len(f)-1]
		}
	}
	return live
}

// nodeLiveness reads every node's liveness through the API.
func nodeLiveness(c *Cluster) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// A consistent read: a follower may not yet have applied what the
	// leader committed just before it died (it learns the commit index
	// from the next leader), and a stale read would show a liveness the
	// leader already replaced.
	var nodes []rpc.NodeInfo
	if _, err := c.Client().Do(ctx, http.MethodGet, "/2/nodes", url.Values{"bulk": {"1"}, "consistent": {"1"}}, nil, &nodes); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes {
		out[n.Name] = n.Liveness
	}
	return out, nil
}

func allAlive(live map[string]string, n int) error {
	if len(live) != n {
		return fmt.Errorf("%d nodes listed, want %d: %v", len(live), n, live)
	}
	for name, l := range live {
		if l != "alive" {
			return fmt.Errorf("%s is %s: %v", name, l, live)
		}
	}
	return nil
}

// TestLiveness: every gntd is a gossip member and the leader records
// each node's liveness. kill -9 of a node's gntd shows it dead in
// `gnt node list`, its restart alive again; a leader change marks no
// node dead but the old leader's; no gossip member is unknown.
func TestLiveness(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2})
	leader := c.WaitLeader(10 * time.Second)
	n := len(c.Members)
	c.Eventually(60*time.Second, 200*time.Millisecond, "every node alive in gnt node list", func() error {
		out, err := c.GNT("node", "list")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return allAlive(cliLiveness(t, out), n)
	})

	// Every gntd sees every other as a gossip member, and none unknown.
	for _, m := range c.Members {
		st, err := c.Status(m)
		if err != nil || st.Gossip == nil {
			t.Fatalf("status of %s: %v %+v", m.Name, err, st.Gossip)
		}
		alive := 0
		for _, gm := range st.Gossip.Members {
			if gm.State == "alive" {
				alive++
			}
		}
		if alive != n || len(st.Gossip.Unknown) != 0 || !strings.HasSuffix(st.Gossip.Addr, ":1818") {
			t.Errorf("%s sees %d alive of %d, unknown %v, addr %s", m.Name, alive, n, st.Gossip.Unknown, st.Gossip.Addr)
		}
	}

	// kill -9 of a plain node.
	victim := c.Member("node21")
	killed := time.Now()
	victim.Kill()
	took := c.Eventually(20*time.Second, 100*time.Millisecond, "node21 dead in gnt node list", func() error {
		out, err := c.GNT("node", "list")
		if err != nil {
			return err
		}
		if l := cliLiveness(t, out)["node21"]; l != "dead" {
			return fmt.Errorf("node21 is %s", l)
		}
		return nil
	})
	t.Logf("node21 dead in gnt node list %v after kill -9", took.Round(10*time.Millisecond))
	out, _ := c.GNT("node", "info", "node21")
	if !strings.Contains(out, "liveness: dead since ") {
		t.Errorf("node info node21:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ni, err := c.Client().Node(ctx, "node21"); err != nil || ni.LivenessSince == nil ||
		time.Unix(0, int64(*ni.LivenessSince*1e9)).Before(killed.Add(-time.Second)) {
		t.Errorf("node21 liveness since %v (killed %s): %v", ni.LivenessSince, killed.Format(time.StampMilli), err)
	}
	victim.Start(t)
	c.Eventually(30*time.Second, 100*time.Millisecond, "node21 alive again", func() error {
		live, err := nodeLiveness(c)
		if err != nil {
			return err
		}
		return allAlive(live, n)
	})

	// kill -9 of the leader: the new leader waits out its grace period,
	// and records only the old leader dead.
	leader.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		live, err := nodeLiveness(c)
		if err == nil {
			var dead []string
			for name, l := range live {
				if l == "dead" {
					dead = append(dead, name)
				}
			}
			sort.Strings(dead)
			if len(dead) > 1 || (len(dead) == 1 && dead[0] != leader.Name) {
				t.Fatalf("after the leader change nodes recorded dead: %v (%v)", dead, live)
			}
			if len(dead) == 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("old leader %s not recorded dead within 60s: %v %v", leader.Name, live, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	leader.Start(t)
	c.Eventually(60*time.Second, 200*time.Millisecond, "old leader alive again", func() error {
		live, err := nodeLiveness(c)
		if err != nil {
			return err
		}
		return allAlive(live, n)
	})

	// A node removed from the configuration while its gntd still runs
	// stays a gossip member: reported as unknown, never added back.
	if out, code := c.GNTExit("node", "remove", "node22", "--force"); code != 0 {
		t.Fatalf("node remove node22: %s", out)
	}
	newLeader := c.WaitLeader(10 * time.Second)
	c.Eventually(30*time.Second, 200*time.Millisecond, "node22 reported as an unknown member", func() error {
		st, err := c.Status(newLeader)
		if err != nil {
			return err
		}
		if st.Gossip == nil || len(st.Gossip.Unknown) != 1 || st.Gossip.Unknown[0] != "node22" {
			return fmt.Errorf("unknown members %+v", st.Gossip)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // a few liveness rounds
	live, err := nodeLiveness(c)
	if err != nil || len(live) != n-1 {
		t.Fatalf("after removing node22: %v %v", live, err)
	}
	if _, back := live["node22"]; back {
		t.Fatal("node22 was added back")
	}
	if !strings.Contains(newLeader.Log(), "gossip members that are not nodes of the configuration") {
		t.Error("the leader did not log the unknown member")
	}
}

// TestBenchLivenessKill measures, in a cluster of 6 real gntd processes
// (3 candidates, 3 nodes), the time from kill -9 of a node's gntd to its
// liveness being dead in the leader's state, over several kills; then
// again with the machine loaded by CPU burners (twice as many processes
// spinning as CPUs), counting the nodes other than the killed one that
// the leader recorded suspect or dead.
func TestBenchLivenessKill(t *testing.T) {
	benchOnly(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 3})
	n := len(c.Members)
	leader := c.WaitLeader(10 * time.Second)
	lc := c.ClientFor(leader)
	live := func() (map[string]rpc.NodeInfo, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		nodes, err := lc.Nodes(ctx, true)
		out := map[string]rpc.NodeInfo{}
		for _, ni := range nodes {
			out[ni.Name] = ni
		}
		return out, err
	}
	waitAllAlive := func() {
		c.Eventually(60*time.Second, 100*time.Millisecond, "all alive", func() error {
			m, err := live()
			if err != nil {
				return err
			}
			l := map[string]string{}
			for k, v := range m {
				l[k] = v.Liveness
			}
			return allAlive(l, n)
		})
	}
	waitAllAlive()
	victims := []string{"node21", "node22", "node23"}
	kills := func(load string) {
		var (
			recorded, detected []time.Duration
			mu                 sync.Mutex
			victim             string
			others             = map[string]bool{} // "node state since" of nodes other than the victim
		)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // watches the leader's state for nodes other than the victim going bad
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				m, err := live()
				if err != nil {
					continue
				}
				mu.Lock()
				for name, ni := range m {
					if name != victim && ni.Liveness != "alive" && ni.LivenessSince != nil {
						others[fmt.Sprintf("%s %s %.3f", name, ni.Liveness, *ni.LivenessSince)] = true
					}
				}
				mu.Unlock()
			}
		}()
		for trial := 0; trial < 6; trial++ {
			v := c.Member(victims[trial%len(victims)])
			mu.Lock()
			victim = v.Name
			mu.Unlock()
			killed := time.Now()
			v.Kill()
			var since float64
			took := c.Eventually(30*time.Second, 10*time.Millisecond, v.Name+" dead in the leader's state", func() error {
				m, err := live()
				if err != nil {
					return err
				}
				if ni := m[v.Name]; ni.Liveness != "dead" || ni.LivenessSince == nil {
					return fmt.Errorf("%s is %s", v.Name, ni.Liveness)
				}
				since = *m[v.Name].LivenessSince
				return nil
			})
			recorded = append(recorded, took)
			detected = append(detected, time.Unix(0, int64(since*1e9)).Sub(killed))
			t.Logf("%s kill %d: %s recorded dead after %s (gossip: %s)", load, trial, v.Name, took.Round(10*time.Millisecond),
				detected[len(detected)-1].Round(10*time.Millisecond))
			v.Start(t)
			waitAllAlive()
			mu.Lock()
			victim = ""
			mu.Unlock()
		}
		close(stop)
		wg.Wait()
		var bad []string
		for k := range others {
			bad = append(bad, k)
		}
		sort.Strings(bad)
		fmt.Printf("BENCH liveness_kill_to_dead members=%d load=%s kills=%d recorded_median=%s recorded_max=%s gossip_dead_median=%s gossip_dead_max=%s others_not_alive=%d\n",
			n, load, len(recorded), percentile(recorded, 0.5).Round(10*time.Millisecond), percentile(recorded, 1).Round(10*time.Millisecond),
			percentile(detected, 0.5).Round(10*time.Millisecond), percentile(detected, 1).Round(10*time.Millisecond), len(bad))
		for _, b := range bad {
			t.Logf("%s: a node other than the killed one recorded: %s", load, b)
		}
	}
	kills("none")
	burners := 2 * runtime.NumCPU()
	stopBurn := burnCPU(t, burners)
	defer stopBurn()
	time.Sleep(3 * time.Second)
	kills(fmt.Sprintf("%d-burner-procs", burners))
}

// burnCPU starts n processes that spin until the returned function (or
// the test's end) stops them.
func burnCPU(t *testing.T, n int) func() {
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		cmds = nil
	}
	for i := 0; i < n; i++ {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			stop()
			t.Fatalf("burner: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	t.Cleanup(stop)
	return stop
}
