package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

func qcow2Header(version uint32, size uint64) []byte {
	h := make([]byte, qcow2HeaderLen)
	copy(h, "QFI\xfb")
	binary.BigEndian.PutUint32(h[4:], version)
	binary.BigEndian.PutUint64(h[24:], size)
	return h
}

// TestQcow2Size: the virtual size of good headers; bad ones refused,
// saying why.
func TestQcow2Size(t *testing.T) {
	good := map[int64][]byte{64 << 20: qcow2Header(3, 64<<20), 1 << 30: qcow2Header(2, 1<<30)}
	for want, h := range good {
		if n, err := qcow2Size(h); err != nil || n != want {
			t.Errorf("header of a %d-byte image: %d %v", want, n, err)
		}
	}
	bad := map[string][]byte{
		"header of 20 bytes": qcow2Header(3, 1)[:20],
		"bad magic":          make([]byte, 64),
		"version 1":          qcow2Header(1, 1),
		"over the limit":     qcow2Header(3, 1<<62),
	}
	for want, h := range bad {
		if n, err := qcow2Size(h); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%x: %d %v, want an error saying %q", h, n, err, want)
		}
	}
}

// FuzzQcow2Size: no header crashes the reader, and a size it accepts is
// within the disk size limit.
func FuzzQcow2Size(f *testing.F) {
	f.Add(qcow2Header(3, 64<<20))
	f.Add([]byte("QFI\xfb"))
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, h []byte) {
		n, err := qcow2Size(h)
		if err == nil && (n < 0 || n > int64(fsm.MaxDiskSizeMiB)<<20) {
			t.Fatalf("%x: size %d accepted", h, n)
		}
	})
}

// guestDriver skips without QEMU's guest, else gives a kvm driver on TCG
// in a fresh directory and the test guest's kernel and initramfs.
func guestDriver(t *testing.T) (k *KVM, dir, kernel, initrd string) {
	t.Helper()
	kernel, initrd = needGuest(t)
	dir = t.TempDir()
	return newTestKVM(t, dir, ""), dir, kernel, initrd
}

// TestKVMDiskFormat: without QEMU's guest, the format of new disks comes
// from the disk parameter format; an existing disk keeps its own; a bad
// format is refused.
func TestKVMDiskFormat(t *testing.T) {
	dir := t.TempDir()
	k := &KVM{cfg: KVMConfig{Node: "n1", FileStorageDir: dir}}
	inst := fsm.Instance{Name: "i1", UUID: "u1", DiskTemplate: "file"}
	p, err := k.diskPath(inst, disk0)
	if err != nil || !strings.HasSuffix(p, disk0+".img") {
		t.Fatalf("default: %s %v", p, err)
	}
	inst.DiskParams = map[string]any{"format": "qcow2"}
	if p, err = k.diskPath(inst, disk0); err != nil || !strings.HasSuffix(p, disk0+".qcow2") {
		t.Fatalf("format qcow2: %s %v", p, err)
	}
	raw := filepath.Join(dir, "u1", disk0+".img")
	os.MkdirAll(filepath.Dir(raw), 0o700)
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err = k.diskPath(inst, disk0); err != nil || p != raw {
		t.Fatalf("an existing raw disk under format qcow2: %s %v", p, err)
	}
	inst.DiskParams = map[string]any{"format": "vmdk"}
	if _, err := k.diskPath(inst, disk1); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "want raw or qcow2") {
		t.Fatalf("format vmdk: %v", err)
	}
}

