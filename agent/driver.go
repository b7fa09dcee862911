package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Op names an operation. The names are also the node RPC's operation names
// and the exec driver's script names.
type Op string

// Operations.
const (
	OpStatus         Op = "status"
	OpList           Op = "list"
	OpStart          Op = "instance-start"
	OpStop           Op = "instance-stop"
	OpReboot         Op = "instance-reboot"
	OpRemove         Op = "instance-remove"
	OpDiskCreate     Op = "disk-create"
	OpDiskRemove     Op = "disk-remove"
	OpDiskAttach     Op = "disk-attach"
	OpDiskDetach     Op = "disk-detach"
	OpDiskReplace    Op = "disk-replace"
	OpDiskGrow       Op = "disk-grow"
	OpOSInstall      Op = "os-install"
	OpMigratePrepare Op = "migrate-prepare"
	OpMigrateSend    Op = "migrate-send"
	OpMigrateReceive Op = "migrate-receive"
	OpMigrateFinish  Op = "migrate-finish"
	OpMigrateAbort   Op = "migrate-abort"
	// OpBalloon changes a running instance's memory (Ballooner).
	OpBalloon Op = "instance-balloon"
	// OpBridgesExist says which of the bridges named are missing on the
	// node (BridgeChecker), changing nothing.
	OpBridgesExist Op = "bridges-exist"
)

// Ops lists every operation.
var Ops = []Op{
	OpStatus, OpList, OpStart, OpStop, OpReboot, OpRemove,
	OpDiskCreate, OpDiskRemove, OpDiskAttach, OpDiskDetach, OpDiskReplace, OpDiskGrow, OpOSInstall,
	OpMigratePrepare, OpMigrateSend, OpMigrateReceive, OpMigrateFinish, OpMigrateAbort, OpBalloon, OpBridgesExist,
}

// State is what an instance is doing on one node.
type State string

// Instance states on a node. An instance a node has no record of is
// reported by ErrNotFound, not by a state.
const (
	// StateStopped: known here (disks, installed OS), not running.
	StateStopped State = "stopped"
	// StateRunning: running here.
	StateRunning State = "running"
	// StateIncoming: prepared to receive a live migration.
	StateIncoming State = "incoming"
	// StateReceived: a migration's memory arrived; the copy is paused
	// until MigrateFinish resumes it. Once the source has sent, this is
	// the instance's only copy.
	StateReceived State = "received"
)

// Migration roles and phases, as recorded on each side.
const (
	RoleSource = "source"
	RoleTarget = "target"

	PhasePrepared = "prepared" // target: ready to receive
	PhaseSending  = "sending"  // source: transfer under way (or cut by a crash), still running here
	PhaseSent     = "sent"     // source: transferred, no longer running here
	PhaseReceived = "received" // target: memory received, paused
	PhaseFinished = "finished" // target: running here
	PhaseAborted  = "aborted"  // either side: given up
)

