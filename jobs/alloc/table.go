package alloc

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"github.com/gnt-cluster/gnt/fsm"
)

// Reasons a node takes no new instances, in the order messages list them.
const (
	badOffline    = "offline"
	badDead       = "dead"
	badDrained    = "drained"
	badNotVM      = "not vm_capable"
	badEvacuating = "being evacuated"
	badExcluded   = "excluded"
	badHypervisor = "running another hypervisor"
	badNoDRBD     = "without DRBD"
)

var badOrder = []string{badOffline, badDead, badDrained, badNotVM, badEvacuating, badHypervisor, badNoDRBD, badExcluded}

// row is one node of the resource table.
type row struct {
	uuid, name string
	group      int32
	bad        string // why the node takes nothing; "" when usable
	hv         string // the driver the node's gntd runs ("" not known)
	// noDRBD is why the node takes no drbd disks (fsm.Node.NoDRBD).
	noDRBD    string
	memTotal  int64
	diskTotal int64
	cpuCap    int64
	memUsed   int64
	diskUsed  int64
	cpuUsed   int64
	// peers holds, per primary p (a row), the memory of the drbd
	// instances with primary p and this node as secondary; rMem is the
	// largest. Read and change them through table.peersOf: while lazy
	// they are still in the state's usage index (rMem is right).
	peers peers
	rMem  int64
	lazy  bool
	// unit is where diskTotal comes from, for messages: a storage unit
	// ("lvm-vg xenvg"), or the declared disk (see useStorage).
	unit string
}

func (n *row) freeMem() int64  { return n.memTotal - n.memUsed }
func (n *row) freeDisk() int64 { return n.diskTotal - n.diskUsed }
func (n *row) freeCPU() int64  { return n.cpuCap - n.cpuUsed }

// contrib is the node's term of its group's score: u_mem²+u_disk²+u_cpu².
func (n *row) contrib() float64 {
	return fsm.LoadTerm(n.memUsed, n.memTotal, n.diskUsed, n.diskTotal, n.cpuUsed, n.cpuCap)
}

func ratio(used, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(used) / float64(total)
}

// grow is how much a resource's u² grows when use goes up by add.
func grow(used, add, total int64) float64 {
	if total <= 0 || add == 0 {
		return 0
	}
	u, d := float64(used)/float64(total), float64(add)/float64(total)
	return d * (2*u + d)
}

// group is one node group of the table.
type group struct {
	uuid, name string
	rank       int     // 0 preferred, 1 last_resort, 2 unallocable
	members    []int32 // row indices, by node name
	usable     int     // members that take instances
	q          float64 // Σ contrib over the usable members
}

func (g *group) score(extra float64) float64 {
	if g.usable == 0 {
		return 0
	}
	return (g.q + extra) / float64(g.usable)
}

func policyRank(p string) int {
	switch p {
	case fsm.AllocLastResort:
		return 1
	case fsm.AllocUnallocable:
		return 2
	}
	return 0 // preferred, and Ganeti's default when unset
}

// table is the free-resource table one call works on; it is the call's
// own copy, never shared with the state.
type table struct {
	rows   []row
	groups []group          // by name
	byUUID map[string]int32 // node UUID → row
	byName map[string]int32 // node name → row, built when first needed
	// noScore: add and remove leave the group sums alone (EvacuatePlan
	// compares placements within one group only, by their growth).
	noScore bool
	// sorted and cands are bestInGroup's buffers.
	sorted, cands []secCand
	// use is the state's usage index, when the table was counted from it
	// (see countIndexed), and skip the instance left out of the count.
	use  fsm.Usage
	skip *fsm.Instance
}

// inst is what an instance uses, as the table counts it.
type inst struct {
	uuid, name  string
	template    string
	forthcoming bool
	mem, cpu    int64
	disk        int64 // on each node
	pri         int32 // row, or -1
	secs        []int32
	// hv is the hypervisor the nodes it moves to must run
	// (fsm.PlacementHypervisor; "" any), set where instances move.
	hv string
}

