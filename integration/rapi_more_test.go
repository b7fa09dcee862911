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

// TestGanetiClientMoreResources calls, with Ganeti's own RAPI client, the
// resources of rpc/handlers_more.go on a cluster of real gntds: an
// instance's info job (its run state as the agent reports it) and
// console, a disk's growth, a group's rename and node assignment,
// redistribute-config, a multi-allocation, and the operations gnt refuses with 501, which the client raises as
// GanetiApiError.
func TestGanetiClientMoreResources(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pycurl, ganeti.rapi.client").CombinedOutput(); err != nil {
		t.Skipf("Ganeti's RAPI client is not installed (apt-get install python3-ganeti-rapi python3-pycurl): %v %s", err, out)
	}
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	leader := c.WaitLeader(10 * time.Second)
	node := c.Member("node21")
	c.WaitAgent(node, 30*time.Second)
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addUser(ctx, t, c, "ops", "ops-secret", true)
	ca := filepath.Join(c.Dir, ".config", "gnt", "ca.pem")
	script := `
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))

def result(jid):
    if not c.WaitForJobCompletion(jid, period=0.1, retries=300):
        print("job", jid, "failed", c.GetJobStatus(jid)["opresult"])
        return None
    return c.GetJobStatus(jid)["opresult"][0]

info = result(c.GetInstanceInfo("web1"))["web1"]
print("info", info["run_state"], info["config_state"], info["pnode"], info["disks"][0]["size"])
print("static", result(c.GetInstanceInfo("web1", static=True))["web1"]["run_state"])
con = c.GetInstanceConsole("web1")
print("console", con["kind"], con["instance"])
result(c.CreateGroup("g2"))
print("renamed", result(c.RenameGroup("g2", "g3")))
print("assigned", result(c.AssignGroupNodes("g3", ["node21"])), c.GetNode("node21")["group.uuid"] == c.GetGroup("g3")["uuid"])
print("redist", "Raft" in result(c.RedistributeConfig()))
result(c.GrowInstanceDisk("web1", 0, 1024, wait_for_sync=True))
print("grown", c.GetInstance("web1")["disk.sizes"], result(c.GetInstanceInfo("web1"))["web1"]["disks"][0]["size"])
ma = result(c.InstancesMultiAlloc([
    {"name": "web2", "disk_template": "plain", "disks": [{"size": 512}], "nics": [], "os": "debian", "beparams": {"memory": 128}},
    {"name": "web3", "disk_template": "plain", "disks": [{"size": 512}], "nics": [], "os": "debian", "beparams": {"memory": 128}}]))
print("multi-alloc", ma["allocatable"], ma["failed"], all(c.WaitForJobCompletion(j, period=0.1, retries=300) for ok, j in ma["jobs"]))
print("created", sorted(c.GetInstances()))
print("activate", result(c.ActivateInstanceDisks("web1")))
print("deactivate", result(c.DeactivateInstanceDisks("web1")))
for name, call in [("grow0", lambda: c.GrowInstanceDisk("web1", 0, 0)),
                   ("prepare-export", lambda: c.PrepareExport("web1", "remote")),
                   ("export", lambda: c.ExportInstance("web1", "local", "node21"))]:
    try:
        call()
        print(name, "accepted")
    except rc.GanetiApiError as e:
        print(name, "refused", e.code)
`
	out, err := exec.CommandContext(ctx, py, "-c", script, leader.IP, "5080", ca, "ops", "ops-secret").CombinedOutput()
	if err != nil {
		t.Fatalf("Ganeti's client: %v\n%s", err, out)
	}
	t.Logf("Ganeti's client:\n%s", out)
	for _, want := range []string{"info up up node21 1024", "static None", "console message web1", "renamed g3",
		"assigned None True", "redist True", "multi-alloc ['web2', 'web3'] [] True", "created ['web1', 'web2', 'web3']", "activate [['node21', 'disk/0', '/", "shut it down before deactivating its disks", "deactivate None", "grown [2048] 2048",
		"grow0 refused 400", "prepare-export refused 501", "export refused 501"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Ganeti's client output lacks %q", want)
		}
	}
}
