package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Live migration of the kvm driver, QEMU's own: the target's qemu is
// started with -incoming tcp:<node address>:<port> (MigratePrepare), the
// source's qemu is told to migrate there through QMP and polled until
// QEMU reports it completed (MigrateSend); the target's guest runs as
// soon as its memory arrived (QEMU's default, the least downtime), and
// the source's agent then hands the boot id over to the target's
// (MigrateReceive, through the node RPC) and ends its paused copy.
// MigrateFinish records the target running. The port is derived from the
// migration id (migrationPort), so neither side has to ask the other.

// KVMSend carries a migration's handoff to the target's agent (gntd:
// through the node RPC).
type KVMSend func(ctx context.Context, m Migration, h Handoff) error

// SetSend sets how handoffs reach targets; without it MigrateSend is not
// supported.
func (k *KVM) SetSend(send KVMSend) { k.send = send }

func (k *KVM) migration(m Migration, role, phase string) *MigrationState {
	return &MigrationState{ID: m.ID, Role: role, Phase: phase, PeerNode: m.PeerNode, Peer: m.Peer, Changed: time.Now().UTC()}
}

func isKVMMigration(r *kvmRecord, id, role string) bool {
	return r != nil && r.Migration != nil && r.Migration.ID == id && r.Migration.Role == role
}

// qemuRunState is QMP's query-status of the instance's qemu ("" when
// it cannot be asked).
func (k *KVM) qemuRunState(ctx context.Context, uuid string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var st struct {
		Status string `json:"status"`
	}
	if err := qmpDo(ctx, k.qmpPath(uuid), func(q *qmpConn) error { return q.call(ctx, "query-status", nil, &st) }); err != nil {
		return ""
	}
	return st.Status
}

// incomingArrived tells whether the incoming qemu received its guest
// (it runs, or is paused, rather than waiting in "inmigrate").
func (k *KVM) incomingArrived(ctx context.Context, uuid string) bool {
	s := k.qemuRunState(ctx, uuid)
	return s == "running" || s == "paused"
}

// MigratePrepare implements Driver.
func (k *KVM) MigratePrepare(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	if inst.DiskTemplate == fsm.DTPlain {
		return Result{}, fmt.Errorf("%w: instance %s: %v", ErrNotSupported, inst.Name, errNoPlainMove)
	}
	if k.cfg.Addr == "" {
		return Result{}, fmt.Errorf("%w: node %s has no address for incoming migrations", ErrNotSupported, k.cfg.Node)
	}
	return k.mutate(ctx, OpMigratePrepare, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		pid := k.pid(inst.UUID)
		if isKVMMigration(r, m.ID, RoleTarget) && pid != 0 && (r.State == StateIncoming || r.State == StateReceived ||
			r.State == StateRunning && r.Migration.Phase == PhaseFinished) {
			return false, "already " + r.Migration.Phase + " for migration " + m.ID, nil
		}
		out := ""
		if r != nil && pid != 0 {
			switch {
			case r.State == StateIncoming && !k.incomingArrived(ctx, inst.UUID):
				if _, err := k.stopQEMU(ctx, inst.UUID, 0, true); err != nil {
					return false, "", &OpError{Op: OpMigratePrepare, Err: err}
				}
				out = fmt.Sprintf(" (superseding migration %s)", r.Migration.ID)
			case r.State == StateIncoming || r.State == StateReceived:
				return false, "", stateErr("this node holds the received copy of migration %s; finish it first", r.Migration.ID)
			default:
				return false, "", stateErr("instance %s is already running on this node", inst.Name)
			}
		}
		if d, err := k.missingDisk(ctx, inst); err != nil {
			return false, "", err
		} else if d != "" {
			return false, "", stateErr("disk %s of instance %s is not present on this node", d, inst.Name)
		}
		p, err := instanceParams(inst)
		if err != nil {
			return false, "", err
		}
		if r == nil {
			r = newKVMRecord(inst)
		}
		addr := net.JoinHostPort(k.cfg.Addr, strconv.Itoa(migrationPort(p, m.ID, inst.UUID)))
		r.Instance, r.State, r.BootID, r.Incoming = inst, StateIncoming, "", addr
		r.Migration = k.migration(m, RoleTarget, PhasePrepared)
		if err := k.store.save(inst.UUID, r); err != nil {
			return false, "", &OpError{Op: OpMigratePrepare, Err: err}
		}
		*rec = r
		accel, err := k.launch(ctx, OpMigratePrepare, r, inst, "-incoming", "tcp:"+addr)
		if err != nil {
			r.State, r.Migration = StateStopped, k.migration(m, RoleTarget, PhaseAborted)
			return false, "", err
		}
		return true, fmt.Sprintf("ready to receive from %s on %s under %s%s", m.PeerNode, addr, accel, out), nil
	})
}