// markHypervisor makes the usable nodes that cannot run hypervisor hv
// (fsm.HypervisorFits) take nothing, and returns them (for unmark).
func (t *table) markHypervisor(hv string) []int32 {
	var marked []int32
	for k := range t.rows {
		if r := &t.rows[k]; r.bad == "" && !fsm.HypervisorFits(r.hv, hv) {
			r.bad = badHypervisor
			marked = append(marked, int32(k))
		}
	}
	if len(marked) > 0 {
		t.sumGroups()
	}
	return marked
}

// markNoDRBD makes the usable nodes that take no drbd disks take
// nothing, and returns them (for unmark): a drbd instance's new nodes are
// chosen among the others.
func (t *table) markNoDRBD() []int32 {
	var marked []int32
	for k := range t.rows {
		if r := &t.rows[k]; r.bad == "" && r.noDRBD != "" {
			r.bad = badNoDRBD
			marked = append(marked, int32(k))
		}
	}
	if len(marked) > 0 {
		t.sumGroups()
	}
	return marked
}

// unmark makes the rows markHypervisor or markNoDRBD marked usable again.
func (t *table) unmark(rows []int32) {
	for _, k := range rows {
		t.rows[k].bad = ""
	}
	if len(rows) > 0 {
		t.sumGroups()
	}
}

// sumGroups counts each group's usable members and sums their score
// terms (not kept with noScore).
func (t *table) sumGroups() {
	if t.noScore {
		return
	}
	for g := range t.groups {
		t.groups[g].usable, t.groups[g].q = 0, 0
	}
	for k := range t.rows {
		r := &t.rows[k]
		if r.bad == "" {
			g := &t.groups[r.group]
			g.usable++
			g.q += r.contrib()
		}
	}
}

// buildTable counts every instance of st but skip (a UUID) into a fresh
// table. leaving, a node UUID, is marked as being evacuated. The disk
// totals are those of the storage that disks of template take on each
// node (useStorage).
func buildTable(st *fsm.State, opts Options, skip, leaving, template string) *table {
	t := &table{rows: make([]row, 0, len(st.Nodes)), byUUID: make(map[string]int32, len(st.Nodes))}
	nodes := make([]*fsm.Node, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b *fsm.Node) int { return cmp.Compare(a.Name, b.Name) })

	gs := make([]*fsm.Group, 0, len(st.Groups))
	for _, g := range st.Groups {
		gs = append(gs, g)
	}
	// A node may name a group the state does not hold: it gets a group of
	// its own, named by the UUID, with the default policy.
	missing := map[string]bool{}
	for _, n := range nodes {
		if st.Groups[n.Group] == nil && !missing[n.Group] {
			missing[n.Group] = true
			gs = append(gs, &fsm.Group{UUID: n.Group, Name: n.Group})
		}
	}
	sort.Slice(gs, func(i, j int) bool {
		return gs[i].Name < gs[j].Name || gs[i].Name == gs[j].Name && gs[i].UUID < gs[j].UUID
	})
	t.groups = make([]group, len(gs))
	groupIdx := make(map[string]int32, len(gs))
	for i, g := range gs {
		t.groups[i] = group{uuid: g.UUID, name: g.Name, rank: policyRank(g.AllocPolicy)}
		groupIdx[g.UUID] = int32(i)
	}

	ratio := opts.ratio()
	for _, n := range nodes {
		idx := int32(len(t.rows))
		r := row{
			uuid: n.UUID, name: n.Name, group: groupIdx[n.Group], hv: n.Hypervisor, noDRBD: n.NoDRBD(),
			memTotal: n.Resources.MemoryMiB, diskTotal: n.Resources.DiskMiB,
			cpuCap: int64(math.Floor(float64(n.Resources.CPUs)*ratio + 1e-9)),
		}
		switch {
		case n.Offline:
			r.bad = badOffline
		case opts.Dead[n.UUID] || opts.Dead[n.Name]:
			r.bad = badDead
		case n.Drained:
			r.bad = badDrained
		case !n.VMCapable:
			r.bad = badNotVM
		case leaving != "" && n.UUID == leaving:
			r.bad = badEvacuating
		}
		t.rows = append(t.rows, r)
		t.byUUID[n.UUID] = idx
		g := &t.groups[r.group]
		g.members = append(g.members, idx)
	}

	if u, ok := st.Usage(); ok {
		t.countIndexed(st, u, skip)
	} else {
		for _, i := range st.Instances {
			if skip != "" && i.UUID == skip {
				continue
			}
			t.count(i)
		}
		for k := range t.rows {
			r := &t.rows[k]
			r.rMem = r.peers.settle()
		}
	}
	for k := range t.rows {
		t.rows[k].useStorage(nodes[k], template)
	}
	t.sumGroups()
	return t
}

