package fsm

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestHarepSwitch: a cluster initialised with maintd_harep records it; an
// init without it (logged before the switch existed) keeps harep on, as
// then; OP_CLUSTER_SET_PARAMS maintd_harep switches it, and survives a
// snapshot.
func TestHarepSwitch(t *testing.T) {
	off, on := false, true
	for _, c := range []struct {
		name string
		init *bool
		want bool
	}{
		{"new cluster, off", &off, false},
		{"new cluster, on", &on, true},
		{"init logged before the switch", nil, true},
	} {
		h := newHarness()
		if r := h.apply(ClusterInit{Now: h.now, Name: "c", UUID: h.uuid(), GroupUUID: h.uuid(), MaintdHarep: c.init,
			Node: NodeSpec{Name: "n1", UUID: h.uuid(), PrimaryIP: "192.0.2.1"}}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
		var got bool
		h.f.Read(func(s *State, _ uint64) { got = s.Maint().HarepOn() })
		if got != c.want {
			t.Errorf("%s: harep on = %v, want %v", c.name, got, c.want)
		}
	}
	h := newHarness()
	h.initCluster("192.0.2.1")
	for _, want := range []bool{false, true, false} {
		op, _ := json.Marshal(map[string]any{"OP_ID": "OP_CLUSTER_SET_PARAMS", "maintd_harep": want})
		if r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{op}, UUIDs: []string{h.uuid()}}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
		data, err := h.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		g := New()
		if err := g.Restore(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		for _, f := range []*FSM{h.f, g} {
			var got bool
			f.Read(func(s *State, _ uint64) { got = s.Maint().HarepOn() })
			if got != want {
				t.Errorf("after maintd_harep=%v: harep on = %v", want, got)
			}
		}
	}
	bad, _ := json.Marshal(map[string]any{"OP_ID": "OP_CLUSTER_SET_PARAMS", "maintd_harep": "yes"})
	if r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{bad}, UUIDs: []string{h.uuid()}}).(Response); r.Err == nil {
		t.Errorf("maintd_harep \"yes\" (a string) accepted")
	}
}
