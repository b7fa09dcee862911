package alloc

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

func TestUsage(t *testing.T) {
	c := newCluster().node("a", "g", 8*gib, 100*gib, 4).node("b", "g", 8*gib, 100*gib, 4, drained).
		node("c", "g", 8*gib, 100*gib, 4).
		inst("x", TemplateDRBD, "a", "b", 3*gib, 10*gib, 2).
		inst("y", TemplateDRBD, "a", "b", 2*gib, 5*gib, 1, forthcoming).
		inst("z", TemplateDRBD, "c", "b", 4*gib, 1*gib, 1, down).
		inst("w", TemplatePlain, "b", "", 1*gib, 2*gib, 1).
		inst("v", TemplateDiskless, "c", "", 1*gib, 0, 1).
		inst("orphan", TemplatePlain, "gone", "", 1*gib, 1*gib, 1). // its node is not in the state
		inst("nowhere", TemplatePlain, "", "", 1*gib, 1*gib, 1, forthcoming)
	c.st.Instances[uuid("nowhere")].PrimaryNode = ""
	got := Usage(c.st, Options{VCPURatio: 1.5, Dead: map[string]bool{"c": true}})
	meta := int64(DRBDMetaMiB)
	want := []NodeUsage{
		{UUID: uuid("a"), Name: "a", Group: "g", Usable: true, MemoryTotal: 8 * gib, MemoryUsed: 5 * gib,
			DiskTotal: 100 * gib, DiskUsed: 15*gib + 2*meta, DiskUnit: unitNoReport, VCPUsTotal: 6, VCPUsUsed: 3, N1: true},
		// b backs 5 GiB for a and 4 GiB for c: its reserve is 5 GiB, and
		// with 7 GiB free it passes N+1.
		{UUID: uuid("b"), Name: "b", Group: "g", Reason: "drained", MemoryTotal: 8 * gib, MemoryUsed: 1 * gib, MemoryReserved: 5 * gib,
			DiskTotal: 100 * gib, DiskUsed: 18*gib + 3*meta, DiskUnit: unitNoReport, VCPUsTotal: 6, VCPUsUsed: 1, N1: true},
		{UUID: uuid("c"), Name: "c", Group: "g", Reason: "dead", MemoryTotal: 8 * gib, MemoryUsed: 5 * gib,
			DiskTotal: 100 * gib, DiskUsed: 1*gib + meta, DiskUnit: unitNoReport, VCPUsTotal: 6, VCPUsUsed: 2, N1: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	// One more GiB on b and it fails N+1.
	c.inst("u", TemplatePlain, "b", "", 2*gib+1, 0, 0)
	if u := Usage(c.st, Options{})[1]; u.N1 {
		t.Fatalf("b passes N+1 with %d of %d used and %d reserved", u.MemoryUsed, u.MemoryTotal, u.MemoryReserved)
	}
}

func TestPeers(t *testing.T) {
	var ps peers
	ps = append(ps, peer{5, 10}, peer{2, 1}, peer{5, 3}, peer{9, 4}, peer{2, 2})
	if m := ps.settle(); m != 13 || !reflect.DeepEqual(ps, peers{{2, 3}, {5, 13}, {9, 4}}) {
		t.Fatalf("settle: %v max %d", ps, m)
	}
	if ps.get(5) != 13 || ps.get(3) != 0 || ps.get(100) != 0 {
		t.Fatal("get")
	}
	if v := ps.add(3, 7); v != 7 || !reflect.DeepEqual(ps, peers{{2, 3}, {3, 7}, {5, 13}, {9, 4}}) {
		t.Fatalf("insert: %v", ps)
	}
	if v := ps.add(5, -13); v != 0 || !reflect.DeepEqual(ps, peers{{2, 3}, {3, 7}, {9, 4}}) || ps.max() != 7 {
		t.Fatalf("remove: %v", ps)
	}
	if v := ps.add(1, -1); v != -1 || len(ps) != 3 {
		t.Fatalf("taking off what is not there: %v", ps)
	}
	var empty peers
	if empty.settle() != 0 || empty.get(1) != 0 || empty.max() != 0 {
		t.Fatal("empty")
	}
}

// A node whose group the state does not hold forms a group of its own.
func TestMissingGroup(t *testing.T) {
	c := newCluster().node("a", "g", 8*gib, 100*gib, 4)
	c.st.Nodes[uuid("a")].Group = "lost-uuid"
	delete(c.st.Groups, uuid("g"))
	res, err := Allocate(c.st, plain(1*gib, 1*gib, 1), Options{})
	if err != nil || res.PrimaryName != "a" || res.GroupName != "lost-uuid" || res.Group != "lost-uuid" {
		t.Fatalf("%+v %v", res, err)
	}
}

// reported gives a node a storage report: volume group xenvg of two
// physical volumes (pv1 allocatable with pv1Free, pv2 with pv2Free and
// the flag given), a file directory and a shared one with the free space
// given, recorded when the configuration counted usedAt on the node.
func (c *cluster) reported(name string, pv1Free, pv2Free int64, pv2Alloc bool, fileFree, sharedFree, usedAt int64) *cluster {
	c.st.Nodes[uuid(name)].Storage = &fsm.NodeStorage{Reported: 1, DiskUsedMiB: usedAt,
		VG: "xenvg", FileDir: "/srv/disks", SharedFileDir: "/shared",
		Units: []fsm.StorageUnit{
			{Type: fsm.StorageFile, Name: "/shared", SizeMiB: 1000 * gib, FreeMiB: sharedFree, Allocatable: true},
			{Type: fsm.StorageFile, Name: "/srv/disks", SizeMiB: 100 * gib, FreeMiB: fileFree, Allocatable: true},
			{Type: fsm.StorageLVMPV, Name: "/dev/pv1", VG: "xenvg", SizeMiB: 50 * gib, FreeMiB: pv1Free, Allocatable: true},
			{Type: fsm.StorageLVMPV, Name: "/dev/pv2", VG: "xenvg", SizeMiB: 50 * gib, FreeMiB: pv2Free, Allocatable: pv2Alloc},
			{Type: fsm.StorageLVMVG, Name: "xenvg", SizeMiB: 100 * gib, FreeMiB: pv1Free + pv2Free, Allocatable: true},
		}}
	return c
}

// TestStoragePlacement: placement reads the storage units the nodes
// reported, per template, and falls back to the declared disk of a node
// that reported nothing; refusals name the node and the unit.
func TestStoragePlacement(t *testing.T) {
	// a: VG with 3 GiB on its allocatable PV and 20 GiB on one marked
	// allocatable=no; b: 8 GiB on both; c: no report, 100 GiB declared.
	base := func() *cluster {
		return newCluster().node("a", "g", 64*gib, 100*gib, 16).node("b", "g", 64*gib, 100*gib, 16).
			reported("a", 3*gib, 20*gib, false, 1*gib, 2*gib, 0).
			reported("b", 4*gib, 4*gib, true, 50*gib, 2*gib, 0)
	}
	file := func(disk int64) Request {
		return Request{Template: TemplateFile, MemoryMiB: 1024, VCPUs: 1, Disks: []int64{disk}}
	}
	shared := func(disk int64) Request {
		return Request{Template: TemplateSharedFile, MemoryMiB: 1024, VCPUs: 1, Disks: []int64{disk}}
	}
	for _, tc := range []struct {
		name    string
		c       *cluster
		req     Request
		primary string
		err     string
	}{
		{name: "plain goes where the VG has room", c: base(), req: plain(1024, 5*gib, 1), primary: "b"},
		{name: "a PV not allocatable is not counted", c: base(), req: plain(1024, 9*gib, 1),
			err: "no node has 9216 MiB free disk: b has 8192 (lvm-vg xenvg), a has 3072 (lvm-vg xenvg)"},
		{name: "plain pinned on a node short of VG space", c: base(), req: Request{Template: TemplatePlain, MemoryMiB: 1024, VCPUs: 1, Disks: []int64{4 * gib}, Nodes: []string{"a"}},
			err: "too little free disk (4096 MiB needed): a has 3072 (lvm-vg xenvg)"},
		{name: "disk recorded since the report is taken off", c: base().inst("x", TemplatePlain, "b", "", 1024, 6*gib, 1), req: plain(1024, 3*gib, 1), primary: "a"},
		{name: "disk recorded before the report is not", c: base().inst("x", TemplatePlain, "b", "", 1024, 6*gib, 1).reported("b", 4*gib, 4*gib, true, 50*gib, 2*gib, 6*gib),
			req: plain(1024, 8*gib, 1), primary: "b"},
		{name: "file reads the file directory", c: base(), req: file(2 * gib), primary: "b"},
		{name: "file short everywhere", c: base(), req: file(60 * gib),
			err: "no node has 61440 MiB free disk: b has 51200 (file /srv/disks), a has 1024 (file /srv/disks)"},
		{name: "a node without report falls back to its declared disk", c: base().node("c", "g", 64*gib, 100*gib, 16), req: plain(1024, 90*gib, 1), primary: "c"},
		{name: "the fallback is named", c: base().node("c", "g", 64*gib, 10*gib, 16), req: plain(1024, 90*gib, 1),
			err: "no node has 92160 MiB free disk: c has 10240 (declared disk, no storage report yet), b has 8192 (lvm-vg xenvg), a has 3072 (lvm-vg xenvg)"},
		{name: "a node without the volume group", c: func() *cluster {
			c := base()
			c.st.Nodes[uuid("b")].Storage.VG = "othervg"
			return c
		}(), req: plain(1024, 4*gib, 1), err: "b has 0 (no lvm-vg othervg on the node)"},
		{name: "drbd needs VG space on both nodes", c: base(), req: drbd(1024, 4*gib, 1),
			err: "a has 3072 (lvm-vg xenvg)"},
		{name: "a node without DRBD takes no drbd disks", c: func() *cluster {
			c := base()
			c.st.Nodes[uuid("b")].Storage.NoDRBD = "node b has no DRBD"
			return c
		}(), req: drbd(1024, 1*gib, 1), err: "b has 0 (node b has no DRBD)"},
		{name: "sharedfile reads the shared directory", c: base(), req: shared(1 * gib), primary: "a"},
		{name: "sharedfile short", c: base(), req: shared(3 * gib),
			err: "no node has 3072 MiB free disk: a has 2048 (file /shared), b has 2048 (file /shared)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Allocate(tc.c.st, tc.req, Options{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error with %q", res, err, tc.err)
				}
				return
			}
			if err != nil || res.PrimaryName != tc.primary {
				t.Fatalf("got %+v, %v; want primary %s", res, err, tc.primary)
			}
		})
	}
	// The usage table shows each node's default storage: the volume
	// group, whose free space counts only allocatable volumes.
	us := Usage(base().node("c", "g", 64*gib, 100*gib, 16).st, Options{})
	for i, want := range []struct {
		total, free int64
		unit        string
	}{{3 * gib, 3 * gib, "lvm-vg xenvg"}, {8 * gib, 8 * gib, "lvm-vg xenvg"}, {100 * gib, 100 * gib, unitNoReport}} {
		if u := us[i]; u.DiskTotal-u.DiskUsed != want.free || u.DiskUnit != want.unit {
			t.Errorf("%s: disk %d of %d free in %q, want %d free in %q", u.Name, u.DiskTotal-u.DiskUsed, u.DiskTotal, u.DiskUnit, want.free, want.unit)
		}
	}
	// Capacity of sharedfile is bounded by the shared directory, which
	// every node shares.
	capRes, err := Capacity(base().st, shared(1*gib), Options{})
	if err != nil || capRes.Count != 2 || !strings.Contains(capRes.Limit, "the shared file storage has room for 2 such disks") {
		t.Fatalf("capacity %+v, %v", capRes, err)
	}
}

