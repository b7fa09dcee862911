package fsm

// Ganeti's parameter model (seed 003 "Disk/Net parameters", "Global
// hypervisor parameters"): the cluster holds hypervisor parameters per
// hypervisor, backend, NIC, OS and disk parameters (disk parameters per
// disk template, groups override them); an instance holds only its own
// overrides. The effective value of a parameter is the instance's, else
// the cluster's, else the built-in default.

// HVCGlobals are the hypervisor parameters only the cluster sets (Ganeti's
// HVC_GLOBALS): an instance may not override them, and records of older
// builds lose them on upgrade.
var HVCGlobals = []string{"migration_bandwidth", "migration_mode", "migration_port"}

// IsHVGlobal reports whether key is a cluster-only hypervisor parameter.
func IsHVGlobal(key string) bool {
	for _, g := range HVCGlobals {
		if g == key {
			return true
		}
	}
	return false
}

// InstanceHypervisor is the hypervisor an instance runs under: its own,
// else the cluster's default, else the cluster's first enabled hypervisor
// (Ganeti's default hypervisor is its first enabled one); empty means the
// driver of the node it runs on.
func InstanceHypervisor(c *Cluster, in *Instance) string {
	if in.Hypervisor != "" {
		return in.Hypervisor
	}
	if c == nil {
		return ""
	}
	if c.DefaultHypervisor != "" {
		return c.DefaultHypervisor
	}
	if len(c.EnabledHypervisors) > 0 {
		return c.EnabledHypervisors[0]
	}
	return ""
}

// HypervisorFits says whether a node whose gntd runs the driver nodeHV
// may take an instance of hypervisor hv (each node runs one driver: gntd
// --hypervisor). An instance without a hypervisor and a node whose driver
// is not known yet fit. It is the one check of every placement: new
// instances, evacuation, failover, migration and re-creation.
func HypervisorFits(nodeHV, hv string) bool {
	return hv == "" || nodeHV == "" || nodeHV == hv
}

// PlacementHypervisor is the hypervisor a node must run to take an
// existing instance: its own or the cluster's default
// (InstanceHypervisor), else the driver of the node it runs on now, so
// that a move never changes the driver it runs under; "" when none is
// known.
func PlacementHypervisor(st *State, in *Instance) string {
	if hv := InstanceHypervisor(st.Cluster, in); hv != "" {
		return hv
	}
	if n := st.Nodes[in.PrimaryNode]; n != nil {
		return n.Hypervisor
	}
	return ""
}

// CheckNodeHypervisor refuses to place an instance of hypervisor hv on
// node n when n's gntd runs another driver (HypervisorFits).
func CheckNodeHypervisor(field string, n *Node, inst, hv string) *Error {
	if n == nil || HypervisorFits(n.Hypervisor, hv) {
		return nil
	}
	if inst == "" {
		inst = "the instance"
	} else {
		inst = "instance " + inst
	}
	return errf(CodeInval, field, "%s runs under hypervisor %s, but node %s runs the %s driver (gntd --hypervisor %s); choose a node running %s, or give the instance hypervisor %s",
		inst, hv, n.Name, n.Hypervisor, n.Hypervisor, hv, n.Hypervisor)
}

// FillHVParams gives an instance's effective hypervisor parameters: the
// built-in defaults of its hypervisor, overlaid by the cluster's
// parameters of that hypervisor, overlaid by the instance's own (which
// never hold a global one). It is pure: a new map, nothing shared with c
// or in. The node agents receive instances with these (see jobs).
func FillHVParams(c *Cluster, in *Instance) map[string]any {
	hv := InstanceHypervisor(c, in)
	out := map[string]any{}
	for k, v := range HVDefaults(hv) {
		out[k] = v
	}
	if c != nil {
		for k, v := range c.HVParams[hv] {
			out[k] = v
		}
	}
	for k, v := range in.HVParams {
		if !IsHVGlobal(k) {
			out[k] = v
		}
	}
	return out
}

// HVDefaults are the built-in defaults of a hypervisor's parameters (a
// new map; empty for a hypervisor gnt has no table for).
func HVDefaults(hv string) map[string]any {
	out := map[string]any{}
	for _, d := range hvParamDefs[hv] {
		if d.Default != nil {
			out[d.Key] = d.Default
		}
	}
	return out
}

// normalizeParams gives a cluster record of an older build (or a new one)
// empty parameter maps where it has none, so every replica holds the same
// record whether it applied the log or restored a snapshot.
func (c *Cluster) normalizeParams() {
	if c.EnabledHypervisors == nil {
		c.EnabledHypervisors = []string{}
	}
	if c.HVParams == nil {
		c.HVParams = map[string]map[string]any{}
	}
	if c.BEParams == nil {
		c.BEParams = map[string]any{}
	}
	if c.NICParams == nil {
		c.NICParams = map[string]any{}
	}
	if c.DiskParams == nil {
		c.DiskParams = map[string]map[string]any{}
	}
	if c.OSParams == nil {
		c.OSParams = map[string]map[string]any{}
	}
}

// normalizeParams gives a group record empty disk parameters where it has
// none.
func (g *Group) normalizeParams() {
	if g.DiskParams == nil {
		g.DiskParams = map[string]map[string]any{}
	}
}

// normalizeParams gives an instance record empty parameter maps where it
// has none and drops the global hypervisor parameters an older build may
// have stored with it.
func (i *Instance) normalizeParams() {
	if i.HVParams == nil {
		i.HVParams = map[string]any{}
	}
	if i.BEParams == nil {
		i.BEParams = map[string]any{}
	}
	if i.OSParams == nil {
		i.OSParams = map[string]any{}
	}
	for _, g := range HVCGlobals {
		delete(i.HVParams, g)
	}
}
