package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
)

// KVMConfig configures a KVM driver.
type KVMConfig struct {
	// Dir holds the records (<Dir>/<uuid>.json) and each instance's
	// runtime files (<Dir>/run/<uuid>/: qmp.sock, serial.sock, qemu.pid).
	Dir string
	// Node is this node's name; Addr the address incoming migrations
	// listen on (the node's address).
	Node string
	Addr string
	// QEMU and QEMUImg are the programs (default qemu-system-x86_64 and
	// qemu-img, looked up in PATH).
	QEMU    string
	QEMUImg string
	// FileStorageDir holds the disks of template file
	// (<dir>/<instance uuid>/<disk uuid>.img); SharedFileStorageDir those
	// of template sharedfile, a directory every node mounts at the same
	// place. Empty: the template is refused.
	FileStorageDir       string
	SharedFileStorageDir string
	// VolumeGroup holds the disks of template plain (logical volumes,
	// kvm_lvm.go); empty: plain is refused. LVM runs the LVM tools (nil:
	// RunLVM).
	VolumeGroup string
	LVM         LVMRunner
	// DRBD runs drbdsetup and drbdmeta for the disks of template drbd
	// (kvm_drbd.go; nil: RunDRBD), whose volumes are in VolumeGroup.
	// ProcDRBD is where the kernel lists DRBD's devices (empty:
	// /proc/drbd), SysBlock where it lists block devices with their
	// sizes (empty: /sys/block).
	DRBD     DRBDRunner
	ProcDRBD string
	SysBlock string
	// Accel forces the accelerator (AccelKVM or AccelTCG); empty probes
	// KVM once (ProbeTimeout, default 15 s) and falls back to TCG.
	Accel        string
	ProbeTimeout time.Duration
	// Info and Warn log (nil: not logged).
	Info, Warn func(msg string, kv ...any)
	// OS, when set, makes InstallOS run the instance's OS definition's
	// create script (osdef.Config.Install) on the disks' files as
	// DISK_<n>_PATH. Without it only noop (which installs nothing) is
	// accepted.
	OS *osdef.Config
	// NetNS, when set, is the network namespace (ip netns) the guests'
	// qemu processes and their taps live in; empty: the node's own.
	NetNS string
}

// KVM runs each instance as a qemu-system-x86_64 process controlled
// through QMP. The processes are daemonized, so they outlive gntd; a
// restarted driver finds them again from their pid files and QMP
// sockets.
type KVM struct {
	cfg   KVMConfig
	store store
	locks locks

	probeDone chan struct{}
	accel     string // after probeDone
	accelWhy  string

	send KVMSend

	// netAdmin is whether gntd may create tap devices (CAP_NET_ADMIN),
	// checked once at start; netAdminWhy says so or why not.
	netAdmin    bool
	netAdminWhy string
	// sysNet is where the kernel lists the node's interfaces
	// (/sys/class/net): the taps are looked for there before the ip
	// command is run to delete them.
	sysNet string
	// uids hands out the uids of guests of security_model=pool
	// (uidpool.go), lock files in <Dir>/run/uid-pool.
	uids uidLocks
}

// kvmRecord is an instance as the kvm driver stores it. Whether it runs
// is not stored: it is its qemu process being alive.
type kvmRecord struct {
	Instance  fsm.Instance    `json:"instance"`
	State     State           `json:"state"` // what was last asked: stopped, running, incoming, received
	BootID    string          `json:"boot_id,omitempty"`
	Disks     []DiskStatus    `json:"disks"` // created here; presence is the file's
	OS        string          `json:"os,omitempty"`
	DoneOps   []string        `json:"done_ops,omitempty"`
	Migration *MigrationState `json:"migration,omitempty"`
	LastOp    *LastOp         `json:"last_op,omitempty"`
	RunMemory int64           `json:"run_memory,omitempty"`
	RunVCPUs  int             `json:"run_vcpus,omitempty"`
	Accel     string          `json:"accel,omitempty"`
	// Incoming is the address the target of a migration listens on.
	Incoming string `json:"incoming,omitempty"`
}

// NewKVM opens (creating) the driver's directory and starts the
// accelerator probe, which Start waits for.
func NewKVM(cfg KVMConfig) (*KVM, error) {
	st, err := newStore(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "run"), 0o700); err != nil {
		return nil, err
	}
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	if cfg.QEMUImg == "" {
		cfg.QEMUImg = "qemu-img"
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 15 * time.Second
	}
	for _, d := range []string{cfg.FileStorageDir, cfg.SharedFileStorageDir} {
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("kvm: storage directory %q is not absolute", d)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("kvm: storage directory: %w", err)
		}
	}
	switch cfg.Accel {
	case "", AccelKVM, AccelTCG:
	default:
		return nil, fmt.Errorf("kvm: accelerator %q: want kvm, tcg or empty (probe)", cfg.Accel)
	}
	k := &KVM{cfg: cfg, store: st, probeDone: make(chan struct{}),
		uids: uidLocks{dir: filepath.Join(cfg.Dir, "run", "uid-pool"), inUse: procUIDInUse}, sysNet: "/sys/class/net"}
	k.netAdmin, k.netAdminWhy = probeNetAdmin()
	if !k.netAdmin {
		k.warn("kvm driver: "+k.netAdminWhy, "node", cfg.Node)
	}
	go k.probe()
	return k, nil
}

func (k *KVM) info(msg string, kv ...any) {
	if k.cfg.Info != nil {
		k.cfg.Info(msg, kv...)
	}
}

func (k *KVM) warn(msg string, kv ...any) {
	if k.cfg.Warn != nil {
		k.cfg.Warn(msg, kv...)
	}
}

func (k *KVM) probe() {
	defer close(k.probeDone)
	if _, err := exec.LookPath(k.cfg.QEMU); err != nil {
		k.accel, k.accelWhy = AccelTCG, fmt.Sprintf("%s not found: %v", k.cfg.QEMU, err)
		k.warn("kvm driver: QEMU is not installed; starting guests will fail", "qemu", k.cfg.QEMU, "error", err)
		return
	}
	if k.cfg.Accel != "" {
		k.accel, k.accelWhy = k.cfg.Accel, "forced by the configuration"
		k.info("kvm driver: accelerator set", "accel", k.accel)
		return
	}
	start := time.Now()
	ok, why := probeAccel(context.Background(), k.cfg.QEMU, "/dev/kvm", probeKernel(), k.cfg.ProbeTimeout)
	if ok {
		k.accel, k.accelWhy = AccelKVM, why
		k.info("kvm driver: guests run under KVM", "probe", why, "took", time.Since(start).Round(time.Millisecond))
		return
	}
	k.accel, k.accelWhy = AccelTCG, why
	k.warn("kvm driver: KVM is not usable, guests run under TCG (emulation, slow)", "probe", why, "took", time.Since(start).Round(time.Millisecond))
}

// Accel is the accelerator guests get by default here (kvm or tcg) and
// why, waiting for the start-up probe within ctx.
func (k *KVM) Accel(ctx context.Context) (accel, why string, err error) {
	select {
	case <-k.probeDone:
		return k.accel, k.accelWhy, nil
	case <-ctx.Done():
		return "", "", fmt.Errorf("waiting for the KVM probe: %w", ctx.Err())
	}
}

// Accelerator is the accelerator guests get by default here and why,
// without waiting: "" while the probe runs.
func (k *KVM) Accelerator() (accel, why string) {
	select {
	case <-k.probeDone:
		return k.accel, k.accelWhy
	default:
		return "", "probing KVM"
	}
}

// Name implements Driver.
func (k *KVM) Name() string { return "kvm" }

