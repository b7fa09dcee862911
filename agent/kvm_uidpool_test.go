package agent

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// The uids of the test pool: far above any a system hands out.
const testPoolLo = 3999990000

// guestUIDs are the real, effective, saved and file-system uids of the
// instance's qemu.
func guestUIDs(t *testing.T, k *KVM, uuid string) []int64 {
	t.Helper()
	pid := k.pid(uuid)
	if pid == 0 {
		t.Fatalf("instance %s: no qemu running", uuid)
	}
	uids, _, err := procUIDs(strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	return uids
}

// runsAs checks that every uid of the instance's qemu is uid.
func runsAs(t *testing.T, k *KVM, uuid string, uid int64) {
	t.Helper()
	for _, u := range guestUIDs(t, k, uuid) {
		if u != uid {
			t.Fatalf("instance %s: qemu's uids %v, want all %d", uuid, guestUIDs(t, k, uuid), uid)
		}
	}
}

// lockFiles are the uids with a lock file in the driver's pool directory.
func lockFiles(k *KVM) []string {
	ents, _ := os.ReadDir(k.uids.dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: qemu's -runas needs root; the security_model tests of the kvm driver not run")
	}
}

// TestKVMUIDPool: guests of security_model=pool run under uids of the
// pool (all of qemu's uids), two guests under two uids; a start when the
// pool is used up fails, naming it, with nothing left running; a stopped
// guest's uid goes back to the pool and is handed out again, also by a
// restarted driver; a disk grows, and is hot-plugged, under a pool uid.
func TestKVMUIDPool(t *testing.T) {
	kernel, initrd := needGuest(t)
	needRoot(t)
	dir := t.TempDir()
	k := newTestKVM(t, dir, "")
	pool := []fsm.UIDRange{{testPoolLo, testPoolLo + 1}}
	ctx := WithUIDPool(context.Background(), pool)
	guest := func(n int, disks ...fsm.Disk) fsm.Instance {
		g := guestInstance(kernel, initrd, "file", disks...)
		g.Name = "pool" + strconv.Itoa(n)
		g.UUID = "6b5a1c1e-0000-4000-8000-00000000000" + strconv.Itoa(n)
		g.HVParams["security_model"] = "pool"
		return g
	}
	inPool := func(uid int64) bool { return uid >= testPoolLo && uid <= testPoolLo+1 }

	a := guest(1, fsm.Disk{UUID: disk0, SizeMiB: 8, Mode: "rw"})
	expect(t, "disk create", true)(k.DiskCreate(ctx, a, disk0))
	if _, err := k.Start(context.Background(), a); err == nil || !strings.Contains(err.Error(), "uid pool is empty") {
		t.Fatalf("start of a pool guest without a pool: %v", err)
	}
	if k.pid(a.UUID) != 0 {
		t.Fatal("a refused start left a qemu")
	}
	expect(t, "start a", true)(k.Start(ctx, a))
	uidA := guestUIDs(t, k, a.UUID)[0]
	if !inPool(uidA) {
		t.Fatalf("guest a runs as uid %d, not of the pool", uidA)
	}
	runsAs(t, k, a.UUID, uidA)
	lines := serialLines(t, k.SerialPath(a.UUID))
	n := waitCount(t, lines, -1, 3*time.Minute)

	b := guest(2)
	expect(t, "start b", true)(k.Start(ctx, b))
	uidB := guestUIDs(t, k, b.UUID)[0]
	if !inPool(uidB) || uidB == uidA {
		t.Fatalf("guest b runs as uid %d (a: %d); want the other uid of the pool", uidB, uidA)
	}
	runsAs(t, k, b.UUID, uidB)

	// Used up: the start fails naming the pool, and nothing runs.
	c := guest(3)
	_, err := k.Start(ctx, c)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "no unused uid in the uid pool") ||
		!strings.Contains(err.Error(), strconv.Itoa(testPoolLo)) {
		t.Fatalf("start with the pool used up: %v", err)
	}
	if k.pid(c.UUID) != 0 {
		t.Fatal("a start refused for want of a uid left a qemu")
	}
	if st, err := k.Status(ctx, c); err == nil && st.State == StateRunning {
		t.Fatalf("status of the refused guest: %+v", st)
	}
	if _, err := os.Stat(k.runDir(c.UUID)); err == nil {
		t.Fatal("a start refused for want of a uid left its runtime directory")
	}
	if got := lockFiles(k); len(got) != 2 {
		t.Fatalf("lock files %v, want the two uids in use", got)
	}

	// qemu opened the disk as root; growing it goes through QMP on that
	// open file, so it works under the pool uid.
	grown := a
	grown.Disks = []fsm.Disk{{UUID: disk0, SizeMiB: 16, Mode: "rw"}}
	expect(t, "disk grow (running, pool uid)", true)(k.DiskGrow(ctx, grown, disk0))
	// A disk hot-plugged later is opened by gntd and handed to qemu.
	grown.Disks = append(grown.Disks, fsm.Disk{UUID: disk1, SizeMiB: 8, Mode: "rw"})
	expect(t, "disk create (hot-plug)", true)(k.DiskCreate(ctx, grown, disk1))
	expect(t, "disk attach (hot-plug, pool uid)", true)(k.DiskAttach(ctx, grown, disk1))
	waitCount(t, lines, n, 3*time.Minute)
	expect(t, "disk detach (hot-unplug, pool uid)", true)(k.DiskDetach(ctx, grown, disk1))

	// a stops: its uid goes back to the pool, and c gets it.
	expect(t, "stop a", true)(k.Stop(ctx, grown, StopOptions{Force: true}))
	if got := lockFiles(k); len(got) != 1 || got[0] != strconv.FormatInt(uidB, 10) {
		t.Fatalf("lock files after a stopped: %v, want only b's %d", got, uidB)
	}
	expect(t, "start c", true)(k.Start(ctx, c))
	runsAs(t, k, c.UUID, uidA)

	// A restarted gntd (a new driver on the same directory) finds the
	// uids taken, and releases b's when it stops b.
	k2 := newTestKVM(t, dir, "")
	if _, err := k2.Start(ctx, grown); !errors.Is(err, ErrState) {
		t.Fatalf("start of a with both uids in use, after a restart: %v", err)
	}
	expect(t, "stop b (restarted driver)", true)(k2.Stop(ctx, b, StopOptions{Force: true}))
	expect(t, "start a (restarted driver)", true)(k2.Start(ctx, grown))
	runsAs(t, k2, a.UUID, uidB)
	for _, g := range []fsm.Instance{grown, c} {
		expect(t, "stop "+g.Name, true)(k2.Stop(ctx, g, StopOptions{Force: true}))
		expect(t, "remove "+g.Name, true)(k2.Remove(ctx, g))
	}
	if got := lockFiles(k2); len(got) != 0 {
		t.Fatalf("lock files after every guest stopped: %v", got)
	}
	assertNoFiles(t, filepath.Join(dir, "file-storage"))
}

