package fsm

import (
	"bytes"
	"strings"
	"testing"
)

// TestNetworkOpcodesBadInput: the network opcodes refuse bad input on
// submission, naming the field.
func TestNetworkOpcodesBadInput(t *testing.T) {
	for _, c := range []struct{ in, field string }{
		{`{"OP_ID":"OP_NETWORK_ADD","network":"10.0.0.0/24"}`, "network_name"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"a b","network":"10.0.0.0/24"}`, "network_name"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.300/24"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.1/24"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/8"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/15"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/31"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"2001:db8::/64"}`, "network"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","gateway":"10.0.1.1"}`, "gateway"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","gateway":"gw"}`, "gateway"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","network6":"10.0.0.0/24"}`, "network6"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","network6":"2001:db8::1/64"}`, "network6"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","network6":"2001:db8::/64","gateway6":"2001:db9::1"}`, "gateway6"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","mac_prefix":"aa:00"}`, "mac_prefix"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","mac_prefix":"aa:00:zz"}`, "mac_prefix"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","add_reserved_ips":["10.0.1.5"]}`, "add_reserved_ips"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","add_reserved_ips":["10.0.0.5","10.0.0.5"]}`, "add_reserved_ips"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","add_reserved_ips":["x"]}`, "add_reserved_ips"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","tags":["a b"]}`, "tags"},
		{`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/24","vlan":"1"}`, "vlan"},
		{`{"OP_ID":"OP_NETWORK_REMOVE"}`, "network_name"},
		{`{"OP_ID":"OP_NETWORK_SET_PARAMS","network_name":"n"}`, ""},
		{`{"OP_ID":"OP_NETWORK_SET_PARAMS","network_name":"n","gateway":"10.0.0.1","add_reserved_ips":["10.0.0.2"]}`, "gateway"},
		{`{"OP_ID":"OP_NETWORK_SET_PARAMS","network_name":"n","gateway":"x"}`, "gateway"},
		{`{"OP_ID":"OP_NETWORK_SET_PARAMS","network_name":"n","add_reserved_ips":["10.0.0.2"],"remove_reserved_ips":["10.0.0.2"]}`, "remove_reserved_ips"},
		{`{"OP_ID":"OP_NETWORK_CONNECT","network_name":"n","group_name":"g","network_mode":"nat","network_link":"br0"}`, "network_mode"},
		{`{"OP_ID":"OP_NETWORK_CONNECT","network_name":"n","group_name":"g","network_mode":"bridged","network_link":""}`, "network_link"},
		{`{"OP_ID":"OP_NETWORK_CONNECT","network_name":"n","network_mode":"routed","network_link":"rt"}`, "group_name"},
		{`{"OP_ID":"OP_NETWORK_CONNECT","network_name":"n","group_name":"g","network_mode":"routed","network_link":"rt","network_vlan":"5"}`, "network_vlan"},
		{`{"OP_ID":"OP_NETWORK_DISCONNECT","network_name":"n"}`, "group_name"},
		{`{"OP_ID":"OP_NETWORK_RENAME","network_name":"n"}`, "new_name"},
		{`{"OP_ID":"OP_NETWORK_RENAME","network_name":"n","new_name":"a b"}`, "new_name"},
		{`{"OP_ID":"OP_NETWORK_RENAME","new_name":"m"}`, "network_name"},
		{`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"i","nics":[{"ip":"pool"}]}`, "nics.0.ip"},
		{`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"i","nics":[{"network":"n","link":"br0"}]}`, "nics.0.network"},
		{`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"i","nics":[{"network":"none"}]}`, "nics.0.network"},
		{`{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"i","nics":[["add",-1,{"network":"n","mode":"routed"}]]}`, "nics.0.network"},
		{`{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"i","nics":[["add",-1,{"ip":"pool"}]]}`, "nics.0.ip"},
	} {
		_, err := ParseOpcode([]byte(c.in))
		if err == nil {
			t.Errorf("%.100s: accepted", c.in)
			continue
		}
		if e := AsError(err); e.Field != c.field || e.Code != CodeInval {
			t.Errorf("%.100s: %v (field %q), want field %q", c.in, e, e.Field, c.field)
		}
	}
	// Ganeti's client sends null for what it leaves out.
	if _, err := ParseOpcode([]byte(`{"OP_ID":"OP_NETWORK_ADD","network_name":"n","network":"10.0.0.0/28","gateway":null,"network6":null,"gateway6":null,"mac_prefix":null,"add_reserved_ips":null,"tags":null}`)); err != nil {
		t.Errorf("nulls of Ganeti's client: %v", err)
	}
}

