package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/rpc"
)

func groupPath(name string) string { return "/2/groups/" + url.PathEscape(name) }

func allocPolicyFlag() cli.Flag {
	return &cli.StringFlag{Name: "alloc-policy", Usage: "allocation `POLICY`: preferred, last_resort or unallocable"}
}

func (e environment) groupCommand() *cli.Command {
	return &cli.Command{
		Name:  "group",
		Usage: "node group operations (gnt-group)",
		Subcommands: append([]*cli.Command{
			{
				Name:      "add",
				Usage:     "create a node group",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{allocPolicyFlag(), ndparamsFlag(), diskparamsFlag()},
				Action:    e.do(groupAdd),
			},
			{
				Name:      "list",
				Usage:     "list node groups",
				ArgsUsage: "[NAME...]",
				Flags:     listFlags(),
				Action:    e.do(groupList),
			},
			listFieldsCommand(groupListing),
			{
				Name:      "info",
				Usage:     "show node groups' configuration",
				ArgsUsage: "[NAME...]",
				Action:    e.do(groupInfo),
			},
			{
				Name:      "modify",
				Usage:     "change a node group's parameters",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{allocPolicyFlag(), ndparamsFlag(), diskparamsFlag()},
				Action:    e.do(groupModify),
			},
			{
				Name:      "remove",
				Usage:     "remove an empty node group",
				ArgsUsage: "NAME",
				Action:    e.do(groupRemove),
			},
			e.groupEvacuateCommand(),
		}, e.tagCommands("node group", true, func(n string) string { return groupPath(n) + "/tags" })...),
	}
}

// readGroupBody reads the group parameters both add and modify take.
func readGroupBody(c *cli.Context) (rpc.ModifyGroupRequest, error) {
	r := flagReader{c: c}
	b := rpc.ModifyGroupRequest{AllocPolicy: r.string("alloc-policy"), NDParams: r.ndparams("node-parameters")}
	if r.err != nil {
		return b, r.err
	}
	if c.IsSet("disk-parameters") {
		dp, err := parseDiskParams(c.StringSlice("disk-parameters"))
		if err != nil {
			return b, usagef(c, "-D: %v", err)
		}
		b.DiskParams = dp
	}
	return b, nil
}

func groupAdd(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	body, err := readGroupBody(c)
	if err != nil {
		return err
	}
	add := rpc.AddGroupRequest{GroupName: args[0], AllocPolicy: body.AllocPolicy, NDParams: body.NDParams, DiskParams: body.DiskParams}
	_, err = s.change(ctx, http.MethodPost, "/2/groups", nil, add)
	return err
}

func groupModify(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	body, err := readGroupBody(c)
	if err != nil {
		return err
	}
	j, err := s.change(ctx, http.MethodPut, groupPath(args[0])+"/modify", nil, body)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	printChanges(s.stdout, "node group "+args[0], j.result(0))
	return nil
}

func groupRemove(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	_, err := s.change(ctx, http.MethodDelete, groupPath(args[0]), nil, nil)
	return err
}

var groupListing = listing{
	kind: "node group",
	path: "/2/groups",
	key:  "name",
	defaults: []listColumn{
		{title: "Group", field: "name"},
		{title: "Nodes", field: "node_cnt"},
		{title: "AllocPolicy", field: "alloc_policy"},
		{title: "NDParams", value: func(o object) string {
			nd, _ := o["custom_ndparams"].(map[string]any)
			if len(nd) == 0 {
				return "-"
			}
			return formatValue(nd)
		}},
	},
	fields: groupFields,
}

func groupList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return s.list(ctx, groupListing, args, c)
}

func groupInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return s.info(ctx, groupListing, args, func(o object) { showGroup(s.stdout, o) })
}

func showGroup(w io.Writer, o object) {
	fmt.Fprintf(w, "Group: %s\n", str(o, "name"))
	fmt.Fprintf(w, "  UUID: %s\n", str(o, "uuid"))
	fmt.Fprintf(w, "  Number of nodes: %s\n", str(o, "node_cnt"))
	if nodes := list(o, "node_list"); len(nodes) > 0 {
		fmt.Fprintf(w, "  Nodes: %s\n", strings.Join(nodes, ", "))
	}
	fmt.Fprintf(w, "  Allocation policy: %s\n", str(o, "alloc_policy"))
	fmt.Fprintf(w, "  Serial number: %s\n", str(o, "serial_no"))
	fmt.Fprintf(w, "  Creation time: %s\n", epoch(o, "ctime"))
	fmt.Fprintf(w, "  Modification time: %s\n", epoch(o, "mtime"))
	fmt.Fprintf(w, "  Tags: %s\n", tagList(o))
	fmt.Fprintf(w, "  Node parameters:\n")
	nd, _ := o["ndparams"].(map[string]any)
	own, _ := o["custom_ndparams"].(map[string]any)
	if own == nil {
		own = map[string]any{}
	}
	printParams(w, "    ", nd, own)
}

func diskparamsFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "disk-parameters", Aliases: []string{"D"}, Usage: "disk parameters `TEMPLATE:KEY=VALUE[,...]` (repeatable; -KEY resets one)"}
}