// Driver runs instance and disk operations on one node. Every instance
// argument is the instance's configuration as the caller knows it; the
// driver records the latest one it was given. Every method is idempotent,
// and safe to call concurrently (operations on one instance are
// serialised).
//
// Errors: ErrNotSupported (the driver cannot do this), ErrNotFound (no
// such instance or disk on this node), ErrState (the instance is in a
// state that forbids the operation; nothing was changed), ErrInvalid (a
// bad request), and *OpError for an operation that was attempted and
// failed, with its output.
type Driver interface {
	// Name is the driver's name: "fake" or "exec".
	Name() string

	// Status reports the instance's record on this node, ErrNotFound
	// when the node has none. Only inst.UUID is needed.
	Status(ctx context.Context, inst fsm.Instance) (Status, error)
	// List reports every instance this node has a record of.
	List(ctx context.Context) ([]Status, error)

	// Start makes the instance run here. Checks first: already running
	// → no effect; incoming or received (a migration in progress) →
	// ErrState; a configured disk not present → ErrState. Starting
	// attaches every configured disk and gives the instance a new boot id.
	Start(ctx context.Context, inst fsm.Instance) (Result, error)
	// Stop makes the instance not run here: a graceful shutdown bounded
	// by o.Timeout, then a forced one (at once with o.Force). Checks
	// first: no record, stopped, or a migration's source that has sent →
	// no effect; incoming or received → ErrState (abort the migration).
	Stop(ctx context.Context, inst fsm.Instance, o StopOptions) (Result, error)
	// Reboot restarts the instance (o.Type: soft, hard or full) and is
	// done once per o.OpID: an OpID this node already rebooted for → no
	// effect. A stopped instance is started (as Ganeti does).
	Reboot(ctx context.Context, inst fsm.Instance, o RebootOptions) (Result, error)
	// Remove forgets the instance on this node, removing the disks still
	// present. Checks first: no record → no effect; running, incoming or
	// received → ErrState (stop it first).
	Remove(ctx context.Context, inst fsm.Instance) (Result, error)

	// DiskCreate creates the local storage of the configured disk with
	// UUID disk. Checks first: present with the configured size → no
	// effect; present with another size → ErrState.
	DiskCreate(ctx context.Context, inst fsm.Instance, disk string) (Result, error)
	// DiskRemove removes the disk's local storage. Checks first: not
	// present → no effect; attached to the running instance → ErrState
	// (detach it first).
	DiskRemove(ctx context.Context, inst fsm.Instance, disk string) (Result, error)
	// DiskAttach connects a present disk to the instance (hot-plugged
	// when it runs). Checks first: attached → no effect; not present →
	// ErrNotFound. A drbd disk on a node that is not the instance's
	// primary (and where it does not run) is only assembled there: its
	// device set up, attached to its volumes, connected to the peer,
	// secondary; the disk is not marked attached.
	DiskAttach(ctx context.Context, inst fsm.Instance, disk string) (Result, error)
	// DiskDetach disconnects the disk from the instance, keeping its
	// storage. Checks first: not present or not attached → no effect. A
	// drbd disk on a node that is not the instance's primary (and where
	// it does not run), or whose logical id no longer names the node,
	// has its device taken down there, its volumes kept (DiskRemove
	// removes them).
	DiskDetach(ctx context.Context, inst fsm.Instance, disk string) (Result, error)
	// DiskReplace recreates the disk's local storage and resynchronises
	// it from its peer (DRBD's replace-disks on this node), once per disk
	// and opID (the jobs replace each disk of an instance under one
	// opID): this disk already replaced for opID (its Generation) → no
	// effect. Checks first: not present → ErrNotFound (use DiskCreate on
	// a new node).
	DiskReplace(ctx context.Context, inst fsm.Instance, disk, opID string) (Result, error)
	// DiskGrow grows the disk's local storage to its configured size
	// (inst carries the grown size; Ganeti's grow-disk). Checks first:
	// present with the configured size → no effect; larger → ErrState
	// (disks do not shrink); not present → ErrNotFound.
	DiskGrow(ctx context.Context, inst fsm.Instance, disk string) (Result, error)
	// InstallOS runs the OS installation onto the instance's disks (a
	// reinstall when an OS was installed before), once per opID: an opID
	// already done → no effect. Checks first: running, incoming or
	// received → ErrState; a configured disk not present → ErrState.
	InstallOS(ctx context.Context, inst fsm.Instance, opID string) (Result, error)

	// MigratePrepare readies this node (the target) to receive the
	// instance live from m.PeerNode. Checks first: running here after
	// migration m.ID → no effect; prepared or received for m.ID → no
	// effect; running here otherwise → ErrState; a configured disk not
	// present → ErrState. A preparation for another migration id is
	// superseded.
	MigratePrepare(ctx context.Context, inst fsm.Instance, m Migration) (Result, error)
	// MigrateSend transfers the running instance from this node (the
	// source) to the prepared target at m.Peer; afterwards it no longer
	// runs here. Checks first: already sent for m.ID → no effect; not
	// running → ErrState.
	MigrateSend(ctx context.Context, inst fsm.Instance, m Migration) (Result, error)
	// MigrateFinish resumes the received instance on this node (the
	// target). Checks first: running here after migration m.ID → no
	// effect; not received for m.ID → ErrState.
	MigrateFinish(ctx context.Context, inst fsm.Instance, m Migration) (Result, error)
	// MigrateAbort gives migration m.ID up on this node. On the source it
	// keeps the instance running here and refuses (ErrState) once the
	// instance was sent: the target then holds the only copy and must be
	// finished. On the target it discards the prepared or received copy
	// and refuses (ErrState) once finished. Abort the source first. No
	// record of m.ID → no effect.
	MigrateAbort(ctx context.Context, inst fsm.Instance, m Migration) (Result, error)
}

