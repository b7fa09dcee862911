package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/qlang/jobfilter"
	"github.com/gnt-cluster/gnt/rpc"
)

// gnt filter: Ganeti's gnt-filter, the job filter rules (design-optables)
// through /2/filters.

const filterHelp = `Job filter rules decide, for every job that has not started, whether the
leader's job queue runs it. Rules are processed by increasing priority (0
first), then watermark, then UUID; the first rule whose predicates all match
the job and whose action is not CONTINUE decides:

   ACCEPT         run the job; no further rule is looked at
   PAUSE          keep the job queued until the rule is removed or changed
   REJECT         cancel the job (its result names the rule)
   CONTINUE       look at the next rule (a disabled rule, kept as a note)
   RATE_LIMIT n   run the job only while fewer than n jobs under this rule run

A job that has started runs to its end whatever the rules.

Predicates are a JSON list of [name, expression], the expression a list-form
query-language filter (see gnt instance list --filter):
   ["jobid",  EXPR]  field id; the value "watermark" is the job id that was
                     the highest when the rule was added or replaced
   ["opcode", EXPR]  OP_ID and every field of an opcode; true when one opcode
                     of the job matches
   ["reason", EXPR]  source, reason, timestamp of a reason-trail entry; true
                     when one entry of one opcode matches
An empty list (the default) matches every job.

Examples (Ganeti's):
   drain the queue:
     gnt filter add --predicates '[["jobid", [">", "id", "watermark"]]]' --action REJECT
   pause maintd's repairs (its jobs carry the reason source gnt:daemon:maintd):
     gnt filter add --predicates '[["reason", ["=", "source", "gnt:daemon:maintd"]]]' --action PAUSE
   refuse instance creations:
     gnt filter add --predicates '[["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]]' --action REJECT
   at most 10 disk replacements at once:
     gnt filter add --predicates '[["opcode", ["=", "OP_ID", "OP_INSTANCE_REPLACE_DISKS"]]]' --action 'RATE_LIMIT 10'`

func (e environment) filterCommand() *cli.Command {
	ruleFlags := func() []cli.Flag {
		return []cli.Flag{
			&cli.IntFlag{Name: "priority", Usage: "the rule's `PRIORITY`, 0 (first, the default) to 1000000"},
			&cli.StringFlag{Name: "predicates", Usage: "a JSON list of [name, expression] (default [], every job)"},
			&cli.StringFlag{Name: "action", Value: "CONTINUE", Usage: "ACCEPT, PAUSE, REJECT, CONTINUE or 'RATE_LIMIT n'"},
			&cli.BoolFlag{Name: "dry-run", Usage: "only check the rule; change nothing"},
		}
	}
	return &cli.Command{
		Name:        "filter",
		Usage:       "job filter rules: accept, pause, reject or rate-limit jobs (Ganeti's gnt-filter)",
		Description: filterHelp,
		Subcommands: []*cli.Command{
			{
				Name:   "add",
				Usage:  "add a rule (a UUID is assigned and printed); --reason goes into its reason trail",
				Flags:  ruleFlags(),
				Action: e.do(filterPut(false)),
			},
			{
				Name:      "replace",
				Usage:     "replace the rule UUID (its watermark is renewed), or create it",
				ArgsUsage: "UUID",
				Flags:     ruleFlags(),
				Action:    e.do(filterPut(true)),
			},
			{
				Name:      "delete",
				Usage:     "delete a rule",
				ArgsUsage: "UUID",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "dry-run", Usage: "only check that the rule exists"}},
				Action:    e.do(filterDelete),
			},
			{
				Name:      "list",
				Usage:     "list the rules (all, or those named) in the order they apply",
				ArgsUsage: "[UUID...]",
				Flags:     listFlags(),
				Action:    e.do(filterList),
			},
			listFieldsCommand(filterListing),
			{
				Name:      "info",
				Usage:     "show rules in detail, with their reason trails",
				ArgsUsage: "[UUID...]",
				Action:    e.do(filterInfo),
			},
		},
	}
}

