package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// instanceOn reads web1's record through the API: its primary and
// secondary node names and admin state.
func (c *Cluster) instanceNodes(name string) (primary string, secondaries []string, admin string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, err := c.Client().Instance(ctx, name)
	if err != nil {
		return "", nil, "", err
	}
	return in.PNode, in.SNodes, in.AdminState, nil
}

// runningOn asks every node's agent where the instance runs.
func (c *Cluster) runningOn(t *testing.T, uuid string, nodes []*Member) []string {
	t.Helper()
	var out []string
	for _, m := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.NodeClient(m).Status(ctx, fsm.Instance{UUID: uuid})
		cancel()
		if err == nil && st.State == rpc.NodeStateRunning {
			out = append(out, m.Name)
		}
	}
	return out
}

// TestInstanceLifecycleOnAgents: a drbd instance created with the CLI is
// placed on the two nodes, runs on its primary, migrates and fails over
// (the agents and the configuration agree after each), survives a kill
// -9 of the leader in the middle of a migration (it ends up running
// exactly once, where the configuration says), and is removed.
func TestInstanceLifecycleOnAgents(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2, ExtraArgs: []string{"--debug"}})
	c.WaitLeader(10 * time.Second)
	nodes := []*Member{c.Member("node21"), c.Member("node22")}
	for _, m := range nodes {
		c.WaitAgent(m, 30*time.Second)
	}
	// A dry run asks the allocator; the instance goes on the plain nodes.
	if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "512", "--dry-run", "web0"); err != nil || !strings.Contains(out, "would go to") {
		t.Fatalf("instance add --dry-run: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "512", "--os-type", "debian", "-n", "node21:node22", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	in, err := c.Client().Instance(ctx, "web1")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) string {
		t.Helper()
		p, s, admin, err := c.instanceNodes("web1")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		running := c.runningOn(t, in.UUID, nodes)
		if admin != "up" || len(s) != 1 || len(running) != 1 || running[0] != p {
			t.Fatalf("%s: configuration says primary %s, secondaries %v, admin %s; agents run it on %v", what, p, s, admin, running)
		}
		return p
	}
	first := check("after create")
	if out, err := c.GNT("instance", "migrate", "web1"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if p := check("after migrate"); p == first {
		t.Fatalf("migrate left web1 on %s", p)
	}
	if out, err := c.GNT("instance", "failover", "web1"); err != nil {
		t.Fatalf("failover: %v\n%s", err, out)
	}
	if p := check("after failover"); p != first {
		t.Fatalf("failover left web1 on %s, want %s", p, first)
	}

	// Kill the leader while a migration's send is slowed down on the
	// source; the next leader finishes it.
	src := c.Member(first)
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if _, err := c.NodeClient(src).SetFault(fctx, rpc.NodeFault{Op: rpc.NodeOpMigrateSend, Delay: "3s", Times: 1}); err != nil {
		t.Fatalf("arming the delay: %v", err)
	}
	fcancel()
	out, err := c.GNT("--submit", "instance", "migrate", "web1")
	if err != nil {
		t.Fatalf("migrate --submit: %v\n%s", err, out)
	}
	var id int64
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "JobID: %d", &id); err != nil {
		t.Fatalf("job id from %q", out)
	}
	c.waitSteps(id, 1) // the target is prepared; the send is under way
	leader := c.WaitLeader(10 * time.Second)
	leader.Kill()
	t.Logf("killed leader %s during migration job %d", leader.Name, id)
	c.WaitLeader(15 * time.Second)
	c.Eventually(60*time.Second, 100*time.Millisecond, "migration job finished", func() error {
		j, err := c.job(id)
		if err != nil {
			return err
		}
		if !fsm.Finalized(j.Status) {
			return fmt.Errorf("job %d is %s", id, j.Status)
		}
		if j.Status != fsm.StatusSuccess {
			t.Fatalf("migration job %d ended %s: %s", id, j.Status, j.OpResult)
		}
		return nil
	})
	if p := check("after the migration the leader's death interrupted"); p == first {
		t.Fatalf("the interrupted migration left web1 on %s", p)
	}
	leader.Start(t)

	// Evacuating the primary's node moves web1 off it entirely; it runs
	// once, on a node the configuration names.
	p, _, _, _ := c.instanceNodes("web1")
	if out, err := c.GNT("node", "evacuate", p); err != nil {
		t.Fatalf("evacuate %s: %v\n%s", p, err, out)
	}
	np, ns, _, err := c.instanceNodes("web1")
	if err != nil || np == p || len(ns) != 1 || ns[0] == p {
		t.Fatalf("after evacuating %s: primary %s, secondaries %v (%v)", p, np, ns, err)
	}
	all := append(append([]*Member{}, nodes...), c.Candidates()...)
	if running := c.runningOn(t, in.UUID, all); len(running) != 1 || running[0] != np {
		t.Fatalf("after evacuating %s: runs on %v, configuration says %s", p, running, np)
	}

	if out, err := c.GNT("instance", "remove", "web1"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	for _, m := range all {
		if !m.Running() {
			continue
		}
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.NodeClient(m).Status(sctx, fsm.Instance{UUID: in.UUID})
		scancel()
		if err == nil {
			t.Errorf("%s still has web1 after remove", m.Name)
		}
	}
}
