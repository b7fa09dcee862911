package fsm

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// The tables of known parameters, per component: each hypervisor's
// (hvParamDefs), the backend's (BEParamDefs), the NICs' (NICParamDefs)
// and each disk template's (diskParamDefs). A component validates only
// the keys it knows; a key no table knows is refused by name, never
// dropped. docs/parameters.md lists them with their meaning.

// Parameter kinds.
const (
	KindString = "string" // any string of at most MaxParamValueLen bytes
	KindPath   = "path"   // an absolute path, or empty
	KindBool   = "bool"   // true/false (also the strings true, false, yes, no)
	KindInt    = "int"    // an integer within Min..Max (also its decimal string)
	KindEnum   = "enum"   // one of Enum
)

// MaxParamValueLen bounds a string parameter's value.
const MaxParamValueLen = 1024

// ParamDef describes one known parameter.
type ParamDef struct {
	Key  string
	Kind string
	// Default is the built-in default (nil: none, the parameter is unset).
	Default any
	// Enum are the allowed values of a KindEnum; Min and Max bound a
	// KindInt.
	Enum     []string
	Min, Max int64
	// Check, when set, checks a string value further (returns what is
	// wrong, or "").
	Check func(string) string
	// Doc is a one-line description.
	Doc string
}

func str(key, def, doc string) ParamDef {
	return ParamDef{Key: key, Kind: KindString, Default: def, Doc: doc}
}
func path(key, def, doc string) ParamDef {
	return ParamDef{Key: key, Kind: KindPath, Default: def, Doc: doc}
}
func boolean(key string, def bool, doc string) ParamDef {
	return ParamDef{Key: key, Kind: KindBool, Default: def, Doc: doc}
}
func integer(key string, def, min, max int64, doc string) ParamDef {
	return ParamDef{Key: key, Kind: KindInt, Default: float64(def), Min: min, Max: max, Doc: doc}
}
func enum(key, def string, values []string, doc string) ParamDef {
	return ParamDef{Key: key, Kind: KindEnum, Default: def, Enum: values, Doc: doc}
}

// Hypervisor names.
const (
	HVKVM  = "kvm"
	HVFake = "fake"
	HVExec = "exec"
)

// KnownHypervisors are the hypervisors gnt has drivers for.
var KnownHypervisors = []string{HVExec, HVFake, HVKVM}

func checkAddrOrIface(s string) string {
	if s == "" || net.ParseIP(s) != nil {
		return ""
	}
	if ValidateName("", s, 15) == nil && !strings.ContainsAny(s, "/ :") {
		return "" // an interface name (Ganeti binds to its address)
	}
	return "is neither an IP address nor an interface name"
}

func checkSecurityDomain(s string) string {
	if s == "" {
		return ""
	}
	return ValidateName("", s, 32).msgOrEmpty()
}

// checkHVRules checks effective hypervisor parameters against the rules
// that tie parameters together: checkSecurityModel's and CheckVNC's.
func checkHVRules(field string, filled map[string]any) *Error {
	if e := checkSecurityModel(field, filled); e != nil {
		return e
	}
	return CheckVNC(field, filled)
}

// CheckVNC checks effective hypervisor parameters against the VNC
// console's rules: vnc_tls needs vnc_bind_address (without it no VNC
// server runs, and the setting would be dropped), and vnc_x509_verify
// needs vnc_x509_path (Ganeti's hv_kvm check_vnc_parameters): the CA
// that signs the clients' certificates is there. Whether the files
// exist is the node's to check, at start (the kvm driver checks this
// rule again there).
func CheckVNC(field string, filled map[string]any) *Error {
	if filled["vnc_tls"] == true {
		if bind, _ := filled["vnc_bind_address"].(string); bind == "" {
			return errf(CodeInval, field+".vnc_tls", "%s: vnc_tls=true needs vnc_bind_address: without it there is no VNC console to secure", field)
		}
	}
	if filled["vnc_x509_verify"] == true {
		if p, _ := filled["vnc_x509_path"].(string); p == "" {
			return errf(CodeInval, field+".vnc_x509_verify", "%s: vnc_x509_verify=true needs vnc_x509_path, the directory whose ca-cert.pem signs the clients' certificates", field)
		}
	}
	return nil
}

