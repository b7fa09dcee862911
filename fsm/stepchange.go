package fsm

import (
	"fmt"
	"net"
)

// StepChange is a configuration change made by a step of an executor
// opcode (an instance's record after its disks were created, its new
// primary after a failover...). It is applied in one transaction with the
// step's record (JobUpdate.Changes), so the configuration and the job's
// progress never disagree: after a leader change the step is either
// recorded with its change, or neither. Exactly one field is set.
type StepChange struct {
	InstancePut     *InstancePut     `json:"instance_put,omitempty"`
	InstanceRemove  *InstanceRemove  `json:"instance_remove,omitempty"`
	NodePowered     *NodePowered     `json:"node_powered,omitempty"`
	NodeOffline     *NodeOffline     `json:"node_offline,omitempty"`
	ReservationMove *ReservationMove `json:"reservation_move,omitempty"`
}

// InstancePut stores an instance record: a new one (ExpectSerial 0) or a
// replacement of the one with the same UUID whose serial_no is still
// ExpectSerial (so a change computed from an older record is refused,
// never lost).
type InstancePut struct {
	Instance     Instance `json:"instance"`
	ExpectSerial int64    `json:"expect_serial"`
}

// InstanceRemove removes an instance whose serial_no is ExpectSerial.
type InstanceRemove struct {
	UUID         string `json:"uuid"`
	ExpectSerial int64  `json:"expect_serial"`
}

// ReservationMove moves a forthcoming instance (a reservation) to other
// nodes of its node group to make room for another instance: a change of
// its record only, as a reservation has nothing on its nodes. It is
// refused, with the rest of its step, unless the instance is still the
// forthcoming record the step read (serial_no ExpectSerial), no running
// opcode of another job holds its lock, and it fits its new nodes as any
// placement must: they take instances (online, not drained, vm_capable),
// belong to its group, follow its template's rules, and have the memory
// and disk (see InstancePut).
type ReservationMove struct {
	UUID           string   `json:"uuid"`
	ExpectSerial   int64    `json:"expect_serial"`
	PrimaryNode    string   `json:"primary_node"`
	SecondaryNodes []string `json:"secondary_nodes"`
}

func (m *ReservationMove) apply(t *txn) *Error {
	old := t.instanceRW(m.UUID)
	if old == nil {
		return errf(CodeNoEnt, "uuid", "reservation %s no longer exists", m.UUID)
	}
	name := old.Name
	if name == "" {
		name = old.UUID
	}
	if !old.Forthcoming {
		return errf(CodeState, "uuid", "instance %s is no longer forthcoming: only reservations are moved to make room", name)
	}
	if old.SerialNo != m.ExpectSerial {
		return errf(CodeState, "serial_no", "reservation %s changed since the step read it (serial_no %d, expected %d)", name, old.SerialNo, m.ExpectSerial)
	}
	if j := t.st.InstanceLockHolder(old.Name, old.UUID, t.job); j != 0 {
		return errf(CodeState, "uuid", "reservation %s is locked by job %d and cannot be moved", name, j)
	}
	if m.PrimaryNode == "" {
		return errf(CodeInval, "primary_node", "moving reservation %s needs a primary node", name)
	}
	from := t.node(old.PrimaryNode)
	if from == nil {
		return errf(CodeState, "uuid", "reservation %s has no primary node to move from", name)
	}
	in := *old.clone()
	in.PrimaryNode, in.SecondaryNodes = m.PrimaryNode, cloneStrings(m.SecondaryNodes)
	if e := t.checkInstanceNodes(&in); e != nil {
		return e
	}
	for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
		n := t.node(u)
		switch {
		case n.Group != from.Group:
			return errf(CodeInval, "primary_node", "reservation %s stays in its node group: node %s is in another", name, n.Name)
		case n.Offline, n.Drained, !n.VMCapable:
			return errf(CodeState, "primary_node", "node %s takes no instances (offline, drained or not vm_capable)", n.Name)
		}
	}
	if e := t.checkInstanceFits(&in, old); e != nil {
		return e
	}
	*old = in
	return nil
}

// Disk templates.
const (
	DTPlain    = "plain"
	DTDrbd     = "drbd"
	DTDiskless = "diskless"
	// DTFile disks are files in the primary node's file storage
	// directory; DTSharedFile disks are files in a directory every node
	// shares (Ganeti's file and sharedfile). Both have no secondary.
	DTFile       = "file"
	DTSharedFile = "sharedfile"
)

// Instance admin states.
const (
	AdminUp      = "up"
	AdminDown    = "down"
	AdminOffline = "offline"
)

func (c StepChange) apply(t *txn) *Error {
	set := 0
	for _, p := range []bool{c.InstancePut != nil, c.InstanceRemove != nil, c.NodePowered != nil, c.NodeOffline != nil, c.ReservationMove != nil} {
		if p {
			set++
		}
	}
	switch {
	case set != 1:
	case c.InstancePut != nil:
		return c.InstancePut.apply(t)
	case c.InstanceRemove != nil:
		return c.InstanceRemove.apply(t)
	case c.NodePowered != nil:
		return c.NodePowered.apply(t)
	case c.NodeOffline != nil:
		return c.NodeOffline.apply(t)
	case c.ReservationMove != nil:
		return c.ReservationMove.apply(t)
	}
	return errf(CodeInval, "changes", "a step change must set exactly one of instance_put, instance_remove, node_powered, node_offline, reservation_move")
}

