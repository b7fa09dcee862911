package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// fakeDiagnoseClient answers each node's poll with what the test set.
type fakeDiagnoseClient struct {
	mu       sync.Mutex
	answer   map[string]func(command string) (rpc.SignedDiagnoseReport, error)
	asked    []string
	commands []string
}

func (c *fakeDiagnoseClient) Diagnose(_ context.Context, node *fsm.Node, command string) (rpc.SignedDiagnoseReport, error) {
	c.mu.Lock()
	c.asked = append(c.asked, node.Name)
	c.commands = append(c.commands, command)
	f := c.answer[node.Name]
	c.mu.Unlock()
	if f == nil {
		return rpc.SignedDiagnoseReport{}, errors.New("connection refused")
	}
	return f(command)
}

func (c *fakeDiagnoseClient) set(node string, f func(string) (rpc.SignedDiagnoseReport, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answer == nil {
		c.answer = map[string]func(string) (rpc.SignedDiagnoseReport, error){}
	}
	c.answer[node] = f
}

func (c *fakeDiagnoseClient) reset() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.asked
	c.asked = nil
	return a
}

// reportOf is a report node signs with key, collected at at.
func reportOf(t *testing.T, node, data string, at time.Time, key []byte) func(string) (rpc.SignedDiagnoseReport, error) {
	t.Helper()
	r, err := rpc.NewDiagnoseReport(node, at, json.RawMessage(data))
	if err != nil {
		t.Fatal(err)
	}
	r = r.Sign(key)
	return func(string) (rpc.SignedDiagnoseReport, error) { return r, nil }
}

func counters(s *diagnoseState) (polls, rejected map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	polls, rejected = map[string]uint64{}, map[string]uint64{}
	for k, v := range s.polls {
		polls[k] = v
	}
	for k, v := range s.rejected {
		rejected[k] = v
	}
	return polls, rejected
}

