package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
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

// PlaceMulti places the creations of a multi-allocation with the
// allocators of list (jobs.MultiAllocateWith): each placed instance's
// nodes by name from an external allocator's multi-allocate answer and
// the names of those it could not place, or nil when the built-in
// answers (each creation places itself). A creation that is not an
// OP_INSTANCE_CREATE is refused, naming it.
func (s *Server) PlaceMulti(ctx context.Context, list string, creates []json.RawMessage) (map[string][]string, []string, error) {
	ops := make([]*fsm.OpInstanceCreate, len(creates))
	for k, raw := range creates {
		op, err := fsm.ParseOpcode(raw)
		if err != nil {
			return nil, nil, err
		}
		c, ok := op.(*fsm.OpInstanceCreate)
		if !ok {
			return nil, nil, &fsm.Error{Code: fsm.CodeInval, Field: fmt.Sprintf("instances.%d", k), Msg: fmt.Sprintf("instance %d is not an instance creation", k)}
		}
		ops[k] = c
	}
	reqs := make([]alloc.Request, len(ops))
	os, hv := "", ""
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		for k, o := range ops {
			reqs[k] = jobs.CreateRequest(st, o)
		}
		if len(ops) > 0 {
			os, hv = ops[0].OSType, reqs[0].Hypervisor
		}
	})
	opts := func(st *fsm.State) alloc.Options { return jobs.AllocOptions(st, nodeDead) }
	placed, failed, err := jobs.MultiAllocateWith(ctx, s.fsm, s.iallocators(), opts, list, reqs, os, hv, nil)
	var le *iallocator.ListError
	if errors.As(err, &le) {
		// No allocator of the list placed them: a placement failure, as
		// a creation's is, with each allocator's reason.
		return nil, nil, &fsm.Error{Code: fsm.CodeNoRes, Field: "iallocator", Msg: "cannot place the multi-allocation: " + le.Error()}
	}
	return placed, failed, err
}
