package iallocator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
)

// state is a small cluster: group g1 with n1, n2, n3 (n3 drained), group
// n6, g2 with n4 and n5 (n5 offline); instances web (drbd, n1/n2), db (plain,
// n1) and a nameless reservation.
func state() *fsm.State {
	st := &fsm.State{Cluster: &fsm.Cluster{Name: "c", Tags: []string{"t"}, EnabledHypervisors: []string{"kvm"}},
		Groups: map[string]*fsm.Group{}, Nodes: map[string]*fsm.Node{}, Instances: map[string]*fsm.Instance{}}
	for _, g := range []string{"g1", "g2"} {
		st.Groups["u-"+g] = &fsm.Group{Name: g, UUID: "u-" + g, AllocPolicy: fsm.AllocPreferred}
	}
	for _, n := range []struct {
		name, group      string
		drained, offline bool
	}{{"n1", "g1", false, false}, {"n2", "g1", false, false}, {"n3", "g1", true, false}, {"n4", "g2", false, false}, {"n5", "g2", false, true}, {"n6", "g1", false, false}} {
		st.Nodes["u-"+n.name] = &fsm.Node{Name: n.name, UUID: "u-" + n.name, Group: "u-" + n.group, VMCapable: true, MasterCapable: true,
			Drained: n.drained, Offline: n.offline, PrimaryIP: "127.0.0.1", Resources: fsm.Resources{MemoryMiB: 4096, DiskMiB: 100000, CPUs: 4}}
	}
	st.Instances["u-web"] = &fsm.Instance{Name: "web", UUID: "u-web", PrimaryNode: "u-n1", SecondaryNodes: []string{"u-n2"}, DiskTemplate: "drbd",
		Disks: []fsm.Disk{{UUID: "d1", SizeMiB: 1024, Mode: "rw"}}, MemoryMiB: 512, VCPUs: 1, AdminState: fsm.AdminUp}
	st.Instances["u-db"] = &fsm.Instance{Name: "db", UUID: "u-db", PrimaryNode: "u-n1", DiskTemplate: "plain",
		Disks: []fsm.Disk{{UUID: "d2", SizeMiB: 2048, Mode: "rw"}}, MemoryMiB: 1024, VCPUs: 2, AdminState: fsm.AdminDown}
	st.Instances["u-res"] = &fsm.Instance{UUID: "u-res", Forthcoming: true, DiskTemplate: "plain", MemoryMiB: 128, VCPUs: 1}
	return st
}

func inputFor(t testing.TB, mode string) *Input {
	t.Helper()
	st := state()
	var req map[string]any
	switch mode {
	case ModeAllocate:
		req = AllocateRequest(alloc.Request{Name: "new", Template: "drbd", MemoryMiB: 256, VCPUs: 1, Disks: []int64{1024}}, "noop", "kvm", nil, nil)
	case ModeRelocate:
		req = RelocateRequest(st, st.Instances["u-web"], []string{"n2"})
	case ModeNodeEvacuate:
		req = NodeEvacuateRequest([]string{"web", "db"}, "all")
	case ModeChangeGroup:
		req = ChangeGroupRequest([]string{"web"}, []string{"u-g2"})
	case ModeMultiAllocate:
		req = MultiAllocateRequest([]alloc.Request{{Name: "a", Template: "plain", MemoryMiB: 128, Disks: []int64{10}},
			{Name: "b", Template: "drbd", MemoryMiB: 128, Disks: []int64{10}}}, "noop", "kvm")
	case ModeMultiEvacuate:
		req = map[string]any{"type": ModeMultiEvacuate, "evac_nodes": []string{"n1"}} // Ganeti's pre-2.6 mode, never sent
	default:
		req = map[string]any{"type": mode}
	}
	// The input goes through JSON as it does to a program; the request
	// keeps its Go types (the validator reads it).
	in := NewInput(st, alloc.Options{}, req)
	if _, err := json.Marshal(in); err != nil {
		t.Fatal(err)
	}
	return in
}

