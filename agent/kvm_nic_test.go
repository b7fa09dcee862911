package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

func TestTapName(t *testing.T) {
	uuid := "6b5a1c1e-0000-4000-8000-00000000c0de"
	if got := tapName(uuid, 0); got != "gt6b5a1c1e0n0" {
		t.Errorf("tapName = %q", got)
	}
	if n := tapName(uuid, 999); len(n) > maxIfName {
		t.Errorf("tapName of NIC 999 = %q, longer than %d", n, maxIfName)
	}
}

func TestPlanNICsRefusals(t *testing.T) {
	good := fsm.NIC{MAC: "aa:00:00:00:00:01", Mode: fsm.NICModeBridged, Link: "br0"}
	cases := []struct {
		name string
		nic  func(n *fsm.NIC)
		err  error
		want string
	}{
		{"bad mac", func(n *fsm.NIC) { n.MAC = "aa:00:00:00:01" }, ErrInvalid, `MAC "aa:00:00:00:01"`},
		{"long mac", func(n *fsm.NIC) { n.MAC = "aa:00:00:00:00:01:02:03" }, ErrInvalid, "6-byte"},
		{"bridged without link", func(n *fsm.NIC) { n.Link = "" }, ErrInvalid, "bridged without a link"},
		{"default mode without link", func(n *fsm.NIC) { n.Mode, n.Link = "", "" }, ErrInvalid, "bridged without a link"},
		{"link too long", func(n *fsm.NIC) { n.Link = "bridge-name-too-long" }, ErrInvalid, "at most 15"},
		{"link with slash", func(n *fsm.NIC) { n.Link = "br/0" }, ErrInvalid, "not a bridge name"},
		{"routed without ip", func(n *fsm.NIC) { n.Mode = fsm.NICModeRouted }, ErrInvalid, "routed NICs need one"},
		{"routed bad ip", func(n *fsm.NIC) { n.Mode, n.IP = fsm.NICModeRouted, "10.0.0.300" }, ErrInvalid, `"10.0.0.300"`},
		{"routed unspecified ip", func(n *fsm.NIC) { n.Mode, n.IP = fsm.NICModeRouted, "0.0.0.0" }, ErrInvalid, "0.0.0.0 is the unspecified address"},
		{"routed mapped loopback ip", func(n *fsm.NIC) { n.Mode, n.IP = fsm.NICModeRouted, "::ffff:127.0.0.1" }, ErrInvalid, "loopback"},
		{"routed multicast ip", func(n *fsm.NIC) { n.Mode, n.IP = fsm.NICModeRouted, "ff02::1" }, ErrInvalid, "multicast"},
		{"routed bad table", func(n *fsm.NIC) { n.Mode, n.IP, n.Link = fsm.NICModeRouted, "10.0.0.3", "main table" }, ErrInvalid, "not a routing table"},
		{"openvswitch", func(n *fsm.NIC) { n.Mode = fsm.NICModeOpenVSwitch }, ErrNotSupported, "openvswitch"},
		{"vlan", func(n *fsm.NIC) { n.VLAN = ".100" }, ErrNotSupported, `vlan ".100"`},
		{"unknown mode", func(n *fsm.NIC) { n.Mode = "route" }, ErrInvalid, `unknown mode "route"`},
	}
	for _, c := range cases {
		n := good
		c.nic(&n)
		inst := fsm.Instance{Name: "i1", UUID: "6b5a1c1e-0000-4000-8000-00000000c0de", NICs: []fsm.NIC{good, n}}
		_, err := planNICs(inst)
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "NIC 1 of instance i1") {
			t.Errorf("%s: %v, want %v containing %q", c.name, err, c.err, c.want)
		}
	}
}

