package fsm

import "sort"

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
	SerialNo        int64          `json:"serial_no"`
	CTime           float64        `json:"ctime"`
	MTime           float64        `json:"mtime"`
	// Liveness is the node's gntd as gossip sees it (LivenessAlive,
	// LivenessSuspect, LivenessDead; empty until observed), since
	// LivenessSince (Unix ns). NodeLiveness sets it; see liveness.go.
	Liveness      string `json:"liveness,omitempty"`
	LivenessSince int64  `json:"liveness_since,omitempty"`
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
	return append([]string(nil), s...)
}

func (c *Cluster) clone() *Cluster {
	x := *c
	x.NDParams = cloneMap(c.NDParams)
	x.Tags = cloneStrings(c.Tags)
	return &x
}

func (g *Group) clone() *Group {
	x := *g
	x.NDParams = cloneMap(g.NDParams)
	x.Tags = cloneStrings(g.Tags)
	return &x
}

func (n *Node) clone() *Node {
	x := *n
	x.NDParams = cloneMap(n.NDParams)
	x.Tags = cloneStrings(n.Tags)
	return &x
}

func (i *Instance) clone() *Instance {
	x := *i
	x.SecondaryNodes = cloneStrings(i.SecondaryNodes)
	x.Disks = append([]Disk(nil), i.Disks...)
	x.NICs = append([]NIC(nil), i.NICs...)
	x.Tags = cloneStrings(i.Tags)
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
