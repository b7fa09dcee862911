package main

import (
	"testing"

	"github.com/gnt-cluster/gnt/rpc"
)

// TestVersion: --version and the version command print the version and
// the commit (the one -ldflags -X stamped when Go stamped none), without
// any server.
func TestVersion(t *testing.T) {
	old := commit
	commit = "0123456789ab"
	t.Cleanup(func() { commit = old })
	want := "gnt version " + rpc.VersionText("0123456789ab") + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := gnt(t, nil, args...)
		if r.code != 0 || r.stdout != want {
			t.Errorf("%v: exit %d stdout %q stderr %q, want %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
	if r := gnt(t, nil, "version", "x"); r.code != 2 {
		t.Errorf("version x: exit %d, want 2", r.code)
	}
}
