package locking

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

func reportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "acq/s")
	}
}

// BenchmarkAcquireUncontended: one owner takes and gives back one
// instance lock, holding nothing else (the lock and the owner come and go
// each time).
func BenchmarkAcquireUncontended(b *testing.B) {
	m := NewManager()
	ctx := context.Background()
	reqs := []Request{{Level: LevelInstance, Names: []string{"inst1"}, Mode: Exclusive}}
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Acquire(ctx, 1, 0, reqs, 0); err != nil {
			b.Fatal(err)
		}
		m.Release(1, reqs)
	}
	reportRate(b)
}

// BenchmarkAcquireUncontendedOpcode: a typical opcode's locks (BGL
// shared, an instance, its two nodes' resources) with 64 other owners
// holding the BGL and other instances.
func BenchmarkAcquireUncontendedOpcode(b *testing.B) {
	m := NewManager()
	ctx := context.Background()
	for o := range int64(64) {
		if err := m.Acquire(ctx, 100+o, 0, opLocks("other"+strconv.Itoa(int(o)), "node"+strconv.Itoa(int(o))), 0); err != nil {
			b.Fatal(err)
		}
	}
	reqs := []Request{
		members(LevelCluster, Shared, BGL),
		ix("inst1"),
		members(LevelNodeRes, Exclusive, "nodeA", "nodeB"),
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Acquire(ctx, 1, 0, reqs, 0); err != nil {
			b.Fatal(err)
		}
		m.ReleaseAll(1)
	}
	reportRate(b)
}

// contended runs b.N acquisitions spread over exactly 16 goroutines
// (whatever the number of cores), each its own owner, taking and
// releasing the locks chosen by pick.
func contended(b *testing.B, pick func(i uint64) []Request) {
	m := NewManager()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for o := range int64(16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := uint64(o+1) * 0x9e3779b97f4a7c15
			for next.Add(1) <= int64(b.N) {
				i = i*6364136223846793005 + 1442695040888963407
				reqs := pick(i >> 33)
				if err := m.Acquire(ctx, o, 0, reqs, 0); err != nil {
					b.Error(err)
					return
				}
				m.ReleaseAll(o)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportRate(b)
}

var exclusive4 = [4][]Request{{ix("i0")}, {ix("i1")}, {ix("i2")}, {ix("i3")}}

// BenchmarkAcquireContended16: 16 owners on 4 instance locks, exclusive.
func BenchmarkAcquireContended16(b *testing.B) {
	contended(b, func(i uint64) []Request { return exclusive4[i%4] })
}

// BenchmarkAcquireContended16Shared: 16 owners taking the BGL and one
// instance shared, the instance out of 4: no request conflicts, all
// contend for the manager.
func BenchmarkAcquireContended16Shared(b *testing.B) {
	var shared4 [4][]Request
	for i := range shared4 {
		shared4[i] = []Request{members(LevelCluster, Shared, BGL), is("i" + strconv.Itoa(i))}
	}
	contended(b, func(i uint64) []Request { return shared4[i%4] })
}

// BenchmarkAcquireContended16Mixed: as the shared variant, but one
// request in 8 wants its instance exclusive.
func BenchmarkAcquireContended16Mixed(b *testing.B) {
	var mixed [8][]Request
	for i := range mixed {
		mode := Shared
		if i == 0 {
			mode = Exclusive
		}
		mixed[i] = []Request{members(LevelCluster, Shared, BGL), members(LevelInstance, mode, "i"+strconv.Itoa(i%4))}
	}
	contended(b, func(i uint64) []Request { return mixed[i%8] })
}
