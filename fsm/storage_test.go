package fsm

import (
	"encoding/json"
	"strings"
	"testing"
)

func storageHarness(t *testing.T) (*harness, uint64) {
	t.Helper()
	h := newHarness()
	h.initCluster("10.0.0.1")
	r := h.apply(LeaderEstablish{Now: h.now, Node: "n1", LogVersion: LogVersion}).(Response)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return h, r.Epoch
}

func goodUnits() []StorageUnit {
	return []StorageUnit{
		{Type: StorageFile, Name: "/srv/disks", SizeMiB: 1000, UsedMiB: 100, FreeMiB: 900, Allocatable: true},
		{Type: StorageLVMVG, Name: "xenvg", SizeMiB: 2000, UsedMiB: 500, FreeMiB: 1500, Allocatable: true},
		{Type: StorageLVMPV, Name: "/dev/sda1", VG: "xenvg", SizeMiB: 1000, UsedMiB: 200, FreeMiB: 800, Allocatable: true},
		{Type: StorageLVMPV, Name: "/dev/sdb1", VG: "xenvg", SizeMiB: 1000, UsedMiB: 300, FreeMiB: 700, Allocatable: false},
	}
}

// TestNodeStorageRefused: every malformed report is refused with a
// message naming what is wrong, and changes nothing.
func TestNodeStorageRefused(t *testing.T) {
	h, epoch := storageHarness(t)
	many := make([]StorageUnit, MaxNodeStorageUnits+1)
	for i := range many {
		many[i] = StorageUnit{Type: StorageFile, Name: "/d" + strings.Repeat("x", i)}
	}
	for _, tc := range []struct {
		name string
		edit func(c *NodeStorageReport)
		want string
	}{
		{"no epoch", func(c *NodeStorageReport) { c.Epoch = 0 }, "needs its executor epoch"},
		{"old epoch", func(c *NodeStorageReport) { c.Epoch = epoch + 1 }, "refused: the current epoch"},
		{"unknown node", func(c *NodeStorageReport) { c.Node = "n9" }, `node "n9" is not in the configuration`},
		{"no time", func(c *NodeStorageReport) { c.Now = 0 }, "now must be a positive time"},
		{"too many", func(c *NodeStorageReport) { c.Units = many }, "65 storage units reported; at most 64 are kept per node (the first over the limit: file \"/d" + strings.Repeat("x", 62) + "\")"},
		{"bad type", func(c *NodeStorageReport) { c.Units[0].Type = "zfs" }, `storage type "zfs" is not file, lvm-vg or lvm-pv`},
		{"empty name", func(c *NodeStorageReport) { c.Units[0].Name = "" }, "unit 0 name \"\" must be 1 to 256 characters, got 0"},
		{"long name", func(c *NodeStorageReport) { c.Units[1].Name = strings.Repeat("v", 257) }, "must be 1 to 256 characters, got 257"},
		{"control byte", func(c *NodeStorageReport) { c.Units[1].Name = "xen\nvg" }, "has byte 10 at 3"},
		{"free over size", func(c *NodeStorageReport) { c.Units[1].FreeMiB = 2001 }, "lvm-vg xenvg: size 2000, used 500, free 2001 MiB"},
		{"negative", func(c *NodeStorageReport) { c.Units[0].SizeMiB = -1 }, "size -1"},
		{"vg of a vg", func(c *NodeStorageReport) { c.Units[1].VG = "other" }, "only a physical volume names a volume group"},
		{"twice", func(c *NodeStorageReport) { c.Units[3].Name = "/dev/sda1" }, "lvm-pv /dev/sda1 is reported twice"},
		{"bad vg", func(c *NodeStorageReport) { c.VG = strings.Repeat("v", 300) }, "vg \"vvvv"},
		{"bad dir", func(c *NodeStorageReport) { c.FileDir = "/a\x7f" }, "file_dir \"/a\\x7f\" has byte 127 at 2"},
		{"long boot id", func(c *NodeStorageReport) { c.BootID = strings.Repeat("b", 65) }, "boot_id has 65 bytes, at most 64"},
		{"boot id with a newline", func(c *NodeStorageReport) { c.BootID = "b\nc" }, "boot_id \"b\\nc\" has byte 10 at 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NodeStorageReport{Now: h.now, Epoch: epoch, Node: "n1", VG: "xenvg", FileDir: "/srv/disks", Units: goodUnits()}
			tc.edit(&c)
			before := h.f.Hash()
			r := h.apply(c).(Response)
			if r.Err == nil || !strings.Contains(r.Err.Msg, tc.want) {
				t.Fatalf("got %v, want an error with %q", r.Err, tc.want)
			}
			if h.f.Hash() != before {
				t.Fatal("a refused report changed the state")
			}
		})
	}
}