// netWorld is a state with one group (g1, "default") and one node
// (n1 at 10.0.0.5) for the network tests.
func netWorld() *State {
	s := newState()
	s.Cluster = &Cluster{Name: "c", UUID: "c"}
	s.Groups["g1"] = &Group{Name: "default", UUID: "g1"}
	s.Groups["g2"] = &Group{Name: "other", UUID: "g2"}
	s.Nodes["n1"] = &Node{Name: "node1", UUID: "n1", Group: "g1", PrimaryIP: "10.0.0.5", SecondaryIP: "10.0.0.5", VMCapable: true}
	s.reindex()
	return s
}

// netApply applies one configuration opcode to s and commits it when it
// succeeds; a refused one must leave the state's serial unchanged.
func netApply(t *testing.T, s *State, uuid string, op configOp) *Error {
	t.Helper()
	if e := op.Validate(); e != nil {
		return e
	}
	tx := s.begin(1)
	if _, e := op.apply(tx, uuid); e != nil {
		return e
	}
	tx.commit()
	return nil
}

func putInstance(s *State, in Instance, expect int64) *Error {
	tx := s.begin(1)
	if e := (StepChange{InstancePut: &InstancePut{Instance: in, ExpectSerial: expect}}).apply(tx); e != nil {
		return e
	}
	tx.commit()
	return nil
}

func inst(name string, nics ...NIC) Instance {
	return Instance{Name: name, UUID: "u-" + name, PrimaryNode: "n1", DiskTemplate: DTDiskless, AdminState: AdminDown, NICs: nics}
}

