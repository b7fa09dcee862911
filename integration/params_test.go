package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestParametersRoundTrip drives the parameter model through gnt's CLI
// against real gntds: the cluster's -H/-B/-N/-D/--enabled-hypervisors,
// an instance's -H/-B/-O and --net (or none: one NIC of the cluster's
// nicparams; --no-nics: none) at creation and modification; each
// value shows in the API's fields (filled and custom), and a global
// hypervisor parameter, an unknown key and a routed NIC without an IP
// are refused by name, changing nothing.
func TestParametersRoundTrip(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	run := func(args ...string) { t.Helper(); c.MustGNT(t, args...) }
	get := func(path string) map[string]any { t.Helper(); return c.GetObject(t, path) }
	same := func(what string, got any, want string) {
		t.Helper()
		var w any
		if err := json.Unmarshal([]byte(want), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, w) {
			g, _ := json.Marshal(got)
			t.Errorf("%s = %s, want %s", what, g, want)
		}
	}
	run("cluster", "modify", "--enabled-hypervisors", "fake,kvm", "-H", "fake:kernel_args=console=ttyS0,migration_bandwidth=64",
		"-B", "vcpus=2", "-N", "link=br7", "-D", "drbd:resync-rate=2000")
	info := get("/2/info")
	same("enabled_hypervisors", info["enabled_hypervisors"], `["fake","kvm"]`)
	same("default_hypervisor", info["default_hypervisor"], `"fake"`)
	same("hvparams.fake.migration_bandwidth", info["hvparams"].(map[string]any)["fake"].(map[string]any)["migration_bandwidth"], `64`)
	same("diskparams.drbd.resync-rate", info["diskparams"].(map[string]any)["drbd"].(map[string]any)["resync-rate"], `2000`)

	run("instance", "add", "-t", "diskless", "-n", "node21", "--no-start", "--no-install",
		"-H", "fake:kernel_path=/boot/k,acpi=no", "-B", "maxmem=256", "-O", "dist=bookworm",
		"--net", "mode=routed,ip=192.0.2.77,vlan=.5", "--net", "name=eth1", "pw1")
	in := get("/2/instances/pw1")
	same("hypervisor", in["hypervisor"], `"fake"`)
	same("custom_hvparams", in["custom_hvparams"], `{"acpi":false,"kernel_path":"/boot/k"}`)
	same("hvparams.kernel_args", in["hvparams"].(map[string]any)["kernel_args"], `"console=ttyS0"`)
	same("beparams.vcpus", in["beparams"].(map[string]any)["vcpus"], `2`)
	same("beparams.maxmem", in["beparams"].(map[string]any)["maxmem"], `256`)
	same("custom_osparams", in["custom_osparams"], `{"dist":"bookworm"}`)
	same("nic.modes", in["nic.modes"], `["routed","bridged"]`)
	same("nic.links", in["nic.links"], `["br7","br7"]`)
	same("nic.vlans", in["nic.vlans"], `[".5",""]`)

	// Without --net one NIC of the cluster's nicparams (Ganeti's add),
	// with --no-nics none.
	run("instance", "add", "-t", "diskless", "-n", "node21", "--no-start", "--no-install", "pw3")
	in3 := get("/2/instances/pw3")
	same("pw3 nic.modes", in3["nic.modes"], `["bridged"]`)
	same("pw3 nic.links", in3["nic.links"], `["br7"]`)
	run("instance", "add", "-t", "diskless", "-n", "node21", "--no-start", "--no-install", "--no-nics", "pw4")
	same("pw4 nic.modes", get("/2/instances/pw4")["nic.modes"], `[]`)

	run("instance", "modify", "pw1", "-H", "-kernel_path,serial_speed=115200", "--net", "1:link=br8", "-B", "always_failover")
	in = get("/2/instances/pw1")
	same("custom_hvparams", in["custom_hvparams"], `{"acpi":false,"serial_speed":115200}`)
	same("nic.links", in["nic.links"], `["br7","br8"]`)
	same("custom_beparams.always_failover", in["custom_beparams"].(map[string]any)["always_failover"], `true`)

	before := c.configView(t)
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"instance", "modify", "pw1", "-H", "migration_port=9000"}, "hvparams.migration_port"},
		{[]string{"instance", "modify", "pw1", "-H", "kernel_pth=/k"}, "hvparams.kernel_pth"},
		{[]string{"instance", "modify", "pw1", "--net", "1:mode=routed"}, "nics.1.ip"},
		{[]string{"instance", "modify", "pw1", "--net", "0:mode=route"}, "nics.0.mode"},
		{[]string{"cluster", "modify", "-H", "kvm:disk_type=floppy"}, "hvparams.kvm.disk_type"},
		{[]string{"cluster", "modify", "-D", "rbd:pool=x"}, "diskparams.rbd"},
		{[]string{"instance", "add", "-t", "diskless", "-n", "node21", "--no-start", "-H", "exec:acpi=no", "pw2"}, "hvparams.acpi"},
		{[]string{"instance", "add", "-t", "diskless", "-n", "node21", "--no-start", "-H", "exec", "pw2"}, "exec is not enabled"},
		{[]string{"instance", "add", "-t", "diskless", "-n", "node21", "--no-start", "--no-nics", "--net", "mode=routed,ip=192.0.2.78", "pw2"}, "--no-nics and --net exclude each other"},
	} {
		out, code := c.GNTExit(bad.args...)
		if code == 0 || !strings.Contains(out, bad.want) {
			t.Errorf("gnt %s: exit %d, %q; want a refusal naming %s", strings.Join(bad.args, " "), code, out, bad.want)
		}
	}
	if after := c.configView(t); after != before {
		t.Error("refused parameters changed the configuration")
	}
}

