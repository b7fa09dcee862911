package main

import (
	"context"
	"net/url"

	"github.com/urfave/cli/v2"
)

// changeGroupFlags are the flags of gnt instance change-group and gnt
// group evacuate (Ganeti's gnt-instance change-group and gnt-group
// evacuate).
func changeGroupFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "iallocator", Aliases: []string{"I"}, Usage: "allocators planning the moves, tried in order: `NAME[,NAME...]`: hail (built-in) or programs of the iallocators directory (default: the cluster's default list)"},
		&cli.StringSliceFlag{Name: "to", Usage: "a target node `GROUP` (repeatable; default: every other group)"},
		&cli.BoolFlag{Name: "early-release", Usage: "accepted as Ganeti's; gnt releases an old secondary's disks as soon as the new one has them anyway"},
		&cli.BoolFlag{Name: "dry-run", Usage: "only show the plan; move nothing"},
	}
}

// changeGroupCommand is gnt instance change-group.
func (e environment) changeGroupCommand() *cli.Command {
	return e.groupChangeCommand("change-group", "move an instance to nodes of another node group, as the allocators plan "+
		"(drbd: to two new nodes, disks copied, then migrated; diskless: re-created; plain and file cannot move)",
		"NAME", "OP_INSTANCE_CHANGE_GROUP", "instance_name", nil)
}

// groupEvacuateCommand is gnt group evacuate.
func (e environment) groupEvacuateCommand() *cli.Command {
	return e.groupChangeCommand("evacuate", "move every instance with a node in a node group to other groups, as the allocators plan (one after another)",
		"GROUP", "OP_GROUP_EVACUATE", "group_name", []cli.Flag{
			&cli.BoolFlag{Name: "force-failover", Usage: "move running instances stopped (stop, start on the new node) instead of by live migration"},
			&cli.BoolFlag{Name: "sequential", Usage: "accepted as Ganeti's; gnt always moves the instances one after another"},
		})
}

// groupChangeCommand is a command submitting opcode opID for its one
// argument, given as field, with the flags of changeGroupFlags and more.
func (e environment) groupChangeCommand(name, usage, arg, opID, field string, more []cli.Flag) *cli.Command {
	return &cli.Command{Name: name, Usage: usage, ArgsUsage: arg, Flags: append(changeGroupFlags(), more...),
		Action: e.do(func(ctx context.Context, s *session, c *cli.Context, args []string) error {
			if err := nArgs(c, args, 1, 1); err != nil {
				return err
			}
			return submitChangeGroup(ctx, s, c, map[string]any{"OP_ID": opID, field: args[0]})
		}),
	}
}

// submitChangeGroup completes op with the flags and submits it as a job
// (POST /2/jobs: Ganeti's RAPI has no resource for these opcodes), then
// follows it.
func submitChangeGroup(ctx context.Context, s *session, c *cli.Context, op map[string]any) error {
	if ia := c.String("iallocator"); ia != "" {
		op["iallocator"] = ia
	}
	if to := c.StringSlice("to"); len(to) > 0 {
		op["target_groups"] = to
	}
	for flag, key := range map[string]string{"early-release": "early_release", "force-failover": "force_failover", "sequential": "sequential"} {
		if c.Bool(flag) {
			op[key] = true
		}
	}
	var q url.Values
	if c.Bool("dry-run") {
		q = url.Values{"dry-run": {"1"}}
	}
	_, err := s.submitOps(ctx, q, op)
	return err
}
