package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// fakeDRBDNet is DRBD 8.4 on a few nodes, in memory: each node's
// fakeDRBD carries out drbdsetup and drbdmeta as DRBD does (a minor is
// connected when the peer's minor of the same port points back at it;
// two primaries only when allowed; net-options reach the connected
// peer; a resync is instant) and writes the node's /proc/drbd and
// /sys/block/drbd<minor>/size after every command, so that the kvm
// driver reads them as it would the kernel's.
type fakeDRBDNet struct {
	mu    sync.Mutex
	nodes []*fakeDRBD
}

type fakeDRBD struct {
	net       *fakeDRBDNet
	name      string
	proc, sys string
	res       map[string]bool
	minors    map[int]*fakeMinor
	md        map[string]string // metadata device → disk state it gives
	calls     []string
	fail      map[string]error // a command (its first words) fails once
	// resizeLag: a resize with the peer there takes effect this long
	// after drbdsetup returns, as real DRBD's once the peer answers.
	resizeLag time.Duration
}

type fakeMinor struct {
	res         string
	disk, meta  string
	size        int64 // MiB
	local, peer string
	two         bool
	role, ds    string
	peerMinor   *fakeMinor
}

func newFakeDRBDNet(t *testing.T, names ...string) *fakeDRBDNet {
	n := &fakeDRBDNet{}
	for _, name := range names {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(filepath.Join(dir, "sys"), 0o700); err != nil {
			t.Fatal(err)
		}
		f := &fakeDRBD{net: n, name: name, proc: filepath.Join(dir, "drbd"), sys: filepath.Join(dir, "sys"),
			res: map[string]bool{}, minors: map[int]*fakeMinor{}, md: map[string]string{}, fail: map[string]error{}}
		n.nodes = append(n.nodes, f)
	}
	n.mu.Lock()
	n.settle()
	n.mu.Unlock()
	return n
}

// settle connects the minors that point at each other, resyncs them,
// and writes every node's files.
func (n *fakeDRBDNet) settle() {
	for _, f := range n.nodes {
		for _, m := range f.minors {
			m.peerMinor = nil
			if m.peer == "" {
				continue
			}
			for _, g := range n.nodes {
				for _, o := range g.minors {
					if g != f && o.local == m.peer && o.peer == m.local {
						m.peerMinor = o
					}
				}
			}
		}
	}
	for _, f := range n.nodes {
		for _, m := range f.minors {
			if p := m.peerMinor; p != nil && m.disk != "" && p.disk != "" && m.ds == "Inconsistent" && p.ds == fsm.DRBDUpToDate {
				m.ds = fsm.DRBDUpToDate // an instant resync
				if m.meta != "" {
					f.md[m.meta] = fsm.DRBDUpToDate // as the metadata says after
				}
			}
		}
	}
	for _, f := range n.nodes {
		var b strings.Builder
		b.WriteString("version: 8.4.11 (api:1/proto:86-101)\nsrcversion: F73C670A7EC572DB9CF3E5B \n")
		var ms []int
		for m := range f.minors {
			ms = append(ms, m)
		}
		sort.Ints(ms)
		for _, mi := range ms {
			m := f.minors[mi]
			if m.disk == "" && m.peer == "" {
				fmt.Fprintf(&b, "%2d: cs:Unconfigured\n", mi)
				continue
			}
			cs, pr, pd := "StandAlone", "Unknown", "DUnknown"
			if m.peer != "" {
				cs = "WFConnection"
			}
			if p := m.peerMinor; p != nil {
				cs, pr, pd = "Connected", p.role, p.ds
			}
			fmt.Fprintf(&b, "%2d: cs:%s ro:%s/%s ds:%s/%s C r-----\n    ns:0 nr:0 dw:0 dr:0 al:8 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0\n", mi, cs, m.role, pr, m.ds, pd)
			os.MkdirAll(filepath.Join(f.sys, "drbd"+strconv.Itoa(mi)), 0o700)
			os.WriteFile(filepath.Join(f.sys, "drbd"+strconv.Itoa(mi), "size"), []byte(strconv.FormatInt(m.size<<11, 10)+"\n"), 0o600)
		}
		os.WriteFile(f.proc, []byte(b.String()), 0o600)
	}
}

// show renders drbdsetup show of a minor as DRBD 8.4.11 does.
func (m *fakeMinor) show(minor int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "resource %s {\n    options {\n    }\n", m.res)
	if m.peer != "" {
		b.WriteString("    net {\n")
		if m.two {
			b.WriteString("        allow-two-primaries\tyes;\n")
		}
		b.WriteString("        cram-hmac-alg   \t\"md5\";\n        shared-secret   \t\"x\";\n    }\n")
		fmt.Fprintf(&b, "    _remote_host {\n        address\t\t\t%s;\n    }\n", strings.Replace(m.peer, ":", " ", 1))
	}
	b.WriteString("    _this_host {\n")
	if m.local != "" {
		fmt.Fprintf(&b, "        address\t\t\t%s;\n", strings.Replace(m.local, ":", " ", 1))
	}
	fmt.Fprintf(&b, "        volume 0 {\n            device\t\t\tminor %d;\n", minor)
	if m.disk != "" {
		fmt.Fprintf(&b, "            disk\t\t\t\"%s\";\n            meta-disk\t\t\t\"%s\";\n            disk {\n                size            \t%ds; # bytes\n            }\n", m.disk, m.meta, m.size<<11)
	}
	b.WriteString("        }\n    }\n}\n")
	return b.String()
}

