package jobs

import (
	"context"
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
)

// mustBeDown refuses an operation on an instance that should be running.
func mustBeDown(in *fsm.Instance, what string) error {
	if in.AdminState == fsm.AdminUp {
		return &fsm.Error{Code: fsm.CodeState, Field: "instance_name",
			Msg: fmt.Sprintf("instance %s is up; shut it down before %s", in.Name, what)}
	}
	if in.Forthcoming {
		return &fsm.Error{Code: fsm.CodeState, Field: "instance_name",
			Msg: fmt.Sprintf("instance %s is forthcoming (a reservation): %s needs a real instance", in.Name, what)}
	}
	return nil
}

// diskSelection returns the instance's disks with the given indexes (all
// when none are given).
func diskSelection(in *fsm.Instance, idx []int) ([]fsm.Disk, error) {
	if len(idx) == 0 {
		return in.Disks, nil
	}
	var out []fsm.Disk
	for _, i := range idx {
		if i >= len(in.Disks) {
			return nil, &fsm.Error{Code: fsm.CodeInval, Field: "disks", Msg: fmt.Sprintf("instance %s has no disk %d", in.Name, i)}
		}
		out = append(out, in.Disks[i])
	}
	return out, nil
}

func (e *Executor) reinstallSteps(o *fsm.OpInstanceReinstall) []Step {
	steps := []Step{
		{Name: "record the OS", Run: func(_ context.Context, sc *StepContext) (any, error) {
			in, _, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if err := mustBeDown(in, "reinstalling it"); err != nil {
				return nil, err
			}
			if o.OSType != "" && o.OSType != in.OS {
				expect := in.SerialNo
				in.OS = o.OSType
				put(sc, in, expect)
			}
			return nil, nil
		}},
		{Name: "install the OS", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if err := mustBeDown(in, "reinstalling it"); err != nil {
				return nil, err
			}
			node := nodes[in.PrimaryNode]
			if err := e.usable(node, "reinstalling "+in.Name); err != nil {
				return nil, err
			}
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpStop, Instance: in, Force: true}); err != nil {
				return nil, err
			}
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpOSInstall, Instance: in, OpID: opID(sc)}); err != nil {
				return nil, err
			}
			sc.Logf("reinstalled %s with OS %s on %s", in.Name, in.OS, node.Name)
			return nil, nil
		}},
	}
	if o.Start {
		steps = append(steps, startStep(e, o.Ref(), false))
	}
	return steps
}

func (e *Executor) replaceDisksStep(o *fsm.OpInstanceReplaceDisks) Step {
	return Step{Name: o.Mode, Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if err := needDRBD(in, "replacing disks"); err != nil {
			return nil, err
		}
		disks, err := diskSelection(in, o.Disks)
		if err != nil {
			return nil, err
		}
		if o.Mode != fsm.ReplaceNewSecondary {
			node := nodes[in.PrimaryNode]
			if o.Mode == fsm.ReplaceOnSecondary {
				node = nodes[in.SecondaryNodes[0]]
			}
			if err := e.usable(node, "replacing disks of "+in.Name); err != nil {
				return nil, err
			}
			for _, d := range disks {
				if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskReplace, Instance: in, Disk: d.UUID, OpID: opID(sc)}); err != nil {
					return nil, err
				}
			}
			sc.Logf("replaced %d disk(s) of %s on %s", len(disks), in.Name, node.Name)
			return nil, nil
		}
		expect, oldSec := in.SerialNo, in.SecondaryNodes[0]
		newSec := ""
		e.FSM.Read(func(s *fsm.State, _ uint64) {
			if o.RemoteNode != "" {
				if n := s.LookupNode(o.RemoteNode); n != nil {
					newSec = n.UUID
				}
				return
			}
			var res alloc.Result
			res, err = alloc.Allocate(s, alloc.Request{Name: in.Name, Instance: in.UUID, Template: fsm.DTDrbd, MemoryMiB: in.MemoryMiB,
				VCPUs: in.VCPUs, Disks: diskSizes(in), Nodes: []string{in.PrimaryNode}, Exclude: []string{oldSec}}, e.allocOptions(s))
			newSec = res.Secondary
		})
		if err != nil {
			return nil, err
		}
		if newSec == "" {
			return nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "remote_node", Msg: fmt.Sprintf("node %s does not exist", o.RemoteNode)}
		}
		if newSec == in.PrimaryNode || newSec == oldSec {
			return nil, &fsm.Error{Code: fsm.CodeInval, Field: "remote_node", Msg: "the new secondary must be another node than the instance's two"}
		}
		if _, err := e.replaceSecondary(ctx, sc, in, oldSec, newSec); err != nil {
			return nil, err
		}
		put(sc, in, expect)
		return nil, nil
	}}
}

