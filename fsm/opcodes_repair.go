package fsm

import "fmt"

// MaxRepairInput bounds OP_REPAIR_COMMAND's input, given on the
// command's stdin.
const MaxRepairInput = 256 << 10

// OpRepairCommand runs a repair command on a node, as Ganeti's
// OpRepairCommand (design-repaird): command names an executable that the
// node whitelists in its repair-commands directory, and input (maintd
// passes the incident's self-diagnose JSON) is given on its stdin. The
// leader's executor runs it (jobs) in one step that is not run again
// after a leader failover, since a repair command is not idempotent; the
// result is the command's output.
type OpRepairCommand struct {
	OpCommon
	NodeName string `json:"node_name"`
	Command  string `json:"command"`
	Input    string `json:"input,omitempty"`
}

// Validate implements Opcode: a node, and a command that is a plain file
// name (the node checks the rest against its whitelist).
func (o *OpRepairCommand) Validate() *Error {
	if o.NodeName == "" {
		return errf(CodeInval, "node_name", "node_name must not be empty")
	}
	if o.Command == "" {
		return errf(CodeInval, "command", "command must not be empty")
	}
	if e := ValidateCommandName("command", o.Command); e != nil {
		return e
	}
	if len(o.Input) > MaxRepairInput {
		return errf(CodeInval, "input", "input must be at most %d bytes, got %d", MaxRepairInput, len(o.Input))
	}
	return nil
}

// Summary implements Opcode: Ganeti's REPAIR_COMMAND(node).
func (o *OpRepairCommand) Summary() string { return fmt.Sprintf("REPAIR_COMMAND(%s)", o.NodeName) }

// Locks implements Opcode: the node exclusively (as Ganeti), the BGL
// shared.
func (o *OpRepairCommand) Locks(s *State) []LockDecl {
	return []LockDecl{bgl(false), {Level: LockNode, Names: []string{nodeLockName(s, o.NodeName)}, Exclusive: true}}
}