// TestAllocateDRBDSkipsNodesWithoutDRBD: a drbd placement never chooses
// a node whose agent said it takes no drbd disks, even the emptiest one,
// whether the allocator chooses both nodes or the secondary of a given
// primary; a plain placement still may. Given, such a node is refused
// naming its reason.
func TestAllocateDRBDSkipsNodesWithoutDRBD(t *testing.T) {
	// n0 is the largest node by far: every placement would choose it.
	c := newCluster().node("n0", "g", 64*gib, 400*gib, 32, noDRBD).node("n1", "g", 8*gib, 100*gib, 8).
		node("n2", "g", 8*gib, 100*gib, 8).node("n3", "g", 8*gib, 100*gib, 8)
	for _, req := range []Request{drbd(1*gib, 10*gib, 1), func() Request { r := drbd(1*gib, 10*gib, 1); r.Nodes = []string{"n2"}; return r }()} {
		res, err := Allocate(c.st, req, Options{})
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		if res.PrimaryName == "n0" || res.SecondaryName == "n0" || res.SecondaryName == "" {
			t.Errorf("%+v placed on %v, want two nodes other than n0", req, res.NodeNames())
		}
	}
	if res, err := Allocate(c.st, plain(1*gib, 10*gib, 1), Options{}); err != nil || res.PrimaryName != "n0" {
		t.Errorf("plain placed on %v, %v; want n0", res.NodeNames(), err)
	}
	req := drbd(1*gib, 10*gib, 1)
	req.Nodes = []string{"n1", "n0"}
	if res, err := Allocate(c.st, req, Options{}); err == nil || !strings.Contains(err.Error(), "n0 has 0 (node n0 has no DRBD (no /proc/drbd))") {
		t.Errorf("drbd on n1, n0: %v, %v; want a refusal naming n0's reason", res.NodeNames(), err)
	}
}