// Units of the disk totals when no storage unit applies.
const (
	unitDeclared   = "declared disk"
	unitNoReport   = "declared disk, no storage report yet"
	unitUnlimited  = "sharedfile disks take no node disk"
	unlimitedSpace = 1 << 50
)

// useStorage sets the row's disk total from the node's last storage
// report (fsm.NodeStorage.Space): the unit that disks of template take
// (the volume group, counting only its allocatable physical volumes, for
// plain and drbd; the file directory for file; the shared directory for
// sharedfile; the default storage for ""), its reported free space less
// the disk the configuration added since the report being what is free.
// A node that reported no such unit keeps its declared disk (a
// sharedfile disk then takes none of it, as before reports); one whose
// report names the unit but lacks it (no such volume group) has none,
// and so has, for drbd, one that said it takes no drbd disks (NoDRBD).
// Its diskUsed is what the configuration counts, so that placements
// within the call take their disk off what is free.
func (r *row) useStorage(n *fsm.Node, template string) {
	if template == TemplateDiskless {
		return
	}
	if template == TemplateDRBD && r.noDRBD != "" {
		// The node takes no drbd disks (no DRBD, or a driver without
		// them): no room, the reason in messages.
		r.unit, r.diskTotal = r.noDRBD, r.diskUsed
		return
	}
	sp, ok := n.Storage.Space(template, r.diskUsed)
	switch {
	case !ok && template == TemplateSharedFile:
		r.unit, r.diskTotal = unitUnlimited, r.diskUsed+unlimitedSpace
	case !ok && n.Storage == nil:
		r.unit = unitNoReport
	case !ok:
		r.unit = unitDeclared
	case sp.Missing:
		r.unit, r.diskTotal = "no "+sp.Unit+" on the node", r.diskUsed
	default:
		r.unit, r.diskTotal = sp.Unit, r.diskUsed+sp.Free
	}
}

// count adds what an instance of the state uses, as place does, but
// only appending to the peers, which buildTable settles at the end: this
// loop is most of a call's time.
func (t *table) count(i *fsm.Instance) {
	disk := instanceDisk(i)
	pri, ok := t.byUUID[i.PrimaryNode]
	if ok {
		r := &t.rows[pri]
		r.memUsed += i.MemoryMiB
		r.cpuUsed += int64(i.VCPUs)
		r.diskUsed += disk
	} else {
		pri = -1
	}
	for _, s := range i.SecondaryNodes {
		if k, ok := t.byUUID[s]; ok {
			r := &t.rows[k]
			r.diskUsed += disk
			if pri >= 0 {
				r.peers = append(r.peers, peer{pri, i.MemoryMiB})
			}
		}
	}
}

