package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// ExecConfig configures an Exec driver.
type ExecConfig struct {
	// HooksDir holds one executable per operation, named after it
	// (instance-start, instance-stop, disk-create, os-install, status,
	// ...; see Ops). A missing script makes its operation unsupported.
	HooksDir string
	// StateDir holds the driver's journal: per instance, the op ids done,
	// the migration under way and the last operation.
	StateDir string
	// Node is this node's name (GNT_NODE).
	Node string
	// Hypervisor is the HYPERVISOR value scripts get (default "exec").
	Hypervisor string
	// Timeout bounds one script run (default DefaultScriptTimeout);
	// Timeouts overrides it per operation. instance-stop gets at least
	// its shutdown timeout plus 30 s.
	Timeout  time.Duration
	Timeouts map[Op]time.Duration
	// MaxOutput bounds the output kept of one run (default 64 KiB); the
	// rest is dropped and counted.
	MaxOutput int
	Now       func() time.Time
}

// DefaultScriptTimeout bounds a script run unless configured otherwise.
const DefaultScriptTimeout = 5 * time.Minute

// killGrace is how long a killed script's pipes may stay open (held by a
// process that left its group) before the run gives up on them.
const killGrace = 2 * time.Second

// Exec runs operator scripts, one per operation, from a hooks directory.
//
// Each script gets the instance as environment variables (see scriptEnv:
// Ganeti's OS API names plus GNT_OP, GNT_NODE, GNT_OP_ID, GNT_DISK_UUID,
// GNT_DISK_INDEX, GNT_SHUTDOWN_TIMEOUT, GNT_FORCE, GNT_REBOOT_TYPE,
// GNT_MIGRATE_ID, GNT_MIGRATE_PEER, GNT_MIGRATE_PEER_NODE) and the request
// as JSON on stdin ({"op", "node", "instance", "disk", "op_id", "stop",
// "reboot", "migration"}). It runs in its own process group in HooksDir;
// at its timeout, or when the call is cancelled, the whole group is
// killed. Exit status 0 is success; anything else fails the operation with
// the output quoted.
//
// The status script prints one JSON object:
//
//	{"state": "running"|"stopped"|"absent"|"incoming"|"received",
//	 "disks": [{"uuid": "...", "size": 1024, "attached": true}],
//	 "os": "debian", "boot_id": "..."}
//
// (state required; unknown fields ignored), and the list script a JSON
// array of such objects, each with "uuid" and "name". Anything else fails
// the call with the output quoted.
//
// Idempotence: with a status script, each state-changing operation asks
// it first and does nothing when the state is already there (the checks
// of Driver); without one, the scripts are run unconditionally and must
// be idempotent themselves, as Ganeti expects of OS scripts. Operations
// done once per op id (reboot, disk-replace, os-install) and the
// migration steps are checked against the journal.
type Exec struct {
	cfg   ExecConfig
	store store
	locks locks
}

// execRecord is the journal of one instance.
type execRecord struct {
	Instance  fsm.Instance    `json:"instance"`
	DoneOps   []string        `json:"done_ops,omitempty"`
	Installed bool            `json:"installed,omitempty"`
	Migration *MigrationState `json:"migration,omitempty"`
	LastOp    *LastOp         `json:"last_op,omitempty"`
}

// NewExec checks the hooks directory and opens the journal.
func NewExec(cfg ExecConfig) (*Exec, error) {
	if cfg.HooksDir == "" {
		return nil, errors.New("exec driver: no hooks directory")
	}
	// A hooks directory that does not exist (yet) makes every operation
	// unsupported rather than stop the agent; one that is not a directory
	// is a mistake.
	if st, err := os.Stat(cfg.HooksDir); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("exec driver: %s is not a directory", cfg.HooksDir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("exec driver: hooks directory: %w", err)
	}
	s, err := newStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if cfg.Hypervisor == "" {
		cfg.Hypervisor = "exec"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultScriptTimeout
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 64 << 10
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Exec{cfg: cfg, store: s}, nil
}

// Name implements Driver.
func (e *Exec) Name() string { return "exec" }

// call is one script run's request, also its JSON stdin.
type call struct {
	Op        Op             `json:"op"`
	Node      string         `json:"node"`
	Instance  *fsm.Instance  `json:"instance,omitempty"`
	Disk      string         `json:"disk,omitempty"`
	OpID      string         `json:"op_id,omitempty"`
	Stop      *StopOptions   `json:"stop,omitempty"`
	Reboot    *RebootOptions `json:"reboot,omitempty"`
	Migration *Migration     `json:"migration,omitempty"`
	env       map[string]string
	timeout   time.Duration
}

func (e *Exec) script(op Op) (string, error) {
	p := filepath.Join(e.cfg.HooksDir, string(op))
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: no %s script in %s", ErrNotSupported, op, e.cfg.HooksDir)
	}
	if err != nil {
		return "", &OpError{Op: op, Err: err}
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", &OpError{Op: op, Err: fmt.Errorf("%s is not an executable file", p)}
	}
	return p, nil
}