func TestParseResponse(t *testing.T) {
	for _, tc := range []struct {
		name, mode, answer string
		want               string // "" accepts; else in the error
	}{
		{"allocate ok", ModeAllocate, `{"success":true,"info":"ok","result":["n1","n2"]}`, ""},
		{"allocate old nodes key", ModeAllocate, `{"success":true,"info":"","nodes":["n2","n1"]}`, ""},
		{"empty output", ModeAllocate, ``, "not a JSON object"},
		{"garbage", ModeAllocate, `Traceback (most recent call last):`, "not a JSON object"},
		{"a list", ModeAllocate, `["n1","n2"]`, "not a JSON object"},
		{"null", ModeAllocate, `null`, "not a JSON object: null"},
		{"two values", ModeAllocate, `{"success":true,"info":"","result":["n1","n2"]} {}`, "more than one JSON value"},
		{"no success", ModeAllocate, `{"info":"","result":[]}`, `lacks "success"`},
		{"no info", ModeAllocate, `{"success":true,"result":[]}`, `lacks "info"`},
		{"no result", ModeAllocate, `{"success":true,"info":""}`, `lacks "result"`},
		{"success a string", ModeAllocate, `{"success":"yes","info":"","result":[]}`, "success must be true or false"},
		{"info a number", ModeAllocate, `{"success":true,"info":3,"result":[]}`, "info must be a string"},
		{"failed", ModeAllocate, `{"success":false,"info":"no room in g1","result":[]}`, "could not place: no room in g1"},
		{"failed no info", ModeAllocate, `{"success":false,"info":"","result":[]}`, "no reason given"},
		{"result not a list", ModeAllocate, `{"success":true,"info":"","result":"n1"}`, "list of node names"},
		{"result null", ModeAllocate, `{"success":true,"info":"","result":null}`, "list of node names"},
		{"result numbers", ModeAllocate, `{"success":true,"info":"","result":[1,2]}`, "list of node names"},
		{"too few nodes", ModeAllocate, `{"success":true,"info":"","result":["n1"]}`, "has 1 node(s), the request needs 2"},
		{"too many nodes", ModeAllocate, `{"success":true,"info":"","result":["n1","n2","n4"]}`, "has 3 node(s)"},
		{"unknown node", ModeAllocate, `{"success":true,"info":"","result":["n1","nx"]}`, `node "nx", which the cluster does not have`},
		{"same node twice", ModeAllocate, `{"success":true,"info":"","result":["n1","n1"]}`, "names node n1 twice"},
		{"drained node", ModeAllocate, `{"success":true,"info":"","result":["n1","n3"]}`, "n3, which is drained"},
		{"offline node", ModeAllocate, `{"success":true,"info":"","result":["n5","n4"]}`, "n5, which is offline"},
		{"relocate ok", ModeRelocate, `{"success":true,"info":"","result":["n6"]}`, ""},
		{"relocate unknown", ModeRelocate, `{"success":true,"info":"","result":["n4x"]}`, "does not have"},
		{"relocate to the old node", ModeRelocate, `{"success":true,"info":"","result":["n2"]}`, "move away from"},
		{"relocate to the primary", ModeRelocate, `{"success":true,"info":"","result":["n1"]}`, "already holds the instance"},
		{"relocate out of group", ModeRelocate, `{"success":true,"info":"","result":["n4"]}`, "outside the instance's group g1"},
		{"relocate two", ModeRelocate, `{"success":true,"info":"","result":["n4","n1"]}`, "the request needs 1"},
		{"multi ok", ModeMultiAllocate, `{"success":true,"info":"","result":[[["a",["n1"]],["b",["n1","n2"]]],[]]}`, ""},
		{"multi one failed", ModeMultiAllocate, `{"success":true,"info":"","result":[[["a",["n1"]]],["b"]]}`, ""},
		{"multi not a pair", ModeMultiAllocate, `{"success":true,"info":"","result":[[]]}`, "two lists"},
		{"multi bad entry", ModeMultiAllocate, `{"success":true,"info":"","result":[[["a"]],["b"]]}`, "[name, [nodes]]"},
		{"multi unknown instance", ModeMultiAllocate, `{"success":true,"info":"","result":[[["z",["n1"]]],["a","b"]]}`, "did not ask for"},
		{"multi missing", ModeMultiAllocate, `{"success":true,"info":"","result":[[["a",["n1"]]],[]]}`, "does not answer for instance(s) b"},
		{"multi twice", ModeMultiAllocate, `{"success":true,"info":"","result":[[["a",["n1"]]],["a","b"]]}`, "instance a twice"},
		{"multi wrong count", ModeMultiAllocate, `{"success":true,"info":"","result":[[["b",["n1"]]],["a"]]}`, "has 1 node(s), the request needs 2"},
		{"multi failed not strings", ModeMultiAllocate, `{"success":true,"info":"","result":[[],[1]]}`, "list of instance names"},
		{"evac ok", ModeNodeEvacuate, `{"success":true,"info":"","result":[[["web","g1",["n2","n1"]]],[["db","plain cannot move"]],[[{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web"}]]]}`, ""},
		{"evac null reason", ModeNodeEvacuate, `{"success":true,"info":"","result":[[],[["db",null],["web","x"]],[]]}`, ""},
		{"evac not three", ModeNodeEvacuate, `{"success":true,"info":"","result":[[],[]]}`, "three lists"},
		{"evac unknown group", ModeNodeEvacuate, `{"success":true,"info":"","result":[[["web","gx",["n2","n1"]]],[["db",""]],[]]}`, `group "gx"`},
		{"evac node of another group", ModeNodeEvacuate, `{"success":true,"info":"","result":[[["web","g1",["n2","n4"]]],[["db",""]],[]]}`, "not of its target group g1"},
		{"evac bad opcode", ModeNodeEvacuate, `{"success":true,"info":"","result":[[],[["db",""],["web",""]],[[{"OP_ID":"OP_NODE_REMOVE","node_name":"n1"}]]]}`, "may only hold"},
		{"evac empty job", ModeNodeEvacuate, `{"success":true,"info":"","result":[[],[["db",""],["web",""]],[[]]]}`, "empty job"},
		{"evac unknown instance in job", ModeNodeEvacuate, `{"success":true,"info":"","result":[[],[["db",""],["web",""]],[[{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"x"}]]]}`, `instance "x"`},
		{"evac missing instance", ModeNodeEvacuate, `{"success":true,"info":"","result":[[],[["db",""]],[]]}`, "does not answer for instance(s) web"},
		{"evac moved unknown", ModeNodeEvacuate, `{"success":true,"info":"","result":[[["zz","g1",["n1"]]],[],[]]}`, `instance "zz"`},
		{"evac wrong node count", ModeNodeEvacuate, `{"success":true,"info":"","result":[[["web","g1",["n1"]]],[["db",""]],[]]}`, "has 1 node(s), the request needs 2"},
		{"change-group one node for drbd", ModeChangeGroup, `{"success":true,"info":"","result":[[["web","g2",["n4"]]],[],[]]}`, "needs 2"},
		{"change-group not a target", ModeChangeGroup, `{"success":true,"info":"","result":[[["web","g1",["n6","n1"]]],[],[]]}`, "not one of the target groups"},
		{"change-group failed", ModeChangeGroup, `{"success":true,"info":"","result":[[],[["web","g2 has one usable node"]],[]]}`, ""},
		{"change-group unasked instance", ModeChangeGroup, `{"success":true,"info":"","result":[[["db","g2",["n4"]]],[["web","x"]],[]]}`, "did not ask for"},
		{"change-group mixed groups", ModeChangeGroup, `{"success":true,"info":"","result":[[["web","g2",["n4","n1"]]],[],[]]}`, "not of its target group g2"},
		{"change-group offline node", ModeChangeGroup, `{"success":true,"info":"","result":[[["web","g2",["n4","n5"]]],[],[]]}`, "n5, which is offline"},
		{"change-group twice", ModeChangeGroup, `{"success":true,"info":"","result":[[],[["web","a"],["web","b"]],[]]}`, "instance web twice"},
		{"change-group missing", ModeChangeGroup, `{"success":true,"info":"","result":[[],[],[]]}`, "does not answer for instance(s) web"},
		{"change-group unknown group", ModeChangeGroup, `{"success":true,"info":"","result":[[["web","g9",["n4","n6"]]],[],[]]}`, `group "g9"`},
		{"change-group bad job", ModeChangeGroup, `{"success":true,"info":"","result":[[],[["web","x"]],[[{"OP_ID":"OP_INSTANCE_REMOVE","instance_name":"web"}]]]}`, "may only hold"},
		{"multi-evacuate is not spoken", ModeMultiEvacuate, `{"success":true,"info":"","result":[[],[],[]]}`, "not one gnt speaks"},
		{"unknown mode", "allocate-secondary", `{"success":true,"info":"","result":"n1"}`, "not one gnt speaks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseResponse(inputFor(t, tc.mode), []byte(tc.answer))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && a == nil:
				t.Fatal("no answer")
			case tc.want != "" && err == nil:
				t.Fatalf("accepted %s, want an error with %q", tc.answer, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q, want %q in it", err, tc.want)
			}
		})
	}
}

