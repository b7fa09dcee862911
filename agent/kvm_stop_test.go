package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKVMStopWhileBooting: a graceful stop sent as soon as the guest is
// started, while its kernel boots (the first powerdown is lost), still
// shuts it down gracefully: the powerdown is sent again.
func TestKVMStopWhileBooting(t *testing.T) {
	kernel, initrd := needGuest(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(initrd), "acpi")); err != nil {
		t.Skip("SKIP: the test guest was built without the kernel's ACPI button module: it cannot power off on ACPI")
	}
	dir := t.TempDir()
	k := newTestKVM(t, dir, "")
	ctx := context.Background()
	inst := guestInstance(kernel, initrd, "diskless")
	expect(t, "start", true)(k.Start(ctx, inst))
	// At once: the kernel is still booting, and its ACPI not yet set up.
	res := expect(t, "stop (graceful) while booting", true)(k.Stop(ctx, inst, StopOptions{Timeout: 2 * time.Minute}))
	if res.Output != "shut down gracefully" {
		t.Fatalf("graceful stop while booting: %s", res.Output)
	}
}
