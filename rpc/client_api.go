package rpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Answer types, with Ganeti's RAPI field names. Numbers that may be null
// are pointers.

// IDURI is an element of a non-bulk listing of nodes or instances.
type IDURI struct {
	ID  string `json:"id"`
	URI string `json:"uri"`
}

// NameURI is an element of the non-bulk listing of groups.
type NameURI struct {
	Name string `json:"name"`
	URI  string `json:"uri"`
}

// JobIDURI is an element of the non-bulk listing of jobs.
type JobIDURI struct {
	ID  int64  `json:"id"`
	URI string `json:"uri"`
}

// ClusterInfo is the answer of GET /2/info.
type ClusterInfo struct {
	Name              string         `json:"name"`
	UUID              string         `json:"uuid"`
	Master            string         `json:"master"`
	SerialNo          int64          `json:"serial_no"`
	CTime             float64        `json:"ctime"`
	MTime             float64        `json:"mtime"`
	CandidatePoolSize int            `json:"candidate_pool_size"`
	MaxVoters         int            `json:"max_raft_voters"`
	DefaultIAllocator string         `json:"default_iallocator"`
	NDParams          map[string]any `json:"ndparams"`
	Tags              []string       `json:"tags"`
	SoftwareVersion   string         `json:"software_version"`
	// GntVersion is the answering gntd's build: version, commit and
	// build date (a gnt extension).
	GntVersion      string    `json:"gnt_version,omitempty"`
	ProtocolVersion int       `json:"protocol_version"`
	Architecture    [2]string `json:"architecture"`
	OSAPIVersion    int       `json:"os_api_version"`
	ExportVersion   int       `json:"export_version"`
	ConfigVersion   int       `json:"config_version"`
	// EnabledHypervisors are the hypervisor drivers the nodes' agents
	// reported to this gntd's runtime view; DefaultHypervisor is the
	// master's (null while none is known).
	EnabledHypervisors []string `json:"enabled_hypervisors"`
	DefaultHypervisor  *string  `json:"default_hypervisor"`
	// HVParams are the cluster's hypervisor parameters per enabled
	// hypervisor, filled with the built-in defaults.
	HVParams map[string]map[string]any `json:"hvparams"`
	// BEParams and NICParams are the defaults of new instances and NICs,
	// under Ganeti's "default" key; DiskParams the disk parameters per
	// template; OSParams the cluster's OS parameters per OS.
	BEParams   map[string]map[string]any `json:"beparams"`
	NICParams  map[string]map[string]any `json:"nicparams"`
	DiskParams map[string]map[string]any `json:"diskparams"`
	OSParams   map[string]map[string]any `json:"osparams"`
	// Leader is the node name of the Raft leader as the answering gntd
	// knows it (gnt).
	Leader string `json:"leader"`
	// RAPIAnonymousRead says whether requests without credentials may
	// read (gnt).
	RAPIAnonymousRead bool `json:"rapi_anonymous_read"`
	// UIDPool is the user-id pool, Ganeti's list of [lo, hi] pairs ([]
	// when off).
	UIDPool [][]int64 `json:"uid_pool"`
}

