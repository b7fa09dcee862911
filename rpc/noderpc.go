package rpc

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// The node RPC: how the leader's opcodes act on a node's agent (port
// 1811), and how a migration's source hands the instance to its target.
//
// One endpoint, POST /agent/v1, takes a NodeRequest as JSON. The request
// is signed like a join request (Sign and Verify: X-Gnt-Timestamp, and
// X-Gnt-Signature = hex HMAC-SHA256(key, timestamp + "\n" + body)), with
// the key DeriveKey(clusterKey, NodeKeyLabel). The timestamp must be
// within MaxClockSkew of the node's clock, and a signature seen before is
// refused (a bounded cache of recent MACs), so a captured request cannot
// be played again. The body names the node it is for and carries a
// random nonce: a request for one node is refused by every other, and two
// equal requests are two signatures. The operation is in the signed body,
// never in the path.
//
// The answer is a NodeResult (200) or a NodeError with its HTTP status.
//
// Two operations run operator commands rather than the hypervisor driver:
// diagnose runs the self-diagnose command named by the request's command
// (the cluster's diagnose_data_collector_filename, "" for the built-in;
// nodes that are not candidates hold no configuration, so the caller
// says which) and answers the signed report (NodeResult.Report; see
// diagnose.go). It is how an authenticated caller makes a node run its
// collector; the agent runs it at most once per its minimum interval. And
// repair-command runs the whitelisted repair command named by command
// with input on its stdin (OP_REPAIR_COMMAND), answering its output. It
// is not idempotent: the caller must not send it twice.

// NodeKeyLabel is the label the node RPC key is derived with from the
// cluster key.
const NodeKeyLabel = "gnt node rpc v1"

// NodePath is the node RPC's one endpoint.
const NodePath = "/agent/v1"

// Node RPC operations (the agent's operation names) and debug-fault, which
// gntd accepts only with --debug.
const (
	NodeOpStatus         = "status"
	NodeOpList           = "list"
	NodeOpStart          = "instance-start"
	NodeOpStop           = "instance-stop"
	NodeOpReboot         = "instance-reboot"
	NodeOpRemove         = "instance-remove"
	NodeOpDiskCreate     = "disk-create"
	NodeOpDiskRemove     = "disk-remove"
	NodeOpDiskAttach     = "disk-attach"
	NodeOpDiskDetach     = "disk-detach"
	NodeOpDiskReplace    = "disk-replace"
	NodeOpDiskGrow       = "disk-grow"
	NodeOpOSInstall      = "os-install"
	NodeOpMigratePrepare = "migrate-prepare"
	NodeOpMigrateSend    = "migrate-send"
	NodeOpMigrateReceive = "migrate-receive"
	NodeOpMigrateFinish  = "migrate-finish"
	NodeOpMigrateAbort   = "migrate-abort"
	// NodeOpBalloon sets a running instance's memory (memory, MiB).
	NodeOpBalloon       = "instance-balloon"
	NodeOpDebugFault    = "debug-fault"
	NodeOpDiagnose      = "diagnose"
	NodeOpRepairCommand = "repair-command"
	NodeOpOSList        = "os-list"
	// NodeOpStorageList reports the node's storage units (file, lvm-vg,
	// lvm-pv); NodeOpStorageRepair runs vgreduce --removemissing on the
	// volume group named by storage_name (Ganeti's repair-storage).
	// NodeOpStorageModify sets the allocatable flag (pvchange -x) of the
	// physical volume named by storage_name.
	NodeOpStorageList   = "storage-list"
	NodeOpStorageModify = "storage-modify"
	NodeOpStorageRepair = "storage-repair"
	// NodeOpBridgesExist answers which of the bridges named (bridges)
	// are missing on the node (NodeResult.MissingBridges), changing
	// nothing: Ganeti's bridges_exist.
	NodeOpBridgesExist = "bridges-exist"
)

