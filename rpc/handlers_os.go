package rpc

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// OS definitions (Ganeti's OS API): each node's agent reports the OS
// definitions in its search path (node RPC os-list); a gntd that serves
// the API keeps a recent view of the reports (OSSource), from which
// GET /2/os lists the OSes valid on every node that answered, GET
// /2/gnt/os diagnoses every OS per node (gnt os list|info|diagnose), and
// an instance's creation (or reinstall with a new OS) is refused when its
// OS or variant is not valid on its nodes, and OS parameters the OS does
// not declare in its parameters.list are refused by name.

// OSView is a recent view of the nodes' OS reports, by node UUID. A node
// missing from it has not been asked yet.
type OSView struct {
	Nodes map[string]NodeOSView
}

// NodeOSView is one node's last OS report, or why there is none.
type NodeOSView struct {
	At     time.Time
	Err    string
	Report *NodeOSReport
}

// OSSource is implemented by a Backend that keeps an OS view.
type OSSource interface {
	// OSView returns the view. The nodes of need (UUIDs) that have no
	// report in it are asked first, within a few seconds; with need
	// empty it asks nobody and never waits.
	OSView(ctx context.Context, need []string) OSView
}

// OSNodeStatus is one OS on one node.
type OSNodeStatus struct {
	Node  string `json:"node"`
	Valid bool   `json:"valid"`
	Path  string `json:"path,omitempty"`
	Error string `json:"error,omitempty"`
}

// OSInfo is one OS across the nodes that reported (GET /2/gnt/os). It is
// valid when it is valid on every node that reported; Variants,
// APIVersions and Parameters are what those nodes have in common.
type OSInfo struct {
	Name        string         `json:"name"`
	Valid       bool           `json:"valid"`
	Variants    []string       `json:"variants"`
	APIVersions []int          `json:"api_versions"`
	Parameters  []NodeOSParam  `json:"parameters"`
	Nodes       []OSNodeStatus `json:"nodes"`
}

// Names lists the names an instance may give a valid OS: os+variant for
// each variant, the bare name for an OS without variants.
func (o OSInfo) Names() []string {
	if !o.Valid {
		return nil
	}
	if len(o.Variants) == 0 {
		return []string{o.Name}
	}
	out := make([]string, len(o.Variants))
	for i, v := range o.Variants {
		out[i] = o.Name + "+" + v
	}
	return out
}

// OSNodeReport is one node's report as GET /2/gnt/os shows it.
type OSNodeReport struct {
	Node       string    `json:"node"`
	At         time.Time `json:"at,omitempty"`
	Error      string    `json:"error,omitempty"`
	SearchPath []string  `json:"search_path,omitempty"`
	Errors     []string  `json:"errors,omitempty"`
}

// OSDiagnosis is the answer of GET /2/gnt/os.
type OSDiagnosis struct {
	OSes  []OSInfo       `json:"oses"`
	Nodes []OSNodeReport `json:"nodes"`
}

// osNodes are the nodes whose OS definitions count: not offline, and in
// the group when one is given.
func osNodes(st *fsm.State, group string) []*fsm.Node {
	var out []*fsm.Node
	for _, n := range st.SortedNodes() {
		if n.Offline || group != "" && n.Group != group {
			continue
		}
		out = append(out, n)
	}
	return out
}