// checkSecurityModel checks effective hypervisor parameters against
// Ganeti's rule on security_model and security_domain (hv_kvm's
// check_security_model): user needs a domain, none and pool take none.
// Whether the user exists is the node's to check, at start.
func checkSecurityModel(field string, filled map[string]any) *Error {
	model, ok := filled["security_model"].(string)
	if !ok {
		return nil
	}
	domain, _ := filled["security_domain"].(string)
	switch {
	case model == "user" && domain == "":
		return errf(CodeInval, field+".security_domain", "%s: security_model=user needs security_domain, the user QEMU runs as", field)
	case model != "user" && domain != "":
		return errf(CodeInval, field+".security_domain", "%s: security_domain %q goes only with security_model=user, not %s (reset it in the same change: security_domain=default)", field, domain, model)
	}
	return nil
}

// hvParamDefs are the known parameters of each hypervisor: Ganeti's KVM
// parameters (man/gnt-instance.rst), the fake driver's and the exec
// driver's.
var hvParamDefs = map[string][]ParamDef{
	// The kvm driver's parameters: Ganeti's names, values and defaults
	// (man/gnt-instance.rst "KVM"), the ones agent/kvm_params.go knows.
	// Those marked "(not yet)" the driver accepts only at their default.
	HVKVM: {
		path("kernel_path", "", "kernel to boot directly (-kernel; empty: boot from the disks)"),
		path("initrd_path", "", "initial ramdisk (-initrd), with kernel_path"),
		str("kernel_args", "ro", "kernel command line (-append), with kernel_path"),
		str("root_path", "/dev/vda1", "root= added to the kernel command line (empty: none)"),
		boolean("serial_console", true, "serial console on a unix socket; console=ttyS0 on the kernel command line"),
		integer("serial_speed", 38400, 1, 4000000, "the serial console's speed on the kernel command line"),
		boolean("acpi", true, "ACPI (graceful shutdown needs it); false: -no-acpi"),
		enum("boot_order", "disk", []string{"disk", "cdrom", "floppy", "network"}, "boot device without kernel_path"),
		enum("disk_type", "paravirtual", []string{"paravirtual", "ide"}, "virtio-blk or IDE disks"),
		enum("disk_cache", "default", []string{"default", "none", "writethrough", "writeback"}, "the drives' cache mode"),
		enum("nic_type", "paravirtual", []string{"paravirtual", "e1000", "rtl8139", "ne2k_pci", "ne2k_isa", "i82551", "i82557b", "i82559er", "pcnet"}, "NIC model (paravirtual: virtio-net)"),
		str("cpu_type", "", "-cpu model (empty: QEMU's default)"),
		enum("kvm_flag", "", []string{"", "enabled", "disabled"}, "enabled: KVM, disabled: TCG, empty: what the node's probe found"),
		enum("reboot_behavior", "reboot", []string{"reboot", "exit"}, "exit: a reboot inside the guest stops it (-no-reboot)"),
		boolean("use_localtime", false, "the guest's clock in local time"),
		str("machine_version", "", "-machine type (empty: QEMU's default)"),
		integer("migration_port", 8102, 1, 65535, "first TCP port of incoming migrations on the target (global)"),
		integer("migration_bandwidth", 32, 1, 1<<20, "MiB/s a live migration may use (global)"),
		integer("migration_downtime", 30, 1, 1<<20, "ms of downtime a live migration may cause"),
		{Key: "vnc_bind_address", Kind: KindString, Default: "", Check: checkAddrOrIface, Doc: "VNC console on this address (or the address of this interface) at the instance's network_port"},
		path("vnc_password_file", "", "file on the node holding the VNC password (one line, at most 8 bytes), with vnc_bind_address"),
		boolean("vnc_tls", false, "VNC over TLS (VeNCrypt): x509 credentials from vnc_x509_path, or anonymous TLS without it; needs vnc_bind_address"),
		path("vnc_x509_path", "", "directory on the node with ca-cert.pem, server-cert.pem and server-key.pem, the VNC server's TLS credentials, with vnc_tls"),
		boolean("vnc_x509_verify", false, "VNC clients must present a certificate signed by vnc_x509_path's ca-cert.pem; needs vnc_x509_path"),
		{Key: "spice_bind", Kind: KindString, Default: "", Check: checkAddrOrIface, Doc: "SPICE listen address (not yet)"},
		path("cdrom_image_path", "", "ISO image on a CD-ROM (not yet)"),
		str("kvm_extra", "", "extra QEMU arguments (not yet)"),
		enum("security_model", "none", []string{"none", "user", "pool"}, "user QEMU runs as (-runas): none (gntd's), user (security_domain), pool (an unused uid of the cluster's uid pool)"),
		{Key: "security_domain", Kind: KindString, Default: "", Check: checkSecurityDomain, Doc: "user name QEMU runs as with security_model=user (empty with the others)"},
		path("mem_path", "", "back the guest's memory with hugetlbfs files here (not yet)"),
		boolean("use_chroot", false, "chroot QEMU into an empty directory (not yet)"),
		boolean("user_shutdown", false, "a shutdown inside the guest is an admin shutdown (not yet)"),
	},
	// HVFake takes the kvm table (filled in init): it simulates the same
	// guests and records their parameters.
	HVFake: nil,
	// The exec driver's scripts receive no hypervisor parameters, so it
	// takes none: any is refused rather than dropped.
	HVExec: {},
}