// MaxNodeBridges bounds the bridges of one bridges-exist request.
const MaxNodeBridges = 256

// nodeOpFields says, per operation, which fields a request needs (and so
// may carry): i instance, d disk, o op_id, s force, t timeout (of a
// graceful shutdown), r reboot type,
// m migration, p peer, h handoff, f fault, c command, n input, v
// storage_name, a allocatable, b memory, u uid_pool (optional), g
// bridges.
var nodeOpFields = map[string]string{
	NodeOpStatus:         "i",
	NodeOpList:           "",
	NodeOpStart:          "iu",
	NodeOpStop:           "ist",
	NodeOpReboot:         "iorstu",
	NodeOpRemove:         "i",
	NodeOpDiskCreate:     "id",
	NodeOpDiskRemove:     "id",
	NodeOpDiskAttach:     "id",
	NodeOpDiskDetach:     "id",
	NodeOpDiskReplace:    "ido",
	NodeOpDiskGrow:       "id",
	NodeOpOSInstall:      "io",
	NodeOpMigratePrepare: "imu",
	NodeOpMigrateSend:    "imp",
	NodeOpMigrateReceive: "h",
	NodeOpMigrateFinish:  "im",
	NodeOpMigrateAbort:   "im",
	NodeOpBalloon:        "ib",
	NodeOpDebugFault:     "f",
	NodeOpDiagnose:       "c",
	NodeOpRepairCommand:  "cn",
	NodeOpOSList:         "",
	NodeOpStorageList:    "",
	NodeOpStorageModify:  "va",
	NodeOpStorageRepair:  "v",
	NodeOpBridgesExist:   "g",
}

// NodeOps lists the node RPC's operations.
func NodeOps() []string {
	out := make([]string, 0, len(nodeOpFields))
	for op := range nodeOpFields {
		out = append(out, op)
	}
	return out
}

// NodeRequest is the body of a node RPC request.
type NodeRequest struct {
	// Node is the name of the node the request is for; any other node
	// refuses it. NodeClient fills it in.
	Node string `json:"node"`
	// Nonce is random; NodeClient fills it in.
	Nonce string `json:"nonce"`
	Op    string `json:"op"`
	// Instance is the instance's configuration as the caller knows it
	// (for status only its UUID matters).
	Instance *fsm.Instance `json:"instance,omitempty"`
	// Disk is a disk's UUID (disk-*).
	Disk string `json:"disk,omitempty"`
	// OpID makes reboot, disk-replace and os-install happen once.
	OpID string `json:"op_id,omitempty"`
	// Timeout (seconds) bounds instance-stop's graceful shutdown; Force
	// skips it.
	Timeout float64 `json:"timeout,omitempty"`
	Force   bool    `json:"force,omitempty"`
	// RebootType is soft, hard (default) or full.
	RebootType string `json:"reboot_type,omitempty"`
	// Migration is the migration's id (migrate-*).
	Migration string `json:"migration,omitempty"`
	// PeerNode is the other node of a migration: the source for
	// migrate-prepare, the target for migrate-send; Peer is the target's
	// agent address (host:port) for migrate-send.
	PeerNode string `json:"peer_node,omitempty"`
	Peer     string `json:"peer,omitempty"`
	// Handoff is what a source sends its target (migrate-receive).
	Handoff *NodeHandoff `json:"handoff,omitempty"`
	// Fault arms or clears injected failures (debug-fault).
	Fault *NodeFault `json:"fault,omitempty"`
	// Command is the file name of the command to run: the self-diagnose
	// command (diagnose; "" for the built-in) or the repair command
	// (repair-command; required). The node checks it against its
	// whitelist directory.
	Command string `json:"command,omitempty"`
	// Input is what the repair command gets on stdin (repair-command).
	Input string `json:"input,omitempty"`
	// StorageName is the volume group storage-repair repairs, or the
	// physical volume storage-modify changes.
	StorageName string `json:"storage_name,omitempty"`
	// Allocatable is what storage-modify sets.
	Allocatable *bool `json:"allocatable,omitempty"`
	// MemoryMiB is the memory instance-balloon sets, in MiB.
	MemoryMiB int64 `json:"memory,omitempty"`
	// UIDPool is the cluster's user-id pool, Ganeti's [lo, hi] pairs,
	// sent with the operations that start a guest (instance-start,
	// instance-reboot, migrate-prepare) when it is not empty: a guest of
	// security_model=pool runs under an unused uid of it.
	UIDPool [][]int64 `json:"uid_pool,omitempty"`
	// Bridges are the interface names bridges-exist asks about (1 to
	// MaxNodeBridges, each a Linux interface name).
	Bridges []string `json:"bridges,omitempty"`
}

