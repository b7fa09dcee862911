package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gnt-cluster/gnt/fsm"
)

// The drbd disks of the kvm driver against real DRBD 8.4. This machine's
// own kernel has no drbd module, so TestKVMDRBDInGuest boots the test
// guest of TestKVMPlainInGuest (kvm_lvmguest_test.go) with a Debian
// kernel's drbd module and drbd-utils' 8.4 drbdsetup and drbdmeta, and
// three blank virtio disks, each the volume group of one "node": three
// kvm drivers in one guest, on 127.0.0.1, .2 and .3 (all on lo). The
// guest runs TestInGuestDRBD, which drives a drbd instance through the
// Driver interface as the jobs do: create (the primary first), start, the
// secondary's reboot and resync, live migration, grow, replace on the
// secondary, a new secondary, removal.

// envGuestDRBD lists the in-guest test's volume groups, one a node,
// comma-separated.
const envGuestDRBD = "GNT_IN_GUEST_DRBD_VGS"

// drbdGuestVGs are the DRBD guest's volume groups (one a disk), and
// drbdGuestVGSize their disks' size in MiB: room for a disk's data
// volume grown to 64 MiB, its 128 MiB metadata volume, and a replace.
var drbdGuestVGs = []string{"gntdrbda", "gntdrbdb", "gntdrbdc"}

const drbdGuestVGSize = 512

// drbdGuestSetup prepares the DRBD guest: the directories drbdsetup and
// drbdmeta lock and record in, the loopback the nodes talk over, and the
// drbd module's usermode_helper set to /bin/true as docs/agent.md tells
// for a node (the guest has no drbdadm; a missing helper is not what
// nodes run).
const drbdGuestSetup = `mkdir -p /var/lock /var/run/drbd /var/lib/drbd /run/lock
ip link set lo up || fail "ip link set lo up"
echo /bin/true > /sys/module/drbd/parameters/usermode_helper || fail "drbd usermode_helper"
`

// The DRBD 8.4 tools of Debian's drbd-utils (drbdsetup-84 is its 8.4
// drbdsetup; drbdmeta serves every version).
var (
	drbdSetup84 = "/lib/drbd/drbdsetup-84"
	drbdMetas   = []string{"/usr/sbin/drbdmeta", "/sbin/drbdmeta"}
)

// TestKVMDRBDInGuest boots the DRBD guest and fails on any failure it
// prints, or when it has not finished within 12 minutes (the machine is
// shared: a run takes one to two minutes on an idle one).
func TestKVMDRBDInGuest(t *testing.T) {
	const what = "the DRBD guest test of the kvm driver"
	meta := needDRBDTools(t, what)
	g := needTestGuest(t, what, "drbd", "dm-mod", "virtio_pci", "virtio_blk")
	g.bins = append(g.bins, guestBin{"sbin/drbdsetup", drbdSetup84}, guestBin{"sbin/drbdmeta", meta})
	g.boot(t, guestBoot{
		init:    guestInit(drbdGuestVGs, drbdGuestSetup, envGuestDRBD+"="+strings.Join(drbdGuestVGs, ","), "TestInGuestDRBD"),
		test:    "TestInGuestDRBD",
		disks:   len(drbdGuestVGs),
		diskMiB: drbdGuestVGSize,
		memMiB:  1024,
		bound:   12 * time.Minute,
	})
}

// guestDRBDNode is one of the DRBD guest's nodes: a kvm driver on its own
// volume group and loopback address.
type guestDRBDNode struct {
	name, uuid, ip, vg string
	// idx numbers the node (0, 1, 2).
	idx int
	dir string
	k   *KVM
}

// minor is the node's minor for the test's disk i: minors are the guest
// kernel's, shared by the three nodes, so each node has its own.
func (n *guestDRBDNode) minor(i int) int { return n.idx + 3*i }

// dev is the node's device of the test's disk i.
func (n *guestDRBDNode) dev(i int) string { return "/dev/drbd" + strconv.Itoa(n.minor(i)) }