func (p *InstancePut) apply(t *txn) *Error {
	in := p.Instance
	if in.UUID == "" {
		return errf(CodeInval, "instance.uuid", "instance record without a UUID")
	}
	// A reservation may be unnamed (seed 001: only its UUID is
	// mandatory); it is named later by a rename through its UUID.
	if in.Name != "" || !in.Forthcoming {
		if e := ValidateHostname("instance.name", in.Name); e != nil {
			return e
		}
	}
	if e := in.ValidateBounds(); e != nil {
		return e
	}
	old := t.instanceRW(in.UUID)
	if old == nil && p.ExpectSerial != 0 {
		return errf(CodeNoEnt, "instance.uuid", "instance %s no longer exists", in.Name)
	}
	if old != nil && old.SerialNo != p.ExpectSerial {
		return errf(CodeState, "instance.serial_no", "instance %s changed since the step read it (serial_no %d, expected %d)", in.Name, old.SerialNo, p.ExpectSerial)
	}
	if other := t.lookupInstance(in.Name); in.Name != "" && other != nil && other.UUID != in.UUID {
		return errf(CodeExists, "instance.name", "instance name %s is already used by instance %s", in.Name, other.UUID)
	}
	if e := t.checkInstanceNodes(&in); e != nil {
		return e
	}
	in.DiskParams = nil // the agents' copy only
	if e := t.resolveNICNetworks(&in); e != nil {
		return e
	}
	if e := t.checkInstanceNICs(&in); e != nil {
		return e
	}
	if e := t.checkInstanceFits(&in, old); e != nil {
		return e
	}
	switch in.AdminState {
	case AdminUp, AdminDown, AdminOffline:
	default:
		return errf(CodeInval, "instance.admin_state", "admin_state %q is not up, down or offline", in.AdminState)
	}
	if in.MemoryMiB < 0 || in.VCPUs < 0 {
		return errf(CodeInval, "instance.memory", "memory and vcpus must not be negative")
	}
	for k := range in.HVParams {
		if IsHVGlobal(k) {
			return errf(CodeInval, "instance.hvparams."+k, "hypervisor parameter %s is global: only the cluster sets it", k)
		}
	}
	if e := t.setNetworkPort(&in, old); e != nil {
		return e
	}
	if e := t.setDRBDIDs(&in, old); e != nil {
		return e
	}
	rec := in.clone()
	if old != nil {
		rec.SerialNo, rec.CTime = old.SerialNo, old.CTime
	} else {
		rec.SerialNo, rec.CTime = 0, secs(t.now)
	}
	if rec.Tags == nil {
		rec.Tags = []string{}
	}
	t.insts[in.UUID] = rec
	return nil
}

// checkInstanceNodes applies Ganeti's template rules to an instance's
// nodes: plain and diskless have a primary only, drbd a primary and one
// other secondary; every node exists. A forthcoming instance may leave its
// nodes unset until it is created for real.
func (t *txn) checkInstanceNodes(in *Instance) *Error {
	if in.PrimaryNode == "" && in.Forthcoming && len(in.SecondaryNodes) == 0 {
		return nil
	}
	if t.node(in.PrimaryNode) == nil {
		return errf(CodeNoEnt, "instance.primary_node", "primary node %q does not exist", in.PrimaryNode)
	}
	want := 0
	switch in.DiskTemplate {
	case DTPlain, DTDiskless, DTFile, DTSharedFile:
	case DTDrbd:
		want = 1
	default:
		return errf(CodeInval, "instance.disk_template", "disk template %q is not plain, drbd, file, sharedfile or diskless", in.DiskTemplate)
	}
	if len(in.SecondaryNodes) != want {
		return errf(CodeInval, "instance.secondary_nodes", "disk template %s needs %d secondary node(s), got %d", in.DiskTemplate, want, len(in.SecondaryNodes))
	}
	for _, s := range in.SecondaryNodes {
		if s == in.PrimaryNode {
			return errf(CodeInval, "instance.secondary_nodes", "the secondary node must differ from the primary")
		}
		if t.node(s) == nil {
			return errf(CodeNoEnt, "instance.secondary_nodes", "secondary node %q does not exist", s)
		}
	}
	hv := InstanceHypervisor(t.clusterRO(), in)
	if e := CheckNodeHypervisor("instance.primary_node", t.node(in.PrimaryNode), in.Name, hv); e != nil {
		return e
	}
	for _, s := range in.SecondaryNodes {
		if e := CheckNodeHypervisor("instance.secondary_nodes", t.node(s), in.Name, hv); e != nil {
			return e
		}
	}
	return nil
}