// NodeHandoff is a migration's handoff (the agent's Handoff).
type NodeHandoff struct {
	Migration   string       `json:"migration"`
	Source      string       `json:"source"`
	Instance    fsm.Instance `json:"instance"`
	BootID      string       `json:"boot_id"`
	OS          string       `json:"os,omitempty"`
	MemoryMiB   int64        `json:"memory"`
	Transferred time.Time    `json:"transferred"`
}

// NodeFault arms an injected failure in a fake driver (the agent's Fault),
// or with Clear removes them all first.
type NodeFault struct {
	Clear    bool   `json:"clear,omitempty"`
	Op       string `json:"op,omitempty"`
	Instance string `json:"instance,omitempty"`
	Delay    string `json:"delay,omitempty"` // a Go duration, "2s"
	Hang     bool   `json:"hang,omitempty"`
	Error    string `json:"error,omitempty"`
	After    bool   `json:"after,omitempty"`
	Times    int    `json:"times,omitempty"`
}

// NodeDisk is a disk's local storage on a node.
type NodeDisk struct {
	UUID       string `json:"uuid"`
	SizeMiB    int64  `json:"size"`
	Attached   bool   `json:"attached"`
	Generation string `json:"generation,omitempty"`
	// Path is the disk's file or device on the node, when its driver
	// has one.
	Path string `json:"path,omitempty"`
	// DRBD is a drbd disk's device on the node (nil for other templates).
	DRBD *fsm.DRBDDevice `json:"drbd,omitempty"`
}

// NodeMigration is a migration as one of its nodes records it.
type NodeMigration struct {
	ID       string    `json:"id"`
	Role     string    `json:"role"`
	Phase    string    `json:"phase"`
	PeerNode string    `json:"peer_node,omitempty"`
	Peer     string    `json:"peer,omitempty"`
	Changed  time.Time `json:"changed"`
}

// NodeLastOp is the last operation that reached a node for an instance.
type NodeLastOp struct {
	Op      string    `json:"op"`
	OpID    string    `json:"op_id,omitempty"`
	At      time.Time `json:"at"`
	Changed bool      `json:"changed"`
	Error   string    `json:"error,omitempty"`
}

// NodeInstanceStatus is an instance's record on a node (the agent's
// Status): State is stopped, running, incoming or received.
type NodeInstanceStatus struct {
	UUID      string         `json:"uuid"`
	Name      string         `json:"name"`
	State     string         `json:"state"`
	Disks     []NodeDisk     `json:"disks"`
	OS        string         `json:"os,omitempty"`
	BootID    string         `json:"boot_id,omitempty"`
	Migration *NodeMigration `json:"migration,omitempty"`
	LastOp    *NodeLastOp    `json:"last_op,omitempty"`
	// MemoryMiB and VCPUs are what the running instance has, as the
	// node's driver reports it (0: not running or not reported).
	MemoryMiB int64 `json:"memory,omitempty"`
	VCPUs     int   `json:"vcpus,omitempty"`
	// Console is the unix socket of the running instance's serial
	// console on the node (the kvm driver's), "" when none.
	Console string `json:"console,omitempty"`
}

