package rpc_test

import (
	"encoding/json"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// Ganeti's field lists as doc/rapi.rst prints them ("Returned fields:",
// sorted), written from the documentation.
var (
	docInstanceFields = []string{"admin_state", "beparams", "ctime", "custom_beparams", "custom_hvparams",
		"custom_nicparams", "custom_osparams", "disk.names", "disk.sizes", "disk.spindles", "disk.uuids",
		"disk_template", "disk_usage", "hvparams", "mtime", "name", "network_port", "nic.bridges", "nic.ips",
		"nic.links", "nic.macs", "nic.modes", "nic.names", "nic.networks", "nic.networks.names", "nic.uuids",
		"oper_ram", "oper_state", "oper_vcpus", "os", "pnode", "serial_no", "snodes", "status", "tags", "uuid"}
	docNodeFields = []string{"cnodes", "cnos", "csockets", "ctime", "ctotal", "dfree", "drained", "dtotal",
		"group.uuid", "master_candidate", "master_capable", "mfree", "mnode", "mtime", "mtotal", "name",
		"ndparams", "offline", "pinst_cnt", "pinst_list", "pip", "role", "serial_no", "sinst_cnt", "sinst_list",
		"sip", "spfree", "sptotal", "tags", "uuid", "vm_capable"}
	docGroupFields = []string{"alloc_policy", "ctime", "custom_diskparams", "custom_ipolicy", "custom_ndparams",
		"diskparams", "ipolicy", "mtime", "name", "ndparams", "node_cnt", "node_list", "serial_no", "tags", "uuid"}
	docJobBulkFields = []string{"end_ts", "id", "ops", "opstatus", "received_ts", "start_ts", "status", "summary"}
	docJobFields     = append([]string{"oplog", "opresult"}, docJobBulkFields...)
	docInfoFields    = []string{"enabled_hypervisors", "default_hypervisor", "hvparams", "beparams"}
)

// fieldEnv is a cluster of two nodes, a group and an instance with a
// disk and two NICs, and a job.
func fieldEnv(t *testing.T) (*rpctest.Backend, *env) {
	t.Helper()
	b := rpctest.NewCluster()
	addNode(t, b, "node2", "192.0.2.2")
	n1, n2 := nodeOf(b, "node1").UUID, nodeOf(b, "node2").UUID
	if err := b.AddInstance(fsm.Instance{Name: "inst1", UUID: "u1", PrimaryNode: n1, SecondaryNodes: []string{n2},
		OS: "debian", AdminState: fsm.AdminUp, DiskTemplate: "drbd", MemoryMiB: 512, VCPUs: 2,
		Disks: []fsm.Disk{{UUID: "d1", Name: "root", SizeMiB: 1024, Mode: "rw"}},
		NICs: []fsm.NIC{{UUID: "nic1", Name: "eth0", MAC: "aa:00:00:00:00:01", IP: "198.51.100.7", Mode: "bridged", Link: "br0"},
			{UUID: "nic2", MAC: "aa:00:00:00:00:02", Mode: "routed", Link: "rt1"}}}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, b)
	mustOK(t, e.do("PUT", "/2/tags?tag=x", ""))
	return b, e
}

// hasFields checks that every object of a JSON answer carries every
// field of want.
func hasFields(t *testing.T, what string, body []byte, want []string) {
	t.Helper()
	var objs []map[string]any
	if err := json.Unmarshal(body, &objs); err != nil {
		var one map[string]any
		if err := json.Unmarshal(body, &one); err != nil {
			t.Fatalf("%s: %v: %s", what, err, body)
		}
		objs = []map[string]any{one}
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no objects", what)
	}
	for i, o := range objs {
		for _, f := range want {
			if _, ok := o[f]; !ok {
				t.Errorf("%s[%d] lacks Ganeti's field %q", what, i, f)
			}
		}
	}
}

func TestFieldListInstances(t *testing.T) {
	_, e := fieldEnv(t)
	hasFields(t, "/2/instances?bulk=1", e.do("GET", "/2/instances?bulk=1", "").body, docInstanceFields)
	hasFields(t, "/2/instances/inst1", e.do("GET", "/2/instances/inst1", "").body, docInstanceFields)
	// The exported list is the documented one.
	got := append([]string(nil), rpc.InstanceFieldNames...)
	sort.Strings(got)
	if len(got) != len(docInstanceFields) {
		t.Errorf("InstanceFieldNames %v", got)
	}
	for i := range got {
		if i < len(docInstanceFields) && got[i] != docInstanceFields[i] {
			t.Errorf("InstanceFieldNames[%d] %q, doc %q", i, got[i], docInstanceFields[i])
		}
	}
}

func TestFieldListNodes(t *testing.T) {
	_, e := fieldEnv(t)
	hasFields(t, "/2/nodes?bulk=1", e.do("GET", "/2/nodes?bulk=1", "").body, docNodeFields)
	hasFields(t, "/2/nodes/node2", e.do("GET", "/2/nodes/node2", "").body, docNodeFields)
}

func TestFieldListGroups(t *testing.T) {
	_, e := fieldEnv(t)
	hasFields(t, "/2/groups?bulk=1", e.do("GET", "/2/groups?bulk=1", "").body, docGroupFields)
	hasFields(t, "/2/groups/default", e.do("GET", "/2/groups/default", "").body, docGroupFields)
}

func TestFieldListJobs(t *testing.T) {
	_, e := fieldEnv(t)
	hasFields(t, "/2/jobs?bulk=1", e.do("GET", "/2/jobs?bulk=1", "").body, docJobBulkFields)
	var ids []rpc.JobIDURI
	_ = json.Unmarshal(e.do("GET", "/2/jobs", "").body, &ids)
	if len(ids) == 0 {
		t.Fatal("no job")
	}
	hasFields(t, "/2/jobs/N", e.do("GET", "/2/jobs/"+strconv.FormatInt(ids[0].ID, 10), "").body, docJobFields)
}

func TestFieldListInfo(t *testing.T) {
	b, e := fieldEnv(t)
	hasFields(t, "/2/info", e.do("GET", "/2/info", "").body, docInfoFields)
	// Without a runtime view no hypervisor is known.
	info, err := e.c.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.EnabledHypervisors) != 0 || info.DefaultHypervisor != nil || info.BEParams["default"]["vcpus"] != float64(fsm.DefaultInstanceVCPUs) {
		t.Errorf("info %+v", info)
	}
	// The agents' drivers make the enabled hypervisors.
	n1, n2 := nodeOf(b, "node1").UUID, nodeOf(b, "node2").UUID
	b.SetRuntime(n2, rpc.NodeRuntime{At: b.Now(), Driver: "exec"})
	b.SetRuntime(n1, rpc.NodeRuntime{At: b.Now(), Driver: "fake"})
	if info, err = e.c.Info(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if len(info.EnabledHypervisors) != 2 || info.EnabledHypervisors[0] != "exec" || info.DefaultHypervisor == nil ||
		*info.DefaultHypervisor != "exec" && *info.DefaultHypervisor != "fake" {
		t.Errorf("info hypervisors %v default %v", info.EnabledHypervisors, info.DefaultHypervisor)
	}
	if _, ok := info.HVParams["fake"]; !ok {
		t.Errorf("hvparams %v", info.HVParams)
	}
	// A node's driver and the kvm driver's accelerator show on the node.
	b.SetRuntime(n1, rpc.NodeRuntime{At: b.Now(), Driver: "kvm", Accel: "tcg", AccelNote: "no /dev/kvm", Taps: "no: lacks CAP_NET_ADMIN"})
	if n, err := e.c.Node(ctx(t), "node1"); err != nil || n.Hypervisor == nil || *n.Hypervisor != "kvm" ||
		n.Accel == nil || *n.Accel != "tcg: no /dev/kvm" || n.Taps == nil || *n.Taps != "no: lacks CAP_NET_ADMIN" {
		t.Errorf("node1 %+v %v", n, err)
	}
	if n, err := e.c.Node(ctx(t), "node2"); err != nil || n.Hypervisor == nil || *n.Hypervisor != "exec" || n.Accel != nil || n.Taps != nil {
		t.Errorf("node2 %+v %v", n, err)
	}
}

// TestInstanceFieldValues: the list and object fields of an instance
// follow its disks and NICs, with null for what is unset.
func TestInstanceFieldValues(t *testing.T) {
	_, e := fieldEnv(t)
	var o map[string]any
	if err := json.Unmarshal(e.do("GET", "/2/instances/inst1", "").body, &o); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"disk.uuids": `["d1"]`, "disk.names": `["root"]`, "disk.spindles": `[null]`, "disk.sizes": `[1024]`,
		"disk_usage": `1152`, "nic.uuids": `["nic1","nic2"]`, "nic.names": `["eth0",null]`,
		"nic.bridges": `["br0",null]`, "nic.networks": `[null,null]`, "nic.networks.names": `[null,null]`,
		"nic.ips": `["198.51.100.7",null]`, "nic.modes": `["bridged","routed"]`, "nic.links": `["br0","rt1"]`,
		"custom_nicparams": `[{"link":"br0","mode":"bridged"},{"link":"rt1","mode":"routed"}]`,
		"beparams":         `{"always_failover":false,"auto_balance":true,"maxmem":512,"memory":512,"minmem":512,"spindle_use":1,"vcpus":2}`, "hvparams": `{}`,
		"custom_beparams": `{}`, "custom_hvparams": `{}`, "nic.vlans": `["",""]`,
		"network_port": `null`, "oper_ram": `null`, "oper_vcpus": `null`,
		// No runtime view of node1 yet: unknown.
		"status": `null`, "oper_state": `null`,
	}
	for f, w := range want {
		got, _ := json.Marshal(o[f])
		if string(got) != w {
			t.Errorf("%s = %s, want %s", f, got, w)
		}
	}
}

