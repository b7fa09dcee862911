package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// checkJob checks a submitted job: it exists at the submission index,
// succeeded, and each opcode carries the reason trail.
func checkJob(t *testing.T, b *rpctest.Backend, id int64, m rpc.Meta, method, path, reason string) *fsm.Job {
	t.Helper()
	if m.Index == 0 || m.Index != b.FSM().Index() {
		t.Errorf("X-Gnt-Index %d, want the apply index %d", m.Index, b.FSM().Index())
	}
	j := jobOf(b, id)
	if j == nil {
		t.Fatalf("job %d does not exist", id)
	}
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("job %d is %s: %s", id, j.Status, j.Ops[0].Result)
	}
	for _, op := range j.Ops {
		var in struct {
			Reason []fsm.ReasonEntry `json:"reason"`
		}
		if err := json.Unmarshal(op.Input, &in); err != nil {
			t.Fatal(err)
		}
		want := []string{"gnt:library:rlib2"}
		if reason != "" {
			want = []string{"gnt:user", "gnt:library:rlib2"}
		}
		var got []string
		for _, r := range in.Reason {
			got = append(got, r.Source)
			if r.TimeNS == 0 {
				t.Errorf("reason without time: %+v", r)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reason sources %v, want %v", got, want)
		}
		last := in.Reason[len(in.Reason)-1]
		if last.Text != method+" "+path {
			t.Errorf("rlib2 reason %q, want %q", last.Text, method+" "+path)
		}
		if reason != "" && in.Reason[0].Text != reason {
			t.Errorf("user reason %q, want %q", in.Reason[0].Text, reason)
		}
	}
	return j
}

func TestVersionInfoAndHeaders(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	v, err := e.c.Version(ctx(t))
	if err != nil || v != 2 {
		t.Fatalf("version %d %v", v, err)
	}
	var ignored any
	m, err := e.c.Do(ctx(t), "GET", "/version", nil, nil, &ignored)
	if err != nil {
		t.Fatal(err)
	}
	if m.Index != b.FSM().Index() || !m.KnownLeader || m.LastContact != 0 {
		t.Errorf("meta %+v", m)
	}
	var info rpc.ClusterInfo
	m, err = e.c.Do(ctx(t), "GET", "/2/info", nil, nil, &info)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "cluster.example.com" || info.Master != "node1" || info.Leader != "node1" ||
		info.ProtocolVersion != 1 || info.OSAPIVersion != 20 || info.ExportVersion != 0 ||
		info.Architecture != [2]string{runtime.GOOS, runtime.GOARCH} || info.ConfigVersion != fsm.SnapshotVersion ||
		info.CandidatePoolSize != fsm.DefaultCandidatePoolSize || info.MaxVoters != fsm.DefaultMaxVoters ||
		info.SoftwareVersion != "test" || info.UUID == "" || info.SerialNo == 0 || info.CTime == 0 ||
		info.NDParams["ssh_port"] != float64(22) || info.Tags == nil {
		t.Errorf("info %+v", info)
	}
	if m.Index != b.FSM().Index() {
		t.Errorf("index %d", m.Index)
	}

	// A follower says how stale it may be.
	f := rpctest.NewReplica(b, "node2")
	f.SetLeader("192.0.2.1:5080", "node1", false)
	f.SetLastContact(1500 * time.Millisecond)
	fe := newEnv(t, f)
	r := fe.do("GET", "/2/info", "")
	mustOK(t, r)
	if r.header.Get(rpc.HeaderKnownLeader) != "true" || r.header.Get(rpc.HeaderLastContact) != "1500" ||
		r.header.Get(rpc.HeaderIndex) != strconv.FormatUint(b.FSM().Index(), 10) {
		t.Errorf("follower headers %v", r.header)
	}
	f.SetLeader("", "", false)
	r = fe.do("GET", "/version", "")
	if r.header.Get(rpc.HeaderKnownLeader) != "false" {
		t.Errorf("known leader without a leader: %v", r.header)
	}
}

