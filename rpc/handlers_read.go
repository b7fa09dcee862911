package rpc

import (
	"errors"
	"net/http"
	"runtime"
	"sort"

	"github.com/gnt-cluster/gnt/fsm"
)

// Constants of the cluster info answer (Ganeti's values where Ganeti has
// one).
const (
	ProtocolVersion = 1  // gnt's API protocol version
	OSAPIVersion    = 20 // Ganeti's OS_API_V20
	ExportVersion   = 0  // Ganeti's EXPORT_VERSION
)

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 2)
}

// handleNull answers GET / and GET /2 as Ganeti does: null.
func (s *Server) handleNull(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, nil)
}

// Features are the RAPI feature strings this server supports (Ganeti's
// /2/features): instance creation and node migration take the version-1
// body, node evacuation answers {"jobs": [[true, id], ...]}, and
// reinstall takes the version-1 body (os, start, osparams) and, as
// Ganeti's, shuts a running instance down, reinstalls and starts it.
var Features = []string{"instance-create-reqv1", "instance-reinstall-reqv1", "node-evac-res1", "node-migrate-reqv1"}

func (s *Server) handleFeatures(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, Features)
}

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request) error {
	// Ask the backend before taking the state's lock: its status may read
	// the state too.
	status := s.b.Status()
	rt := s.runtimeOf()
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		c := st.Cluster
		info := ClusterInfo{
			Name: c.Name, UUID: c.UUID, SerialNo: c.SerialNo, CTime: c.CTime, MTime: c.MTime,
			CandidatePoolSize: c.CandidatePoolSize, MaxVoters: c.MaxVoters,
			DefaultIAllocator: c.DefaultIAllocator, NDParams: copyMap(c.NDParams), Tags: sortedCopy(c.Tags),
			SoftwareVersion: status.Version, GntVersion: status.Build, ProtocolVersion: ProtocolVersion,
			Architecture: [2]string{runtime.GOOS, runtime.GOARCH}, OSAPIVersion: OSAPIVersion,
			ExportVersion: ExportVersion, ConfigVersion: fsm.SnapshotVersion, Leader: status.Leader,
			RAPIAnonymousRead: c.RAPIAnonymousRead, UIDPool: fsm.UIDRangesJSON(c.UIDPool),
		}
		if m := st.Master(); m != nil {
			info.Master = m.Name
		}
		info.EnabledHypervisors, info.DefaultHypervisor = clusterHypervisors(st, rt)
		info.HVParams = map[string]map[string]any{}
		for _, h := range info.EnabledHypervisors {
			info.HVParams[h] = fsm.FillParams(fsm.HVDefaults(h), c.HVParams[h])
		}
		be := fsm.FillParams(fsm.ParamDefaults(fsm.BEParamDefs), c.BEParams)
		be["memory"] = be["maxmem"]
		if _, ok := c.BEParams["minmem"]; !ok {
			be["minmem"] = be["maxmem"]
		}
		info.BEParams = map[string]map[string]any{"default": be}
		info.NICParams = map[string]map[string]any{"default": fsm.FillParams(fsm.ParamDefaults(fsm.NICParamDefs), c.NICParams)}
		info.DiskParams = fsm.FilledDiskParams(c, nil)
		info.OSParams = map[string]map[string]any{}
		for os, m := range c.OSParams {
			info.OSParams[os] = copyMap(m)
		}
		return info, nil
	})
}

// Path references.

func pathRef(r *http.Request, field string, validate func(field, name string) *fsm.Error) (string, *APIError) {
	name := r.PathValue("name")
	if e := validate(field, name); e != nil {
		return "", FromFSM(e)
	}
	return name, nil
}

func nodeRef(r *http.Request) (string, *APIError) {
	return pathRef(r, "node_name", fsm.ValidateHostname)
}

func groupRef(r *http.Request) (string, *APIError) {
	return pathRef(r, "group_name", fsm.ValidateGroupName)
}

func instanceRef(r *http.Request) (string, *APIError) {
	return pathRef(r, "instance_name", fsm.ValidateHostname)
}

// Nodes.

// NodeInstances are a node's instances and what they use of it
// (InstancesByNode), for NodeFields.
type NodeInstances struct {
	primary, secondary []string
	mem, disk          int64 // used by instances, real and forthcoming
}

