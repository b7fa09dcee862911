package fsm

import (
	"sort"
	"strings"
)

// Lock levels, Ganeti's names, in acquisition order.
const (
	LockCluster   = "cluster"
	LockInstance  = "instance"
	LockNodeGroup = "nodegroup"
	LockNode      = "node"
	LockNodeRes   = "node-res"
	LockNetwork   = "network"
)

// LockBGL is the single lock of the cluster level, Ganeti's Big Ganeti Lock.
const LockBGL = "BGL"

// LockDecl is what an opcode needs at one lock level: named members, or
// the whole level when Names is empty, shared or exclusive. Every opcode
// declares its locks (Opcode.Locks); the leader's lock manager grants
// them, and the FSM records them on the running opcode.
type LockDecl struct {
	Level     string   `json:"level"`
	Names     []string `json:"names,omitempty"`
	Exclusive bool     `json:"exclusive,omitempty"`
}

// LocksCover tells whether the locks held cover those wanted: each
// wanted lock is held at its level in a mode at least as strong, by name
// or with its whole level (no names: Ganeti's ALL_SET).
func LocksCover(held, want []LockDecl) bool {
	for _, w := range want {
		names := map[string]bool{}
		whole := false
		for _, h := range held {
			if h.Level != w.Level || (w.Exclusive && !h.Exclusive) {
				continue
			}
			if len(h.Names) == 0 {
				whole = true
			}
			for _, n := range h.Names {
				names[n] = true
			}
		}
		if whole {
			continue
		}
		if len(w.Names) == 0 {
			return false
		}
		for _, n := range w.Names {
			if !names[n] {
				return false
			}
		}
	}
	return true
}

func bgl(exclusive bool) LockDecl {
	return LockDecl{Level: LockCluster, Names: []string{LockBGL}, Exclusive: exclusive}
}

// nodeLockName names a node's lock: its name when the node exists (so a
// lock taken by name and one taken by UUID are the same lock), else the
// reference as given.
func nodeLockName(s *State, ref string) string {
	if n := s.LookupNode(ref); n != nil {
		return n.Name
	}
	return ref
}

func groupLockName(s *State, ref string) string {
	if g := s.LookupGroup(ref); g != nil {
		return g.Name
	}
	return ref
}

// Locks implements Opcode: cluster parameters change under the BGL held
// exclusively, as Ganeti's LUClusterSetParams.
func (o *OpClusterSetParams) Locks(*State) []LockDecl { return []LockDecl{bgl(true)} }

// Locks implements Opcode.
func (o *OpGroupAdd) Locks(*State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNodeGroup, Names: []string{o.GroupName}, Exclusive: true}}
}

// Locks implements Opcode.
func (o *OpGroupSetParams) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNodeGroup, Names: []string{groupLockName(s, o.GroupName)}, Exclusive: true}}
}

// Locks implements Opcode: the group exclusively and every node shared,
// since the group must be empty.
func (o *OpGroupRemove) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNodeGroup, Names: []string{groupLockName(s, o.GroupName)}, Exclusive: true},
		{Level: LockNode}}
}

// Locks implements Opcode: adding a node may promote it into the
// candidate pool, which reads every node, so the BGL is taken
// exclusively as Ganeti's LUNodeAdd does.
func (o *OpNodeAdd) Locks(*State) []LockDecl { return []LockDecl{bgl(true)} }

// Locks implements Opcode: the node exclusively; a change of role flags
// can promote or demote other nodes (the candidate pool), so it takes the
// whole node level.
//
// As Ganeti's LUNodeSetParams: the node, exclusively; every node only
// when the change may demote the node from the candidate pool and
// auto_promote lets it promote another in its place (any node may be
// the one promoted). A flag change without auto_promote touches this
// node only: whether the pool stays large enough is decided when the
// change is applied, in log order, so two such changes of different
// nodes need not wait for each other. (A node leaving drained or
// offline may promote itself; that is this node too.)
func (o *OpNodeSetParams) Locks(s *State) []LockDecl {
	if o.AutoPromote && o.mightDemote() {
		return []LockDecl{bgl(false), {Level: LockNode, Exclusive: true}}
	}
	return []LockDecl{bgl(false), {Level: LockNode, Names: []string{nodeLockName(s, o.nodeRef())}, Exclusive: true}}
}

// mightDemote is Ganeti's might_demote: the change may take the node out
// of the candidate pool.
func (o *OpNodeSetParams) mightDemote() bool {
	f := func(p *bool, v bool) bool { return p != nil && *p == v }
	return f(o.MasterCandidate, false) || f(o.Offline, true) || f(o.Drained, true) || f(o.MasterCapable, false)
}

