package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strings"
)

// Instance opcodes: Ganeti's names and fields. They run on the leader's
// executor (jobs), whose steps act on the node agents and record the
// instance's configuration with each step (StepChange).

// OpDisk is one disk of OP_INSTANCE_CREATE: size in MiB.
type OpDisk struct {
	Size int64  `json:"size"`
	Mode string `json:"mode,omitempty"` // rw (default) or ro
	Name string `json:"name,omitempty"`
}

// OpNIC is one NIC of OP_INSTANCE_CREATE.
type OpNIC struct {
	MAC  string `json:"mac,omitempty"` // empty or "auto"/"generate": drawn by the leader
	IP   string `json:"ip,omitempty"`
	Link string `json:"link,omitempty"`
	Mode string `json:"mode,omitempty"`
	Name string `json:"name,omitempty"`
	VLAN string `json:"vlan,omitempty"`
	// Network names the network (by name or UUID) the NIC is on: its
	// mode and link then come from the network's connection to the
	// primary node's group, and ip may be "pool" (the lowest free
	// address of the network).
	Network string `json:"network,omitempty"`
}

// BEParams are the backend parameters gnt uses: memory (Ganeti's maxmem;
// "memory" is accepted as the older name) and vcpus.
type BEParams struct {
	Memory         *int64 `json:"memory,omitempty"`
	MaxMem         *int64 `json:"maxmem,omitempty"`
	MinMem         *int64 `json:"minmem,omitempty"`
	VCPUs          *int   `json:"vcpus,omitempty"`
	AutoBalance    *bool  `json:"auto_balance,omitempty"`
	AlwaysFailover *bool  `json:"always_failover,omitempty"`
	SpindleUse     *int   `json:"spindle_use,omitempty"`
}

// Map gives the parameters given, in the instance record's form (maxmem
// for memory; numbers as float64). Ganeti's older "memory" is both maxmem
// and minmem where those are not given (its UpgradeBeParams).
func (b BEParams) Map() map[string]any {
	m := map[string]any{}
	if v := b.MemoryMiB(-1); v >= 0 {
		m["maxmem"] = float64(v)
	}
	switch {
	case b.MinMem != nil:
		m["minmem"] = float64(*b.MinMem)
	case b.Memory != nil:
		m["minmem"] = float64(*b.Memory)
	}
	if b.VCPUs != nil {
		m["vcpus"] = float64(*b.VCPUs)
	}
	if b.AutoBalance != nil {
		m["auto_balance"] = *b.AutoBalance
	}
	if b.AlwaysFailover != nil {
		m["always_failover"] = *b.AlwaysFailover
	}
	if b.SpindleUse != nil {
		m["spindle_use"] = float64(*b.SpindleUse)
	}
	return m
}

// empty reports whether no backend parameter is given.
func (b BEParams) empty() bool { return len(b.Map()) == 0 }

// MemoryMiB returns maxmem, else memory, else def.
func (b BEParams) MemoryMiB(def int64) int64 {
	switch {
	case b.MaxMem != nil:
		return *b.MaxMem
	case b.Memory != nil:
		return *b.Memory
	}
	return def
}

// Defaults of a new instance (Ganeti's beparams defaults).
const (
	DefaultInstanceMemory = 128
	DefaultInstanceVCPUs  = 1
)

// OpInstanceCreate creates an instance: placed by the allocator (or on
// pnode/snode), its disks created on its nodes, its OS installed, then
// started (start, default true). With forthcoming it only reserves the
// resources (a forthcoming instance, seed 001); with commit it turns the
// forthcoming instance of that name into a real one.
type OpInstanceCreate struct {
	OpCommon
	InstanceName string         `json:"instance_name"`
	Mode         string         `json:"mode,omitempty"` // "create" (the only mode)
	DiskTemplate string         `json:"disk_template,omitempty"`
	Disks        []OpDisk       `json:"disks,omitempty"`
	NICs         []OpNIC        `json:"nics,omitempty"`
	OSType       string         `json:"os_type,omitempty"`
	BEParams     BEParams       `json:"beparams,omitempty"`
	PNode        string         `json:"pnode,omitempty"`
	SNode        string         `json:"snode,omitempty"`
	IAllocator   string         `json:"iallocator,omitempty"`
	GroupName    string         `json:"group_name,omitempty"` // gnt: place within this group
	Start        *bool          `json:"start,omitempty"`
	Forthcoming  bool           `json:"forthcoming,omitempty"`
	Commit       bool           `json:"commit,omitempty"`
	InstanceUUID string         `json:"instance_uuid,omitempty"`
	IPCheck      bool           `json:"ip_check,omitempty"`
	NameCheck    bool           `json:"name_check,omitempty"`
	WaitForSync  *bool          `json:"wait_for_sync,omitempty"`
	Hypervisor   string         `json:"hypervisor,omitempty"`
	HVParams     map[string]any `json:"hvparams,omitempty"`
	OSParams     map[string]any `json:"osparams,omitempty"`
	NoInstall    bool           `json:"no_install,omitempty"`
	// Tags are the new instance's tags.
	Tags []string `json:"tags,omitempty"`
	// ConflictsCheck (default true) checks the NICs' IPs against the
	// cluster's; gnt always checks, so false is refused.
	ConflictsCheck *bool `json:"conflicts_check,omitempty"`
	// OpportunisticLocking is accepted: gnt's placement never waits for
	// node locks (the state refuses a placement that no longer fits).
	OpportunisticLocking bool `json:"opportunistic_locking,omitempty"`
	// IdentifyDefaults records as the instance's own only the hvparams
	// and beparams that differ from the cluster's.
	IdentifyDefaults bool `json:"identify_defaults,omitempty"`
	// IgnoreIPolicy is accepted: gnt enforces no instance policy.
	IgnoreIPolicy bool `json:"ignore_ipolicy,omitempty"`
	// MoveReservations (gnt) lets the allocator move forthcoming
	// instances (reservations, records only) to other nodes when the
	// instance fits nowhere as things are; default true. It applies only
	// when the allocator places the instance (no pnode).
	MoveReservations *bool `json:"gnt_move_reservations,omitempty"`
}

