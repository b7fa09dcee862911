package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// This file serves more of the resources of Ganeti's doc/rapi.rst: an
// instance's detailed information and console, a disk's growth, a
// group's rename and node assignment, the redistribution of the
// configuration (a no-op job), a multi-allocation, and the operations gnt
// does not do (disk activation, export), which are refused with 501 after
// their input is checked. The routes that submit jobs are in jobRoutes (check.go).

// moreRoute is one route of this file; routes registers them. ownDryRun
// marks a route that is not wrapped in refuseDryRun: a 501 that answers
// the same with ?dry-run=1 (it does nothing either way), or one that
// honours ?dry-run=1 itself.
type moreRoute struct {
	acc          Access
	method, path string
	h            http.HandlerFunc
	ownDryRun    bool
}

// moreRoutes lists the routes of this file.
func (s *Server) moreRoutes() []moreRoute {
	return []moreRoute{
		{AccessRead, "GET", "/2/instances/{name}/console", s.blockingRead(s.serveConsole), false},
		// A read that Ganeti makes a job (OP_INSTANCE_QUERY_DATA), with
		// read access as Ganeti's.
		{AccessRead, "GET", "/2/instances/{name}/info", s.jobHandler(buildInstanceInfo), false},
		// A job set; it honours ?dry-run=1 itself (prepareOps).
		{AccessWrite, "POST", "/2/instances-multi-alloc", s.handleMultiAlloc, true},
		{AccessWrite, "PUT", "/2/instances/{name}/prepare-export", refuseExport("prepare-export"), true},
		{AccessWrite, "PUT", "/2/instances/{name}/export", refuseExport("export"), true},
		// Ganeti's DELETE removes an export: gnt has none to remove.
		{AccessWrite, "DELETE", "/2/instances/{name}/export", refuseExport("removing an export"), true},
	}
}

// notImplemented is the 501 of a resource gnt does not implement.
func notImplemented(format string, args ...any) *APIError {
	msg := fmt.Sprintf(format, args...)
	return &APIError{Status: http.StatusNotImplemented, ErrorCode: CodeNotImplemented, Message: msg, Explain: msg}
}

// InstanceConsole is GET /2/instances/{name}/console: Ganeti's
// InstanceConsole (objects.py), its unset slots left out as Ganeti's
// ToDict leaves them out.
type InstanceConsole struct {
	Instance string `json:"instance"`
	// Kind is one of "message", "ssh", "vnc", "spice"; gnt answers "ssh"
	// for a guest whose node reports a serial console (the kvm driver),
	// "vnc" (Host, Port, Display, and Message when the console uses TLS or
	// a password) for one with vnc_bind_address and a network port, else
	// "message".
	Kind    string   `json:"kind"`
	Message string   `json:"message,omitempty"`
	Host    string   `json:"host,omitempty"`
	Port    int      `json:"port,omitempty"`
	User    string   `json:"user,omitempty"`
	Command []string `json:"command,omitempty"`
	Display int      `json:"display,omitempty"`
}