func (e *Exec) has(op Op) bool {
	_, err := e.script(op)
	return err == nil
}

// run runs the script of c.Op and returns its combined output and its
// stdout alone.
func (e *Exec) run(ctx context.Context, c call) (output string, stdout []byte, err error) {
	path, err := e.script(c.Op)
	if err != nil {
		return "", nil, err
	}
	timeout := e.cfg.Timeout
	if t, ok := e.cfg.Timeouts[c.Op]; ok && t > 0 {
		timeout = t
	}
	timeout = max(timeout, c.timeout)
	c.Node = e.cfg.Node
	stdin, err := json.Marshal(c)
	if err != nil {
		return "", nil, &OpError{Op: c.Op, Err: err}
	}
	extra := map[string]string{"GNT_OP": string(c.Op), "GNT_NODE": e.cfg.Node}
	for k, v := range c.env {
		extra[k] = v
	}
	var inst fsm.Instance
	if c.Instance != nil {
		inst = *c.Instance
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, path)
	cmd.Dir = e.cfg.HooksDir
	cmd.Env = scriptEnv(e.cfg.Hypervisor, inst, extra)
	cmd.Stdin = bytes.NewReader(stdin)
	combined := &boundedBuffer{max: e.cfg.MaxOutput}
	out := &boundedBuffer{max: e.cfg.MaxOutput}
	cmd.Stdout = &teeWriter{combined, out}
	cmd.Stderr = &teeWriter{combined, nil}
	killGroupOnCancel(cmd)
	start := time.Now()
	runErr := cmd.Run()
	output = combined.String()
	if runErr == nil {
		return output, out.Bytes(), nil
	}
	var why error
	var exit *exec.ExitError
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		why = fmt.Errorf("%s timed out after %s; its process group was killed", path, timeout)
	case ctx.Err() != nil:
		why = fmt.Errorf("%s was cancelled after %s; its process group was killed: %w", path, time.Since(start).Round(time.Millisecond), ctx.Err())
	case errors.As(runErr, &exit):
		why = fmt.Errorf("%s exited with %s", path, exit.ProcessState)
	default:
		why = fmt.Errorf("%s: %w", path, runErr)
	}
	return output, out.Bytes(), &OpError{Op: c.Op, Err: why, Output: output}
}

// scriptStatus is what the status and list scripts print per instance.
type scriptStatus struct {
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	State string `json:"state"`
	Disks []struct {
		UUID     string `json:"uuid"`
		SizeMiB  int64  `json:"size"`
		Attached bool   `json:"attached"`
	} `json:"disks"`
	OS     string `json:"os"`
	BootID string `json:"boot_id"`
	// Memory (MiB) and VCPUs of the running instance, if the script
	// reports them.
	Memory int64 `json:"memory"`
	VCPUs  int   `json:"vcpus"`
}

const stateAbsent = "absent"

func (s scriptStatus) check() error {
	switch State(s.State) {
	case StateRunning, StateStopped, StateIncoming, StateReceived:
	case stateAbsent:
	case "":
		return errors.New(`no "state"`)
	default:
		return fmt.Errorf("unknown state %q", s.State)
	}
	for i, d := range s.Disks {
		if d.UUID == "" {
			return fmt.Errorf("disk %d has no uuid", i)
		}
	}
	if s.Memory < 0 || s.VCPUs < 0 {
		return fmt.Errorf("negative memory %d or vcpus %d", s.Memory, s.VCPUs)
	}
	return nil
}

