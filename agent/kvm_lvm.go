package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/gnt-cluster/gnt/fsm"
)

// Disks of template plain: one LVM logical volume per disk in the node's
// volume group (KVMConfig.VolumeGroup), named "<instance uuid>.<disk
// uuid>" and used by qemu as /dev/<vg>/<lv>. lvcreate makes it (the
// volume is active from then on), lvextend grows it, lvremove removes it;
// lvchange -ay activates it before qemu opens it (start, attach) and
// lvchange -an deactivates it when its disk is detached from an instance
// that does not run (deactivate-disks). Presence and size are what lvs
// says, never the device node: an inactive volume has none.

// lvName is the logical volume of an instance's disk (73 characters of
// [0-9a-f-.], within LVM's 128).
func lvName(inst, disk string) string { return inst + "." + disk }

func (k *KVM) lvm() LVMRunner {
	if k.cfg.LVM != nil {
		return k.cfg.LVM
	}
	return RunLVM
}

// volumeGroup is the node's volume group for plain disks.
func (k *KVM) volumeGroup() (string, error) {
	if k.cfg.VolumeGroup == "" {
		return "", fmt.Errorf("%w: no volume group is configured on node %s (--volume-group)", ErrNotSupported, k.cfg.Node)
	}
	return k.cfg.VolumeGroup, nil
}

// lvsArgs lists a volume group's logical volumes as ParseLVS reads them.
func lvsArgs(vg string) []string {
	return []string{"--noheadings", "--nosuffix", "--units", "m", "--separator", "|", "-o", "lv_name,lv_size,lv_attr", "--", vg}
}

// listLVs is what one run of lvs says of every logical volume of vg.
func (k *KVM) listLVs(ctx context.Context, vg string) (map[string]LV, error) {
	out, err := k.lvm()(ctx, "lvs", lvsArgs(vg)...)
	if err != nil {
		return nil, err
	}
	return ParseLVS(out)
}

// lvState is what lvs says of a logical volume: size in MiB (-1 when it
// does not exist) and whether it is active.
func (k *KVM) lvState(ctx context.Context, vg, lv string) (size int64, active bool, err error) {
	lvs, err := k.listLVs(ctx, vg)
	if err != nil {
		return 0, false, err
	}
	size, active = lvLookup(lvs, lv)
	return size, active, nil
}

// lvLookup is the size in MiB (-1: not listed) and activation of lv in
// a listing.
func lvLookup(lvs map[string]LV, lv string) (size int64, active bool) {
	if l, ok := lvs[lv]; ok {
		return l.SizeMiB, l.Active
	}
	return -1, false
}

// LV is a logical volume as lvs lists it.
type LV struct {
	SizeMiB int64 // lv_size, whole MiB
	Active  bool  // lv_attr's fifth character is 'a'
}

// ParseLVS reads `lvs --noheadings --nosuffix --units m --separator '|'
// -o lv_name,lv_size,lv_attr` into its logical volumes by name. A line
// that is not three fields, a bad name or size, an attribute that is not
// 1 to 16 characters, or a name listed twice is refused.
func ParseLVS(out []byte) (map[string]LV, error) {
	rows, err := splitLVM(out, 3, "lvs")
	if err != nil {
		return nil, err
	}
	lvs := make(map[string]LV, len(rows))
	for _, f := range rows {
		if err := checkLVMName("lvs: lv_name", f[0]); err != nil {
			return nil, err
		}
		if len(f[2]) < 1 || len(f[2]) > 16 {
			return nil, fmt.Errorf("lvs: lv_attr of %s is %q; want 1 to 16 characters", f[0], f[2])
		}
		sz, err := parseMiB("lvs: lv_size of "+f[0], f[1])
		if err != nil {
			return nil, err
		}
		if _, dup := lvs[f[0]]; dup {
			return nil, fmt.Errorf("lvs: logical volume %s is listed twice", f[0])
		}
		lvs[f[0]] = LV{SizeMiB: sz, Active: len(f[2]) >= 5 && f[2][4] == 'a'}
	}
	return lvs, nil
}

