package fsm

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func kvmInst(name string) Instance {
	in := inst(name)
	in.Hypervisor = HVKVM
	return in
}

func portOf(s *State, name string) int {
	if i := s.LookupInstance(name); i != nil {
		return i.NetworkPort
	}
	return -1
}

// TestNetworkPortPool: kvm instances, and others but exec's with
// vnc_bind_address, get the pool's lowest free port when stored, others
// none; a removed instance's port is given out again; a
// failover or migration (a record stored again on other nodes) keeps it;
// a record may not choose or change its port.
func TestNetworkPortPool(t *testing.T) {
	s := netWorld()
	s.Nodes["n2"] = &Node{Name: "node2", UUID: "n2", Group: "g1", PrimaryIP: "10.0.0.6", SecondaryIP: "10.0.0.6", VMCapable: true}
	s.reindex()
	fake := inst("fake1")
	fake.Hypervisor = HVFake
	noHV := inst("nohv")
	vncNoHV := inst("vnc-nohv")
	vncNoHV.HVParams = map[string]any{"vnc_bind_address": "127.0.0.1"}
	resv := kvmInst("resv")
	resv.Forthcoming = true
	fakeVNC := inst("fakevnc")
	fakeVNC.Hypervisor, fakeVNC.HVParams = HVFake, map[string]any{"vnc_bind_address": "0.0.0.0"}
	for _, in := range []Instance{kvmInst("a"), fake, kvmInst("b"), noHV, vncNoHV, resv, kvmInst("c"), fakeVNC} {
		if e := putInstance(s, in, 0); e != nil {
			t.Fatalf("put %s: %v", in.Name, e)
		}
	}
	want := map[string]int{"a": 11000, "fake1": 0, "b": 11001, "nohv": 0, "vnc-nohv": 11002, "resv": 0, "c": 11003, "fakevnc": 11004}
	for name, p := range want {
		if got := portOf(s, name); got != p {
			t.Errorf("%s: port %d, want %d", name, got, p)
		}
	}
	if i := s.InstanceByPort(11001); i == nil || i.Name != "b" {
		t.Errorf("InstanceByPort(11001) = %v, want b", i)
	}

	// Removal frees the port; the next instance takes the lowest free.
	tx := s.begin(1)
	if e := (&InstanceRemove{UUID: "u-b", ExpectSerial: s.Instances["u-b"].SerialNo}).apply(tx); e != nil {
		t.Fatal(e)
	}
	tx.commit()
	if i := s.InstanceByPort(11001); i != nil {
		t.Errorf("port 11001 still held by %s after its removal", i.Name)
	}
	if e := putInstance(s, kvmInst("d"), 0); e != nil || portOf(s, "d") != 11001 {
		t.Errorf("d after b's removal: port %d (%v), want 11001", portOf(s, "d"), e)
	}
	// A reservation made real gets its port then.
	r := *s.LookupInstance("resv").clone()
	r.Forthcoming = false
	if e := putInstance(s, r, r.SerialNo); e != nil || portOf(s, "resv") != 11005 {
		t.Errorf("committed reservation: port %d (%v), want 11005", portOf(s, "resv"), e)
	}

	// Failover and migration store the record with another primary: the
	// port stays, whether the step carries it or not.
	a := *s.LookupInstance("a").clone()
	a.PrimaryNode = "n2"
	if e := putInstance(s, a, a.SerialNo); e != nil || portOf(s, "a") != 11000 {
		t.Errorf("a failed over: port %d (%v), want 11000", portOf(s, "a"), e)
	}
	a = *s.LookupInstance("a").clone()
	a.PrimaryNode, a.NetworkPort = "n1", 0
	if e := putInstance(s, a, a.SerialNo); e != nil || portOf(s, "a") != 11000 || s.InstanceByPort(11000).Name != "a" {
		t.Errorf("a migrated back by a record without its port: port %d (%v), want 11000", portOf(s, "a"), e)
	}

	// A record may not pick or change its port; nothing changes.
	a = *s.LookupInstance("a").clone()
	a.NetworkPort = 11010
	serial := a.SerialNo
	if e := putInstance(s, a, a.SerialNo); e == nil || e.Field != "instance.network_port" {
		t.Errorf("changing a's port: %v, want refused naming instance.network_port", e)
	}
	if portOf(s, "a") != 11000 || s.LookupInstance("a").SerialNo != serial || s.InstanceByPort(11010) != nil {
		t.Errorf("a refused change changed something: port %d", portOf(s, "a"))
	}
	e := kvmInst("e")
	e.NetworkPort = 12000
	if err := putInstance(s, e, 0); err == nil || err.Field != "instance.network_port" || s.LookupInstance("e") != nil {
		t.Errorf("a new record naming its port: %v, want refused", err)
	}
}

