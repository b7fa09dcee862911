package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/oob"
)

// bmc is a scripted OOB helper for the tests: a real program that keeps
// each node's power state in a file of its directory and logs its calls.
// <node>.<command>.sh, when present, is sourced first (to hang, flood,
// print garbage or fail).
type bmc struct {
	dir, program string
}

func newBMC(t *testing.T) *bmc {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "oob-helper")
	script := `#!/bin/sh
D=` + dir + `
cmd=$1; node=$2
echo "$cmd $node" >> $D/calls
[ -f $D/$node.$cmd.sh ] && . $D/$node.$cmd.sh
case $cmd in
power-on) echo on > $D/$node.power ;;
power-off) echo off > $D/$node.power ;;
power-cycle) ;;
power-status) if [ "$(cat $D/$node.power 2>/dev/null || echo on)" = on ]; then echo '{"powered": true}'; else echo '{"powered": false}'; fi ;;
health) cat $D/$node.health 2>/dev/null || echo '[["Ambient Temp", "OK"]]' ;;
*) exit 2 ;;
esac
`
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &bmc{dir: dir, program: prog}
}

// whitelist is the OOB programs directory the helper is in.
func (b *bmc) whitelist() oob.Whitelist { return oob.Whitelist{Dir: b.dir, Owner: os.Geteuid()} }

// runner runs the helper (and only helpers of its directory).
func (b *bmc) runner() *oob.Runner { return &oob.Runner{Programs: b.whitelist()} }

func (b *bmc) set(t *testing.T, file, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(b.dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *bmc) power(node string) string {
	s, err := os.ReadFile(filepath.Join(b.dir, node+".power"))
	if err != nil {
		return "on"
	}
	return strings.TrimSpace(string(s))
}

func (b *bmc) calls() []string {
	s, _ := os.ReadFile(filepath.Join(b.dir, "calls"))
	return strings.Fields(strings.ReplaceAll(string(s), " ", "_"))
}

// oobCluster is a state with nodes n1 (master, candidate), n2, n3
// (candidates), n4, n5, every node with the helper as oob_program.
func oobCluster(t *testing.T, b *bmc) (*direct, uint64) {
	t.Helper()
	d := &direct{f: fsm.New()}
	ctx := context.Background()
	d.Apply(ctx, fsm.ClusterInit{Now: 1, Name: "c", UUID: "u1", GroupUUID: "g1", Node: fsm.NodeSpec{Name: "n1", UUID: "n1", PrimaryIP: "192.0.2.1"},
		CandidatePoolSize: 3, NDParams: map[string]any{"oob_program": b.program}})
	var ops []json.RawMessage
	var uuids []string
	for i := 2; i <= 5; i++ {
		ops = append(ops, json.RawMessage(fmt.Sprintf(`{"OP_ID":"OP_NODE_ADD","node_name":"n%d","primary_ip":"192.0.2.%d"}`, i, i)))
		uuids = append(uuids, fmt.Sprintf("n%d", i))
	}
	if r, _, _ := d.Apply(ctx, fsm.JobSubmit{Now: 2, Ops: ops, UUIDs: uuids}); r.Err != nil {
		t.Fatal(r.Err)
	}
	r, _, _ := d.Apply(ctx, fsm.LeaderEstablish{Now: 3, Node: "n1"})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return d, r.Epoch
}

type runningExecutor struct {
	ex     *Executor
	cancel context.CancelFunc
	done   chan error
}

func startExecutor(t *testing.T, ex *Executor) *runningExecutor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningExecutor{ex: ex, cancel: cancel, done: make(chan error, 1)}
	if ex.Strategy.Min == 0 {
		ex.Strategy = fastStrategy
	}
	go func() { r.done <- ex.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *runningExecutor) stop() {
	r.cancel()
	<-r.done
	r.done <- nil // stop again is a no-op
}

func noSleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

func nodeState(d *direct, name string) fsm.Node {
	var n fsm.Node
	d.f.Read(func(s *fsm.State, _ uint64) { n = *s.LookupNode(name) })
	return n
}

func jobLog(j *fsm.Job) string {
	var b strings.Builder
	for _, op := range j.Ops {
		for _, l := range op.Log {
			b.WriteString(l.Msg + "\n")
		}
	}
	return b.String()
}

// opResult is an opcode's result: the text of an error, else its JSON.
func opResult(j *fsm.Job, i int) string {
	var msg string
	if json.Unmarshal(j.Ops[i].Result, &msg) == nil {
		return msg
	}
	return string(j.Ops[i].Result)
}

// finished waits for the job to end and returns it.
func finished(t *testing.T, d *direct, id int64) *fsm.Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		j := readJobCopy(d, id)
		if j != nil && fsm.Finalized(j.Status) {
			return j
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("job %d did not finish", id)
	return nil
}

// readJobCopy returns a copy of the job as recorded, or nil.
func readJobCopy(d *direct, id int64) *fsm.Job {
	var j *fsm.Job
	d.f.Read(func(s *fsm.State, _ uint64) {
		if x := s.Jobs[id]; x != nil {
			b, _ := json.Marshal(x)
			j = &fsm.Job{}
			json.Unmarshal(b, j)
		}
	})
	return j
}

func withReason(op string) string {
	return strings.TrimSuffix(op, "}") + `,"reason":[["gnt:user","bad fan",1],["gnt:client:gnt","node power off n4",2]]}`
}

// TestOOBPowerOffOn: gnt node power off's job (offline, then power-off)
// and power-on change the node and its powered record, logging who asked
// and why.
func TestOOBPowerOffOn(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep})
	id := submit(t, d, `{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n4","offline":true}`,
		withReason(`{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n4"]}`))
	j := finished(t, d, id)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("power off: %s %s\n%s", j.Status, opResult(j, 1), jobLog(j))
	}
	if n := nodeState(d, "n4"); n.Powered || !n.Offline || b.power("n4") != "off" {
		t.Fatalf("after power off: powered %v offline %v bmc %s", n.Powered, n.Offline, b.power("n4"))
	}
	if got := opResult(j, 1); got != `[[[0,"n4"],[0,null]]]` {
		t.Errorf("result %s", got)
	}
	if log := jobLog(j); !strings.Contains(log, `Powered off node n4 (powered: true -> false; reason trail: gnt:user "bad fan"; gnt:client:gnt "node power off n4")`) {
		t.Errorf("log:\n%s", log)
	}
	j = finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-on","node_names":["n4"]}`))
	if n := nodeState(d, "n4"); j.Status != fsm.StatusSuccess || !n.Powered || !n.Offline || b.power("n4") != "on" {
		t.Fatalf("after power on: %s powered %v offline %v bmc %s\n%s", j.Status, n.Powered, n.Offline, b.power("n4"), jobLog(j))
	}
	// Power-cycle keeps the record.
	j = finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-cycle","node_names":["n5"]}`))
	if j.Status != fsm.StatusSuccess || !nodeState(d, "n5").Powered || !strings.Contains(jobLog(j), "Power-cycled node n5") {
		t.Errorf("cycle: %s\n%s", j.Status, jobLog(j))
	}
}

