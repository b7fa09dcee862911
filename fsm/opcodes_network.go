package fsm

import (
	"fmt"
	"sort"
	"strings"
)

// The network opcodes (Ganeti's OP_NETWORK_*): configuration-only, so
// they apply inside the state machine. Each is checked whole on
// submission (Validate) and against the configuration in apply, which
// changes nothing when it refuses.

// ValueNone is Ganeti's "none": it clears an optional parameter.
const ValueNone = "none"

// OpNetworkAdd adds a network.
type OpNetworkAdd struct {
	OpCommon
	NetworkName    string   `json:"network_name"`
	Network        string   `json:"network"`
	Gateway        *string  `json:"gateway,omitempty"`
	Network6       *string  `json:"network6,omitempty"`
	Gateway6       *string  `json:"gateway6,omitempty"`
	MACPrefix      *string  `json:"mac_prefix,omitempty"`
	AddReservedIPs []string `json:"add_reserved_ips,omitempty"`
	ConflictsCheck *bool    `json:"conflicts_check,omitempty"`
	Tags           []string `json:"tags,omitempty"`
}

func derefStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ValidateNetworkName checks a network name: a group name's rules.
func ValidateNetworkName(field, name string) *Error {
	if name == "" {
		return errf(CodeInval, field, "%s must not be empty", field)
	}
	if !groupNameOK(name) {
		return errf(CodeInval, field, "%s %q is not a valid network name (letters, digits, '_', '.', '+', '-'; at most %d)", field, name, MaxNetworkNameLen)
	}
	return nil
}

func validateNetworkRef(ref string) *Error {
	if ref == "" {
		return errf(CodeInval, "network_name", "network_name must not be empty")
	}
	return ValidateName("network_name", ref, MaxNetworkNameLen)
}

// Validate implements Opcode.
func (o *OpNetworkAdd) Validate() *Error {
	if e := ValidateNetworkName("network_name", o.NetworkName); e != nil {
		return e
	}
	if o.Network == "" {
		return errf(CodeInval, "network", "network must be given (an IPv4 network like 10.0.0.0/24)")
	}
	pool, e := ParseNetwork4("network", o.Network)
	if e != nil {
		return e
	}
	if gw := derefStr(o.Gateway); gw != "" {
		v, e := ParseIPv4("gateway", gw)
		if e != nil {
			return e
		}
		if !pool.Contains(v) {
			return errf(CodeInval, "gateway", "gateway %s is not in network %s", gw, o.Network)
		}
	}
	if e := validateNetwork6(derefStr(o.Network6), derefStr(o.Gateway6)); e != nil {
		return e
	}
	if mp := derefStr(o.MACPrefix); mp != "" {
		if e := validateMACPrefix("mac_prefix", mp); e != nil {
			return e
		}
	}
	if e := validateReservedList("add_reserved_ips", o.AddReservedIPs); e != nil {
		return e
	}
	for _, ip := range o.AddReservedIPs {
		if _, ok := pool.Offset(ip); !ok {
			return errf(CodeInval, "add_reserved_ips", "cannot reserve %s: it is not in network %s", ip, o.Network)
		}
	}
	if len(o.Tags) > MaxTagsPerObj {
		return errf(CodeInval, "tags", "a network has at most %d tags, got %d", MaxTagsPerObj, len(o.Tags))
	}
	for _, t := range o.Tags {
		if e := ValidateTag(t); e != nil {
			return e
		}
	}
	return nil
}

// Summary implements Opcode.
func (o *OpNetworkAdd) Summary() string { return "NETWORK_ADD(" + o.NetworkName + ")" }

// Locks implements Opcode: the new name, and the nodes shared when their
// addresses are reserved (conflicts_check).
func (o *OpNetworkAdd) Locks(*State) []LockDecl {
	out := []LockDecl{bgl(false), {Level: LockNetwork, Names: []string{o.NetworkName}, Exclusive: true}}
	if o.ConflictsCheck == nil || *o.ConflictsCheck {
		out = append(out, LockDecl{Level: LockNode})
	}
	return out
}