// BridgeChecker is a driver that says, changing nothing, which bridges
// are missing on its node: Ganeti's bridges_exist, which the jobs ask
// before an instance with bridged NICs gets anything on the node
// (create, a NIC added or changed, a migration or failover target).
type BridgeChecker interface {
	// MissingBridges returns the names of bridges that are not on the
	// node, each with why ("does not exist", or what the interface of
	// that name is instead); an empty map when all are there.
	MissingBridges(ctx context.Context, names []string) (map[string]string, error)
}

// BridgeAbsent is MissingBridges's reason for a name no interface has.
const BridgeAbsent = "does not exist"

// StopOptions shape Stop.
type StopOptions struct {
	// Timeout bounds the graceful shutdown (0: DefaultShutdownTimeout).
	Timeout time.Duration
	// Force skips the graceful shutdown.
	Force bool
}

// DefaultShutdownTimeout is Ganeti's default shutdown_timeout.
const DefaultShutdownTimeout = 120 * time.Second

// Reboot types, Ganeti's.
const (
	RebootSoft = "soft"
	RebootHard = "hard"
	RebootFull = "full"
)

// RebootOptions shape Reboot.
type RebootOptions struct {
	OpID string // required: the reboot is done once per OpID
	Type string // soft, hard (default) or full
	// Timeout bounds the graceful shutdown before the restart (0:
	// DefaultShutdownTimeout), Ganeti's shutdown_timeout.
	Timeout time.Duration
	// Force skips the graceful shutdown (Ganeti's shutdown_timeout 0).
	Force bool
}

// check refuses options without an op id or of an unknown type, and sets
// the default type.
func (o *RebootOptions) check() error {
	if o.OpID == "" {
		return invalid("reboot needs an op id")
	}
	if o.Timeout < 0 {
		return invalid("negative reboot shutdown timeout")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultShutdownTimeout
	}
	switch o.Type {
	case "":
		o.Type = RebootHard
	case RebootSoft, RebootHard, RebootFull:
	default:
		return invalid("reboot type %q: want soft, hard or full", o.Type)
	}
	return nil
}

// Migration identifies one live migration, on either side.
type Migration struct {
	// ID is chosen by the caller and names the migration on both nodes.
	ID string `json:"id"`
	// PeerNode is the other node's name: the source for MigratePrepare,
	// the target for MigrateSend.
	PeerNode string `json:"peer_node,omitempty"`
	// Peer is the target's agent address (host:port), for MigrateSend.
	Peer string `json:"peer,omitempty"`
}

// MigrationState is a migration as one side records it.
type MigrationState struct {
	ID       string    `json:"id"`
	Role     string    `json:"role"`  // source or target
	Phase    string    `json:"phase"` // prepared, sending, sent, received, finished, aborted
	PeerNode string    `json:"peer_node,omitempty"`
	Peer     string    `json:"peer,omitempty"`
	Changed  time.Time `json:"changed"`
}

// Handoff is what a migration's source sends its target: the running
// instance's identity, which a live migration keeps (the boot id does not
// change), and the OS installed on its (replicated) disks.
type Handoff struct {
	Migration   string       `json:"migration"`
	Source      string       `json:"source"` // node name
	Instance    fsm.Instance `json:"instance"`
	BootID      string       `json:"boot_id"`
	OS          string       `json:"os,omitempty"`
	MemoryMiB   int64        `json:"memory"`
	Transferred time.Time    `json:"transferred"`
}