func (k *KVM) runDir(uuid string) string  { return filepath.Join(k.cfg.Dir, "run", uuid) }
func (k *KVM) pidFile(uuid string) string { return filepath.Join(k.runDir(uuid), "qemu.pid") }
func (k *KVM) qmpPath(uuid string) string { return filepath.Join(k.runDir(uuid), "qmp.sock") }

// SerialPath is the unix socket of the instance's serial console on
// this node (while it runs).
func (k *KVM) SerialPath(uuid string) string { return filepath.Join(k.runDir(uuid), "serial.sock") }

// pid is the instance's live qemu, 0 when none.
func (k *KVM) pid(uuid string) int { return qemuPID(k.pidFile(uuid), uuid) }

// uidFile holds the pool uid the instance's qemu runs under (absent: not
// a pool uid), so that the uid is released when the qemu ends, whichever
// gntd ends it.
func (k *KVM) uidFile(uuid string) string { return filepath.Join(k.runDir(uuid), "pool-uid") }

// dropRunDir removes the instance's runtime files, returning the pool uid
// its qemu ran under (if any) to the pool. Call it only when the qemu is
// not running.
func (k *KVM) dropRunDir(uuid string) error {
	if data, err := os.ReadFile(k.uidFile(uuid)); err == nil {
		if uid, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && uid > 0 {
			if err := k.uids.releaseUID(uid); err != nil {
				return err
			}
		}
	}
	return os.RemoveAll(k.runDir(uuid))
}

// runAs is the user the instance's qemu runs as, by its security_model
// (Ganeti's): none, gntd's own; user, security_domain (a user of the
// node); pool, an unused uid of the cluster's uid pool (sent with the
// request, WithUIDPool), taken and locked here: the caller unlocks it
// once qemu runs, or releases it. The result is -runas's argument ("":
// none).
func (k *KVM) runAs(ctx context.Context, inst fsm.Instance, p kvmParams) (string, *lockedUID, error) {
	model, domain := p.str("security_model"), p.str("security_domain")
	switch model {
	case "user":
		if domain == "" {
			return "", nil, invalid("security_model=user needs security_domain, the user qemu runs as")
		}
		u, err := user.Lookup(domain)
		if err != nil {
			return "", nil, stateErr("security_domain %q of instance %s: %v on node %s", domain, inst.Name, err, k.cfg.Node)
		}
		if u.Uid == "0" {
			return "", nil, invalid("security_domain %q is root; security_model=user is for running qemu unprivileged (use none)", domain)
		}
		return domain, nil, nil
	case "pool":
		if domain != "" {
			return "", nil, invalid("security_domain must be empty with security_model=pool (it is %q)", domain)
		}
		l, err := k.uids.request(uidPoolFrom(ctx))
		if err != nil {
			return "", nil, stateErr("instance %s (security_model=pool) on node %s: %v; nothing was started", inst.Name, k.cfg.Node, err)
		}
		// QEMU takes a numeric "uid:gid"; the guest's group is its uid
		// (QEMU sets no supplementary groups then).
		return fmt.Sprintf("%d:%d", l.uid, l.uid), l, nil
	default:
		if domain != "" {
			return "", nil, invalid("security_domain must be empty with security_model=none (it is %q)", domain)
		}
		return "", nil, nil
	}
}

// diskPath is where the disk's storage is for the instance's template:
// its file, raw (.img) or qcow2 (.qcow2), whichever is present, else the
// file of the format new disks get (kvm_qcow2.go).
func (k *KVM) diskPath(inst fsm.Instance, disk string) (string, error) {
	if !validID(disk) {
		return "", invalid("disk UUID %q is not a valid identifier", disk)
	}
	var dir string
	switch inst.DiskTemplate {
	case fsm.DTPlain:
		vg, err := k.volumeGroup()
		if err != nil {
			return "", err
		}
		return "/dev/" + vg + "/" + lvName(inst.UUID, disk), nil
	case fsm.DTDrbd:
		return k.drbdPath(inst, disk)
	case "file":
		dir = k.cfg.FileStorageDir
	case "sharedfile":
		dir = k.cfg.SharedFileStorageDir
	case fsm.DTDiskless:
		return "", invalid("instance %s is diskless", inst.Name)
	default:
		return "", fmt.Errorf("%w: disk template %q (the kvm driver has drbd, plain, file, sharedfile and diskless)", ErrNotSupported, inst.DiskTemplate)
	}
	if dir == "" {
		return "", fmt.Errorf("%w: no %s storage directory is configured on node %s", ErrNotSupported, inst.DiskTemplate, k.cfg.Node)
	}
	base := filepath.Join(dir, inst.UUID, disk)
	for _, f := range []string{fsm.DiskFormatRaw, fsm.DiskFormatQcow2} {
		if _, err := os.Stat(base + diskExt[f]); err == nil {
			return base + diskExt[f], nil
		}
	}
	f, err := newDiskFormat(inst)
	if err != nil {
		return "", err
	}
	return base + diskExt[f], nil
}

// diskSize is the size in MiB of the disk's file (a qcow2 image's virtual
// size), -1 when absent.
func diskSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	if diskFileFormat(path) == fsm.DiskFormatQcow2 {
		n, err := qcow2FileSize(path)
		return n >> 20, err
	}
	return fi.Size() >> 20, nil
}

// mutate runs one operation under the instance's lock: load, decide,
// save (a nil record after the decision removes it).
func (k *KVM) mutate(ctx context.Context, op Op, inst fsm.Instance, opID string, fn func(rec **kvmRecord) (bool, string, error)) (Result, error) {
	if err := checkInstance(inst); err != nil {
		return Result{}, err
	}
	unlock, err := k.locks.lock(ctx, inst.UUID)
	if err != nil {
		return Result{}, &OpError{Op: op, Err: err}
	}
	defer unlock()
	var stored kvmRecord
	var rec *kvmRecord
	ok, err := k.store.load(inst.UUID, &stored)
	if err != nil {
		return Result{}, &OpError{Op: op, Err: err}
	}
	if ok {
		rec = &stored
	}
	work := rec
	changed, out, err := fn(&work)
	if err != nil {
		if rec != nil {
			rec.LastOp = lastOp(op, opID, time.Now(), false, err)
			k.store.save(inst.UUID, rec)
		}
		return Result{}, err
	}
	if work != nil {
		work.Instance = inst
		if changed {
			work.DoneOps = noteDone(work.DoneOps, op, opID)
		}
		work.LastOp = lastOp(op, opID, time.Now(), changed, nil)
	}
	if err := settle(k.store, op, inst.UUID, rec != nil, work); err != nil {
		return Result{}, err
	}
	return Result{Changed: changed, Output: out}, nil
}

func (r *kvmRecord) done(op Op, opID string) bool {
	return r != nil && opDone(r.DoneOps, op, opID)
}

func (r *kvmRecord) disk(id string) *DiskStatus {
	if r == nil {
		return nil
	}
	return findDisk(r.Disks, id)
}

// noteDisk makes the record list a disk present here.
func (r *kvmRecord) noteDisk(id string, size int64) *DiskStatus {
	if d := r.disk(id); d != nil {
		d.SizeMiB = size
		return d
	}
	r.Disks = append(r.Disks, DiskStatus{UUID: id, SizeMiB: size, Generation: "created"})
	return &r.Disks[len(r.Disks)-1]
}

func newKVMRecord(inst fsm.Instance) *kvmRecord {
	return &kvmRecord{Instance: inst, State: StateStopped, Disks: []DiskStatus{}}
}

// missingDisk names the first configured disk whose storage is absent.
func (k *KVM) missingDisk(ctx context.Context, inst fsm.Instance) (string, error) {
	sizes := k.newDiskSizes()
	for _, d := range inst.Disks {
		p, err := k.diskPath(inst, d.UUID)
		if err != nil {
			return "", err
		}
		sz, err := sizes.size(ctx, inst, d.UUID, p)
		if err != nil {
			return "", err
		}
		if sz < 0 {
			return d.UUID, nil
		}
	}
	return "", nil
}

