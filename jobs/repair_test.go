package jobs

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// repairAgents stands in for the node agents' repair-command: it records
// each run and answers with output, or with fail's error for a command.
type repairAgents struct {
	mu   sync.Mutex
	runs []NodeCall
	fail map[string]error
}

func (r *repairAgents) Call(_ context.Context, node *fsm.Node, c NodeCall) (NodeReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.Op != NodeOpRepairCommand {
		return NodeReply{}, &NodeCallError{Code: "not_supported", Msg: c.Op}
	}
	r.runs = append(r.runs, c)
	if err := r.fail[c.Command]; err != nil {
		return NodeReply{}, err
	}
	return NodeReply{Changed: true, Output: "ran " + c.Command + " on " + node.Name + " with " + c.Input}, nil
}

func (r *repairAgents) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func logText(j *fsm.Job) string {
	var b strings.Builder
	for _, e := range j.Ops[0].Log {
		b.WriteString(e.Msg + "\n")
	}
	return b.String()
}

// TestRepairCommand: OP_REPAIR_COMMAND runs the command on the node's
// agent once, with its input; the output is the result and is in the
// job log. A failing command fails the job with its output logged; an
// offline or unknown node is refused without a run.
func TestRepairCommand(t *testing.T) {
	d, epoch := instanceSetup(t)
	agents := &repairAgents{fail: map[string]error{
		"broken": &NodeCallError{Code: "failed", Msg: "repair command: broken exited with exit status 4", Output: "controller offline"},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 2, Strategy: fastStrategy, Nodes: agents}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()

	ok := submit(t, d, `{"OP_ID":"OP_REPAIR_COMMAND","node_name":"n2","command":"replace-disk","input":"{\"status\":\"live-repair\"}"}`)
	j := waitStatus(t, d.f, ok, fsm.StatusSuccess)
	want := `ran replace-disk on n2 with {"status":"live-repair"}`
	var res string
	json.Unmarshal(j.Ops[0].Result, &res)
	if res != want || !strings.Contains(logText(j), "repair-command on n2: "+want) {
		t.Fatalf("result %s, log %q", j.Ops[0].Result, logText(j))
	}
	if j.Ops[0].Locks == nil || agents.count() != 1 || agents.runs[0].Command != "replace-disk" {
		t.Fatalf("locks %+v, runs %+v", j.Ops[0].Locks, agents.runs)
	}

	bad := submit(t, d, `{"OP_ID":"OP_REPAIR_COMMAND","node_name":"n2","command":"broken"}`)
	j = waitStatus(t, d.f, bad, fsm.StatusError)
	if !strings.Contains(string(j.Ops[0].Result), "step 1 of 1 (run repair command broken on n2) failed") ||
		!strings.Contains(logText(j), "controller offline") {
		t.Fatalf("failing command: result %s, log %q", j.Ops[0].Result, logText(j))
	}

	r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 5, UUIDs: []string{""},
		Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n2","offline":true,"force":true}`)}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	waitStatus(t, d.f, r.JobID, fsm.StatusSuccess)
	runs := agents.count()
	for _, node := range []string{"n2", "n9"} {
		id := submit(t, d, `{"OP_ID":"OP_REPAIR_COMMAND","node_name":"`+node+`","command":"replace-disk"}`)
		j = waitStatus(t, d.f, id, fsm.StatusError)
		if !strings.Contains(string(j.Ops[0].Result), map[string]string{"n2": "node n2 is offline", "n9": "node n9 does not exist"}[node]) {
			t.Errorf("%s: %s", node, j.Ops[0].Result)
		}
	}
	if agents.count() != runs {
		t.Errorf("a repair command ran on an offline or unknown node")
	}
}

// TestRepairCommandNotRepeatedAfterFailover: a repair command that a
// deposed leader had started is not run again by the next one: the job
// fails naming the step and the failover.
func TestRepairCommandNotRepeatedAfterFailover(t *testing.T) {
	d, old := instanceSetup(t)
	id := submit(t, d, `{"OP_ID":"OP_REPAIR_COMMAND","node_name":"n2","command":"replace-disk"}`)
	update(t, d, fsm.JobUpdate{Epoch: old, JobID: id, Action: fsm.ActionStart,
		Locks: []fsm.LockDecl{{Level: fsm.LockNode, Names: []string{"n2"}, Exclusive: true}}})
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: 5, Node: "n1"})
	agents := &repairAgents{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: r.Epoch, Concurrency: 2, Strategy: fastStrategy, Nodes: agents}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	j := waitStatus(t, d.f, id, fsm.StatusError)
	if !strings.Contains(string(j.Ops[0].Result), "cannot resume after a leader failover: step 1 (run repair command replace-disk on n2)") {
		t.Fatalf("result %s", j.Ops[0].Result)
	}
	if agents.count() != 0 {
		t.Fatalf("the repair command ran again: %+v", agents.runs)
	}
}
