package rpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// moreEnv is a one-node cluster with a running instance web1 (one disk)
// and a stopped one web2.
func moreEnv(t *testing.T) *env {
	t.Helper()
	b := rpctest.NewCluster()
	resp, _, err := b.ApplyCommand(fsm.NodeRegister{Now: 1, Node: fsm.NodeSpec{Name: "node1", PrimaryIP: "192.0.2.1",
		Addrs: fsm.Addrs{Agent: "192.0.2.1:1811"}, Resources: fsm.Resources{MemoryMiB: 8192, DiskMiB: 102400, CPUs: 8}}})
	if err != nil || resp.Err != nil {
		t.Fatalf("registering node1: %v %v", err, resp.Err)
	}
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
	// A guest whose node reports a serial console socket (the kvm driver):
	// Ganeti's KVM answer, ssh to the node and socat on the socket.
	e.b.SetRuntime(nodeOf(e.b, "node1").UUID, rpc.NodeRuntime{At: e.b.Now(), Driver: "kvm",
		Instances: map[string]rpc.NodeInstanceStatus{"u1": {UUID: "u1", Name: "web1", State: rpc.NodeStateRunning, Console: "/d/serial.sock"}}})
	var ssh rpc.InstanceConsole
	if r := e.do("GET", "/2/instances/web1/console", ""); r.status != http.StatusOK || json.Unmarshal(r.body, &ssh) != nil ||
		ssh.Kind != "ssh" || ssh.Host != "node1" || ssh.Port != 22 || ssh.User != "root" ||
		strings.Join(ssh.Command, " ") != "socat STDIO,raw,echo=0,escape=0x1d UNIX-CONNECT:/d/serial.sock" {
		t.Errorf("console of a kvm guest: %s", r)
	}
	// Just migrated here (the view was taken with it on another node):
	// the console polls the nodes rather than answer from that view.
	polls := 0
	e.b.SetRuntimeSeen(map[string]string{"u1": "elsewhere/up"})
	e.b.SetOnPoll(func() {
		polls++
		e.b.SetRuntimeSeen(map[string]string{"u1": nodeOf(e.b, "node1").UUID + "/up"})
	})
	ssh = rpc.InstanceConsole{}
	if r := e.do("GET", "/2/instances/web1/console", ""); r.status != http.StatusOK || json.Unmarshal(r.body, &ssh) != nil ||
		ssh.Kind != "ssh" || polls != 1 {
		t.Errorf("console of a guest placed otherwise than in the view: %s after %d poll(s), want ssh after 1", r, polls)
	}
	if r := e.do("GET", "/2/instances/web1/console", ""); r.status != http.StatusOK || polls != 1 {
		t.Errorf("console with a view that knows the guest: %s, polled %d times, want no new poll", r, polls)
	}
	e.b.SetRuntimeSeen(nil)
	// A guest with vnc_bind_address and a network port of the pool:
	// Ganeti's "vnc" kind, the node's address when it binds to all.
	n1 := nodeOf(e.b, "node1").UUID
	for k, bind := range []string{"0.0.0.0", "127.0.0.1"} {
		name := fmt.Sprintf("vnc%d", k)
		if err := e.b.AddInstance(fsm.Instance{Name: name, UUID: "uv" + name, PrimaryNode: n1, OS: "debian", AdminState: "up",
			DiskTemplate: "diskless", MemoryMiB: 128, VCPUs: 1, Tags: []string{}, Hypervisor: "kvm", NetworkPort: 11003 + k,
			HVParams: map[string]any{"vnc_bind_address": bind}}); err != nil {
			t.Fatal(err)
		}
		r := e.do("GET", "/2/instances/"+name+"/console", "")
		var got map[string]any
		if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("console of %s: %s", name, r)
		}
		host := map[string]string{"0.0.0.0": "192.0.2.1", "127.0.0.1": "127.0.0.1"}[bind]
		want := map[string]any{"instance": name, "kind": "vnc", "host": host, "port": float64(11003 + k), "display": float64(5103 + k)}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("console of %s (vnc on %s): %s, want %v", name, bind, r.body, want)
		}
	}
	// A TLS console, or one with a password: the same, with a message
	// saying how its TLS and password are set.
	for k, c := range []struct {
		hv   map[string]any
		want string
	}{
		{map[string]any{"vnc_tls": true}, "VNC over TLS (VeNCrypt), anonymous: encrypted, the server not authenticated."},
		{map[string]any{"vnc_tls": true, "vnc_x509_path": "/etc/gnt/vnc"}, "VNC over TLS (VeNCrypt, x509): the server's certificate is signed by /etc/gnt/vnc/ca-cert.pem on the node."},
		{map[string]any{"vnc_tls": true, "vnc_x509_path": "/etc/gnt/vnc", "vnc_x509_verify": true, "vnc_password_file": "/etc/gnt/vnc-pw"},
			"VNC over TLS (VeNCrypt, x509): the server's certificate is signed by /etc/gnt/vnc/ca-cert.pem on the node, and the client must present a certificate signed by it; VNC password: the one in /etc/gnt/vnc-pw on the node."},
		{map[string]any{"vnc_password_file": "/etc/gnt/vnc-pw"}, "VNC password: the one in /etc/gnt/vnc-pw on the node."},
	} {
		name := fmt.Sprintf("tls%d", k)
		c.hv["vnc_bind_address"] = "127.0.0.1"
		if err := e.b.AddInstance(fsm.Instance{Name: name, UUID: "ut" + name, PrimaryNode: n1, OS: "debian", AdminState: "up",
			DiskTemplate: "diskless", MemoryMiB: 128, VCPUs: 1, Tags: []string{}, Hypervisor: "kvm", NetworkPort: 11010 + k,
			HVParams: c.hv}); err != nil {
			t.Fatal(err)
		}
		var got rpc.InstanceConsole
		if r := e.do("GET", "/2/instances/"+name+"/console", ""); r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil ||
			got.Kind != "vnc" || got.Host != "127.0.0.1" || got.Port != 11010+k || got.Message != c.want {
			t.Errorf("console of %s (%v): %s, want kind vnc with message %q", name, c.hv, r.body, c.want)
		}
	}
	// network_port in the instance's fields: the port, or null.
	for name, want := range map[string]string{"vnc0": "11003", "web1": "null"} {
		r := e.do("GET", "/2/instances/"+name, "")
		var got map[string]json.RawMessage
		if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || string(got["network_port"]) != want {
			t.Errorf("GET /2/instances/%s: network_port %s, want %s (%s)", name, got["network_port"], want, r)
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

// TestUnsupportedInstanceOps: export checks its input (400 naming the
// field), then answers 501 in Ganeti's error form, and changes nothing,
// with dry-run=1 or not; activate-disks and deactivate-disks check their
// flags (400) before they submit their job.
func TestUnsupportedInstanceOps(t *testing.T) {
	e := moreEnv(t)
	before := configState(t, e.b)
	for _, c := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"PUT", "/2/instances/web1/activate-disks?ignore_size=maybe", "", 400, "ignore_size"},
		{"PUT", "/2/instances/web1/deactivate-disks?force=2", "", 400, "force"},
		{"PUT", "/2/instances/bad%20name/deactivate-disks", "", 400, "instance_name"},
		{"PUT", "/2/instances/web1/prepare-export?mode=remote", "", 501, ""},
		{"PUT", "/2/instances/web1/export", `{"mode":"local","destination":"node1"}`, 501, ""},
		{"PUT", "/2/instances/bad%20name/export", "", 400, "instance_name"},
		{"DELETE", "/2/instances/web1/export", "", 501, ""},
		{"DELETE", "/2/instances/web1/export?dry-run=1", "", 501, ""},
		{"DELETE", "/2/instances/bad%20name/export", "", 400, "instance_name"},
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

// stateNodes answers the agents' status call: web1 runs, others are
// stopped; it records every call.
type stateNodes struct{ recordingNodes }

func (n *stateNodes) Call(ctx context.Context, node *fsm.Node, c jobs.NodeCall) (jobs.NodeReply, error) {
	n.recordingNodes.Call(ctx, node, c)
	if c.Op == jobs.NodeOpStatus && c.Instance != nil && c.Instance.Name == "web1" {
		return jobs.NodeReply{State: "running"}, nil
	}
	return jobs.NodeReply{State: "stopped"}, nil
}

// runJobs runs an executor over e's backend until the test ends.
func runJobs(t *testing.T, e *env, nodes jobs.NodeCaller) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&jobs.Executor{FSM: e.b.FSM(), Apply: e.b, Epoch: e.b.Epoch(), Nodes: nodes, Concurrency: 2}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// jobResult submits a request that answers a job id, waits for the job
// and returns it.
func jobResult(t *testing.T, e *env, method, path, body string) *fsm.Job {
	t.Helper()
	r := e.do(method, path, body)
	if r.status != http.StatusOK {
		t.Fatalf("%s %s: %s", method, path, r)
	}
	var id int64
	if err := json.Unmarshal(r.body, &id); err != nil {
		t.Fatalf("%s %s: not a job id: %s", method, path, r)
	}
	return waitFinal(t, e.b, id)
}

func TestInstanceInfo(t *testing.T) {
	e := moreEnv(t)
	nodes := &stateNodes{}
	runJobs(t, e, nodes)
	j := jobResult(t, e, "GET", "/2/instances/web1/info", "")
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("info job %s: %s", j.Status, j.Ops[0].Result)
	}
	var res map[string]map[string]any
	if err := json.Unmarshal(j.Ops[0].Result, &res); err != nil {
		t.Fatalf("info result %s: %v", j.Ops[0].Result, err)
	}
	info := res["web1"]
	if len(res) != 1 || info == nil {
		t.Fatalf("info result %s", j.Ops[0].Result)
	}
	// Ganeti's keys of OP_INSTANCE_QUERY_DATA's result, every one.
	for _, k := range []string{"name", "config_state", "run_state", "pnode", "pnode_group_uuid", "pnode_group_name",
		"snodes", "snodes_group_uuids", "snodes_group_names", "os", "nics", "disk_template", "disks", "hypervisor",
		"network_port", "hv_instance", "hv_actual", "be_instance", "be_actual", "os_instance", "os_actual",
		"serial_no", "mtime", "ctime", "uuid"} {
		if _, ok := info[k]; !ok {
			t.Errorf("info lacks %q: %s", k, j.Ops[0].Result)
		}
	}
	if info["run_state"] != "up" || info["config_state"] != "up" || info["pnode"] != "node1" || info["pnode_group_name"] != "default" {
		t.Errorf("info %v", info)
	}
	disks := info["disks"].([]any)
	if len(disks) != 1 || disks[0].(map[string]any)["size"] != float64(1024) || disks[0].(map[string]any)["iv_name"] != "disk/0" {
		t.Errorf("info disks %v", disks)
	}
	if calls := nodes.made(); len(calls) != 1 || calls[0] != "status@node1" {
		t.Errorf("agent calls %v, want one status on node1", calls)
	}
	// web2 is stopped; static asks no agent and leaves run_state null.
	j = jobResult(t, e, "GET", "/2/instances/web2/info", "")
	if !strings.Contains(string(j.Ops[0].Result), `"run_state":"down"`) {
		t.Errorf("web2 info %s", j.Ops[0].Result)
	}
	before := len(nodes.made())
	j = jobResult(t, e, "GET", "/2/instances/web1/info?static=1", "")
	if !strings.Contains(string(j.Ops[0].Result), `"run_state":null`) || len(nodes.made()) != before {
		t.Errorf("static info %s, agent calls %v", j.Ops[0].Result, nodes.made())
	}
	// A dry run asks no agent either, and says what it would do.
	j = jobResult(t, e, "GET", "/2/instances/web1/info?dry-run=1", "")
	if j.Status != fsm.StatusSuccess || len(nodes.made()) != before || !strings.Contains(string(j.Ops[0].Result), "would") {
		t.Errorf("dry-run info %s %s, agent calls %v", j.Status, j.Ops[0].Result, nodes.made())
	}
	// An unknown instance fails the job; bad input is refused at once.
	if j = jobResult(t, e, "GET", "/2/instances/nosuch/info", ""); j.Status != fsm.StatusError {
		t.Errorf("info of an unknown instance: %s %s", j.Status, j.Ops[0].Result)
	}
	for _, c := range []struct{ path, field string }{
		{"/2/instances/web1/info?static=maybe", "static"},
		{"/2/instances/bad%20name/info", "instance_name"},
	} {
		r := e.do("GET", c.path, "")
		if r.status != http.StatusBadRequest || r.apiError(t).Field != c.field {
			t.Errorf("GET %s: %s, want 400 naming %s", c.path, r, c.field)
		}
	}
}

func TestGroupRenameAndAssignNodes(t *testing.T) {
	e := moreEnv(t)
	runJobs(t, e, &stateNodes{})
	addNode(t, e.b, "node2", "192.0.2.2")
	if j := jobResult(t, e, "POST", "/2/groups", `{"group_name":"g2"}`); j.Status != fsm.StatusSuccess {
		t.Fatalf("group add: %s", j.Ops[0].Result)
	}
	groupName := func(node string) string {
		return readState(e.b, func(st *fsm.State) string { return st.Groups[st.LookupNode(node).Group].Name })
	}

	// Dry runs change nothing.
	before := configState(t, e.b)
	for _, c := range [][3]string{
		{"PUT", "/2/groups/g2/rename?dry-run=1", `{"new_name":"g3"}`},
		{"PUT", "/2/groups/g2/assign-nodes?dry-run=1", `{"nodes":["node2"]}`},
		{"PUT", "/2/redistribute-config?dry-run=1", ``},
	} {
		if j := jobResult(t, e, c[0], c[1], c[2]); j.Status != fsm.StatusSuccess {
			t.Errorf("%s %s: %s", c[0], c[1], j.Ops[0].Result)
		}
	}
	if after := configState(t, e.b); after != before {
		t.Errorf("dry runs changed the configuration")
	}

	j := jobResult(t, e, "PUT", "/2/groups/g2/rename", `{"new_name":"g3"}`)
	if j.Status != fsm.StatusSuccess || string(j.Ops[0].Result) != `"g3"` {
		t.Fatalf("rename: %s %s", j.Status, j.Ops[0].Result)
	}
	if r := e.do("GET", "/2/groups/g3", ""); r.status != http.StatusOK {
		t.Errorf("renamed group: %s", r)
	}
	j = jobResult(t, e, "PUT", "/2/groups/g3/assign-nodes", `{"nodes":["node2"]}`)
	if j.Status != fsm.StatusSuccess || string(j.Ops[0].Result) != "null" || groupName("node2") != "g3" {
		t.Fatalf("assign-nodes: %s %s; node2 in %s", j.Status, j.Ops[0].Result, groupName("node2"))
	}

	// A drbd instance across node1 and node2 would be split by moving
	// node2 back alone... it is split already (g3 and default), so make
	// one whose nodes share a group first.
	if j := jobResult(t, e, "PUT", "/2/groups/default/assign-nodes", `{"nodes":["node2"]}`); j.Status != fsm.StatusSuccess {
		t.Fatalf("assign back: %s", j.Ops[0].Result)
	}
	if err := e.b.AddInstance(fsm.Instance{Name: "db1", UUID: "u3", PrimaryNode: nodeOf(e.b, "node1").UUID,
		SecondaryNodes: []string{nodeOf(e.b, "node2").UUID}, OS: "debian", AdminState: "down", DiskTemplate: "drbd",
		MemoryMiB: 256, VCPUs: 1, Disks: []fsm.Disk{{UUID: "d3", SizeMiB: 512, Mode: "rw"}}, Tags: []string{}}); err != nil {
		t.Fatal(err)
	}
	// The configuration's checks run when the job is submitted: 409.
	r := e.do("PUT", "/2/groups/g3/assign-nodes", `{"nodes":["node2"]}`)
	if r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "db1") || groupName("node2") != "default" {
		t.Errorf("a split of db1: %s; node2 in %s", r, groupName("node2"))
	}
	j = jobResult(t, e, "PUT", "/2/groups/g3/assign-nodes?force=1", `{"nodes":["node2"]}`)
	if j.Status != fsm.StatusSuccess || groupName("node2") != "g3" {
		t.Errorf("a forced split: %s %s", j.Status, j.Ops[0].Result)
	}

	j = jobResult(t, e, "PUT", "/2/redistribute-config", "")
	if j.Status != fsm.StatusSuccess || !strings.Contains(string(j.Ops[0].Result), "Raft") {
		t.Errorf("redistribute-config: %s %s", j.Status, j.Ops[0].Result)
	}

	// Failures the state decides fail the job; bad input is refused at
	// once, naming the field.
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"PUT", "/2/groups/g3/rename", `{"new_name":"default"}`, http.StatusConflict},
		{"PUT", "/2/groups/g3/rename", `{"new_name":"g3"}`, http.StatusBadRequest},
		{"PUT", "/2/groups/nosuch/rename", `{"new_name":"g9"}`, http.StatusNotFound},
		{"PUT", "/2/groups/g3/assign-nodes", `{"nodes":["nosuch"]}`, http.StatusNotFound},
	} {
		if r := e.do(c.method, c.path, c.body); r.status != c.status || r.apiError(t).Field == "" {
			t.Errorf("%s %s %s: %s, want %d naming the field", c.method, c.path, c.body, r, c.status)
		}
	}
	before = configState(t, e.b)
	for _, c := range []struct{ method, path, body, field string }{
		{"PUT", "/2/groups/g3/rename", `{}`, "new_name"},
		{"PUT", "/2/groups/g3/rename", `{"new_name":"bad name"}`, "new_name"},
		{"PUT", "/2/groups/g3/rename", `{"new_name":"g4","newname":"x"}`, "newname"},
		{"PUT", "/2/groups/g3/rename", `{"new_name":7}`, "new_name"},
		{"PUT", "/2/groups/g3/assign-nodes", `{}`, "nodes"},
		{"PUT", "/2/groups/g3/assign-nodes", `{"nodes":[]}`, "nodes"},
		{"PUT", "/2/groups/g3/assign-nodes", `{"nodes":["node2","node2"]}`, "nodes"},
		{"PUT", "/2/groups/g3/assign-nodes", `{"nodes":"node2"}`, "nodes"},
		{"PUT", "/2/groups/g3/assign-nodes", `{"nodes":["node2"],"force":true}`, "force"},
		{"PUT", "/2/groups/g3/assign-nodes?force=yes", `{"nodes":["node2"]}`, "force"},
		{"PUT", "/2/redistribute-config", `{"x":1}`, "body"},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.status != http.StatusBadRequest || r.apiError(t).Field != c.field {
			t.Errorf("%s %s %s: %s, want 400 naming %s", c.method, c.path, c.body, r, c.field)
		}
	}
	if after := configState(t, e.b); after != before {
		t.Errorf("refused requests changed the configuration")
	}
}

