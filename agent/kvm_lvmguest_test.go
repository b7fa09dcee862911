package agent

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// The plain disks of the kvm driver against real LVM. This machine's own
// kernel may have no device-mapper (logical volumes cannot be activated
// there), so TestKVMPlainInGuest boots a QEMU guest (TCG) with a Debian
// kernel that has it, an initramfs it builds (busybox-static, the lvm
// binary and its shared libraries, the kernel's dm-mod and virtio-blk
// modules and this package's tests built statically) and a blank virtio
// disk. The guest's init makes a volume group on the disk and runs
// TestInGuestLVM, which drives the driver's plain-disk operations and the
// storage report and repairs with the real RunLVM, then has the driver
// start qemu (copied into the guest with its firmware) on a plain disk.
// Nested TCG is too slow to boot that qemu's guest: it is not waited for.

// Environment of TestInGuestLVM: the volume group and its physical
// volume that the guest's init made.
const (
	envGuestVG = "GNT_IN_GUEST_VG"
	envGuestPV = "GNT_IN_GUEST_PV"
	// With qemu in the guest: its path, and the kernel its guest boots.
	envGuestQEMU   = "GNT_IN_GUEST_QEMU"
	envGuestKernel = "GNT_IN_GUEST_KERNEL"
)

// Lines of the guest's console: its result ("GNT-LVM-GUEST RESULT <exit
// status of the test binary>") and a failure of its init.
const (
	guestResult = "GNT-LVM-GUEST RESULT "
	guestFail   = "GNT-LVM-GUEST FAIL "
)

// guestVGSize is the size in MiB of the guest's disk, its one physical
// volume.
const guestVGSize = 256

// TestInGuestLVM runs inside the guest of TestKVMPlainInGuest (elsewhere
// it skips, saying so): the storage report and repairs, then the plain
// disks' steps of TestKVMPlainDisks, each against the real volume group
// with the real LVM tools, and, when the guest has qemu, those of
// TestKVMPlainGuest without waiting for qemu's guest.
func TestInGuestLVM(t *testing.T) {
	vg, pv := os.Getenv(envGuestVG), os.Getenv(envGuestPV)
	if vg == "" || pv == "" {
		t.Skipf("SKIP: runs only inside the guest of TestKVMPlainInGuest (%s and %s unset)", envGuestVG, envGuestPV)
	}
	storageSteps(t, vg, pv, guestVGSize)
	rec := &lvmRecorder{run: RunLVM}
	k, err := NewKVM(KVMConfig{Dir: t.TempDir(), Node: "guest", Addr: "127.0.0.1", VolumeGroup: vg, LVM: rec.Run, Accel: AccelTCG, QEMU: "/nonexistent/qemu"})
	if err != nil {
		t.Fatal(err)
	}
	plainDiskSteps(t, k, vg, rec.took, true)
	if q := os.Getenv(envGuestQEMU); q != "" {
		// qemu nested in this TCG guest: it opens the volume, and
		// block_resize reaches it; its own guest need not boot.
		dir := t.TempDir()
		kq, err := NewKVM(KVMConfig{Dir: dir, Node: "guest", Addr: "127.0.0.1", VolumeGroup: vg, Accel: AccelTCG, QEMU: q})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { killAll(dir) })
		plainQEMUSteps(t, kq, vg, os.Getenv(envGuestKernel), "", false)
	}
	out, err := RunLVM(t.Context(), "lvs", "--noheadings", "-o", "lv_name", "--", vg)
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("volumes left in %s: %q %v", vg, out, err)
	}
}