// MovesReservations reports whether the allocator may move reservations
// to make room for the instance (gnt_move_reservations, default true).
func (o *OpInstanceCreate) MovesReservations() bool {
	return o.MoveReservations == nil || *o.MoveReservations
}

// Template returns the disk template, defaulted: plain with disks,
// diskless without.
func (o *OpInstanceCreate) Template() string {
	if o.DiskTemplate != "" {
		return o.DiskTemplate
	}
	if len(o.Disks) == 0 {
		return DTDiskless
	}
	return DTPlain
}

// Validate implements Opcode.
func (o *OpInstanceCreate) Validate() *Error {
	if o.InstanceName == "" && !o.Forthcoming {
		return errf(CodeInval, "instance_name", "instance_name must not be empty (only a forthcoming instance, a reservation, may be unnamed)")
	}
	if o.InstanceName != "" {
		if e := ValidateHostname("instance_name", o.InstanceName); e != nil {
			return e
		}
	}
	if o.Mode != "" && o.Mode != "create" {
		return errf(CodeInval, "mode", "instance creation mode %q is not supported (only create)", o.Mode)
	}
	if o.Forthcoming && o.Commit {
		return errf(CodeInval, "commit", "forthcoming and commit exclude each other: reserve first, then commit")
	}
	if o.InstanceUUID != "" {
		// Not one of Ganeti's creation parameters; accepted, it would be
		// dropped.
		return errf(CodeInval, "instance_uuid", "instance_uuid is not a parameter of instance creation: the cluster draws a new instance's UUID, and a reservation is committed by its name (name an unnamed one first: rename UUID NAME)")
	}
	switch o.Template() {
	case DTPlain, DTDrbd, DTFile, DTSharedFile:
		if len(o.Disks) == 0 {
			return errf(CodeInval, "disks", "disk template %s needs at least one disk", o.Template())
		}
	case DTDiskless:
		if len(o.Disks) > 0 {
			return errf(CodeInval, "disks", "a diskless instance has no disks")
		}
	default:
		return errf(CodeInval, "disk_template", "disk template %q is not plain, drbd, file, sharedfile or diskless", o.DiskTemplate)
	}
	if len(o.Disks) > MaxDisksPerInstance {
		return errf(CodeInval, "disks", "an instance has at most %d disks, got %d", MaxDisksPerInstance, len(o.Disks))
	}
	var total int64
	for i, d := range o.Disks {
		if e := d.validate(fmt.Sprintf("disks.%d", i)); e != nil {
			return e
		}
		var e *Error
		if total, e = AddDiskMiB("disks", total, d.Size); e != nil {
			return e
		}
	}
	if len(o.NICs) > MaxNICsPerInstance {
		return errf(CodeInval, "nics", "an instance has at most %d NICs, got %d", MaxNICsPerInstance, len(o.NICs))
	}
	for i, n := range o.NICs {
		for _, f := range []struct{ name, v string }{{"name", n.Name}, {"link", n.Link}, {"mode", n.Mode}, {"network", n.Network}} {
			if e := ValidateName(fmt.Sprintf("nics.%d.%s", i, f.name), f.v, MaxNameLen); e != nil {
				return e
			}
		}
		if e := ValidateNICParams(fmt.Sprintf("nics.%d", i), n.Mode, n.Link, n.VLAN, n.IP); e != nil {
			return e
		}
		if e := n.validateNetwork(i); e != nil {
			return e
		}
		if n.IP != "" && n.IP != IPPool {
			if e := validateIP("nics", n.IP, false); e != nil {
				return errf(CodeInval, "nics", "NIC %d: %s", i, e.Msg)
			}
		}
		if n.MAC != "" && n.MAC != "auto" && n.MAC != "generate" && !validMAC(n.MAC) {
			return errf(CodeInval, "nics", "NIC %d: %q is not a MAC address", i, n.MAC)
		}
	}
	if e := o.BEParams.validate(); e != nil {
		return e
	}
	if e := ValidateOSName("os_type", o.OSType); e != nil {
		return e
	}
	for _, f := range []struct{ name, v string }{{"pnode", o.PNode}, {"snode", o.SNode}, {"instance_uuid", o.InstanceUUID}, {"hypervisor", o.Hypervisor}} {
		if e := ValidateName(f.name, f.v, MaxHostnameLen); e != nil {
			return e
		}
	}
	if e := validateRefName("group_name", o.GroupName, MaxGroupNameLen); e != nil {
		return e
	}
	if e := validateInstanceHV(o.Hypervisor, o.HVParams, false); e != nil {
		return e
	}
	if len(o.Tags) > MaxTagsPerObj {
		return errf(CodeInval, "tags", "an instance has at most %d tags, got %d", MaxTagsPerObj, len(o.Tags))
	}
	for _, t := range o.Tags {
		if e := ValidateTag(t); e != nil {
			return e
		}
	}
	if o.ConflictsCheck != nil && !*o.ConflictsCheck {
		return errf(CodeInval, "conflicts_check", "conflicts_check false is not supported: gnt always refuses an IP another NIC of the cluster has")
	}
	if e := validateOSParams("osparams", o.OSParams); e != nil {
		return e
	}
	if o.SNode != "" && o.Template() != DTDrbd {
		return errf(CodeInval, "snode", "only drbd instances have a secondary node")
	}
	if o.SNode != "" && o.SNode == o.PNode {
		return errf(CodeInval, "snode", "the secondary node must differ from the primary")
	}
	if e := ValidateIAllocator("iallocator", o.IAllocator); e != nil {
		return e
	}
	if o.IAllocator != "" && o.PNode != "" {
		return errf(CodeInval, "iallocator", "give either an iallocator or nodes, not both")
	}
	return nil
}

