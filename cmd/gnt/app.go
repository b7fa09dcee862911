package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/buildinfo"
	"github.com/gnt-cluster/gnt/rpc"
)

// environment is what one run of the client gets from its process: where
// to write, and the environment variables (a function, so tests need not
// touch the real environment).
type environment struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// stdin and terminal (whether stdin is one) serve confirmation
	// prompts; without a terminal a prompt refuses.
	stdin    io.Reader
	terminal bool
	// plainHTTP: the tests' in-process servers speak plain HTTP.
	plainHTTP bool
}

// run executes one gnt command line (args[0] is the program name). Errors
// are reported on stderr before they are returned; exitCode maps them to
// the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, environment{stdout: stdout, stderr: stderr, getenv: os.Getenv,
		stdin: os.Stdin, terminal: isTerminal(os.Stdin)})
}

func runEnv(ctx context.Context, args []string, env environment) error {
	app := newApp(env)
	err := app.RunContext(ctx, hoistGlobalFlags(args, app.Flags))
	if err != nil {
		report(env.stderr, err)
	}
	return err
}

// usageError is a command line the client cannot make sense of; it exits 2.
type usageError struct {
	msg string
	cmd string // command path for the help hint, e.g. "gnt node modify"
}

// Error implements error.
func (e *usageError) Error() string { return e.msg }

func usagef(c *cli.Context, format string, args ...any) error {
	cmd := ""
	if c != nil && c.Command != nil {
		cmd = c.Command.HelpName
	}
	return &usageError{msg: fmt.Sprintf(format, args...), cmd: cmd}
}

// errHelpShown ends a run in which help was printed instead of running a
// command that was missing; it exits 2 without a further message.
var errHelpShown = errors.New("help shown")

// errHelpAsked ends an action whose arguments asked for help; the run
// succeeds.
var errHelpAsked = errors.New("help asked")

// exitCode maps the error of run to the exit status: 0 for none, 2 for a
// usage error, 1 for anything else (refused requests, failed jobs, time
// outs).
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), errors.Is(err, errHelpShown):
		return 2
	}
	return 1
}

// report prints an error the way Ganeti's commands do ("Failure: ...").
func report(w io.Writer, err error) {
	var ue *usageError
	var ae *rpc.APIError
	var ua x509.UnknownAuthorityError
	switch {
	case errors.Is(err, errHelpShown):
	case errors.As(err, &ua):
		fmt.Fprintf(w, "Failure: %s\n(%s)\n", errNoCA, err)
	case errors.As(err, &ue):
		fmt.Fprintf(w, "Usage error: %s\n", ue.msg)
		if ue.cmd != "" {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", ue.cmd)
		}
	case errors.As(err, &ae):
		msg := ae.Message
		if msg == "" {
			msg = ae.ErrorCode
		}
		if ae.Field != "" {
			msg += " (field " + ae.Field + ")"
		}
		fmt.Fprintf(w, "Failure: %s\n", msg)
	default:
		fmt.Fprintf(w, "Failure: %s\n", err)
	}
}

// commit is the commit gnt was built from, set by `make build` with
// -ldflags -X main.commit=... (see rpc.VersionText).
var commit string

// buildDate is when gnt was built, set by `make build` with -ldflags -X
// main.buildDate=... (see buildinfo.Text).
var buildDate string

