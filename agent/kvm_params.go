package agent

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// The kvm driver's hypervisor parameters, Ganeti's names and defaults
// (man/gnt-instance.rst, "KVM"). KVMParams lists every key the driver
// knows: an instance's hvparams may hold only these, and each value is
// checked by its kind. A key the driver does not honour yet is accepted
// only with its "off" value (Unset), so a setting that would change the
// guest is refused rather than dropped.

// KVMParam describes one hypervisor parameter of the kvm driver.
type KVMParam struct {
	// Kind is string, bool, int (non-negative) or one of Values.
	Kind    string
	Values  []string
	Default any
	// Honoured tells whether the driver acts on it; a key not honoured is
	// refused with any value but Default.
	Honoured bool
	Doc      string
}

// KVMParams are the kvm driver's hypervisor parameters by name.
var KVMParams = map[string]KVMParam{
	"kernel_path":    {Kind: "string", Default: "", Honoured: true, Doc: "kernel to boot (-kernel); empty: boot from the disks"},
	"initrd_path":    {Kind: "string", Default: "", Honoured: true, Doc: "initial ramdisk (-initrd), with kernel_path"},
	"kernel_args":    {Kind: "string", Default: "ro", Honoured: true, Doc: "kernel command line (-append), with kernel_path"},
	"root_path":      {Kind: "string", Default: "/dev/vda1", Honoured: true, Doc: "root= added to the kernel command line (empty: none)"},
	"serial_console": {Kind: "bool", Default: true, Honoured: true, Doc: "serial console on a unix socket; console=ttyS0 on the kernel command line"},
	"serial_speed":   {Kind: "int", Default: 38400, Honoured: true, Doc: "the serial console's speed on the kernel command line"},
	"acpi":           {Kind: "bool", Default: true, Honoured: true, Doc: "ACPI (graceful shutdown needs it); false: -no-acpi"},
	"boot_order":     {Kind: "enum", Values: []string{"disk", "cdrom", "floppy", "network"}, Default: "disk", Honoured: true, Doc: "boot device without kernel_path"},
	"disk_type":      {Kind: "enum", Values: []string{"paravirtual", "ide"}, Default: "paravirtual", Honoured: true, Doc: "virtio-blk or IDE disks"},
	"disk_cache":     {Kind: "enum", Values: []string{"default", "none", "writethrough", "writeback"}, Default: "default", Honoured: true, Doc: "the drives' cache mode"},
	"nic_type":       {Kind: "enum", Values: []string{"paravirtual", "e1000", "rtl8139", "ne2k_pci", "ne2k_isa", "i82551", "i82557b", "i82559er", "pcnet"}, Default: "paravirtual", Honoured: true, Doc: "NIC model"},
	"cpu_type":       {Kind: "string", Default: "", Honoured: true, Doc: "-cpu model (empty: QEMU's default)"},
	"kvm_flag":       {Kind: "enum", Values: []string{"", "enabled", "disabled"}, Default: "", Honoured: true, Doc: "enabled: KVM, disabled: TCG, empty: what the node's probe found"},
	"reboot_behavior": {Kind: "enum", Values: []string{"reboot", "exit"}, Default: "reboot", Honoured: true,
		Doc: "exit: a reboot inside the guest stops it (-no-reboot)"},
	"use_localtime":       {Kind: "bool", Default: false, Honoured: true, Doc: "the guest's clock in local time"},
	"machine_version":     {Kind: "string", Default: "", Honoured: true, Doc: "-machine type (empty: QEMU's default)"},
	"migration_port":      {Kind: "int", Default: 8102, Honoured: true, Doc: "first TCP port of incoming migrations on the target (one per migration, from this port up)"},
	"migration_bandwidth": {Kind: "int", Default: 32, Honoured: true, Doc: "MiB/s a live migration may use"},
	"migration_downtime":  {Kind: "int", Default: 30, Honoured: true, Doc: "ms of downtime a live migration may cause"},
	"vnc_bind_address":    {Kind: "string", Default: "", Doc: "VNC: needs a cluster-allocated network port (not yet)"},
	"vnc_password_file":   {Kind: "string", Default: "", Doc: "VNC password: with vnc_bind_address (not yet)"},
	"vnc_tls":             {Kind: "bool", Default: false},
	"spice_bind":          {Kind: "string", Default: ""},
	"cdrom_image_path":    {Kind: "string", Default: ""},
	"kvm_extra":           {Kind: "string", Default: ""},
	"security_model":      {Kind: "enum", Values: []string{"none", "user", "pool"}, Default: "none", Doc: "uid pool and fixed user: not yet"},
	"security_domain":     {Kind: "string", Default: ""},
	"mem_path":            {Kind: "string", Default: ""},
	"use_chroot":          {Kind: "bool", Default: false},
	"user_shutdown":       {Kind: "bool", Default: false},
}

