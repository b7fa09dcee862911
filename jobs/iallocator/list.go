package iallocator

import (
	"fmt"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// Builtin is the name of gnt's built-in allocator (package jobs/alloc),
// after Ganeti's hail.
const Builtin = "hail"

// ParseList splits an allocator list, "name[,name...]", into its names,
// checking each (fsm.ParseIAllocatorList: plain file names, none twice,
// at most fsm.MaxIAllocatorList). The empty string is the empty list.
func ParseList(s string) ([]string, error) {
	names, e := fsm.ParseIAllocatorList("iallocator", s)
	if e != nil {
		return nil, e
	}
	return names, nil
}

// CheckName checks one allocator name: a plain file name.
func CheckName(name string) error {
	if name == "" {
		return &fsm.Error{Code: fsm.CodeInval, Field: "iallocator", Msg: "the allocator name is empty"}
	}
	if _, e := fsm.ParseIAllocatorList("iallocator", name); e != nil {
		return e
	}
	if strings.Contains(name, ",") {
		return &fsm.Error{Code: fsm.CodeInval, Field: "iallocator", Msg: fmt.Sprintf("%q is a list, not one allocator name", name)}
	}
	return nil
}
