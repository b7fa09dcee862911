package rpc

import (
	"bytes"
	"encoding/json"

	"github.com/gnt-cluster/gnt/fsm"
)

// iallocChecker is what the API needs of the gntd to accept an
// iallocator list: to check that each name is an allocator it can run
// (the built-in hail, or a whitelisted program of its iallocators
// directory; the server implements it).
type iallocChecker interface {
	CheckIAllocator(name string) error
}

// vetIAllocator refuses an opcode whose iallocator or default_iallocator
// lists an allocator this gntd cannot run, naming it and why: the list
// is tried on the leader, which runs the programs of its own directory.
// A backend that cannot check accepts only the built-in.
func (s *Server) vetIAllocator(raw json.RawMessage) *APIError {
	if !bytes.Contains(raw, []byte("iallocator")) && !bytes.Contains(raw, []byte(`\u`)) {
		return nil
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil {
		return nil // ParseOpcode accepted it; not an object here cannot happen
	}
	for _, field := range []string{"iallocator", "default_iallocator"} {
		v, ok := keys[field]
		if !ok {
			continue
		}
		var list string
		if json.Unmarshal(v, &list) != nil {
			continue // ParseOpcode checked the type
		}
		if aerr := s.checkIAllocators(field, list); aerr != nil {
			return aerr
		}
	}
	return nil
}

// checkIAllocators refuses an allocator list (field's value) naming an
// allocator this gntd cannot run, naming it and why.
func (s *Server) checkIAllocators(field, list string) *APIError {
	names, e := fsm.ParseIAllocatorList(field, list)
	if e != nil {
		return FromFSM(e)
	}
	chk, _ := s.b.(iallocChecker)
	for _, n := range names {
		if chk == nil {
			if n != "hail" {
				return badRequest(field, "%s %q is not a known allocator (known: hail; this gntd runs no external allocators)", field, n)
			}
			continue
		}
		if err := chk.CheckIAllocator(n); err != nil {
			return badRequest(field, "%s: %q is not an allocator this gntd can run: %v", field, n, err)
		}
	}
	return nil
}