func (f *fakeDRBD) run(_ context.Context, tool string, args ...string) ([]byte, error) {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	defer f.net.settle()
	call := tool + " " + strings.Join(args, " ")
	if len(args) > 0 && args[0] == "show" {
		m, err := strconv.Atoi(args[1])
		if err != nil || f.minors[m] == nil {
			return nil, fmt.Errorf("%s: Failure: (127) Device minor not allocated", args[1])
		}
		return []byte(f.minors[m].show(m)), nil
	}
	f.calls = append(f.calls, call)
	for prefix, err := range f.fail {
		if strings.HasPrefix(call, prefix) {
			delete(f.fail, prefix)
			return nil, err
		}
	}
	minor := func(s string) (*fakeMinor, error) {
		m, err := strconv.Atoi(s)
		if err != nil || f.minors[m] == nil {
			return nil, fmt.Errorf("%s: minor not allocated", s)
		}
		return f.minors[m], nil
	}
	byAddr := func(local, peer string) (*fakeMinor, error) {
		for _, m := range f.minors {
			if m.local == local && m.peer == peer {
				return m, nil
			}
		}
		return nil, fmt.Errorf("no connection %s %s", local, peer)
	}
	size := func() int64 {
		for i, a := range args {
			if a == "--size" {
				n, _ := strconv.ParseInt(strings.TrimSuffix(args[i+1], "m"), 10, 64)
				return n
			}
		}
		return 0
	}
	if tool == "drbdmeta" {
		if args[0] == "--force" && args[len(args)-1] == "create-md" {
			for _, m := range f.minors {
				if m.meta == args[3] && m.disk != "" {
					return nil, errors.New("create-md: device is attached")
				}
			}
			f.md[args[3]] = "Inconsistent"
			return nil, nil
		}
		if args[len(args)-1] == "apply-al" {
			if f.md[args[2]] == "" {
				return nil, fmt.Errorf("apply-al: no metadata on %s", args[2])
			}
			return nil, nil
		}
		return nil, fmt.Errorf("unexpected %s", call)
	}
	switch args[0] {
	case "down":
		for mi, m := range f.minors {
			if m.res == args[1] {
				delete(f.minors, mi) // demoted first, as DRBD does
			}
		}
		delete(f.res, args[1])
	case "new-resource":
		if f.res[args[1]] {
			return nil, errors.New("new-resource: resource exists")
		}
		f.res[args[1]] = true
	case "new-minor":
		m, _ := strconv.Atoi(args[2])
		if !f.res[args[1]] || f.minors[m] != nil {
			return nil, errors.New("new-minor: no resource, or minor exists")
		}
		f.minors[m] = &fakeMinor{res: args[1], role: "Secondary", ds: "Diskless"}
	case "attach":
		m, err := minor(args[1])
		if err != nil {
			return nil, err
		}
		if m.disk != "" || f.md[args[3]] == "" {
			return nil, errors.New("attach: attached already, or no metadata")
		}
		m.disk, m.meta, m.size, m.ds = args[2], args[3], size(), f.md[args[3]]
	case "detach":
		m, err := minor(args[1])
		if err != nil {
			return nil, err
		}
		m.disk, m.meta, m.ds = "", "", "Diskless"
	case "disk-options":
		if _, err := minor(args[1]); err != nil {
			return nil, err
		}
	case "connect":
		var m *fakeMinor
		for _, x := range f.minors {
			if x.res == args[1] {
				m = x
			}
		}
		if m == nil || m.peer != "" {
			return nil, errors.New("connect: no such resource, or connected already")
		}
		m.local, m.peer = args[2], args[3]
	case "disconnect":
		m, err := byAddr(args[1], args[2])
		if err != nil {
			return nil, err
		}
		m.local, m.peer, m.two = "", "", false
	case "net-options":
		m, err := byAddr(args[1], args[2])
		if err != nil {
			return nil, err
		}
		two := args[3] == "--allow-two-primaries=yes"
		if !two && m.role == "Primary" && m.peerMinor != nil && m.peerMinor.role == "Primary" {
			return nil, errors.New("net-options: both are primary")
		}
		m.two = two
		if p := m.peerMinor; p != nil {
			p.two = two // DRBD hands net options to the connected peer
		}
	case "primary":
		m, err := minor(args[1])
		if err != nil {
			return nil, err
		}
		force := len(args) > 2 && args[2] == "--force"
		if p := m.peerMinor; p != nil && p.role == "Primary" && !m.two {
			return nil, errors.New("State change failed: (-1) Multiple primaries not allowed by config")
		}
		if m.ds != fsm.DRBDUpToDate && !force && (m.peerMinor == nil || m.peerMinor.ds != fsm.DRBDUpToDate) {
			return nil, errors.New("State change failed: (-2) Need access to UpToDate data")
		}
		if force {
			m.ds = fsm.DRBDUpToDate
			f.md[m.meta] = fsm.DRBDUpToDate
		}
		m.role = "Primary"
	case "secondary":
		m, err := minor(args[1])
		if err != nil {
			return nil, err
		}
		m.role = "Secondary"
	case "resize":
		m, err := minor(args[1])
		if err != nil {
			return nil, err
		}
		if m.role != "Primary" && (m.peerMinor == nil || m.peerMinor.role != "Primary") {
			return nil, errors.New("0: Failure: (131) Need one Primary node to resize.")
		}
		if m.peerMinor == nil {
			return nil, nil // the size last agreed with the peer stays
		}
		if f.resizeLag > 0 {
			sz := size()
			time.AfterFunc(f.resizeLag, func() {
				f.net.mu.Lock()
				defer f.net.mu.Unlock()
				m.size = sz
				f.net.settle()
			})
			return nil, nil
		}
		m.size = size()
	default:
		return nil, fmt.Errorf("unexpected %s", call)
	}
	return nil, nil
}

