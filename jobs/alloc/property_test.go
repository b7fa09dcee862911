package alloc

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randomState builds a small cluster with random groups, policies, node
// flags, sizes and instances (drbd, plain, diskless, some forthcoming,
// some down), possibly overcommitted already, as states may be.
func randomState(r *rand.Rand, _ int) *fsm.State {
	c := newCluster()
	policies := []string{fsm.AllocPreferred, fsm.AllocPreferred, fsm.AllocPreferred, fsm.AllocLastResort, fsm.AllocUnallocable, ""}
	ngroups := 1 + r.IntN(3)
	for g := 0; g < ngroups; g++ {
		c.group(fmt.Sprintf("g%d", g), policies[r.IntN(len(policies))])
	}
	nnodes := 2 + r.IntN(10)
	names := make([]string, nnodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%02d", i)
		var mods []func(*fsm.Node)
		switch r.IntN(12) {
		case 0:
			mods = append(mods, offline)
		case 1:
			mods = append(mods, drained)
		case 2:
			mods = append(mods, notVM)
		}
		c.node(names[i], fmt.Sprintf("g%d", r.IntN(ngroups)), int64(4+r.IntN(29))*gib, int64(20+r.IntN(181))*gib, 2+r.IntN(15), mods...)
	}
	ninst := r.IntN(25)
	for k := 0; k < ninst; k++ {
		p := names[r.IntN(nnodes)]
		var peers []string
		for _, n := range names {
			if n != p && c.st.Nodes[uuid(n)].Group == c.st.Nodes[uuid(p)].Group {
				peers = append(peers, n)
			}
		}
		template, sec := TemplatePlain, ""
		switch x := r.IntN(20); {
		case x < 10 && len(peers) > 0:
			template, sec = TemplateDRBD, peers[r.IntN(len(peers))]
		case x >= 17:
			template = TemplateDiskless
		}
		disk := int64(1+r.IntN(20)) * gib
		if template == TemplateDiskless {
			disk = 0
		}
		var mods []func(*fsm.Instance)
		if r.IntN(5) == 0 {
			mods = append(mods, forthcoming)
		}
		if r.IntN(5) == 0 {
			mods = append(mods, down)
		}
		c.inst(fmt.Sprintf("i%02d", k), template, p, sec, int64(1+r.IntN(8))*512, disk, 1+r.IntN(4), mods...)
	}
	return c.st
}

func randomOpts(r *rand.Rand, st *fsm.State) Options {
	o := Options{Dead: map[string]bool{}}
	for _, n := range st.SortedNodes() {
		if r.IntN(15) == 0 {
			o.Dead[n.UUID] = true
		}
	}
	if r.IntN(4) == 0 {
		o.VCPURatio = 2
	}
	return o
}

func randomRequest(r *rand.Rand, st *fsm.State) Request {
	req := Request{MemoryMiB: int64(1+r.IntN(16)) * 256, VCPUs: r.IntN(5)}
	switch r.IntN(3) {
	case 0:
		req.Template = TemplatePlain
	case 1:
		req.Template = TemplateDRBD
	default:
		req.Template = TemplateDiskless
	}
	if req.Template != TemplateDiskless {
		for d := r.IntN(3); d >= 0; d-- {
			req.Disks = append(req.Disks, int64(r.IntN(10))*gib)
		}
	}
	nodes := st.SortedNodes()
	switch r.IntN(10) {
	case 0:
		gs := st.SortedGroups()
		req.Group = gs[r.IntN(len(gs))].Name
	case 1:
		req.Nodes = []string{nodes[r.IntN(len(nodes))].Name}
		if req.Template == TemplateDRBD && r.IntN(2) == 0 {
			req.Nodes = append(req.Nodes, nodes[r.IntN(len(nodes))].Name)
		}
	case 2:
		req.Exclude = []string{nodes[r.IntN(len(nodes))].UUID}
	}
	return req
}

