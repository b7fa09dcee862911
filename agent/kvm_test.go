package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// These tests run real guests: qemu-system-x86_64 under TCG booting the
// host's /boot/vmlinuz-* with the test initramfs of testdata/mkguest.sh
// (busybox-static), whose /init prints "GNT-GUEST-UP <n>" on the serial
// console every 100 ms. They skip, saying what is missing, without QEMU.

// needGuest skips the test when what a real guest needs is absent, and
// returns the kernel and a freshly built initramfs.
func needGuest(t *testing.T) (kernel, initrd string) {
	t.Helper()
	for _, p := range []string{"qemu-system-x86_64", "qemu-img", "cpio"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("SKIP: %s is not installed (apt-get install qemu-system-x86 qemu-utils cpio busybox-static linux-image-amd64): real-guest tests of the kvm driver not run", p)
		}
	}
	kernel = probeKernel()
	if kernel == "" {
		t.Skip("SKIP: no kernel in /boot (apt-get install linux-image-amd64): real-guest tests of the kvm driver not run")
	}
	dir := t.TempDir()
	out, err := exec.Command("testdata/mkguest.sh", dir).CombinedOutput()
	if err != nil {
		t.Skipf("SKIP: building the test guest failed (busybox-static?): %v\n%s", err, out)
	}
	return kernel, filepath.Join(dir, "initramfs.cpio.gz")
}

// newTestKVM is a kvm driver on TCG in dir; every qemu it leaves is
// killed when the test ends.
func newTestKVM(t *testing.T, dir, shared string) *KVM {
	t.Helper()
	k, err := NewKVM(KVMConfig{Dir: dir, Node: "node-" + filepath.Base(dir), Addr: "127.0.0.1",
		FileStorageDir: filepath.Join(dir, "file-storage"), SharedFileStorageDir: shared, Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killAll(dir) })
	return k
}

// killAll kills the qemus whose pid files are under dir/run.
func killAll(dir string) {
	pids, _ := filepath.Glob(filepath.Join(dir, "run", "*", "qemu.pid"))
	for _, p := range pids {
		uuid := filepath.Base(filepath.Dir(p))
		if pid := qemuPID(p, uuid); pid != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			killQEMU(ctx, pid, uuid)
			cancel()
		}
	}
}

func guestInstance(kernel, initrd, template string, disks ...fsm.Disk) fsm.Instance {
	return fsm.Instance{
		Name: "guest1", UUID: "6b5a1c1e-0000-4000-8000-00000000c0de", DiskTemplate: template,
		MemoryMiB: 128, VCPUs: 1, OS: "noop", AdminState: "up", Disks: disks, Hypervisor: "kvm",
		HVParams: map[string]any{"kernel_path": kernel, "initrd_path": initrd, "kernel_args": "quiet", "root_path": ""},
	}
}

// serialLines connects to the instance's serial console and sends each
// line it prints on the returned channel until the test ends.
func serialLines(t *testing.T, path string) <-chan string {
	t.Helper()
	var c net.Conn
	var err error
	for i := 0; i < 100; i++ {
		if c, err = dialUnix(path); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("serial console %s: %v", path, err)
	}
	t.Cleanup(func() { c.Close() })
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			default:
			}
		}
	}()
	return ch
}

// dialUnix connects to a unix socket whose path may be too long for an
// address.
func dialUnix(path string) (net.Conn, error) {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return net.Dial("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/"+filepath.Base(path))
}

// waitCount waits for a counter line of the guest above min and returns
// its count.
func waitCount(t *testing.T, lines <-chan string, min int, within time.Duration) int {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serial console closed before GNT-GUEST-UP above %d", min)
			}
			if n, ok := guestCount(l); ok && n > min {
				return n
			}
		case <-deadline:
			t.Fatalf("no GNT-GUEST-UP above %d on the serial console within %s", min, within)
		}
	}
}

