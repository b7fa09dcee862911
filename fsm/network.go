package fsm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"sort"
	"strings"
)

// Networks are Ganeti's network objects (doc/design-network.rst): an IPv4
// subnet with its pool of addresses, optional IPv6 subnet, gateways and
// MAC prefix, tags, and the node groups it is connected to with the NIC
// mode and link that instances of the group get on it.
//
// The pool holds two kinds of reservation. External reservations (the
// network and broadcast addresses, the gateway, node addresses, and what
// add_reserved_ips names) are a bitmap stored with the network: one bit an
// address, so the largest network Ganeti allows, a /16, takes 8 KiB. The
// addresses instances use are not stored in the network at all: they are
// the IPs of the NICs that name the network, indexed beside the instances
// (netIPs), so a NIC's removal releases its address with no second record
// to keep in step.

// Pool sizes, Ganeti's (lib/network.py): a network is at most a /16
// (65536 addresses) and at least a /30 (4 addresses).
const (
	NetworkMinPrefix    = 16
	NetworkMaxPrefix    = 30
	MaxNetworkAddresses = 1 << (32 - NetworkMinPrefix)
	// MaxReservedIPsPerOp bounds add_reserved_ips and remove_reserved_ips
	// of one opcode: a whole /16.
	MaxReservedIPsPerOp = MaxNetworkAddresses
	// MaxNetworkNameLen is the longest network name (as a group's).
	MaxNetworkNameLen = 128
)

// NetParams are the NIC parameters a node group gives the instances' NICs
// on a network it is connected to (Ganeti's group netparams).
type NetParams struct {
	Mode string `json:"mode"`
	Link string `json:"link"`
	VLAN string `json:"vlan,omitempty"`
}

// Network is one network object.
type Network struct {
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
	Network   string `json:"network"` // IPv4 CIDR, the network address
	Gateway   string `json:"gateway,omitempty"`
	Network6  string `json:"network6,omitempty"`
	Gateway6  string `json:"gateway6,omitempty"`
	MACPrefix string `json:"mac_prefix,omitempty"`
	// ExtReservations has one bit per address of Network (bit i%8 of
	// byte i/8 for the address at offset i), set when it is reserved
	// externally.
	ExtReservations []byte `json:"ext_reservations"`
	// Groups are the connected node groups, by group UUID.
	Groups   map[string]NetParams `json:"groups"`
	Tags     []string             `json:"tags"`
	SerialNo int64                `json:"serial_no"`
	CTime    float64              `json:"ctime"`
	MTime    float64              `json:"mtime"`
}

func (n *Network) clone() *Network {
	x := *n
	x.ExtReservations = append([]byte(nil), n.ExtReservations...)
	x.Groups = make(map[string]NetParams, len(n.Groups))
	for k, v := range n.Groups {
		x.Groups[k] = v
	}
	x.Tags = cloneStrings(n.Tags)
	return &x
}

// Pool is the IPv4 address range of a network: Size addresses from Base.
type Pool struct {
	Base uint32
	Size int
}

// ParseNetwork4 reads an IPv4 network in CIDR form ("10.0.0.0/24"):
// the address must be the network's own (no host bits set) and the
// prefix between NetworkMinPrefix and NetworkMaxPrefix.
func ParseNetwork4(field, s string) (Pool, *Error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return Pool{}, errf(CodeInval, field, "%s %q is not an IPv4 network in CIDR form (like 10.0.0.0/24)", field, s)
	}
	if p.Masked() != p {
		return Pool{}, errf(CodeInval, field, "%s %q has host bits set; the network is %s", field, s, p.Masked())
	}
	if p.Bits() < NetworkMinPrefix {
		return Pool{}, errf(CodeInval, field, "%s %s has %d addresses; at most a /%d (%d addresses) is supported", field, s, uint64(1)<<(32-p.Bits()), NetworkMinPrefix, MaxNetworkAddresses)
	}
	if p.Bits() > NetworkMaxPrefix {
		return Pool{}, errf(CodeInval, field, "%s %s is too small; at least a /%d (4 addresses) is needed", field, s, NetworkMaxPrefix)
	}
	a := p.Addr().As4()
	return Pool{Base: binary.BigEndian.Uint32(a[:]), Size: 1 << (32 - p.Bits())}, nil
}

// ParseIPv4 reads one IPv4 address in dotted form.
func ParseIPv4(field, s string) (uint32, *Error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return 0, errf(CodeInval, field, "%s %q is not an IPv4 address", field, s)
	}
	b := a.As4()
	return binary.BigEndian.Uint32(b[:]), nil
}

