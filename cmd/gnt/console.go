package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// `gnt instance console NAME [--show-cmd]`, Ganeti's gnt-instance console:
// GET /2/instances/NAME/console says how to reach the console. Kind "ssh"
// (a kvm guest's serial console) is reached by running ssh to the node
// with the given command (socat on the console's unix socket);
// --show-cmd prints that ssh command instead. Kind "vnc" prints where VNC
// listens, then the server's message on its TLS and password if any;
// "message" the server's message.

// consoleInfo is the answer of GET /2/instances/NAME/console.
type consoleInfo struct {
	Instance string   `json:"instance"`
	Kind     string   `json:"kind"`
	Message  string   `json:"message"`
	Host     string   `json:"host"`
	Port     int      `json:"port"`
	User     string   `json:"user"`
	Command  []string `json:"command"`
	Display  int      `json:"display"`
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// sshArgs is the ssh command line reaching an "ssh" console, as Ganeti
// builds it (no escape character, batch mode, a terminal).
func (ci consoleInfo) sshArgs() []string {
	port := ci.Port
	if port == 0 {
		port = 22
	}
	return []string{"ssh", "-oEscapeChar=none", "-oBatchMode=yes", "-q", "-t", "-p", strconv.Itoa(port),
		ci.User + "@" + ci.Host, shellJoin(ci.Command)}
}

func instanceConsole(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	var ci consoleInfo
	if _, err := s.getInto(ctx, instancePath(args[0])+"/console", nil, &ci); err != nil {
		return err
	}
	switch ci.Kind {
	case "ssh":
		if ci.Host == "" || ci.User == "" || len(ci.Command) == 0 {
			return fmt.Errorf("the server's ssh console of %s has no host, user or command", ci.Instance)
		}
		argv := ci.sshArgs()
		if c.Bool("show-cmd") {
			fmt.Fprintln(s.stdout, shellJoin(argv))
			return nil
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, s.stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("console of %s (%s): %w", ci.Instance, shellJoin(argv), err)
		}
		return nil
	case "vnc":
		fmt.Fprintf(s.stdout, "Instance %s has VNC listening on %s:%d (display %d).\n", ci.Instance, ci.Host, ci.Port, ci.Display)
		if ci.Message != "" {
			// How its TLS (VeNCrypt) and password are set.
			fmt.Fprintln(s.stdout, ci.Message)
		}
		return nil
	case "spice":
		fmt.Fprintf(s.stdout, "Instance %s has SPICE listening on %s:%d.\n", ci.Instance, ci.Host, ci.Port)
		return nil
	case "message":
		fmt.Fprintln(s.stdout, ci.Message)
		return nil
	}
	return fmt.Errorf("the server answered a console of kind %q, which gnt does not know", ci.Kind)
}