// commandLine is the driver's qemu command line of inst under TCG on a
// node of no configuration.
func commandLine(t *testing.T, inst fsm.Instance) []string {
	t.Helper()
	p, err := instanceParams(inst)
	if err != nil {
		t.Fatal(err)
	}
	args, err := (&KVM{cfg: KVMConfig{Node: "n1"}}).qemuArgs(inst, p, AccelTCG)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// guestCount is the count of a counter line of the test guest.
func guestCount(line string) (int, bool) {
	if f := strings.Fields(line); len(f) == 2 && strings.HasSuffix(f[0], "GNT-GUEST-UP") {
		n, err := strconv.Atoi(f[1])
		return n, err == nil
	}
	return 0, false
}

// expect checks a call's result: no error, and changed as given.
func expect(t *testing.T, what string, changed bool) func(Result, error) Result {
	return func(res Result, err error) Result {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Changed != changed {
			t.Fatalf("%s: changed %v, want %v (%s)", what, res.Changed, changed, res.Output)
		}
		return res
	}
}

// TestKVMLifecycle: a file-template guest with one disk boots and prints
// on its serial console; a second driver on the same directory (a
// restarted gntd) finds it running; stop, start, a killed qemu reported
// stopped, disk grow, and remove leaving no file.
func TestKVMLifecycle(t *testing.T) {
	kernel, initrd := needGuest(t)
	dir := t.TempDir()
	k := newTestKVM(t, dir, "")
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "file", fsm.Disk{UUID: disk0, SizeMiB: 16, Mode: "rw"})

	if _, err := k.Start(ctx, inst); !errors.Is(err, ErrState) {
		t.Fatalf("start without its disk: %v, want wrong state", err)
	}
	expect(t, "disk create", true)(k.DiskCreate(ctx, inst, disk0))
	expect(t, "disk create again", false)(k.DiskCreate(ctx, inst, disk0))
	path, _ := k.diskPath(inst, disk0)
	if fi, err := os.Stat(path); err != nil || fi.Size() != 16<<20 {
		t.Fatalf("disk file %s: %v %v", path, fi, err)
	}
	start := time.Now()
	res := expect(t, "start", true)(k.Start(ctx, inst))
	lines := serialLines(t, k.SerialPath(inst.UUID))
	n := waitCount(t, lines, -1, 2*time.Minute)
	t.Logf("booted (TCG) to the marker in %s: %s", time.Since(start).Round(time.Millisecond), res.Output)
	expect(t, "start again", false)(k.Start(ctx, inst))
	st, err := k.Status(ctx, inst)
	if err != nil || st.State != StateRunning || st.MemoryMiB != 128 || st.VCPUs != 1 || st.BootID == "" {
		t.Fatalf("status %+v %v", st, err)
	}
	if d, ok := st.Disk(disk0); !ok || !d.Attached || d.SizeMiB != 16 {
		t.Fatalf("disk status %+v", st.Disks)
	}

	// A restarted gntd: a new driver on the same directory.
	k2 := newTestKVM(t, dir, "")
	st2, err := k2.Status(ctx, inst)
	if err != nil || st2.State != StateRunning || st2.BootID != st.BootID {
		t.Fatalf("status after restart %+v %v, want running with boot id %s", st2, err, st.BootID)
	}
	waitCount(t, lines, n, 3*time.Minute) // a loaded machine slows a TCG guest down many times

	// Grow while it runs: QMP block_resize.
	grown := inst
	grown.Disks = []fsm.Disk{{UUID: disk0, SizeMiB: 32, Mode: "rw"}}
	expect(t, "disk grow (running)", true)(k2.DiskGrow(ctx, grown, disk0))
	expect(t, "disk grow again", false)(k2.DiskGrow(ctx, grown, disk0))
	if fi, _ := os.Stat(path); fi.Size() != 32<<20 {
		t.Fatalf("disk size after grow %d", fi.Size())
	}
	if _, err := k2.Remove(ctx, grown); !errors.Is(err, ErrState) {
		t.Fatalf("remove while running: %v", err)
	}

	// A graceful stop: the guest's acpid powers it off (when the test
	// guest could be built with the kernel's ACPI button module).
	res = expect(t, "stop (graceful)", true)(k2.Stop(ctx, grown, StopOptions{Timeout: time.Minute}))
	_, acpi := os.Stat(filepath.Join(filepath.Dir(initrd), "acpi"))
	if acpi == nil && res.Output != "shut down gracefully" {
		t.Fatalf("graceful stop: %s", res.Output)
	}
	t.Logf("stop: %s", res.Output)
	if st, _ := k2.Status(ctx, grown); st.State != StateStopped || st.BootID != "" {
		t.Fatalf("status after stop %+v", st)
	}
	expect(t, "stop again", false)(k2.Stop(ctx, grown, StopOptions{}))

	// kill -9 of qemu: the instance is reported stopped.
	expect(t, "start again", true)(k2.Start(ctx, grown))
	pid := k2.pid(inst.UUID)
	if pid == 0 {
		t.Fatal("no qemu after start")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(ctx, pid, inst.UUID)
	if st, _ := k2.Status(ctx, grown); st.State != StateStopped {
		t.Fatalf("status after kill -9 of qemu: %+v", st)
	}
	expect(t, "stop after kill", false)(k2.Stop(ctx, grown, StopOptions{}))

	// Hard reboot of a stopped instance starts it (as Ganeti does), once per op id.
	expect(t, "reboot", true)(k2.Reboot(ctx, grown, RebootOptions{OpID: "r1", Type: RebootHard}))
	expect(t, "reboot again", false)(k2.Reboot(ctx, grown, RebootOptions{OpID: "r1", Type: RebootHard}))
	expect(t, "force stop", true)(k2.Stop(ctx, grown, StopOptions{Force: true}))

	expect(t, "remove", true)(k2.Remove(ctx, grown))
	if _, err := k2.Status(ctx, grown); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status after remove: %v", err)
	}
	assertNoFiles(t, filepath.Join(dir, "file-storage"))
	assertNoFiles(t, filepath.Join(dir, "run"))
}

// assertNoFiles fails when dir holds anything.
func assertNoFiles(t *testing.T, dir string) {
	t.Helper()
	var left []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != dir {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Fatalf("files left under %s: %v", dir, left)
	}
}

// TestKVMHotplug: a disk created while the guest runs is hot-plugged and
// unplugged through QMP; a disk attached to the running guest cannot be
// removed.
func TestKVMHotplug(t *testing.T) {
	kernel, initrd := needGuest(t)
	dir := t.TempDir()
	k := newTestKVM(t, dir, "")
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "file")
	expect(t, "start diskless-so-far", true)(k.Start(ctx, inst))
	waitCount(t, serialLines(t, k.SerialPath(inst.UUID)), -1, 2*time.Minute)
	inst.Disks = []fsm.Disk{{UUID: disk1, SizeMiB: 8, Mode: "rw"}}
	expect(t, "disk create", true)(k.DiskCreate(ctx, inst, disk1))
	expect(t, "disk attach (hot-plug)", true)(k.DiskAttach(ctx, inst, disk1))
	expect(t, "disk attach again", false)(k.DiskAttach(ctx, inst, disk1))
	if _, err := k.DiskRemove(ctx, inst, disk1); !errors.Is(err, ErrState) {
		t.Fatalf("remove of an attached disk: %v", err)
	}
	var devs []struct {
		Name string `json:"name"`
	}
	if err := qmpDo(ctx, k.qmpPath(inst.UUID), func(q *qmpConn) error {
		return q.call(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &devs)
	}); err != nil || !strings.Contains(fmt.Sprint(devs), "dev-"+disk1) {
		t.Fatalf("qemu's devices after hot-plug: %v %v", devs, err)
	}
	expect(t, "disk detach (hot-unplug)", true)(k.DiskDetach(ctx, inst, disk1))
	expect(t, "disk remove", true)(k.DiskRemove(ctx, inst, disk1))
	expect(t, "disk remove again", false)(k.DiskRemove(ctx, inst, disk1))
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	expect(t, "remove", true)(k.Remove(ctx, inst))
	assertNoFiles(t, filepath.Join(dir, "file-storage"))
}

// migrationPair is two drivers, nodes a and b, sharing a sharedfile
// directory, a's handoffs delivered to b.
func migrationPair(t *testing.T) (src, dst *KVM) {
	t.Helper()
	root := t.TempDir()
	shared := filepath.Join(root, "shared")
	src = newTestKVM(t, filepath.Join(root, "a"), shared)
	dst = newTestKVM(t, filepath.Join(root, "b"), shared)
	src.SetSend(func(ctx context.Context, m Migration, h Handoff) error {
		_, err := dst.MigrateReceive(ctx, h)
		return err
	})
	return src, dst
}