// TestDiagnosePollerVerifies: one round polls every node that is not
// offline with the cluster's command, keeps verified results and rejects
// the rest by reason, keeping a node's last verified result.
func TestDiagnosePollerVerifies(t *testing.T) {
	f, a := livenessCluster(t)
	r, _, _ := a.Apply(context.Background(), fsm.JobSubmit{Now: t0.UnixNano(), UUIDs: []string{""},
		Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"node3","offline":true,"force":true}`)}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	now := t0.Add(time.Hour)
	client := &fakeDiagnoseClient{}
	var logs strings.Builder
	state := &diagnoseState{}
	p := &diagnosePoller{FSM: f, Client: client, Key: func() []byte { return testReportKey }, Command: func() string { return "check-hw" },
		MaxAge: time.Minute, State: state, Clock: func() time.Time { return now },
		Log: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})}

	client.set("node1", reportOf(t, "node1", `{"status":"evacuate","details":{"disk":"sdb"}}`, now.Add(-time.Second), testReportKey))
	client.set("node2", reportOf(t, "node2", `{"status":"Ok"}`, now, testReportKey))
	p.round(context.Background(), time.Minute)
	if asked := client.reset(); strings.Join(asked, ",") != "node1,node2" && strings.Join(asked, ",") != "node2,node1" {
		t.Fatalf("asked %v (node3 is offline)", asked)
	}
	if client.commands[0] != "check-hw" {
		t.Fatalf("command %q", client.commands[0])
	}
	res := state.latest()
	n1 := res["node1"]
	if len(res) != 2 || n1.Status != "evacuate" || string(n1.Raw) != `{"details":{"disk":"sdb"},"status":"evacuate"}` ||
		string(n1.Details) != `{"disk":"sdb"}` || !n1.Time.Equal(now.Add(-time.Second)) || !n1.Received.Equal(now) {
		t.Fatalf("results %+v", res)
	}

	// Each rejection, on node2, by its reason; node2 keeps its last result.
	otherKey := rpc.DiagnoseKey([]byte("another cluster"))
	for _, tc := range []struct {
		reason string
		answer func(string) (rpc.SignedDiagnoseReport, error)
	}{
		{"forged", reportOf(t, "node2", `{"status":"evacuate"}`, now, otherKey)},
		{"unsigned", reportOf(t, "node2", `{"status":"evacuate"}`, now, nil)},
		{"wrong_node", reportOf(t, "node1", `{"status":"evacuate"}`, now, testReportKey)},
		{"stale", reportOf(t, "node2", `{"status":"evacuate"}`, now.Add(-time.Minute-time.Second), testReportKey)},
		{"future", reportOf(t, "node2", `{"status":"evacuate"}`, now.Add(rpc.MaxClockSkew+time.Second), testReportKey)},
		{"malformed", reportOf(t, "node2", `{"status":"reboot"}`, now, testReportKey)},
		{"malformed", reportOf(t, "node2", `{"status":"evacuate","command":7}`, now, testReportKey)},
	} {
		client.set("node2", tc.answer)
		_, before := counters(state)
		p.round(context.Background(), time.Minute)
		_, after := counters(state)
		if after[tc.reason] != before[tc.reason]+1 {
			t.Errorf("%s: rejected %v -> %v", tc.reason, before, after)
		}
		if r := state.latest()["node2"]; r.Status != "Ok" {
			t.Errorf("%s: node2's result became %+v", tc.reason, r)
		}
	}
	client.set("node2", nil) // no answer
	p.round(context.Background(), time.Minute)
	polls, rejected := counters(state)
	if polls[diagnoseVerified] != 2+7+1 || polls[diagnoseRejected] != 7 || polls[diagnoseFailed] != 1 || rejected["malformed"] != 2 {
		t.Errorf("polls %v, rejected %v", polls, rejected)
	}
	// Logged once per node and reason within diagnoseLogEvery.
	p.round(context.Background(), time.Minute)
	if n := strings.Count(logs.String(), "self-diagnose poll failed"); n != 1 {
		t.Errorf("the failed poll was logged %d times:\n%s", n, logs.String())
	}
	for _, reason := range []string{"forged", "unsigned", "wrong_node", "stale", "future", "malformed"} {
		if !strings.Contains(logs.String(), "reason="+reason) {
			t.Errorf("rejection %s not logged", reason)
		}
	}
	if strings.Count(logs.String(), "reason=malformed") != 1 {
		t.Errorf("malformed logged more than once:\n%s", logs.String())
	}

	// A node removed from the cluster loses its result; without a key no
	// node is polled.
	r, _, _ = a.Apply(context.Background(), fsm.JobSubmit{Now: t0.UnixNano(), UUIDs: []string{""},
		Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_NODE_REMOVE","node_name":"node2"}`)}})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	p.round(context.Background(), time.Minute)
	if res := state.latest(); len(res) != 1 || res["node1"].Status != "evacuate" {
		t.Errorf("after removing node2: %+v", res)
	}
	client.reset()
	p.Key = func() []byte { return nil }
	p.round(context.Background(), time.Minute)
	if asked := client.reset(); len(asked) != 0 || !strings.Contains(logs.String(), "no cluster key") {
		t.Errorf("polled %v without a key", asked)
	}
}

