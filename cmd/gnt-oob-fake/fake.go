package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// exitError is a failure with its exit status: 1 for a command that
// failed, 2 for one the helper does not support (the protocol's codes).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func failed(format string, args ...any) error {
	return &exitError{code: 1, msg: fmt.Sprintf(format, args...)}
}

// Config is the helper's configuration file.
type Config struct {
	StateDir    string          `json:"state_dir"`
	StopTimeout string          `json:"stop_timeout,omitempty"`
	Nodes       map[string]Node `json:"nodes"`
}

// Node is a node whose power is a process.
type Node struct {
	Command []string `json:"command"`
	PIDFile string   `json:"pid_file"`
	LogFile string   `json:"log_file,omitempty"`
}

func loadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, failed("reading the configuration: %v", err)
	}
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, failed("configuration %s: %v", path, err)
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Dir(path)
	}
	for name, n := range c.Nodes {
		if len(n.Command) == 0 || n.PIDFile == "" {
			return nil, failed("configuration %s: node %s needs a command and a pid_file", path, name)
		}
	}
	return &c, nil
}

func (c *Config) stopTimeout() time.Duration {
	if d, err := time.ParseDuration(c.StopTimeout); err == nil && d > 0 {
		return d
	}
	return 10 * time.Second
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("gnt-oob-fake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", getenv("GNT_OOB_FAKE_CONFIG"), "configuration `file`")
	if err := fs.Parse(args[1:]); err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	if fs.NArg() != 2 {
		return &exitError{code: 2, msg: fmt.Sprintf("usage: gnt-oob-fake [--config FILE] COMMAND NODE (got %d arguments)", fs.NArg())}
	}
	command, node := fs.Arg(0), fs.Arg(1)
	if *config == "" {
		return failed("no configuration: give --config or set GNT_OOB_FAKE_CONFIG")
	}
	cfg, err := loadConfig(*config)
	if err != nil {
		return err
	}
	if node == "" || strings.ContainsAny(node, "/\x00") || node == "." || node == ".." {
		return failed("invalid node name %q", node)
	}
	f := &fake{cfg: cfg, node: node, spec: cfg.Nodes[node]}
	unlock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := f.injectedFault(); err != nil {
		return err
	}
	switch command {
	case "power-on":
		return f.powerOn()
	case "power-off":
		return f.powerOff()
	case "power-cycle":
		if !f.isOn() {
			return failed("node %s is powered off; power-cycle needs it on", node)
		}
		if err := f.powerOff(); err != nil {
			return err
		}
		return f.powerOn()
	case "power-status":
		fmt.Fprintf(stdout, "{\"powered\": %v}\n", f.isOn())
		return nil
	case "health":
		return f.health(stdout)
	}
	return &exitError{code: 2, msg: fmt.Sprintf("command %q is not supported", command)}
}

// fake acts on one node.
type fake struct {
	cfg  *Config
	node string
	spec Node
}

func (f *fake) path(suffix string) string { return filepath.Join(f.cfg.StateDir, f.node+suffix) }

// lock serialises commands on one node.
func (f *fake) lock() (func(), error) {
	if err := os.MkdirAll(f.cfg.StateDir, 0o755); err != nil {
		return nil, failed("state directory: %v", err)
	}
	lf, err := os.OpenFile(f.path(".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, failed("lock: %v", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		lf.Close()
		return nil, failed("lock: %v", err)
	}
	return func() { lf.Close() }, nil
}

func (f *fake) injectedFault() error {
	b, err := os.ReadFile(f.path(".fail"))
	if err != nil {
		return nil
	}
	code, msg, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	n, err := strconv.Atoi(code)
	if err != nil {
		n = 1
	}
	return &exitError{code: n, msg: msg}
}

func (f *fake) isOn() bool {
	b, err := os.ReadFile(f.path(".power"))
	return err != nil || strings.TrimSpace(string(b)) != "off"
}

func (f *fake) setPower(on bool) error {
	state := "off"
	if on {
		state = "on"
	}
	tmp := f.path(".power.tmp")
	if err := os.WriteFile(tmp, []byte(state+"\n"), 0o644); err != nil {
		return failed("recording the power state: %v", err)
	}
	if err := os.Rename(tmp, f.path(".power")); err != nil {
		return failed("recording the power state: %v", err)
	}
	return nil
}

// running returns the pid of the node's process if it runs.
func (f *fake) running() (int, bool) {
	if len(f.spec.Command) == 0 {
		return 0, false
	}
	b, err := os.ReadFile(f.spec.PIDFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, isProcess(pid, f.spec.Command[0])
}

// isProcess reports whether pid runs the program (not a zombie, and not
// an unrelated process that reused the pid).
func isProcess(pid int, program string) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return false
		}
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	// A script runs as "interpreter script ...": the program is then the
	// second argument.
	argv := strings.SplitN(string(cmdline), "\x00", 3)
	return argv[0] == program || (len(argv) > 1 && argv[1] == program)
}

