package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
)

// repairSteps are OP_REPAIR_COMMAND's: one step that has the node's agent
// run the whitelisted repair command with the input on its stdin. A
// repair command is not idempotent and nothing can tell whether it ran,
// so the step is NoRepeat without a Check: a job resumed after a leader
// failover while the command may have been running fails naming the
// step, and an operator (or maintd, seeing the job fail) decides. The
// command's output goes to the job log and is the opcode's result.
func (e *Executor) repairSteps(o *fsm.OpRepairCommand) []Step {
	return []Step{{
		Name:     fmt.Sprintf("run repair command %s on %s", o.Command, o.NodeName),
		NoRepeat: true,
		Run: func(ctx context.Context, sc *StepContext) (any, error) {
			var node *fsm.Node
			e.FSM.Read(func(s *fsm.State, _ uint64) {
				if n := s.LookupNode(o.NodeName); n != nil {
					c := *n
					node = &c
				}
			})
			if node == nil {
				return nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "node_name", Msg: fmt.Sprintf("node %s does not exist", o.NodeName)}
			}
			if err := e.usable(node, "running a repair command"); err != nil {
				return nil, err
			}
			r, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpRepairCommand, Command: o.Command, Input: o.Input})
			if err != nil {
				var ce *NodeCallError
				if errors.As(err, &ce) && ce.Output != "" {
					sc.Logf("repair command %s on %s printed: %s", o.Command, node.Name, ce.Output)
				}
				return nil, err
			}
			return r.Output, nil
		},
	}}
}
