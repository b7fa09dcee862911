package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Storage units in the state: what each node's agent last reported of
// its storage (seed 003 "Storage units modelling": file storage
// directories, LVM volume groups and physical volumes), recorded by the
// leader so that placement (jobs/alloc) reads real free space without
// asking anyone. Like liveness it is the state of the world, not of
// record: a report changes no serial number, and the leader writes one
// only when a unit appeared, went, changed its allocatable flag, or its
// size or free space moved beyond a small threshold, so an idle cluster
// writes nothing.
//
// Between two reports the configuration may add disks on the node; the
// state remembers how much disk the configuration counted on the node
// when the report was recorded (NodeStorage.DiskUsedMiB, from the usage
// index, derived deterministically at apply) so that placement can take
// what was added since off the reported free space.

// Limits of a storage report.
const (
	// MaxNodeStorageUnits bounds the units recorded per node.
	MaxNodeStorageUnits = 64
	// MaxStorageNameLen bounds a unit's name (a path or an LVM name)
	// and the directories and volume group a report names.
	MaxStorageNameLen = 256
	// MaxStorageMiB bounds a size (2^50 MiB, an exbibyte).
	MaxStorageMiB = 1 << 50
)

// StorageUnit is one storage unit of a node; sizes in MiB.
type StorageUnit struct {
	Type string `json:"type"`
	Name string `json:"name"`
	// VG is a physical volume's volume group ("" for other types, and
	// for a physical volume in no group).
	VG          string `json:"vg,omitempty"`
	SizeMiB     int64  `json:"size"`
	UsedMiB     int64  `json:"used"`
	FreeMiB     int64  `json:"free"`
	Allocatable bool   `json:"allocatable"`
}

// NodeStorage is a node's last recorded storage report.
type NodeStorage struct {
	// Reported is when the leader recorded it (Unix ns, the proposer's
	// clock).
	Reported int64 `json:"reported"`
	// DiskUsedMiB is the disk the configuration counted on the node
	// (NodeUse.DiskMiB) when the report was recorded.
	DiskUsedMiB int64 `json:"disk_used_mib"`
	// FileDir, SharedFileDir and VG are the node's file storage
	// directory, shared file storage directory and volume group for
	// instance disks, as its gntd is configured ("" when it has none):
	// the units placement reads for templates file, sharedfile and
	// plain (and drbd).
	FileDir       string        `json:"file_dir,omitempty"`
	SharedFileDir string        `json:"shared_file_dir,omitempty"`
	VG            string        `json:"vg,omitempty"`
	Units         []StorageUnit `json:"units"`
	// NoDRBD, when set, is why the node takes no drbd disks (no DRBD
	// kernel module or tools, or a driver without drbd disks), as its
	// agent says; "" when it may (or a driver simulates them).
	NoDRBD string `json:"no_drbd,omitempty"`
	// BootID is the node's boot id (Linux's
	// /proc/sys/kernel/random/boot_id) at its last report: a report with
	// another one means the node rebooted. "" when the node gave none.
	BootID string `json:"boot_id,omitempty"`
}

// Unit returns the node's unit of the given type and name, or nil.
func (n *NodeStorage) Unit(typ, name string) *StorageUnit {
	if n == nil || name == "" {
		return nil
	}
	for i := range n.Units {
		if n.Units[i].Type == typ && n.Units[i].Name == name {
			return &n.Units[i]
		}
	}
	return nil
}

// VGAllocatable is the free space of the node's volume group vg that new
// logical volumes may take: the free space of its allocatable physical
// volumes (a volume marked allocatable=no takes no new extents). When the
// node reported the group but none of its physical volumes, the group's
// own free space. ok is false when the node did not report the group.
func (n *NodeStorage) VGAllocatable(vg string) (free int64, ok bool) {
	g := n.Unit(StorageLVMVG, vg)
	if g == nil {
		return 0, false
	}
	pvs := 0
	for _, u := range n.Units {
		if u.Type == StorageLVMPV && u.VG == vg {
			pvs++
			if u.Allocatable {
				free += u.FreeMiB
			}
		}
	}
	if pvs == 0 {
		return g.FreeMiB, true
	}
	return min(free, g.FreeMiB), true
}

