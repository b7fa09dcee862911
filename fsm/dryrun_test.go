package fsm

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestDryRunInTheStateMachine: a dry-run configuration opcode leaves the
// configuration as it was, on the fast path and when queued (applied
// alone by the executor, here a job that mixes a dry run with a real
// opcode); its result says what it would have done; and a job update
// carrying configuration changes for a dry-run opcode is refused.
func TestDryRunInTheStateMachine(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	epoch := h.apply(LeaderEstablish{Now: h.now, Node: "n1", LogVersion: LogVersion}).(Response).Epoch
	tags := func() []string {
		var out []string
		h.f.Read(func(s *State, _ uint64) { out = slices.Clone(s.Cluster.Tags) })
		return out
	}
	submit := func(ops ...string) Response {
		t.Helper()
		r := h.submit(ops...)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}

	// The fast path: applied at once, nothing kept.
	r := submit(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"],"dry_run":true}`)
	if r.Job.Status != StatusSuccess || len(tags()) != 0 {
		t.Fatalf("fast dry run: %s, tags %v", r.Job.Status, tags())
	}
	if got := string(r.Job.Ops[0].Result); got != `{"dry_run":true,"would":["apply TAGS_SET(cluster)"]}` {
		t.Errorf("fast dry-run result %s", got)
	}

	// A job mixing a dry run and a real opcode is queued; each is
	// applied as it says.
	r = submit(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["b"],"dry_run":true}`, `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["c"]}`)
	if r.Job.Status != StatusQueued {
		t.Fatalf("mixed job: %s, want queued", r.Job.Status)
	}
	for k := 0; k < 2; k++ {
		if u := h.apply(JobUpdate{Now: h.now, Epoch: epoch, JobID: r.JobID, OpIndex: k, Action: ActionApply}).(Response); u.Err != nil {
			t.Fatal(u.Err)
		}
	}
	if got := tags(); !slices.Equal(got, []string{"c"}) {
		t.Errorf("after the mixed job: tags %v, want [c]", got)
	}

	// An executor opcode's dry run may record steps, never changes.
	r = submit(`{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2,"dry_run":true}`)
	if u := h.apply(JobUpdate{Now: h.now, Epoch: epoch, JobID: r.JobID, Action: ActionStart}).(Response); u.Err != nil {
		t.Fatal(u.Err)
	}
	u := h.apply(JobUpdate{Now: h.now, Epoch: epoch, JobID: r.JobID, Action: ActionStep, StepName: "delay 1/2",
		Changes: []StepChange{{InstanceRemove: &InstanceRemove{UUID: "x"}}}}).(Response)
	if u.Err == nil || u.Err.Code != CodeInval || u.Err.Field != "changes" {
		t.Errorf("changes on a dry run: %v", u.Err)
	}
	if u := h.apply(JobUpdate{Now: h.now, Epoch: epoch, JobID: r.JobID, Action: ActionStep, StepName: "delay 1/2"}).(Response); u.Err != nil {
		t.Errorf("a dry run's step record: %v", u.Err)
	}
}

// submit applies a JobSubmit of ops, each with no UUID.
func (h *harness) submit(ops ...string) Response {
	c := JobSubmit{Now: h.now}
	for _, o := range ops {
		c.Ops = append(c.Ops, json.RawMessage(o))
		c.UUIDs = append(c.UUIDs, "")
	}
	return h.apply(c).(Response)
}

// TestRefusedDryRunBothPaths: a dry run the checks refuse is refused at
// submission (nothing queued, the job ids stay) both on the fast path and
// when it would wait in the queue (here behind a filter rule), alone or in
// a submission of several jobs; one that passes is queued. A dry run with
// a dependency is not checked at submission.
func TestRefusedDryRunBothPaths(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	refused := `{"OP_ID":"OP_TAGS_SET","kind":"node","name":"nosuch","tags":["a"],"dry_run":true}`
	good := `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"],"dry_run":true}`
	nextID := func() int64 {
		var id int64
		h.f.Read(func(s *State, _ uint64) { id = s.NextJobID })
		return id
	}
	checkRefused := func(path string, r Response, before int64) {
		t.Helper()
		if r.Err == nil || r.Err.Code != CodeNoEnt {
			t.Errorf("%s: a dry run on a missing node answered %+v, want a %s error", path, r, CodeNoEnt)
		}
		if got := nextID(); got != before {
			t.Errorf("%s: the next job id moved from %d to %d", path, before, got)
		}
	}
	before := nextID()
	fast := h.submit(refused)
	checkRefused("fast path", fast, before)

	// A PAUSE rule holds every job in the queue.
	if r := h.apply(FilterPut{Now: h.now, UUID: filterA, Action: FilterPause, Predicates: json.RawMessage(`[]`)}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	queued := h.submit(refused)
	checkRefused("queued", queued, before)
	if queued.Err != nil && fast.Err != nil && queued.Err.Error() != fast.Err.Error() {
		t.Errorf("the queued refusal %q differs from the fast path's %q", queued.Err, fast.Err)
	}
	many := h.apply(JobSubmitMany{Now: h.now, Jobs: []JobSpec{
		{Ops: []json.RawMessage{json.RawMessage(good)}, UUIDs: []string{""}},
		{Ops: []json.RawMessage{json.RawMessage(refused)}, UUIDs: []string{""}},
	}}).(Response)
	checkRefused("several jobs", many, before)
	if many.Err != nil && !strings.Contains(many.Err.Msg, "job 1 of the submission") {
		t.Errorf("several jobs: %q does not name job 1", many.Err.Msg)
	}

	if r := h.submit(good); r.Err != nil || r.Job == nil || r.Job.Status != StatusQueued {
		t.Errorf("a dry run that passes behind a filter rule: %+v , want a queued job", r)
	}
	dep := `{"OP_ID":"OP_TAGS_SET","kind":"node","name":"nosuch","tags":["a"],"dry_run":true,"depends":[[` + fmt.Sprint(nextID()-1) + `,["success"]]]}`
	if r := h.submit(dep); r.Err != nil {
		t.Errorf("a dry run with a dependency is refused at submission: %v", r.Err)
	}
}