// validateInstanceHV checks an instance's hypervisor and its
// hypervisor parameters on their own: with a hypervisor named, against its
// table; without, each key must be known to some hypervisor (checkState
// checks them against the cluster's default hypervisor). A global
// parameter is refused.
func validateInstanceHV(hv string, m map[string]any, resettable bool) *Error {
	if e := validateParamMap("hvparams", m); e != nil {
		return e
	}
	if hv != "" {
		if e := ValidateHypervisorName("hypervisor", hv); e != nil {
			return e
		}
		_, e := ValidateHVParams("hvparams", hv, m, true, resettable)
		return e
	}
	for _, k := range sortedKeys(m) {
		if IsHVGlobal(k) {
			return errf(CodeInval, "hvparams."+k, "hypervisor parameter %s is global: only the cluster sets it (gnt cluster modify -H HV:%s=...)", k, k)
		}
		known := false
		for _, h := range KnownHypervisors {
			if findDef(hvParamDefs[h], k) != nil {
				known = true
				if _, e := NormalizeParams("hvparams", "hypervisor "+h, hvParamDefs[h], map[string]any{k: m[k]}, resettable); e != nil {
					return e
				}
				break
			}
		}
		if !known {
			return errf(CodeInval, "hvparams."+k, "unknown hypervisor parameter %q: no hypervisor has it (see docs/parameters.md)", k)
		}
	}
	return nil
}

// checkState implements stateChecked: the hypervisor is enabled, its
// parameters are the hypervisor's (the cluster's default when the
// request names none) and, filled with the cluster's, keep the VNC
// console's rules (CheckVNC; the job checks all of checkHVRules), the nodes it names run that hypervisor, and a NIC that is routed (its mode, else the
// cluster's) has an IP.
func (o *OpInstanceCreate) checkState(s *State) *Error {
	if s.Cluster == nil || o.Commit {
		return nil
	}
	hv := InstanceHypervisor(s.Cluster, &Instance{Hypervisor: o.Hypervisor})
	if e := checkHVEnabled(s.Cluster, hv); e != nil {
		return e
	}
	if hv != "" {
		hvp, e := ValidateHVParams("hvparams", hv, o.HVParams, true, false)
		if e != nil {
			return e
		}
		if e := CheckVNC("hvparams", FillParams(HVDefaults(hv), s.Cluster.HVParams[hv], hvp)); e != nil {
			return e
		}
	}
	for _, f := range []struct{ field, ref string }{{"pnode", o.PNode}, {"snode", o.SNode}} {
		if f.ref == "" {
			continue
		}
		if e := CheckNodeHypervisor(f.field, s.LookupNode(f.ref), o.InstanceName, hv); e != nil {
			return e
		}
	}
	for i, n := range o.NICs {
		if e := checkNICFilled(s.Cluster, hv, fmt.Sprintf("nics.%d", i), n.Mode, n.VLAN, n.IP); e != nil {
			return e
		}
	}
	be := FillParams(paramDefaults(BEParamDefs), s.Cluster.BEParams, o.BEParams.Map())
	return checkMinMax("beparams", be)
}

// checkHVEnabled refuses a hypervisor the cluster has not enabled (when it
// names its enabled ones).
func checkHVEnabled(c *Cluster, hv string) *Error {
	if hv != "" && len(c.EnabledHypervisors) > 0 && !contains(c.EnabledHypervisors, hv) {
		return errf(CodeInval, "hypervisor", "hypervisor %s is not enabled on this cluster (enabled: %s)", hv, strings.Join(c.EnabledHypervisors, ", "))
	}
	return nil
}

// checkNICFilled checks a NIC's mode and vlan as filled with the
// cluster's: a routed NIC needs an IP, and an instance of hypervisor kvm
// (gnt's kvm driver) has bridged and routed NICs only, without a VLAN,
// so that what it cannot connect is refused at submission rather than
// at its start.
func checkNICFilled(c *Cluster, hv, field, mode, vlan, ip string) *Error {
	mode, _, vlan = FilledNIC(c, &NIC{Mode: mode, VLAN: vlan})
	if e := checkRoutedIP(field, mode, ip); e != nil {
		return e
	}
	if hv == HVKVM && mode != NICModeBridged && mode != NICModeRouted {
		return errf(CodeInval, field+".mode", "%s: mode %s: the kvm hypervisor connects bridged and routed NICs only", field, mode)
	}
	if hv == HVKVM && vlan != "" {
		return errf(CodeInval, field+".vlan", "%s: vlan %q: the kvm hypervisor connects no VLANs (a VLAN needs openvswitch)", field, vlan)
	}
	return nil
}

// validateNetwork checks a NIC's network against its other parameters:
// a NIC on a network takes its mode and link from the network's
// connection (Ganeti refuses both given), and ip=pool needs a network.
func (n OpNIC) validateNetwork(i int) *Error {
	if strings.EqualFold(n.Network, ValueNone) {
		return errf(CodeInval, fmt.Sprintf("nics.%d.network", i), "NIC %d: network %q: leave network out for a NIC on no network", i, n.Network)
	}
	if n.Network != "" && (n.Mode != "" || n.Link != "" || n.VLAN != "") {
		return errf(CodeInval, fmt.Sprintf("nics.%d.network", i), "NIC %d: if network is given, no mode, link or vlan is allowed to be passed (they come from the network's connection to the node group)", i)
	}
	if n.IP == IPPool && n.Network == "" {
		return errf(CodeInval, fmt.Sprintf("nics.%d.ip", i), "NIC %d: ip=pool needs a network to take the address from", i)
	}
	return nil
}

// validate checks one disk of a request: its size (ValidateDiskSize),
// mode and name.
func (d OpDisk) validate(field string) *Error {
	if e := ValidateDiskSize(field+".size", d.Size); e != nil {
		return e
	}
	if d.Mode != "" && d.Mode != "rw" && d.Mode != "ro" {
		return errf(CodeInval, field+".mode", "%s.mode %q is not rw or ro", field, d.Mode)
	}
	return ValidateName(field+".name", d.Name, MaxNameLen)
}

