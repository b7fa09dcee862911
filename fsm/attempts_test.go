package fsm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// runGuard applies a scenario, events separated by spaces ("leader": a
// new leader's LeaderEstablish; "start", "attempt", "step": an executor
// record carrying the latest epoch; "start~1,2" and "attempt~1,2" name
// epochs 1 and 2 as survived; "cancel": an operator's cancel), to a
// fresh state holding one queued job of a four-step opcode. It returns
// the job, the error of the last record, if any, and the harness.
func runGuard(t *testing.T, events string) (*Job, *Error, *harness) {
	t.Helper()
	h := newHarness()
	h.initCluster("192.0.2.1")
	r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":4}`)}, UUIDs: []string{""}}).(Response)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	id := r.JobID
	var (
		epoch uint64
		steps int
		last  *Error
	)
	for _, ev := range strings.Fields(events) {
		var c Command
		ev, surv, _ := strings.Cut(ev, "~")
		var survived []uint64
		for _, e := range strings.Split(surv, ",") {
			if e != "" {
				n, err := strconv.ParseUint(e, 10, 64)
				if err != nil {
					t.Fatalf("event %q: %v", ev, err)
				}
				survived = append(survived, n)
			}
		}
		switch ev {
		case "leader":
			r := h.apply(LeaderEstablish{Now: h.now, Node: "n1", LogVersion: LogVersion}).(Response)
			epoch = r.Epoch
			continue
		case "start":
			c = JobUpdate{Now: h.now, Epoch: epoch, JobID: id, Action: ActionStart, Incarnation: fmt.Sprintf("inc%d", epoch), Survived: survived}
		case "attempt":
			c = JobUpdate{Now: h.now, Epoch: epoch, JobID: id, Action: ActionAttempt, Incarnation: fmt.Sprintf("inc%d", epoch), Survived: survived}
		case "step":
			c = JobUpdate{Now: h.now, Epoch: epoch, JobID: id, Action: ActionStep, Step: steps, StepName: "delay"}
			steps++
		case "cancel":
			c = JobCancel{Now: h.now, JobID: id}
		default:
			t.Fatalf("unknown event %q", ev)
		}
		last = h.apply(c).(Response).Err
	}
	var job *Job
	h.f.Read(func(s *State, _ uint64) { job = s.Jobs[id] })
	return job, last, h
}

func epochsOf(as []Attempt) []uint64 {
	var out []uint64
	for _, a := range as {
		out = append(out, a.Epoch)
	}
	return out
}

