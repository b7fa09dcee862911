package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// storageScript is run with Ganeti's client against one member: it lists
// node21's file storage units through a job, modifies a physical volume
// the node does not have, and asks for an unknown storage type and field.
const storageScript = `
import json, sys
from ganeti.rapi import client as rc
c = rc.GanetiRapiClient(sys.argv[1], port=int(sys.argv[2]), username=sys.argv[4], password=sys.argv[5],
                        curl_config_fn=rc.GenericCurlConfig(cafile=sys.argv[3]))
def job(jid):
    c.WaitForJobCompletion(jid, period=0.05, retries=400)
    st = c.GetJobStatus(jid)
    return st["status"], st["opresult"]
print("LIST", json.dumps(job(c.GetNodeStorageUnits("node21", "file", "name,size,used,free"))))
print("MODIFY", json.dumps(job(c.ModifyNodeStorageUnits("node21", "lvm-pv", "/dev/gnt-no-such-pv", allocatable=False))))
print("REPAIR-FILE", end=" ")
try:
    c.RepairNodeStorageUnits("node21", "file", "/srv")
    print("accepted")
except rc.GanetiApiError as e:
    print(e.code, e)
for t, f in (("tape", "name"), ("rados", "name"), ("file", "name,colour")):
    try:
        c.GetNodeStorageUnits("node21", t, f)
        print("BAD", t, f, "accepted")
    except rc.GanetiApiError as e:
        print("BAD", t, f, e.code, e)
`

// TestNodeStorageAsGaneti: Ganeti's client lists a node's file storage
// unit (its data dir's file-storage directory, measured by the node's
// agent) through a job whose result is the rows, through the leader and a
// follower; modifying a physical volume the node does not have fails the
// job naming it; repairing a file unit, an unknown storage type and an
// unknown field are refused with 400 naming them. gnt node list-storage,
// modify-storage and repair-storage do the same.
func TestNodeStorageAsGaneti(t *testing.T) {
	py := ganetiPython(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	leader := c.WaitLeader(10 * time.Second)
	node := c.Member("node21")
	c.WaitAgent(node, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addUser(ctx, t, c, "ops", "ops-secret", true)
	dir := filepath.Join(node.DataDir, "file-storage")
	for _, m := range []*Member{leader, c.Followers(leader)[0]} {
		out := runGanetiClient(ctx, t, c, py, m, storageScript)
		t.Logf("through %s:\n%s", m.Name, out)
		lines := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			k, rest, _ := strings.Cut(l, " ")
			if k == "BAD" {
				k, rest, _ = strings.Cut(l, ":")
			}
			lines[k] += rest
		}
		if l := lines["LIST"]; !strings.HasPrefix(l, `["success", [[["`+dir+`", `) {
			t.Errorf("through %s: list-storage: %s, want a successful job with the row of %s\n%s", m.Name, l, dir, out)
		} else {
			var size, used, free int64
			if _, err := fmt.Sscanf(strings.TrimPrefix(l, `["success", [[["`+dir+`", `), "%d, %d, %d]]]]", &size, &used, &free); err != nil || size <= 0 || free > size || used > size {
				t.Errorf("through %s: sizes of %s: %v", m.Name, l, err)
			}
		}
		if l := lines["MODIFY"]; !strings.HasPrefix(l, `["error"`) || !strings.Contains(l, "/dev/gnt-no-such-pv") {
			t.Errorf("through %s: modify-storage of a missing PV: %s, want a failed job naming it", m.Name, l)
		}
		if l := lines["REPAIR-FILE"]; !strings.HasPrefix(l, "400") || !strings.Contains(l, "only lvm-vg") {
			t.Errorf("through %s: repair-storage of a file unit: %s, want 400", m.Name, l)
		}
		for _, want := range []string{`BAD tape name 400`, `BAD rados name 400`, `BAD file name,colour 400`} {
			if !strings.Contains(out, want) {
				t.Errorf("through %s: want %q in\n%s", m.Name, want, out)
			}
		}
		for _, want := range []string{`unknown storage type "tape"`, `storage type "rados" is not supported`, `unknown storage field "colour"`} {
			if !strings.Contains(out, want) {
				t.Errorf("through %s: want %q in\n%s", m.Name, want, out)
			}
		}
	}

	out, err := c.GNT("node", "list-storage", "--no-headers", "--separator", "|", "-t", "file", "node21")
	if f := strings.Split(strings.TrimSpace(string(out)), "|"); err != nil || len(f) != 7 || f[0] != "node21" || f[1] != "file" || f[2] != dir || f[6] != "Y" {
		t.Errorf("gnt node list-storage: %v\n%s", err, out)
	}
	out, err = c.GNT("node", "list-storage", "--fields", "name,free")
	if err != nil || !strings.Contains(string(out), "Name") || !strings.Contains(string(out), dir) {
		t.Errorf("gnt node list-storage of every node: %v\n%s", err, out)
	}
	for _, bad := range [][]string{
		{"node", "list-storage", "-t", "tape"},
		{"node", "list-storage", "--fields", "name,colour"},
		{"node", "modify-storage", "node21", "lvm-pv", "/dev/gnt-no-such-pv"},
		{"node", "repair-storage", "node21", "file", "/srv"},
	} {
		if out, err := c.GNT(bad...); err == nil {
			t.Errorf("gnt %s: accepted\n%s", strings.Join(bad, " "), out)
		}
	}
	out, err = c.GNT("node", "modify-storage", "--allocatable", "no", "node21", "lvm-pv", "/dev/gnt-no-such-pv")
	// Without LVM tools the node has no physical volume at all; with them
	// (lvm2 installed) pvs lists none of that name: either way the
	// failure names the volume and the node.
	if err == nil || !strings.Contains(string(out), "physical volume /dev/gnt-no-such-pv") || !strings.Contains(string(out), "node21") {
		t.Errorf("gnt node modify-storage of a missing PV: %v\n%s", err, out)
	}
}

// TestStorageUnitsRecorded: the leader records the nodes' storage units
// from their agents: gnt node info lists them with the time of the
// report, and placement, which reads the state, says where a node's disk
// figure comes from (the fake driver keeps its disks in no storage unit,
// so a node counts its declared disk, now reported).
func TestStorageUnitsRecorded(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	c.WaitLeader(10 * time.Second)
	node := c.Member("node21")
	c.WaitAgent(node, 30*time.Second)
	if out, err := c.GNT("cluster", "modify", "--diagnose-interval", "1s"); err != nil {
		t.Fatalf("cluster modify: %v\n%s", err, out)
	}
	dir := filepath.Join(node.DataDir, "file-storage")
	var out string
	deadline := time.Now().Add(90 * time.Second)
	for {
		var err error
		out, err = c.GNT("node", "info", "node21")
		if err == nil && strings.Contains(out, "storage units (reported") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node21's storage units were not recorded: %v\n%s", err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(out, "    - file "+dir+": size ") {
		t.Errorf("gnt node info: want the file unit %s in\n%s", dir, out)
	}
	out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "900T", "--memory", "128", "--os-type", "debian", "-n", "node21", "huge1")
	if err == nil || !strings.Contains(out, "node21 has") || !strings.Contains(out, "(declared disk)") {
		t.Errorf("an instance larger than node21's disk: %v\n%s\nwant a refusal naming node21 and its declared disk", err, out)
	}
}