// NodeInfo is a node object (GET /2/nodes/{name}, ?bulk=1 listings).
// powered is null for a node without an OOB helper (Ganeti's RS_UNAVAIL).
type NodeInfo struct {
	Name            string         `json:"name"`
	UUID            string         `json:"uuid"`
	GroupUUID       string         `json:"group.uuid"`
	Group           string         `json:"group"` // gnt: the group's name
	PrimaryIP       string         `json:"pip"`
	SecondaryIP     string         `json:"sip"`
	MasterCandidate bool           `json:"master_candidate"`
	MasterCapable   bool           `json:"master_capable"`
	VMCapable       bool           `json:"vm_capable"`
	Offline         bool           `json:"offline"`
	Drained         bool           `json:"drained"`
	Powered         *bool          `json:"powered"`
	Role            string         `json:"role"` // M, C, R, D, O
	NDParams        map[string]any `json:"ndparams"`
	Tags            []string       `json:"tags"`
	MTotal          *int64         `json:"mtotal"`
	DTotal          *int64         `json:"dtotal"`
	CTotal          *int64         `json:"ctotal"`
	MFree           *int64         `json:"mfree"`
	DFree           *int64         `json:"dfree"`
	PinstCnt        int            `json:"pinst_cnt"`
	SinstCnt        int            `json:"sinst_cnt"`
	PinstList       []string       `json:"pinst_list"`
	SinstList       []string       `json:"sinst_list"`
	SerialNo        int64          `json:"serial_no"`
	CTime           float64        `json:"ctime"`
	MTime           float64        `json:"mtime"`
	Addrs           fsm.Addrs      `json:"addrs"`
	Version         string         `json:"version"`
	// Liveness is the node's gntd as gossip sees it: alive, suspect, dead
	// or unknown; LivenessSince is when it changed (float seconds, null
	// while unknown).
	Liveness      string   `json:"gnt_liveness"`
	LivenessSince *float64 `json:"gnt_liveness_since"`
	// Hypervisor is the driver of the node's agent and Accel the kvm
	// driver's accelerator and why, as the runtime view last saw them
	// (null: not known).
	Hypervisor *string `json:"gnt_hypervisor"`
	Accel      *string `json:"gnt_accel"`
	// Storage is the node's storage units as the leader last recorded
	// them from its agent, StorageReported when (float seconds); both
	// null before the first report.
	Storage         []NodeStorageUnit `json:"gnt_storage"`
	StorageReported *float64          `json:"gnt_storage_reported"`
	// Taps is whether the kvm driver can create tap devices (gntd's
	// CAP_NET_ADMIN), "yes: ..." or "no: ..." (null: another driver).
	Taps *string `json:"gnt_taps"`
	// BootID is the node's boot id as its last storage report gave it,
	// renewed at each boot (Ganeti's bootid; null: not reported).
	BootID *string `json:"bootid"`
	// Figures gnt does not know, always null: the memory the node's OS
	// uses, its CPU threads for the OS, NUMA nodes and sockets, spindles.
	MNode    *int64 `json:"mnode"`
	CNOs     *int64 `json:"cnos"`
	CNodes   *int64 `json:"cnodes"`
	CSockets *int64 `json:"csockets"`
	SpTotal  *int64 `json:"sptotal"`
	SpFree   *int64 `json:"spfree"`
}

// GroupInfo is a node group object.
type GroupInfo struct {
	Name           string         `json:"name"`
	UUID           string         `json:"uuid"`
	AllocPolicy    string         `json:"alloc_policy"`
	NodeCnt        int            `json:"node_cnt"`
	NodeList       []string       `json:"node_list"`
	NDParams       map[string]any `json:"ndparams"` // effective (cluster, then group)
	CustomNDParams map[string]any `json:"custom_ndparams"`
	// gnt enforces no instance policy and has no disk parameters: these
	// are empty.
	IPolicy          map[string]any `json:"ipolicy"`
	CustomIPolicy    map[string]any `json:"custom_ipolicy"`
	DiskParams       map[string]any `json:"diskparams"`
	CustomDiskParams map[string]any `json:"custom_diskparams"`
	Tags             []string       `json:"tags"`
	SerialNo         int64          `json:"serial_no"`
	CTime            float64        `json:"ctime"`
	MTime            float64        `json:"mtime"`
}

// BEParams are an instance's backend parameters.
type BEParams struct {
	Memory         int64 `json:"memory"`
	MaxMem         int64 `json:"maxmem"`
	MinMem         int64 `json:"minmem"`
	VCPUs          int   `json:"vcpus"`
	AutoBalance    bool  `json:"auto_balance"`
	AlwaysFailover bool  `json:"always_failover"`
	SpindleUse     int   `json:"spindle_use"`
}

// InstanceInfo is an instance object.
type InstanceInfo struct {
	Name         string    `json:"name"`
	UUID         string    `json:"uuid"`
	AdminState   string    `json:"admin_state"`
	OS           string    `json:"os"`
	PNode        string    `json:"pnode"`
	SNodes       []string  `json:"snodes"`
	DiskTemplate string    `json:"disk_template"`
	DiskSizes    []int64   `json:"disk.sizes"`
	DiskUsage    int64     `json:"disk_usage"`
	NICIPs       []*string `json:"nic.ips"`
	NICMACs      []string  `json:"nic.macs"`
	NICModes     []string  `json:"nic.modes"`
	NICLinks     []string  `json:"nic.links"`
	NICUUIDs     []string  `json:"nic.uuids"`
	NICNames     []*string `json:"nic.names"`
	NICNetworks  []*string `json:"nic.networks"`
	// NICNetworksNames are the names of the NICs' networks.
	NICNetworksNames []*string `json:"nic.networks.names"`
	NICBridges       []*string `json:"nic.bridges"`
	DiskUUIDs        []string  `json:"disk.uuids"`
	DiskNames        []*string `json:"disk.names"`
	BEParams         BEParams  `json:"beparams"`
	// Status is Ganeti's instance status (InstStatus*), OperState
	// whether it runs; null when gnt cannot know (docs/api.md).
	Status    *string `json:"status"`
	OperState *bool   `json:"oper_state"`
	OperRAM   *int64  `json:"oper_ram"`
	OperVCPUs *int    `json:"oper_vcpus"`
	// NetworkPort is the instance's port of the cluster's pool (the kvm
	// driver's VNC console listens on it); null when it holds none.
	NetworkPort *int     `json:"network_port"`
	Forthcoming bool     `json:"forthcoming"`
	Tags        []string `json:"tags"`
	SerialNo    int64    `json:"serial_no"`
	CTime       float64  `json:"ctime"`
	MTime       float64  `json:"mtime"`
}

