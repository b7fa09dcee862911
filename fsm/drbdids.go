package fsm

import (
	"fmt"
	"slices"
)

// The logical ids of drbd disks (Disk.DRBD, Ganeti's logical_id of a
// drbd disk and its AllocateDRBDMinor and AllocatePort). InstancePut
// gives every disk of a drbd instance that is no reservation (and no
// forthcoming disk) its id when the record is stored, in apply and from
// the state alone:
//   - the port: the lowest free one of the cluster's port pool (ports.go),
//     which network ports and drbd ports share;
//   - a minor on each of the instance's two nodes: the lowest that node
//     does not have (MaxDRBDMinor bounds them), records staged by the same
//     transaction included;
//   - the secret is never drawn in apply: the record carries it (the
//     step that writes the record draws it), and a new id without one is
//     refused.
//
// The id is the disk's: a record stored again keeps the port, the secret
// and the minor of every node the instance still has, whether the record
// carries them or not; a node that replaced another (a new secondary, an
// evacuation, recreate-disks on new nodes) gets a new minor; failover
// and migration, which swap the roles, change nothing. The end of a node
// that left is dropped, and the instance's removal (or the disk's) frees
// port and minors. A record may not change a secret, nor name a port or
// a minor it was not given.
//
// Only states of LogVersion 33 and later allocate: records of older logs
// replay as they were stored. A drbd record stored before (no id) gets
// its id at its next change by a step, whose executor then draws the
// secret; until then the node agents refuse its drbd operations, naming
// what is missing.

// drbdIDVersion is the LogVersion from which drbd disks hold logical ids.
const drbdIDVersion = 33

// MaxDRBDMinor is the highest drbd minor the cluster gives a node
// (Ganeti's DRBD8 _MAX_MINORS of 255: minors 0 to 254).
const MaxDRBDMinor = 254

// MaxDRBDSecret bounds a drbd secret's length in hexadecimal digits
// (DRBD's shared-secret takes at most 64 characters; Ganeti draws 20
// random bytes, 40 digits).
const MaxDRBDSecret = 64

// NeedsDRBDID reports whether a disk of an instance holds a drbd logical
// id: the instance is of template drbd and neither it nor the disk is
// forthcoming.
func NeedsDRBDID(in *Instance, d *Disk) bool {
	return in.DiskTemplate == DTDrbd && !in.Forthcoming && !d.Forthcoming
}

// DRBDEndOf returns the end of a drbd disk on a node, nil if it has none
// there.
func (id *DRBDLogicalID) DRBDEndOf(node string) *DRBDEnd {
	if id == nil {
		return nil
	}
	for k := range id.Ends {
		if id.Ends[k].Node == node {
			return &id.Ends[k]
		}
	}
	return nil
}

func (s *State) indexDRBD(u string, i *Instance) {
	for _, d := range i.Disks {
		if d.DRBD == nil {
			continue
		}
		if d.DRBD.Port != 0 {
			s.ports[d.DRBD.Port] = u
		}
		for _, e := range d.DRBD.Ends {
			m := s.minors[e.Node]
			if m == nil {
				m = map[int]string{}
				s.minors[e.Node] = m
			}
			m[e.Minor] = u
		}
	}
}

func (s *State) unindexDRBD(u string, i *Instance) {
	for _, d := range i.Disks {
		if d.DRBD == nil {
			continue
		}
		if d.DRBD.Port != 0 && s.ports[d.DRBD.Port] == u {
			delete(s.ports, d.DRBD.Port)
		}
		for _, e := range d.DRBD.Ends {
			if m := s.minors[e.Node]; m != nil && m[e.Minor] == u {
				delete(m, e.Minor)
				if len(m) == 0 {
					delete(s.minors, e.Node)
				}
			}
		}
	}
}