// validate checks memory (maxmem, memory, minmem) and vcpus.
func (b BEParams) validate() *Error {
	for _, m := range []struct {
		f string
		v *int64
	}{{"beparams.memory", b.Memory}, {"beparams.maxmem", b.MaxMem}, {"beparams.minmem", b.MinMem}} {
		if m.v != nil {
			if e := ValidateMemory(m.f, *m.v); e != nil {
				return e
			}
		}
	}
	if b.VCPUs != nil {
		if e := ValidateVCPUs("beparams.vcpus", *b.VCPUs); e != nil {
			return e
		}
	}
	if b.SpindleUse != nil && (*b.SpindleUse < 0 || *b.SpindleUse > 1024) {
		return errf(CodeInval, "beparams.spindle_use", "beparams.spindle_use must be 0 to 1024, got %d", *b.SpindleUse)
	}
	if b.MinMem != nil && b.MemoryMiB(-1) >= 0 && *b.MinMem > b.MemoryMiB(-1) {
		return errf(CodeInval, "beparams.minmem", "minmem %d MiB is more than maxmem %d MiB", *b.MinMem, b.MemoryMiB(-1))
	}
	return nil
}

func validMAC(s string) bool {
	hw, err := net.ParseMAC(s)
	return err == nil && len(hw) == 6
}

// Summary implements Opcode.
func (o *OpInstanceCreate) Summary() string { return "INSTANCE_CREATE(" + o.InstanceName + ")" }

// Locks implements Opcode: the instance's name, and its nodes' resources
// when they are given. Placement needs no node locks: the state refuses a
// record that does not fit its nodes (see InstancePut), so concurrent
// creations never overcommit a node.
func (o *OpInstanceCreate) Locks(s *State) []LockDecl {
	out := []LockDecl{bgl(false)}
	if o.InstanceName != "" {
		// An unnamed reservation gets a new UUID nobody else can name
		// yet: there is nothing to lock.
		out = append(out, LockDecl{Level: LockInstance, Names: []string{o.InstanceName}, Exclusive: true})
	}
	var nodes []string
	for _, n := range []string{o.PNode, o.SNode} {
		if n != "" {
			nodes = append(nodes, nodeLockName(s, n))
		}
	}
	if len(nodes) > 0 {
		sort.Strings(nodes)
		out = append(out, LockDecl{Level: LockNode, Names: nodes, Exclusive: true})
	}
	return out
}

// OpInstanceRef is the instance-naming part of the instance opcodes.
type OpInstanceRef struct {
	InstanceName string `json:"instance_name"`
	InstanceUUID string `json:"instance_uuid,omitempty"`
}

// Ref returns the name, or the UUID when only it is given.
func (r *OpInstanceRef) Ref() string {
	if r.InstanceName != "" {
		return r.InstanceName
	}
	return r.InstanceUUID
}

func (r *OpInstanceRef) validateRef() *Error {
	if r.InstanceName == "" && r.InstanceUUID == "" {
		return errf(CodeInval, "instance_name", "instance_name must not be empty")
	}
	if e := validateRefName("instance_name", r.InstanceName, MaxHostnameLen); e != nil {
		return e
	}
	return validateRefName("instance_uuid", r.InstanceUUID, MaxHostnameLen)
}

// validateTarget checks the optional target node and allocator of a
// move.
func validateTarget(node, iallocator string) *Error {
	if e := validateRefName("target_node", node, MaxHostnameLen); e != nil {
		return e
	}
	return ValidateIAllocator("iallocator", iallocator)
}

// validateDiskIndexes checks a list of disk indexes.
func validateDiskIndexes(disks []int) *Error {
	if len(disks) > MaxDisksPerInstance {
		return errf(CodeInval, "disks", "an instance has at most %d disks; %d indexes given", MaxDisksPerInstance, len(disks))
	}
	for _, d := range disks {
		if d < 0 || d >= MaxDisksPerInstance {
			return errf(CodeInval, "disks", "disk index %d is not between 0 and %d", d, MaxDisksPerInstance-1)
		}
	}
	return nil
}

// instanceLocks locks the instance exclusively and its nodes (all of
// them, primary and secondaries) exclusively, as Ganeti's instance LUs
// lock their nodes.
func instanceLocks(s *State, ref string, extraNodes ...string) []LockDecl {
	name := ref
	var nodes []string
	if i := s.LookupInstance(ref); i != nil {
		if i.Name != "" { // an unnamed reservation is locked by its UUID
			name = i.Name
		}
		for _, u := range append([]string{i.PrimaryNode}, i.SecondaryNodes...) {
			if u != "" {
				nodes = append(nodes, s.NodeName(u))
			}
		}
	}
	for _, n := range extraNodes {
		if n != "" {
			nodes = append(nodes, nodeLockName(s, n))
		}
	}
	out := []LockDecl{bgl(false), {Level: LockInstance, Names: []string{name}, Exclusive: true}}
	if len(nodes) > 0 {
		sort.Strings(nodes)
		out = append(out, LockDecl{Level: LockNode, Names: dedupe(nodes), Exclusive: true})
	}
	return out
}

