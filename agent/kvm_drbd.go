package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Disks of template drbd: DRBD 8.4 devices over two logical volumes of
// the node's volume group, as Ganeti's DRBD84CmdGenerator drives them.
// Each disk has its data volume "<instance uuid>.<disk uuid>" (the
// disk's size) and its metadata volume "<...>_meta" (fsm.DRBDMetaMiB,
// flexible external metadata), the minor its logical id gives this
// node's end, and the resource "resource<minor>"; qemu opens
// /dev/drbd<minor>.
//
// Every operation first assembles the device idempotently, from what
// /proc/drbd and `drbdsetup show <minor>` say: the resource and minor
// set up, the volumes attached, the network connected to the peer end
// of the logical id (a device connected to another peer address, after
// the secondary changed, is disconnected and connected to the configured
// one). Then roles: the instance's node is primary while qemu runs
// there (start refused while the peer is primary), secondary otherwise;
// two primaries only during a live migration (allow-two-primaries set by
// the target's MigratePrepare and the source's MigrateSend, cleared by
// MigrateFinish or the target's MigrateAbort).

// drbdDisk is a drbd disk as this node drives it.
type drbdDisk struct {
	uuid     string
	size     int64
	minor    int
	res      string
	local    string // drbdsetup's form: "ipv4:10.0.0.1:11000"
	peer     string
	peerName string
	secret   string
	primary  bool // this node is the instance's primary node
	data     string
	meta     string // logical volume names
	dataDev  string
	metaDev  string
	// The instance's disk parameters, read by the commands that use
	// them (diskOpts, connectOpts, stripes).
	params drbdParams
	vg     string // the node's volume group
}

func (d drbdDisk) dev() string { return "/dev/drbd" + strconv.Itoa(d.minor) }
func (d drbdDisk) m() string   { return strconv.Itoa(d.minor) }

// metaLVName is the metadata volume of a drbd disk.
func metaLVName(inst, disk string) string { return lvName(inst, disk) + "_meta" }

func (k *KVM) drbdRun() DRBDRunner {
	if k.cfg.DRBD != nil {
		return k.cfg.DRBD
	}
	return RunDRBD
}

// drbdOf is the configured disk's DRBD as this node's end drives it; a
// disk whose logical id misses what that needs is refused (ErrInvalid).
func (k *KVM) drbdOf(inst fsm.Instance, disk fsm.Disk) (drbdDisk, error) {
	what := fmt.Sprintf("disk %s of instance %s (template drbd)", disk.UUID, inst.Name)
	id := disk.DRBD
	switch {
	case id == nil:
		return drbdDisk{}, invalid("%s has no logical id (port, secret, minors)", what)
	case id.Secret == "":
		return drbdDisk{}, invalid("%s has no shared secret in its logical id", what)
	case id.Port < 1 || id.Port > 65535:
		return drbdDisk{}, invalid("%s has port %d in its logical id, not 1 to 65535", what, id.Port)
	case len(id.Ends) != 2:
		return drbdDisk{}, invalid("%s has %d ends in its logical id, want 2 (primary and secondary)", what, len(id.Ends))
	}
	li := -1
	for i, e := range id.Ends {
		if e.Name == k.cfg.Node {
			li = i
		}
	}
	if li < 0 {
		return drbdDisk{}, invalid("%s has no end for node %s in its logical id", what, k.cfg.Node)
	}
	local, peer := id.Ends[li], id.Ends[1-li]
	vg, err := k.volumeGroup()
	if err != nil {
		return drbdDisk{}, err
	}
	d := drbdDisk{uuid: disk.UUID, size: disk.SizeMiB, minor: local.Minor, res: "resource" + strconv.Itoa(local.Minor),
		peerName: peer.Name, secret: id.Secret, primary: inst.PrimaryNode == local.Node,
		data: lvName(inst.UUID, disk.UUID), meta: metaLVName(inst.UUID, disk.UUID)}
	if local.Minor < 0 || local.Minor > MaxDRBDMinor {
		return drbdDisk{}, invalid("%s has minor %d for node %s, not 0 to %d", what, local.Minor, k.cfg.Node, MaxDRBDMinor)
	}
	if strings.ContainsAny(id.Secret, " \t\n\"'\\") || len(id.Secret) > fsm.MaxDRBDSecret {
		return drbdDisk{}, invalid("%s has a shared secret DRBD cannot take (more than %d bytes, or spaces or quotes)", what, fsm.MaxDRBDSecret)
	}
	for _, e := range []struct {
		end fsm.DRBDEnd
		to  *string
	}{{local, &d.local}, {peer, &d.peer}} {
		ip := net.ParseIP(e.end.IP)
		switch {
		case e.end.IP == "":
			return drbdDisk{}, invalid("%s has no IP for node %s in its logical id", what, e.end.Name)
		case ip == nil:
			return drbdDisk{}, invalid("%s has IP %q for node %s, not an IP address", what, e.end.IP, e.end.Name)
		case ip.To4() != nil:
			*e.to = "ipv4:" + ip.String() + ":" + strconv.Itoa(id.Port)
		default:
			*e.to = "ipv6:[" + ip.String() + "]:" + strconv.Itoa(id.Port)
		}
	}
	if d.peerName == "" {
		d.peerName = peer.Node
	}
	d.dataDev, d.metaDev = "/dev/"+vg+"/"+d.data, "/dev/"+vg+"/"+d.meta
	d.params, d.vg = drbdParams{p: inst.DiskParams, inst: inst.Name}, vg
	return d, nil
}

// The instance's drbd disk parameters, as Ganeti's DRBD 8.4 commands
// take them, are read and checked only by the commands that use them
// (so that a parameter DRBD cannot take never fails a stop or a
// removal): attach and disk-options (diskOpts), connect (connectOpts),
// lvcreate (stripes). A value DRBD cannot take is refused (ErrInvalid,
// naming the parameter and what it wants).

// drbdParams reads an instance's disk parameters.
type drbdParams struct {
	p    map[string]any
	inst string
}

