package rpc_test

import (
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestNodeStorageBadInput: the storage resources refuse a missing or
// unknown storage type, an unknown field, a missing name and a type that
// cannot be modified or repaired with 400 naming the parameter, and
// submit no job.
func TestNodeStorageBadInput(t *testing.T) {
	e := moreEnv(t)
	before := configState(t, e.b)
	jobsBefore := e.do("GET", "/2/jobs", "")
	for _, c := range []struct {
		method, path, field, msg string
	}{
		{"GET", "/2/nodes/node1/storage?output_fields=name", "storage_type", "missing"},
		{"GET", "/2/nodes/node1/storage?storage_type=tape&output_fields=name", "storage_type", `unknown storage type "tape"`},
		{"GET", "/2/nodes/node1/storage?storage_type=rados&output_fields=name", "storage_type", "not supported"},
		{"GET", "/2/nodes/node1/storage?storage_type=file", "output_fields", "missing"},
		{"GET", "/2/nodes/node1/storage?storage_type=file&output_fields=name,colour", "output_fields", `"colour"`},
		{"GET", "/2/nodes/node1/storage?storage_type=file&storage_type=lvm-pv&output_fields=name", "storage_type", "2 times"},
		{"GET", "/2/nodes/bad%20name/storage?storage_type=file&output_fields=name", "node_name", ""},
		{"PUT", "/2/nodes/node1/storage/modify?storage_type=lvm-pv&allocatable=0", "name", "missing"},
		{"PUT", "/2/nodes/node1/storage/modify?storage_type=lvm-vg&name=xenvg&allocatable=0", "storage_type", "no modifiable fields"},
		{"PUT", "/2/nodes/node1/storage/modify?storage_type=lvm-pv&name=/dev/sdb", "changes", "allocatable"},
		{"PUT", "/2/nodes/node1/storage/modify?storage_type=lvm-pv&name=/dev/sdb&allocatable=maybe", "allocatable", "1 or 0"},
		{"PUT", "/2/nodes/node1/storage/repair?storage_type=file&name=/srv", "storage_type", "only lvm-vg"},
		{"PUT", "/2/nodes/node1/storage/repair?storage_type=lvm-vg", "name", "missing"},
	} {
		r := e.do(c.method, c.path, "")
		if r.status != 400 {
			t.Errorf("%s %s: %s, want 400", c.method, c.path, r)
			continue
		}
		ae := r.apiError(t)
		if ae.Field != c.field || !strings.Contains(ae.Message, c.msg) || ae.Explain == "" {
			t.Errorf("%s %s: %s, want field %s saying %q", c.method, c.path, r, c.field, c.msg)
		}
	}
	if after := configState(t, e.b); after != before {
		t.Errorf("the refused requests changed the configuration")
	}
	if jobsAfter := e.do("GET", "/2/jobs", ""); jobsAfter.String() != jobsBefore.String() {
		t.Errorf("the refused requests submitted jobs: %s, before %s", jobsAfter, jobsBefore)
	}
}

// TestDRBDRefusedAtSubmission: a drbd instance on a node whose agent said
// it takes no drbd disks is refused when it is submitted (409, naming
// the node and why), submitting no job; a plain one is submitted.
func TestDRBDRefusedAtSubmission(t *testing.T) {
	e := moreEnv(t)
	why := "node node1 has no DRBD (no /proc/drbd: the drbd kernel module is not loaded)"
	resp, _, err := e.b.ApplyCommand(fsm.NodeStorageReport{Now: 2, Epoch: e.b.Epoch(), Node: "node1", NoDRBD: why, Units: []fsm.StorageUnit{}})
	if err != nil || resp.Err != nil {
		t.Fatalf("recording node1's storage: %v %v", err, resp.Err)
	}
	jobsBefore := e.do("GET", "/2/jobs", "")
	for _, body := range []string{
		`{"__version__":1,"instance_name":"db1","disk_template":"drbd","disks":[{"size":1024}],"pnode":"node1","snode":"node2","os_type":"debian","mode":"create","nics":[]}`,
		`{"__version__":1,"instance_name":"db1","disk_template":"drbd","disks":[{"size":1024}],"os_type":"debian","mode":"create","nics":[]}`,
	} {
		r := e.do("POST", "/2/instances", body)
		if r.status != 409 {
			t.Errorf("drbd create: %s, want 409", r)
			continue
		}
		if ae := r.apiError(t); ae.Field != "disk_template" || !strings.Contains(ae.Message, "disk template drbd needs DRBD on") || !strings.Contains(ae.Message, why) {
			t.Errorf("drbd create: %s, want disk_template naming why", r)
		}
	}
	if jobsAfter := e.do("GET", "/2/jobs", ""); jobsAfter.String() != jobsBefore.String() {
		t.Errorf("the refused creations submitted jobs: %s, before %s", jobsAfter, jobsBefore)
	}
	r := e.do("POST", "/2/instances", `{"__version__":1,"instance_name":"db2","disk_template":"plain","disks":[{"size":1024}],"pnode":"node1","os_type":"debian","mode":"create","nics":[]}`)
	if r.status != 200 {
		t.Errorf("plain create on the same node: %s", r)
	}
}

// TestDRBDRefusedOnEverySubmissionPath: every way of submitting an
// opcode that puts drbd disks on a node that said it takes none is
// refused at submission (409, naming the node's reason and the field),
// writing nothing: the creation by POST /2/instances, POST /2/gnt/jobs
// (one job of several, one opcode of several),
// POST /2/instances-multi-alloc with nodes, replace_new_secondary with
// remote_node, recreate-disks of a drbd instance on given nodes, and the
// commit of a drbd reservation whose nodes include it.
// What leaves the node to the allocator is accepted while two nodes with
// DRBD remain (the allocator leaves the others out).
func TestDRBDRefusedOnEverySubmissionPath(t *testing.T) {
	e := moreEnv(t)
	for _, n := range []string{"node2", "node3"} {
		addNode(t, e.b, n, "192.0.2."+n[4:])
		resp, _, err := e.b.ApplyCommand(fsm.NodeRegister{Now: 1, Node: fsm.NodeSpec{Name: n, PrimaryIP: "192.0.2." + n[4:],
			Addrs: fsm.Addrs{Agent: "192.0.2." + n[4:] + ":1811"}, Resources: fsm.Resources{MemoryMiB: 8192, DiskMiB: 102400, CPUs: 8}}})
		if err != nil || resp.Err != nil {
			t.Fatalf("registering %s: %v %v", n, err, resp.Err)
		}
	}
	n1, n2, n3 := nodeOf(e.b, "node1").UUID, nodeOf(e.b, "node2").UUID, nodeOf(e.b, "node3").UUID
	if err := e.b.AddInstances(fsm.Instance{Name: "db0", UUID: "u-db0", PrimaryNode: n2, SecondaryNodes: []string{n3},
		OS: "debian", AdminState: "down", DiskTemplate: "drbd", MemoryMiB: 512, VCPUs: 1,
		Disks: []fsm.Disk{{UUID: "d0", SizeMiB: 1024, Mode: "rw"}}, Tags: []string{}},
		// A reservation recorded before node1 said it has no DRBD.
		fsm.Instance{Name: "res1", UUID: "u-res1", PrimaryNode: n2, SecondaryNodes: []string{n1}, Forthcoming: true,
			OS: "debian", AdminState: "down", DiskTemplate: "drbd", MemoryMiB: 512, VCPUs: 1,
			Disks: []fsm.Disk{{UUID: "d9", SizeMiB: 1024, Mode: "rw"}}, Tags: []string{}}); err != nil {
		t.Fatal(err)
	}
	why := "node node1 has no DRBD (no /proc/drbd: the drbd kernel module is not loaded)"
	resp, _, err := e.b.ApplyCommand(fsm.NodeStorageReport{Now: 2, Epoch: e.b.Epoch(), Node: "node1", NoDRBD: why, Units: []fsm.StorageUnit{}})
	if err != nil || resp.Err != nil {
		t.Fatalf("recording node1's storage: %v %v", err, resp.Err)
	}
	create := func(name, template, pnode, snode string) string {
		op := `"instance_name":"` + name + `","disk_template":"` + template + `","disks":[{"size":1024}],"os_type":"debian","mode":"create","nics":[]`
		if pnode != "" {
			op += `,"pnode":"` + pnode + `"`
		}
		if snode != "" {
			op += `,"snode":"` + snode + `"`
		}
		return op
	}
	createOp := func(name, template, pnode, snode string) string {
		return `{"OP_ID":"OP_INSTANCE_CREATE",` + create(name, template, pnode, snode) + `}`
	}
	before, jobsBefore := configState(t, e.b), e.do("GET", "/2/jobs", "").String()
	for _, c := range []struct {
		name, method, path, body string
		field, msg               string
	}{
		{"create", "POST", "/2/instances", `{"__version__":1,` + create("db1", "drbd", "node1", "node2") + `}`,
			"disk_template", "disk template drbd needs DRBD on both nodes: " + why},
		{"create, node1 secondary", "POST", "/2/instances", `{"__version__":1,` + create("db1", "drbd", "node2", "node1") + `}`,
			"disk_template", "disk template drbd needs DRBD on both nodes: " + why},
		{"gnt/jobs, the second job", "POST", "/2/gnt/jobs", `{"jobs":[[` + createOp("p1", "plain", "node1", "") + `],[` + createOp("db1", "drbd", "node2", "node1") + `]]}`,
			"disk_template", "job 1 of the submission: disk template drbd needs DRBD on both nodes: " + why},
		{"gnt/jobs, the second opcode", "POST", "/2/gnt/jobs",
			`{"jobs":[[` + createOp("p1", "plain", "node1", "") + `,{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"db0","mode":"replace_new_secondary","remote_node":"node1"}]]}`,
			"remote_node", "opcode 1: a new drbd secondary needs DRBD on its node: " + why},
		{"multi-alloc with nodes", "POST", "/2/instances-multi-alloc",
			`{"instances":[{` + create("db1", "drbd", "node2", "node3") + `},{` + create("db2", "drbd", "node3", "node1") + `}]}`,
			"disk_template", "job 1 of the submission: disk template drbd needs DRBD on both nodes: " + why},
		{"replace-disks to node1", "POST", "/2/instances/db0/replace-disks?mode=replace_new_secondary&remote_node=node1", "",
			"remote_node", "a new drbd secondary needs DRBD on its node: " + why},
		{"commit of a drbd reservation on node1", "POST", "/2/instances", `{"__version__":1,"instance_name":"res1","commit":true,"mode":"create","nics":[]}`,
			"disk_template", "disk template drbd needs DRBD on both nodes: " + why},
		{"recreate-disks on node1", "POST", "/2/instances/db0/recreate-disks", `{"nodes":["node2","node1"]}`,
			"nodes", "re-creating drbd disks needs DRBD on both nodes: " + why},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.status != 409 {
			t.Errorf("%s: %s, want 409", c.name, r)
			continue
		}
		if ae := r.apiError(t); ae.Field != c.field || !strings.Contains(ae.Message, c.msg) {
			t.Errorf("%s: %s, want field %s saying %q", c.name, r, c.field, c.msg)
		}
	}
	if after := configState(t, e.b); after != before {
		t.Errorf("the refused submissions changed the configuration")
	}
	if jobsAfter := e.do("GET", "/2/jobs", "").String(); jobsAfter != jobsBefore {
		t.Errorf("the refused submissions submitted jobs: %s, before %s", jobsAfter, jobsBefore)
	}
	for _, c := range []struct{ name, method, path, body string }{
		{"create by the allocator", "POST", "/2/instances", `{"__version__":1,` + create("db3", "drbd", "", "") + `}`},
		{"multi-alloc by the allocator", "POST", "/2/instances-multi-alloc", `{"instances":[{` + create("db4", "drbd", "", "") + `}]}`},
		{"gnt/jobs, drbd on node2 and node3", "POST", "/2/gnt/jobs", `{"jobs":[[` + createOp("db5", "drbd", "node2", "node3") + `]]}`},
		{"replace-disks by the allocator", "POST", "/2/instances/db0/replace-disks?mode=replace_new_secondary", ""},
		{"recreate-disks of a plain instance on node1", "POST", "/2/instances/web2/recreate-disks", `{"nodes":["node1"]}`},
	} {
		if r := e.do(c.method, c.path, c.body); r.status != 200 {
			t.Errorf("%s: %s, want it accepted", c.name, r)
		}
	}
}