// took returns the changing commands run since the last call.
func (f *fakeDRBD) took() []string {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

// state is a minor's line of the node's /proc/drbd, as the driver
// parses it.
func (f *fakeDRBD) state(t *testing.T, minor int) fsm.DRBDDevice {
	t.Helper()
	data, err := os.ReadFile(f.proc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseProcDRBD(data)
	if err != nil {
		t.Fatal(err)
	}
	return p.Devices[minor]
}

// set changes a minor as happens outside gnt (the peer's operator, a
// crash).
func (f *fakeDRBD) set(minor int, fn func(m *fakeMinor)) {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	fn(f.minors[minor])
	f.net.settle()
}

// drbdNode is one node of the drbd tests: its driver, volume group and
// DRBD.
type drbdNode struct {
	k    *KVM
	lvm  *fakeLVM
	drbd *fakeDRBD
	vg   string
}

func newDRBDNodes(t *testing.T, names ...string) []*drbdNode {
	net := newFakeDRBDNet(t, names...)
	var out []*drbdNode
	for i, name := range names {
		vg := "vg" + name
		lvm := &fakeLVM{vg: vg, lvs: map[string]*fakeLV{}}
		f := net.nodes[i]
		k, err := NewKVM(KVMConfig{Dir: t.TempDir(), Node: name, Addr: "127.0.0." + strconv.Itoa(i+1), VolumeGroup: vg, LVM: lvm.run,
			DRBD: f.run, ProcDRBD: f.proc, SysBlock: f.sys, Accel: AccelTCG, QEMU: "/nonexistent/qemu"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &drbdNode{k: k, lvm: lvm, drbd: f, vg: vg})
	}
	return out
}

// twoDRBDNodes is nodes n1 and n2 and a drbd instance of one 64 MiB disk,
// primary on n1 (minor m1) with its secondary on n2 (minor 1).
func twoDRBDNodes(t *testing.T, m1 int) ([]*drbdNode, fsm.Instance, string) {
	inst := drbdInstance(64, end("n1", m1), end("n2", 1))
	return newDRBDNodes(t, "n1", "n2"), inst, inst.Disks[0].UUID
}

// createdDRBDNodes is twoDRBDNodes (minor 0 on n1) with the disk created
// on both nodes, the secondary first, in sync.
func createdDRBDNodes(t *testing.T) (*drbdNode, *drbdNode, fsm.Instance, string) {
	t.Helper()
	ns, inst, disk := twoDRBDNodes(t, 0)
	for _, n := range []*drbdNode{ns[1], ns[0]} {
		if _, err := n.k.DiskCreate(context.Background(), inst, disk); err != nil {
			t.Fatal(err)
		}
	}
	return ns[0], ns[1], inst, disk
}

// down takes a minor's resource down as a reboot of the node does.
func (f *fakeDRBD) down(t *testing.T, res string) {
	t.Helper()
	if _, err := f.run(context.Background(), "drbdsetup", "down", res); err != nil {
		t.Fatal(err)
	}
	f.took()
}

const drbdSecret = "5ecret0f64hexdigits"

// drbdInstance is a drbd instance with one disk of size MiB, primary on
// the first end's node.
func drbdInstance(size int64, ends ...fsm.DRBDEnd) fsm.Instance {
	d := fsm.Disk{UUID: "0d15c000-0000-4000-8000-0000000d7bd0", SizeMiB: size, Mode: "rw",
		DRBD: &fsm.DRBDLogicalID{Port: 11000, Secret: drbdSecret, Ends: ends}}
	inst := guestInstance("", "", fsm.DTDrbd, d)
	inst.PrimaryNode = ends[0].Node
	inst.SecondaryNodes = []string{ends[1].Node}
	return inst
}

func end(node string, minor int) fsm.DRBDEnd {
	n, _ := strconv.Atoi(strings.TrimPrefix(node, "n"))
	return fsm.DRBDEnd{Node: "uuid-" + node, Minor: minor, Name: node, IP: "127.0.0." + strconv.Itoa(n)}
}

// connectArgs is the connect command of a minor between two nodes.
func connectArgs(res string, local, peer int) string {
	return fmt.Sprintf("drbdsetup connect %s ipv4:127.0.0.%d:11000 ipv4:127.0.0.%d:11000 --protocol C --after-sb-0pri discard-zero-changes --after-sb-1pri consensus --cram-hmac-alg md5 --shared-secret %s",
		res, local, peer, drbdSecret)
}

// assembleCmds is what setting a fresh minor up runs after create-md.
func assembleCmds(n *drbdNode, inst fsm.Instance, minor, local, peer int, size int64) []string {
	lv := lvName(inst.UUID, inst.Disks[0].UUID)
	data, meta := "/dev/"+n.vg+"/"+lv, "/dev/"+n.vg+"/"+lv+"_meta"
	res, m := "resource"+strconv.Itoa(minor), strconv.Itoa(minor)
	return []string{
		"drbdsetup down " + res, "drbdsetup new-resource " + res, "drbdsetup new-minor " + res + " " + m + " 0",
		"drbdmeta /dev/drbd" + m + " v08 " + meta + " flex-external apply-al",
		fmt.Sprintf("drbdsetup attach %s %s %s flexible --on-io-error=detach --size %dm", m, data, meta, size),
		"drbdsetup disk-options " + m + " --resync-rate 61440",
		connectArgs(res, local, peer),
	}
}

func createMD(n *drbdNode, inst fsm.Instance, minor int) string {
	lv := lvName(inst.UUID, inst.Disks[0].UUID)
	return fmt.Sprintf("drbdmeta --force /dev/drbd%d v08 /dev/%s/%s_meta flex-external create-md", minor, n.vg, lv)
}

// step checks an operation's result and the commands it ran on a node.
func drbdStep(t *testing.T, what string, n *drbdNode, r Result, err error, changed bool, drbd []string, lvm ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if r.Changed != changed {
		t.Errorf("%s: changed %v, want %v (%s)", what, r.Changed, changed, r.Output)
	}
	if got := n.drbd.took(); !reflect.DeepEqual(got, drbd) {
		t.Errorf("%s ran DRBD commands\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(drbd, "\n"))
	}
	if got := n.lvm.took(); !reflect.DeepEqual(got, lvm) {
		t.Errorf("%s ran LVM commands %q, want %q", what, got, lvm)
	}
}

// TestKVMDRBDDisks drives a drbd disk of the kvm driver through its life
// on three nodes against in-memory LVM and DRBD: each operation runs the
// DRBD and LVM commands it needs, once (a repeat runs none that change
// anything), and leaves the devices in the states it promises.
func TestKVMDRBDDisks(t *testing.T) {
	ctx := context.Background()
	ns := newDRBDNodes(t, "n1", "n2", "n3")
	n1, n2, n3 := ns[0], ns[1], ns[2]
	inst := drbdInstance(64, end("n1", 0), end("n2", 1))
	disk := inst.Disks[0].UUID
	lv := lvName(inst.UUID, disk)

	// The secondary first: volumes, metadata, device set up and
	// connecting; then the primary, which is made the resync's source.
	r, err := n2.k.DiskCreate(ctx, inst, disk)
	drbdStep(t, "create on the secondary", n2, r, err, true, append([]string{createMD(n2, inst, 1)}, assembleCmds(n2, inst, 1, 2, 1, 64)...),
		"lvcreate "+lv, "lvcreate "+lv+"_meta")
	if st := n2.drbd.state(t, 1); st.Connection != "WFConnection" || st.Disk != "Inconsistent" {
		t.Errorf("secondary alone: %+v", st)
	}
	r, err = n1.k.DiskCreate(ctx, inst, disk)
	drbdStep(t, "create on the primary", n1, r, err, true,
		append(append([]string{createMD(n1, inst, 0)}, assembleCmds(n1, inst, 0, 1, 2, 64)...), "drbdsetup primary 0 --force", "drbdsetup secondary 0"),
		"lvcreate "+lv, "lvcreate "+lv+"_meta")
	want := fsm.DRBDDevice{Minor: 0, Connection: "Connected", Role: "Secondary", PeerRole: "Secondary", Disk: "UpToDate", PeerDisk: "UpToDate"}
	if st := n1.drbd.state(t, 0); !reflect.DeepEqual(st, want) {
		t.Errorf("after create: %+v, want %+v", st, want)
	}
	for _, n := range []*drbdNode{n1, n2} {
		r, err = n.k.DiskCreate(ctx, inst, disk)
		drbdStep(t, "create again on "+n.k.cfg.Node, n, r, err, false, nil)
	}

	// Status reports each node's device and the path qemu opens.
	st, err := n2.k.Status(ctx, inst)
	if err != nil || len(st.Disks) != 1 || st.Disks[0].Path != "/dev/drbd1" || st.Disks[0].SizeMiB != 64 || st.Disks[0].DRBD == nil ||
		!st.Disks[0].DRBD.InSync() || st.Disks[0].DRBD.Minor != 1 {
		t.Errorf("status on the secondary: %+v %v", st, err)
	}

	// A start is refused while the peer is primary, changing nothing.
	n2.drbd.set(1, func(m *fakeMinor) { m.role = "Primary" })
	n2.drbd.took()
	if _, err := n1.k.Start(ctx, inst); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "primary on the peer node n2") {
		t.Errorf("start with the peer primary: %v", err)
	}
	drbdStep(t, "refused start", n1, Result{}, nil, false, nil)
	n2.drbd.set(1, func(m *fakeMinor) { m.role = "Secondary" })

	// A start makes the device primary before qemu; qemu failing to
	// start, it is made secondary again.
	if _, err := n1.k.Start(ctx, inst); err == nil || !strings.Contains(err.Error(), "qemu") {
		t.Errorf("start without qemu: %v", err)
	}
	drbdStep(t, "failed start", n1, Result{}, nil, false, []string{"drbdsetup primary 0", "drbdsetup secondary 0"})

	// A stop finds a device primary without qemu (a crash) and makes it
	// secondary.
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Primary" })
	n1.drbd.took()
	r, err = n1.k.Stop(ctx, inst, StopOptions{Force: true})
	drbdStep(t, "stop", n1, r, err, true, []string{"drbdsetup secondary 0"})
	r, err = n1.k.Stop(ctx, inst, StopOptions{Force: true})
	drbdStep(t, "stop again", n1, r, err, false, nil)

	// Live migration's roles: the target allows two primaries (DRBD
	// hands that to the source) and becomes primary while the source
	// is; the source, once sent, is secondary; finishing forbids two
	// primaries again.
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Primary" })
	n1.drbd.took()
	if err := n2.k.drbdActivate(ctx, OpMigratePrepare, inst); err != nil {
		t.Fatal(err)
	}
	drbdStep(t, "migration target", n2, Result{}, nil, false,
		[]string{"drbdsetup net-options ipv4:127.0.0.2:11000 ipv4:127.0.0.1:11000 --allow-two-primaries=yes", "drbdsetup primary 1"})
	if err := n1.k.drbdTwoPrimariesAll(ctx, OpMigrateSend, inst, true); err != nil {
		t.Fatal(err)
	}
	drbdStep(t, "migration source", n1, Result{}, nil, false, nil)
	if st := n1.drbd.state(t, 0); st.Role != "Primary" || st.PeerRole != "Primary" {
		t.Errorf("during the migration: %+v", st)
	}
	if _, err := n1.k.drbdDemote(ctx, OpMigrateSend, inst, false); err != nil {
		t.Fatal(err)
	}
	drbdStep(t, "migration sent", n1, Result{}, nil, false, []string{"drbdsetup secondary 0"})
	if err := n2.k.drbdTwoPrimariesAll(ctx, OpMigrateFinish, inst, false); err != nil {
		t.Fatal(err)
	}
	drbdStep(t, "migration finished", n2, Result{}, nil, false,
		[]string{"drbdsetup net-options ipv4:127.0.0.2:11000 ipv4:127.0.0.1:11000 --allow-two-primaries=no"})
	if st := n2.drbd.state(t, 1); st.Role != "Primary" || st.PeerRole != "Secondary" {
		t.Errorf("after the migration: %+v", st)
	}
	// A prepared target that fails to start qemu is secondary again,
	// and two primaries are no longer allowed.
	n2.drbd.set(1, func(m *fakeMinor) { m.role = "Secondary" })
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Primary" })
	n2.drbd.took()
	if _, err := n2.k.MigratePrepare(ctx, inst, Migration{ID: "m1", PeerNode: "n1"}); err == nil {
		t.Error("prepare without qemu succeeded")
	}
	drbdStep(t, "failed prepare", n2, Result{}, nil, false, []string{
		"drbdsetup net-options ipv4:127.0.0.2:11000 ipv4:127.0.0.1:11000 --allow-two-primaries=yes", "drbdsetup primary 1",
		"drbdsetup secondary 1", "drbdsetup net-options ipv4:127.0.0.2:11000 ipv4:127.0.0.1:11000 --allow-two-primaries=no"})
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Secondary" })
	n1.drbd.took()

	// Growing: the secondary's volume, then the primary's and DRBD's
	// size there.
	grown := inst
	grown.Disks = []fsm.Disk{inst.Disks[0]}
	grown.Disks[0].SizeMiB = 128
	r, err = n2.k.DiskGrow(ctx, grown, disk)
	drbdStep(t, "grow on the secondary", n2, r, err, true, nil, "lvextend -L "+lv)
	r, err = n1.k.DiskGrow(ctx, grown, disk)
	drbdStep(t, "grow on the primary", n1, r, err, true, []string{"drbdsetup primary 0", "drbdsetup resize 0 --size 128m", "drbdsetup secondary 0"}, "lvextend -L "+lv)
	for _, n := range []*drbdNode{n1, n2} {
		r, err = n.k.DiskGrow(ctx, grown, disk)
		drbdStep(t, "grow again on "+n.k.cfg.Node, n, r, err, false, nil)
	}
	inst = grown

	// A new secondary (replace-disks -n): created on n3, then the
	// primary's attach reconnects it from n2 to n3.
	moved := drbdInstance(128, end("n1", 0), end("n3", 5))
	moved.Disks[0].UUID = disk
	r, err = n3.k.DiskCreate(ctx, moved, disk)
	drbdStep(t, "create on the new secondary", n3, r, err, true, append([]string{createMD(n3, moved, 5)}, assembleCmds(n3, moved, 5, 3, 1, 128)...),
		"lvcreate "+lv, "lvcreate "+lv+"_meta")
	r, err = n1.k.DiskAttach(ctx, moved, disk)
	drbdStep(t, "attach on the primary", n1, r, err, true, []string{
		"drbdsetup disconnect ipv4:127.0.0.1:11000 ipv4:127.0.0.2:11000", connectArgs("resource0", 1, 3), "drbdsetup primary 0"})
	if st := n3.drbd.state(t, 5); !st.InSync() {
		t.Errorf("new secondary: %+v", st)
	}
	r, err = n1.k.DiskAttach(ctx, moved, disk)
	drbdStep(t, "attach again", n1, r, err, false, nil)
	// An attached disk's device (activate-disks) is primary on the
	// instance's primary node until it is detached (deactivate-disks).
	if st := n1.drbd.state(t, 0); st.Role != "Primary" {
		t.Errorf("attached on the primary node: %+v", st)
	}
	r, err = n1.k.DiskDetach(ctx, moved, disk)
	drbdStep(t, "detach on the primary", n1, r, err, true, []string{"drbdsetup secondary 0"})
	r, err = n1.k.DiskDetach(ctx, moved, disk)
	drbdStep(t, "detach again", n1, r, err, false, nil)
	// A detached disk found primary (a detach cut short) is made
	// secondary.
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Primary" })
	n1.drbd.took()
	r, err = n1.k.DiskDetach(ctx, moved, disk)
	drbdStep(t, "detach of a primary left", n1, r, err, true, []string{"drbdsetup secondary 0"})

	// Replacing the disks on the new secondary (replace-disks -s):
	// detached, volumes made anew with new metadata, attached again;
	// once per op id.
	r, err = n3.k.DiskReplace(ctx, moved, disk, "op-r1")
	drbdStep(t, "replace", n3, r, err, true, []string{"drbdsetup detach 5", createMD(n3, moved, 5),
		"drbdmeta /dev/drbd5 v08 /dev/vgn3/" + lv + "_meta flex-external apply-al",
		"drbdsetup attach 5 /dev/vgn3/" + lv + " /dev/vgn3/" + lv + "_meta flexible --on-io-error=detach --size 128m",
		"drbdsetup disk-options 5 --resync-rate 61440"},
		"lvremove -y "+lv, "lvremove -y "+lv+"_meta", "lvcreate "+lv, "lvcreate "+lv+"_meta")
	if st, err := n3.k.Status(ctx, moved); err != nil || st.Disks[0].Generation != "op-r1" || !st.Disks[0].DRBD.InSync() {
		t.Errorf("after replace: %+v %v", st, err)
	}
	r, err = n3.k.DiskReplace(ctx, moved, disk, "op-r1")
	drbdStep(t, "replace again", n3, r, err, false, nil)
	// Not without an up-to-date peer to resync from.
	n1.drbd.set(0, func(m *fakeMinor) { m.peer = "" })
	n3.drbd.took()
	if _, err := n3.k.DiskReplace(ctx, moved, disk, "op-r2"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "needs an up-to-date peer") {
		t.Errorf("replace with the peer inconsistent: %v", err)
	}
	drbdStep(t, "refused replace", n3, Result{}, nil, false, nil)
	n1.drbd.set(0, func(m *fakeMinor) { m.peer = "ipv4:127.0.0.3:11000" })

	// The old secondary forgets the instance: its minor down, both
	// volumes removed.
	r, err = n2.k.Remove(ctx, inst)
	drbdStep(t, "remove on the old secondary", n2, r, err, true, []string{"drbdsetup down resource1"}, "lvremove -y "+lv, "lvremove -y "+lv+"_meta")
	r, err = n2.k.Remove(ctx, inst)
	drbdStep(t, "remove again", n2, r, err, false, nil)
	for _, n := range []*drbdNode{n1, n3} {
		r, err = n.k.DiskRemove(ctx, moved, disk)
		drbdStep(t, "disk remove on "+n.k.cfg.Node, n, r, err, true, []string{"drbdsetup down resource" + map[*drbdNode]string{n1: "0", n3: "5"}[n]},
			"lvremove -y "+lv, "lvremove -y "+lv+"_meta")
		r, err = n.k.DiskRemove(ctx, moved, disk)
		drbdStep(t, "disk remove again on "+n.k.cfg.Node, n, r, err, false, nil)
	}
	for _, n := range ns {
		if len(n.lvm.lvs) != 0 || len(n.drbd.minors) != 0 {
			t.Errorf("%s keeps volumes %v, minors %v", n.k.cfg.Node, n.lvm.lvs, n.drbd.minors)
		}
	}
}

// TestKVMDRBDResume: an operation cut short (a command failing, as after
// a crash) converges when tried again.
func TestKVMDRBDResume(t *testing.T) {
	ctx := context.Background()
	ns, inst, disk := twoDRBDNodes(t, 0)
	n1, n2 := ns[0], ns[1]
	for _, cut := range []string{"drbdsetup new-minor", "drbdsetup attach", "drbdsetup connect", "drbdsetup secondary"} {
		n1.drbd.fail[cut] = errors.New("injected: " + cut + " ... --shared-secret " + drbdSecret)
		_, err := n1.k.DiskCreate(ctx, inst, disk)
		if err == nil {
			t.Fatalf("create cut at %s succeeded", cut)
		}
		// The secret of a failed connect is not in the error.
		if strings.Contains(err.Error(), drbdSecret) != (cut != "drbdsetup connect") {
			t.Errorf("create cut at %s: %v", cut, err)
		}
	}
	if _, err := n1.k.DiskCreate(ctx, inst, disk); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.k.DiskCreate(ctx, inst, disk); err != nil {
		t.Fatal(err)
	}
	if st := n1.drbd.state(t, 0); !st.InSync() || st.Role != "Secondary" {
		t.Errorf("after resumed creates: %+v", st)
	}
	n1.drbd.took()
	n1.lvm.took()
	r, err := n1.k.DiskCreate(ctx, inst, disk)
	drbdStep(t, "create once more", n1, r, err, false, nil)

	// A grow cut after the volume grew resizes DRBD when tried again
	// (the device's size says it is due, not the volume's).
	grown := inst
	grown.Disks = []fsm.Disk{inst.Disks[0]}
	grown.Disks[0].SizeMiB = 96
	if _, err := n2.k.DiskGrow(ctx, grown, disk); err != nil {
		t.Fatal(err)
	}
	n1.drbd.fail["drbdsetup resize"] = errors.New("injected")
	if _, err := n1.k.DiskGrow(ctx, grown, disk); err == nil {
		t.Fatal("grow cut at resize succeeded")
	}
	if st := n1.drbd.state(t, 0); st.Role != "Secondary" {
		t.Errorf("grow cut at resize left the device %s", st.Role)
	}
	n1.drbd.took()
	n1.lvm.took()
	r, err = n1.k.DiskGrow(ctx, grown, disk)
	drbdStep(t, "grow again", n1, r, err, true, []string{"drbdsetup primary 0", "drbdsetup resize 0 --size 96m", "drbdsetup secondary 0"})

	// A replace cut after the volumes went, or before the new ones are
	// attached, converges when tried again with the same op id.
	for i, cut := range []string{"drbdmeta --force", "drbdsetup attach"} {
		op := fmt.Sprintf("op-replace-%d", i)
		n2.drbd.fail[cut] = errors.New("injected")
		if _, err := n2.k.DiskReplace(ctx, grown, disk, op); err == nil {
			t.Fatalf("replace cut at %s succeeded", cut)
		}
		if r, err := n2.k.DiskReplace(ctx, grown, disk, op); err != nil || !r.Changed {
			t.Fatalf("replace tried again after a cut at %s: %+v %v", cut, r, err)
		}
		if st := n2.drbd.state(t, 1); !st.InSync() {
			t.Errorf("after the replace cut at %s: %+v", cut, st)
		}
		if r, err := n2.k.DiskReplace(ctx, grown, disk, op); err != nil || r.Changed {
			t.Errorf("replace once more: %+v %v", r, err)
		}
	}
}

// TestKVMDRBDRefusals: a drbd disk whose logical id misses what this node
// needs is refused, naming what is missing, and nothing is run; a minor
// set up for another disk is never touched.
func TestKVMDRBDRefusals(t *testing.T) {
	ctx := context.Background()
	ns, good, disk := twoDRBDNodes(t, 0)
	n1 := ns[0]
	for _, c := range []struct {
		change func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID
		err    string
	}{
		{func(*fsm.DRBDLogicalID) *fsm.DRBDLogicalID { return nil }, "has no logical id"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Secret = ""; return id }, "has no shared secret"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Secret = "a b"; return id }, "a shared secret DRBD cannot take"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Port = 0; return id }, "has port 0"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Ends = id.Ends[:1]; return id }, "has 1 ends"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Ends[0].Name = "n9"; return id }, "has no end for node n1"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Ends[1].IP = ""; return id }, "has no IP for node n2"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Ends[0].IP = "x"; return id }, "not an IP address"},
		{func(id *fsm.DRBDLogicalID) *fsm.DRBDLogicalID { id.Ends[0].Minor = -1; return id }, "has minor -1 for node n1"},
	} {
		inst := good
		id := *good.Disks[0].DRBD
		id.Ends = append([]fsm.DRBDEnd(nil), id.Ends...)
		inst.Disks = []fsm.Disk{good.Disks[0]}
		inst.Disks[0].DRBD = c.change(&id)
		for what, call := range map[string]func() (Result, error){
			"create":  func() (Result, error) { return n1.k.DiskCreate(ctx, inst, disk) },
			"grow":    func() (Result, error) { return n1.k.DiskGrow(ctx, inst, disk) },
			"replace": func() (Result, error) { return n1.k.DiskReplace(ctx, inst, disk, "op1") },
			"attach":  func() (Result, error) { return n1.k.DiskAttach(ctx, inst, disk) },
		} {
			if _, err := call(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s with %q: %v", what, c.err, err)
			}
		}
	}
	drbdStep(t, "refused operations", n1, Result{}, nil, false, nil)

	// Minor 0 is another disk's: the create is refused, and the minor
	// keeps its disk.
	other := drbdInstance(64, end("n1", 0), end("n2", 1))
	other.UUID = "6b5a1c1e-0000-4000-8000-00000000c0df"
	if _, err := n1.k.DiskCreate(ctx, other, disk); err != nil {
		t.Fatal(err)
	}
	n1.drbd.took()
	n1.lvm.took()
	_, err := n1.k.DiskCreate(ctx, good, disk)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "DRBD minor 0 on node n1 is in use by resource resource0 with disk") {
		t.Errorf("create on another disk's minor: %v", err)
	}
	if got := n1.drbd.took(); len(got) != 0 {
		t.Errorf("create on another disk's minor ran %q", got)
	}
	if _, err := n1.k.DiskReplace(ctx, fsm.Instance{Name: "p", UUID: "u1", DiskTemplate: fsm.DTPlain}, disk, "op1"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("replace of a plain disk: %v", err)
	}
}

