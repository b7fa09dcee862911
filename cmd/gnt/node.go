package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

func nodePath(name string) string { return "/2/nodes/" + url.PathEscape(name) }

func (e environment) nodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "node",
		Usage: "node operations (gnt-node)",
		Subcommands: append([]*cli.Command{
			{
				Name:      "add",
				Usage:     "add a node to the cluster",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "primary-ip", Usage: "primary `IP` address of the node (required)"},
					&cli.StringFlag{Name: "secondary-ip", Usage: "secondary (replication) `IP` address"},
					&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "node `GROUP` (default: the default group)"},
					yesNoFlag("master-candidate", "make the node a master candidate (default: as the pool needs)"),
					yesNoFlag("master-capable", "whether the node may become master candidate"),
					yesNoFlag("vm-capable", "whether the node may run instances"),
					ndparamsFlag(),
				},
				Action: e.do(nodeAdd),
			},
			{
				Name:      "list",
				Usage:     "list nodes",
				ArgsUsage: "[NAME... | FILTER]",
				Description: "Default columns: Node, Role (M master, C candidate, R regular, D drained, O offline), " +
					"Group, PrimaryIP, MTotal, DTotal, CPUs, Pinst, Sinst, Flags (no-mc: not master capable, " +
					"no-vm: not vm capable, unpowered), Liveness (the node's gntd as gossip sees it: alive, " +
					"suspect, dead, or unknown before the master recorded it).",
				Flags:  append(listFlags(), filterFlag()),
				Action: e.do(nodeList),
			},
			listFieldsCommand(nodeListing),
			{
				Name:      "info",
				Usage:     "show nodes' configuration",
				ArgsUsage: "[NAME...]",
				Action:    e.do(nodeInfo),
			},
			{
				Name:      "modify",
				Usage:     "change a node's flags and parameters",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					yesNoFlag("master-candidate", "master candidate flag"),
					yesNoFlag("drained", "drained flag (no new instances)"),
					yesNoFlag("offline", "offline flag"),
					yesNoFlag("master-capable", "whether the node may become master candidate"),
					yesNoFlag("vm-capable", "whether the node may run instances"),
					yesNoFlag("powered", "recorded power state (nodes with an OOB helper)"),
					&cli.StringFlag{Name: "secondary-ip", Usage: "new secondary `IP` address"},
					&cli.BoolFlag{Name: "auto-promote", Usage: "promote other nodes if the candidate pool would shrink"},
					&cli.BoolFlag{Name: "force", Usage: "force the change"},
					ndparamsFlag(),
				},
				Action: e.do(nodeModify),
			},
			{
				Name:      "remove",
				Usage:     "remove a node from the cluster (asks first unless --force)",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{forceFlag()},
				Action: e.do(e.confirmed(1, ask("remove node %s",
					"This will remove node %s from the cluster. Continue?"), nodeRemove)),
			},
			{
				Name:      "evacuate",
				Usage:     "move the instances off a node, as the allocator plans (drbd: failover/migration and new secondaries)",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "primary-only", Aliases: []string{"p"}, Usage: "only the instances the node runs (to their secondaries)"},
					&cli.BoolFlag{Name: "secondary-only", Aliases: []string{"s"}, Usage: "only the instances the node backs (new secondaries)"},
					&cli.StringFlag{Name: "iallocator", Aliases: []string{"I"}, Usage: "allocators planning the moves, tried in order: `NAME[,NAME...]` (default: the cluster's default list)"},
					forceFlag(),
				},
				Action: e.do(e.confirmed(1, evacuateQuestion, nodeEvacuate)),
			},
			{
				Name:      "migrate",
				Usage:     "live-migrate the instances the node runs to their secondaries",
				ArgsUsage: "NAME",
				Action:    e.do(nodeMigrate),
			},
			{
				Name:      "role",
				Usage:     "show a node's role, or set it (master-candidate, regular, drained, offline)",
				ArgsUsage: "NAME [ROLE]",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "auto-promote", Usage: "promote other nodes if the candidate pool would shrink"},
					&cli.BoolFlag{Name: "force", Usage: "force the change"},
				},
				Action: e.do(nodeRole),
			},
			e.nodePowerCommand(),
			e.nodeHealthCommand(),
		}, append(e.storageCommands(), e.tagCommands("node", true, func(n string) string { return nodePath(n) + "/tags" })...)...),
	}
}