// NodeStorageReport records a node's storage units as its agent reported
// them to the leader, replacing what the state held of that node. It is
// fenced by the executor epoch like every write of a leader service.
// Since LogVersion 22.
type NodeStorageReport struct {
	Now           int64         `json:"now"`
	Epoch         uint64        `json:"epoch"`
	Node          string        `json:"node"` // name or UUID
	FileDir       string        `json:"file_dir,omitempty"`
	SharedFileDir string        `json:"shared_file_dir,omitempty"`
	VG            string        `json:"vg,omitempty"`
	Units         []StorageUnit `json:"units"`
	// NoDRBD is NodeStorage.NoDRBD. Since LogVersion 28.
	NoDRBD string `json:"no_drbd,omitempty"`
	// BootID is NodeStorage.BootID. A report whose boot id differs from
	// the one recorded before (both given) says the node rebooted: it
	// queues, as Ganeti's watcher does, a job activating the disks of
	// each running drbd instance the node is the secondary of
	// (RebootedSecondaryJobs), whose devices the reboot took down; while
	// the node is offline or dead, or the queue is full, it queues nothing
	// and keeps the old boot id, for the next report to try again. A
	// report without one keeps the recorded one. Since LogVersion 35.
	BootID string `json:"boot_id,omitempty"`
}

// CommandType implements Command.
func (NodeStorageReport) CommandType() CommandType { return CmdNodeStorage }

// CheckStorageName refuses a storage name (a unit's name, a directory, a
// volume group) that is empty, longer than MaxStorageNameLen or holds a
// byte outside printable ASCII.
func CheckStorageName(field, s string) *Error {
	if s == "" || len(s) > MaxStorageNameLen {
		return errf(CodeInval, field, "%s %.64q must be 1 to %d characters, got %d", field, s, MaxStorageNameLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return errf(CodeInval, field, "%s %.64q has byte %d at %d; only printable ASCII is allowed", field, s, s[i], i)
		}
	}
	return nil
}

// CheckStorageUnits validates a node's storage units: at most
// MaxNodeStorageUnits, known types, bounded names, sizes from 0 to
// MaxStorageMiB with used and free within the size, no unit twice.
func CheckStorageUnits(units []StorageUnit) *Error {
	if len(units) > MaxNodeStorageUnits {
		return errf(CodeInval, "units", "%d storage units reported; at most %d are kept per node (the first over the limit: %s %.64q)",
			len(units), MaxNodeStorageUnits, units[MaxNodeStorageUnits].Type, units[MaxNodeStorageUnits].Name)
	}
	seen := make(map[[2]string]bool, len(units))
	for i, u := range units {
		switch u.Type {
		case StorageFile, StorageLVMVG, StorageLVMPV:
		default:
			return errf(CodeInval, "units", "unit %d: storage type %.32q is not %s, %s or %s", i, u.Type, StorageFile, StorageLVMVG, StorageLVMPV)
		}
		if e := CheckStorageName(fmt.Sprintf("unit %d name", i), u.Name); e != nil {
			return e
		}
		if u.VG != "" {
			if u.Type != StorageLVMPV {
				return errf(CodeInval, "units", "%s %s: only a physical volume names a volume group", u.Type, u.Name)
			}
			if e := CheckStorageName(u.Name+" vg", u.VG); e != nil {
				return e
			}
		}
		if u.SizeMiB < 0 || u.SizeMiB > MaxStorageMiB || u.FreeMiB < 0 || u.FreeMiB > u.SizeMiB || u.UsedMiB < 0 || u.UsedMiB > u.SizeMiB {
			return errf(CodeInval, "units", "%s %s: size %d, used %d, free %d MiB: want 0 <= used, free <= size <= %d",
				u.Type, u.Name, u.SizeMiB, u.UsedMiB, u.FreeMiB, int64(MaxStorageMiB))
		}
		k := [2]string{u.Type, u.Name}
		if seen[k] {
			return errf(CodeInval, "units", "%s %s is reported twice", u.Type, u.Name)
		}
		seen[k] = true
	}
	return nil
}

