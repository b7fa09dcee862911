package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGanetiClientDryRunAndErrors runs Ganeti's own RAPI client against a
// cluster with a running drbd instance: DeleteInstance and
// ShutdownInstance with dry_run leave it there and up; errors of the
// router (404, 405) and of the state raise GanetiApiError (their bodies
// have explain); ModifyNode's POST works; a failed job's opresult is
// Ganeti's ["OpExecError", [msg]]; cancelling a finished job answers
// [False, msg]; / answers None; EvacuateNode's job result is
// {"jobs": [[True, id]]}.
func TestGanetiClientDryRunAndErrors(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pycurl, ganeti.rapi.client").CombinedOutput(); err != nil {
		t.Skipf("Ganeti's RAPI client is not installed (apt-get install python3-ganeti-rapi python3-pycurl): %v %s", err, out)
	}
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	for _, m := range []*Member{c.Member("node21"), c.Member("node22")} {
		c.WaitAgent(m, 30*time.Second)
	}
	addUser(ctx, t, c, "ops", "ops-secret", true)
	if out, err := c.GNT("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "512", "--os-type", "debian", "-n", "node21:node22", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	ca := filepath.Join(c.Dir, ".config", "gnt", "ca.pem")
	script := `
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))
def wait(jid):
    c.WaitForJobCompletion(jid, period=0.1, retries=600)
    return c.GetJobStatus(jid)
j = wait(c.DeleteInstance("web1", dry_run=True))
print("delete dry run", j["status"], c.GetInstance("web1")["name"])
j = wait(c.ShutdownInstance("web1", dry_run=True))
print("shutdown dry run", j["status"], c.GetInstance("web1")["admin_state"])
for what, f in [("missing instance", lambda: c.GetInstance("nosuch")),
                ("router 404", lambda: c._SendRequest("GET", "/2/nosuch", None, None)),
                ("router 405", lambda: c._SendRequest("POST", "/2/info", None, None))]:
    try:
        f()
        print(what, "no error")
    except rc.GanetiApiError as e:
        print(what, "GanetiApiError", e.code)
print("root", c._SendRequest("GET", "/", None, None), c._SendRequest("GET", "/2", None, None))
j = wait(c.ModifyNode("node22", drained=False))
print("modify node", j["status"])
failed = c.RenameInstance("web1", "web7")
j = wait(failed)
print("rename", j["status"], j["opresult"][0][0])
print("cancel finished", c.CancelJob(failed))
jid = c.EvacuateNode("node22", mode=rc.NODE_EVAC_SEC)
j = wait(jid)
print("evacuate", j["status"], j["opresult"][0]["jobs"] == [[True, int(jid)]])
`
	out, err := exec.CommandContext(ctx, py, "-c", script, leader.IP, "5080", ca, "ops", "ops-secret").CombinedOutput()
	if err != nil {
		t.Fatalf("Ganeti's client: %v\n%s", err, out)
	}
	t.Logf("Ganeti's client:\n%s", out)
	for _, want := range []string{
		"delete dry run success web1", "shutdown dry run success up",
		"missing instance GanetiApiError 404", "router 404 GanetiApiError 404", "router 405 GanetiApiError 405",
		"root None None", "modify node success", "rename error OpExecError",
		"cancel finished [False, ", "evacuate success True",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Ganeti's client output lacks %q", want)
		}
	}
}