// TestNetworkPool walks a network through its life: the addresses
// reserved at creation, connection, ip=pool taking the lowest free
// address, conflicts, an exhausted pool, and removal refused while the
// network is connected or used.
func TestNetworkPool(t *testing.T) {
	s := netWorld()
	gw := "10.0.0.1"
	if e := netApply(t, s, "net-1", &OpNetworkAdd{NetworkName: "lan", Network: "10.0.0.0/29", Gateway: &gw, Tags: []string{"b", "a", "b"}}); e != nil {
		t.Fatal(e)
	}
	n := s.LookupNetwork("lan")
	if got := strings.Join(n.ExternalReservations(), ","); got != "10.0.0.0,10.0.0.1,10.0.0.5,10.0.0.7" {
		t.Errorf("reservations at creation: %s", got)
	}
	if got := strings.Join(n.Tags, ","); got != "a,b" {
		t.Errorf("tags: %s", got)
	}
	if st := s.NetworkStats(n); st.Free != 4 || st.Reserved != 4 || st.Map != "XX...X.X" {
		t.Errorf("stats: %+v", st)
	}
	if e := netApply(t, s, "net-2", &OpNetworkAdd{NetworkName: "lan", Network: "10.1.0.0/24"}); e == nil || e.Code != CodeExists {
		t.Errorf("a second network of the name: %v", e)
	}
	if e := netApply(t, s, "net-2", &OpNetworkAdd{NetworkName: "lan2", Network: "10.1.0.0/24", AddReservedIPs: []string{"10.1.0.255"}}); e == nil || e.Code != CodeNotUnique {
		t.Errorf("reserving the broadcast address twice: %v", e)
	}
	// Not connected yet: a NIC on it is refused.
	if e := putInstance(s, inst("a", NIC{UUID: "a0", Network: "lan", IP: IPPool}), 0); e == nil || e.Code != CodeState {
		t.Errorf("a NIC on an unconnected network: %v", e)
	}
	if e := netApply(t, s, "", &OpNetworkConnect{NetworkName: "lan", GroupName: "default", NetworkMode: NICModeBridged, NetworkLink: "br0"}); e != nil {
		t.Fatal(e)
	}
	if e := netApply(t, s, "", &OpNetworkConnect{NetworkName: "lan", GroupName: "default", NetworkMode: NICModeRouted, NetworkLink: "rt"}); e == nil || e.Code != CodeState {
		t.Errorf("connecting again with other parameters: %v", e)
	}
	if e := putInstance(s, inst("a", NIC{UUID: "a0", Network: "lan", IP: IPPool}, NIC{UUID: "a1", Network: "net-1", IP: IPPool}), 0); e != nil {
		t.Fatal(e)
	}
	a := s.LookupInstance("a")
	if a.NICs[0].IP != "10.0.0.2" || a.NICs[1].IP != "10.0.0.3" || a.NICs[0].Network != "net-1" || a.NICs[0].Mode != NICModeBridged || a.NICs[0].Link != "br0" {
		t.Errorf("NICs from the pool: %+v", a.NICs)
	}
	// Storing the record again keeps its addresses.
	if e := putInstance(s, *a, a.SerialNo); e != nil {
		t.Errorf("the same record again: %v", e)
	}
	for _, c := range []struct {
		ip   string
		code Code
	}{{"10.0.0.3", CodeNotUnique}, {"10.0.0.1", CodeNotUnique}, {"10.0.1.4", CodeInval}} {
		if e := putInstance(s, inst("b", NIC{UUID: "b0", Network: "lan", IP: c.ip}), 0); e == nil || e.Code != c.code {
			t.Errorf("explicit IP %s: %v, want %s", c.ip, e, c.code)
		}
	}
	if e := putInstance(s, inst("b", NIC{UUID: "b0", Network: "lan", IP: "10.0.0.4"}), 0); e != nil {
		t.Fatal(e)
	}
	if e := putInstance(s, inst("c", NIC{UUID: "c0", Network: "lan", IP: IPPool}), 0); e != nil {
		t.Fatal(e)
	}
	if got := s.LookupInstance("c").NICs[0].IP; got != "10.0.0.6" {
		t.Errorf("the last free address: %s", got)
	}
	if e := putInstance(s, inst("d", NIC{UUID: "d0", Network: "lan", IP: IPPool}), 0); e == nil || e.Code != CodeNoRes {
		t.Errorf("an exhausted pool: %v", e)
	}
	if e := netApply(t, s, "", &OpNetworkSetParams{NetworkName: "lan", AddReservedIPs: []string{"10.0.0.6"}}); e == nil || e.Code != CodeNotUnique {
		t.Errorf("reserving an address in use: %v", e)
	}
	if e := netApply(t, s, "", &OpNetworkSetParams{NetworkName: "lan", RemoveReservedIPs: []string{"10.0.0.1"}}); e == nil || e.Code != CodeInval {
		t.Errorf("releasing the gateway: %v", e)
	}
	// Removal and disconnection are refused while used.
	serial := s.Networks["net-1"].SerialNo
	if e := netApply(t, s, "", &OpNetworkRemove{NetworkName: "lan"}); e == nil || e.Code != CodeState || !strings.Contains(e.Msg, "default") {
		t.Errorf("removing a connected network: %v", e)
	}
	if e := netApply(t, s, "", &OpNetworkDisconnect{NetworkName: "lan", GroupName: "default"}); e == nil || e.Code != CodeState || !strings.Contains(e.Msg, "a, b, c") {
		t.Errorf("disconnecting a used network: %v", e)
	}
	if got := s.Networks["net-1"].SerialNo; got != serial {
		t.Errorf("the refused removal and disconnection changed the network's serial_no: %d, was %d", got, serial)
	}
	if e := netApply(t, s, "", &OpNetworkConnect{NetworkName: "lan", GroupName: "other", NetworkMode: NICModeRouted, NetworkLink: "rt"}); e != nil {
		t.Fatal(e)
	}
	serial = s.Networks["net-1"].SerialNo
	if e := netApply(t, s, "", &OpGroupRemove{GroupName: "other"}); e == nil || !strings.Contains(e.Msg, "lan") {
		t.Errorf("removing a group connected to a network: %v", e)
	}
	if e := netApply(t, s, "", &OpNetworkDisconnect{NetworkName: "lan", GroupName: "other"}); e != nil {
		t.Fatal(e)
	}
	serial++
	if s.Networks["net-1"].SerialNo != serial {
		t.Errorf("a refused opcode changed the network")
	}
	// Removing the instances releases their addresses.
	for _, name := range []string{"a", "b", "c"} {
		i := s.LookupInstance(name)
		tx := s.begin(1)
		if e := (StepChange{InstanceRemove: &InstanceRemove{UUID: i.UUID, ExpectSerial: i.SerialNo}}).apply(tx); e != nil {
			t.Fatal(e)
		}
		tx.commit()
	}
	if st := s.NetworkStats(s.Networks["net-1"]); st.Free != 4 {
		t.Errorf("after the instances left: %+v", st)
	}
	if len(s.netIPs) != 0 {
		t.Errorf("index left behind: %v", s.netIPs)
	}
	if e := netApply(t, s, "", &OpNetworkDisconnect{NetworkName: "lan", GroupName: "default"}); e != nil {
		t.Fatal(e)
	}
	if e := netApply(t, s, "", &OpNetworkRename{NetworkName: "lan", NewName: "lan"}); e == nil || e.Code != CodeInval {
		t.Errorf("renaming to the same name: %v", e)
	}
	if e := netApply(t, s, "net-9", &OpNetworkAdd{NetworkName: "other", Network: "10.9.0.0/30"}); e != nil {
		t.Fatal(e)
	}
	if e := netApply(t, s, "", &OpNetworkRename{NetworkName: "lan", NewName: "other"}); e == nil || e.Code != CodeExists {
		t.Errorf("renaming onto another network: %v", e)
	}
	if e := netApply(t, s, "", &OpNetworkRename{NetworkName: "lan", NewName: "wan"}); e != nil || s.LookupNetwork("lan") != nil || s.LookupNetwork("wan").UUID != "net-1" {
		t.Fatalf("rename: %v", e)
	}
	if e := netApply(t, s, "", &OpNetworkRemove{NetworkName: "wan"}); e != nil {
		t.Fatal(e)
	}
	if e := netApply(t, s, "", &OpNetworkRemove{NetworkName: "other"}); e != nil {
		t.Fatal(e)
	}
	if len(s.Networks) != 0 || s.LookupNetwork("lan") != nil {
		t.Errorf("network still there")
	}
}