// TestOOBRefusals: the checks of the plan step, each failing the opcode
// before any helper runs.
func TestOOBRefusals(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep})
	if r, _, _ := d.Apply(context.Background(), fsm.JobSubmit{Now: 4, Ops: []json.RawMessage{
		json.RawMessage(`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n5","ndparams":{"oob_program":"!"}}`)}, UUIDs: []string{""}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for op, want := range map[string]string{
		`{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n4"]}`:                      "Cannot power off node n4 because it is not marked offline",
		`{"OP_ID":"OP_OOB_COMMAND","command":"power-status","node_names":["n5"]}`:                   "Node n5 does not support OOB commands",
		`{"OP_ID":"OP_OOB_COMMAND","command":"health","node_names":["n4","n5"]}`:                    "Node n5 does not support OOB commands",
		`{"OP_ID":"OP_OOB_COMMAND","command":"power-status","node_names":["nine"]}`:                 "node nine does not exist",
		`{"OP_ID":"OP_OOB_COMMAND","command":"power-cycle","node_names":["n1"]}`:                    "Operating on the master node n1 is not allowed for power-cycle; run '" + b.program + " power-cycle n1' if you want to operate on the master regardless",
		`{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n1"],"ignore_status":true}`: "Operating on the master node n1 is not allowed for power-off",
	} {
		j := finished(t, d, submit(t, d, op))
		if j.Status != fsm.StatusError || !strings.Contains(opResult(j, 0), want) {
			t.Errorf("%s: %s %s, want %q", op, j.Status, opResult(j, 0), want)
		}
	}
	if calls := b.calls(); len(calls) != 0 {
		t.Errorf("helper ran: %v", calls)
	}
}

// TestOOBBadHelper: a helper that exits 2, prints malformed or wrongly
// typed JSON, prints for power-on, hangs or floods fails the step with a
// clear message in the result and the job log, and the powered record is
// unchanged.
func TestOOBBadHelper(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	startExecutor(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Sleep: noSleep,
		OOB: &oob.Runner{Timeout: time.Second, MaxOutput: 4096, Programs: b.whitelist()}})
	cases := []struct {
		name, cmd, script, want string
	}{
		{"exit 2", "power-on", `echo "no such BMC" >&2; exit 2`, "OOB program execution failed (exit status 2: power-on is unsupported or undefined: no such BMC)"},
		{"exit 1", "power-on", `echo "BMC refused" >&2; exit 1`, "OOB program execution failed (BMC refused)"},
		{"prints for power-on", "power-on", `echo '{"ok": true}'; exit 0`, `power-on is expected to not return payload but got "{\"ok\": true}\n"`},
		{"hangs", "power-on", `sleep 30`, "OOB program execution timeout exceeded, OOB program execution aborted (after 1s)"},
		{"floods", "power-on", `yes; exit 0`, "power-on printed more than 4096 bytes on stdout; the helper was killed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := nodeState(d, "n4").Powered
			b.set(t, "n4."+c.cmd+".sh", c.script)
			defer os.Remove(filepath.Join(b.dir, "n4."+c.cmd+".sh"))
			op := fmt.Sprintf(`{"OP_ID":"OP_OOB_COMMAND","command":%q,"node_names":["n4"],"ignore_status":true}`, c.cmd)
			j := finished(t, d, submit(t, d, op))
			if j.Status != fsm.StatusError || !strings.Contains(opResult(j, 0), c.want) {
				t.Fatalf("%s %s, want %q", j.Status, opResult(j, 0), c.want)
			}
			if !strings.Contains(opResult(j, 0), "step 2 of 3 ("+c.cmd+" n4) failed") {
				t.Errorf("result does not name the step: %s", opResult(j, 0))
			}
			if !strings.Contains(jobLog(j), c.cmd+" of node n4 failed") {
				t.Errorf("job log:\n%s", jobLog(j))
			}
			if after := nodeState(d, "n4").Powered; after != before {
				t.Errorf("powered %v -> %v", before, after)
			}
		})
	}
	// Read-only commands report a failing node as RS_NODATA and go on.
	b.set(t, "n2.power-status.sh", `echo '{"powered": "maybe"}'; exit 0`)
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-status","node_names":["n2","n3"]}`))
	if j.Status != fsm.StatusSuccess || opResult(j, 0) != `[[[0,"n2"],[2,null]],[[0,"n3"],[0,{"powered":true}]]]` {
		t.Errorf("status with a bad node: %s %s", j.Status, opResult(j, 0))
	}
	if !strings.Contains(jobLog(j), `WARNING: Out-of-band power-status of node 'n2' failed: Check of out-of-band payload failed due to power-status is expected to return a boolean "powered" but got a string "{\"powered\": \"maybe\"}\n"`) {
		t.Errorf("log:\n%s", jobLog(j))
	}
}