func (s scriptStatus) disk(id string) (int64, bool, bool) {
	for _, d := range s.Disks {
		if d.UUID == id {
			return d.SizeMiB, d.Attached, true
		}
	}
	return 0, false, false
}

// probe asks the status script about inst; ok is false when there is no
// status script (then no check can be made).
func (e *Exec) probe(ctx context.Context, inst fsm.Instance) (st scriptStatus, ok bool, err error) {
	if !e.has(OpStatus) {
		return st, false, nil
	}
	out, stdout, err := e.run(ctx, call{Op: OpStatus, Instance: &inst})
	if err != nil {
		return st, true, err
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout), &st); err != nil {
		return st, true, &OpError{Op: OpStatus, Err: fmt.Errorf("the status script printed no valid status JSON: %v", err), Output: out}
	}
	if err := st.check(); err != nil {
		return st, true, &OpError{Op: OpStatus, Err: fmt.Errorf("the status script printed a bad status: %v", err), Output: out}
	}
	return st, true, nil
}

func (e *Exec) toStatus(st scriptStatus, rec *execRecord, inst fsm.Instance) Status {
	out := Status{UUID: inst.UUID, Name: inst.Name, State: State(st.State), OS: st.OS, BootID: st.BootID, Disks: []DiskStatus{}}
	if st.UUID != "" {
		out.UUID = st.UUID
	}
	if st.Name != "" {
		out.Name = st.Name
	}
	for _, d := range st.Disks {
		out.Disks = append(out.Disks, DiskStatus{UUID: d.UUID, SizeMiB: d.SizeMiB, Attached: d.Attached})
	}
	if out.State == StateRunning {
		out.MemoryMiB, out.VCPUs = st.Memory, st.VCPUs
	}
	if rec != nil {
		if out.Name == "" {
			out.Name = rec.Instance.Name
		}
		if rec.Migration != nil {
			m := *rec.Migration
			out.Migration = &m
		}
		out.LastOp = rec.LastOp
	}
	return out
}

// Status implements Driver: the status script's answer with the journal's
// migration and last operation.
func (e *Exec) Status(ctx context.Context, inst fsm.Instance) (Status, error) {
	if err := checkInstance(inst); err != nil {
		return Status{}, err
	}
	var rec execRecord
	known, err := e.store.load(inst.UUID, &rec)
	if err != nil {
		return Status{}, &OpError{Op: OpStatus, Err: err}
	}
	if known && inst.Name == "" {
		inst = rec.Instance
	}
	if _, err := e.script(OpStatus); err != nil {
		return Status{}, err
	}
	st, _, err := e.probe(ctx, inst)
	if err != nil {
		return Status{}, err
	}
	if st.State == stateAbsent {
		return Status{}, notFound("instance %s", inst.UUID)
	}
	var r *execRecord
	if known {
		r = &rec
	}
	return e.toStatus(st, r, inst), nil
}

// List implements Driver with the list script.
func (e *Exec) List(ctx context.Context) ([]Status, error) {
	out, stdout, err := e.run(ctx, call{Op: OpList})
	if err != nil {
		return nil, err
	}
	var sts []scriptStatus
	if err := json.Unmarshal(bytes.TrimSpace(stdout), &sts); err != nil {
		return nil, &OpError{Op: OpList, Err: fmt.Errorf("the list script printed no JSON array of statuses: %v", err), Output: out}
	}
	res := []Status{}
	for i, st := range sts {
		if err := st.check(); err != nil {
			return nil, &OpError{Op: OpList, Err: fmt.Errorf("the list script's entry %d: %v", i, err), Output: out}
		}
		if !validID(st.UUID) {
			return nil, &OpError{Op: OpList, Err: fmt.Errorf("the list script's entry %d has no valid uuid", i), Output: out}
		}
		if st.State == stateAbsent {
			continue
		}
		var rec execRecord
		known, _ := e.store.load(st.UUID, &rec)
		var r *execRecord
		if known {
			r = &rec
		}
		res = append(res, e.toStatus(st, r, fsm.Instance{UUID: st.UUID, Name: st.Name}))
	}
	return res, nil
}

