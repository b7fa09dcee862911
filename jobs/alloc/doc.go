// Package alloc is gnt's built-in instance allocator, Ganeti's hail in
// spirit: where a new instance goes (Allocate, which is also the dry run:
// the caller decides whether to create), how many instances of one
// specification still fit and where (Capacity), where each instance of a
// node goes when the node is evacuated (EvacuatePlan), and which
// reservations (forthcoming instances, records only) to move to other
// nodes so that an instance that fits nowhere fits after all (MakeRoom).
// Usage reports the per-node resource table everything here is computed
// from.
//
// Every function is pure: it reads an *fsm.State (never modifying it and
// keeping no reference to it), the request and Options (which carry what
// the state does not, such as which nodes gossip declares dead), and
// returns a decision. No I/O, no clock, no randomness; ties are broken by
// node name, so the same input always gives the same answer.
//
// # Resources
//
// Each call builds its own table from the state: from the state's usage
// index (fsm.State.Usage), which the state machine keeps per node as
// instances change, or, for a state built by hand without its indexes, in
// one pass over the instances; both count alike. A node's totals are its reported Resources (vcpus multiplied
// by Options.VCPURatio); what instances use on it is counted for every
// instance, real or forthcoming, running or not: memory and vcpus on the
// primary node, disk on the primary and on each secondary (for drbd each
// disk also takes DRBDMetaMiB of metadata on both nodes). Free is total
// minus used. A forthcoming instance without a primary node uses nothing.
//
// A node takes new instances only when it is online, not drained,
// vm_capable, not dead (Options.Dead) and not excluded by the request.
//
// # N+1
//
// As hail checks it: a node that is the drbd secondary of instances whose
// primary is node P must be able to absorb their memory if P fails. For
// each node, peers[P] is the memory of the drbd instances with primary P
// and this node as secondary, and the node's reserve is the largest
// peers[P]. A node passes N+1 while its free memory is at least its
// reserve. A placement is refused when it would make any node it touches
// fail N+1: the primary must keep its reserve after giving the instance
// its memory, and a drbd secondary must have free memory at least
// peers[primary] plus the instance's memory. Only memory is checked, as
// in hail.
//
// # Scoring
//
// Among the placements that fit, the allocator picks the one with the
// lowest score, the score of a node group being the mean over its usable
// nodes of u_mem² + u_disk² + u_cpu², where u is a node's used/total for
// that resource (0 for a resource of which the node has none). For a
// fixed total load this sum of squares is smallest when utilisation is
// even, and it grows fastest on nodes that are already full, so it
// favours the emptiest nodes and keeps the group balanced: the same aim as
// hail's score (a sum of standard deviations of utilisation), chosen here
// because it is separable. A placement changes the score by the change on
// the nodes it touches only, so the best primary is found in one pass over
// the group, and the best drbd pair without trying every pair: each
// primary is matched with the best-scoring secondary that passes N+1 for
// it, read from a lazily sorted list: O(nodes) unless many secondaries
// fail N+1 for many primaries, where it tends to hail's O(nodes²). Groups
// are tried by alloc_policy: preferred groups first, last_resort groups
// only when no preferred group fits, unallocable groups never; among
// groups of one policy the lowest score after placement wins, then the
// group name. Within a group ties go to the primary, then the secondary,
// whose name sorts first.
//
// # Simplifications against hail
//
// Free memory is computed from the configuration, not read from the
// hypervisor, so stopped instances keep their memory reserved (they can
// always be started). Hail's low-disk threshold, spindles, instance
// policies and cpu load figures are not modelled; vcpus are a plain
// capacity (Options.VCPURatio, default 1). Placements are never forced
// onto a node that already fails N+1. A drbd instance's nodes are always
// in one group, also when the nodes are given explicitly (Ganeti only
// warns). Evacuation keeps each instance in its group (hail's target
// groups are not supported) and, for "all", prefers failover plus a new
// secondary to hail's full relocation, which it uses only when the
// secondary cannot take the instance over; see EvacuatePlan.
package alloc
