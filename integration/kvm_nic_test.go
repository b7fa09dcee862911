package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestKVMBridgedNIC: a gntd with the kvm driver and --kvm-netns, in a
// network namespace the test creates with a bridge br0, runs a guest
// created through the API with a NIC on br0: its tap is a port of the
// bridge while it runs and is gone after shutdown and remove; a NIC on a
// bridge the node lacks fails the create naming the NIC, the bridge and
// the node, before anything is recorded or made: no instance, no record
// on the node, no tap.
func TestKVMBridgedNIC(t *testing.T) {
	kernel, initrd := needKVMGuest(t)
	skipUnlessRoot(t, "the NIC test creates a network namespace and a bridge")
	ns := fmt.Sprintf("gnt-inics-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot create a network namespace (ip netns add): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ip := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v in %s: %v: %s", args, ns, err, out)
		}
		return string(out)
	}
	ip("link", "add", "br0", "type", "bridge")
	ip("link", "set", "br0", "up")

	c, m := kvmNode(t, "--kvm-netns", ns)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	create := func(name, link string) (string, string) {
		t.Helper()
		return createKVMGuest(ctx, t, c, m, name, kernel, initrd, []any{map[string]any{"link": link, "mode": "bridged"}}, nil)
	}
	if st, log := create("vm1", "br0"); st != fsm.StatusSuccess {
		t.Fatalf("instance create vm1: %s\n%s", st, log)
	}
	info, err := c.Client().Instance(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	tap := "gt" + strings.ReplaceAll(info.UUID, "-", "")[:9] + "n0"
	guestCounter(t, m, info.UUID, -1, 3*time.Minute)
	if out := ip("-o", "link", "show", "master", "br0"); !strings.Contains(out, tap) {
		t.Fatalf("ports of br0 in %s: %q, want the tap %s", ns, out, tap)
	}
	if len(info.NICMACs) != 1 {
		t.Fatalf("nic.macs of vm1: %v, want one", info.NICMACs)
	}
	if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", qemuPID(m, info.UUID))); !strings.Contains(string(cmd), "ifname="+tap+",") || !strings.Contains(string(cmd), "mac="+info.NICMACs[0]) {
		t.Errorf("qemu command line without the tap %s and MAC %v: %q", tap, info.NICMACs, cmd)
	}

	st, log := create("vm2", "nobr")
	if st == fsm.StatusSuccess || !strings.Contains(log, `NIC 0 of instance vm2: bridge \"nobr\" (its link) does not exist on node `+m.Name) {
		t.Errorf("create on a missing bridge: %s, want an error naming the NIC, the bridge and the node\n%s", st, log)
	}
	if out := ip("-o", "link", "show", "type", "tun"); strings.Count(out, "\n") != 1 {
		t.Errorf("taps after the refused create: %q, want vm1's only", out)
	}
	// Refused before anything was made: no record in the cluster, none
	// on the node, no start tried.
	if _, err := c.Client().Instance(ctx, "vm2"); err == nil {
		t.Errorf("vm2 recorded after its refused create")
	}
	if recs, _ := filepath.Glob(filepath.Join(m.DataDir, "agent", "kvm", "*.json")); len(recs) != 1 {
		t.Errorf("kvm records on the node after the refused create: %v, want vm1's only", recs)
	}
	if strings.Contains(log, "instance-start") || strings.Contains(log, "recorded vm2") {
		t.Errorf("the refused create tried a start:\n%s", log)
	}

	if out, err := c.GNT("instance", "shutdown", "vm1"); err != nil {
		t.Fatalf("shutdown: %v\n%s", err, out)
	}
	if out := ip("-o", "link", "show", "type", "tun"); out != "" {
		t.Errorf("taps after shutdown: %q", out)
	}
	if out, err := c.GNT("instance", "startup", "vm1"); err != nil {
		t.Fatalf("startup: %v\n%s", err, out)
	}
	if out := ip("-o", "link", "show", "master", "br0"); !strings.Contains(out, tap) {
		t.Fatalf("ports of br0 after startup: %q", out)
	}
	if out, err := c.GNT("instance", "remove", "-f", "vm1"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if out := ip("-o", "link", "show", "type", "tun"); out != "" {
		t.Errorf("taps after remove: %q", out)
	}
}

// kvmNode is a one-node cluster of a gntd with the kvm driver on TCG
// (args added to its command line), its agent up; every qemu it leaves is
// killed when the test ends.
func kvmNode(t *testing.T, args ...string) (*Cluster, *Member) {
	t.Helper()
	c := NewCluster(t, ClusterOptions{Candidates: 1,
		ExtraArgs: append([]string{"--hypervisor", "kvm", "--kvm-accel", "tcg"}, args...)})
	t.Cleanup(func() { killQEMUs(c) })
	c.WaitLeader(30 * time.Second)
	m := c.Members[0]
	c.WaitAgent(m, 60*time.Second)
	return c, m
}

// createKVMGuest creates (and so starts) a diskless guest on m booting
// kernel and initrd through the API, with nics and hypervisor parameters
// hv besides the boot ones; it answers the job's status and its log and
// result.
func createKVMGuest(ctx context.Context, t *testing.T, c *Cluster, m *Member, name, kernel, initrd string, nics []any, hv map[string]any) (string, string) {
	t.Helper()
	hvp := map[string]any{"kernel_path": kernel, "initrd_path": initrd, "kernel_args": "quiet", "root_path": ""}
	for k, v := range hv {
		hvp[k] = v
	}
	id, _, err := c.Client().Submit(ctx, "POST", "/2/instances", nil, map[string]any{
		"__version__": 1, "instance_name": name, "disk_template": "diskless", "disks": []any{}, "nics": nics,
		"beparams": map[string]any{"memory": 128, "vcpus": 1}, "os_type": "noop", "pnode": m.Name, "hvparams": hvp,
	})
	if err != nil {
		t.Fatalf("instance create %s: %v", name, err)
	}
	j := c.waitFinal(id, 4*time.Minute)
	return j.Status, fmt.Sprintf("%v %s", j.OpLog, j.OpResult)
}

// skipUnlessRoot skips the test, saying why it needs root, when it does
// not run as root.
func skipUnlessRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: not root: " + why)
	}
}