// JobInfo is a job object. A bulk listing fills only JobBulkFields.
type JobInfo struct {
	ID         int64             `json:"id"`
	Status     string            `json:"status"`
	Priority   int               `json:"priority"`
	Ops        []json.RawMessage `json:"ops"`
	OpStatus   []string          `json:"opstatus"`
	OpResult   []json.RawMessage `json:"opresult"`
	OpLog      [][]fsm.LogEntry  `json:"oplog"`
	OpStart    []*fsm.Timestamp  `json:"opstart"`
	OpExec     []*fsm.Timestamp  `json:"opexec"`
	OpEnd      []*fsm.Timestamp  `json:"opend"`
	OpPriority []int             `json:"oppriority"`
	Summary    []string          `json:"summary"`
	ReceivedTS *fsm.Timestamp    `json:"received_ts"`
	StartTS    *fsm.Timestamp    `json:"start_ts"`
	EndTS      *fsm.Timestamp    `json:"end_ts"`
	// gnt's additions (GntJobFields).
	OpSteps         [][]fsm.StepRecord `json:"gnt_opsteps"`
	OpLocks         [][]fsm.LockDecl   `json:"gnt_oplocks"`
	OpDepends       [][]fsm.Dependency `json:"gnt_opdepends"`
	Archived        bool               `json:"gnt_archived"`
	CancelRequested bool               `json:"gnt_cancel_requested"`
	Attempts        []fsm.Attempt      `json:"gnt_attempts"`
	PoisonEpochs    []uint64           `json:"gnt_poison_epochs"`
}

// Request bodies.

// AddNodeRequest is the body of POST /2/nodes (OP_NODE_ADD fields).
type AddNodeRequest struct {
	NodeName        string         `json:"node_name,omitempty"`
	PrimaryIP       string         `json:"primary_ip,omitempty"`
	SecondaryIP     string         `json:"secondary_ip,omitempty"`
	Group           string         `json:"group,omitempty"`
	MasterCandidate *bool          `json:"master_candidate,omitempty"`
	MasterCapable   *bool          `json:"master_capable,omitempty"`
	VMCapable       *bool          `json:"vm_capable,omitempty"`
	NDParams        map[string]any `json:"ndparams,omitempty"`
}

// ModifyNodeRequest is the body of PUT /2/nodes/{name}/modify
// (OP_NODE_SET_PARAMS fields); nil fields are left unchanged.
type ModifyNodeRequest struct {
	MasterCandidate *bool          `json:"master_candidate,omitempty"`
	Offline         *bool          `json:"offline,omitempty"`
	Drained         *bool          `json:"drained,omitempty"`
	MasterCapable   *bool          `json:"master_capable,omitempty"`
	VMCapable       *bool          `json:"vm_capable,omitempty"`
	SecondaryIP     *string        `json:"secondary_ip,omitempty"`
	NDParams        map[string]any `json:"ndparams,omitempty"`
	Powered         *bool          `json:"powered,omitempty"`
	AutoPromote     *bool          `json:"auto_promote,omitempty"`
	Force           *bool          `json:"force,omitempty"`
}

// AddGroupRequest is the body of POST /2/groups (OP_GROUP_ADD fields);
// Name is accepted for GroupName, as Ganeti's rlib2 does.
type AddGroupRequest struct {
	GroupName   string         `json:"group_name,omitempty"`
	Name        string         `json:"name,omitempty"`
	AllocPolicy *string        `json:"alloc_policy,omitempty"`
	NDParams    map[string]any `json:"ndparams,omitempty"`
	// DiskParams override the cluster's per disk template.
	DiskParams map[string]map[string]any `json:"diskparams,omitempty"`
}

