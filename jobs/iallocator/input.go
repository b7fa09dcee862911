package iallocator

import (
	"sort"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
)

// Version is the iallocator protocol version gnt speaks (Ganeti's
// IALLOCATOR_VERSION).
const Version = 2

// Request modes (Ganeti's IALLOCATOR_MODE_*).
const (
	ModeAllocate      = "allocate"
	ModeRelocate      = "relocate"
	ModeChangeGroup   = "change-group"
	ModeNodeEvacuate  = "node-evacuate"
	ModeMultiAllocate = "multi-allocate"
	// ModeMultiEvacuate is Ganeti's pre-2.6 evacuation mode; Ganeti 2.6
	// and later never send it (doc/iallocator.rst: deprecated, needed only
	// for Ganeti 2.4 and older), nor does gnt: node-evacuate and
	// change-group replace it. ParseResponse refuses it as any unknown
	// mode.
	ModeMultiEvacuate = "multi-evacuate"
)

// Input is the input message: the cluster as the allocator sees it and
// the request.
type Input struct {
	Version            int                  `json:"version"`
	ClusterName        string               `json:"cluster_name"`
	ClusterTags        []string             `json:"cluster_tags"`
	EnabledHypervisors []string             `json:"enabled_hypervisors"`
	IPolicy            map[string]any       `json:"ipolicy"`
	NodeGroups         map[string]NodeGroup `json:"nodegroups"`
	Nodes              map[string]Node      `json:"nodes"`
	Instances          map[string]Instance  `json:"instances"`
	Request            map[string]any       `json:"request"`
}

// NodeGroup is a node group of the input, keyed by UUID.
type NodeGroup struct {
	Name        string         `json:"name"`
	AllocPolicy string         `json:"alloc_policy"`
	Networks    []string       `json:"networks"`
	IPolicy     map[string]any `json:"ipolicy"`
	Tags        []string       `json:"tags"`
}

// Node is a node of the input, keyed by name. The run-time figures are
// absent for offline and non-vm_capable nodes, as in Ganeti; they are
// computed from the configuration (jobs/alloc's table), not read from
// the hypervisor.
type Node struct {
	PrimaryIP       string         `json:"primary_ip"`
	SecondaryIP     string         `json:"secondary_ip"`
	Tags            []string       `json:"tags"`
	MasterCandidate bool           `json:"master_candidate"`
	MasterCapable   bool           `json:"master_capable"`
	VMCapable       bool           `json:"vm_capable"`
	Drained         bool           `json:"drained"`
	Offline         bool           `json:"offline"`
	Group           string         `json:"group"`
	NDParams        map[string]any `json:"ndparams"`
	// NoDRBD (a gnt extension) is why the node takes no drbd disks, as
	// its agent reported it. When the request places drbd disks, such a
	// node is also reported drained, so that an allocator that knows
	// nothing of this key never chooses it.
	NoDRBD string `json:"no_drbd,omitempty"`

	TotalMemory    *int64 `json:"total_memory,omitempty"`
	ReservedMemory *int64 `json:"reserved_memory,omitempty"`
	FreeMemory     *int64 `json:"free_memory,omitempty"`
	TotalDisk      *int64 `json:"total_disk,omitempty"`
	FreeDisk       *int64 `json:"free_disk,omitempty"`
	TotalCPUs      *int64 `json:"total_cpus,omitempty"`
	ReservedCPUs   *int64 `json:"reserved_cpus,omitempty"`
	TotalSpindles  *int64 `json:"total_spindles,omitempty"`
	FreeSpindles   *int64 `json:"free_spindles,omitempty"`
	IPriMemory     *int64 `json:"i_pri_memory,omitempty"`
	IPriUpMemory   *int64 `json:"i_pri_up_memory,omitempty"`
}

