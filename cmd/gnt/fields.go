package main

import "strings"

// Kinds of list fields, with Ganeti's names of query field types
// (`gnt-node list-fields` shows them).
const (
	kindText   = "Text"
	kindNumber = "Number"
	kindBool   = "Boolean"
	kindSize   = "Storage size" // MiB; --units applies
	kindTime   = "Timestamp"
	kindOther  = "Custom"
)

// field is one field a list command can show (-o) and list-fields
// describes: an API field of the resource's bulk listing.
type field struct {
	name, kind, title, desc string
}

// fieldTable is parsed from lines "name|kind|title|description".
func fieldTable(spec string) []field {
	var out []field
	for _, line := range strings.Split(strings.TrimSpace(spec), "\n") {
		p := strings.SplitN(strings.TrimSpace(line), "|", 4)
		out = append(out, field{name: p[0], kind: p[1], title: p[2], desc: p[3]})
	}
	return out
}

// The fields of GET /2/nodes?bulk=1 (rpc.NodeInfo).
var nodeFields = fieldTable(`
name|` + kindText + `|Node|Node name
uuid|` + kindText + `|UUID|Node UUID
group|` + kindText + `|Group|Name of the node's group
group.uuid|` + kindText + `|GroupUUID|UUID of the node's group
pip|` + kindText + `|PrimaryIP|Primary IP address
sip|` + kindText + `|SecondaryIP|Secondary IP address
role|` + kindText + `|Role|Node role; "M" for master, "C" for master candidate, "R" for regular, "D" for drained, "O" for offline
master_candidate|` + kindBool + `|MasterC|Whether node is a master candidate
master_capable|` + kindBool + `|MasterCapable|Whether node can become a master candidate
vm_capable|` + kindBool + `|VMCapable|Whether node can host instances
offline|` + kindBool + `|Offline|Whether node is marked offline
drained|` + kindBool + `|Drained|Whether node is drained
powered|` + kindBool + `|Powered|Whether node is thought to be powered on (nodes with an OOB helper)
bootid|` + kindText + `|BootID|Random UUID renewed for each system reboot, can be used for detecting reboots by tracking changes (as last reported)
ndparams|` + kindOther + `|NodeParameters|Node parameters (effective)
tags|` + kindOther + `|Tags|Tags
mtotal|` + kindSize + `|MTotal|Total amount of memory of physical machine
mfree|` + kindSize + `|MFree|Memory available for instance allocations
dtotal|` + kindSize + `|DTotal|Total disk space in volume group used for instance disk allocation
dfree|` + kindSize + `|DFree|Available disk space in volume group
ctotal|` + kindNumber + `|CTotal|Number of logical processors
mnode|` + kindSize + `|MNode|Amount of memory used by node (empty: not known to gnt)
cnos|` + kindNumber + `|CNOs|Number of logical processors used by the node OS (empty: not known to gnt)
cnodes|` + kindNumber + `|CNodes|Number of NUMA domains of node (empty: not known to gnt)
csockets|` + kindNumber + `|CSockets|Number of physical CPU sockets (empty: not known to gnt)
sptotal|` + kindNumber + `|SpTotal|Total number of spindles (empty: no spindle accounting)
spfree|` + kindNumber + `|SpFree|Available spindles (empty: no spindle accounting)
pinst_cnt|` + kindNumber + `|Pinst|Number of instances with this node as primary
sinst_cnt|` + kindNumber + `|Sinst|Number of instances with this node as secondary
pinst_list|` + kindOther + `|PriInstances|List of instances with this node as primary
sinst_list|` + kindOther + `|SecInstances|List of instances with this node as secondary
serial_no|` + kindNumber + `|SerialNo|Node object serial number, incremented on each modification
ctime|` + kindTime + `|CTime|Creation timestamp
mtime|` + kindTime + `|MTime|Modification timestamp
addrs|` + kindOther + `|Addresses|gnt: the addresses of the node's gntd services
version|` + kindText + `|Version|gnt: software version of the node's gntd
gnt_liveness|` + kindText + `|Liveness|gnt: the node's gntd as gossip sees it: alive, suspect, dead or unknown
gnt_liveness_since|` + kindTime + `|LivenessSince|gnt: when the liveness last changed
gnt_hypervisor|` + kindText + `|Hypervisor|gnt: the hypervisor driver of the node's agent (null: not known)
gnt_accel|` + kindText + `|Accelerator|gnt: the kvm driver's accelerator, kvm or tcg, and why (null: another driver, or not known)
gnt_storage|` + kindOther + `|Storage|gnt: the node's storage units as last recorded from its agent (null: no report yet)
gnt_storage_reported|` + kindTime + `|StorageReported|gnt: when the storage units were last recorded
gnt_taps|` + kindText + `|Taps|gnt: whether the kvm driver can create tap devices (CAP_NET_ADMIN), yes or no and why (null: another driver, or not known)
`)