// ModifyGroupRequest is the body of PUT /2/groups/{name}/modify.
type ModifyGroupRequest struct {
	AllocPolicy *string        `json:"alloc_policy,omitempty"`
	NDParams    map[string]any `json:"ndparams,omitempty"`
	// DiskParams override the cluster's per disk template.
	DiskParams map[string]map[string]any `json:"diskparams,omitempty"`
}

// ModifyClusterRequest is the body of PUT /2/modify
// (OP_CLUSTER_SET_PARAMS fields).
type ModifyClusterRequest struct {
	CandidatePoolSize *int           `json:"candidate_pool_size,omitempty"`
	MaxVoters         *int           `json:"max_raft_voters,omitempty"`
	DefaultIAllocator *string        `json:"default_iallocator,omitempty"`
	NDParams          map[string]any `json:"ndparams,omitempty"`
	// maintd and repair (see fsm.OpClusterSetParams).
	MaintRoundDelay               *int64   `json:"maint_round_delay,omitempty"`
	MaintBalance                  *bool    `json:"maint_balance,omitempty"`
	MaintBalanceThresh            *float64 `json:"maint_balance_thresh,omitempty"`
	MaintBalanceMaxMoves          *int     `json:"maint_balance_max_moves,omitempty"`
	MaintdHarep                   *bool    `json:"maintd_harep,omitempty"`
	DiagnoseDataCollectorFilename *string  `json:"diagnose_data_collector_filename,omitempty"`
	DiagnoseInterval              *float64 `json:"maint_diagnose_interval,omitempty"`
	RepairDeadGrace               *float64 `json:"repair_dead_grace,omitempty"`
	RepairBreakerShare            *float64 `json:"repair_breaker_share,omitempty"`
	RepairBreakerNodes            *int     `json:"repair_breaker_nodes,omitempty"`
	RepairBreakerOverrideUntil    *int64   `json:"repair_breaker_override_until,omitempty"`
	RepairMaxEvacuations          *int     `json:"repair_max_evacuations,omitempty"`
	RepairRoundJobLimit           *int     `json:"repair_round_job_limit,omitempty"`
	RepairJobDelay                *float64 `json:"repair_job_delay,omitempty"`
	// RAPIAnonymousRead lets requests without credentials read.
	RAPIAnonymousRead *bool `json:"rapi_anonymous_read,omitempty"`
	// The parameter model (docs/parameters.md).
	EnabledHypervisors []string                  `json:"enabled_hypervisors,omitempty"`
	DefaultHypervisor  *string                   `json:"default_hypervisor,omitempty"`
	HVParams           map[string]map[string]any `json:"hvparams,omitempty"`
	BEParams           map[string]any            `json:"beparams,omitempty"`
	NICParams          map[string]any            `json:"nicparams,omitempty"`
	DiskParams         map[string]map[string]any `json:"diskparams,omitempty"`
	OSParams           map[string]map[string]any `json:"osparams,omitempty"`
	// The user-id pool, Ganeti's lists of [lo, hi] pairs: UIDPool
	// replaces it ([] empties it), AddUIDs and RemoveUIDs add and remove
	// ranges (fsm.OpClusterSetParams).
	UIDPool    *[][]int64 `json:"uid_pool,omitempty"`
	AddUIDs    *[][]int64 `json:"add_uids,omitempty"`
	RemoveUIDs *[][]int64 `json:"remove_uids,omitempty"`
}

// MasterFailoverRequest is the body of POST /2/gnt/master-failover.
type MasterFailoverRequest struct {
	Target string `json:"target,omitempty"`
}

// MasterFailoverResponse is its answer.
type MasterFailoverResponse struct {
	Master string `json:"master"`
}

// InitResponse is the answer of POST /2/gnt/init.
type InitResponse struct {
	ClusterName string `json:"cluster_name"`
	ClusterUUID string `json:"cluster_uuid"`
}

// Typed helpers. Reads return the decoded answer (use Do for the answer's
// Meta). Helpers that submit a job return its id and the Meta of the
// answer, whose Index is the index the job was submitted at: pass it to
// WaitJob. Request bodies (AddNode, ModifyNode, ...) are the request
// structs of this package, or maps with the same JSON fields.

func reasonQuery(reason string) url.Values {
	if reason == "" {
		return nil
	}
	return url.Values{"reason": {reason}}
}

func bulkQuery(bulk bool) url.Values {
	if !bulk {
		return nil
	}
	return url.Values{"bulk": {"1"}}
}

// Version returns the RAPI version (2).
func (c *Client) Version(ctx context.Context) (int, error) {
	var v int
	_, err := c.Do(ctx, http.MethodGet, "/version", nil, nil, &v)
	return v, err
}