func (q drbdParams) bad(key string, v any, want string) error {
	return invalid("disk parameter %s of instance %s is %v; want %s", key, q.inst, v, want)
}

// num is a whole number from lo to hi (def when unset).
func (q drbdParams) num(key string, def, lo, hi int) (int, error) {
	v, ok := q.p[key]
	if !ok {
		return def, nil
	}
	var n int
	switch x := v.(type) {
	case float64:
		if x != float64(int(x)) {
			return 0, q.bad(key, v, "a whole number")
		}
		n = int(x)
	case int:
		n = x
	case int64:
		n = int(x)
	default:
		return 0, q.bad(key, v, "a number")
	}
	if n < lo || n > hi {
		return 0, q.bad(key, v, fmt.Sprintf("%d to %d", lo, hi))
	}
	return n, nil
}

func (q drbdParams) str(key, def string) (string, error) {
	v, ok := q.p[key]
	if !ok {
		return def, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", q.bad(key, v, "a string")
	}
	return s, nil
}

func (q drbdParams) flag(key string) (bool, error) {
	v, ok := q.p[key]
	if !ok {
		return false, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, q.bad(key, v, "true or false")
	}
	return b, nil
}

// drbdDynamicResync are the c-* settings of dynamic-resync, each with its
// default and the range the kvm driver takes (DRBD 8.4's own).
var drbdDynamicResync = []struct {
	key         string
	def, lo, hi int
}{{"c-plan-ahead", 20, 1, 300}, {"c-fill-target", 0, 0, 1048576}, {"c-delay-target", 1, 1, 100}, {"c-max-rate", 61440, 250, fsm.MaxDRBDRate}, {"c-min-rate", 4096, 0, fsm.MaxDRBDRate}}

// diskOpts are the options of attach (disk-barriers: letters b, f, d of
// the barriers to disable, or n for none; meta-barriers; disk-custom,
// appended) and of disk-options (resync-rate, or dynamic-resync with its
// c-* settings).
func (d drbdDisk) diskOpts() (attach, sync []string, err error) {
	q := d.params
	barriers, err := q.str("disk-barriers", "n")
	if err != nil {
		return nil, nil, err
	}
	metaBarriers, err := q.flag("meta-barriers")
	if err != nil {
		return nil, nil, err
	}
	if metaBarriers {
		attach = append(attach, "--md-flushes=no")
	}
	if barriers != "n" {
		for i, c := range barriers {
			if !strings.ContainsRune("bfd", c) || strings.ContainsRune(barriers[:i], c) {
				return nil, nil, q.bad("disk-barriers", barriers, `n (none disabled), or any of b (barriers), f (flushes), d (drain), each once`)
			}
		}
		for _, b := range []struct{ letter, opt string }{{"f", "--disk-flushes=no"}, {"d", "--disk-drain=no"}, {"b", "--disk-barrier=no"}} {
			if strings.Contains(barriers, b.letter) {
				attach = append(attach, b.opt)
			}
		}
	}
	custom, err := q.str("disk-custom", "")
	if err != nil {
		return nil, nil, err
	}
	attach = append(attach, strings.Fields(custom)...)
	dynamic, err := q.flag("dynamic-resync")
	if err != nil {
		return nil, nil, err
	}
	if !dynamic {
		rate, err := q.num("resync-rate", 61440, 1, fsm.MaxDRBDRate)
		if err != nil {
			return nil, nil, err
		}
		return attach, []string{"--resync-rate", strconv.Itoa(rate)}, nil
	}
	for _, c := range drbdDynamicResync {
		n, err := q.num(c.key, c.def, c.lo, c.hi)
		if err != nil {
			if c.key == "c-plan-ahead" {
				return nil, nil, fmt.Errorf("%w (0 disables DRBD's dynamic resync controller: set dynamic-resync false instead)", err)
			}
			return nil, nil, err
		}
		sync = append(sync, "--"+c.key, strconv.Itoa(n))
	}
	return attach, sync, nil
}

// connectOpts are the options of connect: protocol (A, B or C), the
// split-brain policies and the shared secret, and net-custom, appended.
func (d drbdDisk) connectOpts() ([]string, error) {
	q := d.params
	proto, err := q.str("protocol", "C")
	if err != nil {
		return nil, err
	}
	if proto != "A" && proto != "B" && proto != "C" {
		return nil, q.bad("protocol", proto, "A, B or C")
	}
	netCustom, err := q.str("net-custom", "")
	if err != nil {
		return nil, err
	}
	return append([]string{"--protocol", proto, "--after-sb-0pri", "discard-zero-changes", "--after-sb-1pri", "consensus",
		"--cram-hmac-alg", "md5", "--shared-secret", d.secret}, strings.Fields(netCustom)...), nil
}

// stripes are the stripes of the data and metadata volumes (data-stripes
// and meta-stripes, 1 to 64). default-metavg naming another volume group
// than the node's is not supported (the metadata volume is in the
// node's).
func (d drbdDisk) stripes() (data, meta int, err error) {
	q := d.params
	if data, err = q.num("data-stripes", 1, 1, 64); err != nil {
		return 0, 0, err
	}
	if meta, err = q.num("meta-stripes", 1, 1, 64); err != nil {
		return 0, 0, err
	}
	metaVG, err := q.str("default-metavg", "")
	if err != nil {
		return 0, 0, err
	}
	if metaVG != "" && metaVG != d.vg {
		return 0, 0, fmt.Errorf("%w: disk parameter default-metavg of instance %s is %s: the kvm driver keeps a drbd disk's metadata volume in the node's volume group, %s",
			ErrNotSupported, q.inst, metaVG, d.vg)
	}
	return data, meta, nil
}

// checkParams checks every disk parameter, before an operation that uses
// them all (a create, a replace) changes anything.
func (d drbdDisk) checkParams() error {
	if _, _, err := d.diskOpts(); err != nil {
		return err
	}
	if _, err := d.connectOpts(); err != nil {
		return err
	}
	_, _, err := d.stripes()
	return err
}

