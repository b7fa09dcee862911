package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
)

// FakeConfig configures a Fake.
type FakeConfig struct {
	// Dir holds the records, one JSON file per instance.
	Dir string
	// Node is this node's name, recorded in the handoffs it sends.
	Node string
	// Delay is how long every operation that changes something takes
	// (an operation without effect takes no time); Delays overrides it
	// per operation. For Stop, the delay is the guest's graceful shutdown
	// time, cut short by the stop timeout or Force.
	Delay  time.Duration
	Delays map[Op]time.Duration
	// Send carries a migration's handoff to the target's agent (m.Peer);
	// gntd sends it through the node RPC, a test can call the target
	// Fake's MigrateReceive. Without it MigrateSend is not supported.
	Send func(ctx context.Context, m Migration, h Handoff) error
	// DiskDir, when set, gives every disk a sparse file of its size,
	// <DiskDir>/<instance UUID>/<disk UUID>.img, created, grown and
	// removed with the disk, so that an OS definition's create script
	// writes to something real (see OS).
	DiskDir string
	// OS, when set, makes InstallOS run the create script of the
	// instance's OS definition (osdef.Config.Install), with the disk
	// files of DiskDir as DISK_<n>_PATH; its output goes to the job log
	// and its failure fails the install. Without it InstallOS only
	// records the OS.
	OS *osdef.Config
	// Bridges, when not nil, are the bridges the fake node has: any
	// other is missing (MissingBridges). nil: every bridge is there.
	Bridges []string
	// Now and NewID replace the clock and the random boot ids in tests.
	Now   func() time.Time
	NewID func() string
}

// Fake is a simulated hypervisor: each instance the node knows is a
// record in Dir, and every operation is a checked change of that record.
// Records survive restarts.
type Fake struct {
	cfg   FakeConfig
	store store
	locks locks

	mu      sync.Mutex
	faults  []*Fault
	release chan struct{} // closed by ClearFaults to end injected hangs
}

// Fault is a failure injected into a Fake, for tests and chaos runs.
type Fault struct {
	// Op is the operation it hits ("" for every operation).
	Op Op `json:"op,omitempty"`
	// Instance restricts it to one instance (UUID or name; "" for all).
	Instance string `json:"instance,omitempty"`
	// Delay is added before the operation.
	Delay time.Duration `json:"delay,omitempty"`
	// Hang blocks the operation until its context ends or ClearFaults.
	Hang bool `json:"hang,omitempty"`
	// Err fails the operation with this message (wrapping ErrInjected)...
	Err string `json:"error,omitempty"`
	// ...after it took effect when After is set (a lost reply), else
	// before it did anything.
	After bool `json:"after,omitempty"`
	// Times is how many calls it hits; 0 means until cleared.
	Times int `json:"times,omitempty"`
}

// fakeRecord is an instance on the fake node, as stored.
type fakeRecord struct {
	Instance  fsm.Instance    `json:"instance"`
	State     State           `json:"state"`
	BootID    string          `json:"boot_id,omitempty"`
	Disks     []DiskStatus    `json:"disks"`
	OS        string          `json:"os,omitempty"`
	DoneOps   []string        `json:"done_ops,omitempty"` // recent "op:opID", bounded
	Migration *MigrationState `json:"migration,omitempty"`
	LastOp    *LastOp         `json:"last_op,omitempty"`
	// RunMemory and RunVCPUs are what the instance was started with (a
	// later change of its configuration takes effect at its next start,
	// as with a hypervisor); a migration carries them over.
	RunMemory int64 `json:"run_memory,omitempty"`
	RunVCPUs  int   `json:"run_vcpus,omitempty"`
}

// NewFake opens (creating) the record directory.
func NewFake(cfg FakeConfig) (*Fake, error) {
	st, err := newStore(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = randomID
	}
	return &Fake{cfg: cfg, store: st, release: make(chan struct{})}, nil
}

// MissingBridges implements BridgeChecker with the configured bridges.
func (f *Fake) MissingBridges(_ context.Context, names []string) (map[string]string, error) {
	missing := map[string]string{}
	for _, n := range names {
		if f.cfg.Bridges != nil && !slices.Contains(f.cfg.Bridges, n) {
			missing[n] = BridgeAbsent
		}
	}
	return missing, nil
}

func randomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Name implements Driver.
func (f *Fake) Name() string { return "fake" }

// InjectFault adds a fault; the first fault matching a call applies.
func (f *Fake) InjectFault(fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := fault
	f.faults = append(f.faults, &c)
}

// ClearFaults removes every fault and ends the hangs they caused.
func (f *Fake) ClearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
	close(f.release)
	f.release = make(chan struct{})
}

// Faults returns the faults still armed.
func (f *Fake) Faults() []Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Fault, 0, len(f.faults))
	for _, x := range f.faults {
		out = append(out, *x)
	}
	return out
}

// takeFault returns the fault that hits this call, if any, and the
// channel that ends its hang.
func (f *Fake) takeFault(op Op, inst fsm.Instance) (*Fault, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.faults {
		if x.Op != "" && x.Op != op {
			continue
		}
		if x.Instance != "" && x.Instance != inst.UUID && x.Instance != inst.Name {
			continue
		}
		c := *x
		if x.Times > 0 {
			x.Times--
			if x.Times == 0 {
				f.faults = slices.Delete(f.faults, i, i+1)
			}
		}
		return &c, f.release
	}
	return nil, nil
}

// applyFault runs the part of a fault that comes before the operation.
func (f *Fake) applyFault(ctx context.Context, op Op, fault *Fault, release <-chan struct{}) error {
	if fault == nil {
		return nil
	}
	if fault.Delay > 0 {
		if err := sleep(ctx, fault.Delay); err != nil {
			return &OpError{Op: op, Err: err, Output: "fake: interrupted during injected delay"}
		}
	}
	if fault.Hang {
		select {
		case <-ctx.Done():
			return &OpError{Op: op, Err: ctx.Err(), Output: "fake: injected hang"}
		case <-release:
			return &OpError{Op: op, Err: fmt.Errorf("%w: hang ended by clearing faults", ErrInjected), Output: "fake: injected hang"}
		}
	}
	if fault.Err != "" && !fault.After {
		return &OpError{Op: op, Err: fmt.Errorf("%w: %s", ErrInjected, fault.Err), Output: "fake: injected failure before the operation"}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Fake) delay(op Op) time.Duration {
	if d, ok := f.cfg.Delays[op]; ok {
		return d
	}
	return f.cfg.Delay
}

// change is one mutating operation's decision on a record: rec is nil when
// the node has no record of the instance; the function edits *rec (it
// may create or nil it) and reports whether anything changed and what to
// print.
type change func(rec **fakeRecord) (changed bool, output string, err error)

// mutate runs one operation: lock, load, fault, decide, take the
// operation's time, save. Nothing is saved when the decision fails or the
// simulated work is interrupted.
func (f *Fake) mutate(ctx context.Context, op Op, inst fsm.Instance, opID string, fn change) (Result, error) {
	if err := checkInstance(inst); err != nil {
		return Result{}, err
	}
	unlock, err := f.locks.lock(ctx, inst.UUID)
	if err != nil {
		return Result{}, &OpError{Op: op, Err: err}
	}
	defer unlock()
	var rec *fakeRecord
	var stored fakeRecord
	ok, err := f.store.load(inst.UUID, &stored)
	if err != nil {
		return Result{}, &OpError{Op: op, Err: err}
	}
	if ok {
		rec = &stored
	}
	fault, release := f.takeFault(op, inst)
	if err := f.applyFault(ctx, op, fault, release); err != nil {
		f.noteFailure(rec, op, opID, err)
		return Result{}, err
	}
	work := cloneRecord(rec)
	changed, out, err := fn(&work)
	if err != nil {
		f.noteFailure(rec, op, opID, err)
		return Result{}, err
	}
	if changed && !selfTimed[op] {
		if err := sleep(ctx, f.delay(op)); err != nil {
			return Result{}, &OpError{Op: op, Err: err, Output: "fake: interrupted; nothing changed"}
		}
	}
	if work != nil {
		work.Instance = inst
		if changed {
			work.DoneOps = noteDone(work.DoneOps, op, opID)
		}
		work.LastOp = lastOp(op, opID, f.cfg.Now(), changed, nil)
	}
	if err := settle(f.store, op, inst.UUID, rec != nil, work); err != nil {
		return Result{}, err
	}
	if fault != nil && fault.Err != "" && fault.After {
		return Result{}, &OpError{Op: op, Err: fmt.Errorf("%w: %s", ErrInjected, fault.Err), Output: "fake: injected failure after the operation took effect\n" + out}
	}
	return Result{Changed: changed, Output: out}, nil
}

// selfTimed operations spend their delay inside their decision (a
// shutdown, a transfer), because it matters what happens meanwhile.
var selfTimed = map[Op]bool{OpStop: true, OpMigrateSend: true}

// noteFailure records a failed operation as the instance's last one.
func (f *Fake) noteFailure(rec *fakeRecord, op Op, opID string, err error) {
	if rec == nil {
		return
	}
	rec.LastOp = lastOp(op, opID, f.cfg.Now(), false, err)
	f.store.save(rec.Instance.UUID, rec)
}

func cloneRecord(r *fakeRecord) *fakeRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.Disks = slices.Clone(r.Disks)
	c.DoneOps = slices.Clone(r.DoneOps)
	if r.Migration != nil {
		m := *r.Migration
		c.Migration = &m
	}
	return &c
}