// newApp builds the whole command tree; nothing of it outlives the run.
func newApp(env environment) *cli.App {
	app := &cli.App{
		Name:     "gnt",
		HelpName: "gnt",
		Usage:    "manage a gnt cluster (Ganeti's gnt-* commands under one binary)",
		UsageText: "gnt [global options] NOUN COMMAND [options] [arguments...]\n\n" +
			"Global options may also follow the command.",
		Version: buildinfo.Text(commit, buildDate),
		// `gnt ... --generate-bash-completion` lists what may follow
		// (dist/bash-completion, installed by make install).
		EnableBashCompletion: true,
		// A repeatable option takes one value per use, commas included
		// (Ganeti's -H kvm:a=1,b=2, --net mode=routed,ip=...).
		DisableSliceFlagSeparator: true,
		Writer:                    env.stdout,
		ErrWriter:                 env.stderr,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "server", Usage: "comma-separated API `ADDRESSES` (host[:port]) of master candidates, tried in turn; " +
				"default: $GNT_SERVER, else the list in the file $GNT_CONFIG or ~/.config/gnt/servers, else 127.0.0.1:5080"},
			&cli.BoolFlag{Name: "json", Usage: "print the server's answers as JSON instead of tables and text"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "list commands: the `FIELDS` to show, FIELD,... or +FIELD,... to add to the defaults " +
				"(see 'gnt NOUN list-fields'); -o json and -o table are the old spellings of --json and the default, kept for a while"},
			&cli.BoolFlag{Name: "submit", Usage: "for changes: print the job id and return instead of waiting for the job"},
			&cli.StringFlag{Name: "reason", Usage: "`TEXT` added to the reason trail of the job's opcodes"},
			&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "overall time limit, a `DURATION` such as 30s or 5m; when not given, a job is followed until it ends"},
			&cli.BoolFlag{Name: "consistent", Usage: "read through the leader (up to date) instead of the answering candidate's replica"},
			&cli.StringFlag{Name: "user", Usage: "RAPI `USER` to authenticate as (password: $GNT_PASSWORD, ~/.config/gnt/credentials, else asked); " +
				"default: $GNT_USER, else the user in ~/.config/gnt/credentials"},
		}, tlsFlags()...),
		Commands: []*cli.Command{
			env.clusterCommand(),
			env.nodeCommand(),
			env.groupCommand(),
			env.networkCommand(),
			env.instanceCommand(),
			env.jobCommand(),
			env.filterCommand(),
			env.debugCommand(),
			env.confdCommand(),
			env.repairCommand(),
			env.maintCommand(),
			env.osCommand(),
			{
				Name:  "version",
				Usage: "print the client's version and the commit it was built from (as --version does)",
				Action: func(c *cli.Context) error {
					if c.Args().Present() {
						return usagef(c, "too many arguments: %s", strings.Join(c.Args().Slice(), " "))
					}
					cli.ShowVersion(c)
					return nil
				},
			},
		},
		Action:         missingCommand,
		ExitErrHandler: func(*cli.Context, error) {}, // never os.Exit inside run
		OnUsageError:   onUsageError,
	}
	for _, c := range app.Commands {
		wire(c)
	}
	return app
}

// wire gives every command the usage-error handler and every command with
// subcommands an action for a missing or unknown subcommand.
func wire(c *cli.Command) {
	c.OnUsageError = onUsageError
	if len(c.Subcommands) > 0 && c.Action == nil {
		c.Action = missingCommand
	}
	if len(c.Subcommands) == 0 {
		c.HideHelpCommand = true // a command that runs has no "help" subcommand
	}
	for _, s := range c.Subcommands {
		wire(s)
	}
}

func onUsageError(c *cli.Context, err error, _ bool) error {
	return usagef(c, "%s", err)
}

func missingCommand(c *cli.Context) error {
	if c.Args().Present() {
		return usagef(c, "unknown command %q", c.Args().First())
	}
	if c.Command != nil && c.Command.Name != "" {
		_ = cli.ShowSubcommandHelp(c)
	} else {
		_ = cli.ShowAppHelp(c)
	}
	return errHelpShown
}

// hoistGlobalFlags moves the global flags found after the command to the
// front, so that "gnt node modify n1 --drained yes --submit" works as it does
// with Ganeti's commands. "--" ends the search.
func hoistGlobalFlags(args []string, globals []cli.Flag) []string {
	if len(args) < 2 {
		return args
	}
	names := map[string]bool{} // name -> takes a value
	for _, f := range globals {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			names[n] = !isBool
		}
	}
	var hoisted, rest []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, hasValue := flagName(a)
		takesValue, ok := names[name]
		if !ok {
			rest = append(rest, a)
			continue
		}
		hoisted = append(hoisted, a)
		if takesValue && !hasValue && i+1 < len(args) {
			i++
			hoisted = append(hoisted, args[i])
		}
	}
	out := append([]string{args[0]}, hoisted...)
	return append(out, rest...)
}

