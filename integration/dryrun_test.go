package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// configView is the configuration as the API shows it: instances, nodes,
// groups, cluster and its tags (not the job queue, which a dry run adds
// its job to).
func (c *Cluster) configView(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var parts []string
	for _, p := range []string{"/2/instances", "/2/nodes", "/2/groups", "/2/networks", "/2/tags", "/2/info"} {
		var out json.RawMessage
		q := url.Values{"consistent": {"1"}}
		if p != "/2/tags" && p != "/2/info" {
			q.Set("bulk", "1")
		}
		if _, err := c.Client().Do(ctx, "GET", p, q, nil, &out); err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		if p == "/2/instances" {
			// The runtime fields are the agents' reports, refreshed in
			// the background, not the configuration.
			var insts []map[string]any
			if err := json.Unmarshal(out, &insts); err != nil {
				t.Fatalf("GET %s: %v", p, err)
			}
			for _, in := range insts {
				for _, f := range []string{"status", "oper_state", "oper_ram", "oper_vcpus"} {
					delete(in, f)
				}
			}
			out, _ = json.Marshal(insts)
		}
		parts = append(parts, p+" "+string(out))
	}
	return strings.Join(parts, "\n")
}

// TestDryRunChangesNothing walks the mutating routes with ?dry-run=1 on
// a cluster of real gntds with a running drbd instance: every job ends,
// the configuration the API shows is the same before and after, and the
// agents still run the instance where they did. Before dry-run was
// honoured by the executor, DELETE /2/instances/web1?dry-run=1 removed
// the instance and its disks.
func TestDryRunChangesNothing(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2})
	c.WaitLeader(10 * time.Second)
	nodes := []*Member{c.Member("node21"), c.Member("node22")}
	for _, m := range nodes {
		c.WaitAgent(m, 30*time.Second)
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
	if running := c.runningOn(t, in.UUID, nodes); len(running) != 1 || running[0] != in.PNode {
		t.Fatalf("web1 runs on %v, its primary is %s", running, in.PNode)
	}
	// Networks, made with the CLI: lan connected to the default group,
	// spare not.
	for _, args := range [][]string{
		{"network", "add", "-N", "10.80.0.0/24", "-g", "10.80.0.1", "lan"},
		{"network", "connect", "-N", "mode=bridged,link=br0", "lan", "default"},
		{"network", "add", "-N", "10.81.0.0/24", "--add-reserved-ips", "10.81.0.7,10.81.0.8", "spare"},
	} {
		if out, err := c.GNT(args...); err != nil {
			t.Fatalf("gnt %v: %v\n%s", args, err, out)
		}
	}
	// The runtime fields (oper_state, status) are part of the view: wait
	// until every candidate's runtime view has seen web1 running, so that
	// a poll landing between two views does not look like a change.
	for _, m := range c.Candidates() {
		c.Eventually(30*time.Second, 100*time.Millisecond, "web1 seen running by "+m.Name, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var st struct {
				Status *string `json:"status"`
			}
			if _, err := c.ClientFor(m).Do(ctx, "GET", "/2/instances/web1", nil, nil, &st); err != nil {
				return err
			}
			if st.Status == nil || *st.Status != "running" {
				return fmt.Errorf("status %v", st.Status)
			}
			return nil
		})
	}
	before := c.configView(t)
	routes := []struct{ method, path, body, fails string }{
		{"POST", "/2/networks", `{"network_name":"n2","network":"10.70.0.0/24"}`, ""},
		{"PUT", "/2/networks/lan/modify", `{"add_reserved_ips":["10.80.0.9"]}`, ""},
		{"PUT", "/2/networks/spare/connect", `{"group_name":"default","network_mode":"routed","network_link":"rt"}`, ""},
		{"PUT", "/2/networks/lan/disconnect", `{"group_name":"default"}`, ""},
		{"DELETE", "/2/networks/spare", "", ""},
		{"PUT", "/2/networks/lan/tags?tag=t1", "", ""},
		{"POST", "/2/instances", `{"__version__":1,"name":"web3","disk_template":"plain","disks":[{"size":512}],"beparams":{"memory":256},"nics":[{"network":"lan","ip":"pool"}],"os":"debian","pnode":"node21"}`, ""},
		{"DELETE", "/2/instances/web1", "", ""},
		{"PUT", "/2/instances/web1/shutdown", "", ""},
		{"POST", "/2/instances/web1/reboot", "", ""},
		{"PUT", "/2/instances/web1/failover", "", ""},
		{"PUT", "/2/instances/web1/migrate", "", ""},
		{"PUT", "/2/instances/web1/modify", `{"beparams":{"memory":768}}`, ""},
		{"PUT", "/2/instances/web1/modify", `{"hvparams":{"acpi":false},"osparams":{"label":"x"},"nics":[["add",-1,{"mode":"bridged","link":"br1"}]],"os_name":"gnt-image+default"}`, ""},
		// The checks run: a running instance is not renamed.
		{"PUT", "/2/instances/web1/rename", `{"new_name":"web7"}`, "instance web1 is up; shut it down before renaming it"},
		{"PUT", "/2/instances/web1/tags?tag=t1", "", ""},
		{"POST", "/2/instances", `{"__version__":1,"name":"web2","disk_template":"plain","disks":[{"size":512}],"beparams":{"memory":256},"nics":[],"os":"debian","pnode":"node21"}`, ""},
		{"POST", "/2/nodes/node22/evacuate", "", ""},
		{"POST", "/2/nodes/node21/migrate", "", ""},
		{"PUT", "/2/nodes/node22/role", `"drained"`, ""},
		{"POST", "/2/nodes/node22/modify", `{"offline":true}`, ""},
		{"PUT", "/2/tags?tag=t1", "", ""},
		{"POST", "/2/groups", `{"group_name":"g2"}`, ""},
		{"PUT", "/2/modify", `{"candidate_pool_size":5}`, ""},
		{"PUT", "/2/modify", `{"hvparams":{"fake":{"acpi":false}},"beparams":{"maxmem":256},"nicparams":{"link":"br9"},"diskparams":{"drbd":{"resync-rate":100}},"enabled_hypervisors":["fake","kvm"],"default_hypervisor":"fake"}`, ""},
		{"PUT", "/2/groups/default/modify", `{"diskparams":{"plain":{"stripes":2}}}`, ""},
		{"POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"},{"OP_ID":"OP_INSTANCE_REMOVE","instance_name":"web1"}]}`, ""},
	}
	for _, rt := range routes {
		path, query, _ := strings.Cut(rt.path, "?")
		q, _ := url.ParseQuery(query)
		q.Set("dry-run", "1")
		var body any
		if rt.body != "" {
			body = json.RawMessage(rt.body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var id int64
		_, err := c.Client().Do(ctx, rt.method, path, q, body, &id)
		if err != nil {
			cancel()
			t.Fatalf("%s %s: %v", rt.method, rt.path, err)
		}
		j, err := c.Client().WaitJob(ctx, id, 0)
		cancel()
		if err != nil {
			t.Fatalf("%s %s: job %d: %v", rt.method, rt.path, id, err)
		}
		if rt.fails != "" {
			if j.Status != "error" || len(j.OpResult) == 0 || !strings.Contains(string(j.OpResult[0]), rt.fails) {
				t.Errorf("%s %s: dry-run job %d ended %s: %s; want an error saying %q", rt.method, rt.path, id, j.Status, j.OpResult, rt.fails)
			}
		} else if j.Status != "success" {
			t.Errorf("%s %s: dry-run job %d ended %s: %s", rt.method, rt.path, id, j.Status, j.OpResult)
		}
		for k, r := range j.OpResult {
			t.Logf("%s %s: opcode %d: %s", rt.method, rt.path, k, r)
		}
		if after := c.configView(t); after != before {
			t.Fatalf("%s %s?dry-run=1 changed the configuration\nbefore:\n%s\nafter:\n%s", rt.method, rt.path, before, after)
		}
	}
	// The CLI shows the networks as the dry runs left them.
	out, err := c.GNT("network", "list", "--no-headers", "--separator=|", "-o", "name,network,free_count,group_list,external_reservations")
	if err != nil || strings.TrimSpace(out) != "lan|10.80.0.0/24|253|default,bridged,br0,|10.80.0.0, 10.80.0.1, 10.80.0.255\nspare|10.81.0.0/24|252||10.81.0.0, 10.81.0.7, 10.81.0.8, 10.81.0.255" {
		t.Errorf("gnt network list: %v\n%s", err, out)
	}
	if out, err := c.GNT("network", "info", "lan"); err != nil || !strings.Contains(out, "default (mode:bridged link:br0)") || !strings.Contains(out, "Free: 253 (98.83%)") {
		t.Errorf("gnt network info: %v\n%s", err, out)
	}
	if running := c.runningOn(t, in.UUID, nodes); len(running) != 1 || running[0] != in.PNode {
		t.Fatalf("after the dry runs web1 runs on %v, its primary is %s", running, in.PNode)
	}
}
