package fsm

import "sort"

// txn stages changes to the configuration so that a command, or a job of
// several opcodes, either applies whole or not at all. Objects are cloned
// into the overlay on first write; commit copies the overlay into the state
// and bumps serial numbers once per changed object.
type txn struct {
	st      *State
	now     int64
	cluster *Cluster
	groups  map[string]*Group    // nil value = deleted
	nodes   map[string]*Node     // nil value = deleted
	insts   map[string]*Instance // nil value = deleted
	nets    map[string]*Network  // nil value = deleted
	maint   *Maintenance
	logs    []string
	// job is the job whose update the transaction applies (0 for other
	// commands): its own locks do not count against its changes.
	job int64
}

func (s *State) begin(now int64) *txn {
	return &txn{st: s, now: now, groups: map[string]*Group{}, nodes: map[string]*Node{}, insts: map[string]*Instance{}, nets: map[string]*Network{}}
}

func (t *txn) logf(msg string) { t.logs = append(t.logs, msg) }

func (t *txn) clusterRO() *Cluster {
	if t.cluster != nil {
		return t.cluster
	}
	return t.st.Cluster
}

func (t *txn) clusterRW() *Cluster {
	if t.cluster == nil {
		t.cluster = t.st.Cluster.clone()
	}
	return t.cluster
}

func (t *txn) node(uuid string) *Node {
	if n, ok := t.nodes[uuid]; ok {
		return n
	}
	return t.st.Nodes[uuid]
}

func (t *txn) nodeRW(uuid string) *Node {
	if n, ok := t.nodes[uuid]; ok {
		return n
	}
	n := t.st.Nodes[uuid]
	if n == nil {
		return nil
	}
	c := n.clone()
	t.nodes[uuid] = c
	return c
}

// lookupNode finds a node by name or UUID, seeing staged changes.
func (t *txn) lookupNode(ref string) *Node {
	for u, n := range t.nodes {
		if n != nil && (n.Name == ref || u == ref) {
			return n
		}
	}
	n := t.st.LookupNode(ref)
	if n == nil {
		return nil
	}
	return t.node(n.UUID)
}