// step is one operation of the exec driver: check decides from the status
// (when there is a status script) and the journal whether there is
// anything to do; then the script runs; then note updates the journal.
type step struct {
	op   Op
	inst fsm.Instance
	c    call
	opID string // done once per op id when set
	// doneID, when set, is what the journal notes done instead of
	// opID (a disk replace: once per disk and op id).
	doneID string
	check  func(st *scriptStatus, rec *execRecord) (skip string, err error)
	note   func(rec *execRecord)
}

func (e *Exec) do(ctx context.Context, s step) (Result, error) {
	if err := checkInstance(s.inst); err != nil {
		return Result{}, err
	}
	if _, err := e.script(s.op); err != nil {
		return Result{}, err
	}
	unlock, err := e.locks.lock(ctx, s.inst.UUID)
	if err != nil {
		return Result{}, &OpError{Op: s.op, Err: err}
	}
	defer unlock()
	var rec execRecord
	known, err := e.store.load(s.inst.UUID, &rec)
	if err != nil {
		return Result{}, &OpError{Op: s.op, Err: err}
	}
	if !known {
		rec = execRecord{Instance: s.inst}
	}
	journal := func(changed bool, failure error) {
		rec.Instance = s.inst
		rec.LastOp = lastOp(s.op, s.opID, e.cfg.Now(), changed, failure)
		e.store.save(s.inst.UUID, &rec)
	}
	done := s.opID
	if s.doneID != "" {
		done = s.doneID
	}
	if done != "" && opDone(rec.DoneOps, s.op, done) {
		journal(false, nil)
		return Result{Output: fmt.Sprintf("already done for %s", s.opID)}, nil
	}
	var st *scriptStatus
	if s.check != nil {
		probed, ok, err := e.probe(ctx, s.inst)
		if err != nil {
			journal(false, err)
			return Result{}, err
		}
		if ok {
			st = &probed
		}
		skip, err := s.check(st, &rec)
		if err != nil {
			journal(false, err)
			return Result{}, err
		}
		if skip != "" {
			journal(false, nil)
			return Result{Output: skip}, nil
		}
	}
	s.c.Op, s.c.Instance, s.c.OpID = s.op, &s.inst, s.opID
	if s.c.env == nil {
		s.c.env = map[string]string{}
	}
	if s.opID != "" {
		s.c.env["GNT_OP_ID"] = s.opID
	}
	// The journal says what is being attempted (a migration's "sending")
	// before the script runs, so a crash meanwhile leaves it visible.
	if err := e.store.save(s.inst.UUID, &rec); err != nil {
		return Result{}, &OpError{Op: s.op, Err: err}
	}
	out, _, err := e.run(ctx, s.c)
	if err != nil {
		journal(false, err)
		return Result{}, err
	}
	rec.DoneOps = noteDone(rec.DoneOps, s.op, done)
	if s.note != nil {
		s.note(&rec)
	}
	journal(true, nil)
	return Result{Changed: true, Output: out}, nil
}

func running(st *scriptStatus) bool { return st != nil && State(st.State) == StateRunning }

// Start implements Driver.
func (e *Exec) Start(ctx context.Context, inst fsm.Instance) (Result, error) {
	return e.do(ctx, step{op: OpStart, inst: inst, check: func(st *scriptStatus, _ *execRecord) (string, error) {
		if st == nil {
			return "", nil
		}
		switch State(st.State) {
		case StateRunning:
			return "already running", nil
		case StateIncoming, StateReceived:
			return "", stateErr("instance %s is %s here; finish or abort the migration first", inst.Name, st.State)
		}
		return "", nil
	}})
}

// Stop implements Driver.
func (e *Exec) Stop(ctx context.Context, inst fsm.Instance, o StopOptions) (Result, error) {
	if o.Timeout < 0 {
		return Result{}, invalid("negative stop timeout")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultShutdownTimeout
	}
	env := map[string]string{"GNT_SHUTDOWN_TIMEOUT": strconv.Itoa(int(o.Timeout / time.Second)), "GNT_FORCE": "0"}
	if o.Force {
		env["GNT_FORCE"] = "1"
	}
	return e.do(ctx, step{op: OpStop, inst: inst, c: call{Stop: &o, env: env, timeout: o.Timeout + 30*time.Second},
		check: func(st *scriptStatus, _ *execRecord) (string, error) {
			if st == nil {
				return "", nil
			}
			switch State(st.State) {
			case StateRunning:
				return "", nil
			case StateIncoming, StateReceived:
				return "", stateErr("instance %s is %s here; abort the migration instead", inst.Name, st.State)
			}
			return "not running", nil
		}})
}

