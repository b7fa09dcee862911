package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestSubmitToken: a submission whose token names a job the state holds
// creates nothing and answers with that job, before and after the job is
// archived and across a snapshot; tokens are checked; a submission without
// one always makes a new job.
func TestSubmitToken(t *testing.T) {
	h := newHarness()
	h.initCluster("10.0.0.1")
	submit := func(tok, op string) Response {
		t.Helper()
		return h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{h.uuid()}, Token: tok}).(Response)
	}
	const delay = `{"OP_ID":"OP_TEST_DELAY","duration":1}`
	const tags = `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}`

	first := submit("client-1:a", delay)
	if first.Err != nil || first.JobID == 0 || first.Index != 0 {
		t.Fatalf("first submission: %+v", first)
	}
	firstIndex := h.index
	before := h.f.Hash()
	again := submit("client-1:a", delay)
	if again.Err != nil || again.JobID != first.JobID {
		t.Fatalf("resent submission answered %+v, want job %d", again, first.JobID)
	}
	// The resend took effect where the job was made.
	if again.Index != firstIndex {
		t.Fatalf("resent submission answered index %d, want %d (where its job was made)", again.Index, firstIndex)
	}
	if h.f.Hash() != before {
		t.Fatal("a resent submission changed the state")
	}
	// The token decides, not the content: a different body under a known
	// token is the same submission.
	if r := submit("client-1:a", tags); r.JobID != first.JobID || h.f.Hash() != before {
		t.Fatalf("known token with another body: %+v", r)
	}
	// Without a token, or with another one, each submission is a job.
	n1, n2 := submit("", delay), submit("", delay)
	if n1.JobID == n2.JobID || n1.JobID == first.JobID {
		t.Fatalf("untokened submissions share ids: %d %d", n1.JobID, n2.JobID)
	}
	// A configuration-only job is final at once; its token still names it.
	fast := submit("client-1:b", tags)
	if fast.Err != nil || fast.Job == nil || fast.Job.Status != StatusSuccess {
		t.Fatalf("configuration job: %+v", fast)
	}
	fastIndex := h.index
	h.f.Read(func(s *State, _ uint64) {
		if len(s.Cluster.Tags) != 1 {
			t.Fatalf("cluster tags %v", s.Cluster.Tags)
		}
	})
	before = h.f.Hash()
	if r := submit("client-1:b", tags); r.JobID != fast.JobID || r.Job == nil || r.Job.Status != StatusSuccess || h.f.Hash() != before {
		t.Fatalf("resent configuration job: %+v", r)
	}

	// Bad tokens are refused and change nothing.
	for _, tok := range []string{strings.Repeat("x", MaxSubmitTokenLen+1), "has space", "tab\t", "é", "a/b", "nul\x00"} {
		before := h.f.Hash()
		r := submit(tok, delay)
		if r.Err == nil || r.Err.Code != CodeInval || r.Err.Field != "token" {
			t.Errorf("token %q: %+v", tok, r)
		}
		if h.f.Hash() != before {
			t.Errorf("token %q changed the state", tok)
		}
	}
	if e := CheckSubmitToken(strings.Repeat("x", MaxSubmitTokenLen)); e != nil {
		t.Errorf("longest token refused: %v", e)
	}

	// The token survives a snapshot and the job's archiving.
	restored(t, snapshotOf(t, h.f)).Read(func(s *State, _ uint64) {
		if id, ok := s.JobByToken("client-1:b"); !ok || id != fast.JobID {
			t.Errorf("restored state: token names %d %v, want %d", id, ok, fast.JobID)
		}
	})
	if r := h.apply(JobArchive{Now: h.now, IDs: []int64{fast.JobID}}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.f.Read(func(s *State, _ uint64) {
		if _, active := s.Jobs[fast.JobID]; active || s.Archived[fast.JobID] == nil {
			t.Fatalf("job %d not archived", fast.JobID)
		}
	})
	before = h.f.Hash()
	if r := submit("client-1:b", tags); r.JobID != fast.JobID || r.Index != fastIndex || h.f.Hash() != before {
		t.Fatalf("resent submission of an archived job: %+v, want job %d made at %d", r, fast.JobID, fastIndex)
	}
	restored(t, snapshotOf(t, h.f)).Read(func(s *State, _ uint64) {
		if id, ok := s.JobByToken("client-1:b"); !ok || id != fast.JobID {
			t.Errorf("restored state: archived job's token names %d %v, want %d", id, ok, fast.JobID)
		}
	})
}

