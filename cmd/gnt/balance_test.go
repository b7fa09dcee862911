package main

import (
	"strings"
	"testing"
)

const balancePlan = `{"moves": [
  {"instance": "a1", "kind": "migrate", "from": "n1", "to": "n3", "score_before": 0.2, "score_after": 0.15},
  {"instance": "b1", "kind": "replace-secondary", "from": "n2", "to": "n4", "score_before": 0.15, "score_after": 0.1}],
 "score": 0.2, "spread": "vcpus 62%", "notes": ["balancing: vcpus load spread 62% (n1 62%, n3 0%) is over the threshold 10%"],
 "end": "", "dry_run": %s, "jobs": %s}`

func TestClusterBalanceDryRun(t *testing.T) {
	f := newFake(t)
	f.on("POST", "/2/gnt/balance", 200, strings.Replace(strings.Replace(balancePlan, "%s", "true", 1), "%s", "[]", 1))
	r := gnt(t, nil, "--server", f.addr(), "cluster", "balance", "--dry-run", "--max-moves", "2", "--threshold", "0.1")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].String() != `POST /2/gnt/balance {"max_moves":2,"threshold":0.1,"dry_run":true}` {
		t.Fatalf("requests %v: want one POST with the limits and dry_run", reqs)
	}
	for _, want := range []string{"largest spread vcpus 62%", "1. migrate a1 from n1 to n3: score 0.2000 -> 0.1500\n",
		"2. replace-secondary b1 from n2 to n4: score 0.1500 -> 0.1000\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestClusterBalanceWaitsAndReportsFailures(t *testing.T) {
	f := newFake(t)
	f.on("POST", "/2/gnt/balance", 200, strings.Replace(strings.Replace(balancePlan, "%s", "false", 1), "%s", "[7, 8]", 1))
	f.on("GET", "/2/jobs/7", 200, `{"id": 7, "status": "success", "opstatus": ["success"], "opresult": [null], "oplog": [[]]}`)
	f.on("GET", "/2/jobs/8", 200, `{"id": 8, "status": "error", "opstatus": ["error"],
		"opresult": [{"code": "wrong_state", "message": "node n4 lacks the memory for N+1"}], "oplog": [[]]}`)
	r := gnt(t, nil, "--server", f.addr(), "cluster", "balance")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "(job 7)") || !strings.Contains(r.stdout, "(job 8)") {
		t.Errorf("stdout should name each move's job:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "1 of 2 balancing moves failed: job 8:") || !strings.Contains(r.stderr, "N+1") {
		t.Errorf("stderr should name the failed job and its error: %s", r.stderr)
	}
}

func TestClusterBalanceBadInput(t *testing.T) {
	f := newFake(t)
	r := gnt(t, nil, "--server", f.addr(), "cluster", "balance", "--max-moves", "0")
	if r.code == 0 || !strings.Contains(r.stderr, "--max-moves must be between 1 and 1000, got 0") {
		t.Fatalf("exit %d, stderr %s: want a usage error naming the limit", r.code, r.stderr)
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Errorf("requests %v: bad input must send nothing", reqs)
	}
}
