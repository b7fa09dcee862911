package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout is the design's bound on one helper run (Ganeti's
// oobTimeout); a Runner may be configured lower, never higher.
const DefaultTimeout = 60 * time.Second

// DefaultMaxOutput is how much of a helper's stdout (and of its stderr)
// the runner reads; a helper that prints more on stdout is killed.
const DefaultMaxOutput = 64 << 10

// Runner runs OOB helpers. The zero value is ready to use.
type Runner struct {
	// Timeout bounds each run; zero means DefaultTimeout, more than
	// DefaultTimeout is cut to it.
	Timeout time.Duration
	// MaxOutput is the number of bytes read of stdout and of stderr; zero
	// means DefaultMaxOutput.
	MaxOutput int
	// Env is the helper's environment; nil means this process's, with
	// LC_ALL=C so that tools the helper calls print in a known language.
	Env []string
	// Programs is the whitelist a helper must pass right before each run
	// (the zero value: DefaultProgramsDir, owned by root).
	Programs Whitelist
	// Done, when set, is told the outcome of every Run: the command and
	// "success" or the error's kind (Kind.String).
	Done func(command, result string)
}

func (r *Runner) timeout(override time.Duration) time.Duration {
	t := r.Timeout
	if t <= 0 || t > DefaultTimeout {
		t = DefaultTimeout
	}
	if override > 0 && override < t {
		t = override
	}
	return t
}

func (r *Runner) maxOutput() int {
	if r.MaxOutput <= 0 {
		return DefaultMaxOutput
	}
	return r.MaxOutput
}

// Run runs `program command node` and interprets the outcome (Interpret).
// timeout, when positive and below the runner's bound, bounds this run
// (the opcode's timeout field). At the bound, or when the helper floods
// stdout, or when ctx ends, the helper's whole process group is killed.
// Whatever the helper started in its process group is killed when it
// exits, too: a helper must not leave work behind in it (one that starts a
// long-lived process, like gnt-oob-fake, puts it in a session of its own).
func (r *Runner) Run(ctx context.Context, program, command, node string, timeout time.Duration) (res Result, err error) {
	if r.Done != nil {
		defer func() { r.Done(command, resultLabel(err)) }()
	}
	if !ValidCommand(command) {
		return Result{}, &Error{Kind: KindUnsupported, Command: command, Exit: -1, Detail: "not an OOB command"}
	}
	if err := r.Programs.Check(program); err != nil {
		return Result{}, &Error{Kind: KindNotRunnable, Command: command, Exit: -1, Detail: err.Error(), Cause: err}
	}
	o, err := r.run(ctx, program, command, node, r.timeout(timeout))
	if err != nil {
		return Result{}, err
	}
	return Interpret(command, o)
}

// run runs the helper with Bounded, its failures as *Error.
func (r *Runner) run(ctx context.Context, program, command, node string, timeout time.Duration) (Outcome, error) {
	o, err := Bounded(ctx, r.Env, timeout, r.maxOutput(), program, command, node)
	var ee *ExecError
	switch {
	case errors.As(err, &ee) && ee.Start:
		return o, &Error{Kind: KindNotRunnable, Command: command, Exit: -1, Detail: ee.Error()}
	case errors.As(err, &ee):
		return o, &Error{Kind: KindFailed, Command: command, Exit: -1, Detail: ee.Err.Error()}
	}
	return o, err
}

// ExecError is a failure of Bounded to start or to wait for a program.
type ExecError struct {
	Program string
	Start   bool // the program could not be started
	Err     error
}

func (e *ExecError) Error() string {
	if e.Start {
		return fmt.Sprintf("cannot run %s: %v", e.Program, e.Err)
	}
	return e.Err.Error()
}

// Bounded starts a program in a process group of its own and collects its
// outcome. stdout and stderr are pipes this function reads itself (not
// through os/exec's copying goroutines), so the helper's exit is seen at
// once even when something it started still holds the pipes; that
// something is then killed with the group, and the reads are given a short
// grace before they are cut.
//
// It runs argv (argv[0] the program) with
// env (nil: the gntd's environment with LC_ALL=C), for at most timeout,
// keeping at most limit bytes of stdout and of stderr: a program that
// writes more on stdout, or is still running at the bound, is killed with
// its process group (Outcome.Flooded, Outcome.TimedOut). It is the OOB
// runner's way of running a helper, also used for other helper programs
// (external allocators). The error is an *ExecError, or ctx's error when
// ctx ended first (the program is then killed).
func Bounded(ctx context.Context, env []string, timeout time.Duration, limit int, argv ...string) (Outcome, error) {
	program := argv[0]
	o := Outcome{Timeout: timeout, Limit: limit}
	outR, outW, err := os.Pipe()
	if err != nil {
		return o, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return o, err
	}
	cmd := exec.Command(program, argv[1:]...)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = env
	if cmd.Env == nil {
		cmd.Env = append(os.Environ(), "LC_ALL=C")
	}
	startErr := cmd.Start()
	outW.Close()
	errW.Close()
	if startErr != nil {
		outR.Close()
		errR.Close()
		return o, &ExecError{Program: program, Start: true, Err: startErr}
	}
	pgid := cmd.Process.Pid
	killGroup := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

	flood := make(chan struct{})
	var floodOnce sync.Once
	var wg sync.WaitGroup
	var stdout, stderr []byte
	wg.Add(2)
	go func() {
		defer wg.Done()
		var over bool
		stdout, over = readBounded(outR, limit)
		if over {
			floodOnce.Do(func() { close(flood) })
		}
	}()
	go func() {
		defer wg.Done()
		// A chatty stderr is cut, not fatal: the message is the start.
		stderr, _ = readBounded(errR, limit)
	}()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var werr error
	select {
	case werr = <-waited:
	case <-timer.C:
		o.TimedOut = true
		killGroup()
		werr = <-waited
	case <-flood:
		o.Flooded = true
		killGroup()
		werr = <-waited
	case <-ctx.Done():
		killGroup()
		<-waited
		outR.Close()
		errR.Close()
		wg.Wait()
		return o, ctx.Err()
	}
	// The helper is gone; so is anything it left in its group.
	killGroup()
	grace := time.Now().Add(500 * time.Millisecond)
	outR.SetReadDeadline(grace)
	errR.SetReadDeadline(grace)
	wg.Wait()
	outR.Close()
	errR.Close()
	select {
	case <-flood:
		o.Flooded = true
	default:
	}
	o.Stdout, o.Stderr = stdout, stderr
	o.Exit = -1
	if st := cmd.ProcessState; st != nil {
		o.Exit = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			o.Signal = ws.Signal().String()
		}
	} else if werr != nil {
		return o, &ExecError{Program: program, Err: werr}
	}
	return o, nil
}

// readBounded reads r to its end, keeping at most limit bytes; over
// reports that there was more (it then stops reading).
func readBounded(r io.Reader, limit int) (data []byte, over bool) {
	buf := make([]byte, 0, 512)
	chunk := make([]byte, 4096)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			if len(buf)+n > limit {
				buf = append(buf, chunk[:limit-len(buf)]...)
				return buf, true
			}
			buf = append(buf, chunk[:n]...)
		}
		if err != nil {
			return buf, false
		}
	}
}

// resultLabel is Done's result for a run that ended with err.
func resultLabel(err error) string {
	var e *Error
	switch {
	case err == nil:
		return "success"
	case errors.As(err, &e):
		return e.Kind.String()
	}
	return "error"
}
