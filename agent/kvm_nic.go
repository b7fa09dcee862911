package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// The NICs of the kvm driver. Each NIC is a tap device named from the
// instance's uuid and the NIC's index (tapName), created before qemu
// starts (ip tuntap add ... mode tap) and handed to qemu by name
// (-netdev tap,ifname=...). A bridged NIC's tap is a port of the bridge
// named by its link; a routed NIC's tap carries a host route to the NIC's
// IP (in the routing table named by its link, as Ganeti's routed mode;
// empty: the main table). The taps are persistent devices: they outlive gntd with the guest,
// so a restarted agent finds them by name, and they are deleted (with
// their routes) when the guest's qemu ends.

// nicModels maps Ganeti's nic_type values to QEMU devices.
var nicModels = map[string]string{
	"paravirtual": "virtio-net-pci", "e1000": "e1000", "rtl8139": "rtl8139",
	"ne2k_pci": "ne2k_pci", "ne2k_isa": "ne2k_isa", "i82551": "i82551",
	"i82557b": "i82557b", "i82559er": "i82559er", "pcnet": "pcnet",
}

// maxIfName is Linux's limit on an interface name (IFNAMSIZ - 1).
const maxIfName = 15

// tapPrefix is the start of the names of the taps of instance uuid:
// "gt", 9 hex digits of the uuid, "n".
func tapPrefix(uuid string) string {
	h := strings.ReplaceAll(strings.ToLower(uuid), "-", "")
	if len(h) > 9 {
		h = h[:9]
	}
	return "gt" + h + "n"
}

// tapName is the tap of NIC idx of instance uuid, e.g. gt6b5a1c1e0n0.
func tapName(uuid string, idx int) string {
	return tapPrefix(uuid) + strconv.Itoa(idx)
}

// kvmNIC is a NIC as the driver sets it up.
type kvmNIC struct {
	Index int
	Tap   string
	Mode  string // fsm.NICModeBridged or fsm.NICModeRouted
	Link  string // the bridge (bridged), the routing table (routed; empty: main)
	IP    string // the routed address, with its prefix length (routed)
	MAC   string
}

// planNICs checks the instance's NICs and says how each is connected,
// without touching the node. An empty mode is bridged, Ganeti's default.
func planNICs(inst fsm.Instance) ([]kvmNIC, error) {
	var out []kvmNIC
	for i, n := range inst.NICs {
		what := fmt.Sprintf("NIC %d of instance %s", i, inst.Name)
		c := kvmNIC{Index: i, Tap: tapName(inst.UUID, i), Mode: n.Mode, Link: n.Link}
		if len(c.Tap) > maxIfName {
			return nil, invalid("%s: tap name %s is longer than %d characters", what, c.Tap, maxIfName)
		}
		mac, err := net.ParseMAC(n.MAC)
		if err != nil || len(mac) != 6 {
			return nil, invalid("%s: MAC %q is not a 6-byte MAC address (aa:00:00:xx:xx:xx)", what, n.MAC)
		}
		c.MAC = mac.String()
		if n.VLAN != "" {
			return nil, fmt.Errorf("%w: %s: vlan %q: the kvm driver does not set VLANs on taps", ErrNotSupported, what, n.VLAN)
		}
		switch n.Mode {
		case "", fsm.NICModeBridged:
			c.Mode = fsm.NICModeBridged
			if n.Link == "" {
				return nil, invalid("%s is bridged without a link: set the NIC's link (or the cluster's nicparams link) to a bridge", what)
			}
			if len(n.Link) > maxIfName || strings.ContainsAny(n.Link, " /\t\n") {
				return nil, invalid("%s: link %q is not a bridge name (at most %d characters, no spaces or slashes)", what, n.Link, maxIfName)
			}
		case fsm.NICModeRouted:
			ip := net.ParseIP(n.IP)
			if ip == nil {
				return nil, invalid("%s is routed and its IP %q is not an IP address (routed NICs need one)", what, n.IP)
			}
			if a, _ := netip.AddrFromSlice(ip); fsm.RoutedIPProblem(a) != "" {
				return nil, invalid("%s is routed and its IP %s %s", what, n.IP, fsm.RoutedIPProblem(a))
			}
			if len(n.Link) > 64 || strings.ContainsAny(n.Link, " /\t\n") {
				return nil, invalid("%s: link %q is not a routing table (a number or a name of /etc/iproute2/rt_tables, at most 64 characters)", what, n.Link)
			}
			if ip.To4() != nil {
				c.IP = ip.String() + "/32"
			} else {
				c.IP = ip.String() + "/128"
			}
		case fsm.NICModeOpenVSwitch:
			return nil, fmt.Errorf("%w: %s is in mode openvswitch; the kvm driver connects bridged and routed NICs only", ErrNotSupported, what)
		default:
			return nil, invalid("%s: unknown mode %q (bridged, routed)", what, n.Mode)
		}
		out = append(out, c)
	}
	return out, nil
}