// TestInstanceStatus walks Ganeti's instance states: from the primary
// node's flags and liveness, then from the runtime view.
func TestInstanceStatus(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	running := func(uuid string) map[string]rpc.NodeInstanceStatus {
		return map[string]rpc.NodeInstanceStatus{uuid: {UUID: uuid, State: rpc.NodeStateRunning}}
	}
	stopped := func(uuid string) map[string]rpc.NodeInstanceStatus {
		return map[string]rpc.NodeInstanceStatus{uuid: {UUID: uuid, State: rpc.NodeStateStopped}}
	}
	cases := []struct {
		name     string
		admin    string
		offline  bool
		liveness string
		view     map[string]rpc.NodeRuntime // by node uuid p (primary) or o (other)
		seen     map[string]string          // Runtime.Seen
		status   any
		oper     any
	}{
		{name: "node offline", admin: fsm.AdminUp, offline: true, view: map[string]rpc.NodeRuntime{"p": {At: now, Instances: running("i")}}, status: rpc.InstStatusNodeOffline},
		{name: "node dead", admin: fsm.AdminUp, liveness: fsm.LivenessDead, view: map[string]rpc.NodeRuntime{"p": {At: now, Instances: running("i")}}, status: rpc.InstStatusNodeDown},
		{name: "not polled yet", admin: fsm.AdminUp},
		{name: "stale view", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now.Add(-rpc.RuntimeMaxAge - time.Second), Instances: running("i")}}},
		{name: "agent did not answer", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now, Err: "connection refused"}}, status: rpc.InstStatusNodeDown},
		{name: "running", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now, Instances: running("i")}}, status: rpc.InstStatusRunning, oper: true},
		{name: "running against admin down", admin: fsm.AdminDown, view: map[string]rpc.NodeRuntime{"p": {At: now, Instances: running("i")}}, status: rpc.InstStatusErrorUp, oper: true},
		{name: "stopped against admin up", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now, Instances: stopped("i")}}, status: rpc.InstStatusErrorDown, oper: false},
		{name: "absent against admin up", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now}}, status: rpc.InstStatusErrorDown, oper: false},
		{name: "admin down", admin: fsm.AdminDown, view: map[string]rpc.NodeRuntime{"p": {At: now, Instances: stopped("i")}}, status: rpc.InstStatusAdminDown, oper: false},
		{name: "admin offline", admin: fsm.AdminOffline, view: map[string]rpc.NodeRuntime{"p": {At: now}}, status: rpc.InstStatusAdminOff, oper: false},
		{name: "running elsewhere", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now}, "o": {At: now, Instances: running("i")}}, status: rpc.InstStatusWrongNode, oper: false},
		{name: "running elsewhere, stale", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now}, "o": {At: now.Add(-time.Hour), Instances: running("i")}}, status: rpc.InstStatusErrorDown, oper: false},
		// The view was taken when the instance was on o (migrated to p
		// since): not yet known, rather than ERROR_wrongnode.
		{name: "migrated since the view", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now}, "o": {At: now, Instances: running("i")}},
			seen: map[string]string{"i": "o/" + fsm.AdminUp}},
		{name: "started since the view", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now}}, seen: map[string]string{"i": "p/" + fsm.AdminDown}},
		{name: "created since the view", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now}}, seen: map[string]string{}},
		{name: "seen as it is", admin: fsm.AdminUp, view: map[string]rpc.NodeRuntime{"p": {At: now}, "o": {At: now, Instances: running("i")}},
			seen: map[string]string{"i": "p/" + fsm.AdminUp}, status: rpc.InstStatusWrongNode, oper: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &fsm.State{Nodes: map[string]*fsm.Node{
				"p": {Name: "p", UUID: "p", Offline: tc.offline, Liveness: tc.liveness},
				"o": {Name: "o", UUID: "o"},
			}}
			inst := &fsm.Instance{Name: "i", UUID: "i", PrimaryNode: "p", AdminState: tc.admin}
			var rt *rpc.Runtime
			if tc.view != nil {
				rt = &rpc.Runtime{Nodes: tc.view, Seen: tc.seen, Now: now}
			}
			status, oper := rpc.InstanceStatus(st, inst, rt)
			if status != tc.status || oper != tc.oper {
				t.Errorf("status %v oper_state %v, want %v %v", status, oper, tc.status, tc.oper)
			}
		})
	}
}

