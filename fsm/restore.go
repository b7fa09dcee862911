package fsm

import (
	"fmt"
	"sort"
	"strings"
)

// Restoring a saved state into a running cluster (gnt cluster snapshot
// restore). Most of a saved state replaces the running one as it is; what
// belongs to the machines of the running cluster rather than to its
// configuration is kept from the running state:
//   - the cluster's identity (name and UUID): every gntd's node.json
//     records them, and joins and rejoins are checked against them;
//   - the cluster CA (the pki record): every node's certificate on disk
//     is signed by the running CA, and its key is sealed with the running
//     cluster's cluster.key, which a saved state of another cluster cannot
//     open;
//   - the removals of nodes the running cluster made (their certificates,
//     of the running CA, stay refused), unless the saved state has a node
//     of that name;
//   - the addresses and primary and secondary IPs of the current Raft
//     members, as the running state records them: they describe the
//     machines that run now (restoring on new hardware), and the
//     candidate-pool keeper reconciles the Raft configuration with them.
//
// The Raft configuration itself is not part of the state: Raft keeps the
// running one (raft.Restore). Every member of it must be a master
// candidate of the saved state, or the keeper would remove it (or, for the
// leader, keep a Raft member the configuration does not know): such a
// restore is refused (RestorePlan).

// RestoreImage is a saved state made ready to replace a running one.
type RestoreImage struct {
	z *Frozen
}

// Frozen returns the state to hand to Raft, labelled with index.
func (im *RestoreImage) Frozen(index uint64) *Frozen {
	return &Frozen{st: im.z.st, index: index}
}

// State is the state the cluster will hold (read only).
func (im *RestoreImage) State() *State { return im.z.st }

// PrepareRestore checks a saved state (as DecodeSnapshot returned it)
// against the running one and builds the state that replaces it. members
// are the names of the current Raft servers. saved is changed in place
// (it is the caller's decoded copy).
func PrepareRestore(saved *State, running *State, members []string) (*RestoreImage, error) {
	if saved.Cluster == nil {
		return nil, fmt.Errorf("the snapshot holds no cluster (it was saved before cluster init)")
	}
	if running.Cluster == nil {
		return nil, fmt.Errorf("this cluster is not initialised: run gnt cluster init first, on a host whose node name is a master candidate of the snapshot")
	}
	var missing []string
	for _, m := range members {
		n := saved.LookupNode(m)
		if n == nil || !n.MasterCandidate {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("the Raft members %s are not master candidates in the snapshot (it has %s): "+
			"restore into a cluster whose Raft members are all master candidates of the snapshot "+
			"(remove the others first, or initialise a fresh cluster on a host named as one of them)",
			strings.Join(missing, ", "), strings.Join(savedCandidates(saved), ", "))
	}
	c := *saved.Cluster
	c.Name, c.UUID = running.Cluster.Name, running.Cluster.UUID
	saved.Cluster = &c
	saved.PKI = running.PKI
	for name, at := range running.RemovedNodes {
		if saved.LookupNode(name) != nil {
			continue
		}
		if saved.RemovedNodes == nil {
			saved.RemovedNodes = map[string]int64{}
		}
		if saved.RemovedNodes[name] < at {
			saved.RemovedNodes[name] = at
		}
	}
	kept := map[string]bool{}
	for _, m := range members {
		cur, n := running.LookupNode(m), saved.LookupNode(m)
		if cur == nil || n == nil {
			continue
		}
		kept[n.UUID] = true
		if n.Addrs == cur.Addrs && n.PrimaryIP == cur.PrimaryIP && n.SecondaryIP == cur.SecondaryIP {
			continue
		}
		cp := *n
		cp.Addrs, cp.PrimaryIP, cp.SecondaryIP = cur.Addrs, cur.PrimaryIP, cur.SecondaryIP
		saved.Nodes[cp.UUID] = &cp
	}
	// A kept IP must not be another saved node's.
	owner := map[string]*Node{}
	for u, n := range saved.Nodes {
		if !kept[u] {
			owner[n.PrimaryIP], owner[n.SecondaryIP] = n, n
		}
	}
	for u, n := range saved.Nodes {
		for _, ip := range []string{n.PrimaryIP, n.SecondaryIP} {
			if o := owner[ip]; kept[u] && ip != "" && o != nil {
				return nil, fmt.Errorf("node %s of this cluster has the IP %s, which node %s of the snapshot has too: "+
					"restore on machines with the snapshot's addresses, or remove %s from the snapshot's cluster first", n.Name, ip, o.Name, o.Name)
			}
		}
	}
	saved.reindex()
	return &RestoreImage{z: &Frozen{st: saved}}, nil
}

func savedCandidates(s *State) []string {
	var out []string
	for _, n := range s.SortedNodes() {
		if n.MasterCandidate {
			out = append(out, n.Name)
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// Counts are the numbers of objects of a state, for gnt cluster snapshot
// inspect.
type Counts struct {
	Groups       int `json:"groups"`
	Nodes        int `json:"nodes"`
	Instances    int `json:"instances"`
	Jobs         int `json:"jobs"`
	ArchivedJobs int `json:"archived_jobs"`
	Incidents    int `json:"incidents"`
	RAPIUsers    int `json:"rapi_users"`
}

// CountObjects counts the objects of a state.
func (s *State) CountObjects() Counts {
	c := Counts{Groups: len(s.Groups), Nodes: len(s.Nodes), Instances: len(s.Instances),
		Jobs: len(s.Jobs), ArchivedJobs: len(s.Archived), RAPIUsers: len(s.RAPIUsers)}
	if s.Maintenance != nil {
		c.Incidents = len(s.Maintenance.Incidents)
	}
	return c
}

// State is the frozen state, for reading without the FSM's lock while
// Apply goes on (a bulk answer is encoded from it item by item). Nothing
// of it may be changed. It holds the cluster, the maps of objects by UUID
// (Groups, Nodes, Instances, Networks, Jobs), the archive's ordered list
// (ArchivedJobs; the Archived map is nil), the maps that are replaced and
// never changed in place (RAPIUsers, Filters, RemovedNodes) and the
// queue's fields, but none of the derived indexes: the lookups by name or
// address (LookupNode, LookupInstance, NodeByIP...) and the network
// address figures (NetworkIPs, NetworkStats) find nothing in it.
func (z *Frozen) State() *State { return z.st }
