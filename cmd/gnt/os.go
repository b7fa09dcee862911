package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/rpc"
)

// gnt os: Ganeti's gnt-os list, info and diagnose, from the candidate's
// view of the nodes' OS definitions (GET /2/os, GET /2/gnt/os).

func (e environment) osCommand() *cli.Command {
	return &cli.Command{
		Name: "os",
		Usage: "OS definitions (Ganeti's OS API) found on the nodes: each node's agent reports those in its " +
			"search path (gntd --os-search-path), and an OS is valid when it is valid on every node that reported",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "the OS names (os+variant) valid on every node, for instance add --os-type",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "no-headers", Usage: "omit the header line"}},
				Action: e.do(osList),
			},
			{
				Name:      "info",
				Usage:     "each OS found (or the named ones): validity, API versions, variants, parameters",
				ArgsUsage: "[OS...]",
				Action:    e.do(osInfo),
			},
			{
				Name:   "diagnose",
				Usage:  "every OS on every node, valid or not and why, and each node's search path and errors",
				Action: e.do(osDiagnose),
			},
		},
	}
}

func osList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if len(args) > 0 {
		return usagef(c, "list takes no arguments, got %s", strings.Join(args, " "))
	}
	raw, err := s.get(ctx, "/2/os", nil)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSON(s.stdout, raw)
	}
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return fmt.Errorf("decoding the server's answer: %w", err)
	}
	if !c.Bool("no-headers") {
		fmt.Fprintln(s.stdout, "Name")
	}
	for _, n := range names {
		fmt.Fprintln(s.stdout, n)
	}
	return nil
}

func (s *session) osDiagnosis(ctx context.Context) (*rpc.OSDiagnosis, error) {
	raw, err := s.get(ctx, "/2/gnt/os", nil)
	if err != nil {
		return nil, err
	}
	if s.cfg.JSON() {
		return nil, printJSON(s.stdout, raw)
	}
	var d rpc.OSDiagnosis
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("decoding the server's answer: %w", err)
	}
	return &d, nil
}

func osInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	d, err := s.osDiagnosis(ctx)
	if d == nil {
		return err
	}
	want := map[string]bool{}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "+")
		want[name] = true
	}
	found := map[string]bool{}
	for _, o := range d.OSes {
		if len(want) > 0 && !want[o.Name] {
			continue
		}
		found[o.Name] = true
		fmt.Fprintf(s.stdout, "OS: %s\n", o.Name)
		fmt.Fprintf(s.stdout, "  - valid: %v\n", o.Valid)
		if o.Valid {
			fmt.Fprintf(s.stdout, "  - names: %s\n", strings.Join(o.Names(), ", "))
		}
		vs := make([]string, len(o.APIVersions))
		for i, v := range o.APIVersions {
			vs[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(s.stdout, "  - API versions: %s\n", dash(strings.Join(vs, ", ")))
		fmt.Fprintf(s.stdout, "  - variants: %s\n", dash(strings.Join(o.Variants, ", ")))
		if len(o.Parameters) == 0 {
			fmt.Fprintln(s.stdout, "  - parameters: -")
		} else {
			fmt.Fprintln(s.stdout, "  - parameters:")
			for _, p := range o.Parameters {
				fmt.Fprintf(s.stdout, "    - %s: %s\n", p.Name, p.Description)
			}
		}
		for _, n := range o.Nodes {
			if !n.Valid {
				fmt.Fprintf(s.stdout, "  - not valid on %s: %s\n", n.Node, n.Error)
			}
		}
	}
	var missing []string
	for name := range want {
		if !found[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("no such OS on any node: %s", strings.Join(missing, ", "))
	}
	return nil
}

func osDiagnose(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if len(args) > 0 {
		return usagef(c, "diagnose takes no arguments, got %s", strings.Join(args, " "))
	}
	d, err := s.osDiagnosis(ctx)
	if d == nil {
		return err
	}
	tw := tabwriter.NewWriter(s.stdout, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "OS\tStatus\tNode\tValid\tPath\tError")
	for _, o := range d.OSes {
		status := "valid"
		if !o.Valid {
			status = "invalid"
		}
		for i, n := range o.Nodes {
			name, st := o.Name, status
			if i > 0 {
				name, st = "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\n", name, st, n.Node, n.Valid, dash(n.Path), dash(n.Error))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(s.stdout)
	tw = tabwriter.NewWriter(s.stdout, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "Node\tReported\tSearch path\tError")
	for _, n := range d.Nodes {
		at := "-"
		if !n.At.IsZero() {
			at = n.At.UTC().Format("2006-01-02 15:04:05")
		}
		errs := n.Error
		if len(n.Errors) > 0 {
			errs = strings.TrimSpace(errs + " " + strings.Join(n.Errors, "; "))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Node, at, dash(strings.Join(n.SearchPath, ":")), dash(errs))
	}
	return tw.Flush()
}
