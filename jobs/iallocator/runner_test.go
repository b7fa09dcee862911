package iallocator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newRunner is a runner of a fresh directory owned by the test's user,
// with scripts name -> shell body.
func newRunner(t *testing.T, scripts map[string]string) *Runner {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "iallocators")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &Runner{Dir: dir, Owner: os.Geteuid(), TempDir: t.TempDir()}
}

func TestRunner(t *testing.T) {
	r := newRunner(t, map[string]string{
		// Ganeti's protocol: the input file is the only argument.
		"echo":    `[ $# -eq 1 ] || { echo "want 1 argument, got $#" >&2; exit 2; }; cat "$1"`,
		"fail":    `echo "cannot parse the input" >&2; exit 1`,
		"sleeper": `exec sleep 600`,
		"flood":   `yes '{"success":true,'`,
		"killed":  `kill -9 $$`,
	})
	if err := os.WriteFile(filepath.Join(r.Dir, "writable"), []byte("#!/bin/sh\n"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(r.Dir, "writable"), 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	out, err := r.Run(ctx, "echo", []byte(`{"version":2}`))
	if err != nil || string(out) != `{"version":2}` {
		t.Fatalf("echo: %q %v", out, err)
	}
	if ents, _ := os.ReadDir(r.TempDir); len(ents) != 0 {
		t.Errorf("the input file was left behind: %v", ents)
	}
	for _, tc := range []struct {
		name string
		r    *Runner
		want string
	}{
		{"fail", r, "exited with status 1: cannot parse the input"},
		{"sleeper", &Runner{Dir: r.Dir, Owner: r.Owner, Timeout: 100 * time.Millisecond}, "no answer within 100ms"},
		{"flood", &Runner{Dir: r.Dir, Owner: r.Owner, MaxOutput: 1000}, "longer than 1000 bytes"},
		{"killed", r, "killed by signal"},
		{"missing", r, "no such file"},
		{"writable", r, "writable by group or others"},
		{"../echo", r, "is a file name of the iallocators directory"},
		{"", r, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.r.Run(ctx, tc.name, []byte(`{}`))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q in it", err, tc.want)
			}
		})
	}
	if err := r.Check(Builtin); err != nil {
		t.Errorf("hail: %v", err)
	}
	if err := (*Runner)(nil).Check("echo"); err == nil || !strings.Contains(err.Error(), "no external allocators") {
		t.Errorf("nil runner: %v", err)
	}
	if err := r.CheckList("hail,echo"); err != nil {
		t.Errorf("hail,echo: %v", err)
	}
	if err := r.CheckList("hail,missing"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("hail,missing: %v", err)
	}
}

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: the names joined by "|", or the error
	}{
		{"", ""},
		{"hail", "hail"},
		{"site,hail", "site|hail"},
		{"site,,hail", "error: allocator 2 of the list is empty"},
		{",", "error: allocator 1 of the list is empty"},
		{"a,a", `error: allocator "a" listed twice`},
		{"a b", "error: has the character ' '"},
		{"/usr/lib/hail", "error: has the character '/'"},
		{"..", "error: is not an allocator name"},
		{strings.Repeat("x", 129), "error: 129 bytes long; at most 128"},
		{strings.Repeat("a,", 16) + "z", "error: lists 17 allocators; at most 16"},
		{"caf\u00e9", "error: has the character"},
	} {
		names, err := ParseList(tc.in)
		got := strings.Join(names, "|")
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.Contains(got, strings.TrimPrefix(tc.want, "error: ")) || (strings.HasPrefix(tc.want, "error") != (err != nil)) || (err == nil && got != tc.want) {
			t.Errorf("ParseList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTry(t *testing.T) {
	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	v, name, err := Try([]string{"a", "b", "c"}, func(n string) (string, error) {
		if n == "a" {
			return "", errors.New("timed out")
		}
		return "answer of " + n, nil
	}, logf)
	if err != nil || v != "answer of b" || name != "b" {
		t.Fatalf("got %q %q %v", v, name, err)
	}
	if len(logged) != 1 || logged[0] != "iallocator a failed: timed out; trying b next" {
		t.Errorf("logged %q", logged)
	}
	inner := errors.New("no room")
	_, _, err = Try([]string{"a", "hail"}, func(n string) (int, error) {
		if n == "a" {
			return 0, errors.New("garbage")
		}
		return 0, inner
	}, nil)
	if err == nil || err.Error() != "every iallocator of the list failed (a: garbage; hail: no room)" || !errors.Is(err, inner) {
		t.Errorf("all failed: %v", err)
	}
	_, _, err = Try([]string{"x"}, func(string) (int, error) { return 0, errors.New("boom") }, nil)
	if err == nil || err.Error() != "iallocator x: boom" {
		t.Errorf("one failed: %v", err)
	}
	if names, err := Resolve("", ""); err != nil || len(names) != 1 || names[0] != Builtin {
		t.Errorf("Resolve empty: %v %v", names, err)
	}
	if names, err := Resolve("", "site,hail"); err != nil || strings.Join(names, ",") != "site,hail" {
		t.Errorf("Resolve default: %v %v", names, err)
	}
	if names, err := Resolve("hail", "site"); err != nil || strings.Join(names, ",") != "hail" {
		t.Errorf("Resolve opcode: %v %v", names, err)
	}
}
