package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Storage units (Ganeti's seed 003 "Storage units modelling", gnt-node
// list-storage): what a node offers to put disks on. A node reports:
//
//   - file: the cluster's file storage directory and, when configured,
//     the shared file storage directory, each with the size, used and
//     free space of its file system (statfs; a directory that does not
//     exist yet is measured on its nearest existing parent, the file
//     system it would live on). Always allocatable.
//   - lvm-vg: each LVM volume group (vgs), always allocatable, as in
//     Ganeti.
//   - lvm-pv: each LVM physical volume (pvs), allocatable as its "a"
//     attribute says (pvchange -x).
//
// A node without LVM (no vgs/pvs on PATH) has no lvm units; that is not
// an error. When the LVM tools are there but fail, the failure is
// reported beside the units that could be read, never hidden.

// Storage types.
const (
	StorageFile  = "file"
	StorageLVMPV = "lvm-pv"
	StorageLVMVG = "lvm-vg"
)

// OpStorageList reports the node's storage units; OpStorageModify sets a
// physical volume's allocatable flag; OpStorageRepair runs vgreduce
// --removemissing on a volume group. None is a driver operation.
const (
	OpStorageList   Op = "storage-list"
	OpStorageModify Op = "storage-modify"
	OpStorageRepair Op = "storage-repair"
)

// Bounds of the LVM tools' runs and of what is parsed of them.
const (
	// MaxLVMOutput bounds what is kept of an LVM tool's stdout; longer
	// output is refused rather than parsed in part.
	MaxLVMOutput = 1 << 20
	// MaxStorageUnits bounds the units parsed from one listing.
	MaxStorageUnits = 4096
	// LVMTimeout bounds one run of an LVM tool.
	LVMTimeout = 30 * time.Second
	// maxLVMName bounds an LVM name (LVM's NAME_LEN is 128).
	maxLVMName = 128
)

// StorageUnit is one storage unit of a node. Sizes are in MiB (rounded
// down).
type StorageUnit struct {
	Type string
	Name string
	// VG is a physical volume's volume group ("" for other units and for
	// a physical volume in no group).
	VG          string
	SizeMiB     int64
	UsedMiB     int64
	FreeMiB     int64
	Allocatable bool
}

// StorageReport is what a node reports: its units, and the listings that
// failed (an LVM tool that is present but failed), by name.
type StorageReport struct {
	Units  []StorageUnit
	Errors []string
}

// LVMRunner runs an LVM tool with its arguments and returns its stdout
// (bounded by MaxLVMOutput: more is an error). ErrNoLVM says the tool is
// not installed.
type LVMRunner func(ctx context.Context, tool string, args ...string) ([]byte, error)

// ErrNoLVM is an LVM tool that is not installed.
var ErrNoLVM = errors.New("LVM tools are not installed")

// Storage lists and repairs a node's storage units.
type Storage struct {
	// FileDirs are the file storage directories (empty entries are
	// skipped).
	FileDirs []string
	// Run runs LVM tools (nil: RunLVM).
	Run LVMRunner
}

// RunLVM runs an LVM tool from the node's PATH (ErrNoLVM when it has
// none), in the C locale, with LVMTimeout, keeping at most MaxLVMOutput
// bytes of stdout.
func RunLVM(ctx context.Context, tool string, args ...string) ([]byte, error) {
	path := findTool(tool)
	if path == "" {
		return nil, fmt.Errorf("%w (no %s)", ErrNoLVM, tool)
	}
	return runTool(ctx, path, tool, args, LVMTimeout, MaxLVMOutput)
}

// findTool is the path of a system tool: in the PATH, else in /sbin or
// /usr/sbin (which a service's PATH may lack); "" when none has it.
func findTool(tool string) string {
	if p, err := exec.LookPath(tool); err == nil {
		return p
	}
	for _, dir := range []string{"/sbin", "/usr/sbin"} {
		if p := filepath.Join(dir, tool); fileExists(p) {
			return p
		}
	}
	return ""
}

// runTool runs the program at path (named tool in errors) in the C
// locale with a timeout, keeping at most max bytes of stdout: more is an
// error, never output parsed in part. A failure carries the command and
// its stderr (bounded).
func runTool(ctx context.Context, path, tool string, args []string, timeout time.Duration, max int) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, path, args...)
	cmd.Env = []string{"PATH=" + commandPath, "LC_ALL=C"}
	out := &boundedBuffer{max: max}
	errBuf := &boundedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = out, errBuf
	killGroupOnCancel(cmd)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(errBuf.String()))
	}
	out.mu.Lock()
	dropped := out.dropped
	out.mu.Unlock()
	if dropped > 0 {
		return nil, fmt.Errorf("%s printed more than %d bytes", tool, max)
	}
	return out.Bytes(), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (s Storage) run() LVMRunner {
	if s.Run == nil {
		return RunLVM
	}
	return s.Run
}