func (r *fakeRecord) done(op Op, opID string) bool {
	return r != nil && opDone(r.DoneOps, op, opID)
}

func (r *fakeRecord) disk(id string) *DiskStatus {
	if r == nil {
		return nil
	}
	return findDisk(r.Disks, id)
}

// missingDisk names the first configured disk not present here.
func (r *fakeRecord) missingDisk(inst fsm.Instance) string {
	for _, d := range inst.Disks {
		if r.disk(d.UUID) == nil {
			return d.UUID
		}
	}
	return ""
}

func (r *fakeRecord) status() Status {
	st := Status{UUID: r.Instance.UUID, Name: r.Instance.Name, State: r.State, OS: r.OS, BootID: r.BootID, LastOp: r.LastOp}
	order := map[string]int{}
	for i, d := range r.Instance.Disks {
		order[d.UUID] = i
	}
	st.Disks = slices.Clone(r.Disks)
	if st.Disks == nil {
		st.Disks = []DiskStatus{}
	}
	sort.SliceStable(st.Disks, func(i, j int) bool {
		oi, iok := order[st.Disks[i].UUID]
		oj, jok := order[st.Disks[j].UUID]
		if iok != jok {
			return iok
		}
		return oi < oj
	})
	if r.Migration != nil {
		m := *r.Migration
		st.Migration = &m
	}
	if r.State == StateRunning {
		st.MemoryMiB, st.VCPUs = r.RunMemory, r.RunVCPUs
	}
	return st
}

// runMemory is the memory the instance runs with: what it was started
// with, or (a record from before that was kept) its configuration's.
func runMemory(r *fakeRecord, inst fsm.Instance) int64 {
	if r.RunMemory > 0 {
		return r.RunMemory
	}
	return inst.MemoryMiB
}

func newRecord(inst fsm.Instance) *fakeRecord {
	return &fakeRecord{Instance: inst, State: StateStopped, Disks: []DiskStatus{}}
}

// Status implements Driver.
func (f *Fake) Status(ctx context.Context, inst fsm.Instance) (Status, error) {
	if err := checkInstance(inst); err != nil {
		return Status{}, err
	}
	fault, release := f.takeFault(OpStatus, inst)
	if err := f.applyFault(ctx, OpStatus, fault, release); err != nil {
		return Status{}, err
	}
	var rec fakeRecord
	ok, err := f.store.load(inst.UUID, &rec)
	if err != nil {
		return Status{}, &OpError{Op: OpStatus, Err: err}
	}
	if !ok {
		return Status{}, notFound("instance %s", inst.UUID)
	}
	st := rec.status()
	for i := range st.Disks {
		st.Disks[i].Path = f.diskFile(inst.UUID, st.Disks[i].UUID)
	}
	return st, nil
}