func TestNICQemuArgs(t *testing.T) {
	inst := fsm.Instance{Name: "i1", UUID: "6b5a1c1e-0000-4000-8000-00000000c0de", NICs: []fsm.NIC{
		{MAC: "AA:00:00:00:00:01", Link: "br0"},
		{MAC: "aa:00:00:00:00:02", Mode: fsm.NICModeRouted, IP: "192.0.2.7"},
	}}
	nics, err := planNICs(inst)
	if err != nil {
		t.Fatal(err)
	}
	if nics[0].Mode != fsm.NICModeBridged || nics[1].IP != "192.0.2.7/32" {
		t.Errorf("plan: %+v", nics)
	}
	for typ, model := range map[string]string{"paravirtual": "virtio-net-pci", "e1000": "e1000", "rtl8139": "rtl8139"} {
		args, err := nicArgs(nics, typ)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"-netdev", "tap,id=net0,ifname=gt6b5a1c1e0n0,script=no,downscript=no",
			"-device", model + ",netdev=net0,mac=aa:00:00:00:00:01,id=nic0",
			"-netdev", "tap,id=net1,ifname=gt6b5a1c1e0n1,script=no,downscript=no",
			"-device", model + ",netdev=net1,mac=aa:00:00:00:00:02,id=nic1",
		}
		if !slices.Equal(args, want) {
			t.Errorf("nic_type %s: %q\nwant %q", typ, args, want)
		}
	}
	if _, err := nicArgs(nics, "virtio"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `nic_type "virtio"`) {
		t.Errorf("unknown nic_type: %v", err)
	}
	// Through the driver's command line, with the instance's nic_type.
	inst.MemoryMiB, inst.VCPUs = 128, 1
	inst.HVParams = map[string]any{"nic_type": "e1000"}
	args := commandLine(t, inst)
	if !slices.Contains(args, "e1000,netdev=net1,mac=aa:00:00:00:00:02,id=nic1") {
		t.Errorf("qemu args without the second NIC: %q", args)
	}
}

func FuzzPlanNICs(f *testing.F) {
	f.Add("aa:00:00:00:00:01", "bridged", "br0", "", "")
	f.Add("aa:00:00:00:00:01", "routed", "", "192.0.2.1", "")
	f.Add("zz", "openvswitch", "", "::1", ".100")
	f.Add("00:00:00:00:00:00", "routed", "0000000000000000", "0.0.0.0", "")
	f.Fuzz(func(t *testing.T, mac, mode, link, ip, vlan string) {
		inst := fsm.Instance{Name: "i", UUID: "6b5a1c1e-0000-4000-8000-00000000c0de",
			NICs: []fsm.NIC{{MAC: mac, Mode: mode, Link: link, IP: ip, VLAN: vlan}}}
		nics, err := planNICs(inst)
		if err != nil {
			return
		}
		args, err := nicArgs(nics, "paravirtual")
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range args {
			if commas := map[int]int{1: 4, 3: 3}[i%4]; i%2 == 1 && strings.Count(a, ",") != commas {
				t.Fatalf("argument %q has a comma of the NIC's own", a)
			}
		}
		// A bridged NIC's link is a bridge (an interface name); a routed
		// NIC's is a routing table, and its IP the host route's target.
		n := nics[0]
		linkMax := maxIfName
		if n.Mode == fsm.NICModeRouted {
			linkMax = 64
			if a, err := netip.ParsePrefix(n.IP); err != nil || fsm.RoutedIPProblem(a.Addr()) != "" {
				t.Fatalf("accepted routed IP %q", n.IP)
			}
		}
		if len(n.Tap) > maxIfName || len(n.Link) > linkMax || strings.ContainsAny(n.Link, " /") {
			t.Fatalf("accepted %+v", n)
		}
	})
}

// testNetNS creates a network namespace for the test, removed when it
// ends, with a bridge br0 (up) and a veth pair in it; it skips when it cannot.
func testNetNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: not root: the NIC tests create a network namespace, taps and a bridge")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIP: no ip command (apt-get install iproute2): NIC tests not run")
	}
	ns := fmt.Sprintf("gnt-nics-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	for _, c := range [][]string{{"link", "add", "br0", "type", "bridge"}, {"link", "set", "br0", "up"}, {"link", "add", "veth0", "type", "veth", "peer", "name", "veth1"}} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, c...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v in %s: %v: %s", c, ns, err, out)
		}
	}
	return ns
}

// nsOut runs ip in ns and returns its output.
func nsOut(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	return string(out)
}

