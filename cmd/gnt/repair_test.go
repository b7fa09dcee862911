package main

import (
	"strings"
	"testing"
)

// TestMaintStatusExplainsFailures: a failed incident is marked, its
// reason (the failed job's error) shown, and the operator's next step
// printed below the table.
func TestMaintStatusExplainsFailures(t *testing.T) {
	f := newFake(t)
	inc := `{"uuid":"inc-9","node":"node21","action":"evacuate","repair-status":"failed","jobs":[4],"tag":"maintd:repairfailed:inc-9","gnt_reason":"job 4 failed: OpPrereqError: not enough master candidates"}`
	f.on("GET", "/2/gnt/repair", 200, `{"plan":{"breaker":{"nodes":3,"limit":1,"unhealthy":[]}},"maintenance":{"roundDelay":300,"jobs":[],"incidents":[`+inc+`]},
		"incidents":[`+strings.TrimSuffix(inc, "}")+`,"gnt_next_step":"to retry, remove the node's tag: gnt node remove-tags node21 maintd:repairfailed:inc-9"}]}`)
	r := gnt(t, nil, "--server", f.addr(), "maint", "status")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"FAILED", "job 4 failed: OpPrereqError: not enough master candidates",
		"inc-9 (node21, failed): to retry, remove the node's tag: gnt node remove-tags node21 maintd:repairfailed:inc-9"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}