// List implements Driver.
func (f *Fake) List(ctx context.Context) ([]Status, error) {
	fault, release := f.takeFault(OpList, fsm.Instance{})
	if err := f.applyFault(ctx, OpList, fault, release); err != nil {
		return nil, err
	}
	ids, err := f.store.uuids()
	if err != nil {
		return nil, &OpError{Op: OpList, Err: err}
	}
	out := []Status{}
	for _, id := range ids {
		var rec fakeRecord
		if ok, err := f.store.load(id, &rec); err != nil {
			return nil, &OpError{Op: OpList, Err: err}
		} else if ok {
			out = append(out, rec.status())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Name < out[j].Name || out[i].Name == out[j].Name && out[i].UUID < out[j].UUID
	})
	return out, nil
}

// start brings a stopped record up: every configured disk attached, a new
// boot id.
func (f *Fake) start(r *fakeRecord, inst fsm.Instance) error {
	if d := r.missingDisk(inst); d != "" {
		return stateErr("disk %s of instance %s is not present on this node", d, inst.Name)
	}
	for _, d := range inst.Disks {
		r.disk(d.UUID).Attached = true
	}
	r.State, r.BootID = StateRunning, f.cfg.NewID()
	r.RunMemory, r.RunVCPUs = inst.MemoryMiB, inst.VCPUs
	return nil
}

func migrating(r *fakeRecord) error {
	if r != nil && (r.State == StateIncoming || r.State == StateReceived) {
		return stateErr("instance %s is %s here (migration %s); finish or abort the migration first", r.Instance.Name, r.State, r.Migration.ID)
	}
	return nil
}

// Start implements Driver.
func (f *Fake) Start(ctx context.Context, inst fsm.Instance) (Result, error) {
	return f.mutate(ctx, OpStart, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if r != nil && r.State == StateRunning {
			return false, "already running", nil
		}
		if err := migrating(r); err != nil {
			return false, "", err
		}
		if r == nil {
			r = newRecord(inst)
		}
		if err := f.start(r, inst); err != nil {
			return false, "", err
		}
		*rec = r
		return true, "started, boot id " + r.BootID, nil
	})
}

// Stop implements Driver.
func (f *Fake) Stop(ctx context.Context, inst fsm.Instance, o StopOptions) (Result, error) {
	if o.Timeout < 0 {
		return Result{}, invalid("negative stop timeout")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultShutdownTimeout
	}
	var wait time.Duration
	var out string
	res, err := f.mutate(ctx, OpStop, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if r == nil || r.State == StateStopped {
			return false, "not running", nil
		}
		if err := migrating(r); err != nil {
			return false, "", err
		}
		wait, out = f.delay(OpStop), "shut down gracefully"
		switch {
		case o.Force:
			wait, out = 0, "destroyed (forced)"
		case wait > o.Timeout:
			wait, out = o.Timeout, fmt.Sprintf("guest did not shut down within %s; destroyed", o.Timeout)
		}
		// The shutdown's time passes before the record says stopped.
		if err := sleep(ctx, wait); err != nil {
			return false, "", &OpError{Op: OpStop, Err: err, Output: "fake: interrupted during shutdown; still running"}
		}
		r.State, r.BootID = StateStopped, ""
		return true, out, nil
	})
	return res, err
}

// Reboot implements Driver.
func (f *Fake) Reboot(ctx context.Context, inst fsm.Instance, o RebootOptions) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	return f.mutate(ctx, OpReboot, inst, o.OpID, func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if r.done(OpReboot, o.OpID) {
			return false, "already rebooted for " + o.OpID, nil
		}
		if err := migrating(r); err != nil {
			return false, "", err
		}
		if r == nil {
			r = newRecord(inst)
		}
		was := r.State
		if err := f.start(r, inst); err != nil {
			return false, "", err
		}
		*rec = r
		if was == StateStopped {
			return true, "was not running; started, boot id " + r.BootID, nil
		}
		return true, o.Type + " reboot, boot id " + r.BootID, nil
	})
}

// Remove implements Driver.
func (f *Fake) Remove(ctx context.Context, inst fsm.Instance) (Result, error) {
	return f.mutate(ctx, OpRemove, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if r == nil {
			return false, "not known on this node", nil
		}
		if r.State != StateStopped {
			return false, "", stateErr("instance %s is %s here; stop it (or end its migration) first", inst.Name, r.State)
		}
		for _, d := range r.Disks {
			if err := f.removeDiskFile(inst.UUID, d.UUID); err != nil {
				return false, "", err
			}
		}
		*rec = nil
		return true, fmt.Sprintf("removed, with %d disk(s)", len(r.Disks)), nil
	})
}

