package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRebootedSecondaryReactivated: a node whose boot id changes (its
// --boot-id-file, /proc/sys/kernel/random/boot_id in production) is taken
// for rebooted when the leader next records its storage, and, as
// Ganeti's watcher does, a job re-activates the disks of the running drbd
// instance it is the secondary of (whose devices the reboot took down);
// the boot id shows in gnt node list -o bootid; the same boot id again
// queues nothing more, and a stopped instance is left for its next start.
func TestRebootedSecondaryReactivated(t *testing.T) {
	bootFile := func(dataDir string) string { return dataDir + "-boot_id" }
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2, MemberArgs: func(name, dataDir string) []string {
		if err := os.WriteFile(bootFile(dataDir), []byte("boot-"+name+"-1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"--boot-id-file", bootFile(dataDir)}
	}})
	c.WaitLeader(10 * time.Second)
	n21, n22 := c.Member("node21"), c.Member("node22")
	c.WaitAgent(n21, 30*time.Second)
	c.WaitAgent(n22, 30*time.Second)
	if out, err := c.GNT("cluster", "modify", "--diagnose-interval", "1s"); err != nil {
		t.Fatalf("cluster modify: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21:node22", "web1"},
		{"instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21:node22", "--no-start", "web2"},
	} {
		if out, err := c.GNT(args...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	bootOf := func(node string) string {
		out, err := c.GNT("node", "list", "--no-headers", "-o", "bootid", node)
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.TrimSpace(out)
	}
	waitBoot := func(node, want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for bootOf(node) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s's boot id is %q, want %q", node, bootOf(node), want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitBoot("node22", "boot-node22-1")
	activations := func() []string {
		out, err := c.GNT("job", "list", "--no-headers", "--separator", "|", "-o", "id,status,summary")
		if err != nil {
			t.Fatalf("job list: %v\n%s", err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.Contains(l, "INSTANCE_ACTIVATE_DISKS") {
				got = append(got, l)
			}
		}
		return got
	}
	if a := activations(); len(a) != 0 {
		t.Fatalf("activations before any reboot: %v", a)
	}

	// node22 "reboots".
	if err := os.WriteFile(bootFile(n22.DataDir), []byte("boot-node22-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitBoot("node22", "boot-node22-2")
	var jobs []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		jobs = activations()
		if len(jobs) == 1 && strings.Contains(jobs[0], "|success|") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(jobs) != 1 || !strings.Contains(jobs[0], "|success|") || !strings.Contains(jobs[0], "web1") {
		t.Fatalf("after node22's reboot: activation jobs %v, want one successful job for web1 (web2 is stopped)", jobs)
	}
	id, _, _ := strings.Cut(jobs[0], "|")
	out, err := c.GNT("job", "info", strings.TrimSpace(id))
	if err != nil || !strings.Contains(out, "disk(s) of web1 are active on node21") || !strings.Contains(out, "gnt:watcher") {
		t.Errorf("job info %s: %v\n%s", id, err, out)
	}
	// More reports of the same boot id (a few diagnose rounds) queue
	// nothing more.
	time.Sleep(3 * time.Second)
	if a := activations(); len(a) != 1 {
		t.Errorf("activation jobs after more reports of the same boot id: %v", a)
	}
	if b := bootOf("node21"); b != "boot-node21-1" {
		t.Errorf("node21's boot id %q", b)
	}

	// A reboot as it happens: node22's gntd dies, gossip marks it dead,
	// and it comes back with a new boot id. Its first report may reach
	// the leader while it still counts dead: the activation waits for it
	// to be alive (the job would fail on a dead node), then runs.
	n22.Kill()
	c.Eventually(30*time.Second, 100*time.Millisecond, "node22 dead", func() error {
		live, err := nodeLiveness(c)
		if err != nil {
			return err
		}
		if live["node22"] != "dead" {
			return fmt.Errorf("node22 is %s", live["node22"])
		}
		return nil
	})
	if err := os.WriteFile(bootFile(n22.DataDir), []byte("boot-node22-3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n22.Start(t)
	waitBoot("node22", "boot-node22-3")
	c.Eventually(60*time.Second, 200*time.Millisecond, "a second successful activation of web1", func() error {
		a := activations()
		ok := 0
		for _, l := range a {
			if strings.Contains(l, "|success|") && strings.Contains(l, "web1") {
				ok++
			}
		}
		if ok != 2 || len(a) != 2 {
			return fmt.Errorf("activation jobs %v", a)
		}
		return nil
	})
}