// Reboot implements Driver.
func (e *Exec) Reboot(ctx context.Context, inst fsm.Instance, o RebootOptions) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	env := map[string]string{"GNT_REBOOT_TYPE": o.Type, "GNT_SHUTDOWN_TIMEOUT": strconv.Itoa(int(o.Timeout / time.Second)), "GNT_FORCE": "0"}
	if o.Force {
		env["GNT_FORCE"] = "1"
	}
	return e.do(ctx, step{op: OpReboot, inst: inst, opID: o.OpID,
		c: call{Reboot: &o, env: env, timeout: o.Timeout + 30*time.Second}})
}

// Remove implements Driver; the journal of the instance goes with it.
func (e *Exec) Remove(ctx context.Context, inst fsm.Instance) (Result, error) {
	res, err := e.do(ctx, step{op: OpRemove, inst: inst, check: func(st *scriptStatus, _ *execRecord) (string, error) {
		if st == nil {
			return "", nil
		}
		switch State(st.State) {
		case stateAbsent:
			return "not known on this node", nil
		case StateStopped:
			return "", nil
		}
		return "", stateErr("instance %s is %s here; stop it (or end its migration) first", inst.Name, st.State)
	}})
	if err == nil {
		if rerr := e.store.remove(inst.UUID); rerr != nil {
			return res, &OpError{Op: OpRemove, Err: rerr, Output: res.Output}
		}
	}
	return res, err
}

func diskEnv(i int, disk string) map[string]string {
	return map[string]string{"GNT_DISK_UUID": disk, "GNT_DISK_INDEX": strconv.Itoa(i)}
}

// DiskCreate implements Driver.
func (e *Exec) DiskCreate(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	cd, i, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	return e.do(ctx, step{op: OpDiskCreate, inst: inst, c: call{Disk: disk, env: diskEnv(i, disk)},
		check: func(st *scriptStatus, _ *execRecord) (string, error) {
			if st == nil {
				return "", nil
			}
			if size, _, ok := st.disk(disk); ok {
				if size != cd.SizeMiB {
					return "", stateErr("disk %s is present with %d MiB, not the configured %d MiB", disk, size, cd.SizeMiB)
				}
				return "already present", nil
			}
			return "", nil
		}})
}

// DiskRemove implements Driver.
func (e *Exec) DiskRemove(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if disk == "" {
		return Result{}, invalid("no disk UUID given")
	}
	i := -1
	if _, idx, err := configDisk(inst, disk); err == nil {
		i = idx
	}
	return e.do(ctx, step{op: OpDiskRemove, inst: inst, c: call{Disk: disk, env: diskEnv(i, disk)},
		check: func(st *scriptStatus, _ *execRecord) (string, error) {
			if st == nil {
				return "", nil
			}
			_, attached, ok := st.disk(disk)
			if !ok {
				return "not present", nil
			}
			if attached && State(st.State) != StateStopped {
				return "", stateErr("disk %s is attached to instance %s, which is %s here; detach it first", disk, inst.Name, st.State)
			}
			return "", nil
		}})
}

// DiskAttach implements Driver.
func (e *Exec) DiskAttach(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	_, i, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	return e.do(ctx, step{op: OpDiskAttach, inst: inst, c: call{Disk: disk, env: diskEnv(i, disk)},
		check: func(st *scriptStatus, _ *execRecord) (string, error) {
			if st == nil {
				return "", nil
			}
			_, attached, ok := st.disk(disk)
			switch {
			case !ok:
				return "", notFound("disk %s is not present on this node", disk)
			case attached:
				return "already attached", nil
			}
			return "", nil
		}})
}

// DiskDetach implements Driver.
func (e *Exec) DiskDetach(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if disk == "" {
		return Result{}, invalid("no disk UUID given")
	}
	i := -1
	if _, idx, err := configDisk(inst, disk); err == nil {
		i = idx
	}
	return e.do(ctx, step{op: OpDiskDetach, inst: inst, c: call{Disk: disk, env: diskEnv(i, disk)},
		check: func(st *scriptStatus, _ *execRecord) (string, error) {
			if st == nil {
				return "", nil
			}
			if _, attached, ok := st.disk(disk); !ok || !attached {
				return "not attached", nil
			}
			return "", nil
		}})
}

