package server

import (
	"os"

	"github.com/gnt-cluster/gnt/jobs/iallocator"
)

// DefaultIAllocatorsDir is the default directory of the external
// allocators (gntd --iallocators-dir).
const DefaultIAllocatorsDir = iallocator.DefaultDir

// iallocators is this gntd's runner of external allocators: the programs
// of its iallocators directory, whitelisted as the OOB helpers are.
func (s *Server) iallocators() *iallocator.Runner {
	return &iallocator.Runner{Dir: s.cfg.IAllocatorsDir, Owner: os.Geteuid(), Timeout: s.cfg.IAllocatorTimeout.Duration}
}

// CheckIAllocator checks an allocator name against what this gntd can
// run: the built-in hail, or a whitelisted program of its iallocators
// directory. The API refuses an iallocator list naming another.
func (s *Server) CheckIAllocator(name string) error { return s.iallocators().Check(name) }
