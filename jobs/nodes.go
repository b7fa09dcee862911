package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Node agent operations, the node RPC's names (rpc.NodeOp*): the server
// passes them through.
const (
	NodeOpStatus         = "status"
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
	NodeOpBalloon        = "instance-balloon"
	NodeOpOSInstall      = "os-install"
	NodeOpMigratePrepare = "migrate-prepare"
	NodeOpMigrateSend    = "migrate-send"
	NodeOpMigrateFinish  = "migrate-finish"
	NodeOpMigrateAbort   = "migrate-abort"
	NodeOpRepairCommand  = "repair-command"
	NodeOpStorageList    = "storage-list"
	NodeOpStorageModify  = "storage-modify"
	NodeOpStorageRepair  = "storage-repair"
	NodeOpBridgesExist   = "bridges-exist"
)

// NodeCall is one request to a node's agent. Every operation but
// repair-command is idempotent on the agent's side: asking for a state
// the instance is already in succeeds without effect, and reboot,
// os-install and the migration steps happen once per OpID or Migration.
// repair-command runs an operator's command each time it is asked.
type NodeCall struct {
	Op         string
	Instance   *fsm.Instance
	Disk       string
	OpID       string
	Timeout    time.Duration
	Force      bool
	RebootType string
	// Migration names a live migration on both nodes; PeerNode is the
	// other node's name, Peer the target's agent address (send).
	Migration string
	PeerNode  string
	Peer      string
	// Command and Input are the repair command's file name and its
	// stdin (repair-command).
	Command string
	Input   string
	// StorageName and Allocatable name a storage unit and its new
	// allocatable flag (storage-modify, storage-repair).
	StorageName string
	Allocatable *bool
	// MemoryMiB is the memory instance-balloon sets.
	MemoryMiB int64
	// UIDPool is the cluster's user-id pool; call fills it in for the
	// operations that start a guest.
	UIDPool []fsm.UIDRange
	// Bridges are the bridges bridges-exist asks about.
	Bridges []string
}

// NodeReply is an agent's answer.
type NodeReply struct {
	// Changed is false when the state asked for was already there.
	Changed bool
	// Output is what the operation printed (the exec driver's scripts).
	Output string
	// State (status) is stopped, running, incoming or received, or ""
	// when the node has no record of the instance.
	State string
	// Disks (status) are the UUIDs of the instance's disks present on
	// the node; DiskPaths their files or devices there, by UUID, where
	// the driver has them.
	Disks     []string
	DiskPaths map[string]string
	// DRBD (status) are the devices of its drbd disks on the node, by
	// disk UUID.
	DRBD map[string]fsm.DRBDDevice
	// Migration (status) is the last live migration of the instance the
	// node recorded, nil when none.
	Migration *NodeMigration
	// Storage (storage-list) are the node's storage units, StorageErrors
	// the listings that failed on it.
	Storage       []StorageUnit
	StorageErrors []string
	// MissingBridges (bridges-exist) are the bridges asked about that
	// the node lacks, each with why.
	MissingBridges map[string]string
}

// NodeMigration is a live migration as one of its nodes records it:
// its id, the node's role (source or target) and its phase there
// (prepared, sending, sent, received, finished, aborted; agent/driver.go).
type NodeMigration struct {
	ID, Role, Phase string
}

// StorageUnit is a storage unit a node reports; sizes in MiB.
type StorageUnit struct {
	Type, Name       string
	Size, Used, Free int64
	Allocatable      bool
}

// NodeCallError is an operation an agent refused or failed.
type NodeCallError struct {
	// Code is the node RPC's error code: not_found, wrong_state, failed,
	// not_supported, or transport when the node could not be reached.
	Code   string
	Msg    string
	Output string
}

func (e *NodeCallError) Error() string {
	if e.Output == "" {
		return e.Msg
	}
	return e.Msg + "; output: " + e.Output
}

// NodeCaller reaches node agents (the node RPC client; the server wires
// it in).
type NodeCaller interface {
	Call(ctx context.Context, node *fsm.Node, c NodeCall) (NodeReply, error)
}