// diagnoseOS combines the reports of nodes into one entry per OS.
func diagnoseOS(nodes []*fsm.Node, view OSView) OSDiagnosis {
	out := OSDiagnosis{OSes: []OSInfo{}, Nodes: []OSNodeReport{}}
	byName := map[string]*OSInfo{}
	var reporting []string
	for _, n := range nodes {
		v, ok := view.Nodes[n.UUID]
		nr := OSNodeReport{Node: n.Name, At: v.At, Error: v.Err}
		switch {
		case !ok:
			nr.Error = "not asked yet"
		case v.Report == nil && v.Err == "":
			nr.Error = "no report"
		}
		if v.Report != nil {
			nr.SearchPath, nr.Errors = v.Report.SearchPath, v.Report.Errors
		}
		out.Nodes = append(out.Nodes, nr)
		if v.Report == nil {
			continue
		}
		reporting = append(reporting, n.Name)
		for _, o := range v.Report.OSes {
			info := byName[o.Name]
			if info == nil {
				info = &OSInfo{Name: o.Name, Valid: true, Variants: slices.Clone(o.Variants), APIVersions: slices.Clone(o.APIVersions), Parameters: slices.Clone(o.Parameters)}
				byName[o.Name] = info
			} else {
				info.Variants = slices.DeleteFunc(info.Variants, func(x string) bool { return !slices.Contains(o.Variants, x) })
				info.APIVersions = slices.DeleteFunc(info.APIVersions, func(x int) bool { return !slices.Contains(o.APIVersions, x) })
				info.Parameters = slices.DeleteFunc(info.Parameters, func(x NodeOSParam) bool {
					return !slices.ContainsFunc(o.Parameters, func(y NodeOSParam) bool { return y.Name == x.Name })
				})
			}
			info.Valid = info.Valid && o.Valid
			info.Nodes = append(info.Nodes, OSNodeStatus{Node: n.Name, Valid: o.Valid, Path: o.Path, Error: o.Error})
		}
	}
	for _, info := range byName {
		// Missing on a node that reported: not valid there.
		for _, node := range reporting {
			if !slices.ContainsFunc(info.Nodes, func(s OSNodeStatus) bool { return s.Node == node }) {
				info.Valid = false
				info.Nodes = append(info.Nodes, OSNodeStatus{Node: node, Error: "not found in the node's OS search path"})
			}
		}
		sort.Slice(info.Nodes, func(i, j int) bool { return info.Nodes[i].Node < info.Nodes[j].Node })
		if info.Variants == nil {
			info.Variants = []string{}
		}
		if info.APIVersions == nil {
			info.APIVersions = []int{}
		}
		if info.Parameters == nil {
			info.Parameters = []NodeOSParam{}
		}
		out.OSes = append(out.OSes, *info)
	}
	sort.Slice(out.OSes, func(i, j int) bool { return out.OSes[i].Name < out.OSes[j].Name })
	return out
}

// osDiagnosis reads the view (asking nobody) for the nodes of the cluster.
func (s *Server) osDiagnosis(w http.ResponseWriter, r *http.Request) (OSDiagnosis, *APIError) {
	src, ok := s.b.(OSSource)
	if !ok {
		return OSDiagnosis{}, &APIError{Status: http.StatusNotImplemented, ErrorCode: CodeUnavailable, Message: "this gntd keeps no view of the nodes' OS definitions"}
	}
	var nodes []*fsm.Node
	var aerr *APIError
	s.b.FSM().Read(func(st *fsm.State, idx uint64) {
		setIndex(w, idx)
		if !st.Initialized() {
			aerr = notInitialised()
			return
		}
		for _, n := range osNodes(st, "") {
			c := *n
			nodes = append(nodes, &c)
		}
	})
	if aerr != nil {
		return OSDiagnosis{}, aerr
	}
	return diagnoseOS(nodes, src.OSView(r.Context(), nil)), nil
}