// serveConsole answers how to reach an instance's console. When the
// runtime view has the instance running on its primary node with a
// serial console socket (the kvm driver), the answer is Ganeti's KVM
// "ssh" kind: ssh as root to the primary node (its ndparams ssh_port)
// and run socat on the socket, as Ganeti does (without its wrapper
// script). As Ganeti's KVM, the serial console comes first; without it,
// an instance whose effective vnc_bind_address is set and that holds a
// network port gets Ganeti's "vnc" kind: host (the bind address, or the
// primary node's address when it binds to all or to an interface), port
// and display (port - 5900), with a message saying how its TLS and
// password are set when it has them (vncSecurity). Otherwise it is Ganeti's "message" kind
// naming the primary node, where the hypervisor's own tools reach the
// console. Ganeti
// refuses the console of an instance that is not running; so does gnt
// (409 wrong_state), of one whose administrative state is not up. When
// the runtime view cannot tell whether an instance that is up runs on
// its primary (just started, migrated or failed over), the nodes are
// polled first (RuntimeWaiter, a few seconds at most), rather than
// answering from a view that predates the move.
func (s *Server) serveConsole(w http.ResponseWriter, r *http.Request) error {
	ref, aerr := instanceRef(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	rt := s.runtimeOf()
	if waiter, ok := s.b.(RuntimeWaiter); ok && rt != nil {
		var unknown bool
		s.b.FSM().Read(func(st *fsm.State, _ uint64) {
			if i := st.LookupInstance(ref); i != nil && i.AdminState == fsm.AdminUp {
				_, _, known := rt.Running(i)
				unknown = !known
			}
		})
		if unknown {
			v := waiter.RuntimeAfterPoll(r.Context(), consoleWait)
			rt = &v
		}
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		i := st.LookupInstance(ref)
		if i == nil {
			return nil, unknownEntity("instance_name", "instance %q does not exist", ref)
		}
		if i.AdminState != "up" {
			return nil, FromFSM(&fsm.Error{Code: fsm.CodeState, Field: "instance_name",
				Msg: fmt.Sprintf("instance %s is not running (administrative state %s)", i.Name, i.AdminState)})
		}
		node := i.PrimaryNode
		port := 22
		if n := st.Nodes[i.PrimaryNode]; n != nil {
			node = n.Name
			if p, ok := n.NDParams["ssh_port"].(float64); ok && p > 0 {
				port = int(p)
			}
		}
		if is, running, _ := rt.Running(i); running && is.Console != "" {
			return InstanceConsole{Instance: i.Name, Kind: "ssh", Host: node, Port: port, User: "root",
				Command: []string{"socat", "STDIO,raw,echo=0,escape=0x1d", "UNIX-CONNECT:" + is.Console}}, nil
		}
		hv := fsm.FillHVParams(st.Cluster, i)
		if bind, _ := hv["vnc_bind_address"].(string); bind != "" && i.NetworkPort > fsm.VNCBasePort {
			return InstanceConsole{Instance: i.Name, Kind: "vnc", Host: vncHost(bind, st.Nodes[i.PrimaryNode], node),
				Port: i.NetworkPort, Display: i.NetworkPort - fsm.VNCBasePort, Message: vncSecurity(hv)}, nil
		}
		return InstanceConsole{Instance: i.Name, Kind: "message",
			Message: fmt.Sprintf("gnt's node agents offer no console access; instance %s runs on node %s, reach its console there with the hypervisor's tools", i.Name, node)}, nil
	})
}

// consoleWait bounds how long a console request waits for a poll of the
// nodes (their agents get runtimePollTimeout, 5 s, to answer).
const consoleWait = 6 * time.Second

// vncSecurity is the message of a "vnc" console (a slot Ganeti's vnc
// kind leaves unset) when the console is more than plain RFB: how its
// TLS (vnc_tls, vnc_x509_path, vnc_x509_verify) and password
// (vnc_password_file) are set, for the operator's VNC client; "" for a
// plain one.
func vncSecurity(hv map[string]any) string {
	pw, _ := hv["vnc_password_file"].(string)
	var parts []string
	if hv["vnc_tls"] == true {
		dir, _ := hv["vnc_x509_path"].(string)
		switch {
		case dir == "":
			parts = append(parts, "VNC over TLS (VeNCrypt), anonymous: encrypted, the server not authenticated")
		case hv["vnc_x509_verify"] == true:
			parts = append(parts, "VNC over TLS (VeNCrypt, x509): the server's certificate is signed by "+dir+"/ca-cert.pem on the node, and the client must present a certificate signed by it")
		default:
			parts = append(parts, "VNC over TLS (VeNCrypt, x509): the server's certificate is signed by "+dir+"/ca-cert.pem on the node")
		}
	}
	if pw != "" {
		parts = append(parts, "VNC password: the one in "+pw+" on the node")
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + "."
}

// vncHost is where a VNC client reaches a console bound to bind on the
// node: bind itself when it is one address, else (all addresses, or an
// interface's) the node's primary IP, or its name when unknown.
func vncHost(bind string, n *fsm.Node, name string) string {
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		return bind
	}
	if n != nil && n.PrimaryIP != "" {
		return n.PrimaryIP
	}
	return name
}

// GrowDiskRequest is the body of POST
// /2/instances/{name}/disk/{disk}/grow (OP_INSTANCE_GROW_DISK's fields).
type GrowDiskRequest struct {
	// Amount is the growth in MiB, or the new size when Absolute.
	Amount      *int64 `json:"amount"`
	WaitForSync *bool  `json:"wait_for_sync,omitempty"`
	Absolute    *bool  `json:"absolute,omitempty"`
}

