package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checkers must catch what they are there for: each test breaks a
// correct history in one way and expects the checker to say so, and the
// correct history to pass.

// hist builds histories by hand; times are in milliseconds.
type hist struct{ ops []*Op }

func (h *hist) add(o Op, call, ret int64) *Op {
	o.Call, o.Return = call*int64(time.Millisecond), ret*int64(time.Millisecond)
	if o.Outcome == "" {
		o.Outcome = OK
	}
	h.ops = append(h.ops, &o)
	return &o
}

func empty() State {
	return State{Tags: map[string][]string{"cluster": nil}, Drained: map[string]bool{"node21": false}}
}

// good is a correct history on the cluster's tags and node21's drained
// flag: writes with their indexes, consistent and default reads, an
// indeterminate write that took effect and one that did not, a removal,
// a job.
func good() (*hist, State) {
	h := &hist{}
	h.add(Op{Client: 0, Kind: TagAdd, Object: "cluster", Value: "a", Index: 10, JobIDs: []int64{1}}, 0, 10)
	h.add(Op{Client: 1, Kind: TagRead, Mode: ModeConsistent, Object: "cluster", Values: []string{"a"}, Index: 10}, 11, 20)
	h.add(Op{Client: 1, Kind: TagAdd, Object: "cluster", Value: "b", Outcome: Indeterminate, Code: "client_timeout"}, 21, 40)
	h.add(Op{Client: 2, Kind: TagRead, Mode: ModeDefault, Object: "cluster", Values: nil, Index: 5, Server: "m1", PID: 7}, 22, 25)
	h.add(Op{Client: 0, Kind: TagAdd, Object: "cluster", Value: "c", Index: 12, JobIDs: []int64{3}}, 30, 35)
	h.add(Op{Client: 0, Kind: TagRead, Mode: ModeConsistent, Object: "cluster", Values: []string{"a", "b", "c"}, Index: 13}, 50, 55)
	h.add(Op{Client: 2, Kind: TagAdd, Object: "cluster", Value: "d", Outcome: Indeterminate, Code: "indeterminate"}, 56, 60)
	h.add(Op{Client: 0, Kind: TagDel, Object: "cluster", Value: "a", Index: 15, JobIDs: []int64{5}}, 61, 65)
	h.add(Op{Client: 1, Kind: TagRead, Mode: ModeCLI, Object: "cluster", Values: []string{"b", "c"}}, 66, 70)
	h.add(Op{Client: 2, Kind: TagRead, Mode: ModeDefault, Object: "cluster", Values: []string{"a", "b", "c"}, Index: 14, Server: "m1", PID: 7}, 71, 72)
	h.add(Op{Client: 0, Kind: TagAdd, Object: "cluster", Value: "e", Outcome: Failed, Code: "no_leader"}, 73, 80)
	h.add(Op{Client: 3, Kind: DrainSet, Object: "node/node21", Value: "true", Index: 16, JobIDs: []int64{6}}, 81, 85)
	h.add(Op{Client: 1, Kind: DrainRead, Mode: ModeConsistent, Object: "node/node21", Value: "true", Index: 16}, 86, 90)
	h.add(Op{Client: 2, Kind: DrainRead, Mode: ModeDefault, Object: "node/node21", Value: "false", Index: 14, Server: "m1", PID: 7}, 86, 90)
	h.add(Op{Client: 2, Kind: DrainRead, Mode: ModeConfd, Object: "node/node21", Value: "false", Serial: 20, Server: "m1:1814", PID: 7}, 91, 92)
	h.add(Op{Client: 2, Kind: DrainRead, Mode: ModeConfd, Object: "node/node21", Value: "true", Serial: 21, Server: "m1:1814", PID: 7}, 93, 94)
	h.add(Op{Client: 3, Kind: JobSubmit, Markers: []string{"chaos-c3-1"}, JobIDs: []int64{7}, Repeat: 3, Index: 17}, 95, 100)
	h.add(Op{Client: 3, Kind: JobSubmit, Markers: []string{"chaos-c3-2"}, Repeat: 1, Outcome: Indeterminate}, 101, 110)
	final := State{
		Tags:    map[string][]string{"cluster": {"b", "c"}},
		Drained: map[string]bool{"node21": true},
		Jobs: []Job{
			{ID: 1, Status: "success", Ops: []JobOp{{OpID: "OP_TAGS_SET", Kind: "cluster", Tags: []string{"a"}}}},
			{ID: 2, Status: "success", Ops: []JobOp{{OpID: "OP_TAGS_SET", Kind: "cluster", Tags: []string{"b"}}}},
			{ID: 3, Status: "success", Ops: []JobOp{{OpID: "OP_TAGS_SET", Kind: "cluster", Tags: []string{"c"}}}},
			{ID: 5, Status: "success", Ops: []JobOp{{OpID: "OP_TAGS_DEL", Kind: "cluster", Tags: []string{"a"}}}},
			{ID: 6, Status: "success", Ops: []JobOp{{OpID: "OP_NODE_SET_PARAMS"}}},
			{ID: 7, Status: "success", Ops: []JobOp{{OpID: "OP_TEST_DELAY", Comment: "chaos-c3-1", Repeat: 3, Status: "success",
				Steps: []Step{{Name: "delay 1/3", Epoch: 2}, {Name: "delay 2/3", Epoch: 3}}}}},
		},
	}
	return h, final
}

