package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/agent"
	"github.com/gnt-cluster/gnt/fsm"
)

// TestBenchKVM puts gnt's operations on real guests beside the same done
// with bare QEMU in the same run (a qemu the benchmark starts and drives
// through QMP itself), alternating, so the difference is what gnt adds:
// guest start (job submitted to the marker on the serial console) and
// graceful stop; live migration of a 256 MiB guest between two nodes
// (the job's time, QEMU's total time and downtime); failover after a
// kill -9 of the qemu with its node dead (harep with the failover
// autorepair tag on a sharedfile instance), from the kill to the marker
// on the other node, beside a kill -9 and a new qemu on the same disk. It
// prints figures and asserts only that the work was done.
// GNT_BENCH_KVM_ROUNDS (default 3) sets the rounds of start/stop and of
// migrations (two per round, there and back); GNT_BENCH_KVM_ACCEL=tcg or
// kvm forces the accelerator (default: the nodes probe KVM, as gntd does).
func TestBenchKVM(t *testing.T) {
	benchOnly(t)
	kernel, initrd := needKVMGuest(t)
	rounds := benchInts(t, "GNT_BENCH_KVM_ROUNDS", "3")[0]
	var accelArgs []string
	if a := os.Getenv("GNT_BENCH_KVM_ACCEL"); a != "" {
		accelArgs = []string{"--kvm-accel", a}
	}
	shared := t.TempDir()
	c := NewCluster(t, ClusterOptions{Candidates: 3,
		ExtraArgs: append([]string{"--hypervisor", "kvm", "--shared-file-storage-dir", shared}, accelArgs...)})
	t.Cleanup(func() { killQEMUs(c) })
	leader := c.WaitLeader(30 * time.Second)
	for _, m := range c.Members {
		c.WaitAgent(m, 2*time.Minute)
	}
	fol := c.Followers(leader)
	a, b := fol[0], fol[1]
	if out, code := c.GNTExit("cluster", "modify", "--maintenance-interval", "2", "--repair-dead-grace", "3s",
		"--repair-job-delay", "0s", "--diagnose-interval", "1s", "--maintd-harep", "yes"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	job := func(what string, op map[string]any) fsm.Job {
		t.Helper()
		op["instance_name"] = "vm1"
		id, _, err := c.Client().SubmitJob(ctx, []map[string]any{op}, "")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		j := c.waitFinal(id, 5*time.Minute)
		if j.Status != fsm.StatusSuccess {
			t.Fatalf("%s: job %d %s\n%v", what, id, j.Status, j.OpLog)
		}
		return fsm.Job{ID: id, Status: j.Status}
	}
	logOf := func(id int64, has string) string {
		j, err := c.job(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range j.OpLog {
			for _, e := range op {
				if strings.Contains(e.Msg, has) {
					return e.Msg
				}
			}
		}
		return ""
	}

	hv := map[string]any{"kernel_path": kernel, "initrd_path": initrd, "kernel_args": "quiet", "root_path": ""}
	id, _, err := c.Client().Submit(ctx, "POST", "/2/instances", nil, map[string]any{
		"__version__": 1, "instance_name": "vm1", "disk_template": "sharedfile", "disks": []any{map[string]any{"size": 16}},
		"beparams": map[string]any{"memory": 256, "vcpus": 1}, "nics": []any{}, "os_type": "gnt-image+default", "pnode": a.Name,
		"hvparams": hv,
	})
	if err != nil {
		t.Fatalf("instance create: %v", err)
	}
	if j := c.waitFinal(id, 5*time.Minute); j.Status != fsm.StatusSuccess {
		t.Fatalf("instance create job %d: %s\n%v", id, j.Status, j.OpLog)
	}
	accel := agent.AccelTCG
	if l := logOf(id, "started under "+agent.AccelKVM); l != "" {
		accel = agent.AccelKVM
	}
	info, err := c.Client().Instance(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	uuid := info.UUID
	guestCounter(t, a, uuid, -1, 3*time.Minute)
	job("shutdown", map[string]any{"OP_ID": "OP_INSTANCE_SHUTDOWN"})

	bare := newBareGuest(t, kernel, initrd, accel, 256)
	t.Logf("kvm benchmark: guests of 256 MiB, 1 vCPU, under %s (a Debian kernel and the busybox test initramfs); gnt: 3 gntds on loopback, sharedfile disk", strings.ToUpper(accel))

	// Start and stop, alternating gnt and bare QEMU.
	var gStart, gStop, bStart, bStop []time.Duration
	graceful := 0
	for i := 0; i < rounds; i++ {
		t0 := time.Now()
		id, _, err := c.Client().SubmitJob(ctx, []map[string]any{{"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "vm1"}}, "")
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		guestCounter(t, a, uuid, -1, 3*time.Minute)
		gStart = append(gStart, time.Since(t0))
		if j := c.waitFinal(id, time.Minute); j.Status != fsm.StatusSuccess {
			t.Fatalf("startup job %d: %s", id, j.Status)
		}
		// The test guest's acpid starts beside its first markers: an ACPI
		// powerdown that comes before it is lost (gnt sends it again every
		// 5 s, which would then be measured). Both stop a guest that has
		// run its init for two seconds.
		guestCounter(t, a, uuid, 20, 3*time.Minute)
		t0 = time.Now()
		j := job("shutdown", map[string]any{"OP_ID": "OP_INSTANCE_SHUTDOWN"})
		gStop = append(gStop, time.Since(t0))
		if logOf(j.ID, "shut down gracefully") != "" {
			graceful++
		}

		t0 = time.Now()
		bare.start(t, "")
		bare.counter(t, -1)
		bStart = append(bStart, time.Since(t0))
		bare.counter(t, 20)
		t0 = time.Now()
		bare.powerdown(t)
		bStop = append(bStop, time.Since(t0))
	}
	t.Logf("guest start, job submitted (gnt) or qemu started (bare) to the marker on serial: gnt %s, bare QEMU %s", spread(gStart), spread(bStart))
	t.Logf("graceful stop (ACPI powerdown until qemu exits): gnt's shutdown job %s (%d of %d logged \"shut down gracefully\"), bare QMP system_powerdown %s",
		spread(gStop), graceful, len(gStop), spread(bStop))

	// Live migration, there and back, alternating.
	job("startup", map[string]any{"OP_ID": "OP_INSTANCE_STARTUP"})
	guestCounter(t, a, uuid, 30, 3*time.Minute) // the guest's init has run a few seconds
	bare.start(t, "")
	bare.counter(t, 30)
	downtime := regexp.MustCompile(`in (\d+) ms, downtime (\d+) ms`)
	var gJob, gTotal, gDown, bWall, bTotal, bDown []time.Duration
	ms := func(s string) time.Duration { n, _ := strconv.Atoi(s); return time.Duration(n) * time.Millisecond }
	for i := 0; i < 2*rounds; i++ {
		src, dst := a, b
		if i%2 == 1 {
			src, dst = b, a
		}
		// The guest's counter goes on past each migration, gnt's and bare
		// (a guest migrated with stale memory crashes: docs/agent.md).
		n := guestCounter(t, src, uuid, -1, 3*time.Minute)
		t0 := time.Now()
		j := job("migrate to "+dst.Name, map[string]any{"OP_ID": "OP_INSTANCE_MIGRATE", "target_node": dst.Name})
		gJob = append(gJob, time.Since(t0))
		guestCounter(t, dst, uuid, n+10, 3*time.Minute)
		l := logOf(j.ID, "downtime")
		if m := downtime.FindStringSubmatch(l); m != nil {
			gTotal, gDown = append(gTotal, ms(m[1])), append(gDown, ms(m[2]))
		} else {
			t.Fatalf("migration job %d logged no QEMU figures: %q", j.ID, l)
		}
		n = bare.counter(t, -1)
		wall, total, down := bare.migrate(t)
		bare.counter(t, n+10)
		bWall, bTotal, bDown = append(bWall, wall), append(bTotal, total), append(bDown, down)
	}
	t.Logf("live migration of the 256 MiB guest (max-bandwidth 32 MiB/s, downtime-limit 30 ms, both): gnt's job %s, bare QEMU (target started to completed) %s",
		spread(gJob), spread(bWall))
	t.Logf("  QEMU's total time: gnt %s, bare %s; the guest's downtime: gnt %s, bare (QEMU's figure) %s", spread(gTotal), spread(bTotal), spread(gDown), spread(bDown))

	// Failover after kill -9 of the qemu with its node dead: harep.
	if p, _, _, err := c.instanceNodes("vm1"); err != nil || p != a.Name {
		t.Fatalf("vm1's primary %s %v, want %s", p, err, a.Name)
	}
	if out, err := c.GNT("instance", "add-tags", "vm1", "ganeti:watcher:autorepair:failover"); err != nil {
		t.Fatalf("add-tags: %v\n%s", err, out)
	}
	qpid := qemuPID(a, uuid)
	t0 := time.Now()
	a.Kill()
	syscall.Kill(qpid, syscall.SIGKILL)
	if out, err := c.GNT("node", "modify", "--auto-promote", "--offline", "yes", a.Name); err != nil {
		t.Fatalf("marking %s offline: %v\n%s", a.Name, err, out)
	}
	var to *Member
	c.Eventually(5*time.Minute, 20*time.Millisecond, "vm1's qemu on another node than "+a.Name, func() error {
		for _, m := range c.Members {
			if m != a && qemuPID(m, uuid) != 0 {
				to = m
				return nil
			}
		}
		return fmt.Errorf("no qemu of vm1 on another node than %s", a.Name)
	})
	guestCounter(t, to, uuid, -1, 3*time.Minute)
	gFail := time.Since(t0)
	t0 = time.Now()
	bare.kill(t)
	bare.start(t, "")
	bare.counter(t, -1)
	bFail := time.Since(t0)
	bare.kill(t)
	t.Logf("failover after kill -9 of the qemu, kill to the marker on the other node: gnt (node dead and marked offline, harep) %s, bare QEMU (kill -9, a new qemu on the same disk) %s",
		gFail.Round(time.Millisecond), bFail.Round(time.Millisecond))
}

// spread is "median (min-max)" of d.
func spread(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	lo, hi := d[0], d[0]
	for _, x := range d {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%s (%s-%s, n=%d)", percentile(d, 0.5).Round(time.Millisecond), lo.Round(time.Millisecond), hi.Round(time.Millisecond), len(d))
}

// bareGuest is the benchmark's own qemu, started and driven through QMP
// without gnt: the test guest on a raw disk, its sockets in dir (the
// current one, or the target of a migration in dir/in).
type bareGuest struct {
	kernel, initrd, accel string
	mem                   int
	dir, disk             string
	next                  int // migration port offset
}

func newBareGuest(t *testing.T, kernel, initrd, accel string, mem int) *bareGuest {
	dir := t.TempDir()
	g := &bareGuest{kernel: kernel, initrd: initrd, accel: accel, mem: mem, dir: filepath.Join(dir, "q0"), disk: filepath.Join(dir, "disk0")}
	if err := os.WriteFile(g.disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(g.disk, 16<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range []string{filepath.Join(dir, "q0"), filepath.Join(dir, "q1")} {
			if pid := barePID(d); pid != 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return g
}

// barePID is the live qemu whose pid file is in dir, 0 if none.
func barePID(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "qemu.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid <= 1 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(stat), ") Z ") {
		return 0
	}
	return pid
}

// start runs a qemu of the guest in a fresh g.dir (with -incoming
// tcp:incoming when given); qemu daemonizes once the guest is set up.
func (g *bareGuest) start(t *testing.T, incoming string) {
	t.Helper()
	dir := g.dir
	if incoming != "" {
		dir = g.other()
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"-name", "bare", "-uuid", "00000000-0000-4000-8000-0000000be4c4", "-accel", g.accel,
		"-m", agent.QEMUMemory(int64(g.mem), g.accel), "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none",
		"-daemonize", "-pidfile", "qemu.pid",
		"-chardev", "socket,id=qmp,path=qmp.sock,server=on,wait=off", "-mon", "chardev=qmp,mode=control",
		"-chardev", "socket,id=serial0,path=serial.sock,server=on,wait=off", "-serial", "chardev:serial0",
		"-kernel", g.kernel, "-initrd", g.initrd, "-append", "quiet console=ttyS0,38400",
		"-drive", "file=" + g.disk + ",format=raw,if=virtio"}
	if incoming != "" {
		args = append(args, "-incoming", "tcp:"+incoming)
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bare qemu: %v\n%s", err, out)
	}
}

// other is the directory of the migration's target.
func (g *bareGuest) other() string {
	if filepath.Base(g.dir) == "q0" {
		return filepath.Join(filepath.Dir(g.dir), "q1")
	}
	return filepath.Join(filepath.Dir(g.dir), "q0")
}

func (g *bareGuest) counter(t *testing.T, min int) int {
	t.Helper()
	n, err := serialCounter(filepath.Join(g.dir, "serial.sock"), min, 3*time.Minute)
	if err != nil {
		t.Fatalf("bare guest: %v", err)
	}
	return n
}

func (g *bareGuest) qmp(t *testing.T, dir, cmd string, args, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := agent.QMPCall(ctx, filepath.Join(dir, "qmp.sock"), cmd, args, out); err != nil {
		t.Fatalf("bare qemu: %s: %v", cmd, err)
	}
}

// powerdown asks the guest to power off (QMP system_powerdown) and waits
// until its qemu exits.
func (g *bareGuest) powerdown(t *testing.T) {
	t.Helper()
	pid := barePID(g.dir)
	g.qmp(t, g.dir, "system_powerdown", nil, nil)
	for deadline := time.Now().Add(3 * time.Minute); barePID(g.dir) == pid && pid != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bare guest: qemu %d still runs 3 minutes after system_powerdown", pid)
		}
	}
}

func (g *bareGuest) kill(t *testing.T) {
	t.Helper()
	if pid := barePID(g.dir); pid != 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		for barePID(g.dir) == pid {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// migrate live-migrates the running guest to a second qemu on loopback,
// with gnt's default parameters (max-bandwidth 32 MiB/s, downtime-limit
// 30 ms), and ends the source: the wall time from starting the target to
// QEMU's "completed", and QEMU's total time and downtime.
func (g *bareGuest) migrate(t *testing.T) (wall, total, downtime time.Duration) {
	t.Helper()
	g.next = (g.next + 1) % 100
	addr := fmt.Sprintf("127.0.0.1:%d", 17900+g.next)
	t0 := time.Now()
	g.start(t, addr)
	g.qmp(t, g.dir, "migrate-set-parameters", map[string]any{"max-bandwidth": 32 << 20, "downtime-limit": 30}, nil)
	g.qmp(t, g.dir, "migrate", map[string]any{"uri": "tcp:" + addr}, nil)
	var st struct {
		Status    string `json:"status"`
		TotalTime int64  `json:"total-time"`
		Downtime  int64  `json:"downtime"`
		ErrorDesc string `json:"error-desc"`
	}
	for {
		g.qmp(t, g.dir, "query-migrate", nil, &st)
		if st.Status == "completed" {
			break
		}
		if st.Status == "failed" || st.Status == "cancelled" {
			t.Fatalf("bare migration %s: %s", st.Status, st.ErrorDesc)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wall = time.Since(t0)
	g.kill(t)
	g.dir = g.other()
	return wall, time.Duration(st.TotalTime) * time.Millisecond, time.Duration(st.Downtime) * time.Millisecond
}