// TestKVMSecurityUser: security_model=user runs qemu as security_domain
// (here nobody); a user the node does not have, or a domain with the
// other models, is refused by name with nothing started.
func TestKVMSecurityUser(t *testing.T) {
	kernel, initrd := needGuest(t)
	needRoot(t)
	dir := t.TempDir()
	k := newTestKVM(t, dir, "")
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "diskless")
	inst.HVParams["security_model"] = "user"
	for _, c := range []struct{ domain, want string }{
		{"", "security_model=user needs security_domain"},
		{"gnt-no-such-user", `security_domain "gnt-no-such-user"`},
		{"root", "is root"},
	} {
		inst.HVParams["security_domain"] = c.domain
		if _, err := k.Start(ctx, inst); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("security_domain %q: %v, want %q", c.domain, err, c.want)
		}
		if k.pid(inst.UUID) != 0 {
			t.Fatalf("security_domain %q: refused, but qemu runs", c.domain)
		}
	}
	for _, model := range []string{"none", "pool"} {
		inst.HVParams["security_model"], inst.HVParams["security_domain"] = model, "nobody"
		if _, err := k.Start(ctx, inst); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "security_domain must be empty with security_model="+model) {
			t.Errorf("security_model %s with a domain: %v", model, err)
		}
	}
	inst.HVParams["security_model"], inst.HVParams["security_domain"] = "user", "nobody"
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("SKIP: no user nobody here: %v", err)
	}
	uid, _ := strconv.ParseInt(nobody.Uid, 10, 64)
	expect(t, "start as nobody", true)(k.Start(ctx, inst))
	runsAs(t, k, inst.UUID, uid)
	waitCount(t, serialLines(t, k.SerialPath(inst.UUID)), -1, 3*time.Minute)
	// A reboot whose restart would be refused (the user went away from
	// the parameters since the start) leaves the guest running.
	pid := k.pid(inst.UUID)
	bad := inst
	bad.HVParams = maps.Clone(inst.HVParams)
	bad.HVParams["security_domain"] = "gnt-no-such-user"
	if _, err := k.Reboot(ctx, bad, RebootOptions{OpID: "r-bad"}); !errors.Is(err, ErrState) ||
		!strings.Contains(err.Error(), "not rebooted, the guest keeps running") || !strings.Contains(err.Error(), `security_domain "gnt-no-such-user"`) {
		t.Errorf("reboot with an unknown user: %v", err)
	}
	if got := k.pid(inst.UUID); got != pid || got == 0 {
		t.Fatalf("after the refused reboot qemu is pid %d, was %d", got, pid)
	}
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	expect(t, "remove", true)(k.Remove(ctx, inst))
}