// reserveExt reserves the address at offset i externally, refusing one
// reserved already or used by an instance.
func (t *txn) reserveExt(n *Network, p Pool, i int, field string) *Error {
	ip := p.Addr(i)
	if n.ExtReserved(i) {
		return errf(CodeNotUnique, field, "IP %s is already externally reserved in network %s", ip, n.Name)
	}
	if owner := t.netIPOwner(n.UUID, ip, ""); owner != nil {
		return errf(CodeNotUnique, field, "IP %s of network %s is used by instance %s", ip, n.Name, owner.Name)
	}
	bitSet(n.ExtReservations, i, true)
	return nil
}

func (o *OpNetworkAdd) apply(t *txn, uuid string) (any, *Error) {
	if uuid == "" {
		return nil, errf(CodeFault, "", "no UUID drawn for the new network")
	}
	if e := o.Validate(); e != nil {
		return nil, e
	}
	if other := t.lookupNetwork(o.NetworkName); other != nil {
		return nil, errf(CodeExists, "network_name", "network %q already exists (UUID %s)", o.NetworkName, other.UUID)
	}
	p, _ := ParseNetwork4("network", o.Network)
	n := &Network{
		Name: o.NetworkName, UUID: uuid, Network: o.Network, Gateway: derefStr(o.Gateway),
		Network6: derefStr(o.Network6), Gateway6: derefStr(o.Gateway6), MACPrefix: strings.ToLower(derefStr(o.MACPrefix)),
		ExtReservations: make([]byte, (p.Size+7)/8), Groups: map[string]NetParams{},
		Tags: []string{}, CTime: secs(t.now),
	}
	// Ganeti's InitializeNetwork: the network and broadcast addresses
	// and the gateway are reserved.
	bitSet(n.ExtReservations, 0, true)
	bitSet(n.ExtReservations, p.Size-1, true)
	if n.Gateway != "" {
		i, _ := p.Offset(n.Gateway)
		if n.ExtReserved(i) {
			return nil, errf(CodeInval, "gateway", "gateway %s is the network or broadcast address of %s", n.Gateway, n.Network)
		}
		bitSet(n.ExtReservations, i, true)
	}
	if o.ConflictsCheck == nil || *o.ConflictsCheck {
		for _, nd := range t.allNodes() {
			for _, ip := range []string{nd.PrimaryIP, nd.SecondaryIP} {
				if i, ok := p.Offset(ip); ok && !n.ExtReserved(i) {
					bitSet(n.ExtReservations, i, true)
					t.logf(fmt.Sprintf("Reserved IP address of node '%s' (%s)", nd.Name, ip))
				}
			}
		}
	}
	for _, ip := range o.AddReservedIPs {
		i, _ := p.Offset(ip)
		if n.ExtReserved(i) {
			return nil, errf(CodeNotUnique, "add_reserved_ips", "cannot reserve IP address %s: it is already externally reserved (network or broadcast address, gateway or a node's address)", ip)
		}
		bitSet(n.ExtReservations, i, true)
	}
	tags := append([]string(nil), o.Tags...)
	sort.Strings(tags)
	for _, x := range tags {
		if len(n.Tags) == 0 || n.Tags[len(n.Tags)-1] != x {
			n.Tags = append(n.Tags, x)
		}
	}
	t.nets[uuid] = n
	return nil, nil
}

// OpNetworkRemove removes a network that no group is connected to and no
// NIC uses.
type OpNetworkRemove struct {
	OpCommon
	NetworkName string `json:"network_name"`
	Force       bool   `json:"force,omitempty"`
}

// Validate implements Opcode.
func (o *OpNetworkRemove) Validate() *Error { return validateNetworkRef(o.NetworkName) }

// Summary implements Opcode.
func (o *OpNetworkRemove) Summary() string { return "NETWORK_REMOVE(" + o.NetworkName + ")" }

