package rpc

import (
	"bytes"
	"errors"
	"net/http"
	"sort"
	"strconv"

	"github.com/gnt-cluster/gnt/fsm"
)

// Instance writes, with Ganeti's RAPI paths and bodies. Bodies are opcode
// fields; fsm.ParseOpcode validates them, naming any unknown field.

// buildInstanceCreate: POST /2/instances (Ganeti's body version 1: the
// OP_INSTANCE_CREATE fields; "name" and "os" are accepted for
// instance_name and os_type).
func buildInstanceCreate(r *http.Request, body []byte) ([]any, *APIError) {
	op, aerr := bodyMap(body)
	if aerr != nil {
		return nil, aerr
	}
	if v, ok := op["__version__"]; ok {
		if n, _ := v.(interface{ String() string }); n == nil || n.String() != "1" {
			return nil, badRequest("__version__", "only body version 1 is supported")
		}
		delete(op, "__version__")
	}
	for _, r := range [][2]string{{"name", "instance_name"}, {"os", "os_type"}} {
		if aerr := rename(op, r[0], r[1]); aerr != nil {
			return nil, aerr
		}
	}
	return single("OP_INSTANCE_CREATE", op), nil
}

// buildInstanceCommit: POST /2/instances/{name}/create: a forthcoming
// instance becomes real (seed 001).
func buildInstanceCommit(r *http.Request, body []byte) ([]any, *APIError) {
	ops, aerr := instanceOp("OP_INSTANCE_CREATE")(r, body)
	if aerr == nil {
		ops[0].(map[string]any)["commit"] = true
	}
	return ops, aerr
}

// instanceOp builds an instance opcode from the path's instance, the
// body's fields and the named boolean query flags.
func instanceOp(opID string, flags ...string) opsBuilder {
	return func(r *http.Request, body []byte) ([]any, *APIError) {
		name, aerr := instanceRef(r)
		if aerr != nil {
			return nil, aerr
		}
		op, aerr := bodyMap(body)
		if aerr != nil {
			return nil, aerr
		}
		q := r.URL.Query()
		for _, f := range flags {
			if q.Has(f) {
				v, aerr := queryFlag(q, f)
				if aerr != nil {
					return nil, aerr
				}
				op[f] = v
			}
		}
		if opID == "OP_INSTANCE_REBOOT" && q.Has("type") {
			op["reboot_type"] = q.Get("type")
		}
		// Ganeti's replace-disks takes its parameters in the query too.
		if opID == "OP_INSTANCE_REPLACE_DISKS" {
			for _, f := range []string{"mode", "remote_node", "iallocator"} {
				if q.Has(f) {
					op[f] = q.Get(f)
				}
			}
		}
		op["instance_name"] = name
		return single(opID, op), nil
	}
}

// buildReinstall: POST /2/instances/{name}/reinstall, as Ganeti's
// rlib2 does it: one job that shuts the instance down
// (OP_INSTANCE_SHUTDOWN, which does nothing to a stopped one), reinstalls
// it (OP_INSTANCE_REINSTALL) and starts it again (OP_INSTANCE_STARTUP)
// unless told not to. The parameters come in the body
// (instance-reinstall-reqv1: "os", "start", default true, "osparams") or
// in Ganeti's legacy query (?os=NAME&nostartup=1), not both; dry-run and
// reason may go with either. osparams update the instance's OS parameters
// before the install, as Ganeti's reinstall does.
func buildReinstall(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := instanceRef(r)
	if aerr != nil {
		return nil, aerr
	}
	req, aerr := bodyMap(body)
	if aerr != nil {
		return nil, aerr
	}
	q := r.URL.Query()
	start := true
	osName := ""
	var osparams any
	if q.Has("os") || q.Has("nostartup") {
		if len(req) > 0 {
			return nil, badRequest("os", "give the reinstall's parameters in the query (os, nostartup) or in the body (os, start, osparams), not both")
		}
		noStartup, aerr := queryFlag(q, "nostartup")
		if aerr != nil {
			return nil, aerr
		}
		start = !noStartup
		osName = q.Get("os")
		if q.Has("os") && osName == "" {
			return nil, badRequest("os", "query parameter os is empty; leave it out to keep the instance's OS")
		}
	}
	for _, k := range sortedKeys(req) {
		v := req[k]
		switch k {
		case "os":
			s, ok := v.(string)
			if !ok && v != nil {
				return nil, badRequest("os", "os must be a string (an OS name), got %s", jsonKind(v))
			}
			osName = s
		case "start":
			b, ok := v.(bool)
			if !ok {
				return nil, badRequest("start", "start must be true or false, got %s", jsonKind(v))
			}
			start = b
		case "osparams":
			if v == nil {
				continue // none given (Ganeti's default)
			}
			if _, ok := v.(map[string]any); !ok {
				return nil, badRequest("osparams", "osparams must be an object of OS parameters, got %s", jsonKind(v))
			}
			osparams = v
		default:
			return nil, badRequest(k, "reinstall does not take %q; its body fields are os, start and osparams", k)
		}
	}
	reinstall := map[string]any{"instance_name": name}
	if osName != "" {
		reinstall["os_type"] = osName
	}
	if osparams != nil {
		reinstall["osparams"] = osparams
	}
	ops := append(single("OP_INSTANCE_SHUTDOWN", map[string]any{"instance_name": name}),
		single("OP_INSTANCE_REINSTALL", reinstall)...)
	if start {
		ops = append(ops, single("OP_INSTANCE_STARTUP", map[string]any{"instance_name": name})...)
	}
	return ops, nil
}

