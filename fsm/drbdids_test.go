package fsm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// drbdWorld is netWorld at the current LogVersion with nodes n1 to n4.
func drbdWorld() *State {
	s := netWorld()
	s.LogVersion = LogVersion
	for k := 2; k <= 4; k++ {
		u := fmt.Sprint("n", k)
		s.Nodes[u] = &Node{Name: fmt.Sprint("node", k), UUID: u, Group: "g1", PrimaryIP: fmt.Sprint("10.0.0.", 10+k), VMCapable: true}
	}
	s.reindex()
	return s
}

// drbdInst is a drbd instance on p and sec with a disk per secret given,
// each carrying its secret as a step's record does.
func drbdInst(name, p, sec string, secrets ...string) Instance {
	in := inst(name)
	in.PrimaryNode, in.SecondaryNodes, in.DiskTemplate = p, []string{sec}, DTDrbd
	for k, x := range secrets {
		in.Disks = append(in.Disks, Disk{UUID: fmt.Sprintf("d-%s-%d", name, k), SizeMiB: 100, Mode: "rw", DRBD: &DRBDLogicalID{Secret: x}})
	}
	return in
}

func stored(s *State, name string) Instance { return *s.LookupInstance(name).clone() }

// ids renders an instance's disks' ids: "port secret node:minor,node:minor"
// per disk, separated by "; ".
func ids(s *State, name string) string {
	i := s.LookupInstance(name)
	if i == nil {
		return "no instance " + name
	}
	var out []string
	for _, d := range i.Disks {
		if d.DRBD == nil {
			out = append(out, "none")
			continue
		}
		var ends []string
		for _, e := range d.DRBD.Ends {
			ends = append(ends, fmt.Sprintf("%s:%d", e.Node, e.Minor))
			if e.Name != "" || e.IP != "" {
				ends = append(ends, "name/ip stored!")
			}
		}
		out = append(out, fmt.Sprintf("%d %s %s", d.DRBD.Port, d.DRBD.Secret, strings.Join(ends, ",")))
	}
	return strings.Join(out, "; ")
}

func minorsOf(s *State, node string) string {
	ms, holders := drbdMinors(s, node)
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%d=%s", m, holders[m]))
	}
	return strings.Join(out, " ")
}

