package rpc

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/gnt-cluster/gnt/fsm"
)

// The builders below turn a mutating request into opcodes. They only
// decode and merge: fsm.ParseOpcode validates the result (prepareOps), and
// the state machine checks it against the configuration.

func single(opID string, fields map[string]any) []any {
	fields["OP_ID"] = opID
	return []any{fields}
}

// buildClusterModify: PUT /2/modify.
func buildClusterModify(r *http.Request, body []byte) ([]any, *APIError) {
	var req ModifyClusterRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	return single("OP_CLUSTER_SET_PARAMS", toMap(req)), nil
}

// buildTags: PUT/DELETE on a tags resource, tags in ?tag=.
func buildTags(opID, kind, param string) opsBuilder {
	return func(r *http.Request, _ []byte) ([]any, *APIError) {
		op := map[string]any{"kind": kind, "tags": append([]string{}, r.URL.Query()["tag"]...)}
		if param != "" {
			validate := fsm.ValidateHostname
			if kind == fsm.TagNodeGroup {
				validate = fsm.ValidateGroupName
			}
			if kind == fsm.TagNetwork {
				validate = fsm.ValidateNetworkName
			}
			name, aerr := pathRef(r, "name", validate)
			if aerr != nil {
				return nil, aerr
			}
			op["name"] = name
		}
		return single(opID, op), nil
	}
}

// buildNodeAdd: POST /2/nodes.
func buildNodeAdd(r *http.Request, body []byte) ([]any, *APIError) {
	var req AddNodeRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	op := toMap(req)
	op["node_name"] = req.NodeName // present even when empty, so the error names it
	op["primary_ip"] = req.PrimaryIP
	return single("OP_NODE_ADD", op), nil
}

// buildNodeRemove: DELETE /2/nodes/{name}.
func buildNodeRemove(r *http.Request, _ []byte) ([]any, *APIError) {
	name, aerr := nodeRef(r)
	if aerr != nil {
		return nil, aerr
	}
	return single("OP_NODE_REMOVE", map[string]any{"node_name": name}), nil
}

// buildNodeModify: PUT /2/nodes/{name}/modify.
func buildNodeModify(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := nodeRef(r)
	if aerr != nil {
		return nil, aerr
	}
	var req ModifyNodeRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	op := toMap(req)
	op["node_name"] = name
	return single("OP_NODE_SET_PARAMS", op), nil
}

// buildNodeRole: PUT /2/nodes/{name}/role, the body a JSON string. The
// mapping of roles to flags is Ganeti's rlib2 R_2_nodes_name_role.
func buildNodeRole(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := nodeRef(r)
	if aerr != nil {
		return nil, aerr
	}
	q := r.URL.Query()
	force, aerr := queryFlag(q, "force")
	if aerr != nil {
		return nil, aerr
	}
	autoPromote, aerr := queryFlag(q, "auto-promote")
	if aerr != nil {
		return nil, aerr
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("role", "the body must be the new role as a JSON string")
	}
	var role string
	if err := fsm.DecodeStrict(body, &role); err != nil {
		return nil, badRequest("role", "the body must be the new role as a JSON string: %s", fsm.AsError(err).Msg)
	}
	op := map[string]any{"node_name": name, "force": force, "auto_promote": autoPromote}
	switch role {
	case fsm.RoleRegular:
		op["master_candidate"], op["offline"], op["drained"] = false, false, false
	case fsm.RoleCandidate:
		op["master_candidate"] = true
	case fsm.RoleDrained:
		op["drained"] = true
	case fsm.RoleOffline:
		op["offline"] = true
	case fsm.RoleMaster:
		return nil, badRequest("role", "can't set the master role; use master-failover")
	default:
		return nil, badRequest("role", "can't set %q role (master-candidate, regular, drained, offline)", role)
	}
	return single("OP_NODE_SET_PARAMS", op), nil
}

// buildGroupAdd: POST /2/groups; "name" is accepted for group_name, as
// rlib2 renames it.
func buildGroupAdd(r *http.Request, body []byte) ([]any, *APIError) {
	var req AddGroupRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	if req.Name != "" {
		if req.GroupName != "" {
			return nil, badRequest("name", "parameter 'name' was renamed to 'group_name'; give either, not both")
		}
		req.GroupName, req.Name = req.Name, ""
	}
	op := toMap(req)
	op["group_name"] = req.GroupName
	return single("OP_GROUP_ADD", op), nil
}

// buildGroupModify: PUT /2/groups/{name}/modify.
func buildGroupModify(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := groupRef(r)
	if aerr != nil {
		return nil, aerr
	}
	var req ModifyGroupRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	op := toMap(req)
	op["group_name"] = name
	return single("OP_GROUP_SET_PARAMS", op), nil
}

// buildGroupRemove: DELETE /2/groups/{name}.
func buildGroupRemove(r *http.Request, _ []byte) ([]any, *APIError) {
	name, aerr := groupRef(r)
	if aerr != nil {
		return nil, aerr
	}
	return single("OP_GROUP_REMOVE", map[string]any{"group_name": name}), nil
}

// buildJobOps: POST /2/jobs with {"ops": [opcode, ...]} (gnt extension).
func buildJobOps(r *http.Request, body []byte) ([]any, *APIError) {
	var req SubmitJobRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("ops", "the body must be {\"ops\": [opcode, ...]}")
	}
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	if e := fsm.CheckJobSize(len(req.Ops)); e != nil {
		return nil, FromFSM(e)
	}
	// The opcodes go on as they came: prepareOps decodes each into its
	// typed form once.
	ops := make([]any, len(req.Ops))
	for i, raw := range req.Ops {
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return nil, badRequest("ops", "opcode %d is not a JSON object", i)
		}
		ops[i] = raw
	}
	return ops, nil
}

// SubmitJobRequest is the body of POST /2/jobs.
type SubmitJobRequest struct {
	Ops []json.RawMessage `json:"ops"`
}
