package fsm

import (
	"slices"
	"sort"
)

// Defaults of the cluster configuration (Ganeti's where Ganeti has one).
const (
	DefaultCandidatePoolSize = 10 // masterPoolSizeDefault
	DefaultMaxVoters         = 5  // Raft voters; further candidates are non-voters
	DefaultGroupName         = "default"
	MaxTagLen                = 128   // Ganeti's constants.MAX_TAG_LEN
	MaxTagsPerObj            = 4096  // Ganeti's constants.MAX_TAGS_PER_OBJ
	MaxPendingJobs           = 5000  // Ganeti's jobQueueSizeHardLimit, counted over unfinished jobs
	MaxFinishedJobs          = 10000 // finished jobs kept whole; older ones are archived
	MaxArchivedJobs          = 50000 // archived job summaries kept; older ones are dropped
)

// Node group allocation policies.
const (
	AllocPreferred   = "preferred"
	AllocLastResort  = "last_resort"
	AllocUnallocable = "unallocable"
)

// Cluster is the cluster-wide part of the configuration.
type Cluster struct {
	Name              string         `json:"name"`
	UUID              string         `json:"uuid"`
	SerialNo          int64          `json:"serial_no"`
	CTime             float64        `json:"ctime"`
	MTime             float64        `json:"mtime"`
	CandidatePoolSize int            `json:"candidate_pool_size"`
	MaxVoters         int            `json:"max_raft_voters"`
	DefaultIAllocator string         `json:"default_iallocator"`
	NDParams          map[string]any `json:"ndparams"`
	Tags              []string       `json:"tags"`
	// MasterNode is the UUID of the node whose gntd leads the Raft group, as
	// recorded by the leader when it established its leadership.
	MasterNode string `json:"master_node"`
	// DiagnoseCollectorFilename is the self-diagnose command every node
	// agent runs: a file name in the node's whitelisted directory; empty
	// means the built-in diagnose that always reports Ok.
	DiagnoseCollectorFilename string `json:"diagnose_data_collector_filename,omitempty"`
	// RAPIAnonymousRead lets requests without credentials read through
	// the API (Ganeti's default without --require-authentication; gnt's
	// default is false: every request needs a user or a certificate).
	RAPIAnonymousRead bool `json:"rapi_anonymous_read,omitempty"`
	// EnabledHypervisors are the hypervisors instances may use (Ganeti's
	// enabled_hypervisors); empty means any driver a node runs.
	// DefaultHypervisor is the one a new instance gets when it names none
	// (empty: the first enabled one, else the node's driver). See
	// params.go.
	EnabledHypervisors []string `json:"enabled_hypervisors"`
	DefaultHypervisor  string   `json:"default_hypervisor"`
	// HVParams are the cluster's hypervisor parameters per hypervisor,
	// BEParams its backend, NICParams its NIC defaults, DiskParams its
	// disk parameters per disk template and OSParams its OS parameters per
	// OS name: only what the operator set; the built-in defaults of
	// params.go fill the rest.
	HVParams   map[string]map[string]any `json:"hvparams"`
	BEParams   map[string]any            `json:"beparams"`
	NICParams  map[string]any            `json:"nicparams"`
	DiskParams map[string]map[string]any `json:"diskparams"`
	OSParams   map[string]map[string]any `json:"osparams"`
	// UIDPool is the user-id pool (uidpool.go): sorted ranges, empty
	// when the feature is off. Since LogVersion 23.
	UIDPool []UIDRange `json:"uid_pool,omitempty"`
}

// Group is a node group.
type Group struct {
	Name        string         `json:"name"`
	UUID        string         `json:"uuid"`
	AllocPolicy string         `json:"alloc_policy"`
	NDParams    map[string]any `json:"ndparams"`
	Tags        []string       `json:"tags"`
	SerialNo    int64          `json:"serial_no"`
	CTime       float64        `json:"ctime"`
	MTime       float64        `json:"mtime"`
	// DiskParams are the group's disk parameters per disk template,
	// overriding the cluster's.
	DiskParams map[string]map[string]any `json:"diskparams"`
}

// Addrs are the network endpoints of a node's gntd, as it registered them.
type Addrs struct {
	API    string `json:"api,omitempty"`
	Raft   string `json:"raft,omitempty"`
	Agent  string `json:"agent,omitempty"`
	Gossip string `json:"gossip,omitempty"`
	Confd  string `json:"confd,omitempty"`
}

// Resources are a node's totals as its gntd reported them.
type Resources struct {
	MemoryMiB int64 `json:"memory_mib"`
	DiskMiB   int64 `json:"disk_mib"`
	CPUs      int   `json:"cpus"`
}