// bodyMap decodes an optional JSON object body into opcode fields.
func bodyMap(body []byte) (map[string]any, *APIError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]any{}, nil
	}
	m, err := rawToMap(body)
	var fe *fsm.Error
	if errors.As(err, &fe) {
		return nil, FromFSM(fe) // a repeated key, invalid UTF-8
	}
	if err != nil || m == nil {
		return nil, FromFSM(&fsm.Error{Code: fsm.CodeInval, Msg: "the body must be a JSON object of opcode fields"})
	}
	return m, nil
}

// rename moves a field given under its RAPI alias to the opcode's name.
func rename(m map[string]any, from, to string) *APIError {
	v, ok := m[from]
	if !ok {
		return nil
	}
	if _, both := m[to]; both {
		return badRequest(from, "give %s or %s, not both", to, from)
	}
	m[to] = v
	delete(m, from)
	return nil
}

// serveCapacity is GET /2/gnt/capacity?memory=M&disk=D[&disk=D]&vcpus=V
// &disk_template=T&group=G&iallocator=LIST (sizes in MiB): how many
// instances of that specification fit, on this gntd's replica, counted by
// the allocators of LIST (default: the cluster's default_iallocator) as
// a placement tries them.
func (s *Server) serveCapacity(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	req := CapacityRequest{DiskTemplate: q.Get("disk_template"), Group: q.Get("group"), IAllocator: q.Get("iallocator")}
	if req.IAllocator != "" {
		if aerr := s.checkIAllocators("iallocator", req.IAllocator); aerr != nil {
			writeError(w, aerr)
			return nil
		}
	}
	num := func(name string, v string) (int64, *APIError) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, badRequest(name, "%s must be a non-negative integer (MiB for sizes), got %q", name, v)
		}
		return n, nil
	}
	var aerr *APIError
	if v := q.Get("memory"); v != "" {
		if req.MemoryMiB, aerr = num("memory", v); aerr != nil {
			writeError(w, aerr)
			return nil
		}
	}
	if v := q.Get("vcpus"); v != "" {
		n, aerr := num("vcpus", v)
		if aerr != nil {
			writeError(w, aerr)
			return nil
		}
		req.VCPUs = int(min(n, fsm.MaxVCPUs+1))
	}
	if e := fsm.ValidateMemory("memory", req.MemoryMiB); e != nil {
		writeError(w, FromFSM(e))
		return nil
	}
	if req.VCPUs > fsm.MaxVCPUs {
		writeError(w, badRequest("vcpus", "vcpus must be 0 to %d, got %d", fsm.MaxVCPUs, req.VCPUs))
		return nil
	}
	if n := len(q["disk"]); n > fsm.MaxDisksPerInstance {
		writeError(w, badRequest("disk", "an instance has at most %d disks, got %d", fsm.MaxDisksPerInstance, n))
		return nil
	}
	var total int64
	for _, v := range q["disk"] {
		n, aerr := num("disk", v)
		if aerr != nil {
			writeError(w, aerr)
			return nil
		}
		var e *fsm.Error
		if total, e = fsm.AddDiskMiB("disk", total, n); e != nil {
			writeError(w, FromFSM(e))
			return nil
		}
		req.Disks = append(req.Disks, n)
	}
	if req.DiskTemplate == "" {
		req.DiskTemplate = fsm.DTDiskless
		if len(req.Disks) > 0 {
			req.DiskTemplate = fsm.DTPlain
		}
	}
	res, err := s.b.Capacity(r.Context(), req)
	if err != nil {
		writeError(w, asAPIError(err))
		return nil
	}
	setIndex(w, s.index())
	writeJSON(w, res)
	return nil
}

// nodeOp builds a node-wide opcode (evacuate, migrate) from the path's
// node and the body's fields.
func nodeOp(opID string) opsBuilder {
	return func(r *http.Request, body []byte) ([]any, *APIError) {
		name, aerr := nodeRef(r)
		if aerr != nil {
			return nil, aerr
		}
		op, aerr := bodyMap(body)
		if aerr != nil {
			return nil, aerr
		}
		op["node_name"] = name
		return single(opID, op), nil
	}
}

// sortedKeys returns a map's keys in order, so that the first of several
// refused fields is always the same one.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// jsonKind names the JSON type of a decoded value for an error message.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return "a number"
}
