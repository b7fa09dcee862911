package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// usageHarness drives instance and node changes through the real Apply
// path: configuration jobs for nodes, an executor job's steps for
// instance records.
type usageHarness struct {
	*harness
	t     *testing.T
	job   int64
	steps int
}

func newUsageHarness(t *testing.T, nodes int) *usageHarness {
	h := &usageHarness{harness: newHarness(), t: t}
	if r := h.apply(ClusterInit{Now: h.now, Name: "c", UUID: h.uuid(), GroupUUID: h.uuid(),
		Node: NodeSpec{Name: "node1", UUID: h.uuid(), PrimaryIP: "10.0.0.1"}}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	for i := 2; i <= nodes; i++ {
		h.addNode(i)
	}
	if r := h.apply(LeaderEstablish{Now: h.now, Node: "node1"}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.newJob()
	return h
}

func (h *usageHarness) addNode(i int) Response {
	op := fmt.Sprintf(`{"OP_ID":"OP_NODE_ADD","node_name":"node%d","primary_ip":"10.0.%d.%d"}`, i, i/250, i%250+1)
	return h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{h.uuid()}}).(Response)
}

func (h *usageHarness) removeNode(name string) Response {
	op := fmt.Sprintf(`{"OP_ID":"OP_NODE_REMOVE","node_name":%q}`, name)
	return h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}}).(Response)
}

// newJob starts an executor job whose steps carry the instance changes.
func (h *usageHarness) newJob() {
	r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)}, UUIDs: []string{""}}).(Response)
	if r.Err != nil {
		h.t.Fatal(r.Err)
	}
	h.job, h.steps = r.JobID, 0
	if r := h.apply(JobUpdate{Now: h.now, Epoch: 1, JobID: h.job, Action: ActionStart}).(Response); r.Err != nil {
		h.t.Fatal(r.Err)
	}
}

func (h *usageHarness) stepCmd(changes ...StepChange) JobUpdate {
	return JobUpdate{Now: h.now, Epoch: 1, JobID: h.job, Action: ActionStep, Step: h.steps, StepName: "s", Changes: changes}
}

// step applies instance changes as one step of the running job.
func (h *usageHarness) step(changes ...StepChange) Response {
	r := h.apply(h.stepCmd(changes...)).(Response)
	if r.Err == nil {
		h.steps++
	}
	return r
}

// stepBatch applies each change as a step of its own, all in one Batch
// log entry.
func (h *usageHarness) stepBatch(changes ...StepChange) {
	var entries [][]byte
	for k, c := range changes {
		u := h.stepCmd(c)
		u.Step += k
		e, err := Encode(u)
		if err != nil {
			h.t.Fatal(err)
		}
		entries = append(entries, e)
	}
	data, err := EncodeBatch(entries)
	if err != nil {
		h.t.Fatal(err)
	}
	h.index++
	h.now += 1e9
	for _, r := range h.f.Apply(h.index, data).(BatchResponse) {
		if r.Err != nil {
			return // the later steps are out of order
		}
		h.steps++
	}
}

// usageOf is the usage index rebuilt from scratch, the way a restored
// snapshot builds it.
func usageOf(s *State) usageIndex {
	c := &State{Instances: s.Instances, Nodes: map[string]*Node{}, Groups: map[string]*Group{}, Jobs: map[int64]*Job{}}
	c.reindex()
	return c.usage
}

// usageOracle counts every instance straightforwardly, the allocator's
// way: the expected values of Usage, node by node.
type oracleNode struct {
	use   NodeUse
	peers map[string]Peer
	insts []string
}

func usageOracle(s *State) map[string]*oracleNode {
	out := map[string]*oracleNode{}
	get := func(u string) *oracleNode {
		n := out[u]
		if n == nil {
			n = &oracleNode{peers: map[string]Peer{}}
			out[u] = n
		}
		return n
	}
	for _, i := range s.Instances {
		disk := int64(0)
		for _, d := range i.Disks {
			disk += d.SizeMiB
			if i.DiskTemplate == DTDrbd {
				disk += DRBDMetaMiB
			}
		}
		seen := map[string]bool{}
		if i.PrimaryNode != "" {
			n := get(i.PrimaryNode)
			n.use.MemoryMiB += i.MemoryMiB
			n.use.VCPUs += int64(i.VCPUs)
			n.use.DiskMiB += disk
			seen[i.PrimaryNode] = true
		}
		for _, sec := range i.SecondaryNodes {
			if sec == "" {
				continue
			}
			n := get(sec)
			n.use.DiskMiB += disk
			p := n.peers[i.PrimaryNode]
			p.Primary = i.PrimaryNode
			p.MemoryMiB += i.MemoryMiB
			p.Instances++
			n.peers[i.PrimaryNode] = p
			seen[sec] = true
		}
		for u := range seen {
			n := out[u]
			n.insts = append(n.insts, i.UUID)
			n.use.Instances++
		}
	}
	for _, n := range out {
		sort.Strings(n.insts)
	}
	return out
}

