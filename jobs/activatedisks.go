package jobs

import (
	"context"
	"fmt"

	"github.com/gnt-cluster/gnt/fsm"
)

// activateDisksStep is OP_INSTANCE_ACTIVATE_DISKS: every disk of the
// instance must be present on each of its nodes (a missing one is
// re-created with recreate-disks, not here: activation does not make
// empty disks), is attached on the primary (a drbd disk's device is set
// up on the secondary first), and the result is Ganeti's
// [[node, disk name, path], ...] for the primary. The agents' attach is
// idempotent, so the step can run again after a leader change.
func (e *Executor) activateDisksStep(o *fsm.OpInstanceActivateDisks) Step {
	return Step{Name: "activate the disks", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if in.AdminState == fsm.AdminOffline {
			return nil, &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("instance %s is offline; its disks are not activated", in.Name)}
		}
		if in.Forthcoming {
			return nil, &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("instance %s is a reservation; it has no disks yet", in.Name)}
		}
		out := [][]string{}
		if len(in.Disks) == 0 {
			sc.Logf("instance %s has no disks", in.Name)
			return out, nil
		}
		// The secondaries first: activation answers for the primary.
		for _, u := range append(append([]string{}, in.SecondaryNodes...), in.PrimaryNode) {
			node := nodes[u]
			if err := e.usable(node, "activating the disks of "+in.Name); err != nil {
				return nil, err
			}
			r, err := e.statusOf(ctx, sc, node, in)
			if err != nil {
				return nil, fmt.Errorf("cannot check the disks of %s on %s: %w", in.Name, node.Name, err)
			}
			if !sc.dryRun {
				present := map[string]bool{}
				for _, d := range r.Disks {
					present[d] = true
				}
				for i, d := range in.Disks {
					if !present[d.UUID] {
						return nil, fmt.Errorf("disk %d of %s is missing on node %s; re-create it (gnt instance recreate-disks) or replace it (replace-disks)", i, in.Name, node.Name)
					}
				}
			}
			if u != in.PrimaryNode && in.DiskTemplate != fsm.DTDrbd {
				continue
			}
			// A drbd disk's device is set up on its secondary too (the
			// agent's attach there only assembles and connects it): a
			// secondary that rebooted resyncs from the primary.
			for _, d := range in.Disks {
				if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskAttach, Instance: in, Disk: d.UUID}); err != nil {
					return nil, err
				}
			}
			if u != in.PrimaryNode {
				continue
			}
			for i, d := range in.Disks {
				name := d.Name
				if name == "" {
					name = fmt.Sprintf("disk/%d", i)
				}
				out = append(out, []string{node.Name, name, r.DiskPaths[d.UUID]})
			}
		}
		sc.Logf("the %d disk(s) of %s are active on %s", len(in.Disks), in.Name, nodeName(nodes, in.PrimaryNode))
		if o.WaitForSync != nil && *o.WaitForSync {
			// Ganeti's wait_for_sync of activate-disks: off by default.
			return out, e.waitForSync(ctx, sc, in, "activate-disks")
		}
		return out, nil
	}}
}

// deactivateDisksStep is OP_INSTANCE_DEACTIVATE_DISKS: the disks of a
// stopped instance are detached on its primary, their storage kept. A
// running instance is refused, force or not.
func (e *Executor) deactivateDisksStep(o *fsm.OpInstanceDeactivateDisks) Step {
	return Step{Name: "deactivate the disks", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		in, nodes, err := e.instanceOf(o.Ref())
		if err != nil {
			return nil, err
		}
		if len(in.Disks) == 0 {
			sc.Logf("instance %s has no disks", in.Name)
			return nil, nil
		}
		node := nodes[in.PrimaryNode]
		if err := e.usable(node, "deactivating the disks of "+in.Name); err != nil {
			return nil, err
		}
		r, err := e.statusOf(ctx, sc, node, in)
		if err != nil {
			return nil, fmt.Errorf("cannot check %s on %s: %w", in.Name, node.Name, err)
		}
		if r.State == "running" || (sc.dryRun && in.AdminState == fsm.AdminUp) {
			what := "runs"
			if sc.dryRun {
				what = "is marked up"
			}
			return nil, &fsm.Error{Code: fsm.CodeState, Field: "instance_name", Msg: fmt.Sprintf("instance %s %s on %s; shut it down before deactivating its disks", in.Name, what, node.Name)}
		}
		for _, d := range in.Disks {
			if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskDetach, Instance: in, Disk: d.UUID}); err != nil {
				return nil, err
			}
		}
		sc.Logf("the %d disk(s) of %s are deactivated on %s; their storage stays", len(in.Disks), in.Name, node.Name)
		return nil, nil
	}}
}