// TestNetworkSetParams: gateway moves its reservation, reservations are
// added and removed, "none" clears.
func TestNetworkSetParams(t *testing.T) {
	s := netWorld()
	gw, mp := "10.0.0.1", "AA:BB:CC"
	if e := netApply(t, s, "net-1", &OpNetworkAdd{NetworkName: "lan", Network: "10.0.0.0/28", Gateway: &gw, MACPrefix: &mp}); e != nil {
		t.Fatal(e)
	}
	gw2, none := "10.0.0.14", "none"
	if e := netApply(t, s, "", &OpNetworkSetParams{NetworkName: "lan", Gateway: &gw2, MACPrefix: &none}); e != nil {
		t.Fatal(e)
	}
	if e := netApply(t, s, "", &OpNetworkSetParams{NetworkName: "lan", AddReservedIPs: []string{"10.0.0.9", "10.0.0.10"}, RemoveReservedIPs: []string{"10.0.0.5"}}); e != nil {
		t.Fatal(e)
	}
	n := s.LookupNetwork("lan")
	if got := strings.Join(n.ExternalReservations(), ","); got != "10.0.0.0,10.0.0.9,10.0.0.10,10.0.0.14,10.0.0.15" || n.Gateway != gw2 || n.MACPrefix != "" {
		t.Errorf("after modify: %s gateway %s mac_prefix %q", got, n.Gateway, n.MACPrefix)
	}
	if e := netApply(t, s, "", &OpNetworkSetParams{NetworkName: "lan", RemoveReservedIPs: []string{"10.0.0.3"}}); e == nil || e.Code != CodeNoEnt {
		t.Errorf("releasing a free address: %v", e)
	}
	// One bad address refuses the whole change.
	if e := netApply(t, s, "", &OpNetworkSetParams{NetworkName: "lan", AddReservedIPs: []string{"10.0.0.2", "10.0.1.2"}}); e == nil {
		t.Errorf("an address outside accepted")
	}
	if n := s.LookupNetwork("lan"); n.ExtReserved(2) {
		t.Errorf("a refused change reserved 10.0.0.2")
	}
	if e := netApply(t, s, "", &OpNetworkSetParams{NetworkName: "nosuch", RemoveReservedIPs: []string{"10.0.0.3"}}); e == nil || e.Code != CodeNoEnt {
		t.Errorf("an unknown network: %v", e)
	}
}