// TestKVMPlainInGuest boots the LVM guest and fails on any failure it
// prints, or when it has not finished within 4 minutes.
func TestKVMPlainInGuest(t *testing.T) {
	g := needLVMGuest(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent.test")
	build := exec.Command(g.goTool, "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the guest's test binary: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := g.initramfs(initrd, bin); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(dir, "pv.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, guestVGSize<<20); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(g.qemu, "-accel", "tcg", "-m", "512", "-smp", "1", "-nodefaults", "-display", "none",
		"-serial", "stdio", "-no-reboot", "-kernel", g.kernel, "-initrd", initrd,
		"-append", "console=ttyS0 rdinit=/init panic=-1 quiet",
		"-drive", "file="+disk+",format=raw,if=virtio,cache=unsafe")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines, done := make(chan string), make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- strings.TrimRight(sc.Text(), "\r"):
			case <-done:
				return
			}
		}
	}()
	var console []string
	dump := func() { t.Logf("guest console:\n%s", strings.Join(console, "\n")) }
	timeout := time.NewTimer(4 * time.Minute)
	defer timeout.Stop()
	passed := false
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				dump()
				t.Fatalf("the guest stopped before printing its result")
			}
			console = append(console, l)
			switch {
			case strings.HasPrefix(l, "--- FAIL") || strings.HasPrefix(l, guestFail):
				t.Errorf("guest: %s", l)
			case strings.HasPrefix(l, "--- PASS: TestInGuestLVM "):
				passed = true
			case strings.HasPrefix(l, guestResult):
				if rc := strings.TrimPrefix(l, guestResult); rc != "0" || !passed {
					dump()
					t.Fatalf("guest's test binary exited %s (TestInGuestLVM passed: %v)", rc, passed)
				}
				dump()
				return
			}
		case <-timeout.C:
			dump()
			t.Fatal("the guest printed no result within 4 minutes")
		}
	}
}

// lvmGuest is what the LVM guest is made of on this host.
type lvmGuest struct {
	qemu, goTool, kernel, modDir, lvm, ip, busybox string
	// nested: qemu runs in the guest too (its firmware is there).
	nested bool
	// mods are the kernel modules to load, in order (built-in ones are
	// left out).
	mods []string
}

// needLVMGuest skips the test, naming what is missing, unless the host
// has QEMU, a Debian kernel in /boot whose modules directory has
// device-mapper (dm-mod) and virtio-blk, LVM, iproute2's ip, a static
// busybox and the go tool.
func needLVMGuest(t *testing.T) lvmGuest {
	t.Helper()
	const install = "(apt-get install qemu-system-x86 linux-image-amd64 lvm2 busybox-static)"
	var g lvmGuest
	var err error
	if g.qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("SKIP: qemu-system-x86_64 is not installed %s: the LVM guest test of the kvm driver not run", install)
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	sort.Sort(sort.Reverse(sort.StringSlice(ks)))
	var why []string
	for _, k := range ks {
		kver := strings.TrimPrefix(k, "/boot/vmlinuz-")
		md := filepath.Join("/lib/modules", kver)
		mods, err := guestModules(md, "dm-mod", "virtio_pci", "virtio_blk")
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		g.kernel, g.modDir, g.mods = k, md, mods
		break
	}
	if g.kernel == "" {
		t.Skipf("SKIP: no kernel in /boot with its modules in /lib/modules having dm-mod and virtio_blk %s (%s): the LVM guest test of the kvm driver not run", install, strings.Join(why, "; "))
	}
	for _, p := range []string{"/usr/sbin/lvm", "/sbin/lvm"} {
		if _, err := os.Stat(p); err == nil {
			g.lvm = p
			break
		}
	}
	if g.lvm == "" {
		t.Skipf("SKIP: lvm is not installed %s: the LVM guest test of the kvm driver not run", install)
	}
	// The driver's instance removal lists taps with iproute2's ip -j,
	// which busybox's ip does not know.
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if _, err := os.Stat(p); err == nil {
			g.ip = p
			break
		}
	}
	if g.ip == "" {
		t.Skip("SKIP: ip is not installed (apt-get install iproute2): the LVM guest test of the kvm driver not run")
	}
	g.nested = true
	for _, f := range qemuFirmware {
		if _, err := os.Stat(f); err != nil {
			g.nested = false
			t.Logf("NOTE: %v: qemu is not copied into the guest; the plain disk's qemu steps (start, grow while running) not run", err)
		}
	}
	g.busybox = "/bin/busybox"
	if !staticELF(g.busybox) {
		t.Skipf("SKIP: %s is not a static busybox %s: the LVM guest test of the kvm driver not run", g.busybox, install)
	}
	if g.goTool, err = exec.LookPath("go"); err != nil {
		g.goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(g.goTool); err != nil {
			t.Skip("SKIP: no go tool on PATH or in GOROOT to build the guest's test binary: the LVM guest test of the kvm driver not run")
		}
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("SKIP: no ldd to list lvm's shared libraries (apt-get install libc-bin): the LVM guest test of the kvm driver not run")
	}
	return g
}

