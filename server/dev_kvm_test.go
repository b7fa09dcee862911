package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevHypervisorRefused: gntd dev refuses a hypervisor other than
// fake or kvm, and a kvm cluster without the guest's initramfs (or
// without QEMU), naming what is missing, before creating anything.
func TestDevHypervisorRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	wantKVM := "the guest's initramfs"
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		wantKVM = "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 qemu-utils)"
	} else if ks, _ := filepath.Glob("/boot/vmlinuz-*"); len(ks) == 0 {
		wantKVM = "no kernel in /boot"
	}
	for _, c := range []struct {
		o    DevOptions
		want string
	}{
		{DevOptions{Hypervisor: "xen"}, `--hypervisor "xen": fake or kvm`},
		{DevOptions{Hypervisor: "kvm", GuestDir: t.TempDir()}, wantKVM},
	} {
		c.o.DataDir, c.o.Candidates, c.o.Binary = dir, 3, "/nonexistent/gntd"
		err := RunDev(context.Background(), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%+v: the data dir was created", c.o)
		}
	}
}