// TestKVMQcow2: a real guest runs from a qcow2 disk (QEMU opens it as
// qcow2); the disk grows online through block_resize and offline through
// qemu-img resize, the virtual size read from its header; remove leaves
// no file.
func TestKVMQcow2(t *testing.T) {
	k, dir, kernel, initrd := guestDriver(t)
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "file", fsm.Disk{UUID: disk0, SizeMiB: 16, Mode: "rw"})
	inst.DiskParams = map[string]any{"format": "qcow2"}
	res := expect(t, "disk create", true)(k.DiskCreate(ctx, inst, disk0))
	path := filepath.Join(dir, "file-storage", inst.UUID, disk0+".qcow2")
	if !strings.Contains(res.Output, "qcow2") {
		t.Errorf("create output %q", res.Output)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() >= 16<<20 {
		t.Fatalf("qcow2 file %s: %v (size %v): want a small image", path, err, fi)
	}
	expect(t, "disk create again", false)(k.DiskCreate(ctx, inst, disk0))
	expect(t, "start", true)(k.Start(ctx, inst))
	waitCount(t, serialLines(t, k.SerialPath(inst.UUID)), -1, 3*time.Minute)
	if drv, file, _ := qemuDrive(t, k, inst.UUID, disk0); drv != "qcow2" || file != path {
		t.Fatalf("QEMU's drive: %s %s, want qcow2 %s", drv, file, path)
	}
	inst.Disks[0].SizeMiB = 24
	expect(t, "grow online", true)(k.DiskGrow(ctx, inst, disk0))
	if sz, err := diskSize(path); err != nil || sz != 24 {
		t.Fatalf("after the online grow: %d MiB %v", sz, err)
	}
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	inst.Disks[0].SizeMiB = 32
	expect(t, "grow offline", true)(k.DiskGrow(ctx, inst, disk0))
	if sz, err := diskSize(path); err != nil || sz != 32 {
		t.Fatalf("after the offline grow: %d MiB %v", sz, err)
	}
	st, err := k.Status(ctx, inst)
	if err != nil || len(st.Disks) != 1 || st.Disks[0].SizeMiB != 32 || st.Disks[0].Path != path {
		t.Fatalf("status: %+v %v", st, err)
	}
	expect(t, "remove", true)(k.Remove(ctx, inst))
	assertNoFiles(t, filepath.Join(dir, "file-storage"))
}

// TestKVMBalloon: a real guest started with 256 MiB and minmem 128 is
// ballooned down to 160 MiB through QMP; query-balloon (the status's
// memory) shows it; the same target again changes nothing; targets
// outside minmem..the boot memory, and a stopped guest, are refused.
func TestKVMBalloon(t *testing.T) {
	k, _, kernel, initrd := guestDriver(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(initrd), "balloon")); err != nil {
		t.Skip("SKIP: the kernel in /boot has no virtio_balloon module: the test guest cannot balloon")
	}
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "diskless")
	inst.MemoryMiB = 256
	inst.BEParams = map[string]any{"minmem": float64(128), "maxmem": float64(256)}
	if _, err := k.Balloon(ctx, inst, 200); !errors.Is(err, ErrState) {
		t.Fatalf("balloon before start: %v", err)
	}
	expect(t, "start", true)(k.Start(ctx, inst))
	waitCount(t, serialLines(t, k.SerialPath(inst.UUID)), 20, 3*time.Minute) // the guest's init has loaded virtio_balloon
	for _, c := range []struct {
		mib  int64
		want string
	}{{300, "more than the 256 MiB"}, {100, "less than instance guest1's minmem 128"}, {0, "must be positive"}} {
		if _, err := k.Balloon(ctx, inst, c.mib); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("balloon to %d MiB: %v, want %q", c.mib, err, c.want)
		}
	}
	res := expect(t, "balloon down", true)(k.Balloon(ctx, inst, 160))
	if res.Output != "balloon set to 160 MiB" {
		t.Errorf("balloon output %q: the guest did not reach 160 MiB", res.Output)
	}
	st, err := k.Status(ctx, inst)
	if err != nil || st.MemoryMiB != 160 {
		t.Fatalf("status after the balloon: %+v %v, want 160 MiB", st, err)
	}
	expect(t, "balloon to the same", false)(k.Balloon(ctx, inst, 160))
	expect(t, "balloon back up", true)(k.Balloon(ctx, inst, 256))
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	expect(t, "remove", true)(k.Remove(ctx, inst))
}

// qemuDrive is what QMP query-block says of a disk of the instance's
// running qemu: its block driver, file and virtual size in bytes ("" when
// qemu has no such disk).
func qemuDrive(t *testing.T, k *KVM, inst, disk string) (drv, file string, size int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var blocks []struct {
		Device   string `json:"device"`
		Inserted *struct {
			Drv   string `json:"drv"`
			File  string `json:"file"`
			Image struct {
				VirtualSize int64 `json:"virtual-size"`
			} `json:"image"`
		} `json:"inserted"`
	}
	if err := qmpDo(ctx, k.qmpPath(inst), func(q *qmpConn) error {
		return q.call(ctx, "query-block", nil, &blocks)
	}); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Device == "disk-"+disk && b.Inserted != nil {
			return b.Inserted.Drv, b.Inserted.File, b.Inserted.Image.VirtualSize
		}
	}
	return "", "", 0
}