// drbdConfigDisk finds disk id in the instance's configuration, or else in
// the configuration the record last saw (a disk being removed).
func drbdConfigDisk(inst fsm.Instance, r *kvmRecord, id string) (fsm.Disk, bool) {
	if d, _, err := configDisk(inst, id); err == nil {
		return d, true
	}
	if r != nil {
		if d, _, err := configDisk(r.Instance, id); err == nil {
			return d, true
		}
	}
	return fsm.Disk{}, false
}

// drbdPath is the device qemu opens for a configured drbd disk.
func (k *KVM) drbdPath(inst fsm.Instance, disk string) (string, error) {
	d, err := k.drbdByID(inst, disk)
	if err != nil {
		return "", err
	}
	return d.dev(), nil
}

// drbdByID is drbdOf of the configured disk with UUID disk.
func (k *KVM) drbdByID(inst fsm.Instance, disk string) (drbdDisk, error) {
	cd, _, err := configDisk(inst, disk)
	if err != nil {
		return drbdDisk{}, err
	}
	return k.drbdOf(inst, cd)
}

// readProcDRBD reads and parses the node's /proc/drbd.
func (k *KVM) readProcDRBD() (ProcDRBD, error) {
	path := k.cfg.ProcDRBD
	if path == "" {
		path = procDRBDPath
	}
	data, err := readBounded(path, MaxProcDRBD)
	if err != nil {
		return ProcDRBD{}, fmt.Errorf("DRBD: %w", err)
	}
	return ParseProcDRBD(data)
}

// drbdDo runs a DRBD tool that changes something, as an OpError of op.
// The shared secret of a connect is not repeated in the error (it names
// the command): job logs show errors.
func (k *KVM) drbdDo(ctx context.Context, op Op, tool string, args ...string) error {
	out, err := k.drbdRun()(ctx, tool, args...)
	if err == nil {
		return nil
	}
	output := truncate(string(out), qemuOutput)
	for i, a := range args[:max(len(args)-1, 0)] {
		if a == "--shared-secret" && args[i+1] != "" {
			err = errors.New(strings.ReplaceAll(err.Error(), args[i+1], "<secret>"))
			output = strings.ReplaceAll(output, args[i+1], "<secret>")
		}
	}
	return &OpError{Op: op, Err: err, Output: output}
}

// drbdDevice is what this node's DRBD says of a disk's minor: its line of
// /proc/drbd and its configuration (drbdsetup show); ok is false when the
// minor is not set up (not listed, or listed unconfigured).
type drbdDevice struct {
	ok   bool
	proc fsm.DRBDDevice
	show DRBDShow
}

// drbdLook reads the minor's state. A minor set up for another disk's
// volumes is refused (ErrState), never touched.
func (k *KVM) drbdLook(ctx context.Context, op Op, d drbdDisk) (drbdDevice, error) {
	p, err := k.readProcDRBD()
	if err != nil {
		return drbdDevice{}, &OpError{Op: op, Err: err}
	}
	dev, ok := p.Devices[d.minor]
	if !ok || dev.Connection == DRBDUnconfigured {
		return drbdDevice{proc: fsm.DRBDDevice{Minor: d.minor, Connection: DRBDUnconfigured}}, nil
	}
	out, err := k.drbdRun()(ctx, "drbdsetup", "show", d.m())
	if err != nil {
		return drbdDevice{}, &OpError{Op: op, Err: err}
	}
	show, err := ParseDRBDShow(out)
	if err != nil {
		return drbdDevice{}, &OpError{Op: op, Err: err}
	}
	if show.Resource != d.res || show.Disk != "" && show.Disk != d.dataDev {
		return drbdDevice{}, stateErr("DRBD minor %d on node %s is in use by resource %s with disk %q, not by disk %s (%s, %s)",
			d.minor, k.cfg.Node, show.Resource, show.Disk, d.uuid, d.res, d.dataDev)
	}
	return drbdDevice{ok: true, proc: dev, show: show}, nil
}

// showAddr is drbdsetup's form of an address drbdsetup show prints
// ("ipv4 10.0.0.1:11000" → "ipv4:10.0.0.1:11000").
func showAddr(s string) string { return strings.Replace(s, " ", ":", 1) }

// drbdAssemble sets the disk's device up as far as it is not: resource and
// minor, the volumes attached, the network connected to the configured
// peer. It reports what it did ("" for nothing) and the device's state
// after.
func (k *KVM) drbdAssemble(ctx context.Context, op Op, inst fsm.Instance, d drbdDisk) (string, drbdDevice, error) {
	out, _, dev, err := k.drbdAssembleParts(ctx, op, d, true)
	return out, dev, err
}

