package osdef

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// scriptPath is the PATH scripts get (Ganeti's HOOKS_PATH).
const scriptPath = "/sbin:/bin:/usr/sbin:/usr/bin"

// Input is what a script is told about the instance.
type Input struct {
	Instance   fsm.Instance
	Hypervisor string
	// DiskPaths are the disks on this node, in the order of
	// Instance.Disks (DISK_<n>_PATH); an empty or missing entry sets no
	// path for that disk.
	DiskPaths []string
	// HVParams, BEParams and OSParams are the instance's parameters in
	// effect (INSTANCE_HV_<key>, INSTANCE_BE_<key>, OSP_<KEY>), for a
	// caller that filled them in. Nil takes the instance's own
	// (Instance.HVParams, ...; BEParams with maxmem, minmem and vcpus
	// from Instance.MemoryMiB and VCPUs).
	HVParams, BEParams, OSParams map[string]string
	// Reinstall sets INSTANCE_REINSTALL=1 for create.
	Reinstall bool
	// Debug is DEBUG_LEVEL (0 or 1).
	Debug int
}

// Env is the environment of a script of an OS spoken at API version
// version, as Ganeti's OS interface defines it: OS_API_VERSION,
// INSTANCE_NAME, INSTANCE_OS, OS_NAME, OS_VARIANT (15 and later),
// INSTANCE_UUID, HYPERVISOR, INSTANCE_HV_*, INSTANCE_BE_*, DISK_COUNT,
// DISK_<n>_PATH, DISK_<n>_ACCESS, DISK_<n>_UUID, DISK_<n>_SIZE (MiB),
// DISK_<n>_NAME, DISK_<n>_BACKEND_TYPE (block for /dev paths, else
// file:loop), NIC_COUNT, NIC_<n>_MAC, NIC_<n>_UUID, NIC_<n>_NAME,
// NIC_<n>_IP, NIC_<n>_MODE, NIC_<n>_LINK, NIC_<n>_BRIDGE (bridged),
// NIC_<n>_NETWORK_NAME, OSP_<KEY> (20 and later), DEBUG_LEVEL, PATH.
// Optional variables with no value are not set.
func Env(version int, in Input) map[string]string {
	inst := in.Instance
	env := map[string]string{
		"OS_API_VERSION": strconv.Itoa(version),
		"PATH":           scriptPath,
		"DEBUG_LEVEL":    strconv.Itoa(in.Debug),
		"HYPERVISOR":     in.Hypervisor,
		"INSTANCE_NAME":  inst.Name,
		"INSTANCE_OS":    inst.OS,
		"INSTANCE_UUID":  inst.UUID,
	}
	osName, variant := SplitName(inst.OS)
	env["OS_NAME"] = osName
	if version >= 15 && variant != "" {
		env["OS_VARIANT"] = variant
	}
	hv := in.HVParams
	if hv == nil {
		hv = ParamStrings(inst.HVParams)
	}
	for k, v := range hv {
		env["INSTANCE_HV_"+k] = v
	}
	be := in.BEParams
	if be == nil {
		be = ParamStrings(inst.BEParams)
		be["maxmem"] = strconv.FormatInt(inst.MemoryMiB, 10)
		be["minmem"] = strconv.FormatInt(inst.MemoryMiB, 10)
		be["vcpus"] = strconv.Itoa(inst.VCPUs)
		if inst.BEParams["minmem"] != nil {
			be["minmem"] = ParamStrings(inst.BEParams)["minmem"]
		}
	}
	for k, v := range be {
		env["INSTANCE_BE_"+k] = v
	}
	env["DISK_COUNT"] = strconv.Itoa(len(inst.Disks))
	for i, d := range inst.Disks {
		p := fmt.Sprintf("DISK_%d_", i)
		mode := d.Mode
		if mode == "" {
			mode = "rw"
		}
		env[p+"ACCESS"] = mode
		env[p+"UUID"] = d.UUID
		env[p+"SIZE"] = strconv.FormatInt(d.SizeMiB, 10)
		if d.Name != "" {
			env[p+"NAME"] = d.Name
		}
		if i < len(in.DiskPaths) && in.DiskPaths[i] != "" {
			env[p+"PATH"] = in.DiskPaths[i]
			if strings.HasPrefix(in.DiskPaths[i], "/dev/") {
				env[p+"BACKEND_TYPE"] = "block"
			} else {
				env[p+"BACKEND_TYPE"] = "file:loop"
			}
		}
	}
	env["NIC_COUNT"] = strconv.Itoa(len(inst.NICs))
	for i, n := range inst.NICs {
		p := fmt.Sprintf("NIC_%d_", i)
		set := func(k, v string) {
			if v != "" {
				env[p+k] = v
			}
		}
		set("MAC", n.MAC)
		set("UUID", n.UUID)
		set("NAME", n.Name)
		set("IP", n.IP)
		set("MODE", n.Mode)
		set("LINK", n.Link)
		set("NETWORK_NAME", n.Network)
		if n.Mode == "bridged" {
			set("BRIDGE", n.Link)
		}
	}
	osp := in.OSParams
	if osp == nil {
		osp = ParamStrings(inst.OSParams)
	}
	if version >= 20 {
		for k, v := range osp {
			env["OSP_"+strings.ToUpper(k)] = v
		}
	}
	return env
}

// EnvList is Env as "KEY=value" strings, sorted.
func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// ParamStrings gives parameter values as the OS scripts see them, as
// Ganeti prints them: strings as they are, whole numbers without a
// fraction, booleans True and False, null as an empty string, anything
// else as JSON.
func ParamStrings(m map[string]any) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case string:
			out[k] = x
		case bool:
			out[k] = map[bool]string{true: "True", false: "False"}[x]
		case float64:
			out[k] = strconv.FormatFloat(x, 'f', -1, 64)
		case int:
			out[k] = strconv.Itoa(x)
		case int64:
			out[k] = strconv.FormatInt(x, 10)
		case json.Number:
			out[k] = x.String()
		case nil:
			out[k] = ""
		default:
			b, _ := json.Marshal(x)
			out[k] = string(b)
		}
	}
	return out
}