// queryMigrate is QEMU's query-migrate, the fields gnt uses.
type queryMigrate struct {
	Status    string `json:"status"`
	TotalTime int64  `json:"total-time"`
	Downtime  int64  `json:"downtime"`
	RAM       *struct {
		Transferred int64 `json:"transferred"`
		Remaining   int64 `json:"remaining"`
		Total       int64 `json:"total"`
	} `json:"ram"`
	ErrorDesc string `json:"error-desc"`
}

// MigrateSend implements Driver.
func (k *KVM) MigrateSend(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" || m.Peer == "" {
		return Result{}, invalid("migrate-send needs a migration id and the target's address")
	}
	if inst.DiskTemplate == fsm.DTPlain {
		return Result{}, fmt.Errorf("%w: instance %s: %v", ErrNotSupported, inst.Name, errNoPlainMove)
	}
	host, _, err := net.SplitHostPort(m.Peer)
	if err != nil {
		return Result{}, invalid("target address %q: %v", m.Peer, err)
	}
	if k.send == nil {
		return Result{}, fmt.Errorf("%w: this kvm node cannot reach other nodes", ErrNotSupported)
	}
	return k.mutate(ctx, OpMigrateSend, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if isKVMMigration(r, m.ID, RoleSource) && r.Migration.Phase == PhaseSent {
			// A sent source's drbd disks are secondary (a demotion cut
			// short is done now).
			if _, err := k.drbdDemote(ctx, OpMigrateSend, inst, false); err != nil {
				return false, "", err
			}
			return false, "already sent to " + r.Migration.PeerNode, nil
		}
		pid := k.pid(inst.UUID)
		if r == nil || pid == 0 || r.State != StateRunning {
			return false, "", stateErr("instance %s is not running on this node; nothing to migrate", inst.Name)
		}
		p, err := instanceParams(inst)
		if err != nil {
			return false, "", err
		}
		resumed := isKVMMigration(r, m.ID, RoleSource) && r.Migration.Phase == PhaseSending
		r.Migration = k.migration(m, RoleSource, PhaseSending)
		if err := k.store.save(inst.UUID, r); err != nil {
			return false, "", &OpError{Op: OpMigrateSend, Err: err}
		}
		// The target becomes primary too when qemu there takes the
		// guest: this side allows it first (drbd).
		if err := k.drbdTwoPrimariesAll(ctx, OpMigrateSend, inst, true); err != nil {
			return false, "", err
		}
		uri := "tcp:" + net.JoinHostPort(host, strconv.Itoa(migrationPort(p, m.ID, inst.UUID)))
		var qm queryMigrate
		err = qmpDo(ctx, k.qmpPath(inst.UUID), func(q *qmpConn) error {
			if err := q.call(ctx, "query-migrate", nil, &qm); err != nil {
				return err
			}
			// A send cut by a crash of gntd may have gone on in qemu.
			if !resumed || qm.Status != "active" && qm.Status != "completed" && qm.Status != "device" {
				if err := q.call(ctx, "migrate-set-parameters", map[string]any{
					"max-bandwidth":  int64(p.int("migration_bandwidth")) << 20,
					"downtime-limit": p.int("migration_downtime"),
				}, nil); err != nil {
					return err
				}
				if err := q.call(ctx, "migrate", map[string]any{"uri": uri}, nil); err != nil {
					return err
				}
			}
			for {
				if err := q.call(ctx, "query-migrate", nil, &qm); err != nil {
					return err
				}
				switch qm.Status {
				case "completed":
					return nil
				case "failed", "cancelled":
					return fmt.Errorf("QEMU reports the migration %s: %s", qm.Status, qm.ErrorDesc)
				}
				if err := sleep(ctx, 50*time.Millisecond); err != nil {
					q.call(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
					return err
				}
			}
		})
		if err != nil {
			return false, "", &OpError{Op: OpMigrateSend, Err: fmt.Errorf("migrating to %s (%s): %w", m.PeerNode, uri, err),
				Output: "still running here"}
		}
		h := Handoff{Migration: m.ID, Source: k.cfg.Node, Instance: inst, BootID: r.BootID, OS: r.OS,
			MemoryMiB: r.RunMemory, Transferred: time.Now().UTC()}
		if err := k.send(ctx, m, h); err != nil {
			return false, "", &OpError{Op: OpMigrateSend, Err: fmt.Errorf("handing over to %s (%s): %w", m.PeerNode, m.Peer, err),
				Output: "the guest's memory reached the target, which runs it; this node's copy is paused"}
		}
		if _, err := k.stopQEMU(ctx, inst.UUID, 0, true); err != nil {
			return false, "", &OpError{Op: OpMigrateSend, Err: err}
		}
		r.State, r.BootID = StateStopped, ""
		for i := range r.Disks {
			r.Disks[i].Attached = false
		}
		r.Migration = k.migration(m, RoleSource, PhaseSent)
		if _, err := k.drbdDemote(ctx, OpMigrateSend, inst, false); err != nil {
			return false, "", err
		}
		out := fmt.Sprintf("migrated to %s (%s) in %d ms, downtime %d ms", m.PeerNode, uri, qm.TotalTime, qm.Downtime)
		if qm.RAM != nil {
			out += fmt.Sprintf(", %d MiB transferred", qm.RAM.Transferred>>20)
		}
		return true, out, nil
	})
}

