package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/qlang"
)

// Ganeti's query2 (doc/design-query2.rst): /2/query/{resource} answers the
// requested fields of every item that passes a filter, each value with a
// status; /2/query/{resource}/fields describes the fields.

// Result statuses of a query value (Ganeti's RS_*).
const (
	QueryNormal  = 0 // value available
	QueryUnknown = 1 // no such field
	QueryNoData  = 2 // no data, e.g. the node has not reported it
	QueryUnavail = 3 // value unavailable for this item
	QueryOffline = 4 // the resource is marked offline
)

// MaxQueryFields bounds the fields of one query.
const MaxQueryFields = 256

// QueryFieldDef is a field definition (Ganeti's QueryFieldDefinition).
type QueryFieldDef struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Kind  string `json:"kind"`
	Doc   string `json:"doc"`
}

// QueryResult is the answer of /2/query/{resource}: a definition per
// requested field, and per item one [status, value] pair per field.
type QueryResult struct {
	Fields []QueryFieldDef `json:"fields"`
	Data   [][][2]any      `json:"data"`
}

// QueryFieldsResult is the answer of /2/query/{resource}/fields.
type QueryFieldsResult struct {
	Fields []QueryFieldDef `json:"fields"`
}

// QueryRequest is the body of PUT /2/query/{resource}. Fields, when
// absent, come from the ?fields= query parameter; QFilter is a list-form
// filter (Filter, its name before Ganeti 2.7, is accepted too; Ganeti's
// client sends both, the same).
type QueryRequest struct {
	Fields  []string `json:"fields,omitempty"`
	QFilter any      `json:"qfilter,omitempty"`
	Filter  any      `json:"filter,omitempty"`
}

// fieldDoc documents one field of a query resource.
type fieldDoc struct {
	name, title string
	kind        qlang.Kind
	doc         string
}

// queryResource is one resource of /2/query: its documented fields, its
// rows built from the state (the same objects its list endpoint serves,
// as JSON values), and the field of a row that says the item is offline.
type queryResource struct {
	docs   []fieldDoc
	sample func() map[string]any // every field, zero-valued: for the field list
	rows   func(st *fsm.State, rt *Runtime) iter.Seq[map[string]any]
	// live says the rows need the state's derived indexes, which a
	// frozen view lacks: they are made under the read lock.
	live    bool
	offline string   // boolean field making runtime fields QueryOffline ("" none)
	runtime []string // fields a node reports; null is QueryNoData (or QueryOffline)
	defs    []QueryFieldDef
	byName  map[string]QueryFieldDef
}

// asJSONMap turns an API object into its JSON form as a map.
func asJSONMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("rpc: query row: %v", err)) // API objects always encode
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("rpc: query row: %v", err))
	}
	return m
}

// instanceRow is an instance's query row: its object with the fields
// AddDerivedInstanceFields adds.
func instanceRow(v map[string]any) map[string]any {
	m := asJSONMap(v)
	AddDerivedInstanceFields(m)
	return asJSONMap(m)
}

// AddDerivedInstanceFields adds to an instance's object, as decoded from
// JSON, the fields Ganeti's queries derive from it: be/ for each of its
// beparams, disk.count and nic.count. The query API's rows have them, and
// gnt instance list computes them from the bulk listing.
func AddDerivedInstanceFields(m map[string]any) {
	if be, ok := m["beparams"].(map[string]any); ok {
		for k, x := range be {
			m["be/"+k] = x
		}
	}
	sizes, _ := m["disk.sizes"].([]any)
	macs, _ := m["nic.macs"].([]any)
	m["disk.count"] = len(sizes)
	m["nic.count"] = len(macs)
}

// objectDocs are the fields of every configuration object: tags, serial
// number and timestamps; what names the object.
func objectDocs(what string) []fieldDoc {
	return []fieldDoc{
		{"tags", "Tags", qlang.KindOther, "Tags"},
		{"serial_no", "SerialNo", qlang.KindNumber, what + " object serial number, incremented on each modification"},
		{"ctime", "CTime", qlang.KindTimestamp, "Creation timestamp"},
		{"mtime", "MTime", qlang.KindTimestamp, "Modification timestamp"},
	}
}