// CheckNodeStorage validates a NodeStorageReport against the state
// without applying it; Apply runs the same checks.
func (s *State) CheckNodeStorage(c *NodeStorageReport) *Error {
	if e := s.checkLeaderWrite("a storage report", c.Epoch); e != nil {
		return e
	}
	if c.Now <= 0 {
		return errf(CodeInval, "now", "now must be a positive time in nanoseconds, got %d", c.Now)
	}
	if s.LookupNode(c.Node) == nil {
		return errf(CodeNoEnt, "node", "node %q is not in the configuration", c.Node)
	}
	for _, d := range []struct{ field, v string }{{"file_dir", c.FileDir}, {"shared_file_dir", c.SharedFileDir}, {"vg", c.VG}} {
		if d.v != "" {
			if e := CheckStorageName(d.field, d.v); e != nil {
				return e
			}
		}
	}
	if len(c.NoDRBD) > MaxNoDRBDLen {
		return errf(CodeInval, "no_drbd", "no_drbd has %d bytes, at most %d", len(c.NoDRBD), MaxNoDRBDLen)
	}
	if c.BootID != "" {
		if e := CheckStorageName("boot_id", c.BootID); e != nil {
			return e
		}
		if len(c.BootID) > MaxBootIDLen {
			return errf(CodeInval, "boot_id", "boot_id has %d bytes, at most %d", len(c.BootID), MaxBootIDLen)
		}
	}
	return CheckStorageUnits(c.Units)
}

func (s *State) applyNodeStorage(c *NodeStorageReport) Response {
	if e := s.CheckNodeStorage(c); e != nil {
		return Response{Err: e}
	}
	n := s.LookupNode(c.Node)
	used := int64(0)
	if u, ok := s.Usage(); ok {
		used = u.Node(n.UUID).DiskMiB
	} else {
		used = s.diskUse(n.UUID)
	}
	// The node rebooted: activate the disks its reboot took down. A
	// report without a boot id keeps the one recorded (the node could not
	// read it this time). While the node still counts dead (its gntd
	// answers the leader before gossip says it is alive again: the job
	// would fail on it), or with the queue full, the old boot id is kept,
	// so that the next report tries again.
	prev, bootID, jobs := n.Storage, c.BootID, []*Job(nil)
	if prev != nil && bootID == "" {
		bootID = prev.BootID
	}
	if prev != nil && prev.BootID != "" && c.BootID != "" && prev.BootID != c.BootID {
		specs := s.RebootedSecondaryJobs(n.UUID, c.BootID, c.Now)
		if n.Offline || n.Liveness == LivenessDead || len(specs) > 0 && s.queueFull(len(specs)) != nil {
			bootID = prev.BootID
		} else {
			ts := TimestampFromNanos(c.Now)
			first := s.NextJobID
			for _, spec := range specs {
				// A job the state refuses is left out rather than
				// refusing the node's report (and every later one).
				if job, _, e := s.newJob(spec, first+int64(len(jobs)), first, ts); e == nil {
					jobs = append(jobs, job)
				}
			}
		}
	}
	// Stored objects are never changed in place (Frozen relies on it).
	w := n.clone()
	w.Storage = &NodeStorage{
		Reported: c.Now, DiskUsedMiB: used, FileDir: c.FileDir, SharedFileDir: c.SharedFileDir, VG: c.VG, NoDRBD: c.NoDRBD,
		Units: append([]StorageUnit{}, c.Units...), BootID: bootID,
	}
	s.Nodes[w.UUID] = w
	r := Response{}
	for _, job := range jobs {
		s.queue(job)
		r.JobIDs = append(r.JobIDs, job.ID)
	}
	return r
}