func TestCheckersPassACorrectHistory(t *testing.T) {
	h, final := good()
	if r := CheckLinearizable(h.ops, empty(), 10*time.Second); r.Ok != r.Checked || r.Checked != 2 {
		t.Errorf("linearizability: %+v", r)
	}
	r := CheckSets(h.ops, empty(), final)
	if len(r.Violations) > 0 || r.Lost+r.Unexpected+r.Duplicated > 0 {
		t.Errorf("accounting: %+v", r)
	}
	if r.Recovered != 1 {
		t.Errorf("recovered %d, want 1 (tag b)", r.Recovered)
	}
	if v := CheckStale(h.ops, empty()); len(v) > 0 {
		t.Errorf("stale reads: %v", v)
	}
	ests := []Establishment{{Member: "m1", Epoch: 2, Term: 2}, {Member: "m2", Epoch: 3, Term: 4}}
	if v := CheckLeaderServices(ests, final.Jobs); len(v) > 0 {
		t.Errorf("leader services: %v", v)
	}
}

// expect fails the test unless some message contains want.
func expect(t *testing.T, what string, msgs []string, want string) {
	t.Helper()
	for _, m := range msgs {
		if strings.Contains(m, want) {
			return
		}
	}
	t.Errorf("%s: no message with %q in %q", what, want, msgs)
}

func TestLostWriteIsCaught(t *testing.T) {
	h, final := good()
	// Tag c, acknowledged, is gone after healing...
	final.Tags["cluster"] = []string{"b"}
	r := CheckSets(h.ops, empty(), final)
	if r.Lost != 1 {
		t.Errorf("lost %d, want 1: %v", r.Lost, r.Violations)
	}
	expect(t, "accounting", r.Violations, `lost: acknowledged tag "c"`)
	// ...and a consistent read missed it too.
	h.add(Op{Client: 4, Kind: TagRead, Mode: ModeConsistent, Object: "cluster", Values: []string{"b"}, Index: 20}, 120, 125)
	lr := CheckLinearizable(h.ops, empty(), 10*time.Second)
	if lr.Illegal != 1 {
		t.Errorf("linearizability: %+v, want the cluster's history illegal", lr)
	}
	expect(t, "stale", CheckStale(h.ops, empty()), `misses tag "c" added at index 12`)

	// A lost removal: acknowledged, and the tag is back.
	h, final = good()
	final.Tags["cluster"] = []string{"a", "b", "c"}
	r = CheckSets(h.ops, empty(), final)
	expect(t, "accounting", r.Violations, `removal of tag "a" of cluster came undone`)
	// A lost job.
	h, final = good()
	final.Jobs = final.Jobs[:5]
	r = CheckSets(h.ops, empty(), final)
	expect(t, "accounting", r.Violations, "lost: job chaos-c3-1 (id 7) is absent")
	// A lost drained flag.
	h, final = good()
	final.Drained["node21"] = false
	r = CheckSets(h.ops, empty(), final)
	expect(t, "accounting", r.Violations, "node/node21 is drained=false after healing")
}

