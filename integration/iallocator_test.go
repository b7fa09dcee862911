package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// pickLast is an external allocator speaking Ganeti's iallocator
// protocol: it reads the input file named by its only argument, keeps a
// copy of it next to itself, and places an allocate or relocate request
// on the usable nodes whose names sort last (the built-in, with equal
// nodes, picks those that sort first); a secondary-only node-evacuate
// gets the last usable node of each instance's group as new secondary; a
// multi-allocate puts every instance there too, heedless of capacity,
// but for those whose names start with "nofit", which it cannot place.
const pickLast = `#!/usr/bin/python3
import json, os, sys
if len(sys.argv) != 2:
    sys.stderr.write("want the input file as the only argument\n")
    sys.exit(2)
data = json.load(open(sys.argv[1]))
json.dump(data, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "last-input.json.out"), "w"))
req = data["request"]
def usable(exclude):
    return sorted(n for n, v in data["nodes"].items()
                  if not v["offline"] and not v["drained"] and v.get("vm_capable", True) and n not in exclude)
if req["type"] == "node-evacuate" and req["evac_mode"] == "secondary-only":
    moved, failed, jobs = [], [], []
    for name in req["instances"]:
        nodes = data["instances"][name]["nodes"]
        group = data["nodes"][nodes[0]]["group"]
        new = [n for n in usable(nodes) if data["nodes"][n]["group"] == group]
        if len(nodes) != 2 or not new:
            failed.append([name, "no new secondary"])
            continue
        moved.append([name, data["nodegroups"][group]["name"], [nodes[0], new[-1]]])
        jobs.append([{"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": name, "mode": "replace_new_secondary", "remote_node": new[-1]}])
    print(json.dumps({"success": True, "info": "", "result": [moved, failed, jobs]}))
    sys.exit(0)
if req["type"] == "multi-allocate":
    usable = sorted(n for n, v in data["nodes"].items() if not v["offline"] and not v["drained"] and v.get("vm_capable", True))
    placed = [[i["name"], usable[-i["required_nodes"]:][::-1]] for i in req["instances"] if not i["name"].startswith("nofit")]
    failed = [i["name"] for i in req["instances"] if i["name"].startswith("nofit")]
    print(json.dumps({"success": True, "info": "", "result": [placed, failed]}))
    sys.exit(0)
if req["type"] not in ("allocate", "relocate"):
    print(json.dumps({"success": False, "info": "mode %s not supported" % req["type"], "result": []}))
    sys.exit(0)
usable = sorted(n for n, v in data["nodes"].items()
                if not v["offline"] and not v["drained"] and v.get("vm_capable", True)
                and n not in req.get("relocate_from", []))
want = req["required_nodes"]
if len(usable) < want:
    print(json.dumps({"success": False, "info": "only %d usable nodes" % len(usable), "result": []}))
else:
    print(json.dumps({"success": True, "info": "picked the last", "result": usable[-want:][::-1]}))
`

