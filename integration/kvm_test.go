package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// needKVMGuest skips the test, saying what is missing, when real guests
// cannot run here; else it returns the kernel and a test initramfs
// (agent/testdata/mkguest.sh: "GNT-GUEST-UP <n>" on the serial console
// every 100 ms).
func needKVMGuest(t *testing.T) (kernel, initrd string) {
	t.Helper()
	for _, p := range []string{"qemu-system-x86_64", "qemu-img", "cpio"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("SKIP: %s is not installed (apt-get install qemu-system-x86 qemu-utils cpio busybox-static linux-image-amd64): kvm driver integration test not run", p)
		}
	}
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	sort.Strings(ks)
	if len(ks) == 0 {
		t.Skip("SKIP: no kernel in /boot (apt-get install linux-image-amd64): kvm driver integration test not run")
	}
	dir := t.TempDir()
	if out, err := exec.Command("../agent/testdata/mkguest.sh", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIP: building the test guest failed (busybox-static?): %v\n%s", err, out)
	}
	return ks[len(ks)-1], filepath.Join(dir, "initramfs.cpio.gz")
}

// kvmRun is the run directory of an instance on a member (kvm driver).
func kvmRun(m *Member, uuid string) string {
	return filepath.Join(m.DataDir, "agent", "kvm", "run", uuid)
}

