package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// toGroup is an external allocator speaking Ganeti's iallocator protocol
// for change-group: it keeps a copy of its input next to itself and
// moves each instance to the usable nodes of the first target group whose
// names sort last (the built-in, with equal nodes, takes the first).
const toGroup = `#!/usr/bin/python3
import json, os, sys
data = json.load(open(sys.argv[1]))
json.dump(data, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "togroup-input.json.out"), "w"))
req = data["request"]
if req["type"] != "change-group":
    print(json.dumps({"success": False, "info": "mode %s not supported" % req["type"], "result": []}))
    sys.exit(0)
g = req["target_groups"][0]
nodes = sorted((n for n, v in data["nodes"].items() if v["group"] == g and not v["offline"] and not v["drained"]), reverse=True)
moved, jobs = [], []
for name in req["instances"]:
    want = len(data["instances"][name]["nodes"])
    moved.append([name, data["nodegroups"][g]["name"], nodes[:want]])
    jobs.append([{"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": name, "mode": "replace_new_secondary", "remote_node": nodes[0]},
                 {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": name},
                 {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": name, "mode": "replace_new_secondary", "remote_node": nodes[1]}])
print(json.dumps({"success": True, "info": "", "result": [moved, [], jobs]}))
`

// TestChangeGroup changes the node group of a running drbd instance on
// real gntds: with the built-in allocator (gnt instance change-group),
// with an external program answering Ganeti's change-group request, and
// by evacuating a group (gnt group evacuate), which refuses by name a
// plain instance it cannot move and moves nothing then. A dry run and a
// target that is the instance's own group change nothing.
func TestChangeGroup(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 3})
	c.WaitLeader(10 * time.Second)
	for _, n := range []string{"node21", "node22", "node23"} {
		c.WaitAgent(c.Member(n), 30*time.Second)
	}
	dir := c.IAllocatorsDir()
	if err := os.WriteFile(filepath.Join(dir, "togroup"), []byte(toGroup), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "togroup"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gnt := func(args ...string) string {
		t.Helper()
		out, err := c.GNT(args...)
		if err != nil {
			t.Fatalf("gnt %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	gnt("group", "add", "g2")
	var id int64
	m, err := c.Client().Do(ctx, "PUT", "/2/groups/g2/assign-nodes", nil, map[string]any{"nodes": []string{"node22", "node23"}}, &id)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.Client().WaitJob(ctx, id, m.Index); err != nil || j.Status != "success" {
		t.Fatalf("assign-nodes: %+v %v", j, err)
	}
	gnt("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "128", "--os-type", "noop", "-n", "node11:node21", "web1")
	where := func() string {
		t.Helper()
		in, err := c.Client().Instance(ctx, "web1")
		if err != nil {
			t.Fatal(err)
		}
		return in.PNode + ":" + strings.Join(in.SNodes, ",")
	}

	if out, code := c.GNTExit("instance", "change-group", "--to", "default", "web1"); code == 0 || !strings.Contains(out, "group default cannot be a target: instance web1 has nodes in it already") {
		t.Errorf("change-group to its own group: exit %d\n%s", code, out)
	}
	if out, code := c.GNTExit("instance", "change-group", "--to", "nope", "web1"); code == 0 || !strings.Contains(out, "target group nope does not exist") {
		t.Errorf("change-group to a missing group: exit %d\n%s", code, out)
	}
	out := gnt("instance", "change-group", "--dry-run", "web1")
	if !strings.Contains(out, "web1: relocate -> primary node22, secondary node23 in group g2") || where() != "node11:node21" {
		t.Errorf("dry run: web1 on %s\n%s", where(), out)
	}

	// The built-in: the first nodes of g2.
	gnt("instance", "change-group", "web1")
	if w := where(); w != "node22:node23" {
		t.Fatalf("after change-group by hail: web1 on %s, want node22:node23", w)
	}
	// The external allocator, back to default: the last nodes first.
	out = gnt("instance", "change-group", "-I", "togroup", "--to", "default", "web1")
	if w := where(); w != "node21:node11" {
		t.Fatalf("after change-group by togroup: web1 on %s, want node21:node11\n%s", w, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "togroup-input.json.out"))
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		NodeGroups map[string]map[string]any `json:"nodegroups"`
		Request    map[string]any            `json:"request"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	targets := toStrings(in.Request["target_groups"])
	if in.Request["type"] != "change-group" || strings.Join(toStrings(in.Request["instances"]), ",") != "web1" || len(targets) != 1 ||
		in.NodeGroups[targets[0]]["name"] != "default" {
		t.Errorf("change-group request: %v (groups %v)", in.Request, in.NodeGroups)
	}

	// Group evacuation: a plain instance in the group is refused by
	// name and nothing moves; without it web1 goes to g2.
	gnt("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "128", "--os-type", "noop", "-n", "node11", "p1")
	if out, code := c.GNTExit("group", "evacuate", "default"); code == 0 || !strings.Contains(out, "p1: instances of disk template plain cannot change group") {
		t.Errorf("evacuating default with p1: exit %d\n%s", code, out)
	}
	if w := where(); w != "node21:node11" {
		t.Errorf("a refused evacuation moved web1 to %s", w)
	}
	gnt("instance", "remove", "--force", "p1")
	gnt("group", "evacuate", "default")
	if w := where(); w != "node22:node23" {
		t.Errorf("after evacuating default: web1 on %s, want node22:node23", w)
	}
}
