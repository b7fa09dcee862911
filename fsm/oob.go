package fsm

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// OOB commands (Ganeti's OOB_*); the oob package runs them.
var oobCommands = map[string]bool{
	"power-on": true, "power-off": true, "power-cycle": true, "power-status": true, "health": true,
}

// Bounds of the OOB opcodes' fields.
const (
	// OOBTimeout is Ganeti's oobTimeout, the bound on one helper run and
	// the opcode timeout's maximum.
	OOBTimeout = 60
	// OOBPowerDelay is Ganeti's oobPowerDelay: seconds between powering
	// on one node and the next.
	OOBPowerDelay = 2.0
)

// OpOobCommand runs an OOB command (power-on, power-off, power-cycle,
// power-status, health) on nodes through their OOB helper, as Ganeti's
// LUOobCommand: the leader's executor runs it (jobs), one recorded step
// per node. transfer_leadership is a gnt extension: power-off and
// power-cycle of the master's node first hand the master role (Raft
// leadership) to another master candidate.
type OpOobCommand struct {
	OpCommon
	NodeNames    []string `json:"node_names,omitempty"`
	NodeUUIDs    []string `json:"node_uuids,omitempty"`
	Command      string   `json:"command"`
	Timeout      int      `json:"timeout,omitempty"`
	IgnoreStatus bool     `json:"ignore_status,omitempty"`
	PowerDelay   *float64 `json:"power_delay,omitempty"`
	// TransferLeadership (gnt): operate on the master's node after handing
	// its role to another master candidate, instead of refusing.
	TransferLeadership bool `json:"transfer_leadership,omitempty"`
	// Confirm (gnt, power-off only) is fencing: after the helper's
	// power-off, power-status must say the node is off (it is asked a few
	// times) or the opcode fails, so that jobs depending on it do not
	// run; only then is powered=false recorded and, unless ignore_status,
	// the node marked offline. Such a node need not be offline before:
	// the leader fences nodes that are dead in gossip, and marks them
	// offline only once they are known to be off.
	Confirm bool `json:"gnt_confirm,omitempty"`
}

