package fsm

import (
	"sort"
	"strings"
)

// This file holds more of Ganeti's opcodes: renaming a node group and
// assigning nodes to one, redistributing the configuration (a no-op in
// gnt), and an instance's detailed information (run by the job engine,
// which asks the nodes' agents).

// MaxQueryDataInstances bounds the instances one OP_INSTANCE_QUERY_DATA
// names.
const MaxQueryDataInstances = 1000

// OpGroupRename renames a node group. Its result is the new name, as
// Ganeti's.
type OpGroupRename struct {
	OpCommon
	GroupName string `json:"group_name"`
	NewName   string `json:"new_name"`
}

// Validate implements Opcode.
func (o *OpGroupRename) Validate() *Error {
	if o.GroupName == "" {
		return errf(CodeInval, "group_name", "group_name must not be empty")
	}
	if e := validateRefName("group_name", o.GroupName, MaxGroupNameLen); e != nil {
		return e
	}
	return ValidateGroupName("new_name", o.NewName)
}

// Summary implements Opcode.
func (o *OpGroupRename) Summary() string { return "GROUP_RENAME(" + o.GroupName + ")" }

// Locks implements Opcode: the group exclusively, and the new name so
// that no group of that name is added meanwhile.
func (o *OpGroupRename) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNodeGroup, Names: []string{groupLockName(s, o.GroupName), o.NewName}, Exclusive: true}}
}

func (o *OpGroupRename) apply(t *txn, _ string) (any, *Error) {
	g := t.lookupGroup(o.GroupName)
	if g == nil {
		return nil, errf(CodeNoEnt, "group_name", "node group %q does not exist", o.GroupName)
	}
	if g.Name == o.NewName {
		return nil, errf(CodeInval, "new_name", "node group %q already has that name", g.Name)
	}
	if other := t.lookupGroup(o.NewName); other != nil {
		return nil, errf(CodeExists, "new_name", "node group %q already exists", o.NewName)
	}
	t.groupRW(g.UUID).Name = o.NewName
	return o.NewName, nil
}

// OpGroupAssignNodes moves nodes into a node group. As Ganeti's, it
// refuses to split an instance (primary and secondary in different
// groups) that was not split before, unless forced; its result is null.
type OpGroupAssignNodes struct {
	OpCommon
	GroupName string   `json:"group_name"`
	Nodes     []string `json:"nodes"`
	Force     bool     `json:"force,omitempty"`
}