func nodeAdd(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	r := flagReader{c: c}
	body := rpc.AddNodeRequest{
		NodeName:        args[0],
		PrimaryIP:       c.String("primary-ip"),
		SecondaryIP:     c.String("secondary-ip"),
		Group:           c.String("group"),
		MasterCandidate: r.yesNo("master-candidate"),
		MasterCapable:   r.yesNo("master-capable"),
		VMCapable:       r.yesNo("vm-capable"),
		NDParams:        r.ndparams("node-parameters"),
	}
	if body.PrimaryIP == "" {
		r.fail("--primary-ip is required")
	}
	if r.err != nil {
		return r.err
	}
	_, err := s.change(ctx, http.MethodPost, "/2/nodes", nil, body)
	return err
}

var nodeListing = listing{
	kind: "node",
	path: "/2/nodes",
	key:  "name",
	defaults: []listColumn{
		{title: "Node", field: "name"},
		{title: "Role", field: "role"},
		{title: "Group", field: "group"},
		{title: "PrimaryIP", field: "pip"},
		{title: "MTotal", field: "mtotal"},
		{title: "MFree", field: "mfree"},
		{title: "DTotal", field: "dtotal"},
		{title: "DFree", field: "dfree"},
		{title: "CPUs", field: "ctotal"},
		{title: "Pinst", field: "pinst_cnt"},
		{title: "Sinst", field: "sinst_cnt"},
		{title: "Flags", value: nodeFlags},
		{title: "Liveness", value: nodeLiveness},
	},
	fields: nodeFields,
}

// nodeFlags summarises the flags the role letter does not show.
func nodeFlags(o object) string {
	var f []string
	if v, ok := o["master_capable"].(bool); ok && !v {
		f = append(f, "no-mc")
	}
	if v, ok := o["vm_capable"].(bool); ok && !v {
		f = append(f, "no-vm")
	}
	if v, ok := o["powered"].(bool); ok && !v {
		f = append(f, "unpowered")
	}
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, ",")
}

// nodeLiveness is the node's gossip liveness ("?" from a server that
// does not report it).
func nodeLiveness(o object) string {
	if v := str(o, "gnt_liveness"); v != "" {
		return v
	}
	return "?"
}

func nodeList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	l, names, err := s.applyFilter(ctx, c, nodeListing, "node", args)
	if err != nil {
		return err
	}
	return s.list(ctx, l, names, c)
}

var roleNames = map[string]string{"M": "master", "C": "master candidate", "R": "regular", "D": "drained", "O": "offline"}

func nodeInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return s.info(ctx, nodeListing, args, func(o object) { showNode(s.stdout, o) })
}

// showStorage prints the node's storage units as the leader recorded
// them (gnt_storage), or says there is no report yet.
func showStorage(w io.Writer, o object) {
	units, _ := o["gnt_storage"].([]any)
	if o["gnt_storage"] == nil {
		fmt.Fprintf(w, "  storage units: not reported yet (placement counts the declared disk)\n")
		return
	}
	fmt.Fprintf(w, "  storage units (reported %s):\n", epoch(o, "gnt_storage_reported"))
	for _, x := range units {
		u, ok := x.(map[string]any)
		if !ok {
			continue
		}
		line := fmt.Sprintf("    - %s %s: size %s, free %s", str(u, "type"), str(u, "name"), mebibytes(u, "size"), mebibytes(u, "free"))
		if vg := str(u, "vg"); vg != "" {
			line += ", in " + vg
		}
		if a, _ := u["allocatable"].(bool); !a {
			line += ", not allocatable"
		}
		fmt.Fprintln(w, line)
	}
}