func dedupe(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// OpInstanceRemove removes an instance: stopped, its disks removed on
// every node, its record dropped.
type OpInstanceRemove struct {
	OpCommon
	OpInstanceRef
	IgnoreFailures  bool     `json:"ignore_failures,omitempty"`
	ShutdownTimeout *float64 `json:"shutdown_timeout,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceRemove) Validate() *Error {
	if e := validTimeout("shutdown_timeout", o.ShutdownTimeout); e != nil {
		return e
	}
	return o.validateRef()
}

// MaxTimeoutSeconds bounds the timeouts an opcode carries.
const MaxTimeoutSeconds = 86400

// validTimeout checks an optional timeout in seconds: 0 to
// MaxTimeoutSeconds.
func validTimeout(field string, v *float64) *Error {
	if v != nil && (*v < 0 || *v > MaxTimeoutSeconds || math.IsNaN(*v)) {
		return errf(CodeInval, field, "%s must be between 0 and %d seconds, got %g", field, MaxTimeoutSeconds, *v)
	}
	return nil
}

// Summary implements Opcode.
func (o *OpInstanceRemove) Summary() string { return "INSTANCE_REMOVE(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceRemove) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }

// OpInstanceStartup starts an instance on its primary node.
type OpInstanceStartup struct {
	OpCommon
	OpInstanceRef
	Force              bool `json:"force,omitempty"`
	IgnoreOfflineNodes bool `json:"ignore_offline_nodes,omitempty"`
	NoRemember         bool `json:"no_remember,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceStartup) Validate() *Error { return o.validateRef() }

// Summary implements Opcode.
func (o *OpInstanceStartup) Summary() string { return "INSTANCE_STARTUP(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceStartup) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }

// OpInstanceShutdown stops an instance.
type OpInstanceShutdown struct {
	OpCommon
	OpInstanceRef
	Timeout            *float64 `json:"timeout,omitempty"`
	IgnoreOfflineNodes bool     `json:"ignore_offline_nodes,omitempty"`
	NoRemember         bool     `json:"no_remember,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceShutdown) Validate() *Error {
	if e := validTimeout("timeout", o.Timeout); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceShutdown) Summary() string { return "INSTANCE_SHUTDOWN(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceShutdown) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }

// Reboot types.
const (
	RebootSoft = "soft"
	RebootHard = "hard"
	RebootFull = "full"
)

// OpInstanceReboot reboots an instance.
type OpInstanceReboot struct {
	OpCommon
	OpInstanceRef
	RebootType        string   `json:"reboot_type,omitempty"`
	IgnoreSecondaries bool     `json:"ignore_secondaries,omitempty"`
	ShutdownTimeout   *float64 `json:"shutdown_timeout,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceReboot) Validate() *Error {
	switch o.RebootType {
	case "", RebootSoft, RebootHard, RebootFull:
	default:
		return errf(CodeInval, "reboot_type", "reboot_type %q is not soft, hard or full", o.RebootType)
	}
	if e := validTimeout("shutdown_timeout", o.ShutdownTimeout); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceReboot) Summary() string { return "INSTANCE_REBOOT(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceReboot) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }

// OpInstanceFailover moves a drbd instance to its secondary node: stopped
// on the primary, the roles swapped, started on the new primary when it
// should run.
type OpInstanceFailover struct {
	OpCommon
	OpInstanceRef
	IgnoreConsistency bool     `json:"ignore_consistency,omitempty"`
	ShutdownTimeout   *float64 `json:"shutdown_timeout,omitempty"`
	TargetNode        string   `json:"target_node,omitempty"`
	IAllocator        string   `json:"iallocator,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceFailover) Validate() *Error {
	if e := validateTarget(o.TargetNode, o.IAllocator); e != nil {
		return e
	}
	if e := validTimeout("shutdown_timeout", o.ShutdownTimeout); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceFailover) Summary() string { return "INSTANCE_FAILOVER(" + o.Ref() + ")" }

// Locks implements Opcode: the instance, its nodes and the target node.
func (o *OpInstanceFailover) Locks(s *State) []LockDecl {
	return instanceLocks(s, o.Ref(), o.TargetNode)
}

// Migration modes.
const (
	MigrationLive    = "live"
	MigrationNonLive = "non-live"
)

// OpInstanceMigrate moves a running drbd instance to its secondary node
// without stopping it.
type OpInstanceMigrate struct {
	OpCommon
	OpInstanceRef
	Mode           string `json:"mode,omitempty"`
	Live           *bool  `json:"live,omitempty"`
	Cleanup        bool   `json:"cleanup,omitempty"`
	AllowFailover  bool   `json:"allow_failover,omitempty"`
	TargetNode     string `json:"target_node,omitempty"`
	IAllocator     string `json:"iallocator,omitempty"`
	IgnoreIPolicy  bool   `json:"ignore_ipolicy,omitempty"`
	IgnoreHVVerify bool   `json:"ignore_hvversions,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceMigrate) Validate() *Error {
	switch o.Mode {
	case "", MigrationLive, MigrationNonLive:
	default:
		return errf(CodeInval, "mode", "migration mode %q is not live or non-live", o.Mode)
	}
	if o.Live != nil && o.Mode != "" {
		return errf(CodeInval, "live", "give either mode or live, not both")
	}
	if e := validateTarget(o.TargetNode, o.IAllocator); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceMigrate) Summary() string { return "INSTANCE_MIGRATE(" + o.Ref() + ")" }

// Locks implements Opcode: the instance, its nodes and the target node.
func (o *OpInstanceMigrate) Locks(s *State) []LockDecl {
	return instanceLocks(s, o.Ref(), o.TargetNode)
}

// Node evacuation modes (Ganeti's).
const (
	EvacPrimaryOnly   = "primary-only"
	EvacSecondaryOnly = "secondary-only"
	EvacAll           = "all"
)

// OpNodeEvacuate moves the instances off a node: drbd primaries to their
// secondary, drbd secondaries to a new secondary, as the allocator plans.
type OpNodeEvacuate struct {
	OpCommon
	NodeName     string `json:"node_name"`
	Mode         string `json:"mode,omitempty"`
	RemoteNode   string `json:"remote_node,omitempty"`
	IAllocator   string `json:"iallocator,omitempty"`
	EarlyRelease bool   `json:"early_release,omitempty"`
}

// EvacMode returns the mode, Ganeti's default all.
func (o *OpNodeEvacuate) EvacMode() string {
	if o.Mode == "" {
		return EvacAll
	}
	return o.Mode
}

// Validate implements Opcode.
func (o *OpNodeEvacuate) Validate() *Error {
	if e := validateNodeRef(o.NodeName, ""); e != nil {
		return e
	}
	if e := ValidateIAllocator("iallocator", o.IAllocator); e != nil {
		return e
	}
	switch o.EvacMode() {
	case EvacPrimaryOnly, EvacSecondaryOnly, EvacAll:
	default:
		return errf(CodeInval, "mode", "evacuation mode %q is not primary-only, secondary-only or all", o.Mode)
	}
	if o.RemoteNode != "" {
		return errf(CodeInval, "remote_node", "remote_node is not supported: the allocator chooses the nodes")
	}
	return nil
}

// Summary implements Opcode.
func (o *OpNodeEvacuate) Summary() string { return "NODE_EVACUATE(" + o.NodeName + ")" }

// Locks implements Opcode: the node group's nodes and instances are
// changed one by one; the node is locked exclusively (nothing new lands
// on it) and each move locks its instance through the state's checks.
func (o *OpNodeEvacuate) Locks(s *State) []LockDecl { return evacuationLocks() }

// evacuationLocks are the locks of the opcodes that move instances as
// planned in their first step: every instance and node exclusively.
func evacuationLocks() []LockDecl {
	return []LockDecl{bgl(false), {Level: LockInstance, Exclusive: true}, {Level: LockNode, Exclusive: true}}
}

// OpNodeMigrate live-migrates every drbd instance whose primary is the
// node to its secondary.
type OpNodeMigrate struct {
	OpCommon
	NodeName   string `json:"node_name"`
	Mode       string `json:"mode,omitempty"`
	Live       *bool  `json:"live,omitempty"`
	TargetNode string `json:"target_node,omitempty"`
	IAllocator string `json:"iallocator,omitempty"`
}

// Validate implements Opcode.
func (o *OpNodeMigrate) Validate() *Error {
	if e := validateNodeRef(o.NodeName, ""); e != nil {
		return e
	}
	switch o.Mode {
	case "", MigrationLive, MigrationNonLive:
	default:
		return errf(CodeInval, "mode", "migration mode %q is not live or non-live", o.Mode)
	}
	return validateTarget(o.TargetNode, o.IAllocator)
}

// Summary implements Opcode.
func (o *OpNodeMigrate) Summary() string { return "NODE_MIGRATE(" + o.NodeName + ")" }

// Locks implements Opcode.
func (o *OpNodeMigrate) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockInstance, Exclusive: true}, {Level: LockNode, Exclusive: true}}
}

// OpInstanceReinstall reinstalls an instance's OS (optionally a new one)
// on its disks; the instance must be stopped.
type OpInstanceReinstall struct {
	OpCommon
	OpInstanceRef
	OSType   string         `json:"os_type,omitempty"`
	OSParams map[string]any `json:"osparams,omitempty"`
	Force    bool           `json:"force,omitempty"`
	// Start (Ganeti's RAPI "start") starts the instance afterwards.
	Start bool `json:"start,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceReinstall) Validate() *Error {
	if e := ValidateOSName("os_type", o.OSType); e != nil {
		return e
	}
	if e := validateParamMap("osparams", o.OSParams); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceReinstall) Summary() string { return "INSTANCE_REINSTALL(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceReinstall) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }

// Replace-disks modes (Ganeti's).
const (
	ReplaceOnPrimary    = "replace_on_primary"
	ReplaceOnSecondary  = "replace_on_secondary"
	ReplaceNewSecondary = "replace_new_secondary"
	ReplaceAuto         = "replace_auto"
)

// OpInstanceReplaceDisks recreates a drbd instance's disks on its primary
// or secondary (resynchronised from the other side), or moves its
// secondary to a new node.
type OpInstanceReplaceDisks struct {
	OpCommon
	OpInstanceRef
	Mode         string `json:"mode"`
	Disks        []int  `json:"disks,omitempty"`
	RemoteNode   string `json:"remote_node,omitempty"`
	IAllocator   string `json:"iallocator,omitempty"`
	EarlyRelease bool   `json:"early_release,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceReplaceDisks) Validate() *Error {
	switch o.Mode {
	case ReplaceOnPrimary, ReplaceOnSecondary:
		if o.RemoteNode != "" || o.IAllocator != "" {
			return errf(CodeInval, "remote_node", "remote_node and iallocator go with replace_new_secondary only")
		}
	case ReplaceNewSecondary:
		if o.RemoteNode != "" && o.IAllocator != "" {
			return errf(CodeInval, "remote_node", "give either remote_node or iallocator, not both")
		}
	case ReplaceAuto:
		if o.RemoteNode != "" || o.IAllocator != "" {
			return errf(CodeInval, "remote_node", "remote_node and iallocator go with replace_new_secondary only")
		}
		if len(o.Disks) > 0 {
			return errf(CodeInval, "disks", "replace_auto chooses the disks itself (those missing on a node); disks cannot be given")
		}
	default:
		return errf(CodeInval, "mode", "replace-disks mode %q is not replace_on_primary, replace_on_secondary or replace_new_secondary", o.Mode)
	}
	if e := validateDiskIndexes(o.Disks); e != nil {
		return e
	}
	if e := validateTarget(o.RemoteNode, o.IAllocator); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceReplaceDisks) Summary() string { return "INSTANCE_REPLACE_DISKS(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceReplaceDisks) Locks(s *State) []LockDecl {
	return instanceLocks(s, o.Ref(), o.RemoteNode)
}

// OpInstanceRecreateDisks creates an instance's missing disks again
// (empty), optionally on new nodes; the instance must be stopped.
type OpInstanceRecreateDisks struct {
	OpCommon
	OpInstanceRef
	Disks      []int    `json:"disks,omitempty"`
	Nodes      []string `json:"nodes,omitempty"`
	IAllocator string   `json:"iallocator,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceRecreateDisks) Validate() *Error {
	if len(o.Nodes) > 2 {
		return errf(CodeInval, "nodes", "an instance has at most two nodes")
	}
	for _, n := range o.Nodes {
		if e := ValidateName("nodes", n, MaxHostnameLen); e != nil {
			return e
		}
	}
	if e := validateDiskIndexes(o.Disks); e != nil {
		return e
	}
	if e := ValidateIAllocator("iallocator", o.IAllocator); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceRecreateDisks) Summary() string { return "INSTANCE_RECREATE_DISKS(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceRecreateDisks) Locks(s *State) []LockDecl {
	return instanceLocks(s, o.Ref(), o.Nodes...)
}

// OpInstanceRename renames a stopped instance.
type OpInstanceRename struct {
	OpCommon
	OpInstanceRef
	NewName   string `json:"new_name"`
	IPCheck   bool   `json:"ip_check,omitempty"`
	NameCheck bool   `json:"name_check,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceRename) Validate() *Error {
	if e := ValidateHostname("new_name", o.NewName); e != nil {
		return e
	}
	return o.validateRef()
}

// Summary implements Opcode.
func (o *OpInstanceRename) Summary() string { return "INSTANCE_RENAME(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceRename) Locks(s *State) []LockDecl {
	out := instanceLocks(s, o.Ref())
	out[1].Names = append(out[1].Names, o.NewName)
	sort.Strings(out[1].Names)
	return out
}

// OpInstanceSetParams changes an instance's parameters: backend
// (memory, vcpus...), hypervisor and OS parameters (a value "default"
// removes the instance's override), its OS name, its offline state, its
// NICs (Ganeti's [op, index, params] modifications: add, modify, remove)
// and its disks (add; modify of name and mode).
type OpInstanceSetParams struct {
	OpCommon
	OpInstanceRef
	BEParams BEParams       `json:"beparams,omitempty"`
	Disks    []DiskMod      `json:"disks,omitempty"`
	Force    bool           `json:"force,omitempty"`
	HVParams map[string]any `json:"hvparams,omitempty"`
	OSParams map[string]any `json:"osparams,omitempty"`
	NICs     []NICMod       `json:"nics,omitempty"`
	OSName   string         `json:"os_name,omitempty"`
	Offline  *bool          `json:"offline,omitempty"`
	// RuntimeMem is Ganeti's ballooning of a running instance: the
	// memory (MiB) it may use from now on, between its minmem and maxmem;
	// the record does not change (a restart runs it with maxmem again).
	// The kvm driver applies it through QMP balloon.
	RuntimeMem *int64 `json:"runtime_mem,omitempty"`
	// DiskTemplate is Ganeti's template conversion, refused by name.
	DiskTemplate string `json:"disk_template,omitempty"`
	// WaitForSync (Ganeti's, default true) makes the job wait for the
	// resync of the drbd disks it adds (since LogVersion 34).
	WaitForSync *bool `json:"wait_for_sync,omitempty"`
}

// NICMod is one NIC modification: Ganeti's [op, index, params] triple,
// op add (index -1: at the end), modify or remove.
type NICMod struct {
	Op     string
	Index  int
	Params OpNIC
}

// UnmarshalJSON reads the triple.
func (d *NICMod) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 3 {
		return errors.New(`a NIC modification must be [op, index, params], e.g. ["modify", 0, {"link": "br1"}]`)
	}
	if err := json.Unmarshal(raw[0], &d.Op); err != nil {
		return errors.New("NIC modification op must be a string")
	}
	if err := json.Unmarshal(raw[1], &d.Index); err != nil {
		return errors.New("NIC modification index must be an integer")
	}
	return DecodeStrict(raw[2], &d.Params)
}

