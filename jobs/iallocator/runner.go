package iallocator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/oob"
)

// DefaultDir is the directory of the external allocators a gntd may run,
// unless configured otherwise (gntd --iallocators-dir).
const DefaultDir = "/etc/gnt/iallocators"

// DefaultTimeout bounds one run of an external allocator when
// Runner.Timeout is 0.
const DefaultTimeout = 60 * time.Second

// DefaultMaxOutput bounds the response read from an external allocator
// when Runner.MaxOutput is 0: 16 MiB.
const DefaultMaxOutput = 16 << 20

// Runner runs external allocators of one directory.
type Runner struct {
	// Dir is the iallocators directory; empty means DefaultDir.
	Dir string
	// Owner is the uid besides root that may own the directory and the
	// programs: the gntd's user.
	Owner int
	// Timeout bounds a run (0: DefaultTimeout); MaxOutput bounds the
	// bytes read on stdout (0: DefaultMaxOutput).
	Timeout   time.Duration
	MaxOutput int
	// TempDir holds the input files; empty means os.TempDir().
	TempDir string
}

// Whitelist is the rule the programs are checked against: the OOB
// helpers' rule on Dir.
func (r *Runner) Whitelist() oob.Whitelist {
	dir := r.Dir
	if dir == "" {
		dir = DefaultDir
	}
	return oob.Whitelist{Dir: dir, Owner: r.Owner, Kind: "iallocator", DirKind: "iallocators directory"}
}

// Path is the program an allocator name stands for.
func (r *Runner) Path(name string) string {
	return filepath.Join(r.Whitelist().DirPath(), name)
}

// Check tells whether name is an allocator this gntd can run: Builtin, or
// a whitelisted program of the directory. Its error says what is wrong.
func (r *Runner) Check(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if name == Builtin {
		return nil
	}
	if r == nil {
		return fmt.Errorf("iallocator %q: this gntd runs no external allocators (only %s)", name, Builtin)
	}
	return r.Whitelist().Check(r.Path(name))
}

// CheckList checks every name of a list (ParseList, then Check).
func (r *Runner) CheckList(list string) error {
	names, err := ParseList(list)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := r.Check(n); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) timeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

func (r *Runner) maxOutput() int {
	if r.MaxOutput <= 0 {
		return DefaultMaxOutput
	}
	return r.MaxOutput
}

// Run runs the external allocator name on input (the JSON input
// message), as Ganeti does: the input is written to a file of its own
// whose name is the program's only argument, and the response is what
// the program prints on stdout when it exits 0. It refuses a program the
// whitelist refuses, and fails, saying so, when the program cannot
// start, exits non-zero or by a signal (its stderr or stdout quoted), is
// still running at the time bound, or writes more than the size bound.
func (r *Runner) Run(ctx context.Context, name string, input []byte) ([]byte, error) {
	if err := r.Check(name); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(r.TempDir, "gnt-iallocator-*.json")
	if err != nil {
		return nil, fmt.Errorf("writing the input file: %v", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(input); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the input file: %v", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing the input file: %v", err)
	}
	t, limit := r.timeout(), r.maxOutput()
	o, err := oob.Bounded(ctx, nil, t, limit, r.Path(name), f.Name())
	if err != nil {
		var ee *oob.ExecError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%v", ee)
		}
		return nil, err
	}
	switch {
	case o.TimedOut:
		return nil, fmt.Errorf("no answer within %s (killed; the bound is gntd --iallocator-timeout)", t)
	case o.Flooded:
		return nil, fmt.Errorf("the answer is longer than %d bytes (killed)", limit)
	case o.Signal != "":
		return nil, fmt.Errorf("killed by signal %s%s", o.Signal, quote(o.Stderr, o.Stdout))
	case o.Exit != 0:
		return nil, fmt.Errorf("exited with status %d%s", o.Exit, quote(o.Stderr, o.Stdout))
	}
	return o.Stdout, nil
}

// quote is a program's message for an error: its stderr, or else its
// stdout, trimmed and shortened.
func quote(stderr, stdout []byte) string {
	s := strings.TrimSpace(string(stderr))
	if s == "" {
		s = strings.TrimSpace(string(stdout))
	}
	if s == "" {
		return ""
	}
	return ": " + short(s, 400)
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