// TestExternalIAllocators runs external allocators from the iallocators
// directory of real gntds: the list of the cluster's default_iallocator
// is checked at submission (a missing or group-writable program is
// refused, naming why), then tried in order for a placement: one that
// does not answer within --iallocator-timeout and one that prints
// garbage are refused with their reasons in the job's log and the next
// is tried, until the python allocator answers; -I hail is the built-in;
// a list that all fails names each reason; a reservation is recorded
// where the external allocator put it.
func TestExternalIAllocators(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 2, ExtraArgs: []string{"--iallocator-timeout", "2s"}})
	c.WaitLeader(10 * time.Second)
	for _, n := range []string{"node21", "node22"} {
		c.WaitAgent(c.Member(n), 30*time.Second)
	}
	dir := c.IAllocatorsDir()
	write := func(name, body string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("last", pickLast, 0o755)
	write("slow", "#!/bin/sh\nexec sleep 600\n", 0o755)
	write("garbage", "#!/bin/sh\necho 'Traceback (most recent call last): oops'\n", 0o755)
	write("writable", "#!/bin/sh\n", 0o775)

	// Submission checks every name of the list.
	for _, tc := range []struct{ list, want string }{
		{"hail,missing", `"missing" is not an allocator this gntd can run`},
		{"writable", "writable by group or others"},
		{"hail,../bin/sh", "is a file name of the iallocators directory"},
	} {
		out, code := c.GNTExit("cluster", "modify", "--default-iallocator", tc.list)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("--default-iallocator %s: exit %d, want %q in:\n%s", tc.list, code, tc.want, out)
		}
	}
	if out, err := c.GNT("cluster", "modify", "--default-iallocator", "slow,garbage,last"); err != nil {
		t.Fatalf("cluster modify: %v\n%s", err, out)
	}
	if out, _ := c.GNT("cluster", "info"); !strings.Contains(out, "slow,garbage,last") {
		t.Errorf("cluster info does not show the list:\n%s", out)
	}

	add := func(args ...string) (string, int) {
		return c.GNTExit(append([]string{"instance", "add", "-t", "plain", "--disk", "1G", "--memory", "128", "--os-type", "noop"}, args...)...)
	}
	// The default list: slow times out, garbage is refused, last answers.
	out, code := add("--dry-run", "web1")
	if code != 0 {
		t.Fatalf("dry run with the default list: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"iallocator slow failed: no answer within 2s", "trying garbage next",
		"iallocator garbage failed: the answer is not a JSON object", "trying last next",
		"placed by iallocator last", "would go to [node22]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	// What the python allocator was given: Ganeti's input message.
	raw, err := os.ReadFile(filepath.Join(dir, "last-input.json.out"))
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Version int                       `json:"version"`
		Nodes   map[string]map[string]any `json:"nodes"`
		Request map[string]any            `json:"request"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	if in.Version != 2 || in.Request["type"] != "allocate" || in.Request["name"] != "web1" || in.Request["required_nodes"] != float64(1) ||
		len(in.Nodes) != 3 || in.Nodes["node21"] == nil || in.Nodes["node22"] == nil || in.Nodes["node21"]["total_memory"] == nil {
		t.Errorf("input message: %s", raw)
	}

	// -I hail: the built-in, which picks node11 of three empty nodes.
	out, code = add("--dry-run", "-I", "hail", "web1")
	if code != 0 || !strings.Contains(out, "would go to [node11]") {
		t.Errorf("dry run with hail: exit %d, want node11:\n%s", code, out)
	}
	// A list that all fails: the job fails naming each allocator.
	out, code = add("--dry-run", "-I", "garbage,slow", "web1")
	if code == 0 || !strings.Contains(out, "every iallocator of the list failed (garbage: the answer is not a JSON object") ||
		!strings.Contains(out, "slow: no answer within 2s") {
		t.Errorf("dry run with garbage,slow: exit %d\n%s", code, out)
	}
	// A real record (a reservation: no disks are made) where the
	// external allocator put it.
	if out, code = add("--forthcoming", "-I", "last", "res1"); code != 0 {
		t.Fatalf("forthcoming with last: exit %d\n%s", code, out)
	}
	ctx0, cancel0 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel0()
	if res1, err := c.Client().Instance(ctx0, "res1"); err != nil || res1.PNode != "node22" {
		t.Errorf("res1: %+v %v, want its primary node22", res1, err)
	}
	// Relocation (replace-disks with a new secondary): the request names
	// the old secondary in relocate_from, and the answer is checked.
	if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "128", "--os-type", "noop", "-n", "node11:node21", "db1"); err != nil {
		t.Fatalf("instance add db1: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "replace-disks", "--iallocator", "garbage,last", "db1"); err != nil {
		t.Fatalf("replace-disks: %v\n%s", err, out)
	}
	if raw, err = os.ReadFile(filepath.Join(dir, "last-input.json.out")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	if in.Request["type"] != "relocate" || in.Request["name"] != "db1" || strings.Join(toStrings(in.Request["relocate_from"]), ",") != "node21" {
		t.Errorf("relocate request: %v", in.Request)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db1, err := c.Client().Instance(ctx, "db1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(db1.SNodes, ",") != "node22" {
		t.Errorf("db1's secondaries are %v, want node22 (the choice of last)", db1.SNodes)
	}
	// Evacuation (node-evacuate, secondary-only): the answer's moves are
	// run by the job; db1's secondary node22 goes to node21.
	if out, err := c.GNT("node", "evacuate", "-s", "-I", "garbage,last", "--force", "node22"); err != nil {
		t.Fatalf("node evacuate: %v\n%s", err, out)
	}
	if raw, err = os.ReadFile(filepath.Join(dir, "last-input.json.out")); err != nil {
		t.Fatal(err)
	}
	in.Request = nil
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	if in.Request["type"] != "node-evacuate" || in.Request["evac_mode"] != "secondary-only" || strings.Join(toStrings(in.Request["instances"]), ",") != "db1" {
		t.Errorf("evacuate request: %v", in.Request)
	}
	if db1, err = c.Client().Instance(ctx, "db1"); err != nil {
		t.Fatal(err)
	}
	if db1.PNode != "node11" || strings.Join(db1.SNodes, ",") != "node21" {
		t.Errorf("db1 on %s:%v after the evacuation of node22, want node11:node21", db1.PNode, db1.SNodes)
	}

	// A multi-allocation through the list: garbage fails, last places
	// both instances in one multi-allocate request (on node22, the last
	// node), and each creation checks its nodes as given nodes.
	multi := func(list string, names ...string) (int64, rpc.Meta, error) {
		var id int64
		var insts []map[string]any
		for _, n := range names {
			insts = append(insts, map[string]any{"instance_name": n, "disk_template": "plain", "disks": []map[string]any{{"size": 1024}},
				"beparams": map[string]any{"memory": 128}, "os_type": "noop", "forthcoming": true})
		}
		m, err := c.Client().Do(ctx, "POST", "/2/instances-multi-alloc", nil, map[string]any{"iallocator": list, "instances": insts}, &id)
		return id, m, err
	}
	if _, _, err := multi("garbage,slow", "m1", "m2"); err == nil || !strings.Contains(err.Error(), "cannot place the multi-allocation: every iallocator of the list failed (garbage: the answer is not a JSON object") {
		t.Errorf("multi-allocation with garbage,slow: %v, want each allocator's reason", err)
	}
	id, meta, err := multi("garbage,last", "m1", "m2")
	if err != nil {
		t.Fatalf("multi-allocation: %v", err)
	}
	// The creation jobs are the two before the answering one, which
	// does not wait for them.
	for _, jid := range []int64{id - 2, id - 1, id} {
		if j, err := c.Client().WaitJob(ctx, jid, meta.Index); err != nil || j.Status != "success" {
			t.Fatalf("multi-allocation job %d: %+v %v", jid, j, err)
		}
	}
	if raw, err = os.ReadFile(filepath.Join(dir, "last-input.json.out")); err != nil {
		t.Fatal(err)
	}
	in.Request = nil
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	if in.Request["type"] != "multi-allocate" || len(in.Request["instances"].([]any)) != 2 {
		t.Errorf("multi-allocate request: %v", in.Request)
	}
	for _, name := range []string{"m1", "m2"} {
		if m, err := c.Client().Instance(ctx, name); err != nil || m.PNode != "node22" {
			t.Errorf("%s: %+v %v, want its primary node22 (the choice of last)", name, m, err)
		}
	}
	// A partial answer, as Ganeti's LUInstanceMultiAlloc takes it: the
	// placed instance is created, the other reported failed, not created.
	if id, meta, err = multi("last", "m3", "nofit1"); err != nil {
		t.Fatalf("partial multi-allocation: %v", err)
	}
	j, err := c.Client().WaitJob(ctx, id, meta.Index)
	if err != nil || j.Status != "success" {
		t.Fatalf("partial multi-allocation job %d: %+v %v", id, j, err)
	}
	var res struct {
		Jobs        [][]any  `json:"jobs"`
		Allocatable []string `json:"allocatable"`
		Failed      []string `json:"failed"`
	}
	if len(j.OpResult) != 1 || json.Unmarshal(j.OpResult[0], &res) != nil || len(res.Jobs) != 1 ||
		strings.Join(res.Allocatable, ",") != "m3" || strings.Join(res.Failed, ",") != "nofit1" {
		t.Errorf("partial multi-allocation result: %s", j.OpResult)
	}
	if cj, err := c.Client().WaitJob(ctx, id-1, meta.Index); err != nil || cj.Status != "success" {
		t.Errorf("creation of m3 (job %d): %+v %v", id-1, cj, err)
	}
	if m, err := c.Client().Instance(ctx, "m3"); err != nil || m.PNode != "node22" {
		t.Errorf("m3: %+v %v, want its primary node22", m, err)
	}
	if _, err := c.Client().Instance(ctx, "nofit1"); err == nil {
		t.Error("nofit1, which the allocator could not place, was created")
	}

	// Capacity through the same list: slow and garbage fail, last is
	// asked to place 1000 instances (multi-allocate), all on node22,
	// and they are counted as long as each fits after the ones before.
	out, err = c.GNT("cluster", "capacity", "-t", "diskless", "--memory", "4G")
	if err != nil {
		t.Fatalf("cluster capacity: %v\n%s", err, out)
	}
	for _, want := range []string{"iallocator slow failed: no answer within 2s", "iallocator garbage failed: the answer is not a JSON object",
		"counted by iallocator last", "one more does not fit: iallocator last: placement ", "(node22) does not fit"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster capacity lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "node11 ") || strings.Contains(out, "node21 ") || !strings.Contains(out, "node22 ") {
		t.Errorf("last's capacity should be on node22 only:\n%s", out)
	}
	// -I hail counts with the built-in, over every node.
	if out, err = c.GNT("cluster", "capacity", "-t", "diskless", "--memory", "4G", "-I", "hail"); err != nil || !strings.Contains(out, "node11 ") ||
		strings.Contains(out, "counted by") {
		t.Errorf("cluster capacity -I hail: %v\n%s", err, out)
	}
	if out, code := c.GNTExit("cluster", "capacity", "--memory", "4G", "-I", "hail,missing"); code == 0 || !strings.Contains(out, `"missing" is not an allocator this gntd can run`) {
		t.Errorf("cluster capacity -I hail,missing: exit %d\n%s", code, out)
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

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
// by evacuating a group (gnt group evacuate, --force-failover: stopped
// and started rather than migrated), which refuses by name a plain
// instance it cannot move and moves nothing then. A dry run and a
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
	gnt := func(args ...string) string { t.Helper(); return c.MustGNT(t, args...) }
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
	if out := gnt("group", "evacuate", "--force-failover", "default"); !strings.Contains(out, "web1: primary node21 -> node22 (failover: stopped, started there)") {
		t.Errorf("evacuating default with --force-failover did not fail web1 over:\n%s", out)
	}
	if w := where(); w != "node22:node23" {
		t.Errorf("after evacuating default: web1 on %s, want node22:node23", w)
	}
}