// TestKVMDRBDRemoveUnconfigured: removing an instance whose record keeps
// a drbd disk that no configuration names any longer, or whose logical id
// no longer has this node's end (an old secondary removed after the
// record changed), finds the disk's minor by its data volume, takes it
// down and removes the volumes.
func TestKVMDRBDRemoveUnconfigured(t *testing.T) {
	ctx := context.Background()
	ns, inst, disk := twoDRBDNodes(t, 3)
	n1 := ns[0]
	lv := lvName(inst.UUID, disk)
	without := inst
	without.Disks = nil
	elsewhere := drbdInstance(64, end("n2", 1), end("n3", 4))
	for _, c := range []struct {
		what   string
		config fsm.Instance
	}{{"a configuration without the disk", without}, {"a logical id without this node", elsewhere}} {
		if _, err := n1.k.DiskCreate(ctx, inst, disk); err != nil {
			t.Fatal(err)
		}
		if c.config.Disks == nil {
			if _, err := n1.k.DiskDetach(ctx, c.config, disk); err != nil {
				t.Fatal(err)
			}
		}
		n1.drbd.took()
		n1.lvm.took()
		r, err := n1.k.Remove(ctx, c.config)
		drbdStep(t, "remove with "+c.what, n1, r, err, true, []string{"drbdsetup down resource3"}, "lvremove -y "+lv, "lvremove -y "+lv+"_meta")
	}
}

