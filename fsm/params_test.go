package fsm

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestFillHVParams(t *testing.T) {
	c := &Cluster{DefaultHypervisor: "kvm", HVParams: map[string]map[string]any{
		"kvm":  {"kernel_path": "/boot/vmlinuz", "migration_bandwidth": 64},
		"fake": {"x": 1},
	}}
	in := &Instance{HVParams: map[string]any{"kernel_path": "/k", "acpi": false}}
	got := FillHVParams(c, in)
	if got["kernel_path"] != "/k" || got["acpi"] != false || got["migration_bandwidth"] != 64 || got["x"] != nil {
		t.Fatalf("filled %v", got)
	}
	got["kernel_path"] = "changed"
	if in.HVParams["kernel_path"] != "/k" || c.HVParams["kvm"]["kernel_path"] != "/boot/vmlinuz" {
		t.Fatal("FillHVParams shares its result with its inputs")
	}
	// An instance's own hypervisor wins over the cluster's default; a
	// global parameter of the instance never overrides the cluster's.
	in = &Instance{Hypervisor: "fake", HVParams: map[string]any{"migration_bandwidth": 1}}
	if got := FillHVParams(c, in); got["x"] != 1 || got["migration_bandwidth"] != float64(32) || got["acpi"] != true {
		t.Fatalf("filled %v", got)
	}
	// Without a default hypervisor, an instance naming none gets the
	// cluster's first enabled one, with its parameters (Ganeti's default
	// hypervisor is its first enabled one).
	c2 := &Cluster{EnabledHypervisors: []string{"kvm", "fake"}, HVParams: map[string]map[string]any{
		"kvm": {"kernel_path": "/boot/vmlinuz"}, "fake": {"kernel_path": "/fake"}}}
	if hv := InstanceHypervisor(c2, &Instance{}); hv != "kvm" {
		t.Fatalf("hypervisor without a default: %q, want the first enabled, kvm", hv)
	}
	if got := FillHVParams(c2, &Instance{}); got["kernel_path"] != "/boot/vmlinuz" || got["acpi"] != true {
		t.Fatalf("filled without a default hypervisor: %v", got)
	}
	// Neither a default nor enabled ones: the node's driver decides, and
	// nothing of the cluster's is filled in.
	if got := FillHVParams(&Cluster{HVParams: c2.HVParams}, &Instance{}); len(got) != 0 {
		t.Fatalf("no hypervisor known: %v", got)
	}
	if got := FillHVParams(nil, &Instance{}); len(got) != 0 {
		t.Fatalf("no cluster: %v", got)
	}
}

