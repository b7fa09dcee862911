package main

import (
	"strings"
	"testing"
	"time"
)

// TestNodeLivenessShown: node info shows the liveness with its time, or
// unknown; --fields takes gnt_liveness with its title.
func TestNodeLivenessShown(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, twoNodes)
	r := gnt(t, nil, "--server", f.addr(), "node", "info")
	since := time.Unix(1700000000, 5e8).Format("2006-01-02 15:04:05")
	for _, want := range []string{"Node name: n1\n  UUID: u1\n  role: master\n  liveness: alive since " + since + "\n",
		"Node name: n2\n  UUID: u2\n  role: drained\n  liveness: unknown\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("node info lacks %q:\n%s (stderr %q)", want, r.stdout, r.stderr)
		}
	}
	r = gnt(t, nil, "--server", f.addr(), "node", "list", "--fields", "name,gnt_liveness")
	if want := "Node Liveness\nn1   alive\nn2   unknown\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
}
