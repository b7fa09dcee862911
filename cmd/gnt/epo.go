package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"
)

func (e environment) clusterEpoCommand() *cli.Command {
	return &cli.Command{
		Name:      "epo",
		Usage:     "emergency power-off of nodes (or with --on, their power-on), through their OOB helpers",
		ArgsUsage: "[NODE...|GROUP...]",
		Description: "Off: shuts down the running instances of the selected online nodes, then powers the nodes off, " +
			"master candidates last and only while a majority of them stays up; the master's node is powered off " +
			"only with --all, last, after its master role went to a candidate that stays up. On: powers the nodes " +
			"on (master candidates first, --power-delay apart), waits until each node's gntd answers again, then " +
			"starts each instance once all its nodes are back. Without --force the plan is shown and confirmed first.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "on", Usage: "power the nodes on instead of off"},
			&cli.BoolFlag{Name: "groups", Usage: "the arguments are node groups"},
			&cli.BoolFlag{Name: "all", Usage: "act on every node of the cluster"},
			&cli.BoolFlag{Name: "force", Usage: "do not ask for confirmation"},
			&cli.Float64Flag{Name: "power-delay", Usage: "`SECONDS` between powering on two nodes (default 2)"},
			&cli.IntFlag{Name: "oob-timeout", Usage: "`SECONDS` the OOB helper may take per node (at most 60)"},
		},
		Action: e.do(e.clusterEpo),
	}
}

func (e environment) clusterEpo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	on, all, groups, force := c.Bool("on"), c.Bool("all"), c.Bool("groups"), c.Bool("force")
	switch {
	case all && groups:
		return usagef(c, "only one of --groups or --all is allowed")
	case all && len(args) > 0:
		return usagef(c, "arguments in combination with --all are not allowed")
	case !all && len(args) == 0:
		return usagef(c, "name the nodes (or with --groups the node groups) to act on, or use --all")
	case s.cfg.Submit && !force:
		return usagef(c, "--submit needs --force: the plan must be confirmed before the job is submitted")
	}
	what := "epo"
	if on {
		what = "epo --on"
	}
	line := "cluster " + what
	if all {
		line += " --all"
	}
	if groups {
		line += " --groups"
	}
	op := map[string]any{"OP_ID": "OP_CLUSTER_EPO", "reason": clientReason(strings.TrimSpace(line + " " + strings.Join(args, " ")))}
	if on {
		op["on"] = true
	}
	if all {
		op["all"] = true
	}
	if groups {
		op["groups"] = true
	}
	if len(args) > 0 {
		op["names"] = args
	}
	if c.IsSet("power-delay") {
		op["power_delay"] = c.Float64("power-delay")
	}
	if c.IsSet("oob-timeout") {
		op["timeout"] = c.Int("oob-timeout")
	}
	if !force {
		// A dry run records the plan: its log shows it, its result names
		// the nodes to confirm.
		j, err := s.submitOps(ctx, url.Values{"dry-run": {"1"}}, op)
		if err != nil {
			return err
		}
		var res struct {
			Plan struct {
				Selected []string `json:"selected"`
			} `json:"plan"`
		}
		if err := json.Unmarshal(j.result(0), &res); err != nil {
			return fmt.Errorf("decoding the EPO plan: %w", err)
		}
		if err := e.confirm(what+" "+strings.Join(res.Plan.Selected, ", "),
			fmt.Sprintf("Do you really want to %s the following nodes: %s?", what, strings.Join(res.Plan.Selected, ", "))); err != nil {
			return err
		}
	}
	_, err := s.submitOps(ctx, nil, op)
	return err
}
