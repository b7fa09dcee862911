package server

import (
	"context"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/rpc"
)

// Capacity implements rpc.Backend on this gntd's replica with the
// allocators of the request's list (jobs.CapacityWith): the built-in, or
// the external programs of this gntd's iallocators directory.
func (s *Server) Capacity(ctx context.Context, req rpc.CapacityRequest) (any, error) {
	spec := alloc.Request{Name: "capacity probe", Template: req.DiskTemplate, MemoryMiB: req.MemoryMiB,
		VCPUs: req.VCPUs, Disks: req.Disks, Group: req.Group}
	opts := func(st *fsm.State) alloc.Options { return jobs.AllocOptions(st, nodeDead) }
	return jobs.CapacityWith(ctx, s.fsm, s.iallocators(), opts, req.IAllocator, spec, "", "")
}

// nodeDead is what the instance opcodes and the allocator take as dead:
// the nodes gossip reports dead.
func nodeDead(n *fsm.Node) bool { return n.Liveness == fsm.LivenessDead }