// qemuPID is the live qemu of the instance on m, 0 when none.
func qemuPID(m *Member, uuid string) int {
	data, err := os.ReadFile(filepath.Join(kvmRun(m, uuid), "qemu.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid <= 1 {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return 0
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !strings.Contains(string(cmdline), "\x00-uuid\x00"+uuid+"\x00") {
		return 0
	}
	return pid
}

// killQEMUs kills every qemu of the cluster's members (t.Cleanup): the
// guests outlive gntd by design, not the test.
func killQEMUs(c *Cluster) {
	for _, m := range c.Members {
		pids, _ := filepath.Glob(filepath.Join(m.DataDir, "agent", "kvm", "run", "*", "qemu.pid"))
		for _, p := range pids {
			if pid := qemuPID(m, filepath.Base(filepath.Dir(p))); pid != 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// guestCounter connects to the serial console socket of the instance on
// m and returns the first counter it prints above min.
func guestCounter(t *testing.T, m *Member, uuid string, min int, within time.Duration) int {
	t.Helper()
	n, err := serialCounter(filepath.Join(kvmRun(m, uuid), "serial.sock"), min, within)
	if err != nil {
		t.Fatalf("%v of %s on %s", err, uuid, m.Name)
	}
	return n
}

// serialCounter connects to the serial console socket at path (a long
// path is reached through its directory's /proc/self/fd entry) and
// returns the first counter the test guest prints above min.
func serialCounter(path string, min int, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		d, err := os.Open(filepath.Dir(path))
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		c, err := net.Dial("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/"+filepath.Base(path))
		d.Close()
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		c.SetReadDeadline(deadline)
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && strings.HasSuffix(f[0], "GNT-GUEST-UP") {
				if n, err := strconv.Atoi(f[1]); err == nil && n > min {
					c.Close()
					return n, nil
				}
			}
		}
		c.Close()
	}
	return 0, fmt.Errorf("no GNT-GUEST-UP above %d within %s on the serial console %s", min, within, path)
}

// filesUnder lists the regular files under dir.
func filesUnder(dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestKVMGuests: a 3-node cluster of gntds with --hypervisor kvm (TCG on
// two of them, the third probing KVM) runs a real guest of template
// sharedfile: created through the API with its kernel and initramfs in
// hvparams and OS gnt-image (its create script marks the disk file), it
// prints its marker on the serial console; stop and start
// through the CLI; a kill -9 of its node's gntd leaves it running and the
// restarted gntd reports it with the same boot id; it live-migrates to
// another node and back (gnt instance migrate -n: the counter goes on,
// one qemu at a time) and fails over (gnt instance failover -n); a kill
// -9 of its qemu shows ERROR_down in the API (the failover starts it
// with a VNC console over TLS instead of the serial one: the console
// answer names node13's address, where the real qemu greets RFB and
// offers VeNCrypt);
// its disk grows; removing it leaves no file behind.
func TestKVMGuests(t *testing.T) {
	kernel, initrd := needKVMGuest(t)
	shared := t.TempDir()
	c := NewCluster(t, ClusterOptions{Candidates: 3,
		ExtraArgs: []string{"--hypervisor", "kvm", "--shared-file-storage-dir", shared},
		MemberArgs: func(name, _ string) []string {
			if name == "node11" {
				return nil // probes KVM
			}
			return []string{"--kvm-accel", "tcg"}
		}})
	t.Cleanup(func() { killQEMUs(c) })
	c.WaitLeader(30 * time.Second)
	for _, m := range c.Members {
		c.WaitAgent(m, 60*time.Second)
	}
	n12, n13 := c.Member("node12"), c.Member("node13")
	hv := map[string]any{"kernel_path": kernel, "initrd_path": initrd, "kernel_args": "quiet", "root_path": ""}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	id, _, err := c.Client().Submit(ctx, "POST", "/2/instances", nil, map[string]any{
		"__version__": 1, "instance_name": "vm1", "disk_template": "sharedfile", "disks": []any{map[string]any{"size": 16}},
		"beparams": map[string]any{"memory": 128, "minmem": 64, "vcpus": 1}, "nics": []any{}, "os_type": "gnt-image+default", "pnode": "node12",
		"hvparams": hv,
	})
	if err != nil {
		t.Fatalf("instance create: %v", err)
	}
	if j := c.waitFinal(id, 5*time.Minute); j.Status != fsm.StatusSuccess {
		t.Fatalf("instance create job %d: %s\n%v", id, j.Status, j.OpLog)
	}
	info, err := c.Client().Instance(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	uuid := info.UUID
	guestCounter(t, n12, uuid, -1, 3*time.Minute)
	t.Logf("guest start (job submitted to the marker on serial, TCG): %s", time.Since(start).Round(time.Millisecond))

	if got := filesUnder(shared); len(got) != 1 {
		t.Fatalf("shared storage after create: %v, want the one disk", got)
	} else if b, err := os.ReadFile(got[0]); err != nil || !strings.HasPrefix(string(b), "GNT-IMAGE 1\ninstance=vm1\n") {
		t.Fatalf("the OS definition gnt-image wrote no marker on the disk: %.60q %v", b, err)
	} else if out, err := c.GNT("instance", "info", "vm1"); err != nil || !strings.Contains(out, "on primary: "+got[0]+", status ok\n") {
		// The /info job asked node12's agent for the disk.
		t.Fatalf("gnt instance info vm1 lacks the disk's status on node12 (%s): %v\n%s", got[0], err, out)
	}

	// Stop and start through the CLI.
	if out, err := c.GNT("instance", "shutdown", "vm1"); err != nil {
		t.Fatalf("shutdown: %v\n%s", err, out)
	}
	if pid := qemuPID(n12, uuid); pid != 0 {
		t.Fatalf("qemu %d still runs after shutdown", pid)
	}
	if out, err := c.GNT("instance", "startup", "vm1"); err != nil {
		t.Fatalf("startup: %v\n%s", err, out)
	}
	n := guestCounter(t, n12, uuid, -1, 3*time.Minute)
	st, err := c.NodeClient(n12).Status(ctx, fsm.Instance{UUID: uuid})
	if err != nil || st.State != rpc.NodeStateRunning || st.MemoryMiB != 128 || st.VCPUs != 1 {
		t.Fatalf("status on node12: %+v %v", st, err)
	}

	// Ballooning (runtime memory) through the CLI: within minmem..maxmem
	// it reaches the guest (QMP query-balloon, the API's oper_ram);
	// outside it is refused at submission.
	if out, err := c.GNT("instance", "modify", "--runtime-memory", "32M", "vm1"); err == nil || !strings.Contains(out, "between 64 and 128 MiB") {
		t.Fatalf("runtime memory under minmem: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "modify", "--runtime-memory", "96M", "vm1"); err != nil {
		t.Fatalf("runtime memory 96M: %v\n%s", err, out)
	}
	if st, err := c.NodeClient(n12).Status(ctx, fsm.Instance{UUID: uuid}); err != nil || st.MemoryMiB != 96 {
		t.Fatalf("status on node12 after the balloon: %+v %v, want 96 MiB", st, err)
	}
	c.Eventually(60*time.Second, 500*time.Millisecond, "vm1 oper_ram 96 in the API", func() error {
		in, err := c.Client().Instance(ctx, "vm1")
		if err != nil || in.OperRAM == nil || *in.OperRAM != 96 {
			return fmt.Errorf("oper_ram %v %v", in.OperRAM, err)
		}
		return nil
	})

	// The console: ssh to the node and socat on the serial socket.
	c.Eventually(30*time.Second, 500*time.Millisecond, "gnt instance console --show-cmd", func() error {
		out, err := c.GNT("instance", "console", "--show-cmd", "vm1")
		if err != nil || !strings.Contains(out, "root@node12") || !strings.Contains(out, "UNIX-CONNECT:"+filepath.Join(kvmRun(n12, uuid), "serial.sock")) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})

	// kill -9 of the node's gntd: the guest goes on; the restarted gntd
	// reports it running, same boot id.
	pid := qemuPID(n12, uuid)
	n12.Kill()
	if qemuPID(n12, uuid) != pid {
		t.Fatalf("qemu %d did not survive the kill of gntd", pid)
	}
	n = guestCounter(t, n12, uuid, n, time.Minute)
	n12.Start(t)
	c.WaitAgent(n12, 60*time.Second)
	st2, err := c.NodeClient(n12).Status(ctx, fsm.Instance{UUID: uuid})
	if err != nil || st2.State != rpc.NodeStateRunning || st2.BootID != st.BootID {
		t.Fatalf("status after the restart of gntd: %+v %v, want running with boot id %s", st2, err, st.BootID)
	}

	// Live migration, a job (gnt instance migrate -n), to node13 and
	// back: the counter goes on, one qemu at a time, the configuration
	// follows.
	for _, hop := range []struct{ src, dst *Member }{{n12, n13}, {n13, n12}} {
		// A guest that has run its init for a few seconds.
		n = guestCounter(t, hop.src, uuid, max(n, 30), 3*time.Minute)
		out, err := c.GNT("instance", "migrate", "-f", "-n", hop.dst.Name, "vm1")
		if err != nil {
			t.Fatalf("migrate to %s: %v\n%s", hop.dst.Name, err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "downtime") {
				t.Logf("%s -> %s: %s", hop.src.Name, hop.dst.Name, strings.TrimSpace(l))
			}
		}
		n = guestCounter(t, hop.dst, uuid, n, 3*time.Minute)
		if qemuPID(hop.src, uuid) != 0 || qemuPID(hop.dst, uuid) == 0 {
			t.Fatalf("after migrating to %s: qemu on %s %d, on %s %d; want one, on the target",
				hop.dst.Name, hop.src.Name, qemuPID(hop.src, uuid), hop.dst.Name, qemuPID(hop.dst, uuid))
		}
		st3, err := c.NodeClient(hop.dst).Status(ctx, fsm.Instance{UUID: uuid})
		if err != nil || st3.State != rpc.NodeStateRunning || st3.BootID != st.BootID {
			t.Fatalf("status on %s after the migration: %+v %v", hop.dst.Name, st3, err)
		}
		if p, _, _, err := c.instanceNodes("vm1"); err != nil || p != hop.dst.Name {
			t.Fatalf("primary after migrating to %s: %s %v", hop.dst.Name, p, err)
		}
	}

	// Failover to node13: stopped on node12, started there, with the
	// VNC console set meanwhile (it takes effect at that start): on
	// node13's address (network only on loopback, and two nodes of one
	// host cannot share an address for it), anonymous TLS, no serial
	// console (which Ganeti's console answer puts first).
	if out, err := c.GNT("instance", "modify", "-H", "serial_console=false,vnc_tls=true,vnc_bind_address="+n13.IP, "vm1"); err != nil {
		t.Fatalf("modify -H vnc_*: %v\n%s", err, out)
	}
	// The cluster's hypervisor is its nodes' driver's: vm1 gets its
	// network port with vnc_bind_address.
	info, err = c.Client().Instance(ctx, "vm1")
	if err != nil || info.NetworkPort == nil || *info.NetworkPort <= fsm.VNCBasePort {
		t.Fatalf("vm1's network port after modify -H vnc_bind_address: %v %v", info.NetworkPort, err)
	}
	port := *info.NetworkPort
	if out, err := c.GNT("instance", "failover", "-f", "-n", "node13", "vm1"); err != nil {
		t.Fatalf("failover: %v\n%s", err, out)
	}
	if qemuPID(n12, uuid) != 0 || qemuPID(n13, uuid) == 0 {
		t.Fatalf("after the failover: qemu on node12 %d, on node13 %d; want one, on node13", qemuPID(n12, uuid), qemuPID(n13, uuid))
	}
	// The console: Ganeti's vnc kind on node13, and there the real
	// qemu greets RFB 3.8 and offers VeNCrypt alone.
	want := fmt.Sprintf("map[display:%d host:%s instance:vm1 kind:vnc message:VNC over TLS (VeNCrypt), anonymous: encrypted, the server not authenticated. port:%d]", port-fsm.VNCBasePort, n13.IP, port)
	c.Eventually(60*time.Second, 500*time.Millisecond, "vm1's console on node13", func() error {
		if got := fmt.Sprint(c.GetObject(t, "/2/instances/vm1/console")); got != want {
			return fmt.Errorf("console %s, want %s", got, want)
		}
		return nil
	})
	if types, err := rfbSecurityTypes(net.JoinHostPort(n13.IP, strconv.Itoa(port))); err != nil || string(types) != "\x13" {
		t.Fatalf("VNC of vm1 on node13: security types %v (%v), want [19] (VeNCrypt)", types, err)
	}
	if out, err := c.GNT("instance", "console", "vm1"); err != nil || !strings.Contains(out, fmt.Sprintf("Instance vm1 has VNC listening on %s:%d (display %d).\nVNC over TLS (VeNCrypt), anonymous", n13.IP, port, port-fsm.VNCBasePort)) {
		t.Fatalf("gnt instance console vm1: %v\n%s", err, out)
	}

	// kill -9 of qemu: the API's runtime view says ERROR_down.
	syscall.Kill(qemuPID(n13, uuid), syscall.SIGKILL)
	c.Eventually(60*time.Second, 500*time.Millisecond, "vm1 ERROR_down in the API", func() error {
		in, err := c.Client().Instance(ctx, "vm1")
		if err != nil {
			return err
		}
		if in.Status == nil || *in.Status != "ERROR_down" || in.OperState == nil || *in.OperState {
			return fmt.Errorf("status %v, oper_state %v", deref(in.Status), in.OperState)
		}
		return nil
	})

	// Grow the disk (stopped), then remove: no file left.
	if out, err := c.GNT("instance", "shutdown", "vm1"); err != nil {
		t.Fatalf("shutdown: %v\n%s", err, out)
	}
	gid, _, err := c.Client().Submit(ctx, "POST", "/2/instances/vm1/disk/0/grow", nil, map[string]any{"amount": 16})
	if err != nil {
		t.Fatalf("grow disk: %v", err)
	}
	if j := c.waitFinal(gid, 2*time.Minute); j.Status != fsm.StatusSuccess {
		t.Fatalf("grow disk job %d: %s\n%v", gid, j.Status, j.OpLog)
	}
	if fi, err := os.Stat(filesUnder(shared)[0]); err != nil || fi.Size() != 32<<20 {
		t.Fatalf("disk after grow: %v %v, want 32 MiB", fi, err)
	}
	if out, err := c.GNT("instance", "remove", "--force", "vm1"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if got := filesUnder(shared); len(got) != 0 {
		t.Fatalf("shared storage after remove: %v", got)
	}
	for _, m := range c.Members {
		if got := filesUnder(filepath.Join(m.DataDir, "agent", "kvm", "run")); len(got) != 0 {
			t.Fatalf("runtime files left on %s: %v", m.Name, got)
		}
	}
	if !strings.Contains(c.Member("node11").Log(), "kvm driver:") {
		t.Errorf("node11 logged no accelerator probe result")
	}
	// gnt node info shows each node's driver and accelerator (node11's
	// from its probe).
	for _, name := range []string{"node11", "node12"} {
		c.Eventually(60*time.Second, time.Second, "gnt node info "+name+" shows the accelerator", func() error {
			out, err := c.GNT("node", "info", name)
			if err != nil || !strings.Contains(out, "hypervisor: kvm") || !strings.Contains(out, "accelerator: ") || !strings.Contains(out, "tap devices: yes: ") {
				return fmt.Errorf("%v: %s", err, out)
			}
			if name == "node12" && !strings.Contains(out, "accelerator: tcg: forced by the configuration (WARNING") {
				return fmt.Errorf("node12: %s", out)
			}
			return nil
		})
	}
}

// rfbSecurityTypes connects to the VNC server at addr, checks its RFB
// 3.8 greeting, answers it and returns the security types offered.
func rfbSecurityTypes(addr string) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	greet := make([]byte, 12)
	if _, err := io.ReadFull(c, greet); err != nil || string(greet) != "RFB 003.008\n" {
		return nil, fmt.Errorf("greeting %q (%v), want RFB 003.008", greet, err)
	}
	if _, err := c.Write(greet); err != nil {
		return nil, err
	}
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	types := make([]byte, n[0])
	_, err = io.ReadFull(c, types)
	return types, err
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
