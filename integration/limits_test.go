package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// opcodes is a JSON list of n OP_TEST_DELAY opcodes of no duration.
func opcodes(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(`{"OP_ID":"OP_TEST_DELAY","duration":0},`, n), ",") + "]"
}

// TestOversizedJobsRefused: with real gntds, the job that took down every
// leader in turn (OP_TEST_DELAY with repeat 2,000,000,000), a job of
// 20,000 opcodes (a 760 KB body), a submission of 1001 jobs, a disk of
// 2^63-1 MiB and candidate_pool_size 2^63-1 are each refused with a 400
// naming the field, sent to the leader or to a follower (which forwards
// them); the gnt CLI refuses the same job itself. Nothing moves: the
// leader and its term stay, the cluster serial and the job list stay.
// Then the cluster takes a write and runs a job.
func TestOversizedJobsRefused(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	leader := c.WaitLeader(30 * time.Second)
	follower := c.Followers(leader)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := c.ClientFor(leader)
	// Jobs of the start (node additions) are finished before "before".
	c.Eventually(30*time.Second, 100*time.Millisecond, "the start's jobs finished", func() error {
		jobs, err := cl.Jobs(ctx, true)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if !fsm.Finalized(j.Status) {
				return fmt.Errorf("job %d is %s", j.ID, j.Status)
			}
		}
		return nil
	})
	snapshot := func() (term uint64, serial int64, jobs []int64) {
		t.Helper()
		st, err := c.Status(leader)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cl.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		js, err := cl.Jobs(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js {
			jobs = append(jobs, j.ID)
		}
		return st.Term, info.SerialNo, jobs
	}
	term0, serial0, jobs0 := snapshot()

	for _, tc := range []struct {
		name, method, path, body, field string
	}{
		{"repeat 2e9", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2000000000}]}`, "repeat"},
		{"20000 opcodes", "POST", "/2/jobs", `{"ops":` + opcodes(20000) + `}`, "ops"},
		{"1001 jobs", "POST", "/2/gnt/jobs", `{"jobs":[` + strings.TrimSuffix(strings.Repeat(opcodes(1)+",", 1001), ",") + `]}`, "jobs"},
		{"disk of 2^63-1 MiB", "POST", "/2/instances", `{"instance_name":"web1","disks":[{"size":9223372036854775807}]}`, "disks.0.size"},
		{"candidate_pool_size 2^63-1", "PUT", "/2/modify", `{"candidate_pool_size":9223372036854775807}`, "candidate_pool_size"},
		{"repeated key", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":1,"repeat":2000000000}]}`, "ops.0.repeat"},
	} {
		for _, m := range []*Member{leader, follower} {
			r := rawAPI(ctx, c.HTTP(), tc.method, c.URL(m, tc.path), []byte(tc.body))
			if r.Err != nil || r.Status != http.StatusBadRequest || r.API.ErrorCode != string(fsm.CodeInval) || r.API.Field != tc.field {
				t.Errorf("%s to %s: %d %s [%s] %q (err %v); want 400 wrong_input [%s]",
					tc.name, m.Name, r.Status, r.API.ErrorCode, r.API.Field, r.API.Message, r.Err, tc.field)
			}
		}
	}
	out, code := c.GNTExit("debug", "delay", "--repeat", "2000000000", "0")
	if code != 1 || !strings.Contains(out, "repeat must be between 0 and 1000") {
		t.Errorf("gnt debug delay --repeat 2000000000: exit %d, output %q", code, out)
	}

	if now := c.Leader(); now != leader {
		t.Fatalf("the leader changed from %s to %v", leader.Name, now)
	}
	term1, serial1, jobs1 := snapshot()
	if term1 != term0 || serial1 != serial0 || !slices.Equal(jobs1, jobs0) {
		t.Fatalf("refused requests moved the cluster: term %d -> %d, serial %d -> %d, jobs %v -> %v",
			term0, term1, serial0, serial1, jobs0, jobs1)
	}
	for _, m := range c.Candidates() {
		if !m.Running() {
			t.Fatalf("%s is not running:\n%s", m.Name, m.log.Tail(30))
		}
	}

	// The cluster goes on: a configuration write, and a job through the
	// executor.
	if out, err := c.GNT("cluster", "add-tags", "after-limits"); err != nil {
		t.Fatalf("add-tags: %v\n%s", err, out)
	}
	if out, err := c.GNT("debug", "delay", "--repeat", "10", "0"); err != nil {
		t.Fatalf("debug delay --repeat 10: %v\n%s", err, out)
	}
	if _, serial2, _ := snapshot(); serial2 <= serial0 {
		t.Errorf("the tag write did not move the serial (%d -> %d)", serial0, serial2)
	}
}
