package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Operator commands: the self-diagnose collector and the repair commands
// run executables that an operator put in a whitelist directory, in the
// manner of Ganeti's restricted commands (design-restricted-commands) and
// of its self-diagnose collector (DataCollectors/Diagnose.hs). The cluster
// configuration (writable through the API) only names a file; what may run
// is decided on the node, by root.

// The node agent's operations that are not driver operations (not in
// Ops): they run operator commands, not hypervisor scripts.
const (
	OpDiagnose      Op = "diagnose"
	OpRepairCommand Op = "repair-command"
	// OpOSList reports the OS definitions of the node's search path
	// (package osdef).
	OpOSList Op = "os-list"
)

// Default whitelist directories.
const (
	DefaultDiagnoseDir = "/etc/gnt/node-diagnose-commands"
	DefaultRepairDir   = "/etc/gnt/node-repair-commands"
)

// Default bounds of a command run.
const (
	DefaultDiagnoseTimeout = 30 * time.Second
	DefaultRepairTimeout   = 5 * time.Minute
	DefaultCommandOutput   = 64 << 10
)

// maxCommandName bounds a command's file name (NAME_MAX).
const maxCommandName = 255

// commandPath is the PATH a command gets (Ganeti's restricted commands run
// with a reset environment).
const commandPath = "/sbin:/bin:/usr/sbin:/usr/bin"

// ErrCommandRefused is matched (errors.Is) by every refusal to run a
// command: a bad name, a file not in the whitelist, or one that fails the
// file checks.
var ErrCommandRefused = errors.New("command refused")

// The refusals; each wraps ErrCommandRefused.
var (
	// ErrCommandName: the name is not a plain file name.
	ErrCommandName = fmt.Errorf("%w: not a plain file name", ErrCommandRefused)
	// ErrNotWhitelisted: no such file in the whitelist directory (or no
	// such directory).
	ErrNotWhitelisted = fmt.Errorf("%w: not whitelisted", ErrCommandRefused)
	// ErrUnsafeCommand: the file or the directory fails the checks
	// (symlink, not a regular file, wrong owner, writable by group or
	// others, not executable by its owner).
	ErrUnsafeCommand = fmt.Errorf("%w: unsafe", ErrCommandRefused)
)

// Commands is a whitelist directory of operator executables and how they
// are run.
//
// A command is a plain file name (no '/', not "." or "..", no NUL, at most
// 255 bytes) of a file in Dir that is a regular file (checked with Lstat:
// a symlink is refused), owned by Owner, with permissions 0755 or stricter
// (not writable by group or others, no setuid, setgid or sticky bit), and
// executable by its owner. Dir itself must be a directory owned by Owner
// and not writable by group or others, so that only Owner can change what
// is whitelisted.
//
// A command runs with no arguments, in "/", with only PATH in its
// environment, in its own process group, which is killed at Timeout (or
// when the caller gives up). Its stdout and stderr are kept up to
// MaxOutput bytes each; the rest is dropped and counted.
type Commands struct {
	Dir string
	// Owner is the uid that must own Dir and each command: 0 (root) in
	// gntd. Tests set their own uid.
	Owner int
	// Timeout bounds one run (default DefaultDiagnoseTimeout; gntd gives
	// repair commands DefaultRepairTimeout); MaxOutput bounds what is
	// kept of its stdout and of its stderr (default
	// DefaultCommandOutput).
	Timeout   time.Duration
	MaxOutput int
}

func (c Commands) maxOutput() int {
	if c.MaxOutput <= 0 {
		return DefaultCommandOutput
	}
	return c.MaxOutput
}

// CheckCommandName refuses (ErrCommandName) a name that is not a plain
// file name.
func CheckCommandName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrCommandName)
	case len(name) > maxCommandName:
		return fmt.Errorf("%w: the name is longer than %d bytes", ErrCommandName, maxCommandName)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrCommandName, name)
	case strings.ContainsRune(name, '/'):
		return fmt.Errorf("%w: %q contains a '/'; name a file in the whitelist directory", ErrCommandName, name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%w: %q contains a NUL byte", ErrCommandName, name)
	}
	return nil
}

