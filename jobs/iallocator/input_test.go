package iallocator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
)

// TestInputStorage: an external allocator sees the disk figures the
// built-in one uses: a node's volume group once reported (free space of
// its allocatable physical volumes only), its declared disk before.
func TestInputStorage(t *testing.T) {
	st := &fsm.State{
		Cluster: &fsm.Cluster{Name: "c"},
		Groups:  map[string]*fsm.Group{"g": {Name: "default", UUID: "g"}},
		Nodes: map[string]*fsm.Node{
			"u1": {Name: "n1", UUID: "u1", Group: "g", VMCapable: true, Resources: fsm.Resources{MemoryMiB: 4096, DiskMiB: 100000, CPUs: 2},
				Storage: &fsm.NodeStorage{VG: "xenvg", Units: []fsm.StorageUnit{
					{Type: fsm.StorageLVMVG, Name: "xenvg", SizeMiB: 2000, FreeMiB: 1500},
					{Type: fsm.StorageLVMPV, Name: "/dev/a", VG: "xenvg", SizeMiB: 1000, FreeMiB: 1000, Allocatable: false},
					{Type: fsm.StorageLVMPV, Name: "/dev/b", VG: "xenvg", SizeMiB: 1000, FreeMiB: 500, Allocatable: true},
				}}},
			"u2": {Name: "n2", UUID: "u2", Group: "g", VMCapable: true, Resources: fsm.Resources{MemoryMiB: 4096, DiskMiB: 7000, CPUs: 2}},
		},
		Instances: map[string]*fsm.Instance{
			"i1": {Name: "i1", UUID: "i1", PrimaryNode: "u2", DiskTemplate: alloc.TemplatePlain, MemoryMiB: 512, VCPUs: 1,
				Disks: []fsm.Disk{{UUID: "d", SizeMiB: 1000, Mode: "rw"}}},
		},
	}
	in := NewInput(st, alloc.Options{}, map[string]any{})
	for name, want := range map[string][2]int64{"n1": {500, 500}, "n2": {7000, 6000}} {
		n := in.Nodes[name]
		if n.TotalDisk == nil || n.FreeDisk == nil || *n.TotalDisk != want[0] || *n.FreeDisk != want[1] {
			t.Errorf("%s: total_disk %v free_disk %v, want %d and %d", name, n.TotalDisk, n.FreeDisk, want[0], want[1])
		}
	}
}

// TestInputNoDRBD: a node whose agent said it takes no drbd disks is
// reported with its reason (no_drbd) and, in every request that may put
// drbd disks on the nodes it asks for, as drained, so that any allocator
// leaves it out; an answer that names it anyway is refused, naming why.
// A request of plain disks only sees it as it is, and so does a
// primary-only evacuation, whose drbd instances fail over (unless one is
// forthcoming: it may be relocated).
func TestInputNoDRBD(t *testing.T) {
	why := "node n4 has no DRBD (no /proc/drbd: the drbd kernel module is not loaded)"
	plain := alloc.Request{Name: "new", Template: alloc.TemplatePlain, MemoryMiB: 256, VCPUs: 1, Disks: []int64{1024}}
	drbd := plain
	drbd.Template = alloc.TemplateDRBD
	for _, tc := range []struct {
		name   string
		req    func(st *fsm.State) map[string]any
		drbd   bool
		answer string // naming n4, refused when drbd
	}{
		{"allocate drbd", func(*fsm.State) map[string]any { return AllocateRequest(drbd, "noop", "kvm", nil, nil) }, true,
			`{"success":true,"info":"","result":["n6","n4"]}`},
		{"allocate plain", func(*fsm.State) map[string]any { return AllocateRequest(plain, "noop", "kvm", nil, nil) }, false,
			`{"success":true,"info":"","result":["n4"]}`},
		{"multi-allocate with a drbd one", func(*fsm.State) map[string]any {
			return MultiAllocateRequest([]alloc.Request{plain, func() alloc.Request { r := drbd; r.Name = "new2"; return r }()}, "noop", "kvm")
		}, true, `{"success":true,"info":"","result":[[["new",["n4"]],["new2",["n6","n1"]]],[]]}`},
		{"multi-allocate plain only", func(*fsm.State) map[string]any { return MultiAllocateRequest([]alloc.Request{plain}, "noop", "kvm") }, false,
			`{"success":true,"info":"","result":[[["new",["n4"]]],[]]}`},
		{"relocate a drbd secondary", func(st *fsm.State) map[string]any { return RelocateRequest(st, st.Instances["u-web"], []string{"n2"}) }, true,
			`{"success":true,"info":"","result":["n4"]}`},
		{"node-evacuate with a drbd instance", func(*fsm.State) map[string]any { return NodeEvacuateRequest([]string{"web", "db"}, "all") }, true,
			`{"success":true,"info":"","result":[[["web","g1",["n2","n4"]]],[["db",""]],[]]}`},
		{"node-evacuate primary-only of a drbd instance", func(*fsm.State) map[string]any { return NodeEvacuateRequest([]string{"web", "db"}, "primary-only") }, false,
			`{"success":true,"info":"","result":[[["db","g1",["n4"]]],[["web",""]],[]]}`},
		{"node-evacuate primary-only of a forthcoming drbd instance", func(st *fsm.State) map[string]any {
			st.Instances["u-web"].Forthcoming = true
			return NodeEvacuateRequest([]string{"web", "db"}, "primary-only")
		}, true, `{"success":true,"info":"","result":[[["web","g1",["n2","n4"]]],[["db",""]],[]]}`},
		{"change-group of a drbd instance", func(*fsm.State) map[string]any { return ChangeGroupRequest([]string{"web"}, []string{"u-g2"}) }, true, ""},
		{"change-group of a plain instance", func(*fsm.State) map[string]any { return ChangeGroupRequest([]string{"db"}, []string{"u-g2"}) }, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := state()
			st.Nodes["u-n4"].Group = "u-g1" // beside n1, n2, n6
			st.Nodes["u-n4"].Storage = &fsm.NodeStorage{NoDRBD: why}
			in := NewInput(st, alloc.Options{}, tc.req(st))
			data, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				Nodes map[string]map[string]any `json:"nodes"`
			}
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			if n4 := m.Nodes["n4"]; n4["no_drbd"] != why || n4["drained"] != tc.drbd {
				t.Errorf("n4 %v: want no_drbd %q and drained %v", n4, why, tc.drbd)
			}
			if n6 := m.Nodes["n6"]; n6["drained"] != false || n6["no_drbd"] != nil {
				t.Errorf("n6 %v: want it undrained, without no_drbd", n6)
			}
			if tc.answer == "" {
				return
			}
			_, err = ParseResponse(in, []byte(tc.answer))
			switch {
			case tc.drbd && (err == nil || !strings.Contains(err.Error(), "names node n4, which takes no drbd disks: "+why)):
				t.Errorf("answer %s: %v, want n4 refused with its reason", tc.answer, err)
			case !tc.drbd && err != nil:
				t.Errorf("answer %s: %v, want it accepted", tc.answer, err)
			}
		})
	}
}