// staticELF tells whether path is an ELF executable without an
// interpreter (statically linked).
func staticELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// guestModules lists, in the order to load them, the files (relative to
// modDir) of the named modules and of what they depend on, from
// modDir/modules.dep; a module built into the kernel (modules.builtin)
// needs none. A module in neither is an error.
func guestModules(modDir string, names ...string) ([]string, error) {
	norm := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	modName := func(file string) string {
		b := filepath.Base(file)
		return norm(b[:strings.Index(b, ".ko")])
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(l)] = true
		}
	}
	dep, err := os.ReadFile(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{} // module name: its file, then its dependencies' files
	for _, l := range strings.Split(string(dep), "\n") {
		file, rest, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		deps[modName(file)] = append([]string{file}, strings.Fields(rest)...)
	}
	var order []string
	seen := map[string]bool{}
	for _, n := range names {
		if builtin[norm(n)] {
			continue
		}
		d, ok := deps[norm(n)]
		if !ok {
			return nil, fmt.Errorf("module %s is neither built in nor in modules.dep", n)
		}
		// modules.dep lists all dependencies, each after those it
		// depends on: load them from the last.
		for i := len(d) - 1; i >= 1; i-- {
			if !seen[d[i]] {
				seen[d[i]] = true
				order = append(order, d[i])
			}
		}
		if !seen[d[0]] {
			seen[d[0]] = true
			order = append(order, d[0])
		}
	}
	return order, nil
}

// guestInit is the LVM guest's /init: it loads the modules, waits for the
// virtio disk, makes the volume group on it and runs TestInGuestLVM,
// printing its output and exit status on the console, then powers off.
const guestInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /tmp /run/lock/lvm /run/lvm
fail() { echo "GNT-LVM-GUEST FAIL $*"; echo "GNT-LVM-GUEST RESULT 1"; poweroff -f; }
for m in $(cat /lib/modules/order); do
	insmod /lib/modules/$m || fail "insmod $m"
done
n=0
while [ ! -b /dev/vda ]; do
	n=$((n+1)); [ $n -gt 100 ] && fail "no /dev/vda"
	usleep 100000