// filled returns a copy of an instance with its effective parameters:
// HVParams (fsm.FillHVParams with the cluster's), BEParams, OSParams (the
// cluster's for its OS under its own), DiskParams (its template's, its
// primary node's group's over the cluster's), each NIC's mode, link and vlan
// (the cluster's nicparams where the NIC has none), each drbd disk's ends'
// node names and addresses (fillDRBDEnds), its Hypervisor named: what the agents' drivers and OS scripts read. Every agent call
// about an instance goes through call, so this is the one place.
func (e *Executor) filled(in *fsm.Instance) *fsm.Instance {
	x := *in
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		x.Hypervisor = fsm.InstanceHypervisor(s.Cluster, in)
		x.HVParams = fsm.FillHVParams(s.Cluster, in)
		x.BEParams = fsm.FilledBE(s.Cluster, in)
		x.OSParams = fsm.FilledOSParams(s.Cluster, in)
		var g *fsm.Group
		if n := s.Nodes[in.PrimaryNode]; n != nil {
			g = s.Groups[n.Group]
		}
		x.DiskParams = fsm.FilledDiskParams(s.Cluster, g)[in.DiskTemplate]
		x.NICs = make([]fsm.NIC, len(in.NICs))
		for k, n := range in.NICs {
			n.Mode, n.Link, n.VLAN = fsm.FilledNIC(s.Cluster, &n)
			x.NICs[k] = n
		}
		fillDRBDEnds(s, &x)
	})
	return &x
}

// checkBridges refuses an instance's bridged NICs whose bridge is
// missing on node (Ganeti's _CheckNicsBridgesExist), before anything is
// done there: the create job on the primary before it records the
// instance, modify for the NICs it adds or changes (only, when not nil:
// only(k) says whether NIC k is checked), migrate and failover on the
// target. A NIC's mode and link are the cluster's nicparams where it has
// none. An agent of an older gntd, which does not know the operation, is
// not asked again: the guest's start refuses a missing bridge there.
func (e *Executor) checkBridges(ctx context.Context, sc *StepContext, node *fsm.Node, in *fsm.Instance, only func(k int) bool) error {
	type bridged struct {
		k    int
		link string
	}
	var nics []bridged
	var names []string
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		for k := range in.NICs {
			if only != nil && !only(k) {
				continue
			}
			mode, link, _ := fsm.FilledNIC(s.Cluster, &in.NICs[k])
			if (mode == "" || mode == fsm.NICModeBridged) && link != "" {
				nics = append(nics, bridged{k, link})
				if !slices.Contains(names, link) {
					names = append(names, link)
				}
			}
		}
	})
	if len(names) == 0 {
		return nil
	}
	r, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpBridgesExist, Bridges: names})
	var ne *NodeCallError
	if errors.As(err, &ne) && ne.Code == "unknown_op" {
		sc.Logf("WARNING: node %s cannot check bridges (an older gntd): %s not checked before the start", node.Name, strings.Join(names, ", "))
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking the bridges of %s: %w", in.Name, err)
	}
	var msgs []string
	for _, n := range nics {
		if why, ok := r.MissingBridges[n.link]; ok {
			msgs = append(msgs, fmt.Sprintf("NIC %d of instance %s: bridge %q (its link) %s on node %s", n.k, in.Name, n.link, why, node.Name))
		}
	}
	if len(msgs) > 0 {
		return &fsm.Error{Code: fsm.CodeState, Field: "nics", Msg: strings.Join(msgs, "; ")}
	}
	return nil
}

// readOnlyNodeOps are the agent operations that change nothing on the
// node: a dry run makes them, so that it fails where the real run's
// checks would (bridges-exist).
var readOnlyNodeOps = map[string]bool{NodeOpBridgesExist: true}

// nodeCallTimeout bounds one agent call.
const nodeCallTimeout = 10 * time.Minute

// call runs one agent operation on a node, logging what it printed.
func (e *Executor) call(ctx context.Context, sc *StepContext, node *fsm.Node, c NodeCall) (NodeReply, error) {
	if sc.dryRun && !(readOnlyNodeOps[c.Op] && e.Nodes != nil) {
		// No agent is called in a dry run but to read (as Ganeti's
		// dry run runs CheckPrereq): the step's checks before this
		// point ran; the call is described.
		what := c.Op
		if c.Instance != nil {
			what += " " + c.Instance.Name
		}
		sc.wouldf("call %s on %s", what, node.Name)
		return NodeReply{}, nil
	}
	if e.Nodes == nil {
		return NodeReply{}, fmt.Errorf("this gntd has no node RPC client")
	}
	if node.Addrs.Agent == "" {
		return NodeReply{}, fmt.Errorf("node %s has not registered its agent address (is its gntd running?)", node.Name)
	}
	if c.Instance != nil {
		c.Instance = e.filled(c.Instance)
	}
	switch c.Op {
	case NodeOpStart, NodeOpReboot, NodeOpMigratePrepare:
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if s.Cluster != nil {
				c.UIDPool = slices.Clone(s.Cluster.UIDPool)
			}
		})
	}
	cctx, cancel := context.WithTimeout(ctx, nodeCallTimeout)
	defer cancel()
	r, err := e.Nodes.Call(cctx, node, c)
	if err == nil && r.Output != "" {
		sc.Logf("%s on %s: %s", c.Op, node.Name, r.Output)
	}
	if err != nil {
		return r, fmt.Errorf("%s on %s: %w", c.Op, node.Name, err)
	}
	return r, nil
}