// TestOOBStatusAndHealth: power-status of every OOB node logs records that
// disagree with the world; health logs WARNING and CRITICAL items.
func TestOOBStatusAndHealth(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep})
	b.set(t, "n3.power", "off\n")
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-status"}`))
	want := `[[[0,"n1"],[0,{"powered":true}]],[[0,"n2"],[0,{"powered":true}]],[[0,"n3"],[0,{"powered":false}]],[[0,"n4"],[0,{"powered":true}]],[[0,"n5"],[0,{"powered":true}]]]`
	if j.Status != fsm.StatusSuccess || opResult(j, 0) != want {
		t.Fatalf("%s %s", j.Status, opResult(j, 0))
	}
	if !strings.Contains(jobLog(j), "WARNING: Recorded power state (true) of node 'n3' does not match actual power state (false)") {
		t.Errorf("log:\n%s", jobLog(j))
	}
	if !nodeState(d, "n3").Powered {
		t.Error("power-status changed the record")
	}
	b.set(t, "n2.health", `[["Ambient Temp","OK"],["PS Redundancy","WARNING"],["FAN 1 RPM","CRITICAL"],["CPU","UNKNOWN"]]`)
	j = finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"health","node_names":["n2"]}`))
	log := jobLog(j)
	if j.Status != fsm.StatusSuccess ||
		!strings.Contains(log, "WARNING: Item 'PS Redundancy' on node 'n2' has status 'WARNING'") ||
		!strings.Contains(log, "WARNING: Item 'FAN 1 RPM' on node 'n2' has status 'CRITICAL'") ||
		strings.Contains(log, "Ambient") || strings.Contains(log, "'CPU'") {
		t.Errorf("%s %s\n%s", j.Status, opResult(j, 0), log)
	}
}

// TestOOBPowerDelay: power-on waits power_delay between nodes, not before
// the first.
func TestOOBPowerDelay(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	var mu sync.Mutex
	var slept []time.Duration
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: func(ctx context.Context, dur time.Duration) error {
		mu.Lock()
		slept = append(slept, dur)
		mu.Unlock()
		return ctx.Err()
	}})
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-on","node_names":["n5","n3","n4"],"power_delay":1.5}`))
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s %s", j.Status, opResult(j, 0))
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(slept) != "[1.5s 1.5s]" {
		t.Errorf("slept %v", slept)
	}
	var names []string
	for _, s := range j.Ops[0].Steps {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "check nodes,power-on n3,power-on n4,power-on n5" {
		t.Errorf("steps %v (the last, report, is recorded by the finish)", names)
	}
}