// status builds the Status of a record from what is on this node: the
// disks' storage (as sizes says), whether its qemu lives, and (when it
// does) QMP.
func (k *KVM) status(ctx context.Context, r *kvmRecord, sizes *diskSizes) Status {
	inst := r.Instance
	st := Status{UUID: inst.UUID, Name: inst.Name, OS: r.OS, LastOp: r.LastOp, Disks: []DiskStatus{}}
	seen := map[string]bool{}
	add := func(id string, attached bool, gen string) {
		if seen[id] {
			return
		}
		seen[id] = true
		p, err := k.diskPath(inst, id)
		if err != nil {
			return
		}
		if sz, err := sizes.size(ctx, inst, id, p); err == nil && sz >= 0 {
			if gen == "" {
				gen = "created"
			}
			ds := DiskStatus{UUID: id, SizeMiB: sz, Attached: attached, Generation: gen, Path: p}
			if inst.DiskTemplate == fsm.DTDrbd {
				if proc, err := sizes.procDRBD(); err == nil {
					ds.DRBD = k.drbdStatus(inst, id, proc)
				}
			}
			st.Disks = append(st.Disks, ds)
		}
	}
	for _, d := range inst.Disks {
		rd := r.disk(d.UUID)
		if rd != nil {
			add(d.UUID, rd.Attached, rd.Generation)
		} else {
			add(d.UUID, false, "")
		}
	}
	for _, d := range r.Disks {
		add(d.UUID, d.Attached, d.Generation)
	}
	if r.Migration != nil {
		m := *r.Migration
		st.Migration = &m
	}
	pid := k.pid(inst.UUID)
	switch {
	case pid == 0 && r.State == StateReceived:
		st.State = StateStopped // the received copy died
	case pid == 0:
		st.State = StateStopped
	case r.State == StateIncoming || r.State == StateReceived:
		st.State = r.State
		if r.State == StateIncoming && k.incomingArrived(ctx, inst.UUID) {
			st.State = StateReceived
		}
		if st.State == StateReceived {
			st.BootID = r.BootID
		}
	case r.State == StateStopped && r.Migration != nil && r.Migration.Phase == PhaseSent:
		st.State = StateStopped // the sent source's qemu, on its way out
	default:
		st.State, st.BootID = StateRunning, r.BootID
		st.MemoryMiB, st.VCPUs = r.RunMemory, r.RunVCPUs
		if _, err := os.Stat(k.SerialPath(inst.UUID)); err == nil {
			st.Console = k.SerialPath(inst.UUID)
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if mem, cpus, err := queryRuntime(qctx, k.qmpPath(inst.UUID)); err == nil {
			st.MemoryMiB, st.VCPUs = mem, cpus
		}
		cancel()
	}
	return st
}

// queryRuntime asks a running qemu for its memory (MiB, the balloon's
// actual size when there is a balloon) and its vCPUs.
func queryRuntime(ctx context.Context, qmp string) (mem int64, cpus int, err error) {
	err = qmpDo(ctx, qmp, func(q *qmpConn) error {
		var sum struct {
			Base int64 `json:"base-memory"`
		}
		if err := q.call(ctx, "query-memory-size-summary", nil, &sum); err != nil {
			return err
		}
		mem = sum.Base >> 20
		var bal struct {
			Actual int64 `json:"actual"`
		}
		if q.call(ctx, "query-balloon", nil, &bal) == nil && bal.Actual > 0 {
			mem = bal.Actual >> 20
		}
		var cs []json.RawMessage
		if err := q.call(ctx, "query-cpus-fast", nil, &cs); err != nil {
			return err
		}
		cpus = len(cs)
		return nil
	})
	return mem, cpus, err
}

// Status implements Driver.
func (k *KVM) Status(ctx context.Context, inst fsm.Instance) (Status, error) {
	if err := checkInstance(inst); err != nil {
		return Status{}, err
	}
	var rec kvmRecord
	ok, err := k.store.load(inst.UUID, &rec)
	if err != nil {
		return Status{}, &OpError{Op: OpStatus, Err: err}
	}
	if !ok {
		return Status{}, notFound("instance %s", inst.UUID)
	}
	return k.status(ctx, &rec, k.newDiskSizes()), nil
}

// List implements Driver.
func (k *KVM) List(ctx context.Context) ([]Status, error) {
	ids, err := k.store.uuids()
	if err != nil {
		return nil, &OpError{Op: OpList, Err: err}
	}
	var recs []*kvmRecord
	for _, id := range ids {
		var rec kvmRecord
		if ok, err := k.store.load(id, &rec); err != nil {
			return nil, &OpError{Op: OpList, Err: err}
		} else if ok {
			recs = append(recs, &rec)
		}
	}
	// Each running guest is asked through QMP (bounded by 2 s): eight
	// at a time, so that a few unresponsive ones do not add up. The
	// volume group is listed once for all their plain disks.
	sizes := k.newDiskSizes()
	out := make([]Status, len(recs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, r := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = k.status(ctx, r, sizes)
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Name < out[j].Name || out[i].Name == out[j].Name && out[i].UUID < out[j].UUID
	})
	return out, nil
}

// qemuArgs is the command line of the instance's qemu, run in its run
// directory.
func (k *KVM) qemuArgs(inst fsm.Instance, p kvmParams, accel string) ([]string, error) {
	if inst.MemoryMiB <= 0 || inst.VCPUs <= 0 {
		return nil, invalid("instance %s has memory %d MiB and %d vCPUs; both must be positive", inst.Name, inst.MemoryMiB, inst.VCPUs)
	}
	nics, err := planNICs(inst)
	if err != nil {
		return nil, err
	}
	name := inst.Name
	if strings.ContainsAny(name, ",=") {
		name = inst.UUID
	}
	args := []string{
		"-name", name, "-uuid", inst.UUID,
		"-accel", accel,
		"-m", QEMUMemory(inst.MemoryMiB, accel), "-smp", strconv.Itoa(inst.VCPUs),
		"-nodefaults", "-no-user-config", "-display", "none",
		"-daemonize", "-pidfile", "qemu.pid",
		"-chardev", "socket,id=qmp,path=qmp.sock,server=on,wait=off", "-mon", "chardev=qmp,mode=control",
		"-device", "virtio-balloon-pci,id=balloon0",
	}
	if m := p.str("machine_version"); m != "" {
		args = append(args, "-machine", m)
	}
	if c := p.str("cpu_type"); c != "" {
		args = append(args, "-cpu", c)
	}
	if !p.bool("acpi") {
		args = append(args, "-no-acpi")
	}
	if p.str("reboot_behavior") == "exit" {
		args = append(args, "-no-reboot")
	}
	if p.bool("use_localtime") {
		args = append(args, "-rtc", "base=localtime")
	}
	if p.bool("serial_console") {
		args = append(args, "-chardev", "socket,id=serial0,path=serial.sock,server=on,wait=off", "-serial", "chardev:serial0")
	}
	if kp := p.str("kernel_path"); kp != "" {
		if !filepath.IsAbs(kp) {
			return nil, invalid("kernel_path %q is not an absolute path", kp)
		}
		if _, err := os.Stat(kp); err != nil {
			return nil, stateErr("kernel_path: %v on node %s", err, k.cfg.Node)
		}
		args = append(args, "-kernel", kp)
		if ip := p.str("initrd_path"); ip != "" {
			if !filepath.IsAbs(ip) {
				return nil, invalid("initrd_path %q is not an absolute path", ip)
			}
			if _, err := os.Stat(ip); err != nil {
				return nil, stateErr("initrd_path: %v on node %s", err, k.cfg.Node)
			}
			args = append(args, "-initrd", ip)
		}
		cmdline := p.str("kernel_args")
		if r := p.str("root_path"); r != "" && len(inst.Disks) > 0 {
			cmdline += " root=" + r
		}
		if p.bool("serial_console") {
			cmdline += fmt.Sprintf(" console=ttyS0,%d", p.int("serial_speed"))
		}
		args = append(args, "-append", strings.TrimSpace(cmdline))
	} else {
		if p.str("initrd_path") != "" {
			return nil, invalid("initrd_path is set without kernel_path")
		}
		boot := map[string]string{"disk": "c", "cdrom": "d", "floppy": "a", "network": "n"}[p.str("boot_order")]
		args = append(args, "-boot", "order="+boot)
	}
	cache := ""
	if c := p.str("disk_cache"); c != "default" {
		cache = ",cache=" + c
	}
	for _, d := range inst.Disks {
		path, err := k.diskPath(inst, d.UUID)
		if err != nil {
			return nil, err
		}
		if strings.Contains(path, ",") {
			return nil, invalid("disk path %q contains a comma", path)
		}
		ro := ""
		if d.Mode == "ro" {
			ro = ",read-only=on"
		}
		// auto-read-only=off: QEMU opens the file writable at start (as
		// gntd's user), not read-only to reopen it writable later, which
		// a qemu run under another uid (security_model user or pool)
		// could not, e.g. when an incoming migration completes.
		args = append(args, "-drive", fmt.Sprintf("file=%s,format=%s,if=none,id=disk-%s%s%s,auto-read-only=off", path, diskFileFormat(path), d.UUID, cache, ro))
		if p.str("disk_type") == "ide" {
			args = append(args, "-device", fmt.Sprintf("ide-hd,drive=disk-%s,id=dev-%s", d.UUID, d.UUID))
		} else {
			args = append(args, "-device", fmt.Sprintf("virtio-blk-pci,drive=disk-%s,id=dev-%s", d.UUID, d.UUID))
		}
	}
	na, err := nicArgs(nics, p.str("nic_type"))
	if err != nil {
		return nil, err
	}
	return append(args, na...), nil
}

// QEMUMemory is qemu's -m for a guest of mib MiB under accel: mib, or
// under TCG 8 KiB more (two more pages of RAM for the guest). QEMU 7.2
// (Debian 12's) reads the migration dirty bitmap of a RAM block whose size
// is a multiple of 256 KiB 64 pages at a time and does not then reset
// TCG's TLB entries of those pages, so guest writes through entries made
// before are not tracked and a live migration loses them (the guest
// crashes on the target now and then; fixed in QEMU 9.0 by "physmem: Fix
// migration dirty bitmap coherency with TCG memory access"). A size that is
// not such a multiple takes QEMU's page-by-page path, which resets them
// (docs/agent.md). KVM tracks dirty pages itself: its size stays mib.
func QEMUMemory(mib int64, accel string) string {
	if accel == AccelTCG {
		return strconv.FormatInt(mib<<10+8, 10) + "k"
	}
	return strconv.FormatInt(mib, 10)
}

// accelFor is the accelerator the instance gets: its kvm_flag, or the
// node's.
func (k *KVM) accelFor(ctx context.Context, p kvmParams) (string, error) {
	switch p.str("kvm_flag") {
	case "enabled":
		return AccelKVM, nil
	case "disabled":
		return AccelTCG, nil
	}
	a, _, err := k.Accel(ctx)
	return a, err
}

// startPlan is what launch and preflight both work out before anything
// is made: the instance's parameters, the accelerator (its error passed
// through wrapAccel), the qemu command line with the VNC console's
// arguments, and the CAP_NET_ADMIN that NICs need (without it the taps
// cannot be created: gntd's capabilities, probed at start).
type startPlan struct {
	p     kvmParams
	accel string
	args  []string
	vnc   *vncPlan
}

func (k *KVM) planStart(ctx context.Context, inst fsm.Instance, wrapAccel func(error) error) (startPlan, error) {
	var sp startPlan
	var err error
	if sp.p, err = instanceParams(inst); err != nil {
		return sp, err
	}
	if sp.accel, err = k.accelFor(ctx, sp.p); err != nil {
		return sp, wrapAccel(err)
	}
	if sp.args, err = k.qemuArgs(inst, sp.p, sp.accel); err != nil {
		return sp, err
	}
	if len(inst.NICs) > 0 && !k.netAdmin {
		return sp, stateErr("instance %s has %d NIC(s), and on node %s %s", inst.Name, len(inst.NICs), k.cfg.Node, k.netAdminWhy)
	}
	if sp.vnc, err = k.planVNC(inst, sp.p); err != nil {
		return sp, err
	}
	if sp.vnc != nil {
		sp.args = append(sp.args, sp.vnc.args...)
	}
	return sp, nil
}

// preflight runs the checks of launch that make nothing: the parameters
// and the command line they give, the NICs (plan, CAP_NET_ADMIN,
// bridges), the VNC console and the user of security_model=user. Reboot
// runs it before it stops the running guest, so that a restart that
// would be refused (a parameter changed since the guest started) leaves
// the guest running.
func (k *KVM) preflight(ctx context.Context, inst fsm.Instance) error {
	sp, err := k.planStart(ctx, inst, func(err error) error { return err })
	if err != nil {
		return err
	}
	p := sp.p
	nics, err := planNICs(inst)
	if err != nil {
		return err
	}
	if err := k.checkBridges(ctx, inst, nics); err != nil {
		return err
	}
	if p.str("security_model") != "pool" {
		// The pool's uid is taken at launch; the other models only look.
		if _, _, err := k.runAs(ctx, inst, p); err != nil {
			return err
		}
	}
	return nil
}

// launch starts the instance's qemu (extra arguments appended) and
// records it running in r.
func (k *KVM) launch(ctx context.Context, op Op, r *kvmRecord, inst fsm.Instance, extra ...string) (string, error) {
	sp, err := k.planStart(ctx, inst, func(err error) error { return &OpError{Op: op, Err: err} })
	if err != nil {
		return "", err
	}
	p, accel, args, vnc := sp.p, sp.accel, sp.args, sp.vnc
	if err := k.activatePlain(ctx, op, inst); err != nil {
		return "", err
	}
	if err := k.drbdActivate(ctx, op, inst); err != nil {
		k.drbdDemote(context.WithoutCancel(ctx), op, inst, op == OpMigratePrepare)
		return "", err
	}
	args = append(args, extra...)
	dir := k.runDir(inst.UUID)
	// What an earlier qemu of the instance left (one killed from
	// outside), its pool uid released.
	if err := k.dropRunDir(inst.UUID); err != nil {
		return "", &OpError{Op: op, Err: err}
	}
	runas, uid, err := k.runAs(ctx, inst, p)
	if err != nil {
		return "", err
	}
	if runas != "" {
		args = append(args, "-runas", runas)
	}
	fail := func(err error) (string, error) {
		k.dropRunDir(inst.UUID)
		k.drbdDemote(context.WithoutCancel(ctx), op, inst, op == OpMigratePrepare)
		if uid != nil {
			k.uids.release(uid)
		}
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(&OpError{Op: op, Err: err})
	}
	if uid != nil {
		if err := os.WriteFile(k.uidFile(inst.UUID), []byte(strconv.FormatInt(uid.uid, 10)+"\n"), 0o600); err != nil {
			return fail(&OpError{Op: op, Err: err})
		}
	}
	nics, err := planNICs(inst)
	if err != nil {
		return fail(err)
	}
	if err := k.setupNICs(ctx, inst, nics); err != nil {
		return fail(&OpError{Op: op, Err: err})
	}
	bin := k.cfg.QEMU
	if k.cfg.NetNS != "" {
		bin, args = "ip", append([]string{"netns", "exec", k.cfg.NetNS, k.cfg.QEMU}, args...)
	}
	out, err := runQEMU(ctx, bin, dir, args)
	if err != nil {
		if len(nics) > 0 {
			k.removeTaps(context.WithoutCancel(ctx), inst.UUID, 0)
		}
		return fail(&OpError{Op: op, Err: fmt.Errorf("qemu: %w", err), Output: out})
	}
	if uid != nil {
		// qemu runs under the uid (it dropped to it before its
		// daemonizing parent exited): the lock has done its work. The
		// uid file keeps the uid taken until the qemu ends.
		uid.unlock()
	}
	if k.pid(inst.UUID) == 0 {
		k.drbdDemote(context.WithoutCancel(ctx), op, inst, op == OpMigratePrepare)
		return "", &OpError{Op: op, Err: errors.New("qemu started but its process is gone"), Output: out}
	}
	if vnc != nil && vnc.password != "" {
		if err := k.setVNCPassword(ctx, inst.UUID, vnc.password); err != nil {
			// Nothing is left running without its password set.
			stopped := "qemu stopped"
			if _, serr := k.stopQEMU(context.WithoutCancel(ctx), inst.UUID, 0, true); serr != nil {
				stopped = "stopping qemu: " + serr.Error()
			}
			return "", &OpError{Op: op, Err: fmt.Errorf("setting the VNC password (QMP set_password): %v; %s", err, stopped), Output: out}
		}
	}
	r.Accel, r.RunMemory, r.RunVCPUs = accel, inst.MemoryMiB, inst.VCPUs
	sizes := k.newDiskSizes()
	for _, d := range inst.Disks {
		p, _ := k.diskPath(inst, d.UUID)
		sz, _ := sizes.size(ctx, inst, d.UUID, p)
		r.noteDisk(d.UUID, sz).Attached = true
	}
	return accel, nil
}

// powerdownEvery is how often a graceful stop sends the ACPI powerdown
// again while it waits: a guest still booting ignores one that comes
// before its ACPI handling runs (Ganeti's shutdown retries every 5 s too).
const powerdownEvery = 5 * time.Second

// powerdown asks a guest to power off, again every interval, until it is
// gone or timeout has passed since the first request. send sends one
// request; wait waits up to d for the guest to be gone and says whether
// it is; now is the clock. It reports whether the guest went, how many
// requests it sent and, when none was sent, the last error.
func powerdown(ctx context.Context, timeout, interval time.Duration, now func() time.Time,
	send func(context.Context) error, wait func(ctx context.Context, d time.Duration) bool) (gone bool, sent int, err error) {
	deadline := now().Add(timeout)
	for {
		sctx, cancel := context.WithTimeout(ctx, min(interval, 5*time.Second))
		if serr := send(sctx); serr != nil {
			err = serr
		} else {
			sent++
		}
		cancel()
		left := deadline.Sub(now())
		if wait(ctx, min(interval, max(left, 0))) {
			return true, sent, nil
		}
		if left <= interval || ctx.Err() != nil {
			if sent > 0 {
				err = nil
			}
			return false, sent, err
		}
	}
}

// stopQEMU ends the instance's qemu: ACPI powerdown (again every
// powerdownEvery), then SIGKILL after timeout (at once with force), and
// removes its runtime files.
func (k *KVM) stopQEMU(ctx context.Context, uuid string, timeout time.Duration, force bool) (string, error) {
	pid := k.pid(uuid)
	out := "not running"
	if pid != 0 {
		out = "destroyed (forced)"
		if !force {
			send := func(ctx context.Context) error {
				return qmpDo(ctx, k.qmpPath(uuid), func(q *qmpConn) error { return q.call(ctx, "system_powerdown", nil, nil) })
			}
			wait := func(ctx context.Context, d time.Duration) bool {
				wctx, cancel := context.WithTimeout(ctx, d)
				defer cancel()
				return waitGone(wctx, pid, uuid) == nil
			}
			gone, sent, err := powerdown(ctx, timeout, powerdownEvery, time.Now, send, wait)
			switch {
			case gone:
				out = "shut down gracefully"
			case err != nil:
				out = fmt.Sprintf("ACPI powerdown failed (%v); destroyed", err)
			default:
				out = fmt.Sprintf("guest did not shut down within %s (ACPI powerdown sent %d times); destroyed", timeout, sent)
			}
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := killQEMU(kctx, pid, uuid)
		cancel()
		if err != nil {
			return "", err
		}
	}
	if err := k.dropTaps(ctx, uuid); err != nil {
		return "", err
	}
	if err := k.dropRunDir(uuid); err != nil {
		return "", err
	}
	return out, nil
}

func kvmMigrating(r *kvmRecord) error {
	if r != nil && (r.State == StateIncoming || r.State == StateReceived) {
		id := ""
		if r.Migration != nil {
			id = r.Migration.ID
		}
		return stateErr("instance %s is %s here (migration %s); finish or abort the migration first", r.Instance.Name, r.State, id)
	}
	return nil
}

// Start implements Driver.
func (k *KVM) Start(ctx context.Context, inst fsm.Instance) (Result, error) {
	return k.mutate(ctx, OpStart, inst, "", func(rec **kvmRecord) (bool, string, error) {
		return k.start(ctx, OpStart, rec, inst, "")
	})
}

func (k *KVM) start(ctx context.Context, op Op, rec **kvmRecord, inst fsm.Instance, why string) (bool, string, error) {
	r := *rec
	if err := kvmMigrating(r); err != nil && k.pid(inst.UUID) != 0 {
		return false, "", err
	}
	if r != nil && k.pid(inst.UUID) != 0 {
		if r.State == StateRunning {
			return false, "already running", nil
		}
		// A qemu started before a crash of gntd, its record not yet
		// saved running: adopt it.
		r.State = StateRunning
		if r.BootID == "" {
			r.BootID = randomID()
		}
		return true, "adopted the running qemu (pid " + strconv.Itoa(k.pid(inst.UUID)) + ")", nil
	}
	if d, err := k.missingDisk(ctx, inst); err != nil {
		return false, "", err
	} else if d != "" {
		return false, "", stateErr("disk %s of instance %s is not present on this node", d, inst.Name)
	}
	if r == nil {
		r = newKVMRecord(inst)
	}
	r.Instance, r.State, r.Migration, r.Incoming, r.BootID = inst, StateRunning, nil, "", randomID()
	// The intent first, with the new boot id: a crash while qemu starts
	// leaves a record that the next Start or Status reconciles with the
	// process.
	if err := k.store.save(inst.UUID, r); err != nil {
		return false, "", &OpError{Op: op, Err: err}
	}
	*rec = r
	accel, err := k.launch(ctx, op, r, inst)
	if err != nil {
		r.State, r.BootID = StateStopped, ""
		return false, "", err
	}
	return true, fmt.Sprintf("%sstarted under %s, pid %d, boot id %s", why, accel, k.pid(inst.UUID), r.BootID), nil
}

// Stop implements Driver.
func (k *KVM) Stop(ctx context.Context, inst fsm.Instance, o StopOptions) (Result, error) {
	if o.Timeout < 0 {
		return Result{}, invalid("negative stop timeout")
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultShutdownTimeout
	}
	return k.mutate(ctx, OpStop, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if r == nil {
			return false, "not running", nil
		}
		if err := kvmMigrating(r); err != nil && k.pid(inst.UUID) != 0 {
			return false, "", err
		}
		running := k.pid(inst.UUID) != 0
		out, err := k.stopQEMU(ctx, inst.UUID, o.Timeout, o.Force)
		if err != nil {
			return false, "", &OpError{Op: OpStop, Err: err}
		}
		// Without qemu, this node's drbd disks are secondary.
		if demoted, err := k.drbdDemote(ctx, OpStop, inst, false); err != nil {
			return false, "", err
		} else if demoted && !running {
			r.State, r.BootID = StateStopped, ""
			return true, "not running; made its drbd disks secondary", nil
		}
		if !running {
			if r.State == StateRunning {
				r.State, r.BootID = StateStopped, ""
				return false, "not running (its qemu had exited)", nil
			}
			return false, "not running", nil
		}
		r.State, r.BootID = StateStopped, ""
		return true, out, nil
	})
}

// Reboot implements Driver: every type ends the qemu process and starts
// a new one, shutting the guest down gracefully first (ACPI, bounded by
// the options' timeout; Force: destroyed at once), as Ganeti's hard and
// full reboots do (they stop the instance, then start it).
func (k *KVM) Reboot(ctx context.Context, inst fsm.Instance, o RebootOptions) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	return k.mutate(ctx, OpReboot, inst, o.OpID, func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if r.done(OpReboot, o.OpID) {
			return false, "already rebooted for " + o.OpID, nil
		}
		if err := kvmMigrating(r); err != nil && k.pid(inst.UUID) != 0 {
			return false, "", err
		}
		why := "was not running; "
		if r != nil && k.pid(inst.UUID) != 0 {
			if err := k.preflight(ctx, inst); err != nil {
				return false, "", fmt.Errorf("not rebooted, the guest keeps running: %w", err)
			}
			out, err := k.stopQEMU(ctx, inst.UUID, o.Timeout, o.Force)
			if err != nil {
				return false, "", &OpError{Op: OpReboot, Err: err}
			}
			why = o.Type + " reboot: " + out + "; "
			r.State = StateStopped
		}
		changed, out, err := k.start(ctx, OpReboot, rec, inst, why)
		return changed, out, err
	})
}