// TestDiagnosePollerConcurrency: polls run at most Concurrency at a time,
// and a round waits for all of them.
func TestDiagnosePollerConcurrency(t *testing.T) {
	f := fsm.New()
	a := &fsmApplier{f: f}
	a.Apply(context.Background(), fsm.ClusterInit{Now: t0.UnixNano(), Name: "c", UUID: "cu", GroupUUID: "gu",
		Node: fsm.NodeSpec{Name: "node1", UUID: "u1", PrimaryIP: "192.0.2.1"}})
	var ops []json.RawMessage
	var uuids []string
	for i := 2; i <= 12; i++ {
		ops = append(ops, json.RawMessage(fmt.Sprintf(`{"OP_ID":"OP_NODE_ADD","node_name":"node%d","primary_ip":"192.0.2.%d"}`, i, i)))
		uuids = append(uuids, fmt.Sprintf("u%d", i))
	}
	if r, _, _ := a.Apply(context.Background(), fsm.JobSubmit{Now: t0.UnixNano(), Ops: ops, UUIDs: uuids}); r.Err != nil {
		t.Fatal(r.Err)
	}
	var mu sync.Mutex
	running, most := 0, 0
	client := &fakeDiagnoseClient{}
	for i := 1; i <= 12; i++ {
		name := fmt.Sprintf("node%d", i)
		rep := reportOf(t, name, `{"status":"Ok"}`, time.Now(), testReportKey)
		client.set(name, func(c string) (rpc.SignedDiagnoseReport, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return rep(c)
		})
	}
	state := &diagnoseState{}
	p := &diagnosePoller{FSM: f, Client: client, Key: func() []byte { return testReportKey }, Concurrency: 3, State: state,
		Log: hclog.NewNullLogger(), Clock: time.Now}
	p.round(context.Background(), time.Minute)
	if most != 3 || running != 0 || len(state.latest()) != 12 {
		t.Fatalf("at most %d at once, %d still running, results %d", most, running, len(state.results))
	}
}

