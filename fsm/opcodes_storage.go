package fsm

import (
	"fmt"
	"strings"
)

// Storage units (Ganeti's seed 003 "Storage units modelling"): a node's
// agent reports its units of each storage type; these opcodes query,
// modify and repair them on the node. None changes the configuration:
// a unit's allocatable flag is LVM's own (pvchange -x), as in Ganeti, so
// LVM itself stops allocating on a physical volume that is not
// allocatable.

// Storage types gnt serves.
const (
	StorageFile  = "file"
	StorageLVMPV = "lvm-pv"
	StorageLVMVG = "lvm-vg"
)

// StorageTypes are the storage types gnt serves, in Ganeti's spelling.
var StorageTypes = []string{StorageFile, StorageLVMPV, StorageLVMVG}

// unservedStorage are Ganeti's other storage types, refused by name.
var unservedStorage = map[string]string{
	"diskless":   "a diskless instance has no storage units",
	"blockdev":   "gnt has no blockdev disk template",
	"rados":      "gnt has no rbd disk template",
	"ext":        "gnt has no ext disk template",
	"sharedfile": "the shared file storage directory is listed under type file",
	"gluster":    "gnt has no gluster disk template",
}

// StorageFields are the fields of a storage unit (Ganeti's SF_*): node,
// type, name, size, used, free (MiB) and allocatable.
var StorageFields = []string{"node", "type", "name", "size", "used", "free", "allocatable"}

// Bounds of the storage opcodes.
const (
	MaxStorageNodes = 1024
	MaxStorageName  = 255
)

// ValidateStorageType refuses a storage type gnt does not serve, naming
// why for Ganeti's other types.
func ValidateStorageType(field, t string) *Error {
	for _, k := range StorageTypes {
		if t == k {
			return nil
		}
	}
	if why, ok := unservedStorage[t]; ok {
		return errf(CodeInval, field, "storage type %q is not supported: %s (supported: %s)", t, why, strings.Join(StorageTypes, ", "))
	}
	return errf(CodeInval, field, "unknown storage type %q (supported: %s)", t, strings.Join(StorageTypes, ", "))
}

// ValidateStorageFields refuses an empty, repeated or unknown field list.
func ValidateStorageFields(field string, fs []string) *Error {
	if len(fs) == 0 {
		return errf(CodeInval, field, "%s must name at least one of %s", field, strings.Join(StorageFields, ","))
	}
	if len(fs) > 2*len(StorageFields) {
		return errf(CodeInval, field, "%s has %d fields, at most %d", field, len(fs), 2*len(StorageFields))
	}
	for _, f := range fs {
		known := false
		for _, k := range StorageFields {
			known = known || f == k
		}
		if !known {
			return errf(CodeInval, field, "unknown storage field %q (known: %s)", f, strings.Join(StorageFields, ","))
		}
	}
	return nil
}

func validateStorageName(name string) *Error {
	if name == "" || len(name) > MaxStorageName {
		return errf(CodeInval, "name", "name must be 1 to %d characters, got %d", MaxStorageName, len(name))
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return errf(CodeInval, "name", "name %q has a control, space or non-ASCII byte at %d", name, i)
		}
	}
	return nil
}

// OpNodeQueryStorage lists storage units of one type on nodes (Ganeti's
// OpNodeQueryStorage; GET /2/nodes/[n]/storage): the result is one row
// per unit, the values of output_fields in their order. With name, only
// the unit of that name. The leader's executor asks each node's agent.
type OpNodeQueryStorage struct {
	OpCommon
	Nodes        []string `json:"nodes"`
	StorageType  string   `json:"storage_type"`
	OutputFields []string `json:"output_fields"`
	Name         string   `json:"name,omitempty"`
}

// Validate implements Opcode.
func (o *OpNodeQueryStorage) Validate() *Error {
	if len(o.Nodes) > MaxStorageNodes {
		return errf(CodeInval, "nodes", "at most %d nodes, got %d", MaxStorageNodes, len(o.Nodes))
	}
	for _, n := range o.Nodes {
		if e := ValidateHostname("nodes", n); e != nil {
			return e
		}
	}
	if e := ValidateStorageType("storage_type", o.StorageType); e != nil {
		return e
	}
	if e := ValidateStorageFields("output_fields", o.OutputFields); e != nil {
		return e
	}
	if o.Name != "" {
		return validateStorageName(o.Name)
	}
	return nil
}