// lvDo runs an LVM tool on an instance's disk volume, as an OpError of op.
func (k *KVM) lvDo(ctx context.Context, op Op, tool string, args ...string) error {
	if out, err := k.lvm()(ctx, tool, args...); err != nil {
		return &OpError{Op: op, Err: err, Output: truncate(string(out), qemuOutput)}
	}
	return nil
}

// lvActivate activates (or deactivates) the volumes of the instance's
// disks that are not already so, as one listing of the volume group says.
func (k *KVM) lvActivate(ctx context.Context, op Op, inst fsm.Instance, on bool, disks ...string) error {
	names := make([]string, len(disks))
	for i, disk := range disks {
		names[i] = lvName(inst.UUID, disk)
	}
	return k.activateLVs(ctx, op, on, names...)
}

// activateLVs activates (or deactivates) the named volumes of the
// volume group that are not already so.
func (k *KVM) activateLVs(ctx context.Context, op Op, on bool, names ...string) error {
	vg, err := k.volumeGroup()
	if err != nil {
		return err
	}
	lvs, err := k.listLVs(ctx, vg)
	if err != nil {
		return &OpError{Op: op, Err: err}
	}
	flag := "-an"
	if on {
		flag = "-ay"
	}
	for _, lv := range names {
		sz, active := lvLookup(lvs, lv)
		if sz < 0 {
			return notFound("logical volume %s/%s does not exist on this node", vg, lv)
		}
		if active == on {
			continue
		}
		if err := k.lvDo(ctx, op, "lvchange", flag, "--", vg+"/"+lv); err != nil {
			return err
		}
	}
	return nil
}

// activatePlain activates every plain disk of the instance (before qemu
// opens them); nothing for other templates.
func (k *KVM) activatePlain(ctx context.Context, op Op, inst fsm.Instance) error {
	if inst.DiskTemplate != fsm.DTPlain {
		return nil
	}
	disks := make([]string, len(inst.Disks))
	for i, d := range inst.Disks {
		disks[i] = d.UUID
	}
	return k.lvActivate(ctx, op, inst, true, disks...)
}

// storageSize is the size in MiB of the disk's storage here, -1 when
// absent: its file's, or its logical volume's for plain (one lvs of its
// own; a pass over many disks asks a diskSizes instead).
func (k *KVM) storageSize(ctx context.Context, inst fsm.Instance, disk, path string) (int64, error) {
	return k.newDiskSizes().size(ctx, inst, disk, path)
}

// diskSizes answers storageSize for the disks of one pass over many (a
// status poll of every instance, a start's check of its disks): plain
// ones from a single listing of the volume group, made when the first
// plain disk is asked for and kept for the rest of the pass, so that a
// pass runs lvs at most once however many plain disks it looks at. It
// is safe for concurrent use.
type diskSizes struct {
	k    *KVM
	once sync.Once
	lvs  map[string]LV
	err  error
	// proc is /proc/drbd, read when the first drbd disk's state is
	// asked for.
	procOnce sync.Once
	proc     ProcDRBD
	procErr  error
}

// list lists the volume group vg once for the pass.
func (s *diskSizes) list(ctx context.Context, vg string) error {
	s.once.Do(func() { s.lvs, s.err = s.k.listLVs(ctx, vg) })
	return s.err
}

// procDRBD is /proc/drbd, read once for the pass.
func (s *diskSizes) procDRBD() (ProcDRBD, error) {
	s.procOnce.Do(func() { s.proc, s.procErr = s.k.readProcDRBD() })
	return s.proc, s.procErr
}

func (k *KVM) newDiskSizes() *diskSizes { return &diskSizes{k: k} }

