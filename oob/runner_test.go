package oob

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// programs is a whitelist of the test's temporary directories: every
// helper the test writes is inside it.
func programs(t *testing.T) Whitelist {
	return Whitelist{Dir: filepath.Dir(t.TempDir()), Owner: os.Geteuid()}
}

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
	r, err := (&Runner{Programs: programs(t)}).Run(context.Background(), p, PowerStatus, "node21.example.com", 0)
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
	rn := Runner{Programs: programs(t)}
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

// TestRunnerNotRunnable: a helper the whitelist refuses is not run, and
// the error names the path and the rule; the zero Runner's whitelist is
// DefaultProgramsDir.
func TestRunnerNotRunnable(t *testing.T) {
	ctx := context.Background()
	ran := filepath.Join(t.TempDir(), "ran")
	p := helper(t, "touch "+ran)
	for _, c := range []struct {
		name string
		rn   Runner
		path string
		want string
	}{
		{"default dir", Runner{}, "/bin/sh", `OOB program execution failed (OOB helper "/bin/sh" refused: not inside the OOB programs directory /etc/gnt/oob-programs (an OOB helper must be an absolute path inside /etc/gnt/oob-programs, to a regular file owned by root,`},
		{"outside the test's dir", Runner{Programs: Whitelist{Dir: filepath.Join(filepath.Dir(p), "sub"), Owner: os.Geteuid()}}, p, "not inside the OOB programs directory"},
		{"relative", Runner{Programs: programs(t)}, "relative/oob", "not an absolute path"},
		{"missing", Runner{Programs: programs(t)}, filepath.Join(filepath.Dir(p), "missing"), "no such file or directory"},
		{"directory", Runner{Programs: programs(t)}, filepath.Dir(p), "is a directory, not a regular file"},
	} {
		_, err := c.rn.Run(ctx, c.path, PowerOn, "n1", 0)
		e, ok := AsError(err)
		if !ok || e.Kind != KindNotRunnable || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := (&Runner{Programs: programs(t)}).Run(ctx, p, "reboot", "n1", 0); err == nil {
		t.Error("unknown command ran")
	}
	if fileExists(ran) {
		t.Error("a refused helper ran")
	}
}

// TestRunnerRefusesChangedHelper: a helper that passed the whitelist when
// it was set is checked again before each run, so one that became group
// writable, or was replaced by a symlink out of the directory, is refused
// then and does not run.
func TestRunnerRefusesChangedHelper(t *testing.T) {
	ctx := context.Background()
	wl := programs(t)
	rn := Runner{Programs: wl}
	ran := filepath.Join(t.TempDir(), "ran")
	p := helper(t, "touch "+ran)
	if err := wl.Check(p); err != nil {
		t.Fatalf("the helper as set: %v", err)
	}
	if _, err := rn.Run(ctx, p, PowerOn, "n1", 0); err != nil || !fileExists(ran) {
		t.Fatalf("the helper as set did not run: %v", err)
	}
	os.Remove(ran)
	if err := os.Chmod(p, 0o775); err != nil {
		t.Fatal(err)
	}
	_, err := rn.Run(ctx, p, PowerOn, "n1", 0)
	if e, ok := AsError(err); !ok || e.Kind != KindNotRunnable || !errors.Is(err, ErrRefused) ||
		!strings.Contains(err.Error(), p+" is writable by group or others (mode 0775)") || !strings.Contains(err.Error(), wl.Rule()) {
		t.Errorf("group-writable helper: %v", err)
	}
	// Replaced by a symlink to a script outside the directory.
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rn.Programs.Dir = filepath.Dir(p)
	os.Remove(p)
	if err := os.Symlink(outside, p); err != nil {
		t.Fatal(err)
	}
	_, err = rn.Run(ctx, p, PowerOn, "n1", 0)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "leads to "+outside+", outside the OOB programs directory") {
		t.Errorf("symlinked out: %v", err)
	}
	if fileExists(ran) {
		t.Error("a refused helper ran")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestRunnerTimeoutKillsGroup: a helper that hangs is killed at the bound
// together with the children it started.
func TestRunnerTimeoutKillsGroup(t *testing.T) {
	dir := t.TempDir()
	p := helper(t, `sleep 30 & echo $! > `+dir+`/child; sleep 30`)
	start := time.Now()
	_, err := (&Runner{Timeout: 300 * time.Millisecond, Programs: programs(t)}).Run(context.Background(), p, PowerOff, "n1", 0)
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
	if got := (&Runner{Programs: programs(t)}).timeout(0); got != DefaultTimeout {
		t.Errorf("default bound %v", got)
	}
	if got := (&Runner{Timeout: time.Hour}).timeout(0); got != DefaultTimeout {
		t.Errorf("bound above 60s allowed: %v", got)
	}
	start := time.Now()
	_, err := (&Runner{Programs: programs(t)}).Run(context.Background(), helper(t, "sleep 10"), PowerStatus, "n1", 250*time.Millisecond)
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
	r, err := (&Runner{Programs: programs(t)}).Run(context.Background(), p, PowerStatus, "n1", 0)
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
	_, err := (&Runner{MaxOutput: 4096, Programs: programs(t)}).Run(context.Background(), helper(t, `yes`), PowerStatus, "n1", 0)
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
	_, err := (&Runner{MaxOutput: 8192, Programs: programs(t)}).Run(context.Background(),
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
	_, err := (&Runner{Programs: programs(t)}).Run(ctx, helper(t, `sleep 30 & echo $! > `+dir+`/child; wait`), PowerOn, "n1", 0)
	if err != context.Canceled {
		t.Fatalf("got %v", err)
	}
	waitGone(t, readPID(t, filepath.Join(dir, "child")))
}