// ParseIPList reads a comma-separated list of IPv4 addresses (the CLI's
// --add-reserved-ips), refusing empty items, duplicates and more than max.
func ParseIPList(field, s string, max int) ([]string, *Error) {
	if strings.TrimSpace(s) == "" {
		return nil, errf(CodeInval, field, "%s is empty; give addresses separated by commas", field)
	}
	parts := strings.Split(s, ",")
	if len(parts) > max {
		return nil, errf(CodeInval, field, "%s has %d addresses; at most %d", field, len(parts), max)
	}
	seen := make(map[uint32]bool, len(parts))
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, errf(CodeInval, field, "%s item %d is empty", field, i+1)
		}
		v, e := ParseIPv4(field, p)
		if e != nil {
			return nil, e
		}
		if seen[v] {
			return nil, errf(CodeInval, field, "%s names %s twice", field, p)
		}
		seen[v] = true
		out = append(out, ipString(v))
	}
	return out, nil
}

func ipString(v uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b).String()
}

// Contains reports whether the address is in the pool.
func (p Pool) Contains(ip uint32) bool { return ip-p.Base < uint32(p.Size) }

// Addr returns the address at offset i.
func (p Pool) Addr(i int) string { return ipString(p.Base + uint32(i)) }

// Offset returns the offset of an address of the pool given as text, or
// false when it is not an IPv4 address of the pool.
func (p Pool) Offset(ip string) (int, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return 0, false
	}
	b := a.As4()
	v := binary.BigEndian.Uint32(b[:])
	if !p.Contains(v) {
		return 0, false
	}
	return int(v - p.Base), true
}

// Pool returns the network's IPv4 pool; a stored network always has a
// valid one.
func (n *Network) Pool() Pool {
	p, _ := ParseNetwork4("network", n.Network)
	return p
}

func bitGet(b []byte, i int) bool { return i/8 < len(b) && b[i/8]&(1<<(i%8)) != 0 }
func bitSet(b []byte, i int, v bool) {
	if v {
		b[i/8] |= 1 << (i % 8)
	} else {
		b[i/8] &^= 1 << (i % 8)
	}
}

// ExtReserved reports whether the address at offset i is reserved
// externally.
func (n *Network) ExtReserved(i int) bool { return bitGet(n.ExtReservations, i) }

// ExternalReservations lists the externally reserved addresses in order.
func (n *Network) ExternalReservations() []string {
	p := n.Pool()
	var out []string
	for i := 0; i < p.Size; i++ {
		if n.ExtReserved(i) {
			out = append(out, p.Addr(i))
		}
	}
	return out
}

// validateMACPrefix checks a three-octet MAC prefix ("aa:00:00").
func validateMACPrefix(field, s string) *Error {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return errf(CodeInval, field, "%s %q is not a three-octet MAC prefix (like aa:00:00)", field, s)
	}
	for _, p := range parts {
		if len(p) != 2 || !isHex(p[0]) || !isHex(p[1]) {
			return errf(CodeInval, field, "%s %q is not a three-octet MAC prefix (like aa:00:00)", field, s)
		}
	}
	return nil
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// validateNetwork6 checks an IPv6 network and a gateway in it (or
// link-local); either may be empty.
func validateNetwork6(net6, gw6 string) *Error {
	var pfx netip.Prefix
	if net6 != "" {
		p, err := netip.ParsePrefix(net6)
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() {
			return errf(CodeInval, "network6", "network6 %q is not an IPv6 network in CIDR form (like 2001:db8::/64)", net6)
		}
		if p.Masked() != p {
			return errf(CodeInval, "network6", "network6 %q has host bits set; the network is %s", net6, p.Masked())
		}
		pfx = p
	}
	if gw6 != "" {
		a, err := netip.ParseAddr(gw6)
		if err != nil || !a.Is6() || a.Is4In6() {
			return errf(CodeInval, "gateway6", "gateway6 %q is not an IPv6 address", gw6)
		}
		if pfx.IsValid() && !pfx.Contains(a) && !a.IsLinkLocalUnicast() {
			return errf(CodeInval, "gateway6", "gateway6 %s is neither in network6 %s nor link-local", gw6, net6)
		}
	}
	return nil
}