// TestDRBDIDAllocation walks drbd instances through their lives: the
// lowest free port and minors at creation, two instances in one
// transaction, the ids kept by a failover, a new secondary's own minor
// with port and secret kept, and removal freeing what is given out again.
func TestDRBDIDAllocation(t *testing.T) {
	s := drbdWorld()
	check := func(what, name, want string) {
		t.Helper()
		if got := ids(s, name); got != want {
			t.Errorf("%s: %s has %q, want %q", what, name, got, want)
		}
	}
	if e := putInstance(s, drbdInst("a", "n1", "n2", "aa", "bb"), 0); e != nil {
		t.Fatal(e)
	}
	check("created", "a", "11000 aa n1:0,n2:0; 11001 bb n1:1,n2:1")

	// Two instances in one transaction: the second sees the first's.
	tx := s.begin(1)
	for _, in := range []Instance{drbdInst("b", "n2", "n3", "cc"), drbdInst("c", "n1", "n3", "dd")} {
		if e := (&InstancePut{Instance: in}).apply(tx); e != nil {
			t.Fatal(e)
		}
	}
	tx.commit()
	check("same transaction", "b", "11002 cc n2:2,n3:0")
	check("same transaction", "c", "11003 dd n1:2,n3:1")

	// A network port and drbd ports come from one pool.
	k := drbdInst("k", "n4", "n3", "ee")
	k.HVParams = map[string]any{"vnc_bind_address": "127.0.0.1"}
	if e := putInstance(s, k, 0); e != nil {
		t.Fatal(e)
	}
	if portOf(s, "k") != 11004 {
		t.Errorf("k's network port %d, want 11004", portOf(s, "k"))
	}
	check("beside a network port", "k", "11005 ee n4:0,n3:2")

	// Failover: the roles swap, the record (with or without the ids)
	// keeps them as they are.
	a := stored(s, "a")
	a.PrimaryNode, a.SecondaryNodes = "n2", []string{"n1"}
	for k := range a.Disks {
		a.Disks[k].DRBD = nil
	}
	if e := putInstance(s, a, a.SerialNo); e != nil {
		t.Fatal(e)
	}
	check("failed over", "a", "11000 aa n1:0,n2:0; 11001 bb n1:1,n2:1")
	a = stored(s, "a")
	a.PrimaryNode, a.SecondaryNodes = "n1", []string{"n2"}
	a.Disks[0].DRBD.Ends[0].Name, a.Disks[0].DRBD.Ends[0].IP = "node1", "10.0.0.5" // the agents' copy
	if e := putInstance(s, a, a.SerialNo); e != nil {
		t.Fatal(e)
	}
	check("migrated back with the agents' copy", "a", "11000 aa n1:0,n2:0; 11001 bb n1:1,n2:1")

	// A new secondary: port and secret stay, n1 keeps its minors, n4
	// gets its lowest free ones, n2's are freed.
	a = stored(s, "a")
	a.SecondaryNodes = []string{"n4"}
	if e := putInstance(s, a, a.SerialNo); e != nil {
		t.Fatal(e)
	}
	check("new secondary", "a", "11000 aa n1:0,n4:1; 11001 bb n1:1,n4:2")
	if got := minorsOf(s, "n2"); got != "2=u-b" {
		t.Errorf("n2's minors after a left it: %q", got)
	}

	// Removal frees port and minors; the next instance takes them.
	tx = s.begin(1)
	if e := (&InstanceRemove{UUID: "u-b", ExpectSerial: s.Instances["u-b"].SerialNo}).apply(tx); e != nil {
		t.Fatal(e)
	}
	tx.commit()
	if i, _ := drbdPortHolder(s, 11002); i != nil || minorsOf(s, "n2") != "" {
		t.Errorf("b's port or minors still held after its removal: %v, n2 %q", i, minorsOf(s, "n2"))
	}
	if e := putInstance(s, drbdInst("d", "n3", "n2", "ff"), 0); e != nil {
		t.Fatal(e)
	}
	check("after b's removal", "d", "11002 ff n3:0,n2:0")

	// A disk removed from the instance frees its port and minors; a disk
	// added gets the lowest free ones.
	a = stored(s, "a")
	a.Disks = a.Disks[1:]
	if e := putInstance(s, a, a.SerialNo); e != nil {
		t.Fatal(e)
	}
	a = stored(s, "a")
	a.Disks = append(a.Disks, Disk{UUID: "d-a-new", SizeMiB: 10, DRBD: &DRBDLogicalID{Secret: "0123"}})
	if e := putInstance(s, a, a.SerialNo); e != nil {
		t.Fatal(e)
	}
	check("a disk removed, one added", "a", "11001 bb n1:1,n4:2; 11000 0123 n1:0,n4:1")
	if i, k := drbdPortHolder(s, 11000); i == nil || i.Name != "a" || k != 1 {
		t.Errorf("drbdPortHolder(11000) = %v, %d", i, k)
	}

	// Recreated on other nodes (both new): new minors on both.
	c := stored(s, "c")
	c.PrimaryNode, c.SecondaryNodes = "n2", []string{"n4"}
	if e := putInstance(s, c, c.SerialNo); e != nil {
		t.Fatal(e)
	}
	check("recreated on new nodes", "c", "11003 dd n2:1,n4:3")
}

// TestDRBDIDReservations: a reservation and a forthcoming disk hold no id;
// the reservation made real gets them, from the secret its record carries.
func TestDRBDIDReservations(t *testing.T) {
	s := drbdWorld()
	r := drbdInst("r", "n1", "n2", "")
	r.Forthcoming = true
	r.Disks[0].DRBD = nil
	if e := putInstance(s, r, 0); e != nil {
		t.Fatal(e)
	}
	if got := ids(s, "r"); got != "none" {
		t.Errorf("reservation: %q", got)
	}
	r = stored(s, "r")
	r.Forthcoming = false
	r.Disks = append(r.Disks, Disk{UUID: "later", SizeMiB: 1, Forthcoming: true})
	if e := putInstance(s, r, r.SerialNo); e == nil || !strings.Contains(e.Msg, "carries no secret") || e.Field != "instance.disks.0.drbd" {
		t.Fatalf("made real without a secret: %v", e)
	}
	r.Disks[0].DRBD = &DRBDLogicalID{Secret: "abcdef"}
	if e := putInstance(s, r, r.SerialNo); e != nil {
		t.Fatal(e)
	}
	if got := ids(s, "r"); got != "11000 abcdef n1:0,n2:0; none" {
		t.Errorf("made real: %q", got)
	}
}