// InstancesByNode gathers every node's NodeInstances, by node UUID.
func InstancesByNode(st *fsm.State) map[string]*NodeInstances {
	out := map[string]*NodeInstances{}
	get := func(u string) *NodeInstances {
		if out[u] == nil {
			out[u] = &NodeInstances{}
		}
		return out[u]
	}
	for _, i := range st.SortedInstances() {
		p := get(i.PrimaryNode)
		p.primary = append(p.primary, i.Ref())
		m, d := fsm.InstanceUsage(i, i.PrimaryNode)
		p.mem, p.disk = p.mem+m, p.disk+d
		for _, sn := range i.SecondaryNodes {
			s := get(sn)
			s.secondary = append(s.secondary, i.Ref())
			_, d := fsm.InstanceUsage(i, sn)
			s.disk += d
		}
	}
	return out
}

func (s *Server) serveNodes(w http.ResponseWriter, r *http.Request) error {
	return serveList(s, w, r, (*fsm.State).SortedNodes, nodeEntry,
		func(st *fsm.State) func(*fsm.Node) any { return nodeObjects(st, s.runtimeOf()) })
}

// nodeEntry is a node's entry of the short listing.
func nodeEntry(n *fsm.Node) any { return IDURI{ID: n.Name, URI: "/2/nodes/" + n.Name} }

// nodeObjects makes the node objects of st.
func nodeObjects(st *fsm.State, rt *Runtime) func(*fsm.Node) any {
	insts := InstancesByNode(st)
	return func(n *fsm.Node) any { return NodeFields(st, n, insts, rt) }
}

// serveList answers a collection from a frozen view of the state (see
// serveFrozen): the short entries, or with ?bulk=1 every object in full
// as the function full(st) makes it, encoded one at a time.
func serveList[T any](s *Server, w http.ResponseWriter, r *http.Request, items func(st *fsm.State) []T,
	short func(T) any, full func(st *fsm.State) func(T) any) error {
	bulk, aerr := queryFlag(r.URL.Query(), "bulk")
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return s.serveFrozen(w, func(st *fsm.State, a *jsonStream) *APIError {
		f := short
		if bulk {
			f = full(st)
		}
		if err := a.array(seqOf(items(st), f)); err != nil {
			return encodingError(err)
		}
		return nil
	})
}

// listing maps each item to Ganeti's short {id|name, uri} entry or, in
// bulk, to its full view.
func listing[T any](bulk bool, items []T, short, full func(T) any) []any {
	out := make([]any, len(items))
	for i, it := range items {
		if bulk {
			out[i] = full(it)
		} else {
			out[i] = short(it)
		}
	}
	return out
}

func lookupNode(st *fsm.State, ref, field string) (*fsm.Node, *APIError) {
	n := st.LookupNode(ref)
	if n == nil {
		return nil, unknownEntity(field, "node %q does not exist", ref)
	}
	return n, nil
}

func (s *Server) serveNode(w http.ResponseWriter, r *http.Request) error {
	ref, aerr := nodeRef(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		n, aerr := lookupNode(st, ref, "node_name")
		if aerr != nil {
			return nil, aerr
		}
		return NodeFields(st, n, InstancesByNode(st), s.runtimeOf()), nil
	})
}

func (s *Server) serveNodeRole(w http.ResponseWriter, r *http.Request) error {
	ref, aerr := nodeRef(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		n, aerr := lookupNode(st, ref, "node_name")
		if aerr != nil {
			return nil, aerr
		}
		return st.Role(n), nil
	})
}

// Groups.

func (s *Server) serveGroups(w http.ResponseWriter, r *http.Request) error {
	return serveList(s, w, r, (*fsm.State).SortedGroups, groupEntry, groupObjects)
}

// groupEntry is a group's entry of the short listing.
func groupEntry(g *fsm.Group) any { return NameURI{Name: g.Name, URI: "/2/groups/" + g.Name} }

// groupObjects makes the group objects of st.
func groupObjects(st *fsm.State) func(*fsm.Group) any {
	return func(g *fsm.Group) any { return GroupFields(st, g) }
}