// TestKVMDRBDParams: the instance's drbd disk parameters reach DRBD's
// and LVM's commands as Ganeti's give them; values DRBD cannot take are
// refused, naming the parameter, and nothing is run.
func TestKVMDRBDParams(t *testing.T) {
	ctx := context.Background()
	ns, inst, disk := twoDRBDNodes(t, 0)
	n2 := ns[1]
	var lvcreates []string
	n2.k.cfg.LVM = func(ctx context.Context, tool string, args ...string) ([]byte, error) {
		if tool == "lvcreate" {
			lvcreates = append(lvcreates, strings.Join(args[:len(args)-2], " "))
		}
		return n2.lvm.run(ctx, tool, args...)
	}
	for _, c := range []struct {
		params map[string]any
		is     error
		err    string
	}{
		{map[string]any{"protocol": "D"}, ErrInvalid, "disk parameter protocol of instance guest1 is D; want A, B or C"},
		{map[string]any{"disk-barriers": "bx"}, ErrInvalid, "disk parameter disk-barriers of instance guest1 is bx; want n (none disabled), or any of b"},
		{map[string]any{"disk-barriers": "bb"}, ErrInvalid, "disk-barriers of instance guest1 is bb"},
		{map[string]any{"meta-barriers": "yes"}, ErrInvalid, "meta-barriers of instance guest1 is yes; want true or false"},
		{map[string]any{"resync-rate": 0.0}, ErrInvalid, "resync-rate of instance guest1 is 0; want 1 to 4194304"},
		{map[string]any{"resync-rate": 1.5}, ErrInvalid, "resync-rate of instance guest1 is 1.5; want a whole number"},
		{map[string]any{"dynamic-resync": true, "c-plan-ahead": 0}, ErrInvalid, "c-plan-ahead of instance guest1 is 0; want 1 to 300 (0 disables DRBD's dynamic resync controller"},
		{map[string]any{"data-stripes": 65}, ErrInvalid, "data-stripes of instance guest1 is 65; want 1 to 64"},
		{map[string]any{"default-metavg": "othervg"}, ErrNotSupported, "default-metavg of instance guest1 is othervg"},
	} {
		bad := inst
		bad.DiskParams = c.params
		if _, err := n2.k.DiskCreate(ctx, bad, disk); !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v: %v, want %q", c.params, err, c.err)
		}
	}
	drbdStep(t, "refused creates", n2, Result{}, nil, false, nil)

	inst.DiskParams = map[string]any{"protocol": "B", "disk-barriers": "bf", "meta-barriers": true, "disk-custom": "--al-extents 3389",
		"dynamic-resync": true, "c-plan-ahead": 30.0, "net-custom": " --max-buffers 8000 ", "data-stripes": 2, "default-metavg": n2.vg}
	r, err := n2.k.DiskCreate(ctx, inst, disk)
	cmds := assembleCmds(n2, inst, 1, 2, 1, 64)
	cmds[4] += " --md-flushes=no --disk-flushes=no --disk-barrier=no --al-extents 3389"
	cmds[5] = "drbdsetup disk-options 1 --c-plan-ahead 30 --c-fill-target 0 --c-delay-target 1 --c-max-rate 61440 --c-min-rate 4096"
	cmds[6] = strings.Replace(cmds[6], "--protocol C", "--protocol B", 1) + " --max-buffers 8000"
	lv := lvName(inst.UUID, disk)
	drbdStep(t, "create with parameters", n2, r, err, true, append([]string{createMD(n2, inst, 1)}, cmds...), "lvcreate "+lv, "lvcreate "+lv+"_meta")
	want := []string{"-Wy -y -L 64m -n " + lv + " -i 2", "-Wy -y -L 128m -n " + lv + "_meta"}
	if !reflect.DeepEqual(lvcreates, want) {
		t.Errorf("lvcreate ran with %q, want %q", lvcreates, want)
	}
}