// removeDiskFile removes a disk's file and, when it was the last, the
// instance's directory under the storage directory.
func removeDiskFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		var pe *os.PathError
		if errors.As(err, &pe) && strings.Contains(err.Error(), "not empty") {
			return nil
		}
		return err
	}
	return nil
}

// Remove implements Driver: the record, the runtime files and every disk
// file of the instance here (for sharedfile: in the shared directory).
func (k *KVM) Remove(ctx context.Context, inst fsm.Instance) (Result, error) {
	return k.mutate(ctx, OpRemove, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if r == nil {
			return false, "not known on this node", nil
		}
		if pid := k.pid(inst.UUID); pid != 0 {
			return false, "", stateErr("instance %s is %s here (qemu pid %d); stop it (or end its migration) first", inst.Name, r.State, pid)
		}
		ids := map[string]bool{}
		for _, d := range r.Disks {
			ids[d.UUID] = true
		}
		for _, d := range inst.Disks {
			ids[d.UUID] = true
		}
		n := 0
		sizes := k.newDiskSizes() // removing one disk's volume leaves the others' as listed
		for id := range ids {
			if inst.DiskTemplate == fsm.DTDrbd {
				changed, err := k.drbdRemove(ctx, OpRemove, inst, r, id, sizes)
				if err != nil {
					return false, "", err
				}
				if changed {
					n++
				}
				continue
			}
			p, err := k.diskPath(inst, id)
			if err != nil {
				continue
			}
			if sz, _ := sizes.size(ctx, inst, id, p); sz >= 0 {
				n++
			}
			if err := k.removeStorage(ctx, OpRemove, inst, id, p, sizes); err != nil {
				return false, "", err
			}
		}
		if err := k.dropTaps(ctx, inst.UUID); err != nil {
			return false, "", &OpError{Op: OpRemove, Err: err}
		}
		if err := k.dropRunDir(inst.UUID); err != nil {
			return false, "", &OpError{Op: OpRemove, Err: err}
		}
		*rec = nil
		return true, fmt.Sprintf("removed, with %d disk(s)", n), nil
	})
}

