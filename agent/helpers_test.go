package agent

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

const (
	disk0 = "d0000000-0000-4000-8000-000000000000"
	disk1 = "d1111111-1111-4111-8111-111111111111"
)

// testInstance is a drbd instance with two disks and one NIC.
func testInstance() fsm.Instance {
	return fsm.Instance{
		Name: "web1.example.com", UUID: "a1b2c3d4-0000-4000-8000-00000000beef",
		PrimaryNode: "node-uuid-21", SecondaryNodes: []string{"node-uuid-22"},
		DiskTemplate: "drbd", OS: "debootstrap+bookworm", MemoryMiB: 512, VCPUs: 2, AdminState: "up",
		Disks: []fsm.Disk{
			{UUID: disk0, SizeMiB: 10240, Mode: "rw", Name: "root"},
			{UUID: disk1, SizeMiB: 2048, Mode: "rw"},
		},
		NICs: []fsm.NIC{{UUID: "n0", MAC: "aa:00:00:11:22:33", IP: "192.0.2.10", Mode: "bridged", Link: "br0"}},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// must fails the test on err and returns whether the call changed
// something.
func must(t *testing.T, what string) func(Result, error) bool {
	t.Helper()
	return func(r Result, err error) bool {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return r.Changed
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

// comparable strips what changes on every call (the last operation).
func comparable(st Status) string {
	st.LastOp = nil
	if st.Migration != nil {
		m := *st.Migration
		m.Changed = time.Time{}
		st.Migration = &m
	}
	b, _ := json.Marshal(st)
	return string(b)
}
