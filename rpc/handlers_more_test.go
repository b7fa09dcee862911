package rpc_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// moreEnv is a one-node cluster with a running instance web1 (one disk)
// and a stopped one web2.
func moreEnv(t *testing.T) *env {
	t.Helper()
	b := rpctest.NewCluster()
	n1 := nodeOf(b, "node1").UUID
	for _, in := range []fsm.Instance{
		{Name: "web1", UUID: "u1", PrimaryNode: n1, OS: "debian", AdminState: "up", DiskTemplate: "plain",
			MemoryMiB: 512, VCPUs: 1, Disks: []fsm.Disk{{UUID: "d1", SizeMiB: 1024, Mode: "rw"}}, Tags: []string{}},
		{Name: "web2", UUID: "u2", PrimaryNode: n1, OS: "debian", AdminState: "down", DiskTemplate: "plain",
			MemoryMiB: 512, VCPUs: 1, Disks: []fsm.Disk{{UUID: "d2", SizeMiB: 1024, Mode: "rw"}}, Tags: []string{}},
	} {
		if err := b.AddInstance(in); err != nil {
			t.Fatal(err)
		}
	}
	return newEnv(t, b)
}

func TestInstanceConsole(t *testing.T) {
	e := moreEnv(t)
	r := e.do("GET", "/2/instances/web1/console", "")
	if r.status != http.StatusOK {
		t.Fatalf("console: %s", r)
	}
	var got map[string]any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got["instance"] != "web1" || got["kind"] != "message" || !strings.Contains(got["message"].(string), "node1") {
		t.Errorf("console answer %s", r.body)
	}
	// Only Ganeti's InstanceConsole slots, the unset ones left out.
	for k := range got {
		switch k {
		case "instance", "kind", "message":
		default:
			t.Errorf("console answer has key %q: %s", k, r.body)
		}
	}
	for _, c := range []struct {
		path   string
		status int
		field  string
	}{
		{"/2/instances/web2/console", http.StatusConflict, "instance_name"},
		{"/2/instances/nosuch/console", http.StatusNotFound, "instance_name"},
		{"/2/instances/bad%20name/console", http.StatusBadRequest, "instance_name"},
	} {
		r := e.do("GET", c.path, "")
		if r.status != c.status || r.apiError(t).Field != c.field {
			t.Errorf("GET %s: %s, want %d naming %s", c.path, r, c.status, c.field)
		}
	}
}

// TestUnsupportedInstanceOps: activate-disks, deactivate-disks, disk grow
// and export check their input (400 naming the field), then answer 501
// in Ganeti's error form, and change nothing, with dry-run=1 or not.
func TestUnsupportedInstanceOps(t *testing.T) {
	e := moreEnv(t)
	before := configState(t, e.b)
	for _, c := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"PUT", "/2/instances/web1/activate-disks", "", 501, ""},
		{"PUT", "/2/instances/web1/activate-disks?ignore_size=1&dry-run=1", "", 501, ""},
		{"PUT", "/2/instances/web1/activate-disks?ignore_size=maybe", "", 400, "ignore_size"},
		{"PUT", "/2/instances/web1/deactivate-disks?force=1", "", 501, ""},
		{"PUT", "/2/instances/web1/deactivate-disks?force=2", "", 400, "force"},
		{"PUT", "/2/instances/bad%20name/deactivate-disks", "", 400, "instance_name"},
		{"POST", "/2/instances/web1/disk/0/grow", `{"amount":1024}`, 501, ""},
		{"POST", "/2/instances/web1/disk/0/grow?dry-run=1", `{"amount":1024,"wait_for_sync":true}`, 501, ""},
		{"POST", "/2/instances/web1/disk/0/grow", `{}`, 400, "amount"},
		{"POST", "/2/instances/web1/disk/0/grow", `{"amount":0}`, 400, "amount"},
		{"POST", "/2/instances/web1/disk/0/grow", `{"amount":-5}`, 400, "amount"},
		{"POST", "/2/instances/web1/disk/0/grow", `{"amount":1073741825}`, 400, "amount"},
		{"POST", "/2/instances/web1/disk/0/grow", `{"amount":"10"}`, 400, "amount"},
		{"POST", "/2/instances/web1/disk/0/grow", `{"amount":10,"sizee":1}`, 400, "sizee"},
		{"POST", "/2/instances/web1/disk/x/grow", `{"amount":10}`, 400, "disk"},
		{"POST", "/2/instances/web1/disk/16/grow", `{"amount":10}`, 400, "disk"},
		{"POST", "/2/instances/web1/disk/-1/grow", `{"amount":10}`, 400, "disk"},
		{"PUT", "/2/instances/web1/prepare-export?mode=remote", "", 501, ""},
		{"PUT", "/2/instances/web1/export", `{"mode":"local","destination":"node1"}`, 501, ""},
		{"PUT", "/2/instances/bad%20name/export", "", 400, "instance_name"},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.status != c.status {
			t.Errorf("%s %s %s: %s, want %d", c.method, c.path, c.body, r, c.status)
			continue
		}
		ae := r.apiError(t)
		if ae.Field != c.field || ae.Explain == "" || ae.Message == "" || ae.Status != c.status {
			t.Errorf("%s %s %s: error body %s, want field %q and Ganeti's code, message, explain", c.method, c.path, c.body, r, c.field)
		}
		if c.status == 501 && ae.ErrorCode != "not_implemented" {
			t.Errorf("%s %s: error_code %q", c.method, c.path, ae.ErrorCode)
		}
	}
	if after := configState(t, e.b); after != before {
		t.Errorf("the refused requests changed the configuration")
	}
}