// TestParamsUpgrade restores records of a build without parameters (no
// maps) and with a global hypervisor parameter on an instance: the maps
// are empty and the global parameter is gone, and the restored state
// snapshots to what it restored.
func TestParamsUpgrade(t *testing.T) {
	old := `{"format":"gnt-fsm","version":2,"index":7,"log_version":9}
{"t":"cluster","v":{"name":"c","uuid":"cu","serial_no":1,"ctime":1,"mtime":1,"candidate_pool_size":10,"max_raft_voters":5,"default_iallocator":"hail","ndparams":{},"tags":[],"master_node":"nu"}}
{"t":"group","v":{"name":"default","uuid":"gu","alloc_policy":"preferred","ndparams":{},"tags":[],"serial_no":1,"ctime":1,"mtime":1}}
{"t":"node","v":{"name":"n1","uuid":"nu","group":"gu","primary_ip":"192.0.2.1","secondary_ip":"192.0.2.1","master_candidate":true,"master_capable":true,"vm_capable":true,"offline":false,"drained":false,"powered":true,"ndparams":{},"tags":[],"resources":{"memory_mib":4096,"disk_mib":10000,"cpus":4},"addrs":{},"serial_no":1,"ctime":1,"mtime":1}}
{"t":"instance","v":{"name":"i1","uuid":"iu","forthcoming":false,"primary_node":"nu","secondary_nodes":[],"disk_template":"diskless","disks":[],"nics":[],"memory":128,"vcpus":1,"os":"","admin_state":"down","tags":[],"serial_no":1,"ctime":1,"mtime":1}}
{"t":"instance","v":{"name":"i2","uuid":"iu2","forthcoming":false,"primary_node":"nu","secondary_nodes":[],"disk_template":"diskless","disks":[],"nics":[],"memory":128,"vcpus":1,"os":"","admin_state":"down","tags":[],"serial_no":1,"ctime":1,"mtime":1,"hypervisor":"kvm","hvparams":{"migration_port":8102,"acpi":true}}}
{"t":"queue","v":{"next_job_id":1,"epoch":0,"finished":[]}}
`
	f := New()
	if err := f.Restore(strings.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	f.Read(func(s *State, _ uint64) {
		c := s.Cluster
		if c.HVParams == nil || c.BEParams == nil || c.NICParams == nil || c.DiskParams == nil || c.OSParams == nil || c.EnabledHypervisors == nil {
			t.Errorf("cluster maps not made: %+v", c)
		}
		if s.Groups["gu"].DiskParams == nil {
			t.Error("group diskparams not made")
		}
		i1 := s.Instances["iu"]
		if i1.HVParams == nil || i1.BEParams == nil || i1.OSParams == nil {
			t.Errorf("instance maps not made: %+v", i1)
		}
		if i2 := s.Instances["iu2"]; !reflect.DeepEqual(i2.HVParams, map[string]any{"acpi": true}) {
			t.Errorf("global parameter kept: %v", i2.HVParams)
		}
	})
	data, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != f.Hash() {
		t.Fatal("a restored upgraded state snapshots differently")
	}
}

// TestOlderMemoryIsMinAndMax: Ganeti's older beparam "memory" sets maxmem
// and minmem where they are not given (its UpgradeBeParams), so a memory
// below the cluster's default minmem is not refused as minmem > maxmem.
func TestOlderMemoryIsMinAndMax(t *testing.T) {
	mem := int64(64)
	if m := (BEParams{Memory: &mem}).Map(); m["maxmem"] != float64(64) || m["minmem"] != float64(64) {
		t.Errorf("memory 64: %v", m)
	}
	min := int64(32)
	if m := (BEParams{Memory: &mem, MinMem: &min}).Map(); m["maxmem"] != float64(64) || m["minmem"] != float64(32) {
		t.Errorf("memory 64, minmem 32: %v", m)
	}
	got := canonicalBE(map[string]any{"memory": float64(64), "minmem": float64(16)})
	if !reflect.DeepEqual(got, map[string]any{"maxmem": float64(64), "minmem": float64(16)}) {
		t.Errorf("canonicalBE: %v", got)
	}
	if e := checkMinMax("beparams", canonicalBE(map[string]any{"memory": float64(64)})); e != nil {
		t.Errorf("memory 64 alone: %v", e)
	}
}

// TestNodeHypervisorMismatch: a node registers the driver its gntd runs;
// an instance of another hypervisor is refused on it at submission (pnode)
// and when a step would put it there, naming both; the same hypervisor,
// and an instance naming none (the node's driver), pass. A bad driver name
// in a registration is refused.
func TestNodeHypervisorMismatch(t *testing.T) {
	f, h := paramsFSM(t)
	reg := func(hv string) *Error {
		return h.apply(NodeRegister{Now: h.now, Node: NodeSpec{Name: "n1", Hypervisor: hv,
			Resources: Resources{MemoryMiB: 4096, DiskMiB: 10000, CPUs: 4}}}).(Response).Err
	}
	if e := reg("xen"); e == nil || e.Field != "node.hypervisor" {
		t.Fatalf("registering driver xen: %v", e)
	}
	if e := reg("fake"); e != nil {
		t.Fatal(e)
	}
	var n1 *Node
	f.Read(func(s *State, _ uint64) { n1 = s.LookupNode("n1") })
	if n1.Hypervisor != "fake" {
		t.Fatalf("node after registering: hypervisor %q", n1.Hypervisor)
	}
	create := func(hv string) string {
		return `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"new1","disk_template":"diskless","pnode":"n1"` + hv + `}`
	}
	before := f.Hash()
	r := submitOp(h, create(`,"hypervisor":"kvm"`))
	if r.Err == nil || r.Err.Field != "pnode" || !strings.Contains(r.Err.Msg, "instance new1 runs under hypervisor kvm, but node n1 runs the fake driver") {
		t.Fatalf("kvm instance on a fake node: %v", r.Err)
	}
	if f.Hash() != before {
		t.Fatal("the refused submission changed the state")
	}
	for _, hv := range []string{`,"hypervisor":"fake"`, ``} {
		if r := submitOp(h, create(hv)); r.Err != nil {
			t.Errorf("create%s on the fake node: %v", hv, r.Err)
		}
	}
	// The kvm instance i1 already on n1 cannot be written back there
	// (InstancePut checks its nodes as any placement).
	var i1 Instance
	f.Read(func(s *State, _ uint64) { i1 = *s.LookupInstance("i1") })
	e := f.st.begin(h.now).checkInstanceNodes(&i1)
	if e == nil || !strings.Contains(e.Msg, "node n1 runs the fake driver") {
		t.Fatalf("put of the kvm instance on the fake node: %v", e)
	}
}

// TestRuntimeMem: runtime_mem within the instance's filled minmem and
// maxmem is accepted (minmem lowered in the same opcode or before), and
// refused for a stopped instance; the record's memory does not change.
func TestRuntimeMem(t *testing.T) {
	f, h := paramsFSM(t)
	im := func(body string) string {
		return `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"i1",` + body + `}`
	}
	if r := submitOp(h, im(`"runtime_mem":64,"beparams":{"minmem":64}`)); r.Err != nil {
		t.Fatalf("runtime_mem 64 with minmem 64: %v", r.Err)
	}
	var in Instance
	f.Read(func(s *State, _ uint64) { in = *s.LookupInstance("i1") })
	if e := CheckRuntimeMem(nil, &in, new(int64(128))); e != nil {
		t.Errorf("runtime_mem at maxmem: %v", e)
	}
	in.BEParams = map[string]any{"minmem": float64(64)}
	if e := CheckRuntimeMem(nil, &in, new(int64(64))); e != nil {
		t.Errorf("runtime_mem at minmem: %v", e)
	}
	if e := CheckRuntimeMem(nil, &in, new(int64(63))); e == nil || !strings.Contains(e.Msg, "between 64 and 128 MiB") {
		t.Errorf("runtime_mem under minmem: %v", e)
	}
	in.AdminState = AdminDown
	if e := CheckRuntimeMem(nil, &in, new(int64(100))); e == nil || e.Code != CodeState {
		t.Errorf("runtime_mem of a stopped instance: %v", e)
	}
	if in.MemoryMiB != 128 {
		t.Errorf("memory %d after runtime_mem", in.MemoryMiB)
	}
}

// TestPlacementHypervisor: the hypervisor a node must run to take an
// instance is its own, else the cluster's default, else the driver of
// its primary node; HypervisorFits lets a node of that driver or of an
// unknown one take it, and any node when none is known.
func TestPlacementHypervisor(t *testing.T) {
	st := &State{Cluster: &Cluster{}, Nodes: map[string]*Node{
		"u1": {UUID: "u1", Name: "n1", Hypervisor: "fake"},
		"u2": {UUID: "u2", Name: "n2"},
	}}
	withDefault := &State{Cluster: &Cluster{DefaultHypervisor: "kvm"}, Nodes: st.Nodes}
	for _, tc := range []struct {
		name string
		st   *State
		in   Instance
		want string
	}{
		{"its own", withDefault, Instance{Hypervisor: "exec", PrimaryNode: "u1"}, "exec"},
		{"the cluster's default", withDefault, Instance{PrimaryNode: "u1"}, "kvm"},
		{"its primary's driver", st, Instance{PrimaryNode: "u1"}, "fake"},
		{"a primary whose driver is not known", st, Instance{PrimaryNode: "u2"}, ""},
		{"no primary", st, Instance{}, ""},
	} {
		if got := PlacementHypervisor(tc.st, &tc.in); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		node, hv string
		fits     bool
	}{
		{"kvm", "kvm", true}, {"", "kvm", true}, {"fake", "", true}, {"", "", true}, {"fake", "kvm", false},
	} {
		if HypervisorFits(tc.node, tc.hv) != tc.fits {
			t.Errorf("a node running %q, an instance of %q: fits %v", tc.node, tc.hv, !tc.fits)
		}
	}
}