// qemuImg runs qemu-img.
func (k *KVM) qemuImg(ctx context.Context, op Op, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, k.cfg.QEMUImg, args...).CombinedOutput()
	if err != nil {
		return &OpError{Op: op, Err: fmt.Errorf("qemu-img %s: %w", args[0], err), Output: truncate(string(out), qemuOutput)}
	}
	return nil
}

// diskOp runs op on one disk of inst under mutate: fn gets the record,
// the disk's path and the size of its storage (below 0: not present).
func (k *KVM) diskOp(ctx context.Context, op Op, inst fsm.Instance, disk string,
	fn func(rec **kvmRecord, path string, sz int64) (bool, string, error)) (Result, error) {
	path, err := k.diskPath(inst, disk)
	if err != nil {
		return Result{}, err
	}
	return k.mutate(ctx, op, inst, "", func(rec **kvmRecord) (bool, string, error) {
		sz, err := k.storageSize(ctx, inst, disk, path)
		if err != nil {
			return false, "", &OpError{Op: op, Err: err}
		}
		return fn(rec, path, sz)
	})
}

// DiskCreate implements Driver: a sparse file of the configured size, raw
// or qcow2 (the template's disk parameter format).
func (k *KVM) DiskCreate(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	cd, _, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	if cd.SizeMiB <= 0 {
		return Result{}, invalid("disk %s has size %d", disk, cd.SizeMiB)
	}
	if inst.DiskTemplate == fsm.DTDrbd {
		return k.drbdCreate(ctx, inst, cd)
	}
	return k.diskOp(ctx, OpDiskCreate, inst, disk, func(rec **kvmRecord, path string, sz int64) (bool, string, error) {
		r := *rec
		if r == nil {
			r = newKVMRecord(inst)
		}
		if sz >= 0 {
			if sz != cd.SizeMiB {
				return false, "", stateErr("disk %s is present with %d MiB, not the configured %d MiB", disk, sz, cd.SizeMiB)
			}
			r.noteDisk(disk, sz)
			*rec = r
			return false, "already present", nil
		}
		if err := k.createStorage(ctx, inst, disk, path, cd.SizeMiB); err != nil {
			return false, "", err
		}
		r.noteDisk(disk, cd.SizeMiB).Generation = "created"
		*rec = r
		return true, fmt.Sprintf("created disk %s (%d MiB, %s) at %s", disk, cd.SizeMiB, diskFileFormat(path), path), nil
	})
}