// Instance is an instance of the input, keyed by name (a reservation
// without a name by its UUID).
type Instance struct {
	AdminState   string     `json:"admin_state"`
	ShouldRun    bool       `json:"should_run"`
	Tags         []string   `json:"tags"`
	Disks        []DiskSpec `json:"disks"`
	NICs         []NICSpec  `json:"nics"`
	VCPUs        int        `json:"vcpus"`
	Memory       int64      `json:"memory"`
	SpindleUse   int        `json:"spindle_use"`
	DiskTemplate string     `json:"disk_template"`
	OS           string     `json:"os"`
	Hypervisor   string     `json:"hypervisor"`
	Nodes        []string   `json:"nodes"`
	Forthcoming  bool       `json:"forthcoming,omitempty"`
}

// DiskSpec is a disk of an instance or a request: size in MiB and mode,
// "rw" or "ro" (Ganeti's DISK_RDWR, DISK_RDONLY).
type DiskSpec struct {
	Size     int64  `json:"size"`
	Mode     string `json:"mode"`
	Spindles int    `json:"spindles"`
}

// NICSpec is a network interface of an instance or a request.
type NICSpec struct {
	IP     *string `json:"ip"`
	MAC    string  `json:"mac"`
	Bridge *string `json:"bridge"`
}

// defaultIPolicy is the instance policy given to allocators: gnt has no
// instance policies, so a permissive one (any size up to very large, the
// templates gnt places, the vcpu ratio the built-in uses).
func defaultIPolicy() map[string]any {
	spec := func(cpu, disks, disk, mem, nics, spindles int64) map[string]any {
		return map[string]any{"cpu-count": cpu, "disk-count": disks, "disk-size": disk, "memory-size": mem, "nic-count": nics, "spindle-use": spindles}
	}
	return map[string]any{
		"disk-templates": []string{alloc.TemplateDRBD, alloc.TemplatePlain, alloc.TemplateDiskless},
		"minmax":         []any{map[string]any{"min": spec(1, 0, 0, 0, 0, 0), "max": spec(1024, 64, 1<<40, 1<<40, 64, 1024)}},
		"std":            spec(fsm.DefaultInstanceVCPUs, 1, 1024, fsm.DefaultInstanceMemory, 1, 1),
		"vcpu-ratio":     float64(fsm.DefaultVCPURatio),
		"spindle-ratio":  32.0,
	}
}

func i64(v int64) *int64 { return &v }

