package iallocator

import (
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
