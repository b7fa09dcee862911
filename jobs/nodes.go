package jobs

import (
	"context"
	"fmt"
	"slices"
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
	// Storage (storage-list) are the node's storage units, StorageErrors
	// the listings that failed on it.
	Storage       []StorageUnit
	StorageErrors []string
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
// primary node's group's over the cluster's) and each NIC's mode, link and vlan
// (the cluster's nicparams where the NIC has none), its Hypervisor
// named: what the agents' drivers and OS scripts read. Every agent call
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
	})
	return &x
}

// nodeCallTimeout bounds one agent call.
const nodeCallTimeout = 10 * time.Minute

// call runs one agent operation on a node, logging what it printed.
func (e *Executor) call(ctx context.Context, sc *StepContext, node *fsm.Node, c NodeCall) (NodeReply, error) {
	if sc.dryRun {
		// No agent is called in a dry run: the step's checks before
		// this point ran; the call is described.
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
