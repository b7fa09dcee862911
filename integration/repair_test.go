package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// repairCluster starts 3 candidates and 3 nodes with gnt-oob-fake as
// every node's OOB helper and maintd on a test's time scale.
func repairCluster(t *testing.T, extra ...string) *Cluster {
	t.Helper()
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 3, ExtraArgs: append([]string{"--debug"}, extra...)})
	c.WaitLeader(10 * time.Second)
	for _, m := range c.Members {
		c.WaitAgent(m, 30*time.Second)
	}
	fakeOOB(t, c)
	if out, code := c.GNTExit("cluster", "modify", "--maintenance-interval", "2", "--repair-dead-grace", "3s",
		"--repair-job-delay", "0s", "--diagnose-interval", "1s"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	return c
}

// maintdGet reads path from the maintd of the member, returning the epoch
// header too.
func maintdGet(m *Member, path string, out any) (epoch string, err error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + m.IP + ":1816" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return resp.Header.Get("X-Gnt-Maintd-Epoch"), json.Unmarshal(b, out)
}

// instanceTags reads an instance's tags through the leader.
func (c *Cluster) instanceTags(name string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var tags []string
	if _, err := c.Client().Do(ctx, http.MethodGet, "/2/instances/"+name+"/tags", nil, nil, &tags); err != nil {
		return nil
	}
	return tags
}

func hasPrefix(tags []string, prefix string) string {
	for _, t := range tags {
		if strings.HasPrefix(t, prefix) {
			return t
		}
	}
	return ""
}

// TestHarepFencedFailover: a drbd instance tagged for automatic failover
// loses its primary node's gntd (kill -9). After the grace period the
// leader fences the node through gnt-oob-fake (power-off, confirmed, node
// offline), fails the instance over to its secondary, where it runs, and
// records the repair in harep's tags. The time from the kill to the
// instance running on the secondary is logged.
func TestHarepFencedFailover(t *testing.T) {
	c := repairCluster(t)
	if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "512", "--os-type", "debian", "-n", "node22:node23", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "add-tags", "web1", "ganeti:watcher:autorepair:failover"); err != nil {
		t.Fatalf("tag: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	in, err := c.Client().Instance(ctx, "web1")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*Member{c.Member("node21"), c.Member("node22"), c.Member("node23")}
	victim := c.Member("node22")
	killed := time.Now()
	victim.Kill()
	t.Logf("killed node22's gntd (primary of web1)")

	c.Eventually(60*time.Second, 100*time.Millisecond, "web1 running on node23", func() error {
		p, _, _, err := c.instanceNodes("web1")
		if err != nil {
			return err
		}
		if p != "node23" {
			return fmt.Errorf("primary is %s", p)
		}
		if on := c.runningOn(t, in.UUID, nodes); len(on) != 1 || on[0] != "node23" {
			return fmt.Errorf("running on %v", on)
		}
		return nil
	})
	t.Logf("figure: kill -9 of the primary's gntd -> web1 running on its secondary: %v (grace 3s, rounds every 2s, gossip detection included)", time.Since(killed).Round(10*time.Millisecond))

	// Fenced: the node is offline and powered off.
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	n, err := c.Client().Node(ctx, "node22")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if !n.Offline || n.Powered == nil || *n.Powered {
		t.Fatalf("node22 after fencing: offline=%v powered=%v", n.Offline, n.Powered)
	}
	// Then, as the seed says, a second repair: the new secondary node22 is
	// down, so harep replaces it (fix-storage). The instance ends with one
	// result tag, success, and no pending one.
	c.Eventually(30*time.Second, 200*time.Millisecond, "harep's repairs done", func() error {
		tags := c.instanceTags("web1")
		if tag := hasPrefix(tags, "ganeti:watcher:autorepair:pending:"); tag != "" {
			return fmt.Errorf("still pending: %s", tag)
		}
		if tag := hasPrefix(tags, "ganeti:watcher:autorepair:result:"); tag == "" || !strings.Contains(tag, ":success:") {
			return fmt.Errorf("tags %v", tags)
		}
		p, s, _, err := c.instanceNodes("web1")
		if err != nil {
			return err
		}
		if p != "node23" || len(s) != 1 || s[0] == "node22" || s[0] == "node23" {
			return fmt.Errorf("web1 on %s, secondaries %v", p, s)
		}
		return nil
	})
	t.Logf("web1's tags: %v", c.instanceTags("web1"))
	out, err := c.GNT("repair", "status", "web1")
	if err != nil {
		t.Fatalf("repair status: %v\n%s", err, out)
	}
	t.Logf("gnt repair status web1:\n%s", out)
}

// TestBreakerOpensWhenHalfTheNodesDie: three of six nodes die at once:
// more than 30% are unhealthy, so the circuit breaker opens, nothing is
// fenced or failed over, and the status says why.
func TestBreakerOpensWhenHalfTheNodesDie(t *testing.T) {
	c := repairCluster(t)
	for i, nodes := range []string{"node21:node22", "node22:node23", "node23:node21"} {
		name := fmt.Sprintf("web%d", i+1)
		if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", nodes, name); err != nil {
			t.Fatalf("instance add %s: %v\n%s", name, err, out)
		}
	}
	if out, err := c.GNT("cluster", "add-tags", "ganeti:watcher:autorepair:reinstall"); err != nil {
		t.Fatalf("tag: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	before, err := c.Client().Jobs(ctx, false)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node21", "node22", "node23"} {
		c.Member(name).Kill()
	}
	t.Logf("killed node21, node22 and node23")
	leader := c.WaitLeader(10 * time.Second)
	c.Eventually(30*time.Second, 200*time.Millisecond, "breaker open", func() error {
		var v struct {
			Plan struct {
				Breaker struct {
					Open   bool   `json:"open"`
					Reason string `json:"reason"`
				} `json:"breaker"`
			} `json:"plan"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.ClientFor(leader).Do(ctx, http.MethodGet, "/2/gnt/repair", nil, nil, &v); err != nil {
			return err
		}
		if !v.Plan.Breaker.Open {
			return fmt.Errorf("breaker closed")
		}
		return nil
	})
	// Well past the grace period and several rounds: nothing was
	// submitted, no node fenced.
	time.Sleep(8 * time.Second)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	after, err := c.Client().Jobs(ctx, false)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("jobs were submitted with the breaker open: %d before, %d after", len(before), len(after))
	}
	for _, name := range []string{"node21", "node22", "node23"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := c.Client().Node(ctx, name)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if n.Offline {
			t.Fatalf("%s was marked offline (fenced) with the breaker open", name)
		}
	}
	out, err := c.GNT("repair", "status")
	if err != nil || !strings.Contains(out, "OPEN") {
		t.Fatalf("repair status does not say the breaker is open: %v\n%s", err, out)
	}
	t.Logf("gnt repair status:\n%s", out)
}