// MigrateReceive takes the source's handoff on the target: the guest
// already runs here; the record takes its boot id and OS. Checks first:
// received or finished for h.Migration → no effect; not prepared for it
// → ErrState.
func (k *KVM) MigrateReceive(ctx context.Context, h Handoff) (Result, error) {
	if h.Migration == "" || h.BootID == "" {
		return Result{}, invalid("a handoff needs a migration id and a boot id")
	}
	return k.mutate(ctx, OpMigrateReceive, h.Instance, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if !isKVMMigration(r, h.Migration, RoleTarget) {
			return false, "", stateErr("this node is not prepared to receive migration %s of instance %s", h.Migration, h.Instance.Name)
		}
		switch r.Migration.Phase {
		case PhaseReceived, PhaseFinished:
			return false, "already " + r.Migration.Phase, nil
		}
		if k.pid(h.Instance.UUID) == 0 || !k.incomingArrived(ctx, h.Instance.UUID) {
			return false, "", stateErr("the guest of migration %s has not arrived on this node", h.Migration)
		}
		r.State, r.BootID = StateReceived, h.BootID
		if h.OS != "" {
			r.OS = h.OS
		}
		r.Migration.Phase, r.Migration.Changed = PhaseReceived, time.Now().UTC()
		return true, "received from " + h.Source, nil
	})
}