// Locks implements Opcode.
func (o *OpNetworkRemove) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNetwork, Names: []string{networkLockName(s, o.NetworkName)}, Exclusive: true},
		{Level: LockNodeGroup}}
}

func networkLockName(s *State, ref string) string {
	if n := s.LookupNetwork(ref); n != nil {
		return n.Name
	}
	return ref
}

// connectedGroups names the groups a network is connected to, sorted.
func (t *txn) connectedGroups(n *Network) []string {
	var out []string
	for u := range n.Groups {
		name := u
		if g := t.group(u); g != nil {
			name = g.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// networkUsers names the instances (staged view) with a NIC on the
// network, sorted; inGroup, when set, keeps those whose primary node is
// in that group.
func (t *txn) networkUsers(netUUID, inGroup string) []string {
	var out []string
	for _, i := range t.allInstances() {
		if inGroup != "" {
			nd := t.node(i.PrimaryNode)
			if nd == nil || nd.Group != inGroup {
				continue
			}
		}
		for _, nic := range i.NICs {
			if nic.Network == netUUID {
				out = append(out, i.Name)
				break
			}
		}
	}
	return out
}

func (o *OpNetworkRemove) apply(t *txn, _ string) (any, *Error) {
	if e := o.Validate(); e != nil {
		return nil, e
	}
	n := t.lookupNetwork(o.NetworkName)
	if n == nil {
		return nil, errf(CodeNoEnt, "network_name", "network %q does not exist", o.NetworkName)
	}
	if gs := t.connectedGroups(n); len(gs) > 0 {
		return nil, errf(CodeState, "network_name", "network %s is still connected to node group(s) %s; disconnect it first", n.Name, strings.Join(gs, ", "))
	}
	if users := t.networkUsers(n.UUID, ""); len(users) > 0 {
		return nil, errf(CodeState, "network_name", "network %s is still used by the NICs of instance(s) %s", n.Name, strings.Join(users, ", "))
	}
	t.nets[n.UUID] = nil
	return nil, nil
}

// OpNetworkSetParams changes a network: gateways, IPv6 network, MAC
// prefix, external reservations. "none" clears gateway, network6,
// gateway6 and mac_prefix.
type OpNetworkSetParams struct {
	OpCommon
	NetworkName       string   `json:"network_name"`
	Gateway           *string  `json:"gateway,omitempty"`
	Network6          *string  `json:"network6,omitempty"`
	Gateway6          *string  `json:"gateway6,omitempty"`
	MACPrefix         *string  `json:"mac_prefix,omitempty"`
	AddReservedIPs    []string `json:"add_reserved_ips,omitempty"`
	RemoveReservedIPs []string `json:"remove_reserved_ips,omitempty"`
}

// clearable returns the value an optional parameter gets: nil when not
// given, "" for "none".
func clearable(p *string) *string {
	if p == nil || *p == "" {
		return nil
	}
	if strings.EqualFold(*p, ValueNone) {
		e := ""
		return &e
	}
	return p
}

// Validate implements Opcode.
func (o *OpNetworkSetParams) Validate() *Error {
	if e := validateNetworkRef(o.NetworkName); e != nil {
		return e
	}
	gw := clearable(o.Gateway)
	if gw != nil && *gw != "" {
		if _, e := ParseIPv4("gateway", *gw); e != nil {
			return e
		}
	}
	if gw != nil && (len(o.AddReservedIPs) > 0 || len(o.RemoveReservedIPs) > 0) {
		return errf(CodeInval, "gateway", "cannot modify the gateway and the reserved IPs at once")
	}
	if e := validateNetwork6(derefStr(clearable(o.Network6)), derefStr(clearable(o.Gateway6))); e != nil {
		return e
	}
	if mp := clearable(o.MACPrefix); mp != nil && *mp != "" {
		if e := validateMACPrefix("mac_prefix", *mp); e != nil {
			return e
		}
	}
	if e := validateReservedList("add_reserved_ips", o.AddReservedIPs); e != nil {
		return e
	}
	if e := validateReservedList("remove_reserved_ips", o.RemoveReservedIPs); e != nil {
		return e
	}
	for _, a := range o.AddReservedIPs {
		for _, r := range o.RemoveReservedIPs {
			if a == r {
				return errf(CodeInval, "remove_reserved_ips", "%s is both in add_reserved_ips and remove_reserved_ips", a)
			}
		}
	}
	if clearable(o.Gateway) == nil && clearable(o.Network6) == nil && clearable(o.Gateway6) == nil && clearable(o.MACPrefix) == nil &&
		len(o.AddReservedIPs) == 0 && len(o.RemoveReservedIPs) == 0 {
		return errf(CodeInval, "", "please pass at least one modification")
	}
	return nil
}

// Summary implements Opcode.
func (o *OpNetworkSetParams) Summary() string { return "NETWORK_SET_PARAMS(" + o.NetworkName + ")" }

// Locks implements Opcode.
func (o *OpNetworkSetParams) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNetwork, Names: []string{networkLockName(s, o.NetworkName)}, Exclusive: true}}
}

