package alloc

import (
	"reflect"
	"testing"
)

func TestUsage(t *testing.T) {
	c := newCluster().node("a", "g", 8*gib, 100*gib, 4).node("b", "g", 8*gib, 100*gib, 4, drained).
		node("c", "g", 8*gib, 100*gib, 4).
		inst("x", TemplateDRBD, "a", "b", 3*gib, 10*gib, 2).
		inst("y", TemplateDRBD, "a", "b", 2*gib, 5*gib, 1, forthcoming).
		inst("z", TemplateDRBD, "c", "b", 4*gib, 1*gib, 1, down).
		inst("w", TemplatePlain, "b", "", 1*gib, 2*gib, 1).
		inst("v", TemplateDiskless, "c", "", 1*gib, 0, 1).
		inst("orphan", TemplatePlain, "gone", "", 1*gib, 1*gib, 1). // its node is not in the state
		inst("nowhere", TemplatePlain, "", "", 1*gib, 1*gib, 1, forthcoming)
	c.st.Instances[uuid("nowhere")].PrimaryNode = ""
	got := Usage(c.st, Options{VCPURatio: 1.5, Dead: map[string]bool{"c": true}})
	meta := int64(DRBDMetaMiB)
	want := []NodeUsage{
		{UUID: uuid("a"), Name: "a", Group: "g", Usable: true, MemoryTotal: 8 * gib, MemoryUsed: 5 * gib,
			DiskTotal: 100 * gib, DiskUsed: 15*gib + 2*meta, VCPUsTotal: 6, VCPUsUsed: 3, N1: true},
		// b backs 5 GiB for a and 4 GiB for c: its reserve is 5 GiB, and
		// with 7 GiB free it passes N+1.
		{UUID: uuid("b"), Name: "b", Group: "g", Reason: "drained", MemoryTotal: 8 * gib, MemoryUsed: 1 * gib, MemoryReserved: 5 * gib,
			DiskTotal: 100 * gib, DiskUsed: 18*gib + 3*meta, VCPUsTotal: 6, VCPUsUsed: 1, N1: true},
		{UUID: uuid("c"), Name: "c", Group: "g", Reason: "dead", MemoryTotal: 8 * gib, MemoryUsed: 5 * gib,
			DiskTotal: 100 * gib, DiskUsed: 1*gib + meta, VCPUsTotal: 6, VCPUsUsed: 2, N1: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	// One more GiB on b and it fails N+1.
	c.inst("u", TemplatePlain, "b", "", 2*gib+1, 0, 0)
	if u := Usage(c.st, Options{})[1]; u.N1 {
		t.Fatalf("b passes N+1 with %d of %d used and %d reserved", u.MemoryUsed, u.MemoryTotal, u.MemoryReserved)
	}
}

func TestPeers(t *testing.T) {
	var ps peers
	ps = append(ps, peer{5, 10}, peer{2, 1}, peer{5, 3}, peer{9, 4}, peer{2, 2})
	if m := ps.settle(); m != 13 || !reflect.DeepEqual(ps, peers{{2, 3}, {5, 13}, {9, 4}}) {
		t.Fatalf("settle: %v max %d", ps, m)
	}
	if ps.get(5) != 13 || ps.get(3) != 0 || ps.get(100) != 0 {
		t.Fatal("get")
	}
	if v := ps.add(3, 7); v != 7 || !reflect.DeepEqual(ps, peers{{2, 3}, {3, 7}, {5, 13}, {9, 4}}) {
		t.Fatalf("insert: %v", ps)
	}
	if v := ps.add(5, -13); v != 0 || !reflect.DeepEqual(ps, peers{{2, 3}, {3, 7}, {9, 4}}) || ps.max() != 7 {
		t.Fatalf("remove: %v", ps)
	}
	if v := ps.add(1, -1); v != -1 || len(ps) != 3 {
		t.Fatalf("taking off what is not there: %v", ps)
	}
	var empty peers
	if empty.settle() != 0 || empty.get(1) != 0 || empty.max() != 0 {
		t.Fatal("empty")
	}
}

// A node whose group the state does not hold forms a group of its own.
func TestMissingGroup(t *testing.T) {
	c := newCluster().node("a", "g", 8*gib, 100*gib, 4)
	c.st.Nodes[uuid("a")].Group = "lost-uuid"
	delete(c.st.Groups, uuid("g"))
	res, err := Allocate(c.st, plain(1*gib, 1*gib, 1), Options{})
	if err != nil || res.PrimaryName != "a" || res.GroupName != "lost-uuid" || res.Group != "lost-uuid" {
		t.Fatalf("%+v %v", res, err)
	}
}