// buildGrowDisk: POST /2/instances/{name}/disk/{disk}/grow, a job of
// OP_INSTANCE_GROW_DISK: the disk index within fsm.MaxDisksPerInstance,
// amount a size of 1 to fsm.MaxDiskSizeMiB.
func buildGrowDisk(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := instanceRef(r)
	if aerr != nil {
		return nil, aerr
	}
	idx, err := strconv.Atoi(r.PathValue("disk"))
	if err != nil || idx < 0 || idx >= fsm.MaxDisksPerInstance {
		return nil, badRequest("disk", "disk index %q is not a number from 0 to %d", r.PathValue("disk"), fsm.MaxDisksPerInstance-1)
	}
	var req GrowDiskRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	if req.Amount == nil {
		return nil, badRequest("amount", "amount (MiB) is required")
	}
	op := toMap(req)
	op["instance_name"] = name
	op["disk"] = idx
	return single("OP_INSTANCE_GROW_DISK", op), nil
}

// refuseExport answers PUT /2/instances/{name}/prepare-export and
// export, and DELETE export, with 501: moving instances between clusters is out of gnt's
// scope (docs/api.md).
func refuseExport(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, aerr := instanceRef(r); aerr != nil {
			writeError(w, aerr)
			return
		}
		writeError(w, notImplemented("%s is not supported: gnt does not export or import instances across clusters (docs/api.md)", what))
	}
}

// buildInstanceInfo: GET /2/instances/{name}/info[?static=1], a job of
// OP_INSTANCE_QUERY_DATA for the one instance.
func buildInstanceInfo(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := instanceRef(r)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := noBody(body); aerr != nil {
		return nil, aerr
	}
	static, aerr := queryFlag(r.URL.Query(), "static")
	if aerr != nil {
		return nil, aerr
	}
	return single("OP_INSTANCE_QUERY_DATA", map[string]any{"instances": []string{name}, "static": static}), nil
}

// RenameGroupRequest is the body of PUT /2/groups/{name}/rename.
type RenameGroupRequest struct {
	NewName string `json:"new_name"`
}

// buildGroupRename: PUT /2/groups/{name}/rename {"new_name"}.
func buildGroupRename(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := groupRef(r)
	if aerr != nil {
		return nil, aerr
	}
	var req RenameGroupRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	if req.NewName == "" {
		return nil, badRequest("new_name", "new_name is required")
	}
	return single("OP_GROUP_RENAME", map[string]any{"group_name": name, "new_name": req.NewName}), nil
}

// AssignNodesRequest is the body of PUT /2/groups/{name}/assign-nodes;
// force comes in the query (?force=1), as Ganeti's client sends it.
type AssignNodesRequest struct {
	Nodes []string `json:"nodes"`
}

// buildGroupAssignNodes: PUT /2/groups/{name}/assign-nodes {"nodes"}
// [?force=1].
func buildGroupAssignNodes(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := groupRef(r)
	if aerr != nil {
		return nil, aerr
	}
	var req AssignNodesRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	if req.Nodes == nil {
		return nil, badRequest("nodes", "nodes (a list of node names) is required")
	}
	force, aerr := queryFlag(r.URL.Query(), "force")
	if aerr != nil {
		return nil, aerr
	}
	return single("OP_GROUP_ASSIGN_NODES", map[string]any{"group_name": name, "nodes": req.Nodes, "force": force}), nil
}

// buildRedistConf: PUT /2/redistribute-config, a job that changes
// nothing (fsm.OpClusterRedistConf).
func buildRedistConf(_ *http.Request, body []byte) ([]any, *APIError) {
	if aerr := noBody(body); aerr != nil {
		return nil, aerr
	}
	return single("OP_CLUSTER_REDIST_CONF", map[string]any{}), nil
}

// noBody refuses a body where the resource takes none, rather than
// dropping it.
func noBody(body []byte) *APIError {
	if t := bytes.TrimSpace(body); len(t) > 0 && string(t) != "null" && string(t) != "{}" {
		return badRequest("body", "this resource takes no body, got %d bytes", len(body))
	}
	return nil
}

// MultiAllocRequest is the body of POST /2/instances-multi-alloc: the
// instances as POST /2/instances takes them (OP_INSTANCE_CREATE's fields,
// name and os accepted for instance_name and os_type), and the
// multi-allocation's own iallocator and opportunistic_locking, which go
// to every instance's creation.
type MultiAllocRequest struct {
	Instances            []json.RawMessage `json:"instances"`
	IAllocator           *string           `json:"iallocator,omitempty"`
	OpportunisticLocking *bool             `json:"opportunistic_locking,omitempty"`
}