func (o *OpNetworkSetParams) apply(t *txn, _ string) (any, *Error) {
	if e := o.Validate(); e != nil {
		return nil, e
	}
	cur := t.lookupNetwork(o.NetworkName)
	if cur == nil {
		return nil, errf(CodeNoEnt, "network_name", "network %q does not exist", o.NetworkName)
	}
	n := t.networkRW(cur.UUID)
	p := n.Pool()
	var ch changes
	if gw := clearable(o.Gateway); gw != nil && *gw != n.Gateway {
		if *gw != "" {
			i, ok := p.Offset(*gw)
			if !ok {
				return nil, errf(CodeInval, "gateway", "gateway %s is not in network %s", *gw, n.Network)
			}
			if e := t.reserveExt(n, p, i, "gateway"); e != nil {
				return nil, e
			}
		}
		if n.Gateway != "" {
			i, _ := p.Offset(n.Gateway)
			bitSet(n.ExtReservations, i, false)
		}
		n.Gateway = *gw
		ch = append(ch, [2]any{"gateway", n.Gateway})
	}
	for _, ip := range o.AddReservedIPs {
		i, ok := p.Offset(ip)
		if !ok {
			return nil, errf(CodeInval, "add_reserved_ips", "cannot reserve %s: it is not in network %s", ip, n.Network)
		}
		if e := t.reserveExt(n, p, i, "add_reserved_ips"); e != nil {
			return nil, e
		}
		ch = append(ch, [2]any{"add_reserved_ips", ip})
	}
	for _, ip := range o.RemoveReservedIPs {
		i, ok := p.Offset(ip)
		if !ok {
			return nil, errf(CodeInval, "remove_reserved_ips", "cannot release %s: it is not in network %s", ip, n.Network)
		}
		if ip == n.Gateway {
			return nil, errf(CodeInval, "remove_reserved_ips", "cannot release %s: it is the gateway of network %s", ip, n.Name)
		}
		if !n.ExtReserved(i) {
			return nil, errf(CodeNoEnt, "remove_reserved_ips", "cannot release %s: it is not externally reserved in network %s", ip, n.Name)
		}
		bitSet(n.ExtReservations, i, false)
		ch = append(ch, [2]any{"remove_reserved_ips", ip})
	}
	net6, gw6 := n.Network6, n.Gateway6
	if v := clearable(o.Network6); v != nil {
		net6 = *v
	}
	if v := clearable(o.Gateway6); v != nil {
		gw6 = *v
	}
	if e := validateNetwork6(net6, gw6); e != nil {
		return nil, e
	}
	if v := clearable(o.Network6); v != nil {
		n.Network6 = *v
		ch = append(ch, [2]any{"network6", n.Network6})
	}
	if v := clearable(o.Gateway6); v != nil {
		n.Gateway6 = *v
		ch = append(ch, [2]any{"gateway6", n.Gateway6})
	}
	if v := clearable(o.MACPrefix); v != nil {
		n.MACPrefix = strings.ToLower(*v)
		ch = append(ch, [2]any{"mac_prefix", n.MACPrefix})
	}
	return ch, nil
}