func TestStaleReadPresentedAsConsistentIsCaught(t *testing.T) {
	h, _ := good()
	// A consistent read after c was acknowledged (at index 12) that shows
	// the state of index 11, without c: honest about its index, but not
	// consistent.
	h.add(Op{Client: 4, Kind: TagRead, Mode: ModeConsistent, Object: "cluster", Values: []string{"a", "b"}, Index: 11}, 36, 40)
	expect(t, "stale", CheckStale(h.ops, empty()), "stale consistent read: index 11")
	if lr := CheckLinearizable(h.ops, empty(), 10*time.Second); lr.Illegal != 1 {
		t.Errorf("linearizability: %+v, want the cluster's history illegal", lr)
	}

	// The same read as a default read is fine: stale, and it says so.
	h, _ = good()
	h.add(Op{Client: 4, Kind: TagRead, Mode: ModeDefault, Object: "cluster", Values: []string{"a"}, Index: 11}, 36, 40)
	if v := CheckStale(h.ops, empty()); len(v) > 0 {
		t.Errorf("an honest stale default read flagged: %v", v)
	}
	// But a default read that shows a state other than the one of its
	// index is caught, in either direction.
	h.add(Op{Client: 4, Kind: TagRead, Mode: ModeDefault, Object: "cluster", Values: []string{"a", "c"}, Index: 11}, 41, 42)
	h.add(Op{Client: 4, Kind: TagRead, Mode: ModeDefault, Object: "cluster", Values: nil, Index: 12}, 43, 44)
	v := CheckStale(h.ops, empty())
	expect(t, "stale", v, `read at index 11 shows tag "c" added at index 12`)
	expect(t, "stale", v, `read at index 12 misses tag "a" added at index 10`)

	// A stale drained flag read as consistent.
	h, _ = good()
	h.add(Op{Client: 4, Kind: DrainRead, Mode: ModeConsistent, Object: "node/node21", Value: "false", Index: 15}, 91, 95)
	expect(t, "stale", CheckStale(h.ops, empty()), "stale consistent read: index 15")
	if lr := CheckLinearizable(h.ops, empty(), 10*time.Second); lr.Illegal != 1 {
		t.Errorf("linearizability: %+v, want node21's history illegal", lr)
	}
	// A replica going back in time.
	h, _ = good()
	h.add(Op{Client: 2, Kind: TagRead, Mode: ModeDefault, Object: "cluster", Values: nil, Index: 4, Server: "m1", PID: 7}, 73, 74)
	expect(t, "stale", CheckStale(h.ops, empty()), "m1 went back from index 14 to 4")
	// confd answers of one serial that disagree.
	h, _ = good()
	h.add(Op{Client: 2, Kind: DrainRead, Mode: ModeConfd, Object: "node/node21", Value: "true", Serial: 20, Server: "m2:1814", PID: 8}, 93, 94)
	expect(t, "stale", CheckStale(h.ops, empty()), "confd answers of serial 20 disagree")
}

func TestDuplicatedJobIsCaught(t *testing.T) {
	h, final := good()
	dup := final.Jobs[5]
	dup.ID = 8
	final.Jobs = append(final.Jobs, dup)
	r := CheckSets(h.ops, empty(), final)
	if r.Duplicated != 1 {
		t.Errorf("duplicated %d, want 1: %v", r.Duplicated, r.Violations)
	}
	expect(t, "accounting", r.Violations, "job chaos-c3-1 is present 2 times (ids [7 8])")

	// An indeterminate submission present twice is a duplicate too; once
	// is a recovery.
	h, final = good()
	one := Job{ID: 9, Status: "success", Ops: []JobOp{{OpID: "OP_TEST_DELAY", Comment: "chaos-c3-2", Status: "success"}}}
	final.Jobs = append(final.Jobs, one)
	if r := CheckSets(h.ops, empty(), final); r.Recovered != 2 || len(r.Violations) > 0 {
		t.Errorf("indeterminate job present once: %+v, want recovered", r)
	}
	two := one
	two.ID = 10
	final.Jobs = append(final.Jobs, two)
	expect(t, "accounting", CheckSets(h.ops, empty(), final).Violations, "duplicated: job chaos-c3-2 (indeterminate submission) is present 2 times")

	// A tag change applied as two jobs.
	h, final = good()
	final.Jobs = append(final.Jobs, Job{ID: 11, Status: "success", Ops: []JobOp{{OpID: "OP_TAGS_SET", Kind: "cluster", Tags: []string{"c"}}}})
	expect(t, "accounting", CheckSets(h.ops, empty(), final).Violations, `OP_TAGS_SET of tag "c" on cluster is present as 2 jobs [3 11]`)
}