// diffUsage describes how two usage indexes differ ("" when equal); empty
// and nil slices are alike.
func diffUsage(got, want usageIndex) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		g, w := got[k], want[k]
		switch {
		case g == nil:
			fmt.Fprintf(&b, "node %s: missing, want %+v\n", k, *w)
		case w == nil:
			fmt.Fprintf(&b, "node %s: %+v, want no entry\n", k, *g)
		case g.mem != w.mem || g.cpu != w.cpu || g.disk != w.disk || !slices.Equal(g.peers, w.peers) || !slices.Equal(g.insts, w.insts):
			fmt.Fprintf(&b, "node %s: %+v, want %+v\n", k, *g, *w)
		}
	}
	return b.String()
}

// checkUsage compares the state's index with one rebuilt from scratch and
// with the oracle, read through the exported view.
func checkUsage(t *testing.T, s *State, when string) {
	t.Helper()
	if d := diffUsage(s.usage, usageOf(s)); d != "" {
		t.Fatalf("%s: incremental index differs from a rebuilt one:\n%s", when, d)
	}
	u, ok := s.Usage()
	if !ok {
		t.Fatalf("%s: state has no usage index", when)
	}
	hand := &State{Instances: s.Instances} // no index: NodeInstances counts
	for _, node := range append(sortedKeys(s.Nodes), sortedKeys(s.usage)...) {
		p, sec := s.NodeInstances(node)
		hp, hsec := hand.NodeInstances(node)
		if !slices.Equal(p, hp) || !slices.Equal(sec, hsec) {
			t.Fatalf("%s: node %s NodeInstances %v %v, counting gives %v %v", when, node, p, sec, hp, hsec)
		}
		if a, b := s.InstancesOnNode(node), hand.InstancesOnNode(node); !slices.Equal(a, b) {
			t.Fatalf("%s: node %s InstancesOnNode gives %d instances, counting %d", when, node, len(a), len(b))
		}
	}
	want := usageOracle(s)
	if len(want) != len(s.usage) {
		t.Fatalf("%s: index has %d nodes, oracle %d", when, len(s.usage), len(want))
	}
	for node, w := range want {
		if got := u.Node(node); got != w.use {
			t.Fatalf("%s: node %s: %+v, want %+v", when, node, got, w.use)
		}
		if got := u.Instances(node); !slices.Equal(got, w.insts) {
			t.Fatalf("%s: node %s instances %v, want %v", when, node, got, w.insts)
		}

		var peers []Peer
		u.Peers(node, func(p Peer) { peers = append(peers, p) })
		var wp []Peer
		for _, k := range sortedKeys(w.peers) {
			wp = append(wp, w.peers[k])
		}
		if !slices.Equal(peers, wp) {
			t.Fatalf("%s: node %s peers %v, want %v", when, node, peers, wp)
		}
	}
}

// TestUsageIndexRandom applies random sequences of instance records
// (new, changed, failed over, renamed, made real, removed, several in one
// step, refused ones) and node additions and removals through Apply, and
// checks after each entry that the incremental usage index equals one
// rebuilt from scratch and the straightforward count; then that a
// snapshot restores it.
func TestUsageIndexRandom(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			usageRandom(t, seed, 600)
		})
	}
}

