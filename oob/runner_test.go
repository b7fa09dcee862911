package oob

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helper writes an executable shell script and returns its path.
func helper(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "oob-helper")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d outlived the helper", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunnerArguments(t *testing.T) {
	dir := t.TempDir()
	p := helper(t, `printf '%s|%s|%s' "$1" "$2" "$LC_ALL" > `+dir+`/args; echo '{"powered": false}'`)
	r, err := (&Runner{}).Run(context.Background(), p, PowerStatus, "node21.example.com", 0)
	if err != nil || r.Powered {
		t.Fatalf("run: %v %+v", err, r)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "args"))
	if string(b) != "power-status|node21.example.com|C" {
		t.Errorf("helper saw %q", b)
	}
}

func TestRunnerExitStatuses(t *testing.T) {
	ctx := context.Background()
	var rn Runner
	if _, err := rn.Run(ctx, helper(t, `echo "BMC says no" >&2; exit 1`), PowerOn, "n1", 0); err == nil ||
		err.Error() != "OOB program execution failed (BMC says no)" {
		t.Errorf("exit 1: %v", err)
	}
	if _, err := rn.Run(ctx, helper(t, `exit 2`), PowerCycle, "n1", 0); err == nil ||
		!strings.Contains(err.Error(), "exit status 2: power-cycle is unsupported or undefined") {
		t.Errorf("exit 2: %v", err)
	}
	if _, err := rn.Run(ctx, helper(t, `echo hello`), PowerOn, "n1", 0); err == nil ||
		!strings.Contains(err.Error(), `power-on is expected to not return payload but got "hello\n"`) {
		t.Errorf("output for power-on: %v", err)
	}
	if _, err := rn.Run(ctx, helper(t, `kill -TERM $$`), PowerOff, "n1", 0); err == nil ||
		!strings.Contains(err.Error(), "killed by terminated") {
		t.Errorf("signal: %v", err)
	}
	r, err := rn.Run(ctx, helper(t, `echo '[["Temp","WARNING"]]'`), Health, "n1", 0)
	if err != nil || len(r.Health) != 1 || r.Health[0] != (HealthItem{"Temp", StatusWarning}) {
		t.Errorf("health: %v %+v", err, r)
	}
}

func TestRunnerNotRunnable(t *testing.T) {
	var rn Runner
	ctx := context.Background()
	noexec := filepath.Join(t.TempDir(), "noexec")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	for path, want := range map[string]string{
		"relative/oob":            "is not an absolute path",
		"/nonexistent/gnt-oob":    "error stating out of band helper /nonexistent/gnt-oob: no such file or directory",
		noexec:                    "is not executable",
		filepath.Dir(noexec):      "is not a file",
		helper(t, "exit 0")[:0]:   "is not an absolute path",
		"/proc/self/nonexistent/": "error stating",
	} {
		_, err := rn.Run(ctx, path, PowerOn, "n1", 0)
		e, ok := AsError(err)
		if !ok || e.Kind != KindNotRunnable || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", path, err, want)
		}
	}
	if _, err := rn.Run(ctx, helper(t, "exit 0"), "reboot", "n1", 0); err == nil {
		t.Error("unknown command ran")
	}
}

// TestRunnerTimeoutKillsGroup: a helper that hangs is killed at the bound
// together with the children it started.
func TestRunnerTimeoutKillsGroup(t *testing.T) {
	dir := t.TempDir()
	p := helper(t, `sleep 30 & echo $! > `+dir+`/child; sleep 30`)
	start := time.Now()
	_, err := (&Runner{Timeout: 300 * time.Millisecond}).Run(context.Background(), p, PowerOff, "n1", 0)
	took := time.Since(start)
	e, ok := AsError(err)
	if !ok || e.Kind != KindTimeout || !strings.HasPrefix(err.Error(), "OOB program execution timeout exceeded, OOB program execution aborted") {
		t.Fatalf("got %v", err)
	}
	if took > 2*time.Second {
		t.Errorf("timeout of 300ms took %v", took)
	}
	waitGone(t, readPID(t, filepath.Join(dir, "child")))
}

// TestRunnerOpcodeTimeout: the opcode's timeout bounds a run below the
// runner's bound, never above it.
func TestRunnerOpcodeTimeout(t *testing.T) {
	rn := Runner{Timeout: 200 * time.Millisecond}
	if got := rn.timeout(time.Hour); got != 200*time.Millisecond {
		t.Errorf("opcode timeout raised the bound to %v", got)
	}
	if got := (&Runner{}).timeout(0); got != DefaultTimeout {
		t.Errorf("default bound %v", got)
	}
	if got := (&Runner{Timeout: time.Hour}).timeout(0); got != DefaultTimeout {
		t.Errorf("bound above 60s allowed: %v", got)
	}
	start := time.Now()
	_, err := (&Runner{}).Run(context.Background(), helper(t, "sleep 10"), PowerStatus, "n1", 250*time.Millisecond)
	if e, ok := AsError(err); !ok || e.Kind != KindTimeout || time.Since(start) > 3*time.Second {
		t.Errorf("opcode timeout: %v after %v", err, time.Since(start))
	}
}

// TestRunnerLeftoverChild: a helper that exits at once but leaves a child
// holding its stdout is not waited for; the child is killed.
func TestRunnerLeftoverChild(t *testing.T) {
	dir := t.TempDir()
	p := helper(t, `sleep 30 & echo $! > `+dir+`/child; echo '{"powered": true}'`)
	start := time.Now()
	r, err := (&Runner{}).Run(context.Background(), p, PowerStatus, "n1", 0)
	if err != nil || !r.Powered {
		t.Fatalf("run: %v %+v", err, r)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("waited %v for the leftover child", took)
	}
	waitGone(t, readPID(t, filepath.Join(dir, "child")))
}

// TestRunnerFlood: a helper that floods stdout is killed as soon as the
// bound is passed, long before the time bound.
func TestRunnerFlood(t *testing.T) {
	start := time.Now()
	_, err := (&Runner{MaxOutput: 4096}).Run(context.Background(), helper(t, `yes`), PowerStatus, "n1", 0)
	e, ok := AsError(err)
	if !ok || e.Kind != KindBadOutput || !strings.Contains(err.Error(), "printed more than 4096 bytes on stdout; the helper was killed") {
		t.Fatalf("got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("flood took %v to stop", took)
	}
	if len(err.Error()) > 2000 {
		t.Errorf("message of %d bytes", len(err.Error()))
	}
}

// TestRunnerStderrFlood: a failing helper that prints a lot on stderr
// gives a bounded message.
func TestRunnerStderrFlood(t *testing.T) {
	_, err := (&Runner{MaxOutput: 8192}).Run(context.Background(),
		helper(t, `i=0; while [ $i -lt 2000 ]; do echo "error line $i" >&2; i=$((i+1)); done; exit 1`), PowerOn, "n1", 0)
	e, ok := AsError(err)
	if !ok || e.Kind != KindFailed || !strings.HasPrefix(err.Error(), "OOB program execution failed (error line 0 ; error line 1") {
		t.Fatalf("got %v", err)
	}
	if len(err.Error()) > maxMessage+64 {
		t.Errorf("message of %d bytes", len(err.Error()))
	}
}

func TestRunnerContext(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	_, err := (&Runner{}).Run(ctx, helper(t, `sleep 30 & echo $! > `+dir+`/child; wait`), PowerOn, "n1", 0)
	if err != context.Canceled {
		t.Fatalf("got %v", err)
	}
	waitGone(t, readPID(t, filepath.Join(dir, "child")))
}
