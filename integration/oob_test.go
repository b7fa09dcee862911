package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// oobTool returns the path of a cmd/<name> binary: beside the harness's
// gntd (make builds them there), else built for this test.
func oobTool(t *testing.T, name string) string {
	t.Helper()
	if p := filepath.Join(Binaries(t), name); fileExists(p) {
		return p
	}
	p := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", p, "github.com/gnt-cluster/gnt/cmd/"+name).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, out)
	}
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// fakeOOB makes gnt-oob-fake the OOB helper of every member of c: each
// member's power is its gntd process. It returns the helper's state
// directory; gntds the helper starts again are killed when the test ends.
func fakeOOB(t *testing.T, c *Cluster) string {
	t.Helper()
	helper := oobTool(t, "gnt-oob-fake")
	dir := filepath.Join(c.Dir, "oob-fake")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	type node struct {
		Command []string `json:"command"`
		PIDFile string   `json:"pid_file"`
		LogFile string   `json:"log_file"`
	}
	nodes := map[string]node{}
	for _, m := range c.Members {
		pidFile := filepath.Join(dir, m.Name+".pid")
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(m.PID())), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes[m.Name] = node{Command: m.Args, PIDFile: pidFile, LogFile: filepath.Join(dir, m.Name+".log")}
	}
	cfg, _ := json.Marshal(map[string]any{"state_dir": dir, "stop_timeout": "10s", "nodes": nodes})
	config := filepath.Join(c.Dir, "oob-fake.json")
	wrapper := filepath.Join(c.OOBProgramsDir(), "oob-fake.sh")
	if err := os.WriteFile(config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %s --config %s \"$@\"\n", helper, config)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			if pid := restartedPID(dir, m); pid > 0 {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
	if out, code := c.GNTExit("cluster", "modify", "--node-parameters", "oob_program="+wrapper); code != 0 {
		t.Fatalf("setting oob_program: %s", out)
	}
	return dir
}