// TestKVMMigratePool: a guest of security_model=pool live-migrates: the
// target's qemu, started with -incoming under a uid of its node's pool,
// takes the guest over (its disk opened as root before qemu drops to the
// uid, and kept writable: auto-read-only is off), the counter goes on,
// and the source's uid goes back to its pool.
func TestKVMMigratePool(t *testing.T) {
	kernel, initrd := needGuest(t)
	needRoot(t)
	src, dst := migrationPair(t)
	// Two uids: both "nodes" are this machine, where the source's uid is
	// in use while the target starts.
	ctx := WithUIDPool(context.Background(), []fsm.UIDRange{{testPoolLo + 10, testPoolLo + 11}})
	inst := guestInstance(kernel, initrd, "sharedfile", fsm.Disk{UUID: disk0, SizeMiB: 8, Mode: "rw"})
	inst.HVParams["security_model"] = "pool"
	expect(t, "disk create", true)(src.DiskCreate(ctx, inst, disk0))
	expect(t, "start", true)(src.Start(ctx, inst))
	uid := guestUIDs(t, src, inst.UUID)[0]
	runsAs(t, src, inst.UUID, uid)
	n := waitCount(t, serialLines(t, src.SerialPath(inst.UUID)), 20, 3*time.Minute)
	expect(t, "prepare", true)(dst.MigratePrepare(ctx, inst, Migration{ID: "mig1", PeerNode: "a"}))
	runsAs(t, dst, inst.UUID, 2*testPoolLo+21-uid) // the other uid
	m := Migration{ID: "mig1", PeerNode: "b", Peer: "127.0.0.1:1811"}
	t.Logf("send: %s", expect(t, "send", true)(src.MigrateSend(ctx, inst, m)).Output)
	expect(t, "finish", true)(dst.MigrateFinish(ctx, inst, m))
	waitCount(t, serialLines(t, dst.SerialPath(inst.UUID)), n, 3*time.Minute)
	if got := lockFiles(src); len(got) != 0 {
		t.Fatalf("source's lock files after the migration: %v", got)
	}
	// The migrated guest writes its disk: the disk stayed writable.
	grown := inst
	grown.Disks = []fsm.Disk{{UUID: disk0, SizeMiB: 16, Mode: "rw"}}
	expect(t, "disk grow on the target", true)(dst.DiskGrow(ctx, grown, disk0))
	expect(t, "stop", true)(dst.Stop(ctx, grown, StopOptions{Force: true}))
	// The target's uid is released. (The lock file of the source's uid,
	// which the target tried and found in use, may stay: as in Ganeti, a
	// lock file only makes a uid be tried last.)
	for _, f := range lockFiles(dst) {
		if f == strconv.FormatInt(2*testPoolLo+21-uid, 10) {
			t.Fatalf("target's lock files after stop: %v; its uid %s is still taken", lockFiles(dst), f)
		}
	}
}

// TestUIDLocks: the lock-file algorithm without qemu: a uid whose lock
// another start holds, or that a process uses, is skipped; a used-up pool
// fails naming it; a released uid is handed out again.
func TestUIDLocks(t *testing.T) {
	used := map[int64]bool{}
	u := uidLocks{dir: filepath.Join(t.TempDir(), "uid-pool"), inUse: func(uid int64) (bool, error) { return used[uid], nil }}
	pool := []fsm.UIDRange{{5000, 5002}}
	if _, err := u.request(nil); err == nil || !strings.Contains(err.Error(), "uid pool is empty") {
		t.Fatalf("empty pool: %v", err)
	}
	used[5001] = true
	a, err := u.request(pool)
	if err != nil || a.uid == 5001 {
		t.Fatalf("first: %v %v (5001 is used by a process)", a, err)
	}
	// a's lock is still held (qemu starting): the next start gets the
	// third uid.
	b, err := u.request(pool)
	if err != nil || b.uid == a.uid || b.uid == 5001 {
		t.Fatalf("second: %v %v (a holds %d)", b, err, a.uid)
	}
	a.unlock()
	b.unlock()
	// Both run (their processes use them): the pool is used up.
	used[a.uid], used[b.uid] = true, true
	if _, err := u.request(pool); !errors.Is(err, ErrUIDPoolExhausted) || !strings.Contains(err.Error(), "all 3 uids of 5000-5002") {
		t.Fatalf("used up: %v", err)
	}
	// a's guest ends: its uid is released and handed out again.
	used[a.uid] = false
	if err := u.release(a); err != nil {
		t.Fatal(err)
	}
	c, err := u.request(pool)
	if err != nil || c.uid != a.uid {
		t.Fatalf("after release: %v %v, want %d", c, err, a.uid)
	}
	c.unlock()
	// The process check sees this test's own uid.
	if in, err := procUIDInUse(int64(os.Getuid())); err != nil || !in {
		t.Errorf("procUIDInUse(own uid %d) = %v, %v", os.Getuid(), in, err)
	}
}
