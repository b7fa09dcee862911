package server

import (
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/rpc"
)

// Capacity implements rpc.Backend with the built-in allocator on this
// gntd's replica.
func (s *Server) Capacity(req rpc.CapacityRequest) (any, error) {
	var (
		res alloc.CapacityResult
		err error
	)
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if !st.Initialized() {
			err = &fsm.Error{Code: fsm.CodeState, Msg: "cluster is not initialised"}
			return
		}
		res, err = alloc.Capacity(st, alloc.Request{Name: "capacity probe", Template: req.DiskTemplate, MemoryMiB: req.MemoryMiB,
			VCPUs: req.VCPUs, Disks: req.Disks, Group: req.Group}, jobs.AllocOptions(st, nodeDead))
	})
	return res, err
}

// nodeDead is what the instance opcodes and the allocator take as dead:
// the nodes gossip reports dead.
func nodeDead(n *fsm.Node) bool { return n.Liveness == fsm.LivenessDead }
