package alloc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// indexed returns the hand-built state as a replica holds it: restored
// from a snapshot, so with its indexes, the usage index among them. The
// allocator reads that index instead of counting the instances; on a
// hand-built state it counts.
func indexed(tb testing.TB, st *fsm.State) *fsm.State {
	tb.Helper()
	out, err := restored(st)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// restored writes the state as a snapshot and restores it.
func restored(st *fsm.State) (*fsm.State, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	rec := func(t string, v any) error { return enc.Encode(map[string]any{"t": t, "v": v}) }
	if err := enc.Encode(map[string]any{"format": "gnt-fsm", "version": fsm.SnapshotVersion, "index": 1}); err != nil {
		return nil, err
	}
	if err := rec("cluster", st.Cluster); err != nil {
		return nil, err
	}
	for _, g := range st.SortedGroups() {
		if err := rec("group", g); err != nil {
			return nil, err
		}
	}
	for _, n := range st.SortedNodes() {
		if err := rec("node", n); err != nil {
			return nil, err
		}
	}
	for _, i := range st.SortedInstances() {
		if err := rec("instance", i); err != nil {
			return nil, err
		}
	}
	if err := rec("queue", map[string]any{"next_job_id": 1, "epoch": 0, "finished": []int64{}}); err != nil {
		return nil, err
	}
	out, _, err := fsm.DecodeSnapshot(&buf)
	if err != nil {
		return nil, err
	}
	if _, ok := out.Usage(); !ok {
		return nil, fmt.Errorf("restored state has no usage index")
	}
	return out, nil
}

// oddInstances adds records Apply would refuse but an old snapshot might
// hold, so that reading the index is checked against counting on them too:
// a primary that is not a node, the primary as its own secondary, two
// secondaries, the same secondary twice, no memory, no nodes at all.
func oddInstances(r *rand.Rand, c *cluster) {
	names := c.st.SortedNodes()
	node := func() string { return names[r.IntN(len(names))].Name }
	for k := 0; k < 1+r.IntN(4); k++ {
		name := fmt.Sprintf("odd%02d", k)
		p := node()
		switch r.IntN(6) {
		case 0:
			c.inst(name, TemplateDRBD, "gone", node(), 1024, gib, 1)
		case 1:
			c.inst(name, TemplateDRBD, p, p, 1024, gib, 1)
		case 2:
			c.inst(name, TemplateDRBD, p, node(), 512, gib, 1, func(i *fsm.Instance) {
				i.SecondaryNodes = append(i.SecondaryNodes, uuid(node()))
			})
		case 3:
			s := node()
			c.inst(name, TemplateDRBD, p, s, 512, gib, 1, func(i *fsm.Instance) {
				i.SecondaryNodes = append(i.SecondaryNodes, uuid(s))
			})
		case 4:
			c.inst(name, TemplateDRBD, p, node(), 0, gib, 1)
		default:
			c.inst(name, TemplatePlain, p, "", 1024, gib, 1, forthcoming, func(i *fsm.Instance) { i.PrimaryNode = "" })
		}
	}
}

// TestIndexedMatchesCounting: on random states, odd records included,
// Allocate (also re-placing an instance of the state), Capacity,
// EvacuatePlan and Usage answer exactly alike whether they read the usage
// index or count every instance.
func TestIndexedMatchesCounting(t *testing.T) {
	r := newRand(7)
	type answer struct {
		V   any
		Err string
	}
	ans := func(v any, err error) answer {
		a := answer{V: v}
		if err != nil {
			a.Err = err.Error()
		}
		return a
	}
	same := func(trial int, what string, counted, read answer) {
		t.Helper()
		if !reflect.DeepEqual(counted, read) {
			t.Fatalf("trial %d: %s differs:\ncounting: %+v\nindex:    %+v", trial, what, counted, read)
		}
	}
	cases := 0
	for trial := 0; trial < 300; trial++ {
		st := randomState(r, trial)
		if trial%3 == 0 {
			c := &cluster{st: st}
			oddInstances(r, c)
		}
		ix := indexed(t, st)
		o := randomOpts(r, st)
		o.AllowRecreate = r.IntN(2) == 0
		o.MaxCapacity = 50
		same(trial, "usage", ans(Usage(st, o), nil), ans(Usage(ix, o), nil))
		insts := st.SortedInstances()
		for k := 0; k < 6; k++ {
			req := randomRequest(r, st)
			if len(insts) > 0 && r.IntN(3) == 0 {
				i := insts[r.IntN(len(insts))]
				req.Instance = i.Name
				if r.IntN(2) == 0 {
					req.Instance = i.UUID
				}
			}
			a, aerr := Allocate(st, req, o)
			b, berr := Allocate(ix, req, o)
			same(trial, fmt.Sprintf("Allocate(%+v)", req), ans(a, aerr), ans(b, berr))
			if req.MemoryMiB > 0 {
				a, aerr := Capacity(st, req, o)
				b, berr := Capacity(ix, req, o)
				same(trial, fmt.Sprintf("Capacity(%+v)", req), ans(a, aerr), ans(b, berr))
			}
			cases++
		}
		for _, n := range st.SortedNodes() {
			for _, mode := range []EvacMode{EvacPrimary, EvacSecondary, EvacAll} {
				a, aerr := EvacuatePlan(st, n.Name, mode, o)
				b, berr := EvacuatePlan(ix, n.Name, mode, o)
				same(trial, fmt.Sprintf("EvacuatePlan(%s, %s)", n.Name, mode), ans(a, aerr), ans(b, berr))
				cases++
			}
		}
	}
	t.Logf("%d answers compared", cases)
}

// TestIndexedBigState: the benchmarks' state answers alike both ways.
func TestIndexedBigState(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the 20000-instance state")
	}
	st, ix := bigHandState(), bigState()
	for _, req := range []Request{plain(4*gib, 20*gib, 2), drbd(4*gib, 20*gib, 2), {Template: TemplateDRBD, MemoryMiB: 1024, Instance: "inst00150"}} {
		a, aerr := Allocate(st, req, Options{})
		b, berr := Allocate(ix, req, Options{})
		if a != b || fmt.Sprint(aerr) != fmt.Sprint(berr) {
			t.Errorf("Allocate(%+v): counting %+v %v, index %+v %v", req, a, aerr, b, berr)
		}
	}
	opts := Options{AllowRecreate: true}
	a, aerr := EvacuatePlan(st, "node0000", EvacAll, opts)
	b, berr := EvacuatePlan(ix, "node0000", EvacAll, opts)
	if !reflect.DeepEqual(a, b) || fmt.Sprint(aerr) != fmt.Sprint(berr) {
		t.Errorf("EvacuatePlan differs: counting %d moves %v, index %d moves %v", len(a.Moves), aerr, len(b.Moves), berr)
	}
	if !reflect.DeepEqual(Usage(st, Options{}), Usage(ix, Options{})) {
		t.Error("Usage differs")
	}
}
