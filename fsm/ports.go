package fsm

import "sort"

// The cluster's TCP/UDP port pool (Ganeti's tcpudp_port_pool and
// AllocatePort): an instance whose hypervisor needs a port of its own (the
// kvm driver's VNC console) gets one, Instance.NetworkPort, when its
// record is stored, and so does each drbd disk (its DRBDLogicalID.Port,
// drbdids.go): both draw from this one pool. The choice is made in apply and depends only on the
// state: the lowest port of the pool no instance holds, so a removed
// instance's port is the next one given out. The port is the instance's:
// failover, migration, rename and modification keep it; removal frees it.
//
// Records without a port that need one get theirs: those of a build
// before LogVersion 30 when the first leader of LogVersion 30 takes
// office; those that come to need one by a change of the cluster's
// hypervisors or hypervisor parameters in that change; any other at its
// next change.

// The pool's bounds (Ganeti's FIRST_DRBD_PORT and LAST_DRBD_PORT, the
// range Ganeti's pool starts with) and the VNC display base: QEMU's VNC
// display N listens on VNCBasePort+N.
const (
	FirstNetworkPort = 11000
	LastNetworkPort  = 14999
	VNCBasePort      = 5900
)

// networkPortVersion is the LogVersion from which instances hold ports.
const networkPortVersion = 30

// NeedsNetworkPort reports whether an instance needs a port of the pool:
// it is no reservation and runs under kvm (its own hypervisor or the
// cluster's default), or under another hypervisor but exec (fake, which
// simulates kvm, or none named: the node's driver decides) with
// vnc_bind_address set (its own, or the cluster's for its hypervisor).
func NeedsNetworkPort(c *Cluster, in *Instance) bool {
	if in.Forthcoming {
		return false
	}
	hv := InstanceHypervisor(c, in)
	switch hv {
	case HVKVM:
		return true
	case HVExec:
		return false
	}
	if s, ok := in.HVParams["vnc_bind_address"].(string); ok {
		return s != ""
	}
	if c != nil {
		s, _ := c.HVParams[hv]["vnc_bind_address"].(string)
		return s != ""
	}
	return false
}

// InstanceByPort returns the instance holding a port of the pool (as its
// network_port or a drbd disk's port), nil if none.
func (s *State) InstanceByPort(port int) *Instance {
	return s.Instances[s.ports[port]]
}

// setNetworkPort gives in, about to be stored over old (nil: a new
// record), its port: old's, which no change may replace, else the pool's
// lowest free one when it needs one. A record naming a port it was not
// given is refused, as is a record that needs a port when the pool has
// none left.
func (t *txn) setNetworkPort(in, old *Instance) *Error {
	if old != nil && old.NetworkPort != 0 {
		if in.NetworkPort != 0 && in.NetworkPort != old.NetworkPort {
			return errf(CodeInval, "instance.network_port", "instance %s holds network port %d; the cluster allocates ports, a record may not change it to %d", in.Name, old.NetworkPort, in.NetworkPort)
		}
		in.NetworkPort = old.NetworkPort
		return nil
	}
	if in.NetworkPort != 0 {
		return errf(CodeInval, "instance.network_port", "instance %s: network port %d was not allocated to it; the cluster allocates ports from its pool", in.Name, in.NetworkPort)
	}
	if !NeedsNetworkPort(t.clusterRO(), in) {
		return nil
	}
	p := t.recordPortPicker(in, old).take()
	if p == 0 {
		return errf(CodeState, "instance.network_port", "instance %s needs a network port and the cluster's pool (%d-%d) has none free: every port is held by an instance", in.Name, FirstNetworkPort, LastNetworkPort)
	}
	in.NetworkPort = p
	return nil
}

// portPicker hands out the ports of the pool that are free in a
// transaction's view, lowest first: held neither by a record the
// transaction stages nor by a stored record it leaves alone (a port of
// skip's is free). A port it hands out counts as held from then on.
type portPicker struct {
	t      *txn
	skip   string
	staged map[int]bool
	next   int // every port below is held or handed out
}

