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
	InstancePut    *InstancePut    `json:"instance_put,omitempty"`
	InstanceRemove *InstanceRemove `json:"instance_remove,omitempty"`
	NodePowered    *NodePowered    `json:"node_powered,omitempty"`
	NodeOffline    *NodeOffline    `json:"node_offline,omitempty"`
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

// Disk templates.
const (
	DTPlain    = "plain"
	DTDrbd     = "drbd"
	DTDiskless = "diskless"
)

// Instance admin states.
const (
	AdminUp      = "up"
	AdminDown    = "down"
	AdminOffline = "offline"
)

func (c StepChange) apply(t *txn) *Error {
	set := 0
	for _, p := range []bool{c.InstancePut != nil, c.InstanceRemove != nil, c.NodePowered != nil, c.NodeOffline != nil} {
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
	}
	return errf(CodeInval, "changes", "a step change must set exactly one of instance_put, instance_remove, node_powered, node_offline")
}

func (p *InstancePut) apply(t *txn) *Error {
	in := p.Instance
	if in.UUID == "" {
		return errf(CodeInval, "instance.uuid", "instance record without a UUID")
	}
	if e := ValidateHostname("instance.name", in.Name); e != nil {
		return e
	}
	old := t.instanceRW(in.UUID)
	if old == nil && p.ExpectSerial != 0 {
		return errf(CodeNoEnt, "instance.uuid", "instance %s no longer exists", in.Name)
	}
	if old != nil && old.SerialNo != p.ExpectSerial {
		return errf(CodeState, "instance.serial_no", "instance %s changed since the step read it (serial_no %d, expected %d)", in.Name, old.SerialNo, p.ExpectSerial)
	}
	if other := t.lookupInstance(in.Name); other != nil && other.UUID != in.UUID {
		return errf(CodeExists, "instance.name", "instance name %s is already used by instance %s", in.Name, other.UUID)
	}
	if e := t.checkInstanceNodes(&in); e != nil {
		return e
	}
	if e := t.checkInstanceNICs(&in); e != nil {
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
	case DTPlain, DTDiskless:
	case DTDrbd:
		want = 1
	default:
		return errf(CodeInval, "instance.disk_template", "disk template %q is not plain, drbd or diskless", in.DiskTemplate)
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