// Validate implements Opcode.
func (o *OpOobCommand) Validate() *Error {
	if !oobCommands[o.Command] {
		return errf(CodeInval, "command", "command %q is not one of power-on, power-off, power-cycle, power-status, health", o.Command)
	}
	if o.Timeout < 0 || o.Timeout > OOBTimeout {
		return errf(CodeInval, "timeout", "timeout must be between 1 and %d seconds (0: %d), got %d", OOBTimeout, OOBTimeout, o.Timeout)
	}
	if o.Confirm && o.Command != "power-off" {
		return errf(CodeInval, "gnt_confirm", "gnt_confirm goes with power-off only")
	}
	if d := o.PowerDelay; d != nil && (*d < 0 || *d > 3600 || math.IsNaN(*d)) {
		return errf(CodeInval, "power_delay", "power_delay must be between 0 and 3600 seconds")
	}
	if len(o.NodeNames) > 0 && len(o.NodeUUIDs) > 0 {
		return errf(CodeInval, "node_uuids", "give node_names or node_uuids, not both")
	}
	if n := len(o.Nodes()); n > MaxNodesPerOp {
		return errf(CodeInval, "node_names", "an opcode names at most %d nodes, got %d", MaxNodesPerOp, n)
	}
	seen := map[string]bool{}
	for _, n := range o.Nodes() {
		if n == "" {
			return errf(CodeInval, "node_names", "node_names has an empty node name")
		}
		if e := ValidateName("node_names", n, MaxHostnameLen); e != nil {
			return e
		}
		if seen[n] {
			return errf(CodeInval, "node_names", "node %s is named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// Nodes returns the node references the opcode names (names or UUIDs).
func (o *OpOobCommand) Nodes() []string {
	if len(o.NodeNames) > 0 {
		return o.NodeNames
	}
	return o.NodeUUIDs
}

// TimeoutSeconds is the helper's time bound for this opcode.
func (o *OpOobCommand) TimeoutSeconds() int {
	if o.Timeout == 0 {
		return OOBTimeout
	}
	return o.Timeout
}

// Delay is the power_delay, or Ganeti's default.
func (o *OpOobCommand) Delay() float64 {
	if o.PowerDelay == nil {
		return OOBPowerDelay
	}
	return *o.PowerDelay
}

// Summary implements Opcode: Ganeti's OOB_COMMAND(node,...) form.
func (o *OpOobCommand) Summary() string {
	if n := o.Nodes(); len(n) > 0 {
		return "OOB_COMMAND(" + strings.Join(n, ",") + ")"
	}
	return "OOB_COMMAND"
}

// Locks implements Opcode: as LUOobCommand, the nodes exclusively (every
// node when none is named), and the BGL shared, so that no node is added
// or removed while the opcode runs.
func (o *OpOobCommand) Locks(s *State) []LockDecl {
	refs := o.Nodes()
	if len(refs) == 0 {
		return []LockDecl{bgl(false), {Level: LockNode, Exclusive: true}}
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = nodeLockName(s, r)
	}
	sort.Strings(names)
	return []LockDecl{bgl(false), {Level: LockNode, Names: names, Exclusive: true}}
}

// OpClusterEpo is an emergency power-off of nodes, or with on their
// power-on (gnt extension: Ganeti's `gnt-cluster epo` is a client-side
// sequence of jobs; here the leader's executor runs the plan that
// oob.PlanEPO computes, so that it survives a leader change). names are
// node names, or with groups node group names; all takes every node.
type OpClusterEpo struct {
	OpCommon
	On         bool     `json:"on,omitempty"`
	All        bool     `json:"all,omitempty"`
	Groups     bool     `json:"groups,omitempty"`
	Names      []string `json:"names,omitempty"`
	Timeout    int      `json:"timeout,omitempty"`
	PowerDelay *float64 `json:"power_delay,omitempty"`
	// WaitTimeout (on) bounds the wait for each node's gntd to answer
	// again, in seconds; 0 means Ganeti's 15 minutes.
	WaitTimeout int `json:"wait_timeout,omitempty"`
}

// EPOWaitTimeout is Ganeti's _EPO_REACHABLE_TIMEOUT, in seconds.
const EPOWaitTimeout = 15 * 60

// Validate implements Opcode.
func (o *OpClusterEpo) Validate() *Error {
	if o.All && o.Groups {
		return errf(CodeInval, "groups", "only one of groups or all is allowed")
	}
	if o.All && len(o.Names) > 0 {
		return errf(CodeInval, "names", "names in combination with all are not allowed")
	}
	if !o.All && len(o.Names) == 0 {
		return errf(CodeInval, "names", "name the nodes (or with groups the node groups) to act on, or set all")
	}
	if len(o.Names) > MaxNodesPerOp {
		return errf(CodeInval, "names", "an opcode names at most %d nodes or groups, got %d", MaxNodesPerOp, len(o.Names))
	}
	for _, n := range o.Names {
		if n == "" {
			return errf(CodeInval, "names", "names has an empty name")
		}
		if e := ValidateName("names", n, MaxHostnameLen); e != nil {
			return e
		}
	}
	if o.Timeout < 0 || o.Timeout > OOBTimeout {
		return errf(CodeInval, "timeout", "timeout must be between 1 and %d seconds (0: %d), got %d", OOBTimeout, OOBTimeout, o.Timeout)
	}
	if d := o.PowerDelay; d != nil && (*d < 0 || *d > 3600 || math.IsNaN(*d)) {
		return errf(CodeInval, "power_delay", "power_delay must be between 0 and 3600 seconds")
	}
	if o.WaitTimeout < 0 || o.WaitTimeout > MaxTimeoutSeconds {
		return errf(CodeInval, "wait_timeout", "wait_timeout must be between 0 and %d seconds, got %d", MaxTimeoutSeconds, o.WaitTimeout)
	}
	return nil
}

// Summary implements Opcode.
func (o *OpClusterEpo) Summary() string {
	if o.On {
		return "CLUSTER_EPO(on)"
	}
	return "CLUSTER_EPO(off)"
}

// Locks implements Opcode: the BGL shared only. An emergency power-off
// must not wait for node locks held by other jobs, and (like Ganeti's
// client-side EPO) it must not hold them while the instance shutdowns it
// waits for take them.
func (o *OpClusterEpo) Locks(*State) []LockDecl { return []LockDecl{bgl(false)} }

// OOBProgram returns a node's effective OOB helper, or "" when it has
// none: oob_program inherited cluster, then group, then node, the value
// "!" opting out (doc/design-oob.rst). oob.Program is the same rule for
// the packages that run the helper; a test in jobs keeps the two equal.
func (s *State) OOBProgram(n *Node) string {
	p, _ := s.NDParams(n)["oob_program"].(string)
	if p == "!" {
		return ""
	}
	return p
}

// NodePowered records a node's power state (its powered flag, a state of
// record) after an OOB power-on or power-off. Only nodes with an OOB
// helper have one.
type NodePowered struct {
	Node    string `json:"node"` // UUID
	Powered bool   `json:"powered"`
}

func (c *NodePowered) apply(t *txn) *Error {
	n := t.node(c.Node)
	if n == nil {
		return errf(CodeNoEnt, "node", "node %s does not exist", c.Node)
	}
	if !t.supportsOOB(n) {
		return errf(CodeState, "node", "unable to change powered state for node %s as it does not support out-of-band handling", n.Name)
	}
	t.nodeRW(c.Node).Powered = c.Powered
	return nil
}

// NodeOffline sets a node's offline flag from a step, with the rules of
// OP_NODE_SET_PARAMS (auto_promote on: another node takes a candidate's
// place). An OOB power-off of the master's node uses it after the master
// role moved, since the master itself cannot be marked offline.
type NodeOffline struct {
	Node    string `json:"node"` // UUID
	Offline bool   `json:"offline"`
}

func (c *NodeOffline) apply(t *txn) *Error {
	n := t.node(c.Node)
	if n == nil {
		return errf(CodeNoEnt, "node", "node %s does not exist", c.Node)
	}
	off := c.Offline
	op := &OpNodeSetParams{NodeUUID: c.Node, Offline: &off, AutoPromote: true}
	if _, e := op.apply(t, ""); e != nil {
		return &Error{Code: e.Code, Field: "offline", Msg: fmt.Sprintf("node %s: %s", n.Name, e.Msg)}
	}
	return nil
}
