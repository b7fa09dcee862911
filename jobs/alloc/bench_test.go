package alloc

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

var (
	bigOnce, bigHandOnce sync.Once
	big, bigHand         *fsm.State
)

// bigState is the benchmarks' cluster, restored from a snapshot as a
// replica holds it, so with its indexes: the allocator reads the usage
// index rather than counting every instance (which it does on the
// hand-built bigHandState).
func bigState() *fsm.State {
	bigOnce.Do(func() {
		var err error
		if big, err = restored(bigHandState()); err != nil {
			panic(err)
		}
	})
	return big
}

// bigHandState is the benchmarks' cluster built by hand: 1000 nodes in
// one group (the worst case for drbd pairs: every node is a candidate),
// 1% of them drained and 1% offline, and 20000 instances (half drbd, 40%
// plain, 10% diskless, every tenth forthcoming). node0000 holds 200 of
// them: 100 as primary, 100 as drbd secondary.
func bigHandState() *fsm.State {
	bigHandOnce.Do(func() { bigHand = bigCluster(256 * gib) })
	return bigHand
}

// bigCluster builds bigHandState's cluster with nodes of mem MiB.
func bigCluster(mem int64) *fsm.State {
	const nodes, insts = 1000, 20000
	c := newCluster().group("default", fsm.AllocPreferred)
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node%04d", i)
		var mods []func(*fsm.Node)
		switch i % 100 {
		case 37:
			mods = append(mods, drained)
		case 71:
			mods = append(mods, offline)
		}
		c.node(names[i], "default", mem, 16*1024*gib, 96, mods...)
	}
	for i := 0; i < insts; i++ {
		p := 1 + i%(nodes-1)
		s := 1 + (i*7+1+i/nodes)%(nodes-1)
		if s == p {
			s = 1 + p%(nodes-1)
		}
		switch {
		case i < 100:
			p = 0
		case i < 200:
			s = 0
			if p%100 == 71 { // offline: it could not feed a new secondary
				p++
			}
		}
		template, sec := TemplatePlain, ""
		switch x := i % 10; {
		case x < 5 || i >= 100 && i < 200:
			template, sec = TemplateDRBD, names[s]
		case x == 9:
			template = TemplateDiskless
		}
		disk := int64(10*(1+i%5)) * gib
		if template == TemplateDiskless {
			disk = 0
		}
		var mods []func(*fsm.Instance)
		if i%10 == 3 {
			mods = append(mods, forthcoming)
		}
		c.inst(fmt.Sprintf("inst%05d", i), template, names[p], sec, int64(512*(1+i%8)), disk, 1+i%4, mods...)
	}
	return c.st
}

func reportMS(b *testing.B, unit string) {
	if b.N > 0 {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), unit)
	}
}

// BenchmarkAllocate places one instance on the 1000-node, 20000-instance
// state: the whole call, building the resource table included (target
// under 5 ms). scan is what counting every instance would cost (reading
// each instance's nodes, a map lookup each, and disk sizes: memory-bound),
// the floor before the table was built from the usage index; compare the
// placements with it on a loaded machine.
func BenchmarkAllocate(b *testing.B) {
	st := bigState()
	b.Run("scan", func(b *testing.B) {
		idx := make(map[string]int32, len(st.Nodes))
		for u := range st.Nodes {
			idx[u] = 1
		}
		var sink int64
		for b.Loop() {
			for _, i := range st.Instances {
				sink += i.MemoryMiB + int64(idx[i.PrimaryNode])
				for _, s := range i.SecondaryNodes {
					sink += int64(idx[s])
				}
				for k := range i.Disks {
					sink += i.Disks[k].SizeMiB
				}
			}
		}
		reportMS(b, "ms/scan")
		if sink == 0 {
			b.Fatal("nothing read")
		}
	})
	for _, req := range []Request{plain(4*gib, 20*gib, 2), drbd(4*gib, 20*gib, 2)} {
		b.Run(req.Template, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Allocate(st, req, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			reportMS(b, "ms/placement")
		})
	}
}

// BenchmarkEvacuatePlan plans the evacuation (mode all) of node0000 and
// its 200 instances on the same state (target under 50 ms).
func BenchmarkEvacuatePlan(b *testing.B) {
	st := bigState()
	opts := Options{AllowRecreate: true}
	b.ReportAllocs()
	for b.Loop() {
		plan, err := EvacuatePlan(st, "node0000", EvacAll, opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(plan.Moves) != 200 {
			b.Fatalf("%d moves", len(plan.Moves))
		}
	}
	reportMS(b, "ms/plan")
}

// BenchmarkCapacity counts how many 32 GiB drbd instances still fit on
// the same state (each one a placement on the shrinking table).
func BenchmarkCapacity(b *testing.B) {
	st := bigState()
	spec := drbd(32*gib, 100*gib, 4)
	var count int
	for b.Loop() {
		res, err := Capacity(st, spec, Options{})
		if err != nil {
			b.Fatal(err)
		}
		count = res.Count
	}
	reportMS(b, "ms/count")
	b.ReportMetric(float64(count), "instances")
}

var (
	bigRoomOnce sync.Once
	bigRoom     *fsm.State
)

// bigRoomState is bigState's cluster with nodes of 56 GiB: nearly full
// of memory, with its 2000 reservations (every tenth instance) in the
// way of a large new instance.
func bigRoomState() *fsm.State {
	bigRoomOnce.Do(func() {
		var err error
		if bigRoom, err = restored(bigCluster(56 * gib)); err != nil {
			panic(err)
		}
	})
	return bigRoom
}

// BenchmarkMakeRoom places a 15 GiB instance on bigRoomState, where no
// node has the memory until a reservation moves: the whole call, the
// failed plain placement included (target well under 50 ms).
func BenchmarkMakeRoom(b *testing.B) {
	st := bigRoomState()
	for _, req := range []Request{plain(15*gib, 20*gib, 2), drbd(15*gib, 20*gib, 2)} {
		b.Run(req.Template, func(b *testing.B) {
			if _, err := Allocate(st, req, Options{}); err == nil {
				b.Fatal("the instance fits without moves")
			}
			b.ReportAllocs()
			for b.Loop() {
				p, err := MakeRoom(st, req, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Moves) == 0 {
					b.Fatal("no moves")
				}
			}
			reportMS(b, "ms/placement")
		})
	}
}