// RebootedSecondaryJobs are the jobs a reboot of node (a UUID) into
// boot id bootID calls for, Ganeti's watcher's: one
// OP_INSTANCE_ACTIVATE_DISKS per drbd instance that is configured up
// (its disks active) and has node as its secondary, by instance name,
// with the reason source WatcherReasonSource and op UUIDs derived from
// node, boot id and instance. Stopped instances are left: their disks are
// set up when they next start; so are those whose primary is offline or
// dead (the job could only fail: a failover, or their start when the
// primary is back, sets the disks up).
func (s *State) RebootedSecondaryJobs(node, bootID string, now int64) []JobSpec {
	var ins []*Instance
	for _, in := range s.Instances {
		if in.DiskTemplate != DTDrbd || in.AdminState != AdminUp || in.Forthcoming || !slices.Contains(in.SecondaryNodes, node) {
			continue
		}
		if p := s.Nodes[in.PrimaryNode]; p == nil || p.Offline || p.Liveness == LivenessDead {
			continue
		}
		ins = append(ins, in)
	}
	sort.Slice(ins, func(i, j int) bool { return ins[i].Name < ins[j].Name })
	name := node
	if n := s.Nodes[node]; n != nil {
		name = n.Name
	}
	out := make([]JobSpec, 0, len(ins))
	for _, in := range ins {
		op, _ := json.Marshal(map[string]any{"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS", "instance_name": in.Name,
			"reason": []ReasonEntry{{Source: WatcherReasonSource, Text: "secondary node " + name + " rebooted", TimeNS: now}}})
		out = append(out, JobSpec{Ops: []json.RawMessage{op}, UUIDs: []string{DeriveUUID("reboot", node, bootID, in.UUID)}})
	}
	return out
}

