package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
)

func (e environment) jobCommand() *cli.Command {
	return &cli.Command{
		Name:  "job",
		Usage: "job queue operations (gnt-job)",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list jobs",
				ArgsUsage: "[ID...]",
				Flags: append(listFlags(),
					&cli.StringFlag{Name: "status", Usage: "only jobs with one of these comma-separated `STATUSES` (queued, waiting, canceling, running, canceled, success, error; 'pending' for the first four)"},
					&cli.BoolFlag{Name: "archived", Usage: "include archived jobs"}),
				Action: e.do(jobList),
			},
			listFieldsCommand(jobListing),
			{
				Name:      "cancel",
				Usage:     "cancel jobs: at once when not started, at the next step boundary when running",
				ArgsUsage: "ID...",
				Action:    e.do(jobCancel),
			},
			{
				Name:      "archive",
				Usage:     "move finished jobs to the archive (their summary stays queryable)",
				ArgsUsage: "ID...",
				Action:    e.do(jobArchive),
			},
			{
				Name:      "info",
				Usage:     "show jobs in full: opcodes with their status, result and log",
				ArgsUsage: "ID...",
				Action:    e.do(jobInfo),
			},
			{
				Name:      "watch",
				Usage:     "follow a job's log until it ends",
				ArgsUsage: "ID",
				Action:    e.do(jobWatch),
			},
		},
	}
}

var jobListing = listing{
	kind: "job",
	path: "/2/jobs",
	key:  "id",
	defaults: []listColumn{
		{title: "ID", field: "id"},
		{title: "Status", field: "status"},
		{title: "Summary", field: "summary"},
	},
	fields: jobFieldDefs,
}

func jobIDs(c *cli.Context, args []string) error {
	for _, a := range args {
		if n, err := strconv.ParseInt(a, 10, 64); err != nil || n < 0 {
			return usagef(c, "bad job id %q", a)
		}
	}
	return nil
}

var jobStatuses = []string{fsm.StatusQueued, fsm.StatusWaiting, fsm.StatusCanceling, fsm.StatusRunning,
	fsm.StatusCanceled, fsm.StatusSuccess, fsm.StatusError}

// parseStatusFilter reads --status into a set; nil means every status.
func parseStatusFilter(c *cli.Context) (map[string]bool, error) {
	spec := c.String("status")
	if spec == "" {
		return nil, nil
	}
	want := map[string]bool{}
	for _, st := range strings.Split(spec, ",") {
		st = strings.TrimSpace(st)
		switch {
		case st == "pending":
			for _, p := range jobStatuses[:4] {
				want[p] = true
			}
		case slices.Contains(jobStatuses, st):
			want[st] = true
		default:
			return nil, usagef(c, "unknown job status %q (known: %s, pending)", st, strings.Join(jobStatuses, ", "))
		}
	}
	return want, nil
}

func jobList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := jobIDs(c, args); err != nil {
		return err
	}
	want, err := parseStatusFilter(c)
	if err != nil {
		return err
	}
	l := jobListing
	if c.Bool("archived") {
		l.query = url.Values{"archived": {"1"}}
	}
	if want != nil {
		l.keep = func(o object) bool { return want[str(o, "status")] }
	}
	return s.list(ctx, l, args, c)
}

// eachJob checks the job id arguments (at least one) and calls fn for
// each, stopping at the first error.
func eachJob(c *cli.Context, args []string, fn func(id int64) error) error {
	if err := nArgs(c, args, 1, -1); err != nil {
		return err
	}
	if err := jobIDs(c, args); err != nil {
		return err
	}
	for _, a := range args {
		id, _ := strconv.ParseInt(a, 10, 64)
		if err := fn(id); err != nil {
			return fmt.Errorf("job %d: %w", id, err)
		}
	}
	return nil
}

func jobCancel(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return eachJob(c, args, func(id int64) error {
		msg, _, err := s.api.CancelJob(ctx, id, s.cfg.Reason)
		if err == nil {
			fmt.Fprintln(s.stdout, msg)
		}
		return err
	})
}

func jobArchive(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return eachJob(c, args, func(id int64) error {
		_, err := s.api.ArchiveJob(ctx, id)
		return err
	})
}

func jobInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, -1); err != nil {
		return err
	}
	if err := jobIDs(c, args); err != nil {
		return err
	}
	var raws []json.RawMessage
	for _, id := range args {
		raw, err := s.get(ctx, "/2/jobs/"+id, nil)
		if err != nil {
			return err
		}
		raws = append(raws, raw)
	}
	if s.cfg.JSON() {
		if len(raws) == 1 {
			return printJSON(s.stdout, raws[0])
		}
		return printJSONList(s.stdout, raws)
	}
	for _, raw := range raws {
		var j job
		if err := json.Unmarshal(raw, &j); err != nil {
			return fmt.Errorf("decoding job: %w", err)
		}
		showJob(s.stdout, &j)
	}
	return nil
}

func jobWatch(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	if err := jobIDs(c, args); err != nil {
		return err
	}
	id, _ := strconv.ParseInt(args[0], 10, 64)
	if !s.cfg.JSON() {
		fmt.Fprintf(s.stdout, "Output from job %d follows\n-----------------------\n", id)
	}
	j, raw, err := s.waitJob(ctx, id, 0)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		if err := printJSON(s.stdout, raw); err != nil {
			return err
		}
	}
	if j.Status != fsm.StatusSuccess {
		return j.failure()
	}
	return nil
}