func TestParseResponseAnswers(t *testing.T) {
	a, err := ParseResponse(inputFor(t, ModeNodeEvacuate), []byte(`{"success":true,"info":"done","result":[[["web","g1",["n2","n1"]]],[["db","plain"]],[[{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web"}]]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Info != "done" || len(a.Moved) != 1 || a.Moved[0].Name != "web" || a.Moved[0].Group != "g1" || strings.Join(a.Moved[0].Nodes, ",") != "n2,n1" ||
		len(a.NotMoved) != 1 || a.NotMoved[0] != (NotMoved{"db", "plain"}) || len(a.Jobs) != 1 || a.Jobs[0][0]["OP_ID"] != "OP_INSTANCE_MIGRATE" {
		t.Fatalf("answer %+v", a)
	}
	a, err = ParseResponse(inputFor(t, ModeMultiAllocate), []byte(`{"success":true,"info":"","result":[[["a",["n4"]]],["b"]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Allocated) != 1 || a.Allocated[0].Name != "a" || a.Allocated[0].Nodes[0] != "n4" || len(a.Failed) != 1 || a.Failed[0] != "b" {
		t.Fatalf("answer %+v", a)
	}
}

// TestInput checks the input message against the protocol: the common
// keys, nodes by name with the figures of the built-in's table (none for
// an offline node), instances by name (a nameless reservation by UUID)
// with their nodes primary first, and the request.
func TestInput(t *testing.T) {
	in := inputFor(t, ModeAllocate)
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "cluster_name", "cluster_tags", "enabled_hypervisors", "ipolicy", "nodegroups", "nodes", "instances", "request"} {
		if _, ok := m[k]; !ok {
			t.Errorf("input lacks %q", k)
		}
	}
	if m["version"] != float64(2) {
		t.Errorf("version %v", m["version"])
	}
	n1 := m["nodes"].(map[string]any)["n1"].(map[string]any)
	// n1 holds web (512) and db (1024): 4096 - 1536 free.
	if n1["total_memory"] != float64(4096) || n1["free_memory"] != float64(2560) || n1["group"] != "u-g1" || n1["i_pri_memory"] != float64(1536) || n1["i_pri_up_memory"] != float64(512) {
		t.Errorf("n1 %v", n1)
	}
	if _, ok := m["nodes"].(map[string]any)["n5"].(map[string]any)["total_memory"]; ok {
		t.Errorf("offline n5 has run-time figures")
	}
	web := m["instances"].(map[string]any)["web"].(map[string]any)
	if nodes := web["nodes"].([]any); len(nodes) != 2 || nodes[0] != "n1" || nodes[1] != "n2" {
		t.Errorf("web nodes %v", web["nodes"])
	}
	if _, ok := m["instances"].(map[string]any)["u-res"]; !ok {
		t.Errorf("the nameless reservation is not listed by UUID")
	}
	req := m["request"].(map[string]any)
	if req["type"] != "allocate" || req["required_nodes"] != float64(2) || req["disk_space_total"] != float64(1024+alloc.DRBDMetaMiB) || req["memory"] != float64(256) {
		t.Errorf("request %v", req)
	}
	if g := m["nodegroups"].(map[string]any)["u-g2"].(map[string]any); g["name"] != "g2" || g["alloc_policy"] != "preferred" {
		t.Errorf("group %v", g)
	}
}

// FuzzParseResponse feeds any bytes as an answer to each mode: no panic,
// and an accepted answer names only usable nodes of the cluster.
func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{`{"success":true,"info":"","result":["n1","n2"]}`, `{"success":false,"info":"x","result":[]}`,
		`{"success":true,"info":"","result":[[["a",["n1"]]],["b"]]}`, `{"success":true,"info":"","result":[[["web","g1",["n2","n1"]]],[["db",null]],[]]}`,
		`{"success":true,"info":"","result":[[["web","g2",["n4","n5"]]],[],[[{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web"}]]]}`, `x`, `null`} {
		f.Add(s)
	}
	modes := []string{ModeAllocate, ModeRelocate, ModeMultiAllocate, ModeNodeEvacuate, ModeChangeGroup}
	inputs := map[string]*Input{}
	for _, m := range modes {
		inputs[m] = inputFor(f, m)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, m := range modes {
			a, err := ParseResponse(inputs[m], []byte(s))
			if err != nil {
				continue
			}
			check := func(nodes []string) {
				for _, n := range nodes {
					if nd, ok := inputs[m].Nodes[n]; !ok || nd.Offline || nd.Drained {
						t.Fatalf("mode %s accepted node %q in %s", m, n, s)
					}
				}
			}
			check(a.Nodes)
			for _, p := range a.Allocated {
				check(p.Nodes)
			}
			for _, mv := range a.Moved {
				check(mv.Nodes)
			}
		}
	})
}
