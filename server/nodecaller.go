package server

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/rpc"
)

// nodeCaller implements jobs.NodeCaller with the node RPC: the leader's
// instance opcodes reach the agents through it. Clients are kept per node
// and address so connections are reused.
type nodeCaller struct {
	s       *Server
	mu      sync.Mutex
	clients map[string]*rpc.NodeClient
	key     []byte // the cluster key the clients sign with
}

func (n *nodeCaller) client(node *fsm.Node) (*rpc.NodeClient, error) {
	n.s.mu.Lock()
	key := n.s.key
	n.s.mu.Unlock()
	if len(key) == 0 {
		return nil, errors.New("this gntd has no cluster key")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !bytes.Equal(key, n.key) {
		n.clients, n.key = nil, key // the cluster key was renewed
	}
	id := node.Name + "@" + node.Addrs.Agent
	c := n.clients[id]
	if c == nil {
		if n.clients == nil {
			n.clients = map[string]*rpc.NodeClient{}
		}
		c = rpc.NewNodeClientTLS(node.Name, node.Addrs.Agent, rpc.NodeKey(key), n.s.nodeTransport())
		n.clients[id] = c
	}
	return c, nil
}

// Call implements jobs.NodeCaller.
func (n *nodeCaller) Call(ctx context.Context, node *fsm.Node, c jobs.NodeCall) (jobs.NodeReply, error) {
	cl, err := n.client(node)
	if err != nil {
		return jobs.NodeReply{}, err
	}
	res, err := cl.Do(ctx, rpc.NodeRequest{Op: c.Op, Instance: c.Instance, Disk: c.Disk, OpID: c.OpID,
		Timeout: c.Timeout.Seconds(), Force: c.Force, RebootType: c.RebootType,
		Migration: c.Migration, PeerNode: c.PeerNode, Peer: c.Peer, Command: c.Command, Input: c.Input,
		StorageName: c.StorageName, Allocatable: c.Allocatable, MemoryMiB: c.MemoryMiB,
		UIDPool: uidPoolJSON(c.UIDPool), Bridges: c.Bridges})
	if err != nil {
		var ne *rpc.NodeError
		if errors.As(err, &ne) {
			return jobs.NodeReply{}, &jobs.NodeCallError{Code: ne.ErrorCode, Msg: ne.Message, Output: ne.Output}
		}
		return jobs.NodeReply{}, &jobs.NodeCallError{Code: "transport", Msg: err.Error()}
	}
	out := jobs.NodeReply{Changed: res.Changed, Output: res.Output, MissingBridges: res.MissingBridges}
	if res.Storage != nil {
		out.StorageErrors = res.Storage.Errors
		for _, u := range res.Storage.Units {
			out.Storage = append(out.Storage, jobs.StorageUnit{Type: u.Type, Name: u.Name, Size: u.Size, Used: u.Used, Free: u.Free, Allocatable: u.Allocatable})
		}
	}
	if res.Status != nil {
		out.State = res.Status.State
		if m := res.Status.Migration; m != nil {
			out.Migration = &jobs.NodeMigration{ID: m.ID, Role: m.Role, Phase: m.Phase}
		}
		for _, d := range res.Status.Disks {
			out.Disks = append(out.Disks, d.UUID)
			if d.Path != "" {
				if out.DiskPaths == nil {
					out.DiskPaths = map[string]string{}
				}
				out.DiskPaths[d.UUID] = d.Path
			}
			if d.DRBD != nil {
				if out.DRBD == nil {
					out.DRBD = map[string]fsm.DRBDDevice{}
				}
				out.DRBD[d.UUID] = *d.DRBD
			}
		}
	}
	return out, nil
}

// uidPoolJSON is the pool in the node RPC's form, nil when empty (the
// field is then left out).
func uidPoolJSON(p []fsm.UIDRange) [][]int64 {
	if len(p) == 0 {
		return nil
	}
	return fsm.UIDRangesJSON(p)
}
