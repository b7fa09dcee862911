package fsm

import (
	"testing"
)

// TestInstanceIPIndex follows instances through the paths that store them
// (a transaction's commit and a snapshot restore) and checks the IP index
// after each: added, moved to another address, renamed, removed.
func TestInstanceIPIndex(t *testing.T) {
	h := newHarness()
	if r := h.apply(ClusterInit{Now: h.now, Name: "cluster", UUID: h.uuid(), GroupUUID: h.uuid(),
		Node: NodeSpec{Name: "node1", UUID: h.uuid(), PrimaryIP: "192.0.2.1"}}); r.(Response).Err != nil {
		t.Fatal(r)
	}
	st := h.f.st
	store := func(i *Instance) {
		tx := st.begin(h.now)
		tx.insts[i.UUID] = i
		tx.commit()
	}
	remove := func(uuid string) {
		tx := st.begin(h.now)
		tx.insts[uuid] = nil
		tx.commit()
	}
	lookup := func(link, ip string) string {
		if i := st.InstanceByIP(link, ip); i != nil {
			return i.Name
		}
		return ""
	}
	store(&Instance{Name: "inst1", UUID: "u1", NICs: []NIC{{IP: "198.51.100.1"}, {IP: "198.51.100.2", Link: "br1"}, {}}})
	store(&Instance{Name: "inst2", UUID: "u2", NICs: []NIC{{IP: "198.51.100.3"}}})
	for _, c := range []struct{ link, ip, want string }{
		{"", "198.51.100.1", "inst1"}, {"br1", "198.51.100.2", "inst1"}, {"", "198.51.100.2", ""},
		{"", "198.51.100.3", "inst2"}, {"br1", "198.51.100.3", ""}, {"", "", ""},
	} {
		if got := lookup(c.link, c.ip); got != c.want {
			t.Errorf("after adding: InstanceByIP(%q, %q) = %q, want %q", c.link, c.ip, got, c.want)
		}
	}
	// The NIC moves to another address and the instance is renamed.
	store(&Instance{Name: "inst1-renamed", UUID: "u1", NICs: []NIC{{IP: "198.51.100.9"}}})
	if got := lookup("", "198.51.100.1"); got != "" {
		t.Errorf("old address still indexed: %q", got)
	}
	if got := lookup("br1", "198.51.100.2"); got != "" {
		t.Errorf("old address on br1 still indexed: %q", got)
	}
	if got := lookup("", "198.51.100.9"); got != "inst1-renamed" {
		t.Errorf("new address: %q", got)
	}
	if st.LookupInstance("inst1") != nil || st.LookupInstance("inst1-renamed") == nil {
		t.Errorf("name index not updated on rename")
	}
	if got, want := st.InstanceIPs(""), []string{"198.51.100.3", "198.51.100.9"}; !equalStrings(got, want) {
		t.Errorf("InstanceIPs = %v, want %v", got, want)
	}
	if got := st.InstanceIPs("br1"); len(got) != 0 {
		t.Errorf("InstanceIPs(br1) = %v, want none", got)
	}
	// A restored snapshot rebuilds the index.
	restored(t, snapshotOf(t, h.f)).Read(func(s *State, _ uint64) {
		if i := s.InstanceByIP("", "198.51.100.3"); i == nil || i.Name != "inst2" {
			t.Errorf("after restore: %v", i)
		}
	})
	remove("u2")
	if got := lookup("", "198.51.100.3"); got != "" {
		t.Errorf("removed instance still indexed: %q", got)
	}
	if st.LookupInstance("inst2") != nil {
		t.Errorf("removed instance still found by name")
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