// portPicker collects the ports the transaction's records hold, once:
// network ports and drbd disks' ports.
func (t *txn) portPicker(skip string) *portPicker {
	staged := map[int]bool{}
	for u, i := range t.insts {
		if u == skip || i == nil {
			continue
		}
		if i.NetworkPort != 0 {
			staged[i.NetworkPort] = true
		}
		for _, d := range i.Disks {
			if d.DRBD != nil && d.DRBD.Port != 0 {
				staged[d.DRBD.Port] = true
			}
		}
	}
	return &portPicker{t: t, skip: skip, staged: staged, next: FirstNetworkPort}
}

// recordPortPicker is the picker for a record in about to be stored over
// old (nil: a new record): the ports old holds count as held (in keeps
// them, or they are freed when the transaction commits), and so do those
// in names.
func (t *txn) recordPortPicker(in, old *Instance) *portPicker {
	pp := t.portPicker(in.UUID)
	for _, i := range []*Instance{old, in} {
		if i == nil {
			continue
		}
		if i.NetworkPort != 0 {
			pp.staged[i.NetworkPort] = true
		}
		for _, d := range i.Disks {
			if d.DRBD != nil && d.DRBD.Port != 0 {
				pp.staged[d.DRBD.Port] = true
			}
		}
	}
	return pp
}

// take is the lowest free port not handed out yet (0: none is left). It
// goes on from where the last one was found: the ports below stay held
// as long as the transaction frees none, so that handing out K ports
// walks the pool once.
func (pp *portPicker) take() int {
	for ; pp.next <= LastNetworkPort; pp.next++ {
		p := pp.next
		if pp.staged[p] {
			continue
		}
		if u, ok := pp.t.st.ports[p]; ok && u != pp.skip {
			if _, changed := pp.t.insts[u]; !changed {
				continue // held by a record this transaction leaves alone
			}
		}
		pp.next++
		return p
	}
	return 0
}

// portless lists, in the order of their UUIDs, the instances of the
// transaction's view that need a port and hold none.
func (t *txn) portless() []*Instance {
	us := make([]string, 0, len(t.st.Instances))
	for u := range t.st.Instances {
		us = append(us, u)
	}
	for u, i := range t.insts {
		if i != nil && t.st.Instances[u] == nil {
			us = append(us, u)
		}
	}
	sort.Strings(us)
	var out []*Instance
	for _, u := range us {
		i, ok := t.insts[u]
		if !ok {
			i = t.st.Instances[u]
		}
		if i != nil && i.NetworkPort == 0 && NeedsNetworkPort(t.clusterRO(), i) {
			out = append(out, i)
		}
	}
	return out
}

// assignMissingPorts gives every instance that needs a port and has none
// one, in the order of their UUIDs: the lowest free ones, in that order.
// With strict, a pool too small fails (and the caller's transaction
// changes nothing); otherwise the instances left without get theirs at
// their next change. It walks the pool once: the instances it gives
// ports to held none before (neither staged nor stored), so none frees a
// port for another.
func (t *txn) assignMissingPorts(strict bool) *Error {
	pick := t.portPicker("")
	for _, i := range t.portless() {
		p := pick.take()
		if p == 0 {
			if strict {
				return errf(CodeState, "network_port", "instance %s would need a network port and the cluster's pool (%d-%d) has none free", i.Name, FirstNetworkPort, LastNetworkPort)
			}
			return nil
		}
		t.instanceRW(i.UUID).NetworkPort = p
	}
	return nil
}

// NetworkPortField is the instance's network_port as the API and the
// query fields show it: the port, or nil when it holds none.
func (i *Instance) NetworkPortField() any {
	if i.NetworkPort == 0 {
		return nil
	}
	return i.NetworkPort
}
