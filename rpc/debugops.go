package rpc

import (
	"bytes"
	"encoding/json"

	"github.com/gnt-cluster/gnt/fsm"
)

// refuseDebugOps refuses the debugging opcodes (fsm.DebugOnly, such as
// OP_TEST_CRASH, which kills the gntd that runs it) unless this gntd runs
// with --debug. Opcodes that cannot name one are not decoded again.
func (s *Server) refuseDebugOps(ops []json.RawMessage) *APIError {
	if s.debug {
		return nil
	}
	for i, raw := range ops {
		if !bytes.Contains(raw, []byte("OP_TEST_CRASH")) {
			continue
		}
		op, err := fsm.ParseOpcode(raw)
		if err != nil || !fsm.DebugOnly(op) {
			continue // decoding errors are told by prepareOps
		}
		return opError(len(ops), i, &fsm.Error{Code: fsm.CodeInval, Field: "OP_ID",
			Msg: op.Common().OpID + " is a debugging opcode (it kills the gntd that runs it): it is accepted only by a gntd started with --debug, and this one was not"})
	}
	return nil
}