// parseMultiAlloc turns a multi-allocation into its jobs: one creation
// job per instance, then the OP_INSTANCE_MULTI_ALLOC job that answers
// Ganeti's result (jobs.multiAllocSteps). As Ganeti's, it refuses an
// iallocator on an instance (it belongs to the multi-allocation) and
// instances of which some name nodes and others do not.
// With the jobs it returns, when no instance names its nodes, the
// iallocator list that places them.
func parseMultiAlloc(body []byte) ([][]any, *multiPlacement, *APIError) {
	var req MultiAllocRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil, badRequest("instances", "the body must be {\"instances\": [instance, ...]}")
	}
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, nil, aerr
	}
	if len(req.Instances) == 0 {
		return nil, nil, badRequest("instances", "instances must list at least one instance")
	}
	if len(req.Instances) >= fsm.MaxJobsPerSubmission {
		return nil, nil, badRequest("instances", "instances lists %d instances; at most %d", len(req.Instances), fsm.MaxJobsPerSubmission-1)
	}
	var (
		out      [][]any
		names    []string
		withNode int
	)
	for k, raw := range req.Instances {
		field := fmt.Sprintf("instances.%d", k)
		op, aerr := bodyMap(raw)
		if aerr != nil || bytes.TrimSpace(raw)[0] != '{' {
			return nil, nil, badRequest(field, "instance %d is not a JSON object of OP_INSTANCE_CREATE fields", k)
		}
		for _, r := range [][2]string{{"name", "instance_name"}, {"os", "os_type"}} {
			if aerr := rename(op, r[0], r[1]); aerr != nil {
				aerr.Field = field + "." + aerr.Field
				return nil, nil, aerr
			}
		}
		if _, ok := op["iallocator"]; ok {
			return nil, nil, badRequest(field+".iallocator", "instance %d names an iallocator; give it for the whole multi-allocation instead", k)
		}
		if _, ok := op["pnode"]; ok {
			withNode++
		} else if req.IAllocator != nil {
			op["iallocator"] = *req.IAllocator
		}
		if req.OpportunisticLocking != nil {
			op["opportunistic_locking"] = *req.OpportunisticLocking
		}
		name, _ := op["instance_name"].(string)
		if name == "" {
			return nil, nil, badRequest(field+".instance_name", "instance %d has no instance_name", k)
		}
		names = append(names, name)
		out = append(out, single("OP_INSTANCE_CREATE", op))
	}
	if withNode != 0 && withNode != len(req.Instances) {
		return nil, nil, badRequest("instances", "%d of %d instances name their nodes (pnode); either all or none must", withNode, len(req.Instances))
	}
	var mp *multiPlacement
	if withNode == 0 {
		mp = &multiPlacement{}
		if req.IAllocator != nil {
			mp.list = *req.IAllocator
		}
	}
	return append(out, single("OP_INSTANCE_MULTI_ALLOC", map[string]any{"instance_names": names})), mp, nil
}

// multiPlacement is the iallocator list of a multi-allocation whose
// instances name no nodes: its allocators place them.
type multiPlacement struct{ list string }

// multiPlacer is what the API needs of the gntd to place a
// multi-allocation as one (the server implements it): the nodes of each
// placed instance by name and the names of those the allocator could not
// place, or nil when the creations place themselves (the built-in
// allocator).
type multiPlacer interface {
	PlaceMulti(ctx context.Context, list string, creates []json.RawMessage) (map[string][]string, []string, error)
}

