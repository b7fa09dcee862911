package agent

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// OSAPIVersion is the Ganeti OS API version the exec driver's environment
// follows (Ganeti's OS_API_V20).
const OSAPIVersion = 20

// hooksPath is the PATH scripts get, Ganeti's HOOKS_PATH.
const hooksPath = "/sbin:/bin:/usr/sbin:/usr/bin"

// scriptEnv is the environment of a script run: the instance as Ganeti's
// OS API gives it to OS scripts (backend.OSEnvironment), then gnt's own
// GNT_* variables for the operation. Nothing is inherited from gntd.
//
// Ganeti variables set: OS_API_VERSION, OS_NAME, OS_VARIANT, DEBUG_LEVEL,
// PATH, INSTANCE_NAME, INSTANCE_OS, INSTANCE_UUID, INSTANCE_CTIME,
// INSTANCE_MTIME, INSTANCE_PRIMARY_NODE, INSTANCE_SECONDARY_NODES (node
// UUIDs: gnt's configuration names nodes by UUID), HYPERVISOR, DISK_COUNT,
// DISK_<i>_UUID, DISK_<i>_SIZE (MiB), DISK_<i>_ACCESS, DISK_<i>_NAME,
// NIC_COUNT, NIC_<i>_MAC, NIC_<i>_UUID, NIC_<i>_NAME, NIC_<i>_IP,
// NIC_<i>_MODE, NIC_<i>_LINK, NIC_<i>_BRIDGE (bridged mode),
// NIC_<i>_NETWORK_NAME, INSTANCE_BE_maxmem, INSTANCE_BE_minmem,
// INSTANCE_BE_vcpus, and INSTANCE_REINSTALL=1 for a reinstall. Not set:
// DISK_<i>_PATH and DISK_<i>_URI (the scripts own the storage and know
// where a disk lives), OSP_* (gnt has no OS parameters yet).
func scriptEnv(hypervisor string, inst fsm.Instance, extra map[string]string) []string {
	env := map[string]string{
		"OS_API_VERSION": strconv.Itoa(OSAPIVersion),
		"DEBUG_LEVEL":    "0",
		"PATH":           hooksPath,
		"HYPERVISOR":     hypervisor,
	}
	osName, variant, _ := strings.Cut(inst.OS, "+")
	env["OS_NAME"], env["OS_VARIANT"] = osName, variant
	env["INSTANCE_NAME"] = inst.Name
	env["INSTANCE_OS"] = inst.OS
	env["INSTANCE_UUID"] = inst.UUID
	env["INSTANCE_CTIME"] = fmt.Sprint(inst.CTime)
	env["INSTANCE_MTIME"] = fmt.Sprint(inst.MTime)
	env["INSTANCE_PRIMARY_NODE"] = inst.PrimaryNode
	env["INSTANCE_SECONDARY_NODES"] = strings.Join(inst.SecondaryNodes, " ")
	env["INSTANCE_BE_maxmem"] = strconv.FormatInt(inst.MemoryMiB, 10)
	env["INSTANCE_BE_minmem"] = strconv.FormatInt(inst.MemoryMiB, 10)
	env["INSTANCE_BE_vcpus"] = strconv.Itoa(inst.VCPUs)
	env["DISK_COUNT"] = strconv.Itoa(len(inst.Disks))
	for i, d := range inst.Disks {
		p := fmt.Sprintf("DISK_%d_", i)
		env[p+"UUID"] = d.UUID
		env[p+"SIZE"] = strconv.FormatInt(d.SizeMiB, 10)
		env[p+"ACCESS"] = d.Mode
		if d.Name != "" {
			env[p+"NAME"] = d.Name
		}
	}
	env["NIC_COUNT"] = strconv.Itoa(len(inst.NICs))
	for i, n := range inst.NICs {
		p := fmt.Sprintf("NIC_%d_", i)
		env[p+"MAC"] = n.MAC
		env[p+"UUID"] = n.UUID
		set := func(k, v string) {
			if v != "" {
				env[p+k] = v
			}
		}
		set("NAME", n.Name)
		set("IP", n.IP)
		set("MODE", n.Mode)
		set("LINK", n.Link)
		set("NETWORK_NAME", n.Network)
		if n.Mode == "bridged" {
			set("BRIDGE", n.Link)
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