// TestNetworkPortExhaustion: with every port of the pool held, a kvm
// instance is refused by a message naming the pool, and nothing is
// stored; other instances are still accepted; a removal makes room.
func TestNetworkPortExhaustion(t *testing.T) {
	s := netWorld()
	n := LastNetworkPort - FirstNetworkPort + 1
	for k := 0; k < n; k++ {
		if e := putInstance(s, kvmInst(fmt.Sprintf("i%04d", k)), 0); e != nil {
			t.Fatalf("instance %d: %v", k, e)
		}
	}
	if got := portOf(s, fmt.Sprintf("i%04d", n-1)); got != LastNetworkPort {
		t.Errorf("the last instance has port %d, want %d", got, LastNetworkPort)
	}
	e := putInstance(s, kvmInst("full"), 0)
	if e == nil || e.Code != CodeState || e.Field != "instance.network_port" {
		t.Fatalf("a kvm instance with the pool exhausted: %v", e)
	}
	if want := "pool (11000-14999) has none free"; !strings.Contains(e.Msg, want) {
		t.Errorf("message %q does not name the pool", e.Msg)
	}
	if s.LookupInstance("full") != nil {
		t.Error("the refused instance was stored")
	}
	fake := inst("fake")
	fake.Hypervisor = HVFake
	if e := putInstance(s, fake, 0); e != nil {
		t.Errorf("an instance needing no port with the pool exhausted: %v", e)
	}
	// Raising the cluster's default hypervisor to kvm would need ports
	// for fake-less instances: refused whole.
	if e := putInstance(s, inst("plain"), 0); e != nil {
		t.Fatal(e)
	}
	kvm := HVKVM
	serial := s.Cluster.SerialNo
	if e := netApply(t, s, "", &OpClusterSetParams{DefaultHypervisor: &kvm}); e == nil || e.Code != CodeState {
		t.Errorf("default hypervisor kvm with the pool exhausted: %v, want refused", e)
	}
	if s.Cluster.DefaultHypervisor != "" || s.Cluster.SerialNo != serial {
		t.Errorf("the refused modification changed the cluster: %+v", s.Cluster)
	}
	victim := s.LookupInstance("i0123")
	tx := s.begin(1)
	if e := (&InstanceRemove{UUID: victim.UUID, ExpectSerial: victim.SerialNo}).apply(tx); e != nil {
		t.Fatal(e)
	}
	tx.commit()
	if e := putInstance(s, kvmInst("full"), 0); e != nil || portOf(s, "full") != FirstNetworkPort+123 {
		t.Errorf("after a removal: port %d (%v), want %d", portOf(s, "full"), e, FirstNetworkPort+123)
	}
}