// TestSubmitTokenForgotten: the token of an archived job dropped for
// the archive's size is forgotten with it.
func TestSubmitTokenForgotten(t *testing.T) {
	s := newState()
	for id := int64(1); id <= MaxArchivedJobs+1; id++ {
		j := &Job{ID: id, Status: StatusSuccess}
		if id == 1 {
			j.Token = "oldest"
		}
		s.store(j)
		s.Finished = append(s.Finished, id)
		s.archive(id, nil)
	}
	if _, ok := s.JobByToken("oldest"); ok {
		t.Fatal("the token of a dropped job still names it")
	}
	if s.Archived[1] != nil || len(s.Archived) != MaxArchivedJobs {
		t.Fatalf("archive holds %d jobs", len(s.Archived))
	}
}

// TestSubmitManyToken: a JobSubmitMany resent under its token creates
// nothing and answers with the ids and the index of the jobs the first
// one made, across a snapshot too; each job records its own token; a
// resend naming more or fewer jobs than were made, and a bad token, are
// refused.
func TestSubmitManyToken(t *testing.T) {
	h := newHarness()
	h.initCluster("10.0.0.1")
	many := func(tok string, n int) Response {
		t.Helper()
		c := JobSubmitMany{Now: h.now, Token: tok}
		for k := 0; k < n; k++ {
			c.Jobs = append(c.Jobs, JobSpec{Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":1}`)}, UUIDs: []string{h.uuid()}})
		}
		return h.apply(c).(Response)
	}
	first := many("chain-1", 3)
	if first.Err != nil || len(first.JobIDs) != 3 || first.Index != 0 {
		t.Fatalf("first submission: %+v", first)
	}
	firstIndex := h.index
	h.f.Read(func(s *State, _ uint64) {
		for k, id := range first.JobIDs {
			if got, want := s.Jobs[id].Token, ManyJobToken("chain-1", k); got != want {
				t.Errorf("job %d records token %q, want %q", id, got, want)
			}
		}
	})
	before := h.f.Hash()
	again := many("chain-1", 3)
	if again.Err != nil || fmt.Sprint(again.JobIDs) != fmt.Sprint(first.JobIDs) || again.Index != firstIndex || h.f.Hash() != before {
		t.Fatalf("resent submission answered %+v, want jobs %v made at %d, state unchanged", again, first.JobIDs, firstIndex)
	}
	if r := many("chain-1", 4); r.Err == nil || r.Err.Code != CodeState || r.Err.Field != "token" || h.f.Hash() != before {
		t.Fatalf("resend with a job more than was made: %+v", r)
	}
	// A resend of fewer jobs is not the same submission either: answering
	// with the first ids would hide that the client lost track of a job.
	if r := many("chain-1", 2); r.Err == nil || r.Err.Code != CodeState || r.Err.Field != "token" || h.f.Hash() != before {
		t.Fatalf("resend with a job fewer than was made: %+v", r)
	}
	single := h.apply(JobSubmit{Now: h.now, Token: "chain-1", Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":1}`)}, UUIDs: []string{""}}).(Response)
	if single.Err == nil || single.Err.Code != CodeState || single.Err.Field != "token" || h.f.Hash() != before {
		t.Fatalf("a one-job resend of the three-job submission: %+v", single)
	}
	if r := many("chain#1", 2); r.Err == nil || r.Err.Field != "token" || h.f.Hash() != before {
		t.Fatalf("a token with '#': %+v", r)
	}
	// Another token makes new jobs.
	if r := many("chain-2", 2); r.Err != nil || len(r.JobIDs) != 2 || r.JobIDs[0] <= first.JobIDs[2] {
		t.Fatalf("another token: %+v", r)
	}
	// Across a snapshot the tokens still name the jobs.
	restored(t, snapshotOf(t, h.f)).Read(func(s *State, _ uint64) {
		for k, id := range first.JobIDs {
			if got, ok := s.JobByToken(ManyJobToken("chain-1", k)); !ok || got != id {
				t.Errorf("restored state: token of job %d names %d %v, want %d", k, got, ok, id)
			}
		}
	})
}

// TestArchiveOrder: the archive's ordered list and its map hold the same
// records, by increasing id, whatever order jobs are archived in and when
// the oldest are dropped for the archive's size; a frozen view keeps the
// archive it saw while later archiving goes on.
func TestArchiveOrder(t *testing.T) {
	s := newState()
	const n = MaxArchivedJobs + 10
	for id := int64(1); id <= n; id++ {
		s.store(&Job{ID: id, Status: StatusSuccess})
		s.Finished = append(s.Finished, id)
	}
	// Mostly increasing, as the executor finishes jobs, with neighbours
	// swapped and a few late stragglers.
	var order []int64
	for id := int64(1); id <= n; id += 2 {
		if id+1 <= n {
			order = append(order, id+1)
		}
		order = append(order, id)
	}
	late := append([]int64(nil), order[100:103]...)
	order = append(order[:100], order[103:]...)
	order = append(order, order[0]) // archiving twice changes nothing
	order = append(order, late...)
	for _, id := range order {
		s.archive(id, nil)
	}
	if len(s.archOrder) != MaxArchivedJobs || len(s.Archived) != MaxArchivedJobs {
		t.Fatalf("archive holds %d ordered and %d mapped jobs, want %d", len(s.archOrder), len(s.Archived), MaxArchivedJobs)
	}
	for i, a := range s.archOrder {
		if s.Archived[a.ID] != a {
			t.Fatalf("ordered record %d (job %d) is not the mapped one", i, a.ID)
		}
		if i > 0 && s.archOrder[i-1].ID >= a.ID {
			t.Fatalf("archive out of order at %d: %d then %d", i, s.archOrder[i-1].ID, a.ID)
		}
	}
	if first := s.archOrder[0].ID; first != n-MaxArchivedJobs+1 {
		t.Fatalf("oldest archived job is %d, want %d (the oldest dropped)", first, n-MaxArchivedJobs+1)
	}

	h := newHarness()
	h.initCluster("10.0.0.1")
	var ids []int64
	for i := 0; i < 6; i++ {
		r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}`)}, UUIDs: []string{""}}).(Response)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.JobID)
	}
	archive := func(ids ...int64) {
		t.Helper()
		if r := h.apply(JobArchive{Now: h.now, IDs: ids}).(Response); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// Three records leave room in the list, so the next one goes in place
	// (a view that shared the list would see it).
	archive(ids[3], ids[1], ids[5])
	z := h.f.Freeze()
	before, err := z.Encode()
	if err != nil {
		t.Fatal(err)
	}
	archive(ids[2])
	archive(ids[0], ids[4])
	if after, _ := z.Encode(); !bytes.Equal(before, after) {
		t.Fatal("a frozen view changed when more jobs were archived")
	}
	now, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, l := range bytes.Split(now, []byte("\n")) {
		var r struct {
			T string `json:"t"`
			V struct {
				ID int64 `json:"id"`
			} `json:"v"`
		}
		if json.Unmarshal(l, &r) == nil && r.T == "archived" {
			got = append(got, r.V.ID)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("snapshot lists archived jobs %v, want %v", got, ids)
	}
	back := restored(t, now)
	back.Read(func(s *State, _ uint64) {
		if fmt.Sprint(s.ArchivedJobIDs()) != fmt.Sprint(ids) {
			t.Fatalf("restored archive %v, want %v", s.ArchivedJobIDs(), ids)
		}
	})
}

// TestQueuedAt: QueuedAt names the last entry that queued a job for the
// executor; a configuration job applied at once and a refused
// submission do not move it.
func TestQueuedAt(t *testing.T) {
	h := newHarness()
	h.initCluster("10.0.0.1")
	submit := func(op string) Response {
		t.Helper()
		return h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{h.uuid()}}).(Response)
	}
	if got := h.f.QueuedAt(); got != 0 {
		t.Fatalf("QueuedAt of a new cluster = %d, want 0", got)
	}
	if r := submit(`{"OP_ID":"OP_TEST_DELAY","duration":1}`); r.Err != nil {
		t.Fatal(r.Err)
	}
	queued := h.index
	if got := h.f.QueuedAt(); got != queued {
		t.Fatalf("QueuedAt after an executor job = %d, want %d", got, queued)
	}
	if r := submit(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}`); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := submit(`{"OP_ID":"OP_TEST_DELAY","duration":-1}`); r.Err == nil {
		t.Fatal("a negative delay was accepted")
	}
	if got := h.f.QueuedAt(); got != queued {
		t.Fatalf("QueuedAt after a configuration job and a refusal = %d, want %d", got, queued)
	}
}