// DiskCreate implements Driver.
func (f *Fake) DiskCreate(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	cd, _, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	if cd.SizeMiB <= 0 {
		return Result{}, invalid("disk %s has size %d", disk, cd.SizeMiB)
	}
	return f.mutate(ctx, OpDiskCreate, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if d := r.disk(disk); d != nil {
			if d.SizeMiB != cd.SizeMiB {
				return false, "", stateErr("disk %s is present with %d MiB, not the configured %d MiB", disk, d.SizeMiB, cd.SizeMiB)
			}
			return false, "already present", nil
		}
		if r == nil {
			r = newRecord(inst)
		}
		if err := f.sizeDiskFile(inst.UUID, disk, cd.SizeMiB); err != nil {
			return false, "", err
		}
		r.Disks = append(r.Disks, DiskStatus{UUID: disk, SizeMiB: cd.SizeMiB, Generation: "created"})
		*rec = r
		return true, fmt.Sprintf("created disk %s (%d MiB)", disk, cd.SizeMiB), nil
	})
}

// DiskRemove implements Driver. A disk no longer in the configuration can
// be removed too (its UUID is enough).
func (f *Fake) DiskRemove(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if disk == "" {
		return Result{}, invalid("no disk UUID given")
	}
	return f.mutate(ctx, OpDiskRemove, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		d := r.disk(disk)
		if d == nil {
			return false, "not present", nil
		}
		if d.Attached && r.State != StateStopped {
			return false, "", stateErr("disk %s is attached to instance %s, which is %s here; detach it first", disk, inst.Name, r.State)
		}
		if err := f.removeDiskFile(inst.UUID, disk); err != nil {
			return false, "", err
		}
		r.Disks = slices.DeleteFunc(r.Disks, func(x DiskStatus) bool { return x.UUID == disk })
		return true, "removed disk " + disk, nil
	})
}

// drbdSecondary tells whether the disk's drbd logical id gives this node
// the end of the instance's secondary, or no end while the disk is
// configured with a logical id (an old secondary). Without a logical id
// (a record of before LogVersion 33) it tells false.
func (f *Fake) drbdSecondary(inst fsm.Instance, disk string) bool {
	cd, _, err := configDisk(inst, disk)
	if err != nil || inst.DiskTemplate != fsm.DTDrbd || cd.DRBD == nil {
		return false
	}
	for _, e := range cd.DRBD.Ends {
		if e.Name == f.cfg.Node {
			return e.Node != inst.PrimaryNode
		}
	}
	return true
}

// DiskAttach implements Driver: a drbd disk on the instance's secondary
// is assembled only, not attached.
func (f *Fake) DiskAttach(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if _, _, err := configDisk(inst, disk); err != nil {
		return Result{}, err
	}
	return f.mutate(ctx, OpDiskAttach, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		d := r.disk(disk)
		if d == nil {
			return false, "", notFound("disk %s is not present on this node", disk)
		}
		if r.State == StateStopped && f.drbdSecondary(inst, disk) {
			if d.Attached {
				d.Attached = false
				return true, "disk " + disk + " is on the secondary: assembled, not attached", nil
			}
			return false, "disk " + disk + " is on the secondary: assembled, not attached", nil
		}
		if d.Attached {
			return false, "already attached", nil
		}
		d.Attached = true
		if r.State == StateRunning {
			return true, "hot-plugged disk " + disk, nil
		}
		return true, "attached disk " + disk, nil
	})
}

// DiskDetach implements Driver.
func (f *Fake) DiskDetach(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if disk == "" {
		return Result{}, invalid("no disk UUID given")
	}
	return f.mutate(ctx, OpDiskDetach, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		d := r.disk(disk)
		if d == nil || !d.Attached {
			return false, "not attached", nil
		}
		d.Attached = false
		return true, "detached disk " + disk, nil
	})
}

