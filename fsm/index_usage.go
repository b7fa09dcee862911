package fsm

import (
	"slices"
	"strings"
)

// The usage index: per node UUID, what the instances of the state use of
// the node, as the allocator (jobs/alloc) counts it, so that a placement
// reads a thousand index entries rather than every instance. It lives
// beside the other indexes, is derived data (never in a snapshot: reindex
// rebuilds it after a restore) and is kept up to date wherever instances
// are stored (txn.commit, through indexInstance and unindexInstance).
//
// The accounting is the allocator's, occurrence by occurrence, whatever
// the record looks like (Apply refuses malformed node lists, an older
// snapshot might not have): an instance adds its memory and vcpus to its
// primary; its disk (drbd metadata included, see instanceDiskMiB) to its
// primary and to each entry of its secondary nodes; and, for each entry
// of its secondary nodes, its memory to that node's peer of its primary.
// Forthcoming instances count like real ones. Nodes are keyed by UUID
// whether or not the state holds the node; an instance without a primary
// (a forthcoming one not placed yet) counts on no primary.
//
// Every change is an exact integer inverse of another, so the index after
// any sequence of changes equals the one reindex builds from scratch.

// usageIndex maps a node UUID to what the instances use of it; nodes no
// instance uses have no entry.
type usageIndex map[string]*nodeUse

type nodeUse struct {
	// uuid is the node's UUID, one string for every peer entry naming
	// the node as primary: readers resolving thousands of peers then hash
	// a few cached strings, not one scattered copy per instance record.
	uuid           string
	mem, cpu, disk int64
	// peers are by primary UUID, sorted; an entry exists while some
	// instance contributes to it.
	peers []Peer
	// insts are the UUIDs of the instances using the node as primary or
	// secondary, sorted, each once.
	insts []string
}

// Peer is one primary a node backs as drbd secondary: the memory of the
// instances with that primary which list the node as secondary (the
// memory the node must have free to take them over, N+1), and how many
// such secondary entries there are.
type Peer struct {
	Primary   string // node UUID
	MemoryMiB int64
	Instances int
}

// DefaultVCPURatio is how many vcpus one physical CPU carries when
// instances are placed (Ganeti's default instance policy vcpu_ratio): the
// allocator's and maintd's balancer's limit.
const DefaultVCPURatio = 4

// NodeUse is what the instances of the state use of one node.
type NodeUse struct {
	// MemoryMiB and VCPUs are the sums over the instances with the node
	// as primary.
	MemoryMiB int64
	VCPUs     int64
	// DiskMiB is the disk of the instances with the node as primary or
	// secondary, drbd metadata (DRBDMetaMiB per disk) included.
	DiskMiB int64
	// Instances is how many instances use the node in either role.
	Instances int
}

// Usage is a read-only view of the state's usage index. Like the state
// itself it is valid only while the state is read (inside FSM.Read).
type Usage struct {
	idx usageIndex
}

// Usage returns the per-node usage index. ok is false for a State built
// by hand (its exported maps filled directly, not through New, Apply or
// a snapshot), which has no indexes: readers then count from the
// instances themselves.
func (s *State) Usage() (u Usage, ok bool) {
	return Usage{idx: s.usage}, s.usage != nil
}

// Node returns what the instances use of the node with the UUID; zero for
// a node no instance uses.
func (u Usage) Node(node string) NodeUse {
	n := u.idx[node]
	if n == nil {
		return NodeUse{}
	}
	return NodeUse{MemoryMiB: n.mem, VCPUs: n.cpu, DiskMiB: n.disk, Instances: len(n.insts)}
}

// Peers calls fn for each primary the node backs as drbd secondary, in
// increasing order of primary UUID.
func (u Usage) Peers(node string, fn func(Peer)) {
	if n := u.idx[node]; n != nil {
		for _, p := range n.peers {
			fn(p)
		}
	}
}

// Instances returns the UUIDs of the instances that use the node as
// primary or secondary, sorted; the slice is the caller's.
func (u Usage) Instances(node string) []string {
	if n := u.idx[node]; n != nil {
		return slices.Clone(n.insts)
	}
	return nil
}