// validateReservedList checks add_reserved_ips or remove_reserved_ips:
// IPv4 addresses, each once, at most MaxReservedIPsPerOp.
func validateReservedList(field string, ips []string) *Error {
	if len(ips) > MaxReservedIPsPerOp {
		return errf(CodeInval, field, "%s has %d addresses; at most %d", field, len(ips), MaxReservedIPsPerOp)
	}
	seen := make(map[uint32]bool, len(ips))
	for _, ip := range ips {
		v, e := ParseIPv4(field, ip)
		if e != nil {
			return e
		}
		if seen[v] {
			return errf(CodeInval, field, "%s names %s twice", field, ip)
		}
		seen[v] = true
	}
	return nil
}

// validateNetParams checks the NIC mode, link and VLAN of a connection.
func validateNetParams(mode, link, vlan string) *Error {
	switch mode {
	case NICModeBridged, NICModeRouted, NICModeOpenVSwitch:
	default:
		return errf(CodeInval, "network_mode", "network_mode %q is not one of bridged, routed, openvswitch", mode)
	}
	if mode == NICModeBridged && link == "" {
		return errf(CodeInval, "network_link", "a bridged connection needs network_link (the bridge)")
	}
	if e := ValidateName("network_link", link, MaxNameLen); e != nil {
		return e
	}
	if vlan != "" {
		if mode != NICModeOpenVSwitch {
			return errf(CodeInval, "network_vlan", "network_vlan is only for openvswitch connections")
		}
		if e := ValidateName("network_vlan", vlan, MaxNameLen); e != nil {
			return e
		}
	}
	return nil
}

// LookupNetwork finds a network by name or UUID.
func (s *State) LookupNetwork(ref string) *Network {
	if u, ok := s.netByName[ref]; ok {
		return s.Networks[u]
	}
	return s.Networks[ref]
}

// SortedNetworks returns all networks ordered by name.
func (s *State) SortedNetworks() []*Network {
	out := make([]*Network, 0, len(s.Networks))
	for _, n := range s.Networks {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NetworkIPs returns the addresses the instances' NICs use on a network
// (by UUID), with the instance UUID of each.
func (s *State) NetworkIPs(uuid string) map[string]string { return s.netIPs[uuid] }

// NetworkInstances returns the names of the instances with a NIC on the
// network, sorted.
func (s *State) NetworkInstances(uuid string) []string {
	seen := map[string]bool{}
	var out []string
	for _, i := range s.Instances {
		for _, nic := range i.NICs {
			if nic.Network == uuid && !seen[i.UUID] {
				seen[i.UUID] = true
				out = append(out, i.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// NetworkStats are the pool figures Ganeti reports of a network.
type NetworkStats struct {
	Free, Reserved int
	// Map is one character per address: 'X' reserved or used, '.' free.
	Map string
}

// NetworkStats computes a network's pool figures.
func (s *State) NetworkStats(n *Network) NetworkStats {
	p := n.Pool()
	used := make([]byte, (p.Size+7)/8)
	copy(used, n.ExtReservations)
	for ip := range s.netIPs[n.UUID] {
		if i, ok := p.Offset(ip); ok {
			bitSet(used, i, true)
		}
	}
	count := 0
	for _, b := range used {
		count += bits.OnesCount8(b)
	}
	var m strings.Builder
	m.Grow(p.Size)
	for i := 0; i < p.Size; i++ {
		if bitGet(used, i) {
			m.WriteByte('X')
		} else {
			m.WriteByte('.')
		}
	}
	return NetworkStats{Free: p.Size - count, Reserved: count, Map: m.String()}
}

// GroupNetParams returns the NIC parameters a group gives NICs on a
// network, and whether the network is connected to it.
func (s *State) GroupNetParams(netUUID, groupUUID string) (NetParams, bool) {
	n := s.Networks[netUUID]
	if n == nil {
		return NetParams{}, false
	}
	p, ok := n.Groups[groupUUID]
	return p, ok
}

// checkNetwork verifies a restored network record.
func (n *Network) check() error {
	if n.UUID == "" || n.Name == "" {
		return fmt.Errorf("network without name or uuid")
	}
	p, e := ParseNetwork4("network", n.Network)
	if e != nil {
		return fmt.Errorf("network %s: %s", n.Name, e.Msg)
	}
	if len(n.ExtReservations) != (p.Size+7)/8 {
		return fmt.Errorf("network %s: reservation bitmap has %d bytes, want %d", n.Name, len(n.ExtReservations), (p.Size+7)/8)
	}
	if n.Groups == nil {
		n.Groups = map[string]NetParams{}
	}
	if n.Tags == nil {
		n.Tags = []string{}
	}
	return nil
}
