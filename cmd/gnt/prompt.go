package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"github.com/urfave/cli/v2"
)

// errAborted ends a command the user declined at a confirmation prompt.
var errAborted = errors.New("aborted")

// confirm asks a yes/no question Ganeti's way ("... y/[n]/?: ": "?"
// explains the choices, an empty answer is no) and returns nil only for
// yes. Without a terminal on stdin nobody can answer, so it refuses
// instead of guessing: what names the action says what was not done, and
// --force is the way to do it unattended.
func (e environment) confirm(what, question string) error {
	if e.stdin == nil || !e.terminal {
		return fmt.Errorf("refusing to %s without confirmation: stdin is not a terminal (use --force)", what)
	}
	r := bufio.NewReader(e.stdin)
	for {
		fmt.Fprintf(e.stdout, "%s y/[n]/?: ", question)
		line, err := r.ReadString('\n')
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return nil
		case "n", "no":
			return errAborted
		case "?":
			fmt.Fprint(e.stdout, "y - Perform the operation\nn - Do not perform the operation\n? - Print this help\n")
			continue
		case "":
			if err == nil {
				return errAborted // the default
			}
		}
		if err != nil {
			fmt.Fprintln(e.stdout)
			return errAborted
		}
	}
}

// forceFlag is -f/--force of the commands that ask for confirmation.
func forceFlag() cli.Flag {
	return &cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "do not ask for confirmation (needed without a terminal)"}
}

// confirmed wraps the action of a command that asks for confirmation as
// Ganeti's does: unless --force is given, question (from the command's
// arguments, once they are checked by fn's own nArgs) is asked first;
// what names the action in the refusal without a terminal.
func (e environment) confirmed(nargs int, question func(ctx context.Context, s *session, c *cli.Context, args []string) (what, q string),
	fn func(ctx context.Context, s *session, c *cli.Context, args []string) error) func(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return func(ctx context.Context, s *session, c *cli.Context, args []string) error {
		if err := nArgs(c, args, nargs, nargs); err != nil {
			return err
		}
		if !c.Bool("force") {
			what, q := question(ctx, s, c, args)
			if err := e.confirm(what, q); err != nil {
				return err
			}
		}
		return fn(ctx, s, c, args)
	}
}

// isTerminal reports whether f is a terminal (it answers the TCGETS ioctl).
func isTerminal(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// readPassword asks for a password on the terminal without echoing it.
// Without a terminal on stdin nobody can answer, and it refuses.
func (e environment) readPassword(prompt string) (string, error) {
	f, ok := e.stdin.(*os.File)
	if !ok || !e.terminal {
		return "", errors.New("stdin is not a terminal to ask for the password")
	}
	var old syscall.Termios
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&old))); errno != 0 {
		return "", fmt.Errorf("reading the terminal's settings: %v", errno)
	}
	quiet := old
	quiet.Lflag &^= syscall.ECHO
	quiet.Lflag |= syscall.ICANON
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCSETS, uintptr(unsafe.Pointer(&quiet))); errno != 0 {
		return "", fmt.Errorf("turning the terminal's echo off: %v", errno)
	}
	defer syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCSETS, uintptr(unsafe.Pointer(&old)))
	fmt.Fprint(e.stderr, prompt)
	line, err := bufio.NewReader(f).ReadString('\n')
	fmt.Fprintln(e.stderr)
	if err != nil && line == "" {
		return "", fmt.Errorf("reading the password: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}
