package rpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// recordingNodes stands in for the node agents and records every call:
// a dry run must make none.
type recordingNodes struct {
	mu    sync.Mutex
	calls []string
}

func (n *recordingNodes) Call(_ context.Context, node *fsm.Node, c jobs.NodeCall) (jobs.NodeReply, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, c.Op+"@"+node.Name)
	return jobs.NodeReply{Changed: true}, nil
}

func (n *recordingNodes) made() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

// configState is everything of the state but the job queue: what a dry
// run must leave as it was.
func configState(t *testing.T, b *rpctest.Backend) string {
	t.Helper()
	var out []byte
	b.FSM().Read(func(st *fsm.State, _ uint64) {
		var err error
		out, err = json.Marshal(map[string]any{
			"cluster": st.Cluster, "groups": st.Groups, "nodes": st.Nodes, "instances": st.Instances, "networks": st.Networks,
			"maintenance": st.Maintenance, "pki": st.PKI, "rapi_users": st.RAPIUsers,
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	return string(out)
}

// TestDryRunEveryRoute walks every route that submits opcodes with
// ?dry-run=1, with an executor running over agents that record calls:
// each job finishes (its checks ran), says what it would have done, and
// neither the configuration changes nor is any agent called. The routes
// that are not made by opcodes refuse dry-run=1 and change nothing.
func TestDryRunEveryRoute(t *testing.T) {
	b := rpctest.NewCluster()
	addNode(t, b, "node2", "192.0.2.2")
	addNode(t, b, "node3", "192.0.2.3")
	for i, n := range []string{"node1", "node2", "node3"} {
		resp, _, err := b.ApplyCommand(fsm.NodeRegister{Now: 1, Node: fsm.NodeSpec{Name: n, PrimaryIP: fmt.Sprintf("192.0.2.%d", i+1),
			Addrs: fsm.Addrs{Agent: fmt.Sprintf("192.0.2.%d:1811", i+1)}, Resources: fsm.Resources{MemoryMiB: 8192, DiskMiB: 102400, CPUs: 8}}})
		if err != nil || resp.Err != nil {
			t.Fatalf("registering %s: %v %v", n, err, resp.Err)
		}
	}
	e := newEnv(t, b)
	n1, n2 := nodeOf(b, "node1").UUID, nodeOf(b, "node2").UUID
	for _, in := range []fsm.Instance{
		{Name: "inst1", UUID: "u1", PrimaryNode: n1, SecondaryNodes: []string{n2}, OS: "debian", AdminState: "up", DiskTemplate: "drbd",
			MemoryMiB: 512, VCPUs: 1, Disks: []fsm.Disk{{UUID: "d1", SizeMiB: 1024, Mode: "rw"}}, Tags: []string{"keep"}},
		{Name: "inst2", UUID: "u2", PrimaryNode: n1, OS: "debian", AdminState: "down", DiskTemplate: "plain",
			MemoryMiB: 512, VCPUs: 1, Disks: []fsm.Disk{{UUID: "d2", SizeMiB: 1024, Mode: "rw"}}, Tags: []string{}},
	} {
		if err := b.AddInstance(in); err != nil {
			t.Fatal(err)
		}
	}
	// Tags to delete, a group to remove.
	for _, p := range []string{"/2/tags?tag=old", "/2/nodes/node2/tags?tag=old", "/2/instances/inst1/tags?tag=old"} {
		if r := e.do("PUT", p+"&wait=10s", ""); r.status != http.StatusOK {
			t.Fatalf("setup %s: %s", p, r)
		}
	}
	if r := e.do("POST", "/2/groups?wait=10s", `{"group_name":"g2"}`); r.status != http.StatusOK {
		t.Fatalf("setup group: %s", r)
	}
	// Networks: lan connected and tagged, spare neither.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/2/networks", `{"network_name":"lan","network":"10.9.0.0/24","tags":["old"]}`},
		{"POST", "/2/networks", `{"network_name":"spare","network":"10.7.0.0/24"}`},
		{"PUT", "/2/networks/lan/connect", `{"group_name":"default","network_mode":"bridged","network_link":"br0"}`},
	} {
		if r := e.do(c.method, c.path+"?wait=10s", c.body); r.status != http.StatusOK {
			t.Fatalf("setup %s: %s", c.path, r)
		}
	}

	nodes := &recordingNodes{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&jobs.Executor{FSM: b.FSM(), Apply: b, Epoch: b.Epoch(), Nodes: nodes, Concurrency: 4}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	routes := []struct {
		method, path, body string
		// fails names what the checks refuse, when they should.
		fails string
	}{
		{"PUT", "/2/modify", `{"candidate_pool_size":7}`, ""},
		{"PUT", "/2/tags?tag=new", "", ""},
		{"DELETE", "/2/tags?tag=old", "", ""},
		{"POST", "/2/nodes", `{"node_name":"node9","primary_ip":"192.0.2.9","group":"default"}`, ""},
		{"DELETE", "/2/nodes/node3", "", ""},
		{"PUT", "/2/nodes/node3/modify", `{"drained":true}`, ""},
		{"POST", "/2/nodes/node3/modify", `{"drained":true}`, ""},
		{"PUT", "/2/nodes/node3/role", `"drained"`, ""},
		{"POST", "/2/nodes/node2/evacuate", "", ""},
		{"POST", "/2/nodes/node1/migrate", "", ""},
		{"POST", "/2/nodes/node3/powercycle", "", "any"},
		{"PUT", "/2/nodes/node2/storage/modify?storage_type=lvm-pv&name=/dev/sdb&allocatable=0", "", ""},
		{"PUT", "/2/nodes/node2/storage/repair?storage_type=lvm-vg&name=xenvg", "", ""},
		{"PUT", "/2/nodes/node2/tags?tag=new", "", ""},
		{"DELETE", "/2/nodes/node2/tags?tag=old", "", ""},
		{"POST", "/2/groups", `{"group_name":"g9"}`, ""},
		{"PUT", "/2/groups/g2/modify", `{"alloc_policy":"last_resort"}`, ""},
		{"DELETE", "/2/groups/g2", "", ""},
		{"PUT", "/2/groups/g2/tags?tag=new", "", ""},
		{"DELETE", "/2/groups/g2/tags?tag=none", "", "any"},
		{"PUT", "/2/groups/g2/rename", `{"new_name":"g5"}`, ""},
		{"PUT", "/2/groups/g2/assign-nodes", `{"nodes":["node3"]}`, ""},
		{"PUT", "/2/redistribute-config", "", ""},
		{"POST", "/2/instances-multi-alloc", `{"instances":[{"name":"web8","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":256},"nics":[]}]}`, ""},
		{"POST", "/2/instances", `{"__version__":1,"name":"web9","disk_template":"plain","disks":[{"size":1024}],"beparams":{"memory":256},"nics":[]}`, ""},
		{"DELETE", "/2/instances/inst1", "", ""},
		{"PUT", "/2/instances/inst2/startup", "", ""},
		{"PUT", "/2/instances/inst1/shutdown", "", ""},
		{"POST", "/2/instances/inst1/reboot", "", ""},
		{"PUT", "/2/instances/inst1/failover", "", ""},
		{"PUT", "/2/instances/inst1/migrate", "", ""},
		{"POST", "/2/instances/inst1/create", "", "any"},
		{"POST", "/2/instances/inst2/reinstall", `{"os":"debian"}`, ""},
		{"POST", "/2/instances/inst1/replace-disks?mode=replace_new_secondary&remote_node=node3", "", ""},
		{"POST", "/2/instances/inst2/recreate-disks", "", ""},
		{"PUT", "/2/instances/inst2/rename", `{"new_name":"inst7"}`, ""},
		{"PUT", "/2/instances/inst1/modify", `{"beparams":{"memory":1024}}`, ""},
		{"POST", "/2/instances/inst1/disk/0/grow", `{"amount":1024}`, ""},
		{"PUT", "/2/instances/inst1/activate-disks?ignore_size=1", "", ""},
		{"PUT", "/2/instances/inst2/deactivate-disks", "", ""},
		{"PUT", "/2/instances/inst1/tags?tag=new", "", ""},
		{"DELETE", "/2/instances/inst1/tags?tag=old", "", ""},
		{"POST", "/2/networks", `{"network_name":"n9","network":"10.8.0.0/24"}`, ""},
		{"DELETE", "/2/networks/spare", "", ""},
		{"PUT", "/2/networks/lan/modify", `{"add_reserved_ips":["10.9.0.9"]}`, ""},
		{"PUT", "/2/networks/spare/connect", `{"group_name":"default","network_mode":"bridged","network_link":"br0"}`, ""},
		{"PUT", "/2/networks/lan/disconnect", `{"group_name":"default"}`, ""},
		{"PUT", "/2/networks/lan/rename", `{"new_name":"lan9"}`, ""},
		{"PUT", "/2/networks/lan/tags?tag=new", "", ""},
		{"DELETE", "/2/networks/lan/tags?tag=old", "", ""},
		{"POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_INSTANCE_REMOVE","instance_name":"inst2"},{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["x"]}]}`, ""},
	}
	// Every opcode route of the server is walked.
	walked := map[string]bool{}
	for _, rt := range routes {
		walked[rt.method+" "+strings.SplitN(rt.path, "?", 2)[0]] = true
	}
	for _, rt := range e.srv.Routes() {
		if rt.Access != rpc.AccessWrite || rt.Method == "GET" {
			continue
		}
		if _, ok := nonOpcodeRoutes[rt.Method+" "+rt.Path]; ok {
			continue
		}
		p := strings.NewReplacer("{name}", "x").Replace(rt.Path)
		found := false
		for k := range walked {
			m, path, _ := strings.Cut(k, " ")
			if m == rt.Method && routeMatches(rt.Path, path) {
				found = true
			}
		}
		if !found {
			t.Errorf("route %s %s (%s) is not walked with dry-run=1", rt.Method, rt.Path, p)
		}
	}

	for _, rt := range routes {
		before := configState(t, b)
		sep := "?"
		if strings.Contains(rt.path, "?") {
			sep = "&"
		}
		r := e.do(rt.method, rt.path+sep+"dry-run=1&wait=10s", rt.body)
		if r.status != http.StatusOK {
			if rt.fails == "" {
				t.Errorf("%s %s: %s", rt.method, rt.path, r)
			}
			continue
		}
		var id int64
		if err := json.Unmarshal(r.body, &id); err != nil {
			t.Fatalf("%s %s: %s", rt.method, rt.path, r)
		}
		j := waitFinal(t, b, id)
		for k, op := range j.Ops {
			var in struct {
				DryRun bool `json:"dry_run"`
			}
			if err := json.Unmarshal(op.Input, &in); err != nil || !in.DryRun {
				t.Errorf("%s %s: opcode %d was submitted without dry_run: %s", rt.method, rt.path, k, op.Input)
			}
		}
		if rt.fails == "" && j.Status != fsm.StatusSuccess {
			t.Errorf("%s %s: the dry run ended %s: %s", rt.method, rt.path, j.Status, j.Ops[0].Result)
		}
		if after := configState(t, b); after != before {
			t.Errorf("%s %s: the dry run changed the configuration\nbefore %s\nafter  %s", rt.method, rt.path, before, after)
		}
		if calls := nodes.made(); len(calls) > 0 {
			t.Fatalf("%s %s: the dry run called agents: %v", rt.method, rt.path, calls)
		}
	}

	// A dry run of an instance removal says what it would have done.
	r := e.do("DELETE", "/2/instances/inst1?dry-run=1&wait=10s", "")
	var id int64
	if err := json.Unmarshal(r.body, &id); err != nil {
		t.Fatal(r)
	}
	j := waitFinal(t, b, id)
	var res struct {
		DryRun bool     `json:"dry_run"`
		Would  []string `json:"would"`
	}
	if err := json.Unmarshal(j.Ops[0].Result, &res); err != nil || !res.DryRun ||
		!strings.Contains(strings.Join(res.Would, "\n"), "call instance-remove inst1 on node1") {
		t.Errorf("remove dry run result %s (%v)", j.Ops[0].Result, err)
	}
	// The checks run: a dry run on a missing instance fails as the real
	// operation would.
	r = e.do("PUT", "/2/instances/nosuch/shutdown?dry-run=1&wait=10s", "")
	if r.status == http.StatusOK {
		_ = json.Unmarshal(r.body, &id)
		if j := waitFinal(t, b, id); j.Status != fsm.StatusError {
			t.Errorf("shutdown dry run of a missing instance: %s %s", j.Status, j.Ops[0].Result)
		}
	}

	// The routes not made by opcodes refuse dry-run=1, naming it.
	before := configState(t, b)
	for _, rt := range []struct{ method, path, body string }{
		{"DELETE", fmt.Sprintf("/2/jobs/%d", id), ""},
		{"POST", fmt.Sprintf("/2/gnt/jobs/%d/archive", id), ""},
		{"POST", "/2/gnt/master-failover", "{}"},
		{"POST", "/2/gnt/rapi-users", `{"name":"u","password":"secretsecret"}`},
		{"DELETE", "/2/gnt/rapi-users/u", ""},
		{"POST", "/2/gnt/renew-crypto", ""},
		{"POST", "/2/gnt/renew-key", ""},
		{"POST", "/2/gnt/client-cert", `{"csr":"x"}`},
	} {
		r := e.do(rt.method, rt.path+"?dry-run=1", rt.body)
		checkErr(t, r, http.StatusBadRequest, string(fsm.CodeInval), "dry-run")
	}
	if after := configState(t, b); after != before {
		t.Error("a refused dry run changed the configuration")
	}
}

// nonOpcodeRoutes are the write routes whose changes are not opcodes:
// they refuse dry-run=1 (tested above).
var nonOpcodeRoutes = map[string]struct{}{
	"DELETE /2/jobs/{id}": {}, "POST /2/gnt/jobs": {}, "POST /2/gnt/jobs/{id}/archive": {},
	"POST /2/gnt/master-failover": {}, "POST /2/gnt/init": {}, "POST /2/gnt/join": {}, "POST /2/gnt/forward": {},
	"POST /2/gnt/maintd/incidents/{id}/cancel": {}, "DELETE /2/gnt/maintd/incidents/{id}": {},
	"PUT /2/gnt/rapi-users": {}, "POST /2/gnt/rapi-users": {}, "PUT /2/gnt/rapi-users/{name}": {}, "DELETE /2/gnt/rapi-users/{name}": {},
	"POST /2/gnt/renew-crypto": {}, "POST /2/gnt/renew-key": {}, "POST /2/gnt/client-cert": {}, "PUT /2/gnt/snapshot": {},
	// Refused with 501, dry-run or not (handlers_more_test.go).
	"PUT /2/instances/{name}/prepare-export": {},
	"PUT /2/instances/{name}/export":         {}, "DELETE /2/instances/{name}/export": {},
	// Balancing honours dry-run=1 itself: the plan, nothing submitted
	// (integration's TestClusterBalance).
	"POST /2/gnt/balance": {},
	// Filter rules honour dry-run=1 themselves (filters_test.go).
	"POST /2/filters": {}, "PUT /2/filters/{uuid}": {}, "DELETE /2/filters/{uuid}": {},
}

// routeMatches says whether a concrete path matches a route pattern.
func routeMatches(pattern, path string) bool {
	ps, qs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(qs) {
		return false
	}
	for i := range ps {
		if !strings.HasPrefix(ps[i], "{") && ps[i] != qs[i] {
			return false
		}
	}
	return true
}

// waitFinal waits for job id to be finalized.
func waitFinal(t *testing.T, b *rpctest.Backend, id int64) *fsm.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j := jobOf(b, id)
		if j != nil && fsm.Finalized(j.Status) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d did not finish: %+v", id, j)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRefusedDryRunBothPaths: a dry run the state refuses (adding a group
// that exists) is answered 409 at submission both when it would be applied
// at once and when it would wait in the queue behind a filter rule, with
// no job made either way (docs/api.md: a write refused against the state
// is refused by the state machine).
func TestRefusedDryRunBothPaths(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	refuse := func(path string) {
		t.Helper()
		before := configState(t, b)
		var next int64
		b.FSM().Read(func(st *fsm.State, _ uint64) { next = st.NextJobID })
		r := e.do("POST", "/2/groups?dry-run=1", `{"group_name":"default"}`)
		checkErr(t, r, http.StatusConflict, string(fsm.CodeExists), "group_name")
		var after int64
		b.FSM().Read(func(st *fsm.State, _ uint64) { after = st.NextJobID })
		if after != next {
			t.Errorf("%s: the refused dry run made a job (next id %d, then %d)", path, next, after)
		}
		if configState(t, b) != before {
			t.Errorf("%s: the refused dry run changed the configuration", path)
		}
	}
	refuse("fast path")
	if r := e.do("POST", "/2/filters", `{"action":"PAUSE"}`); r.status != http.StatusOK {
		t.Fatalf("adding a PAUSE rule: %s", r)
	}
	refuse("queued")
	// A dry run that passes is queued (and held by the rule).
	if r := e.do("POST", "/2/groups?dry-run=1", `{"group_name":"g2"}`); r.status != http.StatusOK {
		t.Errorf("a dry run that passes behind a PAUSE rule: %s", r)
	}
}