// TestKVMDRBDReplaceEachDisk: the jobs replace every disk of an instance
// under one op id; each disk is replaced once for it, the second disk
// too.
func TestKVMDRBDReplaceEachDisk(t *testing.T) {
	ctx := context.Background()
	ns, inst, disk := twoDRBDNodes(t, 0)
	second := fsm.Disk{UUID: "0d15c000-0000-4000-8000-0000000d7bd1", SizeMiB: 32, Mode: "rw",
		DRBD: &fsm.DRBDLogicalID{Port: 11001, Secret: drbdSecret, Ends: []fsm.DRBDEnd{end("n1", 1), end("n2", 2)}}}
	inst.Disks = append(inst.Disks, second)
	for _, n := range []*drbdNode{ns[1], ns[0]} {
		for _, d := range inst.Disks {
			if _, err := n.k.DiskCreate(ctx, inst, d.UUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	n2 := ns[1]
	for _, d := range []string{disk, second.UUID} {
		r, err := n2.k.DiskReplace(ctx, inst, d, "job1-op0")
		if err != nil || !r.Changed {
			t.Errorf("replace of disk %s: %+v %v", d, r, err)
		}
	}
	st, err := n2.k.Status(ctx, inst)
	if err != nil || len(st.Disks) != 2 {
		t.Fatalf("status: %+v %v", st, err)
	}
	for _, d := range st.Disks {
		if d.Generation != "job1-op0" || d.DRBD == nil || !d.DRBD.InSync() {
			t.Errorf("disk %s after the replace: %+v %+v", d.UUID, d, d.DRBD)
		}
	}
	n2.drbd.took()
	n2.lvm.took()
	for _, d := range []string{disk, second.UUID} {
		r, err := n2.k.DiskReplace(ctx, inst, d, "job1-op0")
		drbdStep(t, "replace again of disk "+d, n2, r, err, false, nil)
	}
}

// TestKVMDRBDStaleSecondary: a secondary whose device is down (a reboot)
// reports it Unconfigured, not absent; a migration to a secondary that is
// not connected and up to date on both sides is refused before two
// primaries are allowed, naming the states; a single primary on a
// disconnected device stays allowed (the failover of a dead primary).
func TestKVMDRBDStaleSecondary(t *testing.T) {
	ctx := context.Background()
	n1, n2, inst, _ := createdDRBDNodes(t)
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Primary" }) // the instance runs on n1
	// n2 reboots: its minor is gone, its volumes stay.
	n2.drbd.down(t, "resource1")
	st, err := n2.k.Status(ctx, inst)
	want := fsm.DRBDDevice{Minor: 1, Connection: DRBDUnconfigured}
	if err != nil || len(st.Disks) != 1 || st.Disks[0].DRBD == nil || *st.Disks[0].DRBD != want {
		t.Fatalf("status of the rebooted secondary: %+v %v, want its disk's DRBD %+v", st, err, want)
	}
	if st.Disks[0].DRBD.LocalOK() {
		t.Error("an unconfigured device reports its disk OK")
	}

	// The primary lost its link meanwhile: the migration's target sets
	// its device up and connects, but is not allowed a second primary.
	n1.drbd.set(0, func(m *fakeMinor) { m.peer = "" })
	n2.drbd.took()
	n2.lvm.took()
	_, err = n2.k.MigratePrepare(ctx, inst, Migration{ID: "m1", PeerNode: "n1"})
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "WFConnection, UpToDate here and DUnknown on n1") {
		t.Errorf("migration to a disconnected secondary: %v", err)
	}
	drbdStep(t, "refused migration", n2, Result{}, nil, false, assembleCmds(n2, inst, 1, 2, 1, 64)[:7])
	if st := n2.drbd.state(t, 1); st.Role != "Secondary" {
		t.Errorf("after the refused migration: %+v", st)
	}
	if got := n2.drbd.minors[1].two; got {
		t.Error("two primaries allowed after the refused migration")
	}

	// Connected, but the secondary's data outdated: refused too.
	n1.drbd.set(0, func(m *fakeMinor) { m.peer = "ipv4:127.0.0.2:11000" })
	n2.drbd.set(1, func(m *fakeMinor) { m.ds = "Outdated" })
	n2.drbd.took()
	_, err = n2.k.MigratePrepare(ctx, inst, Migration{ID: "m1", PeerNode: "n1"})
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "Connected, Outdated here and UpToDate on n1") {
		t.Errorf("migration to an outdated secondary: %v", err)
	}
	drbdStep(t, "refused migration", n2, Result{}, nil, false, nil)

	// In sync: the target becomes the second primary.
	n2.drbd.set(1, func(m *fakeMinor) { m.ds = fsm.DRBDUpToDate })
	n2.drbd.took()
	if err := n2.k.drbdActivate(ctx, OpMigratePrepare, inst); err != nil {
		t.Fatal(err)
	}
	drbdStep(t, "migration to a secondary in sync", n2, Result{}, nil, false,
		[]string{"drbdsetup net-options ipv4:127.0.0.2:11000 ipv4:127.0.0.1:11000 --allow-two-primaries=yes", "drbdsetup primary 1"})
	n2.drbd.set(1, func(m *fakeMinor) { m.role = "Secondary"; m.two = false })
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Secondary"; m.two = false })

	// The primary node dead (its link down): the failover's start on n2
	// makes the disconnected device primary (qemu is missing here, so
	// the start fails after it, and demotes it again).
	n1.drbd.set(0, func(m *fakeMinor) { m.peer = "" })
	n2.drbd.took()
	failover := inst
	failover.PrimaryNode, failover.SecondaryNodes = "uuid-n2", []string{"uuid-n1"}
	if _, err := n2.k.Start(ctx, failover); err == nil || !strings.Contains(err.Error(), "qemu") {
		t.Errorf("start on the disconnected secondary: %v", err)
	}
	drbdStep(t, "failover's start", n2, Result{}, nil, false, []string{"drbdsetup primary 1", "drbdsetup secondary 1"})
}

// TestKVMDRBDSecondaryAttachDetach: on a node that is not the instance's
// primary, an attach only assembles the device (a secondary back from a
// reboot is set up, connected, resyncs) and does not attach the disk; a
// detach takes the device down and keeps the volumes, also when the
// logical id no longer names the node (an old secondary dropped before
// its replacement is synced), whose remove afterwards removes the
// volumes. A replace on a node whose device is down sets it up and
// connects before it looks at the peer.
func TestKVMDRBDSecondaryAttachDetach(t *testing.T) {
	ctx := context.Background()
	n1, n2, inst, disk := createdDRBDNodes(t)
	lv := lvName(inst.UUID, disk)
	// The secondary rebooted: its attach sets the device up and
	// connects it (it resyncs), secondary, the disk not attached.
	n2.drbd.down(t, "resource1")
	n2.lvm.took()
	r, err := n2.k.DiskAttach(ctx, inst, disk)
	drbdStep(t, "attach on the rebooted secondary", n2, r, err, true, assembleCmds(n2, inst, 1, 2, 1, 64))
	if st := n2.drbd.state(t, 1); !st.InSync() || st.Role != "Secondary" {
		t.Errorf("secondary after its attach: %+v", st)
	}
	st, err := n2.k.Status(ctx, inst)
	if err != nil || len(st.Disks) != 1 || st.Disks[0].Attached {
		t.Errorf("status of the secondary after its attach: %+v %v", st, err)
	}
	r, err = n2.k.DiskAttach(ctx, inst, disk)
	drbdStep(t, "attach again on the secondary", n2, r, err, false, nil)

	// The detach on the secondary takes the device down, keeping the
	// volumes; again, nothing.
	r, err = n2.k.DiskDetach(ctx, inst, disk)
	drbdStep(t, "detach on the secondary", n2, r, err, true, []string{"drbdsetup down resource1"})
	if len(n2.lvm.lvs) != 2 || n2.drbd.minors[1] != nil {
		t.Errorf("after the secondary's detach: volumes %v, minor %v", n2.lvm.lvs, n2.drbd.minors[1])
	}
	if st, err := n2.k.Status(ctx, inst); err != nil || len(st.Disks) != 1 || st.Disks[0].DRBD == nil || st.Disks[0].DRBD.Connection != DRBDUnconfigured {
		t.Errorf("status of the secondary after its detach: %+v %v", st, err)
	}
	r, err = n2.k.DiskDetach(ctx, inst, disk)
	drbdStep(t, "detach again on the secondary", n2, r, err, false, nil)

	// A replace (replace-disks -s) on the secondary whose device is
	// down: set up and connected first, then replaced, resyncing.
	r, err = n2.k.DiskReplace(ctx, inst, disk, "op-r1")
	data, meta := "/dev/vgn2/"+lv, "/dev/vgn2/"+lv+"_meta"
	drbdStep(t, "replace on the secondary whose device is down", n2, r, err, true, []string{
		"drbdsetup down resource1", "drbdsetup new-resource resource1", "drbdsetup new-minor resource1 1 0", connectArgs("resource1", 2, 1),
		createMD(n2, inst, 1), "drbdmeta /dev/drbd1 v08 " + meta + " flex-external apply-al",
		"drbdsetup attach 1 " + data + " " + meta + " flexible --on-io-error=detach --size 64m", "drbdsetup disk-options 1 --resync-rate 61440"},
		"lvremove -y "+lv, "lvremove -y "+lv+"_meta", "lvcreate "+lv, "lvcreate "+lv+"_meta")
	if st := n2.drbd.state(t, 1); !st.InSync() {
		t.Errorf("secondary after its replace: %+v", st)
	}

	// A new secondary n3 recorded: the old secondary n2, which the
	// logical id no longer names, is detached (its device down, found
	// by its data volume), then removed (its volumes).
	moved := drbdInstance(64, end("n1", 0), end("n3", 5))
	r, err = n2.k.DiskDetach(ctx, moved, disk)
	drbdStep(t, "detach on the old secondary", n2, r, err, true, []string{"drbdsetup down resource1"})
	if len(n2.lvm.lvs) != 2 {
		t.Errorf("the old secondary's volumes after its detach: %v", n2.lvm.lvs)
	}
	r, err = n2.k.DiskRemove(ctx, moved, disk)
	drbdStep(t, "remove on the old secondary", n2, r, err, true, nil, "lvremove -y "+lv, "lvremove -y "+lv+"_meta")

	// On the primary node the attach still makes the device primary.
	n1.drbd.took()
	n1.lvm.took()
	r, err = n1.k.DiskAttach(ctx, inst, disk)
	drbdStep(t, "attach on the primary", n1, r, err, true, []string{"drbdsetup primary 0"})
	if st, err := n1.k.Status(ctx, inst); err != nil || !st.Disks[0].Attached {
		t.Errorf("status of the primary after its attach: %+v %v", st, err)
	}
}

// TestKVMDRBDParamsWhereUsed: the disk parameters are read only by the
// commands that use them (attach and disk-options, connect, lvcreate): a
// value DRBD cannot take never fails a stop, a status, a detach or a
// removal, and fails an operation that needs it before it runs anything.
func TestKVMDRBDParamsWhereUsed(t *testing.T) {
	ctx := context.Background()
	n1, n2, inst, disk := createdDRBDNodes(t)
	bad := inst
	bad.DiskParams = map[string]any{"resync-rate": 0.0, "protocol": "D", "data-stripes": 99.0}
	n1.drbd.set(0, func(m *fakeMinor) { m.role = "Primary" }) // left primary by a crash
	for _, n := range []*drbdNode{n1, n2} {
		n.drbd.took()
		n.lvm.took()
	}
	r, err := n1.k.Stop(ctx, bad, StopOptions{Force: true})
	drbdStep(t, "stop", n1, r, err, true, []string{"drbdsetup secondary 0"})
	if st, err := n1.k.Status(ctx, bad); err != nil || len(st.Disks) != 1 || st.Disks[0].DRBD == nil || !st.Disks[0].DRBD.InSync() {
		t.Errorf("status: %+v %v", st, err)
	}
	r, err = n2.k.DiskAttach(ctx, bad, disk)
	drbdStep(t, "attach of an assembled device on the secondary", n2, r, err, false, nil)

	// The secondary's device down: its attach needs attach's and
	// connect's options, and is refused before anything runs.
	n2.drbd.down(t, "resource1")
	if _, err := n2.k.DiskAttach(ctx, bad, disk); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "resync-rate of instance guest1 is 0; want 1 to 4194304") {
		t.Errorf("attach needing the parameters: %v", err)
	}
	drbdStep(t, "refused attach", n2, Result{}, nil, false, nil)

	lv := lvName(inst.UUID, disk)
	r, err = n1.k.Remove(ctx, bad)
	drbdStep(t, "remove", n1, r, err, true, []string{"drbdsetup down resource0"}, "lvremove -y "+lv, "lvremove -y "+lv+"_meta")
	r, err = n2.k.DiskRemove(ctx, bad, disk)
	drbdStep(t, "disk remove", n2, r, err, true, nil, "lvremove -y "+lv, "lvremove -y "+lv+"_meta")
}