// TestNetworkPortUpgrade: records without a port (stored before
// LogVersion 30) get theirs, in the order of their UUIDs, when the first
// leader of version 30 takes office, and the same on every replica; a
// restored snapshot carries them and rebuilds the pool's index; an
// instance that becomes kvm by the cluster's default gets its port then.
func TestNetworkPortUpgrade(t *testing.T) {
	build := func() *harness {
		h := newHarness()
		h.initCluster("10.0.0.1")
		h.apply(LeaderEstablish{Now: h.now, Node: "n1", LogVersion: networkPortVersion - 1})
		st := h.f.st
		st.Cluster.DefaultHypervisor = HVKVM
		n1 := st.LookupNode("n1").UUID
		for _, u := range []string{"u3", "u1", "u2"} {
			st.Instances[u] = &Instance{Name: "i" + u, UUID: u, PrimaryNode: n1, DiskTemplate: DTDiskless, AdminState: AdminDown,
				HVParams: map[string]any{}, BEParams: map[string]any{}, OSParams: map[string]any{}, Tags: []string{}}
		}
		fake := &Instance{Name: "ifake", UUID: "u0", PrimaryNode: n1, DiskTemplate: DTDiskless, AdminState: AdminDown, Hypervisor: HVFake,
			HVParams: map[string]any{}, BEParams: map[string]any{}, OSParams: map[string]any{}, Tags: []string{}}
		st.Instances["u0"] = fake
		st.reindex()
		return h
	}
	var snaps [][]byte
	for range 2 {
		h := build()
		if r := h.apply(LeaderEstablish{Now: h.now, Node: "n1", LogVersion: networkPortVersion - 1}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
		if p := h.f.st.Instances["u1"].NetworkPort; p != 0 {
			t.Errorf("a leader of version %d gave a port (%d)", networkPortVersion-1, p)
		}
		if r := h.apply(LeaderEstablish{Now: h.now, Node: "n1", LogVersion: LogVersion}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
		for u, p := range map[string]int{"u0": 0, "u1": 11000, "u2": 11001, "u3": 11002} {
			if got := h.f.st.Instances[u].NetworkPort; got != p {
				t.Errorf("after the upgrade, %s has port %d, want %d", u, got, p)
			}
		}
		snaps = append(snaps, snapshotOf(t, h.f))
	}
	if string(snaps[0]) != string(snaps[1]) {
		t.Error("two replicas upgraded alike hold different states")
	}
	f := restored(t, snaps[0])
	f.Read(func(s *State, _ uint64) {
		if i := s.InstanceByPort(11001); i == nil || i.UUID != "u2" {
			t.Errorf("restored index: port 11001 held by %v, want u2", i)
		}
	})

	// A cluster whose default hypervisor becomes kvm gives its instances
	// ports in the same change.
	s := netWorld()
	for _, n := range []string{"y", "x"} {
		if e := putInstance(s, inst(n), 0); e != nil {
			t.Fatal(e)
		}
	}
	kvm := HVKVM
	if e := netApply(t, s, "", &OpClusterSetParams{DefaultHypervisor: &kvm}); e != nil {
		t.Fatal(e)
	}
	if portOf(s, "x") != 11000 || portOf(s, "y") != 11001 {
		t.Errorf("after default_hypervisor kvm: x %d, y %d, want 11000, 11001 (by UUID)", portOf(s, "x"), portOf(s, "y"))
	}
}

// refAssignMissingPorts is the first implementation of
// assignMissingPorts, kept as the reference its one pass must agree
// with: for each instance, a new picker, which searches the pool from
// its start.
func refAssignMissingPorts(t *txn, strict bool) bool {
	for _, i := range t.portless() {
		p := t.portPicker(i.UUID).take()
		if p == 0 {
			return !strict
		}
		t.instanceRW(i.UUID).NetworkPort = p
	}
	return true
}

// portWorld is a state of n instances, random by seed: of every
// hypervisor, some reservations, some with vnc_bind_address, the first
// holders of them holding a port of the pool (distinct, anywhere in it);
// and stage, which changes a transaction over it alike for a seed: with
// churn, records removed and others stored again without their port or
// with another (one a record of the transaction may also hold); new ones.
func portWorld(seed int64, n, holders int, churn bool) (s *State, stage func(*txn)) {
	r := rand.New(rand.NewSource(seed))
	s = netWorld()
	s.Cluster.DefaultHypervisor = []string{"", HVKVM, HVFake}[r.Intn(3)]
	if r.Intn(2) == 0 {
		s.Cluster.HVParams = map[string]map[string]any{HVFake: {"vnc_bind_address": "0.0.0.0"}}
	}
	pool := r.Perm(LastNetworkPort - FirstNetworkPort + 1)
	mk := func(r *rand.Rand, u string) *Instance {
		in := &Instance{Name: "i" + u, UUID: u, Hypervisor: []string{"", HVKVM, HVFake, HVExec}[r.Intn(4)], Forthcoming: r.Intn(10) == 0}
		if r.Intn(3) == 0 {
			in.HVParams = map[string]any{"vnc_bind_address": "127.0.0.1"}
		}
		return in
	}
	for k := range n {
		u := fmt.Sprintf("%08x", r.Uint32())
		in := mk(r, u)
		if k < holders {
			in.NetworkPort = FirstNetworkPort + pool[k]
		}
		s.Instances[u] = in
	}
	s.reindex()
	stageSeed := r.Int63()
	return s, func(t *txn) {
		r := rand.New(rand.NewSource(stageSeed))
		us := make([]string, 0, len(s.Instances))
		for u := range s.Instances {
			us = append(us, u)
		}
		sort.Strings(us)
		for _, u := range us {
			if !churn {
				break
			}
			switch r.Intn(12) {
			case 0:
				t.insts[u] = nil
			case 1:
				t.instanceRW(u).NetworkPort = 0
			case 2:
				t.instanceRW(u).NetworkPort = FirstNetworkPort + r.Intn(40)
			}
		}
		for range r.Intn(20) {
			in := mk(r, fmt.Sprintf("%08x", r.Uint32()))
			if r.Intn(3) == 0 {
				in.NetworkPort = FirstNetworkPort + r.Intn(40)
			}
			t.insts[in.UUID] = in
		}
	}
}

// viewPorts is every instance's port in a transaction's view (-1: removed).
func viewPorts(t *txn) map[string]int {
	out := map[string]int{}
	for u, i := range t.st.Instances {
		out[u] = i.NetworkPort
	}
	for u, i := range t.insts {
		if i == nil {
			out[u] = -1
		} else {
			out[u] = i.NetworkPort
		}
	}
	return out
}

// TestAssignMissingPortsAsBefore: on states random by seed, small and
// with the pool about full, with and without strict, the one pass of
// assignMissingPorts gives the same instances the same ports, stages
// the same records and fails alike as the first implementation, which
// searched the pool again for each instance.
func TestAssignMissingPortsAsBefore(t *testing.T) {
	pool := LastNetworkPort - FirstNetworkPort + 1
	type world struct {
		n, holders int
		churn      bool
	}
	var worlds []world
	for k := range 40 {
		worlds = append(worlds, world{k * 7, k * 3, true})
	}
	// The pool about full: some instances are left without a port.
	worlds = append(worlds, world{pool + 30, pool - 25, true}, world{pool + 200, pool - 20, false}, world{pool + 5, pool, false})
	assigned, failed := 0, 0
	for k, w := range worlds {
		for _, strict := range []bool{false, true} {
			seed := int64(k)*2 + 1
			s, stage := portWorld(seed, w.n, w.holders, w.churn)
			ref, got := s.begin(1), s.begin(1)
			stage(ref)
			stage(got)
			before := viewPorts(got)
			refOK := refAssignMissingPorts(ref, strict)
			e := got.assignMissingPorts(strict)
			if (e == nil) != refOK {
				t.Fatalf("seed %d (%d instances, strict %v): error %v, the first implementation ok %v", seed, w.n, strict, e, refOK)
			}
			if e != nil {
				failed++
			}
			if e != nil && (e.Code != CodeState || !strings.Contains(e.Msg, "pool (11000-14999) has none free")) {
				t.Errorf("seed %d: error %v does not name the pool", seed, e)
			}
			rp, gp := viewPorts(ref), viewPorts(got)
			if !reflect.DeepEqual(rp, gp) {
				for u := range rp {
					if rp[u] != gp[u] {
						t.Errorf("seed %d (%d instances, strict %v): %s has port %d, the first implementation gave %d", seed, w.n, strict, u, gp[u], rp[u])
					}
				}
				t.FailNow()
			}
			if len(ref.insts) != len(got.insts) {
				t.Errorf("seed %d: %d records staged, the first implementation %d", seed, len(got.insts), len(ref.insts))
			}
			for u, p := range gp {
				if p != before[u] {
					assigned++
				}
			}
		}
	}
	if assigned < 1000 || failed < 2 {
		t.Errorf("%d ports given out and %d pools found too small over all states: the states do not test the pool", assigned, failed)
	}
}

// BenchmarkAssignMissingPorts gives ports to 3000 instances of 4000, the
// other 1000 holding theirs.
func BenchmarkAssignMissingPorts(b *testing.B) {
	s := netWorld()
	s.Cluster.DefaultHypervisor = HVKVM
	for k := range 4000 {
		u := fmt.Sprintf("%08d", k*7919%4000)
		in := &Instance{Name: "i" + u, UUID: u}
		if k%4 == 0 {
			in.NetworkPort = FirstNetworkPort + k
		}
		s.Instances[u] = in
	}
	s.reindex()
	for b.Loop() {
		t := s.begin(1)
		if e := t.assignMissingPorts(true); e != nil {
			b.Fatal(e)
		}
	}
}
