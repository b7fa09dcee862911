package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/rpc"
)

// powerFlags are the options of gnt node power (Ganeti's gnt-node power).
func powerFlags(command string) []cli.Flag {
	flags := []cli.Flag{
		&cli.IntFlag{Name: "oob-timeout", Usage: "`SECONDS` the OOB helper may take per node (at most 60)"},
	}
	if command != "status" {
		flags = append(flags, &cli.BoolFlag{Name: "force", Usage: "do not ask for confirmation"})
	}
	switch command {
	case "on":
		flags = append(flags, &cli.Float64Flag{Name: "power-delay", Usage: "`SECONDS` to wait between powering on two nodes (default 2)"})
	case "off":
		flags = append(flags,
			&cli.BoolFlag{Name: "ignore-status", Usage: "power off without marking the nodes offline first"},
			&cli.BoolFlag{Name: "auto-promote", Usage: "promote other nodes if marking a node offline shrinks the candidate pool"})
	}
	return flags
}

func (e environment) nodePowerCommand() *cli.Command {
	sub := func(command, usage string) *cli.Command {
		return &cli.Command{
			Name:      command,
			Usage:     usage,
			ArgsUsage: "[NODE...]",
			Flags:     powerFlags(command),
			Action:    e.do(e.nodePower(command)),
		}
	}
	return &cli.Command{
		Name:  "power",
		Usage: "power nodes on, off or cycle them, or show their power state, through their OOB helper",
		Description: "Without nodes, on, off and cycle act on every node with an OOB helper (off and cycle " +
			"leaving out the master) after asking; status lists every node with an OOB helper (on, off, unknown). " +
			"Powering off marks the nodes offline first (in the same job) unless --ignore-status. " +
			"Powering off or cycling the master's node hands its master role to another master candidate first.",
		Subcommands: []*cli.Command{
			sub("on", "power nodes on"),
			sub("off", "power nodes off (marking them offline first)"),
			sub("cycle", "power-cycle nodes"),
			sub("status", "show the power state of nodes (the helper's answer)"),
		},
	}
}

func (e environment) nodeHealthCommand() *cli.Command {
	return &cli.Command{
		Name:      "health",
		Usage:     "show the health items the nodes' OOB helpers report",
		ArgsUsage: "[NODE...]",
		Flags:     []cli.Flag{&cli.IntFlag{Name: "oob-timeout", Usage: "`SECONDS` the OOB helper may take per node (at most 60)"}},
		Action:    e.do(nodeHealth),
	}
}

// clientReason is the reason trail entry the client adds to its opcodes.
func clientReason(text string) [][]any {
	return [][]any{{"gnt:client:gnt", text, time.Now().UnixNano()}}
}

// oobResult is one node's entry of OP_OOB_COMMAND's result, Ganeti's
// [[RS_NORMAL, name], [status, payload]].
type oobResult struct {
	Node    string
	Status  int // 0 RS_NORMAL, 2 RS_NODATA (the helper failed; see the job log)
	Payload json.RawMessage
}

func parseOOBResults(raw json.RawMessage) ([]oobResult, error) {
	var entries [][2][2]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("decoding the OOB result %s: %w", raw, err)
	}
	out := make([]oobResult, len(entries))
	for i, e := range entries {
		if err := json.Unmarshal(e[0][1], &out[i].Node); err != nil {
			return nil, fmt.Errorf("decoding the OOB result %s: %w", raw, err)
		}
		if err := json.Unmarshal(e[1][0], &out[i].Status); err != nil {
			return nil, fmt.Errorf("decoding the OOB result %s: %w", raw, err)
		}
		out[i].Payload = e[1][1]
	}
	return out, nil
}

// nodeObjects reads every node (bulk) by name, with the master's name.
func (s *session) nodeObjects(ctx context.Context) (map[string]object, []object, string, error) {
	_, objs, err := s.bulk(ctx, nodeListing, nil)
	if err != nil {
		return nil, nil, "", err
	}
	byName := map[string]object{}
	master := ""
	for _, o := range objs {
		byName[str(o, "name")] = o
		if str(o, "role") == "M" {
			master = str(o, "name")
		}
	}
	return byName, objs, master, nil
}

// submitOps submits one job of opcodes and follows it.
func (s *session) submitOps(ctx context.Context, q url.Values, ops ...map[string]any) (*job, error) {
	raws := make([]json.RawMessage, len(ops))
	for i, op := range ops {
		b, err := json.Marshal(op)
		if err != nil {
			return nil, err
		}
		raws[i] = b
	}
	return s.change(ctx, http.MethodPost, "/2/jobs", q, rpc.SubmitJobRequest{Ops: raws})
}