// DiskStatus is one disk's local storage.
type DiskStatus struct {
	UUID     string `json:"uuid"`
	SizeMiB  int64  `json:"size"`
	Attached bool   `json:"attached"`
	// Generation names the storage's incarnation: the op id of the last
	// replace, or "created".
	Generation string `json:"generation,omitempty"`
	// Path is the disk's file or device on this node, where the driver
	// has one (activate-disks answers it).
	Path string `json:"path,omitempty"`
	// DRBD is the device of a drbd disk on this node, nil for other
	// templates or while it is not set up.
	DRBD *fsm.DRBDDevice `json:"drbd,omitempty"`
}

// LastOp is the last operation that reached a driver for an instance.
type LastOp struct {
	Op      Op        `json:"op"`
	OpID    string    `json:"op_id,omitempty"`
	At      time.Time `json:"at"`
	Changed bool      `json:"changed"`
	Error   string    `json:"error,omitempty"`
}

// Status is an instance's record on one node.
type Status struct {
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	State State  `json:"state"`
	// Disks are the disks present on this node, in configuration order
	// (disks no longer in the configuration last).
	Disks []DiskStatus `json:"disks"`
	// OS is the installed OS ("" when none was installed here).
	OS string `json:"os,omitempty"`
	// BootID changes with every start or reboot and survives a live
	// migration; "" while not running.
	BootID    string          `json:"boot_id,omitempty"`
	Migration *MigrationState `json:"migration,omitempty"`
	LastOp    *LastOp         `json:"last_op,omitempty"`
	// MemoryMiB and VCPUs are what the running instance has, as the
	// driver knows it (0 when not running or not known).
	MemoryMiB int64 `json:"memory,omitempty"`
	VCPUs     int   `json:"vcpus,omitempty"`
	// Console is the unix socket of the running instance's serial
	// console on this node ("" when it has none: not running, or a
	// driver without consoles).
	Console string `json:"console,omitempty"`
}

// Disk returns the status of the disk with the given UUID, if present.
func (s Status) Disk(uuid string) (DiskStatus, bool) {
	for _, d := range s.Disks {
		if d.UUID == uuid {
			return d, true
		}
	}
	return DiskStatus{}, false
}

// Result is what an operation did.
type Result struct {
	// Changed is false when the state asked for was already there and
	// nothing was done.
	Changed bool `json:"changed"`
	// Output is what the operation printed (the exec driver's scripts:
	// stdout and stderr, bounded), for the job log.
	Output string `json:"output,omitempty"`
}

// Sentinel errors of drivers; returned errors wrap them.
var (
	ErrNotSupported = errors.New("operation not supported by this driver")
	ErrNotFound     = errors.New("not found on this node")
	ErrState        = errors.New("wrong state")
	ErrInvalid      = errors.New("invalid request")
	ErrInjected     = errors.New("injected failure")
)

// OpError is an operation that was attempted and failed; Output is what it
// printed.
type OpError struct {
	Op     Op
	Output string
	Err    error
}

func (e *OpError) Error() string {
	if e.Output == "" {
		return fmt.Sprintf("%s failed: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s failed: %v; output:\n%s", e.Op, e.Err, e.Output)
}

func (e *OpError) Unwrap() error { return e.Err }

func stateErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrState, fmt.Sprintf(format, args...))
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotFound, fmt.Sprintf(format, args...))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// configDisk finds the configured disk with UUID id.
func configDisk(inst fsm.Instance, id string) (fsm.Disk, int, error) {
	if id == "" {
		return fsm.Disk{}, -1, invalid("no disk UUID given")
	}
	for i, d := range inst.Disks {
		if d.UUID == id {
			return d, i, nil
		}
	}
	return fsm.Disk{}, -1, invalid("instance %s has no disk %s in its configuration", inst.Name, id)
}

// checkInstance refuses an instance without a UUID: records are keyed by
// it, and a UUID that could name a file outside the driver's directory.
func checkInstance(inst fsm.Instance) error {
	if !validID(inst.UUID) {
		return invalid("instance UUID %q is not a valid identifier", inst.UUID)
	}
	return nil
}

// validID accepts what can safely name a record file: 1–128 letters,
// digits, '-', '_' and '.', not starting with '.'.
func validID(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '.' {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