// nsTaps is the names of the taps in ns.
func nsTaps(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(nsOut(t, ns, "-o", "link", "show", "type", "tun"), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			out = append(out, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	return out
}

func TestNICPlumbingInNetNS(t *testing.T) {
	ns := testNetNS(t)
	ctx := context.Background()
	k := &KVM{cfg: KVMConfig{Node: "n1", NetNS: ns}}
	inst := fsm.Instance{Name: "i1", UUID: "6b5a1c1e-0000-4000-8000-00000000c0de", NICs: []fsm.NIC{
		{MAC: "aa:00:00:00:00:01", Link: "br0"},
		{MAC: "aa:00:00:00:00:02", Mode: fsm.NICModeRouted, IP: "192.0.2.7", Link: "100"},
		{MAC: "aa:00:00:00:00:03", Link: "nobr"},
	}}
	// A missing bridge, and a link that is no bridge: refused, nothing made.
	for link, want := range map[string]string{"nobr": `bridge "nobr" (its link) does not exist on node n1`, "veth0": `link "veth0" on node n1 is a "veth" interface, not a bridge`} {
		inst.NICs[2].Link = link
		nics, err := planNICs(inst)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.setupNICs(ctx, inst, nics); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), want) {
			t.Errorf("link %s: %v, want %q", link, err, want)
		}
		if taps := nsTaps(t, ns); len(taps) != 0 {
			t.Errorf("link %s: taps left behind: %v", link, taps)
		}
	}
	// The node RPC's bridges-exist: br0 is there, the others are not.
	missing, err := k.MissingBridges(ctx, []string{"br0", "nobr", "veth0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"nobr": BridgeAbsent, "veth0": `is a "veth" interface, not a bridge`}; !maps.Equal(missing, want) {
		t.Errorf("missing bridges %v, want %v", missing, want)
	}
	inst.NICs = inst.NICs[:2]
	nics, err := planNICs(inst)
	if err != nil {
		t.Fatal(err)
	}
	// Twice: the retry reuses the taps.
	for i := 0; i < 2; i++ {
		if err := k.setupNICs(ctx, inst, nics); err != nil {
			t.Fatalf("setup %d: %v", i, err)
		}
		if taps := nsTaps(t, ns); !slices.Equal(taps, []string{"gt6b5a1c1e0n0", "gt6b5a1c1e0n1"}) {
			t.Errorf("setup %d: taps %v", i, taps)
		}
	}
	if out := nsOut(t, ns, "-o", "link", "show", "master", "br0"); !strings.Contains(out, "gt6b5a1c1e0n0") || strings.Contains(out, "gt6b5a1c1e0n1") {
		t.Errorf("ports of br0: %s", out)
	}
	if out := nsOut(t, ns, "route", "show", "table", "100", "192.0.2.7"); !strings.Contains(out, "dev gt6b5a1c1e0n1") {
		t.Errorf("route to 192.0.2.7 in table 100: %q", out)
	}
	// One NIC fewer: its tap goes at the next setup.
	inst.NICs = inst.NICs[:1]
	if err := k.setupNICs(ctx, inst, nics[:1]); err != nil {
		t.Fatal(err)
	}
	if taps := nsTaps(t, ns); !slices.Equal(taps, []string{"gt6b5a1c1e0n0"}) {
		t.Errorf("after removing NIC 1: taps %v", taps)
	}
	if out := nsOut(t, ns, "route", "show", "table", "100", "192.0.2.7"); out != "" {
		t.Errorf("route left: %q", out)
	}
	if err := k.removeTaps(ctx, inst.UUID, 0); err != nil {
		t.Fatal(err)
	}
	if taps := nsTaps(t, ns); len(taps) != 0 {
		t.Errorf("taps left: %v", taps)
	}
}

// TestKVMGuestNICs boots a real guest with a bridged and a routed NIC in
// a network namespace: the taps are there while it runs (one each,
// after a restart of the driver and a retried start) and gone after stop.
func TestKVMGuestNICs(t *testing.T) {
	kernel, initrd := needGuest(t)
	ns := testNetNS(t)
	ctx := context.Background()
	dir := t.TempDir()
	newK := func() *KVM {
		k, err := NewKVM(KVMConfig{Dir: dir, Node: "n1", Addr: "127.0.0.1", Accel: AccelTCG, NetNS: ns})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := newK()
	t.Cleanup(func() { killAll(dir) })
	inst := guestInstance(kernel, initrd, "diskless")
	inst.HVParams["serial_console"] = true
	inst.NICs = []fsm.NIC{
		{MAC: "aa:00:00:00:00:01", Mode: fsm.NICModeBridged, Link: "nobr"},
		{MAC: "aa:00:00:00:00:02", Mode: fsm.NICModeRouted, IP: "192.0.2.7"},
	}
	if _, err := k.Start(ctx, inst); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), `bridge "nobr"`) {
		t.Fatalf("start on a missing bridge: %v", err)
	}
	if st, err := k.Status(ctx, inst); err != nil || st.State != StateStopped || len(nsTaps(t, ns)) != 0 {
		t.Fatalf("after the refusal: %+v %v, taps %v", st, err, nsTaps(t, ns))
	}
	inst.NICs[0].Link = "br0"
	expect(t, "start", true)(k.Start(ctx, inst))
	waitCount(t, serialLines(t, k.SerialPath(inst.UUID)), 0, 60e9)
	check := func(when string) {
		t.Helper()
		if taps := nsTaps(t, ns); !slices.Equal(taps, []string{"gt6b5a1c1e0n0", "gt6b5a1c1e0n1"}) {
			t.Errorf("%s: taps %v", when, taps)
		}
		if out := nsOut(t, ns, "-o", "link", "show", "master", "br0"); !strings.Contains(out, "gt6b5a1c1e0n0") {
			t.Errorf("%s: ports of br0: %s", when, out)
		}
		if out := nsOut(t, ns, "route", "show", "192.0.2.7"); !strings.Contains(out, "dev gt6b5a1c1e0n1") {
			t.Errorf("%s: route to 192.0.2.7: %q", when, out)
		}
	}
	check("running")
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k.pid(inst.UUID)))
	if !strings.Contains(string(cmdline), "virtio-net-pci,netdev=net0,mac=aa:00:00:00:00:01,id=nic0") {
		t.Errorf("qemu command line: %q", cmdline)
	}
	// A restarted agent finds the guest; a retried start changes nothing.
	k = newK()
	if st, err := k.Status(ctx, inst); err != nil || st.State != StateRunning {
		t.Fatalf("status after restart: %+v %v", st, err)
	}
	expect(t, "retried start", false)(k.Start(ctx, inst))
	check("after a restart and a retried start")
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	if taps := nsTaps(t, ns); len(taps) != 0 {
		t.Errorf("taps after stop: %v", taps)
	}
	if out := nsOut(t, ns, "route", "show", "192.0.2.7"); out != "" {
		t.Errorf("route after stop: %q", out)
	}
	// A qemu killed from outside leaves its taps: the next start reuses
	// them, and remove deletes them.
	expect(t, "start again", true)(k.Start(ctx, inst))
	killAll(dir)
	check("qemu killed")
	expect(t, "start after the kill", true)(k.Start(ctx, inst))
	check("started after the kill")
	killAll(dir)
	expect(t, "remove", true)(k.Remove(ctx, inst))
	if taps := nsTaps(t, ns); len(taps) != 0 {
		t.Errorf("taps after remove: %v", taps)
	}
}