// TestStorageKVMPlacement: a kvm node reports its storage with where its
// driver keeps disks (its volume group, here one the machine does not
// have) and why it takes no drbd disks; once the leader recorded it, a
// plain instance on it is refused by the allocator naming the missing
// volume group, and a drbd instance is refused at submission naming why,
// with no job made, by POST /2/instances, POST /2/gnt/jobs and POST
// /2/instances-multi-alloc alike. No guest is started.
func TestStorageKVMPlacement(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1, MemberArgs: func(name, _ string) []string {
		if name == "node21" {
			return []string{"--hypervisor", "kvm", "--kvm-accel", "tcg", "--volume-group", "gntnosuchvg"}
		}
		return []string{"--hypervisor", "fake"}
	}})
	c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	if out, err := c.GNT("cluster", "modify", "--diagnose-interval", "1s"); err != nil {
		t.Fatalf("cluster modify: %v\n%s", err, out)
	}
	c.Eventually(90*time.Second, 500*time.Millisecond, "node21's storage recorded", func() error {
		out, err := c.GNT("node", "info", "node21")
		if err != nil || !strings.Contains(out, "storage units (reported") {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(template string) (int64, error) {
		body := map[string]any{"__version__": 1, "instance_name": "vm1", "disk_template": template, "nics": []any{},
			"disks": []any{map[string]any{"size": 64}}, "hypervisor": "kvm", "os_type": "noop", "no_install": true,
			"start": false, "pnode": "node21"}
		if template == "drbd" {
			body["snode"] = "node11"
		}
		id, _, err := c.Client().Submit(ctx, "POST", "/2/instances", nil, body)
		return id, err
	}
	jobsBefore, err := c.GNT("job", "list")
	if err != nil {
		t.Fatalf("job list: %v\n%s", err, jobsBefore)
	}
	if id, err := create("drbd"); err == nil || !strings.Contains(err.Error(), "disk template drbd needs DRBD on both nodes: node node21 ") {
		t.Errorf("drbd on a kvm node: job %d, %v; want a refusal at submission naming node21", id, err)
	}
	// The other submission paths refuse it alike: several jobs at once,
	// and a multi-allocation naming its nodes.
	op := map[string]any{"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "vm2", "disk_template": "drbd", "nics": []any{},
		"disks": []any{map[string]any{"size": 64}}, "hypervisor": "kvm", "os_type": "noop", "no_install": true,
		"start": false, "pnode": "node21", "snode": "node11"}
	if ids, _, err := c.Client().SubmitJobs(ctx, [][]map[string]any{{op}}, ""); err == nil || !strings.Contains(err.Error(), "disk template drbd needs DRBD on both nodes: node node21 ") {
		t.Errorf("drbd on a kvm node by POST /2/gnt/jobs: jobs %v, %v; want a refusal at submission naming node21", ids, err)
	}
	delete(op, "OP_ID")
	if id, _, err := c.Client().Submit(ctx, "POST", "/2/instances-multi-alloc", nil, map[string]any{"instances": []any{op}}); err == nil ||
		!strings.Contains(err.Error(), "disk template drbd needs DRBD on both nodes: node node21 ") {
		t.Errorf("drbd on a kvm node by a multi-allocation: job %d, %v; want a refusal at submission naming node21", id, err)
	}
	if jobsAfter, err := c.GNT("job", "list"); err != nil || jobsAfter != jobsBefore {
		t.Errorf("the refused submissions made jobs: %v\n%s\nbefore:\n%s", err, jobsAfter, jobsBefore)
	}
	id, err := create("plain")
	if err != nil {
		t.Fatalf("plain create: %v", err)
	}
	var out string
	c.Eventually(60*time.Second, 500*time.Millisecond, "the plain creation refused", func() error {
		out, _ = c.GNT("job", "info", strconv.FormatInt(id, 10))
		if !strings.Contains(out, "no lvm-vg gntnosuchvg on the node") {
			return fmt.Errorf("job %d:\n%s", id, out)
		}
		return nil
	})
}