// placeMulti places a multi-allocation with its allocators on the leader
// (a follower forwards the request, and the leader places it): an
// external allocator gets one multi-allocate request of every instance,
// and each creation job (its one opcode, changed in place) then names its
// nodes, checked as given nodes are; with the built-in each creation
// places itself. As Ganeti's LUInstanceMultiAlloc, the instances the
// allocator could not place get no creation job: cmd loses them, and its
// last job, OP_INSTANCE_MULTI_ALLOC, names them in failed (its result's
// "failed"). A list naming an allocator this gntd cannot run is refused.
func (s *Server) placeMulti(r *http.Request, mp *multiPlacement, cmd *fsm.JobSubmitMany) *APIError {
	if mp.list != "" {
		if aerr := s.checkIAllocators("iallocator", mp.list); aerr != nil {
			return aerr
		}
	}
	pl, ok := s.b.(multiPlacer)
	if _, self := s.b.Leader(); !ok || !self {
		return nil
	}
	creates := cmd.Jobs[:len(cmd.Jobs)-1]
	raws := make([]json.RawMessage, len(creates))
	for k, j := range creates {
		raws[k] = j.Ops[0]
	}
	placed, failed, err := pl.PlaceMulti(r.Context(), mp.list, raws)
	if err != nil {
		return asAPIError(err)
	}
	if len(placed) == 0 && len(failed) == 0 {
		return nil // the built-in allocator places in the jobs
	}
	notPlaced := map[string]bool{}
	for _, n := range failed {
		notPlaced[n] = true
	}
	var kept []fsm.JobSpec
	var names []string
	for k, j := range creates {
		var op map[string]any
		if err := json.Unmarshal(j.Ops[0], &op); err != nil {
			return badRequest(fmt.Sprintf("instances.%d", k), "instance %d: %v", k, err)
		}
		name, _ := op["instance_name"].(string)
		if notPlaced[name] {
			continue
		}
		kept, names = append(kept, j), append(names, name)
		nodes := placed[name]
		if len(nodes) == 0 {
			continue // the built-in: the creation places itself
		}
		delete(op, "iallocator")
		op["pnode"] = nodes[0]
		if len(nodes) > 1 {
			op["snode"] = nodes[1]
		}
		b, err := json.Marshal(op)
		if err != nil {
			return badRequest(fmt.Sprintf("instances.%d", k), "instance %d: %v", k, err)
		}
		j.Ops[0] = b
	}
	if len(failed) == 0 {
		return nil
	}
	last := cmd.Jobs[len(cmd.Jobs)-1]
	var op map[string]any
	if err := json.Unmarshal(last.Ops[0], &op); err != nil {
		return badRequest("instances", "the multi-allocation: %v", err)
	}
	op["instance_names"], op["failed"] = orEmpty(names), failed
	b, err := json.Marshal(op)
	if err != nil {
		return badRequest("instances", "the multi-allocation: %v", err)
	}
	last.Ops[0] = b
	cmd.Jobs = append(kept, last)
	return nil
}

// parseJobs parses the opcodes of jobs again (after a change to their
// text that ParseOpcode has not seen).
func parseJobs(jobs []fsm.JobSpec) ([][]fsm.Opcode, *APIError) {
	out := make([][]fsm.Opcode, len(jobs))
	for k, j := range jobs {
		out[k] = make([]fsm.Opcode, len(j.Ops))
		for i, raw := range j.Ops {
			op, err := fsm.ParseOpcode(raw)
			if err != nil {
				return nil, FromFSM(fsm.AsError(err))
			}
			out[k][i] = op
		}
	}
	return out, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// handleMultiAlloc: POST /2/instances-multi-alloc. The jobs are queued in
// one submission, all or none; the answer is the id of the last, whose
// result is Ganeti's {"jobs", "allocatable", "failed"}. ?dry-run=1 makes
// every job a dry run (the creations check their placement).
func (s *Server) handleMultiAlloc(w http.ResponseWriter, r *http.Request) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	jobsOps, mp, aerr := parseMultiAlloc(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := checkToken(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	now := s.b.Now()
	token := r.Header.Get(HeaderSubmitToken)
	cmd := fsm.JobSubmitMany{Now: now.UnixNano(), Token: token}
	parsed := make([][]fsm.Opcode, 0, len(jobsOps))
	for k, ops := range jobsOps {
		built, p, aerr := s.prepareOps(r, body, func(*http.Request, []byte) ([]any, *APIError) { return ops, nil }, now)
		if aerr != nil {
			if k < len(jobsOps)-1 {
				aerr.Message = fmt.Sprintf("instance %d: %s", k, aerr.Message)
				aerr.Explain = aerr.Message
				if aerr.Field != "" {
					aerr.Field = fmt.Sprintf("instances.%d.%s", k, aerr.Field)
				}
			}
			writeError(w, aerr)
			return
		}
		spec := fsm.JobSpec{Ops: built, UUIDs: make([]string, len(built))}
		for i := range spec.UUIDs {
			spec.UUIDs[i] = s.b.NewUUID()
		}
		cmd.Jobs, parsed = append(cmd.Jobs, spec), append(parsed, p)
	}
	if mp != nil {
		if aerr := s.placeMulti(r, mp, &cmd); aerr != nil {
			writeError(w, aerr)
			return
		}
		// The allocator's nodes are in the creations now, and the
		// instances it could not place are gone: the opcodes are
		// parsed again for the check.
		if parsed, aerr = parseJobs(cmd.Jobs); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	check := func(st *fsm.State) *fsm.Error {
		if st.Resent(token) {
			return nil
		}
		return checkSubmission(st, cmd.Jobs, parsed)
	}
	s.applyCommand(w, r, body, cmd, check, func(resp fsm.Response) any {
		if len(resp.JobIDs) == 0 {
			return nil
		}
		return resp.JobIDs[len(resp.JobIDs)-1]
	})
}