// countIndexed fills the rows from the state's usage index, which holds
// what count adds up, node by node, and takes off what the skipped
// instance adds. Each row's N+1 reserve is computed here, but its peers
// are read from the index only when a call needs them (peersOf): most
// calls read the peers of a few nodes, and resolving every peer's primary
// to its row would cost as much as the rest of the call.
func (t *table) countIndexed(st *fsm.State, u fsm.Usage, skip string) {
	t.use = u
	if skip != "" {
		t.skip = st.Instances[skip]
	}
	for k := range t.rows {
		r := &t.rows[k]
		use := u.Node(r.uuid)
		if use.Instances == 0 {
			continue
		}
		r.memUsed, r.cpuUsed, r.diskUsed = use.MemoryMiB, use.VCPUs, use.DiskMiB
		// rMem is the largest peer whose primary is a node (settle's
		// max, from 0): a primary is looked up only when its peer would
		// raise the largest so far.
		u.Peers(r.uuid, func(p fsm.Peer) {
			r.lazy = true
			if m, ok := t.skipped(r.uuid, p); ok && m > r.rMem {
				if _, known := t.byUUID[p.Primary]; known {
					r.rMem = m
				}
			}
		})
	}
	sk := t.skip
	if sk == nil {
		return
	}
	disk := instanceDisk(sk)
	if k, ok := t.byUUID[sk.PrimaryNode]; ok {
		r := &t.rows[k]
		r.memUsed -= sk.MemoryMiB
		r.cpuUsed -= int64(sk.VCPUs)
		r.diskUsed -= disk
	}
	for _, s := range sk.SecondaryNodes {
		if k, ok := t.byUUID[s]; ok {
			t.rows[k].diskUsed -= disk
		}
	}
}

// skipped is the memory of an index peer of node without the skipped
// instance's share; false when that share was all of it.
func (t *table) skipped(node string, p fsm.Peer) (int64, bool) {
	sk := t.skip
	if sk == nil || p.Primary != sk.PrimaryNode {
		return p.MemoryMiB, true
	}
	n := 0
	for _, s := range sk.SecondaryNodes {
		if s == node {
			n++
		}
	}
	if n == 0 {
		return p.MemoryMiB, true
	}
	if p.Instances == n {
		return 0, false
	}
	return p.MemoryMiB - int64(n)*sk.MemoryMiB, true
}

// peersOf returns row k's peers, reading them from the usage index first
// if they are still there.
func (t *table) peersOf(k int32) *peers {
	r := &t.rows[k]
	if r.lazy {
		r.lazy = false
		t.use.Peers(r.uuid, func(p fsm.Peer) {
			if pri, ok := t.byUUID[p.Primary]; ok {
				if m, ok := t.skipped(r.uuid, p); ok {
					r.peers = append(r.peers, peer{pri, m})
				}
			}
		})
		r.peers.settle()
	}
	return &r.peers
}

// nodeIndex finds a node by name or UUID (names first, as
// fsm.State.LookupNode).
func (t *table) nodeIndex(ref string) (int32, bool) {
	if t.byName == nil {
		t.byName = make(map[string]int32, len(t.rows))
		for k := range t.rows {
			t.byName[t.rows[k].name] = int32(k)
		}
	}
	if k, ok := t.byName[ref]; ok {
		return k, true
	}
	k, ok := t.byUUID[ref]
	return k, ok
}

// instance reads what an instance of the state uses.
func (t *table) instance(i *fsm.Instance) inst {
	in := inst{
		uuid: i.UUID, name: i.Name, template: i.DiskTemplate, forthcoming: i.Forthcoming,
		mem: i.MemoryMiB, cpu: int64(i.VCPUs), disk: instanceDisk(i), pri: -1,
	}
	if in.name == "" {
		in.name = i.UUID
	}
	if p, ok := t.byUUID[i.PrimaryNode]; ok {
		in.pri = p
	}
	for _, s := range i.SecondaryNodes {
		if k, ok := t.byUUID[s]; ok {
			in.secs = append(in.secs, k)
		}
	}
	return in
}