// DiskRemove implements Driver.
func (k *KVM) DiskRemove(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if disk == "" {
		return Result{}, invalid("no disk UUID given")
	}
	if inst.DiskTemplate == fsm.DTDrbd {
		return k.mutate(ctx, OpDiskRemove, inst, "", func(rec **kvmRecord) (bool, string, error) {
			r := *rec
			if d := r.disk(disk); d != nil && d.Attached && k.pid(inst.UUID) != 0 {
				return false, "", stateErr("disk %s is attached to instance %s, which runs here; detach it first", disk, inst.Name)
			}
			changed, err := k.drbdRemove(ctx, OpDiskRemove, inst, r, disk, k.newDiskSizes())
			if err != nil {
				return false, "", err
			}
			if r != nil {
				r.Disks = slices.DeleteFunc(r.Disks, func(x DiskStatus) bool { return x.UUID == disk })
			}
			if !changed {
				return false, "not present", nil
			}
			return true, "removed disk " + disk, nil
		})
	}
	return k.diskOp(ctx, OpDiskRemove, inst, disk, func(rec **kvmRecord, path string, sz int64) (bool, string, error) {
		r := *rec
		if sz < 0 {
			if r != nil {
				r.Disks = slices.DeleteFunc(r.Disks, func(x DiskStatus) bool { return x.UUID == disk })
			}
			return false, "not present", nil
		}
		if d := r.disk(disk); d != nil && d.Attached && k.pid(inst.UUID) != 0 {
			return false, "", stateErr("disk %s is attached to instance %s, which runs here; detach it first", disk, inst.Name)
		}
		if err := k.removeStorage(ctx, OpDiskRemove, inst, disk, path, k.newDiskSizes()); err != nil {
			return false, "", err
		}
		if r != nil {
			r.Disks = slices.DeleteFunc(r.Disks, func(x DiskStatus) bool { return x.UUID == disk })
		}
		return true, "removed disk " + disk, nil
	})
}

