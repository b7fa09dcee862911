package integration

import (
	"context"
	"fmt"
	"regexp"
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
	if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "512", "--os-type", "debian", "--dry-run", "web0"); err != nil || !strings.Contains(out, "would go to") {
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
	if out, err := c.GNT("instance", "migrate", "web1", "--force"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if p := check("after migrate"); p == first {
		t.Fatalf("migrate left web1 on %s", p)
	}
	if out, err := c.GNT("instance", "failover", "web1", "--force"); err != nil {
		t.Fatalf("failover: %v\n%s", err, out)
	}
	if p := check("after failover"); p != first {
		t.Fatalf("failover left web1 on %s, want %s", p, first)
	}
	// The cluster gave the drbd disk a port and a minor on each node;
	// migration and failover kept them.
	drbdInfo := func(primary string) (port, secondary string) {
		t.Helper()
		out, err := c.GNT("instance", "info", "web1")
		m := regexp.MustCompile(`drbd: port (1\d{4}), primary ` + primary + ` minor \d+, secondary (node\d+) minor \d+`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("instance info: %v: no drbd line with primary %s\n%s", err, primary, out)
		}
		return m[1], m[2]
	}
	port, _ := drbdInfo(first)
	// Ganeti's list options through the binary; without a terminal a
	// command that asks first is refused, and nothing happens.
	if out, err := c.GNT("instance", "list", "-o", "name,pnode,beparams.memory,disk_template", "--separator=|", "--no-headers", "web1"); err != nil ||
		out != "web1|"+first+"|512|drbd\n" {
		t.Errorf("instance list -o ...: %v %q", err, out)
	}
	if out, code := c.GNTExit("instance", "remove", "web1"); code != 1 || !strings.Contains(out, "refusing to remove instance web1 without confirmation: stdin is not a terminal (use --force)") {
		t.Errorf("instance remove without --force nor terminal: exit %d %q", code, out)
	}
	check("after a refused remove")

	// Kill the leader while a migration's send is slowed down on the
	// source; the next leader finishes it.
	src := c.Member(first)
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if _, err := c.NodeClient(src).SetFault(fctx, rpc.NodeFault{Op: rpc.NodeOpMigrateSend, Delay: "3s", Times: 1}); err != nil {
		t.Fatalf("arming the delay: %v", err)
	}
	fcancel()
	out, err := c.GNT("--submit", "instance", "migrate", "web1", "--force")
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
	// The evacuation may choose the restarted node as the new secondary:
	// its agent must answer first (it once did not yet, and the job
	// failed on its disk-create).
	c.WaitAgent(leader, 30*time.Second)

	// Evacuating the primary's node moves web1 off it entirely; it runs
	// once, on a node the configuration names.
	p, _, _, _ := c.instanceNodes("web1")
	if out, err := c.GNT("node", "evacuate", p, "--force"); err != nil {
		t.Fatalf("evacuate %s: %v\n%s", p, err, out)
	}
	np, ns, _, err := c.instanceNodes("web1")
	if err != nil || np == p || len(ns) != 1 || ns[0] == p {
		t.Fatalf("after evacuating %s: primary %s, secondaries %v (%v)", p, np, ns, err)
	}
	// A new secondary: the port stays.
	if p2, s2 := drbdInfo(np); p2 != port || s2 != ns[0] {
		t.Errorf("after evacuating %s: drbd port %s secondary %s, want port %s secondary %s", p, p2, s2, port, ns[0])
	}
	all := append(append([]*Member{}, nodes...), c.Candidates()...)
	if running := c.runningOn(t, in.UUID, all); len(running) != 1 || running[0] != np {
		t.Fatalf("after evacuating %s: runs on %v, configuration says %s", p, running, np)
	}

	if out, err := c.GNT("instance", "remove", "web1", "--force"); err != nil {
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

// TestReservationsNeverOvercommit: with 5 nodes of 4 GiB (room for 20),
// thirty concurrent creations of 1 GiB instances (half of them
// forthcoming reservations) through different candidates: what succeeds
// fits, what does not fails naming the memory, no node holds more than it
// has, and the capacity left is what the accounting says.
func TestReservationsNeverOvercommit(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2, ExtraArgs: []string{"--memory-mib", "4096"}})
	c.WaitLeader(10 * time.Second)
	servers := c.Servers()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 30)
	for i := 0; i < 30; i++ {
		go func(i int) {
			cl := c.NewClient(append(servers[i%len(servers):], servers[:i%len(servers)]...))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			name := fmt.Sprintf("r%02d", i)
			op := map[string]any{"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "disk_template": "diskless",
				"beparams": map[string]any{"memory": 1024}, "forthcoming": i%2 == 0, "start": false}
			id, meta, err := cl.SubmitJob(ctx, []map[string]any{op}, "overcommit test")
			if err == nil {
				var j rpc.JobInfo
				j, err = cl.WaitJob(ctx, id, meta.Index)
				if err == nil && j.Status != fsm.StatusSuccess {
					err = fmt.Errorf("%s: %s", j.Status, j.OpResult)
				}
			}
			results <- result{name, err}
		}(i)
	}
	ok := 0
	for i := 0; i < 30; i++ {
		r := <-results
		if r.err == nil {
			ok++
		} else if !strings.Contains(r.err.Error(), "memory") {
			t.Errorf("%s failed for another reason than memory: %v", r.name, r.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insts, err := c.Client().Instances(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int64{}
	for _, in := range insts {
		perNode[in.PNode] += in.BEParams.Memory
	}
	for n, m := range perNode {
		if m > 4096 {
			t.Errorf("node %s holds %d MiB of instances, more than its 4096", n, m)
		}
	}
	if ok != len(insts) {
		t.Errorf("%d creations succeeded but %d instances exist", ok, len(insts))
	}
	if ok == 0 || ok > 20 {
		t.Errorf("%d of 30 creations succeeded; room is for 20", ok)
	}
	t.Logf("%d of 30 creations fit; memory per node %v", ok, perNode)
	out, err := c.GNT("cluster", "capacity", "--memory", "1024")
	if err != nil {
		t.Fatalf("capacity: %v\n%s", err, out)
	}
	var fits int
	if _, err := fmt.Sscanf(out, "%d", &fits); err != nil || fits != 20-len(insts) {
		t.Errorf("capacity answered %q; want %d more", out, 20-len(insts))
	}
}

// TestCreateMovesReservation: five nodes of 4 GiB each hold a 2 GiB
// reservation, so a 3 GiB instance fits nowhere until one reservation
// moves. The dry run names the move and changes nothing; the create
// moves the reservation (a record change, in the same entry as the new
// instance) and says so; no node ends up holding more than it has, and
// the capacity left agrees.
func TestCreateMovesReservation(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2, ExtraArgs: []string{"--memory-mib", "4096"}})
	c.WaitLeader(10 * time.Second)
	for i := 0; i < 5; i++ {
		if out, err := c.GNT("instance", "add", "--forthcoming", "-t", "diskless", "--memory", "2048", fmt.Sprintf("res%d", i)); err != nil {
			t.Fatalf("reservation %d: %v\n%s", i, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	where := func() map[string]string {
		insts, err := c.Client().Instances(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		perNode := map[string]int64{}
		for _, in := range insts {
			out[in.Name] = in.PNode
			perNode[in.PNode] += in.BEParams.Memory
		}
		for n, m := range perNode {
			if m > 4096 {
				t.Errorf("node %s holds %d MiB of instances, more than its 4096", n, m)
			}
		}
		return out
	}
	before := where()
	if len(before) != 5 {
		t.Fatalf("reservations: %v", before)
	}
	out, err := c.GNT("instance", "add", "--dry-run", "-t", "diskless", "--memory", "3072", "web1")
	if err != nil || !strings.Contains(out, "would move from") || !strings.Contains(out, "to make room") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if after := where(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the dry run changed the configuration: %v, then %v", before, after)
	}
	out, err = c.GNT("instance", "add", "-t", "diskless", "--memory", "3072", "--no-move-reservations", "web1")
	if err == nil || !strings.Contains(out, "no node has 3072 MiB free memory") {
		t.Fatalf("without moves: %v\n%s", err, out)
	}
	out, err = c.GNT("instance", "add", "-t", "diskless", "--memory", "3072", "web1")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	after := where()
	var moved []string
	for name, node := range before {
		if after[name] != node {
			moved = append(moved, name)
			want := fmt.Sprintf("moved reservation %s from %s to %s to make room", name, node, after[name])
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q:\n%s", want, out)
			}
			if after[name] == after["web1"] {
				t.Errorf("%s moved to web1's node %s", name, after[name])
			}
		}
	}
	if len(moved) != 1 || before[moved[0]] != after["web1"] {
		t.Fatalf("moved %v; web1 on %s; before %v, after %v", moved, after["web1"], before, after)
	}
	// web1's node keeps 1 GiB, the node that took the reservation none,
	// the three others 2 GiB each: room for seven 1 GiB instances.
	out, err = c.GNT("cluster", "capacity", "--memory", "1024")
	var fits int
	if _, serr := fmt.Sscanf(out, "%d", &fits); err != nil || serr != nil || fits != 7 {
		t.Errorf("capacity: %v %q; want 7", err, out)
	}
}

// TestUnnamedReservation (seed 001): through the gnt binary against real
// gntds, a reservation is made without a name (the job answers its UUID,
// which the log names); a plain reservation without an OS cannot be
// created, the error naming os_type; the unnamed one is named by a rename
// through its UUID and created, and runs.
func TestUnnamedReservation(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	out, err := c.GNT("instance", "add", "--forthcoming", "-t", "diskless", "--memory", "256", "-n", "node21")
	if err != nil {
		t.Fatalf("unnamed reservation: %v\n%s", err, out)
	}
	i := strings.Index(out, "(uuid ")
	if i < 0 || len(out) < i+6+36 {
		t.Fatalf("the reservation's log does not name its UUID:\n%s", out)
	}
	uuid := out[i+6 : i+6+36]
	if out, err := c.GNT("instance", "add", "--forthcoming", "-t", "plain", "--disk", "1G", "--memory", "256", "-n", "node21", "res-noos"); err != nil {
		t.Fatalf("reservation: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "create", "res-noos"); err == nil || !strings.Contains(out, "it lacks os_type") {
		t.Errorf("creating a plain reservation without an OS: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "create", uuid); err == nil || !strings.Contains(out, "it lacks instance_name") {
		t.Errorf("creating an unnamed reservation: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "rename", uuid, "web9"); err != nil {
		t.Fatalf("rename %s: %v\n%s", uuid, err, out)
	}
	if out, err := c.GNT("instance", "create", "web9"); err != nil {
		t.Fatalf("create web9: %v\n%s", err, out)
	}
	c.Eventually(30*time.Second, 200*time.Millisecond, "web9 running", func() error {
		s, _, err := c.instanceStatus(c.WaitLeader(10*time.Second), "web9")
		if err == nil && s != rpc.InstStatusRunning {
			err = fmt.Errorf("web9 is %s", s)
		}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := c.Client().Instance(ctx, "web9")
	if err != nil || in.UUID != uuid {
		t.Fatalf("web9: %+v %v; want the reservation's UUID %s", in, err, uuid)
	}
}