// A held submission's answer must give the status its job ended with;
// one given before the job ended (the wait ran out) may differ.
func TestHeldAnswerIsChecked(t *testing.T) {
	h, final := good()
	h.add(Op{Client: 4, Kind: JobSubmit, Mode: ModeHeld, Status: "success", Markers: []string{"chaos-c4-1"}, JobIDs: []int64{20}, Index: 30}, 111, 120)
	h.add(Op{Client: 4, Kind: JobSubmit, Mode: ModeHeld, Status: "running", Markers: []string{"chaos-c4-2"}, JobIDs: []int64{21}, Index: 31}, 121, 130)
	final.Jobs = append(final.Jobs,
		Job{ID: 20, Status: "success", Ops: []JobOp{{OpID: "OP_TEST_DELAY", Comment: "chaos-c4-1", Status: "success"}}},
		Job{ID: 21, Status: "success", Ops: []JobOp{{OpID: "OP_TEST_DELAY", Comment: "chaos-c4-2", Status: "success"}}})
	if r := CheckSets(h.ops, empty(), final); len(r.Violations) > 0 {
		t.Fatalf("a correct held answer and a timed-out one: %v", r.Violations)
	}
	h.ops[len(h.ops)-2].Status = "error"
	expect(t, "accounting", CheckSets(h.ops, empty(), final).Violations, "job chaos-c4-1 (id 20): its held submission was answered error, but it ended success")
}

func TestUnexpectedIsCaught(t *testing.T) {
	h, final := good()
	final.Tags["cluster"] = []string{"b", "c", "e", "zz"}
	r := CheckSets(h.ops, empty(), final)
	if r.Unexpected != 2 {
		t.Errorf("unexpected %d, want 2 (e failed, zz never written): %v", r.Unexpected, r.Violations)
	}
	final.Jobs = append(final.Jobs, Job{ID: 12, Status: "success", Ops: []JobOp{{OpID: "OP_TEST_DELAY", Comment: "chaos-c9-9"}}})
	expect(t, "accounting", CheckSets(h.ops, empty(), final).Violations, "job chaos-c9-9 (ids [12]) was never submitted")
}

func TestRaftInvariantsAreChecked(t *testing.T) {
	ok := []Sample{
		{Member: "m1", State: "leader", Term: 2, Established: true},
		{Member: "m2", State: "follower", Term: 2},
		{Member: "m1", State: "leader", Term: 2, Established: true},
		{Member: "m2", State: "leader", Term: 3},
		{Member: "m1", State: "leader", Term: 2, Established: true}, // deposed, not yet aware: another term
	}
	if v := CheckLeaders(ok); len(v) > 0 {
		t.Errorf("correct samples flagged: %v", v)
	}
	bad := append(ok, Sample{Member: "m3", State: "leader", Term: 3, Established: true}, Sample{Member: "m2", State: "leader", Term: 3, Established: true})
	v := CheckLeaders(bad)
	expect(t, "raft", v, "two leaders in term 3: m2, m3")
	expect(t, "raft", v, "leader services established on several members in term 3: m2, m3")
}

func TestLeaderServicesAreChecked(t *testing.T) {
	log := "2026-01-01T00:00:00Z [INFO]  m1: leadership established: epoch=4 term=7 took=3ms\nother\n" +
		"2026-01-01T00:00:01Z [INFO]  m1: leadership established: epoch=6 term=9 took=3ms\n"
	ests := ParseEstablishments("m1", log)
	if len(ests) != 2 || ests[1] != (Establishment{Member: "m1", Epoch: 6, Term: 9}) {
		t.Fatalf("parsed %+v", ests)
	}
	ests = append(ests, Establishment{Member: "m2", Epoch: 5, Term: 8})
	jobs := []Job{{ID: 1, Ops: []JobOp{{OpID: "OP_TEST_DELAY", Repeat: 4, Status: "success",
		Steps: []Step{{Name: "delay 1/4", Epoch: 4}, {Name: "delay 2/4", Epoch: 6}, {Name: "delay 3/4", Epoch: 6}}}}}}
	if v := CheckLeaderServices(ests, jobs); len(v) > 0 {
		t.Errorf("correct records flagged: %v", v)
	}
	// A deposed executor (epoch 5) recording a step after its successor
	// (epoch 6) did; two members establishing in one term; one epoch
	// established twice; a step short.
	jobs[0].Ops[0].Steps = []Step{{Name: "delay 1/4", Epoch: 4}, {Name: "delay 2/4", Epoch: 6}, {Name: "delay 3/4", Epoch: 5}}
	v := CheckLeaderServices(append(ests, Establishment{Member: "m3", Epoch: 5, Term: 9}), jobs)
	expect(t, "leader services", v, "step 2 (delay 3/4) recorded by epoch 5 after a step of epoch 6")
	expect(t, "leader services", v, "several members in term 9: m1, m3")
	expect(t, "leader services", v, "epoch 5 established 2 times")
	jobs[0].Ops[0].Steps = jobs[0].Ops[0].Steps[:2]
	expect(t, "leader services", CheckLeaderServices(ests, jobs), "succeeded with 2 steps recorded, want 3")
}