// grownOnSecondary is createdDRBDNodes with the disk grown to 128 MiB on
// the secondary, n2: the instance so grown, for the primary's grow.
func grownOnSecondary(t *testing.T) (*drbdNode, *drbdNode, fsm.Instance, string) {
	t.Helper()
	n1, n2, inst, disk := createdDRBDNodes(t)
	grown := inst
	grown.Disks = []fsm.Disk{inst.Disks[0]}
	grown.Disks[0].SizeMiB = 128
	if _, err := n2.k.DiskGrow(context.Background(), grown, disk); err != nil {
		t.Fatal(err)
	}
	return n1, n2, grown, disk
}

// TestKVMDRBDGrowUnagreed: a grow whose resize DRBD takes without growing
// the device (the peer disconnected: DRBD keeps the size it last agreed
// on) fails, naming both sizes, and qemu is not told; once connected, the
// grow again resizes.
func TestKVMDRBDGrowUnagreed(t *testing.T) {
	ctx := context.Background()
	n1, n2, grown, disk := grownOnSecondary(t)
	n2.drbd.down(t, "resource1")
	_, err := n1.k.DiskGrow(ctx, grown, disk)
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op != OpDiskGrow || !strings.Contains(err.Error(), "DRBD minor 0 of disk "+disk+" has 64 MiB after drbdsetup resize to 128 MiB (connection WFConnection") {
		t.Errorf("grow with the peer disconnected: %v", err)
	}
	if _, err := n2.k.DiskAttach(ctx, grown, disk); err != nil {
		t.Fatal(err)
	}
	n1.drbd.took()
	n1.lvm.took()
	r, err := n1.k.DiskGrow(ctx, grown, disk)
	drbdStep(t, "grow connected again", n1, r, err, true, []string{"drbdsetup primary 0", "drbdsetup resize 0 --size 128m", "drbdsetup secondary 0"})
}

// TestKVMDRBDGrowPeerAnswersLate: DRBD grows the device only once the
// peer has answered with its grown volume's size, after drbdsetup resize
// returned (as between two real nodes): the grow waits for the new size
// before the device is made secondary again, and succeeds.
func TestKVMDRBDGrowPeerAnswersLate(t *testing.T) {
	ctx := context.Background()
	n1, _, grown, disk := grownOnSecondary(t)
	n1.drbd.resizeLag = 300 * time.Millisecond
	n1.drbd.took()
	n1.lvm.took()
	r, err := n1.k.DiskGrow(ctx, grown, disk)
	drbdStep(t, "grow with the peer's late answer", n1, r, err, true, []string{"drbdsetup primary 0", "drbdsetup resize 0 --size 128m", "drbdsetup secondary 0"},
		"lvextend -L "+lvName(grown.UUID, disk))
	if st := n1.drbd.state(t, 0); st.Role != "Secondary" {
		t.Errorf("role after the grow: %s, want Secondary", st.Role)
	}
	r, err = n1.k.DiskGrow(ctx, grown, disk)
	drbdStep(t, "grow again", n1, r, err, false, nil)
}