// TestNodeStorageSpace records a report and reads the room it gives each
// template, before and after the configuration adds disk to the node.
func TestNodeStorageSpace(t *testing.T) {
	h, epoch := storageHarness(t)
	var serial int64
	h.f.Read(func(s *State, _ uint64) { serial = s.Cluster.SerialNo })
	r := h.apply(NodeStorageReport{Now: h.now, Epoch: epoch, Node: "n1", VG: "xenvg", FileDir: "/srv/disks", SharedFileDir: "/shared", Units: goodUnits()}).(Response)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	h.f.Read(func(s *State, _ uint64) {
		if s.Cluster.SerialNo != serial {
			t.Errorf("a storage report changed the cluster serial from %d to %d", serial, s.Cluster.SerialNo)
		}
		ns := s.LookupNode("n1").Storage
		if ns == nil || len(ns.Units) != 4 || ns.DiskUsedMiB != 0 {
			t.Fatalf("recorded %+v", ns)
		}
		for _, tc := range []struct {
			template string
			used     int64
			want     Space
			ok       bool
		}{
			// The VG's free space counts only allocatable PVs: 800.
			{DTPlain, 0, Space{Unit: "lvm-vg xenvg", Total: 2000, Free: 800}, true},
			{DTDrbd, 0, Space{Unit: "lvm-vg xenvg", Total: 2000, Free: 800}, true},
			{"", 0, Space{Unit: "lvm-vg xenvg", Total: 2000, Free: 800}, true},
			{DTFile, 0, Space{Unit: "file /srv/disks", Total: 1000, Free: 900}, true},
			// Disk the configuration added since the report is taken off.
			{DTFile, 300, Space{Unit: "file /srv/disks", Total: 1000, Free: 600}, true},
			{DTPlain, 5000, Space{Unit: "lvm-vg xenvg", Total: 2000, Free: 0}, true},
			// The shared dir is named but not reported: nothing fits.
			{DTSharedFile, 0, Space{Unit: "file /shared", Missing: true}, true},
			{DTDiskless, 0, Space{}, false},
		} {
			got, ok := ns.Space(tc.template, tc.used)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Space(%q, %d) = %+v, %v; want %+v, %v", tc.template, tc.used, got, ok, tc.want, tc.ok)
			}
		}
		var none *NodeStorage
		if _, ok := none.Space(DTPlain, 0); ok {
			t.Error("a node without a report has room")
		}
	})
	// A node reporting no volume group: the default storage is its file dir.
	r = h.apply(NodeStorageReport{Now: h.now, Epoch: epoch, Node: "n1", FileDir: "/srv/disks", Units: goodUnits()[:1]}).(Response)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	h.f.Read(func(s *State, _ uint64) {
		got, ok := s.LookupNode("n1").Storage.Space("", 0)
		if want := (Space{Unit: "file /srv/disks", Total: 1000, Free: 900}); !ok || got != want {
			t.Errorf("default space %+v, %v; want %+v", got, ok, want)
		}
		if _, ok := s.LookupNode("n1").Storage.Space(DTPlain, 0); ok {
			t.Error("a node without a volume group configured offers room to plain disks")
		}
	})
}

// FuzzCheckStorageUnits: the units an agent reports (JSON, outside input
// to the leader) are accepted only within the limits, and the room a
// template reads from accepted units is never negative nor over the size.
func FuzzCheckStorageUnits(f *testing.F) {
	f.Add([]byte(`[{"type":"lvm-vg","name":"xenvg","size":100,"used":10,"free":90},{"type":"lvm-pv","name":"/dev/a","vg":"xenvg","size":100,"free":50,"allocatable":true}]`), int64(5))
	f.Add([]byte(`[{"type":"file","name":"/srv","size":-1}]`), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, used int64) {
		var us []StorageUnit
		if json.Unmarshal(b, &us) != nil {
			return
		}
		if CheckStorageUnits(us) != nil {
			return
		}
		if len(us) > MaxNodeStorageUnits {
			t.Fatalf("accepted %d units", len(us))
		}
		ns := &NodeStorage{VG: "xenvg", FileDir: "/srv", Units: us}
		for _, tmpl := range []string{DTPlain, DTFile, ""} {
			if sp, ok := ns.Space(tmpl, used); ok && (sp.Free < 0 || sp.Free > sp.Total && !sp.Missing) {
				t.Fatalf("%s: room %+v from %s", tmpl, sp, b)
			}
		}
	})
}

