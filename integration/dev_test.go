package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/pki"
)

// devMember is what the test reads of a member in dev.json.
type devMember struct {
	Name      string            `json:"name"`
	Role      string            `json:"role"`
	Addresses map[string]string `json:"addresses"`
	PID       int               `json:"pid"`
	PIDFile   string            `json:"pid_file"`
	DataDir   string            `json:"data_dir"`
	Command   []string          `json:"command"`
}

// TestDevSupervisor runs `gntd dev` as `make demo` does: six separate gntd
// processes and dev.json; gnt reaches the cluster with no flags (through
// the servers file under HOME); kill -9 of the leader's pid from dev.json
// is followed by another master, and the supervisor does not restart the
// killed member; its dev.json command line brings it back among the
// peers; SIGTERM stops every child and removes the servers file.
func TestDevSupervisor(t *testing.T) {
	bin := Binaries(t)
	home, dir, out, sup, exited := startDev(t, bin)
	var members []devMember
	var ours []*exec.Cmd // members the test restarted itself
	t.Cleanup(func() {
		sup.Process.Kill()
		<-exited
		for _, m := range members {
			syscall.Kill(m.PID, syscall.SIGKILL) // gone already, unless the test failed
		}
		for _, c := range ours {
			c.Process.Kill()
			c.Wait()
		}
		if t.Failed() {
			t.Logf("gntd dev's output, last lines:\n%s", lastLines(out.String(), 80))
		}
	})
	gnt := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "gnt"), args...)
		cmd.Env = append(os.Environ(), "HOME="+home, "GNT_SERVER=")
		b, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(b), 0
		case errors.As(err, &ee):
			return string(b), ee.ExitCode()
		}
		return string(b) + err.Error(), -1
	}
	eventually := func(d time.Duration, what string, f func() error) time.Duration {
		t.Helper()
		start := time.Now()
		var err error
		for time.Since(start) < d {
			if err = f(); err == nil {
				return time.Since(start)
			}
			select {
			case e := <-exited:
				exited <- e // for the cleanup
				t.Fatalf("gntd dev exited while waiting for %s: %v", what, e)
			case <-time.After(200 * time.Millisecond):
			}
		}
		t.Fatalf("%s: not within %v: %v", what, d, err)
		return 0
	}

	// dev.json appears once the cluster is up.
	start := time.Now()
	eventually(90*time.Second, "dev.json", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "dev.json"))
		if err != nil {
			return err
		}
		var info struct {
			Supervisor int         `json:"supervisor_pid"`
			Members    []devMember `json:"members"`
		}
		if err := json.Unmarshal(b, &info); err != nil {
			return err
		}
		if info.Supervisor != sup.Process.Pid {
			return fmt.Errorf("dev.json names supervisor %d, want %d", info.Supervisor, sup.Process.Pid)
		}
		members = info.Members
		return nil
	})
	t.Logf("gntd dev up in %v", time.Since(start).Round(time.Millisecond))
	roles := map[string]int{}
	pids := map[int]bool{sup.Process.Pid: true}
	for _, m := range members {
		roles[m.Role]++
		if pids[m.PID] || syscall.Kill(m.PID, 0) != nil {
			t.Errorf("%s: pid %d is not a separate running process", m.Name, m.PID)
		}
		pids[m.PID] = true
		// The pid file (kept by gnt-oob-fake across power cycles, so
		// there only with the helper) says the same pid while dev's
		// member runs.
		if m.PIDFile != "" {
			if b, err := os.ReadFile(m.PIDFile); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(m.PID) {
				t.Errorf("%s: pid_file %q holds %q (%v), want %d", m.Name, m.PIDFile, b, err, m.PID)
			}
		}
		if len(m.Command) < 2 || m.Command[1] != "agent" || m.Addresses["api"] == "" || m.DataDir == "" {
			t.Errorf("%s: dev.json entry %+v", m.Name, m)
		}
	}
	if roles["candidate"] != 3 || roles["node"] != 3 {
		t.Fatalf("dev.json roles %v, want 3 candidates and 3 nodes", roles)
	}

	// gnt with no flags: the servers file the supervisor wrote.
	info, code := gnt("cluster", "info")
	if code != 0 {
		t.Fatalf("gnt cluster info: exit %d\n%s", code, info)
	}
	master := cliField(info, "Master node")
	nodes, code := gnt("node", "list")
	if code != 0 {
		t.Fatalf("gnt node list: exit %d\n%s", code, nodes)
	}
	count := map[string]int{}
	for _, r := range cliRoles(t, nodes) {
		count[r]++
	}
	if count["M"] != 1 || count["C"] != 2 || count["R"] != 3 || cliRoles(t, nodes)[master] != "M" {
		t.Errorf("node list roles %v with master %q, want one M, two C, three R:\n%s", count, master, nodes)
	}
	// The demo shows repairs: gntd dev turns maintd's harep work on (a new
	// cluster has it off) and says so.
	if !strings.Contains(out.String(), "maintd does harep's work") {
		t.Errorf("gntd dev does not say that it turned harep on:\n%s", lastLines(out.String(), 30))
	}
	eventually(30*time.Second, "gnt maint status showing harep on", func() error {
		if st, code := gnt("maint", "status"); code != 0 || !strings.Contains(st, "harep (instance autorepair): on; balancing: off") {
			return fmt.Errorf("exit %d: %s", code, st)
		}
		return nil
	})
	if out, code := gnt("node", "add-tags", "node21", "rack:a1"); code != 0 {
		t.Fatalf("add-tags: exit %d\n%s", code, out)
	}
	// gnt cluster renew-crypto renews the CA of the dev cluster and the
	// files of ~/.config/gnt, with which gnt and a plain HTTPS client
	// with the client certificate go on working.
	if out, code := gnt("cluster", "renew-crypto"); code != 0 || !strings.Contains(out, "The cluster CA is renewed") {
		t.Fatalf("gnt cluster renew-crypto: exit %d\n%s", code, out)
	}
	cfgDir := filepath.Join(home, ".config", "gnt")
	ca, err1 := os.ReadFile(filepath.Join(cfgDir, "ca.pem"))
	cert, err2 := os.ReadFile(filepath.Join(cfgDir, "client.pem"))
	key, err3 := os.ReadFile(filepath.Join(cfgDir, "client-key.pem"))
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	renewed, err := pki.OperatorTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: renewed}}
	resp, err := hc.Get("https://127.0.0.11:5080/2/info")
	if err != nil {
		t.Fatalf("GET /2/info with the renewed files of ~/.config/gnt: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /2/info with the renewed files of ~/.config/gnt: %s", resp.Status)
	}
	// gnt-oob-fake (when it is beside gntd, as make builds it) is every
	// node's helper, from the OOB programs directory dev gives its members.
	if _, err := os.Stat(filepath.Join(bin, "gnt-oob-fake")); err == nil {
		for _, m := range members {
			if m.PIDFile == "" {
				t.Errorf("%s: no pid_file in dev.json although gnt-oob-fake is there", m.Name)
			}
		}
		eventually(30*time.Second, "gnt node power status through gnt-oob-fake", func() error {
			out, code := gnt("node", "power", "status")
			if code != 0 || !strings.Contains(out, "node21 on") {
				return fmt.Errorf("exit %d: %s", code, out)
			}
			return nil
		})
		if info, _ := gnt("cluster", "info"); !strings.Contains(info, filepath.Join(dir, "oob-programs", "oob-fake.sh")) {
			t.Errorf("the cluster's oob_program is not dev's wrapper in %s:\n%s", filepath.Join(dir, "oob-programs"), info)
		}
	} else {
		t.Logf("no gnt-oob-fake beside %s: the OOB helper is not checked", bin)
	}

	// kill -9 the leader's pid from dev.json.
	var killed devMember
	for _, m := range members {
		if m.Name == master {
			killed = m
		}
	}
	if killed.PID == 0 {
		t.Fatalf("master %q is not in dev.json", master)
	}
	killAt := time.Now()
	if err := syscall.Kill(killed.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var newMaster string
	eventually(15*time.Second, "a new master", func() error {
		out, code := gnt("cluster", "info")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		if newMaster = cliField(out, "Master node"); newMaster == master || newMaster == "" {
			return fmt.Errorf("master still %q", newMaster)
		}
		return nil
	})
	t.Logf("kill -9 of %s (pid %d): gnt cluster info names %s %v later", master, killed.PID, newMaster, time.Since(killAt).Round(time.Millisecond))
	if out, _ := gnt("node", "list-tags", "node21"); strings.TrimSpace(out) != "rack:a1" {
		t.Errorf("after the failover: node list-tags node21 = %q, want rack:a1", out)
	}
	// The supervisor said so and did not start it again.
	eventually(5*time.Second, "the supervisor's word on the killed member", func() error {
		if !strings.Contains(out.String(), fmt.Sprintf("%s (pid %d) exited", killed.Name, killed.PID)) {
			return errors.New("not yet")
		}
		return nil
	})
	if c, err := net.DialTimeout("tcp", killed.Addresses["api"], time.Second); err == nil {
		c.Close()
		t.Errorf("something answers on the killed member's API address %s", killed.Addresses["api"])
	}

	// Its dev.json command line brings it back.
	re := exec.Command(killed.Command[0], killed.Command[1:]...)
	re.Stdout, re.Stderr = out, out
	if err := re.Start(); err != nil {
		t.Fatal(err)
	}
	ours = append(ours, re)
	back := eventually(30*time.Second, killed.Name+" back in gnt cluster peers", func() error {
		out, code := gnt("--consistent", "cluster", "peers")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 6 && f[0] == killed.Name && f[2] == "voter" && f[4] != "?" && f[4] != "0" {
				return nil
			}
		}
		return fmt.Errorf("%s not back:\n%s", killed.Name, out)
	})
	t.Logf("%s back among the peers %v after its restart", killed.Name, back.Round(time.Millisecond))

	// SIGTERM stops the supervisor and every child it started.
	sup.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("gntd dev after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gntd dev did not stop within 30 s of SIGTERM")
	}
	for _, m := range members {
		if m.PID != killed.PID && syscall.Kill(m.PID, 0) == nil {
			t.Errorf("%s (pid %d) still runs after the supervisor stopped", m.Name, m.PID)
		}
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "gnt", "servers")); !os.IsNotExist(err) {
		t.Errorf("the servers file is still there after the supervisor stopped: %v", err)
	}
}

// startDev starts `gntd dev` (with args) on the demo's fixed addresses,
// with a fresh HOME (where it writes the CLI's credentials) and data dir,
// or skips when those addresses are taken (a `make demo` left running).
// exited receives the supervisor's end; the caller stops it in its
// cleanup and puts a value it took back for that cleanup.
func startDev(t *testing.T, bin string, args ...string) (home, dir string, out *lockedBuffer, sup *exec.Cmd, exited chan error) {
	t.Helper()
	for _, ip := range []string{"127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.21", "127.0.0.22", "127.0.0.23"} {
		ln, err := net.Listen("tcp", ip+":5080")
		if err != nil {
			t.Skipf("the demo's address %s:5080 is in use (is a `make demo` running?): %v", ip, err)
		}
		ln.Close()
	}
	home, dir = t.TempDir(), filepath.Join(t.TempDir(), "dev")
	out = &lockedBuffer{}
	sup = exec.Command(filepath.Join(bin, "gntd"), append([]string{"dev", "--data-dir", dir}, args...)...)
	sup.Env = append(os.Environ(), "HOME="+home, "GNT_SERVER=")
	sup.Stdout, sup.Stderr = out, out
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- sup.Wait() }()
	return home, dir, out, sup, exited
}