// allNodes returns the staged view of every node, ordered by name.
func (t *txn) allNodes() []*Node {
	out := make([]*Node, 0, len(t.st.Nodes)+len(t.nodes))
	for u, n := range t.st.Nodes {
		if _, staged := t.nodes[u]; !staged {
			out = append(out, n)
		}
	}
	for _, n := range t.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (t *txn) group(uuid string) *Group {
	if g, ok := t.groups[uuid]; ok {
		return g
	}
	return t.st.Groups[uuid]
}

func (t *txn) groupRW(uuid string) *Group {
	if g, ok := t.groups[uuid]; ok {
		return g
	}
	g := t.st.Groups[uuid]
	if g == nil {
		return nil
	}
	c := g.clone()
	t.groups[uuid] = c
	return c
}

func (t *txn) lookupGroup(ref string) *Group {
	for u, g := range t.groups {
		if g != nil && (g.Name == ref || u == ref) {
			return g
		}
	}
	g := t.st.LookupGroup(ref)
	if g == nil {
		return nil
	}
	return t.group(g.UUID)
}

func (t *txn) allGroups() []*Group {
	var out []*Group
	for u, g := range t.st.Groups {
		if _, staged := t.groups[u]; !staged {
			out = append(out, g)
		}
	}
	for _, g := range t.groups {
		if g != nil {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (t *txn) lookupInstance(ref string) *Instance {
	if ref == "" {
		return nil // unnamed reservations are found by UUID only
	}
	for u, i := range t.insts {
		if i != nil && (i.Name == ref || u == ref) {
			return i
		}
	}
	i := t.st.LookupInstance(ref)
	if i == nil {
		return nil
	}
	if s, ok := t.insts[i.UUID]; ok {
		return s
	}
	return i
}

func (t *txn) instanceRW(uuid string) *Instance {
	if i, ok := t.insts[uuid]; ok {
		return i
	}
	i := t.st.Instances[uuid]
	if i == nil {
		return nil
	}
	c := i.clone()
	t.insts[uuid] = c
	return c
}

// nodeHasInstances names an instance (staged view) using the node, if any.
func (t *txn) nodeHasInstances(uuid string) (string, bool) {
	check := func(i *Instance) bool {
		if i.PrimaryNode == uuid {
			return true
		}
		for _, s := range i.SecondaryNodes {
			if s == uuid {
				return true
			}
		}
		return false
	}
	for u, i := range t.st.Instances {
		if s, staged := t.insts[u]; staged {
			i = s
		}
		if i != nil && check(i) {
			return i.Name, true
		}
	}
	for u, i := range t.insts {
		if _, base := t.st.Instances[u]; !base && i != nil && check(i) {
			return i.Name, true
		}
	}
	return "", false
}

// ipOwner returns the node (staged view) using ip as primary or secondary.
func (t *txn) ipOwner(ip string) *Node {
	if ip == "" {
		return nil
	}
	for _, n := range t.allNodes() {
		if n.PrimaryIP == ip || n.SecondaryIP == ip {
			return n
		}
	}
	return nil
}

// maintRW returns the staged maintenance state.
func (t *txn) maintRW() *Maintenance {
	if t.maint == nil {
		t.maint = t.st.maintRW()
	}
	return t.maint
}

func (t *txn) dirty() bool {
	return t.cluster != nil || t.maint != nil || len(t.groups) > 0 || len(t.nodes) > 0 || len(t.insts) > 0 || len(t.nets) > 0
}

// commit writes the staged changes into the state.
func (t *txn) commit() {
	if !t.dirty() {
		return
	}
	s := t.st
	ts := secs(t.now)
	for u, g := range t.groups {
		if old := s.Groups[u]; old != nil {
			delete(s.groupByName, old.Name)
		}
		if g == nil {
			delete(s.Groups, u)
			continue
		}
		g.SerialNo++
		g.MTime = ts
		s.Groups[u] = g
		s.groupByName[g.Name] = u
	}
	for u, n := range t.nodes {
		if old := s.Nodes[u]; old != nil {
			s.unindexNode(old)
		}
		if n == nil {
			if old := s.Nodes[u]; old != nil {
				s.noteRemoved(old.Name, t.now)
			}
			delete(s.Nodes, u)
			continue
		}
		n.SerialNo++
		n.MTime = ts
		s.Nodes[u] = n
		s.indexNode(u, n)
	}
	for u, i := range t.insts {
		if old := s.Instances[u]; old != nil {
			s.unindexInstance(u, old)
		}
		if i == nil {
			delete(s.Instances, u)
			continue
		}
		i.SerialNo++
		i.MTime = ts
		s.Instances[u] = i
		s.indexInstance(u, i)
	}
	for u, n := range t.nets {
		if old := s.Networks[u]; old != nil {
			delete(s.netByName, old.Name)
		}
		if n == nil {
			delete(s.Networks, u)
			continue
		}
		n.SerialNo++
		n.MTime = ts
		s.Networks[u] = n
		s.netByName[n.Name] = u
	}
	if t.maint != nil {
		s.commitMaint(t.maint, t.now)
	}
	c := t.cluster
	if c == nil {
		c = s.Cluster.clone()
	}
	c.SerialNo++
	c.MTime = ts
	s.Cluster = c
}

func (t *txn) networkRW(uuid string) *Network {
	if n, ok := t.nets[uuid]; ok {
		return n
	}
	n := t.st.Networks[uuid]
	if n == nil {
		return nil
	}
	c := n.clone()
	t.nets[uuid] = c
	return c
}

// lookupNetwork finds a network by name or UUID, seeing staged changes.
func (t *txn) lookupNetwork(ref string) *Network {
	for u, n := range t.nets {
		if n != nil && (n.Name == ref || u == ref) {
			return n
		}
	}
	n := t.st.LookupNetwork(ref)
	if n == nil {
		return nil
	}
	if s, ok := t.nets[n.UUID]; ok {
		return s
	}
	return n
}

// allNetworks returns the staged view of every network, ordered by name.
func (t *txn) allNetworks() []*Network {
	var out []*Network
	for u, n := range t.st.Networks {
		if _, staged := t.nets[u]; !staged {
			out = append(out, n)
		}
	}
	for _, n := range t.nets {
		if n != nil {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// allInstances returns the staged view of every instance, ordered by name.
func (t *txn) allInstances() []*Instance {
	out := make([]*Instance, 0, len(t.st.Instances)+len(t.insts))
	for u, i := range t.st.Instances {
		if _, staged := t.insts[u]; !staged {
			out = append(out, i)
		}
	}
	for _, i := range t.insts {
		if i != nil {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
