package agent

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
)

// TestFakeInstallOS: with DiskDir and OS the fake's disks are sparse
// files and InstallOS runs the OS definition's create script on them.
func TestFakeInstallOS(t *testing.T) {
	osDir := filepath.Join(t.TempDir(), "os")
	if err := osdef.InstallBuiltin(osDir, ""); err != nil {
		t.Fatal(err)
	}
	diskDir := filepath.Join(t.TempDir(), "disks")
	f, err := NewFake(FakeConfig{Dir: t.TempDir(), DiskDir: diskDir, OS: &osdef.Config{SearchPath: []string{osDir}, Owner: os.Geteuid()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	inst := testInstance()
	inst.OS = "gnt-image+default"
	for _, d := range inst.Disks {
		must(t, "disk create")(f.DiskCreate(ctx, inst, d.UUID))
	}
	file0 := filepath.Join(diskDir, inst.UUID, disk0+".img")
	if fi, err := os.Stat(file0); err != nil || fi.Size() != 10240<<20 {
		t.Fatalf("disk file: %v, %v", fi, err)
	}
	res, err := f.InstallOS(ctx, inst, "op1")
	if err != nil || !strings.Contains(res.Output, "wrote the marker of web1.example.com") || !strings.HasSuffix(res.Output, "installed gnt-image+default") {
		t.Fatalf("InstallOS = %+v, %v", res, err)
	}
	b := make([]byte, 4096)
	fh, _ := os.Open(file0)
	fh.Read(b)
	fh.Close()
	if !bytes.HasPrefix(b, []byte("GNT-IMAGE 1\ninstance=web1.example.com\n")) || !bytes.Contains(b, []byte("DISK_1_PATH="+filepath.Join(diskDir, inst.UUID, disk1+".img")+"\n")) {
		t.Errorf("disk 0 starts with %q", b[:200])
	}

	// An unknown variant fails the install and changes nothing.
	bad := inst
	bad.OS = "gnt-image+nope"
	_, err = f.InstallOS(ctx, bad, "op2")
	var oe *OpError
	if !errors.As(err, &oe) || !errors.Is(err, osdef.ErrVariant) {
		t.Errorf("InstallOS(gnt-image+nope) = %v", err)
	}
	if st, _ := f.Status(ctx, inst); st.OS != "gnt-image+default" {
		t.Errorf("OS after the failed install: %q", st.OS)
	}

	// Grow and remove follow the files.
	inst.Disks[1].SizeMiB = 4096
	must(t, "grow")(f.DiskGrow(ctx, inst, disk1))
	if fi, err := os.Stat(filepath.Join(diskDir, inst.UUID, disk1+".img")); err != nil || fi.Size() != 4096<<20 {
		t.Errorf("grown disk file: %v, %v", fi, err)
	}
	must(t, "remove")(f.Remove(ctx, inst))
	if _, err := os.Stat(filepath.Join(diskDir, inst.UUID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the instance's disk dir after Remove: %v", err)
	}
}

// TestKVMInstallOS: with an OS configuration the kvm driver runs the OS
// definition's create script on its disk files (no QEMU needed).
func TestKVMInstallOS(t *testing.T) {
	dir := t.TempDir()
	osDir := filepath.Join(t.TempDir(), "os")
	if err := osdef.InstallBuiltin(osDir, ""); err != nil {
		t.Fatal(err)
	}
	k, err := NewKVM(KVMConfig{Dir: dir, Accel: AccelTCG, FileStorageDir: filepath.Join(dir, "fs"),
		OS: &osdef.Config{SearchPath: []string{osDir, "/usr/share/ganeti/os"}, Owner: os.Geteuid()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	inst := fsm.Instance{Name: "vm1", UUID: "u1", DiskTemplate: "file", OS: "gnt-image+default", Disks: []fsm.Disk{{UUID: disk0, SizeMiB: 8}}, MemoryMiB: 64, VCPUs: 1}
	must(t, "disk create")(k.DiskCreate(ctx, inst, disk0))
	res, err := k.InstallOS(ctx, inst, "op1")
	if err != nil || !strings.Contains(res.Output, "gnt-image: wrote the marker of vm1") {
		t.Fatalf("InstallOS = %+v, %v", res, err)
	}
	p, _ := k.diskPath(inst, disk0)
	b, _ := os.ReadFile(p)
	if !bytes.HasPrefix(b, []byte("GNT-IMAGE 1\ninstance=vm1\n")) || !bytes.Contains(b, []byte("HYPERVISOR=kvm\n")) || len(b) != 8<<20 {
		t.Errorf("disk file: %d bytes, starting %q", len(b), b[:min(len(b), 80)])
	}
	inst.OS = "nosuch"
	if _, err := k.InstallOS(ctx, inst, "op2"); !errors.Is(err, osdef.ErrUnknown) {
		t.Errorf("install of an unknown OS: %v", err)
	}
}