// NewInput builds the input message of the state with the given request
// (Request maps built by AllocateRequest and the like). The resource
// figures are the built-in allocator's (alloc.Usage with opts), so an
// external allocator and the built-in see the same cluster; a node
// opts.Dead names is reported offline, and, when the request places drbd
// disks, a node whose agent said it takes none is reported drained (with
// its reason in no_drbd). Every instance is listed, forthcoming ones too
// (with forthcoming set, a gnt extension).
func NewInput(st *fsm.State, opts alloc.Options, request map[string]any) *Input {
	in := &Input{Version: Version, ClusterName: st.Cluster.Name, ClusterTags: orEmpty(st.Cluster.Tags),
		EnabledHypervisors: orEmpty(st.Cluster.EnabledHypervisors), IPolicy: defaultIPolicy(),
		NodeGroups: map[string]NodeGroup{}, Nodes: map[string]Node{}, Instances: map[string]Instance{}, Request: request}
	for u, g := range st.Groups {
		in.NodeGroups[u] = NodeGroup{Name: g.Name, AllocPolicy: g.AllocPolicy, Networks: []string{}, IPolicy: defaultIPolicy(), Tags: orEmpty(g.Tags)}
	}
	usage := map[string]alloc.NodeUsage{}
	for _, u := range alloc.Usage(st, opts) {
		usage[u.UUID] = u
	}
	priMem, priUp := map[string]int64{}, map[string]int64{}
	for _, i := range st.Instances {
		priMem[i.PrimaryNode] += i.MemoryMiB
		if i.AdminState == fsm.AdminUp {
			priUp[i.PrimaryNode] += i.MemoryMiB
		}
	}
	for u, n := range st.Nodes {
		dead := opts.Dead[u] || opts.Dead[n.Name]
		out := Node{PrimaryIP: n.PrimaryIP, SecondaryIP: n.SecondaryIP, Tags: orEmpty(n.Tags), MasterCandidate: n.MasterCandidate,
			MasterCapable: n.MasterCapable, VMCapable: n.VMCapable, Drained: n.Drained, Offline: n.Offline || dead, Group: n.Group,
			NDParams: map[string]any{"spindle_count": 1, "exclusive_storage": false, "cpu_speed": 1}}
		if out.SecondaryIP == "" {
			out.SecondaryIP = out.PrimaryIP
		}
		out.NoDRBD = n.NoDRBD()
		if !out.Offline && n.VMCapable {
			us := usage[u]
			out.TotalMemory, out.ReservedMemory, out.FreeMemory = i64(us.MemoryTotal), i64(0), i64(us.MemoryTotal-us.MemoryUsed)
			out.TotalDisk, out.FreeDisk = i64(us.DiskTotal), i64(us.DiskTotal-us.DiskUsed)
			out.TotalCPUs, out.ReservedCPUs = i64(int64(n.Resources.CPUs)), i64(0)
			out.TotalSpindles, out.FreeSpindles = i64(0), i64(0)
			out.IPriMemory, out.IPriUpMemory = i64(priMem[u]), i64(priUp[u])
		}
		in.Nodes[n.Name] = out
	}
	for u, i := range st.Instances {
		key := i.Name
		if key == "" {
			key = u
		}
		ni := Instance{AdminState: i.AdminState, ShouldRun: i.AdminState == fsm.AdminUp, Tags: orEmpty(i.Tags), Disks: []DiskSpec{}, NICs: []NICSpec{},
			VCPUs: i.VCPUs, Memory: i.MemoryMiB, SpindleUse: 1, DiskTemplate: i.DiskTemplate, OS: i.OS, Hypervisor: i.Hypervisor,
			Nodes: []string{}, Forthcoming: i.Forthcoming}
		for _, d := range i.Disks {
			ni.Disks = append(ni.Disks, DiskSpec{Size: d.SizeMiB, Mode: d.Mode, Spindles: 1})
		}
		for _, c := range i.NICs {
			nic := NICSpec{MAC: c.MAC}
			if c.IP != "" {
				ip := c.IP
				nic.IP = &ip
			}
			if c.Link != "" {
				l := c.Link
				nic.Bridge = &l
			}
			ni.NICs = append(ni.NICs, nic)
		}
		if i.PrimaryNode != "" {
			ni.Nodes = append(ni.Nodes, st.NodeName(i.PrimaryNode))
			for _, s := range i.SecondaryNodes {
				ni.Nodes = append(ni.Nodes, st.NodeName(s))
			}
		}
		in.Instances[key] = ni
	}
	if in.placesDRBD() {
		for name, n := range in.Nodes {
			if n.NoDRBD != "" {
				n.Drained = true
				in.Nodes[name] = n
			}
		}
	}
	return in
}

