package integration

import (
	"context"
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParametersRoundTrip drives the parameter model through gnt's CLI
// against real gntds: the cluster's -H/-B/-N/-D/--enabled-hypervisors,
// an instance's -H/-B/-O and --net at creation and modification; each
// value shows in the API's fields (filled and custom), and a global
// hypervisor parameter, an unknown key and a routed NIC without an IP
// are refused by name, changing nothing.
func TestParametersRoundTrip(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	run := func(args ...string) {
		t.Helper()
		if out, err := c.GNT(args...); err != nil {
			t.Fatalf("gnt %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	get := func(path string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out map[string]any
		if _, err := c.Client().Do(ctx, "GET", path, url.Values{"consistent": {"1"}}, nil, &out); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return out
	}
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