func TestPorcupinePageIsSaved(t *testing.T) {
	h, _ := good()
	h.add(Op{Client: 4, Kind: TagRead, Mode: ModeConsistent, Object: "cluster", Values: []string{"zz"}, Index: 20}, 120, 125)
	lr := CheckLinearizable(h.ops, empty(), 10*time.Second)
	if lr.Illegal != 1 {
		t.Fatalf("%+v", lr)
	}
	expect(t, "linearizability", lr.Failures, "tags:cluster: not linearizable")
	dir := t.TempDir()
	files, err := lr.SavePages(dir, []Fault{{Kind: KillLeader, Targets: []string{"m1"}, Start: 1e6, End: 5e7}})
	if err != nil || len(files) != 1 {
		t.Fatalf("SavePages: %v %v", files, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "porcupine-tags-cluster.html"))
	if err != nil || !strings.Contains(string(data), "kill-leader") {
		t.Errorf("page: %v, %d bytes", err, len(data))
	}
}

func TestUnknownCountsAsFailure(t *testing.T) {
	// Thirty open additions and a read no subset of them explains: to say
	// so, Porcupine would try all 2^30 subsets, and it times out first.
	h := &hist{}
	for i := range 30 {
		h.add(Op{Client: i, Kind: TagAdd, Object: "cluster", Value: fmt.Sprintf("t%d", i), Outcome: Indeterminate}, 0, 1)
	}
	h.add(Op{Client: 30, Kind: TagRead, Mode: ModeConsistent, Object: "cluster", Values: []string{"zz"}}, 10, 20)
	lr := CheckLinearizable(h.ops, empty(), 200*time.Millisecond)
	if lr.Unknown != 1 || lr.Ok != 0 || len(lr.Failures) != 1 {
		t.Fatalf("%+v; want one unknown result, reported as a failure", lr)
	}
	expect(t, "linearizability", lr.Failures, "not verified within 200ms")
}

func TestCanceledJobs(t *testing.T) {
	// A job that ended canceled with no cancel asked for is wrong...
	h, final := good()
	final.Jobs[5].Status = "canceled"
	final.Jobs[5].Ops[0].Status = "canceled"
	expect(t, "accounting", CheckSets(h.ops, empty(), final).Violations, "job chaos-c3-1 (id 7) ended canceled, want success")
	// ...and so is one that ended in error, unless the poison-job guard
	// failed it after two leaders were lost.
	final.Jobs[5].Status = "error"
	expect(t, "accounting", CheckSets(h.ops, empty(), final).Violations, "job chaos-c3-1 (id 7) ended error, want success")
	final.Jobs[5].PoisonEpochs = []uint64{4, 5}
	if r := CheckSets(h.ops, empty(), final); len(r.Violations) > 0 {
		t.Errorf("a job the poison-job guard failed is flagged: %v", r.Violations)
	}
	final.Jobs[5].Status, final.Jobs[5].PoisonEpochs = "canceled", nil
	// ...and right once a cancel was asked, acknowledged or not.
	h.add(Op{Client: 3, Kind: JobCancel, JobIDs: []int64{7}, Markers: []string{"chaos-c3-1"}, Outcome: Indeterminate}, 101, 102)
	if r := CheckSets(h.ops, empty(), final); len(r.Violations) > 0 {
		t.Errorf("canceled job flagged: %v", r.Violations)
	}
}