func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// Resolve checks a command against the whitelist and returns its path.
// Every refusal matches ErrCommandRefused and one of ErrCommandName,
// ErrNotWhitelisted, ErrUnsafeCommand.
func (c Commands) Resolve(name string) (string, error) {
	if err := CheckCommandName(name); err != nil {
		return "", err
	}
	if c.Dir == "" {
		return "", fmt.Errorf("%w: no whitelist directory is configured", ErrNotWhitelisted)
	}
	dir, err := os.Stat(c.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: the whitelist directory %s does not exist", ErrNotWhitelisted, c.Dir)
	case err != nil:
		return "", fmt.Errorf("%w: whitelist directory: %v", ErrUnsafeCommand, err)
	case !dir.IsDir():
		return "", fmt.Errorf("%w: %s is not a directory", ErrUnsafeCommand, c.Dir)
	}
	if uid, ok := ownerOf(dir); !ok || uid != c.Owner {
		return "", fmt.Errorf("%w: the whitelist directory %s is owned by uid %d, not %d", ErrUnsafeCommand, c.Dir, uid, c.Owner)
	}
	if dir.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%w: the whitelist directory %s is writable by group or others (mode %04o)", ErrUnsafeCommand, c.Dir, dir.Mode().Perm())
	}
	path := filepath.Join(c.Dir, name)
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: no %s in %s", ErrNotWhitelisted, name, c.Dir)
	case err != nil:
		return "", fmt.Errorf("%w: %v", ErrUnsafeCommand, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return "", fmt.Errorf("%w: %s is a symlink", ErrUnsafeCommand, path)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%w: %s is not a regular file", ErrUnsafeCommand, path)
	}
	if uid, ok := ownerOf(fi); !ok || uid != c.Owner {
		return "", fmt.Errorf("%w: %s is owned by uid %d, not %d", ErrUnsafeCommand, path, uid, c.Owner)
	}
	mode := fi.Mode()
	if extra := mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky) &^ 0o755; extra != 0 {
		return "", fmt.Errorf("%w: %s has permissions %s; want 0755 or stricter", ErrUnsafeCommand, path, mode)
	}
	if mode.Perm()&0o100 == 0 {
		return "", fmt.Errorf("%w: %s is not executable by its owner", ErrUnsafeCommand, path)
	}
	return path, nil
}

// CommandRun is what a command printed. Output is stdout and stderr as
// they came (each bounded), for logs; Stdout is stdout alone, and
// StdoutDropped counts the bytes of it that were dropped.
type CommandRun struct {
	Stdout        []byte
	StdoutDropped int
	Stderr        string
	Output        string
}

// Run resolves a command and runs it with stdin (nil: empty). It fails
// with a refusal (errors.Is ErrCommandRefused) without running anything,
// or with an *OpError (Op is op) when the command ran and failed: a
// non-zero exit, the timeout (the process group is then killed), or ctx
// ending. What it printed is returned either way.
func (c Commands) Run(ctx context.Context, op Op, name string, stdin []byte) (CommandRun, error) {
	path, err := c.Resolve(name)
	if err != nil {
		return CommandRun{}, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultDiagnoseTimeout
	}
	max := c.maxOutput()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, path)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + commandPath}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	combined := &boundedBuffer{max: 2 * max}
	out := &boundedBuffer{max: max}
	errBuf := &boundedBuffer{max: max}
	cmd.Stdout = &teeWriter{combined, out}
	cmd.Stderr = &teeWriter{combined, errBuf}
	killGroupOnCancel(cmd)
	runErr := cmd.Run()
	out.mu.Lock()
	dropped := out.dropped
	out.mu.Unlock()
	res := CommandRun{Stdout: out.Bytes(), StdoutDropped: dropped, Stderr: errBuf.String(), Output: combined.String()}
	if runErr == nil {
		return res, nil
	}
	var why error
	var exit *exec.ExitError
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		why = fmt.Errorf("%s timed out after %s; its process group was killed", name, timeout)
	case ctx.Err() != nil:
		why = fmt.Errorf("%s was cancelled; its process group was killed: %w", name, ctx.Err())
	case errors.As(runErr, &exit):
		why = fmt.Errorf("%s exited with %s", name, exit.ProcessState)
	default:
		why = fmt.Errorf("%s: %w", name, runErr)
	}
	return res, &OpError{Op: op, Err: why, Output: res.Output}
}