// The fields of GET /2/instances?bulk=1 (rpc.InstanceInfo), and those
// instanceListing.derive adds (rpc.AddDerivedInstanceFields).
var instanceFieldDefs = fieldTable(`
name|` + kindText + `|Instance|Instance name
uuid|` + kindText + `|UUID|Instance UUID
os|` + kindText + `|OS|Operating system
pnode|` + kindText + `|Primary_node|Primary node
snodes|` + kindOther + `|Secondary_Nodes|Secondary nodes; usually this will just be one node
admin_state|` + kindText + `|InstanceState|Desired state of the instance (up, down or offline)
disk_template|` + kindText + `|Disk_template|Instance disk template
disk.sizes|` + kindOther + `|Disk_sizes|List of disk sizes (MiB)
disk_usage|` + kindSize + `|DiskUsage|Total disk space used by instance on each of its nodes
nic.ips|` + kindOther + `|NIC_IPs|List containing each network interface's IP address
nic.macs|` + kindOther + `|NIC_MACs|List containing each network interface's MAC address
nic.modes|` + kindOther + `|NIC_modes|List containing each network interface's mode
nic.links|` + kindOther + `|NIC_links|List containing each network interface's link
nic.networks|` + kindOther + `|NIC_networks|List containing each network interface's network (UUID)
nic.networks.names|` + kindOther + `|NIC_networks_names|List containing each network interface's network name
nic.uuids|` + kindOther + `|NIC_UUIDs|List containing each network interface's UUID
nic.names|` + kindOther + `|NIC_Names|List containing each network interface's name
nic.bridges|` + kindOther + `|NIC_bridges|List containing each network interface's bridge (its link in bridged mode)
nic.count|` + kindNumber + `|NICs|Number of network interfaces
disk.uuids|` + kindOther + `|Disk_UUIDs|List of disk UUIDs
disk.names|` + kindOther + `|Disk_names|List of disk names
disk.count|` + kindNumber + `|Disks|Number of disks
network_port|` + kindOther + `|Network_port|Instance network port if available (e.g. for VNC console)
status|` + kindText + `|Status|Instance status: running, ADMIN_down, ADMIN_offline, ERROR_up, ERROR_down, ERROR_wrongnode, ERROR_nodedown, ERROR_nodeoffline
oper_state|` + kindBool + `|Running|Actual state of instance
oper_ram|` + kindSize + `|Memory|Actual memory usage as seen by hypervisor (empty: not reported)
oper_vcpus|` + kindNumber + `|VCPUs|Actual number of VCPUs as seen by hypervisor (empty: not reported)
beparams|` + kindOther + `|BackendParameters|Backend parameters (merged)
beparams.memory|` + kindSize + `|ConfigMemory|The memory size
beparams.vcpus|` + kindNumber + `|ConfigVCPUs|The number of virtual CPUs
be/memory|` + kindSize + `|ConfigMemory|The memory size of the instance
be/vcpus|` + kindNumber + `|ConfigVCPUs|The number of virtual CPUs
be/maxmem|` + kindSize + `|ConfigMaxMem|The maximum memory size of the instance
be/minmem|` + kindSize + `|ConfigMinMem|The minimum memory size of the instance
be/auto_balance|` + kindBool + `|Auto_balance|Whether the instance counts in N+1 and may be balanced
be/always_failover|` + kindBool + `|Always_failover|Whether migrations of the instance are failovers
be/spindle_use|` + kindNumber + `|Spindle_use|Disk spindles the instance uses
forthcoming|` + kindBool + `|Forthcoming|Whether the instance is only a reservation of resources
tags|` + kindOther + `|Tags|Tags
serial_no|` + kindNumber + `|SerialNo|Instance object serial number, incremented on each modification
ctime|` + kindTime + `|CTime|Creation timestamp
mtime|` + kindTime + `|MTime|Modification timestamp
`)

// The fields of GET /2/groups?bulk=1 (rpc.GroupInfo).
var groupFields = fieldTable(`
name|` + kindText + `|Group|Group name
uuid|` + kindText + `|UUID|Group UUID
alloc_policy|` + kindText + `|AllocPolicy|Allocation policy for group
node_cnt|` + kindNumber + `|Nodes|Number of nodes
node_list|` + kindOther + `|NodeList|List of nodes
ndparams|` + kindOther + `|NDParams|Node parameters (effective: cluster, then group)
custom_ndparams|` + kindOther + `|CustomNDParams|Custom node parameters
diskparams|` + kindOther + `|DiskParameters|Disk parameters of every disk template (effective: cluster, then group)
custom_diskparams|` + kindOther + `|CustomDiskParameters|Custom disk parameters
ipolicy|` + kindOther + `|InstancePolicy|Instance policy limitations (gnt enforces none: empty)
custom_ipolicy|` + kindOther + `|CustomInstancePolicy|Custom instance policy limitations
tags|` + kindOther + `|Tags|Tags
serial_no|` + kindNumber + `|SerialNo|Group object serial number, incremented on each modification
ctime|` + kindTime + `|CTime|Creation timestamp
mtime|` + kindTime + `|MTime|Modification timestamp
`)

// The fields of GET /2/jobs?bulk=1 (rpc.JobBulkFields).
var jobFieldDefs = fieldTable(`
id|` + kindNumber + `|ID|Job ID
status|` + kindText + `|Status|Job status
priority|` + kindNumber + `|Prio|Current job priority
summary|` + kindOther + `|Summary|List of per-opcode summaries
ops|` + kindOther + `|OpCodes|List of all opcodes
opstatus|` + kindOther + `|OpCode_status|List of opcode status
received_ts|` + kindOther + `|Received|Timestamp of when job was received
start_ts|` + kindOther + `|Start|Timestamp of job start
end_ts|` + kindOther + `|End|Timestamp of job end
gnt_archived|` + kindBool + `|Archived|gnt: whether the job is archived
`)

// lookupDef finds a field's definition.
func lookupDef(defs []field, name string) (field, bool) {
	for _, f := range defs {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}