// TestDRBDIDRefusals: records that would choose or change what the
// cluster gives out, or need an id without a secret, are refused naming
// the field, and nothing changes.
func TestDRBDIDRefusals(t *testing.T) {
	mod := func(f func(in *Instance)) func(s *State) Instance {
		return func(s *State) Instance {
			a := stored(s, "a")
			f(&a)
			return a
		}
	}
	fresh := func(f func(in *Instance)) func(s *State) Instance {
		return func(s *State) Instance {
			in := drbdInst("new", "n3", "n4", "aa")
			f(&in)
			return in
		}
	}
	for _, c := range []struct {
		name   string
		record func(s *State) Instance
		field  string
		msg    string
	}{
		{"new disk without a secret", fresh(func(in *Instance) { in.Disks[0].DRBD = nil }), "instance.disks.0.drbd", "carries no secret"},
		{"new disk with an empty secret", fresh(func(in *Instance) { in.Disks[0].DRBD.Secret = "" }), "instance.disks.0.drbd", "the step that writes the record draws it"},
		{"secret not hex", fresh(func(in *Instance) { in.Disks[0].DRBD.Secret = "zz" }), "instance.disks.0.drbd.secret", "1 to 64 hexadecimal digits"},
		{"secret too long", fresh(func(in *Instance) { in.Disks[0].DRBD.Secret = strings.Repeat("a", 65) }), "instance.disks.0.drbd.secret", "1 to 64"},
		{"new disk naming a port", fresh(func(in *Instance) { in.Disks[0].DRBD.Port = 12000 }), "instance.disks.0.drbd.port", "port 12000 was not allocated"},
		{"new disk naming a minor", fresh(func(in *Instance) { in.Disks[0].DRBD.Ends = []DRBDEnd{{Node: "n3", Minor: 7}} }), "instance.disks.0.drbd.ends", "minor 7 on node n3 was not allocated"},
		{"plain disk with an id", fresh(func(in *Instance) { in.DiskTemplate, in.SecondaryNodes = DTPlain, nil }), "instance.disks.0.drbd", "holds no drbd logical id (template plain)"},
		{"changed secret", mod(func(in *Instance) { in.Disks[1].DRBD.Secret = "beef" }), "instance.disks.1.drbd.secret", "may not change it"},
		{"changed port", mod(func(in *Instance) { in.Disks[0].DRBD.Port = 11005 }), "instance.disks.0.drbd.port", "holds drbd port 11000"},
		{"another disk's port", mod(func(in *Instance) { in.Disks[0].DRBD.Port = 11001 }), "instance.disks.0.drbd.port", "may not change it to 11001"},
		{"changed minor", mod(func(in *Instance) { in.Disks[0].DRBD.Ends[1].Minor = 9 }), "instance.disks.0.drbd.ends", "minor 9 on node n2 was not allocated"},
		{"minor of a node not given", mod(func(in *Instance) { in.Disks[0].DRBD.Ends[1].Node = "n3" }), "instance.disks.0.drbd.ends", "on node n3 was not allocated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := drbdWorld()
			if e := putInstance(s, drbdInst("a", "n1", "n2", "aa", "bb"), 0); e != nil {
				t.Fatal(e)
			}
			before, _ := json.Marshal(s.Instances)
			beforeMinors, beforePorts := fmt.Sprint(s.minors), fmt.Sprint(s.ports)
			in := c.record(s)
			var expect int64
			if in.Name == "a" {
				expect = in.SerialNo
			}
			e := putInstance(s, in, expect)
			if e == nil || e.Field != c.field || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("got %v, want refused naming %s with %q", e, c.field, c.msg)
			}
			after, _ := json.Marshal(s.Instances)
			if string(after) != string(before) || fmt.Sprint(s.minors) != beforeMinors || fmt.Sprint(s.ports) != beforePorts {
				t.Errorf("the refused record changed the state")
			}
		})
	}
}

