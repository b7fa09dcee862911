package agent

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
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

// Lines of a test guest's console: its result ("GNT-GUEST RESULT <exit
// status of the test binary>") and a failure of its init.
const (
	guestResult = "GNT-GUEST RESULT "
	guestFail   = "GNT-GUEST FAIL "
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
	g := needTestGuest(t, "the LVM guest test of the kvm driver", "dm-mod", "virtio_pci", "virtio_blk")
	g.boot(t, guestBoot{
		init:    guestInit([]string{"gntguest"}, "", "GNT_IN_GUEST_VG=gntguest GNT_IN_GUEST_PV=/dev/vda", "TestInGuestLVM"),
		test:    "TestInGuestLVM",
		disks:   1,
		diskMiB: guestVGSize,
		memMiB:  512,
		bound:   4 * time.Minute,
	})
}

// testGuest is what a test guest (a Debian kernel, busybox and LVM in an
// initramfs, booted by QEMU under TCG) is made of on this host.
type testGuest struct {
	// what names the test, for the skip messages.
	what                                           string
	qemu, goTool, kernel, modDir, lvm, ip, busybox string
	// nested: qemu runs in the guest too (its firmware is there).
	nested bool
	// mods are the kernel modules to load, in order (built-in ones are
	// left out).
	mods []string
	// bins are more programs copied into the guest with their shared
	// libraries (none for a static one), files more data files.
	bins, files []guestBin
}

// guestBin is a host's program or file (src) copied into a test guest
// as name (a path relative to the guest's root).
type guestBin struct{ name, src string }

// needTestGuest skips the test (named by what), naming what is missing,
// unless the host has QEMU, a Debian kernel in /boot whose modules
// directory has the modules named (and their dependencies), LVM,
// iproute2's ip, a static busybox and the go tool.
func needTestGuest(t *testing.T, what string, modules ...string) testGuest {
	t.Helper()
	const install = "(apt-get install qemu-system-x86 linux-image-amd64 lvm2 busybox-static)"
	g := testGuest{what: what}
	var err error
	if g.qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("SKIP: qemu-system-x86_64 is not installed %s: %s not run", install, what)
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	sort.Sort(sort.Reverse(sort.StringSlice(ks)))
	var why []string
	for _, k := range ks {
		kver := strings.TrimPrefix(k, "/boot/vmlinuz-")
		md := filepath.Join("/lib/modules", kver)
		mods, err := guestModules(md, modules...)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		g.kernel, g.modDir, g.mods = k, md, mods
		break
	}
	if g.kernel == "" {
		t.Skipf("SKIP: no kernel in /boot with its modules in /lib/modules having %s %s (%s): %s not run",
			strings.Join(modules, ", "), install, strings.Join(why, "; "), what)
	}
	for _, p := range []string{"/usr/sbin/lvm", "/sbin/lvm"} {
		if _, err := os.Stat(p); err == nil {
			g.lvm = p
			break
		}
	}
	if g.lvm == "" {
		t.Skipf("SKIP: lvm is not installed %s: %s not run", install, what)
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
		t.Skipf("SKIP: ip is not installed (apt-get install iproute2): %s not run", what)
	}
	g.nested = true
	for _, f := range qemuFirmware {
		if _, err := os.Stat(f); err != nil {
			g.nested = false
			t.Logf("NOTE: %v: qemu is not copied into the guest; the steps of %s that run qemu are not run", err, what)
		}
	}
	g.busybox = "/bin/busybox"
	if !staticELF(g.busybox) {
		t.Skipf("SKIP: %s is not a static busybox %s: %s not run", g.busybox, install, what)
	}
	if g.goTool, err = exec.LookPath("go"); err != nil {
		g.goTool = filepath.Join(build.Default.GOROOT, "bin", "go") // where this test binary was built
		if _, err := os.Stat(g.goTool); err != nil {
			t.Skipf("SKIP: no go tool on PATH or in GOROOT to build the guest's test binary: %s not run", what)
		}
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skipf("SKIP: no ldd to list lvm's shared libraries (apt-get install libc-bin): %s not run", what)
	}
	return g
}