// DiskAttach implements Driver: hot-plugged through QMP when the
// instance runs.
func (k *KVM) DiskAttach(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if _, _, err := configDisk(inst, disk); err != nil {
		return Result{}, err
	}
	return k.diskOp(ctx, OpDiskAttach, inst, disk, func(rec **kvmRecord, path string, sz int64) (bool, string, error) {
		r := *rec
		if sz < 0 {
			return false, "", notFound("disk %s is not present on this node", disk)
		}
		if inst.DiskTemplate == fsm.DTPlain {
			if err := k.lvActivate(ctx, OpDiskAttach, inst, true, disk); err != nil {
				return false, "", err
			}
		}
		if r == nil {
			r = newKVMRecord(inst)
			*rec = r
		}
		d := r.noteDisk(disk, sz)
		reconnected := ""
		if inst.DiskTemplate == fsm.DTDrbd {
			out, running, secondary, err := k.drbdAttach(ctx, inst, disk)
			if err != nil {
				return false, "", err
			}
			if secondary {
				// Not the instance's primary node: the device
				// assembled (a node back from a reboot resyncs),
				// attached to nothing here.
				was := d.Attached
				d.Attached = false
				if out == "" {
					return was, "disk " + disk + "'s device is set up already (secondary here)", nil
				}
				return true, out + " (secondary here)", nil
			}
			if d.Attached && out != "" && !running {
				return true, out, nil
			}
			reconnected = out
		}
		if d.Attached {
			if reconnected != "" {
				return true, reconnected, nil
			}
			return false, "already attached", nil
		}
		if k.pid(inst.UUID) != 0 {
			p, err := instanceParams(inst)
			if err != nil {
				return false, "", err
			}
			driver := "virtio-blk-pci"
			if p.str("disk_type") == "ide" {
				return false, "", stateErr("IDE disks cannot be hot-plugged; stop instance %s first", inst.Name)
			}
			err = qmpDo(ctx, k.qmpPath(inst.UUID), func(q *qmpConn) error {
				return hotplugDisk(ctx, q, path, diskFileFormat(path), fileDriver(inst), blockNodeName(disk), driver, "dev-"+disk)
			})
			if err != nil {
				return false, "", &OpError{Op: OpDiskAttach, Err: err}
			}
			d.Attached = true
			return true, "hot-plugged disk " + disk, nil
		}
		d.Attached = true
		return true, "attached disk " + disk, nil
	})
}