func showJob(w io.Writer, j *job) {
	fmt.Fprintf(w, "- Job ID: %d\n", int64(j.ID))
	fmt.Fprintf(w, "  Status: %s\n", j.Status)
	if j.CancelRequested {
		fmt.Fprintf(w, "  Cancel requested: the job stops at its next step boundary\n")
	}
	if j.Archived {
		fmt.Fprintf(w, "  Archived: only the summary is kept (no opcode inputs, results or logs)\n")
	}
	if j.Priority != nil {
		fmt.Fprintf(w, "  Priority: %d\n", *j.Priority)
	}
	if len(j.Summary) > 0 {
		fmt.Fprintf(w, "  Summary: %s\n", strings.Join(j.Summary, ","))
	}
	if len(j.PoisonEpochs) > 0 {
		fmt.Fprintf(w, "  Failed by the poison-job guard: the leaders of executor epochs %s were lost while it ran\n", joinUints(j.PoisonEpochs))
	}
	if len(j.Attempts) > 0 {
		fmt.Fprintf(w, "  Executor attempts:\n")
		for _, a := range j.Attempts {
			fmt.Fprintf(w, "    - executor epoch %d at %s, opcode %d", a.Epoch, formatStamp(a.Time), a.OpIndex)
			if a.Node != "" {
				fmt.Fprintf(w, ", leader %s", a.Node)
			}
			if a.Survived {
				fmt.Fprintf(w, " (stepped down, its gntd ran on: no death)")
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "  Received:         %s\n", formatStamp(j.ReceivedTS))
	fmt.Fprintf(w, "  Processing start: %s%s\n", formatStamp(j.StartTS), delta(j.ReceivedTS, j.StartTS))
	fmt.Fprintf(w, "  Processing end:   %s%s\n", formatStamp(j.EndTS), delta(j.StartTS, j.EndTS))
	if len(j.StartTS) > 0 && len(j.EndTS) > 0 {
		fmt.Fprintf(w, "  Total processing time: %.6f seconds\n", j.EndTS.time().Sub(j.StartTS.time()).Seconds())
	}
	fmt.Fprintf(w, "  Opcodes:\n")
	for i, in := range j.Ops {
		var input object
		_ = decode(in, &input)
		fmt.Fprintf(w, "    - Opcode: %s\n", str(input, "OP_ID"))
		fmt.Fprintf(w, "      Status: %s\n", at(j.OpStatus, i))
		if i < len(j.OpPriority) {
			fmt.Fprintf(w, "      Priority: %d\n", j.OpPriority[i])
		}
		fmt.Fprintf(w, "      Processing start: %s\n", formatStamp(stampAt(j.OpStart, i)))
		fmt.Fprintf(w, "      Execution start:  %s\n", formatStamp(stampAt(j.OpExec, i)))
		fmt.Fprintf(w, "      Processing end:   %s\n", formatStamp(stampAt(j.OpEnd, i)))
		if i < len(j.OpDepends) && len(j.OpDepends[i]) > 0 {
			var deps []string
			for _, d := range j.OpDepends[i] {
				deps = append(deps, fmt.Sprintf("job %d (%s)", d.JobID, strings.Join(d.Statuses, ",")))
			}
			fmt.Fprintf(w, "      Depends on: %s\n", strings.Join(deps, "; "))
		}
		if i < len(j.OpLocks) && len(j.OpLocks[i]) > 0 {
			fmt.Fprintf(w, "      Locks: %s\n", fsm.DescribeLocks(j.OpLocks[i]))
		}
		if i < len(j.OpSteps) && len(j.OpSteps[i]) > 0 {
			fmt.Fprintf(w, "      Steps done:\n")
			for k, st := range j.OpSteps[i] {
				fmt.Fprintf(w, "        %d. %s at %s (executor epoch %d)\n", k+1, st.Name, formatStamp(st.Time), st.Epoch)
			}
		}
		fmt.Fprintf(w, "      Input fields:\n")
		keys := make([]string, 0, len(input))
		for k := range input {
			if k != "OP_ID" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "        %s: %s\n", k, compact(input[k]))
		}
		if i < len(j.OpResult) && string(j.OpResult[i]) != "null" && len(j.OpResult[i]) > 0 {
			fmt.Fprintf(w, "      Result: %s\n", compactRaw(j.OpResult[i]))
		} else {
			fmt.Fprintf(w, "      No output data\n")
		}
		if i < len(j.OpLog) && len(j.OpLog[i]) > 0 {
			fmt.Fprintf(w, "      Execution log:\n")
			for _, l := range j.OpLog[i] {
				fmt.Fprintf(w, "        %s %s\n", formatStamp(l.Time), l.Msg)
			}
		} else {
			fmt.Fprintf(w, "      No execution log\n")
		}
	}
}

// joinUints writes numbers as "5, 6".
func joinUints(xs []uint64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ", ")
}

func stampAt(xs []stamp, i int) stamp {
	if i < len(xs) {
		return xs[i]
	}
	return nil
}

func delta(from, to stamp) string {
	if len(from) == 0 || len(to) == 0 {
		return ""
	}
	return fmt.Sprintf(" (delta %.6fs)", to.time().Sub(from.time()).Seconds())
}

// compact renders an input field: text as it is, anything else as JSON.
func compact(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func compactRaw(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var v any
	if decode(raw, &v) != nil {
		return string(raw)
	}
	return compact(v)
}