// checkInstanceNICs refuses malformed NIC addresses and an address another
// instance uses on the same link.
func (t *txn) checkInstanceNICs(in *Instance) *Error {
	for k, n := range in.NICs {
		if n.IP == "" {
			continue
		}
		if net.ParseIP(n.IP) == nil {
			return errf(CodeInval, fmt.Sprintf("instance.nics.%d.ip", k), "NIC %d: %q is not an IP address", k, n.IP)
		}
		if owner := t.st.InstanceByIP(n.Link, n.IP); owner != nil && owner.UUID != in.UUID {
			if staged, ok := t.insts[owner.UUID]; !ok || staged != nil {
				return errf(CodeNotUnique, fmt.Sprintf("instance.nics.%d.ip", k), "IP %s is already used by instance %s", n.IP, owner.Name)
			}
		}
	}
	return nil
}

func (r *InstanceRemove) apply(t *txn) *Error {
	old := t.instanceRW(r.UUID)
	if old == nil {
		return errf(CodeNoEnt, "uuid", "instance %s does not exist", r.UUID)
	}
	if old.SerialNo != r.ExpectSerial {
		return errf(CodeState, "serial_no", "instance %s changed since the step read it (serial_no %d, expected %d)", old.Name, old.SerialNo, r.ExpectSerial)
	}
	t.insts[r.UUID] = nil
	return nil
}

// DRBDMetaMiB is the DRBD metadata each drbd disk takes besides its size,
// on both of its nodes (Ganeti's DRBD_META_SIZE).
const DRBDMetaMiB = 128

// instanceDiskMiB is the disk an instance takes on each of its nodes.
func instanceDiskMiB(i *Instance) int64 {
	var sum int64
	for _, d := range i.Disks {
		sum += d.SizeMiB
		if i.DiskTemplate == DTDrbd {
			sum += DRBDMetaMiB
		}
	}
	return sum
}

// InstanceUsage is what an instance takes of one node: memory on its
// primary, disk on each of its nodes (drbd metadata included). Real and
// forthcoming instances count alike.
func InstanceUsage(i *Instance, node string) (mem, disk int64) {
	if i == nil || node == "" {
		return 0, 0
	}
	if i.PrimaryNode == node {
		return i.MemoryMiB, instanceDiskMiB(i)
	}
	for _, s := range i.SecondaryNodes {
		if s == node {
			return 0, instanceDiskMiB(i)
		}
	}
	return 0, 0
}

// nodeUsed sums InstanceUsage on node u over the instances of the staged
// view but skip (a UUID). Only instances that name u count, so the base
// state's are read from the usage index's list of u's instances rather
// than from every instance; staged records are added, in place of their
// base record, whichever nodes they name.
func (t *txn) nodeUsed(u, skip string) (mem, disk int64) {
	if t.st.usage == nil { // a state built by hand, without its indexes
		return t.nodeUsedScan(u, skip)
	}
	add := func(i *Instance) {
		m, d := InstanceUsage(i, u)
		mem, disk = mem+m, disk+d
	}
	var onNode []string
	if n := t.st.usage[u]; n != nil {
		onNode = n.insts
	}
	for _, iu := range onNode {
		if _, staged := t.insts[iu]; !staged && iu != skip {
			add(t.st.Instances[iu])
		}
	}
	for iu, i := range t.insts {
		if iu != skip && i != nil {
			add(i)
		}
	}
	return mem, disk
}

// nodeUsedScan is nodeUsed reading every instance.
func (t *txn) nodeUsedScan(u, skip string) (mem, disk int64) {
	add := func(i *Instance) {
		m, d := InstanceUsage(i, u)
		mem, disk = mem+m, disk+d
	}
	for iu, i := range t.st.Instances {
		if s, staged := t.insts[iu]; staged {
			i = s
		}
		if iu != skip && i != nil {
			add(i)
		}
	}
	for iu, i := range t.insts {
		if _, base := t.st.Instances[iu]; !base && iu != skip && i != nil {
			add(i)
		}
	}
	return mem, disk
}

// checkInstanceFits refuses a record that needs more of one of its nodes
// than the old record did when the node cannot give it: real and
// forthcoming instances count alike, so a reservation always leaves room
// for its instance and concurrent creations never overcommit a node. A
// node whose totals are not known (0) is not checked.
func (t *txn) checkInstanceFits(in, old *Instance) *Error {
	for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
		n := t.node(u)
		if n == nil {
			continue
		}
		newMem, newDisk := InstanceUsage(in, u)
		oldMem, oldDisk := InstanceUsage(old, u)
		if newMem <= oldMem && newDisk <= oldDisk {
			continue
		}
		usedMem, usedDisk := t.nodeUsed(u, in.UUID)
		if tot := n.Resources.MemoryMiB; tot > 0 && newMem > oldMem && usedMem+newMem > tot {
			return errf(CodeNoRes, "instance.memory", "node %s has %d MiB of memory free, instance %s needs %d", n.Name, max(tot-usedMem, 0), in.Name, newMem)
		}
		if tot := n.Resources.DiskMiB; tot > 0 && newDisk > oldDisk && usedDisk+newDisk > tot {
			return errf(CodeNoRes, "instance.disks", "node %s has %d MiB of disk free, instance %s needs %d", n.Name, max(tot-usedDisk, 0), in.Name, newDisk)
		}
	}
	return nil
}
