package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
)

// TestOSDefinitions: the nodes report their OS definitions, GET /2/os
// (and Ganeti's client) lists those valid on every node, gnt os diagnose
// shows what is not and why, a creation with an unknown OS or variant is
// refused, and the create script of the shipped gnt-image runs on the
// instance's disk with Ganeti's environment.
func TestOSDefinitions(t *testing.T) {
	_, noop := os.Stat("/usr/share/ganeti/os/noop")
	if noop != nil {
		t.Logf("ganeti-os-noop is not installed (apt-get install ganeti-os-noop): noop is not checked")
	}
	// node22 has two more OS definitions of its own: one valid (only
	// there, so not valid cluster-wide), one of an API version gnt does
	// not speak.
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 2, MemberArgs: func(name, dataDir string) []string {
		if name != "node22" {
			return nil
		}
		extra := filepath.Join(filepath.Dir(dataDir), "os-node22")
		if err := osdef.InstallBuiltin(extra, "only22"); err != nil {
			t.Fatal(err)
		}
		if err := osdef.InstallBuiltin(extra, "future"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(extra, "future", osdef.FileAPIVersion), []byte("30\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"--os-search-path", strings.Join(append(c0OSPath(dataDir), extra), ":")}
	}})
	leader := c.WaitLeader(10 * time.Second)
	for _, n := range []string{"node21", "node22"} {
		c.WaitAgent(c.Member(n), 30*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	want := []string{"debian", "gnt-image+default"}
	if noop == nil {
		want = append(want, "noop")
	}
	var names []string
	c.Eventually(60*time.Second, 200*time.Millisecond, "GET /2/os listing every node's OSes", func() error {
		var err error
		if names, _, err = c.Client().OSList(ctx); err != nil {
			return err
		}
		if !slices.Equal(names, want) {
			return fmt.Errorf("GET /2/os = %v, want %v", names, want)
		}
		d, _, err := c.Client().OSDiagnose(ctx)
		if err != nil {
			return err
		}
		for _, n := range d.Nodes {
			if n.Error != "" {
				return fmt.Errorf("node %s: %s", n.Node, n.Error)
			}
		}
		return nil
	})

	out, err := c.GNT("os", "list", "--no-headers")
	if err != nil || strings.Fields(out)[0] != "debian" || !strings.Contains(out, "gnt-image+default\n") || strings.Contains(out, "only22") {
		t.Errorf("gnt os list: %v\n%s", err, out)
	}
	out, err = c.GNT("os", "diagnose")
	if err != nil {
		t.Fatalf("gnt os diagnose: %v\n%s", err, out)
	}
	for _, w := range []string{"future", "API version(s) 30 not supported; gnt speaks 20, 15, 10", "only22", "not found in the node's OS search path", "os-node22"} {
		if !strings.Contains(out, w) {
			t.Errorf("gnt os diagnose lacks %q:\n%s", w, out)
		}
	}
	out, err = c.GNT("os", "info", "gnt-image")
	if err != nil || !strings.Contains(out, "API versions: 20, 15") || !strings.Contains(out, "label: A short text") || !strings.Contains(out, "names: gnt-image+default") {
		t.Errorf("gnt os info gnt-image: %v\n%s", err, out)
	}
	if out, err := c.GNT("os", "info", "nosuch"); err == nil || !strings.Contains(out, "no such OS on any node: nosuch") {
		t.Errorf("gnt os info nosuch: %v\n%s", err, out)
	}

	// Ganeti's client.
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import pycurl, ganeti.rapi.client").CombinedOutput(); err != nil {
		t.Logf("Ganeti's RAPI client is not installed (apt-get install python3-ganeti-rapi python3-pycurl), not checked: %v %s", err, out)
	} else {
		addUser(ctx, t, c, "ops", "ops-secret", true)
		script := `
import sys, json
from ganeti.rapi import client as rc
c = rc.GanetiRapiClient(sys.argv[1], port=5080, username="ops", password="ops-secret", curl_config_fn=rc.GenericCurlConfig(cafile=sys.argv[2]))
print(json.dumps(c.GetOperatingSystems()))
`
		out, err := exec.CommandContext(ctx, py, "-c", script, leader.IP, filepath.Join(c.Dir, ".config", "gnt", "ca.pem")).CombinedOutput()
		var got []string
		if err != nil || json.Unmarshal(out, &got) != nil || !slices.Equal(got, want) {
			t.Errorf("Ganeti's GetOperatingSystems: %v %s; want %v", err, out, want)
		}
	}

	// Refusals, each naming what is wrong; nothing is created.
	cl := c.Client()
	for _, r := range []struct{ os, node, want string }{
		{"nosuch", "node21", `unknown OS "nosuch": node node21 has no OS nosuch in its search path`},
		{"gnt-image+nope", "node21", `unknown variant "nope" of OS gnt-image on node node21: its variants are gnt-image+default`},
		{"gnt-image", "node21", "OS gnt-image needs a variant: one of gnt-image+default"},
		{"debian+x", "node21", `OS debian has no variants, "x" given`},
		{"only22", "node21", `unknown OS "only22": node node21 has no OS only22`},
		{"future", "node22", "OS future is not valid on node node22: API version(s) 30 not supported"},
		{"", "node21", "os_type is mandatory for a plain instance"},
	} {
		body := map[string]any{"__version__": 1, "name": "bad1", "disk_template": "plain", "disks": []map[string]any{{"size": 128}},
			"beparams": map[string]any{"memory": 128}, "nics": []any{}, "pnode": r.node}
		if r.os != "" {
			body["os"] = r.os
		}
		_, err := cl.Do(ctx, http.MethodPost, "/2/instances", nil, body, nil)
		expectAPIError(t, err, http.StatusBadRequest, string(fsm.CodeInval), "os_type", "create with OS "+r.os)
		if err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("create with OS %q: %v; want %q", r.os, err, r.want)
		}
	}
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "128M", "--memory", "128", "--os-type", "nosuch", "-n", "node21", "bad2"); err == nil || !strings.Contains(out, `unknown OS "nosuch"`) {
		t.Errorf("gnt instance add --os-type nosuch: %v\n%s", err, out)
	}
	// The OS valid only on node22 is accepted there.
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "128M", "--memory", "128", "--os-type", "only22+default", "-n", "node22", "web22"); err != nil {
		t.Errorf("instance add only22+default on node22: %v\n%s", err, out)
	}

	// gnt-image's create script runs on the instance's disk.
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "128M", "--memory", "128", "--os-type", "gnt-image+default", "-n", "node21", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(c.Member("node21").DataDir, "agent", "fake-disks", "*", "*.img"))
	if len(files) != 1 {
		t.Fatalf("disk files on node21: %v", files)
	}
	fh, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 64<<10)
	fh.Read(head)
	fh.Close()
	if i := strings.IndexByte(string(head), 0); i >= 0 {
		head = head[:i]
	}
	marker := string(head)
	for _, w := range []string{"GNT-IMAGE 1\ninstance=web1\nos=gnt-image+default\nvariant=default\nreinstall=0\n",
		"OS_API_VERSION=20\n", "INSTANCE_NAME=web1\n", "INSTANCE_OS=gnt-image+default\n", "OS_NAME=gnt-image\n", "OS_VARIANT=default\n",
		"HYPERVISOR=fake\n", "DISK_COUNT=1\n", "DISK_0_PATH=" + files[0] + "\n", "DISK_0_ACCESS=rw\n", "DISK_0_SIZE=128\n",
		"INSTANCE_BE_maxmem=128\n", "NIC_COUNT=", "DEBUG_LEVEL=0\n", "PATH=/sbin:/bin:/usr/sbin:/usr/bin\n"} {
		if !strings.Contains(marker, w) {
			t.Errorf("the marker gnt-image wrote lacks %q:\n%s", w, marker)
		}
	}
	if fi, err := os.Stat(files[0]); err != nil || fi.Size() != 128<<20 {
		t.Errorf("disk file: %v, %v", fi, err)
	}

	// OS parameters: only those the OS declares (parameters.list; gnt-image:
	// label) are taken, at creation, modify, reinstall and cluster modify;
	// another is refused by name and changes nothing.
	for _, r := range []struct {
		args  []string
		field string
	}{
		{[]string{"instance", "add", "-t", "plain", "--disk", "128M", "--memory", "128", "--os-type", "gnt-image+default", "-n", "node21", "-O", "colour=red", "bad3"}, "osparams.colour"},
		{[]string{"instance", "modify", "-O", "label=ok,colour=red", "web1"}, "osparams.colour"},
		{[]string{"cluster", "modify", "-O", "gnt-image:colour=red"}, "osparams.gnt-image.colour"},
	} {
		out, err := c.GNT(r.args...)
		if err == nil || !strings.Contains(out, `unknown OS parameter "colour": OS gnt-image on node node`) || !strings.Contains(out, "declares label (its parameters.list") || !strings.Contains(out, "(field "+r.field+")") {
			t.Errorf("gnt %v: %v\n%s\nwant the unknown parameter refused (field %s)", r.args, err, out, r.field)
		}
	}
	if out, err := c.GNT("instance", "modify", "-O", "label=ok", "web1"); err != nil {
		t.Errorf("instance modify -O label=ok: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "info", "--static", "web1"); err != nil || !strings.Contains(out, "label: ok") || strings.Contains(out, "colour") {
		t.Errorf("web1's OS parameters after the refusals: %v\n%s", err, out)
	}
	if out, err := c.GNT("instance", "list", "--no-headers", "-o", "name"); err != nil || strings.Contains(out, "bad3") {
		t.Errorf("instances after the refused creation: %v\n%s", err, out)
	}
}

// c0OSPath is the harness's OS search path for a member of the cluster
// whose data dir is dataDir.
func c0OSPath(dataDir string) []string {
	return []string{filepath.Join(filepath.Dir(dataDir), "os"), "/usr/share/ganeti/os"}
}
