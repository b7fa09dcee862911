package rpc

import (
	"context"
	"sort"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Field builders of the bulk and object answers of /2/instances,
// /2/nodes and /2/groups. Each is a plain function from the replicated
// state (and, for the runtime fields, the recent view of the nodes'
// agents) to a map of Ganeti's field names, so that other readers (the
// query resource, the CLI's field selection) can reuse them.

// Ganeti's instance states (constants.INSTST_*), the values of an
// instance's "status" field.
const (
	InstStatusRunning     = "running"
	InstStatusAdminDown   = "ADMIN_down"
	InstStatusAdminOff    = "ADMIN_offline"
	InstStatusErrorUp     = "ERROR_up"
	InstStatusErrorDown   = "ERROR_down"
	InstStatusNodeDown    = "ERROR_nodedown"
	InstStatusNodeOffline = "ERROR_nodeoffline"
	InstStatusWrongNode   = "ERROR_wrongnode"
	InstStatusUserDown    = "USER_down"
)

// RuntimeMaxAge is how old a node's entry of the runtime view may be
// before the runtime fields it feeds answer null (unknown).
const RuntimeMaxAge = 60 * time.Second

// NodeRuntime is what one node's agent last answered of its instances.
type NodeRuntime struct {
	// At is when the answer (or the failure) was seen.
	At time.Time
	// Err is set when the node's agent did not answer the last poll.
	Err string
	// Driver is the agent's hypervisor driver; Accel and AccelNote the kvm
	// driver's accelerator and why.
	Driver    string
	Accel     string
	AccelNote string
	// Taps is the kvm driver's tap capability (rpc.NodeResult.Taps).
	Taps string
	// Instances are the instances the agent reports, by UUID.
	Instances map[string]NodeInstanceStatus
}

// Runtime is a recent view of every node's instances, by node UUID. A
// node missing from it has not been polled yet.
type Runtime struct {
	Nodes map[string]NodeRuntime
	// Seen is each instance's placement when the view was taken
	// (RuntimePlacement, by instance UUID); nil: not kept, every entry
	// is believed. An instance placed otherwise now (migrated, failed
	// over, started, stopped, or created since) has an unknown status
	// until the next view, rather than one the move makes wrong
	// (ERROR_wrongnode just after a migration).
	Seen map[string]string
	// Now is the time the view is judged at (entries older than
	// RuntimeMaxAge are unknown).
	Now time.Time
}

// RuntimeSource is implemented by a Backend that keeps a Runtime view.
// A Backend without one answers null for the runtime fields.
type RuntimeSource interface {
	Runtime() Runtime
}

// RuntimePlacement is what Runtime.Seen records of an instance: its
// primary node and admin state.
func RuntimePlacement(i *fsm.Instance) string { return i.PrimaryNode + "/" + i.AdminState }

// RuntimeWaiter is implemented by a RuntimeSource that can poll at once:
// RuntimeAfterPoll returns the view of a poll it starts (within timeout;
// else the view there is).
type RuntimeWaiter interface {
	RuntimeAfterPoll(ctx context.Context, timeout time.Duration) Runtime
}

// Running reports whether the view, fresh and taken with the instance
// where it is now, has it running on its primary node, with what the
// node reported of it; known is false when the view cannot tell (not
// polled, stale, or the instance moved, started or was created since).
func (rt *Runtime) Running(i *fsm.Instance) (is NodeInstanceStatus, running, known bool) {
	nr, ok := rt.current(i, i.PrimaryNode)
	if !ok || nr.Err != "" {
		return NodeInstanceStatus{}, false, false
	}
	is, ok = nr.Instances[i.UUID]
	return is, ok && is.State == NodeStateRunning, true
}

// current returns node's entry when it is fresh and was taken with the
// instance placed as it is now (not moved, started or created since).
func (rt *Runtime) current(i *fsm.Instance, node string) (NodeRuntime, bool) {
	nr, ok := rt.fresh(node)
	if !ok || rt.Seen != nil && rt.Seen[i.UUID] != RuntimePlacement(i) {
		return NodeRuntime{}, false
	}
	return nr, true
}

// fresh returns the node's entry if it is recent enough to be believed.
func (rt *Runtime) fresh(node string) (NodeRuntime, bool) {
	if rt == nil {
		return NodeRuntime{}, false
	}
	nr, ok := rt.Nodes[node]
	if !ok || rt.Now.Sub(nr.At) > RuntimeMaxAge {
		return NodeRuntime{}, false
	}
	return nr, true
}

// runtimeOf returns the backend's runtime view, or nil.
func (s *Server) runtimeOf() *Runtime {
	src, ok := s.b.(RuntimeSource)
	if !ok {
		return nil
	}
	rt := src.Runtime()
	return &rt
}

// InstanceFieldNames are Ganeti's instance fields (rlib2's I_FIELDS as
// doc/rapi.rst and gnt-instance(8) describe them), in that order.
var InstanceFieldNames = []string{
	"name", "admin_state", "os", "pnode", "snodes", "disk_template",
	"nic.ips", "nic.macs", "nic.modes", "nic.uuids", "nic.names", "nic.links",
	"nic.networks", "nic.networks.names", "nic.bridges", "network_port",
	"disk.sizes", "disk.spindles", "disk_usage", "disk.uuids", "disk.names",
	"beparams", "hvparams", "oper_state", "oper_ram", "oper_vcpus", "status",
	"custom_hvparams", "custom_beparams", "custom_nicparams", "custom_osparams",
	"ctime", "mtime", "uuid", "serial_no", "tags",
}

// GntInstanceFieldNames are gnt's additions to an instance object.
var GntInstanceFieldNames = []string{"forthcoming", "hypervisor", "osparams", "nic.vlans"}

// instanceHypervisor is an instance's hypervisor: its own or the
// cluster's default, else the driver its primary node's agent reported
// (null while unknown).
func instanceHypervisor(st *fsm.State, i *fsm.Instance, rt *Runtime) any {
	if hv := fsm.InstanceHypervisor(st.Cluster, i); hv != "" {
		return hv
	}
	if rt != nil {
		if d := rt.Nodes[i.PrimaryNode].Driver; d != "" {
			return d
		}
	}
	return nil
}

// InstanceStatus computes Ganeti's "status" and "oper_state" of an
// instance from its primary node's flags and liveness and the runtime
// view; nil for what cannot be known.
func InstanceStatus(st *fsm.State, i *fsm.Instance, rt *Runtime) (status, operState any) {
	pn := st.Nodes[i.PrimaryNode]
	if pn == nil {
		return nil, nil
	}
	if pn.Offline {
		return InstStatusNodeOffline, nil
	}
	if pn.Liveness == fsm.LivenessDead {
		return InstStatusNodeDown, nil
	}
	nr, ok := rt.current(i, pn.UUID)
	if !ok {
		return nil, nil
	}
	if nr.Err != "" {
		return InstStatusNodeDown, nil
	}
	live, ok := nr.Instances[i.UUID]
	if ok && live.State == NodeStateRunning {
		if i.AdminState == fsm.AdminUp {
			return InstStatusRunning, true
		}
		return InstStatusErrorUp, true
	}
	// Not running on its primary: running elsewhere is Ganeti's
	// ERROR_wrongnode.
	for node, other := range rt.Nodes {
		if node == pn.UUID || other.Err != "" || rt.Now.Sub(other.At) > RuntimeMaxAge {
			continue
		}
		if o, ok := other.Instances[i.UUID]; ok && o.State == NodeStateRunning {
			return InstStatusWrongNode, false
		}
	}
	switch i.AdminState {
	case fsm.AdminUp:
		return InstStatusErrorDown, false
	case fsm.AdminDown:
		return InstStatusAdminDown, false
	default:
		return InstStatusAdminOff, false
	}
}

// InstanceFields builds an instance object: Ganeti's fields and gnt's.
func InstanceFields(st *fsm.State, i *fsm.Instance, rt *Runtime) map[string]any {
	snodes := []string{}
	for _, sn := range i.SecondaryNodes {
		snodes = append(snodes, st.NodeName(sn))
	}
	var (
		sizes, spindles, duuids, dnames                   = []any{}, []any{}, []any{}, []any{}
		ips, macs, modes, nuuids, nnames, links, nets, br = []any{}, []any{}, []any{}, []any{}, []any{}, []any{}, []any{}, []any{}
		nicparams, vlans                                  = []any{}, []any{}
		netNames                                          = []any{}
		usage                                             int64
	)
	for _, d := range i.Disks {
		sizes = append(sizes, d.SizeMiB)
		spindles = append(spindles, nil) // gnt has no spindle accounting
		duuids = append(duuids, d.UUID)
		dnames = append(dnames, orNull(d.Name))
		usage += d.SizeMiB
		if i.DiskTemplate == "drbd" {
			usage += 128 // DRBD metadata volume, as Ganeti counts it
		}
	}
	if i.DiskTemplate == "diskless" {
		usage = 0
	}
	for k := range i.NICs {
		n := &i.NICs[k]
		mode, link, vlan := fsm.FilledNIC(st.Cluster, n)
		ips = append(ips, orNull(n.IP))
		macs = append(macs, n.MAC)
		modes = append(modes, mode)
		nuuids = append(nuuids, n.UUID)
		nnames = append(nnames, orNull(n.Name))
		links = append(links, link)
		vlans = append(vlans, vlan)
		nets = append(nets, orNull(n.Network))
		if nw := st.Networks[n.Network]; nw != nil {
			netNames = append(netNames, nw.Name)
		} else {
			netNames = append(netNames, orNull(n.Network))
		}
		if mode == fsm.NICModeBridged {
			br = append(br, link)
		} else {
			br = append(br, nil)
		}
		p := map[string]any{}
		if n.Mode != "" {
			p["mode"] = n.Mode
		}
		if n.Link != "" {
			p["link"] = n.Link
		}
		if n.VLAN != "" {
			p["vlan"] = n.VLAN
		}
		nicparams = append(nicparams, p)
	}
	status, oper := InstanceStatus(st, i, rt)
	var ram, vcpus any
	if oper == true {
		live := rt.Nodes[i.PrimaryNode].Instances[i.UUID]
		if live.MemoryMiB > 0 {
			ram = live.MemoryMiB
		}
		if live.VCPUs > 0 {
			vcpus = live.VCPUs
		}
	}
	return map[string]any{
		"name": i.Name, "admin_state": i.AdminState, "os": i.OS, "pnode": st.NodeName(i.PrimaryNode),
		"snodes": snodes, "disk_template": i.DiskTemplate,
		"nic.ips": ips, "nic.macs": macs, "nic.modes": modes, "nic.uuids": nuuids, "nic.names": nnames,
		"nic.links": links, "nic.networks": nets, "nic.networks.names": netNames,
		"nic.bridges": br,
		// The instance's port of the cluster's pool (the kvm driver's
		// VNC console), null when it holds none.
		"network_port": i.NetworkPortField(),
		"disk.sizes":   sizes, "disk.spindles": spindles, "disk_usage": usage, "disk.uuids": duuids, "disk.names": dnames,
		"beparams": fsm.FilledBE(st.Cluster, i), "custom_beparams": copyMap(i.BEParams),
		"hvparams": fsm.PublicHVParams(fsm.FillHVParams(st.Cluster, i)), "custom_hvparams": copyMap(i.HVParams),
		"osparams": fsm.FilledOSParams(st.Cluster, i), "custom_osparams": copyMap(i.OSParams),
		"custom_nicparams": nicparams, "nic.vlans": vlans, "hypervisor": instanceHypervisor(st, i, rt),
		"oper_state": oper, "status": status,
		// What the running instance has, as its primary's agent reports
		// it; null when it does not run there or is not reported.
		"oper_ram": ram, "oper_vcpus": vcpus,
		"ctime": i.CTime, "mtime": i.MTime, "uuid": i.UUID, "serial_no": i.SerialNo, "tags": sortedCopy(i.Tags),
		"forthcoming": i.Forthcoming,
	}
}

// NodeFieldNames are Ganeti's node fields (rlib2's N_FIELDS as
// doc/rapi.rst and gnt-node(8) describe them), in that order.
var NodeFieldNames = []string{
	"name", "offline", "master_candidate", "drained", "dtotal", "dfree", "sptotal", "spfree",
	"mtotal", "mnode", "mfree", "pinst_cnt", "sinst_cnt", "ctotal", "cnos", "cnodes", "csockets",
	"pip", "sip", "role", "pinst_list", "sinst_list", "master_capable", "vm_capable", "ndparams",
	"group.uuid", "ctime", "mtime", "uuid", "serial_no", "tags",
}

// GntNodeFieldNames are gnt's additions to a node object.
var GntNodeFieldNames = []string{"group", "bootid", "powered", "addrs", "version", "gnt_liveness", "gnt_liveness_since",
	"gnt_hypervisor", "gnt_accel", "gnt_storage", "gnt_storage_reported", "gnt_taps"}

// NodeFields builds a node object; insts is InstancesByNode of st, rt
// the runtime view (nil: none).
func NodeFields(st *fsm.State, n *fsm.Node, insts map[string]*NodeInstances, rt *Runtime) map[string]any {
	ni := insts[n.UUID]
	if ni == nil {
		ni = &NodeInstances{}
	}
	v := map[string]any{
		"name": n.Name, "uuid": n.UUID, "group.uuid": n.Group, "pip": n.PrimaryIP, "sip": n.SecondaryIP,
		"master_candidate": n.MasterCandidate, "master_capable": n.MasterCapable, "vm_capable": n.VMCapable,
		"offline": n.Offline, "drained": n.Drained, "role": fsm.RoleLetter[st.Role(n)],
		"ndparams": copyMap(n.NDParams), "tags": sortedCopy(n.Tags),
		"mtotal": positive(n.Resources.MemoryMiB), "dtotal": positive(n.Resources.DiskMiB),
		"ctotal":    positive(int64(n.Resources.CPUs)),
		"pinst_cnt": len(ni.primary), "sinst_cnt": len(ni.secondary),
		"pinst_list": nonNil(ni.primary), "sinst_list": nonNil(ni.secondary),
		"serial_no": n.SerialNo, "ctime": n.CTime, "mtime": n.MTime, "addrs": n.Addrs, "version": n.Version,
		// A node registers only its memory, disk and CPU totals: the
		// memory its OS uses, its CPUs' NUMA and socket layout and
		// spindles are not known to gnt.
		"mnode": nil, "cnos": nil, "cnodes": nil, "csockets": nil, "sptotal": nil, "spfree": nil,
		"group": "", "mfree": nil, "dfree": nil, "powered": nil, "bootid": nil,
		"gnt_liveness": NodeLivenessUnknown, "gnt_liveness_since": nil,
		"gnt_hypervisor": nil, "gnt_accel": nil, "gnt_storage": nil, "gnt_storage_reported": nil, "gnt_taps": nil,
	}
	if nr, ok := rt.fresh(n.UUID); ok && nr.Driver != "" {
		v["gnt_hypervisor"] = nr.Driver
		if nr.Accel != "" {
			v["gnt_accel"] = nr.Accel + ": " + nr.AccelNote
		}
		if nr.Taps != "" {
			v["gnt_taps"] = nr.Taps
		}
	}
	if g := st.Groups[n.Group]; g != nil {
		v["group"] = g.Name
	}
	// Free is what the configuration leaves (Ganeti asks the hypervisor;
	// gnt counts its instances' recorded sizes, reservations included).
	if t := n.Resources.MemoryMiB; t > 0 {
		v["mfree"] = t - ni.mem
	}
	if t := n.Resources.DiskMiB; t > 0 {
		v["dfree"] = t - ni.disk
	}
	// With a storage report, dtotal and dfree are those of the node's
	// default storage (its volume group, else its file directory), as
	// Ganeti reads them from the volume group; dfree less the disk the
	// configuration added since the report, as placement counts it.
	if ns := n.Storage; ns != nil {
		if sp, ok := ns.Space("", ni.disk); ok && !sp.Missing {
			v["dtotal"], v["dfree"] = sp.Total, sp.Free
		}
		units := make([]NodeStorageUnit, 0, len(ns.Units))
		for _, u := range ns.Units {
			units = append(units, NodeStorageUnit{Type: u.Type, Name: u.Name, VG: u.VG,
				Size: u.SizeMiB, Used: u.UsedMiB, Free: u.FreeMiB, Allocatable: u.Allocatable})
		}
		v["gnt_storage"], v["gnt_storage_reported"] = units, float64(ns.Reported)/1e9
		if ns.BootID != "" {
			v["bootid"] = ns.BootID
		}
	}
	if st.OOBProgram(n) != "" {
		v["powered"] = n.Powered
	}
	if n.Liveness != "" {
		v["gnt_liveness"], v["gnt_liveness_since"] = n.Liveness, float64(n.LivenessSince)/1e9
	}
	return v
}

// GroupFieldNames are Ganeti's node group fields (rlib2's G_FIELDS as
// doc/rapi.rst and gnt-group(8) describe them), in that order.
var GroupFieldNames = []string{
	"alloc_policy", "name", "node_cnt", "node_list", "ipolicy", "custom_ipolicy",
	"diskparams", "custom_diskparams", "ndparams", "custom_ndparams",
	"ctime", "mtime", "uuid", "serial_no", "tags",
}

// GroupFields builds a node group object. gnt enforces no instance
// policy, so ipolicy and custom_ipolicy are empty; diskparams are the
// filled disk parameters of every template, custom_diskparams the
// group's own.
func GroupFields(st *fsm.State, g *fsm.Group) map[string]any {
	members := []string{}
	for _, n := range st.SortedNodes() {
		if n.Group == g.UUID {
			members = append(members, n.Name)
		}
	}
	nd := fsm.DefaultNDParams()
	mergeInto(nd, st.Cluster.NDParams)
	mergeInto(nd, g.NDParams)
	return map[string]any{
		"name": g.Name, "uuid": g.UUID, "alloc_policy": g.AllocPolicy, "node_cnt": len(members), "node_list": members,
		"ndparams": nd, "custom_ndparams": copyMap(g.NDParams),
		"ipolicy": map[string]any{}, "custom_ipolicy": map[string]any{},
		"diskparams": fsm.FilledDiskParams(st.Cluster, g), "custom_diskparams": copyMap2(g.DiskParams),
		"tags": sortedCopy(g.Tags), "serial_no": g.SerialNo, "ctime": g.CTime, "mtime": g.MTime,
	}
}

// clusterHypervisors are the hypervisor drivers the runtime view saw on
// the nodes, sorted, and the default: the master's, else the first.
func clusterHypervisors(st *fsm.State, rt *Runtime) (enabled []string, def *string) {
	seen := map[string]bool{}
	if rt != nil {
		for _, nr := range rt.Nodes {
			if nr.Driver != "" {
				seen[nr.Driver] = true
			}
		}
	}
	enabled = []string{}
	if st.Cluster != nil && len(st.Cluster.EnabledHypervisors) > 0 {
		// The cluster names its enabled hypervisors (Ganeti's
		// enabled_hypervisors; the first is the default unless one is
		// set).
		enabled = append(enabled, st.Cluster.EnabledHypervisors...)
		d := st.Cluster.DefaultHypervisor
		if d == "" {
			d = enabled[0]
		}
		return enabled, &d
	}
	for d := range seen {
		enabled = append(enabled, d)
	}
	sort.Strings(enabled)
	if st.Cluster != nil && st.Cluster.DefaultHypervisor != "" {
		d := st.Cluster.DefaultHypervisor
		if !seen[d] {
			enabled = append(enabled, d)
			sort.Strings(enabled)
		}
		return enabled, &d
	}
	if m := st.Master(); m != nil && rt != nil {
		if d := rt.Nodes[m.UUID].Driver; d != "" {
			return enabled, &d
		}
	}
	if len(enabled) > 0 {
		return enabled, &enabled[0]
	}
	return enabled, nil
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// copyMap2 copies a map of parameter maps (never nil).
func copyMap2(m map[string]map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = copyMap(v)
	}
	return out
}
