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

// TestGanetiClientNetworks drives networks with Ganeti's own RAPI client
// on a cluster of real gntds, through the leader and then a follower: a
// network is created and connected to the default group, an instance
// gets a NIC on it with ip=pool (the lowest free address), the network
// shows the address used, its removal and disconnection are refused
// while the NIC uses it, and everything is removed again.
func TestGanetiClientNetworks(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pycurl, ganeti.rapi.client").CombinedOutput(); err != nil {
		t.Skipf("Ganeti's RAPI client is not installed (apt-get install python3-ganeti-rapi python3-pycurl): %v %s", err, out)
	}
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	leader := c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addUser(ctx, t, c, "ops", "ops-secret", true)
	ca := filepath.Join(c.Dir, ".config", "gnt", "ca.pem")
	script := `
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw, net, subnet, inst = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))

def ok(jid):
    if not c.WaitForJobCompletion(jid, period=0.1, retries=300):
        print("job", jid, "failed", c.GetJobStatus(jid)["opresult"])
        return False
    return True

def refused(name, call):
    try:
        jid = call()
    except rc.GanetiApiError as e:
        print(name, "refused", e.code)
        return
    if c.WaitForJobCompletion(jid, period=0.1, retries=300):
        print(name, "accepted")
    else:
        print(name, "refused job")

base = subnet.rsplit(".", 1)[0]
print("create", ok(c.CreateNetwork(net, subnet + "/28", gateway=base + ".1", add_reserved_ips=base + ".2", tags="nfdhcpd", mac_prefix="ac:de:48")))
print("connect", ok(c.ConnectNetwork(net, "default", "bridged", "br0")))
print("networks", net in c.GetNetworks())
print("instance", ok(c.CreateInstance("create", inst, "plain", [{"size": 512}], [{"network": net, "ip": "pool"}],
      os="debian", pnode="node21", beparams={"memory": 128}, start=False)))
i = c.GetInstance(inst)
print("nic", i["nic.ips"], i["nic.networks.names"], i["nic.modes"], i["nic.links"], i["nic.macs"][0][:8])
n = c.GetNetwork(net)
print("network", n["network"], n["gateway"], n["free_count"], n["reserved_count"], n["map"], n["inst_list"], n["group_list"], n["tags"])
print("reserved", n["external_reservations"])
print("nic-add", ok(c.ModifyInstance(inst, nics=[["add", -1, {"network": net, "ip": "pool"}]])), c.GetInstance(inst)["nic.ips"])
refused("nic-taken", lambda: c.ModifyInstance(inst, nics=[["modify", 1, {"ip": base + ".3"}]]))
refused("delete", lambda: c.DeleteNetwork(net))
refused("disconnect", lambda: c.DisconnectNetwork(net, "default"))
print("still", c.GetNetwork(net)["inst_list"], c.GetNetwork(net)["group_list"])
print("bulk", [x["name"] for x in c.GetNetworks(bulk=True)].count(net))
print("tags", ok(c.AddNetworkTags(net, ["extra"])), c.GetNetworkTags(net))
print("modify", ok(c.ModifyNetwork(net, add_reserved_ips=[base + ".9"], mac_prefix="aa:bb:cc")), c.GetNetwork(net)["mac_prefix"], c.GetNetwork(net)["free_count"])
# This client has no RenameNetwork (Ganeti added it later): its own
# request path sends what the newer one does.
jid = c._SendRequest("PUT", "/2/networks/%s/rename" % net, None, {"new_name": net + "x"})
print("rename", ok(jid), c.GetJobStatus(jid)["opresult"], net + "x" in c.GetNetworks(), c.GetInstance(inst)["nic.networks.names"][0])
net = net + "x"
print("cleanup", ok(c.DeleteInstance(inst)), ok(c.DisconnectNetwork(net, "default")), ok(c.DeleteNetwork(net)))
print("gone", net in c.GetNetworks())
`
	run := func(host, net, subnet, inst string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, py, "-c", script, host, "5080", ca, "ops", "ops-secret", net, subnet, inst).CombinedOutput()
		if err != nil {
			t.Fatalf("Ganeti's client against %s: %v\n%s", host, err, out)
		}
		t.Logf("Ganeti's client against %s:\n%s", host, out)
		return string(out)
	}
	check := func(out, net, base string) {
		t.Helper()
		for _, want := range []string{
			"create True", "connect True", "networks True", "instance True",
			"nic ['" + base + ".3'] ['" + net + "'] ['bridged'] ['br0'] ac:de:48",
			"network " + base + ".0/28 " + base + ".1 11 5 XXXX...........X ['web-" + net + "'] [['default', 'bridged', 'br0', '']] ['nfdhcpd']",
			"reserved " + base + ".0, " + base + ".1, " + base + ".2, " + base + ".15",
			"nic-add True ['" + base + ".3', '" + base + ".4']", "nic-taken refused", "delete refused", "disconnect refused",
			"still ['web-" + net + "'] [['default', 'bridged', 'br0', '']]",
			"bulk 1", "tags True ['extra', 'nfdhcpd']", "modify True aa:bb:cc 9",
			"rename True ['" + net + "x'] True " + net + "x",
			"cleanup True True True", "gone False",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("Ganeti's client output lacks %q", want)
			}
		}
	}
	check(run(leader.IP, "lan", "10.50.0.0", "web-lan"), "lan", "10.50.0")
	follower := c.Followers(leader)[0]
	check(run(follower.IP, "lan2", "10.60.0.0", "web-lan2"), "lan2", "10.60.0")
}