func TestInstancesMultiAlloc(t *testing.T) {
	e := moreEnv(t)
	nodes := &stateNodes{}
	runJobs(t, e, nodes)
	inst := func(name string) string {
		return `{"name":"` + name + `","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":256},"nics":[],"os":"debian"}`
	}

	// A dry run: every job is one, nothing changes, no agent is called.
	before := configState(t, e.b)
	j := jobResult(t, e, "POST", "/2/instances-multi-alloc?dry-run=1", `{"instances":[`+inst("web7")+`,`+inst("web8")+`]}`)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("dry run: %s %s", j.Status, j.Ops[0].Result)
	}
	for _, id := range []int64{j.ID - 2, j.ID - 1} {
		c := waitFinal(t, e.b, id)
		if !strings.Contains(string(c.Ops[0].Input), `"dry_run":true`) || c.Status != fsm.StatusSuccess {
			t.Errorf("dry-run creation job %d: %s %s %s", id, c.Status, c.Ops[0].Input, c.Ops[0].Result)
		}
	}
	if after := configState(t, e.b); after != before || len(nodes.made()) != 0 {
		t.Errorf("the dry run changed the configuration or called agents %v", nodes.made())
	}

	j = jobResult(t, e, "POST", "/2/instances-multi-alloc", `{"instances":[`+inst("web7")+`,`+inst("web8")+`],"iallocator":"hail"}`)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("multi-alloc: %s %s", j.Status, j.Ops[0].Result)
	}
	var res struct {
		Jobs        [][2]any `json:"jobs"`
		Allocatable []string `json:"allocatable"`
		Failed      []string `json:"failed"`
	}
	if err := json.Unmarshal(j.Ops[0].Result, &res); err != nil {
		t.Fatalf("result %s: %v", j.Ops[0].Result, err)
	}
	if len(res.Jobs) != 2 || res.Jobs[0][0] != true || res.Jobs[0][1] != float64(j.ID-2) || res.Jobs[1][1] != float64(j.ID-1) ||
		strings.Join(res.Allocatable, ",") != "web7,web8" || res.Failed == nil || len(res.Failed) != 0 {
		t.Errorf("result %s (job %d)", j.Ops[0].Result, j.ID)
	}
	for _, id := range []int64{j.ID - 2, j.ID - 1} {
		if c := waitFinal(t, e.b, id); c.Status != fsm.StatusSuccess {
			t.Errorf("creation job %d: %s %s", id, c.Status, c.Ops[0].Result)
		}
	}
	for _, n := range []string{"web7", "web8"} {
		if r := e.do("GET", "/2/instances/"+n, ""); r.status != http.StatusOK {
			t.Errorf("%s after the multi-allocation: %s", n, r)
		}
	}

	// OP_INSTANCE_MULTI_ALLOC submitted on its own fails: it names no
	// creation jobs of its submission.
	if j := jobResult(t, e, "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instance_names":["web7"]}]}`); j.Status != fsm.StatusError {
		t.Errorf("a lone OP_INSTANCE_MULTI_ALLOC: %s %s", j.Status, j.Ops[0].Result)
	}

	before = configState(t, e.b)
	jobsBefore := readState(e.b, func(st *fsm.State) int64 { return st.NextJobID })
	for _, c := range []struct{ body, field string }{
		{``, "instances"},
		{`{}`, "instances"},
		{`{"instances":[]}`, "instances"},
		{`{"instances":[1]}`, "instances.0"},
		{`{"instances":[` + inst("web9") + `],"x":1}`, "x"},
		{`{"instances":[{"name":"web9","iallocator":"hail","disk_template":"plain","disks":[{"size":1}],"nics":[]}]}`, "instances.0.iallocator"},
		{`{"instances":[{"disk_template":"plain","disks":[{"size":1}],"nics":[]}]}`, "instances.0.instance_name"},
		{`{"instances":[` + inst("web9") + `,{"name":"web10","pnode":"node1","disk_template":"plain","disks":[{"size":1}],"nics":[]}]}`, "instances"},
		{`{"instances":[` + inst("web9") + `,{"name":"web10","disk_template":"plain","disks":[{"size":-1}],"nics":[]}]}`, "instances.1.disks.0.size"},
		{`{"instances":[` + inst("web9") + `],"opportunistic_locking":"yes"}`, "opportunistic_locking"},
	} {
		r := e.do("POST", "/2/instances-multi-alloc", c.body)
		if r.status != http.StatusBadRequest || r.apiError(t).Field != c.field {
			t.Errorf("%s: %s, want 400 naming %s", c.body, r, c.field)
		}
	}
	if after := configState(t, e.b); after != before || readState(e.b, func(st *fsm.State) int64 { return st.NextJobID }) != jobsBefore {
		t.Errorf("refused multi-allocations changed the configuration or queued jobs")
	}
}

func TestGrowDisk(t *testing.T) {
	e := moreEnv(t)
	nodes := &stateNodes{}
	runJobs(t, e, nodes)
	size := func() int64 {
		return readState(e.b, func(st *fsm.State) int64 { return st.LookupInstance("web1").Disks[0].SizeMiB })
	}

	before := configState(t, e.b)
	j := jobResult(t, e, "POST", "/2/instances/web1/disk/0/grow?dry-run=1", `{"amount":1024}`)
	if j.Status != fsm.StatusSuccess || !strings.Contains(string(j.Ops[0].Result), "disk-grow web1 on node1") {
		t.Errorf("dry run: %s %s", j.Status, j.Ops[0].Result)
	}
	if after := configState(t, e.b); after != before || len(nodes.made()) != 0 {
		t.Errorf("the dry run changed the configuration or called agents %v", nodes.made())
	}

	j = jobResult(t, e, "POST", "/2/instances/web1/disk/0/grow", `{"amount":1024,"wait_for_sync":true}`)
	if j.Status != fsm.StatusSuccess || size() != 2048 {
		t.Fatalf("grow: %s %s; size %d", j.Status, j.Ops[0].Result, size())
	}
	if calls := nodes.made(); len(calls) != 1 || calls[0] != "disk-grow@node1" {
		t.Errorf("agent calls %v", calls)
	}
	// absolute: the new size; the same size again grows only the storage.
	if j = jobResult(t, e, "POST", "/2/instances/web1/disk/0/grow", `{"amount":4096,"absolute":true}`); j.Status != fsm.StatusSuccess || size() != 4096 {
		t.Errorf("absolute grow: %s %s; size %d", j.Status, j.Ops[0].Result, size())
	}
	if j = jobResult(t, e, "POST", "/2/instances/web1/disk/0/grow", `{"amount":4096,"absolute":true}`); j.Status != fsm.StatusSuccess || size() != 4096 || len(nodes.made()) != 3 {
		t.Errorf("the same size again: %s %s; size %d; calls %v", j.Status, j.Ops[0].Result, size(), nodes.made())
	}
	// What the configuration refuses fails the job, changing nothing.
	before = configState(t, e.b)
	for _, c := range [][2]string{
		{"/2/instances/web1/disk/0/grow", `{"amount":100,"absolute":true}`},     // a shrink
		{"/2/instances/web1/disk/1/grow", `{"amount":100}`},                     // no such disk
		{"/2/instances/web1/disk/0/grow", `{"amount":1073741824}`},              // over the size bound
		{"/2/instances/web1/disk/0/grow", `{"amount":1000000,"absolute":true}`}, // more than node1 has
		{"/2/instances/nosuch/disk/0/grow", `{"amount":1}`},
	} {
		if j := jobResult(t, e, "POST", c[0], c[1]); j.Status != fsm.StatusError {
			t.Errorf("%s %s: %s %s", c[0], c[1], j.Status, j.Ops[0].Result)
		}
	}
	if after := configState(t, e.b); after != before {
		t.Errorf("failed grows changed the configuration")
	}
	for _, c := range []struct{ path, body, field string }{
		{"/2/instances/web1/disk/0/grow", `{}`, "amount"},
		{"/2/instances/web1/disk/0/grow", `{"amount":0}`, "amount"},
		{"/2/instances/web1/disk/0/grow", `{"amount":-5}`, "amount"},
		{"/2/instances/web1/disk/0/grow", `{"amount":1073741825}`, "amount"},
		{"/2/instances/web1/disk/0/grow", `{"amount":"10"}`, "amount"},
		{"/2/instances/web1/disk/0/grow", `{"amount":10,"sizee":1}`, "sizee"},
		{"/2/instances/web1/disk/0/grow", `{"amount":10,"ignore_ipolicy":true}`, "ignore_ipolicy"},
		{"/2/instances/web1/disk/x/grow", `{"amount":10}`, "disk"},
		{"/2/instances/web1/disk/16/grow", `{"amount":10}`, "disk"},
		{"/2/instances/web1/disk/-1/grow", `{"amount":10}`, "disk"},
		{"/2/instances/bad%20name/disk/0/grow", `{"amount":10}`, "instance_name"},
	} {
		r := e.do("POST", c.path, c.body)
		if r.status != http.StatusBadRequest || r.apiError(t).Field != c.field {
			t.Errorf("POST %s %s: %s, want 400 naming %s", c.path, c.body, r, c.field)
		}
	}
}

// FuzzMoreBodies sends arbitrary bodies to the routes of handlers_more.go
// that read one: every answer is a job id or an error in Ganeti's form,
// and garbage (not a JSON object) is never accepted.
func FuzzMoreBodies(f *testing.F) {
	for _, s := range []string{
		`{"instances":[{"name":"web9","disk_template":"plain","disks":[{"size":1024}],"nics":[]}]}`,
		`{"instances":[]}`, `{"instances":[1]}`, `{"instances":[{"iallocator":"hail"}],"iallocator":"hail"}`,
		`{"amount":1024}`, `{"amount":-1}`, `{"amount":1e400}`, `{"amount":1,"absolute":true}`,
		`{"new_name":"g9"}`, `{"new_name":""}`, `{"nodes":["node1"]}`, `{"nodes":[null]}`,
		``, `null`, `[]`, `{`, `"x"`, `{}{}`,
	} {
		for k := 0; k < 4; k++ {
			f.Add(uint8(k), []byte(s))
		}
	}
	b := rpctest.NewCluster()
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	routes := [][2]string{
		{"POST", "/2/instances-multi-alloc"},
		{"POST", "/2/instances/web1/disk/0/grow"},
		{"PUT", "/2/groups/default/rename"},
		{"PUT", "/2/groups/default/assign-nodes"},
	}
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		rt := routes[int(k)%len(routes)]
		rec := serve(h, rt[0], rt[1], body)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		if rec.Code < 300 && !isObject(body) {
			t.Fatalf("%s %s: garbage body %q accepted: %d %s", rt[0], rt[1], body, rec.Code, rec.Body)
		}
	})
}