// size is the size in MiB of the disk's storage, -1 when absent.
func (s *diskSizes) size(ctx context.Context, inst fsm.Instance, disk, path string) (int64, error) {
	if !onLVM(inst) {
		return diskSize(path)
	}
	vg, err := s.k.volumeGroup()
	if err != nil {
		return 0, err
	}
	if err := s.list(ctx, vg); err != nil {
		return 0, err
	}
	sz, _ := lvLookup(s.lvs, lvName(inst.UUID, disk))
	return sz, nil
}

// createStorage makes the disk's storage: a raw sparse file (made under a
// temporary name and renamed, so a crash leaves no half-made disk that
// passes as present), or a logical volume.
func (k *KVM) createStorage(ctx context.Context, inst fsm.Instance, disk, path string, size int64) error {
	if inst.DiskTemplate == fsm.DTPlain {
		vg, err := k.volumeGroup()
		if err != nil {
			return err
		}
		// -Wy -y: wipe old signatures without asking, so that a volume
		// made where a removed one was starts blank.
		return k.lvDo(ctx, OpDiskCreate, "lvcreate", "-Wy", "-y", "-L", strconv.FormatInt(size, 10)+"m", "-n", lvName(inst.UUID, disk), "--", vg)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return &OpError{Op: OpDiskCreate, Err: err}
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := k.qemuImg(ctx, OpDiskCreate, "create", "-q", "-f", diskFileFormat(path), tmp, strconv.FormatInt(size, 10)+"M"); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return &OpError{Op: OpDiskCreate, Err: err}
	}
	syncDir(filepath.Dir(path))
	return nil
}

// removeStorage removes the disk's storage (absent: nothing to do). A
// logical volume is looked up in the listing of sizes, so that removing
// several disks lists the volume group once.
func (k *KVM) removeStorage(ctx context.Context, op Op, inst fsm.Instance, disk, path string, sizes *diskSizes) error {
	if inst.DiskTemplate != fsm.DTPlain {
		if err := removeDiskFile(path); err != nil {
			return &OpError{Op: op, Err: err}
		}
		return nil
	}
	vg, err := k.volumeGroup()
	if err != nil {
		return err
	}
	sz, err := sizes.size(ctx, inst, disk, path)
	if err != nil {
		return &OpError{Op: op, Err: err}
	}
	if sz < 0 {
		return nil
	}
	return k.lvDo(ctx, op, "lvremove", "-y", "--", vg+"/"+lvName(inst.UUID, disk))
}

// growStorage grows a disk's storage that no running qemu has open (a
// file), or any logical volume (qemu then learns the size through
// block_resize).
func (k *KVM) growStorage(ctx context.Context, inst fsm.Instance, disk, path string, size int64) error {
	if inst.DiskTemplate != fsm.DTPlain {
		return k.qemuImg(ctx, OpDiskGrow, "resize", "-q", "-f", diskFileFormat(path), path, strconv.FormatInt(size, 10)+"M")
	}
	vg, err := k.volumeGroup()
	if err != nil {
		return err
	}
	return k.lvDo(ctx, OpDiskGrow, "lvextend", "-L", strconv.FormatInt(size, 10)+"m", "--", vg+"/"+lvName(inst.UUID, disk))
}

// errNoPlainMove refuses moving a plain instance between nodes.
var errNoPlainMove = errors.New("plain disks are logical volumes local to their node; without drbd an instance of template plain cannot move (migrate or fail over) to another node")

// onLVM is whether the instance's disks are logical volumes (plain), or
// DRBD devices over logical volumes (drbd: the data volume is the disk's
// size).
func onLVM(inst fsm.Instance) bool {
	return inst.DiskTemplate == fsm.DTPlain || inst.DiskTemplate == fsm.DTDrbd
}

// fileDriver is QEMU's block driver of the instance's disks' storage:
// host_device for logical volumes and DRBD devices, file for files.
func fileDriver(inst fsm.Instance) string {
	if onLVM(inst) {
		return "host_device"
	}
	return "file"
}
