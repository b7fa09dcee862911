package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKVMBalloon: a real guest started with 256 MiB and minmem 128 is
// ballooned down to 160 MiB through QMP; query-balloon (the status's
// memory) shows it; the same target again changes nothing; targets
// outside minmem..the boot memory, and a stopped guest, are refused.
func TestKVMBalloon(t *testing.T) {
	kernel, initrd := needGuest(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(initrd), "balloon")); err != nil {
		t.Skip("SKIP: the kernel in /boot has no virtio_balloon module: the test guest cannot balloon")
	}
	dir := t.TempDir()
	k := newTestKVM(t, dir, "")
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "diskless")
	inst.MemoryMiB = 256
	inst.BEParams = map[string]any{"minmem": float64(128), "maxmem": float64(256)}
	if _, err := k.Balloon(ctx, inst, 200); !errors.Is(err, ErrState) {
		t.Fatalf("balloon before start: %v", err)
	}
	expect(t, "start", true)(k.Start(ctx, inst))
	waitCount(t, serialLines(t, k.SerialPath(inst.UUID)), 20, 3*time.Minute) // the guest's init has loaded virtio_balloon
	for _, c := range []struct {
		mib  int64
		want string
	}{{300, "more than the 256 MiB"}, {100, "less than instance guest1's minmem 128"}, {0, "must be positive"}} {
		if _, err := k.Balloon(ctx, inst, c.mib); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("balloon to %d MiB: %v, want %q", c.mib, err, c.want)
		}
	}
	res := expect(t, "balloon down", true)(k.Balloon(ctx, inst, 160))
	if res.Output != "balloon set to 160 MiB" {
		t.Errorf("balloon output %q: the guest did not reach 160 MiB", res.Output)
	}
	st, err := k.Status(ctx, inst)
	if err != nil || st.MemoryMiB != 160 {
		t.Fatalf("status after the balloon: %+v %v, want 160 MiB", st, err)
	}
	expect(t, "balloon to the same", false)(k.Balloon(ctx, inst, 160))
	expect(t, "balloon back up", true)(k.Balloon(ctx, inst, 256))
	expect(t, "stop", true)(k.Stop(ctx, inst, StopOptions{Force: true}))
	expect(t, "remove", true)(k.Remove(ctx, inst))
}
