package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCLITour is the README tour through the gnt binary against real gntd
// processes: info, node list, tags, flags, peers; kill -9 of the leader;
// a new master within seconds with the tags intact; the killed member
// restarted with its command line back among the peers.
func TestCLITour(t *testing.T) {
	start := time.Now()
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	leader := c.WaitLeader(10 * time.Second)

	gnt := func(want int, args ...string) string {
		t.Helper()
		out, code := c.GNTExit(args...)
		if code != want {
			t.Fatalf("gnt %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}

	// gnt cluster info shows the master.
	out := gnt(0, "cluster", "info")
	if master := cliField(out, "Master node"); master != leader.Name {
		t.Errorf("cluster info names master %q, want %s:\n%s", master, leader.Name, out)
	}
	if name := cliField(out, "Cluster name"); name != c.Name {
		t.Errorf("cluster info names cluster %q, want %s", name, c.Name)
	}

	// gnt node list: 5 nodes, 3 candidates of which one is the master.
	out = gnt(0, "node", "list")
	roles := cliRoles(t, out)
	if len(roles) != 5 {
		t.Errorf("node list shows %d nodes, want 5:\n%s", len(roles), out)
	}
	counts := map[string]int{}
	for _, r := range roles {
		counts[r]++
	}
	if counts["M"] != 1 || counts["C"] != 2 || counts["R"] != 2 || roles[leader.Name] != "M" {
		t.Errorf("node list roles %v, want %s M, two C, node21/22 R:\n%s", roles, leader.Name, out)
	}

	// Tags and flags.
	gnt(0, "node", "add-tags", "node21", "rack:a1")
	if out = gnt(0, "node", "list-tags", "node21"); strings.TrimSpace(out) != "rack:a1" {
		t.Errorf("node list-tags node21 = %q, want rack:a1", out)
	}
	out = gnt(0, "node", "modify", "node22", "--drained", "yes")
	if !strings.Contains(out, "drained -> True") {
		t.Errorf("node modify --drained yes did not report the change:\n%s", out)
	}
	if roles = cliRoles(t, gnt(0, "--consistent", "node", "list")); roles["node22"] != "D" {
		t.Errorf("node22 role %q after --drained yes, want D", roles["node22"])
	}
	out = gnt(0, "cluster", "peers")
	peers := cliPeers(t, out)
	if len(peers) != 3 || peers[leader.Name] != "voter Y" {
		t.Errorf("cluster peers: %v, want 3 voters led by %s:\n%s", peers, leader.Name, out)
	}

	// Errors: non-zero exit and the server's message.
	for _, e := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"node", "modify", "nodeX", "--drained", "yes"}, 1, `Failure: node "nodeX" does not exist`},
		{[]string{"node", "modify", leader.Name, "--drained", "yes"}, 1, "Failure: the master role can be changed only via master-failover"},
		{[]string{"node", "modify", "node21", "--drained", "yes", "--offline", "yes"}, 1, "Failure: can't set the node into more than one state"},
		{[]string{"node", "add", "node21", "--primary-ip", "192.0.2.1"}, 1, `Failure: node "node21" is already in the configuration`},
		{[]string{"node", "add-tags", "node21", strings.Repeat("x", 200)}, 1, "Failure: tag"},
		{[]string{"node", "modify"}, 2, "Usage error"},
	} {
		out, code := c.GNTExit(e.args...)
		if code != e.code || !strings.Contains(out, e.msg) {
			t.Errorf("gnt %s: exit %d, output %q; want exit %d with %q", strings.Join(e.args, " "), code, out, e.code, e.msg)
		}
	}

	// kill -9 the leader; a new master is named within seconds.
	killAt := time.Now()
	leader.Kill()
	var newMaster string
	took := c.Eventually(15*time.Second, 100*time.Millisecond, "gnt cluster info names a new master", func() error {
		out, code := c.GNTExit("cluster", "info")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		newMaster = cliField(out, "Master node")
		if newMaster == leader.Name || newMaster == "" {
			return fmt.Errorf("master still %q", newMaster)
		}
		return nil
	})
	t.Logf("kill -9 of %s: gnt cluster info names %s as master %v after the kill (%v polling)",
		leader.Name, newMaster, time.Since(killAt).Round(time.Millisecond), took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("a new master took %v to be named; want a few seconds", took)
	}
	if out = gnt(0, "node", "list-tags", "node21"); strings.TrimSpace(out) != "rack:a1" {
		t.Errorf("after failover: node list-tags node21 = %q, want rack:a1", out)
	}
	roles = cliRoles(t, gnt(0, "node", "list"))
	if roles[newMaster] != "M" || roles[leader.Name] != "C" || roles["node22"] != "D" {
		t.Errorf("after failover: roles %v, want %s M, %s C, node22 D", roles, newMaster, leader.Name)
	}
	// Changes work again through the CLI, which skips the dead address.
	gnt(0, "node", "modify", "node22", "--drained", "no")
	// The dead member is still a voter; the new leader never heard from
	// it, so its applied index and last contact are unknown ("?"), not
	// made up.
	out = gnt(0, "--consistent", "cluster", "peers")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || f[0] != leader.Name {
			continue
		}
		if f[2] != "voter" || f[3] != "N" {
			t.Errorf("dead %s shown as %s/%s in cluster peers", leader.Name, f[2], f[3])
		}
		if f[4] != "?" || f[5] != "?" {
			t.Errorf("cluster peers shows dead %s, which the new leader never reached, with applied index %s and last contact %s (want ? and ?):\n%s",
				leader.Name, f[4], f[5], out)
		}
	}

	// Restart the killed member with its command line: it is back in
	// cluster peers, caught up.
	restartAt := time.Now()
	leader.Start(t)
	back := c.Eventually(30*time.Second, 200*time.Millisecond, leader.Name+" back in gnt cluster peers", func() error {
		out, code := c.GNTExit("--consistent", "cluster", "peers")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		p := cliPeers(t, out)
		if p[leader.Name] != "voter N" {
			return fmt.Errorf("%s is %q in\n%s", leader.Name, p[leader.Name], out)
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 6 && f[0] == leader.Name {
				if f[4] == "?" {
					return fmt.Errorf("leader has no status of %s yet:\n%s", leader.Name, out)
				}
				if d, err := time.ParseDuration(f[5]); err != nil || d < 0 || d > 2*time.Second || f[4] == "0" {
					return fmt.Errorf("last contact with %s %q:\n%s", leader.Name, f[5], out)
				}
			}
		}
		return nil
	})
	t.Logf("restarted %s is back in gnt cluster peers, caught up, %v after its restart (%v polling)",
		leader.Name, time.Since(restartAt).Round(time.Millisecond), back.Round(time.Millisecond))
	c.WaitConverged(20 * time.Second)

	// And it can be master again.
	out = gnt(0, "cluster", "master-failover", "--to", leader.Name)
	if !strings.Contains(out, "Master is now "+leader.Name) {
		t.Errorf("master-failover --to %s: %s", leader.Name, out)
	}
	c.Eventually(10*time.Second, 100*time.Millisecond, "cluster info names "+leader.Name, func() error {
		out, _ := c.GNTExit("--consistent", "cluster", "info")
		if m := cliField(out, "Master node"); m != leader.Name {
			return fmt.Errorf("master %q", m)
		}
		return nil
	})
	t.Logf("whole tour %v", time.Since(start).Round(time.Millisecond))
}

// cliField returns the value of a "Key: value" line.
func cliField(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

var cliNodeLine = regexp.MustCompile(`^(\S+)\s+([MCRDO])\s`)

// cliRoles parses `gnt node list`: node name -> role letter.
func cliRoles(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "Node ") {
		t.Fatalf("node list has no header:\n%s", out)
	}
	roles := map[string]string{}
	for _, l := range lines[1:] {
		if m := cliNodeLine.FindStringSubmatch(l); m != nil {
			roles[m[1]] = m[2]
		}
	}
	return roles
}

// cliPeers parses `gnt cluster peers`: id -> "suffrage leader".
func cliPeers(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("cluster peers has no header:\n%s", out)
	}
	peers := map[string]string{}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) >= 4 {
			peers[f[0]] = f[2] + " " + f[3]
		}
	}
	return peers
}
