package jobs

import (
	"context"
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
)

// multiAllocSteps is OP_INSTANCE_MULTI_ALLOC, the last job of a
// multi-allocation: one step that finds the creation jobs submitted with
// it (the ones just before its own id, from the same log entry) and
// answers Ganeti's result naming them ("allocatable") and the instances
// the allocator could not place ("failed"). It changes nothing.
func (e *Executor) multiAllocSteps(o *fsm.OpInstanceMultiAlloc) []Step {
	return []Step{{Name: "list the creation jobs", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		n := int64(len(o.InstanceNames))
		var err error
		jobsOut := make([][2]any, 0, n)
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			own := s.Jobs[sc.Job.ID]
			if own == nil {
				err = fmt.Errorf("job %d is not in the queue", sc.Job.ID)
				return
			}
			for k := int64(0); k < n; k++ {
				id := sc.Job.ID - n + k
				j := s.Jobs[id]
				want := o.InstanceNames[k]
				if j == nil || j.SubmitIndex != own.SubmitIndex || len(j.Ops) != 1 {
					err = fmt.Errorf("job %d is not the creation of instance %s submitted with this one: OP_INSTANCE_MULTI_ALLOC is made by POST /2/instances-multi-alloc", id, want)
					return
				}
				op, perr := j.Ops[0].Opcode()
				c, ok := op.(*fsm.OpInstanceCreate)
				if perr != nil || !ok || c.InstanceName != want {
					err = fmt.Errorf("job %d is not the creation of instance %s: OP_INSTANCE_MULTI_ALLOC is made by POST /2/instances-multi-alloc", id, want)
					return
				}
				jobsOut = append(jobsOut, [2]any{true, id})
			}
		})
		if err != nil {
			return nil, err
		}
		failed := o.Failed
		if failed == nil {
			failed = []string{}
		}
		allocatable := o.InstanceNames
		if allocatable == nil {
			allocatable = []string{}
		}
		return map[string]any{"jobs": jobsOut, "allocatable": allocatable, "failed": failed}, nil
	}}}
}