// place adds an instance's use on the given nodes, without keeping group
// scores (see add for that).
func (t *table) place(in *inst, pri int32, secs []int32) {
	if pri >= 0 {
		r := &t.rows[pri]
		r.memUsed += in.mem
		r.cpuUsed += in.cpu
		r.diskUsed += in.disk
	}
	for _, s := range secs {
		t.placeSec(in, pri, s)
	}
}

// placeSec adds an instance's use on one secondary node: its disk, and
// its memory to the node's N+1 peers.
func (t *table) placeSec(in *inst, pri, s int32) {
	r := &t.rows[s]
	r.diskUsed += in.disk
	if pri >= 0 {
		r.rMem = max(r.rMem, t.peersOf(s).add(pri, in.mem))
	}
}

// unplace takes an instance's use off the given nodes, without keeping
// group scores.
func (t *table) unplace(in *inst, pri int32, secs []int32) {
	if pri >= 0 {
		r := &t.rows[pri]
		r.memUsed -= in.mem
		r.cpuUsed -= in.cpu
		r.diskUsed -= in.disk
	}
	for _, s := range secs {
		t.unplaceSec(in, pri, s)
	}
}

func (t *table) unplaceSec(in *inst, pri, s int32) {
	r := &t.rows[s]
	r.diskUsed -= in.disk
	if pri < 0 {
		return
	}
	if old := t.peersOf(s).add(pri, -in.mem) + in.mem; old == r.rMem {
		r.rMem = r.peers.max()
	}
}

// add is place keeping the group scores right.
func (t *table) add(in *inst, pri int32, secs []int32) {
	t.place(in, pri, secs)
	t.resum(pri, secs)
}

// remove is unplace keeping the group scores right.
func (t *table) remove(in *inst, pri int32, secs []int32) {
	t.unplace(in, pri, secs)
	t.resum(pri, secs)
}

// addSec is placeSec keeping the group scores right.
func (t *table) addSec(in *inst, pri, s int32) {
	t.placeSec(in, pri, s)
	t.resum(-1, []int32{s})
}

// removeSec is unplaceSec keeping the group scores right.
func (t *table) removeSec(in *inst, pri, s int32) {
	t.unplaceSec(in, pri, s)
	t.resum(-1, []int32{s})
}

// resum recomputes the score sums of the groups of the given rows, adding
// in the order buildTable does, so that a table changed by add and remove
// scores exactly like one built from the changed state.
func (t *table) resum(pri int32, secs []int32) {
	if t.noScore {
		return
	}
	done := [3]int32{-1, -1, -1}
	for i := -1; i < len(secs); i++ {
		k := pri
		if i >= 0 {
			k = secs[i]
		}
		if k < 0 {
			continue
		}
		g := t.rows[k].group
		if g == done[0] || g == done[1] || g == done[2] {
			continue
		}
		if i+1 < len(done) {
			done[i+1] = g
		}
		grp := &t.groups[g]
		grp.q = 0
		for _, m := range grp.members {
			if t.rows[m].bad == "" {
				grp.q += t.rows[m].contrib()
			}
		}
	}
}

// groupRef finds a group by name or UUID.
func (t *table) groupRef(ref string) (int32, bool) {
	for i := range t.groups {
		if t.groups[i].uuid == ref {
			return int32(i), true
		}
	}
	for i := range t.groups {
		if t.groups[i].name == ref {
			return int32(i), true
		}
	}
	return -1, false
}