func init() { hvParamDefs[HVFake] = hvParamDefs[HVKVM] }

// HVParamDefs returns the table of a hypervisor's parameters (nil for
// a hypervisor gnt does not know).
func HVParamDefs(hv string) []ParamDef { return hvParamDefs[hv] }

// BEParamDefs are the backend parameters (Ganeti's beparams). "memory" is
// Ganeti's older name of maxmem.
var BEParamDefs = []ParamDef{
	integer("maxmem", DefaultInstanceMemory, 0, MaxMemoryMiB, "memory of the instance in MiB"),
	{Key: "memory", Kind: KindInt, Min: 0, Max: MaxMemoryMiB, Doc: "older name of maxmem"},
	integer("minmem", DefaultInstanceMemory, 0, MaxMemoryMiB, "least memory the instance runs with (ballooning)"),
	integer("vcpus", DefaultInstanceVCPUs, 1, MaxVCPUs, "virtual CPUs"),
	boolean("auto_balance", true, "the instance counts in N+1 and the balancer may move it"),
	boolean("always_failover", false, "migrations of this instance are failovers"),
	integer("spindle_use", 1, 0, 1024, "disk spindles the instance uses"),
}

// NIC modes.
const (
	NICModeBridged     = "bridged"
	NICModeRouted      = "routed"
	NICModeOpenVSwitch = "openvswitch"
)

// NICParamDefs are the NIC parameters (Ganeti's nicparams).
var NICParamDefs = []ParamDef{
	enum("mode", NICModeBridged, []string{NICModeBridged, NICModeRouted, NICModeOpenVSwitch}, "how the NIC reaches the network"),
	{Key: "link", Kind: KindString, Default: "gnt-br0", Check: checkLink, Doc: "bridge (bridged), routing table (routed) or switch (openvswitch)"},
	{Key: "vlan", Kind: KindString, Default: "", Check: checkVLAN, Doc: "VLAN: .N (untagged), :N (trunk) or .N:M:... (openvswitch)"},
}

func checkLink(s string) string {
	if s == "" {
		return ""
	}
	return ValidateName("", s, MaxNameLen).msgOrEmpty()
}

