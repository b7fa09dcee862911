package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

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

// The resync wait (Ganeti's WaitForSync): the primary's agent is asked
// for the instance's status every drbdSyncPoll, and the job's log gets
// each disk's progress at every poll (after drbdSyncLines lines, only
// when a disk's state or whole percent changed, so that a long resync
// does not fill the job's record), until every drbd disk is connected
// with both sides up to date. A disk whose state stays the same for
// drbdSyncStalled polls in a row (no progress: disconnected, or a resync
// that does not move) fails the wait, naming the disk and its state. A
// disk the primary reports no drbd device for is not a real drbd device
// (the fake driver simulates drbd): there is nothing to wait for.
const (
	drbdSyncPoll    = 2 * time.Second
	drbdSyncStalled = 60
	drbdSyncLines   = 30
)

// waitForSync waits for the resync of in's drbd disks (see above); what
// names the operation in the log.
func (e *Executor) waitForSync(ctx context.Context, sc *StepContext, in *fsm.Instance, what string) error {
	if in.DiskTemplate != fsm.DTDrbd || len(in.Disks) == 0 || sc.dryRun {
		if sc.dryRun && in.DiskTemplate == fsm.DTDrbd {
			sc.wouldf("wait for the resync of %s's disks", in.Name)
		}
		return nil
	}
	var primary *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { primary = s.Nodes[in.PrimaryNode] })
	if err := e.usable(primary, "waiting for the resync of "+in.Name); err != nil {
		return err
	}
	last := map[string]string{}
	stalled := map[string]int{}
	lines, lastCoarse := 0, ""
	for polls := 0; ; polls++ {
		r, err := e.statusOf(ctx, sc, primary, in)
		if err != nil {
			return fmt.Errorf("waiting for the resync of %s: %w", in.Name, err)
		}
		var pending, coarse []string
		for k, d := range in.Disks {
			dev, ok := r.DRBD[d.UUID]
			if !ok || dev.InSync() {
				continue
			}
			state := drbdStateWords(dev)
			pending = append(pending, fmt.Sprintf("disk/%d %s", k, state))
			c := fmt.Sprintf("%d %s %s/%s", k, dev.Connection, dev.Disk, dev.PeerDisk)
			if dev.SyncPercent != nil {
				c += fmt.Sprintf(" %d", int(*dev.SyncPercent))
			}
			coarse = append(coarse, c)
			if last[d.UUID] == state {
				stalled[d.UUID]++
			} else {
				last[d.UUID], stalled[d.UUID] = state, 0
			}
			if stalled[d.UUID] >= drbdSyncStalled {
				return fmt.Errorf("%s: disk/%d of %s on %s has not changed for %d polls %s apart: %s", what, k, in.Name, primary.Name, drbdSyncStalled, drbdSyncPoll, state)
			}
		}
		if len(pending) == 0 {
			if polls > 0 {
				sc.Logf("%s: the disks of %s are in sync", what, in.Name)
			}
			return nil
		}
		if c := strings.Join(coarse, ";"); lines < drbdSyncLines || c != lastCoarse {
			sc.Logf("%s: waiting for the resync of %s: %s", what, in.Name, strings.Join(pending, "; "))
			lines, lastCoarse = lines+1, c
		}
		if err := sc.Sleep(ctx, drbdSyncPoll); err != nil {
			return err
		}
	}
}

// drbdStateWords describes a drbd device for the job's log: its
// connection and disk states and a resync's progress.
func drbdStateWords(dev fsm.DRBDDevice) string {
	s := fmt.Sprintf("%s %s/%s", dev.Connection, dev.Disk, dev.PeerDisk)
	if dev.SyncPercent != nil {
		s += fmt.Sprintf(", %.1f%% synced", *dev.SyncPercent)
		if dev.EstimatedSeconds != nil {
			s += fmt.Sprintf(", about %ds left", *dev.EstimatedSeconds)
		}
	}
	return s
}

// drbdActivation is what reconnectDRBD found on the primary before its
// attach: whether the instance runs there, and the disks whose device
// was not primary yet, which the attach makes primary.
type drbdActivation struct {
	running   bool
	activated []string
}

// settleDRBD leaves the drbd disks of an instance that does not run on
// its primary (stopped, or marked up but not running) as they were
// before reconnectDRBD: the devices its attach made primary are made
// secondary again (the agents' detach), as Ganeti's replace-disks shuts
// down only the disks it activated itself for a stopped instance; a
// device that was primary before (disks an operator activated) stays.
func (e *Executor) settleDRBD(ctx context.Context, sc *StepContext, in *fsm.Instance, act drbdActivation) error {
	if in.DiskTemplate != fsm.DTDrbd || act.running || len(act.activated) == 0 {
		return nil
	}
	var primary *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { primary = s.Nodes[in.PrimaryNode] })
	if err := e.usable(primary, "deactivating the disks of "+in.Name); err != nil {
		return err
	}
	for _, d := range act.activated {
		if _, err := e.call(ctx, sc, primary, NodeCall{Op: NodeOpDiskDetach, Instance: in, Disk: d}); err != nil {
			return err
		}
	}
	return nil
}