// The LVM tools' arguments: no headings, MiB without suffix, '|' between
// fields.
var (
	vgsArgs = []string{"--noheadings", "--nosuffix", "--units", "m", "--separator", "|", "-o", "vg_name,vg_size,vg_free"}
	pvsArgs = []string{"--noheadings", "--nosuffix", "--units", "m", "--separator", "|", "-o", "pv_name,vg_name,pv_size,pv_free,pv_attr"}
)

// List reports the node's storage units of the given type ("" for all).
func (s Storage) List(ctx context.Context, typ string) (StorageReport, error) {
	var rep StorageReport
	switch typ {
	case "", StorageFile, StorageLVMPV, StorageLVMVG:
	default:
		return rep, fmt.Errorf("unknown storage type %q (known: %s, %s, %s)", typ, StorageFile, StorageLVMPV, StorageLVMVG)
	}
	if typ == "" || typ == StorageFile {
		seen := map[string]bool{}
		for _, d := range s.FileDirs {
			if d == "" || seen[d] {
				continue
			}
			seen[d] = true
			u, err := fileUnit(d)
			if err != nil {
				rep.Errors = append(rep.Errors, err.Error())
				continue
			}
			rep.Units = append(rep.Units, u)
		}
	}
	lvm := func(tool string, args []string, parse func([]byte) ([]StorageUnit, error)) {
		out, err := s.run()(ctx, tool, args...)
		if errors.Is(err, ErrNoLVM) {
			return
		}
		if err == nil {
			var us []StorageUnit
			us, err = parse(out)
			rep.Units = append(rep.Units, us...)
		}
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
		}
	}
	if typ == "" || typ == StorageLVMVG {
		lvm("vgs", vgsArgs, ParseVGS)
	}
	if typ == "" || typ == StorageLVMPV {
		lvm("pvs", pvsArgs, ParsePVS)
	}
	return rep, ctx.Err()
}

// fileUnit measures a file storage directory's file system.
func fileUnit(dir string) (StorageUnit, error) {
	p := filepath.Clean(dir)
	var st syscall.Statfs_t
	for {
		err := syscall.Statfs(p, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, fs.ErrNotExist) || parent == p {
			return StorageUnit{}, fmt.Errorf("file storage %s: %v", dir, err)
		}
		p = parent
	}
	bs := uint64(st.Bsize)
	size := int64(st.Blocks * bs >> 20)
	free := int64(st.Bavail * bs >> 20)
	used := int64((st.Blocks - st.Bfree) * bs >> 20)
	return StorageUnit{Type: StorageFile, Name: dir, SizeMiB: size, UsedMiB: used, FreeMiB: free, Allocatable: true}, nil
}

// parseMiB parses an LVM size in MiB ("1024.00"), rounding down.
func parseMiB(field, s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1<<50 || f != f {
		return 0, fmt.Errorf("%s %q is not a size in MiB", field, s)
	}
	return int64(f), nil
}

// checkLVMName refuses a name that LVM would not print: empty, too long,
// or with a byte outside printable ASCII.
func checkLVMName(field, s string) error {
	if s == "" || len(s) > maxLVMName+6 { // PV names are paths: /dev/ + name
		return fmt.Errorf("%s %q must be 1 to %d characters", field, s, maxLVMName+6)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' || s[i] == '|' {
			return fmt.Errorf("%s %q contains a character LVM does not print (byte %d)", field, s, i)
		}
	}
	return nil
}

// splitLVM splits an LVM listing into its rows of n fields.
func splitLVM(out []byte, n int, tool string) ([][]string, error) {
	if len(out) > MaxLVMOutput {
		return nil, fmt.Errorf("%s: output of %d bytes is over the limit of %d", tool, len(out), MaxLVMOutput)
	}
	var rows [][]string
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if len(rows) == MaxStorageUnits {
			return nil, fmt.Errorf("%s: more than %d units", tool, MaxStorageUnits)
		}
		f := strings.Split(line, "|")
		if len(f) != n {
			return nil, fmt.Errorf("%s: line %d has %d fields, want %d: %q", tool, i+1, len(f), n, line)
		}
		for k := range f {
			f[k] = strings.TrimSpace(f[k])
		}
		rows = append(rows, f)
	}
	return rows, nil
}