func (n *guestDRBDNode) end(i int) fsm.DRBDEnd {
	return fsm.DRBDEnd{Node: n.uuid, Minor: n.minor(i), Name: n.name, IP: n.ip}
}

// guestDRBDInstance is the test's drbd instance on primary and secondary
// with a disk of each size (MiB), each on its own port.
func guestDRBDInstance(kernel string, primary, secondary *guestDRBDNode, sizes ...int64) fsm.Instance {
	var disks []fsm.Disk
	for i, sz := range sizes {
		disks = append(disks, fsm.Disk{UUID: fmt.Sprintf("0d15c000-0000-4000-8000-0000000d4bd%d", i), SizeMiB: sz, Mode: "rw",
			DRBD: &fsm.DRBDLogicalID{Port: 11000 + i, Secret: "gnt-drbd-guest-secret", Ends: []fsm.DRBDEnd{primary.end(i), secondary.end(i)}}})
	}
	inst := guestInstance(kernel, "", fsm.DTDrbd, disks...)
	inst.PrimaryNode, inst.SecondaryNodes = primary.uuid, []string{secondary.uuid}
	return inst
}

// TestInGuestDRBD runs inside the guest of TestKVMDRBDInGuest (elsewhere
// it skips, saying so).
func TestInGuestDRBD(t *testing.T) {
	vgs := strings.Split(os.Getenv(envGuestDRBD), ",")
	if len(vgs) != 3 {
		t.Skipf("SKIP: runs only inside the guest of TestKVMDRBDInGuest (%s does not name three volume groups)", envGuestDRBD)
	}
	if why := KVMNoDRBD("drbd-a"); why != "" {
		t.Fatalf("this guest has DRBD 8.4 and drbdsetup, but: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	qemu, kernel := os.Getenv(envGuestQEMU), os.Getenv(envGuestKernel)
	if qemu == "" {
		qemu = "/nonexistent/qemu"
	}
	nodes := map[string]*guestDRBDNode{}
	var a, b, c *guestDRBDNode
	for i, p := range []**guestDRBDNode{&a, &b, &c} {
		n := &guestDRBDNode{name: fmt.Sprintf("drbd-%c", 'a'+i), uuid: fmt.Sprintf("0de0000%d-0000-4000-8000-00000000d4bd", i),
			ip: fmt.Sprintf("127.0.0.%d", i+1), vg: vgs[i], idx: i, dir: t.TempDir()}
		k, err := NewKVM(KVMConfig{Dir: n.dir, Node: n.name, Addr: n.ip, VolumeGroup: n.vg, Accel: AccelTCG, QEMU: qemu})
		if err != nil {
			t.Fatal(err)
		}
		n.k = k
		t.Cleanup(func() { killAll(n.dir) })
		nodes[n.name] = n
		*p = n
	}
	for _, n := range nodes {
		// A migration's handoff goes straight to the target's driver.
		n.k.SetSend(func(ctx context.Context, m Migration, h Handoff) error {
			to := nodes[m.PeerNode]
			if to == nil {
				return fmt.Errorf("no node %s", m.PeerNode)
			}
			_, err := to.k.MigrateReceive(ctx, h)
			return err
		})
	}
	began := time.Now()
	step := func(format string, args ...any) {
		t.Logf("[%s] %s", time.Since(began).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
	}
	must := func(what string, r Result, err error, changed bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if r.Changed != changed {
			t.Fatalf("%s: changed %v, want %v (%s)", what, r.Changed, changed, r.Output)
		}
	}
	// each runs a disk operation on every disk of inst.
	each := func(what string, n *guestDRBDNode, inst fsm.Instance, changed bool, op func(context.Context, fsm.Instance, string) (Result, error)) {
		t.Helper()
		for i, d := range inst.Disks {
			r, err := op(ctx, inst, d.UUID)
			must(fmt.Sprintf("%s of disk %d on %s", what, i, n.name), r, err, changed)
		}
	}

	// 1. The disks (32 and 16 MiB) created as the jobs create them: on
	// the primary first, which makes itself the sync source before its
	// peer is there, then on the secondary, which resyncs from it.
	inst := guestDRBDInstance(kernel, a, b, 32, 16)
	disk := inst.Disks[0].UUID
	each("DiskCreate", a, inst, true, a.k.DiskCreate)
	for i := range inst.Disks {
		if d := guestDRBDDisk(t, ctx, a, inst, i).DRBD; d.Disk != fsm.DRBDUpToDate || d.Role != "Secondary" {
			t.Errorf("drbd-a alone after its create: disk %d %+v, want UpToDate and Secondary (the sync source)", i, *d)
		}
	}
	each("DiskCreate", b, inst, true, b.k.DiskCreate)
	took := waitDRBDSync(t, ctx, a, inst)
	step("1. created (32 and 16 MiB), the primary first: in sync after %s", took)
	// A driver started again on drbd-a's directory finds the device.
	again, err := NewKVM(KVMConfig{Dir: a.dir, Node: a.name, Addr: a.ip, VolumeGroup: a.vg, Accel: AccelTCG, QEMU: qemu})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := again.Status(ctx, inst); err != nil || len(st.Disks) != 2 || st.Disks[1].DRBD == nil || !st.Disks[1].DRBD.InSync() {
		t.Errorf("drbd-a's status from a new driver: %+v %v", st, err)
	}
	for _, n := range []*guestDRBDNode{a, b} {
		for i := range inst.Disks {
			if ds := guestDRBDDisk(t, ctx, n, inst, i); ds.Path != n.dev(i) || ds.DRBD.Minor != n.minor(i) {
				t.Errorf("%s: disk %d's path %q, minor %d; want %s", n.name, i, ds.Path, ds.DRBD.Minor, n.dev(i))
			}
		}
		if sizes := lvSizes(t, ctx, n.vg); !equalSizes(sizes, 32, 16, fsm.DRBDMetaMiB, fsm.DRBDMetaMiB) {
			t.Errorf("%s: volumes of %v MiB, want 32, 16 and twice %d", n.name, sizes, fsm.DRBDMetaMiB)
		}
		each("DiskCreate again", n, inst, false, n.k.DiskCreate)
	}
	checkRoles(t, ctx, inst, a, "Secondary", b, "Secondary")

	// 2 and 3. Started on drbd-a (the primary), a marker written to its
	// device while the secondary drbd-b's devices are down (as by a
	// reboot), which its attach then brings back and resyncs; a live
	// migration to drbd-b, which reads the marker.
	marker := []byte(fmt.Sprintf("gnt drbd marker %d", time.Now().UnixNano()))
	const markerAt = 1 << 20
	marker2 := []byte(fmt.Sprintf("gnt drbd marker from drbd-b %d", time.Now().UnixNano()))
	const marker2At = 2 << 20
	whileSecondaryDown := func(write func()) {
		t.Helper()
		for i := range inst.Disks {
			drbdsetup(t, ctx, "down", "resource"+strconv.Itoa(b.minor(i)))
			if d := guestDRBDDisk(t, ctx, b, inst, i).DRBD; d.Connection != DRBDUnconfigured || d.Disk != "" {
				t.Errorf("drbd-b's status of disk %d with its device down: %+v, want Unconfigured without disk states", i, *d)
			}
		}
		write()
		each("DiskAttach (the secondary, back)", b, inst, true, b.k.DiskAttach)
		took := waitDRBDSync(t, ctx, a, inst)
		for i := range inst.Disks {
			if ds := guestDRBDDisk(t, ctx, b, inst, i); ds.Attached || ds.DRBD.Role != "Secondary" {
				t.Errorf("drbd-b's disk %d after its attach: attached %v, role %s; want not attached, Secondary", i, ds.Attached, ds.DRBD.Role)
			}
		}
		step("2. drbd-b's devices down as by a reboot (Unconfigured), the marker written meanwhile; drbd-b's attach brought them back: in sync after %s", took)
	}
	if os.Getenv(envGuestQEMU) != "" {
		r, err := a.k.Start(ctx, inst)
		must("Start on drbd-a", r, err, true)
		for i, d := range inst.Disks {
			if _, file, _ := qemuDrive(t, a.k, inst.UUID, d.UUID); file != a.dev(i) {
				t.Errorf("qemu on drbd-a has disk %d as %q, want %s", i, file, a.dev(i))
			}
		}
		checkRoles(t, ctx, inst, a, "Primary", b, "Secondary")
		if _, err := b.k.Start(ctx, inst); !errors.Is(err, ErrState) || !strings.Contains(fmt.Sprint(err), "drbd-a") {
			t.Errorf("Start on drbd-b while drbd-a is primary: %v, want ErrState naming drbd-a", err)
		}
		step("2. started on drbd-a (Primary/Secondary)")
		whileSecondaryDown(func() { writeDirect(t, a.dev(0), markerAt, marker) })
		m := Migration{ID: "drbd-migration-1", PeerNode: a.name}
		r, err = b.k.MigratePrepare(ctx, inst, m)
		must("MigratePrepare on drbd-b", r, err, true)
		checkRoles(t, ctx, inst, a, "Primary", b, "Primary")
		r, err = a.k.MigrateSend(ctx, inst, Migration{ID: m.ID, PeerNode: b.name, Peer: b.ip + ":1811"})
		must("MigrateSend on drbd-a", r, err, true)
		sent := r.Output
		r, err = b.k.MigrateFinish(ctx, inst, m)
		must("MigrateFinish on drbd-b", r, err, true)
		inst.PrimaryNode, inst.SecondaryNodes = b.uuid, []string{a.uuid}
		checkRoles(t, ctx, inst, a, "Secondary", b, "Primary")
		for i, d := range inst.Disks {
			if _, file, _ := qemuDrive(t, b.k, inst.UUID, d.UUID); file != b.dev(i) {
				t.Errorf("qemu on drbd-b has disk %d as %q, want %s", i, file, b.dev(i))
			}
		}
		step("3. live migration drbd-a -> drbd-b: %s; roles Secondary/Primary", sent)
		if got := readDirect(t, b.dev(0), markerAt, len(marker)); !bytes.Equal(got, marker) {
			t.Errorf("drbd-b's /dev/drbd1 reads %q, want the marker %q written on drbd-a", got, marker)
		}
		step("3. marker read back on drbd-b")
		// The running primary's storage of the first disk replaced
		// (replace-disks -p):
		// the device goes on from its peer meanwhile, resyncs from it,
		// and the marker is read from the new volume.
		r, err = b.k.DiskReplace(ctx, inst, disk, "replace-p")
		must("DiskReplace on drbd-b (the running primary)", r, err, true)
		took := waitDRBDSync(t, ctx, b, inst)
		if ds := guestDRBDDisk(t, ctx, b, inst, 0); ds.Generation != "replace-p" || ds.DRBD.Role != "Primary" {
			t.Errorf("drbd-b after the replace: generation %q, role %s; want replace-p, Primary", ds.Generation, ds.DRBD.Role)
		}
		if got := readDirect(t, b.dev(0), markerAt, len(marker)); !bytes.Equal(got, marker) {
			t.Errorf("drbd-b's /dev/drbd1 reads %q after the replace, want the marker %q", got, marker)
		}
		step("3. drbd-b's storage of the first disk replaced while running: in sync after %s, marker read back", took)
		// A second marker, written on drbd-b, for drbd-a to read after
		// a failover.
		writeDirect(t, b.dev(0), marker2At, marker2)
		// A migration back, aborted once prepared: the target is
		// secondary again and two primaries are no longer allowed.
		m2 := Migration{ID: "drbd-migration-2", PeerNode: b.name}
		r, err = a.k.MigratePrepare(ctx, inst, m2)
		must("MigratePrepare on drbd-a", r, err, true)
		checkRoles(t, ctx, inst, a, "Primary", b, "Primary")
		if _, err := b.k.MigrateAbort(ctx, inst, Migration{ID: m2.ID, PeerNode: a.name, Peer: a.ip + ":1811"}); err != nil {
			t.Fatalf("MigrateAbort on drbd-b (the source): %v", err)
		}
		r, err = a.k.MigrateAbort(ctx, inst, m2)
		must("MigrateAbort on drbd-a (the target)", r, err, true)
		checkRoles(t, ctx, inst, a, "Secondary", b, "Primary")
		for i := range inst.Disks {
			if out, err := RunDRBD(ctx, "drbdsetup", "primary", strconv.Itoa(a.minor(i))); err == nil {
				t.Errorf("drbd-a's %s could be made primary beside drbd-b after the aborted migration: two primaries still allowed (%s)", a.dev(i), out)
				drbdsetup(t, ctx, "secondary", strconv.Itoa(a.minor(i)))
			}
		}
		step("3. a migration back aborted once prepared: Secondary/Primary, two primaries no longer allowed")
		r, err = b.k.Stop(ctx, inst, StopOptions{Timeout: 10 * time.Second, Force: true})
		must("Stop on drbd-b", r, err, true)
		checkRoles(t, ctx, inst, a, "Secondary", b, "Secondary")
		step("3. stopped on drbd-b: Secondary/Secondary")
		// A failover to drbd-a as the jobs make it: the devices set up
		// on the secondary first (its attach only assembles), then the
		// new primary started; it reads what drbd-b wrote.
		inst.PrimaryNode, inst.SecondaryNodes = a.uuid, []string{b.uuid}
		for i, d := range inst.Disks {
			if _, err := b.k.DiskAttach(ctx, inst, d.UUID); err != nil {
				t.Fatalf("DiskAttach of disk %d on drbd-b (the secondary): %v", i, err)
			}
		}
		checkRoles(t, ctx, inst, a, "Secondary", b, "Secondary")
		r, err = a.k.Start(ctx, inst)
		must("Start on drbd-a", r, err, true)
		checkRoles(t, ctx, inst, a, "Primary", b, "Secondary")
		if got := readDirect(t, a.dev(0), marker2At, len(marker2)); !bytes.Equal(got, marker2) {
			t.Errorf("drbd-a's %s reads %q after the failover, want the marker %q written on drbd-b", a.dev(0), got, marker2)
		}
		r, err = a.k.Stop(ctx, inst, StopOptions{Timeout: 10 * time.Second, Force: true})
		must("Stop on drbd-a", r, err, true)
		checkRoles(t, ctx, inst, a, "Secondary", b, "Secondary")
		// And back to drbd-b, stopped: only the record changes.
		inst.PrimaryNode, inst.SecondaryNodes = b.uuid, []string{a.uuid}
		step("3. failover to drbd-a: started there, drbd-b's marker read back; stopped, failed over back to drbd-b")
	} else {
		// No qemu in the guest: the roles switched by hand.
		step("NOTE: no qemu in the guest: Start, the live migration, the replace on the running primary, the aborted migration and Stop not run; the marker goes over by hand-switched roles (and the secondary's resync after its reboot)")
		whileSecondaryDown(func() {
			drbdsetup(t, ctx, "primary", strconv.Itoa(a.minor(0)))
			writeDirect(t, a.dev(0), markerAt, marker)
			drbdsetup(t, ctx, "secondary", strconv.Itoa(a.minor(0)))
		})
		drbdsetup(t, ctx, "primary", strconv.Itoa(b.minor(0)))
		got := readDirect(t, b.dev(0), markerAt, len(marker))
		drbdsetup(t, ctx, "secondary", strconv.Itoa(b.minor(0)))
		if !bytes.Equal(got, marker) {
			t.Errorf("drbd-b's /dev/drbd1 reads %q, want the marker %q written on drbd-a", got, marker)
		}
		inst.PrimaryNode, inst.SecondaryNodes = b.uuid, []string{a.uuid}
	}

	// 4. The first disk grown to 64 MiB: the secondary (drbd-a) first,
	// then the primary (drbd-b), which resizes the device.
	grown := inst
	grown.Disks = slices.Clone(inst.Disks)
	grown.Disks[0].SizeMiB = 64
	inst = grown
	r, err := a.k.DiskGrow(ctx, inst, disk)
	must("DiskGrow on drbd-a", r, err, true)
	r, err = b.k.DiskGrow(ctx, inst, disk)
	must("DiskGrow on drbd-b", r, err, true)
	took = waitDRBDSync(t, ctx, b, inst)
	for _, n := range []*guestDRBDNode{a, b} {
		if sizes := lvSizes(t, ctx, n.vg); !equalSizes(sizes, 64, 16, fsm.DRBDMetaMiB, fsm.DRBDMetaMiB) {
			t.Errorf("%s: volumes of %v MiB after growing, want 64, 16 and twice %d", n.name, sizes, fsm.DRBDMetaMiB)
		}
		for i, want := range []int64{64, 16} {
			if sz := drbdSizeMiB(t, n.minor(i)); sz != want {
				t.Errorf("%s: %s has %d MiB after growing, want %d", n.name, n.dev(i), sz, want)
			}
		}
		each("DiskGrow again", n, inst, false, n.k.DiskGrow)
	}
	step("4. first disk grown to 64 MiB on both, its device resized: in sync after %s", took)

	// 5. The secondary's storage of both disks replaced under one op
	// id, as the jobs' replace-disks -s: each resyncs from the primary.
	replace := func(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
		return a.k.DiskReplace(ctx, inst, disk, "replace-1")
	}
	each("DiskReplace", a, inst, true, replace)
	took = waitDRBDSync(t, ctx, b, inst)
	for i := range inst.Disks {
		if ds := guestDRBDDisk(t, ctx, a, inst, i); ds.Generation != "replace-1" {
			t.Errorf("drbd-a: disk %d's generation %q after the replace, want replace-1", i, ds.Generation)
		}
	}
	if sizes := lvSizes(t, ctx, a.vg); !equalSizes(sizes, 64, 16, fsm.DRBDMetaMiB, fsm.DRBDMetaMiB) {
		t.Errorf("drbd-a: volumes of %v MiB after the replace, want 64, 16 and twice %d", sizes, fsm.DRBDMetaMiB)
	}
	each("DiskReplace again", a, inst, false, replace)
	step("5. drbd-a's storage of both disks replaced under one op id: in sync again after %s", took)

	// 6. A new secondary, drbd-c, as the jobs make it: the old
	// secondary drbd-a dropped (its devices down, its volumes kept),
	// the disks created on drbd-c, the primary reconnected to it, the
	// resync waited for, and only then drbd-a's volumes removed, with a
	// record that no longer names it (its devices found by their data
	// volumes).
	each("DiskDetach (the old secondary)", a, inst, true, a.k.DiskDetach)
	if sizes := lvSizes(t, ctx, a.vg); !equalSizes(sizes, 64, 16, fsm.DRBDMetaMiB, fsm.DRBDMetaMiB) {
		t.Errorf("drbd-a: volumes of %v MiB after its detach, want 64, 16 and twice %d kept", sizes, fsm.DRBDMetaMiB)
	}
	moved := guestDRBDInstance(kernel, b, c, 64, 16)
	each("DiskCreate", c, moved, true, c.k.DiskCreate)
	inst = moved
	each("DiskAttach (reconnecting to drbd-c)", b, inst, true, b.k.DiskAttach)
	took = waitDRBDSync(t, ctx, b, inst)
	each("DiskRemove (the old secondary, after the resync)", a, inst, true, a.k.DiskRemove)
	if sizes := lvSizes(t, ctx, a.vg); len(sizes) != 0 {
		t.Errorf("drbd-a: volumes of %v MiB left after DiskRemove", sizes)
	}
	// The attach on the primary node is also activate-disks: the
	// device is primary there, its path usable (the marker, through
	// both replaces, read back), until the detach (deactivate-disks).
	checkRoles(t, ctx, inst, b, "Primary", c, "Secondary")
	if got := readDirect(t, guestDRBDDisk(t, ctx, b, inst, 0).Path, markerAt, len(marker)); !bytes.Equal(got, marker) {
		t.Errorf("drbd-b's activated disk reads %q, want the marker %q", got, marker)
	}
	each("DiskDetach", b, inst, true, b.k.DiskDetach)
	checkRoles(t, ctx, inst, b, "Secondary", c, "Secondary")
	step("6. new secondary drbd-c: drbd-a detached (down, volumes kept), drbd-b reconnected to drbd-c (and primary: activated), in sync after %s, drbd-a's volumes removed; marker read back; detached: Secondary/Secondary", took)
	if got, want := drbdMinors(t), []int{b.minor(0), c.minor(0), b.minor(1), c.minor(1)}; !slices.Equal(got, want) {
		t.Errorf("minors configured: %v, want %v (drbd-a's gone)", got, want)
	}

	// 7. Removed everywhere: no volumes, no minors.
	each("DiskRemove", c, inst, true, c.k.DiskRemove)
	each("DiskRemove again", c, inst, false, c.k.DiskRemove)
	r, err = b.k.Remove(ctx, inst)
	must("Remove on drbd-b", r, err, true)
	for _, n := range nodes {
		if sizes := lvSizes(t, ctx, n.vg); len(sizes) != 0 {
			t.Errorf("%s: volumes of %v MiB left", n.name, sizes)
		}
	}
	if got := drbdMinors(t); len(got) != 0 {
		t.Errorf("minors still configured: %v", got)
	}
	step("7. removed: no volumes, no minors")
}

// guestDRBDDisk is the status of the test's disk i on node n, which must
// have its device.
func guestDRBDDisk(t *testing.T, ctx context.Context, n *guestDRBDNode, inst fsm.Instance, i int) DiskStatus {
	t.Helper()
	st, err := n.k.Status(ctx, inst)
	if err != nil {
		t.Fatalf("%s: status: %v", n.name, err)
	}
	ds, ok := st.Disk(inst.Disks[i].UUID)
	if !ok || ds.DRBD == nil {
		t.Fatalf("%s: status has no drbd device for disk %d: %+v", n.name, i, st.Disks)
	}
	return ds
}

// waitDRBDSync waits, at most 4 minutes, for every disk to be in sync as
// node n reports it, and returns how long that took.
func waitDRBDSync(t *testing.T, ctx context.Context, n *guestDRBDNode, inst fsm.Instance) time.Duration {
	t.Helper()
	began := time.Now()
	deadline := began.Add(4 * time.Minute)
	for i := 0; i < len(inst.Disks); {
		ds := guestDRBDDisk(t, ctx, n, inst, i)
		switch {
		case ds.DRBD.InSync():
			i++
		case time.Now().After(deadline):
			b, _ := os.ReadFile("/proc/drbd")
			t.Fatalf("%s: disk %d is not in sync after 4 minutes: %+v\n/proc/drbd:\n%s", n.name, i, *ds.DRBD, b)
		default:
			time.Sleep(250 * time.Millisecond)
		}
	}
	return time.Since(began).Round(100 * time.Millisecond)
}

// checkRoles checks the roles of every disk's device on two nodes, each
// as the node reports it.
func checkRoles(t *testing.T, ctx context.Context, inst fsm.Instance, n1 *guestDRBDNode, role1 string, n2 *guestDRBDNode, role2 string) {
	t.Helper()
	for _, c := range []struct {
		n    *guestDRBDNode
		role string
	}{{n1, role1}, {n2, role2}} {
		for i := range inst.Disks {
			if d := guestDRBDDisk(t, ctx, c.n, inst, i).DRBD; d.Role != c.role {
				t.Errorf("%s: disk %d's role %s, want %s (%+v)", c.n.name, i, d.Role, c.role, *d)
			}
		}
	}
}

// lvSizes lists the sizes in MiB of the volume group's logical volumes,
// smallest first.
func lvSizes(t *testing.T, ctx context.Context, vg string) []int64 {
	t.Helper()
	out, err := RunLVM(ctx, "lvs", "--noheadings", "--units", "m", "--nosuffix", "-o", "lv_size", "--", vg)
	if err != nil {
		t.Fatalf("lvs %s: %v\n%s", vg, err, out)
	}
	var sizes []int64
	for _, f := range strings.Fields(string(out)) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("lvs %s: size %q: %v", vg, f, err)
		}
		sizes = append(sizes, int64(v))
	}
	slices.Sort(sizes)
	return sizes
}

// equalSizes tells whether got (sorted) are the sizes want.
func equalSizes(got []int64, want ...int64) bool {
	slices.Sort(want)
	return slices.Equal(got, want)
}

// drbdSizeMiB is the size of /dev/drbd<minor> as the kernel has it.
func drbdSizeMiB(t *testing.T, minor int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/block/drbd%d/size", minor))
	if err != nil {
		t.Fatal(err)
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return sectors >> 11
}

// drbdMinors lists the minors /proc/drbd shows configured.
func drbdMinors(t *testing.T) []int {
	t.Helper()
	b, err := os.ReadFile("/proc/drbd")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseProcDRBD(b)
	if err != nil {
		t.Fatalf("/proc/drbd: %v\n%s", err, b)
	}
	minors := []int{}
	for m, d := range p.Devices {
		if d.Connection != DRBDUnconfigured {
			minors = append(minors, m)
		}
	}
	slices.Sort(minors)
	return minors
}

// drbdsetup runs the guest's drbdsetup.
func drbdsetup(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	if out, err := RunDRBD(ctx, "drbdsetup", args...); err != nil {
		t.Fatalf("drbdsetup %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// directBlock returns a 4 KiB block aligned for O_DIRECT.
func directBlock() []byte {
	buf := make([]byte, 8192)
	off := int(4096 - uintptr(unsafe.Pointer(&buf[0]))%4096)
	return buf[off : off+4096]
}

// writeDirect writes data at offset at (4 KiB aligned) of the device,
// bypassing the page cache, and syncs it.
func writeDirect(t *testing.T, dev string, at int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY|syscall.O_DIRECT|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blk := directBlock()
	copy(blk, data)
	if _, err := f.WriteAt(blk, at); err != nil {
		t.Fatalf("writing %s: %v", dev, err)
	}
}

// readDirect reads n bytes at offset at (4 KiB aligned) of the device,
// bypassing the page cache.
func readDirect(t *testing.T, dev string, at int64, n int) []byte {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blk := directBlock()
	if _, err := f.ReadAt(blk, at); err != nil {
		t.Fatalf("reading %s: %v", dev, err)
	}
	return blk[:n]
}

// needDRBDTools skips the test (named by what) unless the host has
// drbd-utils' 8.4 drbdsetup and drbdmeta; it returns drbdmeta's path.
func needDRBDTools(t *testing.T, what string) string {
	t.Helper()
	const utils = "(apt-get install --no-install-recommends drbd-utils)"
	if _, err := os.Stat(drbdSetup84); err != nil {
		t.Skipf("SKIP: no DRBD 8.4 drbdsetup %s (%v): %s not run", utils, err, what)
	}
	for _, p := range drbdMetas {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("SKIP: no drbdmeta in %s %s: %s not run", strings.Join(drbdMetas, " or "), utils, what)
	return ""
}
