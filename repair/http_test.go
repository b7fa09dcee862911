package repair

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// fsmApplier applies commands to a scenario's FSM as the leader would.
type fsmApplier struct{ sc *scenario }

func (a fsmApplier) Apply(_ context.Context, cmd fsm.Command) (fsm.Response, uint64, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Response{}, 0, err
	}
	a.sc.idx++
	r := a.sc.f.Apply(a.sc.idx, data).(fsm.Response)
	return r, a.sc.idx, nil
}

func httpScenario(t *testing.T) (*scenario, *Service, *httptest.Server) {
	t.Helper()
	sc := &scenario{}
	sc.build(t, `
node node1
node node21
instance web1 drbd node21 node1 tags=ganeti:watcher:autorepair:failover
maint {"incidents":[{"uuid":"inc-1","node":"node21","node_uuid":"uuid-node21","original":{"status":"live-repair","command":"fix"},"action":"live-repair","repair-status":"noted","jobs":[],"tag":"maintd:repairready:inc-1","serial_no":1,"ctime":1700000000,"mtime":1700000000},{"uuid":"inc-2","node":"node21","node_uuid":"uuid-node21","original":{"status":"evacuate"},"action":"evacuate","repair-status":"completed","jobs":[3],"tag":"maintd:repairready:inc-2","serial_no":1,"ctime":1700000000,"mtime":1700000000}],"jobs":[3],"evacuated":["web7"]}
`)
	svc := &Service{FSM: sc.f, Apply: fsmApplier{sc}, Epoch: 7, Clock: func() time.Time { return at(10) }}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return sc, svc, srv
}

func get(t *testing.T, url, accept string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestMaintdHTTP(t *testing.T) {
	_, _, srv := httpScenario(t)
	for _, c := range []struct {
		path, accept string
		status       int
		want         string
	}{
		{"/", "", 200, "[1]\n"},
		{"/", "application/json", 200, "[1]\n"},
		{"/", "application/json, text/html", 200, "[1]\n"},
		{"/1", "", 200, "null\n"},
		{"/1/jobs", "", 200, "[3]\n"},
		{"/1/evacuated", "", 200, "[\"web7\"]\n"},
		{"/2", "", 404, "not found"},
		{"/1/status/x", "", 404, "not found"},
	} {
		resp, body := get(t, srv.URL+c.path, c.accept)
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("GET %s (Accept %q): %d %q, want %d %q", c.path, c.accept, resp.StatusCode, body, c.status, c.want)
		}
		if resp.Header.Get(HeaderEpoch) != "7" {
			t.Errorf("GET %s: epoch header %q", c.path, resp.Header.Get(HeaderEpoch))
		}
	}
	// The incidents with Ganeti's keys.
	_, body := get(t, srv.URL+"/1/status", "")
	var list []map[string]any
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list) != 2 {
		t.Fatalf("/1/status: %v %s", err, body)
	}
	for _, k := range []string{"uuid", "node", "original", "action", "repair-status", "jobs", "tag", "ctime", "mtime", "serial_no"} {
		if _, ok := list[0][k]; !ok {
			t.Errorf("/1/status: incident lacks %q: %v", k, list[0])
		}
	}
	// A browser gets the page.
	resp, page := get(t, srv.URL+"/", "text/html,application/xhtml+xml")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(page, "inc-1") ||
		!strings.Contains(page, `http-equiv="refresh"`) || !strings.Contains(page, "node21") {
		t.Errorf("page: %s\n%s", resp.Header.Get("Content-Type"), page)
	}
	// The plan.
	_, body = get(t, srv.URL+"/1/plan", "")
	var p RoundPlan
	if err := json.Unmarshal([]byte(body), &p); err != nil || len(p.Nodes) != 2 {
		t.Fatalf("/1/plan: %v %s", err, body)
	}
}