// TestDiagnoseMetrics: the counters and the nodes' statuses are in the
// server's registry.
func TestDiagnoseMetrics(t *testing.T) {
	s := &Server{}
	s.diag.polls = map[string]uint64{diagnoseVerified: 5, diagnoseRejected: 2}
	s.diag.rejected = map[string]uint64{"forged": 2}
	s.diag.results = map[string]DiagnoseResult{"node1": {Status: "evacuate"}, "node2": {Status: "Ok"}, "node3": {Status: "evacuate"}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(diagnoseCollector{s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = v
		}
	}
	for k, want := range map[string]float64{
		"gnt_diagnose_polls_total/verified": 5, "gnt_diagnose_polls_total/rejected": 2, "gnt_diagnose_polls_total/failed": 0,
		"gnt_diagnose_rejected_total/forged": 2, "gnt_diagnose_rejected_total/stale": 0,
		"gnt_diagnose_nodes/evacuate": 2, "gnt_diagnose_nodes/Ok": 1, "gnt_diagnose_nodes/live-repair": 0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

// TestDiagnoseServiceOverRPC: the leader service polls two real agents
// over loopback every interval with the configured command; a command
// whose output changes each run gives a new result each round; results
// are dropped when the service stops.
func TestDiagnoseServiceOverRPC(t *testing.T) {
	c1, dir1, _ := diagnoseAgent(t, "node21", time.Millisecond)
	c2, dir2, _ := diagnoseAgent(t, "node22", time.Millisecond)
	counter := filepath.Join(t.TempDir(), "count")
	writeCommand(t, dir1, "check-hw", fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s
echo '{"status":"live-repair","command":"reseat-dimm","details":{"dimm":"A1","seen":'$n'}}'`, counter))
	writeCommand(t, dir2, "check-hw", `echo '{"status":"Ok"}'`)

	f := fsm.New()
	a := &fsmApplier{f: f}
	must := func(c fsm.Command) {
		if r, _, err := a.Apply(context.Background(), c); err != nil || r.Err != nil {
			t.Fatalf("%T: %v %v", c, err, r.Err)
		}
	}
	must(fsm.ClusterInit{Now: t0.UnixNano(), Name: "c", UUID: "cu", GroupUUID: "gu", Node: fsm.NodeSpec{Name: "node21", UUID: "u21", PrimaryIP: "127.0.0.21"}})
	must(fsm.JobSubmit{Now: t0.UnixNano(), UUIDs: []string{"u22"},
		Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_NODE_ADD","node_name":"node22","primary_ip":"127.0.0.22"}`)}})
	for i, c := range []*rpc.NodeClient{c1, c2} {
		must(fsm.NodeRegister{Now: t0.UnixNano(), Node: fsm.NodeSpec{Name: c.Node, PrimaryIP: fmt.Sprintf("127.0.0.%d", 21+i), Addrs: fsm.Addrs{Agent: c.Addr}}})
	}
	leader := &Server{fsm: f, key: []byte(testClusterKey), log: hclog.NewNullLogger()}
	leader.tls.store = testIdentity(t, "leader")
	leader.nodes.s = leader
	var cmdMu sync.Mutex
	command := "check-hw"
	svc := leader.diagnoseService(func() time.Duration { return 50 * time.Millisecond }, func() string {
		cmdMu.Lock()
		defer cmdMu.Unlock()
		return command
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.run(ctx, 1) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	defer stop()

	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < 3 && time.Now().Before(deadline) {
		res := leader.DiagnoseResults()
		if r, ok := res["node21"]; ok {
			if r.Status != "live-repair" || r.Command != "reseat-dimm" || time.Since(r.Time) > 5*time.Second {
				t.Fatalf("node21: %+v", r)
			}
			seen[string(r.Raw)] = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(seen) < 3 {
		t.Fatalf("node21's changing result was seen as %d distinct results", len(seen))
	}
	if r := leader.DiagnoseResults()["node22"]; string(r.Raw) != `{"status":"Ok"}` {
		t.Fatalf("node22: %+v", r)
	}

	// The command is read each round: the built-in.
	cmdMu.Lock()
	command = ""
	cmdMu.Unlock()
	deadline = time.Now().Add(10 * time.Second)
	for string(leader.DiagnoseResults()["node21"].Raw) != `{"command":"","details":{},"status":"Ok"}` {
		if time.Now().After(deadline) {
			t.Fatalf("node21 after switching to the built-in: %+v", leader.DiagnoseResults()["node21"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if res := leader.DiagnoseResults(); len(res) != 0 {
		t.Fatalf("results after the service stopped: %+v", res)
	}
	if polls, rejected := counters(&leader.diag); polls[diagnoseVerified] < 4 || len(rejected) != 0 || polls[diagnoseRejected] != 0 {
		t.Fatalf("polls %v, rejected %v", polls, rejected)
	}
}

// TestDiagnoseSlowNodeHoldsNoOther: a node whose poll hangs (its gntd
// stopped, its command at its timeout) is not polled again meanwhile, and
// the other nodes' results keep coming: one node never stalls the
// observations maintd acts on for the others.
func TestDiagnoseSlowNodeHoldsNoOther(t *testing.T) {
	f, _ := livenessCluster(t)
	now := t0.Add(time.Hour)
	client := &fakeDiagnoseClient{}
	release := make(chan struct{})
	client.set("node1", func(string) (rpc.SignedDiagnoseReport, error) {
		<-release
		return rpc.SignedDiagnoseReport{}, errors.New("timed out")
	})
	state := &diagnoseState{}
	p := &diagnosePoller{FSM: f, Client: client, Key: func() []byte { return testReportKey },
		MaxAge: time.Minute, State: state, Clock: func() time.Time { return now }, Log: hclog.NewNullLogger()}
	waitStatus := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); state.latest()["node2"].Status != want; {
			if time.Now().After(deadline) {
				t.Fatalf("node2's result %+v, want %s, while node1 hangs", state.latest()["node2"], want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	client.set("node2", reportOf(t, "node2", `{"status":"Ok"}`, now.Add(-2*time.Second), testReportKey))
	p.start(context.Background(), time.Minute)
	waitStatus("Ok")
	client.set("node2", reportOf(t, "node2", `{"status":"live-repair","command":"reseat"}`, now.Add(-time.Second), testReportKey))
	p.start(context.Background(), time.Minute)
	waitStatus("live-repair")
	close(release)
	p.polls.Wait()
	n1 := 0
	for _, n := range client.reset() {
		if n == "node1" {
			n1++
		}
	}
	if n1 != 1 {
		t.Fatalf("node1 polled %d times while its first poll hung, want once", n1)
	}
}