// DiskReplace implements Driver.
func (f *Fake) DiskReplace(ctx context.Context, inst fsm.Instance, disk, opID string) (Result, error) {
	if opID == "" {
		return Result{}, invalid("disk replace needs an op id")
	}
	if _, _, err := configDisk(inst, disk); err != nil {
		return Result{}, err
	}
	return f.mutate(ctx, OpDiskReplace, inst, opID, func(rec **fakeRecord) (bool, string, error) {
		d := (*rec).disk(disk)
		if d == nil {
			return false, "", notFound("disk %s is not present on this node", disk)
		}
		// Once per disk: the jobs replace every disk of the instance
		// under one op id.
		if d.Generation == opID {
			return false, "disk " + disk + " already replaced for " + opID, nil
		}
		d.Generation = opID
		return true, "replaced disk " + disk + " and resynchronised it", nil
	})
}

// DiskGrow implements Driver.
func (f *Fake) DiskGrow(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	cd, _, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	return f.mutate(ctx, OpDiskGrow, inst, "", func(rec **fakeRecord) (bool, string, error) {
		d := (*rec).disk(disk)
		switch {
		case d == nil:
			return false, "", notFound("disk %s is not present on this node", disk)
		case d.SizeMiB == cd.SizeMiB:
			return false, fmt.Sprintf("disk %s has %d MiB already", disk, d.SizeMiB), nil
		case d.SizeMiB > cd.SizeMiB:
			return false, "", stateErr("disk %s has %d MiB, more than the configured %d MiB; disks do not shrink", disk, d.SizeMiB, cd.SizeMiB)
		}
		old := d.SizeMiB
		if err := f.sizeDiskFile(inst.UUID, disk, cd.SizeMiB); err != nil {
			return false, "", err
		}
		d.SizeMiB = cd.SizeMiB
		return true, fmt.Sprintf("grew disk %s from %d to %d MiB", disk, old, cd.SizeMiB), nil
	})
}

// InstallOS implements Driver.
func (f *Fake) InstallOS(ctx context.Context, inst fsm.Instance, opID string) (Result, error) {
	if opID == "" {
		return Result{}, invalid("OS install needs an op id")
	}
	if inst.OS == "" {
		return Result{}, invalid("instance %s has no OS to install", inst.Name)
	}
	return f.mutate(ctx, OpOSInstall, inst, opID, func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if r.done(OpOSInstall, opID) {
			return false, "already installed for " + opID, nil
		}
		if r != nil && r.State != StateStopped {
			return false, "", stateErr("instance %s is %s here; stop it first", inst.Name, r.State)
		}
		if r == nil {
			r = newRecord(inst)
		}
		if d := r.missingDisk(inst); d != "" {
			return false, "", stateErr("disk %s of instance %s is not present on this node", d, inst.Name)
		}
		out := "installed " + inst.OS
		if r.OS != "" {
			out = fmt.Sprintf("reinstalled %s (was %s)", inst.OS, r.OS)
		}
		if f.cfg.OS != nil {
			script, err := f.runCreate(ctx, inst, r)
			if err != nil {
				return false, "", err
			}
			out = script + out
		}
		r.OS = inst.OS
		*rec = r
		return true, out, nil
	})
}

func (f *Fake) migration(m Migration, role, phase string) *MigrationState {
	return &MigrationState{ID: m.ID, Role: role, Phase: phase, PeerNode: m.PeerNode, Peer: m.Peer, Changed: f.cfg.Now().UTC()}
}

func isMigration(r *fakeRecord, id, role string) bool {
	return r != nil && r.Migration != nil && r.Migration.ID == id && r.Migration.Role == role
}

// MigratePrepare implements Driver.
func (f *Fake) MigratePrepare(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	return f.mutate(ctx, OpMigratePrepare, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if isMigration(r, m.ID, RoleTarget) && (r.State == StateIncoming || r.State == StateReceived ||
			r.State == StateRunning && r.Migration.Phase == PhaseFinished) {
			return false, "already " + r.Migration.Phase + " for migration " + m.ID, nil
		}
		if r != nil {
			switch r.State {
			case StateRunning:
				return false, "", stateErr("instance %s is already running on this node", inst.Name)
			case StateReceived:
				return false, "", stateErr("this node holds the received copy of migration %s; finish or abort it first", r.Migration.ID)
			}
		}
		if r == nil {
			r = newRecord(inst)
		}
		if d := r.missingDisk(inst); d != "" {
			return false, "", stateErr("disk %s of instance %s is not present on this node", d, inst.Name)
		}
		out := "ready to receive from " + m.PeerNode
		if r.State == StateIncoming {
			out += fmt.Sprintf(" (superseding migration %s)", r.Migration.ID)
		}
		r.State, r.BootID = StateIncoming, ""
		r.Migration = f.migration(m, RoleTarget, PhasePrepared)
		*rec = r
		return true, out, nil
	})
}