// TestKVMMigrate: two nodes sharing a sharedfile directory; the guest
// live-migrates from one to the other through QEMU, its serial counter
// going on at the target; one qemu before and after.
func TestKVMMigrate(t *testing.T) {
	kernel, initrd := needGuest(t)
	src, dst := migrationPair(t)
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "sharedfile", fsm.Disk{UUID: disk0, SizeMiB: 8, Mode: "rw"})
	expect(t, "disk create", true)(src.DiskCreate(ctx, inst, disk0))
	expect(t, "start", true)(src.Start(ctx, inst))
	// A guest whose init has run for a few seconds (see TestKVMGuests).
	n := waitCount(t, serialLines(t, src.SerialPath(inst.UUID)), 30, 3*time.Minute)
	boot, _ := src.Status(ctx, inst)

	m := Migration{ID: "mig1", PeerNode: "b", Peer: "127.0.0.1:1811"}
	expect(t, "prepare", true)(dst.MigratePrepare(ctx, inst, Migration{ID: "mig1", PeerNode: "a"}))
	expect(t, "prepare again", false)(dst.MigratePrepare(ctx, inst, Migration{ID: "mig1", PeerNode: "a"}))
	res := expect(t, "send", true)(src.MigrateSend(ctx, inst, m))
	t.Logf("send: %s", res.Output)
	expect(t, "send again", false)(src.MigrateSend(ctx, inst, m))
	if _, err := src.MigrateAbort(ctx, inst, m); !errors.Is(err, ErrState) {
		t.Fatalf("abort on the source after send: %v", err)
	}
	expect(t, "finish", true)(dst.MigrateFinish(ctx, inst, m))
	expect(t, "finish again", false)(dst.MigrateFinish(ctx, inst, m))
	waitCount(t, serialLines(t, dst.SerialPath(inst.UUID)), n, 3*time.Minute) // a loaded machine slows a TCG guest down many times
	st, _ := dst.Status(ctx, inst)
	if st.State != StateRunning || st.BootID != boot.BootID {
		t.Fatalf("target after finish %+v, want running with boot id %s", st, boot.BootID)
	}
	if st, _ := src.Status(ctx, inst); st.State != StateStopped || src.pid(inst.UUID) != 0 {
		t.Fatalf("source after migration %+v (pid %d)", st, src.pid(inst.UUID))
	}
	// And back, aborted after preparing: the guest stays where it runs.
	back := Migration{ID: "mig2", PeerNode: "a", Peer: "127.0.0.1:1811"}
	expect(t, "prepare back", true)(src.MigratePrepare(ctx, inst, back))
	expect(t, "abort source", false)(dst.MigrateAbort(ctx, inst, back))
	expect(t, "abort target", true)(src.MigrateAbort(ctx, inst, back))
	if src.pid(inst.UUID) != 0 || dst.pid(inst.UUID) == 0 {
		t.Fatalf("after the abort: source pid %d, target pid %d; want only the target", src.pid(inst.UUID), dst.pid(inst.UUID))
	}
}

// TestQEMUMemory: under TCG qemu's RAM is the instance's memory plus a
// little, never a multiple of 256 KiB (QEMU 7.2 would then read its dirty
// bitmap 64 pages at a time and lose guest writes in live migrations) and a
// multiple of 8 KiB (QEMU rounds -m up to that); under KVM it is the
// instance's memory.
func TestQEMUMemory(t *testing.T) {
	for _, mib := range []int64{1, 64, 128, 256, 1000, 4096, 65536} {
		if got := QEMUMemory(mib, AccelKVM); got != strconv.FormatInt(mib, 10) {
			t.Errorf("%d MiB under KVM: -m %s", mib, got)
		}
		got := QEMUMemory(mib, AccelTCG)
		kib, err := strconv.ParseInt(strings.TrimSuffix(got, "k"), 10, 64)
		if err != nil || !strings.HasSuffix(got, "k") {
			t.Fatalf("%d MiB under TCG: -m %s, want KiB", mib, got)
		}
		if kib <= mib<<10 || kib >= mib<<10+256 || kib%256 == 0 || kib%8 != 0 {
			t.Errorf("%d MiB under TCG: -m %s", mib, got)
		}
	}
}

// TestKVMParams: unknown keys, values of the wrong kind and settings the
// driver does not honour are refused, each named; good values pass.
func TestKVMParams(t *testing.T) {
	for _, c := range []struct {
		hv   map[string]any
		want string // "" = accepted
	}{
		{map[string]any{}, ""},
		{map[string]any{"kernel_path": "/boot/x", "acpi": "false", "serial_speed": 115200.0, "kvm_flag": "disabled"}, ""},
		{map[string]any{"vnc_bind_address": ""}, ""},
		{map[string]any{"security_model": "none"}, ""},
		{map[string]any{"kernel_pth": "/x"}, `unknown hypervisor kvm parameter "kernel_pth"`},
		{map[string]any{"acpi": "maybe"}, "acpi: \"maybe\" is not a boolean"},
		{map[string]any{"serial_speed": -1.0}, "serial_speed: -1 is outside 1..4000000"},
		{map[string]any{"serial_speed": 1.5}, "serial_speed: 1.5 is not an integer"},
		{map[string]any{"disk_type": "scsi"}, `disk_type: "scsi" is not one of`},
		{map[string]any{"kvm_flag": true}, "kvm_flag: true is not a string"},
		{map[string]any{"kernel_path": "boot/x"}, `kernel_path: "boot/x" is not an absolute path`},
		{map[string]any{"vnc_bind_address": "0.0.0.0", "vnc_password_file": "/etc/gnt/vnc"}, ""},
		{map[string]any{"vnc_tls": true}, "vnc_tls=true needs vnc_bind_address"},
		{map[string]any{"vnc_bind_address": "::1", "vnc_tls": true}, ""},
		{map[string]any{"vnc_bind_address": "::1", "vnc_tls": true, "vnc_x509_verify": "true"}, "vnc_x509_verify=true needs vnc_x509_path"},
		{map[string]any{"vnc_bind_address": "::1", "vnc_tls": true, "vnc_x509_path": "/etc/gnt/vnc", "vnc_x509_verify": true}, ""},
		{map[string]any{"vnc_x509_path": "etc/gnt/vnc"}, `vnc_x509_path: "etc/gnt/vnc" is not an absolute path`},
		{map[string]any{"kernel_args": "a\nb"}, "kernel_args: value holds a NUL or line break"},
		{map[string]any{"kernel_args": strings.Repeat("x", 5000)}, "longer than 1024"},
	} {
		_, err := parseKVMParams(c.hv)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.hv, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want invalid %q", c.hv, err, c.want)
		}
	}
	inst := fsm.Instance{Name: "x", UUID: "u1", Hypervisor: "fake"}
	if _, err := instanceParams(inst); err == nil || !strings.Contains(err.Error(), "hypervisor fake") {
		t.Errorf("instance of another hypervisor: %v", err)
	}
}

