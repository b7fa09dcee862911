package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/rpc"
)

// fakeStorage answers storage-list with what the test sets.
type fakeStorage struct {
	rep rpc.NodeStorageReport
	err error
}

func (f *fakeStorage) StorageList(context.Context, *fsm.Node) (rpc.NodeStorageReport, error) {
	return f.rep, f.err
}

func vgReport(free int64, allocatable bool) rpc.NodeStorageReport {
	return rpc.NodeStorageReport{VG: "xenvg", FileDir: "/srv/disks", Units: []rpc.NodeStorageUnit{
		{Type: fsm.StorageLVMPV, Name: "/dev/loop0", VG: "xenvg", Size: 10000, Used: 10000 - free, Free: free, Allocatable: allocatable},
		{Type: fsm.StorageLVMVG, Name: "xenvg", Size: 10000, Used: 10000 - free, Free: free, Allocatable: true},
		{Type: fsm.StorageFile, Name: "/srv/disks", Size: 50000, Used: 1000, Free: 49000, Allocatable: true},
	}}
}

// TestStorageRecorder: a first report is written, the same figures or a
// change under the threshold write nothing, a change beyond it or of the
// allocatable flag is written; partial or malformed listings write
// nothing and keep the last report.
func TestStorageRecorder(t *testing.T) {
	f, a := livenessCluster(t)
	lister := &fakeStorage{}
	var warned []string
	r := &storageRecorder{FSM: f, Apply: a, Epoch: 1, List: lister, Log: hclog.NewNullLogger(), Clock: func() time.Time { return t0 },
		Warn: func(node, kind, msg string, args ...any) { warned = append(warned, kind) }}
	node := &fsm.Node{Name: "node2"}
	writes := func() uint64 { return a.index }
	step := func(rep rpc.NodeStorageReport, wantWrite bool) {
		t.Helper()
		lister.rep = rep
		before := writes()
		if err := r.record(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		if got := writes() != before; got != wantWrite {
			t.Fatalf("wrote %v, want %v", got, wantWrite)
		}
	}
	step(vgReport(6000, true), true)
	step(vgReport(6000, true), false)
	step(vgReport(6000-storageThreshold(10000), true), false) // 50 MiB: not worth a write
	step(vgReport(5000, true), true)
	step(vgReport(5000, false), true) // pvchange -x n
	booted := func(id string) rpc.NodeStorageReport { rep := vgReport(5000, false); rep.BootID = id; return rep }
	step(booted("boot-1"), true) // a reboot (or the first boot id) is always written
	step(booted("boot-1"), false)
	step(booted("boot-2"), true)
	step(booted(""), false) // the node could not read its boot id: not a reboot
	f.Read(func(st *fsm.State, _ uint64) {
		if got := st.LookupNode("node2").Storage.BootID; got != "boot-2" {
			t.Errorf("recorded boot id %q", got)
		}
	})
	free := func() int64 {
		var sp fsm.Space
		f.Read(func(st *fsm.State, _ uint64) { sp, _ = st.LookupNode("node2").Storage.Space(fsm.DTPlain, 0) })
		return sp.Free
	}
	if got := free(); got != 0 {
		t.Errorf("plain space of a VG whose only PV is not allocatable: %d MiB, want 0", got)
	}
	partial := vgReport(100, true)
	partial.Errors = []string{"pvs: exit status 5"}
	step(partial, false)
	bad := vgReport(100, true)
	bad.Units[0].Free = 20000
	step(bad, false)
	lister.err = errors.New("connection refused")
	step(vgReport(100, true), false)
	if got := strings.Join(warned, ","); got != "storage_partial,storage_refused,storage_failed" {
		t.Errorf("warnings %s", got)
	}
	// Fenced by a newer leader.
	lister.err, lister.rep = nil, vgReport(100, true)
	r.Epoch = 2
	if err := r.record(context.Background(), node); !errors.Is(err, jobs.ErrFenced) {
		t.Errorf("a write of another epoch: %v, want jobs.ErrFenced", err)
	}
}

func TestStorageThreshold(t *testing.T) {
	for _, tc := range []struct{ size, want int64 }{{0, 8}, {1000, 8}, {1 << 20, 5242}} {
		if got := storageThreshold(tc.size); got != tc.want {
			t.Errorf("storageThreshold(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

// perNodeStorage answers storage-list per node (an error for the nodes
// in fail) and counts the calls.
type perNodeStorage struct {
	mu    sync.Mutex
	fail  map[string]bool
	calls map[string]int
}

func (p *perNodeStorage) StorageList(_ context.Context, n *fsm.Node) (rpc.NodeStorageReport, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[n.Name]++
	if p.fail[n.Name] {
		return rpc.NodeStorageReport{}, errors.New("connection refused")
	}
	return vgReport(5000, true), nil
}

func (p *perNodeStorage) count(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[name]
}

// TestUnreportedNodesAskedBetweenRounds: a node without a recorded
// storage report (just added) is asked between rounds, not a round's
// interval later; one whose listing fails is asked again after 2 s, then
// twice as long each time up to the interval; a node once recorded is
// asked by the rounds only.
func TestUnreportedNodesAskedBetweenRounds(t *testing.T) {
	f, a := livenessCluster(t)
	lister := &perNodeStorage{fail: map[string]bool{"node3": true}, calls: map[string]int{}}
	now := t0
	p := &diagnosePoller{FSM: f, Key: func() []byte { return testReportKey }, State: &diagnoseState{},
		Clock: func() time.Time { return now }, Log: hclog.NewNullLogger()}
	p.Storage = &storageRecorder{FSM: f, Apply: a, Epoch: 1, List: lister, Log: hclog.NewNullLogger(), Clock: p.Clock,
		Warn: func(string, string, string, ...any) {}}
	interval := 30 * time.Second
	var asked []string // node3's tries, as seconds since t0
	for s := 0; s <= 120; s++ {
		now = t0.Add(time.Duration(s) * time.Second)
		before := lister.count("node3")
		p.startUnreported(context.Background(), interval)
		p.polls.Wait()
		if lister.count("node3") != before {
			asked = append(asked, strconv.Itoa(s))
		}
	}
	// 0, then +2, +4, +8, +16, then every 30 s (the interval).
	if got, want := strings.Join(asked, " "), "0 2 6 14 30 60 90 120"; got != want {
		t.Errorf("node3 (failing) asked at %s s, want %s", got, want)
	}
	if n := lister.count("node2"); n != 1 {
		t.Errorf("node2 asked %d times, want once: it was recorded at the first try", n)
	}
	f.Read(func(st *fsm.State, _ uint64) {
		if st.LookupNode("node2").Storage == nil || st.LookupNode("node3").Storage != nil {
			t.Errorf("storage recorded: node2 %v, node3 %v", st.LookupNode("node2").Storage, st.LookupNode("node3").Storage)
		}
	})
	// node3 comes up: recorded, then no longer asked between rounds.
	lister.mu.Lock()
	lister.fail["node3"] = false
	lister.mu.Unlock()
	now = now.Add(interval)
	p.startUnreported(context.Background(), interval)
	p.polls.Wait()
	n := lister.count("node3")
	now = now.Add(interval)
	p.startUnreported(context.Background(), interval)
	p.polls.Wait()
	if lister.count("node3") != n {
		t.Errorf("node3 asked again between rounds once recorded")
	}
	if len(p.unreported) != 0 {
		t.Errorf("retry times kept for reported nodes: %v", p.unreported)
	}
}