// InstancesOnNode returns the instances that use the node with the UUID
// as primary or secondary, sorted by name (then UUID, for reservations
// without one). Like NodeInstances it visits only the node's own
// instances when the state has its indexes.
func (s *State) InstancesOnNode(node string) []*Instance {
	var out []*Instance
	s.eachNodeInstance(node, func(i *Instance) {
		if i.PrimaryNode == node || slices.Contains(i.SecondaryNodes, node) {
			out = append(out, i)
		}
	})
	slices.SortFunc(out, func(a, b *Instance) int {
		if a.Name != b.Name {
			return strings.Compare(a.Name, b.Name)
		}
		return strings.Compare(a.UUID, b.UUID)
	})
	return out
}

// eachNodeInstance calls fn for every instance that may use the node: the
// usage index's list of the node's instances, or every instance when the
// state has no index (one built by hand) or the UUID is empty.
func (s *State) eachNodeInstance(node string, fn func(*Instance)) {
	if s.usage == nil || node == "" {
		for _, i := range s.Instances {
			fn(i)
		}
		return
	}
	if n := s.usage[node]; n != nil {
		for _, u := range n.insts {
			if i := s.Instances[u]; i != nil {
				fn(i)
			}
		}
	}
}

// useInstance adds (sign 1) or takes off (sign -1) what instance u uses
// of its nodes.
func (s *State) useInstance(u string, i *Instance, sign int64) {
	if s.usage == nil {
		return
	}
	disk := sign * instanceDiskMiB(i)
	if n := s.usage.node(i.PrimaryNode, u, sign); n != nil {
		n.mem += sign * i.MemoryMiB
		n.cpu += sign * int64(i.VCPUs)
		n.disk += disk
	}
	for _, sec := range i.SecondaryNodes {
		n := s.usage.node(sec, u, sign)
		if n == nil {
			continue
		}
		n.disk += disk
		pri := i.PrimaryNode
		if p := s.usage[pri]; p != nil {
			pri = p.uuid
		}
		n.peer(pri, sign*i.MemoryMiB, int(sign))
	}
	if sign < 0 {
		// Entries go once nothing uses the node: every sum is then back
		// to zero, as reindex would build it.
		s.usage.drop(i.PrimaryNode)
		for _, sec := range i.SecondaryNodes {
			s.usage.drop(sec)
		}
	}
}

func (x usageIndex) drop(node string) {
	if n := x[node]; n != nil && len(n.insts) == 0 {
		delete(x, node)
	}
}

// node returns the entry of a node an instance is being added to (sign
// 1: created as needed, the instance recorded) or taken off (sign -1: the
// instance forgotten), or nil for no node.
func (x usageIndex) node(node, inst string, sign int64) *nodeUse {
	if node == "" {
		return nil
	}
	n := x[node]
	if n == nil {
		n = &nodeUse{uuid: node}
		x[node] = n
	}
	k, found := slices.BinarySearch(n.insts, inst)
	switch {
	case sign > 0 && !found:
		n.insts = slices.Insert(n.insts, k, inst)
	case sign < 0 && found:
		n.insts = slices.Delete(n.insts, k, k+1)
	}
	return n
}

// peer changes the node's peer entry of primary pri.
func (n *nodeUse) peer(pri string, mem int64, count int) {
	k, found := slices.BinarySearchFunc(n.peers, pri, func(p Peer, pri string) int { return strings.Compare(p.Primary, pri) })
	if !found {
		n.peers = slices.Insert(n.peers, k, Peer{Primary: pri})
	}
	p := &n.peers[k]
	p.MemoryMiB += mem
	p.Instances += count
	if p.Instances == 0 {
		n.peers = slices.Delete(n.peers, k, k+1)
	}
}

// LoadTerm is one node's term of the load score shared by the allocator
// and maintd's balancer: u_mem² + u_disk² + u_cpu², where u is the node's
// used/total of that resource (0 for a resource the node has none of).
// For a fixed total load the sum of the terms over a group's nodes is
// smallest when utilisation is even, and it grows fastest on nodes that
// are already full.
func LoadTerm(memUsed, memTotal, diskUsed, diskTotal, cpuUsed, cpuTotal int64) float64 {
	return sqShare(memUsed, memTotal) + sqShare(diskUsed, diskTotal) + sqShare(cpuUsed, cpuTotal)
}

func sqShare(used, total int64) float64 {
	if total <= 0 {
		return 0
	}
	u := float64(used) / float64(total)
	return u * u
}