// Validate implements Opcode.
func (o *OpGroupAssignNodes) Validate() *Error {
	if o.GroupName == "" {
		return errf(CodeInval, "group_name", "group_name must not be empty")
	}
	if e := validateRefName("group_name", o.GroupName, MaxGroupNameLen); e != nil {
		return e
	}
	if len(o.Nodes) == 0 {
		return errf(CodeInval, "nodes", "nodes must name at least one node")
	}
	if len(o.Nodes) > MaxNodesPerOp {
		return errf(CodeInval, "nodes", "nodes names %d nodes; at most %d", len(o.Nodes), MaxNodesPerOp)
	}
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		if e := ValidateHostname("nodes", n); e != nil {
			return e
		}
		if seen[n] {
			return errf(CodeInval, "nodes", "node %q is named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// Summary implements Opcode.
func (o *OpGroupAssignNodes) Summary() string { return "GROUP_ASSIGN_NODES(" + o.GroupName + ")" }

// Locks implements Opcode: every group and every node, since the nodes
// leave groups and instances across them are checked.
func (o *OpGroupAssignNodes) Locks(*State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNodeGroup, Exclusive: true}, {Level: LockNode, Exclusive: true}}
}

func (o *OpGroupAssignNodes) apply(t *txn, _ string) (any, *Error) {
	g := t.lookupGroup(o.GroupName)
	if g == nil {
		return nil, errf(CodeNoEnt, "group_name", "node group %q does not exist", o.GroupName)
	}
	moved := map[string]bool{}
	for _, ref := range o.Nodes {
		n := t.lookupNode(ref)
		if n == nil {
			return nil, errf(CodeNoEnt, "nodes", "node %q does not exist", ref)
		}
		if n.Group != g.UUID {
			moved[n.UUID] = true
		}
	}
	if len(moved) == 0 {
		return nil, nil
	}
	groupOf := func(u string, after bool) string {
		if after && moved[u] {
			return g.UUID
		}
		if n := t.node(u); n != nil {
			return n.Group
		}
		return ""
	}
	var split []string
	for _, in := range t.st.Instances {
		if len(in.SecondaryNodes) == 0 {
			continue
		}
		nodes := append([]string{in.PrimaryNode}, in.SecondaryNodes...)
		touched := false
		for _, u := range nodes {
			touched = touched || moved[u]
		}
		if !touched {
			continue
		}
		splitAfter, splitBefore := false, false
		for _, u := range nodes[1:] {
			splitAfter = splitAfter || groupOf(u, true) != groupOf(in.PrimaryNode, true)
			splitBefore = splitBefore || groupOf(u, false) != groupOf(in.PrimaryNode, false)
		}
		if splitAfter && !splitBefore {
			split = append(split, in.Name)
		}
	}
	if len(split) > 0 {
		sort.Strings(split)
		msg := "moving these nodes would split instances across groups: " + strings.Join(split, ", ")
		if !o.Force {
			return nil, errf(CodeState, "nodes", "%s; use force to move them anyway", msg)
		}
		t.logf(msg + " (forced)")
	}
	uuids := make([]string, 0, len(moved))
	for u := range moved {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	for _, u := range uuids {
		t.nodeRW(u).Group = g.UUID
	}
	return nil, nil
}

// OpClusterRedistConf is Ganeti's redistribution of the configuration
// files to the nodes. gnt's configuration is replicated by Raft among the
// master candidates and read from them by the other nodes, so there is
// nothing to push: the opcode changes nothing and its result says so.
type OpClusterRedistConf struct {
	OpCommon
}

// RedistConfResult is OP_CLUSTER_REDIST_CONF's result.
const RedistConfResult = "nothing to redistribute: gnt replicates the configuration by Raft to every master candidate, and the other nodes read it from them"

// Validate implements Opcode.
func (o *OpClusterRedistConf) Validate() *Error { return nil }

// Summary implements Opcode.
func (o *OpClusterRedistConf) Summary() string { return "CLUSTER_REDIST_CONF" }

// Locks implements Opcode: none; it reads and changes nothing.
func (o *OpClusterRedistConf) Locks(*State) []LockDecl { return nil }

func (o *OpClusterRedistConf) apply(*txn, string) (any, *Error) { return RedistConfResult, nil }

// OpInstanceQueryData asks for instances' detailed information
// (Ganeti's LUInstanceQueryData): the configuration and, unless static,
// each one's run state as its primary node's agent reports it. No
// instances means all of them. The job engine runs it.
type OpInstanceQueryData struct {
	OpCommon
	Instances  []string `json:"instances"`
	Static     bool     `json:"static,omitempty"`
	UseLocking bool     `json:"use_locking,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceQueryData) Validate() *Error {
	if len(o.Instances) > MaxQueryDataInstances {
		return errf(CodeInval, "instances", "instances names %d instances; at most %d", len(o.Instances), MaxQueryDataInstances)
	}
	for _, n := range o.Instances {
		if e := ValidateHostname("instances", n); e != nil {
			return e
		}
	}
	return nil
}

// Summary implements Opcode.
func (o *OpInstanceQueryData) Summary() string {
	return "INSTANCE_QUERY_DATA(" + strings.Join(o.Instances, ",") + ")"
}

// Locks implements Opcode: with use_locking the instances shared, else
// none (Ganeti's default).
func (o *OpInstanceQueryData) Locks(s *State) []LockDecl {
	if !o.UseLocking {
		return nil
	}
	names := make([]string, 0, len(o.Instances))
	for _, ref := range o.Instances {
		if i := s.LookupInstance(ref); i != nil {
			names = append(names, i.Name)
		} else {
			names = append(names, ref)
		}
	}
	d := LockDecl{Level: LockInstance, Names: names}
	if len(o.Instances) == 0 {
		d.Names = nil
	}
	return []LockDecl{bgl(false), d}
}

// OpInstanceMultiAlloc is the last job of a multi-allocation (POST
// /2/instances-multi-alloc): the API submits one creation job per
// instance and then this one, all in one submission (consecutive ids).
// The job engine answers Ganeti's result, {"jobs": [[true, id], ...],
// "allocatable": [...], "failed": [...]}, from the creation jobs just
// before its own, which it checks are those of InstanceNames in order.
// gnt places each instance in its own creation job, so every instance
// is listed allocatable; one that fits nowhere fails its job.
type OpInstanceMultiAlloc struct {
	OpCommon
	InstanceNames []string `json:"instance_names"`
	// Failed (gnt) names the instances of the multi-allocation that the
	// allocator could not place, which got no creation job (Ganeti's
	// result's "failed").
	Failed []string `json:"failed,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceMultiAlloc) Validate() *Error {
	if len(o.InstanceNames)+len(o.Failed) == 0 {
		return errf(CodeInval, "instance_names", "instance_names must name at least one instance")
	}
	if len(o.InstanceNames)+len(o.Failed) >= MaxJobsPerSubmission {
		return errf(CodeInval, "instance_names", "instance_names and failed name %d instances; at most %d", len(o.InstanceNames)+len(o.Failed), MaxJobsPerSubmission-1)
	}
	seen := map[string]bool{}
	for _, l := range []struct {
		field string
		names []string
	}{{"instance_names", o.InstanceNames}, {"failed", o.Failed}} {
		for _, n := range l.names {
			if e := ValidateHostname(l.field, n); e != nil {
				return e
			}
			if seen[n] {
				return errf(CodeInval, l.field, "instance %q is named twice", n)
			}
			seen[n] = true
		}
	}
	return nil
}

// Summary implements Opcode.
func (o *OpInstanceMultiAlloc) Summary() string {
	return "INSTANCE_MULTI_ALLOC(" + strings.Join(o.InstanceNames, ",") + ")"
}

// Locks implements Opcode: none; it reads the job queue only.
func (o *OpInstanceMultiAlloc) Locks(*State) []LockDecl { return nil }

// OpInstanceGrowDisk grows one disk of an instance (Ganeti's
// LUInstanceGrowDisk): the configured size first (the nodes' room is
// checked then), then the storage on every node of the instance. amount
// is MiB to add, or with absolute the new size; an absolute size equal
// to the configured one grows only the storage (a retry after a node
// failed). Unless wait_for_sync is false, the resync of a drbd disk is
// waited for. The job engine runs it.
type OpInstanceGrowDisk struct {
	OpCommon
	OpInstanceRef
	Disk        int   `json:"disk"`
	Amount      int64 `json:"amount"`
	Absolute    bool  `json:"absolute,omitempty"`
	WaitForSync *bool `json:"wait_for_sync,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceGrowDisk) Validate() *Error {
	if e := o.validateRef(); e != nil {
		return e
	}
	if o.Disk < 0 || o.Disk >= MaxDisksPerInstance {
		return errf(CodeInval, "disk", "disk index %d is not from 0 to %d", o.Disk, MaxDisksPerInstance-1)
	}
	if o.Amount <= 0 || o.Amount > MaxDiskSizeMiB {
		return errf(CodeInval, "amount", "amount is %d MiB; it must be from 1 to %d", o.Amount, int64(MaxDiskSizeMiB))
	}
	return nil
}

// Summary implements Opcode.
func (o *OpInstanceGrowDisk) Summary() string { return "INSTANCE_GROW_DISK(" + o.Ref() + ")" }

// Locks implements Opcode.
func (o *OpInstanceGrowDisk) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }

// OpInstanceActivateDisks makes an instance's disks available on its
// nodes (Ganeti's LUInstanceActivateDisks): each disk is checked present
// on every node of the instance and attached to it on the primary; the
// result is Ganeti's list of [node, disk name, path] on the primary.
// ignore_size is accepted: gnt's agents keep the configured size; with
// wait_for_sync the job waits for the resync of drbd disks. The job
// engine runs it.
type OpInstanceActivateDisks struct {
	OpCommon
	OpInstanceRef
	IgnoreSize  bool  `json:"ignore_size,omitempty"`
	WaitForSync *bool `json:"wait_for_sync,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceActivateDisks) Validate() *Error { return o.validateRef() }

// Summary implements Opcode.
func (o *OpInstanceActivateDisks) Summary() string {
	return "INSTANCE_ACTIVATE_DISKS(" + o.Ref() + ")"
}

// Locks implements Opcode.
func (o *OpInstanceActivateDisks) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }

// OpInstanceDeactivateDisks detaches a stopped instance's disks on its
// primary (Ganeti's LUInstanceDeactivateDisks); the storage stays. A
// running instance's disks are not deactivated, force or not: the guest
// uses them (Ganeti refuses too unless forced, and forcing pulls them
// from under a running guest, which gnt does not do).
type OpInstanceDeactivateDisks struct {
	OpCommon
	OpInstanceRef
	Force bool `json:"force,omitempty"`
}

// Validate implements Opcode.
func (o *OpInstanceDeactivateDisks) Validate() *Error { return o.validateRef() }

// Summary implements Opcode.
func (o *OpInstanceDeactivateDisks) Summary() string {
	return "INSTANCE_DEACTIVATE_DISKS(" + o.Ref() + ")"
}

// Locks implements Opcode.
func (o *OpInstanceDeactivateDisks) Locks(s *State) []LockDecl { return instanceLocks(s, o.Ref()) }