// resumeAt makes an opcode look started by an executor of an older epoch
// that recorded its first k steps (the plan computed now), then starts a
// new leader's executor.
func resumeAt(t *testing.T, d *direct, ex *Executor, id int64, k int) {
	t.Helper()
	j := readJobCopy(d, id)
	op, err := fsm.ParseOpcode(j.Ops[0].Input)
	if err != nil {
		t.Fatal(err)
	}
	var decl []fsm.LockDecl
	d.f.Read(func(s *fsm.State, _ uint64) { decl = op.Locks(s); ex.Epoch = s.Epoch })
	update(t, d, fsm.JobUpdate{Epoch: ex.Epoch, JobID: id, Action: fsm.ActionStart, Locks: decl})
	planner := &Executor{FSM: d.f}
	steps, err := planner.stepsFor(op, j.Ops[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < k; i++ {
		sc := &StepContext{Job: j, sleep: noSleep}
		res, err := steps[i].Run(context.Background(), sc)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		update(t, d, fsm.JobUpdate{Epoch: ex.Epoch, JobID: id, Action: fsm.ActionStep, Step: i, StepName: steps[i].Name,
			Result: mustJSON(res), Changes: sc.changes})
	}
	r, _, _ := d.Apply(context.Background(), fsm.LeaderEstablish{Now: 9, Node: "n1"})
	ex.Epoch = r.Epoch
	startExecutor(t, ex)
}

// TestOOBResume: after a leader change, a power-off whose effect the
// helper's power-status confirms is recorded without running again; a
// power-cycle that may have happened fails the opcode naming its step.
func TestOOBResume(t *testing.T) {
	b := newBMC(t)
	d, _ := oobCluster(t, b)
	ex := &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Sleep: noSleep}
	id := submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n4","n5"],"ignore_status":true}`)
	// The old leader had recorded the plan and powered n4 off, but died
	// before recording it.
	b.set(t, "n4.power", "off\n")
	resumeAt(t, d, ex, id, 1)
	j := finished(t, d, id)
	if j.Status != fsm.StatusSuccess || nodeState(d, "n4").Powered || nodeState(d, "n5").Powered {
		t.Fatalf("%s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	if got := strings.Join(b.calls(), " "); got != "power-status_n4 power-off_n5" {
		t.Errorf("helper calls %s", got)
	}
	if !strings.Contains(jobLog(j), "power-status confirmed it after the leader change") || !strings.Contains(jobLog(j), "had taken effect before the leader change; not repeated") {
		t.Errorf("log:\n%s", jobLog(j))
	}
	if opResult(j, 0) != `[[[0,"n4"],[0,null]],[[0,"n5"],[0,null]]]` {
		t.Errorf("result %s", opResult(j, 0))
	}

	// A power-on the helper says did not happen runs again.
	b2 := newBMC(t)
	d2, _ := oobCluster(t, b2)
	b2.set(t, "n4.power", "off\n")
	id = submit(t, d2, `{"OP_ID":"OP_OOB_COMMAND","command":"power-on","node_names":["n4"]}`)
	resumeAt(t, d2, &Executor{FSM: d2.f, Apply: d2, OOB: b2.runner(), Sleep: noSleep}, id, 1)
	if j := finished(t, d2, id); j.Status != fsm.StatusSuccess || strings.Join(b2.calls(), " ") != "power-status_n4 power-on_n4" {
		t.Errorf("power-on resumed: %s calls %v", j.Status, b2.calls())
	}

	// The only node's power-off had taken effect: recorded by its Check,
	// the opcode still answers with the node's entry.
	b4 := newBMC(t)
	d4, _ := oobCluster(t, b4)
	b4.set(t, "n5.power", "off\n")
	id = submit(t, d4, `{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n5"],"ignore_status":true}`)
	resumeAt(t, d4, &Executor{FSM: d4.f, Apply: d4, OOB: b4.runner(), Sleep: noSleep}, id, 1)
	if j := finished(t, d4, id); j.Status != fsm.StatusSuccess || opResult(j, 0) != `[[[0,"n5"],[0,null]]]` ||
		strings.Join(b4.calls(), " ") != "power-status_n5" || nodeState(d4, "n5").Powered {
		t.Errorf("single power-off resumed: %s %s calls %v", j.Status, opResult(j, 0), b4.calls())
	}

	// Power-cycle cannot be repeated blindly.
	b3 := newBMC(t)
	d3, _ := oobCluster(t, b3)
	id = submit(t, d3, `{"OP_ID":"OP_OOB_COMMAND","command":"power-cycle","node_names":["n4"]}`)
	resumeAt(t, d3, &Executor{FSM: d3.f, Apply: d3, OOB: b3.runner(), Sleep: noSleep}, id, 1)
	j = finished(t, d3, id)
	if j.Status != fsm.StatusError || !strings.Contains(opResult(j, 0), "step 2 (power-cycle n4) may have been in progress under the previous leader") {
		t.Errorf("cycle resumed: %s %s", j.Status, opResult(j, 0))
	}
	if len(b3.calls()) != 0 {
		t.Errorf("helper ran: %v", b3.calls())
	}
}

// fakeLeadership hands the master role over the way Raft would: the new
// leader records itself (a new epoch, fencing the old executor), the old
// executor is stopped, and a new one resumes the jobs.
type fakeLeadership struct {
	t      *testing.T
	d      *direct
	old    func() *runningExecutor
	mu     sync.Mutex
	to     []string
	newEx  *runningExecutor
	newCfg func(epoch uint64) *Executor
}

func (l *fakeLeadership) Transfer(ctx context.Context, to []string) (string, error) {
	l.mu.Lock()
	l.to = to
	l.mu.Unlock()
	r, _, _ := l.d.Apply(ctx, fsm.LeaderEstablish{Now: 10, Node: to[0]})
	if r.Err != nil {
		return "", r.Err
	}
	go func() {
		l.old().cancel()
		l.mu.Lock()
		l.newEx = startExecutor(l.t, l.newCfg(r.Epoch))
		l.mu.Unlock()
	}()
	return to[0], nil
}

// TestOOBMasterPowerOff: powering off the master's node hands its role to
// another candidate; the next leader marks the old master offline and
// powers it off.
func TestOOBMasterPowerOff(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	var first *runningExecutor
	l := &fakeLeadership{t: t, d: d, old: func() *runningExecutor { return first }}
	l.newCfg = func(epoch uint64) *Executor {
		return &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep, Leadership: l}
	}
	first = startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep, Leadership: l})
	// The master together with n4; n2 and n3 may take over.
	id := submit(t, d, `{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n4","offline":true}`,
		`{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n1","n4"],"transfer_leadership":true}`)
	j := finished(t, d, id)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s %s\n%s", j.Status, opResult(j, 1), jobLog(j))
	}
	l.mu.Lock()
	if fmt.Sprint(l.to) != "[n2 n3]" {
		t.Errorf("handed over to one of %v", l.to)
	}
	l.mu.Unlock()
	n1 := nodeState(d, "n1")
	if n1.Powered || !n1.Offline || b.power("n1") != "off" || b.power("n4") != "off" {
		t.Errorf("n1 powered %v offline %v, bmc n1 %s n4 %s", n1.Powered, n1.Offline, b.power("n1"), b.power("n4"))
	}
	var names []string
	var epochs []uint64
	for _, s := range j.Ops[1].Steps {
		names = append(names, s.Name)
		epochs = append(epochs, s.Epoch)
	}
	if strings.Join(names, ",") != "check nodes,power-off n4,hand over the master role of n1,mark n1 offline,power-off n1" || epochs[1] != epoch || epochs[2] == epoch {
		t.Errorf("steps %v by epochs %v", names, epochs)
	}
	if opResult(j, 1) != `[[[0,"n4"],[0,null]],[[0,"n1"],[0,null]]]` {
		t.Errorf("result %s", opResult(j, 1))
	}
	if log := jobLog(j); !strings.Contains(log, "The master role moved from n1 to n2") || !strings.Contains(log, "Marked node n1 offline") {
		t.Errorf("log:\n%s", log)
	}
}

