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

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/rpc"
)

func (e environment) clusterVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check the cluster: OOB helpers on the master candidates, and recorded power states",
		Description: "Asks every online master candidate whether the configured OOB helpers exist and are " +
			"executable on its machine (any of them may become the master that runs them), then asks the " +
			"helpers for the power state of every node that has one and compares it with the recorded one. " +
			"Exits 1 when it finds an error.",
		Action: e.do(clusterVerify),
	}
}

// verifyReport collects verify's findings, printed Ganeti's way.
type verifyReport struct {
	w      io.Writer
	errors int
}

func (r *verifyReport) section(title string) { fmt.Fprintf(r.w, "* %s\n", title) }

func (r *verifyReport) errorf(format string, args ...any) {
	r.errors++
	fmt.Fprintf(r.w, "  - ERROR: "+format+"\n", args...)
}

func (r *verifyReport) warnf(format string, args ...any) {
	fmt.Fprintf(r.w, "  - WARNING: "+format+"\n", args...)
}

func clusterVerify(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	var nodes []rpc.NodeInfo
	if _, err := s.getInto(ctx, "/2/nodes", url.Values{"bulk": {"1"}}, &nodes); err != nil {
		return err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	rep := &verifyReport{w: s.stdout}
	rep.section("Verifying the OOB helpers on the master candidates")
	for _, n := range nodes {
		if !n.MasterCandidate || n.Offline {
			continue
		}
		if n.Addrs.API == "" {
			rep.errorf("node %s: it has not registered an API address; its OOB helpers cannot be checked", n.Name)
			continue
		}
		check, err := newAPIClient(s.cfg, []string{n.Addrs.API}).OOBCheck(ctx)
		if err != nil {
			rep.errorf("node %s: cannot check its OOB helpers: %v", n.Name, err)
			continue
		}
		for _, p := range check.Programs {
			if p.Error != "" {
				rep.errorf("node %s: %s (the OOB helper of %s)", n.Name, p.Error, strings.Join(p.Nodes, ", "))
			}
		}
	}
	rep.section("Verifying the recorded power state of the nodes with an OOB helper")
	recorded := map[string]bool{}
	for _, n := range nodes {
		if n.Powered != nil {
			recorded[n.Name] = *n.Powered
		}
	}
	if len(recorded) > 0 {
		op := map[string]any{"OP_ID": "OP_OOB_COMMAND", "command": "power-status", "reason": clientReason("cluster verify")}
		raw, _ := json.Marshal(op)
		body := rpc.SubmitJobRequest{Ops: []json.RawMessage{raw}}
		if err := checkWrite(http.MethodPost, "/2/jobs", nil, body); err != nil {
			return err
		}
		id, meta, err := s.api.Submit(ctx, http.MethodPost, "/2/jobs", nil, body)
		if err != nil {
			return err
		}
		// The job's log repeats what is summed up below; it is not printed.
		quiet := *s
		quiet.stdout = io.Discard
		j, _, err := quiet.waitJob(ctx, int64(id), meta.Index)
		if err != nil {
			return err
		}
		if j.Status != "success" {
			rep.errorf("the power-status job %d failed: %v", int64(id), j.failure())
		} else {
			results, err := parseOOBResults(j.result(0))
			if err != nil {
				return err
			}
			for _, r := range results {
				var p struct {
					Powered *bool `json:"powered"`
				}
				if r.Status != 0 || json.Unmarshal(r.Payload, &p) != nil || p.Powered == nil {
					rep.warnf("node %s: its OOB helper did not tell its power state (see job %d)", r.Node, int64(id))
					continue
				}
				if want, ok := recorded[r.Node]; ok && want != *p.Powered {
					rep.errorf("node %s: recorded power state (%s) does not match the OOB helper's (%s); fix the record with 'gnt node modify %s --powered %s' if the helper is right",
						r.Node, onOff(want), onOff(*p.Powered), r.Node, yesNo(*p.Powered))
				}
			}
		}
	}
	if rep.errors > 0 {
		return fmt.Errorf("cluster verify found %d error(s)", rep.errors)
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