// Info returns the cluster information.
func (c *Client) Info(ctx context.Context) (ClusterInfo, error) {
	var out ClusterInfo
	_, err := c.Do(ctx, http.MethodGet, "/2/info", nil, nil, &out)
	return out, err
}

// ModifyCluster submits OP_CLUSTER_SET_PARAMS; req is a
// ModifyClusterRequest or a map of its fields.
func (c *Client) ModifyCluster(ctx context.Context, req any, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodPut, "/2/modify", reasonQuery(reason), req)
}

// RAPIUsers lists the API's users with their access (write access
// needed).
func (c *Client) RAPIUsers(ctx context.Context) ([]RAPIUserInfo, error) {
	var out []RAPIUserInfo
	_, err := c.Do(ctx, http.MethodGet, "/2/gnt/rapi-users", nil, nil, &out)
	return out, err
}

// ImportRAPIUsers replaces every user with those of a users file
// (Ganeti's rapi_users format) and returns how many there are now. A file
// with a bad line is refused whole.
func (c *Client) ImportRAPIUsers(ctx context.Context, usersFile string) (int, error) {
	var out RAPIUsersResponse
	_, err := c.Do(ctx, http.MethodPut, "/2/gnt/rapi-users", nil, ImportRAPIUsersRequest{UsersFile: usersFile}, &out)
	return out.Users, err
}

// AddRAPIUser adds a user with read access, and write access when write
// is set. password is plain text, {cleartext}PASSWORD or {HA1}HEX.
func (c *Client) AddRAPIUser(ctx context.Context, name, password string, write bool) error {
	_, err := c.Do(ctx, http.MethodPost, "/2/gnt/rapi-users", nil, AddRAPIUserRequest{Name: name, Password: password, Write: write}, nil)
	return err
}

// SetRAPIUserPassword changes a user's password, keeping its access.
func (c *Client) SetRAPIUserPassword(ctx context.Context, name, password string) error {
	_, err := c.Do(ctx, http.MethodPut, "/2/gnt/rapi-users/"+url.PathEscape(name), nil, SetRAPIUserPasswordRequest{Password: password}, nil)
	return err
}

// RemoveRAPIUser removes a user.
func (c *Client) RemoveRAPIUser(ctx context.Context, name string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/2/gnt/rapi-users/"+url.PathEscape(name), nil, nil, nil)
	return err
}

// Nodes lists the nodes; without bulk only the names are filled.
func (c *Client) Nodes(ctx context.Context, bulk bool) ([]NodeInfo, error) {
	if bulk {
		var out []NodeInfo
		_, err := c.Do(ctx, http.MethodGet, "/2/nodes", bulkQuery(true), nil, &out)
		return out, err
	}
	var ids []IDURI
	_, err := c.Do(ctx, http.MethodGet, "/2/nodes", nil, nil, &ids)
	out := make([]NodeInfo, len(ids))
	for i, x := range ids {
		out[i].Name = x.ID
	}
	return out, err
}

// Node returns one node by name or UUID.
func (c *Client) Node(ctx context.Context, name string) (NodeInfo, error) {
	var out NodeInfo
	_, err := c.Do(ctx, http.MethodGet, "/2/nodes/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// AddNode submits OP_NODE_ADD; req is an AddNodeRequest or a map of its
// fields.
func (c *Client) AddNode(ctx context.Context, req any, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodPost, "/2/nodes", reasonQuery(reason), req)
}

// ModifyNode submits OP_NODE_SET_PARAMS; req is a ModifyNodeRequest or
// a map of its fields.
func (c *Client) ModifyNode(ctx context.Context, name string, req any, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodPut, "/2/nodes/"+url.PathEscape(name)+"/modify", reasonQuery(reason), req)
}

// NodeRole returns a node's role (master, master-candidate, regular,
// drained, offline).
func (c *Client) NodeRole(ctx context.Context, name string) (string, error) {
	var out string
	_, err := c.Do(ctx, http.MethodGet, "/2/nodes/"+url.PathEscape(name)+"/role", nil, nil, &out)
	return out, err
}

// SetNodeRole sets a node's role as Ganeti's RAPI does.
func (c *Client) SetNodeRole(ctx context.Context, name, role string, force, autoPromote bool, reason string) (int64, Meta, error) {
	q := url.Values{}
	if reason != "" {
		q.Set("reason", reason)
	}
	if force {
		q.Set("force", "1")
	}
	if autoPromote {
		q.Set("auto-promote", "1")
	}
	return c.Submit(ctx, http.MethodPut, "/2/nodes/"+url.PathEscape(name)+"/role", q, role)
}