// checkVLAN checks Ganeti's vlan syntax: "", "N", ".N", ":N", ".N:M:..."
// or ":N:M...", each N a VLAN id 0..4095.
func checkVLAN(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 64 {
		return "is not a VLAN (too long)"
	}
	body := s
	if s[0] == '.' || s[0] == ':' {
		body = s[1:]
	}
	for _, p := range strings.Split(body, ":") {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n > 4095 {
			return "is not a VLAN (.N, :N or .N:M:..., N from 0 to 4095)"
		}
	}
	return ""
}

// MaxDRBDRate bounds DRBD 8.4's rates (resync-rate, c-max-rate,
// c-min-rate) in KiB/s: drbdsetup refuses more (4 GiB/s).
const MaxDRBDRate = 4194304

// checkDiskBarriers checks the drbd disk parameter disk-barriers as the
// kvm driver takes it: n, or letters b, f, d, each at most once (empty:
// none disabled, as n).
func checkDiskBarriers(s string) string {
	if s == "n" {
		return ""
	}
	for i, c := range s {
		if !strings.ContainsRune("bfd", c) || strings.ContainsRune(s[:i], c) {
			return "is not n (none disabled) nor any of b (barriers), f (flushes), d (drain), each once"
		}
	}
	return ""
}

// diskParamDefs are the disk parameters of each disk template. The drbd
// ranges are what the kvm driver's DRBD 8.4 commands take (agent
// kvm_drbd.go params), so a value a node cannot use is refused when it
// is submitted, never when a disk is used.
var diskParamDefs = map[string][]ParamDef{
	DTPlain: {
		integer("stripes", 1, 1, 64, "LVM stripes of a logical volume"),
	},
	DTDrbd: {
		integer("resync-rate", 61440, 1, MaxDRBDRate, "DRBD resync rate in KiB/s"),
		integer("data-stripes", 1, 1, 64, "LVM stripes of the data volume"),
		integer("meta-stripes", 1, 1, 64, "LVM stripes of the metadata volume"),
		{Key: "disk-barriers", Kind: KindString, Default: "n", Check: checkDiskBarriers, Doc: "DRBD disk barriers to disable: n (none), or any of b, f, d (barriers, flushes, drain), each once"},
		boolean("meta-barriers", false, "disable DRBD metadata flushes"),
		str("default-metavg", "", "volume group of the metadata (empty: the cluster's)"),
		str("disk-custom", "", "extra drbdsetup disk options"),
		str("net-custom", "", "extra drbdsetup net options"),
		enum("protocol", "C", []string{"A", "B", "C"}, "DRBD replication protocol"),
		boolean("dynamic-resync", false, "DRBD dynamic resync speed"),
		integer("c-plan-ahead", 20, 1, 300, "dynamic resync: plan ahead (0.1 s)"),
		integer("c-fill-target", 0, 0, 1048576, "dynamic resync: fill target (sectors)"),
		integer("c-delay-target", 1, 1, 100, "dynamic resync: delay target (0.1 s)"),
		integer("c-max-rate", 61440, 250, MaxDRBDRate, "dynamic resync: max rate in KiB/s"),
		integer("c-min-rate", 4096, 0, MaxDRBDRate, "dynamic resync: min rate in KiB/s"),
	},
	DTDiskless: {},
	// Ganeti has no image format parameter (its file disks are raw, its
	// file_driver is loop or blktap); gnt's kvm driver also writes qcow2.
	DTFile:       {diskFormat},
	DTSharedFile: {diskFormat},
}

// diskFormat is the image format of new file disks; a disk keeps the
// format it was created with (its file's name says it: .img raw, .qcow2
// qcow2).
var diskFormat = enum("format", DiskFormatRaw, []string{DiskFormatRaw, DiskFormatQcow2},
	"image format of new disk files (raw, or qcow2: sparse, grows as written); existing disks keep theirs")

// Disk image formats of the file and sharedfile templates (disk parameter
// format).
const (
	DiskFormatRaw   = "raw"
	DiskFormatQcow2 = "qcow2"
)

// DiskParamDefs returns the table of a disk template's parameters and
// whether gnt knows the template.
func DiskParamDefs(template string) ([]ParamDef, bool) {
	d, ok := diskParamDefs[template]
	return d, ok
}