// TestPoisonGuard: the attempt accounting, event by event. Epoch 1 is
// the first "leader"; each later one adds one.
func TestPoisonGuard(t *testing.T) {
	for _, tc := range []struct {
		name     string
		events   string
		status   string
		attempts []uint64
		poison   []uint64
		err      Code // the last record's error code, if it is refused
	}{
		{name: "a start is the first attempt", events: "leader start", status: StatusRunning, attempts: []uint64{1}},
		{name: "a normal resume after one death still runs", events: "leader start leader attempt",
			status: StatusRunning, attempts: []uint64{1, 2}},
		{name: "two deaths in a row without progress fail the third attempt", events: "leader start leader attempt leader attempt",
			status: StatusError, attempts: []uint64{1, 2, 3}, poison: []uint64{1, 2}},
		{name: "progress between deaths resets the count", events: "leader start leader attempt step leader attempt leader attempt",
			status: StatusRunning, attempts: []uint64{1, 2, 3, 4}},
		{name: "after the reset two more deaths fail it", events: "leader start leader attempt step leader attempt leader attempt leader attempt",
			status: StatusError, attempts: []uint64{1, 2, 3, 4, 5}, poison: []uint64{3, 4}},
		{name: "progress under the first leader counts", events: "leader start step leader attempt leader attempt",
			status: StatusRunning, attempts: []uint64{1, 2, 3}},
		{name: "an epoch attempts once", events: "leader start attempt attempt leader attempt attempt",
			status: StatusRunning, attempts: []uint64{1, 2}},
		{name: "an epoch that did not attempt is no death", events: "leader start leader leader attempt",
			status: StatusRunning, attempts: []uint64{1, 3}},
		{name: "a cancel requested before the resume is carried out by the attempt", events: "leader start cancel leader attempt",
			status: StatusCanceled, attempts: []uint64{1}},
		{name: "a cancel beats the guard", events: "leader start leader attempt cancel leader attempt",
			status: StatusCanceled, attempts: []uint64{1, 2}},
		{name: "an opcode not started is not resumed", events: "leader attempt", status: StatusQueued, err: CodeState},
		{name: "leaders that stepped down and live on are no deaths", events: "leader start leader attempt leader attempt~1,2",
			status: StatusRunning, attempts: []uint64{1, 2, 3}},
		{name: "a survivor ends the row of deaths before it", events: "leader start leader attempt leader attempt~2",
			status: StatusRunning, attempts: []uint64{1, 2, 3}},
		{name: "a death after a survivor is one in a row", events: "leader start leader attempt leader attempt~1,2 leader attempt",
			status: StatusRunning, attempts: []uint64{1, 2, 3, 4}},
		{name: "two deaths after a survivor fail it", events: "leader start leader attempt leader attempt~1,2 leader attempt leader attempt",
			status: StatusError, attempts: []uint64{1, 2, 3, 4, 5}, poison: []uint64{3, 4}},
		{name: "a survivor before progress does not excuse the deaths since", events: "leader start step leader attempt leader attempt leader attempt~1",
			status: StatusError, attempts: []uint64{1, 2, 3, 4}, poison: []uint64{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err, _ := runGuard(t, tc.events)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("last record refused: %v", err)
			case tc.err != "" && (err == nil || err.Code != tc.err):
				t.Fatalf("last record: error %v, want code %s", err, tc.err)
			}
			if job.Status != tc.status {
				t.Errorf("status %s, want %s (log %v)", job.Status, tc.status, job.Ops[0].Log)
			}
			if got := epochsOf(job.Attempts); !reflect.DeepEqual(got, tc.attempts) {
				t.Errorf("attempts by epochs %v, want %v", got, tc.attempts)
			}
			if !reflect.DeepEqual(job.PoisonEpochs, tc.poison) {
				t.Errorf("poison epochs %v, want %v", job.PoisonEpochs, tc.poison)
			}
			if tc.poison != nil {
				want := PoisonMessage(tc.poison, tc.attempts[len(tc.attempts)-1])
				var res string
				if err := json.Unmarshal(job.Ops[0].Result, &res); err != nil || res != want {
					t.Errorf("result %s, want %q", job.Ops[0].Result, want)
				}
				if n := len(job.Ops[0].Log); n == 0 || job.Ops[0].Log[n-1].Msg != want {
					t.Errorf("log %v does not end with the guard's message", job.Ops[0].Log)
				}
			}
			if tc.status == StatusCanceled && len(job.Ops[0].Steps) != 0 {
				t.Errorf("steps recorded after the cancel: %v", job.Ops[0].Steps)
			}
		})
	}
}

// TestAttemptRecordsLeader: an attempt keeps the master node of its
// epoch and the incarnation its executor gave, the evidence a later
// executor checks (SuspectAttempts).
func TestAttemptRecordsLeader(t *testing.T) {
	job, _, _ := runGuard(t, "leader start leader attempt")
	for i, a := range job.Attempts {
		if a.Node != "n1" || a.Incarnation != fmt.Sprintf("inc%d", i+1) {
			t.Errorf("attempt %d: node %q, incarnation %q", i, a.Node, a.Incarnation)
		}
	}
	if got := epochsOf(job.SuspectAttempts(3)); !reflect.DeepEqual(got, []uint64{1, 2}) {
		t.Errorf("suspects of epoch 3: %v, want [1 2]", got)
	}
	if got := job.SuspectAttempts(2); got != nil {
		t.Errorf("epoch 2 attempted already, yet suspects %v", got)
	}
	job, _, _ = runGuard(t, "leader start leader attempt step")
	if got := job.SuspectAttempts(3); got != nil {
		t.Errorf("progress since the attempts, yet suspects %v", got)
	}
}