// TestInstanceStatusServed: the runtime view reaches the answers.
func TestInstanceStatusServed(t *testing.T) {
	b, e := fieldEnv(t)
	b.SetRuntime(nodeOf(b, "node1").UUID, rpc.NodeRuntime{At: b.Now(), Driver: "fake",
		Instances: map[string]rpc.NodeInstanceStatus{"u1": {UUID: "u1", State: rpc.NodeStateRunning, MemoryMiB: 500, VCPUs: 3}}})
	i, err := e.c.Instance(ctx(t), "inst1")
	if err != nil {
		t.Fatal(err)
	}
	if i.Status == nil || *i.Status != rpc.InstStatusRunning || i.OperState == nil || !*i.OperState {
		t.Errorf("status %v oper_state %v", i.Status, i.OperState)
	}
	// What the agent reports it runs with, not the configuration.
	if i.OperRAM == nil || *i.OperRAM != 500 || i.OperVCPUs == nil || *i.OperVCPUs != 3 {
		t.Errorf("oper_ram %v oper_vcpus %v", i.OperRAM, i.OperVCPUs)
	}
	list, err := e.c.Instances(ctx(t), true)
	if err != nil || len(list) != 1 || list[0].Status == nil || *list[0].Status != rpc.InstStatusRunning {
		t.Errorf("bulk %+v %v", list, err)
	}
}