// snapshotOf serialises a state's exported content.
func snapshotOf(st *fsm.State) string {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func copyState(st *fsm.State) *fsm.State {
	var out fsm.State
	if err := json.Unmarshal([]byte(snapshotOf(st)), &out); err != nil {
		panic(err)
	}
	return &out
}

// The reference below recomputes everything from the state directly,
// the slow and obvious way, to check the allocator against.

type refNode struct {
	n                          *fsm.Node
	memUsed, diskUsed, cpuUsed int64
	peers                      map[string]int64
}

func (r *refNode) rMem() int64 {
	var m int64
	for _, v := range r.peers {
		m = max(m, v)
	}
	return m
}

func (r *refNode) cpuCap(o Options) int64 {
	ratio := o.VCPURatio
	if ratio == 0 {
		ratio = 1
	}
	return int64(math.Floor(float64(r.n.Resources.CPUs) * ratio))
}

func refDisk(template string, disks []int64) int64 {
	var sum int64
	for _, d := range disks {
		sum += d
		if template == TemplateDRBD {
			sum += 128
		}
	}
	return sum
}

func refTable(st *fsm.State, skip string) map[string]*refNode {
	t := map[string]*refNode{}
	for u, n := range st.Nodes {
		t[u] = &refNode{n: n, peers: map[string]int64{}}
	}
	for _, i := range st.Instances {
		if i.UUID == skip {
			continue
		}
		var sizes []int64
		for _, d := range i.Disks {
			sizes = append(sizes, d.SizeMiB)
		}
		disk := refDisk(i.DiskTemplate, sizes)
		if p := t[i.PrimaryNode]; p != nil {
			p.memUsed += i.MemoryMiB
			p.cpuUsed += int64(i.VCPUs)
			p.diskUsed += disk
		}
		for _, s := range i.SecondaryNodes {
			if sn := t[s]; sn != nil {
				sn.diskUsed += disk
				if t[i.PrimaryNode] != nil {
					sn.peers[i.PrimaryNode] += i.MemoryMiB
				}
			}
		}
	}
	return t
}

func refUsable(n *fsm.Node, o Options) bool {
	return !n.Offline && !n.Drained && n.VMCapable && !o.Dead[n.UUID] && !o.Dead[n.Name]
}

func refU(used, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(used) / float64(total)
}

func refGroupScore(t map[string]*refNode, group string, o Options) float64 {
	var sum float64
	n := 0
	for _, r := range t {
		if r.n.Group == group && refUsable(r.n, o) {
			n++
			sum += refU(r.memUsed, r.n.Resources.MemoryMiB)*refU(r.memUsed, r.n.Resources.MemoryMiB) +
				refU(r.diskUsed, r.n.Resources.DiskMiB)*refU(r.diskUsed, r.n.Resources.DiskMiB) +
				refU(r.cpuUsed, r.cpuCap(o))*refU(r.cpuUsed, r.cpuCap(o))
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

type refChoice struct {
	p, s  string // UUIDs
	rank  int
	score float64
}

// refPlacements lists every valid placement of req with its rank and the
// group score after it.
func refPlacements(st *fsm.State, req Request, o Options) []refChoice {
	t := refTable(st, "")
	mem, cpu, disk := req.MemoryMiB, int64(req.VCPUs), refDisk(req.Template, req.Disks)
	excluded := map[string]bool{}
	for _, e := range req.Exclude {
		excluded[e] = true
	}
	ok := func(r *refNode) bool { return refUsable(r.n, o) && !excluded[r.n.UUID] && !excluded[r.n.Name] }
	node := func(ref string) *refNode {
		for _, r := range t {
			if r.n.UUID == ref || r.n.Name == ref {
				return r
			}
		}
		return nil
	}
	var prims []*refNode
	if len(req.Nodes) > 0 {
		prims = []*refNode{node(req.Nodes[0])}
	} else {
		for _, r := range t {
			g := st.Groups[r.n.Group]
			if req.Group != "" && g.Name != req.Group && g.UUID != req.Group || req.Group == "" && g.AllocPolicy == fsm.AllocUnallocable {
				continue
			}
			prims = append(prims, r)
		}
	}
	var out []refChoice
	for _, p := range prims {
		free := p.n.Resources.MemoryMiB - p.memUsed
		if !ok(p) || free-mem < p.rMem() || p.n.Resources.DiskMiB-p.diskUsed < disk || p.cpuCap(o)-p.cpuUsed < cpu {
			continue
		}
		rank := policyRank(st.Groups[p.n.Group].AllocPolicy)
		p.memUsed += mem
		p.cpuUsed += cpu
		p.diskUsed += disk
		if req.Template != TemplateDRBD {
			out = append(out, refChoice{p: p.n.UUID, rank: rank, score: refGroupScore(t, p.n.Group, o)})
		} else {
			for _, s := range t {
				if len(req.Nodes) == 2 && s != node(req.Nodes[1]) {
					continue
				}
				sfree := s.n.Resources.MemoryMiB - s.memUsed
				if s == p || !ok(s) || s.n.Group != p.n.Group || s.n.Resources.DiskMiB-s.diskUsed < disk ||
					sfree < s.rMem() || sfree < s.peers[p.n.UUID]+mem {
					continue
				}
				s.diskUsed += disk
				out = append(out, refChoice{p: p.n.UUID, s: s.n.UUID, rank: rank, score: refGroupScore(t, p.n.Group, o)})
				s.diskUsed -= disk
			}
		}
		p.memUsed -= mem
		p.cpuUsed -= cpu
		p.diskUsed -= disk
	}
	return out
}

// refBest returns the best rank and the best score within it.
func refBest(cs []refChoice) (int, float64) {
	rank, score := 3, math.Inf(1)
	for _, c := range cs {
		if c.rank < rank || c.rank == rank && c.score < score {
			rank, score = c.rank, c.score
		}
	}
	return rank, score
}

// checkNoOvercommit: after the instance is recorded, its primary has the
// memory, disk and vcpus it gives, its secondary the disk, and both pass
// N+1.
func checkNoOvercommit(t *testing.T, st *fsm.State, o Options, res Result) {
	t.Helper()
	rt := refTable(st, "")
	for _, u := range res.Nodes() {
		r := rt[u]
		cpuOver := u == res.Primary && r.cpuUsed > r.cpuCap(o)
		if r.memUsed > r.n.Resources.MemoryMiB || r.diskUsed > r.n.Resources.DiskMiB || cpuOver {
			t.Fatalf("%s overcommitted: memory %d/%d disk %d/%d vcpus %d/%d", r.n.Name,
				r.memUsed, r.n.Resources.MemoryMiB, r.diskUsed, r.n.Resources.DiskMiB, r.cpuUsed, r.cpuCap(o))
		}
		if free := r.n.Resources.MemoryMiB - r.memUsed; free < r.rMem() {
			t.Fatalf("%s fails N+1: %d MiB free, %d reserved", r.n.Name, free, r.rMem())
		}
	}
}

// TestAllocateProperties: on random states, a placement is valid, never
// overcommits, is as good as the best of all valid placements (by the
// reference's own score), and an allocation fails exactly when no valid
// placement exists.
func TestAllocateProperties(t *testing.T) {
	r := newRand(1)
	placed, failed := 0, 0
	for trial := 0; trial < 400; trial++ {
		st := randomState(r, trial)
		o := randomOpts(r, st)
		for k := 0; k < 8; k++ {
			req := randomRequest(r, st)
			res, err := Allocate(st, req, o)
			var fe *fsm.Error
			if err != nil && (!errors.As(err, &fe) || fe.Code != fsm.CodeNoRes) {
				continue // malformed pins: the tables test those
			}
			cands := refPlacements(st, req, o)
			if err != nil {
				if len(cands) > 0 {
					t.Fatalf("trial %d: %+v failed (%v) but %s/%s fits", trial, req, err, cands[0].p, cands[0].s)
				}
				failed++
				continue
			}
			var mine *refChoice
			for i := range cands {
				if cands[i].p == res.Primary && cands[i].s == res.Secondary {
					mine = &cands[i]
				}
			}
			if mine == nil {
				t.Fatalf("trial %d: %+v placed on %v, which the reference finds invalid", trial, req, res.NodeNames())
			}
			rank, score := refBest(cands)
			if mine.rank != rank || mine.score > score+1e-9 {
				t.Fatalf("trial %d: %+v placed on %v (rank %d, score %v), best is rank %d score %v", trial, req, res.NodeNames(), mine.rank, mine.score, rank, score)
			}
			if math.Abs(mine.score-res.Score) > 1e-9 {
				t.Fatalf("trial %d: reported score %v, reference %v", trial, res.Score, mine.score)
			}
			if st.Nodes[res.Primary].Group != res.Group || res.Secondary != "" && st.Nodes[res.Secondary].Group != res.Group {
				t.Fatalf("trial %d: nodes %v not in group %s", trial, res.NodeNames(), res.GroupName)
			}
			again, _ := Allocate(st, req, o)
			if again != res {
				t.Fatalf("trial %d: not deterministic: %+v then %+v", trial, res, again)
			}
			name := fmt.Sprintf("new%d", k)
			commit(st, name, req, res)
			checkNoOvercommit(t, st, o, res)
			placed++
		}
	}
	t.Logf("%d placements, %d refusals checked", placed, failed)
	if placed < 500 || failed < 100 {
		t.Fatalf("too few cases of each kind: %d placed, %d failed", placed, failed)
	}
}
