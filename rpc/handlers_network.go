package rpc

import (
	"net/http"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// Networks: doc/rapi.rst's /2/networks resources. Reads answer from the
// replica; changes are the OP_NETWORK_* opcodes (and OP_TAGS_* of kind
// network), so they honour ?dry-run=1 as every job route does.

// NetworkFieldNames are the fields of a network object (Ganeti's
// rlib2.NET_FIELDS), and the counts of its query resource.
var NetworkFieldNames = []string{
	"name", "network", "gateway", "network6", "gateway6", "mac_prefix",
	"free_count", "reserved_count", "map", "group_list", "inst_list",
	"external_reservations", "tags", "serial_no", "ctime", "mtime", "uuid",
	"group_cnt", "inst_cnt",
}

// NetworkInfo is a network object as the API answers it.
type NetworkInfo struct {
	Name      string  `json:"name"`
	UUID      string  `json:"uuid"`
	Network   string  `json:"network"`
	Gateway   *string `json:"gateway"`
	Network6  *string `json:"network6"`
	Gateway6  *string `json:"gateway6"`
	MACPrefix *string `json:"mac_prefix"`
	FreeCount int     `json:"free_count"`
	Reserved  int     `json:"reserved_count"`
	// Map has one character per address: 'X' reserved or used, '.' free.
	Map string `json:"map"`
	// GroupList has one [group, mode, link, vlan] per connected group.
	GroupList [][]string `json:"group_list"`
	GroupCnt  int        `json:"group_cnt"`
	InstList  []string   `json:"inst_list"`
	InstCnt   int        `json:"inst_cnt"`
	// ExternalReservations is Ganeti's comma-separated string.
	ExternalReservations string   `json:"external_reservations"`
	Tags                 []string `json:"tags"`
	SerialNo             int64    `json:"serial_no"`
	CTime                float64  `json:"ctime"`
	MTime                float64  `json:"mtime"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// NetworkFields builds a network object.
func NetworkFields(st *fsm.State, n *fsm.Network) NetworkInfo {
	stats := st.NetworkStats(n)
	groups := [][]string{}
	for _, g := range st.SortedGroups() {
		if p, ok := n.Groups[g.UUID]; ok {
			groups = append(groups, []string{g.Name, p.Mode, p.Link, p.VLAN})
		}
	}
	insts := nonNil(st.NetworkInstances(n.UUID))
	return NetworkInfo{
		Name: n.Name, UUID: n.UUID, Network: n.Network, Gateway: strPtr(n.Gateway),
		Network6: strPtr(n.Network6), Gateway6: strPtr(n.Gateway6), MACPrefix: strPtr(n.MACPrefix),
		FreeCount: stats.Free, Reserved: stats.Reserved, Map: stats.Map,
		GroupList: groups, GroupCnt: len(groups), InstList: insts, InstCnt: len(insts),
		ExternalReservations: strings.Join(n.ExternalReservations(), ", "),
		Tags:                 sortedCopy(n.Tags), SerialNo: n.SerialNo, CTime: n.CTime, MTime: n.MTime,
	}
}

func networkRef(r *http.Request) (string, *APIError) {
	return pathRef(r, "network_name", fsm.ValidateNetworkName)
}

func (s *Server) serveNetworks(w http.ResponseWriter, r *http.Request) error {
	// Under the read lock, not from a frozen view: a network's address
	// figures come from the state's address index (networks are few).
	bulk, aerr := queryFlag(r.URL.Query(), "bulk")
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		return listing(bulk, st.SortedNetworks(),
			func(n *fsm.Network) any { return NameURI{Name: n.Name, URI: "/2/networks/" + n.Name} },
			func(n *fsm.Network) any { return NetworkFields(st, n) }), nil
	})
}

func (s *Server) serveNetwork(w http.ResponseWriter, r *http.Request) error {
	ref, aerr := networkRef(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		n := st.LookupNetwork(ref)
		if n == nil {
			return nil, unknownEntity("network_name", "network %q does not exist", ref)
		}
		return NetworkFields(st, n), nil
	})
}

// networkOp builds an OP_NETWORK_* opcode from the body's fields and the
// network named in the path; a network_name in the body must be the
// path's.
func networkOp(opID string) opsBuilder {
	return func(r *http.Request, body []byte) ([]any, *APIError) {
		name, aerr := networkRef(r)
		if aerr != nil {
			return nil, aerr
		}
		op, aerr := bodyMap(body)
		if aerr != nil {
			return nil, aerr
		}
		if v, ok := op["network_name"]; ok && v != name {
			return nil, badRequest("network_name", "network_name %v in the body differs from the network %q of the path", v, name)
		}
		op["network_name"] = name
		return single(opID, op), nil
	}
}

// buildNetworkAdd: POST /2/networks (Ganeti renames "name" to
// "network_name").
func buildNetworkAdd(r *http.Request, body []byte) ([]any, *APIError) {
	op, aerr := bodyMap(body)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := rename(op, "name", "network_name"); aerr != nil {
		return nil, aerr
	}
	if _, ok := op["network_name"]; !ok {
		op["network_name"] = "" // so the error names it
	}
	return single("OP_NETWORK_ADD", op), nil
}

// buildNetworkRemove: DELETE /2/networks/{name}.
func buildNetworkRemove(r *http.Request, _ []byte) ([]any, *APIError) {
	name, aerr := networkRef(r)
	if aerr != nil {
		return nil, aerr
	}
	return single("OP_NETWORK_REMOVE", map[string]any{"network_name": name}), nil
}

// RenameNetworkRequest is the body of PUT /2/networks/{name}/rename.
type RenameNetworkRequest struct {
	NewName string `json:"new_name"`
}

// buildNetworkRename: PUT /2/networks/{name}/rename {"new_name"}.
func buildNetworkRename(r *http.Request, body []byte) ([]any, *APIError) {
	name, aerr := networkRef(r)
	if aerr != nil {
		return nil, aerr
	}
	var req RenameNetworkRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return nil, aerr
	}
	if req.NewName == "" {
		return nil, badRequest("new_name", "new_name is required")
	}
	return single("OP_NETWORK_RENAME", map[string]any{"network_name": name, "new_name": req.NewName}), nil
}
