package rpc

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// Node storage units (doc/rapi.rst /2/nodes/[node_name]/storage,
// /storage/modify, /storage/repair): each submits a job, as in Ganeti,
// whose opcode asks the node's agent (jobs/storage.go). Bad input is
// refused with 400 naming the parameter before any job exists.

// storageQuery reads a required query parameter.
func storageQuery(q url.Values, name string) (string, *APIError) {
	if !q.Has(name) || q.Get(name) == "" {
		return "", badRequest(name, "missing the required query parameter %s", name)
	}
	if len(q[name]) > 1 {
		return "", badRequest(name, "query parameter %s is given %d times", name, len(q[name]))
	}
	return q.Get(name), nil
}

// storageType reads and checks storage_type.
func storageType(q url.Values) (string, *APIError) {
	t, aerr := storageQuery(q, "storage_type")
	if aerr != nil {
		return "", aerr
	}
	if e := fsm.ValidateStorageType("storage_type", t); e != nil {
		return "", FromFSM(e)
	}
	return t, nil
}

// storageRequest reads what every storage route names, in this order: the
// node, storage_type and the required query parameter param.
func storageRequest(r *http.Request, param string) (node, storageT, value string, q url.Values, aerr *APIError) {
	if node, aerr = nodeRef(r); aerr != nil {
		return "", "", "", nil, aerr
	}
	q = r.URL.Query()
	if storageT, aerr = storageType(q); aerr != nil {
		return "", "", "", nil, aerr
	}
	if value, aerr = storageQuery(q, param); aerr != nil {
		return "", "", "", nil, aerr
	}
	return node, storageT, value, q, nil
}

// buildNodeStorage: GET /2/nodes/[n]/storage?storage_type=T&output_fields=a,b
// (OP_NODE_QUERY_STORAGE); the job's result is the rows.
func buildNodeStorage(r *http.Request, _ []byte) ([]any, *APIError) {
	name, t, of, _, aerr := storageRequest(r, "output_fields")
	if aerr != nil {
		return nil, aerr
	}
	fields := strings.Split(of, ",")
	if e := fsm.ValidateStorageFields("output_fields", fields); e != nil {
		return nil, FromFSM(e)
	}
	return single("OP_NODE_QUERY_STORAGE", map[string]any{"nodes": []string{name}, "storage_type": t, "output_fields": fields}), nil
}

// buildNodeStorageModify: PUT /2/nodes/[n]/storage/modify?storage_type=lvm-pv&name=X&allocatable=0|1
// (OP_NODE_MODIFY_STORAGE).
func buildNodeStorageModify(r *http.Request, _ []byte) ([]any, *APIError) {
	name, t, unit, q, aerr := storageRequest(r, "name")
	if aerr != nil {
		return nil, aerr
	}
	changes := map[string]any{}
	if q.Has("allocatable") {
		a, aerr := queryFlag(q, "allocatable")
		if aerr != nil {
			return nil, aerr
		}
		changes["allocatable"] = a
	}
	return single("OP_NODE_MODIFY_STORAGE", map[string]any{"node_name": name, "storage_type": t, "name": unit, "changes": changes}), nil
}

// buildNodeStorageRepair: PUT /2/nodes/[n]/storage/repair?storage_type=lvm-vg&name=X
// (OP_REPAIR_NODE_STORAGE).
func buildNodeStorageRepair(r *http.Request, _ []byte) ([]any, *APIError) {
	name, t, unit, q, aerr := storageRequest(r, "name")
	if aerr != nil {
		return nil, aerr
	}
	ignore, aerr := queryFlag(q, "ignore_consistency")
	if aerr != nil {
		return nil, aerr
	}
	return single("OP_REPAIR_NODE_STORAGE", map[string]any{"node_name": name, "storage_type": t, "name": unit, "ignore_consistency": ignore}), nil
}
