package jobs

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// The storage-unit opcodes (fsm/opcodes_storage.go) ask the nodes'
// agents: storage-list to query, storage-modify (pvchange -x) and
// storage-repair (vgreduce --removemissing) to act. Nothing is recorded
// in the configuration.

// storageNode looks a node up and checks it can be asked.
func (e *Executor) storageNode(ref, what string) (*fsm.Node, error) {
	var node *fsm.Node
	e.FSM.Read(func(s *fsm.State, _ uint64) {
		if n := s.LookupNode(ref); n != nil {
			c := *n
			node = &c
		}
	})
	if node == nil {
		return nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "node_name", Msg: fmt.Sprintf("node %s does not exist", ref)}
	}
	if err := e.usable(node, what); err != nil {
		return nil, err
	}
	return node, nil
}

// StorageRow is one unit's values of fields, in their order: sizes in
// MiB, allocatable a bool, the others strings.
func StorageRow(node string, u StorageUnit, fields []string) []any {
	row := make([]any, len(fields))
	for i, f := range fields {
		switch f {
		case "node":
			row[i] = node
		case "type":
			row[i] = u.Type
		case "name":
			row[i] = u.Name
		case "size":
			row[i] = u.Size
		case "used":
			row[i] = u.Used
		case "free":
			row[i] = u.Free
		case "allocatable":
			row[i] = u.Allocatable
		}
	}
	return row
}

// queryStorageSteps are OP_NODE_QUERY_STORAGE's: one step asking each
// node (all nodes when none is named, in name order) for its units, the
// result the rows of the units of the storage type (and name) asked for,
// by node and name. An offline node is skipped, as in Ganeti, and the job
// log says so; so is a node that does not answer when several nodes (or
// all) are asked, while a single named node that does not answer fails
// the job; a listing that failed on a node is logged as a warning.
func (e *Executor) queryStorageSteps(o *fsm.OpNodeQueryStorage) []Step {
	return []Step{{
		Name: fmt.Sprintf("query %s storage units", o.StorageType),
		Run: func(ctx context.Context, sc *StepContext) (any, error) {
			var nodes []*fsm.Node
			var missing []string
			e.FSM.Read(func(s *fsm.State, _ uint64) {
				if len(o.Nodes) == 0 {
					for _, n := range s.SortedNodes() {
						c := *n
						nodes = append(nodes, &c)
					}
					return
				}
				for _, ref := range o.Nodes {
					if n := s.LookupNode(ref); n != nil {
						c := *n
						nodes = append(nodes, &c)
					} else {
						missing = append(missing, ref)
					}
				}
			})
			if len(missing) > 0 {
				return nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "nodes", Msg: fmt.Sprintf("no such node: %s", strings.Join(missing, ", "))}
			}
			rows := [][]any{}
			for _, n := range nodes {
				if n.Offline {
					sc.Logf("node %s is offline; its storage units are not listed", n.Name)
					continue
				}
				r, err := e.call(ctx, sc, n, NodeCall{Op: NodeOpStorageList})
				if err != nil && len(o.Nodes) == 1 {
					return nil, err
				}
				if err != nil {
					// Of several nodes, one that cannot answer is
					// left out with a warning, as in Ganeti.
					sc.Logf("warning: the storage units of %s are not listed: %v", n.Name, err)
					continue
				}
				for _, msg := range r.StorageErrors {
					sc.Logf("warning: on %s: %s", n.Name, msg)
				}
				units := make([]StorageUnit, 0, len(r.Storage))
				for _, u := range r.Storage {
					if u.Type == o.StorageType && (o.Name == "" || u.Name == o.Name) {
						units = append(units, u)
					}
				}
				sort.Slice(units, func(i, j int) bool { return units[i].Name < units[j].Name })
				for _, u := range units {
					rows = append(rows, StorageRow(n.Name, u, o.OutputFields))
				}
			}
			return rows, nil
		},
	}}
}

// modifyStorageSteps are OP_NODE_MODIFY_STORAGE's: the node's agent
// checks the physical volume exists and sets its allocatable flag
// (pvchange -x, idempotent).
func (e *Executor) modifyStorageSteps(o *fsm.OpNodeModifyStorage) []Step {
	return []Step{{
		Name: fmt.Sprintf("set allocatable=%v on %s %s of %s", *o.Changes.Allocatable, o.StorageType, o.Name, o.NodeName),
		Run: func(ctx context.Context, sc *StepContext) (any, error) {
			node, err := e.storageNode(o.NodeName, "modifying a storage unit")
			if err != nil {
				return nil, err
			}
			_, err = e.call(ctx, sc, node, NodeCall{Op: NodeOpStorageModify, StorageName: o.Name, Allocatable: o.Changes.Allocatable})
			return nil, err
		},
	}}
}

// repairStorageSteps are OP_REPAIR_NODE_STORAGE's: vgreduce
// --removemissing of the volume group on the node (idempotent: a group
// with no missing volume is left as it is).
func (e *Executor) repairStorageSteps(o *fsm.OpRepairNodeStorage) []Step {
	return []Step{{
		Name: fmt.Sprintf("repair %s %s on %s", o.StorageType, o.Name, o.NodeName),
		Run: func(ctx context.Context, sc *StepContext) (any, error) {
			node, err := e.storageNode(o.NodeName, "repairing a storage unit")
			if err != nil {
				return nil, err
			}
			_, err = e.call(ctx, sc, node, NodeCall{Op: NodeOpStorageRepair, StorageName: o.Name})
			return nil, err
		},
	}}
}