// DiskTemplates are the disk templates the disk parameters know, sorted.
func DiskTemplates() []string {
	out := make([]string, 0, len(diskParamDefs))
	for t := range diskParamDefs {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// paramDefaults gives a table's defaults (a new map).
func paramDefaults(defs []ParamDef) map[string]any {
	out := map[string]any{}
	for _, d := range defs {
		if d.Default != nil {
			out[d.Key] = d.Default
		}
	}
	return out
}

// ParamDefaults gives the built-in defaults of a table (a new map).
func ParamDefaults(defs []ParamDef) map[string]any { return paramDefaults(defs) }

func findDef(defs []ParamDef, key string) *ParamDef {
	for k := range defs {
		if defs[k].Key == key {
			return &defs[k]
		}
	}
	return nil
}

func defKeys(defs []ParamDef) string {
	keys := make([]string, len(defs))
	for k, d := range defs {
		keys[k] = d.Key
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// ParamDefault is the value that, given at a level that overrides
// another, removes the override (Ganeti's "default").
const ParamDefault = "default"

// NormalizeParams checks a parameter map against a table and returns it
// with its values in their stored form (bools as bool, integers as
// float64): the error names the first bad key (field.key) and what is
// wrong. A key the table does not know is refused; with resettable, the
// value "default" is kept as is (it removes an override, see
// MergeParams).
func NormalizeParams(field, what string, defs []ParamDef, m map[string]any, resettable bool) (map[string]any, *Error) {
	if len(m) > MaxParams {
		return nil, errf(CodeInval, field, "%s has at most %d keys, got %d", field, MaxParams, len(m))
	}
	out := make(map[string]any, len(m))
	for _, k := range sortedKeys(m) {
		f := field + "." + k
		d := findDef(defs, k)
		if d == nil {
			if len(defs) == 0 {
				return nil, errf(CodeInval, f, "unknown %s parameter %q: %s has no parameters", what, k, what)
			}
			return nil, errf(CodeInval, f, "unknown %s parameter %q (known: %s)", what, k, defKeys(defs))
		}
		v := m[k]
		if s, ok := v.(string); ok && resettable && s == ParamDefault {
			out[k] = ParamDefault
			continue
		}
		nv, msg := normalizeValue(d, v)
		if msg != "" {
			return nil, errf(CodeInval, f, "%s parameter %s: %s", what, k, msg)
		}
		out[k] = nv
	}
	return out, nil
}

func normalizeValue(d *ParamDef, v any) (any, string) {
	switch d.Kind {
	case KindBool:
		switch x := v.(type) {
		case bool:
			return x, ""
		case string:
			switch strings.ToLower(x) {
			case "true", "yes":
				return true, ""
			case "false", "no":
				return false, ""
			}
		}
		return nil, fmt.Sprintf("%s is not a boolean (true or false)", show(v))
	case KindInt:
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
				return nil, fmt.Sprintf("%s is not an integer", show(v))
			}
			n = f
		case string:
			i, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, fmt.Sprintf("%s is not an integer", show(v))
			}
			n = float64(i)
		default:
			return nil, fmt.Sprintf("%s is not an integer", show(v))
		}
		if n != math.Trunc(n) || math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, fmt.Sprintf("%s is not an integer", show(v))
		}
		if n < float64(d.Min) || n > float64(d.Max) {
			return nil, fmt.Sprintf("%s is outside %d..%d", show(v), d.Min, d.Max)
		}
		return n, ""
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Sprintf("%s is not a string", show(v))
	}
	if len(s) > MaxParamValueLen {
		return nil, fmt.Sprintf("value of %d bytes is longer than %d", len(s), MaxParamValueLen)
	}
	if strings.ContainsAny(s, "\x00\n\r") {
		return nil, "value holds a NUL or line break"
	}
	switch d.Kind {
	case KindEnum:
		for _, e := range d.Enum {
			if s == e {
				return s, ""
			}
		}
		return nil, fmt.Sprintf("%q is not one of %s", s, strings.Join(quoteAll(d.Enum), ", "))
	case KindPath:
		if s != "" && (!strings.HasPrefix(s, "/") || strings.Contains(s, "/../") || strings.HasSuffix(s, "/..")) {
			return nil, fmt.Sprintf("%q is not an absolute path", s)
		}
	}
	if d.Check != nil {
		if msg := d.Check(s); msg != "" {
			return nil, fmt.Sprintf("%q %s", s, msg)
		}
	}
	return s, ""
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for k, s := range ss {
		out[k] = strconv.Quote(s)
	}
	return out
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil || len(b) > 64 {
		return fmt.Sprintf("a %T", v)
	}
	return string(b)
}