// flagName returns the name of a "-name", "--name" or "--name=value"
// argument ("" for arguments that are not flags).
func flagName(arg string) (name string, hasValue bool) {
	if len(arg) < 2 || arg[0] != '-' {
		return "", false
	}
	name = strings.TrimPrefix(arg[1:], "-")
	if name == "" || name[0] == '-' {
		return "", false
	}
	name, _, hasValue = strings.Cut(name, "=")
	return name, hasValue
}

// lateFlags reads the command's flags that follow its first argument (the
// flag package stops at the first argument) and returns the arguments.
func lateFlags(c *cli.Context) ([]string, error) {
	var args []string
	in := c.Args().Slice()
	for i := 0; i < len(in); i++ {
		a := in[i]
		if a == "--" {
			return append(args, in[i+1:]...), nil
		}
		name, hasValue := flagName(a)
		if name == "" {
			args = append(args, a)
			continue
		}
		if name == "h" || name == "help" {
			_ = cli.ShowSubcommandHelp(c)
			return nil, errHelpAsked
		}
		f := commandFlag(c.Command, name)
		if f == nil {
			return nil, usagef(c, "flag provided but not defined: %s", a)
		}
		value := ""
		if hasValue {
			_, value, _ = strings.Cut(a, "=")
		} else if _, isBool := f.(*cli.BoolFlag); isBool {
			value = "true"
		} else {
			if i+1 >= len(in) {
				return nil, usagef(c, "flag needs an argument: %s", a)
			}
			i++
			value = in[i]
		}
		if err := c.Set(f.Names()[0], value); err != nil {
			return nil, usagef(c, "invalid value %q for flag %s: %v", value, a, err)
		}
	}
	return args, nil
}

func commandFlag(cmd *cli.Command, name string) cli.Flag {
	if cmd == nil {
		return nil
	}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// do makes the action of a command that does something: it reads the flags
// given after the arguments, copies the global flags into a Config, and
// calls fn with a session and a context bound to the overall time limit.
func (e environment) do(fn func(ctx context.Context, s *session, c *cli.Context, args []string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		args, err := lateFlags(c)
		if errors.Is(err, errHelpAsked) {
			return nil
		}
		if err != nil {
			return err
		}
		cfg, err := globalConfig(c, e.getenv)
		if err != nil {
			return err
		}
		cfg.plainHTTP = e.plainHTTP
		if cfg.Deprecated != "" {
			fmt.Fprintf(e.stderr, "gnt: warning: %s\n", cfg.Deprecated)
		}
		if cfg.Fields != "" && commandFlag(c.Command, "separator") == nil {
			return usagef(c, "-o %s: -o selects the fields of list commands (node, instance, group and job list); for JSON use --json", cfg.Fields)
		}
		ctx, cancel := context.WithTimeout(c.Context, cfg.Timeout)
		defer cancel()
		ctx, stopWatch := watchReach(ctx, reachLimit, len(cfg.Servers))
		defer stopWatch()
		if cfg.Creds.Prompt {
			pw, err := e.readPassword(fmt.Sprintf("Password for %s: ", cfg.Creds.User))
			if err != nil {
				return fmt.Errorf("--user %s: %w (or set $GNT_PASSWORD)", cfg.Creds.User, err)
			}
			cfg.Creds.Password, cfg.Creds.Prompt = pw, false
		}
		sess := newSession(cfg, e.stdout, e.stderr)
		if !c.IsSet("timeout") {
			sess.follow = c.Context
		}
		err = fn(ctx, sess, c, args)
		ue, unreachable := asUnreachable(ctx)
		switch {
		case err == nil:
		case unreachable:
			err = ue
		case c.Context.Err() != nil:
			err = fmt.Errorf("interrupted: %w", err)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
			err = fmt.Errorf("no result within --timeout %v: %w", cfg.Timeout, err)
		}
		return err
	}
}

// nArgs checks the number of arguments of a command.
func nArgs(c *cli.Context, args []string, min, max int) error {
	switch {
	case len(args) < min:
		return usagef(c, "missing argument: %s", c.Command.ArgsUsage)
	case max >= 0 && len(args) > max:
		return usagef(c, "too many arguments: %s", strings.Join(args[max:], " "))
	}
	return nil
}