func TestNodes(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	c := ctx(t)

	id, m, err := e.c.AddNode(c, rpc.AddNodeRequest{NodeName: "node2", PrimaryIP: "192.0.2.2", SecondaryIP: "198.51.100.2",
		NDParams: map[string]any{"ssh_port": 2222}}, "adding node2")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, b, id, m, "POST", "/2/nodes", "adding node2")
	no := false
	if _, _, err := e.c.AddNode(c, rpc.AddNodeRequest{NodeName: "node3", PrimaryIP: "192.0.2.3", MasterCapable: &no}, ""); err != nil {
		t.Fatal(err)
	}

	list, err := e.c.Nodes(c, false)
	if err != nil || len(list) != 3 || list[0].Name != "node1" || list[2].Name != "node3" {
		t.Fatalf("nodes %+v %v", list, err)
	}
	raw := decode[[]rpc.IDURI](t, e.do("GET", "/2/nodes", ""))
	if raw[1] != (rpc.IDURI{ID: "node2", URI: "/2/nodes/node2"}) {
		t.Errorf("listing %+v", raw)
	}
	bulk, err := e.c.Nodes(c, true)
	if err != nil || len(bulk) != 3 {
		t.Fatal(bulk, err)
	}
	n2 := bulk[1]
	if n2.Name != "node2" || n2.Group != "default" || n2.GroupUUID == "" || n2.PrimaryIP != "192.0.2.2" ||
		n2.SecondaryIP != "198.51.100.2" || !n2.MasterCandidate || n2.Role != "C" || n2.Powered != nil ||
		n2.NDParams["ssh_port"] != float64(2222) || n2.MTotal != nil || n2.MFree != nil || n2.PinstList == nil ||
		n2.Tags == nil {
		t.Errorf("node2 %+v", n2)
	}
	if bulk[0].Role != "M" || bulk[2].Role != "R" || bulk[2].MasterCapable {
		t.Errorf("roles %s %s", bulk[0].Role, bulk[2].Role)
	}
	// The raw answer has Ganeti's dotted and null fields.
	var obj map[string]any
	_ = json.Unmarshal(e.do("GET", "/2/nodes/node2", "").body, &obj)
	for _, k := range []string{"group.uuid", "pip", "sip", "mtotal", "dtotal", "ctotal", "mfree", "dfree", "pinst_cnt", "sinst_list", "addrs", "serial_no", "ctime", "mtime"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("node object lacks %q", k)
		}
	}
	if obj["mfree"] != nil {
		t.Errorf("mfree %v", obj["mfree"])
	}
	byUUID, err := e.c.Node(c, n2.UUID)
	if err != nil || byUUID.Name != "node2" {
		t.Errorf("by uuid: %+v %v", byUUID, err)
	}

	// Modify.
	yes := true
	id, m, err = e.c.ModifyNode(c, "node2", rpc.ModifyNodeRequest{Drained: &yes, AutoPromote: &yes}, "")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, b, id, m, "PUT", "/2/nodes/node2/modify", "")
	if n := nodeOf(b, "node2"); !n.Drained || n.MasterCandidate {
		t.Errorf("after modify %+v", n)
	}
	role, err := e.c.NodeRole(c, "node2")
	if err != nil || role != "drained" {
		t.Errorf("role %q %v", role, err)
	}

	// Roles, as rlib2 maps them. With a pool of one, leaving drained or
	// offline does not promote node2 again.
	one := 1
	if _, _, err := e.c.ModifyCluster(c, rpc.ModifyClusterRequest{CandidatePoolSize: &one}, ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		role                   string
		mc, offline, drained   bool
		wantRole, wantLetter   string
		force, autoPromote     bool
		wantQuery, wantAutoPro bool
	}{
		{role: "regular", wantRole: "regular", wantLetter: "R"},
		{role: "master-candidate", mc: true, wantRole: "master-candidate", wantLetter: "C"},
		{role: "offline", offline: true, wantRole: "offline", wantLetter: "O", autoPromote: true},
		{role: "drained", drained: true, wantRole: "drained", wantLetter: "D", force: true},
		{role: "regular", wantRole: "regular", wantLetter: "R"},
	} {
		id, m, err := e.c.SetNodeRole(c, "node2", tc.role, tc.force, tc.autoPromote, "role")
		if err != nil {
			t.Fatalf("role %s: %v", tc.role, err)
		}
		j := checkJob(t, b, id, m, "PUT", "/2/nodes/node2/role", "role")
		n := nodeOf(b, "node2")
		if n.MasterCandidate != tc.mc || n.Offline != tc.offline || n.Drained != tc.drained {
			t.Errorf("role %s: flags %v %v %v", tc.role, n.MasterCandidate, n.Offline, n.Drained)
		}
		var in map[string]any
		_ = json.Unmarshal(j.Ops[0].Input, &in)
		if in["OP_ID"] != "OP_NODE_SET_PARAMS" || in["node_name"] != "node2" {
			t.Errorf("opcode %v", in)
		}
		if tc.force && in["force"] != true || tc.autoPromote && in["auto_promote"] != true {
			t.Errorf("flags not passed: %v", in)
		}
		if tc.role == "regular" && (in["master_candidate"] != false || in["offline"] != false || in["drained"] != false) {
			t.Errorf("regular must clear all three flags: %v", in)
		}
		if tc.role == "drained" && (in["master_candidate"] != nil || in["offline"] != nil) {
			t.Errorf("drained must set only drained: %v", in)
		}
		got := decode[string](t, e.do("GET", "/2/nodes/node2/role", ""))
		if got != tc.wantRole {
			t.Errorf("role %q, want %q", got, tc.wantRole)
		}
	}
	if r := decode[string](t, e.do("GET", "/2/nodes/node1/role", "")); r != "master" {
		t.Errorf("node1 role %q", r)
	}

	// A map works as a request body too.
	if _, _, err := e.c.AddNode(c, map[string]any{"node_name": "node4", "primary_ip": "192.0.2.4", "master_candidate": false}, ""); err != nil {
		t.Fatal(err)
	}
	if n := nodeOf(b, "node4"); n == nil || n.MasterCandidate {
		t.Errorf("node4 %+v", n)
	}
	_, _, err = e.c.AddNode(c, map[string]any{"node_name": "node5", "primary_ip": "192.0.2.5", "bogus": 1}, "")
	if ae := (*rpc.APIError)(nil); !errors.As(err, &ae) || ae.Field != "bogus" {
		t.Errorf("unknown field in a map: %v", err)
	}

	// Remove.
	id, m, err = e.c.RemoveNode(c, "node3", "")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, b, id, m, "DELETE", "/2/nodes/node3", "")
	if nodeOf(b, "node3") != nil {
		t.Error("node3 still exists")
	}
	_, err = e.c.Node(c, "node3")
	var ae *rpc.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.ErrorCode != "unknown_entity" {
		t.Errorf("removed node: %v", err)
	}
}