// OpNetworkConnect connects a network to a node group with the NIC mode
// and link its instances' NICs get on it.
type OpNetworkConnect struct {
	OpCommon
	GroupName      string `json:"group_name"`
	NetworkName    string `json:"network_name"`
	NetworkMode    string `json:"network_mode"`
	NetworkLink    string `json:"network_link"`
	NetworkVLAN    string `json:"network_vlan,omitempty"`
	ConflictsCheck *bool  `json:"conflicts_check,omitempty"`
}

// Validate implements Opcode.
func (o *OpNetworkConnect) Validate() *Error {
	if e := validateNetGroupRef(o.NetworkName, o.GroupName); e != nil {
		return e
	}
	return validateNetParams(o.NetworkMode, o.NetworkLink, o.NetworkVLAN)
}

// Summary implements Opcode.
func (o *OpNetworkConnect) Summary() string { return "NETWORK_CONNECT(" + o.NetworkName + ")" }

// Locks implements Opcode.
func (o *OpNetworkConnect) Locks(s *State) []LockDecl {
	return netGroupLocks(s, o.NetworkName, o.GroupName)
}

func (o *OpNetworkConnect) apply(t *txn, _ string) (any, *Error) {
	cur, g, e := t.netAndGroup(o, o.NetworkName, o.GroupName)
	if e != nil {
		return nil, e
	}
	want := NetParams{Mode: o.NetworkMode, Link: o.NetworkLink, VLAN: o.NetworkVLAN}
	if have, ok := cur.Groups[g.UUID]; ok {
		if have == want {
			t.logf(fmt.Sprintf("Network '%s' is already mapped to group '%s'", cur.Name, g.Name))
			return nil, nil
		}
		return nil, errf(CodeState, "group_name", "network %s is already connected to group %s with mode %s, link %s; disconnect it first to change them", cur.Name, g.Name, have.Mode, have.Link)
	}
	if o.ConflictsCheck == nil || *o.ConflictsCheck {
		p := cur.Pool()
		var conflicts []string
		for _, i := range t.allInstances() {
			nd := t.node(i.PrimaryNode)
			if nd == nil || nd.Group != g.UUID {
				continue
			}
			for k, nic := range i.NICs {
				if _, in := p.Offset(nic.IP); in && nic.Network != cur.UUID {
					conflicts = append(conflicts, fmt.Sprintf("%s: nic%d/%s", i.Name, k, nic.IP))
				}
			}
		}
		if len(conflicts) > 0 {
			return nil, errf(CodeState, "network_name", "IP addresses of network %s, which is about to connect to node group %s, are in use: %s; remove or modify those NICs", cur.Name, g.Name, strings.Join(conflicts, ", "))
		}
	}
	t.networkRW(cur.UUID).Groups[g.UUID] = want
	return nil, nil
}

// OpNetworkDisconnect disconnects a network from a node group whose
// instances have no NIC on it.
type OpNetworkDisconnect struct {
	OpCommon
	GroupName   string `json:"group_name"`
	NetworkName string `json:"network_name"`
}

// Validate implements Opcode.
func (o *OpNetworkDisconnect) Validate() *Error {
	return validateNetGroupRef(o.NetworkName, o.GroupName)
}

// Summary implements Opcode.
func (o *OpNetworkDisconnect) Summary() string { return "NETWORK_DISCONNECT(" + o.NetworkName + ")" }

// Locks implements Opcode.
func (o *OpNetworkDisconnect) Locks(s *State) []LockDecl {
	return netGroupLocks(s, o.NetworkName, o.GroupName)
}

