package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// repairView is the part of GET /2/gnt/repair the commands print (the
// server's repair.RoundPlan and fsm.Maintenance).
type repairView struct {
	Plan struct {
		Command struct {
			Jobs []struct {
				Ops []json.RawMessage `json:"ops"`
			} `json:"jobs"`
			Tags      []fsm.TagEdit      `json:"tags"`
			Incidents []fsm.IncidentEdit `json:"incidents"`
		} `json:"command"`
		Waiting  []int64 `json:"waiting"`
		Urgent   bool    `json:"urgent"`
		NoQuorum string  `json:"no_quorum"`
		Breaker  struct {
			Open       bool     `json:"open"`
			Overridden bool     `json:"overridden"`
			Unhealthy  []string `json:"unhealthy"`
			Nodes      int      `json:"nodes"`
			Limit      int      `json:"limit"`
			Reason     string   `json:"reason"`
		} `json:"breaker"`
		Nodes []struct {
			Name     string `json:"name"`
			Liveness string `json:"liveness"`
			Offline  bool   `json:"offline"`
			Drained  bool   `json:"drained"`
			Diagnose string `json:"diagnose"`
			Incident string `json:"incident"`
			Action   string `json:"action"`
			Down     string `json:"down"`
			Why      string `json:"why"`
		} `json:"nodes"`
		Instances []struct {
			Name     string   `json:"name"`
			State    string   `json:"state"`
			Allowed  string   `json:"allowed"`
			Needed   string   `json:"needed"`
			Repair   string   `json:"repair"`
			Jobs     []int64  `json:"jobs"`
			Why      string   `json:"why"`
			Problems []string `json:"problems"`
		} `json:"instances"`
		Notes []string `json:"notes"`
	} `json:"plan"`
	Maintenance fsm.Maintenance `json:"maintenance"`
	// Incidents repeat the maintenance's incidents with the operator's
	// next step (absent from an older server's answer).
	Incidents []struct {
		fsm.Incident
		NextStep string `json:"gnt_next_step"`
	} `json:"incidents"`
	MaintdAddr string `json:"maintd_addr"`
}

func (s *session) repairView(ctx context.Context) (*repairView, json.RawMessage, error) {
	var v repairView
	raw, err := s.get(ctx, "/2/gnt/repair", nil)
	if err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, nil, fmt.Errorf("decoding the server's answer: %w", err)
	}
	return &v, raw, nil
}

// repairShow reads the repair view for a command that prints it: with
// --json it prints the server's answer and returns nil.
func (s *session) repairShow(ctx context.Context) (*repairView, error) {
	v, raw, err := s.repairView(ctx)
	if err != nil || !s.cfg.JSON() {
		return v, err
	}
	return nil, printJSON(s.stdout, raw)
}

func (e environment) repairCommand() *cli.Command {
	return &cli.Command{
		Name:  "repair",
		Usage: "automatic repair (harep on the leader): status, plan, circuit breaker",
		Subcommands: []*cli.Command{
			{
				Name:      "status",
				Usage:     "the repair state of the instances that need attention (not healthy, or with malformed repair tags) and, for one not being repaired, why not",
				ArgsUsage: "[INSTANCE...]",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "all", Usage: "list every instance, the healthy ones too"},
				},
				Action: e.do(repairStatus),
			},
			{
				Name:   "plan",
				Usage:  "what the next repair round would do, and why, without doing it",
				Action: e.do(repairPlan),
			},
			{
				Name:  "breaker",
				Usage: "the circuit breaker that pauses automatic evacuation, fencing and failover",
				Subcommands: []*cli.Command{
					{
						Name:  "override",
						Usage: "keep the breaker closed for a while, however many nodes are unhealthy",
						Flags: []cli.Flag{
							&cli.DurationFlag{Name: "for", Value: time.Hour, Usage: "how long the override lasts (`DURATION`)"},
						},
						Action: e.do(repairBreakerOverride),
					},
					{
						Name:   "reset",
						Usage:  "end an override: the breaker opens again when too many nodes are unhealthy",
						Action: e.do(repairBreakerReset),
					},
				},
			},
		},
	}
}