// TestNetworkTagsAndSnapshot: tags of kind network, and a network
// survives a snapshot and restore with its index.
func TestNetworkTagsAndSnapshot(t *testing.T) {
	h := newHarness()
	h.initCluster("10.0.0.5")
	f := h.f
	var s *State
	f.Read(func(st *State, _ uint64) { s = st })
	if e := netApply(t, s, "net-1", &OpNetworkAdd{NetworkName: "lan", Network: "10.0.0.0/24"}); e != nil {
		t.Fatal(e)
	}
	if e := netApply(t, s, "", &OpTagsSet{Kind: TagNetwork, Name: "lan", Tags: []string{"x", "a"}}); e != nil {
		t.Fatal(e)
	}
	if e := netApply(t, s, "", &OpTagsDel{Kind: TagNetwork, Name: "lan", Tags: []string{"zz"}}); e == nil {
		t.Errorf("deleting a missing tag accepted")
	}
	data, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	g.Read(func(st *State, _ uint64) {
		n := st.LookupNetwork("lan")
		if n == nil || strings.Join(n.Tags, ",") != "a,x" || strings.Join(n.ExternalReservations(), ",") != "10.0.0.0,10.0.0.5,10.0.0.255" {
			t.Errorf("restored: %+v", n)
		}
	})
}

// TestParseNetworkBad: the CIDR and address-list parsers refuse bad
// input with the limit named.
func TestParseNetworkBad(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "CIDR"}, {"10.0.0.0", "CIDR"}, {"10.0.0.0/33", "CIDR"}, {"10.0.0.0/8", "/16"},
		{"10.0.0.0/31", "/30"}, {"10.0.0.1/24", "host bits"}, {"::/64", "CIDR"}, {" 10.0.0.0/24", "CIDR"},
	} {
		if _, e := ParseNetwork4("network", c.in); e == nil || !strings.Contains(e.Msg, c.want) {
			t.Errorf("%q: %v, want %q", c.in, e, c.want)
		}
	}
	if p, e := ParseNetwork4("network", "192.168.0.0/16"); e != nil || p.Size != MaxNetworkAddresses || p.Addr(1) != "192.168.0.1" {
		t.Errorf("a /16: %+v %v", p, e)
	}
	for _, c := range []struct{ in, want string }{
		{"", "empty"}, {",", "empty"}, {",10.0.0.2", "item 1"}, {"10.0.0.1,10.0.0.1", "twice"},
		{"10.0.0.1,x", "not an IPv4"}, {"::1", "not an IPv4"}, {"10.0.0.1,10.0.0.2,10.0.0.3", "at most 2"},
	} {
		if _, e := ParseIPList("ips", c.in, 2); e == nil || !strings.Contains(e.Msg, c.want) {
			t.Errorf("%q: %v, want %q", c.in, e, c.want)
		}
	}
	if l, e := ParseIPList("ips", " 10.0.0.1, 10.0.0.2", 2); e != nil || strings.Join(l, ",") != "10.0.0.1,10.0.0.2" {
		t.Errorf("a good list: %v %v", l, e)
	}
}

func FuzzParseNetwork4(f *testing.F) {
	for _, s := range []string{"10.0.0.0/24", "10.0.0.0/8", "1.2.3.4/30", "::/0", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, e := ParseNetwork4("network", s)
		if e != nil {
			return
		}
		if p.Size < 4 || p.Size > MaxNetworkAddresses || p.Base%uint32(p.Size) != 0 {
			t.Fatalf("%q: accepted %+v", s, p)
		}
		if i, ok := p.Offset(p.Addr(p.Size - 1)); !ok || i != p.Size-1 {
			t.Fatalf("%q: last address offset %d %v", s, i, ok)
		}
	})
}

func FuzzParseIPList(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1,10.0.0.2", ",", "a,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, e := ParseIPList("ips", s, 8)
		if e != nil {
			return
		}
		if len(l) == 0 || len(l) > 8 || validateReservedList("ips", l) != nil {
			t.Fatalf("%q: accepted %v", s, l)
		}
	})
}

// TestNetworkSnapshotCheck: a restored network connected to a group the
// snapshot does not hold is refused.
func TestNetworkSnapshotCheck(t *testing.T) {
	s := netWorld()
	if e := netApply(t, s, "net-1", &OpNetworkAdd{NetworkName: "lan", Network: "10.0.0.0/29"}); e != nil {
		t.Fatal(e)
	}
	if err := s.check(); err != nil {
		t.Fatalf("a good state: %v", err)
	}
	s.Networks["net-1"].Groups["nosuch"] = NetParams{Mode: NICModeRouted, Link: "rt"}
	if err := s.check(); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("a network of an unknown group: %v", err)
	}
	bad := &Network{Name: "x", UUID: "x", Network: "10.0.0.0/29", ExtReservations: make([]byte, 2)}
	if err := bad.check(); err == nil || !strings.Contains(err.Error(), "bitmap") {
		t.Errorf("a bitmap of the wrong size: %v", err)
	}
}
