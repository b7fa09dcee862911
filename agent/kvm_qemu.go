package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The qemu processes of the kvm driver: how they are started
// (daemonized, so they outlive gntd), found again (pid file + the
// process's command line naming the instance), and ended.

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// qemuOutput bounds what a qemu start may print into an error.
const qemuOutput = 16 << 10

// runQEMU starts qemu with args in dir (relative socket paths are
// relative to it) and waits for the daemonizing parent: it exits once
// the guest is set up (or failed to be), so a bad command line is an
// error here with QEMU's message. The guest process itself is in its own
// session, detached from gntd.
func runQEMU(ctx context.Context, bin, dir string, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/sbin:/bin:/usr/sbin:/usr/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitedWriter{w: &out, n: qemuOutput}, &limitedWriter{w: &out, n: qemuOutput}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

type limitedWriter struct {
	w *bytes.Buffer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		if len(p) > room {
			l.w.Write(p[:room])
		} else {
			l.w.Write(p)
		}
	}
	return len(p), nil
}

// qemuPID returns the pid of the qemu of instance uuid recorded in
// pidFile when that process is alive and is that instance's qemu (its
// command line carries "-uuid <uuid>"), else 0: a pid reused by another
// process, a zombie and a missing file all count as not running.
func qemuPID(pidFile, uuid string) int {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0
	}
	if !isQEMUOf(pid, uuid) {
		return 0
	}
	return pid
}

// isQEMUOf tells whether pid is a live (not zombie) process whose
// command line has "-uuid <uuid>".
func isQEMUOf(pid int, uuid string) bool {
	cmdline, ok := liveCmdline(pid)
	return ok && bytes.Contains(cmdline, []byte("\x00-uuid\x00"+uuid+"\x00"))
}

// liveCmdline is the command line of pid when it is a live process (not
// a zombie); ok false when it is not.
func liveCmdline(pid int) (cmdline []byte, ok bool) {
	if !procAlive(pid) {
		return nil, false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return cmdline, err == nil
}

// killQEMU sends SIGKILL to the instance's qemu and waits until it is
// gone (bounded by ctx).
func killQEMU(ctx context.Context, pid int, uuid string) error {
	if pid <= 1 || !isQEMUOf(pid, uuid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return waitGone(ctx, pid, uuid)
}

// waitGone polls until the process is no longer the instance's live qemu
// and, when it is exiting, until it has closed its files: an exiting
// process loses its command line (its memory) before its files, so for a
// moment its image locks are still held (a qemu-img on the disk right
// after would fail to get the write lock). That second wait is bounded
// by exitingMax, in case the pid is taken by a kernel thread (no command
// line either).
func waitGone(ctx context.Context, pid int, uuid string) error {
	for isQEMUOf(pid, uuid) {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("qemu (pid %d) still running: %w", pid, err)
		}
	}
	for deadline := time.Now().Add(exitingMax); exiting(pid) && time.Now().Before(deadline); {
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("qemu (pid %d) still exiting: %w", pid, err)
		}
	}
	return nil
}

// exitingMax bounds how long waitGone waits for an exiting qemu to close
// its files.
const exitingMax = 10 * time.Second

// procAlive tells whether pid is a process that is neither gone nor a
// zombie (the state follows the command name in parentheses in its stat).
func procAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// exiting tells whether pid is a process past the release of its memory
// (its command line empty or unreadable) but not yet a zombie.
func exiting(pid int) bool {
	if !procAlive(pid) {
		return false // gone, or a zombie: its files are closed
	}
	// Past the release of its memory, the command line reads empty or
	// fails; a live process with one is another that took the pid.
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err != nil || len(cmdline) == 0
}

// probeKernel is the newest /boot/vmlinuz-*, the kernel the accelerator
// probe boots ("" when there is none).
func probeKernel() string {
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	sort.Strings(ks)
	if len(ks) == 0 {
		return ""
	}
	return ks[len(ks)-1]
}

// probeAccel tells whether KVM runs guests on this node: it boots kernel
// under KVM with its console on a pipe and waits, up to timeout, for the
// kernel's first line ("Linux version"). /dev/kvm can exist and guests
// still hang (nested virtualisation without support, a broken module):
// only a guest that prints proves it. The probe guest is killed at once.
// dev is the KVM device (/dev/kvm).
func probeAccel(ctx context.Context, bin, dev, kernel string, timeout time.Duration) (ok bool, why string) {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Sprintf("%s: %v", dev, err)
	}
	f.Close()
	if kernel == "" {
		return false, "no kernel in /boot to probe KVM with"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-accel", "kvm", "-m", "128", "-display", "none", "-nodefaults",
		"-no-user-config", "-no-reboot", "-kernel", kernel, "-append", "console=ttyS0 panic=-1", "-serial", "stdio")
	cmd.Env = []string{"PATH=/sbin:/bin:/usr/sbin:/usr/bin"}
	// The probe guest dies with gntd (unlike the instances' qemus).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err.Error()
	}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return false, err.Error()
	}
	seen := make(chan bool, 1)
	go func() {
		var buf bytes.Buffer
		b := make([]byte, 4096)
		for {
			n, err := out.Read(b)
			if buf.Len() < 1<<20 {
				buf.Write(b[:n])
			}
			if bytes.Contains(buf.Bytes(), []byte("Linux version")) {
				seen <- true
				return
			}
			if err != nil {
				seen <- false
				return
			}
		}
	}()
	var printed bool
	select {
	case printed = <-seen:
	case <-ctx.Done():
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	if printed {
		return true, "a probe guest booted under KVM"
	}
	if msg := strings.TrimSpace(stderr.String()); msg != "" && ctx.Err() == nil {
		return false, "the probe guest failed under KVM: " + truncate(msg, 300)
	}
	return false, fmt.Sprintf("a probe guest printed nothing under KVM within %s (KVM guests hang here)", timeout)
}