func (e environment) maintCommand() *cli.Command {
	return &cli.Command{
		Name:  "maint",
		Usage: "the maintenance daemon (maintd): incidents from the nodes' self-diagnose",
		Subcommands: []*cli.Command{
			{
				Name:   "status",
				Usage:  "maintd's incidents, round and circuit breaker",
				Action: e.do(maintStatus),
			},
			{
				Name:      "cancel",
				Usage:     "cancel an incident: maintd does nothing more for it, and forgets it once it is no longer observed",
				ArgsUsage: "ID",
				Action:    e.do(maintIncident(fsm.IncidentActionCancel)),
			},
			{
				Name:      "forget",
				Usage:     "forget an incident now (Ganeti's gnt-cluster remove-repair); still observed, it comes back as a new one",
				ArgsUsage: "ID",
				Action:    e.do(maintIncident(fsm.IncidentActionForget)),
			},
		},
	}
}

func repairStatus(ctx context.Context, s *session, c *cli.Context, args []string) error {
	v, err := s.repairShow(ctx)
	if v == nil {
		return err
	}
	want := map[string]bool{}
	for _, a := range args {
		want[a] = true
	}
	printBreaker(s.stdout, v)
	tw := tabwriter.NewWriter(s.stdout, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "Instance\tState\tAllowed\tNeeded\tRepair\tJobs\tWhy")
	found, hidden := 0, 0
	for _, in := range v.Plan.Instances {
		if len(want) > 0 && !want[in.Name] {
			continue
		}
		found++
		// Named instances and --all: every one; otherwise those that
		// need attention.
		if len(want) == 0 && !c.Bool("all") && in.State == "Healthy" && len(in.Problems) == 0 {
			hidden++
			continue
		}
		why := in.Why
		if len(in.Problems) > 0 {
			why = strings.TrimSpace(why + " (ignored tags: " + strings.Join(in.Problems, "; ") + ")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.Name, in.State, dash(in.Allowed), dash(in.Needed),
			dash(shortID(in.Repair)), dash(joinIDs(in.Jobs)), dash(why))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if hidden > 0 {
		fmt.Fprintf(s.stdout, "(%d healthy instance(s) not listed; --all lists them)\n", hidden)
	}
	if len(want) > found {
		var missing []string
		for name := range want {
			ok := false
			for _, in := range v.Plan.Instances {
				ok = ok || in.Name == name
			}
			if !ok {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		return fmt.Errorf("no such instance: %s", strings.Join(missing, ", "))
	}
	return nil
}

func printBreaker(w io.Writer, v *repairView) {
	p := &v.Plan
	if p.NoQuorum != "" {
		fmt.Fprintf(w, "No action: %s\n", p.NoQuorum)
	}
	switch {
	case p.Breaker.Open:
		fmt.Fprintf(w, "Circuit breaker OPEN: %s\n", strings.TrimPrefix(p.Breaker.Reason, "circuit breaker open: "))
	case p.Breaker.Overridden:
		fmt.Fprintf(w, "Circuit breaker: overridden: %s\n", p.Breaker.Reason)
	default:
		fmt.Fprintf(w, "Circuit breaker: closed (%d of %d nodes unhealthy, limit %d)\n", len(p.Breaker.Unhealthy), p.Breaker.Nodes, p.Breaker.Limit)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, ",")
}

func repairPlan(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	v, err := s.repairShow(ctx)
	if v == nil {
		return err
	}
	w := s.stdout
	printBreaker(w, v)
	p := &v.Plan
	if len(p.Waiting) > 0 {
		fmt.Fprintf(w, "Waiting for the last round's jobs: %s\n", joinIDs(p.Waiting))
	}
	if len(p.Notes) == 0 {
		fmt.Fprintln(w, "Nothing to do.")
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	for k, j := range p.Command.Jobs {
		var ids []string
		for _, op := range j.Ops {
			var o map[string]any
			_ = json.Unmarshal(op, &o)
			id := fmt.Sprint(o["OP_ID"])
			for _, f := range []string{"instance_name", "node_name", "node_names"} {
				if x, ok := o[f]; ok {
					id += fmt.Sprintf("(%v)", x)
				}
			}
			ids = append(ids, id)
		}
		fmt.Fprintf(w, "job %d: %s\n", k+1, strings.Join(ids, ", "))
	}
	for _, t := range p.Command.Tags {
		for _, a := range t.Add {
			jobs := ""
			if len(a.Jobs) > 0 || a.WithJobs {
				jobs = "<job ids>"
			}
			fmt.Fprintf(w, "tag %s %s: + %s%s\n", t.Kind, t.Name, a.Text, jobs)
		}
		for _, r := range t.Remove {
			fmt.Fprintf(w, "tag %s %s: - %s\n", t.Kind, t.Name, r)
		}
	}
	if len(p.Command.Jobs) > 0 && !p.Urgent {
		fmt.Fprintf(w, "(jobs are submitted at the next round, every %d s)\n", v.Maintenance.RoundDelay)
	}
	return nil
}

func repairBreakerOverride(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	d := c.Duration("for")
	if d <= 0 {
		return usagef(c, "--for must be positive")
	}
	until := time.Now().Add(d).Unix()
	return setBreakerOverride(ctx, s, until)
}

func repairBreakerReset(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	return setBreakerOverride(ctx, s, 0)
}

func setBreakerOverride(ctx context.Context, s *session, until int64) error {
	body := rpc.ModifyClusterRequest{RepairBreakerOverrideUntil: &until}
	j, err := s.change(ctx, http.MethodPut, "/2/modify", nil, body)
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	if until == 0 {
		fmt.Fprintln(s.stdout, "circuit breaker override ended")
	} else {
		fmt.Fprintf(s.stdout, "circuit breaker overridden until %s\n", time.Unix(until, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func maintStatus(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	v, err := s.repairShow(ctx)
	if v == nil {
		return err
	}
	m := &v.Maintenance
	w := s.stdout
	last := "never"
	if m.LastRound > 0 {
		last = time.Unix(0, int64(m.LastRound*1e9)).UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "maintd on %s: round %d (last %s), every %d s; jobs of the last round: %s\n",
		dash(v.MaintdAddr), m.Round, last, m.RoundDelay, dash(joinIDs(m.Jobs)))
	fmt.Fprintf(w, "harep (instance autorepair): %s; balancing: %s (gnt cluster modify --maintd-harep, --auto-balance-cluster)\n",
		onOff(m.HarepOn()), onOff(m.Balance))
	printBreaker(w, v)
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "Incident\tNode\tAction\tStatus\tJobs\tTag\tWhy")
	for _, in := range m.Incidents {
		status := in.RepairStatus
		if status == fsm.IncidentFailed {
			status = "FAILED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.UUID, in.Node, in.Action, status,
			dash(joinIDs(in.Jobs)), in.Tag, dash(in.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.Incidents) == 0 {
		fmt.Fprintln(w, "(no incidents)")
	}
	// What the operator does next, for the incidents that need them
	// most: failed, then completed.
	for _, want := range []string{fsm.IncidentFailed, fsm.IncidentCompleted} {
		for _, in := range v.Incidents {
			if in.RepairStatus == want && in.NextStep != "" {
				fmt.Fprintf(w, "%s (%s, %s): %s\n", in.UUID, in.Node, in.RepairStatus, in.NextStep)
			}
		}
	}
	return nil
}

func maintIncident(action string) func(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return func(ctx context.Context, s *session, c *cli.Context, args []string) error {
		if err := nArgs(c, args, 1, 1); err != nil {
			return err
		}
		method, path := http.MethodPost, "/2/gnt/maintd/incidents/"+url.PathEscape(args[0])+"/cancel"
		if action == fsm.IncidentActionForget {
			method, path = http.MethodDelete, "/2/gnt/maintd/incidents/"+url.PathEscape(args[0])
		}
		var raw json.RawMessage
		if _, err := s.api.Do(ctx, method, path, nil, nil, &raw); err != nil {
			return err
		}
		if s.cfg.JSON() {
			return printJSON(s.stdout, raw)
		}
		fmt.Fprintf(s.stdout, "incident %s: %s\n", args[0], map[string]string{
			fsm.IncidentActionCancel: "canceled", fsm.IncidentActionForget: "forgotten"}[action])
		return nil
	}
}
