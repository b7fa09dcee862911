package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// TestRemovedNodes: removing a node records when, in snapshots too; a
// dry run or a refused removal records nothing; old removals are
// forgotten after RemovedNodeMemory, and at most MaxRemovedNodes are kept.
func TestRemovedNodes(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	job := func(op string) Response {
		t.Helper()
		r, ok := h.apply(JobSubmit{Now: h.now, UUIDs: []string{h.uuid()}, Ops: []json.RawMessage{json.RawMessage(op)}}).(Response)
		if !ok {
			t.Fatalf("%s: not a response", op)
		}
		return r
	}
	if r := job(`{"OP_ID":"OP_NODE_ADD","node_name":"n2","primary_ip":"192.0.2.2"}`); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := job(`{"OP_ID":"OP_NODE_REMOVE","node_name":"n2","dry_run":true}`); r.Err != nil {
		t.Fatal(r.Err)
	}
	if job(`{"OP_ID":"OP_NODE_REMOVE","node_name":"n1"}`); readRemoved(h.f, "n1") != 0 || readRemoved(h.f, "n2") != 0 {
		t.Fatal("a dry run or a refused removal was recorded")
	}
	if r := job(`{"OP_ID":"OP_NODE_REMOVE","node_name":"n2"}`); r.Err != nil {
		t.Fatal(r.Err)
	}
	at := readRemoved(h.f, "n2")
	if at == 0 || at > h.now {
		t.Fatalf("removal of n2 recorded at %d (now %d)", at, h.now)
	}
	var buf bytes.Buffer
	if _, err := h.f.Freeze().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	back := New()
	if err := back.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if readRemoved(back, "n2") != at {
		t.Fatal("the removal did not survive a snapshot")
	}

	s := newState()
	s.noteRemoved("old", 0)
	s.noteRemoved("new", RemovedNodeMemory)
	if s.RemovedAt("old") != 0 || s.RemovedAt("new") != RemovedNodeMemory {
		t.Fatalf("after the memory: %v", s.RemovedNodes)
	}
	full := map[string]int64{}
	for i := range MaxRemovedNodes {
		full[fmt.Sprintf("n%d", i)] = RemovedNodeMemory + 1 + int64(i)
	}
	s.RemovedNodes = full
	for i := MaxRemovedNodes; i < MaxRemovedNodes+5; i++ {
		s.noteRemoved(fmt.Sprintf("n%d", i), RemovedNodeMemory+1+int64(i))
	}
	if len(s.RemovedNodes) != MaxRemovedNodes || s.RemovedAt("new") != 0 || s.RemovedAt("n4") != 0 || s.RemovedAt("n5") == 0 {
		t.Fatalf("past the cap: %d kept", len(s.RemovedNodes))
	}
}

func readRemoved(f *FSM, name string) (at int64) {
	f.Read(func(st *State, _ uint64) { at = st.RemovedAt(name) })
	return at
}