// Node is one machine of the cluster.
type Node struct {
	Name            string         `json:"name"`
	UUID            string         `json:"uuid"`
	Group           string         `json:"group"` // group UUID
	PrimaryIP       string         `json:"primary_ip"`
	SecondaryIP     string         `json:"secondary_ip"`
	MasterCandidate bool           `json:"master_candidate"`
	MasterCapable   bool           `json:"master_capable"`
	VMCapable       bool           `json:"vm_capable"`
	Offline         bool           `json:"offline"`
	Drained         bool           `json:"drained"`
	Powered         bool           `json:"powered"`
	NDParams        map[string]any `json:"ndparams"`
	Tags            []string       `json:"tags"`
	Resources       Resources      `json:"resources"`
	Addrs           Addrs          `json:"addrs"`
	Version         string         `json:"version,omitempty"`
	// Hypervisor is the driver the node's gntd runs (gntd --hypervisor:
	// kvm, fake or exec), as it registers; empty when not known (a node
	// of an older build that has not registered since). Each node runs
	// one driver: an instance of another hypervisor is not placed there.
	Hypervisor string  `json:"hypervisor,omitempty"`
	SerialNo   int64   `json:"serial_no"`
	CTime      float64 `json:"ctime"`
	MTime      float64 `json:"mtime"`
	// Liveness is the node's gntd as gossip sees it (LivenessAlive,
	// LivenessSuspect, LivenessDead; empty until observed), since
	// LivenessSince (Unix ns). NodeLiveness sets it; see liveness.go.
	Liveness      string `json:"liveness,omitempty"`
	LivenessSince int64  `json:"liveness_since,omitempty"`
	// Storage is what the node's agent last reported of its storage
	// units (nil until the leader recorded a report); see storage.go.
	Storage *NodeStorage `json:"storage,omitempty"`
}

// Node roles as Ganeti derives them from the flags; the master is the Raft
// leader's node.
const (
	RoleMaster    = "master"
	RoleCandidate = "master-candidate"
	RoleRegular   = "regular"
	RoleDrained   = "drained"
	RoleOffline   = "offline"
)

// RoleLetter maps a role to Ganeti's one-letter query form.
var RoleLetter = map[string]string{
	RoleMaster: "M", RoleCandidate: "C", RoleRegular: "R", RoleDrained: "D", RoleOffline: "O",
}

// Disk is an instance disk at configuration level.
type Disk struct {
	UUID        string `json:"uuid"`
	Name        string `json:"name,omitempty"`
	SizeMiB     int64  `json:"size"`
	Mode        string `json:"mode"`
	Forthcoming bool   `json:"forthcoming,omitempty"`
	// DRBD is the logical id of a disk of template drbd (nil for other
	// templates, and for a drbd disk of a record written before
	// LogVersion 33 until its next change).
	DRBD *DRBDLogicalID `json:"drbd,omitempty"`
}

// DRBDLogicalID is a drbd disk's network identity, Ganeti's logical_id
// (pnode, snode, port, pminor, sminor, secret): the TCP port both ends
// listen on (from the cluster's port pool), the shared secret of the
// peers' authentication (cram-hmac-alg md5), and each node's minor
// (/dev/drbd<minor>). The cluster allocates port and minors when the
// record is stored; the step that writes the record draws the secret.
// A change of secondary keeps port and secret and gives the new node a
// minor of its own, as Ganeti's replace-disks does.
type DRBDLogicalID struct {
	Port   int       `json:"port"`
	Secret string    `json:"secret"`
	Ends   []DRBDEnd `json:"ends"`
}

// DRBDEnd is one node's end of a drbd disk.
type DRBDEnd struct {
	// Node is the node's UUID; Minor its DRBD minor for this disk.
	Node  string `json:"node"`
	Minor int    `json:"minor"`
	// Name and IP are the node's name and secondary IP. They are not
	// stored: the executor fills them in the copy of the instance the
	// node agents receive, which connect the two ends with them.
	Name string `json:"name,omitempty"`
	IP   string `json:"ip,omitempty"`
}

// NIC is an instance network interface.
type NIC struct {
	UUID    string `json:"uuid"`
	Name    string `json:"name,omitempty"`
	MAC     string `json:"mac"`
	IP      string `json:"ip,omitempty"`
	Mode    string `json:"mode,omitempty"`
	Link    string `json:"link,omitempty"`
	Network string `json:"network,omitempty"`
	// VLAN is the NIC's VLAN (Ganeti's nicparams vlan: ".100", ":100" or
	// ".100:200:300"), empty for none.
	VLAN string `json:"vlan,omitempty"`
}