// DeriveUUID makes a UUID-formatted id from the given parts (a digest of
// them joined by NUL bytes): what apply or a planner creates gets an id
// without drawing random numbers, the same on every replica.
func DeriveUUID(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// WatcherReasonSource is the reason source of the jobs a node's reboot
// queues (Ganeti's watcher's).
const WatcherReasonSource = "gnt:watcher"

// diskUse counts the disk the instances use of a node as the usage index
// does, for a state without its indexes.
func (s *State) diskUse(node string) int64 {
	var used int64
	for _, i := range s.Instances {
		d := instanceDiskMiB(i)
		if i.PrimaryNode == node {
			used += d
		}
		for _, sec := range i.SecondaryNodes {
			if sec == node {
				used += d
			}
		}
	}
	return used
}

// Space is the room a node offers to new disks of one template, from its
// last storage report.
type Space struct {
	// Unit names the storage unit ("lvm-vg xenvg", "file /srv/disks").
	Unit string
	// Total is the unit's size; Free what new disks may take now: the
	// reported free space (of a volume group, that of its allocatable
	// physical volumes) less the disk the configuration added to the
	// node since the report. Both 0 when the node has no such unit.
	Total, Free int64
	// Missing says the report names the unit but the node does not have
	// it (a volume group that does not exist): nothing fits.
	Missing bool
}

// Space returns the room the node offers to disks of the template
// ("plain" and "drbd": the volume group; "file": the file storage
// directory; "sharedfile": the shared one; "": the default storage, the
// volume group when the node reported it, else the file directory), given
// the disk the configuration counts on the node now (usedNow, as
// NodeUse.DiskMiB). ok is false when there is no report, or it names no
// unit for the template (a driver keeping its disks elsewhere, such as the
// fake one): the caller falls back to the node's declared disk.
func (n *NodeStorage) Space(template string, usedNow int64) (sp Space, ok bool) {
	if n == nil {
		return sp, false
	}
	var typ, name string
	switch template {
	case DTPlain, DTDrbd:
		typ, name = StorageLVMVG, n.VG
	case DTFile:
		typ, name = StorageFile, n.FileDir
	case DTSharedFile:
		typ, name = StorageFile, n.SharedFileDir
	case "":
		typ, name = StorageLVMVG, n.VG
		if n.Unit(typ, name) == nil {
			typ, name = StorageFile, n.FileDir
		}
	}
	if name == "" {
		return sp, false
	}
	sp.Unit = typ + " " + name
	u := n.Unit(typ, name)
	if u == nil {
		sp.Missing = true
		return sp, true
	}
	free := u.FreeMiB
	if typ == StorageLVMVG {
		free, _ = n.VGAllocatable(name)
	}
	free -= max(0, usedNow-n.DiskUsedMiB)
	sp.Total, sp.Free = u.SizeMiB, max(free, 0)
	return sp, true
}

// MaxBootIDLen bounds a node's boot id (Linux gives a 36-character
// UUID).
const MaxBootIDLen = 64

// MaxNoDRBDLen bounds the reason a node gives for taking no drbd disks.
const MaxNoDRBDLen = 512

// NoDRBD is why the node takes no drbd disks, as its agent reported
// (NodeStorage.NoDRBD); "" when it takes them or reported nothing.
func (n *Node) NoDRBD() string {
	if n == nil || n.Storage == nil {
		return ""
	}
	return n.Storage.NoDRBD
}

// noDRBDReasons is the reasons of the named nodes (names or UUIDs; ""
// and unknown ones skipped) that take no drbd disks.
func (s *State) noDRBDReasons(refs ...string) []string {
	var reasons []string
	for _, ref := range refs {
		if ref == "" {
			continue
		}
		if why := s.LookupNode(ref).NoDRBD(); why != "" {
			reasons = append(reasons, why)
		}
	}
	return reasons
}

// CheckDRBDNodes says why an instance of template drbd cannot be created
// on the given nodes (names or UUIDs; "" for a node the allocator
// chooses), from what the nodes' agents reported (NodeStorage.NoDRBD): a
// named node that reported it takes no drbd disks, or, when a node is
// left to the allocator, fewer than two nodes that may take them. Nodes
// that reported nothing (or a driver that simulates drbd) count as able.
// It reads the state only: the API checks a submission with it, so that
// a node without DRBD refuses the instance then, never its job later.
func (s *State) CheckDRBDNodes(pnode, snode string) *Error {
	if reasons := s.noDRBDReasons(pnode, snode); len(reasons) > 0 {
		return errf(CodeState, "disk_template", "disk template drbd needs DRBD on both nodes: %s", joinReasons(reasons))
	}
	if pnode != "" && snode != "" {
		return nil
	}
	able := 0
	var reasons []string
	for _, n := range s.SortedNodes() {
		if n.Offline || !n.VMCapable {
			continue
		}
		if why := n.NoDRBD(); why != "" {
			reasons = append(reasons, why)
			continue
		}
		able++
	}
	if able < 2 && len(reasons) > 0 {
		return errf(CodeState, "disk_template", "disk template drbd needs DRBD on two nodes and %d node(s) have it: %s", able, joinReasons(reasons))
	}
	return nil
}

// CheckDRBDOp says why op would put drbd disks on a node that takes none
// (CheckDRBDNodes), or nil: an instance creation of template drbd (a
// commit: of its reservation's template and nodes), replace_new_secondary
// with remote_node, and a re-creation of a drbd instance's disks on
// given nodes. The nodes an allocator chooses are not known yet: the
// allocator never chooses a node that takes no drbd disks for them. It
// reads the state only; an opcode about an instance that does not exist
// passes (its job says so).
func (s *State) CheckDRBDOp(op Opcode) *Error {
	switch o := op.(type) {
	case *OpInstanceCreate:
		template, pnode, snode := o.Template(), o.PNode, o.SNode
		if o.Commit {
			if in := s.LookupInstance(o.InstanceName); in != nil && in.Forthcoming {
				template = in.DiskTemplate
				if in.PrimaryNode != "" && len(in.SecondaryNodes) == 1 {
					pnode, snode = in.PrimaryNode, in.SecondaryNodes[0]
				}
			}
		}
		if template != DTDrbd {
			return nil
		}
		return s.CheckDRBDNodes(pnode, snode)
	case *OpInstanceReplaceDisks:
		if o.Mode != ReplaceNewSecondary || o.RemoteNode == "" {
			return nil
		}
		if reasons := s.noDRBDReasons(o.RemoteNode); len(reasons) > 0 {
			return errf(CodeState, "remote_node", "a new drbd secondary needs DRBD on its node: %s", joinReasons(reasons))
		}
	case *OpInstanceRecreateDisks:
		if in := s.LookupInstance(o.Ref()); in == nil || in.DiskTemplate != DTDrbd || len(o.Nodes) == 0 {
			return nil
		}
		if reasons := s.noDRBDReasons(o.Nodes...); len(reasons) > 0 {
			return errf(CodeState, "nodes", "re-creating drbd disks needs DRBD on both nodes: %s", joinReasons(reasons))
		}
	}
	return nil
}

// joinReasons lists at most five reasons.
func joinReasons(rs []string) string {
	const most = 5
	out := ""
	for i, r := range rs {
		if i == most {
			return out + fmt.Sprintf("; and %d more", len(rs)-most)
		}
		if i > 0 {
			out += "; "
		}
		out += r
	}
	return out
}
