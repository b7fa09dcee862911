package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Ballooner is a driver that changes a running instance's memory without
// a restart (Ganeti's runtime memory, `gnt instance modify
// --runtime-memory`). A driver without it refuses ballooning.
type Ballooner interface {
	// Balloon sets the memory the running instance may use to mib, which
	// must be between its minmem and the memory it was started with.
	// Checks first: not running here → ErrState; the same target → no
	// effect.
	Balloon(ctx context.Context, inst fsm.Instance, mib int64) (Result, error)
}

// balloonSettle bounds how long Balloon waits for the guest's balloon
// driver to reach the target before reporting where it is.
const balloonSettle = 10 * time.Second

// Balloon implements Ballooner: QMP balloon to mib MiB (the guest's
// virtio-balloon device, on every kvm guest), then query-balloon until
// the guest reached it (at most balloonSettle; a guest without a balloon
// driver does not move, and the output says so).
func (k *KVM) Balloon(ctx context.Context, inst fsm.Instance, mib int64) (Result, error) {
	if mib <= 0 {
		return Result{}, invalid("runtime memory %d MiB: it must be positive", mib)
	}
	return k.mutate(ctx, OpBalloon, inst, "", func(rec **kvmRecord) (bool, string, error) {
		r := *rec
		pid := k.pid(inst.UUID)
		if r == nil || pid == 0 || r.State != StateRunning {
			return false, "", stateErr("instance %s is not running on node %s; runtime memory applies to a running instance", inst.Name, k.cfg.Node)
		}
		booted := r.RunMemory
		if booted <= 0 {
			booted = inst.MemoryMiB
		}
		if mib > booted {
			return false, "", invalid("runtime memory %d MiB is more than the %d MiB instance %s was started with (a balloon only gives back memory; raise maxmem and reboot)", mib, booted, inst.Name)
		}
		if minmem := beInt(inst.BEParams, "minmem"); minmem > 0 && mib < minmem {
			return false, "", invalid("runtime memory %d MiB is less than instance %s's minmem %d MiB", mib, inst.Name, minmem)
		}
		actual, changed, err := k.balloon(ctx, inst.UUID, mib)
		if err != nil {
			return false, "", &OpError{Op: OpBalloon, Err: err}
		}
		if !changed {
			return false, fmt.Sprintf("balloon already at %d MiB", mib), nil
		}
		out := fmt.Sprintf("balloon set to %d MiB", mib)
		if actual != mib {
			out += fmt.Sprintf("; the guest is at %d MiB (does it run a virtio-balloon driver?)", actual)
		}
		return true, out, nil
	})
}

// balloon asks the instance's qemu for target MiB (unless the guest is
// there already: changed false) and waits for the guest to reach it,
// returning its actual size in MiB.
func (k *KVM) balloon(ctx context.Context, uuid string, target int64) (actual int64, changed bool, err error) {
	err = qmpDo(ctx, k.qmpPath(uuid), func(q *qmpConn) error {
		query := func() error {
			var bal struct {
				Actual int64 `json:"actual"`
			}
			err := q.call(ctx, "query-balloon", nil, &bal)
			actual = bal.Actual >> 20
			return err
		}
		if err := query(); err != nil || actual == target {
			return err
		}
		changed = true
		if err := q.call(ctx, "balloon", map[string]any{"value": target << 20}, nil); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, balloonSettle)
		defer cancel()
		for {
			if err := query(); err != nil {
				return err
			}
			if actual == target || sleep(wctx, 200*time.Millisecond) != nil {
				return nil
			}
		}
	})
	return actual, changed, err
}

// beInt is an integer backend parameter of a filled instance (0 when
// absent).
func beInt(be map[string]any, key string) int64 {
	switch v := be[key].(type) {
	case float64:
		return int64(v)
	case int64:
		return v
	case int:
		return int64(v)
	}
	return 0
}