// validDRBDSecret reports whether s is a secret a record may carry: 1 to
// MaxDRBDSecret hexadecimal digits.
func validDRBDSecret(s string) bool {
	if s == "" || len(s) > MaxDRBDSecret {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// setDRBDIDs gives the drbd disks of in, about to be stored over old (nil:
// a new record), their logical ids (see above); it refuses a record that
// changes a secret, names a port or minor not given to the disk, or needs
// an id without a secret, and a pool or node without a free port or
// minor. in.NetworkPort is set already.
func (t *txn) setDRBDIDs(in, old *Instance) *Error {
	if t.st.LogVersion < drbdIDVersion {
		return nil
	}
	in.Disks = slices.Clone(in.Disks) // the command's own stays as it came
	stored := map[string]*DRBDLogicalID{}
	if old != nil {
		for _, d := range old.Disks {
			if d.DRBD != nil {
				stored[d.UUID] = d.DRBD
			}
		}
	}
	name := in.Name
	if name == "" {
		name = in.UUID
	}
	nodes := append([]string{in.PrimaryNode}, in.SecondaryNodes...)
	ids := make([]*DRBDLogicalID, len(in.Disks))
	// First what each disk keeps (and checks of what the record says),
	// so that a minor kept by a later disk is not given to an earlier one.
	for k := range in.Disks {
		d := &in.Disks[k]
		field := fmt.Sprintf("instance.disks.%d.drbd", k)
		was := stored[d.UUID]
		rec := d.DRBD
		if rec != nil {
			if e := checkDRBDRecord(name, k, field, rec, was); e != nil {
				return e
			}
		}
		if !NeedsDRBDID(in, d) {
			if rec != nil && was == nil {
				return errf(CodeInval, field, "instance %s disk %d holds no drbd logical id (template %s%s); its record may not give it one", name, k, in.DiskTemplate, forthcomingWord(in, d))
			}
			// No longer a disk with an id: what it held is freed when
			// the record is stored.
			d.DRBD = nil
			continue
		}
		id := &DRBDLogicalID{}
		switch {
		case was != nil:
			id.Port, id.Secret = was.Port, was.Secret
			for _, e := range was.Ends {
				if slices.Contains(nodes, e.Node) {
					id.Ends = append(id.Ends, DRBDEnd{Node: e.Node, Minor: e.Minor})
				}
			}
		case rec != nil && rec.Secret != "":
			id.Secret = rec.Secret
		default:
			return errf(CodeInval, field, "instance %s disk %d (%s) is a drbd disk and its record carries no secret for its new logical id; the step that writes the record draws it", name, k, d.UUID)
		}
		ids[k] = id
	}
	pick := t.recordPortPicker(in, old)
	minors := t.minorPicker(in.UUID, ids)
	for k, id := range ids {
		if id == nil {
			continue
		}
		field := fmt.Sprintf("instance.disks.%d.drbd", k)
		if id.Port == 0 {
			if id.Port = pick.take(); id.Port == 0 {
				return errf(CodeState, field, "instance %s disk %d needs a port for drbd and the cluster's pool (%d-%d) has none free: every port is held by an instance's network port or a drbd disk", name, k, FirstNetworkPort, LastNetworkPort)
			}
		}
		for _, n := range nodes {
			if id.DRBDEndOf(n) != nil {
				continue
			}
			m := minors.take(n)
			if m < 0 {
				return errf(CodeState, field, "instance %s disk %d needs a drbd minor on node %s and it has none free: every minor 0-%d is held by a drbd disk", name, k, t.nodeName(n), MaxDRBDMinor)
			}
			id.Ends = append(id.Ends, DRBDEnd{Node: n, Minor: m})
		}
		in.Disks[k].DRBD = id
	}
	return nil
}

// checkDRBDRecord refuses a disk's logical id in a record that differs
// from what the disk was given (was; nil: nothing): another secret, or a
// port or minor it does not hold. Ends' names and addresses are the
// agents' copy only and are not looked at.
func checkDRBDRecord(name string, k int, field string, rec, was *DRBDLogicalID) *Error {
	if rec.Secret != "" && !validDRBDSecret(rec.Secret) {
		return errf(CodeInval, field+".secret", "instance %s disk %d: a drbd secret is 1 to %d hexadecimal digits", name, k, MaxDRBDSecret)
	}
	if was == nil {
		if rec.Port != 0 {
			return errf(CodeInval, field+".port", "instance %s disk %d: port %d was not allocated to it; the cluster allocates drbd ports from its pool", name, k, rec.Port)
		}
		if len(rec.Ends) > 0 {
			return errf(CodeInval, field+".ends", "instance %s disk %d: minor %d on node %s was not allocated to it; the cluster allocates drbd minors", name, k, rec.Ends[0].Minor, rec.Ends[0].Node)
		}
		return nil
	}
	if rec.Secret != "" && rec.Secret != was.Secret {
		return errf(CodeInval, field+".secret", "instance %s disk %d holds a drbd secret; a record may not change it", name, k)
	}
	if rec.Port != 0 && rec.Port != was.Port {
		return errf(CodeInval, field+".port", "instance %s disk %d holds drbd port %d; the cluster allocates ports, a record may not change it to %d", name, k, was.Port, rec.Port)
	}
	for _, e := range rec.Ends {
		if w := was.DRBDEndOf(e.Node); w == nil || w.Minor != e.Minor {
			return errf(CodeInval, field+".ends", "instance %s disk %d: minor %d on node %s was not allocated to it; the cluster allocates drbd minors", name, k, e.Minor, e.Node)
		}
	}
	return nil
}

// minorPicker hands out the drbd minors free on a node in a transaction's
// view, lowest first: held neither by a record the transaction stages
// (but skip's), nor by a stored record it leaves alone, nor by the ids
// given.
type minorPicker struct {
	t    *txn
	skip string
	held map[string]map[int]bool // node -> minor, staged and given
	next map[string]int          // node -> every minor below is held
}

func (t *txn) minorPicker(skip string, ids []*DRBDLogicalID) *minorPicker {
	mp := &minorPicker{t: t, skip: skip, held: map[string]map[int]bool{}, next: map[string]int{}}
	hold := func(id *DRBDLogicalID) {
		if id == nil {
			return
		}
		for _, e := range id.Ends {
			if mp.held[e.Node] == nil {
				mp.held[e.Node] = map[int]bool{}
			}
			mp.held[e.Node][e.Minor] = true
		}
	}
	for u, i := range t.insts {
		if u == skip || i == nil {
			continue
		}
		for _, d := range i.Disks {
			hold(d.DRBD)
		}
	}
	for _, id := range ids {
		hold(id)
	}
	return mp
}

// take is the lowest free minor of node not handed out yet; -1 when none
// is left.
func (mp *minorPicker) take(node string) int {
	stored := mp.t.st.minors[node]
	for m := mp.next[node]; m <= MaxDRBDMinor; m++ {
		if mp.held[node][m] {
			continue
		}
		if u, ok := stored[m]; ok && u != mp.skip {
			if _, changed := mp.t.insts[u]; !changed {
				continue // held by a record this transaction leaves alone
			}
		}
		mp.next[node] = m + 1
		if mp.held[node] == nil {
			mp.held[node] = map[int]bool{}
		}
		mp.held[node][m] = true
		return m
	}
	mp.next[node] = MaxDRBDMinor + 1
	return -1
}

// nodeName is a node's name in the transaction's view, its UUID when it
// has none.
func (t *txn) nodeName(u string) string {
	if n := t.node(u); n != nil && n.Name != "" {
		return n.Name
	}
	return u
}

// forthcomingWord says why a disk of template drbd holds no id.
func forthcomingWord(in *Instance, d *Disk) string {
	switch {
	case in.Forthcoming:
		return ", a reservation"
	case d.Forthcoming:
		return ", a forthcoming disk"
	}
	return ""
}
