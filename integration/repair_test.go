package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/repair"
)

// repairCluster starts 3 candidates and 3 nodes with gnt-oob-fake as
// every node's OOB helper and maintd on a test's time scale, doing
// harep's work (off in a new cluster).
func repairCluster(t *testing.T, o ClusterOptions) *Cluster {
	t.Helper()
	o.Candidates, o.Nodes = 3, 3
	o.ExtraArgs = append([]string{"--debug"}, o.ExtraArgs...)
	c := NewCluster(t, o)
	c.WaitLeader(10 * time.Second)
	for _, m := range c.Members {
		c.WaitAgent(m, 30*time.Second)
	}
	fakeOOB(t, c)
	if out, code := c.GNTExit("cluster", "modify", "--maintenance-interval", "2", "--repair-dead-grace", "3s",
		"--repair-job-delay", "0s", "--diagnose-interval", "1s", "--maintd-harep", "yes"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	return c
}

// maintdGet reads path from the maintd of the member, returning the epoch
// header too.
func maintdGet(m *Member, path string, out any) (epoch string, err error) {
	cl := http.Client{Timeout: 2 * time.Second, Transport: m.c.HTTP().Transport}
	resp, err := cl.Get("https://" + m.IP + ":1816" + path)
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

// maintdRedirects checks that GET /1/status on m's maintd port answers
// 307 to the same path on leader's.
func maintdRedirects(m, leader *Member) error {
	cl := http.Client{Timeout: 2 * time.Second, Transport: m.c.HTTP().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Get("https://" + m.IP + ":1816/1/status?x=1")
	if err != nil {
		return err
	}
	resp.Body.Close()
	want := "https://" + leader.IP + ":1816/1/status?x=1"
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		return fmt.Errorf("%s: %d Location %q, want 307 to %s", m.Name, resp.StatusCode, resp.Header.Get("Location"), want)
	}
	if resp.Header.Get(repair.HeaderEpoch) != "" {
		return fmt.Errorf("%s's redirect carries a maintd epoch", m.Name)
	}
	return nil
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
	c := repairCluster(t, ClusterOptions{})
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
	c := repairCluster(t, ClusterOptions{})
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

// incident is what maintd's /1/status lists.
type incident struct {
	UUID         string  `json:"uuid"`
	Node         string  `json:"node"`
	Action       string  `json:"action"`
	RepairStatus string  `json:"repair-status"`
	Jobs         []int64 `json:"jobs"`
	Tag          string  `json:"tag"`
	Reason       string  `json:"gnt_reason"`
}

// TestMaintdEvacuateAcrossFailover: node21's self-diagnose says
// "evacuate". maintd notes an incident, drains node21 and moves its drbd
// instances away; the leader is killed (-9) in the middle of it, and the
// new leader's maintd (port 1816 on the new leader) carries on the same
// incident to the end: node21 empty and tagged maintd:repairready:<id>.
// Once the node reports Ok and the tag is removed, the incident is gone.
// diagnoseCluster is a repairCluster whose every node's self-diagnose
// command (hw-check, white-listed) prints a state file the test rewrites:
// state[node name] is its path.
func diagnoseCluster(t *testing.T) (c *Cluster, state map[string]string) {
	state = map[string]string{}
	c = repairCluster(t, ClusterOptions{
		ExtraArgs: []string{"--fake-delay", "700ms", "--diagnose-min-interval", "500ms"},
		MemberArgs: func(name, dataDir string) []string {
			dir := dataDir + "-diagnose"
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			st := filepath.Join(filepath.Dir(dataDir), name+"-diagnose-state.json")
			state[name] = st
			if err := os.WriteFile(st, []byte(`{"status":"Ok"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "hw-check"), []byte("#!/bin/sh\ncat "+st+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{"--diagnose-commands-dir", dir}
		},
	})
	return c, state
}

func TestMaintdEvacuateAcrossFailover(t *testing.T) {
	c, state := diagnoseCluster(t)
	// The candidates host no instances here, so killing the leader does
	// not also kill a node a move is using (a move whose new node dies
	// fails, and maintd fails the incident, as Ganeti's would).
	for _, m := range c.Candidates() {
		if out, err := c.GNT("node", "modify", m.Name, "--vm-capable", "no"); err != nil {
			t.Fatalf("node modify %s: %v\n%s", m.Name, err, out)
		}
	}
	for i, nodes := range []string{"node21:node22", "node22:node21", "node21:node23"} {
		name := fmt.Sprintf("web%d", i+1)
		if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", nodes, name); err != nil {
			t.Fatalf("instance add %s: %v\n%s", name, err, out)
		}
	}
	if out, code := c.GNTExit("cluster", "modify", "--diagnose-data-collector-filename", "hw-check"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	if err := os.WriteFile(state["node21"], []byte(`{"status":"evacuate","command":"","details":{"disk":"sda","smart":"reallocated sectors"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	leader := c.WaitLeader(10 * time.Second)
	var inc incident
	c.Eventually(30*time.Second, 100*time.Millisecond, "an incident for node21 with a move under way", func() error {
		var list []incident
		if _, err := maintdGet(leader, "/1/status", &list); err != nil {
			return err
		}
		for _, in := range list {
			if in.Node == "node21" && in.Action == "evacuate" && len(in.Jobs) >= 2 {
				inc = in
				return nil
			}
		}
		return fmt.Errorf("incidents %+v", list)
	})
	t.Logf("incident %s: %s, jobs %v; killing the leader %s", inc.UUID, inc.RepairStatus, inc.Jobs, leader.Name)
	leader.Kill()
	killed := time.Now()
	next := c.WaitLeader(15 * time.Second)
	var epoch string
	c.Eventually(20*time.Second, 50*time.Millisecond, "the new leader's maintd", func() error {
		var v []int
		e, err := maintdGet(next, "/", &v)
		epoch = e
		return err
	})
	t.Logf("figure: maintd answered on the new leader %s (epoch %s) %v after the kill of the old one", next.Name, epoch, time.Since(killed).Round(10*time.Millisecond))
	for _, m := range c.Candidates() {
		if m != next && m != leader {
			// Another candidate's maintd port sends to the new leader's.
			c.Eventually(10*time.Second, 100*time.Millisecond, m.Name+"'s maintd port redirects to "+next.Name, func() error {
				return maintdRedirects(m, next)
			})
		}
	}
	var done incident
	c.Eventually(90*time.Second, 200*time.Millisecond, "the incident completed by the new leader", func() error {
		var list []incident
		if _, err := maintdGet(next, "/1/status", &list); err != nil {
			return err
		}
		for _, in := range list {
			if in.UUID == inc.UUID {
				done = in
				if in.RepairStatus == "failed" {
					for _, id := range in.Jobs {
						out, _ := c.GNT("--json", "job", "info", fmt.Sprint(id))
						t.Logf("job %d:\n%s", id, out)
					}
					t.Fatalf("incident %s failed: %s", in.UUID, in.Reason)
				}
				if in.RepairStatus != "completed" {
					var js []string
					for _, id := range in.Jobs {
						if j, err := c.job(id); err == nil {
							js = append(js, fmt.Sprintf("%d:%s", id, j.Status))
						}
					}
					var plan json.RawMessage
					maintdGet(next, "/1/plan", &plan)
					return fmt.Errorf("incident %s is %s (%s), jobs %v; plan %s", in.UUID, in.RepairStatus, in.Reason, js, plan)
				}
				return nil
			}
		}
		return fmt.Errorf("incident %s not listed in %+v", inc.UUID, list)
	})
	// Read from the leader, whose maintd reported the completion: a
	// follower learns the last commit up to two commit timeouts later.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	n, err := c.ClientFor(next).Node(ctx, "node21")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if !n.Drained || len(n.PinstList) != 0 || len(n.SinstList) != 0 {
		t.Fatalf("node21 after evacuation: drained=%v primaries %v secondaries %v", n.Drained, n.PinstList, n.SinstList)
	}
	tag := "maintd:repairready:" + inc.UUID
	if out, err := c.GNT("--consistent", "node", "list-tags", "node21"); err != nil || !strings.Contains(out, tag) {
		t.Fatalf("node21's tags do not include %s: %v\n%s", tag, err, out)
	}
	t.Logf("incident %s completed with jobs %v", done.UUID, done.Jobs)
	out, _ := c.GNT("maint", "status")
	t.Logf("gnt maint status:\n%s", out)

	// Repaired: the node reports Ok; the operator removes the tag.
	if err := os.WriteFile(state["node21"], []byte(`{"status":"Ok"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.GNT("node", "remove-tags", "node21", tag); err != nil {
		t.Fatalf("remove-tags: %v\n%s", err, out)
	}
	c.Eventually(30*time.Second, 200*time.Millisecond, "the incident forgotten", func() error {
		var list []incident
		if _, err := maintdGet(c.WaitLeader(10*time.Second), "/1/status", &list); err != nil {
			return err
		}
		for _, in := range list {
			if in.UUID == inc.UUID {
				return fmt.Errorf("still listed: %+v", in)
			}
		}
		return nil
	})
}

// TestBenchRepairFailover measures, in the demo's repair configuration
// (gntd dev: dead grace 5 s, rounds every 3 s, harep's job delay 1 s,
// gnt-oob-fake fencing), the time from kill -9 of a node's gntd to its
// drbd instance running on the secondary. Each kill is followed by the
// node powered on again and brought back online before the next.
func TestBenchRepairFailover(t *testing.T) {
	benchOnly(t)
	c := repairCluster(t, ClusterOptions{})
	if out, code := c.GNTExit("cluster", "modify", "--maintenance-interval", "3", "--repair-dead-grace", "5s",
		"--repair-job-delay", "1s", "--diagnose-interval", "2s"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	if out, err := c.GNT("cluster", "add-tags", "ganeti:watcher:autorepair:failover"); err != nil {
		t.Fatalf("tag: %v\n%s", err, out)
	}
	nodes := []*Member{c.Member("node21"), c.Member("node22"), c.Member("node23")}
	var took []time.Duration
	for i, pair := range []string{"node21:node22", "node22:node23", "node23:node21"} {
		name := fmt.Sprintf("bench%d", i)
		if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", pair, name); err != nil {
			t.Fatalf("instance add: %v\n%s", err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		in, err := c.Client().Instance(ctx, name)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		primary, secondary, _ := strings.Cut(pair, ":")
		victim := c.Member(primary)
		start := time.Now()
		victim.Kill()
		c.Eventually(90*time.Second, 50*time.Millisecond, name+" running on "+secondary, func() error {
			if on := c.runningOn(t, in.UUID, nodes); len(on) != 1 || on[0] != secondary {
				return fmt.Errorf("running on %v", on)
			}
			return nil
		})
		d := time.Since(start)
		took = append(took, d)
		t.Logf("kill -9 of %s -> %s running on %s: %v", primary, name, secondary, d.Round(10*time.Millisecond))
		// Bring the node back for the next kill (the breaker would count
		// two dead nodes of six as too many).
		if out, err := c.GNT("node", "power", "on", primary); err != nil {
			t.Fatalf("power on: %v\n%s", err, out)
		}
		if out, err := c.GNT("node", "modify", primary, "--offline", "no"); err != nil {
			t.Fatalf("online: %v\n%s", err, out)
		}
		c.Eventually(60*time.Second, 200*time.Millisecond, primary+" alive", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := c.Client().Node(ctx, primary)
			if err != nil {
				return err
			}
			if n.Liveness != "alive" {
				return fmt.Errorf("%s is %s", primary, n.Liveness)
			}
			return nil
		})
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("figure: kill -9 of a node to its drbd instance running on the secondary, demo settings (dead grace 5 s, rounds 3 s, job delay 1 s, gossip detection ~2 s): %d kills, median %v, max %v",
		len(took), took[len(took)/2].Round(10*time.Millisecond), took[len(took)-1].Round(10*time.Millisecond))
}

// TestMaintdEvacuatesCandidate: a master candidate's self-diagnose says
// "evacuate" while the candidate pool is at its size (3 of 3). maintd
// promotes a live node in its place and drains the candidate in one job;
// the incident completes, and Raft keeps 3 voters, the drained node no
// longer one of them.
func TestMaintdEvacuatesCandidate(t *testing.T) {
	c, state := diagnoseCluster(t)
	if out, code := c.GNTExit("cluster", "modify", "--diagnose-data-collector-filename", "hw-check"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	leader := c.WaitLeader(10 * time.Second)
	var victim *Member
	for _, m := range c.Candidates() {
		if m != leader {
			victim = m
			break
		}
	}
	if err := os.WriteFile(state[victim.Name], []byte(`{"status":"evacuate","command":"","details":{"psu":"2 of 2 failed"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var done incident
	c.Eventually(60*time.Second, 200*time.Millisecond, "the candidate's incident completed", func() error {
		var list []incident
		if _, err := maintdGet(c.WaitLeader(10*time.Second), "/1/status", &list); err != nil {
			return err
		}
		for _, in := range list {
			if in.Node != victim.Name {
				continue
			}
			switch in.RepairStatus {
			case "failed":
				t.Fatalf("incident %s on %s failed: %s", in.UUID, in.Node, in.Reason)
			case "completed":
				done = in
				return nil
			}
			return fmt.Errorf("incident %s is %s: %s", in.UUID, in.RepairStatus, in.Reason)
		}
		return fmt.Errorf("no incident for %s in %+v", victim.Name, list)
	})
	t.Logf("incident %s completed, jobs %v", done.UUID, done.Jobs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.ClientFor(c.WaitLeader(10*time.Second)).Node(ctx, victim.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Drained || n.MasterCandidate {
		t.Fatalf("%s after the evacuation: drained=%v master_candidate=%v; want drained, not a candidate", victim.Name, n.Drained, n.MasterCandidate)
	}
	promoted := ""
	for _, m := range c.Members {
		if m.Candidate {
			continue
		}
		if x, err := c.ClientFor(leader).Node(ctx, m.Name); err == nil && x.MasterCandidate {
			promoted = m.Name
		}
	}
	if promoted == "" {
		t.Fatalf("no node was promoted in place of %s", victim.Name)
	}
	var peers []string
	c.Eventually(60*time.Second, 200*time.Millisecond, "3 voters, "+promoted+" among them and "+victim.Name+" not", func() error {
		ps := c.WaitVoters(3, 30*time.Second)
		peers = peers[:0]
		ok := false
		for _, p := range ps {
			if p.Suffrage != "voter" {
				continue
			}
			peers = append(peers, p.ID)
			if p.ID == victim.Name {
				return fmt.Errorf("%s still votes: %v", victim.Name, peers)
			}
			ok = ok || p.ID == promoted
		}
		if !ok {
			return fmt.Errorf("%s does not vote yet: %v", promoted, peers)
		}
		return nil
	})
	t.Logf("%s promoted in place of %s; voters %v", promoted, victim.Name, peers)
}

// TestMaintdIncidentNotedAtOnce: with rounds an hour apart, an incident
// seen between rounds is in the state at once, noted, with the id it
// keeps: listed by maintd's /1/status and `gnt maint status`, and
// cancelled by `gnt maint cancel` before any job was submitted for it.
func TestMaintdIncidentNotedAtOnce(t *testing.T) {
	c, state := diagnoseCluster(t)
	if out, code := c.GNTExit("cluster", "modify", "--diagnose-data-collector-filename", "hw-check", "--maintenance-interval", "3600"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	// A first incident fails at once (a live-repair without a command),
	// which records a round: the next one is an hour away.
	if err := os.WriteFile(state["node22"], []byte(`{"status":"live-repair"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	find := func(node string) (incident, error) {
		var list []incident
		if _, err := maintdGet(c.WaitLeader(10*time.Second), "/1/status", &list); err != nil {
			return incident{}, err
		}
		for _, in := range list {
			if in.Node == node {
				return in, nil
			}
		}
		return incident{}, fmt.Errorf("no incident for %s in %+v", node, list)
	}
	c.Eventually(30*time.Second, 200*time.Millisecond, "node22's incident failed", func() error {
		in, err := find("node22")
		if err == nil && in.RepairStatus != "failed" {
			err = fmt.Errorf("node22's incident is %s", in.RepairStatus)
		}
		return err
	})
	if err := os.WriteFile(state["node23"], []byte(`{"status":"evacuate","details":{"fan":3}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var noted incident
	c.Eventually(30*time.Second, 200*time.Millisecond, "node23's incident noted", func() error {
		in, err := find("node23")
		if err == nil && in.RepairStatus != "noted" {
			err = fmt.Errorf("node23's incident is %s (%s), jobs %v", in.RepairStatus, in.Reason, in.Jobs)
		}
		noted = in
		return err
	})
	if len(noted.Jobs) != 0 || !strings.Contains(noted.Reason, "next round") {
		t.Fatalf("noted incident %+v: want no job and the round time as its reason", noted)
	}
	out, err := c.GNT("maint", "status")
	if err != nil || !strings.Contains(out, noted.UUID) || !strings.Contains(out, "noted") {
		t.Fatalf("gnt maint status does not list %s as noted: %v\n%s", noted.UUID, err, out)
	}
	if out, err := c.GNT("maint", "cancel", noted.UUID); err != nil {
		t.Fatalf("gnt maint cancel: %v\n%s", err, out)
	}
	in, err := find("node23")
	if err != nil || in.UUID != noted.UUID || in.RepairStatus != "canceled" || len(in.Jobs) != 0 {
		t.Fatalf("after cancel: %+v (%v); want the same incident canceled, without jobs", in, err)
	}
}