// placesDRBD says whether the request (as AllocateRequest and the like
// build it) may put drbd disks on the nodes it asks for: an allocation
// of template drbd (one of a multi-allocation), a relocation (gnt
// relocates drbd secondaries only), or an evacuation or change of group
// of any drbd instance of the input. A primary-only evacuation places
// drbd disks only for a forthcoming drbd instance (which gnt relocates
// when it cannot fail over, alloc's evacuation): the others fail over to
// their secondaries, placing none (as in hail).
func (in *Input) placesDRBD() bool {
	isDRBD := func(name string) bool { return in.Instances[name].DiskTemplate == alloc.TemplateDRBD }
	switch in.Request["type"] {
	case ModeNodeEvacuate:
		names, _ := in.Request["instances"].([]string)
		primaryOnly := in.Request["evac_mode"] == string(alloc.EvacPrimary)
		for _, n := range names {
			if isDRBD(n) && (!primaryOnly || in.Instances[n].Forthcoming) {
				return true
			}
		}
	case ModeAllocate:
		return in.Request["disk_template"] == alloc.TemplateDRBD
	case ModeMultiAllocate:
		list, _ := in.Request["instances"].([]map[string]any)
		for _, r := range list {
			if r["disk_template"] == alloc.TemplateDRBD {
				return true
			}
		}
	case ModeRelocate:
		name, _ := in.Request["name"].(string)
		return isDRBD(name)
	case ModeChangeGroup:
		names, _ := in.Request["instances"].([]string)
		for _, n := range names {
			if isDRBD(n) {
				return true
			}
		}
	}
	return false
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// RequiredNodes is how many nodes an instance of the template has.
func RequiredNodes(template string) int {
	if template == alloc.TemplateDRBD {
		return 2
	}
	return 1
}

// AllocateRequest is the request of mode allocate for req (its name,
// template, memory, vcpus, disks); os, hypervisor, tags and nics
// complete it as Ganeti's does.
func AllocateRequest(req alloc.Request, os, hypervisor string, tags []string, nics []NICSpec) map[string]any {
	m := allocSpec(req, os, hypervisor, tags, nics)
	m["type"] = ModeAllocate
	return m
}

func allocSpec(req alloc.Request, os, hypervisor string, tags []string, nics []NICSpec) map[string]any {
	disks := []DiskSpec{}
	var total int64
	for _, d := range req.Disks {
		disks = append(disks, DiskSpec{Size: d, Mode: "rw", Spindles: 1})
		total += d
		if req.Template == alloc.TemplateDRBD {
			total += alloc.DRBDMetaMiB
		}
	}
	if nics == nil {
		nics = []NICSpec{}
	}
	return map[string]any{"name": req.Name, "required_nodes": RequiredNodes(req.Template), "disk_space_total": total,
		"disks": disks, "nics": nics, "vcpus": req.VCPUs, "disk_template": req.Template, "memory": req.MemoryMiB,
		"spindle_use": 1, "os": os, "tags": orEmpty(tags), "hypervisor": hypervisor}
}

// RelocateRequest is the request of mode relocate: a new node for the
// instance i (named in the input's instances) in place of from (node
// names); the instance itself stays in the input.
func RelocateRequest(st *fsm.State, i *fsm.Instance, from []string) map[string]any {
	var total int64
	for _, d := range i.Disks {
		total += d.SizeMiB
		if i.DiskTemplate == alloc.TemplateDRBD {
			total += alloc.DRBDMetaMiB
		}
	}
	return map[string]any{"type": ModeRelocate, "name": i.Name, "required_nodes": 1, "disk_space_total": total, "relocate_from": from}
}

// NodeEvacuateRequest is the request of mode node-evacuate: the instances
// (names) and which of them to move (primary-only, secondary-only, all).
func NodeEvacuateRequest(instances []string, evacMode string) map[string]any {
	return map[string]any{"type": ModeNodeEvacuate, "instances": instances, "evac_mode": evacMode}
}

// ChangeGroupRequest is the request of mode change-group: the instances
// (names) and the target group UUIDs (empty: any).
func ChangeGroupRequest(instances, targetGroups []string) map[string]any {
	if targetGroups == nil {
		targetGroups = []string{}
	}
	return map[string]any{"type": ModeChangeGroup, "instances": instances, "target_groups": targetGroups}
}

// MultiAllocateRequest is the request of mode multi-allocate: one
// allocate request (without its type) per instance.
func MultiAllocateRequest(reqs []alloc.Request, os, hypervisor string) map[string]any {
	list := make([]map[string]any, len(reqs))
	for k, r := range reqs {
		list[k] = allocSpec(r, os, hypervisor, nil, nil)
	}
	return map[string]any{"type": ModeMultiAllocate, "instances": list}
}
