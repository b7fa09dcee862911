package fsm

import "sort"

// The instance index: instances by name and by NIC address. It lives beside
// the state's other indexes and is kept up to date wherever instances are
// stored (txn.commit, reindex after a snapshot), so that confd's hot lookup,
// instance IP to primary node, is a map access rather than a scan of every
// instance's NICs. indexInstance and unindexInstance also keep the usage
// index (index_usage.go).
//
// NIC addresses are keyed by the NIC's link as stored ("" when the NIC
// names none, which means the cluster's default link): resolving the
// default link is the reader's business. When two instances claim one
// address on one link, the one stored last wins, and removing either drops
// the entry only if it still points at that instance.

// instIPIndex maps link -> IP -> instance UUID.
type instIPIndex map[string]map[string]string

func (s *State) indexInstance(u string, i *Instance) {
	s.useInstance(u, i, 1)
	if i.NetworkPort != 0 {
		s.ports[i.NetworkPort] = u
	}
	s.indexDRBD(u, i)
	if i.Name != "" { // an unnamed reservation is found by UUID only
		s.instByName[i.Name] = u
	}
	for _, n := range i.NICs {
		if n.IP == "" {
			continue
		}
		if n.Network != "" {
			m := s.netIPs[n.Network]
			if m == nil {
				m = map[string]string{}
				s.netIPs[n.Network] = m
			}
			m[n.IP] = u
		}
		m := s.instByIP[n.Link]
		if m == nil {
			m = map[string]string{}
			s.instByIP[n.Link] = m
		}
		m[n.IP] = u
	}
}

func (s *State) unindexInstance(u string, i *Instance) {
	s.useInstance(u, i, -1)
	if i.NetworkPort != 0 && s.ports[i.NetworkPort] == u {
		delete(s.ports, i.NetworkPort)
	}
	s.unindexDRBD(u, i)
	if i.Name != "" && s.instByName[i.Name] == i.UUID {
		delete(s.instByName, i.Name)
	}
	for _, n := range i.NICs {
		if nm := s.netIPs[n.Network]; n.Network != "" && n.IP != "" && nm != nil && nm[n.IP] == i.UUID {
			delete(nm, n.IP)
			if len(nm) == 0 {
				delete(s.netIPs, n.Network)
			}
		}
		m := s.instByIP[n.Link]
		if n.IP == "" || m == nil || m[n.IP] != i.UUID {
			continue
		}
		delete(m, n.IP)
		if len(m) == 0 {
			delete(s.instByIP, n.Link)
		}
	}
}

// InstanceByIP finds the instance with a NIC of that IP on the link as the
// NIC stores it ("" for NICs on the default link); nil if none.
func (s *State) InstanceByIP(link, ip string) *Instance {
	return s.Instances[s.instByIP[link][ip]]
}

// InstanceIPs returns the IPs of the NICs stored with the link ("" for the
// default link), sorted.
func (s *State) InstanceIPs(link string) []string {
	m := s.instByIP[link]
	out := make([]string, 0, len(m))
	for ip := range m {
		out = append(out, ip)
	}
	sort.Strings(out)
	return out
}