done
lvm pvcreate -q -y /dev/vda || fail "pvcreate /dev/vda"
lvm vgcreate -q -y gntguest /dev/vda || fail "vgcreate gntguest"
cd /tmp
q=
[ -x /usr/bin/qemu-system-x86_64 ] && q="GNT_IN_GUEST_QEMU=/usr/bin/qemu-system-x86_64 GNT_IN_GUEST_KERNEL=/boot/vmlinuz"
env $q GNT_IN_GUEST_VG=gntguest GNT_IN_GUEST_PV=/dev/vda /agent.test -test.run '^TestInGuestLVM$' -test.v -test.count=1 2>&1
echo "GNT-LVM-GUEST RESULT $?"
poweroff -f
`

// qemuFirmware are the files qemu loads to boot a kernel (SeaBIOS and
// its option ROMs) and, as Debian's qemu loads TCG from a module, that
// module, copied into the guest for the nested qemu.
var qemuFirmware = []string{"/usr/share/seabios/bios-256k.bin", "/usr/share/qemu/linuxboot_dma.bin",
	"/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so"}

// guestLVMConf keeps LVM from waiting for udev, which the guest does not
// run: LVM makes the device nodes itself.
const guestLVMConf = `activation {
	udev_sync = 0
	udev_rules = 0
	monitoring = 0
}
devices {
	obtain_device_list_from_udev = 0
}
`

// guestLVMTools are the LVM commands the driver and the guest's init run,
// each a link to lvm.
var guestLVMTools = []string{"lvs", "lvcreate", "lvextend", "lvremove", "lvchange", "vgs", "pvs", "pvchange", "vgreduce", "pvcreate", "vgcreate"}

// initramfs writes the LVM guest's initramfs (an uncompressed newc cpio)
// to path, with the test binary bin as /agent.test.
func (g lvmGuest) initramfs(path, bin string) error {
	w := &cpioWriter{}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "dev", "proc", "sys", "tmp", "etc", "etc/lvm", "lib", "lib/modules", "run"} {
		w.dir(d)
	}
	w.node("dev/console", 0o600, 5, 1)
	if err := w.file("bin/busybox", g.busybox, 0o755); err != nil {
		return err
	}
	w.symlink("bin/sh", "busybox")
	w.data("init", []byte(guestInit), 0o755)
	w.data("etc/lvm/lvm.conf", []byte(guestLVMConf), 0o644)
	if err := w.file("sbin/lvm", g.lvm, 0o755); err != nil {
		return err
	}
	for _, tool := range guestLVMTools {
		w.symlink("sbin/"+tool, "lvm")
	}
	// iproute2's ip in /sbin, before busybox's in /bin on the PATH.
	if err := w.file("sbin/ip", g.ip, 0o755); err != nil {
		return err
	}
	bins := []string{g.lvm, g.ip}
	if g.nested {
		bins = append(bins, g.qemu)
		if err := w.file("usr/bin/qemu-system-x86_64", g.qemu, 0o755); err != nil {
			return err
		}
		w.dir("boot")
		if err := w.file("boot/vmlinuz", g.kernel, 0o644); err != nil {
			return err
		}
		for _, f := range qemuFirmware {
			w.parents(f[1:])
			if err := w.file(f[1:], f, 0o644); err != nil {
				return err
			}
		}
	}
	seen := map[string]bool{}
	for _, bin := range bins {
		libs, err := sharedLibs(bin)
		if err != nil {
			return err
		}
		for _, l := range libs {
			if seen[l] {
				continue
			}
			seen[l] = true
			w.parents(l[1:])
			if err := w.file(l[1:], l, 0o755); err != nil {
				return err
			}
		}
	}
	var order []string
	for _, m := range g.mods {
		name := filepath.Base(m)
		b, err := moduleBytes(filepath.Join(g.modDir, m))
		if err != nil {
			return err
		}
		name = name[:strings.Index(name, ".ko")] + ".ko"
		w.data("lib/modules/"+name, b, 0o644)
		order = append(order, name)
	}
	w.data("lib/modules/order", []byte(strings.Join(order, "\n")+"\n"), 0o644)
	if err := w.file("agent.test", bin, 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, w.close(), 0o644)
}

// moduleBytes reads a kernel module, decompressing .ko.xz and .ko.zst
// (busybox's insmod may not).
func moduleBytes(path string) ([]byte, error) {
	var tool string
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.xz"):
		tool = "xz"
	case strings.HasSuffix(path, ".ko.zst"):
		tool = "zstd"
	case strings.HasSuffix(path, ".ko.gz"):
		tool = "gzip"
	default:
		return nil, fmt.Errorf("module %s: unknown compression", path)
	}
	out, err := exec.Command(tool, "-dc", path).Output()
	if err != nil {
		return nil, fmt.Errorf("decompressing module %s with %s: %v", path, tool, err)
	}
	return out, nil
}

// sharedLibs lists the shared libraries (absolute paths, the dynamic
// loader among them) that ldd says bin needs.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v", bin, err)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd %s: %s", bin, strings.TrimSpace(l))
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s listed no libraries:\n%s", bin, out)
	}
	return libs, nil
}

// cpioWriter builds a newc ("070701") cpio archive, as the kernel
// unpacks an initramfs.
type cpioWriter struct {
	buf  bytes.Buffer
	ino  int
	dirs map[string]bool
}

func (w *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	w.ino++
	fmt.Fprintf(&w.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	w.buf.WriteString(name)
	w.buf.WriteByte(0)
	w.pad()
	w.buf.Write(data)
	w.pad()
}

func (w *cpioWriter) pad() {
	for w.buf.Len()%4 != 0 {
		w.buf.WriteByte(0)
	}
}

// dir adds a directory (once).
func (w *cpioWriter) dir(name string) {
	if w.dirs == nil {
		w.dirs = map[string]bool{}
	}
	if !w.dirs[name] {
		w.dirs[name] = true
		w.entry(name, 0o040755, 0, 0, nil)
	}
}

// parents adds the directories above name.
func (w *cpioWriter) parents(name string) {
	parts := strings.Split(filepath.Dir(name), "/")
	for i := range parts {
		if parts[i] != "." {
			w.dir(strings.Join(parts[:i+1], "/"))
		}
	}
}

func (w *cpioWriter) data(name string, b []byte, perm uint32) {
	w.entry(name, 0o100000|perm, 0, 0, b)
}

// file adds the host's file src (followed if a link) as name.
func (w *cpioWriter) file(name, src string, perm uint32) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	w.data(name, b, perm)
	return nil
}

func (w *cpioWriter) symlink(name, target string) {
	w.entry(name, 0o120777, 0, 0, []byte(target))
}

// node adds a character device.
func (w *cpioWriter) node(name string, perm uint32, major, minor int) {
	w.entry(name, 0o020000|perm, major, minor, nil)
}

// close ends the archive and returns it.
func (w *cpioWriter) close() []byte {
	w.entry("TRAILER!!!", 0, 0, 0, nil)
	return w.buf.Bytes()
}