// MarshalJSON writes the triple.
func (d NICMod) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{d.Op, d.Index, d.Params})
}

// DiskMod is one disk modification: [op, index, params].
type DiskMod struct {
	Op     string
	Index  int
	Params OpDisk
}

// UnmarshalJSON reads Ganeti's [op, index, params] triple.
func (d *DiskMod) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 3 {
		return errors.New(`a disk modification must be [op, index, params], e.g. ["add", -1, {"size": 1024}]`)
	}
	if err := json.Unmarshal(raw[0], &d.Op); err != nil {
		return errors.New("disk modification op must be a string")
	}
	if err := json.Unmarshal(raw[1], &d.Index); err != nil {
		return errors.New("disk modification index must be an integer")
	}
	return DecodeStrict(raw[2], &d.Params)
}

// MarshalJSON writes the triple.
func (d DiskMod) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{d.Op, d.Index, d.Params})
}

// Validate implements Opcode.
func (o *OpInstanceSetParams) Validate() *Error {
	if o.RuntimeMem != nil && (*o.RuntimeMem <= 0 || *o.RuntimeMem > MaxMemoryMiB) {
		return errf(CodeInval, "runtime_mem", "runtime_mem must be from 1 to %d MiB, got %d", MaxMemoryMiB, *o.RuntimeMem)
	}
	if o.DiskTemplate != "" {
		return errf(CodeInval, "disk_template", "disk template conversion is not supported by gnt; create a new instance")
	}
	if o.BEParams.empty() && len(o.Disks) == 0 && o.HVParams == nil && o.OSParams == nil && len(o.NICs) == 0 && o.OSName == "" && o.Offline == nil && o.RuntimeMem == nil {
		return errf(CodeInval, "", "please pass at least one modification (beparams, hvparams, osparams, nics, disks, os_name, offline or runtime_mem)")
	}
	if e := o.BEParams.validate(); e != nil {
		return e
	}
	if e := validateInstanceHV("", o.HVParams, true); e != nil {
		return e
	}
	if e := validateOSParams("osparams", o.OSParams); e != nil {
		return e
	}
	if e := ValidateOSName("os_name", o.OSName); e != nil {
		return e
	}
	if len(o.NICs) > MaxNICsPerInstance {
		return errf(CodeInval, "nics", "an instance has at most %d NICs; %d modifications given", MaxNICsPerInstance, len(o.NICs))
	}
	for i, n := range o.NICs {
		f := fmt.Sprintf("nics.%d", i)
		switch n.Op {
		case "add", "modify", "remove":
		default:
			return errf(CodeInval, f, "NIC modification %d: op %q is not add, modify or remove", i, n.Op)
		}
		if n.Index < -1 || n.Index >= MaxNICsPerInstance {
			return errf(CodeInval, f, "NIC modification %d: index %d is not -1 or 0 to %d", i, n.Index, MaxNICsPerInstance-1)
		}
		p := n.Params
		for _, x := range []struct{ name, v string }{{"name", p.Name}, {"link", p.Link}, {"mode", p.Mode}, {"network", p.Network}} {
			if e := ValidateName(f+"."+x.name, x.v, MaxNameLen); e != nil {
				return e
			}
		}
		if p.Network != "" && (p.Mode != "" || p.Link != "" || p.VLAN != "") {
			return errf(CodeInval, f+".network", "NIC modification %d: if network is given, no mode, link or vlan is allowed to be passed (they come from the network's connection to the node group)", i)
		}
		if p.IP == IPPool && p.Network == "" && n.Op == "add" {
			return errf(CodeInval, f+".ip", "NIC modification %d: ip=pool needs a network to take the address from", i)
		}
		ip := p.IP
		if n.Op == "modify" {
			ip = "unchanged" // the NIC's own IP counts: ApplyTo checks the result
		}
		if e := ValidateNICParams(f, p.Mode, p.Link, p.VLAN, ip); e != nil {
			return e
		}
		if p.IP != "" && p.IP != "none" && p.IP != IPPool {
			if e := validateIP(f+".ip", p.IP, false); e != nil {
				return e
			}
		}
		if p.MAC != "" && p.MAC != "auto" && p.MAC != "generate" && !validMAC(p.MAC) {
			return errf(CodeInval, f+".mac", "NIC modification %d: %q is not a MAC address", i, p.MAC)
		}
		if n.Op == "remove" && p != (OpNIC{}) {
			return errf(CodeInval, f, "NIC modification %d: remove takes no parameters", i)
		}
	}
	if len(o.Disks) > MaxDisksPerInstance {
		return errf(CodeInval, "disks", "an instance has at most %d disks; %d modifications given", MaxDisksPerInstance, len(o.Disks))
	}
	var total int64
	for i, d := range o.Disks {
		switch d.Op {
		case "add":
			if e := d.Params.validate(fmt.Sprintf("disks.%d", i)); e != nil {
				return e
			}
			var e *Error
			if total, e = AddDiskMiB("disks", total, d.Params.Size); e != nil {
				return e
			}
		case "modify":
			if d.Params.Size != 0 {
				return errf(CodeInval, fmt.Sprintf("disks.%d.size", i), "disk modification %d: a disk's size changes with grow-disk, not modify", i)
			}
			if d.Params.Mode != "" && d.Params.Mode != "rw" && d.Params.Mode != "ro" {
				return errf(CodeInval, fmt.Sprintf("disks.%d.mode", i), "disk modification %d: mode %q is not rw or ro", i, d.Params.Mode)
			}
			if e := ValidateName(fmt.Sprintf("disks.%d.name", i), d.Params.Name, MaxNameLen); e != nil {
				return e
			}
			if d.Index < 0 || d.Index >= MaxDisksPerInstance {
				return errf(CodeInval, fmt.Sprintf("disks.%d", i), "disk modification %d: index %d is not a disk", i, d.Index)
			}
		default:
			return errf(CodeInval, "disks", "disk modification %d: op %q is not add or modify (gnt does not remove disks)", i, d.Op)
		}
	}
	return o.validateRef()
}