func (f *fake) powerOn() error {
	if len(f.spec.Command) > 0 {
		if _, ok := f.running(); !ok {
			if err := f.start(); err != nil {
				return err
			}
		}
	}
	return f.setPower(true)
}

// start runs the node's command detached: a session of its own (so
// neither the caller's process group kill nor its exit touch it), stdin
// from /dev/null, output to the log file.
func (f *fake) start() error {
	// The output goes to a file (the log, else /dev/null), never to a
	// pipe of ours: this helper exits at once, and a process writing to a
	// pipe nobody reads would die of SIGPIPE.
	name, flags := os.DevNull, os.O_WRONLY
	if f.spec.LogFile != "" {
		name, flags = f.spec.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND
	}
	out, err := os.OpenFile(name, flags, 0o644)
	if err != nil {
		return failed("opening %s: %v", name, err)
	}
	defer out.Close()
	if f.spec.LogFile != "" {
		fmt.Fprintf(out, "==== %s gnt-oob-fake power-on %s: %s\n", time.Now().Format(time.RFC3339), f.node, strings.Join(f.spec.Command, " "))
	}
	cmd := exec.Command(f.spec.Command[0], f.spec.Command[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return failed("starting %s: %v", f.spec.Command[0], err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	if err := os.WriteFile(f.spec.PIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return failed("writing %s: %v", f.spec.PIDFile, err)
	}
	return nil
}

func (f *fake) powerOff() error {
	if pid, ok := f.running(); ok {
		if err := stop(pid, f.spec.Command[0], f.cfg.stopTimeout()); err != nil {
			return failed("stopping node %s (pid %d): %v", f.node, pid, err)
		}
		os.Remove(f.spec.PIDFile)
	}
	return f.setPower(false)
}

// stop ends the process and its process group: SIGTERM, then SIGKILL
// after timeout.
func stop(pid int, program string, timeout time.Duration) error {
	target := -pid
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		target = pid // not a group leader: only the process
	}
	if err := syscall.Kill(target, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	deadline := time.Now().Add(timeout)
	for isProcess(pid, program) {
		if time.Now().After(deadline) {
			syscall.Kill(target, syscall.SIGKILL)
			for i := 0; i < 100 && isProcess(pid, program); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			if isProcess(pid, program) {
				return fmt.Errorf("it did not die of SIGKILL")
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	if target < 0 {
		// The leader is gone; what it started in its group gets the rest
		// of the time to follow, then SIGKILL (zombies, which only their
		// reaper can clear, do not count).
		for groupAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if groupAlive(pid) {
			syscall.Kill(target, syscall.SIGKILL)
			for i := 0; i < 50 && groupAlive(pid); i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return nil
}

// groupAlive reports whether a process of process group pgid is alive
// (not a zombie).
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		// Fields after the name: state, ppid, pgrp, ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" && p > 0 {
			return true
		}
	}
	return false
}

func (f *fake) health(stdout io.Writer) error {
	if b, err := os.ReadFile(f.path(".health")); err == nil {
		_, err := stdout.Write(b)
		return err
	}
	if !f.isOn() {
		fmt.Fprintln(stdout, `[["fake power supply", "OK"], ["fake ambient temperature", "UNKNOWN"]]`)
		return nil
	}
	fmt.Fprintln(stdout, `[["fake power supply", "OK"], ["fake ambient temperature", "OK"]]`)
	return nil
}