// MigrateSend implements Driver.
func (f *Fake) MigrateSend(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" || m.Peer == "" {
		return Result{}, invalid("migrate-send needs a migration id and the target's address")
	}
	if f.cfg.Send == nil {
		return Result{}, fmt.Errorf("%w: this fake node cannot reach other nodes", ErrNotSupported)
	}
	return f.mutate(ctx, OpMigrateSend, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if isMigration(r, m.ID, RoleSource) && r.Migration.Phase == PhaseSent {
			return false, "already sent to " + r.Migration.PeerNode, nil
		}
		if r == nil || r.State != StateRunning {
			state := "not known"
			if r != nil {
				state = string(r.State)
			}
			return false, "", stateErr("instance %s is %s on this node, not running; nothing to migrate", inst.Name, state)
		}
		// Mark the attempt first: a crash during the transfer leaves the
		// instance running here with the migration visible.
		r.Migration = f.migration(m, RoleSource, PhaseSending)
		if err := f.store.save(inst.UUID, r); err != nil {
			return false, "", &OpError{Op: OpMigrateSend, Err: err}
		}
		if err := sleep(ctx, f.delay(OpMigrateSend)); err != nil {
			return false, "", &OpError{Op: OpMigrateSend, Err: err, Output: "fake: transfer interrupted; still running here"}
		}
		h := Handoff{Migration: m.ID, Source: f.cfg.Node, Instance: inst, BootID: r.BootID, OS: r.OS,
			MemoryMiB: runMemory(r, inst), Transferred: f.cfg.Now().UTC()}
		if err := f.cfg.Send(ctx, m, h); err != nil {
			return false, "", &OpError{Op: OpMigrateSend, Err: fmt.Errorf("transfer to %s (%s): %w", m.PeerNode, m.Peer, err), Output: "fake: still running here"}
		}
		r.State, r.BootID = StateStopped, ""
		r.Migration = f.migration(m, RoleSource, PhaseSent)
		return true, fmt.Sprintf("sent %d MiB to %s (%s)", inst.MemoryMiB, m.PeerNode, m.Peer), nil
	})
}

// MigrateReceive takes a migration's handoff on the target (called by the
// source's driver, through the node RPC). Checks first: received or
// finished for h.Migration → no effect; not prepared for it → ErrState.
func (f *Fake) MigrateReceive(ctx context.Context, h Handoff) (Result, error) {
	if h.Migration == "" || h.BootID == "" {
		return Result{}, invalid("a handoff needs a migration id and a boot id")
	}
	return f.mutate(ctx, OpMigrateReceive, h.Instance, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if isMigration(r, h.Migration, RoleTarget) {
			switch r.Migration.Phase {
			case PhaseReceived, PhaseFinished:
				return false, "already " + r.Migration.Phase, nil
			case PhasePrepared:
				r.State, r.BootID = StateReceived, h.BootID
				r.RunMemory, r.RunVCPUs = h.MemoryMiB, h.Instance.VCPUs
				if h.OS != "" {
					r.OS = h.OS // the disks it was installed on are replicated
				}
				r.Migration.Phase, r.Migration.Changed = PhaseReceived, f.cfg.Now().UTC()
				return true, "received from " + h.Source, nil
			}
		}
		return false, "", stateErr("this node is not prepared to receive migration %s of instance %s", h.Migration, h.Instance.Name)
	})
}

// MigrateFinish implements Driver.
func (f *Fake) MigrateFinish(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	return f.mutate(ctx, OpMigrateFinish, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if !isMigration(r, m.ID, RoleTarget) {
			return false, "", stateErr("this node has no migration %s of instance %s", m.ID, inst.Name)
		}
		switch {
		case r.State == StateRunning && r.Migration.Phase == PhaseFinished:
			return false, "already finished", nil
		case r.State == StateReceived:
			if d := r.missingDisk(inst); d != "" {
				return false, "", stateErr("disk %s of instance %s is not present on this node", d, inst.Name)
			}
			for _, d := range inst.Disks {
				r.disk(d.UUID).Attached = true
			}
			r.State = StateRunning
			r.Migration.Phase, r.Migration.Changed = PhaseFinished, f.cfg.Now().UTC()
			return true, "resumed, boot id " + r.BootID, nil
		}
		return false, "", stateErr("migration %s is %s here, not received", m.ID, r.Migration.Phase)
	})
}

