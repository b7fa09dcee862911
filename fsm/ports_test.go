package fsm

import (
	"fmt"
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
