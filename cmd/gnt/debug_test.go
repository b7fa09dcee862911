package main

import (
	"strings"
	"testing"
)

// TestDebugCrash: gnt debug crash sends OP_TEST_CRASH with the flags
// given, and refuses bad flags before it sends anything.
func TestDebugCrash(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"debug", "crash"}, `POST /2/jobs {"ops":[{"OP_ID":"OP_TEST_CRASH"}]}`},
		{[]string{"debug", "crash", "--mode", "panic", "--times", "2"}, `POST /2/jobs {"ops":[{"OP_ID":"OP_TEST_CRASH","mode":"panic","times":2}]}`},
		{[]string{"debug", "crash", "--mode", "exit", "--times", "100"}, `POST /2/jobs {"ops":[{"OP_ID":"OP_TEST_CRASH","times":100}]}`},
	} {
		f := newFake(t)
		r := gnt(t, nil, append([]string{"--server", f.addr(), "--submit"}, tc.args...)...)
		if r.code != 0 || r.stdout != "JobID: 7\n" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", tc.args, r.code, r.stdout, r.stderr)
		}
		if reqs := f.requests(); len(reqs) != 1 || reqs[0].String() != tc.want {
			t.Errorf("%v: requests %v, want %s", tc.args, reqs, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"debug", "crash", "--mode", "abort"}, `--mode "abort": want exit or panic`},
		{[]string{"debug", "crash", "--times", "101"}, "--times 101: want 0 (every executor) to 100"},
		{[]string{"debug", "crash", "--times", "-1"}, "--times -1"},
		{[]string{"debug", "crash", "now"}, ""},
	} {
		f := newFake(t)
		r := gnt(t, nil, append([]string{"--server", f.addr()}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, r.code, r.stderr, tc.msg)
		}
		if reqs := f.requests(); len(reqs) != 0 {
			t.Errorf("%v: a usage error sent %v", tc.args, reqs)
		}
	}
}

// TestJobInfoShowsPoisonGuard: gnt job info lists the executor attempts
// of a job and, when the poison-job guard failed it, the epochs.
func TestJobInfoShowsPoisonGuard(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/jobs/9", 200, `{"id": 9, "status": "error", "priority": 0, "summary": ["TEST_CRASH"],
		"ops": [{"OP_ID": "OP_TEST_CRASH"}], "opstatus": ["error"], "opresult": ["failed by the poison-job guard"], "oplog": [[]],
		"received_ts": [1700000000, 0], "start_ts": [1700000000, 0], "end_ts": [1700000009, 0],
		"gnt_attempts": [{"epoch": 5, "ts": [1700000000, 0], "op_index": 0, "progress": 0},
			{"epoch": 6, "ts": [1700000003, 0], "op_index": 0, "progress": 0}, {"epoch": 7, "ts": [1700000009, 0], "op_index": 0, "progress": 0,
			"node": "node2", "incarnation": "ab", "survived": true}],
		"gnt_poison_epochs": [5, 6]}`)
	r := gnt(t, nil, "--server", f.addr(), "job", "info", "9")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, w := range []string{
		"  Failed by the poison-job guard: the leaders of executor epochs 5, 6 were lost while it ran\n",
		"  Executor attempts:\n    - executor epoch 5 at ",
		"    - executor epoch 7 at ",
		", opcode 0, leader node2 (stepped down, its gntd ran on: no death)\n",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, r.stdout)
		}
	}
}