// TestRebootedSecondaryActivatesDisks: a storage report whose boot id
// differs from the one recorded queues, in the same entry, a job
// activating the disks of each running drbd instance the node is the
// secondary of (Ganeti's watcher), by name, with the watcher's reason;
// not for a stopped or forthcoming instance, one whose primary is
// offline or dead, or one the node is the primary of. The first boot id,
// the same one again, or a report without one (which keeps the recorded
// one) queue nothing; while the node counts dead, or with the queue full,
// the old boot id is kept so that the next report tries again.
func TestRebootedSecondaryActivatesDisks(t *testing.T) {
	s := drbdWorld()
	s.Epoch = 3
	s.Nodes["n4"].Offline = true
	for _, in := range []Instance{drbdInst("web2", "n1", "n2", "aa"), drbdInst("web1", "n3", "n2", "bb"),
		drbdInst("stopped", "n1", "n2", "cc"), drbdInst("primary-there", "n2", "n3", "dd"),
		drbdInst("primary-offline", "n4", "n2", "ee"), drbdInst("reserved", "n1", "n2", "ff")} {
		if in.Name != "stopped" {
			in.AdminState = AdminUp
		}
		if in.Name == "reserved" {
			in.Forthcoming = true
			for k := range in.Disks {
				in.Disks[k].DRBD = nil
			}
		}
		if e := putInstance(s, in, 0); e != nil {
			t.Fatal(e)
		}
	}
	var now int64 = 100
	report := func(boot, want string) Response {
		t.Helper()
		now++
		r := s.applyNodeStorage(&NodeStorageReport{Now: now, Epoch: 3, Node: "node2", BootID: boot})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if got := s.Nodes["n2"].Storage.BootID; got != want {
			t.Fatalf("report of boot id %q: recorded %q, want %q", boot, got, want)
		}
		return r
	}
	for _, boot := range []string{"boot-1", "boot-1"} {
		if r := report(boot, "boot-1"); len(r.JobIDs) != 0 {
			t.Fatalf("boot id %s: queued %v", boot, r.JobIDs)
		}
	}
	if r := report("", "boot-1"); len(r.JobIDs) != 0 {
		t.Fatalf("a report without a boot id queued %v", r.JobIDs)
	}
	// Rebooted, but gossip still says dead: nothing yet.
	dead := s.Nodes["n2"].clone()
	dead.Liveness = LivenessDead
	s.Nodes["n2"] = dead
	if r := report("boot-2", "boot-1"); len(r.JobIDs) != 0 {
		t.Fatalf("a dead node's reboot queued %v", r.JobIDs)
	}
	alive := s.Nodes["n2"].clone()
	alive.Liveness = LivenessAlive
	s.Nodes["n2"] = alive
	r := report("boot-2", "boot-2")
	var got []string
	for _, id := range r.JobIDs {
		j := s.Jobs[id]
		if !j.Executor || j.Status != StatusQueued || len(j.Ops) != 1 {
			t.Fatalf("job %d: %+v", id, j)
		}
		var op struct {
			ID     string              `json:"OP_ID"`
			Name   string              `json:"instance_name"`
			Reason [][]json.RawMessage `json:"reason"`
		}
		if err := json.Unmarshal(j.Ops[0].Input, &op); err != nil {
			t.Fatal(err)
		}
		got = append(got, op.ID+" "+op.Name+" "+string(op.Reason[0][0])+" "+string(op.Reason[0][1]))
	}
	want := []string{
		`OP_INSTANCE_ACTIVATE_DISKS web1 "gnt:watcher" "secondary node node2 rebooted"`,
		`OP_INSTANCE_ACTIVATE_DISKS web2 "gnt:watcher" "secondary node node2 rebooted"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queued:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The op UUIDs come from node, boot id and instance: the same on every
	// replica, distinct per instance.
	if u1, u2 := s.Jobs[r.JobIDs[0]].Ops[0].UUID, s.Jobs[r.JobIDs[1]].Ops[0].UUID; u1 == u2 || len(u1) != 36 {
		t.Errorf("op uuids %q %q", u1, u2)
	}
	s.pending = MaxPendingJobs
	if r := report("boot-3", "boot-2"); len(r.JobIDs) != 0 {
		t.Fatalf("full queue: queued %v", r.JobIDs)
	}
}
