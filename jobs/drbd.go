package jobs

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/gnt-cluster/gnt/fsm"
)

// The executor's side of drbd disks' logical ids (fsm/drbdids.go): the
// state allocates port and minors when a record is stored, but draws no
// secret (apply has no randomness); the executor draws it for the records
// its steps propose, and fills each end's node name and address in the
// copy of the instance the agents receive.

// drbdSecretBytes is the size of a drbd disk's secret before its hex
// encoding (Ganeti's GenerateSecret: 20 random bytes, 40 hex digits).
const drbdSecretBytes = 20

// newDRBDSecret draws a drbd disk's shared secret.
func newDRBDSecret() string {
	b := make([]byte, drbdSecretBytes)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// withDRBDSecrets returns the record a step proposes with a secret for
// every drbd disk that needs a logical id and has none, neither in the
// record nor in the stored record (stored: nil when there is none). A
// disk whose stored record has an id keeps it (the state keeps it
// whatever the record carries), so a step that runs again, or a record
// built anew from the configuration, never proposes another secret for a
// disk. The secret is drawn once: the step's record stores it with the
// change, and every later step reads it from the state. in is not
// changed.
func withDRBDSecrets(in fsm.Instance, stored *fsm.Instance) fsm.Instance {
	had := map[string]bool{}
	if stored != nil {
		for _, d := range stored.Disks {
			if d.DRBD != nil && d.DRBD.Secret != "" {
				had[d.UUID] = true
			}
		}
	}
	copied := false
	for k := range in.Disks {
		d := &in.Disks[k]
		if !fsm.NeedsDRBDID(&in, d) || had[d.UUID] || d.DRBD != nil && d.DRBD.Secret != "" {
			continue
		}
		if !copied {
			in.Disks = append([]fsm.Disk(nil), in.Disks...)
			d, copied = &in.Disks[k], true
		}
		id := fsm.DRBDLogicalID{}
		if d.DRBD != nil {
			id = *d.DRBD
		}
		id.Secret = newDRBDSecret()
		d.DRBD = &id
	}
	return in
}

// fillDRBDEnds gives each end of x's drbd disks its node's name and
// address, the secondary IP (the replication network) or the primary IP
// when the node has none; x's disks are copied first, so the state's
// record is left alone.
func fillDRBDEnds(s *fsm.State, x *fsm.Instance) {
	x.Disks = append([]fsm.Disk(nil), x.Disks...)
	for k := range x.Disks {
		d := &x.Disks[k]
		if d.DRBD == nil {
			continue
		}
		id := *d.DRBD
		id.Ends = append([]fsm.DRBDEnd(nil), id.Ends...)
		for j := range id.Ends {
			e := &id.Ends[j]
			if n := s.Nodes[e.Node]; n != nil {
				e.Name, e.IP = n.Name, n.SecondaryIP
				if e.IP == "" {
					e.IP = n.PrimaryIP
				}
			}
		}
		d.DRBD = &id
	}
}