func (o *OpNetworkDisconnect) apply(t *txn, _ string) (any, *Error) {
	cur, g, e := t.netAndGroup(o, o.NetworkName, o.GroupName)
	if e != nil {
		return nil, e
	}
	if _, ok := cur.Groups[g.UUID]; !ok {
		t.logf(fmt.Sprintf("Network '%s' is not mapped to group '%s'", cur.Name, g.Name))
		return nil, nil
	}
	if users := t.networkUsers(cur.UUID, g.UUID); len(users) > 0 {
		return nil, errf(CodeState, "network_name", "network %s cannot be disconnected from group %s: NICs of instance(s) %s use it", cur.Name, g.Name, strings.Join(users, ", "))
	}
	delete(t.networkRW(cur.UUID).Groups, g.UUID)
	return nil, nil
}

// validateNetGroupRef checks the network and node group a connect or
// disconnect names.
func validateNetGroupRef(network, group string) *Error {
	if e := validateNetworkRef(network); e != nil {
		return e
	}
	if group == "" {
		return errf(CodeInval, "group_name", "group_name must not be empty")
	}
	return validateRefName("group_name", group, MaxGroupNameLen)
}

// netGroupLocks are the locks of a connect or disconnect: the node group
// and the network, exclusively.
func netGroupLocks(s *State, network, group string) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockInstance},
		{Level: LockNodeGroup, Names: []string{groupLockName(s, group)}, Exclusive: true},
		{Level: LockNetwork, Names: []string{networkLockName(s, network)}, Exclusive: true}}
}

// netAndGroup validates a connect or disconnect and looks up (staged
// view) the network and node group it names.
func (t *txn) netAndGroup(o Opcode, network, group string) (*Network, *Group, *Error) {
	if e := o.Validate(); e != nil {
		return nil, nil, e
	}
	cur := t.lookupNetwork(network)
	if cur == nil {
		return nil, nil, errf(CodeNoEnt, "network_name", "network %q does not exist", network)
	}
	g := t.lookupGroup(group)
	if g == nil {
		return nil, nil, errf(CodeNoEnt, "group_name", "node group %q does not exist", group)
	}
	return cur, g, nil
}

// netIPOwner returns the instance (staged view) other than skip with a
// NIC of the address on the network, or nil.
func (t *txn) netIPOwner(netUUID, ip, skip string) *Instance {
	if u, ok := t.st.netIPs[netUUID][ip]; ok && u != skip {
		if staged, ok := t.insts[u]; !ok {
			return t.st.Instances[u]
		} else if staged != nil && hasNetIP(staged, netUUID, ip) {
			return staged
		}
	}
	for u, i := range t.insts {
		if u != skip && i != nil && hasNetIP(i, netUUID, ip) {
			return i
		}
	}
	return nil
}

func hasNetIP(i *Instance, netUUID, ip string) bool {
	for _, n := range i.NICs {
		if n.Network == netUUID && n.IP == ip {
			return true
		}
	}
	return false
}

// IPPool is the NIC address that asks for the lowest free address of the
// NIC's network.
const IPPool = "pool"

