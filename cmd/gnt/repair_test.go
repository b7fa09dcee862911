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
	for _, want := range []string{"FAILED", "harep (instance autorepair): on; balancing: off", "job 4 failed: OpPrereqError: not enough master candidates",
		"inc-9 (node21, failed): to retry, remove the node's tag: gnt node remove-tags node21 maintd:repairfailed:inc-9"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestRepairStatusNeedsAttention: by default only instances that need
// attention are listed (not healthy, or with malformed tags), with a count
// of the others; --all and named instances list healthy ones too.
func TestRepairStatusNeedsAttention(t *testing.T) {
	f := newFake(t)
	body := `{"plan":{"breaker":{"nodes":3,"limit":1,"unhealthy":[]},"instances":[
		{"name":"ok1","state":"Healthy"},{"name":"ok2","state":"Healthy","why":"failover repair r1 succeeded"},
		{"name":"bad1","state":"Failure","why":"failover repair r2 failed: job 4 ended in error"},
		{"name":"odd1","state":"Healthy","problems":["autorepair tag \"x\": malformed"]},
		{"name":"pend1","state":"Pending repair","why":"failover repair: job 5 is running"}]},"maintenance":{}}`
	f.on("GET", "/2/gnt/repair", 200, body, body, body)
	for _, c := range []struct {
		args         []string
		want, absent []string
	}{
		{nil, []string{"bad1", "odd1", "pend1", "(2 healthy instance(s) not listed; --all lists them)"}, []string{"ok1", "ok2"}},
		{[]string{"--all"}, []string{"ok1", "ok2", "bad1", "odd1", "pend1"}, []string{"not listed"}},
		{[]string{"ok1"}, []string{"ok1"}, []string{"bad1", "not listed"}},
	} {
		r := gnt(t, nil, append([]string{"--server", f.addr(), "repair", "status"}, c.args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, r.code, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, r.stdout)
			}
		}
		for _, a := range c.absent {
			if strings.Contains(r.stdout, a) {
				t.Errorf("%v: output has %q:\n%s", c.args, a, r.stdout)
			}
		}
	}
}