// MigrateFinish implements Driver.
func (k *KVM) MigrateFinish(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	return k.mutate(ctx, OpMigrateFinish, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if !isKVMMigration(r, m.ID, RoleTarget) {
			return false, "", stateErr("this node has no migration %s of instance %s", m.ID, inst.Name)
		}
		if r.State == StateRunning && r.Migration.Phase == PhaseFinished {
			if err := k.drbdTwoPrimariesAll(ctx, OpMigrateFinish, inst, false); err != nil {
				return false, "", err
			}
			return false, "already finished", nil
		}
		if k.pid(inst.UUID) == 0 {
			return false, "", stateErr("the qemu of migration %s is not running on this node", m.ID)
		}
		if r.State != StateReceived && !(r.State == StateIncoming && k.incomingArrived(ctx, inst.UUID)) {
			return false, "", stateErr("migration %s is %s here, not received", m.ID, r.Migration.Phase)
		}
		// A guest that arrived paused (its source was paused, or an
		// older gntd paused TCG guests for the transfer) runs from here;
		// not knowing is an error, never a guest left paused for good.
		err := qmpDo(ctx, k.qmpPath(inst.UUID), func(q *qmpConn) error {
			var st struct {
				Status string `json:"status"`
			}
			if err := q.call(ctx, "query-status", nil, &st); err != nil {
				return err
			}
			if st.Status == "paused" {
				return q.call(ctx, "cont", nil, nil)
			}
			return nil
		})
		if err != nil {
			return false, "", &OpError{Op: OpMigrateFinish, Err: err}
		}
		if r.BootID == "" {
			r.BootID = randomID() // the handoff was lost
		}
		// The source is secondary again once it sent: one primary, and
		// two no longer allowed (drbd).
		if err := k.drbdTwoPrimariesAll(ctx, OpMigrateFinish, inst, false); err != nil {
			return false, "", err
		}
		r.State, r.Incoming = StateRunning, ""
		r.Migration.Phase, r.Migration.Changed = PhaseFinished, time.Now().UTC()
		return true, "running here, boot id " + r.BootID, nil
	})
}

// MigrateAbort implements Driver.
func (k *KVM) MigrateAbort(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	return k.mutate(ctx, OpMigrateAbort, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if r == nil || r.Migration == nil || r.Migration.ID != m.ID || r.Migration.Phase == PhaseAborted {
			return false, "nothing to abort", nil
		}
		mig := r.Migration
		if mig.Role == RoleSource {
			if mig.Phase == PhaseSent {
				return false, "", stateErr("migration %s was sent to %s, which holds the only copy; finish it there", m.ID, mig.PeerNode)
			}
			if k.pid(inst.UUID) != 0 {
				var qm queryMigrate
				err := qmpDo(ctx, k.qmpPath(inst.UUID), func(q *qmpConn) error {
					if err := q.call(ctx, "query-migrate", nil, &qm); err != nil {
						return err
					}
					if qm.Status == "completed" {
						return nil
					}
					return q.call(ctx, "migrate_cancel", nil, nil)
				})
				if err != nil {
					return false, "", &OpError{Op: OpMigrateAbort, Err: err}
				}
				if qm.Status == "completed" {
					return false, "", stateErr("migration %s completed: %s runs the guest; finish it there", m.ID, mig.PeerNode)
				}
				if k.qemuRunState(ctx, inst.UUID) == "paused" {
					qmpDo(ctx, k.qmpPath(inst.UUID), func(q *qmpConn) error { return q.call(ctx, "cont", nil, nil) })
				}
			}
			mig.Phase, mig.Changed = PhaseAborted, time.Now().UTC()
			return true, "aborted; still running here", nil
		}
		if mig.Phase == PhaseFinished {
			return false, "", stateErr("migration %s finished; the instance runs here", m.ID)
		}
		if k.pid(inst.UUID) != 0 && k.incomingArrived(ctx, inst.UUID) {
			return false, "", stateErr("the guest of migration %s arrived and runs here, the only copy; finish the migration", m.ID)
		}
		if _, err := k.stopQEMU(ctx, inst.UUID, 0, true); err != nil {
			return false, "", &OpError{Op: OpMigrateAbort, Err: err}
		}
		// The source keeps the guest: this side is secondary, and two
		// primaries are no longer allowed (drbd).
		if _, err := k.drbdDemote(ctx, OpMigrateAbort, inst, true); err != nil {
			return false, "", err
		}
		mig.Phase, mig.Changed = PhaseAborted, time.Now().UTC()
		r.State, r.BootID, r.Incoming = StateStopped, "", ""
		for i := range r.Disks {
			r.Disks[i].Attached = false
		}
		return true, "aborted; discarded the incoming copy", nil
	})
}

var _ Receiver = (*KVM)(nil)