// concatDocs joins parts of a field table in order.
func concatDocs(parts ...[]fieldDoc) []fieldDoc {
	var out []fieldDoc
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// rowsOf yields, one at a time, the rows of a resource whose items list
// gives (in order) and whose object of an item row gives.
func rowsOf[T, V any](list func(*fsm.State) []T, row func(*fsm.State, T) V) func(*fsm.State, *Runtime) iter.Seq[map[string]any] {
	return func(st *fsm.State, _ *Runtime) iter.Seq[map[string]any] {
		return func(yield func(map[string]any) bool) {
			for _, x := range list(st) {
				if !yield(asJSONMap(row(st, x))) {
					return
				}
			}
		}
	}
}

var queryResources = prepareResources(map[string]*queryResource{
	"node": {
		docs: concatDocs([]fieldDoc{
			{"name", "Node", qlang.KindText, "Node name"},
			{"uuid", "UUID", qlang.KindText, "Node UUID"},
			{"group", "Group", qlang.KindText, "Node group"},
			{"group.uuid", "GroupUUID", qlang.KindText, "UUID of node group"},
			{"pip", "PrimaryIP", qlang.KindText, "Primary IP address"},
			{"sip", "SecondaryIP", qlang.KindText, "Secondary IP address"},
			{"role", "Role", qlang.KindText, "Node role: M master, C master candidate, R regular, D drained, O offline"},
			{"master_candidate", "MasterC", qlang.KindBool, "Whether node is a master candidate"},
			{"master_capable", "MasterCapable", qlang.KindBool, "Whether node can become a master candidate"},
			{"vm_capable", "VMCapable", qlang.KindBool, "Whether node can host instances"},
			{"offline", "Offline", qlang.KindBool, "Whether node is marked offline"},
			{"drained", "Drained", qlang.KindBool, "Whether node is drained"},
			{"powered", "Powered", qlang.KindBool, "Whether node is thought to be powered on (needs an out-of-band helper)"},
			{"bootid", "BootID", qlang.KindText, "Random UUID renewed for each system reboot, can be used for detecting reboots by tracking changes (as the node last reported it; null: not reported)"},
			{"mtotal", "MTotal", qlang.KindUnit, "Total amount of memory of physical machine"},
			{"mfree", "MFree", qlang.KindUnit, "Memory not used by the instances recorded on the node"},
			{"dtotal", "DTotal", qlang.KindUnit, "Total disk space in the node's storage (its volume group, else its file storage directory, once reported; before, the declared disk)"},
			{"dfree", "DFree", qlang.KindUnit, "Disk space free for new instance disks (reported free space less the disk recorded since the report; before a report, declared disk less recorded disk)"},
			{"ctotal", "CTotal", qlang.KindNumber, "Number of logical processors"},
			{"pinst_cnt", "Pinst", qlang.KindNumber, "Number of instances with this node as primary"},
			{"sinst_cnt", "Sinst", qlang.KindNumber, "Number of instances with this node as secondary"},
			{"pinst_list", "PriInstances", qlang.KindOther, "List of instances with this node as primary"},
			{"sinst_list", "SecInstances", qlang.KindOther, "List of instances with this node as secondary"},
			{"ndparams", "NodeParameters", qlang.KindOther, "Node parameters"},
		}, objectDocs("Node"), []fieldDoc{
			{"addrs", "Addresses", qlang.KindOther, "gnt: the node's service addresses"},
			{"version", "Version", qlang.KindText, "gnt: version of the node's gntd"},
			{"gnt_liveness", "Liveness", qlang.KindText, "gnt: the node's gntd as gossip sees it: alive, suspect, dead or unknown"},
			{"gnt_liveness_since", "LivenessSince", qlang.KindTimestamp, "gnt: when the liveness last changed"},
			{"gnt_hypervisor", "Hypervisor", qlang.KindText, "gnt: the hypervisor driver of the node's agent (null: not known)"},
			{"gnt_accel", "Accelerator", qlang.KindText, "gnt: the kvm driver's accelerator, kvm or tcg, and why (null: another driver, or not known)"},
			{"gnt_storage", "Storage", qlang.KindOther, "gnt: the node's storage units as last recorded from its agent (null: no report yet)"},
			{"gnt_storage_reported", "StorageReported", qlang.KindTimestamp, "gnt: when the storage units were last recorded"},
			{"gnt_taps", "Taps", qlang.KindText, "gnt: whether the kvm driver can create tap devices (CAP_NET_ADMIN), yes or no and why (null: another driver, or not known)"},
			{"mnode", "MNode", qlang.KindUnit, "Amount of memory used by node (null: not known to gnt)"},
			{"cnos", "CNOs", qlang.KindNumber, "Number of logical processors used by the node OS (null: not known to gnt)"},
			{"cnodes", "CNodes", qlang.KindNumber, "Number of NUMA domains of node (null: not known to gnt)"},
			{"csockets", "CSockets", qlang.KindNumber, "Number of physical CPU sockets (null: not known to gnt)"},
			{"sptotal", "SpTotal", qlang.KindNumber, "Total number of spindles (null: no spindle accounting)"},
			{"spfree", "SpFree", qlang.KindNumber, "Available spindles (null: no spindle accounting)"},
		}),
		sample: func() map[string]any { return asJSONMap(NodeInfo{}) },
		rows: func(st *fsm.State, rt *Runtime) iter.Seq[map[string]any] {
			return func(yield func(map[string]any) bool) {
				insts := InstancesByNode(st)
				for _, n := range st.SortedNodes() {
					if !yield(asJSONMap(NodeFields(st, n, insts, rt))) {
						return
					}
				}
			}
		},
		offline: "offline",
		// powered: null without an OOB helper is unavailable
		runtime: []string{"mtotal", "mfree", "dtotal", "dfree", "ctotal", "mnode", "cnos", "cnodes", "csockets", "sptotal", "spfree"},
	},
	"instance": {
		docs: concatDocs([]fieldDoc{
			{"name", "Instance", qlang.KindText, "Instance name"},
			{"uuid", "UUID", qlang.KindText, "Instance UUID"},
			{"admin_state", "InstanceState", qlang.KindText, "Desired state of instance: up, down or offline"},
			{"os", "OS", qlang.KindText, "Operating system"},
			{"pnode", "Primary_node", qlang.KindText, "Primary node"},
			{"snodes", "Secondary_Nodes", qlang.KindOther, "Secondary nodes; usually this will just be one node"},
			{"disk_template", "Disk_template", qlang.KindText, "Instance disk template"},
			{"disk.sizes", "Disk_sizes", qlang.KindOther, "List of disk sizes"},
			{"disk.count", "Disks", qlang.KindNumber, "Number of disks"},
			{"disk.uuids", "Disk_UUIDs", qlang.KindOther, "List of disk UUIDs"},
			{"disk.names", "Disk_names", qlang.KindOther, "List of disk names"},
			{"disk.spindles", "Disk_spindles", qlang.KindOther, "List of disk spindles (null: gnt has no spindle accounting)"},
			{"disk_usage", "DiskUsage", qlang.KindUnit, "Total disk space used by instance on each of its nodes"},
			{"nic.ips", "NIC_IPs", qlang.KindOther, "List containing each network interface's IP address"},
			{"nic.macs", "NIC_MACs", qlang.KindOther, "List containing each network interface's MAC address"},
			{"nic.modes", "NIC_modes", qlang.KindOther, "List containing each network interface's mode"},
			{"nic.links", "NIC_links", qlang.KindOther, "List containing each network interface's link"},
			{"nic.count", "NICs", qlang.KindNumber, "Number of network interfaces"},
			{"nic.uuids", "NIC_UUIDs", qlang.KindOther, "List containing each network interface's UUID"},
			{"nic.names", "NIC_Names", qlang.KindOther, "List containing each network interface's name"},
			{"nic.bridges", "NIC_bridges", qlang.KindOther, "List containing each network interface's bridge (its link in bridged mode)"},
			{"nic.networks", "NIC_networks", qlang.KindOther, "List containing each network interface's network"},
			{"nic.networks.names", "NIC_networks_names", qlang.KindOther, "List containing each network interface's network name"},
			{"network_port", "Network_port", qlang.KindOther, "Instance network port if available (e.g. for VNC console; null: none)"},
			{"hvparams", "HypervisorParameters", qlang.KindOther, "Hypervisor parameters (merged)"},
			{"hypervisor", "Hypervisor", qlang.KindText, "Hypervisor name"},
			{"osparams", "OpSysParameters", qlang.KindOther, "Operating system parameters (merged)"},
			{"nic.vlans", "NIC_VLANs", qlang.KindOther, "List containing each network interface's VLAN"},
			{"custom_hvparams", "CustomHypervisorParameters", qlang.KindOther, "Custom hypervisor parameters"},
			{"custom_beparams", "CustomBackendParameters", qlang.KindOther, "Custom backend parameters"},
			{"custom_osparams", "CustomOpSysParameters", qlang.KindOther, "Custom operating system parameters"},
			{"custom_nicparams", "CustomNicParameters", qlang.KindOther, "Custom network interface parameters"},
			{"oper_state", "Running", qlang.KindBool, "Actual state of instance"},
			{"oper_ram", "Memory", qlang.KindUnit, "Actual memory usage as seen by hypervisor (null: not reported)"},
			{"oper_vcpus", "VCPUs", qlang.KindNumber, "Actual number of VCPUs as seen by hypervisor (null: not reported)"},
			{"status", "Status", qlang.KindText, "Instance status: running, ADMIN_down, ADMIN_offline, ERROR_up, ERROR_down, ERROR_wrongnode, ERROR_nodedown, ERROR_nodeoffline"},
			{"beparams", "BackendParameters", qlang.KindOther, "Backend parameters"},
			{"be/memory", "ConfigMemory", qlang.KindUnit, "The memory size of the instance"},
			{"be/vcpus", "ConfigVCPUs", qlang.KindNumber, "The number of virtual CPUs"},
			{"be/maxmem", "ConfigMaxMem", qlang.KindUnit, "The maximum memory size of the instance (gnt: its memory)"},
			{"be/minmem", "ConfigMinMem", qlang.KindUnit, "The minimum memory size of the instance (gnt: its memory unless minmem is set)"},
			{"be/auto_balance", "Auto_balance", qlang.KindBool, "Whether the instance counts in N+1 and may be balanced"},
			{"be/always_failover", "Always_failover", qlang.KindBool, "Whether migrations of the instance are failovers"},
			{"be/spindle_use", "Spindle_use", qlang.KindNumber, "Disk spindles the instance uses"},
			{"forthcoming", "Forthcoming", qlang.KindBool, "Whether the instance is only reserved (forthcoming)"},
		}, objectDocs("Instance")),
		sample: func() map[string]any { return instanceRow(InstanceFields(&fsm.State{}, &fsm.Instance{}, nil)) },
		rows: func(st *fsm.State, rt *Runtime) iter.Seq[map[string]any] {
			return func(yield func(map[string]any) bool) {
				for _, i := range st.SortedInstances() {
					if !yield(instanceRow(InstanceFields(st, i, rt))) {
						return
					}
				}
			}
		},
		runtime: []string{"oper_state", "oper_ram", "oper_vcpus", "status"},
	},
	"group": {
		docs: concatDocs([]fieldDoc{
			{"name", "Group", qlang.KindText, "Group name"},
			{"uuid", "UUID", qlang.KindText, "Group UUID"},
			{"alloc_policy", "AllocPolicy", qlang.KindText, "Allocation policy for group"},
			{"node_cnt", "Nodes", qlang.KindNumber, "Number of nodes"},
			{"node_list", "NodeList", qlang.KindOther, "List of nodes"},
			{"ndparams", "NDParams", qlang.KindOther, "Node parameters"},
			{"custom_ndparams", "CustomNDParams", qlang.KindOther, "Custom node parameters"},
			{"ipolicy", "InstancePolicy", qlang.KindOther, "Instance policy limitations (merged; gnt enforces none)"},
			{"custom_ipolicy", "CustomInstancePolicy", qlang.KindOther, "Custom instance policy limitations"},
			{"diskparams", "DiskParameters", qlang.KindOther, "Disk parameters of every disk template (merged: cluster, then group)"},
			{"custom_diskparams", "CustomDiskParameters", qlang.KindOther, "Custom disk parameters"},
		}, objectDocs("Group")),
		sample: func() map[string]any { return asJSONMap(GroupInfo{}) },
		rows:   rowsOf((*fsm.State).SortedGroups, GroupFields),
	},
	"network": {
		docs: concatDocs([]fieldDoc{
			{"name", "Network", qlang.KindText, "Name"},
			{"uuid", "UUID", qlang.KindText, "Network UUID"},
			{"network", "Subnet", qlang.KindText, "IPv4 subnet"},
			{"gateway", "Gateway", qlang.KindOther, "IPv4 gateway"},
			{"network6", "IPv6Subnet", qlang.KindOther, "IPv6 subnet"},
			{"gateway6", "IPv6Gateway", qlang.KindOther, "IPv6 gateway"},
			{"mac_prefix", "MacPrefix", qlang.KindOther, "MAC address prefix"},
			{"free_count", "FreeCount", qlang.KindNumber, "Number of available addresses"},
			{"reserved_count", "ReservedCount", qlang.KindNumber, "Number of reserved addresses"},
			{"map", "Map", qlang.KindText, "Actual mapping"},
			{"external_reservations", "ExternalReservations", qlang.KindText, "External reservations"},
			{"group_list", "GroupList", qlang.KindOther, "List of nodegroups (group name, NIC mode, NIC link, NIC vlan)"},
			{"group_cnt", "NodeGroups", qlang.KindNumber, "Number of nodegroups"},
			{"inst_list", "InstanceList", qlang.KindOther, "List of instances"},
			{"inst_cnt", "Instances", qlang.KindNumber, "Number of instances"},
		}, objectDocs("Network")),
		sample: func() map[string]any { return asJSONMap(NetworkInfo{}) },
		live:   true, // NetworkFields reads the address index
		rows:   rowsOf((*fsm.State).SortedNetworks, NetworkFields),
	},
	// Job filter rules (/2/filters), a resource of Ganeti's
	// QR_VIA_RAPI, in the order they apply.
	"filter": {
		docs: []fieldDoc{
			{"uuid", "UUID", qlang.KindText, "Filter rule UUID"},
			{"watermark", "Watermark", qlang.KindNumber, "Highest job ID at the rule's last change; the jobid predicate's watermark"},
			{"priority", "Priority", qlang.KindNumber, "Filter rule priority; lower applies first"},
			{"predicates", "Predicates", qlang.KindOther, "List of predicates, each [name, query-language expression]"},
			{"action", "Action", qlang.KindOther, "Action of the rule: ACCEPT, PAUSE, REJECT, CONTINUE or [RATE_LIMIT, n]"},
			{"reason_trail", "ReasonTrail", qlang.KindOther, "Reason trail of the rule, as [[source, reason, timestamp], ...]"},
		},
		sample: func() map[string]any { return asJSONMap(FilterRule{Predicates: json.RawMessage("[]")}) },
		rows:   rowsOf((*fsm.State).SortedFilters, func(_ *fsm.State, f *fsm.JobFilter) FilterRule { return filterRule(f) }),
	},
	"job": {
		docs: []fieldDoc{
			{"id", "ID", qlang.KindNumber, "Job ID"},
			{"status", "Status", qlang.KindText, "Job status"},
			{"priority", "Prio", qlang.KindNumber, "Current job priority"},
			{"ops", "OpCodes", qlang.KindOther, "List of all opcodes"},
			{"opstatus", "OpCode_status", qlang.KindOther, "List of opcode status"},
			{"opresult", "OpCode_result", qlang.KindOther, "List of opcode results"},
			{"oplog", "OpCode_log", qlang.KindOther, "List of opcode output logs"},
			{"opstart", "OpCode_start", qlang.KindOther, "List of opcode start timestamps (before acquiring locks)"},
			{"opexec", "OpCode_exec", qlang.KindOther, "List of opcode execution start timestamps (after acquiring locks)"},
			{"opend", "OpCode_end", qlang.KindOther, "List of opcode end timestamps"},
			{"oppriority", "OpCode_prio", qlang.KindOther, "List of opcode priorities"},
			{"summary", "Summary", qlang.KindOther, "List of per-opcode summaries"},
			{"received_ts", "Received", qlang.KindOther, "Timestamp of when job was received, as [seconds, microseconds]"},
			{"start_ts", "Start", qlang.KindOther, "Timestamp of job start, as [seconds, microseconds]"},
			{"end_ts", "End", qlang.KindOther, "Timestamp of job end, as [seconds, microseconds]"},
			{"gnt_opsteps", "OpCode_steps", qlang.KindOther, "gnt: per opcode, the steps completed"},
			{"gnt_oplocks", "OpCode_locks", qlang.KindOther, "gnt: per opcode, the locks declared"},
			{"gnt_opdepends", "OpCode_depends", qlang.KindOther, "gnt: per opcode, the resolved dependencies"},
			{"gnt_archived", "Archived", qlang.KindBool, "gnt: whether the job is archived"},
			{"gnt_cancel_requested", "CancelRequested", qlang.KindBool, "gnt: whether a cancel is pending"},
			{"gnt_attempts", "Attempts", qlang.KindOther, "gnt: the executor attempts on the job"},
			{"gnt_poison_epochs", "PoisonEpochs", qlang.KindOther, "gnt: executor epochs whose leaders were lost while the job ran"},
		},
		sample: func() map[string]any {
			m := map[string]any{}
			for _, f := range allJobFields {
				m[f] = nil
			}
			m["id"], m["priority"] = 0, 0
			m["status"] = ""
			m["gnt_archived"], m["gnt_cancel_requested"] = false, false
			return m
		},
		rows: rowsOf((*fsm.State).SortedJobIDs, func(st *fsm.State, id int64) map[string]any {
			j, _ := lookupJob(st, id)
			return jobObject(j, allJobFields)
		}),
	},
})

// QueryResources lists the resources of /2/query.
func QueryResources() []string {
	out := make([]string, 0, len(queryResources))
	for k := range queryResources {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func prepareResources(m map[string]*queryResource) map[string]*queryResource {
	for _, qr := range m {
		qr.prepare()
	}
	return m
}

// prepare builds the field definitions: the documented fields the objects
// have, in the table's order, then any field of the objects the table
// does not document yet (kind from its zero value), so that no field an
// object serves is missing from the query.
func (qr *queryResource) prepare() {
	sample := qr.sample()
	qr.byName = map[string]QueryFieldDef{}
	for _, d := range qr.docs {
		if _, ok := sample[d.name]; !ok {
			continue
		}
		def := QueryFieldDef{Name: d.name, Title: d.title, Kind: string(d.kind), Doc: d.doc}
		qr.defs = append(qr.defs, def)
		qr.byName[d.name] = def
	}
	var rest []string
	for k := range sample {
		if _, ok := qr.byName[k]; !ok {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		kind := qlang.KindOther
		switch sample[k].(type) {
		case string:
			kind = qlang.KindText
		case bool:
			kind = qlang.KindBool
		case float64, int:
			kind = qlang.KindNumber
		}
		def := QueryFieldDef{Name: k, Title: k, Kind: string(kind), Doc: "Field " + k}
		qr.defs = append(qr.defs, def)
		qr.byName[k] = def
	}
}

// undocumentedFields lists the fields served without a documented
// definition (for a test).
func (qr *queryResource) undocumentedFields() []string {
	documented := map[string]bool{}
	for _, d := range qr.docs {
		documented[d.name] = true
	}
	var out []string
	for _, d := range qr.defs {
		if !documented[d.Name] {
			out = append(out, d.Name)
		}
	}
	return out
}

func (qr *queryResource) def(name string) QueryFieldDef {
	if d, ok := qr.byName[name]; ok {
		return d
	}
	return QueryFieldDef{Name: name, Title: name, Kind: string(qlang.KindUnknown), Doc: fmt.Sprintf("Unknown field '%s'", name)}
}

func (qr *queryResource) schema(name string) (qlang.Kind, bool) {
	d, ok := qr.byName[name]
	return qlang.Kind(d.Kind), ok
}

func lookupQueryResource(r *http.Request) (string, *queryResource, *APIError) {
	name := r.PathValue("resource")
	qr := queryResources[name]
	if qr == nil {
		msg := fmt.Sprintf("unknown query resource %q (known: %s)", name, strings.Join(QueryResources(), ", "))
		return name, nil, &APIError{Status: http.StatusNotFound, ErrorCode: CodeNotFound, Field: "resource", Message: msg, Explain: msg}
	}
	return name, qr, nil
}

// splitFields splits ?fields=a,b as Ganeti does (names trimmed).
func splitFields(s string) []string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

func checkFieldCount(fields []string, param string) *APIError {
	if len(fields) > MaxQueryFields {
		return badRequest(param, "%d fields requested, at most %d are allowed", len(fields), MaxQueryFields)
	}
	return nil
}

// compileFilter checks a list-form filter against the resource's fields.
func compileFilter(qr *queryResource, f any, param string) (*qlang.Filter, *APIError) {
	c, err := qlang.Compile(f, qr.schema)
	if err != nil {
		return nil, badRequest(param, "%s: %v", param, err)
	}
	return c, nil
}

// fieldDefs are the definitions of the requested fields.
func (qr *queryResource) fieldDefs(fields []string) []QueryFieldDef {
	defs := make([]QueryFieldDef, len(fields))
	for i, f := range fields {
		defs[i] = qr.def(f)
	}
	return defs
}

// queryData yields, for each of the rows that pass the filter, its
// [status, value] pair per requested field (a QueryResult's Data, one
// row at a time).
func (qr *queryResource) queryData(rows iter.Seq[map[string]any], fields []string, filter *qlang.Filter) iter.Seq[any] {
	runtime := map[string]bool{}
	for _, f := range qr.runtime {
		runtime[f] = true
	}
	return func(yield func(any) bool) {
		for row := range rows {
			if filter != nil {
				r := make(qlang.Row, len(row))
				for k, v := range row {
					if v != nil { // no value: every comparison is false
						r[k] = v
					}
				}
				if !filter.Match(r) {
					continue
				}
			}
			out := make([][2]any, len(fields))
			for i, f := range fields {
				v, known := row[f]
				_, documented := qr.byName[f]
				switch {
				case !documented || !known:
					out[i] = [2]any{QueryUnknown, nil}
				case v != nil:
					out[i] = [2]any{QueryNormal, v}
				case runtime[f] && qr.offline != "" && row[qr.offline] == true:
					out[i] = [2]any{QueryOffline, nil}
				case runtime[f]:
					out[i] = [2]any{QueryNoData, nil}
				default:
					out[i] = [2]any{QueryUnavail, nil}
				}
			}
			if !yield(out) {
				return
			}
		}
	}
}

// writeQuery writes the QueryResult of the rows one row at a time, as
// json.Marshal writes a whole QueryResult.
func (qr *queryResource) writeQuery(a *jsonStream, rows iter.Seq[map[string]any], fields []string, filter *qlang.Filter) error {
	a.raw(`{"fields":`)
	if err := a.value(qr.fieldDefs(fields)); err != nil {
		return err
	}
	a.raw(`,"data":`)
	if err := a.array(qr.queryData(rows, fields, filter)); err != nil {
		return err
	}
	a.raw("}")
	return nil
}

// serveQuery answers a query: from a frozen view of the state, or for a
// resource whose rows need the live state's indexes, from rows made
// under the read lock; either way encoded one row at a time.
func (s *Server) serveQuery(w http.ResponseWriter, qr *queryResource, fields []string, filter *qlang.Filter) error {
	rt := s.runtimeOf()
	if !qr.live {
		return s.serveFrozen(w, func(st *fsm.State, a *jsonStream) *APIError {
			if err := qr.writeQuery(a, qr.rows(st, rt), fields, filter); err != nil {
				return encodingError(err)
			}
			return nil
		})
	}
	var rows []map[string]any
	init := false
	s.b.FSM().Read(func(st *fsm.State, idx uint64) {
		setIndex(w, idx)
		if init = st.Initialized(); init {
			rows = slices.Collect(qr.rows(st, rt))
		}
	})
	if !init {
		writeError(w, notInitialised())
		return nil
	}
	streamAnswer(w, func(a *jsonStream) *APIError {
		if err := qr.writeQuery(a, slices.Values(rows), fields, filter); err != nil {
			return encodingError(err)
		}
		return nil
	})
	return nil
}

// handleQueryGet is GET /2/query/{resource}?fields=a,b[&filter=F]. The
// filter (a gnt extension; Ganeti's GET takes none) is a text filter of
// the query language, or a list-form filter in JSON when it starts with [.
func (s *Server) handleQueryGet(w http.ResponseWriter, r *http.Request) error {
	_, qr, aerr := lookupQueryResource(r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	q := r.URL.Query()
	if !q.Has("fields") {
		writeError(w, badRequest("fields", "missing 'fields' query argument (a comma-separated list of field names)"))
		return nil
	}
	fields := splitFields(q.Get("fields"))
	if aerr := checkFieldCount(fields, "fields"); aerr != nil {
		writeError(w, aerr)
		return nil
	}
	var filter *qlang.Filter
	if q.Has("filter") {
		text := q.Get("filter")
		var list any
		if strings.HasPrefix(strings.TrimSpace(text), "[") {
			if len(text) > int(s.maxBody) {
				writeError(w, badRequest("filter", "filter is longer than %d bytes", s.maxBody))
				return nil
			}
			if err := json.Unmarshal([]byte(text), &list); err != nil {
				writeError(w, badRequest("filter", "filter starting with [ must be a list-form filter in JSON: %v", err))
				return nil
			}
		} else {
			parsed, err := qlang.Parse(text)
			if err != nil {
				writeError(w, badRequest("filter", "%v", err))
				return nil
			}
			list = parsed
		}
		if filter, aerr = compileFilter(qr, list, "filter"); aerr != nil {
			writeError(w, aerr)
			return nil
		}
	}
	return s.serveQuery(w, qr, fields, filter)
}

// handleQueryPut is PUT /2/query/{resource} with a QueryRequest body. It
// only reads, so it needs read access, as in Ganeti.
func (s *Server) handleQueryPut(w http.ResponseWriter, r *http.Request) {
	_, qr, aerr := lookupQueryResource(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	body, aerr := s.readBody(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req QueryRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if len(bytes.TrimSpace(body)) == 0 {
		writeError(w, badRequest("", "the body must be a JSON object such as {\"fields\": [\"name\"], \"qfilter\": null}"))
		return
	}
	if err := dec.Decode(&req); err != nil {
		writeError(w, badRequest("", "the body must be a JSON object with fields and qfilter: %v", err))
		return
	}
	if dec.More() {
		writeError(w, badRequest("", "the body holds more than one JSON value"))
		return
	}
	fields := req.Fields
	if fields == nil {
		if !r.URL.Query().Has("fields") {
			writeError(w, badRequest("fields", "no fields requested: give \"fields\" in the body or the query"))
			return
		}
		fields = splitFields(r.URL.Query().Get("fields"))
	}
	if aerr := checkFieldCount(fields, "fields"); aerr != nil {
		writeError(w, aerr)
		return
	}
	raw, param := req.QFilter, "qfilter"
	if raw == nil {
		raw, param = req.Filter, "filter"
	} else if req.Filter != nil && !reflect.DeepEqual(req.QFilter, req.Filter) {
		// Ganeti's client sends the filter under both names.
		writeError(w, badRequest("filter", "qfilter and filter (its former name) differ; give one, or both the same"))
		return
	}
	filter, aerr := compileFilter(qr, raw, param)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// The body is read: a read through the leader forwards it again.
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.blockingReadBody(nil, body, func(w http.ResponseWriter, r *http.Request) error {
		return s.serveQuery(w, qr, fields, filter)
	})(w, r)
}

// handleQueryFields is GET /2/query/{resource}/fields[?fields=a,b].
func (s *Server) handleQueryFields(w http.ResponseWriter, r *http.Request) {
	_, qr, aerr := lookupQueryResource(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	res := QueryFieldsResult{Fields: qr.defs}
	if q := r.URL.Query(); q.Has("fields") {
		fields := splitFields(q.Get("fields"))
		if aerr := checkFieldCount(fields, "fields"); aerr != nil {
			writeError(w, aerr)
			return
		}
		res.Fields = make([]QueryFieldDef, len(fields))
		for i, f := range fields {
			res.Fields[i] = qr.def(f)
		}
	}
	writeJSON(w, res)
}

// UndocumentedQueryFields lists, per resource, the fields its objects
// serve that the query table does not document (served with a generic
// definition meanwhile).
func UndocumentedQueryFields() map[string][]string {
	out := map[string][]string{}
	for name, qr := range queryResources {
		out[name] = qr.undocumentedFields()
	}
	return out
}