// Instance states on a node.
const (
	NodeStateStopped  = "stopped"
	NodeStateRunning  = "running"
	NodeStateIncoming = "incoming"
	NodeStateReceived = "received"
)

// NodeResult is the answer to a node RPC request.
type NodeResult struct {
	// Driver is the answering agent's hypervisor driver.
	Driver string `json:"driver"`
	// Accel is the kvm driver's accelerator for its guests (kvm or tcg;
	// "" while it probes, or for another driver), AccelNote why.
	Accel     string `json:"accel,omitempty"`
	AccelNote string `json:"accel_note,omitempty"`
	// Taps is whether the kvm driver can create its guests' tap devices
	// (gntd has CAP_NET_ADMIN), with why: "yes: ..." or "no: ...", ""
	// for another driver.
	Taps string `json:"taps,omitempty"`
	// Changed is false when the state asked for was already there.
	Changed bool `json:"changed"`
	// Output is what the operation printed, for the job log.
	Output string `json:"output,omitempty"`
	// Status answers status; Instances answers list.
	Status    *NodeInstanceStatus  `json:"status,omitempty"`
	Instances []NodeInstanceStatus `json:"instances,omitempty"`
	// Faults are the faults armed after a debug-fault request.
	Faults []NodeFault `json:"faults,omitempty"`
	// Report answers diagnose: the node's signed self-diagnose report.
	Report *SignedDiagnoseReport `json:"report,omitempty"`
	// OS answers os-list: the OS definitions in the node's search path.
	OS *NodeOSReport `json:"os,omitempty"`
	// Storage answers storage-list: the node's storage units.
	Storage *NodeStorageReport `json:"storage,omitempty"`
	// MissingBridges answers bridges-exist: the bridges asked about
	// that the node lacks, each with why ("does not exist", or what the
	// interface of that name is instead).
	MissingBridges map[string]string `json:"missing_bridges,omitempty"`
}

// NodeStorageReport is a node's storage units (the agent's
// StorageReport), and the listings that failed.
type NodeStorageReport struct {
	Units  []NodeStorageUnit `json:"units"`
	Errors []string          `json:"errors,omitempty"`
	// FileDir, SharedFileDir and VG are where the node's driver keeps
	// disks of templates file, sharedfile and plain ("" when it keeps
	// none there: the fake and exec drivers).
	FileDir       string `json:"file_dir,omitempty"`
	SharedFileDir string `json:"shared_file_dir,omitempty"`
	VG            string `json:"vg,omitempty"`
	// NoDRBD, when set, says why the node takes no drbd disks (no DRBD
	// kernel module or tools, or a driver without drbd disks).
	NoDRBD string `json:"no_drbd,omitempty"`
	// BootID is the node's boot id ("" when it has none): a change of it
	// tells the leader that the node rebooted.
	BootID string `json:"boot_id,omitempty"`
}

// NodeStorageUnit is one storage unit; sizes in MiB.
type NodeStorageUnit struct {
	Type        string `json:"type"`
	Name        string `json:"name"`
	VG          string `json:"vg,omitempty"` // a physical volume's volume group
	Size        int64  `json:"size"`
	Used        int64  `json:"used"`
	Free        int64  `json:"free"`
	Allocatable bool   `json:"allocatable"`
}

// NodeOSReport is what a node finds in its OS search path (the agent's
// osdef.Report): every OS definition, valid or not with the reason, and
// the search-path directories it could not read.
type NodeOSReport struct {
	SearchPath []string `json:"search_path"`
	OSes       []NodeOS `json:"oses"`
	Errors     []string `json:"errors,omitempty"`
}

// NodeOS is one OS definition on a node.
type NodeOS struct {
	Name        string        `json:"name"`
	Path        string        `json:"path"`
	Valid       bool          `json:"valid"`
	Error       string        `json:"error,omitempty"`
	APIVersions []int         `json:"api_versions"`
	Variants    []string      `json:"variants"`
	Parameters  []NodeOSParam `json:"parameters"`
}

