package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/oob"
)

// leadershipHandover is the executor's jobs.Leadership: the master role is
// Raft leadership, handed over as `gnt cluster master-failover` does.
type leadershipHandover struct{ s *Server }

// Transfer hands the leadership to the first of to that takes it.
func (l leadershipHandover) Transfer(ctx context.Context, to []string) (string, error) {
	var failed []string
	for _, name := range to {
		leader, err := l.s.TransferLeadership(ctx, name)
		if err == nil {
			return leader, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		failed = append(failed, name+": "+err.Error())
	}
	return "", fmt.Errorf("no master candidate took the master role (%s)", strings.Join(failed, "; "))
}

// apiProbe is the executor's jobs.NodeProbe: a node is back when its gntd
// answers GET /version on the API address it registered (every gntd serves
// it, candidate or not).
type apiProbe struct{ client *http.Client }

// Alive asks the node's gntd for its version.
func (p apiProbe) Alive(ctx context.Context, n *fsm.Node) error {
	if n.Addrs.API == "" {
		return errors.New("the node has not registered an API address")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+n.Addrs.API+"/version", nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /version answered %s", resp.Status)
	}
	return nil
}

// DefaultOOBProgramsDir is the default whitelist directory of the OOB
// helpers.
const DefaultOOBProgramsDir = oob.DefaultProgramsDir

// oobPrograms is this gntd's whitelist of OOB helpers: the configured
// directory, with files owned by root or by the user gntd runs as.
func (s *Server) oobPrograms() oob.Whitelist {
	return oob.Whitelist{Dir: s.cfg.OOBProgramsDir, Owner: os.Geteuid()}
}

// CheckOOBProgram checks an OOB helper against this gntd's whitelist, on
// its machine: the API refuses to set an oob_program that fails it, and
// gnt cluster verify asks every master candidate, since any of them may
// become the leader that runs the helpers.
func (s *Server) CheckOOBProgram(path string) error { return s.oobPrograms().Check(path) }