// stateChecked is an opcode with limits that depend on the state when it
// is submitted; a submission past them is refused before it is queued
// (the executor's steps and the stored record check again when it runs).
type stateChecked interface {
	checkState(s *State) *Error
}

// checkState implements stateChecked: the instance's disks with the ones
// added stay within MaxDisksPerInstance and MaxInstanceDiskMiB.
func (o *OpInstanceSetParams) checkState(s *State) *Error {
	in := s.LookupInstance(o.Ref())
	if in == nil {
		return nil // an unknown instance is the executor's to report
	}
	next, _, e := o.ApplyTo(s.Cluster, in, func(int) (string, string) { return "", "" })
	if e != nil {
		return e
	}
	if e := CheckRuntimeMem(s.Cluster, next, o.RuntimeMem); e != nil {
		return e
	}
	added := 0
	for _, d := range o.Disks {
		if d.Op == "add" {
			added++
		}
	}
	if added == 0 {
		return nil
	}
	if n := len(in.Disks) + added; n > MaxDisksPerInstance {
		return errf(CodeInval, "disks", "instance %s has %d disks; with %d more it would have %d, more than %d",
			in.Name, len(in.Disks), added, n, MaxDisksPerInstance)
	}
	var total int64
	for _, d := range in.Disks {
		total += d.SizeMiB // each stored size is at most MaxDiskSizeMiB
	}
	for _, d := range o.Disks {
		var e *Error
		if total, e = AddDiskMiB("disks", total, d.Params.Size); e != nil {
			return errf(CodeInval, "disks", "instance %s: %s", in.Name, e.Msg)
		}
	}
	return nil
}

// CheckRuntimeMem checks a runtime_mem against the instance (as modified
// by the same opcode): it must be up, and the memory within its filled
// minmem and maxmem (Ganeti's rule; minmem is the memory itself unless
// the cluster or the instance sets one).
func CheckRuntimeMem(c *Cluster, in *Instance, mem *int64) *Error {
	if mem == nil {
		return nil
	}
	if in.AdminState != AdminUp {
		return errf(CodeState, "runtime_mem", "instance %s is not running (admin state %s): runtime_mem changes a running instance's memory", in.Name, in.AdminState)
	}
	be := FilledBE(c, in)
	minmem, _ := be["minmem"].(float64)
	maxmem, _ := be["maxmem"].(float64)
	if float64(*mem) < minmem || float64(*mem) > maxmem {
		return errf(CodeInval, "runtime_mem", "instance %s must have memory between %d and %d MiB (minmem and maxmem), not %d; set beparams minmem to balloon it lower",
			in.Name, int64(minmem), int64(maxmem), *mem)
	}
	return nil
}

// Summary implements Opcode.
func (o *OpInstanceSetParams) Summary() string { return "INSTANCE_SET_PARAMS(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceSetParams) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }
