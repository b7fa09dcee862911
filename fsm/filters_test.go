package fsm

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const (
	filterA = "8b53f7de-f8e2-4470-99bd-1efe746e434f"
	filterB = "b296f0c9-4809-46a8-b928-5ccf7720fa8c"
)

func (h *harness) filters() string {
	var b strings.Builder
	h.f.Read(func(s *State, _ uint64) {
		for _, f := range s.SortedFilters() {
			b.WriteString(f.UUID[:4] + ":" + f.Action + " ")
		}
	})
	return strings.TrimSpace(b.String())
}

// TestFilters: rules are added, replaced (with a new watermark) and
// removed, each a configuration change; bad rules are refused, naming
// what is wrong, and change nothing; the list survives a snapshot.
func TestFilters(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	step := func(c Command, wantErr, wantField, want string) {
		t.Helper()
		before, hash := h.serial(), h.f.Hash()
		r := h.apply(c).(Response)
		switch {
		case wantErr != "":
			if r.Err == nil || !strings.Contains(r.Err.Msg, wantErr) || r.Err.Field != wantField {
				t.Fatalf("%+v: error %v, want one on %s containing %q", c, r.Err, wantField, wantErr)
			}
			if h.f.Hash() != hash || h.serial() != before {
				t.Fatalf("%+v: a refused command changed the state", c)
			}
		case r.Err != nil:
			t.Fatalf("%+v: %v", c, r.Err)
		case h.serial() != before+1:
			t.Fatalf("%+v: serial %d -> %d, want one more", c, before, h.serial())
		}
		if got := h.filters(); got != want {
			t.Fatalf("%+v: filters %q, want %q", c, got, want)
		}
	}
	preds := json.RawMessage(`[["opcode",["=","OP_ID","OP_INSTANCE_CREATE"]]]`)
	put := func(uuid string, prio int, action string, n int, p string) FilterPut {
		return FilterPut{Now: h.now, UUID: uuid, Priority: prio, Action: action, RateLimit: n, Predicates: json.RawMessage(p)}
	}
	step(put(filterA, 5, FilterPause, 0, string(preds)), "", "", "8b53:PAUSE")
	step(put(filterB, 1, FilterRateLimit, 3, `[]`), "", "", "b296:RATE_LIMIT 8b53:PAUSE")
	for _, c := range []struct {
		cmd          FilterPut
		field, error string
	}{
		{put("not-a-uuid", 0, FilterPause, 0, `[]`), "uuid", "36 characters"},
		{put("8b53f7de-f8e2-4470-99bd-1efe746e434g", 0, FilterPause, 0, `[]`), "uuid", "hex digits"},
		{put(filterA, -1, FilterPause, 0, `[]`), "priority", "0 to 1000000"},
		{put(filterA, MaxFilterPriority+1, FilterPause, 0, `[]`), "priority", "0 to 1000000"},
		{put(filterA, 0, "DROP", 0, `[]`), "action", `unknown action "DROP"`},
		{put(filterA, 0, FilterPause, 2, `[]`), "action", "takes no number"},
		{put(filterA, 0, FilterRateLimit, 0, `[]`), "action", "from 1 to"},
		{put(filterA, 0, FilterPause, 0, `{}`), "predicates", "a list"},
		{put(filterA, 0, FilterPause, 0, `null`), "predicates", "a list"},
		{put(filterA, 0, FilterPause, 0, `[["instance",["=","name","x"]]]`), "predicates", `unknown predicate "instance"`},
		{put(filterA, 0, FilterPause, 0, `[["jobid"]]`), "predicates", "[name, expression]"},
		{put(filterA, 0, FilterPause, 0, `[["jobid",1,2]]`), "predicates", "[name, expression]"},
		{put(filterA, 0, FilterPause, 0, `[`+strings.Repeat(`["jobid",1],`, MaxFilterPredicates)+`["jobid",1]]`), "predicates", "at most 32"},
		{FilterPut{Now: h.now, UUID: filterA, Action: FilterPause, Predicates: json.RawMessage(`[]`), Reason: []ReasonEntry{{Source: ""}}}, "reason", "empty source"},
	} {
		step(c.cmd, c.error, c.field, "b296:RATE_LIMIT 8b53:PAUSE")
	}
	step(FilterRemove{Now: h.now, UUID: "00000000-0000-0000-0000-000000000000"}, "does not exist", "uuid", "b296:RATE_LIMIT 8b53:PAUSE")

	// A submission makes job 1; replacing a rule takes the new watermark.
	var wm int64
	h.f.Read(func(s *State, _ uint64) { wm = s.Filters[filterA].Watermark })
	if wm != 0 {
		t.Fatalf("watermark %d, want 0", wm)
	}
	if r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}`)}, UUIDs: []string{h.uuid()}}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	step(put(filterA, 0, FilterReject, 0, string(preds)), "", "", "8b53:REJECT b296:RATE_LIMIT")
	h.f.Read(func(s *State, _ uint64) { wm = s.Filters[filterA].Watermark })
	if wm != 1 {
		t.Fatalf("watermark after job 1: %d, want 1", wm)
	}

	// The rules survive a snapshot.
	data, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != h.f.Hash() {
		t.Fatal("restored state differs")
	}
	bad := bytes.Replace(data, []byte(`"action":"REJECT"`), []byte(`"action":"DROP"`), 1)
	if _, _, err := DecodeSnapshot(bytes.NewReader(bad)); err == nil {
		t.Error("a snapshot with a rule of an unknown action was restored")
	}

	step(FilterRemove{Now: h.now, UUID: filterA}, "", "", "b296:RATE_LIMIT")
	step(FilterRemove{Now: h.now, UUID: filterB}, "", "", "")
}

// TestFiltersQueueEveryJob: while a rule that holds jobs exists, a
// configuration-only job waits in the queue for the executor instead of
// being applied at submission; a REJECT cancel is refused unless the rule
// is still a REJECT rule and the job has not started.
func TestFiltersQueueEveryJob(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	tags := func() Response {
		return h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}`)}, UUIDs: []string{h.uuid()}}).(Response)
	}
	if r := tags(); r.Err != nil || r.Job.Status != StatusSuccess {
		t.Fatalf("without rules: %+v", r)
	}
	if r := h.apply(FilterPut{Now: h.now, UUID: filterA, Action: FilterAccept, Predicates: json.RawMessage(`[]`)}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := tags(); r.Err != nil || r.Job.Status != StatusSuccess {
		t.Fatalf("with an ACCEPT rule only: %+v", r)
	}
	if r := h.apply(FilterPut{Now: h.now, UUID: filterB, Action: FilterPause, Predicates: json.RawMessage(`[]`)}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	r := tags()
	if r.Err != nil || r.Job.Status != StatusQueued || !r.Job.Executor {
		t.Fatalf("with a PAUSE rule: %+v", r)
	}
	id := r.JobID
	if r := h.apply(JobCancel{Now: h.now, JobID: id, Filter: filterB}).(Response); r.Err == nil || r.Err.Field != "filter" {
		t.Fatalf("cancel for a PAUSE rule: %v", r.Err)
	}
	if r := h.apply(FilterPut{Now: h.now, UUID: filterB, Action: FilterReject, Predicates: json.RawMessage(`[]`)}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	r = h.apply(JobCancel{Now: h.now, JobID: id, Filter: filterB}).(Response)
	if r.Err != nil || r.Job.Status != StatusCanceled || !strings.Contains(string(r.Job.Ops[0].Result), filterB) {
		t.Fatalf("REJECT: %+v %v", r.Job, r.Err)
	}
}