// NodeOSParam is one parameter an OS declares (parameters.list).
type NodeOSParam struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Node RPC error codes.
const (
	NodeCodeBadRequest   = "bad_request"    // malformed or incomplete request
	NodeCodeUnknownOp    = "unknown_op"     // no such operation
	NodeCodeUnauthorized = "unauthorized"   // bad or missing signature or timestamp
	NodeCodeReplayed     = "replayed"       // this signature was seen before
	NodeCodeWrongNode    = "wrong_node"     // the request is for another node
	NodeCodeNoKey        = "no_key"         // this gntd has no cluster key yet
	NodeCodeNotAllowed   = "not_allowed"    // debug-fault without --debug; a command the node does not whitelist
	NodeCodeTooLarge     = "body_too_large" // request body over the limit
	NodeCodeNotSupported = "not_supported"  // the driver cannot do this
	NodeCodeNotFound     = "not_found"      // no such instance or disk on the node
	NodeCodeState        = "wrong_state"    // the instance's state forbids it; nothing changed
	NodeCodeFailed       = "failed"         // attempted and failed; see Output
)

var nodeCodeStatus = map[string]int{
	NodeCodeBadRequest:   http.StatusBadRequest,
	NodeCodeUnknownOp:    http.StatusBadRequest,
	NodeCodeUnauthorized: http.StatusUnauthorized,
	NodeCodeReplayed:     http.StatusUnauthorized,
	NodeCodeWrongNode:    http.StatusMisdirectedRequest,
	NodeCodeNoKey:        http.StatusServiceUnavailable,
	NodeCodeNotAllowed:   http.StatusForbidden,
	NodeCodeTooLarge:     http.StatusRequestEntityTooLarge,
	NodeCodeNotSupported: http.StatusNotImplemented,
	NodeCodeNotFound:     http.StatusNotFound,
	NodeCodeState:        http.StatusConflict,
	NodeCodeFailed:       http.StatusInternalServerError,
}

// NodeError is a node RPC error: the JSON body of an error answer, and
// what NodeClient returns for one. errors.Is matches it against the
// ErrNode* values by code.
type NodeError struct {
	Status    int    `json:"code"`
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	// Output is what a failed operation printed.
	Output string `json:"output,omitempty"`
	// Node and Op are filled in by NodeClient.
	Node string `json:"-"`
	Op   string `json:"-"`
}

// NewNodeError returns an error with the HTTP status of its code.
func NewNodeError(code, format string, args ...any) *NodeError {
	status, ok := nodeCodeStatus[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	return &NodeError{Status: status, ErrorCode: code, Message: fmt.Sprintf(format, args...)}
}

func (e *NodeError) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	if e.Op != "" {
		msg = fmt.Sprintf("%s on %s: %s", e.Op, e.Node, msg)
	}
	if e.Output != "" {
		msg += "; output:\n" + e.Output
	}
	return msg
}

// Is matches a *NodeError with the same code.
func (e *NodeError) Is(target error) bool {
	var t *NodeError
	return errors.As(target, &t) && t.ErrorCode == e.ErrorCode
}

// Errors to match node RPC answers against with errors.Is.
var (
	ErrNodeNotSupported = &NodeError{ErrorCode: NodeCodeNotSupported, Message: "operation not supported by this driver"}
	ErrNodeNotFound     = &NodeError{ErrorCode: NodeCodeNotFound, Message: "instance or disk not found on this node"}
	ErrNodeState        = &NodeError{ErrorCode: NodeCodeState, Message: "the instance's state on this node forbids the operation"}
	ErrNodeFailed       = &NodeError{ErrorCode: NodeCodeFailed, Message: "the operation failed"}
	ErrNodeBadRequest   = &NodeError{ErrorCode: NodeCodeBadRequest, Message: "bad request"}
	ErrNodeUnauthorized = &NodeError{ErrorCode: NodeCodeUnauthorized, Message: "unauthorized"}
	// ErrNodeTransport matches a *NodeTransportError.
	ErrNodeTransport = errors.New("node RPC transport error")
)

