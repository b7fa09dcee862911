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

	"golang.org/x/sys/unix"
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
	if pid <= 1 {
		return nil
	}
	p, err := openProc(pid)
	if err != nil {
		return err
	}
	defer p.close()
	if !isQEMUOf(pid, uuid) {
		return p.wait(ctx, pid, uuid) // exiting already, or not qemu
	}
	if err := p.kill(pid); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return p.wait(ctx, pid, uuid)
}

// waitGone waits until the instance's qemu at pid has exited, all its
// threads with it, so that it holds no file any more (bounded by ctx). A
// process whose main thread is a zombie can still have threads that hold
// the image files and their locks open (a qemu-img on the disk right
// after would fail to get its write lock): only a pidfd tells when the
// whole process is gone.
func waitGone(ctx context.Context, pid int, uuid string) error {
	p, err := openProc(pid)
	if err != nil {
		return err
	}
	defer p.close()
	return p.wait(ctx, pid, uuid)
}

// proc is a process held by a pidfd (fd -1: it was gone when opened, or
// the kernel has no pidfds and the /proc polling of waitProc is used).
type proc struct {
	fd   int
	gone bool
	noFD bool
}

// openProc opens a pidfd for pid. A pid with no process (reaped), or
// one that is now a thread of another process (EINVAL: not a process's
// main thread), is gone; where pidfds are unavailable (a kernel before
// 5.3, or a seccomp profile refusing them) /proc is polled instead.
func openProc(pid int) (*proc, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return &proc{fd: fd}, nil
	case errors.Is(err, unix.ESRCH), errors.Is(err, unix.EINVAL):
		return &proc{fd: -1, gone: true}, nil
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		return &proc{fd: -1, noFD: true}, nil
	default:
		return nil, fmt.Errorf("pidfd_open of qemu (pid %d): %w", pid, err)
	}
}

func (p *proc) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
	}
}

// kill sends SIGKILL through the pidfd, so it reaches this process even
// if its pid were taken by another meanwhile.
func (p *proc) kill(pid int) error {
	switch {
	case p.gone:
		return nil
	case p.noFD:
		return syscall.Kill(pid, syscall.SIGKILL)
	}
	return unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
}

// wait waits until the process has exited with all its threads (a pidfd
// polls readable then), bounded by ctx. A live process that is not the
// instance's qemu (its pid taken by another) is not waited for; one that
// no longer shows as the instance's qemu (exiting, or a kernel thread
// that took the pid: no command line either) at most exitingMax.
func (p *proc) wait(ctx context.Context, pid int, uuid string) error {
	switch {
	case p.gone:
		return nil
	case p.noFD:
		return waitProc(ctx, pid, uuid)
	case !isQEMUOf(pid, uuid) && procAlive(pid) && !exiting(pid):
		return nil
	}
	var deadline time.Time
	for {
		done, err := pidfdReady(p.fd)
		if err != nil {
			return fmt.Errorf("waiting for qemu (pid %d) to exit: %w", pid, err)
		}
		if done {
			return nil
		}
		if deadline.IsZero() && !isQEMUOf(pid, uuid) {
			deadline = time.Now().Add(exitingMax)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("qemu (pid %d) still running: %w", pid, err)
		}
	}
}

// pidfdReady tells, without blocking, whether the pidfd's process has
// exited with all its threads.
func pidfdReady(fd int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n > 0, err
	}
}

// waitProc is waitGone on kernels without pidfds: it polls /proc until
// the process is no longer the instance's live qemu and, while it is
// exiting (its command line gone, not yet a zombie), a little longer,
// bounded by exitingMax: threads can still hold its files after that,
// which only a pidfd would tell.
func waitProc(ctx context.Context, pid int, uuid string) error {
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

// exitingMax bounds how long waitGone waits for a process that no
// longer shows as the instance's qemu.
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
		return false
	}
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