func TestDryRun(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	r := e.do("POST", "/2/nodes?dry-run=1", `{"node_name":"node2","primary_ip":"192.0.2.2"}`)
	mustOK(t, r)
	id := decode[int64](t, r)
	if j := jobOf(b, id); j == nil || j.Status != fsm.StatusSuccess || !strings.Contains(string(j.Ops[0].Input), `"dry_run":true`) {
		t.Fatalf("job %+v", j)
	}
	if nodeOf(b, "node2") != nil {
		t.Error("dry run added the node")
	}
}

func TestGroupsClusterAndTags(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	c := ctx(t)
	pol := "last_resort"
	id, m, err := e.c.AddGroup(c, rpc.AddGroupRequest{Name: "g1", AllocPolicy: &pol, NDParams: map[string]any{"spindle_count": 2}}, "")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, b, id, m, "POST", "/2/groups", "")
	if _, _, err := e.c.AddGroup(c, rpc.AddGroupRequest{GroupName: "g2"}, ""); err != nil {
		t.Fatal(err)
	}
	addNode(t, b, "node2", "192.0.2.2", `,"group":"g1"`)

	groups, err := e.c.Groups(c, false)
	if err != nil || len(groups) != 3 || groups[0].Name != "default" || groups[1].Name != "g1" {
		t.Fatalf("groups %+v %v", groups, err)
	}
	if raw := decode[[]rpc.NameURI](t, e.do("GET", "/2/groups", "")); raw[1] != (rpc.NameURI{Name: "g1", URI: "/2/groups/g1"}) {
		t.Errorf("listing %+v", raw)
	}
	g, err := e.c.Group(c, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if g.AllocPolicy != "last_resort" || g.NodeCnt != 1 || !reflect.DeepEqual(g.NodeList, []string{"node2"}) ||
		g.CustomNDParams["spindle_count"] != float64(2) || g.NDParams["spindle_count"] != float64(2) ||
		g.NDParams["ssh_port"] != float64(22) || g.UUID == "" {
		t.Errorf("group %+v", g)
	}
	bulk, err := e.c.Groups(c, true)
	if err != nil || len(bulk) != 3 || bulk[0].NodeCnt != 1 || bulk[2].NodeList == nil {
		t.Errorf("bulk groups %+v %v", bulk, err)
	}
	pref := "preferred"
	id, m, err = e.c.ModifyGroup(c, "g1", rpc.ModifyGroupRequest{AllocPolicy: &pref}, "")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, b, id, m, "PUT", "/2/groups/g1/modify", "")
	if g, _ := e.c.Group(c, "g1"); g.AllocPolicy != "preferred" {
		t.Errorf("policy %s", g.AllocPolicy)
	}
	id, m, err = e.c.RemoveGroup(c, "g2", "")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, b, id, m, "DELETE", "/2/groups/g2", "")

	// Cluster parameters.
	three, pool := 3, 4
	ialloc := ""
	id, m, err = e.c.ModifyCluster(c, rpc.ModifyClusterRequest{MaxVoters: &three, CandidatePoolSize: &pool, DefaultIAllocator: &ialloc,
		NDParams: map[string]any{"ssh_port": 2022}}, "tuning")
	if err != nil {
		t.Fatal(err)
	}
	checkJob(t, b, id, m, "PUT", "/2/modify", "tuning")
	info, _ := e.c.Info(c)
	if info.MaxVoters != 3 || info.CandidatePoolSize != 4 || info.DefaultIAllocator != "" || info.NDParams["ssh_port"] != float64(2022) {
		t.Errorf("info %+v", info)
	}

	// Tags on every kind of object.
	if err := b.AddInstance(fsm.Instance{Name: "inst1", UUID: "inst-uuid-1", PrimaryNode: nodeOf(b, "node1").UUID, OS: "debian",
		AdminState: "up", DiskTemplate: "plain", Tags: []string{}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct{ kind, name, path string }{
		{fsm.TagCluster, "", "/2/tags"},
		{fsm.TagNode, "node2", "/2/nodes/node2/tags"},
		{fsm.TagNodeGroup, "g1", "/2/groups/g1/tags"},
		{fsm.TagInstance, "inst1", "/2/instances/inst1/tags"},
	} {
		id, m, err := e.c.AddTags(c, o.kind, o.name, []string{"zeta", "alpha", "x:y"}, "why")
		if err != nil {
			t.Fatalf("%s: %v", o.kind, err)
		}
		j := checkJob(t, b, id, m, "PUT", o.path, "why")
		if !strings.Contains(j.Summary[0], "TAGS_SET") {
			t.Errorf("summary %v", j.Summary)
		}
		tags, err := e.c.ListTags(c, o.kind, o.name)
		if err != nil || !reflect.DeepEqual(tags, []string{"alpha", "x:y", "zeta"}) {
			t.Errorf("%s tags %v %v", o.kind, tags, err)
		}
		id, m, err = e.c.RemoveTags(c, o.kind, o.name, []string{"zeta", "x:y"}, "")
		if err != nil {
			t.Fatalf("%s: %v", o.kind, err)
		}
		checkJob(t, b, id, m, "DELETE", o.path, "")
		if tags := decode[[]string](t, e.do("GET", o.path, "")); !reflect.DeepEqual(tags, []string{"alpha"}) {
			t.Errorf("%s tags after delete %v", o.kind, tags)
		}
	}
}

func TestInstances(t *testing.T) {
	b := rpctest.NewCluster()
	addNode(t, b, "node2", "192.0.2.2")
	e := newEnv(t, b)
	c := ctx(t)
	n1, n2 := nodeOf(b, "node1").UUID, nodeOf(b, "node2").UUID
	if err := b.AddInstance(fsm.Instance{Name: "inst1", UUID: "u1", PrimaryNode: n1, SecondaryNodes: []string{n2}, OS: "debian",
		AdminState: "up", DiskTemplate: "drbd", MemoryMiB: 512, VCPUs: 2,
		Disks: []fsm.Disk{{UUID: "d1", SizeMiB: 1024, Mode: "rw"}, {UUID: "d2", SizeMiB: 2048, Mode: "rw"}},
		NICs:  []fsm.NIC{{UUID: "n1", MAC: "aa:00:00:00:00:01", IP: "198.51.100.7", Mode: "bridged", Link: "br0"}, {UUID: "n2", MAC: "aa:00:00:00:00:02"}},
		Tags:  []string{"b", "a"}}); err != nil {
		t.Fatal(err)
	}
	list, err := e.c.Instances(c, false)
	if err != nil || len(list) != 1 || list[0].Name != "inst1" {
		t.Fatalf("%+v %v", list, err)
	}
	i, err := e.c.Instance(c, "inst1")
	if err != nil {
		t.Fatal(err)
	}
	ip, br, br2 := "198.51.100.7", "br0", "gnt-br0"
	want := rpc.InstanceInfo{Name: "inst1", UUID: "u1", AdminState: "up", OS: "debian", PNode: "node1", SNodes: []string{"node2"},
		DiskTemplate: "drbd", DiskSizes: []int64{1024, 2048}, DiskUsage: 1024 + 2048 + 256,
		NICIPs: []*string{&ip, nil}, NICMACs: []string{"aa:00:00:00:00:01", "aa:00:00:00:00:02"},
		// The second NIC has no mode or link of its own: the cluster's
		// defaults fill them (bridged on gnt-br0).
		NICModes: []string{"bridged", "bridged"}, NICLinks: []string{"br0", "gnt-br0"}, NICUUIDs: []string{"n1", "n2"},
		NICNames: []*string{nil, nil}, NICNetworks: []*string{nil, nil}, NICNetworksNames: []*string{nil, nil}, NICBridges: []*string{&br, &br2},
		DiskUUIDs: []string{"d1", "d2"}, DiskNames: []*string{nil, nil},
		BEParams: rpc.BEParams{Memory: 512, MaxMem: 512, MinMem: 512, VCPUs: 2, AutoBalance: true, SpindleUse: 1},
		Tags:     []string{"a", "b"}}
	if !reflect.DeepEqual(i, want) {
		t.Errorf("instance\n got %+v\nwant %+v", i, want)
	}
	bulk, err := e.c.Instances(c, true)
	if err != nil || len(bulk) != 1 || !reflect.DeepEqual(bulk[0], want) {
		t.Errorf("bulk %+v %v", bulk, err)
	}
	n, _ := e.c.Node(c, "node1")
	if n.PinstCnt != 1 || n.PinstList[0] != "inst1" || n.SinstCnt != 0 {
		t.Errorf("node1 %+v", n)
	}
	n, _ = e.c.Node(c, "node2")
	if n.SinstCnt != 1 || n.SinstList[0] != "inst1" {
		t.Errorf("node2 %+v", n)
	}
}

func TestJobs(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	c := ctx(t)
	id1, m, err := e.c.AddTags(c, fsm.TagCluster, "", []string{"t1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	id2, m2, err := e.c.SubmitJob(c, []map[string]any{
		{"OP_ID": "OP_TEST_DELAY", "duration": 0.5, "priority": -10},
		{"OP_ID": "OP_TEST_DELAY", "duration": 1, "reason": []any{[]any{"gnt:client", "test", 5}}},
	}, "delaying")
	if err != nil {
		t.Fatal(err)
	}
	if m2.Index != m.Index+1 || id2 != id1+1 {
		t.Errorf("ids %d %d, indexes %d %d", id1, id2, m.Index, m2.Index)
	}
	j2 := jobOf(b, id2)
	if j2.Status != fsm.StatusQueued || !j2.Executor || len(j2.Ops) != 2 {
		t.Fatalf("job %+v", j2)
	}
	var in struct {
		Reason []fsm.ReasonEntry `json:"reason"`
	}
	_ = json.Unmarshal(j2.Ops[1].Input, &in)
	if len(in.Reason) != 3 || in.Reason[0].Source != "gnt:client" || in.Reason[1].Text != "delaying" || in.Reason[2].Text != "POST /2/jobs" {
		t.Errorf("reason trail %+v", in.Reason)
	}

	list, err := e.c.Jobs(c, false)
	if err != nil || len(list) != 2 || list[0].ID != id1 {
		t.Fatalf("jobs %+v %v", list, err)
	}
	if raw := decode[[]rpc.JobIDURI](t, e.do("GET", "/2/jobs", "")); raw[1] != (rpc.JobIDURI{ID: id2, URI: "/2/jobs/" + strconv.FormatInt(id2, 10)}) {
		t.Errorf("listing %+v", raw)
	}
	var bulkRaw []map[string]any
	_ = json.Unmarshal(e.do("GET", "/2/jobs?bulk=1", "").body, &bulkRaw)
	if len(bulkRaw) != 2 || len(bulkRaw[0]) != len(rpc.JobBulkFields) {
		t.Fatalf("bulk %v", bulkRaw)
	}
	for _, f := range rpc.JobBulkFields {
		if _, ok := bulkRaw[0][f]; !ok {
			t.Errorf("bulk job lacks %s", f)
		}
	}
	var full map[string]any
	_ = json.Unmarshal(e.do("GET", "/2/jobs/"+strconv.FormatInt(id1, 10), "").body, &full)
	if len(full) != len(rpc.JobFields)+len(rpc.GntJobFields) {
		t.Errorf("job object has %d fields: %v", len(full), full)
	}
	j, err := e.c.Job(c, id1)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != id1 || j.Status != "success" || len(j.Ops) != 1 || j.OpStatus[0] != "success" || j.ReceivedTS == nil ||
		j.EndTS == nil || j.OpStart[0] == nil || j.Summary[0] != "TAGS_SET(cluster)" || len(j.OpLog) != 1 || j.OpLog[0] == nil {
		t.Errorf("job %+v", j)
	}
	q, err := e.c.Job(c, id2)
	if err != nil {
		t.Fatal(err)
	}
	if q.Status != "queued" || q.Priority != -10 || !reflect.DeepEqual(q.OpPriority, []int{-10, 0}) ||
		q.StartTS != nil || q.OpStart[0] != nil || string(q.OpResult[0]) != "null" {
		t.Errorf("queued job %+v", q)
	}
}

func TestStatusPeersFailoverInitJoin(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	c := ctx(t)

	st, err := e.c.Status(c, false)
	if err != nil || st.Name != "node1" || st.RaftState != "leader" || st.FSMHash != "" || st.ClusterUUID == "" {
		t.Errorf("status %+v %v", st, err)
	}
	st, _ = e.c.Status(c, true)
	if st.FSMHash != b.FSM().Hash() {
		t.Errorf("hash %q", st.FSMHash)
	}

	peers, err := e.c.Peers(c)
	if err != nil || len(peers) != 1 || peers[0].ID != "node1" || !peers[0].Leader {
		t.Errorf("peers %+v %v", peers, err)
	}
	b.SetPeers([]rpc.Peer{{ID: "node1", Suffrage: "voter", Leader: true}, {ID: "node2", Suffrage: "nonvoter"}})
	peers, _ = e.c.Peers(c)
	if len(peers) != 2 || peers[1].Suffrage != "nonvoter" {
		t.Errorf("peers %+v", peers)
	}

	addNode(t, b, "node2", "192.0.2.2")
	master, err := e.c.MasterFailover(c, "node2")
	if err != nil || master != "node2" {
		t.Errorf("failover %q %v", master, err)
	}
	b.SetTransferResult("node3", nil)
	master, err = e.c.MasterFailover(c, "")
	if err != nil || master != "node3" || !reflect.DeepEqual(b.Transfers(), []string{"node2", ""}) {
		t.Errorf("failover %q %v %v", master, err, b.Transfers())
	}
	b.SetTransferResult("", errors.New("no voter is caught up"))
	_, err = e.c.MasterFailover(c, "")
	var ae *rpc.APIError
	if !errors.As(err, &ae) || ae.Status != 500 {
		t.Errorf("failed failover: %v", err)
	}

	// Join: node2 registers its addresses.
	spec := fsm.NodeSpec{Name: "node2", PrimaryIP: "192.0.2.2", Addrs: fsm.Addrs{API: "192.0.2.2:5080", Raft: "192.0.2.2:1817"},
		Resources: fsm.Resources{MemoryMiB: 4096, DiskMiB: 100000, CPUs: 8}, Version: "1.2.3"}
	jr, err := e.c.Join(c, b.JoinKey(), rpc.JoinRequest{Node: spec})
	if err != nil {
		t.Fatal(err)
	}
	if jr.ClusterName != "cluster.example.com" || !jr.MasterCandidate || !reflect.DeepEqual(jr.Candidates, []string{"192.0.2.2:5080"}) {
		t.Errorf("join %+v", jr)
	}
	n, _ := e.c.Node(c, "node2")
	if n.Addrs.API != "192.0.2.2:5080" || n.Version != "1.2.3" || n.MTotal == nil || *n.MTotal != 4096 || *n.CTotal != 8 {
		t.Errorf("node2 after join %+v", n)
	}
	// Joining with an unknown node is refused by the state machine.
	_, err = e.c.Join(c, b.JoinKey(), rpc.JoinRequest{Node: fsm.NodeSpec{Name: "node7"}})
	if !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("unknown node join: %v", err)
	}
	_, err = e.c.Join(c, []byte("wrong key"), rpc.JoinRequest{Node: spec})
	if !errors.As(err, &ae) || ae.Status != 401 || ae.ErrorCode != rpc.CodeUnauthorized {
		t.Errorf("wrongly signed join: %v", err)
	}

	// Init on a fresh gntd.
	fresh := rpctest.New("nodeA")
	fe := newEnv(t, fresh)
	var ir rpc.InitResponse
	_, err = fe.c.Do(c, "POST", "/2/gnt/init", nil, rpc.InitRequest{ClusterName: "new-cluster", CandidatePoolSize: 3, MaxVoters: 3}, &ir)
	if err != nil {
		t.Fatal(err)
	}
	info, err := fe.c.Info(c)
	if err != nil || ir.ClusterName != "new-cluster" || ir.ClusterUUID != info.UUID || info.Master != "nodeA" ||
		info.CandidatePoolSize != 3 || info.MaxVoters != 3 {
		t.Errorf("init %+v info %+v %v", ir, info, err)
	}
	err = fe.c.Init(c, rpc.InitRequest{ClusterName: "again"})
	if !errors.As(err, &ae) || ae.Status != 409 {
		t.Errorf("second init: %v", err)
	}
	if err := newEnv(t, rpctest.New("nodeB")).c.Init(c, rpc.InitRequest{ClusterName: "third"}); err != nil {
		t.Errorf("init: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	e.do("GET", "/version", "")
	e.do("GET", "/2/nodes/nope", "")
	e.do("GET", "/nope", "")
	r := e.do("GET", "/metrics", "")
	mustOK(t, r)
	for _, want := range []string{
		`gnt_api_requests_total{code="200",method="GET",route="/version"} 1`,
		`gnt_api_requests_total{code="404",method="GET",route="/2/nodes/{name}"} 1`,
		`gnt_api_requests_total{code="404",method="GET",route="/"} 1`,
		`gnt_api_request_duration_seconds_bucket{method="GET",route="/version",le="+Inf"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// A second server may share the registry.
	_ = rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, Metrics: e.reg})
}

func TestFeatures(t *testing.T) {
	e := newEnv(t, rpctest.NewCluster())
	r := e.do("GET", "/2/features", "")
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `["instance-create-reqv1","instance-reinstall-reqv1","node-evac-res1","node-migrate-reqv1"]` {
		t.Fatalf("GET /2/features = %v, want the three features", r)
	}
}
