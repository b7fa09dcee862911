package fsm

import (
	"strconv"
	"strings"
)

// applyParams applies the parameter model's fields of
// OP_CLUSTER_SET_PARAMS to the cluster's record (Validate checked each
// map; here the values are stored in their normalized form and checked
// against the rest of the state).
func (o *OpClusterSetParams) applyParams(t *txn, c *Cluster, ch *changes) *Error {
	if o.EnabledHypervisors != nil {
		c.EnabledHypervisors = append([]string{}, o.EnabledHypervisors...)
		*ch = append(*ch, [2]any{"enabled_hypervisors", strings.Join(c.EnabledHypervisors, ",")})
	}
	if o.DefaultHypervisor != nil {
		c.DefaultHypervisor = *o.DefaultHypervisor
		*ch = append(*ch, [2]any{"default_hypervisor", c.DefaultHypervisor})
	}
	if len(c.EnabledHypervisors) > 0 {
		if c.DefaultHypervisor != "" && !contains(c.EnabledHypervisors, c.DefaultHypervisor) {
			return errf(CodeInval, "default_hypervisor", "default hypervisor %s is not enabled (enabled: %s)", c.DefaultHypervisor, strings.Join(c.EnabledHypervisors, ", "))
		}
		for _, u := range sortedKeys(t.st.Instances) {
			in := t.st.Instances[u]
			if x, ok := t.insts[u]; ok {
				in = x
			}
			if in != nil && in.Hypervisor != "" && !contains(c.EnabledHypervisors, in.Hypervisor) {
				return errf(CodeInval, "enabled_hypervisors", "instance %s runs under %s, which enabled_hypervisors would disable", in.Name, in.Hypervisor)
			}
		}
	}
	for _, hv := range sortedKeys(o.HVParams) {
		m, e := ValidateHVParams("hvparams."+hv, hv, o.HVParams[hv], false, true)
		if e != nil {
			return e
		}
		c.HVParams[hv] = MergeParams(c.HVParams[hv], m)
		if e := checkHVRules("hvparams."+hv, FillParams(HVDefaults(hv), c.HVParams[hv])); e != nil {
			return e
		}
		for _, k := range sortedKeys(m) {
			*ch = append(*ch, [2]any{"hvparams/" + hv + "/" + k, m[k]})
		}
	}
	if o.BEParams != nil {
		m, e := NormalizeParams("beparams", "backend", BEParamDefs, o.BEParams, true)
		if e != nil {
			return e
		}
		be := MergeParams(c.BEParams, canonicalBE(m))
		if e := checkMinMax("beparams", FillParams(paramDefaults(BEParamDefs), be)); e != nil {
			return e
		}
		c.BEParams = be
		for _, k := range sortedKeys(m) {
			*ch = append(*ch, [2]any{"beparams/" + k, m[k]})
		}
	}
	if o.NICParams != nil {
		m, e := NormalizeParams("nicparams", "NIC", NICParamDefs, o.NICParams, true)
		if e != nil {
			return e
		}
		c.NICParams = MergeParams(c.NICParams, m)
		for _, k := range sortedKeys(m) {
			*ch = append(*ch, [2]any{"nicparams/" + k, m[k]})
		}
	}
	for _, dt := range sortedKeys(o.DiskParams) {
		defs := diskParamDefs[dt]
		m, e := NormalizeParams("diskparams."+dt, "disk template "+dt, defs, o.DiskParams[dt], true)
		if e != nil {
			return e
		}
		c.DiskParams[dt] = MergeParams(c.DiskParams[dt], m)
		for _, k := range sortedKeys(m) {
			*ch = append(*ch, [2]any{"diskparams/" + dt + "/" + k, m[k]})
		}
	}
	for _, os := range sortedKeys(o.OSParams) {
		c.OSParams[os] = MergeParams(c.OSParams[os], o.OSParams[os])
		if len(c.OSParams[os]) == 0 {
			delete(c.OSParams, os)
		}
		for _, k := range sortedKeys(o.OSParams[os]) {
			*ch = append(*ch, [2]any{"osparams/" + os + "/" + k, o.OSParams[os][k]})
		}
	}
	for _, hv := range sortedKeys(c.HVParams) {
		if len(c.HVParams[hv]) == 0 {
			delete(c.HVParams, hv)
		}
	}
	for _, dt := range sortedKeys(c.DiskParams) {
		if len(c.DiskParams[dt]) == 0 {
			delete(c.DiskParams, dt)
		}
	}
	if o.EnabledHypervisors != nil || o.DefaultHypervisor != nil || o.HVParams != nil {
		// Instances that now need a network port (now under kvm, or
		// with the cluster's vnc_bind_address) get theirs (ports.go).
		if e := t.assignMissingPorts(true); e != nil {
			return e
		}
	}
	return nil
}