// TestKVMRefusals: what the driver cannot do is refused before anything
// changes, without QEMU.
func TestKVMRefusals(t *testing.T) {
	dir := t.TempDir()
	k, err := NewKVM(KVMConfig{Dir: dir, Accel: AccelTCG, FileStorageDir: filepath.Join(dir, "fs")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst := fsm.Instance{Name: "x", UUID: "u1", DiskTemplate: "plain", Disks: []fsm.Disk{{UUID: disk0, SizeMiB: 8}}, MemoryMiB: 64, VCPUs: 1}
	if _, err := k.DiskCreate(ctx, inst, disk0); !errors.Is(err, ErrNotSupported) {
		t.Errorf("plain disk: %v", err)
	}
	inst.DiskTemplate = "sharedfile"
	if _, err := k.DiskCreate(ctx, inst, disk0); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "no sharedfile storage directory") {
		t.Errorf("sharedfile without its directory: %v", err)
	}
	inst.DiskTemplate = "file"
	inst.HVParams = map[string]any{"bogus": 1.0}
	expect(t, "disk create", true)(k.DiskCreate(ctx, inst, disk0))
	if _, err := k.Start(ctx, inst); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("start with an unknown hvparam: %v", err)
	}
	inst.HVParams = nil
	inst.NICs = []fsm.NIC{{MAC: "aa:00:00:00:00:01", Mode: fsm.NICModeOpenVSwitch, Link: "ovs0"}}
	if _, err := k.Start(ctx, inst); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "openvswitch") {
		t.Errorf("start with an openvswitch NIC: %v", err)
	}
	inst.NICs = nil
	if st, err := k.Status(ctx, inst); err != nil || st.State != StateStopped {
		t.Errorf("status after the refusals: %+v %v", st, err)
	}
	inst.OS = "debootstrap"
	if _, err := k.InstallOS(ctx, inst, "op1"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("install of an OS: %v", err)
	}
	inst.OS = "noop"
	expect(t, "install noop", true)(k.InstallOS(ctx, inst, "op1"))
	expect(t, "install noop again", false)(k.InstallOS(ctx, inst, "op1"))
	expect(t, "remove", true)(k.Remove(ctx, inst))
	assertNoFiles(t, filepath.Join(dir, "fs"))
}