// resolveNICNetworks fills in an instance record's NICs that name a
// network: the network's UUID for the name, the mode and link of its
// connection to the primary node's group, and an address from its pool
// for ip=pool (the lowest free one); an explicit address must be in the
// network and free. It changes in.NICs (a copy of the caller's).
func (t *txn) resolveNICNetworks(in *Instance) *Error {
	var grp string
	if nd := t.node(in.PrimaryNode); nd != nil {
		grp = nd.Group
	}
	needed := false
	for _, nic := range in.NICs {
		if nic.Network != "" || nic.IP == IPPool {
			needed = true
		}
	}
	if !needed {
		return nil
	}
	in.NICs = append([]NIC(nil), in.NICs...)
	for k := range in.NICs {
		nic := &in.NICs[k]
		field := fmt.Sprintf("instance.nics.%d", k)
		if nic.Network == "" {
			if nic.IP == IPPool {
				return errf(CodeInval, field+".ip", "NIC %d: ip=pool needs a network to take the address from", k)
			}
			continue
		}
		n := t.lookupNetwork(nic.Network)
		if n == nil {
			return errf(CodeNoEnt, field+".network", "NIC %d: network %q does not exist", k, nic.Network)
		}
		nic.Network = n.UUID
		if grp != "" {
			np, ok := n.Groups[grp]
			if !ok {
				gname := grp
				if g := t.group(grp); g != nil {
					gname = g.Name
				}
				return errf(CodeState, field+".network", "NIC %d: network %s is not connected to node group %s of the primary node", k, n.Name, gname)
			}
			nic.Mode, nic.Link, nic.VLAN = np.Mode, np.Link, np.VLAN
		}
		p := n.Pool()
		taken := func(i int, ip string) bool {
			if n.ExtReserved(i) || t.netIPOwner(n.UUID, ip, in.UUID) != nil {
				return true
			}
			for j := range in.NICs {
				if j != k && in.NICs[j].Network == n.UUID && in.NICs[j].IP == ip {
					return true
				}
			}
			return false
		}
		switch nic.IP {
		case "":
		case IPPool:
			nic.IP = ""
			for i := 0; i < p.Size; i++ {
				if n.ExtReserved(i) {
					continue // the common case of a crowded pool, without formatting the address
				}
				if ip := p.Addr(i); !taken(i, ip) {
					nic.IP = ip
					break
				}
			}
			if nic.IP == "" {
				return errf(CodeNoRes, field+".ip", "NIC %d: network %s (%s) has no free address left", k, n.Name, n.Network)
			}
		default:
			i, ok := p.Offset(nic.IP)
			if !ok {
				return errf(CodeInval, field+".ip", "NIC %d: IP %s is not in network %s (%s)", k, nic.IP, n.Name, n.Network)
			}
			if n.ExtReserved(i) {
				return errf(CodeNotUnique, field+".ip", "NIC %d: IP %s is reserved in network %s", k, nic.IP, n.Name)
			}
			if taken(i, nic.IP) {
				return errf(CodeNotUnique, field+".ip", "NIC %d: IP %s of network %s is already in use", k, nic.IP, n.Name)
			}
		}
	}
	return nil
}

// groupNetworks names the networks connected to a group (staged view).
func (t *txn) groupNetworks(groupUUID string) []string {
	var out []string
	for _, n := range t.allNetworks() {
		if _, ok := n.Groups[groupUUID]; ok {
			out = append(out, n.Name)
		}
	}
	return out
}

// OpNetworkRename renames a network. Its result is the new name, as
// Ganeti's.
type OpNetworkRename struct {
	OpCommon
	NetworkName string `json:"network_name"`
	NewName     string `json:"new_name"`
}

// Validate implements Opcode.
func (o *OpNetworkRename) Validate() *Error {
	if e := validateNetworkRef(o.NetworkName); e != nil {
		return e
	}
	return ValidateNetworkName("new_name", o.NewName)
}

// Summary implements Opcode.
func (o *OpNetworkRename) Summary() string { return "NETWORK_RENAME(" + o.NetworkName + ")" }

// Locks implements Opcode: the network, and the new name so that no
// network of that name is added meanwhile.
func (o *OpNetworkRename) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNetwork, Names: []string{networkLockName(s, o.NetworkName), o.NewName}, Exclusive: true}}
}

func (o *OpNetworkRename) apply(t *txn, _ string) (any, *Error) {
	if e := o.Validate(); e != nil {
		return nil, e
	}
	n := t.lookupNetwork(o.NetworkName)
	if n == nil {
		return nil, errf(CodeNoEnt, "network_name", "network %q does not exist", o.NetworkName)
	}
	if n.Name == o.NewName {
		return nil, errf(CodeInval, "new_name", "network %q already has that name", n.Name)
	}
	if other := t.lookupNetwork(o.NewName); other != nil {
		return nil, errf(CodeExists, "new_name", "network %q already exists (UUID %s)", o.NewName, other.UUID)
	}
	t.networkRW(n.UUID).Name = o.NewName
	return o.NewName, nil
}