// reconnectDRBD asks the primary's agent to attach each drbd disk of in
// after its secondary changed: the primary's devices are still connected
// to the old secondary's address (or to none), and every drbd operation
// of the agent reconciles the device's network with the ends the record
// names, so this connects them to the new secondary, whose devices wait
// for their peer since they were created. It first asks the primary
// what runs and which devices are primary, for settleDRBD. Plain records
// need nothing.
func (e *Executor) reconnectDRBD(ctx context.Context, sc *StepContext, in *fsm.Instance) (drbdActivation, error) {
	var act drbdActivation
	if in.DiskTemplate != fsm.DTDrbd {
		return act, nil
	}
	var primary *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) { primary = s.Nodes[in.PrimaryNode] })
	if err := e.usable(primary, "connecting "+in.Name+"'s disks to its new secondary"); err != nil {
		return act, err
	}
	r, err := e.statusOf(ctx, sc, primary, in)
	if err != nil {
		return act, err
	}
	act.running = r.State == "running"
	for _, d := range in.Disks {
		if dev, ok := r.DRBD[d.UUID]; !ok || dev.Role != "Primary" {
			act.activated = append(act.activated, d.UUID)
		}
		if _, err := e.call(ctx, sc, primary, NodeCall{Op: NodeOpDiskAttach, Instance: in, Disk: d.UUID}); err != nil {
			return act, err
		}
	}
	return act, nil
}

// assembleSecondaries sets up the drbd devices of in on its secondaries
// before it starts on its primary, as Ganeti's start assembles the disks
// on every node: the agent's attach on a node that is not the instance's
// primary only sets the device up and connects it, so a secondary that
// rebooted since resyncs from the primary instead of leaving the
// instance degraded. A secondary that is down or fails is a warning: the
// instance starts degraded, as it would without this.
func (e *Executor) assembleSecondaries(ctx context.Context, sc *StepContext, in *fsm.Instance) {
	if in.DiskTemplate != fsm.DTDrbd {
		return
	}
	for _, u := range in.SecondaryNodes {
		var node *fsm.Node
		e.FSM.Read(func(s *fsm.State, _ uint64) { node = s.Nodes[u] })
		if err := e.usable(node, "setting up the disks of "+in.Name); err != nil {
			sc.Logf("WARNING: %v: %s starts with its disks degraded", err, in.Name)
			continue
		}
		for k, d := range in.Disks {
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskAttach, Instance: in, Disk: d.UUID}); err != nil {
				sc.Logf("WARNING: disk/%d of %s is not set up on its secondary %s (%v): it starts degraded", k, in.Name, node.Name, err)
			}
		}
	}
}

// checkTargetDisks refuses to make target the primary of in when one of
// its drbd disks is degraded there (Ganeti's CheckDiskConsistency and
// is_degraded before a failover or migration): not connected to its
// peer, or either side not up to date. A disconnected device may say
// UpToDate however much its peer wrote since (DRBD's default fencing),
// and that copy would become the only one the guest reads. With ignore
// (failover's ignore_consistency, or a primary marked offline) it is a
// warning. A reply that carries a drbd device for no disk at all comes
// from a driver without real DRBD (the fake driver simulates it): there
// is nothing to check; one that carries devices for some disks and not
// for another means that disk's device is not set up there: degraded.
func (e *Executor) checkTargetDisks(ctx context.Context, sc *StepContext, in *fsm.Instance, target *fsm.Node, what string, ignore bool) error {
	if in.DiskTemplate != fsm.DTDrbd || sc.dryRun {
		return nil
	}
	r, err := e.statusOf(ctx, sc, target, in)
	if err != nil {
		return fmt.Errorf("checking the disks of %s on %s before the %s: %w", in.Name, target.Name, what, err)
	}
	if len(r.DRBD) == 0 {
		return nil
	}
	for k, d := range in.Disks {
		var msg string
		switch dev, ok := r.DRBD[d.UUID]; {
		case !ok:
			msg = fmt.Sprintf("disk/%d of %s has no drbd device set up on %s", k, in.Name, target.Name)
		case !dev.InSync():
			msg = fmt.Sprintf("disk/%d of %s is degraded on %s (%s)", k, in.Name, target.Name, drbdStateWords(dev))
		default:
			continue
		}
		if ignore {
			sc.Logf("WARNING: %s; the %s goes on as asked", msg, what)
			continue
		}
		return &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("%s: aborting the %s (activate the disks and wait for the resync)", msg, what)}
	}
	return nil
}

// readyForMigration brings up the drbd devices of in on target, its
// secondary (the agent's attach on a node that is not the instance's
// primary only sets the device up and connects it: after a reboot of the
// secondary it is not), waits for the resync, then checks that the
// target's disks are in sync (checkTargetDisks): a live migration makes
// both sides primary, and only a connected, up-to-date pair can be.
func (e *Executor) readyForMigration(ctx context.Context, sc *StepContext, in *fsm.Instance, target *fsm.Node) error {
	if in.DiskTemplate != fsm.DTDrbd {
		return nil
	}
	for _, d := range in.Disks {
		if _, err := e.call(ctx, sc, target, NodeCall{Op: NodeOpDiskAttach, Instance: in, Disk: d.UUID}); err != nil {
			return fmt.Errorf("setting up the disks of %s on %s before the migration: %w", in.Name, target.Name, err)
		}
	}
	if err := e.waitForSync(ctx, sc, in, "migration"); err != nil {
		return err
	}
	return e.checkTargetDisks(ctx, sc, in, target, "migration", false)
}