// RemoveNode submits OP_NODE_REMOVE.
func (c *Client) RemoveNode(ctx context.Context, name, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodDelete, "/2/nodes/"+url.PathEscape(name), reasonQuery(reason), nil)
}

// Groups lists the node groups; without bulk only the names are filled.
func (c *Client) Groups(ctx context.Context, bulk bool) ([]GroupInfo, error) {
	if bulk {
		var out []GroupInfo
		_, err := c.Do(ctx, http.MethodGet, "/2/groups", bulkQuery(true), nil, &out)
		return out, err
	}
	var names []NameURI
	_, err := c.Do(ctx, http.MethodGet, "/2/groups", nil, nil, &names)
	out := make([]GroupInfo, len(names))
	for i, x := range names {
		out[i].Name = x.Name
	}
	return out, err
}

// Group returns one node group by name or UUID.
func (c *Client) Group(ctx context.Context, name string) (GroupInfo, error) {
	var out GroupInfo
	_, err := c.Do(ctx, http.MethodGet, "/2/groups/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// AddGroup submits OP_GROUP_ADD; req is an AddGroupRequest or a map of
// its fields.
func (c *Client) AddGroup(ctx context.Context, req any, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodPost, "/2/groups", reasonQuery(reason), req)
}

// ModifyGroup submits OP_GROUP_SET_PARAMS; req is a ModifyGroupRequest
// or a map of its fields.
func (c *Client) ModifyGroup(ctx context.Context, name string, req any, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodPut, "/2/groups/"+url.PathEscape(name)+"/modify", reasonQuery(reason), req)
}

// RemoveGroup submits OP_GROUP_REMOVE.
func (c *Client) RemoveGroup(ctx context.Context, name, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodDelete, "/2/groups/"+url.PathEscape(name), reasonQuery(reason), nil)
}

// Instances lists the instances; without bulk only the names are filled.
func (c *Client) Instances(ctx context.Context, bulk bool) ([]InstanceInfo, error) {
	if bulk {
		var out []InstanceInfo
		_, err := c.Do(ctx, http.MethodGet, "/2/instances", bulkQuery(true), nil, &out)
		return out, err
	}
	var ids []IDURI
	_, err := c.Do(ctx, http.MethodGet, "/2/instances", nil, nil, &ids)
	out := make([]InstanceInfo, len(ids))
	for i, x := range ids {
		out[i].Name = x.ID
	}
	return out, err
}

