package osdef

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ScriptError is a script that ran and failed (or could not start); Output
// is what it printed (bounded).
type ScriptError struct {
	OS     string
	Script string
	Output string
	Err    error
}

func (e *ScriptError) Error() string {
	if e.Output == "" {
		return fmt.Sprintf("OS %s: %s: %v", e.OS, e.Script, e.Err)
	}
	return fmt.Sprintf("OS %s: %s: %v; output:\n%s", e.OS, e.Script, e.Err, e.Output)
}

func (e *ScriptError) Unwrap() error { return e.Err }

// Call is one script run.
type Call struct {
	Script string
	Input  Input
	// Args are the script's arguments (verify: "parameters").
	Args []string
	// Extra variables, set over the common ones (EXPORT_INDEX, ...).
	Extra map[string]string
	// Stdin feeds the script (nil: empty); Stdout receives its standard
	// output (nil: kept with the output for the log).
	Stdin  io.Reader
	Stdout io.Writer
}

// Run runs one script of a valid OS (from Lookup) and returns what it
// printed. The script is checked against the whitelist again just before
// it runs.
func (c Config) Run(ctx context.Context, o OS, call Call) (string, error) {
	fail := func(out string, err error) (string, error) {
		return out, &ScriptError{OS: o.Name, Script: call.Script, Output: out, Err: err}
	}
	if !o.Valid || o.searchDir == "" {
		return fail("", fmt.Errorf("%w: %s is not a checked, valid OS definition", ErrInvalid, o.Name))
	}
	path := filepath.Join(o.Path, call.Script)
	if err := c.whitelist(o.searchDir).Check(path); err != nil {
		return fail("", err)
	}
	env := Env(o.Version, call.Input)
	for k, v := range call.Extra {
		env[k] = v
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	max := c.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, path, call.Args...)
	cmd.Dir = o.Path
	cmd.Env = EnvList(env)
	cmd.Stdin = call.Stdin
	out := &bounded{max: max}
	cmd.Stderr = out
	cmd.Stdout = out
	if call.Stdout != nil {
		cmd.Stdout = call.Stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	text := out.String()
	if err == nil {
		return text, nil
	}
	var exit *exec.ExitError
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		err = fmt.Errorf("timed out after %s; its process group was killed", timeout)
	case ctx.Err() != nil:
		err = fmt.Errorf("cancelled; its process group was killed: %w", ctx.Err())
	case errors.As(err, &exit):
		err = fmt.Errorf("exited with %s", exit.ProcessState)
	}
	return fail(text, err)
}

// Install runs the create script of the instance's OS (INSTANCE_REINSTALL=1
// when in.Reinstall) after looking the OS up and checking its variant.
func (c Config) Install(ctx context.Context, in Input) (string, error) {
	o, err := c.Lookup(in.Instance.OS)
	if err != nil {
		return "", err
	}
	// An OS of API 20 checks the parameters first (verify parameters), as
	// Ganeti validates them before it creates: a refusal writes nothing.
	if o.Version >= 20 {
		if out, err := c.Run(ctx, o, Call{Script: ScriptVerify, Input: in, Args: []string{"parameters"}}); err != nil {
			return out, err
		}
	}
	extra := map[string]string{}
	if in.Reinstall {
		extra["INSTANCE_REINSTALL"] = "1"
	}
	return c.Run(ctx, o, Call{Script: ScriptCreate, Input: in, Extra: extra})
}

// Rename runs the rename script; in.Instance carries the new name.
func (c Config) Rename(ctx context.Context, in Input, oldName string) (string, error) {
	o, err := c.Lookup(in.Instance.OS)
	if err != nil {
		return "", err
	}
	return c.Run(ctx, o, Call{Script: ScriptRename, Input: in, Extra: map[string]string{"OLD_INSTANCE_NAME": oldName}})
}

// Export runs the export script for disk index disk, its dump going to w.
func (c Config) Export(ctx context.Context, in Input, disk int, w io.Writer) (string, error) {
	return c.diskScript(ctx, in, disk, ScriptExport, "EXPORT", nil, w)
}

// Import runs the import script for disk index disk, fed from r.
func (c Config) Import(ctx context.Context, in Input, disk int, r io.Reader) (string, error) {
	return c.diskScript(ctx, in, disk, ScriptImport, "IMPORT", r, nil)
}

func (c Config) diskScript(ctx context.Context, in Input, disk int, script, prefix string, r io.Reader, w io.Writer) (string, error) {
	o, err := c.Lookup(in.Instance.OS)
	if err != nil {
		return "", err
	}
	if disk < 0 || disk >= len(in.Instance.Disks) {
		return "", fmt.Errorf("instance %s has no disk %d (it has %d)", in.Instance.Name, disk, len(in.Instance.Disks))
	}
	extra := map[string]string{prefix + "_INDEX": strconv.Itoa(disk)}
	if disk < len(in.DiskPaths) && in.DiskPaths[disk] != "" {
		extra[prefix+"_DISK_PATH"] = in.DiskPaths[disk]
		extra[prefix+"_DEVICE"] = in.DiskPaths[disk]
	}
	return c.Run(ctx, o, Call{Script: script, Input: in, Extra: extra, Stdin: r, Stdout: w})
}

// Verify runs "verify parameters" for an OS of API version 20 (the OSP_*
// values of in), and does nothing for older ones, which have no verify.
func (c Config) Verify(ctx context.Context, in Input) (string, error) {
	o, err := c.Lookup(in.Instance.OS)
	if err != nil || o.Version < 20 {
		return "", err
	}
	return c.Run(ctx, o, Call{Script: ScriptVerify, Input: in, Args: []string{"parameters"}})
}

// bounded keeps the first max bytes written to it and counts the rest.
type bounded struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int
}

func (b *bounded) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - len(b.buf)
	if room >= len(p) {
		b.buf = append(b.buf, p...)
	} else {
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		b.dropped += len(p) - max(room, 0)
	}
	return len(p), nil
}

func (b *bounded) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped > 0 {
		return string(b.buf) + fmt.Sprintf("\n[%d more bytes of output dropped]", b.dropped)
	}
	return string(b.buf)
}