// Summary implements Opcode: Ganeti's NODE_QUERY_STORAGE.
func (o *OpNodeQueryStorage) Summary() string {
	return "NODE_QUERY_STORAGE(" + strings.Join(o.Nodes, ",") + ")"
}

// Locks implements Opcode: the nodes shared (all of them when none is
// named), the BGL shared.
func (o *OpNodeQueryStorage) Locks(s *State) []LockDecl {
	d := LockDecl{Level: LockNode}
	for _, n := range o.Nodes {
		d.Names = append(d.Names, nodeLockName(s, n))
	}
	return []LockDecl{bgl(false), d}
}

// StorageChanges are the changes OP_NODE_MODIFY_STORAGE makes: only
// allocatable, of an lvm-pv unit (as in Ganeti).
type StorageChanges struct {
	Allocatable *bool `json:"allocatable"`
}

// OpNodeModifyStorage changes a storage unit on a node (Ganeti's
// OpNodeModifyStorage; PUT /2/nodes/[n]/storage/modify): the allocatable
// flag of an LVM physical volume, which the node's agent sets with
// pvchange -x, after checking the volume exists.
type OpNodeModifyStorage struct {
	OpCommon
	NodeName    string         `json:"node_name"`
	StorageType string         `json:"storage_type"`
	Name        string         `json:"name"`
	Changes     StorageChanges `json:"changes"`
}

// Validate implements Opcode.
func (o *OpNodeModifyStorage) Validate() *Error {
	if e := ValidateHostname("node_name", o.NodeName); e != nil {
		return e
	}
	if e := ValidateStorageType("storage_type", o.StorageType); e != nil {
		return e
	}
	if o.StorageType != StorageLVMPV {
		return errf(CodeInval, "storage_type", "storage type %s has no modifiable fields; only %s units have allocatable", o.StorageType, StorageLVMPV)
	}
	if e := validateStorageName(o.Name); e != nil {
		return e
	}
	if o.Changes.Allocatable == nil {
		return errf(CodeInval, "changes", "changes must set allocatable, the only modifiable field of %s", StorageLVMPV)
	}
	return nil
}

// Summary implements Opcode.
func (o *OpNodeModifyStorage) Summary() string {
	return fmt.Sprintf("NODE_MODIFY_STORAGE(%s)", o.NodeName)
}

// Locks implements Opcode: the node exclusively.
func (o *OpNodeModifyStorage) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNode, Names: []string{nodeLockName(s, o.NodeName)}, Exclusive: true}}
}

// OpRepairNodeStorage repairs a storage unit on a node (Ganeti's
// OpRepairNodeStorage; PUT /2/nodes/[n]/storage/repair): for lvm-vg only,
// vgreduce --removemissing on the node, dropping missing physical volumes
// from the volume group. ignore_consistency is Ganeti's and accepted; gnt
// checks no instance disks before the repair.
type OpRepairNodeStorage struct {
	OpCommon
	NodeName          string `json:"node_name"`
	StorageType       string `json:"storage_type"`
	Name              string `json:"name"`
	IgnoreConsistency bool   `json:"ignore_consistency,omitempty"`
}

// Validate implements Opcode.
func (o *OpRepairNodeStorage) Validate() *Error {
	if e := ValidateHostname("node_name", o.NodeName); e != nil {
		return e
	}
	if e := ValidateStorageType("storage_type", o.StorageType); e != nil {
		return e
	}
	if o.StorageType != StorageLVMVG {
		return errf(CodeInval, "storage_type", "storage units of type %s cannot be repaired; only %s can", o.StorageType, StorageLVMVG)
	}
	return validateStorageName(o.Name)
}

// Summary implements Opcode.
func (o *OpRepairNodeStorage) Summary() string {
	return fmt.Sprintf("REPAIR_NODE_STORAGE(%s)", o.NodeName)
}

// Locks implements Opcode: the node exclusively.
func (o *OpRepairNodeStorage) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNode, Names: []string{nodeLockName(s, o.NodeName)}, Exclusive: true}}
}