// TestOOBMasterNoCandidate: with no other candidate up, the master's node
// is refused.
func TestOOBMasterNoCandidate(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep})
	j := finished(t, d, submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-cycle","node_names":["n1","n2","n3"],"transfer_leadership":true}`))
	if j.Status != fsm.StatusError || !strings.Contains(opResult(j, 0), "no other master candidate stays up to take over the master role of n1") {
		t.Errorf("%s %s", j.Status, opResult(j, 0))
	}
}

// TestProgramMatchesFSM keeps oob.Program (used to run helpers) and
// fsm.State.OOBProgram (used by the state machine's checks) equal.
func TestProgramMatchesFSM(t *testing.T) {
	b := newBMC(t)
	for _, c := range []struct{ cluster, group, node string }{
		{"", "", ""}, {"/c", "", ""}, {"/c", "/g", ""}, {"/c", "/g", "/n"}, {"/c", "!", ""}, {"/c", "!", "/n"},
		{"/c", "", "!"}, {"", "", "/n"}, {"/c", "default", "default"}, {"/c", "/g", "!"},
	} {
		d, _ := oobCluster(t, b)
		var ops []string
		if c.cluster != "" {
			ops = append(ops, fmt.Sprintf(`{"OP_ID":"OP_CLUSTER_SET_PARAMS","ndparams":{"oob_program":%q}}`, c.cluster))
		} else {
			ops = append(ops, `{"OP_ID":"OP_CLUSTER_SET_PARAMS","ndparams":{"oob_program":""}}`)
		}
		if c.group != "" {
			ops = append(ops, fmt.Sprintf(`{"OP_ID":"OP_GROUP_SET_PARAMS","group_name":"default","ndparams":{"oob_program":%q}}`, c.group))
		}
		if c.node != "" {
			ops = append(ops, fmt.Sprintf(`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n2","ndparams":{"oob_program":%q}}`, c.node))
		}
		if j := finished(t, d, submit(t, d, ops...)); j.Status != fsm.StatusSuccess {
			t.Fatalf("%v: %s", c, opResult(j, 0))
		}
		d.f.Read(func(s *fsm.State, _ uint64) {
			n := s.LookupNode("n2")
			p, ok := programOf(s, n)
			if f := s.OOBProgram(n); f != p || ok != (f != "") {
				t.Errorf("%v: fsm %q, oob %q %v", c, f, p, ok)
			}
		})
	}
}