// drbdAssembleParts is drbdAssemble, attaching the volumes only with
// attach (a replace sets up and connects a device without its old
// volumes); connected says whether it connected the device.
func (k *KVM) drbdAssembleParts(ctx context.Context, op Op, d drbdDisk, attach bool) (out string, connected bool, dev drbdDevice, err error) {
	dev, err = k.drbdLook(ctx, op, d)
	if err != nil {
		return "", false, dev, err
	}
	// The parameters of what is to run are checked before anything runs.
	attach = attach && dev.show.Disk == ""
	reconnect := dev.show.Peer != "" && (showAddr(dev.show.Peer) != d.peer || showAddr(dev.show.Local) != d.local)
	var attachOpts, syncOpts, connectOpts []string
	if attach {
		if attachOpts, syncOpts, err = d.diskOpts(); err != nil {
			return "", false, dev, err
		}
	}
	if dev.show.Peer == "" || reconnect {
		if connectOpts, err = d.connectOpts(); err != nil {
			return "", false, dev, err
		}
	}
	var did []string
	if !dev.ok {
		// A resource left without its minor (a crash between the two)
		// goes first; down of an unknown resource does nothing.
		for _, args := range [][]string{{"down", d.res}, {"new-resource", d.res}, {"new-minor", d.res, d.m(), "0"}} {
			if err := k.drbdDo(ctx, op, "drbdsetup", args...); err != nil {
				return "", false, dev, err
			}
		}
		did = append(did, "set up minor "+d.m())
	}
	if attach {
		if err := k.activateLVs(ctx, op, true, d.data, d.meta); err != nil {
			return "", false, dev, err
		}
		for _, c := range []struct {
			tool string
			args []string
		}{
			{"drbdmeta", []string{d.dev(), "v08", d.metaDev, "flex-external", "apply-al"}},
			{"drbdsetup", append([]string{"attach", d.m(), d.dataDev, d.metaDev, "flexible", "--on-io-error=detach", "--size", strconv.FormatInt(d.size, 10) + "m"}, attachOpts...)},
			{"drbdsetup", append([]string{"disk-options", d.m()}, syncOpts...)},
		} {
			if err := k.drbdDo(ctx, op, c.tool, c.args...); err != nil {
				return "", false, dev, err
			}
		}
		did = append(did, "attached "+d.data)
	}
	if reconnect {
		if err := k.drbdDo(ctx, op, "drbdsetup", "disconnect", showAddr(dev.show.Local), showAddr(dev.show.Peer)); err != nil {
			return "", false, dev, err
		}
		did = append(did, "disconnected from "+showAddr(dev.show.Peer))
		dev.show.Peer = ""
	}
	if dev.show.Peer == "" {
		if err := k.drbdDo(ctx, op, "drbdsetup", append([]string{"connect", d.res, d.local, d.peer}, connectOpts...)...); err != nil {
			return "", false, dev, err
		}
		did = append(did, "connected to "+d.peerName+" ("+d.peer+")")
		connected = true
	}
	if len(did) == 0 {
		return "", false, dev, nil
	}
	dev, err = k.drbdLook(ctx, op, d)
	return fmt.Sprintf("disk %s (minor %d): %s", d.uuid, d.minor, strings.Join(did, ", ")), connected, dev, err
}

// drbdConnectWait bounds how long an operation that needs the peer's
// state waits for a device it just connected to reach its peer.
const drbdConnectWait = 15 * time.Second

// drbdAwaitPeer waits, at most drbdConnectWait, while the device it just
// connected is still looking for its peer (connect returns before the
// handshake), and returns its state then.
func (k *KVM) drbdAwaitPeer(ctx context.Context, op Op, d drbdDisk, dev drbdDevice) (drbdDevice, error) {
	deadline := time.Now().Add(drbdConnectWait)
	for dev.ok && (dev.proc.Connection == "WFConnection" || dev.proc.Connection == "WFReportParams" || dev.proc.Connection == "Unconnected") &&
		time.Now().Before(deadline) {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return dev, &OpError{Op: op, Err: err}
		}
		var err error
		if dev, err = k.drbdLook(ctx, op, d); err != nil {
			return dev, err
		}
	}
	return dev, nil
}

// drbdPrimary makes the device primary here, refusing (ErrState) while
// the peer is primary unless two primaries are what is asked (a
// migration's target), and refusing two primaries unless both sides are
// connected and up to date (drbdTwoReady). A single primary on a device
// that is not connected stays allowed: the failover of a dead primary
// (the jobs check the disks' consistency before).
func (k *KVM) drbdPrimary(ctx context.Context, op Op, d drbdDisk, dev drbdDevice, two bool) (bool, error) {
	if dev.proc.Role == "Primary" {
		return false, nil
	}
	if dev.proc.PeerRole == "Primary" && !two {
		return false, stateErr("disk %s (DRBD minor %d) is primary on the peer node %s; stop the instance there first", d.uuid, d.minor, d.peerName)
	}
	if two {
		if err := drbdTwoReady(d, dev); err != nil {
			return false, err
		}
	}
	if dev.proc.Disk != fsm.DRBDUpToDate && dev.proc.PeerDisk != fsm.DRBDUpToDate {
		return false, stateErr("disk %s (DRBD minor %d) has no up-to-date data on either node (here %s, on %s %s)",
			d.uuid, d.minor, dev.proc.Disk, d.peerName, dev.proc.PeerDisk)
	}
	return true, k.drbdDo(ctx, op, "drbdsetup", "primary", d.m())
}

// drbdTwoReady refuses (ErrState, naming the states) a migration's
// second primary unless the device is connected and both sides up to
// date: a device disconnected (a secondary back from a reboot reports
// its old data UpToDate) or resyncing would run the guest on stale data
// and split the brain once the link comes up.
func drbdTwoReady(d drbdDisk, dev drbdDevice) error {
	p := dev.proc
	if p.Connection == "Connected" && p.Disk == fsm.DRBDUpToDate && p.PeerDisk == fsm.DRBDUpToDate {
		return nil
	}
	return stateErr("disk %s (DRBD minor %d) is %s, %s here and %s on %s; a live migration needs it Connected and UpToDate on both nodes (wait for the resync)",
		d.uuid, d.minor, orUnknown(p.Connection), orUnknown(p.Disk), orUnknown(p.PeerDisk), d.peerName)
}

// drbdSecondary makes the device secondary here (it is not running).
func (k *KVM) drbdSecondary(ctx context.Context, op Op, d drbdDisk, dev drbdDevice) (bool, error) {
	if !dev.ok || dev.proc.Role != "Primary" {
		return false, nil
	}
	return true, k.drbdDo(ctx, op, "drbdsetup", "secondary", d.m())
}

// drbdTwoPrimaries allows (or forbids) two primaries on the connection;
// DRBD hands the setting to the connected peer.
func (k *KVM) drbdTwoPrimaries(ctx context.Context, op Op, d drbdDisk, dev drbdDevice, on bool) (bool, error) {
	if !dev.ok || dev.show.Peer == "" || dev.show.TwoPrimary == on {
		return false, nil
	}
	v := "no"
	if on {
		v = "yes"
	}
	return true, k.drbdDo(ctx, op, "drbdsetup", "net-options", d.local, d.peer, "--allow-two-primaries="+v)
}