// filterBody builds Ganeti's body of a rule from the flags, checking the
// action and the predicates here first so that a mistake is named before
// anything is sent (the server checks again).
func filterBody(s *session, c *cli.Context) (map[string]any, error) {
	action, err := jobfilter.ParseActionText(c.String("action"))
	if err != nil {
		return nil, fmt.Errorf("--action: %w", err)
	}
	body := map[string]any{"priority": c.Int("priority"), "action": action.JSON()}
	if p := c.String("predicates"); p != "" {
		d := json.NewDecoder(strings.NewReader(p))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("--predicates is not JSON: %w", err)
		}
		if _, err := jobfilter.Compile(v, 0); err != nil {
			return nil, fmt.Errorf("--predicates: %w", err)
		}
		body["predicates"] = json.RawMessage(p)
	}
	if s.cfg.Reason != "" {
		body["reason"] = [][]any{{"gnt:user", s.cfg.Reason, time.Now().UnixNano()}}
	}
	return body, nil
}

func filterPut(replace bool) func(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return func(ctx context.Context, s *session, c *cli.Context, args []string) error {
		n := 0
		if replace {
			n = 1
		}
		if err := nArgs(c, args, n, n); err != nil {
			return err
		}
		body, err := filterBody(s, c)
		if err != nil {
			return err
		}
		uuid := ""
		if replace {
			uuid = args[0]
		}
		got, err := s.api.PutFilter(ctx, uuid, body, c.Bool("dry-run"))
		if err != nil {
			return err
		}
		if c.Bool("dry-run") {
			fmt.Fprintf(s.stdout, "dry run: the rule is valid; nothing was changed\n")
			return nil
		}
		fmt.Fprintln(s.stdout, got)
		return nil
	}
}

func filterDelete(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	if err := s.api.DeleteFilter(ctx, args[0], c.Bool("dry-run")); err != nil {
		return err
	}
	if c.Bool("dry-run") {
		fmt.Fprintf(s.stdout, "dry run: rule %s exists; nothing was changed\n", args[0])
	}
	return nil
}

// selectFilters returns the rules, all or those named (each must exist).
func selectFilters(ctx context.Context, s *session, names []string) ([]rpc.FilterRule, error) {
	if len(names) == 0 {
		return s.api.Filters(ctx)
	}
	out := make([]rpc.FilterRule, 0, len(names))
	for _, n := range names {
		f, err := s.api.Filter(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func actionText(a any) string {
	switch x := a.(type) {
	case string:
		return x
	case []any:
		if len(x) == 2 {
			return fmt.Sprintf("%v %v", x[0], x[1])
		}
	}
	return jsonText(a)
}

// filterListing is gnt filter list: Ganeti's rule fields.
var filterListing = listing{
	kind: "filter",
	path: "/2/filters",
	key:  "uuid",
	defaults: []listColumn{
		{title: "UUID", field: "uuid"},
		{title: "Priority", field: "priority"},
		{title: "Watermark", field: "watermark"},
		{title: "Action", value: func(o object) string { return actionText(o["action"]) }},
		{title: "Predicates", value: func(o object) string { return jsonText(o["predicates"]) }},
	},
	fields: fieldTable(`
uuid|text|UUID|the rule's UUID
priority|number|Priority|the rule's priority: rules apply from the lowest number up
watermark|number|Watermark|the highest job id when the rule was added or last replaced
action|other|Action|ACCEPT, PAUSE, REJECT, CONTINUE or RATE_LIMIT n
predicates|other|Predicates|the list of [name, expression] all of which must match a job
reason_trail|other|ReasonTrail|why the rule was added: [source, text, timestamp] entries`),
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

func filterList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return s.list(ctx, filterListing, args, c)
}

func filterInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	fs, err := selectFilters(ctx, s, args)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		raw, err := json.Marshal(fs)
		if err != nil {
			return err
		}
		return printJSON(s.stdout, raw)
	}
	for _, f := range fs {
		var preds bytes.Buffer
		if json.Indent(&preds, f.Predicates, "    ", "  ") != nil {
			preds.Write(f.Predicates)
		}
		fmt.Fprintf(s.stdout, "UUID: %s\n  Priority: %d\n  Watermark: %d\n  Action: %s\n  Predicates: %s\n  Reason trail:\n",
			f.UUID, f.Priority, f.Watermark, actionText(f.Action), preds.String())
		for _, r := range f.ReasonTrail {
			fmt.Fprintf(s.stdout, "    %s %s: %s\n", time.Unix(0, r.TimeNS).UTC().Format(time.RFC3339), r.Source, r.Text)
		}
	}
	return nil
}