// TestOOBPowerStatusDoesNotBlockPowerOff: a power-status of n5 whose
// helper blocks until the test releases it holds n5's lock only, so gnt
// node power off's job for n4 (offline, then power-off) runs and finishes
// meanwhile; the status then finishes when released. Before node flag
// changes locked only their node, the power-off waited for every node.
func TestOOBPowerStatusDoesNotBlockPowerOff(t *testing.T) {
	b := newBMC(t)
	d, epoch := oobCluster(t, b)
	b.set(t, "n5.power-status.sh", `touch $D/n5.status.started
while [ ! -f $D/release ]; do sleep 0.02; done
`)
	startExecutor(t, &Executor{FSM: d.f, Apply: d, OOB: b.runner(), Epoch: epoch, Sleep: noSleep})
	status := submit(t, d, `{"OP_ID":"OP_OOB_COMMAND","command":"power-status","node_names":["n5"]}`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(b.dir, "n5.status.started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the power-status helper of n5 did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	off := finished(t, d, submit(t, d, `{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n4","offline":true}`,
		`{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["n4"]}`))
	if off.Status != fsm.StatusSuccess || b.power("n4") != "off" {
		t.Fatalf("power off of n4: %s %s\n%s", off.Status, opResult(off, 1), jobLog(off))
	}
	if j := readJobCopy(d, status); fsm.Finalized(j.Status) {
		t.Fatalf("the power-status of n5 ended (%s) before it was released", j.Status)
	}
	b.set(t, "release", "")
	if j := finished(t, d, status); j.Status != fsm.StatusSuccess {
		t.Fatalf("power-status of n5: %s %s", j.Status, opResult(j, 0))
	}
}
