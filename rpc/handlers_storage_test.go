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
