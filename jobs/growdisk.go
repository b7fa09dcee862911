package jobs

import (
	"context"
	"fmt"
	"slices"

	"github.com/gnt-cluster/gnt/fsm"
)

// growDiskSteps is OP_INSTANCE_GROW_DISK: the new size is recorded first
// (the record checks that the nodes have room, so no storage grows that
// the configuration cannot hold), then each node of the instance grows
// its storage to the configured size, which the agents do at most once
// (a disk of that size already is left alone), so the step can run again
// after a leader change: the secondary before the primary (a drbd device
// is resized on the primary, over grown storage on both ends); then,
// unless wait_for_sync is false, the resync of a drbd disk is waited
// for.
func (e *Executor) growDiskSteps(o *fsm.OpInstanceGrowDisk) []Step {
	return []Step{
		{Name: "record the new size", Run: func(_ context.Context, sc *StepContext) (any, error) {
			in, _, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if o.Disk >= len(in.Disks) {
				return nil, &fsm.Error{Code: fsm.CodeInval, Field: "disk", Msg: fmt.Sprintf("instance %s has %d disk(s); there is no disk %d", in.Name, len(in.Disks), o.Disk)}
			}
			if in.DiskTemplate == fsm.DTDiskless {
				return nil, &fsm.Error{Code: fsm.CodeInval, Field: "disk", Msg: fmt.Sprintf("instance %s is diskless", in.Name)}
			}
			cur := in.Disks[o.Disk].SizeMiB
			target := cur + o.Amount
			if o.Absolute {
				target = o.Amount
			}
			switch {
			case target < cur:
				return nil, &fsm.Error{Code: fsm.CodeInval, Field: "amount", Msg: fmt.Sprintf("disk %d of %s has %d MiB; %d MiB would shrink it", o.Disk, in.Name, cur, target)}
			case target > fsm.MaxDiskSizeMiB:
				return nil, &fsm.Error{Code: fsm.CodeInval, Field: "amount", Msg: fmt.Sprintf("disk %d of %s would have %d MiB; at most %d", o.Disk, in.Name, target, int64(fsm.MaxDiskSizeMiB))}
			case target == cur:
				sc.Logf("disk %d of %s has %d MiB in the configuration already; growing its storage", o.Disk, in.Name, cur)
				return nil, nil
			}
			expect := in.SerialNo
			disks := append([]fsm.Disk(nil), in.Disks...)
			disks[o.Disk].SizeMiB = target
			in.Disks = disks
			put(sc, in, expect)
			sc.Logf("disk %d of %s: %d MiB to %d MiB", o.Disk, in.Name, cur, target)
			return nil, nil
		}},
		{Name: "grow the storage", Run: func(ctx context.Context, sc *StepContext) (any, error) {
			in, nodes, err := e.instanceOf(o.Ref())
			if err != nil {
				return nil, err
			}
			if o.Disk >= len(in.Disks) {
				return nil, fmt.Errorf("instance %s no longer has disk %d", in.Name, o.Disk)
			}
			d := in.Disks[o.Disk]
			if sc.DryRun() {
				// The size was not recorded: the agents would be asked
				// for the grown one.
				grown := *in
				grown.Disks = append([]fsm.Disk(nil), in.Disks...)
				if o.Absolute {
					grown.Disks[o.Disk].SizeMiB = o.Amount
				} else {
					grown.Disks[o.Disk].SizeMiB += o.Amount
				}
				in = &grown
			}
			// The secondaries first: a drbd device grows (drbdsetup resize,
			// on the primary) only once the storage under both ends has.
			for _, u := range append(slices.Clone(in.SecondaryNodes), in.PrimaryNode) {
				node := nodes[u]
				if err := e.usable(node, "growing disk "+d.UUID+" of "+in.Name); err != nil {
					return nil, err
				}
				if _, err := e.call(ctx, sc, node, NodeCall{Op: NodeOpDiskGrow, Instance: in, Disk: d.UUID}); err != nil {
					return nil, err
				}
			}
			if o.WaitForSync != nil && !*o.WaitForSync {
				if in.DiskTemplate == fsm.DTDrbd {
					sc.Logf("not waiting for the resync of disk %d of %s (wait_for_sync is false)", o.Disk, in.Name)
				}
				return nil, nil
			}
			return nil, e.waitForSync(ctx, sc, in, "grow-disk")
		}},
	}
}