func diskSizes(in *fsm.Instance) []int64 {
	out := make([]int64, len(in.Disks))
	for i, d := range in.Disks {
		out[i] = d.SizeMiB
	}
	return out
}

func (e *Executor) recreateDisksSteps(o *fsm.OpInstanceRecreateDisks) []Step {
	return []Step{
		{Name: "record the nodes", Run: func(_ context.Context, sc *StepContext) (any, error) {
			in, _, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if err := mustBeDown(in, "re-creating its disks"); err != nil {
				return nil, err
			}
			if len(o.Nodes) == 0 {
				return nil, nil
			}
			var uuids []string
			e.FSM.Read(func(s *fsm.State, _ uint64) {
				for _, n := range o.Nodes {
					if nd := s.LookupNode(n); nd != nil {
						uuids = append(uuids, nd.UUID)
					}
				}
			})
			if len(uuids) != len(o.Nodes) {
				return nil, &fsm.Error{Code: fsm.CodeNoEnt, Field: "nodes", Msg: fmt.Sprintf("unknown node in %v", o.Nodes)}
			}
			expect := in.SerialNo
			in.PrimaryNode, in.SecondaryNodes = uuids[0], uuids[1:]
			put(sc, in, expect)
			return nil, nil
		}},
		{Name: "create the disks", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			disks, err := diskSelection(in, o.Disks)
			if err != nil {
				return nil, err
			}
			for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
				node := nodes[u]
				if err := e.usable(node, "re-creating disks of "+in.Name); err != nil {
					return nil, err
				}
				for _, d := range disks {
					if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskCreate, Instance: in, Disk: d.UUID}); err != nil {
						return nil, err
					}
				}
			}
			sc.Logf("disks of %s are present on its nodes (missing ones created empty)", in.Name)
			return nil, nil
		}},
	}
}

func (e *Executor) renameStep(o *fsm.OpInstanceRename) Step {
	return Step{Name: "rename", Run: func(_ context.Context, sc *StepContext) (any, error) {
		in, _, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if in.Name == o.NewName {
			return nil, nil
		}
		if in.AdminState == fsm.AdminUp {
			return nil, &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("instance %s is up; shut it down before renaming it", in.Name)}
		}
		expect, old := in.SerialNo, in.Name
		in.Name = o.NewName
		put(sc, in, expect)
		sc.Logf("renamed %s to %s", old, in.Name)
		return in.Name, nil
	}}
}

func (e *Executor) setParamsSteps(o *fsm.OpInstanceSetParams) []Step {
	return []Step{
		{Name: "record the parameters", Run: func(_ context.Context, sc *StepContext) (any, error) {
			in, _, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			expect := in.SerialNo
			var changes [][2]any
			if m := o.BEParams.MemoryMiB(-1); m >= 0 && m != in.MemoryMiB {
				in.MemoryMiB = m
				changes = append(changes, [2]any{"be/memory", m})
			}
			if v := o.BEParams.VCPUs; v != nil && *v != in.VCPUs {
				in.VCPUs = *v
				changes = append(changes, [2]any{"be/vcpus", *v})
			}
			for _, d := range o.Disks {
				k := len(in.Disks)
				mode := d.Params.Mode
				if mode == "" {
					mode = "rw"
				}
				uuid := derivedUUID(in.UUID, fmt.Sprintf("disk%d-%s", k, opID(sc)))
				in.Disks = append(in.Disks, fsm.Disk{UUID: uuid, Name: d.Params.Name, SizeMiB: d.Params.Size, Mode: mode})
				changes = append(changes, [2]any{fmt.Sprintf("disk/%d", k), fmt.Sprintf("add:size=%d,mode=%s", d.Params.Size, mode)})
			}
			if len(changes) > 0 {
				put(sc, in, expect)
			}
			return changes, nil
		}},
		{Name: "create new disks", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if len(o.Disks) == 0 {
				return nil, nil
			}
			for _, u := range append([]string{in.PrimaryNode}, in.SecondaryNodes...) {
				node := nodes[u]
				if err := e.usable(node, "creating disks of "+in.Name); err != nil {
					return nil, err
				}
				for _, d := range in.Disks[len(in.Disks)-len(o.Disks):] {
					if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskCreate, Instance: in, Disk: d.UUID}); err != nil {
						return nil, err
					}
					if in.AdminState == fsm.AdminUp && u == in.PrimaryNode {
						if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskAttach, Instance: in, Disk: d.UUID}); err != nil {
							return nil, err
						}
					}
				}
			}
			return nil, nil
		}},
	}
}
