package fsm

// Node liveness: what gossip says about each node's gntd, recorded by the
// leader's liveness reconciler. It is the state of the world, kept apart
// from the operator's offline and drained flags (the state of record): a
// dead node is not offline until someone says so, and an offline node's
// gntd may well be alive.
//
// Liveness changes no serial number (neither the node's nor the
// cluster's): confd answers carry serial_no as the configuration's
// version, and a node missing a few gossip rounds is not a configuration
// change that clients should re-read everything for. A change still takes
// a Raft index, which is what blocking queries on /2/nodes wait for.

// Liveness states of a node's gntd. The empty string means never observed
// (a node added since the last reconcile, or a state restored from a
// snapshot older than liveness).
const (
	LivenessAlive   = "alive"
	LivenessSuspect = "suspect"
	LivenessDead    = "dead"
)

// ValidLiveness reports whether s is a liveness state a change may set.
func ValidLiveness(s string) bool {
	switch s {
	case LivenessAlive, LivenessSuspect, LivenessDead:
		return true
	}
	return false
}

// NodeLiveness records liveness changes observed by the leader. It is
// fenced by the executor epoch like every write of a leader service, and
// applies whole or not at all.
type NodeLiveness struct {
	Now     int64            `json:"now"`
	Epoch   uint64           `json:"epoch"`
	Changes []LivenessChange `json:"changes"`
}

// LivenessChange is one node's new liveness.
type LivenessChange struct {
	Node  string `json:"node"`  // name or UUID
	State string `json:"state"` // alive, suspect or dead
	// Since is when the state changed as gossip saw it (Unix ns, the
	// observer's clock).
	Since int64 `json:"since"`
}

// CommandType implements Command.
func (NodeLiveness) CommandType() CommandType { return CmdNodeLiveness }

// CheckLiveness validates a NodeLiveness against the state without
// applying it; Apply runs the same checks.
func (s *State) CheckLiveness(c *NodeLiveness) *Error {
	if e := s.checkLeaderWrite("liveness", c.Epoch); e != nil {
		return e
	}
	if len(c.Changes) == 0 {
		return errf(CodeInval, "changes", "no liveness changes")
	}
	seen := make(map[string]int, len(c.Changes))
	for i, ch := range c.Changes {
		if !ValidLiveness(ch.State) {
			return errf(CodeInval, "state", "change %d: liveness %q is not alive, suspect or dead", i, ch.State)
		}
		if ch.Since <= 0 {
			return errf(CodeInval, "since", "change %d: since must be a positive time in nanoseconds, got %d", i, ch.Since)
		}
		n := s.LookupNode(ch.Node)
		if n == nil {
			return errf(CodeNoEnt, "node", "change %d: node %q is not in the configuration; gossip members that are not nodes are reported, never added", i, ch.Node)
		}
		if j, dup := seen[n.UUID]; dup {
			return errf(CodeInval, "node", "changes %d and %d both name node %s", j, i, n.Name)
		}
		seen[n.UUID] = i
	}
	return nil
}

// checkLeaderWrite checks the epoch of a leader service's write (what is
// named in messages): the cluster exists and the epoch is the current one.
func (s *State) checkLeaderWrite(what string, epoch uint64) *Error {
	if s.Cluster == nil {
		return errf(CodeState, "", "cluster is not initialised")
	}
	if epoch == 0 {
		return errf(CodeInval, "epoch", "%s is recorded by an established leader and needs its executor epoch", what)
	}
	if epoch != s.Epoch {
		return errf(CodeFenced, "epoch", "%s from executor epoch %d refused: the current epoch is %d", what, epoch, s.Epoch)
	}
	return nil
}

func (s *State) applyNodeLiveness(c *NodeLiveness) Response {
	if e := s.CheckLiveness(c); e != nil {
		return Response{Err: e}
	}
	for _, ch := range c.Changes {
		n := s.LookupNode(ch.Node)
		if n.Liveness == ch.State {
			continue // keeps the time it last changed
		}
		// Stored objects are never changed in place (Frozen relies on it).
		w := n.clone()
		w.Liveness, w.LivenessSince = ch.State, ch.Since
		s.Nodes[w.UUID] = w
	}
	return Response{}
}