// NodeUsage is one node's line of the resource table: totals, what
// instances (real and forthcoming) use, and the memory it keeps for N+1.
type NodeUsage struct {
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	Group string `json:"group"` // group name
	// Usable is whether the node takes new instances; Reason says why not
	// (offline, dead, drained, not vm_capable).
	Usable      bool   `json:"usable"`
	Reason      string `json:"reason,omitempty"`
	MemoryTotal int64  `json:"memory_total"`
	MemoryUsed  int64  `json:"memory_used"`
	// MemoryReserved is the N+1 reserve: the largest memory of the drbd
	// instances of one primary that have this node as secondary.
	MemoryReserved int64 `json:"memory_reserved"`
	// DiskTotal and DiskUsed are of the node's default storage (its
	// volume group, else its file directory) once its agent reported it,
	// DiskTotal less DiskUsed being what is free (see useStorage), and
	// else of its declared disk; DiskUnit says which.
	DiskTotal int64  `json:"disk_total"`
	DiskUsed  int64  `json:"disk_used"`
	DiskUnit  string `json:"disk_unit"`
	// VCPUsTotal is the node's cpus times Options.VCPURatio.
	VCPUsTotal int64 `json:"vcpus_total"`
	VCPUsUsed  int64 `json:"vcpus_used"`
	// N1 is whether the node passes N+1 (free memory ≥ MemoryReserved).
	N1 bool `json:"n1"`
}

// Usage returns the resource table the allocator works from, one line per
// node, by node name (for `gnt node list` and capacity reports).
func Usage(st *fsm.State, opts Options) []NodeUsage {
	t := buildTable(st, opts, "", "", "")
	out := make([]NodeUsage, len(t.rows))
	for k := range t.rows {
		r := &t.rows[k]
		out[k] = NodeUsage{
			UUID: r.uuid, Name: r.name, Group: t.groups[r.group].name, Usable: r.bad == "", Reason: r.bad,
			MemoryTotal: r.memTotal, MemoryUsed: r.memUsed, MemoryReserved: r.rMem,
			DiskTotal: r.diskTotal, DiskUsed: r.diskUsed, DiskUnit: r.unit, VCPUsTotal: r.cpuCap, VCPUsUsed: r.cpuUsed,
			N1: r.freeMem() >= r.rMem,
		}
	}
	return out
}

// peer is one entry of a node's peers.
type peer struct {
	pri int32
	mem int64
}

// peers is a node's N+1 peers, by primary row. Most nodes back few
// primaries, so a sorted slice is smaller and faster than a map.
// buildTable appends unsorted, possibly repeated entries and settles them.
type peers []peer

// settle sorts and merges the entries and returns the largest memory.
func (ps *peers) settle() int64 {
	s := *ps
	if len(s) == 0 {
		return 0
	}
	if len(s) > 1 {
		slices.SortFunc(s, func(a, b peer) int { return cmp.Compare(a.pri, b.pri) })
	}
	out := s[:1]
	for _, p := range s[1:] {
		if last := &out[len(out)-1]; last.pri == p.pri {
			last.mem += p.mem
		} else {
			out = append(out, p)
		}
	}
	*ps = out
	return out.max()
}

func (ps peers) find(pri int32) int {
	lo, hi := 0, len(ps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ps[m].pri < pri {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// get returns the memory the node backs for primary pri.
func (ps peers) get(pri int32) int64 {
	if i := ps.find(pri); i < len(ps) && ps[i].pri == pri {
		return ps[i].mem
	}
	return 0
}

// add changes the memory backed for pri by mem (negative to take off),
// dropping an entry that reaches zero, and returns the new value.
func (ps *peers) add(pri int32, mem int64) int64 {
	s := *ps
	i := s.find(pri)
	if i < len(s) && s[i].pri == pri {
		s[i].mem += mem
		v := s[i].mem
		if v <= 0 {
			*ps = append(s[:i], s[i+1:]...)
		}
		return v
	}
	if mem <= 0 {
		return mem
	}
	s = append(s, peer{})
	copy(s[i+1:], s[i:])
	s[i] = peer{pri, mem}
	*ps = s
	return mem
}

func (ps peers) max() int64 {
	var m int64
	for _, p := range ps {
		m = max(m, p.mem)
	}
	return m
}