// DiskReplace implements Driver.
func (e *Exec) DiskReplace(ctx context.Context, inst fsm.Instance, disk, opID string) (Result, error) {
	if opID == "" {
		return Result{}, invalid("disk replace needs an op id")
	}
	_, i, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	return e.do(ctx, step{op: OpDiskReplace, inst: inst, opID: opID, doneID: opID + "/" + disk, c: call{Disk: disk, env: diskEnv(i, disk)},
		check: func(st *scriptStatus, _ *execRecord) (string, error) {
			if st == nil {
				return "", nil
			}
			if _, _, ok := st.disk(disk); !ok {
				return "", notFound("disk %s is not present on this node", disk)
			}
			return "", nil
		}})
}

// DiskGrow implements Driver: the disk-grow script gets the grown size
// in the instance's DISK_<i>_SIZE (MiB).
func (e *Exec) DiskGrow(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	cd, i, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	return e.do(ctx, step{op: OpDiskGrow, inst: inst, c: call{Disk: disk, env: diskEnv(i, disk)},
		check: func(st *scriptStatus, _ *execRecord) (string, error) {
			if st == nil {
				return "", nil
			}
			size, _, ok := st.disk(disk)
			switch {
			case !ok:
				return "", notFound("disk %s is not present on this node", disk)
			case size == cd.SizeMiB:
				return "already grown", nil
			case size > cd.SizeMiB:
				return "", stateErr("disk %s has %d MiB, more than the configured %d MiB; disks do not shrink", disk, size, cd.SizeMiB)
			}
			return "", nil
		}})
}

// InstallOS implements Driver. INSTANCE_REINSTALL=1 is set when this
// driver installed an OS for the instance before, or the status script
// reports one.
func (e *Exec) InstallOS(ctx context.Context, inst fsm.Instance, opID string) (Result, error) {
	if opID == "" {
		return Result{}, invalid("OS install needs an op id")
	}
	if inst.OS == "" {
		return Result{}, invalid("instance %s has no OS to install", inst.Name)
	}
	c := call{env: map[string]string{}}
	return e.do(ctx, step{op: OpOSInstall, inst: inst, opID: opID, c: c,
		check: func(st *scriptStatus, rec *execRecord) (string, error) {
			if rec.Installed || st != nil && st.OS != "" {
				c.env["INSTANCE_REINSTALL"] = "1"
			}
			if st != nil && State(st.State) != StateStopped && st.State != stateAbsent {
				return "", stateErr("instance %s is %s here; stop it first", inst.Name, st.State)
			}
			return "", nil
		},
		note: func(rec *execRecord) { rec.Installed = true }})
}

func (e *Exec) migration(m Migration, role, phase string) *MigrationState {
	return &MigrationState{ID: m.ID, Role: role, Phase: phase, PeerNode: m.PeerNode, Peer: m.Peer, Changed: e.cfg.Now().UTC()}
}

func migrationEnv(m Migration) map[string]string {
	return map[string]string{"GNT_MIGRATE_ID": m.ID, "GNT_MIGRATE_PEER": m.Peer, "GNT_MIGRATE_PEER_NODE": m.PeerNode}
}

func (r *execRecord) is(id, role string, phases ...string) bool {
	return r.Migration != nil && r.Migration.ID == id && r.Migration.Role == role && slices.Contains(phases, r.Migration.Phase)
}

// MigratePrepare implements Driver (script migrate-prepare).
func (e *Exec) MigratePrepare(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	return e.do(ctx, step{op: OpMigratePrepare, inst: inst, c: call{Migration: &m, env: migrationEnv(m)},
		check: func(st *scriptStatus, rec *execRecord) (string, error) {
			if rec.is(m.ID, RoleTarget, PhasePrepared, PhaseReceived, PhaseFinished) {
				return "already " + rec.Migration.Phase + " for migration " + m.ID, nil
			}
			if running(st) {
				return "", stateErr("instance %s is already running on this node", inst.Name)
			}
			return "", nil
		},
		note: func(rec *execRecord) { rec.Migration = e.migration(m, RoleTarget, PhasePrepared) }})
}