func TestMaintdCancel(t *testing.T) {
	sc, _, srv := httpScenario(t)
	post := func(path string) (int, string) {
		resp, err := http.Post(srv.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	before := sc.f.Hash()
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{"/1/cancel/nope", 404, "no incident"},
		{"/1/cancel/inc-2", 409, "completed already"},
		{"/1/cancel/", 404, "not found"},
	} {
		if st, body := post(c.path); st != c.status || !strings.Contains(body, c.want) {
			t.Errorf("POST %s: %d %s, want %d %q", c.path, st, body, c.status, c.want)
		}
	}
	if sc.f.Hash() != before {
		t.Fatal("refused cancels changed the state")
	}
	if st, body := post("/1/cancel/inc-1"); st != 200 {
		t.Fatalf("cancel: %d %s", st, body)
	}
	sc.f.Read(func(st *fsm.State, _ uint64) {
		if in := st.Maint().Incident("inc-1"); in == nil || in.RepairStatus != fsm.IncidentCanceled {
			t.Fatalf("after cancel: %+v", in)
		}
	})
	// A GET is no cancel.
	if resp, _ := get(t, srv.URL+"/1/cancel/inc-1", ""); resp.StatusCode != 404 && resp.StatusCode != 405 {
		t.Errorf("GET /1/cancel: %d", resp.StatusCode)
	}
}

// failingApplier refuses every command as a deposed leader's would be.
type failingApplier struct{ err *fsm.Error }

func (a failingApplier) Apply(context.Context, fsm.Command) (fsm.Response, uint64, error) {
	return fsm.Response{Err: a.err}, 0, nil
}

// TestServiceFenced: a round refused for a newer epoch ends the service
// with ErrFenced; one refused otherwise does not.
func TestServiceFenced(t *testing.T) {
	sc := &scenario{}
	sc.build(t, "node node1\nnode node21\n")
	sc.obs = nil
	diag := func() map[string]Observation {
		return map[string]Observation{"node21": {Node: "node21", Status: fsm.ActionLiveRepair, Command: "x", Original: json.RawMessage(`{"command":"x","status":"live-repair"}`)}}
	}
	svc := &Service{FSM: sc.f, Apply: failingApplier{&fsm.Error{Code: fsm.CodeFenced, Msg: "epoch"}}, Epoch: 1, Diagnose: diag}
	if err := svc.step(t.Context()); !errors.Is(err, fsm.ErrFenced) {
		t.Fatalf("fenced round: %v", err)
	}
	svc.Apply = failingApplier{&fsm.Error{Code: fsm.CodeInval, Msg: "bad"}}
	if err := svc.step(t.Context()); err != nil {
		t.Fatalf("refused round: %v", err)
	}
	// Without quorum nothing is applied at all.
	svc.Apply = failingApplier{&fsm.Error{Code: fsm.CodeFenced, Msg: "must not be called"}}
	svc.Quorum = func(context.Context) error { return errors.New("no majority") }
	if err := svc.step(t.Context()); err != nil {
		t.Fatalf("no quorum: %v", err)
	}
	if last, _, _, _ := svc.Last(); last == nil || last.NoQuorum == "" {
		t.Fatalf("no quorum not reported: %+v", last)
	}
}

// TestServiceRefusedRoundShown: a round the state refuses for a reason
// the planner did not foresee is shown, with why, in the plan and on the
// page, until a round is recorded.
func TestServiceRefusedRoundShown(t *testing.T) {
	sc := &scenario{}
	sc.build(t, "node node1\nnode node21\n")
	diag := func() map[string]Observation {
		return map[string]Observation{"node21": {Node: "node21", Status: fsm.ActionLiveRepair, Command: "x", Original: json.RawMessage(`{"command":"x","status":"live-repair"}`)}}
	}
	svc := &Service{FSM: sc.f, Apply: failingApplier{&fsm.Error{Code: fsm.CodeState, Msg: "too many tags on node node21"}}, Epoch: 1, Diagnose: diag,
		Clock: func() time.Time { return at(10) }}
	if err := svc.step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p := svc.Plan(t.Context()); !strings.Contains(p.Refused, "too many tags on node node21") {
		t.Fatalf("plan's refused %q", p.Refused)
	}
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	if _, page := get(t, srv.URL+"/", "text/html"); !strings.Contains(page, "too many tags on node node21") {
		t.Fatalf("the page does not show the refusal:\n%s", page)
	}
	svc.Apply = fsmApplier{sc}
	if err := svc.step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p := svc.Plan(t.Context()); p.Refused != "" {
		t.Fatalf("refusal still shown after a recorded round: %q", p.Refused)
	}
}

// TestFailureExplained: a failed incident carries its failed job's error
// and the operator's next step in /1/status (gnt_next_step) and on the
// page, which marks it, links its job to /1/jobs/ID and shows node roles.
func TestFailureExplained(t *testing.T) {
	sc := &scenario{}
	sc.build(t, `
node node1 candidate
node node21
job 4 error
maint {"incidents":[{"uuid":"inc-9","node":"node21","node_uuid":"uuid-node21","original":{"status":"evacuate"},"action":"evacuate","repair-status":"pending","jobs":[4],"tag":"maintd:repairready:inc-9","serial_no":1,"ctime":1700000000,"mtime":1700000000}],"jobs":[4]}
`)
	sc.edit(t, "job", func(map[string]any) bool { return true }, func(v map[string]any) {
		for _, op := range v["ops"].([]any) {
			op.(map[string]any)["result"] = []any{"OpPrereqError", []any{"not enough master candidates", "wrong_state"}}
		}
	})
	svc := &Service{FSM: sc.f, Apply: fsmApplier{sc}, Epoch: 1, Clock: func() time.Time { return at(10) }}
	if err := svc.step(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	_, body := get(t, srv.URL+"/1/status", "")
	var list []IncidentStatus
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list) != 1 {
		t.Fatalf("/1/status: %v %s", err, body)
	}
	in := list[0]
	if in.RepairStatus != fsm.IncidentFailed || in.Reason != "job 4 failed: OpPrereqError: not enough master candidates" {
		t.Errorf("incident: %s, %q; want failed with the job's error", in.RepairStatus, in.Reason)
	}
	if !strings.Contains(in.NextStep, "gnt node remove-tags node21 maintd:repairfailed:inc-9") || !strings.Contains(in.NextStep, "gnt maint forget inc-9") {
		t.Errorf("next step %q: want the tag to remove and the forget command", in.NextStep)
	}
	_, page := get(t, srv.URL+"/", "text/html")
	for _, want := range []string{`<tr class="failed">`, `<a href="/1/jobs/4" class="bad">4</a>`, "not enough master candidates",
		"gnt node remove-tags node21 maintd:repairfailed:inc-9", "<td>master</td>", "<td>regular</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{"/1/jobs/4", 200, `"status":"error"`},
		{"/1/jobs/5", 404, "no job 5"},
		{"/1/jobs/x", 400, "positive integer"},
		{"/1/jobs/-1", 400, "positive integer"},
	} {
		if resp, body := get(t, srv.URL+c.path, ""); resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %s, want %d %q", c.path, resp.StatusCode, body, c.status, c.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{`"plain message"`, "plain message"},
		{`["OpPrereqError",["no such node","wrong_input"]]`, "OpPrereqError: no such node"},
		{`["OpExecError",["disk failed"]]`, "OpExecError: disk failed"},
		{`["OpExecError","disk failed"]`, "OpExecError: disk failed"},
		{`["OpExecError",[]]`, `["OpExecError",[]]`},
		{`{"x":1}`, `{"x":1}`},
		{`["OpPrereqError",["cut`, `["OpPrereqError",["cut`},
		{` `, ""},
	} {
		if got := errorText([]byte(c.raw)); got != c.want {
			t.Errorf("errorText(%s) = %q, want %q", c.raw, got, c.want)
		}
	}
}

func TestNextStep(t *testing.T) {
	for _, c := range []struct {
		status, tag, want string
	}{
		{fsm.IncidentNoted, "maintd:repairready:i", "gnt maint cancel i"},
		{fsm.IncidentPending, "maintd:repairready:i", "gnt maint cancel i"},
		{fsm.IncidentFailed, "maintd:repairfailed:i", "gnt node remove-tags n maintd:repairfailed:i"},
		{fsm.IncidentFailed, "maintd:repairready:i", "gnt maint forget i"}, // failed without its tag (no room)
		{fsm.IncidentCompleted, "maintd:repairready:i", "gnt node remove-tags n maintd:repairready:i"},
		{fsm.IncidentCanceled, "maintd:repairready:i", "gnt maint forget i"},
	} {
		if got := NextStep(&fsm.Incident{UUID: "i", Node: "n", RepairStatus: c.status, Tag: c.tag}); !strings.Contains(got, c.want) {
			t.Errorf("%s with tag %s: %q, want it to contain %q", c.status, c.tag, got, c.want)
		}
	}
}

// TestServicePlansOnlyOnChange: a tick whose inputs (the state's index,
// the self-diagnose results, quorum) are those of the last plan plans
// nothing until the plan's wake time (here a dead node's grace period
// running out) or IdleReplan; a change of any input plans at once.
func TestServicePlansOnlyOnChange(t *testing.T) {
	sc := &scenario{}
	sc.build(t, `
cluster tags=ganeti:watcher:autorepair:failover oob=/usr/bin/oob
node node21 dead=100
node node22
node node23
instance web1 drbd node21 node22
`)
	sc.f.Read(func(_ *fsm.State, index uint64) { sc.idx = max(sc.idx, index) }) // records go after the built state
	now := at(155)
	obs := map[string]Observation{}
	svc := &Service{FSM: sc.f, Apply: fsmApplier{sc}, Epoch: 1, Clock: func() time.Time { return now },
		Diagnose: func() map[string]Observation { return obs }}
	step := func() bool {
		t.Helper()
		before, _, _, _ := svc.Last()
		if err := svc.step(t.Context()); err != nil {
			t.Fatal(err)
		}
		after, _, _, _ := svc.Last()
		return after != before // each plan is a new one
	}
	planned := func(what string, want bool) {
		t.Helper()
		if got := step(); got != want {
			t.Errorf("%s: planned %v, want %v", what, got, want)
		}
	}
	// settle ticks until a tick plans nothing (each record changes the
	// state, which the next tick plans from), and says how many planned.
	settle := func(what string) int {
		t.Helper()
		for k := 0; k < 10; k++ {
			if !step() {
				return k
			}
		}
		t.Fatalf("%s: still planning after 10 ticks", what)
		return 0
	}
	planned("the first tick", true)
	settle("the first tick")
	now = at(156)
	planned("nothing changed", false)
	now = at(159)
	planned("nothing changed, before the grace runs out", false)
	now = at(160) // node21 died at 100; the grace is 60 s
	planned("the grace ran out", true)
	if last, _, _, _ := svc.Last(); !last.Urgent {
		t.Errorf("the plan when the grace ran out is not urgent: %v", last.Notes)
	}
	if n := settle("after the grace"); n == 0 {
		t.Error("the round recorded when the grace ran out changed nothing: no tick planned after it")
	}
	now = now.Add(time.Second)
	planned("nothing changed after the round", false)
	obs = map[string]Observation{"node22": {Node: "node22", Time: now, Status: fsm.ActionOk, Original: json.RawMessage(`{"status":"Ok"}`)}}
	planned("a new self-diagnose result", true)
	settle("the new result")
	now = now.Add(IdleReplan)
	planned("IdleReplan later", true)
}

// TestHarepFailureInStatus: a failed harep repair is listed in /1/status
// after the incidents, in their shape, with gnt_kind "harep", the failed
// job's error and the operator's next step.
func TestHarepFailureInStatus(t *testing.T) {
	sc := &scenario{}
	sc.build(t, `
node node1
node node21 offline=true
instance web1 drbd node21 node1 tags=ganeti:watcher:autorepair:failover,ganeti:watcher:autorepair:pending:failover:R2:1700000005:4
job 4 error
`)
	sc.edit(t, "job", func(map[string]any) bool { return true }, func(v map[string]any) {
		for _, op := range v["ops"].([]any) {
			op.(map[string]any)["result"] = []any{"OpExecError", []any{"could not start web1 on node1"}}
		}
	})
	svc := &Service{FSM: sc.f, Apply: fsmApplier{sc}, Epoch: 1, Clock: func() time.Time { return at(10) }}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	for round := 0; round < 2; round++ { // the round that sees the failure, then the state as recorded
		_, body := get(t, srv.URL+"/1/status", "")
		var list []HarepFailure
		if err := json.Unmarshal([]byte(body), &list); err != nil || len(list) != 1 {
			t.Fatalf("/1/status: %v %s", err, body)
		}
		f := list[0]
		if f.Kind != "harep" || f.Instance != "web1" || f.UUID != "R2" || f.Action != "harep:failover" || f.RepairStatus != fsm.IncidentFailed ||
			f.Node != "node21" || len(f.Jobs) != 1 || f.Jobs[0] != 4 || !strings.HasPrefix(f.Tag, "ganeti:watcher:autorepair:result:failover:R2:") || !strings.Contains(f.Tag, ":failure:") {
			t.Errorf("round %d: harep failure %+v", round, f)
		}
		if !strings.Contains(f.Error, "OpExecError: could not start web1 on node1") {
			t.Errorf("round %d: gnt_error %q, want the job's error", round, f.Error)
		}
		if !strings.Contains(f.NextStep, "gnt instance remove-tags web1 "+f.Tag) {
			t.Errorf("round %d: gnt_next_step %q, want the failure tag to remove", round, f.NextStep)
		}
		if err := svc.step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