// restartedPID is the pid of a member's gntd that the helper started
// (not the harness), or 0.
func restartedPID(dir string, m *Member) int {
	b, err := os.ReadFile(filepath.Join(dir, m.Name+".pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == m.PID() || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// answers reports whether the gntd at the member's API address answers.
func answers(m *Member) error {
	resp, err := m.c.HTTP().Get(m.c.URL(m, "/version"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// listFields returns the fields of the table line that starts with name.
func listFields(out, name string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}

// TestOOBPowerEndToEnd powers nodes off and on through gnt-oob-fake with
// the gnt binary against real gntd processes: a node's gntd stops and
// starts again, its offline and powered records follow; then the master's
// own node is powered off: its role goes to another candidate first, and
// the new master powers it off.
func TestOOBPowerEndToEnd(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	dir := fakeOOB(t, c)
	gnt := func(want int, args ...string) string {
		t.Helper()
		out, code := c.GNTExit(args...)
		if code != want {
			t.Fatalf("gnt %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}

	out := gnt(0, "node", "power", "status")
	for _, m := range c.Members {
		if !strings.Contains(out, m.Name+" on") {
			t.Errorf("power status lacks %s on:\n%s", m.Name, out)
		}
	}

	// A plain node: off (marked offline in the same job), its gntd stops.
	node := c.Member("node21")
	out = gnt(0, "node", "power", "off", "node21", "--reason", "replace fan")
	if !strings.Contains(out, "Powered off node node21") || !strings.Contains(out, `gnt:user "replace fan"`) {
		t.Errorf("power off log:\n%s", out)
	}
	c.Eventually(15*time.Second, 50*time.Millisecond, "node21's gntd stops", func() error {
		if node.Running() {
			return fmt.Errorf("still running")
		}
		return nil
	})
	if roles := cliRoles(t, gnt(0, "node", "list")); roles["node21"] != "O" {
		t.Errorf("node21 role %s after power off", roles["node21"])
	}
	// Gossip sees the powered-off node die.
	c.Eventually(20*time.Second, 100*time.Millisecond, "node21 dead in gnt node list", func() error {
		if f := listFields(gnt(0, "node", "list", "--fields", "name,gnt_liveness"), "node21"); strings.Join(f, " ") != "node21 dead" {
			return fmt.Errorf("node list: %v", f)
		}
		return nil
	})
	if f := listFields(gnt(0, "node", "list", "--fields", "name,offline,powered"), "node21"); strings.Join(f, " ") != "node21 Y N" {
		t.Errorf("node list --fields name,offline,powered: node21 %v", f)
	}
	if f := listFields(gnt(0, "node", "power", "status", "node21"), "node21"); strings.Join(f, " ") != "node21 off" {
		t.Errorf("power status: node21 %v", f)
	}
	// Leaving offline needs powering on first (Ganeti's rule).
	if out := gnt(1, "node", "modify", "node21", "--offline", "no"); !strings.Contains(out, "needs to be turned on before its offline status can be reset") {
		t.Errorf("un-offline unpowered:\n%s", out)
	}

	// On: the helper starts node21's gntd again.
	out = gnt(0, "node", "power", "on", "node21")
	if !strings.Contains(out, "Powered on node node21") || !strings.Contains(out, "is still marked offline") {
		t.Errorf("power on:\n%s", out)
	}
	c.Eventually(20*time.Second, 100*time.Millisecond, "node21's gntd answers again", func() error { return answers(node) })
	c.Eventually(20*time.Second, 100*time.Millisecond, "node21 alive in gnt node list", func() error {
		if f := listFields(gnt(0, "node", "list", "--fields", "name,gnt_liveness"), "node21"); strings.Join(f, " ") != "node21 alive" {
			return fmt.Errorf("node list: %v", f)
		}
		return nil
	})
	if restartedPID(dir, node) == 0 {
		t.Errorf("node21 answers, but not from a gntd the helper started")
	}
	gnt(0, "node", "modify", "node21", "--offline", "no")
	if out := gnt(0, "node", "info", "node21"); cliField(out, "  powered") != "True" || cliField(out, "  offline") != "False" {
		t.Errorf("node info after power on:\n%s", out)
	}

	// The master's node: its role moves, then the new master powers it off.
	leader := c.WaitLeader(10 * time.Second)
	out = gnt(0, "node", "power", "off", leader.Name, "--force")
	if !strings.Contains(out, "its master role is handed to another master candidate first") ||
		!strings.Contains(out, "The master role moved from "+leader.Name) ||
		!strings.Contains(out, "Powered off node "+leader.Name) {
		t.Errorf("power off of the master's node:\n%s", out)
	}
	c.Eventually(15*time.Second, 50*time.Millisecond, "the old master's gntd stops", func() error {
		if leader.Running() {
			return fmt.Errorf("still running")
		}
		return nil
	})
	roles := cliRoles(t, gnt(0, "node", "list"))
	if roles[leader.Name] != "O" {
		t.Errorf("old master %s has role %s", leader.Name, roles[leader.Name])
	}
	masters := 0
	for _, r := range roles {
		if r == "M" {
			masters++
		}
	}
	if masters != 1 {
		t.Errorf("%d masters: %v", masters, roles)
	}
	// And back.
	gnt(0, "node", "power", "on", leader.Name)
	c.Eventually(20*time.Second, 100*time.Millisecond, "the old master answers again", func() error { return answers(leader) })
	// Offline, it is no longer a master candidate. How soon its restarted
	// gntd hears so and stops its Raft server varies (see the closing
	// note of the session that found it); until then it may answer reads
	// from its stale replica, so what follows reads through the leader.
	now := c.WaitLeader(10 * time.Second).APIAddr()
	gnt(0, "--server", now, "node", "modify", leader.Name, "--offline", "no")
	if out := gnt(0, "--server", now, "--consistent", "cluster", "verify"); strings.Contains(out, "ERROR") {
		t.Errorf("cluster verify:\n%s", out)
	}
}

// TestOOBBadHelperEndToEnd: a helper that fails, prints garbage or hangs
// fails the job with the design's messages; the records stay.
func TestOOBBadHelperEndToEnd(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	dir := fakeOOB(t, c)
	if err := os.WriteFile(filepath.Join(dir, "node21.fail"), []byte("2 no BMC on this node"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := c.GNTExit("node", "power", "off", "node21", "--ignore-status")
	if code != 1 || !strings.Contains(out, "OOB program execution failed (exit status 2: power-off is unsupported or undefined: no BMC on this node)") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	if !c.Member("node21").Running() {
		t.Error("node21 stopped")
	}
	out, _ = c.GNTExit("node", "list", "--fields", "name,powered")
	if f := listFields(out, "node21"); strings.Join(f, " ") != "node21 Y" {
		t.Errorf("powered record changed: %v\n%s", f, out)
	}
	// The opted-out node.
	if out, code := c.GNTExit("node", "modify", "node21", "--node-parameters", "oob_program=!"); code != 0 {
		t.Fatal(out)
	}
	if out, code := c.GNTExit("node", "power", "status", "node21"); code != 1 || !strings.Contains(out, "Node node21 does not support OOB commands") {
		t.Errorf("opted-out node: exit %d\n%s", code, out)
	}
}

// TestEPOEndToEnd: gnt cluster epo of the default group powers off the
// plain nodes and one candidate (the master and a majority of candidates
// stay up), shutting down node21's instance first; then --on brings them
// back, waits for their gntds and starts the instance again, at once,
// as soon as node21's agent answers (gossip may still call it dead).
func TestEPOEndToEnd(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	fakeOOB(t, c)
	leader := c.WaitLeader(10 * time.Second)
	c.WaitAgent(c.Member("node21"), 30*time.Second)
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	running := func(want string) {
		t.Helper()
		c.Eventually(30*time.Second, 200*time.Millisecond, "web1 "+want, func() error {
			s, _, err := c.instanceStatus(c.WaitLeader(10*time.Second), "web1")
			if err == nil && s != want {
				err = fmt.Errorf("web1 is %s", s)
			}
			return err
		})
	}
	running(rpc.InstStatusRunning)
	out, code := c.GNTExit("cluster", "epo", "--groups", "default", "--force")
	if code != 0 || !strings.Contains(out, "EPO off done") {
		t.Fatalf("epo off: exit %d\n%s", code, out)
	}
	var off []*Member
	for _, m := range c.Members {
		if m != leader && strings.Contains(out, "Powered off node "+m.Name) {
			off = append(off, m)
		}
	}
	if len(off) != 2 || !strings.Contains(out, "Powered off node node21") {
		t.Fatalf("powered off %d nodes:\n%s", len(off), out)
	}
	for _, m := range off {
		c.Eventually(15*time.Second, 50*time.Millisecond, m.Name+" stops", func() error {
			if m.Running() {
				return fmt.Errorf("running")
			}
			return nil
		})
	}
	out, code = c.GNTExit("cluster", "epo", "--on", "--groups", "default", "--force")
	if code != 0 || !strings.Contains(out, "EPO on done") || !strings.Contains(out, "web1 runs on node21") {
		t.Fatalf("epo on: exit %d\n%s", code, out)
	}
	running(rpc.InstStatusRunning)
	for _, m := range off {
		if !strings.Contains(out, "Node "+m.Name+" became available") {
			t.Errorf("no wait for %s:\n%s", m.Name, out)
		}
		if err := answers(m); err != nil {
			t.Errorf("%s does not answer: %v", m.Name, err)
		}
	}
	if out, _ := c.GNTExit("node", "list"); strings.Contains(out, "unpowered") {
		t.Errorf("still unpowered:\n%s", out)
	}
}

// TestOOBProgramWhitelistEndToEnd: with real gntds, an oob_program
// outside the members' OOB programs directory (/bin/sh), or one in it that
// is group-writable, is refused with 400 naming oob_program and the rule,
// whichever candidate receives the request, and the cluster's serial does
// not move; a helper in the directory is set and runs; once it becomes
// group-writable the leader refuses to run it, naming the path and the
// rule.
func TestOOBProgramWhitelistEndToEnd(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 2, Nodes: 1})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	dir := c.OOBProgramsDir()
	helper := filepath.Join(dir, "status")
	if err := os.WriteFile(helper, []byte("#!/bin/sh\ncase $1 in power-status) echo '{\"powered\": true}' ;; *) exit 0 ;; esac\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o775); err != nil {
		t.Fatal(err)
	}
	serial := func() float64 {
		t.Helper()
		var info map[string]any
		if _, err := c.ClientFor(leader).Do(context.Background(), "GET", "/2/info", url.Values{"consistent": {"1"}}, nil, &info); err != nil {
			t.Fatal(err)
		}
		s, _ := info["serial_no"].(float64)
		return s
	}
	put := func(m *Member, path, program string) (int, rpc.APIError) {
		t.Helper()
		body := `{"ndparams":{"oob_program":"` + program + `"}}`
		req, _ := http.NewRequest("PUT", c.URL(m, path), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.HTTP().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ae rpc.APIError
		json.NewDecoder(resp.Body).Decode(&ae)
		return resp.StatusCode, ae
	}
	rule := "an OOB helper must be an absolute path inside " + dir + ", to a regular file owned by root"
	before := serial()
	for _, m := range []*Member{leader, follower} {
		for _, x := range []struct{ path, program, why string }{
			{"/2/modify", "/bin/sh", `oob_program: OOB helper "/bin/sh" refused: not inside the OOB programs directory ` + dir},
			{"/2/nodes/node21/modify", "/bin/sh", "not inside the OOB programs directory " + dir},
			{"/2/groups/default/modify", dir + "/../../bin/sh", "not a clean path"},
			{"/2/modify", loose, loose + " is writable by group or others (mode 0775)"},
		} {
			code, ae := put(m, x.path, x.program)
			if code != http.StatusBadRequest || ae.Field != "oob_program" || !strings.Contains(ae.Message, x.why) || !strings.Contains(ae.Message, rule) {
				t.Errorf("PUT %s %s to %s: %d %+v, want 400 on oob_program with %q and the rule", x.path, x.program, m.Name, code, ae, x.why)
			}
		}
	}
	if out, code := c.GNTExit("cluster", "modify", "--node-parameters", "oob_program=/bin/sh"); code == 0 || !strings.Contains(out, `OOB helper "/bin/sh" refused`) {
		t.Errorf("gnt cluster modify: exit %d\n%s", code, out)
	}
	if after := serial(); after != before {
		t.Errorf("refusals moved the serial from %v to %v", before, after)
	}

	// A whitelisted helper is set and runs on the leader.
	if code, ae := put(follower, "/2/modify", helper); code != http.StatusOK {
		t.Fatalf("setting %s: %d %+v", helper, code, ae)
	}
	if serial() == before {
		t.Error("setting the helper did not move the serial")
	}
	out, code := c.GNTExit("node", "power", "status")
	for _, m := range c.Members {
		if code != 0 || !strings.Contains(out, m.Name+" on") {
			t.Errorf("power status: exit %d, want %s on:\n%s", code, m.Name, out)
		}
	}
	// Changed after it was set: refused before running.
	if err := os.Chmod(helper, 0o775); err != nil {
		t.Fatal(err)
	}
	out, code = c.GNTExit("node", "power", "status", "node21")
	if code != 1 || !strings.Contains(out, helper+" is writable by group or others (mode 0775)") || !strings.Contains(out, rule) {
		t.Errorf("power status with a group-writable helper: exit %d\n%s", code, out)
	}
}