// TestDRBDIDExhaustion: a node with every minor held, and a pool with
// every port held, refuse a new drbd disk naming the node or the pool.
func TestDRBDIDExhaustion(t *testing.T) {
	s := drbdWorld()
	secrets := func(n int) []string {
		out := make([]string, n)
		for k := range out {
			out[k] = "ab"
		}
		return out
	}
	// 255 minors on n1: 17 instances of 15 disks.
	for k := 0; k < 17; k++ {
		sec := []string{"n2", "n3", "n4"}[k%3]
		if e := putInstance(s, drbdInst(fmt.Sprint("i", k), "n1", sec, secrets(15)...), 0); e != nil {
			t.Fatalf("instance %d: %v", k, e)
		}
	}
	if ms, _ := drbdMinors(s, "n1"); len(ms) != MaxDRBDMinor+1 || ms[len(ms)-1] != MaxDRBDMinor {
		t.Fatalf("n1 holds %d minors", len(ms))
	}
	e := putInstance(s, drbdInst("full", "n2", "n1", "ab"), 0)
	if e == nil || e.Code != CodeState || !strings.Contains(e.Msg, "minor on node node1") || !strings.Contains(e.Msg, "0-254") {
		t.Fatalf("a disk on a node without minors: %v", e)
	}
	if s.LookupInstance("full") != nil {
		t.Error("the refused instance was stored")
	}
	if e := putInstance(s, drbdInst("other", "n2", "n3", "ab"), 0); e != nil {
		t.Errorf("a drbd disk on other nodes: %v", e)
	}

	// The pool: network ports of vnc instances take all but one port.
	s = drbdWorld()
	for k := 0; k < LastNetworkPort-FirstNetworkPort; k++ {
		if e := putInstance(s, kvmInst(fmt.Sprintf("v%04d", k)), 0); e != nil {
			t.Fatalf("instance %d: %v", k, e)
		}
	}
	if e := putInstance(s, drbdInst("two", "n1", "n2", "ab", "cd"), 0); e == nil || e.Field != "instance.disks.1.drbd" ||
		!strings.Contains(e.Msg, "pool (11000-14999) has none free") {
		t.Fatalf("two drbd disks for one free port: %v", e)
	}
	if e := putInstance(s, drbdInst("one", "n1", "n2", "ab"), 0); e != nil || ids(s, "one") != "14999 ab n1:0,n2:0" {
		t.Errorf("one drbd disk for the last port: %v %q", e, ids(s, "one"))
	}
}

// TestDRBDIDOlderLog: a state of a log older than LogVersion 33 stores
// drbd records as they come (a replay of an older log is unchanged).
func TestDRBDIDOlderLog(t *testing.T) {
	s := drbdWorld()
	s.LogVersion = drbdIDVersion - 1
	in := drbdInst("old", "n1", "n2", "")
	in.Disks[0].DRBD = nil
	if e := putInstance(s, in, 0); e != nil {
		t.Fatal(e)
	}
	if got := ids(s, "old"); got != "none" {
		t.Errorf("older log: %q", got)
	}
	// Its next change at version 33 gives it its id.
	s.LogVersion = LogVersion
	in = stored(s, "old")
	in.Disks[0].DRBD = &DRBDLogicalID{Secret: "feed"}
	if e := putInstance(s, in, in.SerialNo); e != nil || ids(s, "old") != "11000 feed n1:0,n2:0" {
		t.Errorf("next change: %v %q", e, ids(s, "old"))
	}
}