func (e environment) nodePower(command string) func(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return func(ctx context.Context, s *session, c *cli.Context, args []string) error {
		oobCommand := "power-" + command
		force := c.Bool("force")
		nodes, _, master, err := s.nodeObjects(ctx)
		if err != nil {
			return err
		}
		names := args
		if len(names) == 0 && command != "status" {
			for _, name := range sortedNames(nodes) {
				if nodes[name]["powered"] == nil || (name == master && command != "on") {
					continue
				}
				names = append(names, name)
			}
			if len(names) == 0 {
				return fmt.Errorf("no node has an OOB helper")
			}
			if !force {
				if err := e.confirm("power "+command+" "+strings.Join(names, ", "),
					fmt.Sprintf("Do you really want to power %s the following nodes: %s?", command, strings.Join(names, ", "))); err != nil {
					return err
				}
			}
		}
		if (command == "off" || command == "cycle") && !force {
			var busy []string
			for _, name := range names {
				if o := nodes[name]; o != nil {
					if insts := append(list(o, "pinst_list"), list(o, "sinst_list")...); len(insts) > 0 {
						fmt.Fprintf(s.stderr, "WARNING: node %s has instances: %s\n", name, strings.Join(insts, ", "))
						busy = append(busy, name)
					}
				}
			}
			if len(busy) > 0 {
				if err := e.confirm("power "+command+" "+strings.Join(busy, ", ")+" with instances",
					fmt.Sprintf("Do you really want to power %s %s, which has instances?", command, strings.Join(busy, ", "))); err != nil {
					return err
				}
			}
		}
		reason := clientReason("node power " + command + " " + strings.Join(names, " "))
		var ops []map[string]any
		transfer := false
		for _, name := range names {
			if name == master && (command == "off" || command == "cycle") {
				transfer = true
				fmt.Fprintf(s.stdout, "Node %s is the master node: its master role is handed to another master candidate first\n", name)
				continue
			}
			if command == "off" && !c.Bool("ignore-status") {
				op := map[string]any{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name, "offline": true, "reason": reason}
				if c.Bool("auto-promote") {
					op["auto_promote"] = true
				}
				ops = append(ops, op)
			}
		}
		op := map[string]any{"OP_ID": "OP_OOB_COMMAND", "command": oobCommand, "reason": reason}
		if len(names) > 0 {
			op["node_names"] = names
		}
		if c.Bool("ignore-status") {
			op["ignore_status"] = true
		}
		if transfer {
			op["transfer_leadership"] = true
		}
		if c.IsSet("power-delay") {
			op["power_delay"] = c.Float64("power-delay")
		}
		if c.IsSet("oob-timeout") {
			op["timeout"] = c.Int("oob-timeout")
		}
		ops = append(ops, op)
		j, err := s.submitOps(ctx, nil, ops...)
		if err != nil || j == nil || s.cfg.JSON() {
			return err
		}
		results, err := parseOOBResults(j.result(len(j.OpResult) - 1))
		if err != nil {
			return err
		}
		if err := printPowerResults(s, command, results); err != nil {
			return err
		}
		if command == "on" {
			for _, r := range results {
				if o := nodes[r.Node]; r.Status == 0 && o != nil && flag(o, "offline") {
					fmt.Fprintf(s.stdout, "Node %s is still marked offline; 'gnt node modify %s --offline no' brings it back into the cluster\n", r.Node, r.Node)
				}
			}
		}
		return nil
	}
}

func sortedNames(m map[string]object) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// printPowerResults prints the nodes and what happened (for status: on,
// off or unknown, the design's listing); a node whose helper failed
// makes the command fail after the table.
func printPowerResults(s *session, command string, results []oobResult) error {
	title := "Status"
	if command == "status" {
		title = "Power Status"
	}
	cols := []column{{"Node", func(o object) string { return str(o, "node") }}, {title, func(o object) string { return str(o, "status") }}}
	var rows []object
	failed := 0
	for _, r := range results {
		text := map[string]string{"on": "powered on", "off": "powered off", "cycle": "power-cycled"}[command]
		if r.Status != 0 {
			failed++
			text = "unknown"
		} else if command == "status" {
			var p struct {
				Powered bool `json:"powered"`
			}
			if json.Unmarshal(r.Payload, &p) != nil {
				text = "unknown"
			} else if p.Powered {
				text = "on"
			} else {
				text = "off"
			}
		}
		rows = append(rows, object{"node": r.Node, "status": text})
	}
	if err := printTable(s.stdout, cols, rows, true); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("power-%s failed on %d node(s); the job log above says why", command, failed)
	}
	return nil
}

func nodeHealth(ctx context.Context, s *session, c *cli.Context, args []string) error {
	op := map[string]any{"OP_ID": "OP_OOB_COMMAND", "command": "health",
		"reason": clientReason("node health " + strings.Join(args, " "))}
	if len(args) > 0 {
		op["node_names"] = args
	}
	if c.IsSet("oob-timeout") {
		op["timeout"] = c.Int("oob-timeout")
	}
	j, err := s.submitOps(ctx, nil, op)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	results, err := parseOOBResults(j.result(0))
	if err != nil {
		return err
	}
	cols := []column{{"Node", func(o object) string { return str(o, "node") }}, {"Status", func(o object) string { return str(o, "status") }}}
	var rows []object
	failed := 0
	for _, r := range results {
		var items [][2]string
		if r.Status != 0 || json.Unmarshal(r.Payload, &items) != nil {
			failed++
			rows = append(rows, object{"node": r.Node, "status": "unknown (the helper failed; see the job log)"})
			continue
		}
		if len(items) == 0 {
			rows = append(rows, object{"node": r.Node, "status": "(no items)"})
		}
		for i, it := range items {
			name := r.Node
			if i > 0 {
				name = ""
			}
			rows = append(rows, object{"node": name, "status": it[0] + "=" + it[1]})
		}
	}
	if err := printTable(s.stdout, cols, rows, true); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("health failed on %d node(s); the job log above says why", failed)
	}
	return nil
}