// Instance is a virtual machine at configuration level.
type Instance struct {
	Name           string   `json:"name"`
	UUID           string   `json:"uuid"`
	Forthcoming    bool     `json:"forthcoming"`
	PrimaryNode    string   `json:"primary_node"`    // node UUID
	SecondaryNodes []string `json:"secondary_nodes"` // node UUIDs
	DiskTemplate   string   `json:"disk_template"`
	Disks          []Disk   `json:"disks"`
	NICs           []NIC    `json:"nics"`
	MemoryMiB      int64    `json:"memory"`
	VCPUs          int      `json:"vcpus"`
	OS             string   `json:"os"`
	AdminState     string   `json:"admin_state"` // up, down, offline
	Tags           []string `json:"tags"`
	SerialNo       int64    `json:"serial_no"`
	CTime          float64  `json:"ctime"`
	MTime          float64  `json:"mtime"`
	// Hypervisor is the instance's hypervisor (empty: the node's
	// driver). HVParams, BEParams and OSParams are the instance's own
	// parameters, overriding the cluster's (Ganeti's custom_hvparams...);
	// FillHVParams gives the effective hypervisor parameters. MemoryMiB
	// and VCPUs stay the effective memory and vcpus.
	Hypervisor string         `json:"hypervisor"`
	HVParams   map[string]any `json:"hvparams"`
	BEParams   map[string]any `json:"beparams"`
	OSParams   map[string]any `json:"osparams"`
	// DiskParams are the filled disk parameters of the instance's disk
	// template (its group's over the cluster's over the built-in
	// defaults), only in the copy the node agents receive (the leader's
	// jobs fill it); the state never keeps them (InstancePut drops them).
	DiskParams map[string]any `json:"diskparams,omitempty"`
	// NetworkPort is the instance's port of the cluster's port pool
	// (Ganeti's network_port; 0: none), allocated when the record is
	// stored and kept until the instance is removed (ports.go). The kvm
	// driver's VNC console listens on it.
	NetworkPort int `json:"network_port,omitempty"`
}

// RoleOf returns the node's role as Ganeti derives it from its flags, with
// confd's precedence (master, drained, offline, candidate, regular), given
// the UUID of the master node.
func RoleOf(n *Node, master string) string {
	switch {
	case n.UUID == master && master != "":
		return RoleMaster
	case n.Drained:
		return RoleDrained
	case n.Offline:
		return RoleOffline
	case n.MasterCandidate:
		return RoleCandidate
	default:
		return RoleRegular
	}
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func cloneStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return append([]string{}, s...)
}

func (c *Cluster) clone() *Cluster {
	x := *c
	x.NDParams = cloneMap(c.NDParams)
	x.Tags = cloneStrings(c.Tags)
	x.EnabledHypervisors = append([]string{}, c.EnabledHypervisors...)
	x.HVParams = cloneMap2(c.HVParams)
	x.BEParams = cloneMap(c.BEParams)
	x.NICParams = cloneMap(c.NICParams)
	x.DiskParams = cloneMap2(c.DiskParams)
	x.OSParams = cloneMap2(c.OSParams)
	x.UIDPool = slices.Clone(c.UIDPool)
	return &x
}

// cloneMap2 copies a map of parameter maps (never nil).
func cloneMap2(m map[string]map[string]any) map[string]map[string]any {
	c := make(map[string]map[string]any, len(m))
	for k, v := range m {
		c[k] = cloneMap(v)
	}
	return c
}

func (g *Group) clone() *Group {
	x := *g
	x.NDParams = cloneMap(g.NDParams)
	x.Tags = cloneStrings(g.Tags)
	x.DiskParams = cloneMap2(g.DiskParams)
	return &x
}

func (n *Node) clone() *Node {
	x := *n
	x.NDParams = cloneMap(n.NDParams)
	x.Tags = cloneStrings(n.Tags)
	if n.Storage != nil {
		st := *n.Storage
		st.Units = append([]StorageUnit(nil), n.Storage.Units...)
		x.Storage = &st
	}
	return &x
}

func (i *Instance) clone() *Instance {
	x := *i
	x.SecondaryNodes = cloneStrings(i.SecondaryNodes)
	x.Disks = append([]Disk(nil), i.Disks...)
	for k := range x.Disks {
		if d := x.Disks[k].DRBD; d != nil {
			c := *d
			c.Ends = append([]DRBDEnd(nil), d.Ends...)
			x.Disks[k].DRBD = &c
		}
	}
	x.NICs = append([]NIC(nil), i.NICs...)
	x.Tags = cloneStrings(i.Tags)
	x.HVParams = cloneMap(i.HVParams)
	x.BEParams = cloneMap(i.BEParams)
	x.OSParams = cloneMap(i.OSParams)
	if i.DiskParams != nil {
		x.DiskParams = cloneMap(i.DiskParams)
	}
	return &x
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
