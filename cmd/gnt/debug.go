package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
)

func (e environment) debugCommand() *cli.Command {
	return &cli.Command{
		Name:  "debug",
		Usage: "debugging and testing commands (gnt-debug)",
		Subcommands: []*cli.Command{
			{
				Name:      "delay",
				Usage:     "run OP_TEST_DELAY: sleep on the master, in --repeat recorded steps",
				ArgsUsage: "[DURATION]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "duration", Usage: "`DURATION` of each step, e.g. 30s or 1.5 (seconds); or give it as the argument"},
					&cli.IntFlag{Name: "repeat", Aliases: []string{"r"}, Usage: "number of steps (each recorded before the next starts)"},
					&cli.StringSliceFlag{Name: "node", Aliases: []string{"n"}, Usage: "lock this `NODE` exclusively while delaying (repeatable; implies --locks)"},
					&cli.BoolFlag{Name: "locks", Usage: "take locks (the BGL shared, and the --node locks); Ganeti's no_locks=false"},
					&cli.BoolFlag{Name: "fail", Usage: "fail after the last step"},
					&cli.IntFlag{Name: "priority", Usage: "opcode `PRIORITY`, -20 (highest) to 19"},
					&cli.StringSliceFlag{Name: "depends", Usage: "depend on job `ID[:STATUS,...]` (repeatable)"},
					&cli.IntFlag{Name: "chain", Usage: "submit `N` such jobs at once, each depending on the success of the one before"},
				},
				Action: e.do(debugDelay),
			},
			{
				Name:  "crash",
				Usage: "run OP_TEST_CRASH: kill the gntd whose executor runs it (tests the poison-job guard; needs gntd --debug)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "mode", Value: fsm.CrashExit, Usage: "how the gntd dies: exit (os.Exit) or panic (in the executor's goroutine)"},
					&cli.IntFlag{Name: "times", Usage: fmt.Sprintf("kill `N` executors, then succeed (0: every executor that runs it; at most %d)", fsm.MaxTestCrashTimes)},
				},
				Action: e.do(debugCrash),
			},
		},
	}
}

// parseDelay reads a duration as Go's "30s" or as seconds.
func parseDelay(s string) (float64, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d.Seconds(), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q: want e.g. 30s or 1.5", s)
	}
	return f, nil
}

// parseDepends reads "ID[:STATUS,...]" into Ganeti's [id, [statuses]].
func parseDepends(spec string) ([]any, error) {
	idStr, sts, _ := strings.Cut(spec, ":")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("bad dependency %q: want ID or ID:STATUS[,STATUS]", spec)
	}
	statuses := []string{}
	if sts != "" {
		statuses = strings.Split(sts, ",")
	}
	return []any{id, statuses}, nil
}

func debugDelay(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 1); err != nil {
		return err
	}
	spec := c.String("duration")
	if len(args) == 1 {
		if spec != "" {
			return usagef(c, "give the duration as an argument or with --duration, not both")
		}
		spec = args[0]
	}
	if spec == "" {
		return usagef(c, "missing duration: gnt debug delay 30s (or --duration 30s)")
	}
	secs, err := parseDelay(spec)
	if err != nil {
		return usagef(c, "%v", err)
	}
	op := map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": secs}
	if n := c.Int("repeat"); n != 0 {
		op["repeat"] = n
	}
	if nodes := c.StringSlice("node"); len(nodes) > 0 {
		op["on_nodes"] = nodes
	}
	if c.Bool("locks") || len(c.StringSlice("node")) > 0 {
		op["no_locks"] = false
	}
	if c.Bool("fail") {
		op["fail"] = true
	}
	if c.IsSet("priority") {
		op["priority"] = c.Int("priority")
	}
	var deps []any
	for _, d := range c.StringSlice("depends") {
		dep, err := parseDepends(d)
		if err != nil {
			return usagef(c, "%v", err)
		}
		deps = append(deps, dep)
	}
	if len(deps) > 0 {
		op["depends"] = deps
	}
	n := c.Int("chain")
	if n < 0 || n > fsm.MaxJobsPerSubmission {
		return usagef(c, "--chain %d: want 1 to %d (jobs in one submission)", n, fsm.MaxJobsPerSubmission)
	}
	if n == 0 {
		_, err := s.change(ctx, http.MethodPost, "/2/jobs", nil, map[string]any{"ops": []any{op}})
		return err
	}
	jobs := make([][]map[string]any, n)
	for i := range jobs {
		o := make(map[string]any, len(op)+1)
		for k, v := range op {
			o[k] = v
		}
		if i > 0 {
			o["depends"] = append(append([]any{}, deps...), []any{-1, []string{fsm.StatusSuccess}})
		}
		jobs[i] = []map[string]any{o}
	}
	if err := checkWrite(http.MethodPost, "/2/gnt/jobs", nil, map[string]any{"jobs": jobs}); err != nil {
		return err
	}
	ids, meta, err := s.api.SubmitJobs(ctx, jobs, s.cfg.Reason)
	if err != nil {
		return err
	}
	if s.cfg.Submit || s.cfg.JSON() {
		for _, id := range ids {
			if s.cfg.JSON() {
				fmt.Fprintln(s.stdout, id)
			} else {
				fmt.Fprintf(s.stdout, "JobID: %d\n", id)
			}
		}
		if s.cfg.Submit {
			return nil
		}
	}
	for _, id := range ids {
		j, _, err := s.waitJob(ctx, id, meta.Index)
		if err != nil {
			return err
		}
		if j.Status != fsm.StatusSuccess {
			return j.failure()
		}
	}
	return nil
}

func debugCrash(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	op := map[string]any{"OP_ID": "OP_TEST_CRASH"}
	switch m := c.String("mode"); m {
	case fsm.CrashExit:
	case fsm.CrashPanic:
		op["mode"] = m
	default:
		return usagef(c, "--mode %q: want %s or %s", m, fsm.CrashExit, fsm.CrashPanic)
	}
	if n := c.Int("times"); n < 0 || n > fsm.MaxTestCrashTimes {
		return usagef(c, "--times %d: want 0 (every executor) to %d", n, fsm.MaxTestCrashTimes)
	} else if n > 0 {
		op["times"] = n
	}
	_, err := s.change(ctx, http.MethodPost, "/2/jobs", nil, map[string]any{"ops": []any{op}})
	return err
}