// maintdGood is a correct maintd history in milliseconds: m1 leads with
// epoch 4 until it is paused at 1000 and m2 takes over with epoch 6 at
// 1400; m1 is resumed at 2500, answers once more with its old epoch (the
// paused leader's handover), says it is a follower at 2560 and answers no
// more.
func maintdGood() MaintdHistory {
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	probe := func(m string, start, end int64, epoch uint64) MaintdProbe {
		p := MaintdProbe{Member: m, Start: ms(start), End: ms(end)}
		if epoch > 0 {
			p.Answered, p.Code, p.Epoch = true, 200, epoch
		} else {
			p.Err = "refused"
		}
		return p
	}
	sample := func(m string, call int64, state string, term, epoch uint64) Sample {
		return Sample{Member: m, Call: ms(call), At: ms(call + 5), State: state, Term: term, MaintdEpoch: epoch}
	}
	return MaintdHistory{
		Candidates: []string{"m1", "m2", "m3"},
		Elections: []Election{
			{Member: "m1", Epoch: 4, Term: 3, Elected: ms(90), Established: ms(95)},
			{Member: "m2", Epoch: 6, Term: 5, Elected: ms(1300), Established: ms(1350)},
		},
		Faults: []Fault{{Kind: PauseLeader, Targets: []string{"m1"}, Start: ms(1000), End: ms(2500)}},
		Probes: []MaintdProbe{
			probe("m1", 0, 1, 0), probe("m2", 0, 1, 0), probe("m3", 0, 1, 0),
			probe("m1", 100, 102, 4), probe("m2", 100, 101, 0), probe("m3", 100, 101, 0),
			probe("m1", 900, 902, 4),
			probe("m1", 1010, 1310, 0), // paused: timed out
			probe("m2", 1400, 1402, 6), probe("m3", 1400, 1401, 0),
			probe("m1", 2400, 2505, 4), // began paused, answered on SIGCONT
			probe("m2", 2450, 2452, 6),
			probe("m1", 2600, 2601, 0), probe("m2", 2600, 2602, 6),
			probe("node21", 2600, 2601, 0),
		},
		Samples: []Sample{
			sample("m1", 150, "leader", 3, 4), sample("m2", 150, "follower", 3, 0),
			sample("m2", 1500, "leader", 5, 6), sample("m3", 1500, "follower", 5, 0),
			sample("m1", 2560, "follower", 5, 4), // maintd still named: closing
			sample("m1", 2700, "follower", 5, 0),
		},
	}
}

func TestMaintdCheckPassesACorrectHistory(t *testing.T) {
	in := maintdGood()
	r := CheckMaintd(in)
	if len(r.Violations) > 0 {
		t.Fatalf("correct history flagged: %v", r.Violations)
	}
	if r.Answers != 6 || r.Epochs != 2 || r.Handovers != 1 {
		t.Errorf("answers %d epochs %d handovers %d, want 6, 2, 1", r.Answers, r.Epochs, r.Handovers)
	}
	// The resumed leader answered before the harness took the fault's end
	// (seen in CI: answer ended at 45.016 s, End 45.018 s, SIGCONT sent
	// when the heal began): a handover, not a violation.
	early := maintdGood()
	early.Faults[0].Healing, early.Faults[0].End = early.Faults[0].End, early.Faults[0].End+int64(10*time.Millisecond)
	if r := CheckMaintd(early); len(r.Violations) > 0 || r.Handovers != 1 {
		t.Errorf("answer between the SIGCONT and the fault's end: %v, %d handovers", r.Violations, r.Handovers)
	}
	// Without Healing, the same answer is judged against End.
	early.Faults[0].Healing = 0
	if r := CheckMaintd(early); len(r.Violations) == 0 {
		t.Errorf("answer before the recorded resume passed without Healing")
	}
	after, v := CheckFinalMaintd(in.Probes, FinalMaintd{Leader: "m2", Epoch: 6, Elected: 1300 * 1e6, Healed: 2500 * 1e6})
	if len(v) > 0 || after != 102*time.Millisecond {
		t.Errorf("final: %v after the election, %v; want 102ms", after, v)
	}
}