func showNode(w io.Writer, o object) {
	fmt.Fprintf(w, "Node name: %s\n", str(o, "name"))
	fmt.Fprintf(w, "  UUID: %s\n", str(o, "uuid"))
	role := str(o, "role")
	if n := roleNames[role]; n != "" {
		role = n
	}
	fmt.Fprintf(w, "  role: %s\n", role)
	if live := nodeLiveness(o); live != "unknown" && live != "?" {
		fmt.Fprintf(w, "  liveness: %s since %s\n", live, epoch(o, "gnt_liveness_since"))
	} else {
		fmt.Fprintf(w, "  liveness: %s\n", live)
	}
	fmt.Fprintf(w, "  primary ip: %s\n", str(o, "pip"))
	fmt.Fprintf(w, "  secondary ip: %s\n", str(o, "sip"))
	fmt.Fprintf(w, "  group: %s (%s)\n", str(o, "group"), str(o, "group.uuid"))
	for _, f := range []struct{ label, key string }{
		{"master candidate", "master_candidate"}, {"drained", "drained"}, {"offline", "offline"},
		{"powered", "powered"}, {"master_capable", "master_capable"}, {"vm_capable", "vm_capable"},
	} {
		if f.key == "powered" && o["powered"] == nil {
			continue // only nodes with an OOB helper have a power state
		}
		fmt.Fprintf(w, "  %s: %s\n", f.label, str(o, f.key))
	}
	fmt.Fprintf(w, "  memory: total %s, free %s\n", mebibytes(o, "mtotal"), mebibytes(o, "mfree"))
	fmt.Fprintf(w, "  disk: total %s, free %s\n", mebibytes(o, "dtotal"), mebibytes(o, "dfree"))
	showStorage(w, o)
	fmt.Fprintf(w, "  cpus: %s\n", formatValue(o["ctotal"]))
	for _, k := range []struct{ key, what string }{{"pinst_list", "primary"}, {"sinst_list", "secondary"}} {
		insts := list(o, k.key)
		if len(insts) == 0 {
			fmt.Fprintf(w, "  %s for no instances\n", k.what)
			continue
		}
		fmt.Fprintf(w, "  %s for instances:\n", k.what)
		for _, i := range insts {
			fmt.Fprintf(w, "    - %s\n", i)
		}
	}
	if addrs, ok := o["addrs"].(map[string]any); ok && len(addrs) > 0 {
		fmt.Fprintf(w, "  addresses:\n")
		printParams(w, "    ", addrs, nil)
	}
	if v := str(o, "version"); v != "" {
		fmt.Fprintf(w, "  version: %s\n", v)
	}
	if v := str(o, "gnt_hypervisor"); v != "" {
		fmt.Fprintf(w, "  hypervisor: %s\n", v)
	}
	if v := str(o, "gnt_accel"); v != "" {
		if strings.HasPrefix(v, "tcg") {
			fmt.Fprintf(w, "  accelerator: %s (WARNING: emulation, guests run slowly)\n", v)
		} else {
			fmt.Fprintf(w, "  accelerator: %s\n", v)
		}
	}
	if v := str(o, "gnt_taps"); v != "" {
		if strings.HasPrefix(v, "no") {
			fmt.Fprintf(w, "  tap devices: %s (WARNING: instances with NICs cannot start here)\n", v)
		} else {
			fmt.Fprintf(w, "  tap devices: %s\n", v)
		}
	}
	fmt.Fprintf(w, "  serial number: %s\n", str(o, "serial_no"))
	fmt.Fprintf(w, "  creation time: %s\n", epoch(o, "ctime"))
	fmt.Fprintf(w, "  modification time: %s\n", epoch(o, "mtime"))
	fmt.Fprintf(w, "  tags: %s\n", tagList(o))
	fmt.Fprintf(w, "  node parameters (set on the node):\n")
	nd, _ := o["ndparams"].(map[string]any)
	printParams(w, "    ", nd, nil)
}