// ParseVGS parses `vgs --noheadings --nosuffix --units m --separator '|'
// -o vg_name,vg_size,vg_free`: one lvm-vg unit per line. A volume group
// is always allocatable.
func ParseVGS(out []byte) ([]StorageUnit, error) {
	rows, err := splitLVM(out, 3, "vgs")
	if err != nil {
		return nil, err
	}
	us := make([]StorageUnit, 0, len(rows))
	for _, f := range rows {
		if err := checkLVMName("vgs: vg_name", f[0]); err != nil {
			return nil, err
		}
		size, err := parseMiB("vgs: vg_size of "+f[0], f[1])
		if err != nil {
			return nil, err
		}
		free, err := parseMiB("vgs: vg_free of "+f[0], f[2])
		if err != nil {
			return nil, err
		}
		if free > size {
			return nil, fmt.Errorf("vgs: %s has %d MiB free of %d", f[0], free, size)
		}
		us = append(us, StorageUnit{Type: StorageLVMVG, Name: f[0], SizeMiB: size, UsedMiB: size - free, FreeMiB: free, Allocatable: true})
	}
	return us, nil
}

// ParsePVS parses `pvs --noheadings --nosuffix --units m --separator '|'
// -o pv_name,vg_name,pv_size,pv_free,pv_attr`: one lvm-pv unit per line,
// allocatable when pv_attr starts with 'a'. A PV in no volume group has an
// empty vg_name.
func ParsePVS(out []byte) ([]StorageUnit, error) {
	rows, err := splitLVM(out, 5, "pvs")
	if err != nil {
		return nil, err
	}
	us := make([]StorageUnit, 0, len(rows))
	for _, f := range rows {
		if err := checkLVMName("pvs: pv_name", f[0]); err != nil {
			return nil, err
		}
		if f[1] != "" {
			if err := checkLVMName("pvs: vg_name of "+f[0], f[1]); err != nil {
				return nil, err
			}
		}
		size, err := parseMiB("pvs: pv_size of "+f[0], f[2])
		if err != nil {
			return nil, err
		}
		free, err := parseMiB("pvs: pv_free of "+f[0], f[3])
		if err != nil {
			return nil, err
		}
		if free > size {
			return nil, fmt.Errorf("pvs: %s has %d MiB free of %d", f[0], free, size)
		}
		attr := f[4]
		if len(attr) < 1 || len(attr) > 8 {
			return nil, fmt.Errorf("pvs: pv_attr of %s is %q; want 1 to 8 characters", f[0], attr)
		}
		us = append(us, StorageUnit{Type: StorageLVMPV, Name: f[0], VG: f[1], SizeMiB: size, UsedMiB: size - free, FreeMiB: free, Allocatable: attr[0] == 'a'})
	}
	return us, nil
}

// ErrNoSuchUnit is a storage unit the node does not have.
var ErrNoSuchUnit = errors.New("no such storage unit")

// ModifyPV sets the allocatable flag of a physical volume (pvchange -x
// y|n), after checking with pvs that the node has it: a name it does not
// have is refused (ErrNoSuchUnit, naming the volumes it has) without
// running pvchange.
func (s Storage) ModifyPV(ctx context.Context, name string, allocatable bool) (string, error) {
	if err := checkLVMName("physical volume", name); err != nil {
		return "", err
	}
	out, err := s.run()(ctx, "pvs", pvsArgs...)
	if err != nil {
		return "", err
	}
	us, err := ParsePVS(out)
	if err != nil {
		return "", err
	}
	var have []string
	for _, u := range us {
		if u.Name == name {
			flag := "n"
			if allocatable {
				flag = "y"
			}
			o, err := s.run()(ctx, "pvchange", "-x", flag, "--", name)
			return string(o), err
		}
		have = append(have, u.Name)
	}
	if len(have) == 0 {
		return "", fmt.Errorf("%w: physical volume %s: the node has no physical volumes", ErrNoSuchUnit, name)
	}
	return "", fmt.Errorf("%w: physical volume %s (the node has %s)", ErrNoSuchUnit, name, strings.Join(have, ", "))
}

// CheckVGName refuses a volume group name LVM would refuse: empty, over
// 128 characters, starting with '-', "." or "..", or with a character
// other than letters, digits and "+_.-".
func CheckVGName(name string) error {
	if name == "" || len(name) > maxLVMName {
		return fmt.Errorf("volume group name must be 1 to %d characters, got %d", maxLVMName, len(name))
	}
	if name[0] == '-' || name == "." || name == ".." {
		return fmt.Errorf("volume group name %q is not valid", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("+_.-", c) >= 0) {
			return fmt.Errorf("volume group name %q has %q at %d; allowed are letters, digits and +_.-", name, c, i)
		}
	}
	return nil
}

// RepairVG runs vgreduce --removemissing on a volume group (Ganeti's
// repair-storage, for lvm-vg only), returning what it printed.
func (s Storage) RepairVG(ctx context.Context, name string) (string, error) {
	if err := CheckVGName(name); err != nil {
		return "", err
	}
	out, err := s.run()(ctx, "vgreduce", "--removemissing", "--", name)
	return string(out), err
}