// MigrateSend implements Driver (script migrate-send, given the target's
// agent address and name in GNT_MIGRATE_PEER and GNT_MIGRATE_PEER_NODE).
func (e *Exec) MigrateSend(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" || m.Peer == "" {
		return Result{}, invalid("migrate-send needs a migration id and the target's address")
	}
	return e.do(ctx, step{op: OpMigrateSend, inst: inst, c: call{Migration: &m, env: migrationEnv(m)},
		check: func(st *scriptStatus, rec *execRecord) (string, error) {
			if rec.is(m.ID, RoleSource, PhaseSent) {
				return "already sent to " + rec.Migration.PeerNode, nil
			}
			if st != nil && !running(st) {
				return "", stateErr("instance %s is %s on this node, not running; nothing to migrate", inst.Name, st.State)
			}
			rec.Migration = e.migration(m, RoleSource, PhaseSending)
			return "", nil
		},
		note: func(rec *execRecord) { rec.Migration = e.migration(m, RoleSource, PhaseSent) }})
}

// MigrateFinish implements Driver (script migrate-finish).
func (e *Exec) MigrateFinish(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	return e.do(ctx, step{op: OpMigrateFinish, inst: inst, c: call{Migration: &m, env: migrationEnv(m)},
		check: func(_ *scriptStatus, rec *execRecord) (string, error) {
			switch {
			case rec.is(m.ID, RoleTarget, PhaseFinished):
				return "already finished", nil
			case rec.is(m.ID, RoleTarget, PhasePrepared, PhaseReceived):
				return "", nil
			}
			return "", stateErr("this node has no migration %s of instance %s", m.ID, inst.Name)
		},
		note: func(rec *execRecord) { rec.Migration = e.migration(m, RoleTarget, PhaseFinished) }})
}

// MigrateAbort implements Driver (script migrate-abort, given the side in
// GNT_MIGRATE_ROLE).
func (e *Exec) MigrateAbort(ctx context.Context, inst fsm.Instance, m Migration) (Result, error) {
	if m.ID == "" {
		return Result{}, invalid("no migration id")
	}
	env := migrationEnv(m)
	var role string
	return e.do(ctx, step{op: OpMigrateAbort, inst: inst, c: call{Migration: &m, env: env},
		check: func(_ *scriptStatus, rec *execRecord) (string, error) {
			if rec.Migration == nil || rec.Migration.ID != m.ID || rec.Migration.Phase == PhaseAborted {
				return "nothing to abort", nil
			}
			role = rec.Migration.Role
			env["GNT_MIGRATE_ROLE"] = role
			switch {
			case role == RoleSource && rec.Migration.Phase == PhaseSent:
				return "", stateErr("migration %s was sent to %s, which holds the only copy; finish it there", m.ID, rec.Migration.PeerNode)
			case role == RoleTarget && rec.Migration.Phase == PhaseFinished:
				return "", stateErr("migration %s finished; the instance runs here", m.ID)
			}
			return "", nil
		},
		note: func(rec *execRecord) {
			rec.Migration = e.migration(m, role, PhaseAborted)
		}})
}

var _ Driver = (*Exec)(nil)

// boundedBuffer keeps the first max bytes written and counts the rest.
type boundedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	dropped int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - b.buf.Len()
	if room >= len(p) {
		b.buf.Write(p)
	} else {
		if room > 0 {
			b.buf.Write(p[:room])
		}
		b.dropped += len(p) - max(room, 0)
	}
	return len(p), nil
}

func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if b.dropped > 0 {
		s += fmt.Sprintf("\n[... %d more bytes of output dropped]", b.dropped)
	}
	return s
}

// teeWriter writes to the combined buffer and, for stdout, to its own.
type teeWriter struct{ all, own *boundedBuffer }

func (t *teeWriter) Write(p []byte) (int, error) {
	t.all.Write(p)
	if t.own != nil {
		t.own.Write(p)
	}
	return len(p), nil
}

// killGroupOnCancel runs cmd in its own process group and, when its
// context ends, kills the whole group (a script's children die with it),
// waiting at most killGrace for its output.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = killGrace
}