// TestParseCapEff: the effective set of good status texts; bad ones
// refused, saying why.
func TestParseCapEff(t *testing.T) {
	for _, c := range []struct {
		in   string
		caps uint64
		err  string
	}{
		{"Name:\tgntd\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n", 0x1ffffffffff, ""},
		{"CapEff:\t0000000000001000\n", 1 << capNetAdmin, ""},
		{"CapEff:\t0000000000000000", 0, ""},
		{"Name:\tgntd\n", 0, "no CapEff line"},
		{"CapEff:\tzz\n", 0, "not a 64-bit hexadecimal set"},
		{"CapEff:\t\n", 0, "not a 64-bit hexadecimal set"},
		{"CapEff:\t10000000000000000\n", 0, "not a 64-bit hexadecimal set"},
		{"CapEff:\t" + strings.Repeat("f", 100000) + "\n", 0, "token too long"},
	} {
		caps, err := parseCapEff(strings.NewReader(c.in))
		if c.err == "" && (err != nil || caps != c.caps) || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%.40q: %x %v, want %x %q", c.in, caps, err, c.caps, c.err)
		}
	}
}

// FuzzParseCapEff: no status text crashes the parser.
func FuzzParseCapEff(f *testing.F) {
	f.Add("CapEff:\t000001ffffffffff\n")
	f.Add("CapEff:\tzz")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		parseCapEff(strings.NewReader(s))
	})
}