// TestDRBDIDReplayAndRestore: the same log gives two replicas the same
// ids; a restored snapshot keeps them and rebuilds the indexes, so the
// next allocation continues as on the replica that never restarted.
func TestDRBDIDReplayAndRestore(t *testing.T) {
	build := func() (*usageHarness, []string) {
		// newUsageHarness's log, with a leader of this version.
		h := &usageHarness{harness: newHarness(), t: t}
		if r := h.apply(ClusterInit{Now: h.now, Name: "c", UUID: h.uuid(), GroupUUID: h.uuid(),
			Node: NodeSpec{Name: "node1", UUID: h.uuid(), PrimaryIP: "10.0.0.1"}}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
		for i := 2; i <= 4; i++ {
			h.addNode(i)
		}
		if r := h.apply(LeaderEstablish{Now: h.now, Node: "node1", LogVersion: LogVersion}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
		h.newJob()
		var ns []string
		h.f.Read(func(s *State, _ uint64) {
			for _, n := range s.SortedNodes() {
				ns = append(ns, n.UUID)
			}
		})
		return h, ns
	}
	run := func(h *usageHarness, ns []string, from, to int) {
		for k := from; k < to; k++ {
			in := drbdInst(fmt.Sprint("i", k), ns[k%4], ns[(k+1)%4], "aa", "bb")
			in.MemoryMiB, in.VCPUs = 1, 1
			if r := h.step(StepChange{InstancePut: &InstancePut{Instance: in}}); r.Err != nil {
				t.Fatal(r.Err)
			}
			if k%3 == 2 { // every third: the one before goes
				var serial int64
				h.f.Read(func(s *State, _ uint64) { serial = s.LookupInstance(fmt.Sprint("i", k-1)).SerialNo })
				if r := h.step(StepChange{InstanceRemove: &InstanceRemove{UUID: fmt.Sprint("u-i", k-1), ExpectSerial: serial}}); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
	}
	snapIDs := func(f *FSM) string {
		var out []string
		f.Read(func(s *State, _ uint64) {
			for _, i := range s.SortedInstances() {
				out = append(out, i.Name+": "+ids(s, i.Name))
			}
			for _, n := range s.SortedNodes() {
				out = append(out, n.Name+": "+minorsOf(s, n.UUID))
			}
		})
		return strings.Join(out, "\n")
	}
	h1, ns := build()
	h2, _ := build()
	run(h1, ns, 0, 12)
	run(h2, ns, 0, 12)
	if a, b := snapIDs(h1.f), snapIDs(h2.f); a != b {
		t.Fatalf("two replicas of one log differ:\n%s\n---\n%s", a, b)
	}
	if !strings.Contains(snapIDs(h1.f), "i0: 11000 aa") {
		t.Fatalf("no ids allocated:\n%s", snapIDs(h1.f))
	}
	r := restored(t, snapshotOf(t, h1.f))
	if a, b := snapIDs(h1.f), snapIDs(r); a != b {
		t.Fatalf("restored state differs:\n%s\n---\n%s", a, b)
	}
	var orig, rest map[string]map[int]string
	h1.f.Read(func(s *State, _ uint64) { orig = s.minors })
	r.Read(func(s *State, _ uint64) { rest = s.minors })
	if !reflect.DeepEqual(orig, rest) {
		t.Errorf("restored minor index %v, want %v", rest, orig)
	}
	// Continuing on the restored state gives what the other replica gives.
	h3 := &usageHarness{harness: &harness{f: r, index: h1.index, now: h1.now}, t: t, job: h1.job, steps: h1.steps}
	run(h1, ns, 12, 20)
	run(h3, ns, 12, 20)
	if a, b := snapIDs(h1.f), snapIDs(h3.f); a != b {
		t.Fatalf("the restored replica allocates otherwise:\n%s\n---\n%s", a, b)
	}
}

// drbdPortHolder returns the instance and disk index holding a drbd port;
// nil and -1 when no drbd disk holds it.
func drbdPortHolder(s *State, port int) (*Instance, int) {
	i := s.Instances[s.ports[port]]
	if i == nil {
		return nil, -1
	}
	for k, d := range i.Disks {
		if d.DRBD != nil && d.DRBD.Port == port {
			return i, k
		}
	}
	return nil, -1
}

// drbdMinors returns the drbd minors a node holds, ascending, with the
// UUID of the instance holding each.
func drbdMinors(s *State, node string) ([]int, map[int]string) {
	m := s.minors[node]
	out := make([]int, 0, len(m))
	holders := make(map[int]string, len(m))
	for minor, u := range m {
		out = append(out, minor)
		holders[minor] = u
	}
	slices.Sort(out)
	return out, holders
}