// drbdDisks is every configured disk of a drbd instance as this node
// drives it (nil for other templates).
func (k *KVM) drbdDisks(inst fsm.Instance) ([]drbdDisk, error) {
	if inst.DiskTemplate != fsm.DTDrbd {
		return nil, nil
	}
	out := make([]drbdDisk, len(inst.Disks))
	for i, cd := range inst.Disks {
		d, err := k.drbdOf(inst, cd)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// drbdActivate assembles every drbd disk of the instance and makes it
// primary here, before qemu opens them: a start (refused while the peer
// is primary), or the target of a migration (two primaries allowed
// first).
func (k *KVM) drbdActivate(ctx context.Context, op Op, inst fsm.Instance) error {
	ds, err := k.drbdDisks(inst)
	if err != nil {
		return err
	}
	two := op == OpMigratePrepare
	for _, d := range ds {
		_, dev, err := k.drbdAssemble(ctx, op, inst, d)
		if err != nil {
			return err
		}
		if two && dev.proc.Role != "Primary" {
			// Checked before two primaries are allowed, so that a
			// refused preparation leaves the connection as it was.
			if err := drbdTwoReady(d, dev); err != nil {
				return err
			}
		}
		if two {
			if _, err := k.drbdTwoPrimaries(ctx, op, d, dev, true); err != nil {
				return err
			}
		}
		if _, err := k.drbdPrimary(ctx, op, d, dev, two); err != nil {
			return err
		}
	}
	return nil
}

// drbdDemote makes every drbd disk of the instance that is set up here
// secondary (qemu no longer runs here) and, with single, forbids two
// primaries again. It reports whether it changed anything.
func (k *KVM) drbdDemote(ctx context.Context, op Op, inst fsm.Instance, single bool) (bool, error) {
	ds, err := k.drbdDisks(inst)
	if err != nil {
		return false, err
	}
	changed := false
	for _, d := range ds {
		dev, err := k.drbdLook(ctx, op, d)
		if err != nil {
			return changed, err
		}
		c, err := k.drbdSecondary(ctx, op, d, dev)
		changed = changed || c
		if err != nil {
			return changed, err
		}
		if single {
			c, err := k.drbdTwoPrimaries(ctx, op, d, dev, false)
			changed = changed || c
			if err != nil {
				return changed, err
			}
		}
	}
	return changed, nil
}

// drbdTwoPrimariesAll allows or forbids two primaries for every drbd disk
// of the instance, each assembled first.
func (k *KVM) drbdTwoPrimariesAll(ctx context.Context, op Op, inst fsm.Instance, on bool) error {
	ds, err := k.drbdDisks(inst)
	if err != nil {
		return err
	}
	for _, d := range ds {
		_, dev, err := k.drbdAssemble(ctx, op, inst, d)
		if err != nil {
			return err
		}
		if _, err := k.drbdTwoPrimaries(ctx, op, d, dev, on); err != nil {
			return err
		}
	}
	return nil
}

// drbdCreate implements DiskCreate for a drbd disk: the data and
// metadata volumes, the metadata, the device assembled; on the
// instance's primary node a device that has no up-to-date data on either
// side is made the resync's source (primary --force, then secondary).
func (k *KVM) drbdCreate(ctx context.Context, inst fsm.Instance, cd fsm.Disk) (Result, error) {
	d, err := k.drbdOf(inst, cd)
	if err != nil {
		return Result{}, err
	}
	if err := d.checkParams(); err != nil {
		return Result{}, err
	}
	return k.mutate(ctx, OpDiskCreate, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		if r == nil {
			r = newKVMRecord(inst)
		}
		var did []string
		fresh, err := k.drbdVolumes(ctx, OpDiskCreate, inst, d, r.disk(d.uuid) == nil)
		if err != nil {
			return false, "", err
		}
		if fresh != "" {
			did = append(did, fresh)
		}
		out, dev, err := k.drbdAssemble(ctx, OpDiskCreate, inst, d)
		if err != nil {
			return false, "", err
		}
		if out != "" {
			did = append(did, out)
		}
		if d.primary && dev.proc.Disk == "Inconsistent" && dev.proc.PeerDisk != fsm.DRBDUpToDate &&
			dev.proc.Role != "Primary" && dev.proc.PeerRole != "Primary" {
			if err := k.drbdDo(ctx, OpDiskCreate, "drbdsetup", "primary", d.m(), "--force"); err != nil {
				return false, "", err
			}
			if err := k.drbdDo(ctx, OpDiskCreate, "drbdsetup", "secondary", d.m()); err != nil {
				return false, "", err
			}
			did = append(did, "made the resync's source")
		} else if dev.proc.Role == "Primary" && k.pid(inst.UUID) == 0 && (r.Migration == nil || r.Migration.Phase == PhaseAborted || r.Migration.Phase == PhaseFinished) {
			// Primary without qemu here: a create cut short after
			// its primary --force.
			if err := k.drbdDo(ctx, OpDiskCreate, "drbdsetup", "secondary", d.m()); err != nil {
				return false, "", err
			}
			did = append(did, "made secondary")
		}
		r.noteDisk(d.uuid, d.size)
		*rec = r
		if len(did) == 0 {
			return false, "already present", nil
		}
		return true, strings.Join(did, "; "), nil
	})
}

// drbdVolumes makes the disk's volumes that are missing and, when they
// are new to this node's record (fresh) and not attached, DRBD's
// metadata on them. A data volume of another size is refused.
func (k *KVM) drbdVolumes(ctx context.Context, op Op, inst fsm.Instance, d drbdDisk, fresh bool) (string, error) {
	vg, err := k.volumeGroup()
	if err != nil {
		return "", err
	}
	lvs, err := k.listLVs(ctx, vg)
	if err != nil {
		return "", &OpError{Op: op, Err: err}
	}
	dataSz, _ := lvLookup(lvs, d.data)
	metaSz, _ := lvLookup(lvs, d.meta)
	if dataSz >= 0 && dataSz != d.size {
		return "", stateErr("disk %s is present with %d MiB, not the configured %d MiB", d.uuid, dataSz, d.size)
	}
	var did []string
	var dataStripes, metaStripes int
	if dataSz < 0 || metaSz < 0 {
		if dataStripes, metaStripes, err = d.stripes(); err != nil {
			return "", err
		}
	}
	for _, v := range []struct {
		name    string
		sz      int64
		size    int64
		stripes int
	}{{d.data, dataSz, d.size, dataStripes}, {d.meta, metaSz, fsm.DRBDMetaMiB, metaStripes}} {
		if v.sz >= 0 {
			continue
		}
		args := []string{"-Wy", "-y", "-L", strconv.FormatInt(v.size, 10) + "m", "-n", v.name}
		if v.stripes > 1 {
			args = append(args, "-i", strconv.Itoa(v.stripes))
		}
		if err := k.lvDo(ctx, op, "lvcreate", append(args, "--", vg)...); err != nil {
			return "", err
		}
		did = append(did, fmt.Sprintf("created %s/%s (%d MiB)", vg, v.name, v.size))
		fresh = true
	}
	if fresh {
		dev, err := k.drbdLook(ctx, op, d)
		if err != nil {
			return "", err
		}
		if dev.show.Disk == "" {
			if err := k.drbdDo(ctx, op, "drbdmeta", "--force", d.dev(), "v08", d.metaDev, "flex-external", "create-md"); err != nil {
				return "", err
			}
			did = append(did, "created DRBD metadata")
		}
	}
	return strings.Join(did, ", "), nil
}

// drbdRemove takes the disk's device down (when it is set up for this
// disk) and removes its volumes; sizes lists the volume group. A disk
// whose configuration no longer gives this node's minor has its device
// found by its data volume (drbdFind).
func (k *KVM) drbdRemove(ctx context.Context, op Op, inst fsm.Instance, r *kvmRecord, disk string, sizes *diskSizes) (bool, error) {
	d, dev, err := k.drbdLocate(ctx, op, inst, r, disk)
	if err != nil {
		return false, err
	}
	changed := false
	if dev.ok {
		if dev.proc.Role == "Primary" && k.pid(inst.UUID) != 0 {
			return false, stateErr("disk %s (DRBD minor %d) is primary for instance %s, which runs here; stop it first", disk, d.minor, inst.Name)
		}
		if err := k.drbdDo(ctx, op, "drbdsetup", "down", d.res); err != nil {
			return false, err
		}
		changed = true
	}
	vg, err := k.volumeGroup()
	if err != nil {
		return false, err
	}
	if err := sizes.list(ctx, vg); err != nil {
		return false, &OpError{Op: op, Err: err}
	}
	for _, lv := range []string{d.data, d.meta} {
		if sz, _ := lvLookup(sizes.lvs, lv); sz < 0 {
			continue
		}
		if err := k.lvDo(ctx, op, "lvremove", "-y", "--", vg+"/"+lv); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// drbdLocate is a drbd disk as this node drives it and its device's
// state, for taking it down. A disk no longer configured, or whose
// logical id does not name this node's end (an old secondary after the
// record changed), has the minor whose device holds its data volume, if
// any, so that nothing is left behind.
func (k *KVM) drbdLocate(ctx context.Context, op Op, inst fsm.Instance, r *kvmRecord, disk string) (drbdDisk, drbdDevice, error) {
	cd, configured := drbdConfigDisk(inst, r, disk)
	if !configured {
		return k.drbdFind(ctx, op, inst, disk)
	}
	d, err := k.drbdOf(inst, cd)
	switch {
	case err == nil:
		dev, err := k.drbdLook(ctx, op, d)
		return d, dev, err
	case errors.Is(err, ErrInvalid):
		return k.drbdFind(ctx, op, inst, disk)
	default:
		return drbdDisk{}, drbdDevice{}, err
	}
}

// drbdFind finds the minor whose device holds the data volume of an
// instance's disk that is no longer configured (ok false in the device
// when none does).
func (k *KVM) drbdFind(ctx context.Context, op Op, inst fsm.Instance, disk string) (drbdDisk, drbdDevice, error) {
	vg, err := k.volumeGroup()
	if err != nil {
		return drbdDisk{}, drbdDevice{}, err
	}
	d := drbdDisk{uuid: disk, minor: -1, data: lvName(inst.UUID, disk), meta: metaLVName(inst.UUID, disk)}
	d.dataDev = "/dev/" + vg + "/" + d.data
	p, err := k.readProcDRBD()
	if err != nil {
		return d, drbdDevice{}, &OpError{Op: op, Err: err}
	}
	for m, dev := range p.Devices {
		if dev.Connection == DRBDUnconfigured {
			continue
		}
		out, err := k.drbdRun()(ctx, "drbdsetup", "show", strconv.Itoa(m))
		if err != nil {
			return d, drbdDevice{}, &OpError{Op: op, Err: err}
		}
		show, err := ParseDRBDShow(out)
		if err != nil {
			return d, drbdDevice{}, &OpError{Op: op, Err: err}
		}
		if show.Disk == d.dataDev {
			d.minor, d.res = m, show.Resource
			return d, drbdDevice{ok: true, proc: dev, show: show}, nil
		}
	}
	return d, drbdDevice{}, nil
}

// drbdGrow implements DiskGrow for a drbd disk: the data volume grows on
// each node; on the instance's primary node DRBD then takes the new size
// (drbdsetup resize: the secondary's volume must have grown first; the
// device is primary for it, made so and secondary again when the
// instance does not run), and a running qemu learns it.
func (k *KVM) drbdGrow(ctx context.Context, inst fsm.Instance, cd fsm.Disk) (Result, error) {
	d, err := k.drbdOf(inst, cd)
	if err != nil {
		return Result{}, err
	}
	return k.mutate(ctx, OpDiskGrow, inst, "", func(rec **kvmRecord) (bool, string, error) {
		vg, err := k.volumeGroup()
		if err != nil {
			return false, "", err
		}
		sz, _, err := k.lvState(ctx, vg, d.data)
		if err != nil {
			return false, "", &OpError{Op: OpDiskGrow, Err: err}
		}
		switch {
		case sz < 0:
			return false, "", notFound("disk %s is not present on this node", d.uuid)
		case sz > d.size:
			return false, "", stateErr("disk %s has %d MiB, more than the configured %d MiB; disks do not shrink", d.uuid, sz, d.size)
		}
		var did []string
		if sz < d.size {
			if err := k.lvDo(ctx, OpDiskGrow, "lvextend", "-L", strconv.FormatInt(d.size, 10)+"m", "--", vg+"/"+d.data); err != nil {
				return false, "", err
			}
			did = append(did, fmt.Sprintf("grew %s from %d to %d MiB", d.data, sz, d.size))
		}
		if d.primary {
			_, dev, err := k.drbdAssemble(ctx, OpDiskGrow, inst, d)
			if err != nil {
				return false, "", err
			}
			devSz, err := k.drbdSize(d.minor)
			if err != nil {
				return false, "", &OpError{Op: OpDiskGrow, Err: err}
			}
			if devSz < d.size {
				// DRBD resizes only with a primary: a stopped
				// instance's device is primary for the resize, as
				// Ganeti assembles it for grow-disk.
				promoted, err := k.drbdPrimary(ctx, OpDiskGrow, d, dev, false)
				if err != nil {
					return false, "", err
				}
				err = k.drbdDo(ctx, OpDiskGrow, "drbdsetup", "resize", d.m(), "--size", strconv.FormatInt(d.size, 10)+"m")
				if err == nil {
					err = k.drbdAwaitResize(ctx, d)
				}
				if promoted {
					if serr := k.drbdDo(context.WithoutCancel(ctx), OpDiskGrow, "drbdsetup", "secondary", d.m()); err == nil {
						err = serr
					}
				}
				if err != nil {
					return false, "", err
				}
				// DRBD may keep the size it last agreed on with its
				// peer (the peer disconnected, or it did not answer
				// in time) and still succeed.
				grown, err := k.drbdSize(d.minor)
				if err != nil {
					return false, "", &OpError{Op: OpDiskGrow, Err: err}
				}
				if grown < d.size {
					return false, "", &OpError{Op: OpDiskGrow, Err: fmt.Errorf("DRBD minor %d of disk %s has %d MiB after drbdsetup resize to %d MiB (connection %s: the peer %s must be connected with its volume grown first)",
						d.minor, d.uuid, grown, d.size, orUnknown(dev.proc.Connection), d.peerName)}
				}
				did = append(did, fmt.Sprintf("resized DRBD minor %d from %d to %d MiB", d.minor, devSz, d.size))
				if r := *rec; r != nil && k.pid(inst.UUID) != 0 {
					if rd := r.disk(d.uuid); rd != nil && rd.Attached {
						if err := k.blockResize(ctx, inst.UUID, d.uuid, d.size); err != nil {
							return false, "", err
						}
						did = append(did, "told qemu")
					}
				}
			}
		}
		r := *rec
		if r == nil {
			r = newKVMRecord(inst)
			*rec = r
		}
		r.noteDisk(d.uuid, d.size)
		if len(did) == 0 {
			return false, fmt.Sprintf("disk %s has %d MiB already", d.uuid, d.size), nil
		}
		return true, strings.Join(did, "; "), nil
	})
}

// drbdAwaitResize waits, at most drbdConnectWait, after drbdsetup resize
// on a connected device for it to take the new size: DRBD grows it only
// once the peer, asked for its sizes, has answered with its grown
// volume's (until then the kernel says "Requested disk size is too big");
// drbdsetup returns before. A device without its peer is not waited for.
func (k *KVM) drbdAwaitResize(ctx context.Context, d drbdDisk) error {
	deadline := time.Now().Add(drbdConnectWait)
	for {
		sz, err := k.drbdSize(d.minor)
		if err != nil || sz >= d.size {
			return nil // drbdGrow's check says what is wrong
		}
		p, err := k.readProcDRBD()
		if err != nil {
			return nil
		}
		if c := p.Devices[d.minor].Connection; !drbdPeered(c) || !time.Now().Before(deadline) {
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return &OpError{Op: OpDiskGrow, Err: err}
		}
	}
}

// drbdPeered tells whether a device in connection state c talks with its
// peer (connected, or resyncing or verifying with it).
func drbdPeered(c string) bool {
	return c == "Connected" || strings.HasPrefix(c, "Sync") || strings.HasPrefix(c, "PausedSync") || strings.HasPrefix(c, "Verify")
}

// drbdSize is the size in MiB of the minor's device as the kernel says
// (<SysBlock>/drbd<minor>/size, in 512-byte sectors).
func (k *KVM) drbdSize(minor int) (int64, error) {
	dir := k.cfg.SysBlock
	if dir == "" {
		dir = "/sys/block"
	}
	data, err := readBounded(filepath.Join(dir, "drbd"+strconv.Itoa(minor), "size"), 64)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size of drbd%d: %q is not a number of sectors", minor, strings.TrimSpace(string(data)))
	}
	return n >> 11, nil
}

// drbdReplace implements DiskReplace for a drbd disk: the device set up
// and connected when it is not (a node back from a reboot), then the
// local volumes detached, made anew with new metadata, and attached
// again, so that the device resyncs from its peer, which must be
// connected and up to date.
func (k *KVM) drbdReplace(ctx context.Context, inst fsm.Instance, cd fsm.Disk, opID string) (Result, error) {
	d, err := k.drbdOf(inst, cd)
	if err != nil {
		return Result{}, err
	}
	if err := d.checkParams(); err != nil {
		return Result{}, err
	}
	return k.mutate(ctx, OpDiskReplace, inst, opID, func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		// Once per disk: the jobs replace every disk of the instance
		// under one op id.
		if rd := r.disk(d.uuid); rd != nil && rd.Generation == opID {
			return false, "disk " + d.uuid + " already replaced for " + opID, nil
		}
		vg, err := k.volumeGroup()
		if err != nil {
			return false, "", err
		}
		lvs, err := k.listLVs(ctx, vg)
		if err != nil {
			return false, "", &OpError{Op: OpDiskReplace, Err: err}
		}
		if sz, _ := lvLookup(lvs, d.data); sz < 0 && r.disk(d.uuid) == nil {
			return false, "", notFound("disk %s is not present on this node", d.uuid)
		}
		// The device set up and connected first (not its old volumes:
		// they are replaced), so that a node back from a reboot sees
		// its peer.
		_, connected, dev, err := k.drbdAssembleParts(ctx, OpDiskReplace, d, false)
		if err != nil {
			return false, "", err
		}
		if connected {
			if dev, err = k.drbdAwaitPeer(ctx, OpDiskReplace, d, dev); err != nil {
				return false, "", err
			}
		}
		if dev.proc.PeerDisk != fsm.DRBDUpToDate {
			return false, "", stateErr("disk %s (DRBD minor %d): the peer %s's disk is %s (connection %s); replacing this node's needs an up-to-date peer to resync from",
				d.uuid, d.minor, d.peerName, orUnknown(dev.proc.PeerDisk), dev.proc.Connection)
		}
		if dev.show.Disk != "" {
			if err := k.drbdDo(ctx, OpDiskReplace, "drbdsetup", "detach", d.m()); err != nil {
				return false, "", err
			}
		}
		for _, lv := range []string{d.data, d.meta} {
			if sz, _ := lvLookup(lvs, lv); sz >= 0 {
				if err := k.lvDo(ctx, OpDiskReplace, "lvremove", "-y", "--", vg+"/"+lv); err != nil {
					return false, "", err
				}
			}
		}
		if _, err := k.drbdVolumes(ctx, OpDiskReplace, inst, d, true); err != nil {
			return false, "", err
		}
		if _, _, err := k.drbdAssemble(ctx, OpDiskReplace, inst, d); err != nil {
			return false, "", err
		}
		if r == nil {
			r = newKVMRecord(inst)
			*rec = r
		}
		r.noteDisk(d.uuid, d.size).Generation = opID
		return true, fmt.Sprintf("replaced disk %s's volumes on %s; DRBD minor %d resyncs from %s", d.uuid, k.cfg.Node, d.minor, d.peerName), nil
	})
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// drbdStatus is what /proc/drbd says of a configured drbd disk's minor
// here, for a disk whose volumes are present: a minor not set up (the
// node rebooted, or the device was taken down) is Unconfigured, with no
// roles or disk states, so that the jobs see the disk degraded (nil:
// the disk's logical id gives this node no minor).
func (k *KVM) drbdStatus(inst fsm.Instance, disk string, p ProcDRBD) *fsm.DRBDDevice {
	d, err := k.drbdByID(inst, disk)
	if err != nil {
		return nil
	}
	dev, ok := p.Devices[d.minor]
	if !ok || dev.Connection == DRBDUnconfigured {
		return &fsm.DRBDDevice{Minor: d.minor, Connection: DRBDUnconfigured}
	}
	return &dev
}

// drbdAttach assembles a drbd disk for DiskAttach (reconnecting it to a
// changed peer) and, on the instance's primary node or where qemu runs,
// makes it primary: before qemu takes it, or for activate-disks, whose
// path is then usable (as Ganeti's activate-disks assembles the primary
// as primary; deactivate-disks, DiskDetach, makes it secondary again).
// Elsewhere (a secondary) it only assembles: secondary says so, and the
// disk is not attached to anything there. It says what it did and
// whether qemu runs.
func (k *KVM) drbdAttach(ctx context.Context, inst fsm.Instance, disk string) (out string, running, secondary bool, err error) {
	d, err := k.drbdByID(inst, disk)
	if err != nil {
		return "", false, false, err
	}
	out, dev, err := k.drbdAssemble(ctx, OpDiskAttach, inst, d)
	if err != nil {
		return "", false, false, err
	}
	running = k.pid(inst.UUID) != 0
	if !running && !d.primary {
		return out, false, true, nil
	}
	promoted, err := k.drbdPrimary(ctx, OpDiskAttach, d, dev, false)
	if err != nil {
		return "", running, false, err
	}
	if promoted {
		out = strings.TrimPrefix(out+"; primary", "; ")
	}
	return out, running, false, nil
}

// drbdDetach makes a detached drbd disk secondary here, saying whether
// it was primary.
func (k *KVM) drbdDetach(ctx context.Context, inst fsm.Instance, disk string) (bool, error) {
	d, err := k.drbdByID(inst, disk)
	if err != nil {
		return false, err
	}
	dev, err := k.drbdLook(ctx, OpDiskDetach, d)
	if err != nil {
		return false, err
	}
	return k.drbdSecondary(ctx, OpDiskDetach, d, dev)
}

// drbdOffPrimary tells whether this node is not the drbd instance's
// primary node for the disk: its logical id gives this node the end of
// the secondary, or no end at all (an old secondary after the record
// changed). Other errors of the logical id are returned.
func (k *KVM) drbdOffPrimary(inst fsm.Instance, r *kvmRecord, disk string) (bool, error) {
	cd, ok := drbdConfigDisk(inst, r, disk)
	if !ok {
		return true, nil
	}
	d, err := k.drbdOf(inst, cd)
	if errors.Is(err, ErrInvalid) && k.drbdNoEnd(cd) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return !d.primary, nil
}

// drbdNoEnd tells whether the disk's logical id has no end for this node.
func (k *KVM) drbdNoEnd(cd fsm.Disk) bool {
	if cd.DRBD == nil {
		return false
	}
	for _, e := range cd.DRBD.Ends {
		if e.Name == k.cfg.Node {
			return false
		}
	}
	return true
}

// drbdShutdown takes a drbd disk's device down on a node that is not the
// instance's primary (DiskDetach there: the jobs drop an old secondary
// before the new one is synced, and deactivate-disks shuts every node's
// devices down, as Ganeti does), keeping its volumes. The device is found
// by its data volume when the logical id no longer names this node. It
// says whether it took a device down.
func (k *KVM) drbdShutdown(ctx context.Context, inst fsm.Instance, r *kvmRecord, disk string) (bool, error) {
	d, dev, err := k.drbdLocate(ctx, OpDiskDetach, inst, r, disk)
	if err != nil {
		return false, err
	}
	if !dev.ok {
		return false, nil
	}
	return true, k.drbdDo(ctx, OpDiskDetach, "drbdsetup", "down", d.res)
}