// TestParametersGanetiClient: Ganeti's own RAPI client (lib/rapi/client.py)
// sets the parameter model as its users' scripts do (ModifyCluster,
// CreateInstance, ModifyInstance with hvparams, beparams, osparams,
// nicparams and NIC modifications) and reads them back; a parameter gnt
// does not take raises GanetiApiError 400, not another exception.
func TestParametersGanetiClient(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pycurl, ganeti.rapi.client").CombinedOutput(); err != nil {
		t.Skipf("Ganeti's RAPI client is not installed (apt-get install python3-ganeti-rapi python3-pycurl): %v %s", err, out)
	}
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	leader := c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addUser(ctx, t, c, "ops", "ops-secret", true)
	ca := filepath.Join(c.Dir, ".config", "gnt", "ca.pem")
	script := `
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))

def ok(jid):
    if not c.WaitForJobCompletion(jid, period=0.1, retries=300):
        print("job", jid, "failed", c.GetJobStatus(jid)["opresult"])
        sys.exit(1)

ok(c.ModifyCluster(hvparams={"fake": {"kernel_args": "console=ttyS0"}}, beparams={"vcpus": 2}, nicparams={"link": "br7"},
                   enabled_hypervisors=["fake", "kvm"]))
info = c.GetInfo()
print("cluster", info["default_hypervisor"], info["hvparams"]["fake"]["kernel_args"], info["beparams"]["default"]["vcpus"], info["nicparams"]["default"]["link"])
ok(c.CreateInstance("create", "pw3", "diskless", [], [{"mode": "routed", "ip": "192.0.2.33"}], pnode="node21",
                    hypervisor="fake", hvparams={"kernel_path": "/boot/k"}, beparams={"maxmem": 256}, osparams={"dist": "d"},
                    tags=["web"], conflicts_check=True, no_install=True, start=False))
i = c.GetInstance("pw3")
print("created", i["hypervisor"], i["custom_hvparams"]["kernel_path"], i["hvparams"]["kernel_args"], i["beparams"]["vcpus"], i["beparams"]["maxmem"], i["nic.modes"], i["nic.links"], i["custom_osparams"], i["tags"])
ok(c.ModifyInstance("pw3", hvparams={"acpi": False}, nics=[("modify", 0, {"ip": "192.0.2.34"}), ("add", -1, {"link": "br9"})], osparams={"dist": "default"}))
i = c.GetInstance("pw3")
print("modified", i["custom_hvparams"]["acpi"], i["nic.ips"], i["nic.links"], i["custom_osparams"])
for name, call in [("hotplug", lambda: c.ModifyInstance("pw3", hotplug=True)),
                   ("global", lambda: c.ModifyInstance("pw3", hvparams={"migration_port": 1})),
                   ("vg_name", lambda: c.ModifyCluster(vg_name="xenvg"))]:
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
	for _, want := range []string{"cluster fake console=ttyS0 2 br7",
		"created fake /boot/k console=ttyS0 2 256 ['routed'] ['br7'] {'dist': 'd'} ['web']",
		"modified False ['192.0.2.34', None] ['br7', 'br9'] {}",
		"hotplug refused 400", "global refused 400", "vg_name refused 400"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Ganeti's client output lacks %q", want)
		}
	}
}

// TestHypervisorMismatch: each node registers its gntd's driver; an
// instance of hypervisor kvm is refused at submission on a node running
// the fake driver, naming both, and the allocator places it on the node
// running kvm.
func TestHypervisorMismatch(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1, MemberArgs: func(name, _ string) []string {
		if name == "node21" {
			return []string{"--hypervisor", "kvm", "--kvm-accel", "tcg"}
		}
		return []string{"--hypervisor", "fake"}
	}})
	c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(extra map[string]any) (int64, error) {
		body := map[string]any{"__version__": 1, "instance_name": "vm1", "disk_template": "diskless", "nics": []any{},
			"hypervisor": "kvm", "os_type": "noop", "no_install": true, "start": false}
		for k, v := range extra {
			body[k] = v
		}
		id, _, err := c.Client().Submit(ctx, "POST", "/2/instances", nil, body)
		return id, err
	}
	c.Eventually(30*time.Second, 500*time.Millisecond, "node11 refused as the fake driver's", func() error {
		_, err := create(map[string]any{"pnode": "node11"})
		if err == nil || !strings.Contains(err.Error(), "instance vm1 runs under hypervisor kvm, but node node11 runs the fake driver") {
			return fmt.Errorf("create on node11: %v", err)
		}
		return nil
	})
	id, err := create(map[string]any{"iallocator": "hail"})
	if err != nil {
		t.Fatal(err)
	}
	if j := c.waitFinal(id, time.Minute); j.Status != fsm.StatusSuccess {
		t.Fatalf("create by the allocator: job %d %s\n%v", id, j.Status, j.OpLog)
	}
	in, err := c.Client().Instance(ctx, "vm1")
	if err != nil || in.PNode != "node21" {
		t.Fatalf("vm1 placed on %+v %v, want node21 (the kvm node)", in, err)
	}
}