// MigrateAbort implements Driver.
func (f *Fake) MigrateAbort(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	return f.mutate(ctx, OpMigrateAbort, inst, "", func(rec **fakeRecord) (bool, string, error) {
		r := *rec
		if r == nil || r.Migration == nil || r.Migration.ID != m.ID || r.Migration.Phase == PhaseAborted {
			return false, "nothing to abort", nil
		}
		mig := r.Migration
		switch mig.Role {
		case RoleSource:
			if mig.Phase == PhaseSent {
				return false, "", stateErr("migration %s was sent to %s, which holds the only copy; finish it there", m.ID, mig.PeerNode)
			}
			mig.Phase, mig.Changed = PhaseAborted, f.cfg.Now().UTC()
			return true, "aborted; still running here", nil
		default:
			if mig.Phase == PhaseFinished {
				return false, "", stateErr("migration %s finished; the instance runs here", m.ID)
			}
			mig.Phase, mig.Changed = PhaseAborted, f.cfg.Now().UTC()
			r.State, r.BootID = StateStopped, ""
			if len(r.Disks) == 0 && r.OS == "" {
				*rec = nil // nothing left here but the aborted preparation
			}
			return true, "aborted; discarded the incoming copy", nil
		}
	})
}

var _ Driver = (*Fake)(nil)

// Receiver is implemented by drivers whose migrations travel between
// agents (the fake's handoffs), so the node RPC can deliver them.
type Receiver interface {
	MigrateReceive(ctx context.Context, h Handoff) (Result, error)
}

var _ Receiver = (*Fake)(nil)

// diskFile is the file of a disk under DiskDir ("" without DiskDir).
func (f *Fake) diskFile(inst, disk string) string {
	if f.cfg.DiskDir == "" {
		return ""
	}
	return filepath.Join(f.cfg.DiskDir, inst, disk+".img")
}

// sizeDiskFile creates the disk's file (sparse) or grows it to sizeMiB.
func (f *Fake) sizeDiskFile(inst, disk string, sizeMiB int64) error {
	p := f.diskFile(inst, disk)
	if p == "" {
		return nil
	}
	if !validID(disk) {
		return invalid("disk UUID %q is not a valid identifier", disk)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("fake disk file: %w", err)
	}
	fh, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("fake disk file: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("fake disk file: %w", err)
	}
	if size := sizeMiB << 20; fi.Size() < size {
		if err := fh.Truncate(size); err != nil {
			return fmt.Errorf("fake disk file %s to %d MiB: %w", p, sizeMiB, err)
		}
	}
	return nil
}

// removeDiskFile removes the disk's file, and the instance's directory
// when it is left empty.
func (f *Fake) removeDiskFile(inst, disk string) error {
	p := f.diskFile(inst, disk)
	if p == "" || !validID(disk) {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fake disk file: %w", err)
	}
	os.Remove(filepath.Dir(p)) // only when empty
	return nil
}

// runCreate runs the OS definition's create script on the instance's
// disk files (created first if missing: a record from before DiskDir).
func (f *Fake) runCreate(ctx context.Context, inst fsm.Instance, r *fakeRecord) (string, error) {
	paths := make([]string, len(inst.Disks))
	for i, d := range inst.Disks {
		if err := f.sizeDiskFile(inst.UUID, d.UUID, d.SizeMiB); err != nil {
			return "", err
		}
		paths[i] = f.diskFile(inst.UUID, d.UUID)
	}
	out, err := f.cfg.OS.Install(ctx, osdef.Input{Instance: inst, Hypervisor: f.Name(), DiskPaths: paths, Reinstall: r.OS != ""})
	if err != nil {
		return "", &OpError{Op: OpOSInstall, Output: out, Err: err}
	}
	return out, nil
}