// canonicalBE stores Ganeti's older "memory" as maxmem and minmem, each
// where not given (Ganeti's UpgradeBeParams).
func canonicalBE(m map[string]any) map[string]any {
	if v, ok := m["memory"]; ok {
		out := cloneMap(m)
		delete(out, "memory")
		for _, k := range []string{"maxmem", "minmem"} {
			if _, has := out[k]; !has {
				out[k] = v
			}
		}
		return out
	}
	return m
}

// checkMinMax refuses filled backend parameters whose minmem exceeds
// maxmem.
func checkMinMax(field string, be map[string]any) *Error {
	mn, ok1 := be["minmem"].(float64)
	mx, ok2 := be["maxmem"].(float64)
	if ok1 && ok2 && mn > mx {
		return errf(CodeInval, field+".minmem", "minmem %d MiB is more than maxmem %d MiB", int64(mn), int64(mx))
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// SetParamsIDs draws the identity of a NIC a modification adds: its UUID
// and MAC (k is the modification's position).
type SetParamsIDs func(k int) (uuid, mac string)

// ApplyTo computes the record OP_INSTANCE_SET_PARAMS makes of an instance,
// for everything but added disks (the executor adds them): a new record
// and Ganeti's list of [parameter, new value] changes. It checks the
// changes against the cluster (the instance's hypervisor's parameters, a
// routed NIC's IP, minmem within maxmem, offline only when stopped); ids
// gives an added NIC its UUID and MAC. It does not change in.
func (o *OpInstanceSetParams) ApplyTo(c *Cluster, in *Instance, ids SetParamsIDs) (*Instance, [][2]any, *Error) {
	if c == nil {
		c = &Cluster{}
	}
	out := in.clone()
	var ch [][2]any
	if be := o.BEParams.Map(); len(be) > 0 {
		out.BEParams = MergeParams(out.BEParams, be)
		if v, ok := be["maxmem"].(float64); ok && int64(v) != out.MemoryMiB {
			out.MemoryMiB = int64(v)
		}
		if v, ok := be["vcpus"].(float64); ok {
			out.VCPUs = int(v)
		}
		filled := FillParams(paramDefaults(BEParamDefs), c.BEParams, out.BEParams, map[string]any{"maxmem": float64(out.MemoryMiB)})
		if e := checkMinMax("beparams", filled); e != nil {
			return nil, nil, e
		}
		for _, k := range sortedKeys(be) {
			ch = append(ch, [2]any{"be/" + k, be[k]})
		}
	}
	if o.HVParams != nil {
		hv := InstanceHypervisor(c, in)
		m := o.HVParams
		if hv != "" {
			var e *Error
			if m, e = ValidateHVParams("hvparams", hv, o.HVParams, true, true); e != nil {
				return nil, nil, e
			}
		}
		out.HVParams = MergeParams(out.HVParams, m)
		if hv != "" {
			if e := checkHVRules("hvparams", FillParams(HVDefaults(hv), c.HVParams[hv], out.HVParams)); e != nil {
				return nil, nil, e
			}
		}
		for _, k := range sortedKeys(m) {
			ch = append(ch, [2]any{"hv/" + k, m[k]})
		}
	}
	if o.OSParams != nil {
		out.OSParams = MergeParams(out.OSParams, o.OSParams)
		for _, k := range sortedKeys(o.OSParams) {
			ch = append(ch, [2]any{"os/" + k, o.OSParams[k]})
		}
	}
	if o.OSName != "" {
		out.OS = o.OSName
		ch = append(ch, [2]any{"os", o.OSName})
	}
	if o.Offline != nil {
		switch {
		case *o.Offline && in.AdminState == AdminUp:
			return nil, nil, errf(CodeState, "offline", "instance %s is running: shut it down before marking it offline", in.Name)
		case *o.Offline:
			out.AdminState = AdminOffline
		case in.AdminState == AdminOffline:
			out.AdminState = AdminDown
		}
		ch = append(ch, [2]any{"admin_state", out.AdminState})
	}
	for k, m := range o.NICs {
		f := "nics." + itoa(k)
		p := m.Params
		switch m.Op {
		case "add":
			if m.Index != -1 && m.Index != len(out.NICs) {
				return nil, nil, errf(CodeInval, f, "NIC modification %d: add at index %d, but the instance has %d NICs (use -1)", k, m.Index, len(out.NICs))
			}
			if len(out.NICs) >= MaxNICsPerInstance {
				return nil, nil, errf(CodeInval, f, "instance %s has %d NICs already, the most an instance has", in.Name, len(out.NICs))
			}
			uuid, mac := ids(k)
			if p.MAC != "" && p.MAC != "auto" && p.MAC != "generate" {
				mac = p.MAC
			}
			ip := p.IP
			if ip == "none" {
				ip = ""
			}
			out.NICs = append(out.NICs, NIC{UUID: uuid, Name: p.Name, MAC: mac, IP: ip, Mode: p.Mode, Link: p.Link, VLAN: p.VLAN, Network: p.Network})
			ch = append(ch, [2]any{"nic." + itoa(len(out.NICs)-1), "add:mac=" + mac})
		case "modify", "remove":
			idx := m.Index
			if idx == -1 {
				idx = len(out.NICs) - 1
			}
			if idx < 0 || idx >= len(out.NICs) {
				return nil, nil, errf(CodeInval, f, "NIC modification %d: instance %s has no NIC %d", k, in.Name, m.Index)
			}
			if m.Op == "remove" {
				out.NICs = append(out.NICs[:idx:idx], out.NICs[idx+1:]...)
				ch = append(ch, [2]any{"nic." + itoa(idx), "remove"})
				continue
			}
			n := &out.NICs[idx]
			set := func(name string, dst *string, v string) {
				if v != "" {
					if v == "none" && (name == "ip" || name == "vlan" || name == "name") {
						v = ""
					}
					*dst = v
					ch = append(ch, [2]any{"nic." + name + "/" + itoa(idx), v})
				}
			}
			// A NIC put on a network takes mode, link and vlan from the
			// network's connection (resolveNICNetworks); one taken off
			// keeps them.
			if p.Network != "" {
				net := p.Network
				if strings.EqualFold(net, ValueNone) {
					net = ""
				}
				n.Network = net
				ch = append(ch, [2]any{"nic.network/" + itoa(idx), p.Network})
			}
			set("mode", &n.Mode, p.Mode)
			set("link", &n.Link, p.Link)
			set("vlan", &n.VLAN, p.VLAN)
			set("ip", &n.IP, p.IP)
			set("name", &n.Name, p.Name)
			if p.MAC != "" && p.MAC != "auto" && p.MAC != "generate" {
				set("mac", &n.MAC, p.MAC)
			}
		}
	}
	hv := InstanceHypervisor(c, in)
	for k, n := range out.NICs {
		if e := checkNICFilled(c, hv, "nics."+itoa(k), n.Mode, n.VLAN, n.IP); e != nil {
			return nil, nil, errf(CodeInval, e.Field, "instance %s NIC %d: %s", in.Name, k, strings.TrimPrefix(e.Msg, "nics."+itoa(k)+": "))
		}
	}
	for k, d := range o.Disks {
		if d.Op != "modify" {
			continue
		}
		if d.Index >= len(out.Disks) {
			return nil, nil, errf(CodeInval, "disks."+itoa(k), "disk modification %d: instance %s has no disk %d", k, in.Name, d.Index)
		}
		disk := &out.Disks[d.Index]
		if d.Params.Mode != "" {
			disk.Mode = d.Params.Mode
			ch = append(ch, [2]any{"disk.mode/" + itoa(d.Index), d.Params.Mode})
		}
		if d.Params.Name != "" {
			disk.Name = d.Params.Name
			if d.Params.Name == "none" {
				disk.Name = ""
			}
			ch = append(ch, [2]any{"disk.name/" + itoa(d.Index), d.Params.Name})
		}
	}
	return out, ch, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// FilledBE gives an instance's effective backend parameters: built-in
// defaults, the cluster's, the instance's own, and its recorded memory
// and vcpus (which stay the effective values).
func FilledBE(c *Cluster, in *Instance) map[string]any {
	var cl map[string]any
	if c != nil {
		cl = c.BEParams
	}
	out := FillParams(paramDefaults(BEParamDefs), cl, in.BEParams)
	_, own := in.BEParams["minmem"]
	_, clus := cl["minmem"]
	if !own && !clus {
		// Without a minmem set, an instance's memory is fixed: it runs
		// with its memory and runtime_mem cannot balloon it lower.
		out["minmem"] = float64(in.MemoryMiB)
	}
	out["maxmem"], out["vcpus"] = float64(in.MemoryMiB), float64(in.VCPUs)
	out["memory"] = float64(in.MemoryMiB)
	return out
}

// FilledNIC gives a NIC's effective mode, link and vlan: its own, else
// the cluster's, else the built-in defaults.
func FilledNIC(c *Cluster, n *NIC) (mode, link, vlan string) {
	var cl map[string]any
	if c != nil {
		cl = c.NICParams
	}
	f := FillParams(paramDefaults(NICParamDefs), cl)
	mode, _ = f["mode"].(string)
	link, _ = f["link"].(string)
	vlan, _ = f["vlan"].(string)
	if n.Mode != "" {
		mode = n.Mode
	}
	if n.Link != "" {
		link = n.Link
	}
	if n.VLAN != "" {
		vlan = n.VLAN
	}
	return mode, link, vlan
}

// FilledDiskParams gives the effective disk parameters of every disk
// template for a group (nil: the cluster's): built-in defaults, the
// cluster's, the group's.
func FilledDiskParams(c *Cluster, g *Group) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, t := range DiskTemplates() {
		var cl, gr map[string]any
		if c != nil {
			cl = c.DiskParams[t]
		}
		if g != nil {
			gr = g.DiskParams[t]
		}
		out[t] = FillParams(paramDefaults(diskParamDefs[t]), cl, gr)
	}
	return out
}

// FilledOSParams gives an instance's effective OS parameters: the
// cluster's for its OS, overlaid by its own.
func FilledOSParams(c *Cluster, in *Instance) map[string]any {
	var cl map[string]any
	if c != nil {
		cl = c.OSParams[in.OS]
	}
	return FillParams(cl, in.OSParams)
}

// PublicHVParams drops the global parameters from filled hypervisor
// parameters (Ganeti's instance hvparams field shows only those an
// instance may set).
func PublicHVParams(m map[string]any) map[string]any {
	out := cloneMap(m)
	for _, g := range HVCGlobals {
		delete(out, g)
	}
	return out
}

// Resources gives the memory (MiB) and vcpus a new instance gets: the
// request's beparams, else the cluster's, else the built-in defaults.
func (o *OpInstanceCreate) Resources(c *Cluster) (int64, int) {
	var cl map[string]any
	if c != nil {
		cl = c.BEParams
	}
	be := FillParams(paramDefaults(BEParamDefs), cl, o.BEParams.Map())
	mem, _ := be["maxmem"].(float64)
	vcpus, _ := be["vcpus"].(float64)
	return int64(mem), int(vcpus)
}

// InstanceRecordParams gives the parameters a new instance records: its
// hypervisor (the request's, else the cluster's default), its hypervisor
// parameters in their stored form, its backend parameters as given.
func (o *OpInstanceCreate) InstanceRecordParams(c *Cluster) (hv string, hvp, be map[string]any, e *Error) {
	hv = InstanceHypervisor(c, &Instance{Hypervisor: o.Hypervisor})
	hvp = cloneMap(o.HVParams)
	if hv != "" {
		if hvp, e = ValidateHVParams("hvparams", hv, o.HVParams, true, false); e != nil {
			return "", nil, nil, e
		}
		var chv map[string]any
		if c != nil {
			chv = c.HVParams[hv]
		}
		if e = checkHVRules("hvparams", FillParams(HVDefaults(hv), chv, hvp)); e != nil {
			return "", nil, nil, e
		}
	}
	be = o.BEParams.Map()
	if o.IdentifyDefaults && c != nil {
		// Keep as the instance's own only what differs from the
		// cluster's (Ganeti's identify_defaults).
		chv := FillParams(HVDefaults(hv), c.HVParams[hv])
		for k, v := range hvp {
			if cv, ok := chv[k]; ok && cv == v {
				delete(hvp, k)
			}
		}
		cbe := FillParams(paramDefaults(BEParamDefs), c.BEParams)
		for k, v := range be {
			if cv, ok := cbe[k]; ok && cv == v {
				delete(be, k)
			}
		}
	}
	return hv, hvp, be, nil
}