// hotplugDisk adds the disk file at path (of format raw or qcow2) to a
// running qemu as device id; protocol is QEMU's driver of the storage
// (fileDriver: file, or host_device for a logical volume).
// gntd opens the file and hands qemu the descriptor (QMP add-fd, the
// file named /dev/fdset/N), as Ganeti does: qemu may run under another
// uid (security_model user or pool) that cannot open the file itself. The
// fd set's own descriptor is dropped once the block node holds its copy.
func hotplugDisk(ctx context.Context, q *qmpConn, path, format, protocol, node, driver, id string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	raw, err := q.execFD(ctx, "add-fd", map[string]any{"opaque": "gnt " + node}, f)
	if err != nil {
		return err
	}
	var set struct {
		ID int64 `json:"fdset-id"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return fmt.Errorf("qmp add-fd: unexpected reply %s", truncate(string(raw), 200))
	}
	err = q.call(ctx, "blockdev-add", map[string]any{
		"driver": format, "node-name": node,
		"file": map[string]any{"driver": protocol, "filename": fmt.Sprintf("/dev/fdset/%d", set.ID), "auto-read-only": false},
	}, nil)
	// Whether or not the block node took its copy, the set's descriptor
	// goes (qemu frees the set once the node closes its copy).
	if rerr := q.call(ctx, "remove-fd", map[string]any{"fdset-id": set.ID}, nil); err == nil && rerr != nil {
		return rerr
	}
	if err != nil {
		return err
	}
	return q.call(ctx, "device_add", map[string]any{"driver": driver, "drive": node, "id": id}, nil)
}

// blockNodeName is the QMP node name of a hot-plugged disk: QEMU allows
// 31 characters, a UUID has 36.
func blockNodeName(disk string) string {
	h := fnv.New64a()
	h.Write([]byte(disk))
	return fmt.Sprintf("gnt%016x", h.Sum64())
}

// DiskDetach implements Driver: hot-unplugged through QMP when the
// instance runs.
func (k *KVM) DiskDetach(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	if disk == "" {
		return Result{}, invalid("no disk UUID given")
	}
	return k.mutate(ctx, OpDiskDetach, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		d := r.disk(disk)
		if inst.DiskTemplate == fsm.DTDrbd && k.pid(inst.UUID) == 0 {
			// Not the instance's primary node (or no longer in the
			// disk's logical id): the device goes down, the volumes
			// stay.
			off, err := k.drbdOffPrimary(inst, r, disk)
			if err != nil {
				return false, "", err
			}
			if off {
				was := d != nil && d.Attached
				if d != nil {
					d.Attached = false
				}
				down, err := k.drbdShutdown(ctx, inst, r, disk)
				if err != nil {
					return false, "", err
				}
				if !down {
					return was, "disk " + disk + "'s device is not set up here (not the primary node)", nil
				}
				return true, "took disk " + disk + "'s device down here (not the primary node); its volumes stay", nil
			}
		}
		if d == nil || !d.Attached {
			if _, _, err := configDisk(inst, disk); err == nil && inst.DiskTemplate == fsm.DTDrbd && k.pid(inst.UUID) == 0 {
				// Not attached, but its device may be primary (a
				// detach cut short): secondary here.
				if demoted, err := k.drbdDetach(ctx, inst, disk); err != nil {
					return false, "", err
				} else if demoted {
					return true, "not attached; made disk " + disk + " secondary here", nil
				}
			}
			return false, "not attached", nil
		}
		if k.pid(inst.UUID) != 0 {
			err := qmpDo(ctx, k.qmpPath(inst.UUID), func(q *qmpConn) error {
				if err := q.call(ctx, "device_del", map[string]any{"id": "dev-" + disk}, nil); err != nil {
					return err
				}
				// The guest acknowledges the unplug; until then the
				// device (and its drive) stay.
				for {
					var devs []struct {
						Name string `json:"name"`
					}
					if err := q.call(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &devs); err != nil {
						return err
					}
					present := false
					for _, x := range devs {
						if x.Name == "dev-"+disk {
							present = true
						}
					}
					if !present {
						return nil
					}
					if err := sleep(ctx, 100*time.Millisecond); err != nil {
						return fmt.Errorf("the guest did not release disk %s: %w", disk, err)
					}
				}
			})
			if err != nil {
				return false, "", &OpError{Op: OpDiskDetach, Err: err}
			}
			d.Attached = false
			if inst.DiskTemplate == fsm.DTDrbd {
				if _, err := k.drbdDetach(ctx, inst, disk); err != nil {
					return false, "", err
				}
			}
			return true, "hot-unplugged disk " + disk, nil
		}
		d.Attached = false
		if inst.DiskTemplate == fsm.DTPlain {
			if err := k.lvActivate(ctx, OpDiskDetach, inst, false, disk); err != nil && !errors.Is(err, ErrNotFound) {
				return false, "", err
			}
			return true, "detached and deactivated disk " + disk, nil
		}
		if inst.DiskTemplate == fsm.DTDrbd {
			if _, err := k.drbdDetach(ctx, inst, disk); err != nil {
				return false, "", err
			}
			return true, "detached disk " + disk + " (secondary here)", nil
		}
		return true, "detached disk " + disk, nil
	})
}

// DiskReplace implements Driver: a drbd disk's volumes made anew here,
// resynchronised from the peer (kvm_drbd.go); other templates have no
// peer to resync from.
func (k *KVM) DiskReplace(ctx context.Context, inst fsm.Instance, disk, opID string) (Result, error) {
	if inst.DiskTemplate != fsm.DTDrbd {
		return Result{}, fmt.Errorf("%w: disk replace needs a replicated template (drbd), and instance %s is %s", ErrNotSupported, inst.Name, inst.DiskTemplate)
	}
	if opID == "" {
		return Result{}, invalid("disk replace needs an op id")
	}
	cd, _, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	return k.drbdReplace(ctx, inst, cd, opID)
}

// DiskGrow implements Driver: qemu-img resize, and QMP block_resize when
// the instance runs so the guest sees the new size.
func (k *KVM) DiskGrow(ctx context.Context, inst fsm.Instance, disk string) (Result, error) {
	cd, _, err := configDisk(inst, disk)
	if err != nil {
		return Result{}, err
	}
	if inst.DiskTemplate == fsm.DTDrbd {
		return k.drbdGrow(ctx, inst, cd)
	}
	return k.diskOp(ctx, OpDiskGrow, inst, disk, func(rec **kvmRecord, path string, sz int64) (bool, string, error) {
		switch {
		case sz < 0:
			return false, "", notFound("disk %s is not present on this node", disk)
		case sz == cd.SizeMiB:
			return false, fmt.Sprintf("disk %s has %d MiB already", disk, sz), nil
		case sz > cd.SizeMiB:
			return false, "", stateErr("disk %s has %d MiB, more than the configured %d MiB; disks do not shrink", disk, sz, cd.SizeMiB)
		}
		r := *rec
		if r == nil {
			r = newKVMRecord(inst)
			*rec = r
		}
		d := r.noteDisk(disk, sz)
		running := d.Attached && k.pid(inst.UUID) != 0
		// The storage grows first, but a running qemu grows a file disk
		// itself (block_resize), while a volume must grow before qemu
		// learns its new size.
		if !running || inst.DiskTemplate == fsm.DTPlain {
			if err := k.growStorage(ctx, inst, disk, path, cd.SizeMiB); err != nil {
				return false, "", err
			}
		}
		if running {
			if err := k.blockResize(ctx, inst.UUID, disk, cd.SizeMiB); err != nil {
				return false, "", err
			}
		}
		d.SizeMiB = cd.SizeMiB
		return true, fmt.Sprintf("grew disk %s from %d to %d MiB", disk, sz, cd.SizeMiB), nil
	})
}

// blockResize tells the instance's running qemu the disk's new size
// (MiB), so the guest sees it.
func (k *KVM) blockResize(ctx context.Context, uuid, disk string, mib int64) error {
	err := qmpDo(ctx, k.qmpPath(uuid), func(q *qmpConn) error {
		return q.call(ctx, "block_resize", map[string]any{"device": "disk-" + disk, "size": mib << 20}, nil)
	})
	if err != nil {
		// A hot-plugged disk is named by its node name.
		err = qmpDo(ctx, k.qmpPath(uuid), func(q *qmpConn) error {
			return q.call(ctx, "block_resize", map[string]any{"node-name": blockNodeName(disk), "size": mib << 20}, nil)
		})
	}
	if err != nil {
		return &OpError{Op: OpDiskGrow, Err: err}
	}
	return nil
}

// InstallOS implements Driver. With KVMConfig.OS it runs the OS
// definition's create script on the instance's disk files (package
// osdef), the script's output going to the job log. Without it, an OS
// whose name is "noop" (Ganeti's noop OS, which installs nothing) is
// recorded as installed, and any other OS is refused as not supported, so
// an install never silently does nothing.
func (k *KVM) InstallOS(ctx context.Context, inst fsm.Instance, opID string) (Result, error) {
	if opID == "" {
		return Result{}, invalid("OS install needs an op id")
	}
	if inst.OS == "" {
		return Result{}, invalid("instance %s has no OS to install", inst.Name)
	}
	if name, _, _ := strings.Cut(inst.OS, "+"); name != "noop" && k.cfg.OS == nil {
		return Result{}, fmt.Errorf("%w: OS %q: the kvm driver runs no OS definitions yet (only noop, which installs nothing)", ErrNotSupported, inst.OS)
	}
	return k.mutate(ctx, OpOSInstall, inst, opID, func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if r.done(OpOSInstall, opID) {
			return false, "already installed for " + opID, nil
		}
		if k.pid(inst.UUID) != 0 {
			return false, "", stateErr("instance %s runs here; stop it first", inst.Name)
		}
		if d, err := k.missingDisk(ctx, inst); err != nil {
			return false, "", err
		} else if d != "" {
			return false, "", stateErr("disk %s of instance %s is not present on this node", d, inst.Name)
		}
		if r == nil {
			r = newKVMRecord(inst)
		}
		if inst.DiskTemplate == fsm.DTDrbd {
			// The OS is written through this node's devices, primary
			// for the install and secondary after.
			if err := k.drbdActivate(ctx, OpOSInstall, inst); err != nil {
				k.drbdDemote(context.WithoutCancel(ctx), OpOSInstall, inst, false)
				return false, "", err
			}
			defer k.drbdDemote(context.WithoutCancel(ctx), OpOSInstall, inst, false)
		}
		out := "installed " + inst.OS + " (noop: nothing written)"
		if k.cfg.OS != nil {
			paths := make([]string, len(inst.Disks))
			for i, d := range inst.Disks {
				p, err := k.diskPath(inst, d.UUID)
				if err != nil {
					return false, "", err
				}
				if name, _, _ := strings.Cut(inst.OS, "+"); name != "noop" && diskFileFormat(p) != fsm.DiskFormatRaw {
					// An OS definition writes DISK_<n>_PATH as a raw
					// block device; it would corrupt an image.
					return false, "", fmt.Errorf("%w: OS %s writes raw disks, and disk %d of instance %s is %s (%s); create it with disk parameter format=raw",
						ErrNotSupported, inst.OS, i, inst.Name, diskFileFormat(p), p)
				}
				paths[i] = p
			}
			script, err := k.cfg.OS.Install(ctx, osdef.Input{Instance: inst, Hypervisor: k.Name(), DiskPaths: paths, Reinstall: r.OS != ""})
			if err != nil {
				return false, "", &OpError{Op: OpOSInstall, Output: script, Err: err}
			}
			out = script + "installed " + inst.OS
		}
		r.OS = inst.OS
		*rec = r
		return true, out, nil
	})
}

// migrationPort is the TCP port the target of migration id listens on:
// from the instance's migration_port up, by a hash of the id, so both
// sides know it without asking each other and two migrations to one node
// rarely collide.
func migrationPort(p kvmParams, id, uuid string) int {
	h := fnv.New32a()
	h.Write([]byte(id + "/" + uuid))
	base := p.int("migration_port")
	if base <= 0 || base > 65535-1000 {
		base = 8102
	}
	return base + int(h.Sum32()%1000)
}

// Ensure interface.
var _ Driver = (*KVM)(nil)