// Locks implements Opcode.
func (o *OpNodeRemove) Locks(*State) []LockDecl { return []LockDecl{bgl(true)} }

func tagLocks(s *State, kind, name string) []LockDecl {
	switch kind {
	case TagNodeGroup:
		return []LockDecl{bgl(false), {Level: LockNodeGroup, Names: []string{groupLockName(s, name)}, Exclusive: true}}
	case TagNode:
		return []LockDecl{bgl(false), {Level: LockNode, Names: []string{nodeLockName(s, name)}, Exclusive: true}}
	case TagInstance:
		if i := s.LookupInstance(name); i != nil {
			name = i.Name
		}
		return []LockDecl{bgl(false), {Level: LockInstance, Names: []string{name}, Exclusive: true}}
	case TagNetwork:
		return []LockDecl{bgl(false), {Level: LockNetwork, Names: []string{networkLockName(s, name)}, Exclusive: true}}
	}
	return []LockDecl{bgl(false)}
}

// Locks implements Opcode.
func (o *OpTagsSet) Locks(s *State) []LockDecl { return tagLocks(s, o.Kind, o.Name) }

// Locks implements Opcode.
func (o *OpTagsDel) Locks(s *State) []LockDecl { return tagLocks(s, o.Kind, o.Name) }

// Locks implements Opcode: as Ganeti's LUTestDelay, no locks unless
// no_locks is false; then the BGL shared and the on_nodes exclusively.
func (o *OpTestDelay) Locks(s *State) []LockDecl {
	if o.NoLocks == nil || *o.NoLocks {
		return nil
	}
	out := []LockDecl{bgl(false)}
	if len(o.OnNodes) > 0 {
		names := make([]string, len(o.OnNodes))
		for i, n := range o.OnNodes {
			names[i] = nodeLockName(s, n)
		}
		sort.Strings(names)
		out = append(out, LockDecl{Level: LockNode, Names: names, Exclusive: true})
	}
	return out
}

// LocksConflict reports whether two lock sets cannot be held at once by
// different owners: at one level, a whole-level or overlapping member
// lock where either side is exclusive.
func LocksConflict(a, b []LockDecl) bool {
	for _, x := range a {
		for _, y := range b {
			if x.Level != y.Level || (!x.Exclusive && !y.Exclusive) {
				continue
			}
			if len(x.Names) == 0 || len(y.Names) == 0 {
				return true
			}
			for _, n := range x.Names {
				for _, m := range y.Names {
					if n == m {
						return true
					}
				}
			}
		}
	}
	return false
}

// heldLocksConflict reports whether any running opcode of an executor
// job holds locks that conflict with want.
func (s *State) heldLocksConflict(want []LockDecl) bool {
	for id := range s.holding {
		j := s.Jobs[id]
		if j == nil {
			continue
		}
		for _, op := range j.Ops {
			if op.Status == StatusRunning && LocksConflict(op.Locks, want) {
				return true
			}
		}
	}
	return false
}

// InstanceLockHolder returns the job whose running opcode holds the lock
// of the instance with this name or UUID (its own lock or the whole
// instance level, shared or exclusive), leaving out job except; 0 when
// none does. When several do, the lowest job id is returned. A state
// built without its indexes is scanned whole.
func (s *State) InstanceLockHolder(name, uuid string, except int64) int64 {
	var names []string
	for _, n := range []string{name, uuid} {
		if n != "" {
			names = append(names, n)
		}
	}
	want := []LockDecl{{Level: LockInstance, Names: names, Exclusive: true}}
	var holder int64
	check := func(j *Job) {
		if j == nil || j.ID == except || Finalized(j.Status) || holder != 0 && j.ID >= holder {
			return
		}
		for _, op := range j.Ops {
			if op.Status == StatusRunning && LocksConflict(op.Locks, want) {
				holder = j.ID
				return
			}
		}
	}
	if s.holding == nil {
		for _, j := range s.Jobs {
			check(j)
		}
		return holder
	}
	for id := range s.holding {
		check(s.Jobs[id])
	}
	return holder
}

// DescribeLocks writes lock declarations the way Ganeti names locks, e.g.
// "cluster/BGL(shared) node/n1(exclusive)"; a whole level is
// "<level>/[lockset]".
func DescribeLocks(decl []LockDecl) string {
	var parts []string
	for _, d := range decl {
		mode := "shared"
		if d.Exclusive {
			mode = "exclusive"
		}
		names := d.Names
		if len(names) == 0 {
			names = []string{"[lockset]"}
		}
		for _, n := range names {
			parts = append(parts, d.Level+"/"+n+"("+mode+")")
		}
	}
	return strings.Join(parts, " ")
}