// NodeTransportError is a request that got no answer (connection refused
// or reset, timeout): it may or may not have been carried out, and as
// every operation but repair-command is idempotent, sending it again is
// safe.
type NodeTransportError struct {
	Node, Addr, Op string
	Err            error
}

func (e *NodeTransportError) Error() string {
	return fmt.Sprintf("%s on %s (%s): no answer: %v", e.Op, e.Node, e.Addr, e.Err)
}

func (e *NodeTransportError) Unwrap() error { return e.Err }

// Is matches ErrNodeTransport.
func (e *NodeTransportError) Is(target error) bool { return target == ErrNodeTransport }

// maxNodeTimeout bounds instance-stop's timeout field.
const maxNodeTimeout = 24 * 3600

// maxIfName is Linux's limit on an interface name (IFNAMSIZ - 1).
const maxIfName = 15

// validIfName accepts what Linux takes as an interface name.
func validIfName(s string) bool {
	return s != "" && len(s) <= maxIfName && s != "." && s != ".." && !strings.ContainsAny(s, " \t\n/:")
}

// DecodeNodeRequest parses and checks a node RPC request body: one JSON
// object, no unknown fields, a known operation with every field it needs
// and none it does not take. The error is a *NodeError (bad_request or
// unknown_op).
func DecodeNodeRequest(body []byte) (NodeRequest, error) {
	var req NodeRequest
	if len(body) == 0 {
		return req, NewNodeError(NodeCodeBadRequest, "empty body; want a node request")
	}
	if err := fsm.DecodeStrict(body, &req); err != nil {
		var fe *fsm.Error
		if errors.As(err, &fe) {
			e := NewNodeError(NodeCodeBadRequest, "%s", fe.Msg)
			e.Field = fe.Field
			return req, e
		}
		return req, NewNodeError(NodeCodeBadRequest, "%v", err)
	}
	bad := func(field, format string, args ...any) (NodeRequest, error) {
		e := NewNodeError(NodeCodeBadRequest, format, args...)
		e.Field = field
		return req, e
	}
	if e := fsm.ValidateHostname("node", req.Node); e != nil {
		return bad("node", "%s", e.Msg)
	}
	if n := len(req.Nonce); n < 8 || n > 64 {
		return bad("nonce", "nonce must be 8 to 64 characters, got %d", n)
	}
	fields, ok := nodeOpFields[req.Op]
	if !ok {
		e := NewNodeError(NodeCodeUnknownOp, "unknown operation %q", req.Op)
		e.Field = "op"
		return req, e
	}
	has := func(f byte) bool {
		for i := 0; i < len(fields); i++ {
			if fields[i] == f {
				return true
			}
		}
		return false
	}
	given := []struct {
		flag  byte
		name  string
		isSet bool
	}{
		{'i', "instance", req.Instance != nil},
		{'d', "disk", req.Disk != ""},
		{'o', "op_id", req.OpID != ""},
		{'t', "timeout", req.Timeout != 0},
		{'s', "force", req.Force},
		{'r', "reboot_type", req.RebootType != ""},
		{'m', "migration", req.Migration != ""},
		{'m', "peer_node", req.PeerNode != ""},
		{'p', "peer", req.Peer != ""},
		{'h', "handoff", req.Handoff != nil},
		{'f', "fault", req.Fault != nil},
		{'c', "command", req.Command != ""},
		{'n', "input", req.Input != ""},
		{'v', "storage_name", req.StorageName != ""},
		{'a', "allocatable", req.Allocatable != nil},
		{'b', "memory", req.MemoryMiB != 0},
		{'u', "uid_pool", req.UIDPool != nil},
		{'g', "bridges", req.Bridges != nil},
	}
	for _, g := range given {
		if g.isSet && !has(g.flag) {
			return bad(g.name, "%s does not take %s", req.Op, g.name)
		}
	}
	if has('i') {
		if req.Instance == nil {
			return bad("instance", "%s needs the instance", req.Op)
		}
		if u := req.Instance.UUID; u == "" || len(u) > 128 {
			return bad("instance.uuid", "the instance needs a UUID of at most 128 characters")
		}
	}
	if has('d') && req.Disk == "" {
		return bad("disk", "%s needs a disk UUID", req.Op)
	}
	if has('o') && req.OpID == "" {
		return bad("op_id", "%s needs an op_id: it is done once per op_id", req.Op)
	}
	if has('t') && (req.Timeout < 0 || req.Timeout > maxNodeTimeout) {
		return bad("timeout", "timeout must be between 0 and %d seconds, got %v", maxNodeTimeout, req.Timeout)
	}
	switch req.RebootType {
	case "", "soft", "hard", "full":
	default:
		return bad("reboot_type", "reboot_type must be soft, hard or full, got %q", req.RebootType)
	}
	if has('m') && req.Migration == "" {
		return bad("migration", "%s needs the migration id", req.Op)
	}
	if has('p') {
		if _, _, err := net.SplitHostPort(req.Peer); err != nil {
			return bad("peer", "peer %q is not host:port", req.Peer)
		}
		if e := fsm.ValidateHostname("peer_node", req.PeerNode); e != nil {
			return bad("peer_node", "%s", e.Msg)
		}
	}
	if has('h') {
		h := req.Handoff
		if h == nil || h.Migration == "" || h.BootID == "" || h.Instance.UUID == "" {
			return bad("handoff", "%s needs a handoff with a migration id, a boot id and the instance", req.Op)
		}
	}
	if has('v') && (req.StorageName == "" || len(req.StorageName) > 128) {
		return bad("storage_name", "%s needs a storage_name of 1 to 128 characters", req.Op)
	}
	if has('b') && (req.MemoryMiB <= 0 || req.MemoryMiB > fsm.MaxMemoryMiB) {
		return bad("memory", "%s needs memory from 1 to %d MiB, got %d", req.Op, fsm.MaxMemoryMiB, req.MemoryMiB)
	}
	if req.UIDPool != nil {
		if _, e := fsm.UIDRangesFromJSON("uid_pool", req.UIDPool); e != nil {
			return bad(e.Field, "%s", e.Msg)
		}
	}
	if has('g') {
		if n := len(req.Bridges); n == 0 || n > MaxNodeBridges {
			return bad("bridges", "%s needs 1 to %d bridge names, got %d", req.Op, MaxNodeBridges, n)
		}
		for _, b := range req.Bridges {
			if !validIfName(b) {
				return bad("bridges", "bridge %q is not an interface name (1 to %d characters, no spaces, slashes or colons)", b, maxIfName)
			}
		}
	}
	if has('a') && req.Allocatable == nil {
		return bad("allocatable", "%s needs allocatable", req.Op)
	}
	if req.Op == NodeOpRepairCommand && req.Command == "" {
		return bad("command", "%s needs the command to run", req.Op)
	}
	if has('f') {
		f := req.Fault
		if f == nil {
			return bad("fault", "%s needs a fault", req.Op)
		}
		if f.Op != "" {
			if _, ok := nodeOpFields[f.Op]; !ok || f.Op == NodeOpDebugFault {
				return bad("fault.op", "unknown operation %q", f.Op)
			}
		}
		if f.Delay != "" {
			if d, err := time.ParseDuration(f.Delay); err != nil || d < 0 {
				return bad("fault.delay", "delay %q is not a duration such as \"2s\"", f.Delay)
			}
		}
		if f.Times < 0 {
			return bad("fault.times", "times must not be negative")
		}
	}
	return req, nil
}