func TestMaintdOnTwoMembersIsCaught(t *testing.T) {
	// (a) One epoch answering on two members.
	in := maintdGood()
	in.Probes = append(in.Probes, MaintdProbe{Member: "m3", Start: 1500e6, End: 1501e6, Answered: true, Epoch: 6})
	v := CheckMaintd(in).Violations
	expect(t, "maintd", v, "maintd epoch 6 seen on 2 members: m2")
	expect(t, "maintd", v, "maintd epoch 6 seen on m3, but m2 established it")
	// A status naming an epoch on another member; two members running
	// maintd in one term.
	in = maintdGood()
	in.Samples = append(in.Samples, Sample{Member: "m3", Call: 1600e6, At: 1601e6, State: "leader", Term: 5, MaintdEpoch: 6})
	v = CheckMaintd(in).Violations
	expect(t, "maintd", v, "maintd epoch 6 seen on 2 members")
	expect(t, "maintd", v, "maintd running on several members in term 5 (status): m2, m3")
	// An answer without its epoch, an epoch nobody established, maintd on
	// a plain node.
	in = maintdGood()
	in.Probes = append(in.Probes,
		MaintdProbe{Member: "m2", Start: 2700e6, End: 2701e6, Answered: true, Header: ""},
		MaintdProbe{Member: "node21", Start: 2700e6, End: 2701e6, Answered: true, Epoch: 9})
	v = CheckMaintd(in).Violations
	expect(t, "maintd", v, "maintd on m2 answered [2.700s, 2.701s] without a valid X-Gnt-Maintd-Epoch")
	expect(t, "maintd", v, "maintd answered on node21 [2.700s, 2.701s], which is not a candidate")
	expect(t, "maintd", v, "maintd epoch 9 seen on node21, but no member's log established it")
}

func TestMaintdOfTwoLeadershipsAtOnceIsCaught(t *testing.T) {
	// (b) Without the pause, m1's late answer overlaps m2's: two
	// leaderships answering at once.
	in := maintdGood()
	in.Faults = nil
	in.Probes = slices.DeleteFunc(in.Probes, func(p MaintdProbe) bool { return p.Member == "m2" && p.Start == 1400e6 })
	v := CheckMaintd(in).Violations
	expect(t, "maintd", v, "maintd of epoch 4 answered on m1 [2.400s, 2.505s] in a probe window overlapping that of epoch 6 on m2 [2.450s, 2.452s]")
	// A deposed maintd answering after its successor did, with no pause
	// to explain it, or longer than HandoverGrace after the SIGCONT.
	in = maintdGood()
	in.Probes = append(in.Probes, MaintdProbe{Member: "m1", Start: 2540e6, End: 2545e6, Answered: true, Epoch: 4})
	in.Faults[0].End = 1200e6
	v = CheckMaintd(in).Violations
	expect(t, "maintd", v, "maintd of epoch 4 answered on m1 [2.400s, 2.505s] after epoch 6 on m2 [1.400s, 1.402s]")
	expect(t, "maintd", v, "(and 1 more such)")
}

func TestMaintdAfterStepDownIsCaught(t *testing.T) {
	// (c) m1 said it was a follower at 2560 and still answers at 5000;
	// its status names maintd at 5000 too.
	in := maintdGood()
	in.Probes = append(in.Probes, MaintdProbe{Member: "m1", Start: 5000e6, End: 5002e6, Answered: true, Epoch: 4})
	in.Samples = append(in.Samples, Sample{Member: "m1", Call: 5000e6, At: 5003e6, State: "follower", Term: 5, MaintdEpoch: 4})
	r := CheckMaintd(in)
	expect(t, "maintd", r.Violations, "maintd of epoch 4 still answered on m1 [5.000s, 5.002s], 2.435s after its status said follower in term 5")
	expect(t, "maintd", r.Violations, "the status of m1 named maintd epoch 4 at 5.000s, 2.435s after it said follower in term 5")
	// Within the grace it is the monitor's reaction, and measured.
	in = maintdGood()
	in.Probes = append(in.Probes, MaintdProbe{Member: "m1", Start: 2570e6, End: 2580e6, Answered: true, Epoch: 4})
	r = CheckMaintd(in)
	if len(r.Violations) > 0 || r.LateClose != 20*time.Millisecond {
		t.Errorf("answer 15 ms after the status: %v, late close %v (want 20ms)", r.Violations, r.LateClose)
	}
	// A new leadership of the member after its step-down is not late,
	// even before a status shows it.
	in = maintdGood()
	in.Elections = append(in.Elections, Election{Member: "m1", Epoch: 8, Term: 7, Elected: 6000e6, Established: 6010e6})
	in.Probes = append(in.Probes, MaintdProbe{Member: "m1", Start: 6020e6, End: 6022e6, Answered: true, Epoch: 8})
	if r = CheckMaintd(in); len(r.Violations) > 0 {
		t.Errorf("a new leadership flagged: %v", r.Violations)
	}
}

