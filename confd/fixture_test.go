package confd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// Configurations for tests and benchmarks are put into a real FSM the way
// a follower receives a whole state: as a snapshot it restores. (No
// opcode creates instances yet.)

func restore(t testing.TB, serial int64, nodes []*fsm.Node, insts []*fsm.Instance) *fsm.FSM {
	t.Helper()
	var buf bytes.Buffer
	line := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	rec := func(kind string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		line(map[string]any{"t": kind, "v": json.RawMessage(b)})
	}
	line(map[string]any{"format": "gnt-fsm", "version": 2, "index": 100})
	rec("cluster", &fsm.Cluster{Name: "cluster.example.com", UUID: "uuid-cluster", SerialNo: serial, CTime: 1700000000, MTime: 1700000100,
		CandidatePoolSize: 10, MaxVoters: 5, DefaultIAllocator: "hail", NDParams: map[string]any{}, Tags: []string{"a"}, MasterNode: "uuid-node1"})
	rec("group", &fsm.Group{Name: "default", UUID: "uuid-group", AllocPolicy: "preferred", NDParams: map[string]any{}, Tags: []string{}, SerialNo: 1})
	for _, n := range nodes {
		if n.Group == "" {
			n.Group = "uuid-group"
		}
		if n.UUID == "" {
			n.UUID = "uuid-" + n.Name
		}
		n.NDParams, n.Tags, n.SerialNo = map[string]any{}, []string{}, 3
		rec("node", n)
	}
	for _, i := range insts {
		if i.UUID == "" {
			i.UUID = "uuid-" + i.Name
		}
		i.Tags, i.SerialNo = []string{}, 5
		if i.SecondaryNodes == nil {
			i.SecondaryNodes = []string{}
		}
		rec("instance", i)
	}
	rec("queue", map[string]any{"next_job_id": 1, "epoch": 1, "finished": []int64{}})
	f := fsm.New()
	if err := f.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	return f
}

// testFSM is a small cluster with a node in every role and instances on
// the default link, an explicit link and the default link spelt out.
func testFSM(t testing.TB) *fsm.FSM {
	nodes := []*fsm.Node{
		{Name: "node1", PrimaryIP: "192.0.2.1", MasterCandidate: true, MasterCapable: true},
		{Name: "node2", PrimaryIP: "192.0.2.2", MasterCandidate: true, MasterCapable: true},
		{Name: "node3", PrimaryIP: "192.0.2.3", Drained: true},
		{Name: "node4", PrimaryIP: "192.0.2.4", Offline: true},
		{Name: "node5", PrimaryIP: "192.0.2.5"},
		{Name: "node6", PrimaryIP: "192.0.2.6", Drained: true, Offline: true, MasterCandidate: true},
	}
	insts := []*fsm.Instance{
		{Name: "inst1", PrimaryNode: "uuid-node5", DiskTemplate: "plain",
			Disks: []fsm.Disk{{UUID: "d1", SizeMiB: 1024, Mode: "rw"}},
			NICs:  []fsm.NIC{{UUID: "n1", MAC: "aa:00:00:00:00:01", IP: "192.0.2.10"}, {UUID: "n2", MAC: "aa:00:00:00:00:02", IP: "198.51.100.10", Link: "br1"}}},
		{Name: "inst2", PrimaryNode: "uuid-node2", SecondaryNodes: []string{"uuid-node5"}, DiskTemplate: "drbd",
			Disks: []fsm.Disk{
				{UUID: "d2", SizeMiB: 2048, Mode: "rw", DRBD: &fsm.DRBDLogicalID{Port: 11000, Secret: "ab", Ends: []fsm.DRBDEnd{{Node: "uuid-node2"}, {Node: "uuid-node5", Minor: 3}}}},
				{UUID: "d3", SizeMiB: 10, Mode: "ro", DRBD: &fsm.DRBDLogicalID{Port: 11001, Secret: "cd", Ends: []fsm.DRBDEnd{{Node: "uuid-node2", Minor: 1}, {Node: "uuid-node5", Minor: 4}}}},
			},
			NICs: []fsm.NIC{{UUID: "n3", MAC: "aa:00:00:00:00:03", IP: "192.0.2.11", Link: DefaultNICLink}}},
		{Name: "inst3", PrimaryNode: "uuid-node4", DiskTemplate: "diskless"},
	}
	return restore(t, 17, nodes, insts)
}

func testState(t testing.TB) *fsm.State {
	var st *fsm.State
	testFSM(t).Read(func(s *fsm.State, _ uint64) { st = s })
	return st
}

// bigFSM is the benchmark's configuration: nodes nodes and insts
// instances with one NIC each on the default link.
func bigFSM(t testing.TB, nodes, insts int) *fsm.FSM {
	ns := make([]*fsm.Node, nodes)
	for i := range ns {
		ns[i] = &fsm.Node{Name: fmt.Sprintf("node%d", i), PrimaryIP: fmt.Sprintf("10.%d.%d.%d", 1+i>>16, i>>8&255, i&255),
			UUID: fmt.Sprintf("uuid-node%d", i), MasterCandidate: i < 5, MasterCapable: true, VMCapable: true, Drained: i%97 == 3}
	}
	is := make([]*fsm.Instance, insts)
	for i := range is {
		is[i] = &fsm.Instance{Name: fmt.Sprintf("inst%d", i), PrimaryNode: ns[i%nodes].UUID, DiskTemplate: "plain",
			Disks: []fsm.Disk{{UUID: fmt.Sprintf("d%d", i), SizeMiB: 1024, Mode: "rw"}},
			NICs:  []fsm.NIC{{UUID: fmt.Sprintf("n%d", i), MAC: "aa:00:00:00:00:01", IP: benchInstIP(i)}}}
	}
	return restore(t, 1000, ns, is)
}

func benchInstIP(i int) string { return fmt.Sprintf("172.%d.%d.%d", 16+i>>16, i>>8&255, i&255) }

// fsmSource serves an FSM with a fixed master name.
type fsmSource struct {
	f      *fsm.FSM
	master string
}

func (s fsmSource) View(fn func(*fsm.State, string)) bool {
	s.f.Read(func(st *fsm.State, _ uint64) { fn(st, s.master) })
	return true
}

// stateSource serves one state; fixedSource makes one.
type stateSource struct {
	st     *fsm.State
	master string
}

func (s stateSource) View(fn func(*fsm.State, string)) bool { fn(s.st, s.master); return true }

func fixedSource(st *fsm.State, master string) Source { return stateSource{st, master} }
