package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// whitelist is a whitelist directory owned by this test's uid, and the
// Commands that use it.
func whitelist(t *testing.T) Commands {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "commands")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return Commands{Dir: dir, Owner: os.Getuid(), Timeout: 10 * time.Second}
}

// script writes an executable shell script into the whitelist.
func script(t *testing.T, c Commands, name, body string) string {
	t.Helper()
	p := filepath.Join(c.Dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755); err != nil { // the umask may have taken bits
		t.Fatal(err)
	}
	return p
}

func TestCommandNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "/bin/sh", "../x", "x/", "a\x00b", strings.Repeat("x", 256)} {
		if err := CheckCommandName(name); !errors.Is(err, ErrCommandName) || !errors.Is(err, ErrCommandRefused) {
			t.Errorf("name %q: %v, want ErrCommandName", name, err)
		}
	}
	for _, name := range []string{"diag", "check-disks.sh", "...", ".hidden", "a b", strings.Repeat("x", 255)} {
		if err := CheckCommandName(name); err != nil {
			t.Errorf("name %q refused: %v", name, err)
		}
	}
}

// TestResolveRefusals: each check refuses on its own, naming why, with
// its sentinel.
func TestResolveRefusals(t *testing.T) {
	root := os.Getuid() == 0
	type setup func(t *testing.T, c *Commands) string // returns the name to resolve
	good := func(t *testing.T, c *Commands) string { script(t, *c, "diag", "echo"); return "diag" }
	chmod := func(mode os.FileMode) setup {
		return func(t *testing.T, c *Commands) string {
			p := script(t, *c, "diag", "echo")
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
			return "diag"
		}
	}
	for _, tc := range []struct {
		name     string
		setup    setup
		want     error
		contains string
		rootOnly bool
	}{
		{"bad name", func(*testing.T, *Commands) string { return "../diag" }, ErrCommandName, "contains a '/'", false},
		{"no directory", func(t *testing.T, c *Commands) string { c.Dir += "-missing"; return "diag" }, ErrNotWhitelisted, "does not exist", false},
		{"no directory configured", func(t *testing.T, c *Commands) string { c.Dir = ""; return "diag" }, ErrNotWhitelisted, "no whitelist directory", false},
		{"directory is a file", func(t *testing.T, c *Commands) string {
			p := c.Dir + "-file"
			os.WriteFile(p, nil, 0o644)
			c.Dir = p
			return "diag"
		}, ErrUnsafeCommand, "not a directory", false},
		{"directory of another owner", func(t *testing.T, c *Commands) string { good(t, c); c.Owner++; return "diag" }, ErrUnsafeCommand, "is owned by uid", false},
		{"directory writable by group", func(t *testing.T, c *Commands) string { good(t, c); os.Chmod(c.Dir, 0o775); return "diag" }, ErrUnsafeCommand, "writable by group or others", false},
		{"directory writable by others", func(t *testing.T, c *Commands) string { good(t, c); os.Chmod(c.Dir, 0o1777); return "diag" }, ErrUnsafeCommand, "writable by group or others", false},
		{"not whitelisted", func(*testing.T, *Commands) string { return "diag" }, ErrNotWhitelisted, "no diag in", false},
		{"symlink", func(t *testing.T, c *Commands) string {
			script(t, *c, "real", "echo")
			if err := os.Symlink("real", filepath.Join(c.Dir, "diag")); err != nil {
				t.Fatal(err)
			}
			return "diag"
		}, ErrUnsafeCommand, "is a symlink", false},
		{"directory", func(t *testing.T, c *Commands) string { os.Mkdir(filepath.Join(c.Dir, "diag"), 0o755); return "diag" }, ErrUnsafeCommand, "not a regular file", false},
		{"fifo", func(t *testing.T, c *Commands) string {
			if err := syscall.Mkfifo(filepath.Join(c.Dir, "diag"), 0o755); err != nil {
				t.Skip("mkfifo:", err)
			}
			return "diag"
		}, ErrUnsafeCommand, "not a regular file", false},
		{"file of another owner", func(t *testing.T, c *Commands) string {
			p := script(t, *c, "diag", "echo")
			if err := os.Chown(p, 65534, -1); err != nil {
				t.Fatal(err)
			}
			return "diag"
		}, ErrUnsafeCommand, "is owned by uid 65534", true},
		{"group-writable", chmod(0o775), ErrUnsafeCommand, "want 0755 or stricter", false},
		{"world-writable", chmod(0o757), ErrUnsafeCommand, "want 0755 or stricter", false},
		{"setuid", chmod(0o755 | os.ModeSetuid), ErrUnsafeCommand, "want 0755 or stricter", false},
		{"setgid", chmod(0o755 | os.ModeSetgid), ErrUnsafeCommand, "want 0755 or stricter", false},
		{"not executable by its owner", chmod(0o644), ErrUnsafeCommand, "not executable by its owner", false},
		{"executable by others only", chmod(0o455), ErrUnsafeCommand, "not executable by its owner", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootOnly && !root {
				t.Skip("needs root to give a file away")
			}
			c := whitelist(t)
			name := tc.setup(t, &c)
			path, err := c.Resolve(name)
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrCommandRefused) || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("Resolve = %q, %v; want %v containing %q", path, err, tc.want, tc.contains)
			}
			if _, err := c.Run(context.Background(), OpRepairCommand, name, nil); !errors.Is(err, tc.want) {
				t.Fatalf("Run: %v, want the same refusal", err)
			}
		})
	}
	for _, mode := range []os.FileMode{0o755, 0o700, 0o500, 0o711} {
		c := whitelist(t)
		chmod(mode)(t, &c)
		if p, err := c.Resolve("diag"); err != nil || p != filepath.Join(c.Dir, "diag") {
			t.Errorf("mode %04o: %q %v", mode, p, err)
		}
	}
}

