package alloc

import (
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
)

// cluster builds an fsm.State by hand: literal values in the exported
// maps, named "uuid-<name>" so tests read either way. The allocator
// resolves names from its own table, so the state's indexes are not
// needed.
type cluster struct {
	st *fsm.State
}

func newCluster() *cluster {
	return &cluster{st: &fsm.State{
		Cluster:   &fsm.Cluster{Name: "c"},
		Groups:    map[string]*fsm.Group{},
		Nodes:     map[string]*fsm.Node{},
		Instances: map[string]*fsm.Instance{},
	}}
}

func uuid(name string) string { return "uuid-" + name }

func (c *cluster) group(name, policy string) *cluster {
	c.st.Groups[uuid(name)] = &fsm.Group{Name: name, UUID: uuid(name), AllocPolicy: policy}
	return c
}

// node adds a vm_capable online node with memory and disk in MiB.
func (c *cluster) node(name, group string, mem, disk int64, cpus int, mods ...func(*fsm.Node)) *cluster {
	if c.st.Groups[uuid(group)] == nil {
		c.group(group, fsm.AllocPreferred)
	}
	n := &fsm.Node{Name: name, UUID: uuid(name), Group: uuid(group), VMCapable: true,
		Resources: fsm.Resources{MemoryMiB: mem, DiskMiB: disk, CPUs: cpus}}
	for _, m := range mods {
		m(n)
	}
	c.st.Nodes[n.UUID] = n
	return c
}

func offline(n *fsm.Node)            { n.Offline = true }
func drained(n *fsm.Node)            { n.Drained = true }
func notVM(n *fsm.Node)              { n.VMCapable = false }
func runs(hv string) func(*fsm.Node) { return func(n *fsm.Node) { n.Hypervisor = hv } }
func forthcoming(i *fsm.Instance)    { i.Forthcoming = true }
func down(i *fsm.Instance)           { i.AdminState = "down" }

// noDRBD: the node's agent reported it takes no drbd disks.
func noDRBD(n *fsm.Node) {
	n.Storage = &fsm.NodeStorage{NoDRBD: "node " + n.Name + " has no DRBD (no /proc/drbd)"}
}

// inst adds an instance; sec is "" for plain and diskless; disk 0 means
// no disks.
func (c *cluster) inst(name, template, pri, sec string, mem, disk int64, vcpus int, mods ...func(*fsm.Instance)) *cluster {
	i := &fsm.Instance{Name: name, UUID: uuid(name), PrimaryNode: uuid(pri), DiskTemplate: template,
		MemoryMiB: mem, VCPUs: vcpus, AdminState: "up", SecondaryNodes: []string{}}
	if sec != "" {
		i.SecondaryNodes = []string{uuid(sec)}
	}
	if disk > 0 {
		i.Disks = []fsm.Disk{{UUID: uuid(name) + "-d0", SizeMiB: disk, Mode: "rw"}}
	}
	for _, m := range mods {
		m(i)
	}
	c.st.Instances[i.UUID] = i
	return c
}

// commit records a placement as an instance of the state.
func commit(st *fsm.State, name string, req Request, r Result) {
	i := &fsm.Instance{Name: name, UUID: uuid(name), PrimaryNode: r.Primary, DiskTemplate: req.Template,
		MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs, AdminState: "up", SecondaryNodes: []string{}}
	if r.Secondary != "" {
		i.SecondaryNodes = []string{r.Secondary}
	}
	for k, d := range req.Disks {
		i.Disks = append(i.Disks, fsm.Disk{UUID: fmt.Sprintf("%s-d%d", i.UUID, k), SizeMiB: d})
	}
	st.Instances[i.UUID] = i
}

func plain(mem, disk int64, vcpus int) Request {
	return Request{Template: TemplatePlain, MemoryMiB: mem, Disks: []int64{disk}, VCPUs: vcpus}
}

func drbd(mem, disk int64, vcpus int) Request {
	return Request{Template: TemplateDRBD, MemoryMiB: mem, Disks: []int64{disk}, VCPUs: vcpus}
}