// guestBoot is one boot of a test guest.
type guestBoot struct {
	// init is the guest's /init (guestInit), test the in-guest test it
	// runs, whose PASS line is looked for.
	init, test string
	// disks blank virtio disks of diskMiB each (vda, vdb, ...).
	disks, diskMiB int
	memMiB         int
	// bound is how long the guest may take to print its result.
	bound time.Duration
	// qemuArgs are more arguments of the guest's qemu (a NIC).
	qemuArgs []string
}

// boot builds this package's tests statically into the guest's
// initramfs, boots the guest and reads its console: it fails on any
// failure printed, when the in-guest test did not pass, or when no
// result came within b.bound; the console is logged.
func (g testGuest) boot(t *testing.T, b guestBoot) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent.test")
	g.goBuild(t, "building the guest's test binary", "test", "-c", "-o", bin, ".")
	began := time.Now()
	waitGuests(t, b, began, guestConsole{"", g.start(t, b, bin)})
}

// goBuild runs the go tool with args (a build, static: CGO_ENABLED=0),
// failing the test (saying what it was doing) if it fails.
func (g testGuest) goBuild(t *testing.T, what string, args ...string) {
	t.Helper()
	build := exec.Command(g.goTool, args...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
}

// guestLink returns the qemu arguments of two guests' virtio NICs linked
// to each other: QEMU's socket netdev over UDP on the host's loopback,
// each end on a port of its own, free when asked (a process of another
// test may take one meanwhile: its guest then fails).
func guestLink(t *testing.T) [2][]string {
	t.Helper()
	var ports [2]int
	for i := range ports {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ports[i] = c.LocalAddr().(*net.UDPAddr).Port
	}
	var args [2][]string
	for i := range args {
		args[i] = []string{"-netdev", fmt.Sprintf("socket,id=l,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d", ports[1-i], ports[i]),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=l,mac=52:54:00:99:00:%02d", i+1)}
	}
	return args
}

// start builds the guest's initramfs (with the test binary bin as
// /agent.test, unless bin is "") and its blank disks, starts its qemu
// (killed when the test ends) and returns the lines of its console.
func (g testGuest) start(t *testing.T, b guestBoot, bin string) <-chan string {
	t.Helper()
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := g.initramfs(initrd, bin, b.init); err != nil {
		t.Fatal(err)
	}
	args := []string{"-accel", "tcg", "-m", strconv.Itoa(b.memMiB), "-smp", "1", "-nodefaults", "-display", "none",
		"-serial", "stdio", "-no-reboot", "-kernel", g.kernel, "-initrd", initrd,
		"-append", "console=ttyS0 rdinit=/init panic=-1 quiet"}
	for i := 0; i < b.disks; i++ {
		disk := filepath.Join(dir, fmt.Sprintf("pv%d.img", i))
		if err := os.WriteFile(disk, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(disk, int64(b.diskMiB)<<20); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-drive", "file="+disk+",format=raw,if=virtio,cache=unsafe")
	}
	cmd := exec.Command(g.qemu, append(args, b.qemuArgs...)...)
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
	t.Cleanup(func() { close(done) })
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
	return lines
}

// guestConsole is the console of one of a test's guests, named (in the
// log) by name.
type guestConsole struct {
	name  string
	lines <-chan string
}

// guestLine is a line of a guest's console; closed: the guest stopped.
type guestLine struct {
	guest, text string
	closed      bool
}

// waitGuests reads the guests' consoles until one prints its result: it
// fails on any failure printed by any of them, when one stops first, when
// the result is not 0, when b.test (unless "") did not pass, or when no
// result came within b.bound of began; the consoles are logged.
func waitGuests(t *testing.T, b guestBoot, began time.Time, consoles ...guestConsole) {
	t.Helper()
	all, done := make(chan guestLine), make(chan struct{})
	defer close(done)
	for _, c := range consoles {
		go func() {
			for l := range c.lines {
				select {
				case all <- guestLine{guest: c.name, text: l}:
				case <-done:
					return
				}
			}
			select {
			case all <- guestLine{guest: c.name, closed: true}:
			case <-done:
			}
		}()
	}
	var console []string
	dump := func() { t.Logf("guest console:\n%s", strings.Join(console, "\n")) }
	timeout := time.NewTimer(b.bound - time.Since(began))
	defer timeout.Stop()
	passed := false
	for {
		select {
		case gl := <-all:
			if gl.closed {
				dump()
				t.Fatalf("guest %s stopped before printing its result", gl.guest)
			}
			l := gl.text
			if gl.guest != "" {
				console = append(console, gl.guest+"| "+l)
			} else {
				console = append(console, l)
			}
			switch {
			case strings.HasPrefix(l, "--- FAIL") || strings.HasPrefix(l, guestFail):
				t.Errorf("guest %s: %s", gl.guest, l)
			case b.test != "" && strings.HasPrefix(l, "--- PASS: "+b.test+" "):
				passed = true
			case strings.HasPrefix(l, guestResult):
				if rc := strings.TrimPrefix(l, guestResult); rc != "0" || (b.test != "" && !passed) {
					dump()
					t.Fatalf("guest %s's test exited %s (%s passed: %v)", gl.guest, rc, b.test, passed)
				}
				dump()
				t.Logf("the guests printed their result (%s passed: %v) in %s", b.test, passed, time.Since(began).Round(time.Second))
				return
			}
		case <-timeout.C:
			dump()
			t.Fatalf("the guests printed no result within %s", b.bound)
		}
	}
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
// modDir/modules.dep, and of their soft dependencies loaded before them
// (modules.softdep's "pre:", through modules.alias: libcrc32c needs a
// crc32c, which the guest has no modprobe to load on demand); a module
// built into the kernel (modules.builtin) needs none. A module in neither
// is an error.
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
	pre := map[string][]string{} // module name: what must be loaded before it
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.softdep")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			// softdep <module> pre: <names> post: <names>
			f := strings.Fields(l)
			if len(f) < 2 || f[0] != "softdep" {
				continue
			}
			inPre := false
			for _, w := range f[2:] {
				switch {
				case w == "pre:" || w == "post:":
					inPre = w == "pre:"
				case inPre:
					pre[norm(f[1])] = append(pre[norm(f[1])], w)
				}
			}
		}
	}
	aliases := map[string][]string{} // alias: the modules that have it
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.alias")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "alias" {
				aliases[f[1]] = append(aliases[f[1]], norm(f[2]))
			}
		}
	}
	// resolve names the module of a soft dependency: itself, or of the
	// modules with that alias a generic one (the guest's TCG CPU may
	// lack an optimised one's instructions), else the first.
	resolve := func(n string) string {
		if _, ok := deps[norm(n)]; ok || builtin[norm(n)] {
			return norm(n)
		}
		as := aliases[n]
		for _, a := range as {
			if strings.HasSuffix(a, "_generic") {
				return a
			}
		}
		if len(as) > 0 {
			return as[0]
		}
		return ""
	}
	var order []string
	seen := map[string]bool{}
	var add func(n string) error
	add = func(n string) error {
		if builtin[n] || seen[n] {
			return nil
		}
		seen[n] = true
		d, ok := deps[n]
		if !ok {
			return fmt.Errorf("module %s is neither built in nor in modules.dep", n)
		}
		for _, p := range pre[n] {
			m := resolve(p)
			if m == "" {
				return fmt.Errorf("soft dependency %s of module %s: no module has that name or alias", p, n)
			}
			if err := add(m); err != nil {
				return err
			}
		}
		// modules.dep lists all dependencies, each after those it
		// depends on: load them from the last.
		for i := len(d) - 1; i >= 1; i-- {
			if err := add(modName(d[i])); err != nil {
				return err
			}
		}
		order = append(order, d[0])
		return nil
	}
	for _, n := range names {
		if err := add(norm(n)); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// guestInit is a test guest's /init: it loads the modules, waits for
// the virtio disks and makes volume group vgs[i] on the i-th (vda, vdb,
// ...), runs the shell commands setup, then the test binary's test with
// the environment env (and, when qemu was copied in, envGuestQEMU and
// envGuestKernel), printing its output and exit status on the console,
// then powers off.
func guestInit(vgs []string, setup, env, test string) string {
	var disks strings.Builder
	for i, vg := range vgs {
		fmt.Fprintf(&disks, "disk /dev/vd%c %s\n", 'a'+i, vg)
	}
	return guestInitHead + disks.String() + setup + "\ncd /tmp\n" +
		"q=\n[ -x /usr/bin/qemu-system-x86_64 ] && q=\"" + envGuestQEMU + "=/usr/bin/qemu-system-x86_64 " + envGuestKernel + "=/boot/vmlinuz\"\n" +
		"env $q " + env + " /agent.test -test.run '^" + test + "$' -test.v -test.count=1 2>&1\n" +
		"echo \"" + guestResult + "$?\"\npoweroff -f\n"
}

// guestInitHead begins every test guest's /init.
const guestInitHead = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /tmp /run/lock/lvm /run/lvm
fail() { echo "GNT-GUEST FAIL $*"; echo "GNT-GUEST RESULT 1"; poweroff -f; }
for m in $(cat /lib/modules/order); do
	insmod /lib/modules/$m || fail "insmod $m"
done
disk() {
	n=0
	while [ ! -b $1 ]; do
		n=$((n+1)); [ $n -gt 100 ] && fail "no $1"
		usleep 100000
	done
	lvm pvcreate -q -y $1 || fail "pvcreate $1"
	lvm vgcreate -q -y $2 $1 || fail "vgcreate $2"
}
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

// initramfs writes the test guest's initramfs (an uncompressed newc
// cpio) to path, with init as /init and the test binary bin (unless "")
// as /agent.test.
func (g testGuest) initramfs(path, bin, init string) error {
	w := &cpioWriter{}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "dev", "proc", "sys", "tmp", "etc", "etc/lvm", "lib", "lib/modules", "run"} {
		w.dir(d)
	}
	w.node("dev/console", 0o600, 5, 1)
	if err := w.file("bin/busybox", g.busybox, 0o755); err != nil {
		return err
	}
	w.symlink("bin/sh", "busybox")
	w.data("init", []byte(init), 0o755)
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
	for _, b := range g.bins {
		w.parents(b.name)
		if err := w.file(b.name, b.src, 0o755); err != nil {
			return err
		}
		if !staticELF(b.src) {
			bins = append(bins, b.src)
		}
	}
	for _, f := range g.files {
		w.parents(f.name)
		if err := w.file(f.name, f.src, 0o644); err != nil {
			return err
		}
	}
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
	if bin != "" {
		if err := w.file("agent.test", bin, 0o755); err != nil {
			return err
		}
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

// TestGuestModules: the load order of a test guest's modules from a
// modules directory's lists: dependencies first, a soft dependency's
// generic module before the module, built-in ones left out; a module in
// no list, or a soft dependency nothing provides, is an error naming it.
func TestGuestModules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modules.dep", `kernel/drbd.ko: kernel/lru_cache.ko kernel/libcrc32c.ko
kernel/lru_cache.ko:
kernel/libcrc32c.ko:
kernel/crc32c-intel.ko:
kernel/crc32c_generic.ko.xz:
kernel/xfs.ko: kernel/libcrc32c.ko
kernel/odd.ko:
`)
	write("modules.builtin", "kernel/dm-mod.ko\n")
	write("modules.softdep", "# soft\nsoftdep libcrc32c pre: crc32c post: nothing\nsoftdep odd pre: missing\nsoftdep cifs md5\n")
	write("modules.alias", "alias crc32c crc32c_intel\nalias crc32c crc32c_generic\n")
	got, err := guestModules(dir, "drbd", "dm-mod", "xfs")
	want := []string{"kernel/crc32c_generic.ko.xz", "kernel/libcrc32c.ko", "kernel/lru_cache.ko", "kernel/drbd.ko", "kernel/xfs.ko"}
	if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("drbd, dm-mod, xfs: %v %v, want %v", got, err, want)
	}
	for name, why := range map[string]string{
		"nosuch": "module nosuch is neither built in nor in modules.dep",
		"odd":    "soft dependency missing of module odd",
	} {
		if got, err := guestModules(dir, name); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v %v, want an error saying %q", name, got, err, why)
		}
	}
}