// kvmParams are an instance's hypervisor parameters, checked, with the
// defaults filled in.
type kvmParams map[string]any

// parseKVMParams checks hv against KVMParams: unknown keys, values of the
// wrong kind and settings the driver does not honour are refused, every
// one named.
func parseKVMParams(hv map[string]any) (kvmParams, error) {
	out := kvmParams{}
	for k, p := range KVMParams {
		out[k] = p.Default
	}
	var errs []string
	keys := make([]string, 0, len(hv))
	for k := range hv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p, ok := KVMParams[k]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: not a parameter of the kvm hypervisor", k))
			continue
		}
		v, err := p.parse(hv[k])
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		if !p.Honoured && v != p.Default {
			errs = append(errs, fmt.Sprintf("%s: the kvm driver does not support it yet; only %v is accepted", k, p.Default))
			continue
		}
		out[k] = v
	}
	if len(errs) > 0 {
		return nil, invalid("hypervisor parameters: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

func (p KVMParam) parse(v any) (any, error) {
	switch p.Kind {
	case "string":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a string, got %T", v)
		}
		if len(s) > 4096 {
			return nil, fmt.Errorf("%d characters, over the limit of 4096", len(s))
		}
		if strings.ContainsAny(s, "\x00\n") {
			return nil, fmt.Errorf("contains a NUL or newline")
		}
		return s, nil
	case "enum":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want one of %q, got %T", p.Values, v)
		}
		for _, x := range p.Values {
			if s == x {
				return s, nil
			}
		}
		return nil, fmt.Errorf("%q: want one of %q", s, p.Values)
	case "bool":
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			if b, err := strconv.ParseBool(x); err == nil {
				return b, nil
			}
		}
		return nil, fmt.Errorf("want true or false, got %v", v)
	default: // int
		var n float64
		switch x := v.(type) {
		case float64:
			n = x
		case int:
			n = float64(x)
		case int64:
			n = float64(x)
		case json.Number:
			f, err := x.Float64()
			if err != nil {
				return nil, fmt.Errorf("want a number, got %q", x)
			}
			n = f
		case string:
			f, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return nil, fmt.Errorf("want a number, got %q", x)
			}
			n = f
		default:
			return nil, fmt.Errorf("want a number, got %T", v)
		}
		if n < 0 || n != math.Trunc(n) || n > 1<<31 {
			return nil, fmt.Errorf("want a whole number from 0 to %d, got %v", 1<<31, v)
		}
		return int(n), nil
	}
}

func (p kvmParams) str(k string) string { s, _ := p[k].(string); return s }
func (p kvmParams) bool(k string) bool  { b, _ := p[k].(bool); return b }
func (p kvmParams) int(k string) int    { n, _ := p[k].(int); return n }

// instanceParams checks the instance's hypervisor parameters, as the
// leader sends them: its effective ones (fsm.FillHVParams), the cluster's
// filled in. An instance of another hypervisor is refused.
func instanceParams(inst fsm.Instance) (kvmParams, error) {
	if inst.Hypervisor != "" && inst.Hypervisor != "kvm" {
		return nil, invalid("instance %s is for hypervisor %s; this node runs kvm", inst.Name, inst.Hypervisor)
	}
	return parseKVMParams(inst.HVParams)
}
