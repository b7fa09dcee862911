package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// mayRefuse are the client's methods gnt answers with GanetiApiError in
// TestGanetiClientEveryMethod, each with the text its refusal must have;
// any other refusal fails the test.
var mayRefuse = map[string]string{
	// Not served, by design (docs/api.md): 501.
	"PrepareExport":  "501 prepare-export is not supported",
	"ExportInstance": "501 export is not supported",
}

// mayFailJob are the client's methods whose job is meant to fail in
// TestGanetiClientEveryMethod: the script names a physical volume and a
// volume group the nodes do not have (TestNodeStorageAsGaneti checks the
// messages).
var mayFailJob = map[string]bool{"ModifyNodeStorageUnits": true, "RepairNodeStorageUnits": true}

// TestGanetiClientEveryMethod runs every public method of Ganeti's own
// RAPI client (lib/rapi/client.py, Debian's python3-ganeti-rapi) against a
// cluster of real gntds, through the leader and then through a follower
// (testdata/ganeti_client_all.py): each call must succeed or raise
// GanetiApiError, never another exception, and a method of the client the
// script does not call fails the test. Then, through the follower, a write
// followed at once by WaitForJobCompletion succeeds 100 times of 100
// (read-your-writes on every candidate).
func TestGanetiClientEveryMethod(t *testing.T) {
	py := ganetiPython(t)
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	for _, n := range []string{"node21", "node22"} {
		c.WaitAgent(c.Member(n), 30*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	addUser(ctx, t, c, "ops", "ops-secret", true)
	ca := filepath.Join(c.Dir, ".config", "gnt", "ca.pem")
	script, err := filepath.Abs(filepath.Join("testdata", "ganeti_client_all.py"))
	if err != nil {
		t.Fatal(err)
	}

	for _, run := range []struct {
		m      *Member
		suffix string
	}{{leader, "l"}, {follower, "f"}} {
		out, err := exec.CommandContext(ctx, py, script, run.m.IP, "5080", ca, "ops", "ops-secret", run.suffix).CombinedOutput()
		if err != nil {
			t.Fatalf("through %s: the script failed: %v\n%s", run.m.Name, err, out)
		}
		var ok, refused, failedJobs []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				t.Errorf("through %s: unexpected line %q", run.m.Name, line)
				continue
			}
			switch f[0] {
			case "OK":
				ok = append(ok, f[1])
				if (strings.Contains(line, "'error')") && !mayFailJob[f[1]]) || strings.Contains(line, "'canceled')") {
					failedJobs = append(failedJobs, line)
				}
			case "APIERR":
				refused = append(refused, line)
			case "EXC":
				t.Errorf("through %s: %s raised something other than GanetiApiError: %s", run.m.Name, f[1], line)
			case "MISSING":
				t.Errorf("the client's method %s is not called by %s", f[1], filepath.Base(script))
			default:
				t.Errorf("through %s: unexpected line %q", run.m.Name, line)
			}
		}
		for _, line := range refused {
			f := strings.Fields(line)
			if why, ok := mayRefuse[f[1]]; !ok || !strings.Contains(line, why) {
				t.Errorf("through %s: %s", run.m.Name, line)
			}
		}
		sort.Strings(refused)
		t.Logf("through %s: %d methods succeeded, %d answered GanetiApiError:\n  %s", run.m.Name, len(ok), len(refused), strings.Join(refused, "\n  "))
		for _, line := range failedJobs {
			t.Errorf("through %s: the job of a call failed: %s", run.m.Name, line)
		}
		if len(ok)+len(refused) < 81 {
			t.Errorf("through %s: %d calls reported, want at least the client's 81 methods", run.m.Name, len(ok)+len(refused))
		}
	}

	ryw := `
import sys
from ganeti.rapi import client as rc
c = rc.GanetiRapiClient(sys.argv[1], port=5080, username="ops", password="ops-secret",
                        curl_config_fn=rc.GenericCurlConfig(cafile=sys.argv[2]))
ok = 0
for i in range(100):
    jid = c.AddClusterTags(["ryw%d" % i])
    try:
        if c.WaitForJobCompletion(jid, period=0.05, retries=400):
            ok += 1
        else:
            print("job", jid, c.GetJobStatus(jid)["status"])
    except rc.GanetiApiError as e:
        print("job", jid, "GanetiApiError", e.code, e)
print("ok", ok)
`
	out, err := exec.CommandContext(ctx, py, "-c", ryw, follower.IP, ca).CombinedOutput()
	if err != nil {
		t.Fatalf("write then wait through %s: %v\n%s", follower.Name, err, out)
	}
	if !strings.Contains(string(out), "ok 100\n") {
		t.Errorf("write then WaitForJobCompletion through follower %s, 100 times:\n%s", follower.Name, out)
	}
}