// Instance returns one instance by name or UUID.
func (c *Client) Instance(ctx context.Context, name string) (InstanceInfo, error) {
	var out InstanceInfo
	_, err := c.Do(ctx, http.MethodGet, "/2/instances/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// tagsPath is the tags resource of an object of a tag kind.
func tagsPath(kind, name string) (string, error) {
	switch kind {
	case fsm.TagCluster:
		return "/2/tags", nil
	case fsm.TagNode:
		return "/2/nodes/" + url.PathEscape(name) + "/tags", nil
	case fsm.TagNodeGroup:
		return "/2/groups/" + url.PathEscape(name) + "/tags", nil
	case fsm.TagInstance:
		return "/2/instances/" + url.PathEscape(name) + "/tags", nil
	}
	return "", fmt.Errorf("unknown tag kind %q (cluster, node, nodegroup, instance)", kind)
}

func (c *Client) tags(ctx context.Context, method, kind, name string, tags []string, reason string) (int64, Meta, error) {
	p, err := tagsPath(kind, name)
	if err != nil {
		return 0, Meta{}, err
	}
	q := url.Values{"tag": tags}
	if reason != "" {
		q.Set("reason", reason)
	}
	return c.Submit(ctx, method, p, q, nil)
}

// AddTags submits OP_TAGS_SET on an object (kind cluster, node,
// nodegroup or instance; name is ignored for the cluster).
func (c *Client) AddTags(ctx context.Context, kind, name string, tags []string, reason string) (int64, Meta, error) {
	return c.tags(ctx, http.MethodPut, kind, name, tags, reason)
}

// RemoveTags submits OP_TAGS_DEL on an object.
func (c *Client) RemoveTags(ctx context.Context, kind, name string, tags []string, reason string) (int64, Meta, error) {
	return c.tags(ctx, http.MethodDelete, kind, name, tags, reason)
}

// ListTags returns the sorted tags of an object.
func (c *Client) ListTags(ctx context.Context, kind, name string) ([]string, error) {
	p, err := tagsPath(kind, name)
	if err != nil {
		return nil, err
	}
	var out []string
	_, err = c.Do(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// Jobs lists the jobs; without bulk only the ids are filled, with bulk
// the JobBulkFields.
func (c *Client) Jobs(ctx context.Context, bulk bool) ([]JobInfo, error) {
	if bulk {
		var out []JobInfo
		_, err := c.Do(ctx, http.MethodGet, "/2/jobs", bulkQuery(true), nil, &out)
		return out, err
	}
	var ids []JobIDURI
	_, err := c.Do(ctx, http.MethodGet, "/2/jobs", nil, nil, &ids)
	out := make([]JobInfo, len(ids))
	for i, x := range ids {
		out[i].ID = x.ID
	}
	return out, err
}

// Job returns one job with all its fields.
func (c *Client) Job(ctx context.Context, id int64) (JobInfo, error) {
	var out JobInfo
	_, err := c.Do(ctx, http.MethodGet, "/2/jobs/"+strconv.FormatInt(id, 10), nil, nil, &out)
	return out, err
}

// CancelJob cancels a job (DELETE /2/jobs/{id}): at once when it has not
// started, at its next step boundary when it runs. It returns the
// server's message; for a job that has already finished (the server's
// [false, message]) the message and a wrong_state error saying it.
func (c *Client) CancelJob(ctx context.Context, id int64, reason string) (string, Meta, error) {
	var out []any
	m, err := c.Do(ctx, http.MethodDelete, "/2/jobs/"+strconv.FormatInt(id, 10), reasonQuery(reason), nil, &out)
	if err != nil {
		return "", m, err
	}
	if len(out) == 2 {
		if msg, ok := out[1].(string); ok {
			if done, _ := out[0].(bool); !done {
				// Ganeti's answer for a job that has finished.
				return msg, m, &APIError{Status: http.StatusConflict, ErrorCode: string(fsm.CodeState), Message: msg, Explain: msg}
			}
			return msg, m, nil
		}
	}
	return fmt.Sprint(out), m, nil
}

// ArchiveJob moves a finished job to the archive.
func (c *Client) ArchiveJob(ctx context.Context, id int64) (Meta, error) {
	var out ArchiveJobResponse
	return c.Do(ctx, http.MethodPost, "/2/gnt/jobs/"+strconv.FormatInt(id, 10)+"/archive", nil, nil, &out)
}

// SubmitJobs submits several jobs at once (POST /2/gnt/jobs), all or
// none; in depends, -1 names the previous job of the list. Like Submit it
// sends a fresh submission token and resends when the outcome is
// unknown, so the jobs are made once.
func (c *Client) SubmitJobs(ctx context.Context, jobs [][]map[string]any, reason string) ([]int64, Meta, error) {
	req := map[string]any{"jobs": jobs}
	var out SubmitJobsResponse
	m, err := c.do(ctx, http.MethodPost, "/2/gnt/jobs", reasonQuery(reason), tokenHeader(), req, &out)
	return out.JobIDs, m, err
}

// SubmitJob submits a job of arbitrary opcodes (maps with OP_ID) through
// POST /2/jobs.
func (c *Client) SubmitJob(ctx context.Context, ops []map[string]any, reason string) (int64, Meta, error) {
	return c.Submit(ctx, http.MethodPost, "/2/jobs", reasonQuery(reason), map[string]any{"ops": ops})
}

// SubmitJobHeld is SubmitJob whose answer waits until the job is
// finalized or hold passes (POST /2/jobs?wait=): Meta.JobStatus is the
// final status, or the status when hold ran out. One request instead of a
// submission and a WaitJob, for a client that wants only the outcome.
func (c *Client) SubmitJobHeld(ctx context.Context, ops []map[string]any, reason string, hold time.Duration) (int64, Meta, error) {
	q := reasonQuery(reason)
	if q == nil {
		q = url.Values{}
	}
	q.Set("wait", hold.String())
	return c.Submit(ctx, http.MethodPost, "/2/jobs", q, map[string]any{"ops": ops})
}

// WaitJob waits until the job is finalized (success, error or canceled)
// and returns it. index is the index the job was submitted at (Meta.Index
// of the submission, 0 if unknown). It polls GET /2/jobs/{id} as a
// blocking query on the job: each poll returns when the job changed after
// the index of the previous answer, so a job costs one request per change
// (and a candidate that has not applied the submission yet waits for it).
func (c *Client) WaitJob(ctx context.Context, id int64, index uint64) (JobInfo, error) {
	path := "/2/jobs/" + strconv.FormatInt(id, 10)
	for {
		q := url.Values{"index": {strconv.FormatUint(index, 10)}, "wait": {"10s"}}
		var job JobInfo
		m, err := c.Do(ctx, http.MethodGet, path, q, nil, &job)
		if err != nil {
			return JobInfo{}, err
		}
		if fsm.Finalized(job.Status) {
			return job, nil
		}
		if m.Index > index {
			index = m.Index
		}
		if err := ctx.Err(); err != nil {
			return JobInfo{}, err
		}
	}
}

// Peers lists the Raft configuration.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var out []Peer
	_, err := c.Do(ctx, http.MethodGet, "/2/raft/peers", nil, nil, &out)
	return out, err
}

// MasterFailover hands the leadership to target (any voter when empty)
// and returns the new master's node name.
func (c *Client) MasterFailover(ctx context.Context, target string) (string, error) {
	var out MasterFailoverResponse
	_, err := c.Do(ctx, http.MethodPost, "/2/gnt/master-failover", nil, MasterFailoverRequest{Target: target}, &out)
	return out.Master, err
}

// Init creates a new cluster on the gntd the client talks to (which must
// be on this host). The answer (an InitResponse) is available through Do.
func (c *Client) Init(ctx context.Context, req InitRequest) error {
	_, err := c.Do(ctx, http.MethodPost, "/2/gnt/init", nil, req, nil)
	return err
}

// Status returns the answering gntd's own status; with hash the digest of
// its state is included.
func (c *Client) Status(ctx context.Context, hash bool) (Status, error) {
	var q url.Values
	if hash {
		q = url.Values{"hash": {"1"}}
	}
	var out Status
	_, err := c.Do(ctx, http.MethodGet, "/2/gnt/status", q, nil, &out)
	return out, err
}

// Join sends a join request signed with the join key (DeriveKey of the
// cluster key with JoinKeyLabel).
func (c *Client) Join(ctx context.Context, key []byte, req JoinRequest) (JoinResponse, error) {
	var out JoinResponse
	err := c.postSigned(ctx, "/2/gnt/join", key, req, &out)
	return out, err
}

// postSigned POSTs req to path signed with key (X-Gnt-Timestamp,
// X-Gnt-Signature over the body) and decodes the answer into out.
func (c *Client) postSigned(ctx context.Context, path string, key []byte, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ts := time.Now().Unix()
	h := http.Header{}
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, Sign(key, ts, body))
	_, err = c.do(ctx, http.MethodPost, path, nil, h, body, out)
	return err
}

// FetchCA asks for the cluster CA certificates and checks the answer's
// signature with the join key: the way a gntd that holds the cluster key
// but no CA yet learns which CA to trust. The connection itself need not
// be verified (the client may skip verification).
func (c *Client) FetchCA(ctx context.Context, key []byte) (string, error) {
	var (
		out  CAResponse
		data []byte
		hdr  http.Header
	)
	_, err := c.do(ctx, http.MethodGet, "/2/gnt/ca", nil, nil, nil, rawBody{&data, &hdr})
	if err != nil {
		return "", err
	}
	if err := Verify(key, hdr.Get(HeaderTimestamp), hdr.Get(HeaderSignature), data, time.Now()); err != nil {
		return "", fmt.Errorf("the CA answer is not signed with this cluster's key: %w", err)
	}
	if err := json.Unmarshal(data, &out); err != nil || out.CACerts == "" {
		return "", errors.New("the CA answer holds no certificates")
	}
	return out.CACerts, nil
}

// Submit sends a request that creates one job (any RAPI mutation, or
// POST /2/jobs) and returns the job's id. The request carries a fresh
// submission token (X-Gnt-Submit-Token), so when its outcome is unknown
// (the connection broke after it was sent, or the leader lost leadership
// while committing it) it is resent, to the next server if need be, until
// ctx ends: the resent request answers with the job the first one made,
// if it made one, and a job is never created twice.
func (c *Client) Submit(ctx context.Context, method, path string, q url.Values, body any) (int64, Meta, error) {
	var id int64
	m, err := c.do(ctx, method, path, q, tokenHeader(), body, &id)
	return id, m, err
}

// tokenHeader is a request header with a fresh submission token.
func tokenHeader() http.Header {
	return http.Header{HeaderSubmitToken: {NewSubmitToken()}}
}

// NewSubmitToken returns a random submission token: "gnt-" and 32
// hexadecimal digits.
func NewSubmitToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return "gnt-" + hex.EncodeToString(b[:])
}
