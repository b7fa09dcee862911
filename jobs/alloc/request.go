package alloc

import (
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
)

// Disk templates the allocator places (Ganeti's names).
const (
	TemplatePlain    = "plain"    // local LVM disks on the primary node only
	TemplateDRBD     = "drbd"     // disks mirrored on a primary and a secondary node
	TemplateDiskless = "diskless" // no disks
	// TemplateFile disks are files on the primary node; TemplateSharedFile
	// disks files in storage every node shares, which takes no node's disk.
	TemplateFile       = "file"
	TemplateSharedFile = "sharedfile"
)

// DRBDMetaMiB is the DRBD metadata each drbd disk takes besides its size,
// on both of its nodes (Ganeti's constants.DRBD_META_SIZE).
const DRBDMetaMiB = 128

// DefaultMaxCapacity bounds Capacity's count when Options.MaxCapacity is 0.
const DefaultMaxCapacity = 100000

// Request describes one instance to place.
type Request struct {
	// Name is used in messages only; it may be empty (a forthcoming
	// instance without a name).
	Name string `json:"name,omitempty"`
	// Template is the disk template: plain, drbd, file, sharedfile or diskless.
	Template string `json:"disk_template"`
	// MemoryMiB, VCPUs and Disks (sizes in MiB) are what the instance
	// needs. A diskless instance has no disks.
	MemoryMiB int64   `json:"memory"`
	VCPUs     int     `json:"vcpus"`
	Disks     []int64 `json:"disks,omitempty"`
	// Group, a group name or UUID, restricts the placement to that group.
	Group string `json:"group,omitempty"`
	// Nodes, names or UUIDs, fix the primary node and, for drbd, the
	// secondary; with one node for drbd the secondary is chosen in the
	// primary's group. The allocator then checks that they fit.
	Nodes []string `json:"nodes,omitempty"`
	// Exclude lists nodes (names or UUIDs) never to choose.
	Exclude []string `json:"exclude,omitempty"`
	// Instance, the UUID or name of an instance in the state, is left out
	// of the accounting: the request re-places or resizes that instance.
	// Committing a forthcoming instance is Allocate with Instance and
	// Nodes set to it and its nodes; changing an instance's memory is the
	// same with the new size.
	Instance string `json:"instance,omitempty"`
	// Hypervisor, when set, leaves out the nodes whose gntd runs another
	// driver (fsm.Node.Hypervisor).
	Hypervisor string `json:"hypervisor,omitempty"`
}

// Options carry what the allocator needs beyond the state.
type Options struct {
	// Dead holds the nodes (UUIDs or names) that liveness reports dead:
	// they take no instances. Suspect nodes are the caller's choice.
	Dead map[string]bool
	// VCPURatio is how many vcpus one physical cpu may carry (Ganeti's
	// vcpu_ratio instance policy); 0 means 1, no overcommitment.
	VCPURatio float64
	// AllowRecreate lets EvacuatePlan move plain instances by re-creating
	// their disks, empty, on another node (data is lost); without it
	// they cannot be evacuated, as in Ganeti.
	AllowRecreate bool
	// MaxCapacity bounds Capacity's count; 0 means DefaultMaxCapacity.
	MaxCapacity int
}

func (o Options) ratio() float64 {
	if o.VCPURatio <= 0 {
		return 1
	}
	return o.VCPURatio
}

// need is a request reduced to what one node must give.
type need struct {
	mem, disk, cpu int64 // disk: on each node of the instance
	drbd           bool
}

func inval(field, format string, args ...any) *fsm.Error {
	return &fsm.Error{Code: fsm.CodeInval, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// check validates the request's shape and returns what it needs.
func (r *Request) check() (need, *fsm.Error) {
	var nd need
	switch r.Template {
	case TemplatePlain, TemplateDiskless, TemplateFile, TemplateSharedFile:
	case TemplateDRBD:
		nd.drbd = true
	case "":
		return nd, inval("disk_template", "the disk template is missing")
	default:
		return nd, inval("disk_template", "disk template %q cannot be placed (plain, drbd, file, sharedfile or diskless)", r.Template)
	}
	if r.MemoryMiB < 0 {
		return nd, inval("memory", "memory must not be negative, got %d", r.MemoryMiB)
	}
	if r.VCPUs < 0 {
		return nd, inval("vcpus", "vcpus must not be negative, got %d", r.VCPUs)
	}
	if r.Template == TemplateDiskless && len(r.Disks) > 0 {
		return nd, inval("disks", "a diskless instance has no disks, got %d", len(r.Disks))
	}
	for i, d := range r.Disks {
		if d < 0 {
			return nd, inval("disks", "disk %d: size must not be negative, got %d", i, d)
		}
	}
	maxNodes := 1
	if nd.drbd {
		maxNodes = 2
	}
	if len(r.Nodes) > maxNodes {
		return nd, inval("nodes", "a %s instance has at most %d node(s), got %d", r.Template, maxNodes, len(r.Nodes))
	}
	if len(r.Nodes) == 2 && r.Nodes[0] == r.Nodes[1] {
		return nd, inval("nodes", "the primary and secondary node must differ, got %s twice", r.Nodes[0])
	}
	nd.mem, nd.cpu = r.MemoryMiB, int64(r.VCPUs)
	nd.disk = diskNeed(r.Template, r.Disks)
	return nd, nil
}

// diskNeed is the disk an instance takes on each of its nodes; for
// sharedfile, of the shared directory, which only nodes that reported it
// count (useStorage).
func diskNeed(template string, sizes []int64) int64 {
	var sum int64
	for _, s := range sizes {
		sum += s
		if template == TemplateDRBD {
			sum += DRBDMetaMiB
		}
	}
	return sum
}

// instanceDisk is diskNeed for an instance of the state.
func instanceDisk(i *fsm.Instance) int64 {
	var sum int64
	for k := range i.Disks {
		sum += i.Disks[k].SizeMiB
	}
	if i.DiskTemplate == TemplateDRBD {
		sum += int64(len(i.Disks)) * DRBDMetaMiB
	}
	return sum
}

// describe is the request as the head of an error message.
func (r *Request) describe(nd need) string {
	what := "the instance"
	if r.Name != "" {
		what = r.Name
	}
	disk := fmt.Sprintf("%d MiB disk", nd.disk)
	if nd.drbd {
		disk += " on each node"
	}
	return fmt.Sprintf("%s (%s, %d MiB memory, %s, %d vcpus)", what, r.Template, nd.mem, disk, nd.cpu)
}
