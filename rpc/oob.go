package rpc

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"sort"

	"github.com/gnt-cluster/gnt/fsm"
)

// buildNodePowercycle: POST /2/nodes/{name}/powercycle. gnt power-cycles
// a node through its OOB helper (OP_OOB_COMMAND power-cycle): the node
// agent has no power-cycle of its own, as Ganeti's node daemon does. With
// ?force=1 the master's node is accepted, its master role handed to
// another candidate first (Ganeti requires force for the master too).
func buildNodePowercycle(r *http.Request, _ []byte) ([]any, *APIError) {
	name, aerr := nodeRef(r)
	if aerr != nil {
		return nil, aerr
	}
	force, aerr := queryFlag(r.URL.Query(), "force")
	if aerr != nil {
		return nil, aerr
	}
	op := map[string]any{"command": "power-cycle", "node_names": []string{name}}
	if force {
		op["transfer_leadership"] = true
	}
	return single("OP_OOB_COMMAND", op), nil
}

// oobChecker is what GET /2/gnt/oob-check needs of the gntd: to check an
// OOB helper on its own machine (the server implements it).
type oobChecker interface {
	CheckOOBProgram(path string) error
}

// vetOOBProgram refuses an opcode that sets oob_program to a helper this
// gntd's whitelist refuses (Backend.CheckOOBProgram): only a helper the
// operator put in the OOB programs directory of the machines may be named,
// since the leader runs it as the gntd's user. The empty value, the "!"
// opt-out and "default" (inherit) name no helper. A backend that cannot
// check refuses every helper.
func (s *Server) vetOOBProgram(op fsm.Opcode) *APIError {
	v, ok := fsm.OpcodeNDParams(op)[oobProgramParam]
	if !ok {
		return nil
	}
	p, _ := v.(string) // ParseOpcode checked the type; null inherits
	switch p {
	case "", "!", "default":
		return nil
	}
	chk, ok := s.b.(oobChecker)
	if !ok {
		return badRequest(oobProgramParam, "oob_program %q refused: this gntd cannot check OOB helpers", p)
	}
	if err := chk.CheckOOBProgram(p); err != nil {
		return badRequest(oobProgramParam, "oob_program: %v", err)
	}
	return nil
}

// oobProgramParam is the node parameter naming the OOB helper.
const oobProgramParam = "oob_program"

// mayNameOOBProgram tells whether a request body may set oob_program: it
// names it, or has a JSON escape that could spell it.
func mayNameOOBProgram(body []byte) bool {
	return bytes.Contains(body, []byte(oobProgramParam)) || bytes.Contains(body, []byte(`\u`))
}

// OOBCheck is the answer of GET /2/gnt/oob-check: the OOB helpers the
// configuration names, as the answering gntd finds them on its machine.
type OOBCheck struct {
	Node     string            `json:"node"`
	Programs []OOBProgramCheck `json:"programs"`
}

// OOBProgramCheck is one helper: its path, the nodes that use it, and
// what is wrong with it here ("" when it can be run).
type OOBProgramCheck struct {
	Path  string   `json:"path"`
	Nodes []string `json:"nodes"`
	Error string   `json:"error,omitempty"`
}

// handleOOBCheck answers GET /2/gnt/oob-check from this gntd's replica
// and its own file system, never forwarded: `gnt cluster verify` asks
// every master candidate, since any of them may become the leader that
// runs the helpers (Ganeti's cluster verify checks NV_OOB_PATHS on the
// master candidates).
func (s *Server) handleOOBCheck(w http.ResponseWriter, r *http.Request) {
	chk, ok := s.b.(oobChecker)
	if !ok {
		writeError(w, &APIError{Status: http.StatusNotImplemented, ErrorCode: CodeUnavailable,
			Message: "this gntd cannot check OOB helpers"})
		return
	}
	users := map[string][]string{}
	var aerr *APIError
	s.b.FSM().Read(func(st *fsm.State, idx uint64) {
		setIndex(w, idx)
		if !st.Initialized() {
			aerr = notInitialised()
			return
		}
		for _, n := range st.SortedNodes() {
			if p := st.OOBProgram(n); p != "" {
				users[p] = append(users[p], n.Name)
			}
		}
	})
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	out := OOBCheck{Node: s.b.Status().Name, Programs: []OOBProgramCheck{}}
	for path, nodes := range users {
		c := OOBProgramCheck{Path: path, Nodes: nodes}
		if err := chk.CheckOOBProgram(path); err != nil {
			c.Error = err.Error()
		}
		out.Programs = append(out.Programs, c)
	}
	sort.Slice(out.Programs, func(i, j int) bool { return out.Programs[i].Path < out.Programs[j].Path })
	writeJSON(w, out)
}

// PowercycleNode power-cycles a node through its OOB helper (POST
// /2/nodes/{name}/powercycle); force accepts the master's node.
func (c *Client) PowercycleNode(ctx context.Context, name string, force bool, reason string) (int64, Meta, error) {
	q := reasonQuery(reason)
	if force {
		if q == nil {
			q = url.Values{}
		}
		q.Set("force", "1")
	}
	return c.Submit(ctx, http.MethodPost, "/2/nodes/"+url.PathEscape(name)+"/powercycle", q, nil)
}

// OOBCheck asks the first gntd of the client's list that answers to check
// the configured OOB helpers on its machine (GET /2/gnt/oob-check); use a
// client for one candidate to ask that one.
func (c *Client) OOBCheck(ctx context.Context) (OOBCheck, error) {
	var out OOBCheck
	_, err := c.Do(ctx, http.MethodGet, "/2/gnt/oob-check", nil, nil, &out)
	return out, err
}