// TestCommandRun: a command gets its stdin, no arguments, a clean
// environment and "/" as its directory; its output is captured, bounded;
// a failure is an *OpError with the output.
func TestCommandRun(t *testing.T) {
	t.Setenv("GNT_TEST_SECRET", "leaked")
	c := whitelist(t)
	script(t, c, "show", `echo "args=$# pwd=$(pwd)"; env | grep -c GNT_TEST_SECRET; cat; echo oops >&2`)
	r, err := c.Run(context.Background(), OpRepairCommand, "show", []byte("the input\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.Stdout); got != "args=0 pwd=/\n0\nthe input\n" {
		t.Errorf("stdout %q", got)
	}
	if r.Stderr != "oops\n" || !strings.Contains(r.Output, "the input") || !strings.Contains(r.Output, "oops") {
		t.Errorf("stderr %q, output %q", r.Stderr, r.Output)
	}

	script(t, c, "fail", `echo partial; echo broken >&2; exit 3`)
	r, err = c.Run(context.Background(), OpRepairCommand, "fail", nil)
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op != OpRepairCommand || !strings.Contains(err.Error(), "exit status 3") ||
		!strings.Contains(oe.Output, "partial") || !strings.Contains(oe.Output, "broken") || string(r.Stdout) != "partial\n" {
		t.Fatalf("failing command: %+v %v", r, err)
	}

	c.MaxOutput = 1000
	script(t, c, "flood", `i=0; while [ $i -lt 300 ]; do echo 0123456789; i=$((i+1)); done`)
	r, err = c.Run(context.Background(), OpRepairCommand, "flood", nil)
	if err != nil || len(r.Stdout) != 1000 || r.StdoutDropped != 3300-1000 || !strings.Contains(r.Output, "bytes of output dropped") {
		t.Fatalf("flood: %d bytes kept, %d dropped, %v", len(r.Stdout), r.StdoutDropped, err)
	}
}

// TestCommandTimeout: a command that sleeps past its timeout is killed
// with its process group (a child holding the pipes open too) and the
// run fails saying so.
func TestCommandTimeout(t *testing.T) {
	c := whitelist(t)
	c.Timeout = 300 * time.Millisecond
	script(t, c, "sleepy", `echo started; sleep 30 & sleep 30`)
	start := time.Now()
	r, err := c.Run(context.Background(), OpDiagnose, "sleepy", nil)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the run took %s; the process group was not killed", took)
	}
	if !strings.Contains(fmtErr(err), "timed out after 300ms; its process group was killed") || string(r.Stdout) != "started\n" {
		t.Fatalf("run: %q %v", r.Stdout, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c.Timeout = time.Minute
	if _, err := c.Run(ctx, OpDiagnose, "sleepy", nil); !strings.Contains(fmtErr(err), "was cancelled") {
		t.Fatalf("cancelled run: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