// TestKVMNoTaps: on a node whose gntd cannot create taps, an instance
// with a NIC is refused before anything starts, with the reason; one
// without NICs is not affected by it.
func TestKVMNoTaps(t *testing.T) {
	dir := t.TempDir()
	k, err := NewKVM(KVMConfig{Dir: dir, Node: "n1", Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	k.netAdmin, k.netAdminWhy = false, "gntd (uid 1000) lacks CAP_NET_ADMIN: ..."
	ctx := context.Background()
	inst := fsm.Instance{Name: "x", UUID: "u1", DiskTemplate: fsm.DTDiskless, MemoryMiB: 64, VCPUs: 1,
		NICs: []fsm.NIC{{MAC: "aa:00:00:00:00:01", Mode: fsm.NICModeBridged, Link: "br0"}}}
	_, err = k.Start(ctx, inst)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "instance x has 1 NIC(s), and on node n1 gntd (uid 1000) lacks CAP_NET_ADMIN") {
		t.Fatalf("start with a NIC: %v", err)
	}
	if st, err := k.Status(ctx, inst); err != nil || st.State != StateStopped || k.pid(inst.UUID) != 0 {
		t.Fatalf("after the refusal: %+v %v", st, err)
	}
	if ok, why := k.Taps(); ok || !strings.Contains(why, "CAP_NET_ADMIN") {
		t.Errorf("Taps() = %v %q", ok, why)
	}
}

// TestKVMRemoveTapsByName: removing an instance looks for its taps by
// name in the node's interface list before it runs ip, so an instance
// without taps is removed on a node whose ip cannot list interfaces
// (here an ip that fails every command, as busybox's does -j); a tap
// left by an earlier, partial removal is still found and deleted.
func TestKVMRemoveTapsByName(t *testing.T) {
	bin, sys := t.TempDir(), t.TempDir()
	calls := filepath.Join(bin, "calls")
	// The fake ip lists the taps in sys with -j (when allowed by the
	// file ok) and deletes them; it fails anything else.
	script := `#!/bin/sh
echo "$*" >> ` + calls + `
[ -e ` + bin + `/ok ] || { echo "ip: unknown option" >&2; exit 1; }
case "$*" in
"-j -d link show") printf '['; sep=; for f in ` + sys + `/*; do [ -e "$f" ] || continue; printf '%s{"ifname":"%s"}' "$sep" "$(basename "$f")"; sep=,; done; echo ']';;
"link del dev "*) rm "` + sys + `/$4";;
*) exit 1;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "ip"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	k, err := NewKVM(KVMConfig{Dir: t.TempDir(), Node: "n1", Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	k.sysNet = sys
	ctx := context.Background()
	os.WriteFile(filepath.Join(sys, "eth0"), nil, 0o600)
	record := func(inst fsm.Instance) {
		t.Helper()
		if _, err := k.mutate(ctx, OpStop, inst, "", func(rec **kvmRecord) (bool, string, error) {
			*rec = &kvmRecord{Instance: inst, State: StateStopped}
			return true, "", nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ipCalls := func() string {
		b, _ := os.ReadFile(calls)
		os.Remove(calls)
		return strings.TrimSpace(string(b))
	}

	bare := fsm.Instance{Name: "bare", UUID: "0a1b2c3d-0000-4000-8000-000000000001", DiskTemplate: fsm.DTDiskless, MemoryMiB: 64, VCPUs: 1}
	record(bare)
	if r, err := k.Remove(ctx, bare); err != nil || !r.Changed {
		t.Fatalf("remove of an instance without NICs: %+v %v", r, err)
	}
	if c := ipCalls(); c != "" {
		t.Errorf("ip ran for an instance without taps: %q", c)
	}

	// A tap of nic (whose NIC is gone from the instance) is left.
	nic := fsm.Instance{Name: "nic", UUID: "5e6f7a8b-0000-4000-8000-000000000002", DiskTemplate: fsm.DTDiskless, MemoryMiB: 64, VCPUs: 1}
	record(nic)
	tap := tapName(nic.UUID, 0)
	os.WriteFile(filepath.Join(sys, tap), nil, 0o600)
	if _, err := k.Remove(ctx, nic); err == nil || !strings.Contains(err.Error(), "unknown option") {
		t.Fatalf("remove with a tap left and ip failing: %v", err)
	}
	ipCalls()
	os.WriteFile(filepath.Join(bin, "ok"), nil, 0o600)
	if r, err := k.Remove(ctx, nic); err != nil || !r.Changed {
		t.Fatalf("remove with a tap left: %+v %v", r, err)
	}
	if c := ipCalls(); c != "-j -d link show\nlink del dev "+tap {
		t.Errorf("ip calls: %q", c)
	}
	if _, err := os.Stat(filepath.Join(sys, tap)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tap %s left: %v", tap, err)
	}
}
