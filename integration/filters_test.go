package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFiltersGanetiClient: job filter rules through Ganeti's own client
// (AddFilter, GetFilters, GetFilter, ReplaceFilter, DeleteFilter) against
// real gntds: a PAUSE rule on an opcode holds such a job in the queue
// while a later job of another opcode runs to its end, and deleting the
// rule lets the held job run; a REJECT rule cancels a job with a result
// naming the rule; RATE_LIMIT 1 runs jobs under it one after the other
// (each starts after the previous one ended); a bad rule is refused with
// 400.
func TestFiltersGanetiClient(t *testing.T) {
	py := ganetiPython(t)
	c := NewCluster(t, ClusterOptions{Candidates: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	addUser(ctx, t, c, "ops", "ops-secret", true)
	script := `
import sys, time
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))
def delay(seconds):
    # Two repeats without locks: jobs that would run side by side, each
    # recording its start (a single delay without locks records none).
    return c._SendRequest("POST", "/2/jobs", None, {"ops": [{"OP_ID": "OP_TEST_DELAY", "duration": seconds, "repeat": 2, "no_locks": True}]})
def wait(jid):
    return c.WaitForJobCompletion(jid, period=0.1, retries=600)

pause = c.AddFilter(0, [["opcode", ["=", "OP_ID", "OP_TAGS_SET"]]], "PAUSE", reason_trail=[["ops", "maintenance window", 1]])
print("filters", c.GetFilters() == [pause])
f = c.GetFilter(pause)
print("filter", f["action"], f["priority"], f["predicates"], f["reason_trail"][0][1])
held = c.AddClusterTags(["held"])
other = delay(0)
print("other", wait(other))
print("held", c.GetJobStatus(held)["status"], "held" in c.GetClusterTags())
c.DeleteFilter(pause)
print("released", wait(held), "held" in c.GetClusterTags())
print("filters-after", c.GetFilters())

reject = c.ReplaceFilter("b296f0c9-4809-46a8-b928-5ccf7720fa8c", 5, [["opcode", ["=", "OP_ID", "OP_TAGS_SET"]]], "REJECT")
jid = c.AddClusterTags(["rejected"])
print("rejected", wait(jid), c.GetJobStatus(jid)["status"], reject in str(c.GetJobStatus(jid)["opresult"]), "rejected" in c.GetClusterTags())
c.DeleteFilter(reject)

limit = c.AddFilter(1, [["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]], ["RATE_LIMIT", 1])
print("bulk", [x["action"] for x in c.GetFilters(bulk=True)])
jobs = [delay(0.25) for _ in range(3)]
print("limited", all(wait(j) for j in jobs))
st = [c.GetJobStatus(j) for j in jobs]
print("sequential", all(tuple(st[k+1]["start_ts"]) >= tuple(st[k]["end_ts"]) for k in range(2)))
c.DeleteFilter(limit)

for bad in ([["instance", ["=", "name", "x"]]], "PAUSE", -1), ([], "DROP", 0), ([], ["RATE_LIMIT", 0], 0):
    try:
        c.AddFilter(bad[2], bad[0], bad[1])
        print("bad accepted", bad)
    except rc.GanetiApiError as e:
        print("bad refused", e.code)
print("filters-end", c.GetFilters())
`
	follower := c.Followers(leader)[0]
	out := runGanetiClient(ctx, t, c, py, follower, script)
	for _, want := range []string{
		"filters True",
		"filter PAUSE 0 [['opcode', ['=', 'OP_ID', 'OP_TAGS_SET']]] maintenance window",
		"other True",
		"held queued False",
		"released True True",
		"filters-after []",
		"rejected False canceled True False",
		"bulk [['RATE_LIMIT', 1]]",
		"limited True",
		"sequential True",
		"filters-end []",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Ganeti's client output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "bad refused 400"); n != 3 {
		t.Errorf("%d bad rules refused with 400, want 3:\n%s", n, out)
	}
}

// TestFilterPausesMaintd: maintd's jobs carry the reason source
// gnt:daemon:maintd, so an operator pauses them with one rule on the
// reason: an evacuate incident's first job waits in the queue (the node
// is not drained) while the operator's own jobs run; deleting the rule
// lets maintd go on, and the node is drained.
func TestFilterPausesMaintd(t *testing.T) {
	c, state := diagnoseCluster(t)
	out, err := c.GNT("filter", "add", "--predicates", `[["reason", ["=", "source", "gnt:daemon:maintd"]]]`, "--action", "PAUSE")
	if err != nil {
		t.Fatalf("gnt filter add: %v\n%s", err, out)
	}
	uuid := strings.TrimSpace(out)
	if out, code := c.GNTExit("cluster", "modify", "--diagnose-data-collector-filename", "hw-check"); code != 0 {
		t.Fatalf("cluster modify: %s", out)
	}
	if err := os.WriteFile(state["node23"], []byte(`{"status":"evacuate","details":{"fan":3}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	leader := c.WaitLeader(10 * time.Second)
	var held int64
	c.Eventually(60*time.Second, 200*time.Millisecond, "maintd's job for node23 queued", func() error {
		var list []incident
		if _, err := maintdGet(leader, "/1/status", &list); err != nil {
			return err
		}
		for _, in := range list {
			if in.Node == "node23" && len(in.Jobs) > 0 {
				held = in.Jobs[0]
				return nil
			}
		}
		return fmt.Errorf("no job for node23 yet: %+v", list)
	})
	// The operator's job, submitted after maintd's, runs to its end.
	if out, err := c.GNT("cluster", "add-tags", "operator-was-here"); err != nil {
		t.Fatalf("operator's job: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := c.Client().Job(ctx, held)
	if err != nil || j.Status != "queued" {
		t.Fatalf("maintd's job %d: %+v %v; want it queued under the PAUSE rule", held, j.Status, err)
	}
	var ops []string
	for _, o := range j.Ops {
		ops = append(ops, string(o))
	}
	if !strings.Contains(strings.Join(ops, " "), "gnt:daemon:maintd") {
		t.Errorf("maintd's job %d has no gnt:daemon:maintd in its reason trail: %v", held, j.Ops)
	}
	n, err := c.Client().Node(ctx, "node23")
	if err != nil || n.Drained {
		t.Fatalf("node23 drained while maintd's jobs are paused: %+v %v", n, err)
	}
	if out, err := c.GNT("filter", "delete", uuid); err != nil {
		t.Fatalf("gnt filter delete: %v\n%s", err, out)
	}
	c.Eventually(60*time.Second, 200*time.Millisecond, "node23 drained by maintd", func() error {
		n, err := c.Client().Node(ctx, "node23")
		if err == nil && !n.Drained {
			err = fmt.Errorf("node23 not drained yet")
		}
		return err
	})
}
