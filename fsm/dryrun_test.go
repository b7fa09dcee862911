package fsm

import (
	"encoding/json"
	"slices"
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
		c := JobSubmit{Now: h.now}
		for _, o := range ops {
			c.Ops = append(c.Ops, json.RawMessage(o))
			c.UUIDs = append(c.UUIDs, "")
		}
		r := h.apply(c).(Response)
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
