package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// ganetiPython returns Debian's python3 with Ganeti's RAPI client, or
// skips the test.
func ganetiPython(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pycurl, ganeti.rapi.client").CombinedOutput(); err != nil {
		t.Skipf("Ganeti's RAPI client is not installed (apt-get install python3-ganeti-rapi python3-pycurl): %v %s", err, out)
	}
	return py
}

// runGanetiClient runs a Python script given host, port, CA file, user and
// password as its arguments, and returns what it printed.
func runGanetiClient(ctx context.Context, t *testing.T, c *Cluster, py string, m *Member, script string) string {
	t.Helper()
	ca := filepath.Join(c.Dir, ".config", "gnt", "ca.pem")
	out, err := exec.CommandContext(ctx, py, "-c", script, m.IP, "5080", ca, "ops", "ops-secret").CombinedOutput()
	if err != nil {
		t.Fatalf("Ganeti's client: %v\n%s", err, out)
	}
	return string(out)
}

// TestReinstallAsGaneti: POST /2/instances/[i]/reinstall on a running
// instance, from Ganeti's own client (which sends the version-1 body as
// /2/features claims instance-reinstall-reqv1), is one job that shuts it
// down, reinstalls it and starts it; no_startup leaves it down; the legacy
// query form works; osparams are kept on the instance (a wrong shape is refused by name); dry-run changes
// nothing; `gnt instance reinstall -f` does the same as the client.
func TestReinstallAsGaneti(t *testing.T) {
	py := ganetiPython(t)
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	addUser(ctx, t, c, "ops", "ops-secret", true)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	wantStatus := func(status string) {
		t.Helper()
		c.Eventually(30*time.Second, 200*time.Millisecond, "web1 "+status, func() error {
			s, o, err := c.instanceStatus(leader, "web1")
			if err != nil {
				return err
			}
			if s != status {
				return &statusErr{s, o}
			}
			return nil
		})
	}
	wantStatus(rpc.InstStatusRunning)

	script := `
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))
def run(jid):
    ok = c.WaitForJobCompletion(jid, period=0.1, retries=600)
    j = c.GetJobStatus(jid)
    log = " | ".join(str(l[3]) for op in j["oplog"] for l in op)
    return ok, j["summary"], log
print("features", "instance-reinstall-reqv1" in c.GetFeatures())
ok, summary, log = run(c.ReinstallInstance("web1"))
print("start", ok, ",".join(summary), "reinstalled web1" in log)
print("admin-after-start", c.GetInstance("web1")["admin_state"])
ok, summary, log = run(c.ReinstallInstance("web1", os="debian", no_startup=True))
print("nostart", ok, ",".join(summary))
print("admin-after-nostart", c.GetInstance("web1")["admin_state"])
ok, summary, log = run(c.ReinstallInstance("web1", osparams={"label": "yes"}, no_startup=True))
print("osparams", ok)
try:
    c.ReinstallInstance("web1", osparams=["not", "a", "dict"])
    print("bad osparams accepted")
except rc.GanetiApiError as e:
    print("bad osparams refused", e.code, "osparams" in str(e))
jid = c._SendRequest("POST", "/2/instances/web1/reinstall", [("os", "debian"), ("nostartup", 0)], None)
ok, summary, log = run(jid)
print("legacy", ok, ",".join(summary))
print("admin-after-legacy", c.GetInstance("web1")["admin_state"])
`
	out := runGanetiClient(ctx, t, c, py, leader, script)
	wantStatus(rpc.InstStatusRunning)
	for _, want := range []string{
		"features True",
		"start True INSTANCE_SHUTDOWN(web1),INSTANCE_REINSTALL(web1),INSTANCE_STARTUP(web1) True",
		"admin-after-start up",
		"nostart True INSTANCE_SHUTDOWN(web1),INSTANCE_REINSTALL(web1)\n",
		"admin-after-nostart down",
		"osparams True\n",
		"bad osparams refused 400 True",
		"legacy True INSTANCE_SHUTDOWN(web1),INSTANCE_REINSTALL(web1),INSTANCE_STARTUP(web1)",
		"admin-after-legacy up",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Ganeti's client output lacks %q:\n%s", want, out)
		}
	}

	// Dry run: checked, nothing done; the instance keeps running.
	if out, err := c.GNT("instance", "reinstall", "-f", "--dry-run", "--no-startup", "web1"); err != nil {
		t.Fatalf("gnt instance reinstall --dry-run: %v\n%s", err, out)
	}
	wantStatus(rpc.InstStatusRunning)
	// The CLI without --force and without a terminal asks nobody and
	// does nothing.
	if out, code := c.GNTExit("instance", "reinstall", "--no-startup", "web1"); code == 0 || !strings.Contains(out, "use --force") {
		t.Errorf("gnt instance reinstall without -f nor terminal: exit %d\n%s", code, out)
	}
	wantStatus(rpc.InstStatusRunning)
	if out, err := c.GNT("instance", "reinstall", "-f", "--no-startup", "web1"); err != nil || !strings.Contains(out, "reinstalled web1") {
		t.Fatalf("gnt instance reinstall -f --no-startup: %v\n%s", err, out)
	}
	wantStatus(rpc.InstStatusAdminDown)
	if out, err := c.GNT("instance", "reinstall", "-f", "web1"); err != nil {
		t.Fatalf("gnt instance reinstall -f: %v\n%s", err, out)
	}
	wantStatus(rpc.InstStatusRunning)
}

type statusErr struct{ status, oper string }

func (e *statusErr) Error() string { return "status " + e.status + " oper_state " + e.oper }
