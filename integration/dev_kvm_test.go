package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevKVM runs `gntd dev --hypervisor kvm` as docs/tour.md does: the
// six members run the kvm driver with one shared file storage dir, and
// the cluster's kvm hvparams boot the test guest (`make guest`; here
// built into a temp dir given as --guest-dir), so a sharedfile instance
// created through gnt with no hvparams of its own (and --no-nics: with
// the default NIC it is refused naming the missing bridge gnt-br0,
// where the machine has none) prints its marker on
// its serial console, and again on the node hail chooses for a failover
// (gnt instance failover -I hail); with the failover autorepair tag,
// that node killed (gntd and qemu) and marked offline, harep brings it
// up on another node. Without QEMU, a kernel or busybox-static it skips
// saying what to install.
func TestDevKVM(t *testing.T) {
	_, initrd := needKVMGuest(t)
	bin := Binaries(t)
	home, dir, out, sup, exited := startDev(t, bin, "--hypervisor", "kvm", "--guest-dir", filepath.Dir(initrd))
	t.Cleanup(func() {
		sup.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			sup.Process.Kill()
			<-exited
		}
		// The guests outlive gntd by design, not the test.
		pids, _ := filepath.Glob(filepath.Join(dir, "*", "agent", "kvm", "run", "*", "qemu.pid"))
		for _, p := range pids {
			b, _ := os.ReadFile(p)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); pid > 1 && err == nil && strings.Contains(string(cmdline), "qemu") {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if t.Failed() {
			t.Logf("gntd dev's output, last lines:\n%s", lastLines(out.String(), 80))
		}
	})
	gnt := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "gnt"), args...)
		cmd.Env = append(os.Environ(), "HOME="+home, "GNT_SERVER=")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	deadline := time.Now().Add(3 * time.Minute)
	var members []devMember
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "dev.json")); err == nil {
			var info struct {
				Members []devMember `json:"members"`
			}
			if json.Unmarshal(b, &info) == nil {
				members = info.Members
				break
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("gntd dev --hypervisor kvm exited before the cluster was up: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dev.json within 3m")
		}
	}
	shared := filepath.Join(dir, "shared-file-storage")
	for _, m := range members {
		c := strings.Join(m.Command, " ")
		if !strings.Contains(c, "--hypervisor kvm") || !strings.Contains(c, "--shared-file-storage-dir "+shared) {
			t.Errorf("%s runs %s, want the kvm driver and the shared dir %s", m.Name, c, shared)
		}
	}
	if !strings.Contains(out.String(), "[dev] kvm: guests boot /boot/vmlinuz-") {
		t.Errorf("gntd dev does not say what the guests boot:\n%s", lastLines(out.String(), 20))
	}

	// The tour's instance: no hvparams, the cluster's boot the guest;
	// --no-nics, as this machine need not have the default NIC's bridge.
	// Without it (and without that bridge) the create is refused naming
	// the bridge, before anything is made.
	if _, err := net.InterfaceByName("gnt-br0"); err != nil {
		if o, err := gnt(8*time.Minute, "instance", "add", "-t", "sharedfile", "--disk", "16M", "--memory", "128",
			"--os-type", "gnt-image+default", "-n", "node12", "vm0"); err == nil || !strings.Contains(o, `bridge "gnt-br0" (its link) does not exist on node node12`) {
			t.Fatalf("gnt instance add vm0 with the default NIC on a machine without gnt-br0: %v\n%s\nwant a refusal naming the bridge", err, o)
		}
	}
	if o, err := gnt(8*time.Minute, "instance", "add", "-t", "sharedfile", "--disk", "16M", "--memory", "128",
		"--os-type", "gnt-image+default", "-n", "node12", "--no-nics", "vm1"); err != nil {
		t.Fatalf("gnt instance add: %v\n%s", err, o)
	}
	var uuid string
	for _, m := range members {
		if m.Name != "node12" {
			continue
		}
		socks, _ := filepath.Glob(filepath.Join(m.DataDir, "agent", "kvm", "run", "*", "serial.sock"))
		if len(socks) != 1 {
			t.Fatalf("serial consoles on node12: %v, want vm1's", socks)
		}
		uuid = filepath.Base(filepath.Dir(socks[0]))
		guestCounter(t, &Member{Name: m.Name, DataDir: m.DataDir}, uuid, -1, 3*time.Minute)
	}
	if uuid == "" {
		t.Fatalf("no node12 in dev.json: %+v", members)
	}
	if files := filesUnder(shared); len(files) != 1 {
		t.Errorf("shared storage: %v, want vm1's disk", files)
	}

	// The tour's failover with an allocator: hail chooses another node,
	// where the guest boots again.
	if o, err := gnt(5*time.Minute, "instance", "failover", "-f", "-I", "hail", "vm1"); err != nil {
		t.Fatalf("gnt instance failover -I hail: %v\n%s", err, o)
	}
	moved, dead := false, devMember{}
	for _, m := range members {
		if _, err := os.Stat(filepath.Join(m.DataDir, "agent", "kvm", "run", uuid, "qemu.pid")); err != nil {
			continue
		}
		if m.Name == "node12" {
			t.Fatalf("vm1 still has a qemu on node12 after the failover")
		}
		guestCounter(t, &Member{Name: m.Name, DataDir: m.DataDir}, uuid, -1, 3*time.Minute)
		moved, dead = true, m
	}
	if !moved {
		t.Fatalf("vm1 runs nowhere after the failover")
	}

	// harep: with the failover autorepair tag, its node dead (gntd and
	// qemu killed) and marked offline, vm1 comes up on another node.
	if o, err := gnt(time.Minute, "instance", "add-tags", "vm1", "ganeti:watcher:autorepair:failover"); err != nil {
		t.Fatalf("add-tags: %v\n%s", err, o)
	}
	qemu, _ := os.ReadFile(filepath.Join(dead.DataDir, "agent", "kvm", "run", uuid, "qemu.pid"))
	syscall.Kill(dead.PID, syscall.SIGKILL)
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(qemu))); pid > 1 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if o, err := gnt(time.Minute, "node", "modify", "--auto-promote", "--offline", "yes", dead.Name); err != nil {
		t.Fatalf("marking %s offline: %v\n%s", dead.Name, err, o)
	}
	deadline = time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		for _, m := range members {
			if m.Name == dead.Name {
				continue
			}
			if _, err := os.Stat(filepath.Join(m.DataDir, "agent", "kvm", "run", uuid, "qemu.pid")); err == nil {
				guestCounter(t, &Member{Name: m.Name, DataDir: m.DataDir}, uuid, -1, 3*time.Minute)
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	o, _ := gnt(time.Minute, "instance", "list-tags", "vm1")
	t.Fatalf("harep did not bring vm1 up on another node than %s within 3m; tags:\n%s", dead.Name, o)
}