func (s *Server) serveGroup(w http.ResponseWriter, r *http.Request) error {
	ref, aerr := groupRef(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		g := st.LookupGroup(ref)
		if g == nil {
			return nil, unknownEntity("group_name", "node group %q does not exist", ref)
		}
		return GroupFields(st, g), nil
	})
}

// Instances.

func (s *Server) serveInstances(w http.ResponseWriter, r *http.Request) error {
	return serveList(s, w, r, (*fsm.State).SortedInstances, instanceEntry,
		func(st *fsm.State) func(*fsm.Instance) any { return instanceObjects(st, s.runtimeOf()) })
}

// instanceEntry is an instance's entry of the short listing.
func instanceEntry(i *fsm.Instance) any { return IDURI{ID: i.Ref(), URI: "/2/instances/" + i.Ref()} }

// instanceObjects makes the instance objects of st.
func instanceObjects(st *fsm.State, rt *Runtime) func(*fsm.Instance) any {
	return func(i *fsm.Instance) any { return InstanceFields(st, i, rt) }
}

func (s *Server) serveInstance(w http.ResponseWriter, r *http.Request) error {
	ref, aerr := instanceRef(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	rt := s.runtimeOf()
	return s.serveState(w, func(st *fsm.State) (any, *APIError) {
		i := st.LookupInstance(ref)
		if i == nil {
			return nil, unknownEntity("instance_name", "instance %q does not exist", ref)
		}
		return InstanceFields(st, i, rt), nil
	})
}

// Tags.

// serveTags answers the sorted tags of the object of a tag kind; param is
// the path wildcard naming the object ("" for the cluster).
func (s *Server) serveTags(kind, param string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var ref string
		if param != "" {
			validate := fsm.ValidateHostname
			if kind == fsm.TagNodeGroup {
				validate = fsm.ValidateGroupName
			}
			if kind == fsm.TagNetwork {
				validate = fsm.ValidateNetworkName
			}
			var aerr *APIError
			if ref, aerr = pathRef(r, "name", validate); aerr != nil {
				writeError(w, aerr)
				return nil
			}
		}
		return s.serveState(w, func(st *fsm.State) (any, *APIError) {
			var tags []string
			switch kind {
			case fsm.TagCluster:
				tags = st.Cluster.Tags
			case fsm.TagNode:
				n := st.LookupNode(ref)
				if n == nil {
					return nil, unknownEntity("name", "node %q does not exist", ref)
				}
				tags = n.Tags
			case fsm.TagNodeGroup:
				g := st.LookupGroup(ref)
				if g == nil {
					return nil, unknownEntity("name", "node group %q does not exist", ref)
				}
				tags = g.Tags
			case fsm.TagInstance:
				i := st.LookupInstance(ref)
				if i == nil {
					return nil, unknownEntity("name", "instance %q does not exist", ref)
				}
				tags = i.Tags
			case fsm.TagNetwork:
				n := st.LookupNetwork(ref)
				if n == nil {
					return nil, unknownEntity("name", "network %q does not exist", ref)
				}
				tags = n.Tags
			}
			return sortedCopy(tags), nil
		})
	}
}

// gnt endpoints answered without the state.

func (s *Server) servePeers(w http.ResponseWriter, r *http.Request) error {
	peers, err := s.b.Peers(r.Context())
	if err != nil {
		if errors.Is(err, ErrNotLeader) {
			return ErrNotLeader
		}
		writeError(w, asAPIError(err))
		return nil
	}
	if peers == nil {
		peers = []Peer{}
	}
	setIndex(w, s.index())
	writeJSON(w, peers)
	return nil
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	withHash, aerr := queryFlag(r.URL.Query(), "hash")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	st := s.b.Status()
	if withHash {
		if f := s.b.FSM(); f != nil {
			st.FSMHash = f.Hash()
		}
	}
	writeJSON(w, st)
}

// Small helpers.

func positive(v int64) *int64 {
	if v <= 0 {
		return nil
	}
	return &v
}

// nonNil returns s, or an empty slice for nil, so JSON shows [] rather
// than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// mergeInto applies parameter overrides as the state machine does:
// "default" or null removes an override.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if v == nil || v == "default" {
			delete(dst, k)
		} else {
			dst[k] = v
		}
	}
}