// TestSurvivalDeterministic: replicas applying the same records with the
// same survived epochs end in the same state; the survivors are part of
// that state (the records without them give another one) and a snapshot
// keeps them.
func TestSurvivalDeterministic(t *testing.T) {
	const events = "leader start leader attempt leader attempt~1,2 step leader attempt"
	job, _, a := runGuard(t, events)
	_, _, b := runGuard(t, events)
	if a.f.Hash() != b.f.Hash() {
		t.Error("the same records gave different states")
	}
	var survived []uint64
	for _, at := range job.Attempts {
		if at.Survived {
			survived = append(survived, at.Epoch)
		}
	}
	// The walk back from epoch 3's attempt stops at epoch 2, the first
	// survivor: epoch 1 is no longer in the row.
	if !reflect.DeepEqual(survived, []uint64{2}) {
		t.Fatalf("attempts marked survived: %v, want epoch 2", survived)
	}
	if _, _, c := runGuard(t, strings.ReplaceAll(events, "~1,2", "")); c.f.Hash() == a.f.Hash() {
		t.Error("the records without survivors gave the same state")
	}
	g := restored(t, snapshotOf(t, a.f))
	g.Read(func(s *State, _ uint64) {
		if j := s.Jobs[job.ID]; !reflect.DeepEqual(j.Attempts, job.Attempts) {
			t.Errorf("restored attempts %+v, want %+v", j.Attempts, job.Attempts)
		}
	})
	if g.Hash() != a.f.Hash() {
		t.Error("the restored state differs")
	}
}

// TestSurvivalBadInput: malformed evidence is refused with the rule it
// breaks and changes nothing.
func TestSurvivalBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		up    JobUpdate
		field string
	}{
		{"on a step", JobUpdate{Action: ActionStep, Survived: []uint64{1}}, "survived"},
		{"incarnation on a finish", JobUpdate{Action: ActionFinish, Status: StatusSuccess, Incarnation: "x"}, "survived"},
		{"own epoch", JobUpdate{Action: ActionAttempt, Survived: []uint64{2}}, "survived"},
		{"later epoch", JobUpdate{Action: ActionAttempt, Survived: []uint64{9}}, "survived"},
		{"epoch 0", JobUpdate{Action: ActionAttempt, Survived: []uint64{0}}, "survived"},
		{"twice", JobUpdate{Action: ActionAttempt, Survived: []uint64{1, 1}}, "survived"},
		{"too many", JobUpdate{Action: ActionAttempt, Survived: make([]uint64, maxAttempts+1)}, "survived"},
		{"long incarnation", JobUpdate{Action: ActionAttempt, Incarnation: strings.Repeat("a", maxIncarnation+1)}, "incarnation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, _, h := runGuard(t, "leader start leader")
			before := h.f.Hash()
			up := tc.up
			up.Now, up.Epoch, up.JobID = h.now, 2, job.ID
			r := h.apply(up).(Response)
			if r.Err == nil || r.Err.Code != CodeInval || r.Err.Field != tc.field {
				t.Fatalf("got %v, want an inval error on %s", r.Err, tc.field)
			}
			if h.f.Hash() != before {
				t.Error("a refused record changed the state")
			}
		})
	}
}

// TestPoisonMessage names the epochs as the operator reads them.
func TestPoisonMessage(t *testing.T) {
	got := PoisonMessage([]uint64{5, 6}, 7)
	want := "failed by the poison-job guard: the leaders of executor epochs 5 and 6 were lost while this job ran, 2 in a row with no step completed in between; the executor of epoch 7 does not run it again"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := joinEpochs([]uint64{1, 2, 3}); got != "1, 2 and 3" {
		t.Errorf("three epochs: %q", got)
	}
}