func nodeModify(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	r := flagReader{c: c}
	body := rpc.ModifyNodeRequest{
		MasterCandidate: r.yesNo("master-candidate"),
		Offline:         r.yesNo("offline"),
		Drained:         r.yesNo("drained"),
		MasterCapable:   r.yesNo("master-capable"),
		VMCapable:       r.yesNo("vm-capable"),
		SecondaryIP:     r.string("secondary-ip"),
		NDParams:        r.ndparams("node-parameters"),
		Powered:         r.yesNo("powered"),
		AutoPromote:     trueOrNil(c.Bool("auto-promote")),
		Force:           trueOrNil(c.Bool("force")),
	}
	if r.err != nil {
		return r.err
	}
	j, err := s.change(ctx, http.MethodPut, nodePath(args[0])+"/modify", nil, body)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	printChanges(s.stdout, "node "+args[0], j.result(0))
	return nil
}

func nodeRemove(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	_, err := s.change(ctx, http.MethodDelete, nodePath(args[0]), nil, nil)
	return err
}

func nodeRole(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 2); err != nil {
		return err
	}
	path := nodePath(args[0]) + "/role"
	if len(args) == 1 {
		if c.Bool("force") || c.Bool("auto-promote") {
			return usagef(c, "--force and --auto-promote apply only when setting a role")
		}
		var role string
		raw, err := s.getInto(ctx, path, nil, &role)
		if err != nil {
			return err
		}
		if s.cfg.JSON() {
			return printJSON(s.stdout, raw)
		}
		fmt.Fprintln(s.stdout, role)
		return nil
	}
	role := args[1]
	switch role {
	case fsm.RoleMaster, fsm.RoleCandidate, fsm.RoleRegular, fsm.RoleDrained, fsm.RoleOffline:
	default:
		return usagef(c, "unknown role %q: use master-candidate, regular, drained or offline", role)
	}
	var q url.Values
	if c.Bool("force") {
		q = with(q, "force", "1")
	}
	if c.Bool("auto-promote") {
		q = with(q, "auto-promote", "1")
	}
	j, err := s.change(ctx, http.MethodPut, path, q, role)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	printChanges(s.stdout, "node "+args[0], j.result(0))
	return nil
}

// trueOrNil sends a switch only when it is given.
func trueOrNil(b bool) *bool {
	if !b {
		return nil
	}
	return &b
}

func nodeEvacuate(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	mode := "all"
	switch {
	case c.Bool("primary-only") && c.Bool("secondary-only"):
		return usagef(c, "--primary-only and --secondary-only exclude each other")
	case c.Bool("primary-only"):
		mode = "primary-only"
	case c.Bool("secondary-only"):
		mode = "secondary-only"
	}
	body := map[string]any{"mode": mode}
	if ia := c.String("iallocator"); ia != "" {
		body["iallocator"] = ia
	}
	_, err := s.change(ctx, http.MethodPost, nodePath(args[0])+"/evacuate", nil, body)
	return err
}

// evacuateQuestion asks Ganeti's question, naming the node's instances
// when the node can be read (the job's plan may differ if they change).
func evacuateQuestion(ctx context.Context, s *session, c *cli.Context, args []string) (string, string) {
	var o object
	insts := "of the node"
	if _, err := s.getInto(ctx, nodePath(args[0]), nil, &o); err == nil {
		var names []string
		if !c.Bool("secondary-only") {
			names = append(names, list(o, "pinst_list")...)
		}
		if !c.Bool("primary-only") {
			names = append(names, list(o, "sinst_list")...)
		}
		if len(names) > 0 {
			insts = strings.Join(names, ", ")
		} else {
			insts = "(none now)"
		}
	}
	return "evacuate node " + args[0], fmt.Sprintf("Relocate instance(s) %s from node(s) %s?", insts, args[0])
}

func nodeMigrate(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	_, err := s.change(ctx, http.MethodPost, nodePath(args[0])+"/migrate", nil, map[string]any{})
	return err
}