// FuzzKVMParams: no hvparams map crashes the check, and what it accepts
// has every known key, each of its kind.
func FuzzKVMParams(f *testing.F) {
	for _, s := range []string{`{}`, `{"kernel_path":"/boot/x","acpi":"false","serial_speed":115200}`, `{"kvm_flag":"enabled"}`,
		`{"bogus":1}`, `{"serial_speed":-1}`, `{"vnc_bind_address":"0.0.0.0"}`, `{"disk_type":"ide","migration_downtime":"30"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var hv map[string]any
		if json.Unmarshal(b, &hv) != nil {
			return
		}
		p, err := parseKVMParams(hv)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%s: error %v is not invalid", b, err)
			}
			return
		}
		for _, def := range fsm.HVParamDefs(fsm.HVKVM) {
			v, ok := p[def.Key]
			if !ok {
				t.Fatalf("%s: accepted without %s", b, def.Key)
			}
			if fmt.Sprintf("%T", v) != fmt.Sprintf("%T", def.Default) {
				t.Fatalf("%s: %s is %T, want %T", b, def.Key, v, def.Default)
			}
			if kvmNotYet[def.Key] && v != def.Default {
				t.Fatalf("%s: %s accepted as %v, not its default", b, def.Key, v)
			}
		}
	})
}

// TestProbeAccel: the accelerator probe says KVM only when the probe guest
// prints the kernel's first line in time; a guest that prints nothing
// (KVM guests hang), one that fails, a missing device and a missing
// kernel each say TCG, with why. The "qemu" here are shell scripts.
func TestProbeAccel(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dev := filepath.Join(dir, "kvm")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name, qemu, dev, kernel string
		ok                      bool
		why                     string
	}{
		{"boots", script("boots", `echo "[    0.000000] Linux version 6.1.0"; sleep 30`), dev, "/k", true, "booted under KVM"},
		{"hangs", script("hangs", `sleep 30`), dev, "/k", false, "printed nothing under KVM within 1s"},
		{"fails", script("fails", `echo "qemu: could not access KVM kernel module" >&2; exit 1`), dev, "/k", false, "could not access KVM kernel module"},
		{"no device", script("nodev", `exit 0`), filepath.Join(dir, "nosuch"), "/k", false, "no such file"},
		{"no kernel", script("nokernel", `exit 0`), dev, "", false, "no kernel in /boot"},
	} {
		ok, why := probeAccel(ctx, c.qemu, c.dev, c.kernel, time.Second)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("%s: %v %q, want %v with %q", c.name, ok, why, c.ok, c.why)
		}
		if left := processesRunning(c.qemu); len(left) > 0 {
			t.Errorf("%s: the probe guest was left running: pids %v", c.name, left)
		}
	}
}

// processesRunning lists the live processes whose command line names
// path.
func processesRunning(path string) []string {
	var out []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), path) {
			continue
		}
		pid := filepath.Base(filepath.Dir(f))
		if stat, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] != 'Z' {
				out = append(out, pid)
			}
		}
	}
	return out
}

// TestKVMParamsEachActs: every key of fsm's kvm table that the driver
// does not refuse changes the qemu command line (for a guest booted from
// a kernel or from its disks), or is one the driver acts on elsewhere
// (kvmActsElsewhere); a key added to fsm's table that the driver forgot
// fails here rather than being silently dropped.
func TestKVMParamsEachActs(t *testing.T) {
	dir := t.TempDir()
	kernel, other := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "other")
	for _, f := range []string{kernel, other} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Where the keys not on the command line act.
	kvmActsElsewhere := map[string]string{
		"kvm_flag": "accelFor", "migration_port": "migrationPort",
		"migration_bandwidth": "MigrateSend", "migration_downtime": "MigrateSend",
		"security_model": "runAs", "security_domain": "runAs",
		"vnc_bind_address": "planVNC", "vnc_password_file": "planVNC", "vnc_tls": "planVNC",
		"vnc_x509_path": "planVNC", "vnc_x509_verify": "planVNC", // TestKVMVNC
	}
	k := &KVM{cfg: KVMConfig{Node: "n1", FileStorageDir: dir}}
	inst := fsm.Instance{Name: "i1", UUID: "u1", MemoryMiB: 64, VCPUs: 1, DiskTemplate: "file", Disks: []fsm.Disk{{UUID: disk0, SizeMiB: 8}},
		NICs: []fsm.NIC{{MAC: "aa:00:00:00:00:01", Link: "br0"}}}
	// args is the command line, or the refusal of the parameters.
	args := func(hv map[string]any) string {
		inst.HVParams = hv
		p, err := instanceParams(inst)
		if err != nil {
			t.Fatalf("%v: %v", hv, err)
		}
		a, err := k.qemuArgs(inst, p, AccelTCG)
		if err != nil {
			return "refused: " + err.Error()
		}
		return strings.Join(a, " ")
	}
	for _, d := range fsm.HVParamDefs(fsm.HVKVM) {
		if kvmNotYet[d.Key] || kvmActsElsewhere[d.Key] == "planVNC" {
			// planVNC's arguments come after qemuArgs' (launch);
			// TestKVMVNC sees each of them act on a real qemu.
			continue
		}
		var alt any
		switch d.Kind {
		case fsm.KindBool:
			alt = !d.Default.(bool)
		case fsm.KindInt:
			alt = d.Default.(float64) + 1
		case fsm.KindEnum:
			for _, e := range d.Enum {
				if e != d.Default {
					alt = e
					break
				}
			}
		default:
			alt = other
			switch d.Key {
			case "security_domain":
				alt = "nobody" // a user name, not a path
			case "vnc_bind_address":
				alt = "127.0.0.1" // an address
			}
		}
		acted := false
		for _, base := range []map[string]any{{}, {"kernel_path": kernel, "initrd_path": kernel}} {
			changed := map[string]any{d.Key: alt}
			for bk, bv := range base {
				if bk != d.Key {
					changed[bk] = bv
				}
			}
			if a := args(changed); a != args(base) && (!strings.HasPrefix(a, "refused: ") || strings.Contains(a, d.Key)) {
				acted = true
			}
		}
		if !acted && kvmActsElsewhere[d.Key] == "" {
			t.Errorf("hvparam %s=%v does not change the qemu command line and is not listed as acting elsewhere", d.Key, alt)
		}
		if acted && kvmActsElsewhere[d.Key] != "" {
			t.Errorf("hvparam %s changes the command line; drop it from kvmActsElsewhere", d.Key)
		}
	}
}

// fakeLVM is an in-memory volume group for the kvm driver's plain disks:
// it answers lvs and carries out lvcreate, lvextend, lvremove and
// lvchange as LVM would, recording each command.
type fakeLVM struct {
	mu      sync.Mutex
	vg      string
	lvs     map[string]*fakeLV
	calls   []string
	lvsRuns int // how many times lvs ran
}

type fakeLV struct {
	size   int64
	active bool
}

func (f *fakeLVM) run(_ context.Context, tool string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tool == "lvs" {
		f.lvsRuns++
	}
	last := args[len(args)-1]
	vg, lv, _ := strings.Cut(last, "/")
	if vg != f.vg {
		return nil, fmt.Errorf("%s: volume group %q not found", tool, vg)
	}
	if c := lvmCall(tool, args); c != "" {
		f.calls = append(f.calls, c)
	}
	size := func() int64 {
		for i, a := range args {
			if a == "-L" {
				n, _ := strconv.ParseInt(strings.TrimSuffix(args[i+1], "m"), 10, 64)
				return n
			}
		}
		return -1
	}
	switch tool {
	case "lvs":
		var names []string
		for n := range f.lvs {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			attr := "-wi-a-----"
			if !f.lvs[n].active {
				attr = "-wi-------"
			}
			fmt.Fprintf(&b, "  %s|%d.00|%s\n", n, f.lvs[n].size, attr)
		}
		return []byte(b.String()), nil
	case "lvcreate":
		for i, a := range args {
			if a == "-n" {
				lv = args[i+1]
			}
		}
		if f.lvs[lv] != nil {
			return nil, fmt.Errorf("lvcreate: %s already exists", lv)
		}
		f.lvs[lv] = &fakeLV{size: size(), active: true}
	case "lvextend":
		if f.lvs[lv] == nil || size() <= f.lvs[lv].size {
			return nil, fmt.Errorf("lvextend: cannot extend %s to %d", lv, size())
		}
		f.lvs[lv].size = size()
	case "lvremove":
		if f.lvs[lv] == nil {
			return nil, fmt.Errorf("lvremove: %s not found", lv)
		}
		delete(f.lvs, lv)
	case "lvchange":
		if f.lvs[lv] == nil {
			return nil, fmt.Errorf("lvchange: %s not found", lv)
		}
		f.lvs[lv].active = args[0] == "-ay"
	default:
		return nil, fmt.Errorf("unexpected %s", tool)
	}
	return nil, nil
}

// took returns the commands run since the last call.
func (f *fakeLVM) took() (out []string) {
	f.mu.Lock()
	out, f.calls = f.calls, nil
	f.mu.Unlock()
	return out
}

// lvmCall is how the plain-disk tests record an LVM command: the tool,
// its first argument and the logical volume ("lvcreate <lv>" for
// lvcreate); "" for lvs, which only reads.
func lvmCall(tool string, args []string) string {
	if tool == "lvs" || len(args) == 0 {
		return ""
	}
	if tool == "lvcreate" {
		for i, a := range args[:len(args)-1] {
			if a == "-n" {
				return "lvcreate " + args[i+1]
			}
		}
	}
	_, lv, _ := strings.Cut(args[len(args)-1], "/")
	return tool + " " + args[0] + " " + lv
}

// lvmRecorder runs LVM commands with run and records them as the fake
// volume group does (lvmCall), so that a real volume group's run can be
// checked against the same expected commands.
type lvmRecorder struct {
	mu    sync.Mutex
	run   LVMRunner
	calls []string
}

// Run records the command and runs it.
func (r *lvmRecorder) Run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	r.mu.Lock()
	if c := lvmCall(tool, args); c != "" {
		r.calls = append(r.calls, c)
	}
	r.mu.Unlock()
	return r.run(ctx, tool, args...)
}

// took returns the commands run since the last call.
func (r *lvmRecorder) took() (out []string) {
	r.mu.Lock()
	out, r.calls = r.calls, nil
	r.mu.Unlock()
	return out
}

// TestKVMPlainDisks drives the plain disks of the kvm driver against an
// in-memory volume group (plainDiskSteps); a node without a volume group
// refuses plain disks, saying so. TestInGuestLVM runs the same steps
// against a real volume group.
func TestKVMPlainDisks(t *testing.T) {
	lvm := &fakeLVM{vg: "testvg", lvs: map[string]*fakeLV{}}
	dir := t.TempDir()
	k, err := NewKVM(KVMConfig{Dir: dir, Node: "n1", Addr: "127.0.0.1", VolumeGroup: "testvg", LVM: lvm.run, Accel: AccelTCG, QEMU: "/nonexistent/qemu"})
	if err != nil {
		t.Fatal(err)
	}
	d := plainDiskSteps(t, k, "testvg", lvm.took, false)
	if len(lvm.lvs) != 0 {
		t.Errorf("volumes left: %v", lvm.lvs)
	}

	// A node without a volume group refuses plain disks, saying so.
	k2, err := NewKVM(KVMConfig{Dir: t.TempDir(), Node: "n2", LVM: lvm.run, Accel: AccelTCG, QEMU: "/nonexistent/qemu"})
	if err != nil {
		t.Fatal(err)
	}
	inst := guestInstance("", "", fsm.DTPlain, d)
	if _, err := k2.DiskCreate(context.Background(), inst, d.UUID); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "no volume group is configured on node n2") {
		t.Errorf("plain disk without a volume group: %v", err)
	}
}

// TestKVMPlainPoll: a status poll (List, Status) lists the volume group
// once however many plain disks its instances have, and says of each disk
// what asking lvs of it alone says; a start's activation of its volumes
// lists it once too; a failing lvs is run once, and the poll then lists
// no plain disk; removing an instance lists it once for all its disks.
func TestKVMPlainPoll(t *testing.T) {
	ctx := context.Background()
	lvm := &fakeLVM{vg: "testvg", lvs: map[string]*fakeLV{"other": {size: 8}}}
	k, err := NewKVM(KVMConfig{Dir: t.TempDir(), Node: "n1", Addr: "127.0.0.1", VolumeGroup: "testvg", LVM: lvm.run, Accel: AccelTCG, QEMU: "/nonexistent/qemu"})
	if err != nil {
		t.Fatal(err)
	}
	disks := func(n int, first int64) (ds []fsm.Disk) {
		for i := range n {
			ds = append(ds, fsm.Disk{UUID: fmt.Sprintf("0d15c000-0000-4000-8000-%012d", first+int64(i)), SizeMiB: first + int64(i), Mode: "rw"})
		}
		return ds
	}
	a := guestInstance("", "", fsm.DTPlain, disks(5, 64)...)
	b := guestInstance("", "", fsm.DTPlain, disks(3, 200)...)
	b.Name, b.UUID = "guest2", "6b5a1c1e-0000-4000-8000-00000000c0df"
	for _, inst := range []fsm.Instance{a, b} {
		for _, d := range inst.Disks {
			if _, err := k.DiskCreate(ctx, inst, d.UUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	attached := map[string]bool{a.Disks[1].UUID: true, b.Disks[0].UUID: true}
	for _, inst := range []fsm.Instance{a, b} {
		for _, d := range inst.Disks {
			if attached[d.UUID] {
				if _, err := k.DiskAttach(ctx, inst, d.UUID); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	lvm.mu.Lock()
	delete(lvm.lvs, lvName(b.UUID, b.Disks[2].UUID)) // gone behind gnt's back
	lvm.lvs[lvName(b.UUID, b.Disks[0].UUID)].size = 300
	lvm.mu.Unlock()

	// What each disk's own lvs says, as a status lists it.
	alone := func(inst fsm.Instance) []DiskStatus {
		out := []DiskStatus{}
		for _, d := range inst.Disks {
			p, _ := k.diskPath(inst, d.UUID)
			sz, err := k.storageSize(ctx, inst, d.UUID, p)
			if err != nil {
				t.Fatal(err)
			}
			if sz >= 0 {
				out = append(out, DiskStatus{UUID: d.UUID, SizeMiB: sz, Attached: attached[d.UUID], Generation: "created", Path: p})
			}
		}
		return out
	}
	wantA, wantB := alone(a), alone(b)
	if len(wantA) != 5 || wantA[4].SizeMiB != 68 || len(wantB) != 2 || wantB[0].SizeMiB != 300 {
		t.Fatalf("disks alone: %+v %+v", wantA, wantB)
	}
	runs := func() int {
		lvm.mu.Lock()
		defer lvm.mu.Unlock()
		n := lvm.lvsRuns
		lvm.lvsRuns = 0
		return n
	}
	runs()
	sts, err := k.List(ctx)
	if err != nil || len(sts) != 2 {
		t.Fatalf("list: %+v %v", sts, err)
	}
	if n := runs(); n != 1 {
		t.Errorf("list of 2 instances with 8 plain disks ran lvs %d times, want 1", n)
	}
	for i, want := range [][]DiskStatus{wantA, wantB} {
		if !reflect.DeepEqual(sts[i].Disks, want) {
			t.Errorf("list: %s's disks %+v, want %+v", sts[i].Name, sts[i].Disks, want)
		}
	}
	st, err := k.Status(ctx, a)
	if err != nil || !reflect.DeepEqual(st.Disks, wantA) {
		t.Errorf("status: %+v %v, want disks %+v", st.Disks, err, wantA)
	}
	if n := runs(); n != 1 {
		t.Errorf("status of an instance with 5 plain disks ran lvs %d times, want 1", n)
	}

	// A start activates every inactive volume of its instance from one
	// listing too.
	lvm.mu.Lock()
	for _, d := range a.Disks[2:4] {
		lvm.lvs[lvName(a.UUID, d.UUID)].active = false
	}
	lvm.mu.Unlock()
	lvm.took()
	if err := k.activatePlain(ctx, OpStart, a); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range a.Disks[2:4] {
		want = append(want, "lvchange -ay "+lvName(a.UUID, d.UUID))
	}
	if got := lvm.took(); !reflect.DeepEqual(got, want) {
		t.Errorf("activating the instance's volumes ran %q, want %q", got, want)
	}
	if n := runs(); n != 1 {
		t.Errorf("activating 5 plain disks ran lvs %d times, want 1", n)
	}

	lvm.mu.Lock()
	lvm.vg = "elsewhere" // lvs fails
	lvm.mu.Unlock()
	sts, err = k.List(ctx)
	if err != nil || len(sts) != 2 || len(sts[0].Disks)+len(sts[1].Disks) != 0 {
		t.Errorf("list with lvs failing: %+v %v, want both instances without disks", sts, err)
	}
	if n := runs(); n != 1 {
		t.Errorf("list with lvs failing ran it %d times, want 1", n)
	}

	// Removing an instance lists the volume group once for all its
	// disks, and removes the volumes listed (not the one gone).
	lvm.mu.Lock()
	lvm.vg = "testvg"
	lvm.mu.Unlock()
	lvm.took()
	if _, err := k.Remove(ctx, b); err != nil {
		t.Fatal(err)
	}
	want = []string{"lvremove -y " + lvName(b.UUID, b.Disks[0].UUID), "lvremove -y " + lvName(b.UUID, b.Disks[1].UUID)}
	got := lvm.took()
	slices.Sort(got)
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("removing the instance ran %q, want %q", got, want)
	}
	if n := runs(); n != 1 {
		t.Errorf("removing an instance with 3 plain disks ran lvs %d times, want 1", n)
	}
}

// plainDiskSteps drives the plain disks of k (volume group vg, no qemu)
// through their life: each operation runs the LVM command it needs, once
// (a repeat changes nothing and runs none: took returns the commands run
// since its last call, as lvmCall writes them), lvs then shows the
// volume's size and activation as the operation left them, and moving a
// plain instance to another node is refused naming why; at the end no
// volume is left. With devices, the volume's device node /dev/<vg>/<lv>
// must exist exactly while it is active (a real volume group's). It
// returns the disk it used.
func plainDiskSteps(t *testing.T, k *KVM, vg string, took func() []string, devices bool) fsm.Disk {
	t.Helper()
	ctx := context.Background()
	d := fsm.Disk{UUID: "0d15c000-0000-4000-8000-000000000001", SizeMiB: 64, Mode: "rw"}
	inst := guestInstance("", "", fsm.DTPlain, d)
	lv := lvName(inst.UUID, d.UUID)
	dev := "/dev/" + vg + "/" + lv
	step := func(what string, r Result, err error, changed bool, calls ...string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if r.Changed != changed {
			t.Errorf("%s: changed %v, want %v (%s)", what, r.Changed, changed, r.Output)
		}
		if got := took(); strings.Join(got, ";") != strings.Join(calls, ";") {
			t.Errorf("%s: ran %q, want %q", what, got, calls)
		}
	}
	state := func(what string, size int64, active bool) {
		t.Helper()
		sz, act, err := k.lvState(ctx, vg, lv)
		if err != nil || sz != size || (size >= 0 && act != active) {
			t.Errorf("after %s: lvs says %d MiB, active %v (%v); want %d MiB, active %v", what, sz, act, err, size, active)
		}
		if !devices {
			return
		}
		if _, err := os.Stat(dev); (err == nil) != (size >= 0 && active) {
			t.Errorf("after %s: device %s: %v; want it there exactly while the volume is active", what, dev, err)
		}
	}
	r, err := k.DiskCreate(ctx, inst, d.UUID)
	step("create", r, err, true, "lvcreate "+lv)
	state("create", 64, true)
	r, err = k.DiskCreate(ctx, inst, d.UUID)
	step("create again", r, err, false)
	st, err := k.Status(ctx, inst)
	if err != nil || len(st.Disks) != 1 || st.Disks[0].SizeMiB != 64 || st.Disks[0].Path != dev {
		t.Fatalf("status: %+v %v", st, err)
	}
	grown := inst
	grown.Disks = []fsm.Disk{{UUID: d.UUID, SizeMiB: 128, Mode: "rw"}}
	r, err = k.DiskGrow(ctx, grown, d.UUID)
	step("grow", r, err, true, "lvextend -L "+lv)
	state("grow", 128, true)
	r, err = k.DiskGrow(ctx, grown, d.UUID)
	step("grow again", r, err, false)
	r, err = k.DiskAttach(ctx, grown, d.UUID)
	step("attach an active volume", r, err, true)
	r, err = k.DiskDetach(ctx, grown, d.UUID)
	step("detach (deactivates)", r, err, true, "lvchange -an "+lv)
	state("detach", 128, false)
	r, err = k.DiskAttach(ctx, grown, d.UUID)
	step("attach (activates)", r, err, true, "lvchange -ay "+lv)
	state("attach", 128, true)
	for _, mig := range []func() (Result, error){
		func() (Result, error) { return k.MigratePrepare(ctx, grown, Migration{ID: "m1"}) },
		func() (Result, error) { return k.MigrateSend(ctx, grown, Migration{ID: "m1", Peer: "127.0.0.2:1811"}) },
	} {
		if _, err := mig(); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "local to their node") {
			t.Errorf("migrating a plain instance: %v, want not supported naming why", err)
		}
	}
	r, err = k.DiskRemove(ctx, grown, d.UUID)
	step("remove", r, err, true, "lvremove -y "+lv)
	state("remove", -1, false)
	r, err = k.DiskRemove(ctx, grown, d.UUID)
	step("remove again", r, err, false)
	r, err = k.DiskCreate(ctx, inst, d.UUID)
	step("create for the instance's removal", r, err, true, "lvcreate "+lv)
	state("create for the instance's removal", 64, true)
	r, err = k.Remove(ctx, inst)
	step("remove the instance", r, err, true, "lvremove -y "+lv)
	state("the instance's removal", -1, false)
	return d
}

// needVG skips the test, saying why, when a volume group cannot be made
// here on a loop device (lvm2 and losetup installed, root, loop
// devices); otherwise it returns the name of a fresh volume group of
// size MiB on a sparse file, and its physical volume, torn down when the
// test ends, whatever its outcome. Its logical volumes can be activated
// only where the kernel has device-mapper (needDeviceMapper).
func needVG(t *testing.T, size int64) (vg, pv string) {
	t.Helper()
	for _, p := range []string{"lvcreate", "vgcreate", "pvcreate", "losetup"} {
		if _, err := exec.LookPath(p); err != nil {
			if _, err := os.Stat("/sbin/" + p); err != nil {
				t.Skipf("SKIP: %s is not installed (apt-get install lvm2 mount): LVM tests not run", p)
			}
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIP: not root: LVM on a loop device needs root; LVM tests not run")
	}
	img := filepath.Join(t.TempDir(), "pv.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("SKIP: no loop device (losetup -f --show: %v %s): LVM tests not run", err, out)
	}
	loop := strings.TrimSpace(string(out))
	vg = fmt.Sprintf("gnttest%d", os.Getpid())
	run := func(name string, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		run("vgremove", "-f", "-y", vg)
		run("pvremove", "-f", "-y", loop)
		run("losetup", "-d", loop)
	})
	if err := run("pvcreate", "-q", "-y", loop); err != nil {
		t.Fatal(err)
	}
	if err := run("vgcreate", "-q", "-y", vg, loop); err != nil {
		t.Fatal(err)
	}
	return vg, loop
}

// needDeviceMapper skips the test, saying why, when the kernel has no
// device-mapper: logical volumes cannot be activated.
func needDeviceMapper(t *testing.T) {
	t.Helper()
	if !deviceMapper() {
		out, err := exec.Command("modprobe", "dm_mod").CombinedOutput()
		if !deviceMapper() {
			t.Skipf("SKIP: the kernel has no device-mapper (no device-mapper in /proc/misc; modprobe dm_mod: %v %s): logical volumes cannot be activated here; plain-disk guest test of the kvm driver not run", err, strings.TrimSpace(string(out)))
		}
	}
}

// TestStorageRealVG: the node's storage listing reads a real volume group
// and its physical volume on a loop device (storageSteps).
func TestStorageRealVG(t *testing.T) {
	vg, pv := needVG(t, 64)
	storageSteps(t, vg, pv, 64)
}

// storageSteps checks the node's storage report and repairs against the
// real volume group vg on its one physical volume pv of about size MiB:
// the listing reads both (size, free, allocatable) from vgs and pvs;
// modify-storage's pvchange -x n makes the volume not allocatable, which
// the next listing shows (placement then stops counting its free space),
// and -x y makes it allocatable again; repair-storage's vgreduce
// --removemissing on the healthy group succeeds and leaves it whole.
func storageSteps(t *testing.T, vg, pv string, size int64) {
	t.Helper()
	s := Storage{}
	ctx := context.Background()
	find := func(typ, name string) StorageUnit {
		t.Helper()
		rep, err := s.List(ctx, "")
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("list: %v %v", err, rep.Errors)
		}
		for _, u := range rep.Units {
			if u.Type == typ && u.Name == name {
				return u
			}
		}
		t.Fatalf("no %s %s in %+v", typ, name, rep.Units)
		return StorageUnit{}
	}
	// LVM keeps some of the volume for its metadata.
	if u := find(StorageLVMVG, vg); u.SizeMiB <= size-8 || u.SizeMiB > size || u.FreeMiB != u.SizeMiB || u.UsedMiB != 0 || !u.Allocatable {
		t.Errorf("volume group: %+v", u)
	}
	if u := find(StorageLVMPV, pv); u.VG != vg || !u.Allocatable || u.SizeMiB <= size-8 || u.SizeMiB > size || u.FreeMiB != u.SizeMiB {
		t.Errorf("physical volume: %+v", u)
	}
	if _, err := s.ModifyPV(ctx, pv, false); err != nil {
		t.Fatal(err)
	}
	if u := find(StorageLVMPV, pv); u.Allocatable {
		t.Errorf("physical volume after pvchange -x n: %+v", u)
	}
	if _, err := s.ModifyPV(ctx, pv, true); err != nil {
		t.Fatal(err)
	}
	if u := find(StorageLVMPV, pv); !u.Allocatable {
		t.Errorf("physical volume after pvchange -x y: %+v", u)
	}
	if out, err := s.RepairVG(ctx, vg); err != nil {
		t.Fatalf("repair-storage: %v %s", err, out)
	}
	if u := find(StorageLVMPV, pv); u.VG != vg || !u.Allocatable {
		t.Errorf("physical volume after repair: %+v", u)
	}
}

// TestKVMPlainGuest: with a volume group on a loop device, the kvm driver
// runs a real guest on a plain disk (plainQEMUSteps), waiting for its
// marker on the serial console.
func TestKVMPlainGuest(t *testing.T) {
	needDeviceMapper(t)
	kernel, initrd := needGuest(t)
	vg, _ := needVG(t, 256)
	dir := t.TempDir()
	k, err := NewKVM(KVMConfig{Dir: dir, Node: "n1", Addr: "127.0.0.1", VolumeGroup: vg, Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killAll(dir) })
	plainQEMUSteps(t, k, vg, kernel, initrd, true)
}

// plainQEMUSteps: the kvm driver k makes a plain disk (a logical volume
// in vg), starts qemu with it attached (QMP query-block shows qemu has
// the volume's device open, raw), grows it while qemu runs (lvextend,
// then QMP block_resize, which succeeds; query-block shows the new size,
// which qemu reads from the device), stops qemu,
// deactivates and removes the volume, leaving none behind. With serial,
// it waits for the guest's marker on its serial console before growing.
func plainQEMUSteps(t *testing.T, k *KVM, vg, kernel, initrd string, serial bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := fsm.Disk{UUID: "0d15c000-0000-4000-8000-000000000002", SizeMiB: 32, Mode: "rw"}
	inst := guestInstance(kernel, initrd, fsm.DTPlain, d)
	if _, err := k.DiskCreate(ctx, inst, d.UUID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/" + vg + "/" + lvName(inst.UUID, d.UUID)); err != nil {
		t.Fatalf("the logical volume has no device: %v", err)
	}
	if _, err := k.Start(ctx, inst); err != nil {
		t.Fatal(err)
	}
	dev := "/dev/" + vg + "/" + lvName(inst.UUID, d.UUID)
	if drv, file, size := qemuDrive(t, k, inst.UUID, d.UUID); drv != "raw" || file != dev || size != 32<<20 {
		t.Errorf("QEMU's drive: %s %s of %d bytes, want raw %s of 32 MiB", drv, file, size, dev)
	}
	if serial {
		lines := serialLines(t, k.SerialPath(inst.UUID))
		waitCount(t, lines, 1, 3*time.Minute)
	}
	grown := inst
	grown.Disks = []fsm.Disk{{UUID: d.UUID, SizeMiB: 64, Mode: "rw"}}
	if r, err := k.DiskGrow(ctx, grown, d.UUID); err != nil || !r.Changed {
		t.Fatalf("grow while running: %+v %v", r, err)
	}
	if sz, _, err := k.lvState(ctx, vg, lvName(inst.UUID, d.UUID)); err != nil || sz != 64 {
		t.Errorf("volume after growing: %d MiB, %v; want 64", sz, err)
	}
	if _, _, size := qemuDrive(t, k, inst.UUID, d.UUID); size != 64<<20 {
		t.Errorf("QEMU's drive after growing: %d bytes, want 64 MiB", size)
	}
	if _, err := k.Stop(ctx, grown, StopOptions{Timeout: 10 * time.Second, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.DiskDetach(ctx, grown, d.UUID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Remove(ctx, grown); err != nil {
		t.Fatal(err)
	}
	if sz, _, err := k.lvState(ctx, vg, lvName(inst.UUID, d.UUID)); err != nil || sz != -1 {
		t.Fatalf("volume left after remove: %d MiB, %v", sz, err)
	}
}

// deviceMapper tells whether the kernel has device-mapper, which LVM
// needs to activate logical volumes (its misc device is registered).
func deviceMapper() bool {
	b, err := os.ReadFile("/proc/misc")
	return err == nil && strings.Contains(string(b), " device-mapper\n")
}