func TestFinalMaintdIsChecked(t *testing.T) {
	in := maintdGood()
	// Never answered with the final epoch...
	_, v := CheckFinalMaintd(in.Probes, FinalMaintd{Leader: "m2", Epoch: 7, Elected: 1300e6, Healed: 2500e6})
	expect(t, "final maintd", v, "the final leader m2 (epoch 7, elected at 1.300s) never answered on port 1816")
	// ...or too late after healing.
	in.Probes = []MaintdProbe{{Member: "m2", Start: 9000e6, End: 9001e6, Answered: true, Epoch: 6}}
	after, v := CheckFinalMaintd(in.Probes, FinalMaintd{Leader: "m2", Epoch: 6, Elected: 1300e6, Healed: 2500e6})
	expect(t, "final maintd", v, "first answered on port 1816 at 9.001s, 6.501s after healing, later than 5s")
	if after != 7701*time.Millisecond {
		t.Errorf("after %v, want 7.701s", after)
	}
}

func TestParseElections(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	log := "==== 2026-01-01T00:00:00.5Z start: gntd agent\n" +
		"2026-01-01T00:00:01.000Z [INFO]  m1.raft: entering leader state: leader=\"Node at 127.0.0.11:1817 [Leader]\"\n" +
		"2026-01-01T01:00:01.250+0100 [INFO]  m1: leadership established: epoch=4 term=3 took=250ms\n" +
		"2026-01-01T00:00:05.000Z [INFO]  m1: leadership established: epoch=6 term=5 took=1ms\n"
	got := ParseElections("m1", log, start)
	want := []Election{
		{Member: "m1", Epoch: 4, Term: 3, Elected: 1000e6, Established: 1250e6},
		{Member: "m1", Epoch: 6, Term: 5, Elected: 4999e6, Established: 5000e6}, // took=1ms
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestGossipCutNeedsIptables(t *testing.T) {
	if slices.Contains(FaultKinds(5, InProcess), GossipCut) || slices.Contains(NetworkKinds(3, InProcess), GossipCut) {
		t.Error("gossip-cut offered to an in-process run")
	}
	if !slices.Contains(FaultKinds(3, IPTables), GossipCut) || !slices.Contains(NetworkKinds(5, IPTables), GossipCut) {
		t.Error("gossip-cut missing from iptables runs")
	}
	// What iptables-nft 1.8 prints: protocols by number.
	out := `Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
    pkts      bytes target     prot opt in     out     source               destination
      41     5863 DROP       17   --  *      *       127.5.0.11           127.5.0.12           udp dpt:1818
       3      429 DROP       udp  --  *      *       127.5.0.12           127.5.0.11           udp dpt:1818
       7      420 DROP       6    --  *      *       127.5.0.11           127.5.0.12           tcp dpt:1817
`
	if n := droppedPackets(out, "udp"); n != 44 {
		t.Errorf("udp dropped %d, want 44", n)
	}
	if n := droppedPackets(out, "tcp"); n != 7 {
		t.Errorf("tcp dropped %d, want 7", n)
	}
}

// TestWorstRecovery: a fault's recovery is the earliest acknowledgement
// of a write invoked after it began, not the answer to the first such
// call (which may have waited the fault out while later writes went
// through).
func TestWorstRecovery(t *testing.T) {
	ms := int64(time.Millisecond)
	faults := []Fault{{Kind: "kill-leader", Start: 100 * ms}, {Kind: "split", Start: 1000 * ms}}
	ops := []*Op{
		{Kind: TagAdd, Outcome: OK, Call: 50 * ms, Return: 90 * ms},       // before the fault
		{Kind: TagAdd, Outcome: OK, Call: 110 * ms, Return: 900 * ms},     // waited, resending
		{Kind: TagRead, Outcome: OK, Call: 120 * ms, Return: 130 * ms},    // a read does not count
		{Kind: TagAdd, Outcome: Failed, Call: 130 * ms, Return: 140 * ms}, // nor a failure
		{Kind: TagDel, Outcome: OK, Call: 200 * ms, Return: 350 * ms},     // writes work again
		{Kind: TagAdd, Outcome: OK, Call: 1010 * ms, Return: 1400 * ms},   // the split's first
	}
	worst, kind := worstRecovery(ops, faults)
	if worst != 400*time.Millisecond || kind != "split" {
		t.Fatalf("worst recovery %v (%s), want 400ms (split)", worst, kind)
	}
	ops[4].Outcome = Indeterminate
	if worst, kind := worstRecovery(ops, faults); worst != 800*time.Millisecond || kind != "kill-leader" {
		t.Fatalf("without the quick write: %v (%s), want 800ms (kill-leader)", worst, kind)
	}
}