// MergeParams overlays changes on base (a new map): a value "default"
// removes the key.
func MergeParams(base, changes map[string]any) map[string]any {
	out := cloneMap(base)
	for k, v := range changes {
		if s, ok := v.(string); ok && s == ParamDefault {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// FillParams overlays levels of a parameter map, lowest first (a new map).
func FillParams(levels ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, l := range levels {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}

// ValidateHVParams checks hypervisor parameters for hv; at instance
// level (instance true) a global parameter is refused.
func ValidateHVParams(field, hv string, m map[string]any, instance, resettable bool) (map[string]any, *Error) {
	defs, ok := hvParamDefs[hv]
	if !ok {
		return nil, errf(CodeInval, field, "unknown hypervisor %q (known: %s)", hv, strings.Join(KnownHypervisors, ", "))
	}
	if instance {
		for _, k := range sortedKeys(m) {
			if IsHVGlobal(k) {
				return nil, errf(CodeInval, field+"."+k, "hypervisor parameter %s is global: only the cluster sets it (gnt cluster modify -H %s:%s=...)", k, hv, k)
			}
		}
	}
	return NormalizeParams(field, "hypervisor "+hv, defs, m, resettable)
}

// ValidateHypervisorName checks a hypervisor's name against the known ones.
func ValidateHypervisorName(field, hv string) *Error {
	if _, ok := hvParamDefs[hv]; !ok {
		return errf(CodeInval, field, "unknown hypervisor %q (known: %s)", hv, strings.Join(KnownHypervisors, ", "))
	}
	return nil
}

// ValidateNICParams checks a NIC's parameters (mode, link, vlan) as
// filled, and that a routed NIC has an IP.
func ValidateNICParams(field string, mode, link, vlan, ip string) *Error {
	m := map[string]any{}
	if mode != "" {
		m["mode"] = mode
	}
	if link != "" {
		m["link"] = link
	}
	if vlan != "" {
		m["vlan"] = vlan
	}
	if _, e := NormalizeParams(field, "NIC", NICParamDefs, m, false); e != nil {
		return e
	}
	return checkRoutedIP(field, mode, ip)
}

// checkRoutedIP checks a routed NIC's IP: it is the destination of the
// host route to the guest, so it must be given and, when it is an
// address (not yet "pool"), one a host route can point at.
func checkRoutedIP(field, mode, ip string) *Error {
	if mode != NICModeRouted {
		return nil
	}
	if ip == "" {
		return errf(CodeInval, field+".ip", "%s: a routed NIC needs an IP address", field)
	}
	if a, err := netip.ParseAddr(ip); err == nil {
		if why := RoutedIPProblem(a); why != "" {
			return errf(CodeInval, field+".ip", "%s: ip %s %s", field, ip, why)
		}
	}
	return nil
}

// RoutedIPProblem says why an address cannot be a routed NIC's (the
// unspecified, loopback and multicast addresses), or "" when it can.
func RoutedIPProblem(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return "is the unspecified address, not a guest's"
	case a.IsLoopback():
		return "is a loopback address, not a guest's"
	case a.IsMulticast():
		return "is a multicast address, not a guest's"
	}
	return ""
}

func (e *Error) msgOrEmpty() string {
	if e == nil {
		return ""
	}
	return e.Msg
}