func usageRandom(t *testing.T, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	h := newUsageHarness(t, 8)
	nextNode := 9
	// Two nodes have totals, so that some records are refused for lack of
	// room (checkInstanceFits).
	for _, name := range []string{"node2", "node3"} {
		if r := h.apply(NodeRegister{Now: h.now, Node: NodeSpec{Name: name, Resources: Resources{MemoryMiB: 6144, DiskMiB: 60000}}}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var st *State
	read := func() { h.f.Read(func(s *State, _ uint64) { st = s }) }
	read()
	nodes := func() []string {
		var out []string
		for _, nd := range st.SortedNodes() {
			out = append(out, nd.UUID)
		}
		return out
	}
	insts := func() []*Instance { return st.SortedInstances() }
	uuids := 0
	record := func(i *Instance) {
		ns := nodes()
		pick := func() string {
			if rng.IntN(30) == 0 {
				return "gone-node" // refused: no such node
			}
			return ns[rng.IntN(len(ns))]
		}
		i.Forthcoming = rng.IntN(4) == 0
		i.MemoryMiB = int64(rng.IntN(8)) * 512
		i.VCPUs = rng.IntN(4)
		i.AdminState = []string{AdminUp, AdminDown}[rng.IntN(2)]
		i.DiskTemplate = []string{DTPlain, DTDrbd, DTDiskless}[rng.IntN(3)]
		i.Disks = nil
		if i.DiskTemplate != DTDiskless {
			for k := rng.IntN(3); k >= 0; k-- {
				i.Disks = append(i.Disks, Disk{UUID: fmt.Sprintf("%s-d%d", i.UUID, k), SizeMiB: int64(rng.IntN(5)) * 10240, Mode: "rw"})
			}
		}
		i.PrimaryNode, i.SecondaryNodes = pick(), []string{}
		if i.DiskTemplate == DTDrbd {
			s := pick()
			if s == i.PrimaryNode && rng.IntN(4) != 0 {
				s = ns[(slices.Index(ns, s)+1)%len(ns)]
			}
			i.SecondaryNodes = []string{s}
		}
		if i.Forthcoming && rng.IntN(5) == 0 {
			i.PrimaryNode, i.SecondaryNodes = "", []string{} // not placed yet
		}
	}
	// kinds counts the changes applied alone in a step that succeeded.
	kinds := map[string]int{}
	// checkUsed stages changes in a transaction it drops and compares,
	// on every node, what the fit check reads of the index with a count
	// over every instance.
	checkUsed := func(changes ...StepChange) {
		tx := st.begin(h.now)
		for _, c := range changes {
			_ = c.apply(tx) // a refused change may leave others staged: all the better
		}
		skips := []string{""}
		for u := range tx.insts {
			skips = append(skips, u)
		}
		for _, nd := range st.SortedNodes() {
			for _, skip := range skips {
				m, d := tx.nodeUsed(nd.UUID, skip)
				wm, wd := tx.nodeUsedScan(nd.UUID, skip)
				if m != wm || d != wd {
					t.Fatalf("node %s without %q: fit check reads %d MiB memory, %d MiB disk used; counting gives %d, %d", nd.Name, skip, m, d, wm, wd)
				}
			}
		}
	}
	change := func() (StepChange, string) {
		all := insts()
		if len(all) == 0 || rng.IntN(3) == 0 {
			uuids++
			i := &Instance{UUID: fmt.Sprintf("inst-%d", uuids), Name: fmt.Sprintf("inst%d", rng.IntN(200))}
			record(i)
			return StepChange{InstancePut: &InstancePut{Instance: *i}}, "new"
		}
		old := all[rng.IntN(len(all))]
		expect := old.SerialNo
		if rng.IntN(25) == 0 {
			expect++ // refused: stale
		}
		i := old.clone()
		kind := "changed"
		switch rng.IntN(6) {
		case 0:
			return StepChange{InstanceRemove: &InstanceRemove{UUID: old.UUID, ExpectSerial: expect}}, "removed"
		case 1:
			i.Name, kind = fmt.Sprintf("inst%d", rng.IntN(200)), "renamed"
		case 2:
			if len(i.SecondaryNodes) == 1 {
				i.PrimaryNode, i.SecondaryNodes, kind = i.SecondaryNodes[0], []string{i.PrimaryNode}, "failed over"
			}
		case 3:
			i.Forthcoming = false
			i.MemoryMiB += 512
			if len(i.Disks) > 0 {
				i.Disks[0].SizeMiB += 1024
			}
			kind = "made real or grown"
		default:
			record(i)
		}
		return StepChange{InstancePut: &InstancePut{Instance: *i, ExpectSerial: expect}}, kind
	}
	one := func() StepChange { c, _ := change(); return c }
	step := func(changes ...StepChange) Response {
		checkUsed(changes...)
		return h.step(changes...)
	}
	for k := 0; k < n; k++ {
		switch x := rng.IntN(20); {
		case x == 0:
			h.addNode(nextNode)
			nextNode++
		case x < 3:
			// Refused while an instance uses the node.
			ns := st.SortedNodes()
			if r := h.removeNode(ns[rng.IntN(len(ns))].Name); r.Err == nil {
				kinds["node removed"]++
			} else {
				kinds["node removal refused"]++
			}
		case x == 3:
			h.stepBatch(one(), one(), one())
		case x < 6:
			step(one(), one())
		default:
			c, kind := change()
			if r := step(c); r.Err == nil {
				kinds[kind]++
			} else {
				kinds["refused "+string(r.Err.Code)]++
			}
		}
		if h.steps > 200 { // keep the job's record small
			if r := h.apply(JobUpdate{Now: h.now, Epoch: 1, JobID: h.job, Action: ActionFinish, Status: StatusSuccess}).(Response); r.Err != nil {
				t.Fatal(r.Err)
			}
			h.newJob()
		}
		read()
		checkUsage(t, st, fmt.Sprintf("after entry %d (index %d)", k, h.index))
	}
	for _, kind := range []string{"new", "removed", "renamed", "failed over", "made real or grown", "changed", "refused " + string(CodeNoRes), "refused " + string(CodeState), "refused " + string(CodeNoEnt), "node removed", "node removal refused"} {
		if kinds[kind] == 0 {
			t.Errorf("no step of kind %q: the sequence exercised too little (%v)", kind, kinds)
		}
	}
	if len(st.Instances) < 10 {
		t.Errorf("only %d instances at the end: the sequence exercised little", len(st.Instances))
	}
	t.Logf("%d nodes, %d instances; %v", len(st.Nodes), len(st.Instances), kinds)

	// A restored snapshot rebuilds the index: equal to the incremental one.
	restored(t, snapshotOf(t, h.f)).Read(func(s *State, _ uint64) {
		if d := diffUsage(s.usage, st.usage); d != "" {
			t.Fatalf("restored index differs from the incremental one:\n%s", d)
		}
		checkUsage(t, s, "after restore")
	})
}

// TestUsageIndexRestore checks that a restored snapshot, which carries no
// index, rebuilds it, and that the index is not in the snapshot.
func TestUsageIndexRestore(t *testing.T) {
	h := newUsageHarness(t, 3)
	var node1, node2, node3 string
	h.f.Read(func(s *State, _ uint64) {
		node1, node2, node3 = s.LookupNode("node1").UUID, s.LookupNode("node2").UUID, s.LookupNode("node3").UUID
	})
	disk := func(size int64) []Disk { return []Disk{{UUID: fmt.Sprint("d", size), SizeMiB: size, Mode: "rw"}} }
	for _, c := range []StepChange{
		{InstancePut: &InstancePut{Instance: Instance{Name: "a", UUID: "i-a", PrimaryNode: node1, SecondaryNodes: []string{node2},
			DiskTemplate: DTDrbd, Disks: disk(1000), MemoryMiB: 512, VCPUs: 2, AdminState: AdminUp}}},
		{InstancePut: &InstancePut{Instance: Instance{Name: "b", UUID: "i-b", PrimaryNode: node1, SecondaryNodes: []string{node2},
			DiskTemplate: DTDrbd, Disks: disk(2000), MemoryMiB: 1024, VCPUs: 1, AdminState: AdminUp, Forthcoming: true}}},
		{InstancePut: &InstancePut{Instance: Instance{Name: "c", UUID: "i-c", PrimaryNode: node3,
			DiskTemplate: DTPlain, Disks: disk(300), MemoryMiB: 256, VCPUs: 1, AdminState: AdminDown}}},
	} {
		if r := h.step(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	snap := snapshotOf(t, h.f)
	for _, word := range []string{"peers", "usage"} {
		if bytes.Contains(snap, []byte(word)) {
			t.Errorf("snapshot mentions %q: the index must not be serialised", word)
		}
	}
	restored(t, snap).Read(func(s *State, _ uint64) {
		u, ok := s.Usage()
		if !ok {
			t.Fatal("restored state has no usage index")
		}
		want := map[string]NodeUse{
			node1: {MemoryMiB: 1536, VCPUs: 3, DiskMiB: 3000 + 2*DRBDMetaMiB, Instances: 2},
			node2: {DiskMiB: 3000 + 2*DRBDMetaMiB, Instances: 2},
			node3: {MemoryMiB: 256, VCPUs: 1, DiskMiB: 300, Instances: 1},
		}
		for node, w := range want {
			if got := u.Node(node); got != w {
				t.Errorf("node %s: %+v, want %+v", s.NodeName(node), got, w)
			}
		}
		var peers []Peer
		u.Peers(node2, func(p Peer) { peers = append(peers, p) })
		if want := []Peer{{Primary: node1, MemoryMiB: 1536, Instances: 2}}; !slices.Equal(peers, want) {
			t.Errorf("node2 peers %v, want %v", peers, want)
		}
		if got := u.Instances(node2); !slices.Equal(got, []string{"i-a", "i-b"}) {
			t.Errorf("node2 instances %v", got)
		}
		checkUsage(t, s, "after restore")
	})
	// A hand-built state has no index; readers count for themselves.
	if _, ok := (&State{Instances: map[string]*Instance{}}).Usage(); ok {
		t.Error("a hand-built state claims a usage index")
	}
}

// snapshotOf is f's snapshot as Restore reads it.
func snapshotOf(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// restored is a new FSM restored from snap, with the indexes a restore
// rebuilds.
func restored(t *testing.T, snap []byte) *FSM {
	t.Helper()
	f := New()
	if err := f.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	return f
}