// TestAttemptsFenced: an attempt from a deposed epoch changes nothing.
func TestAttemptsFenced(t *testing.T) {
	job, _, h := runGuard(t, "leader start leader")
	before := h.f.Hash()
	r := h.apply(JobUpdate{Now: h.now, Epoch: 1, JobID: job.ID, Action: ActionAttempt}).(Response)
	if r.Err == nil || r.Err.Code != CodeFenced {
		t.Fatalf("attempt of epoch 1 after epoch 2: %v", r.Err)
	}
	if h.f.Hash() != before {
		t.Error("a refused attempt changed the state")
	}
}

// TestAttemptsBounded: a job keeps its last maxAttempts attempts, and
// the time of each is the proposer's.
func TestAttemptsBounded(t *testing.T) {
	events := "leader start" + strings.Repeat(" step leader attempt", maxAttempts+3)
	job, err, _ := runGuard(t, events)
	if err != nil || job.Status != StatusRunning {
		t.Fatalf("status %s, error %v", job.Status, err)
	}
	if len(job.Attempts) != maxAttempts || job.Attempts[maxAttempts-1].Epoch != maxAttempts+4 {
		t.Fatalf("attempts %v", epochsOf(job.Attempts))
	}
	for i, a := range job.Attempts[1:] {
		if a.Time.UnixNano() <= job.Attempts[i].Time.UnixNano() {
			t.Errorf("attempt %d at %v, not after %v", i+1, a.Time, job.Attempts[i].Time)
		}
	}
}

// TestAttemptsInSnapshot: attempts and the guard's epochs survive a
// snapshot and restore.
func TestAttemptsInSnapshot(t *testing.T) {
	job, _, h := runGuard(t, "leader start leader attempt leader attempt")
	g := restored(t, snapshotOf(t, h.f))
	g.Read(func(s *State, _ uint64) {
		j := s.Jobs[job.ID]
		if !reflect.DeepEqual(j.Attempts, job.Attempts) || !reflect.DeepEqual(j.PoisonEpochs, []uint64{1, 2}) {
			t.Errorf("restored attempts %+v, poison epochs %v", j.Attempts, j.PoisonEpochs)
		}
	})
	if g.Hash() != h.f.Hash() {
		t.Error("restored state differs")
	}
}

// TestOpTestCrashValidate: the debugging opcode's fields and their bounds.
func TestOpTestCrashValidate(t *testing.T) {
	for _, tc := range []struct {
		in, field string
	}{
		{`{"OP_ID":"OP_TEST_CRASH"}`, ""},
		{`{"OP_ID":"OP_TEST_CRASH","mode":"panic","times":100}`, ""},
		{`{"OP_ID":"OP_TEST_CRASH","mode":"exit","times":0}`, ""},
		{`{"OP_ID":"OP_TEST_CRASH","mode":"abort"}`, "mode"},
		{`{"OP_ID":"OP_TEST_CRASH","times":101}`, "times"},
		{`{"OP_ID":"OP_TEST_CRASH","times":-1}`, "times"},
		{`{"OP_ID":"OP_TEST_CRASH","times":"2"}`, "times"},
		{`{"OP_ID":"OP_TEST_CRASH","how":"exit"}`, "how"},
	} {
		op, err := ParseOpcode(json.RawMessage(tc.in))
		if tc.field == "" {
			if err != nil || !DebugOnly(op) {
				t.Errorf("%s: %v", tc.in, err)
			}
			continue
		}
		if e := AsError(err); e == nil || e.Field != tc.field || e.Code != CodeInval {
			t.Errorf("%s: error %v, want one naming %s", tc.in, err, tc.field)
		}
	}
	if op, _ := ParseOpcode(json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)); DebugOnly(op) {
		t.Error("OP_TEST_DELAY is debug-only")
	}
}
