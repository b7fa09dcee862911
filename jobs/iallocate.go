package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
)

// allocators is the list of allocators an opcode's iallocator asks for:
// its own list, or the cluster's default_iallocator, or the built-in.
func (e *Executor) allocators(opcode string) ([]string, error) {
	var def string
	e.FSM.Read(func(s *fsm.State, _ uint64) { def = s.Cluster.DefaultIAllocator })
	names, err := iallocator.Resolve(opcode, def)
	if err != nil {
		return nil, &fsm.Error{Code: fsm.CodeInval, Field: "iallocator", Msg: err.Error()}
	}
	return names, nil
}

// runExternal runs the external allocator name on the input message of
// the current state with the request request builds, and returns the
// validated answer. The program runs outside the state's read lock, on
// this leader, in the step that calls it.
func (e *Executor) runExternal(ctx context.Context, name string, request func(s *fsm.State) map[string]any) (*iallocator.Answer, error) {
	if e.IAllocators == nil {
		return nil, fmt.Errorf("this gntd runs no external allocators")
	}
	var (
		in   *iallocator.Input
		data []byte
		err  error
	)
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		in = iallocator.NewInput(s, e.allocOptions(s), request(s))
		data, err = json.Marshal(in)
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the input message: %v", err)
	}
	out, err := e.IAllocators.Run(ctx, name, data)
	if err != nil {
		return nil, err
	}
	return iallocator.ParseResponse(in, out)
}

// allocateWith places one instance with the allocators of list (an
// opcode's iallocator; "" is the cluster's default): for each in turn,
// the built-in calls builtin, an external one is asked in mode allocate
// and its nodes are checked with fixed (which must accept them as the
// built-in would accept given nodes: they exist, are usable, fit, keep
// N+1). The first that answers wins; when all fail, the error names
// each one and its reason.
func allocateWith[T any](e *Executor, ctx context.Context, sc *StepContext, list string, req alloc.Request, os, hv string,
	builtin func() (T, error), fixed func(nodes []string) (T, error)) (T, error) {
	var zero T
	names, err := e.allocators(list)
	if err != nil {
		return zero, err
	}
	v, name, err := iallocator.Try(names, func(name string) (T, error) {
		if name == iallocator.Builtin {
			return builtin()
		}
		ans, err := e.runExternal(ctx, name, func(*fsm.State) map[string]any {
			return iallocator.AllocateRequest(req, os, hv, nil, nil)
		})
		if err != nil {
			return zero, err
		}
		v, err := fixed(ans.Nodes)
		if err != nil {
			return zero, fmt.Errorf("its choice %s is refused: %w", strings.Join(ans.Nodes, ", "), err)
		}
		return v, nil
	}, sc.Logf)
	if err == nil && len(names) > 1 {
		sc.Logf("placed by iallocator %s", name)
	}
	return v, err
}