// nicArgs are qemu's arguments for the NICs, the device model from the
// nic_type hypervisor parameter.
func nicArgs(nics []kvmNIC, nicType string) ([]string, error) {
	model, ok := nicModels[nicType]
	if !ok {
		return nil, invalid("nic_type %q is not one of paravirtual, e1000, rtl8139, ne2k_pci, ne2k_isa, i82551, i82557b, i82559er, pcnet", nicType)
	}
	var args []string
	for _, n := range nics {
		args = append(args,
			"-netdev", fmt.Sprintf("tap,id=net%d,ifname=%s,script=no,downscript=no", n.Index, n.Tap),
			"-device", fmt.Sprintf("%s,netdev=net%d,mac=%s,id=nic%d", model, n.Index, n.MAC, n.Index))
	}
	return args, nil
}

// ipLink is what `ip -j -d link show` says of an interface.
type ipLink struct {
	Name     string `json:"ifname"`
	Master   string `json:"master"`
	LinkInfo struct {
		Kind string `json:"info_kind"`
	} `json:"linkinfo"`
}

// ip runs the ip command (in the driver's network namespace when it has
// one).
func (k *KVM) ip(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	bin := "ip"
	if k.cfg.NetNS != "" {
		args = append([]string{"-n", k.cfg.NetNS}, args...)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/sbin:/bin:/usr/sbin:/usr/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// link returns the interface named name, or nil when there is none.
func (k *KVM) link(ctx context.Context, name string) (*ipLink, error) {
	links, err := k.links(ctx)
	if err != nil {
		return nil, err
	}
	for i := range links {
		if links[i].Name == name {
			return &links[i], nil
		}
	}
	return nil, nil
}

// links lists the node's interfaces.
func (k *KVM) links(ctx context.Context) ([]ipLink, error) {
	out, err := k.ip(ctx, "-j", "-d", "link", "show")
	if err != nil {
		return nil, err
	}
	var ls []ipLink
	if err := json.Unmarshal(out, &ls); err != nil {
		return nil, fmt.Errorf("ip -j link show: %v", err)
	}
	return ls, nil
}

// setupNICs creates the taps of the instance's NICs (a tap left by an
// earlier try is reused) and connects them: a bridged tap joins its
// bridge, a routed one gets the host route to its IP. Every bridge is
// checked before anything is created: a missing one refuses the start
// and leaves nothing behind; on any other failure the taps are deleted.
func (k *KVM) setupNICs(ctx context.Context, inst fsm.Instance, nics []kvmNIC) error {
	if len(nics) == 0 {
		return nil
	}
	if err := k.checkBridges(ctx, inst, nics); err != nil {
		return err
	}
	// Taps of NICs the instance no longer has (a removed NIC) go first.
	if err := k.removeTaps(ctx, inst.UUID, len(nics)); err != nil {
		return err
	}
	for _, n := range nics {
		if err := k.setupNIC(ctx, n); err != nil {
			if rerr := k.removeTaps(ctx, inst.UUID, 0); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return fmt.Errorf("NIC %d of instance %s: %w", n.Index, inst.Name, err)
		}
	}
	return nil
}

// checkBridges refuses NICs whose bridge (the link of a bridged NIC) is
// missing on this node, or is no bridge; it changes nothing.
func (k *KVM) checkBridges(ctx context.Context, inst fsm.Instance, nics []kvmNIC) error {
	var names []string
	for _, n := range nics {
		if n.Mode == fsm.NICModeBridged {
			names = append(names, n.Link)
		}
	}
	if len(names) == 0 {
		return nil
	}
	missing, err := k.MissingBridges(ctx, names)
	if err != nil {
		return err
	}
	for _, n := range nics {
		why, ok := missing[n.Link]
		switch {
		case !ok || n.Mode != fsm.NICModeBridged:
		case why == BridgeAbsent:
			return stateErr("NIC %d of instance %s: bridge %q (its link) does not exist on node %s", n.Index, inst.Name, n.Link, k.cfg.Node)
		default:
			return stateErr("NIC %d of instance %s: link %q on node %s %s", n.Index, inst.Name, n.Link, k.cfg.Node, why)
		}
	}
	return nil
}

// MissingBridges implements BridgeChecker: a name is missing when no
// interface of the node (of the driver's network namespace) has it, or
// when its interface is no bridge.
func (k *KVM) MissingBridges(ctx context.Context, names []string) (map[string]string, error) {
	links, err := k.links(ctx)
	if err != nil {
		return nil, err
	}
	kinds := make(map[string]string, len(links))
	for _, l := range links {
		kinds[l.Name] = l.LinkInfo.Kind
	}
	missing := map[string]string{}
	for _, name := range names {
		kind, ok := kinds[name]
		switch {
		case !ok:
			missing[name] = BridgeAbsent
		case kind != "bridge":
			missing[name] = fmt.Sprintf("is a %q interface, not a bridge", kind)
		}
	}
	return missing, nil
}

func (k *KVM) setupNIC(ctx context.Context, n kvmNIC) error {
	l, err := k.link(ctx, n.Tap)
	if err != nil {
		return err
	}
	if l != nil && l.LinkInfo.Kind != "tun" {
		return fmt.Errorf("%s exists and is not a tap (%q)", n.Tap, l.LinkInfo.Kind)
	}
	if l == nil {
		if _, err := k.ip(ctx, "tuntap", "add", "dev", n.Tap, "mode", "tap"); err != nil {
			return err
		}
	}
	switch n.Mode {
	case fsm.NICModeBridged:
		if _, err := k.ip(ctx, "link", "set", "dev", n.Tap, "master", n.Link, "up"); err != nil {
			return err
		}
	case fsm.NICModeRouted:
		if l != nil && l.Master != "" {
			if _, err := k.ip(ctx, "link", "set", "dev", n.Tap, "nomaster"); err != nil {
				return err
			}
		}
		if _, err := k.ip(ctx, "link", "set", "dev", n.Tap, "up"); err != nil {
			return err
		}
		route := []string{"route", "replace", n.IP, "dev", n.Tap}
		if n.Link != "" {
			route = append(route, "table", n.Link)
		}
		if _, err := k.ip(ctx, route...); err != nil {
			return err
		}
	}
	return nil
}

// removeTaps deletes the taps of instance uuid from NIC index from on
// (0: all of them); their routes go with them. Missing taps are fine.
func (k *KVM) removeTaps(ctx context.Context, uuid string, from int) error {
	links, err := k.links(ctx)
	if err != nil {
		return err
	}
	prefix := tapPrefix(uuid)
	var errs []error
	for _, l := range links {
		rest, ok := strings.CutPrefix(l.Name, prefix)
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(rest); err != nil || i < from {
			continue
		}
		if _, err := k.ip(ctx, "link", "del", "dev", l.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropTaps deletes every tap of instance uuid once its qemu is gone. A
// node without the ip command has no taps of ours. Outside a network
// namespace the taps are looked for by name in sysNet first, so that an
// instance without taps there (one without NICs, or whose taps are
// gone) needs no ip command; a tap left by an earlier, partial removal
// is found there and deleted.
func (k *KVM) dropTaps(ctx context.Context, uuid string) error {
	if k.cfg.NetNS == "" && k.sysNet != "" {
		if ents, err := os.ReadDir(k.sysNet); err == nil && !slices.ContainsFunc(ents, func(e os.DirEntry) bool {
			return strings.HasPrefix(e.Name(), tapPrefix(uuid))
		}) {
			return nil
		}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil
	}
	return k.removeTaps(context.WithoutCancel(ctx), uuid, 0)
}