// handleOS answers GET /2/os: the names (os+variant) of the OSes valid on
// every node that reported, sorted; with ?bulk=1 one object per OS, as
// Ganeti's: name, valid, variants, parameters, api_versions, blacklisted,
// hidden, trusted.
func (s *Server) handleOS(w http.ResponseWriter, r *http.Request) {
	bulk, aerr := queryFlag(r.URL.Query(), "bulk")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	d, aerr := s.osDiagnosis(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if !bulk {
		names := []string{}
		for _, o := range d.OSes {
			names = append(names, o.Names()...)
		}
		writeJSON(w, names)
		return
	}
	out := []map[string]any{}
	for _, o := range d.OSes {
		if !o.Valid {
			continue
		}
		out = append(out, map[string]any{
			"name": o.Name, "valid": true, "variants": o.Variants, "parameters": o.Parameters,
			"api_versions": o.APIVersions, "blacklisted": false, "hidden": false, "trusted": true,
		})
	}
	writeJSON(w, out)
}

// handleOSDiagnose answers GET /2/gnt/os: every OS found on any node, with
// its status per node, and each node's report (gnt os diagnose).
func (s *Server) handleOSDiagnose(w http.ResponseWriter, r *http.Request) {
	d, aerr := s.osDiagnosis(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, d)
}

// vetOS refuses (400, naming it) an instance creation whose OS is missing
// (mandatory for an instance with disks that is not forthcoming and is
// installed) or not
// valid, with its variant, on the instance's nodes: the nodes named, or
// with the allocator every node of the group (all groups when none is
// named) that reported. A reinstall with a new OS is checked on the
// instance's nodes. OS parameters (of a creation, reinstall, instance or
// cluster modify) are checked against the OS's parameters.list
// (checkOSParams): an instance's on its nodes, the cluster's per OS on
// every node that has it. A gntd without an OS view checks nothing (a
// client's CheckWrite).
func (s *Server) vetOS(ctx context.Context, op fsm.Opcode) *APIError {
	src, ok := s.b.(OSSource)
	if !ok {
		return nil
	}
	if o, ok := op.(*fsm.OpClusterSetParams); ok {
		return s.vetClusterOSParams(ctx, src, o)
	}
	var (
		osName, groupRef string
		refs             []string
		explicit         bool
		params           []string // OS parameter names to check
		paramsOnly       bool     // only params: the OS itself was checked before
	)
	switch o := op.(type) {
	case *fsm.OpInstanceCreate:
		if o.Commit {
			return nil // the reservation's OS, checked when it was made
		}
		params = setParamNames(o.OSParams)
		if o.OSType == "" {
			if o.Forthcoming || o.NoInstall || o.Template() == fsm.DTDiskless {
				return nil
			}
			return badRequest("os_type", "os_type is mandatory for a %s instance that is installed (gnt os list shows the valid ones; no_install skips the installation)", o.Template())
		}
		osName, groupRef = o.OSType, o.GroupName
		for _, n := range []string{o.PNode, o.SNode} {
			if n != "" {
				refs, explicit = append(refs, n), true
			}
		}
	case *fsm.OpInstanceReinstall:
		params = setParamNames(o.OSParams)
		if o.OSType == "" && len(params) == 0 {
			return nil
		}
		osName, explicit, paramsOnly = o.OSType, true, o.OSType == ""
		if refs = instanceOSNodes(s.b.FSM(), o.InstanceName, &osName); refs == nil {
			return nil // the job reports the unknown instance
		}
	case *fsm.OpInstanceSetParams:
		// New OS parameters are checked against the OS the instance
		// has (or is given): the OS name itself is not (os_name only
		// renames it in the record).
		if params = setParamNames(o.OSParams); len(params) == 0 {
			return nil
		}
		osName, explicit, paramsOnly = o.OSName, true, true
		if refs = instanceOSNodes(s.b.FSM(), o.InstanceName, &osName); refs == nil || osName == "" {
			return nil
		}
	default:
		return nil
	}
	var nodes []*fsm.Node
	var aerr *APIError
	s.b.FSM().Read(func(st *fsm.State, _ uint64) {
		if explicit {
			for _, ref := range refs {
				if n := st.LookupNode(ref); n != nil {
					c := *n
					nodes = append(nodes, &c)
				}
			}
			return
		}
		group := ""
		if groupRef != "" {
			g := st.LookupGroup(groupRef)
			if g == nil {
				return // the job reports the unknown group
			}
			group = g.UUID
		}
		for _, n := range osNodes(st, group) {
			if n.VMCapable && !n.Drained {
				c := *n
				nodes = append(nodes, &c)
			}
		}
	})
	if aerr != nil || len(nodes) == 0 {
		return aerr // unknown nodes: the job says so
	}
	need := make([]string, len(nodes))
	for i, n := range nodes {
		need[i] = n.UUID
	}
	view := src.OSView(ctx, need)
	if paramsOnly {
		return checkOSParams(osName, params, nodes, view)
	}
	if aerr := checkOSOn(osName, nodes, view, explicit); aerr != nil {
		return aerr
	}
	return checkOSParams(osName, params, nodes, view)
}

// vetClusterOSParams checks the cluster's new OS parameters, per OS, on
// every vm-capable node that reported the OS.
func (s *Server) vetClusterOSParams(ctx context.Context, src OSSource, o *fsm.OpClusterSetParams) *APIError {
	if len(o.OSParams) == 0 {
		return nil
	}
	var nodes []*fsm.Node
	s.b.FSM().Read(func(st *fsm.State, _ uint64) {
		for _, n := range osNodes(st, "") {
			if n.VMCapable {
				c := *n
				nodes = append(nodes, &c)
			}
		}
	})
	need := make([]string, len(nodes))
	for i, n := range nodes {
		need[i] = n.UUID
	}
	view := src.OSView(ctx, need)
	for _, name := range slices.Sorted(maps.Keys(o.OSParams)) {
		if aerr := checkOSParams(name, setParamNames(o.OSParams[name]), nodes, view); aerr != nil {
			aerr.Field = "osparams." + name + strings.TrimPrefix(aerr.Field, "osparams")
			return aerr
		}
	}
	return nil
}

// instanceOSNodes returns the nodes of the instance ref (nil when there
// is none), and sets *osName to its OS when it is empty.
func instanceOSNodes(f *fsm.FSM, ref string, osName *string) []string {
	var refs []string
	f.Read(func(st *fsm.State, _ uint64) {
		in := st.LookupInstance(ref)
		if in == nil {
			return
		}
		if *osName == "" {
			*osName = in.OS
		}
		refs = append([]string{in.PrimaryNode}, in.SecondaryNodes...)
	})
	return refs
}

// setParamNames returns the names of the OS parameters m sets, in order;
// one set to "default" (back to the cluster's) is not among them, so an
// instance can drop a parameter its OS no longer declares.
func setParamNames(m map[string]any) []string {
	var out []string
	for k, v := range m {
		if v != fsm.ParamDefault {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// checkOSParams refuses OS parameters (names) that the OS name
// ("os+variant") does not declare in its parameters.list on a node of
// nodes that reported it, as Ganeti's OS validation does; an OS of an
// API version below 20 declares none, so it takes none (gnt gives
// OSP_* to API 20 only). Nodes without a report, or without the OS, are
// left to checkOSOn.
func checkOSParams(name string, params []string, nodes []*fsm.Node, view OSView) *APIError {
	if len(params) == 0 {
		return nil
	}
	osName, _, _ := strings.Cut(name, "+")
	for _, n := range nodes {
		v := view.Nodes[n.UUID]
		if v.Report == nil {
			continue
		}
		i := slices.IndexFunc(v.Report.OSes, func(o NodeOS) bool { return o.Name == osName && o.Valid })
		if i < 0 {
			continue
		}
		o := v.Report.OSes[i]
		if len(o.APIVersions) == 0 || slices.Max(o.APIVersions) < 20 {
			return badRequest("osparams", "OS %s takes no OS parameters (got %s): its API versions on node %s are %s, and only API 20 declares parameters (parameters.list)",
				osName, strings.Join(params, ", "), n.Name, joinInts(o.APIVersions))
		}
		known := make([]string, len(o.Parameters))
		for j, p := range o.Parameters {
			known[j] = p.Name
		}
		for _, p := range params {
			if !slices.Contains(known, p) {
				declared := "none"
				if len(known) > 0 {
					declared = strings.Join(known, ", ")
				}
				return badRequest("osparams."+p, "unknown OS parameter %q: OS %s on node %s declares %s (its parameters.list; gnt os info %s)", p, osName, n.Name, declared, osName)
			}
		}
	}
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// checkOSOn checks name ("os" or "os+variant") on nodes against the view.
// A named node without a report refuses; with the allocator, nodes
// without one are passed over, but one node at least must have reported.
func checkOSOn(name string, nodes []*fsm.Node, view OSView, explicit bool) *APIError {
	osName, variant, hasVariant := strings.Cut(name, "+")
	reported := 0
	for _, n := range nodes {
		v := view.Nodes[n.UUID]
		if v.Report == nil {
			if explicit {
				why := v.Err
				if why == "" {
					why = "not asked yet"
				}
				return badRequest("os_type", "cannot check OS %s on node %s: it has not reported its OS definitions (%s)", name, n.Name, why)
			}
			continue
		}
		reported++
		i := slices.IndexFunc(v.Report.OSes, func(o NodeOS) bool { return o.Name == osName })
		if i < 0 {
			return badRequest("os_type", "unknown OS %q: node %s has no OS %s in its search path %s (gnt os list shows the valid ones)",
				name, n.Name, osName, strings.Join(v.Report.SearchPath, ":"))
		}
		o := v.Report.OSes[i]
		switch {
		case !o.Valid:
			return badRequest("os_type", "OS %s is not valid on node %s: %s", osName, n.Name, o.Error)
		case len(o.Variants) == 0 && hasVariant:
			return badRequest("os_type", "OS %s has no variants, %q given (name it %s)", osName, variant, osName)
		case len(o.Variants) > 0 && !hasVariant:
			return badRequest("os_type", "OS %s needs a variant: one of %s", osName, joinNames(osName, o.Variants))
		case len(o.Variants) > 0 && !slices.Contains(o.Variants, variant):
			return badRequest("os_type", "unknown variant %q of OS %s on node %s: its variants are %s", variant, osName, n.Name, joinNames(osName, o.Variants))
		}
	}
	if reported == 0 {
		return badRequest("os_type", "cannot check OS %s: none of the %d candidate node(s) has reported its OS definitions yet", name, len(nodes))
	}
	return nil
}

func joinNames(osName string, variants []string) string {
	out := make([]string, len(variants))
	for i, v := range variants {
		out[i] = osName + "+" + v
	}
	return strings.Join(out, ", ")
}

// OSList is GET /2/os: the names of the OSes valid on every node.
func (c *Client) OSList(ctx context.Context) ([]string, Meta, error) {
	var out []string
	meta, err := c.Do(ctx, http.MethodGet, "/2/os", nil, nil, &out)
	return out, meta, err
}

// OSDiagnose is GET /2/gnt/os: every OS per node.
func (c *Client) OSDiagnose(ctx context.Context) (OSDiagnosis, Meta, error) {
	var out OSDiagnosis
	meta, err := c.Do(ctx, http.MethodGet, "/2/gnt/os", nil, nil, &out)
	return out, meta, err
}
