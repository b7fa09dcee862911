package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/oob"
)

// ipmiSim is a running OpenIPMI BMC simulator on loopback.
type ipmiSim struct {
	addr string
	port int
	cmd  *exec.Cmd
	log  *lockedBuffer
}

// startIPMISim starts ipmi_sim with testdata/ipmi's configuration on
// 127.0.0.1 and a free UDP port; it is stopped when the test ends. The test
// is skipped, saying why, when ipmi_sim or ipmitool is missing (Debian
// packages openipmi and ipmitool; .ci/run installs them).
func startIPMISim(t *testing.T) *ipmiSim {
	t.Helper()
	for _, prog := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(prog); err != nil {
			msg := fmt.Sprintf("skipping: %s is not installed (Debian packages openipmi and ipmitool): %v", prog, err)
			fmt.Fprintln(os.Stderr, t.Name()+": "+msg)
			t.Skip(msg)
		}
	}
	dir := t.TempDir()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	script, err := os.ReadFile("testdata/ipmi/chassis-control.sh")
	if err != nil {
		t.Fatal(err)
	}
	chassis := filepath.Join(dir, "chassis-control.sh")
	if err := os.WriteFile(chassis, script, 0o755); err != nil {
		t.Fatal(err)
	}
	lan, err := os.ReadFile("testdata/ipmi/lan.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("@ADDR@", "127.0.0.1", "@PORT@", fmt.Sprint(port),
		"@CHASSIS@", chassis+" "+filepath.Join(dir, "power")).Replace(string(lan))
	if err := os.WriteFile(filepath.Join(dir, "lan.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	emu, _ := filepath.Abs("testdata/ipmi/sim.emu")
	state := filepath.Join(dir, "state")
	os.MkdirAll(state, 0o755)
	s := &ipmiSim{addr: "127.0.0.1", port: port, log: &lockedBuffer{}}
	s.cmd = exec.Command("ipmi_sim", "-c", filepath.Join(dir, "lan.conf"), "-f", emu, "-s", state, "-n")
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting ipmi_sim: %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.cmd.Wait()
		if t.Failed() {
			t.Logf("ipmi_sim output:\n%s", s.log.String())
		}
	})
	// ipmitool backs off for seconds when its first packets go unanswered:
	// wait until the simulator holds its port (as /proc/net/udp says, so
	// that no probe of ours takes the port from it) before anyone asks.
	deadline := time.Now().Add(10 * time.Second)
	for !udpListening(port) {
		if time.Now().After(deadline) {
			t.Fatalf("ipmi_sim does not listen on %s:%d:\n%s", s.addr, port, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// udpListening reports whether a UDP socket is bound to port.
func udpListening(port int) bool {
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return false
	}
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && strings.HasSuffix(f[1], want) {
			return true
		}
	}
	return false
}

// TestIPMIHelperAgainstSimulator drives ipmi_sim's chassis and sensors
// through gnt-oob-ipmi and ipmitool, over both IPMI 2.0 (lanplus) and 1.5
// (lan), and checks every answer with the protocol's own parser.
func TestIPMIHelperAgainstSimulator(t *testing.T) {
	sim := startIPMISim(t)
	helper := oobTool(t, "gnt-oob-ipmi")
	dir := t.TempDir()
	pw := filepath.Join(dir, "bmc.pw")
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	conf := filepath.Join(dir, "oob-ipmi.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`# BMCs of the test
option timeout 10s
option retries 1
# ipmi_sim does not answer Get Channel Cipher Suites: name the suite.
option cipher 3
sim2  lanplus  %[1]s  %[2]d  admin  %[3]s
sim15 lan      %[1]s  %[2]d  admin  %[3]s
wrong lanplus  %[1]s  %[2]d  admin  %[4]s
`, sim.addr, sim.port, pw, filepath.Join(dir, "missing.pw"))), 0o644)
	// The OOB program is run without arguments but command and node: a
	// wrapper passes the configuration, as a site would.
	wrapper := filepath.Join(dir, "oob")
	os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\nexec %s --config %s \"$@\"\n", helper, conf)), 0o755)

	rn := &oob.Runner{Timeout: 30 * time.Second, Programs: oob.Whitelist{Dir: dir, Owner: os.Geteuid()}}
	ctx := context.Background()
	do := func(cmd, node string) (oob.Result, error) {
		t.Helper()
		return rn.Run(ctx, wrapper, cmd, node, 0)
	}
	// The simulator takes a moment to listen.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := do(oob.PowerStatus, "sim2")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ipmi_sim does not answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	status := func(node string) bool {
		t.Helper()
		r, err := do(oob.PowerStatus, node)
		if err != nil {
			t.Fatalf("power-status %s: %v", node, err)
		}
		return r.Powered
	}
	for _, node := range []string{"sim2", "sim15"} {
		t.Run(node, func(t *testing.T) {
			if _, err := do(oob.PowerOff, node); err != nil {
				t.Fatalf("power-off: %v", err)
			}
			if status(node) {
				t.Fatal("on after power-off")
			}
			// Cycling a chassis that is off is refused (the design's table).
			if _, err := do(oob.PowerCycle, node); err == nil || !strings.Contains(err.Error(), "is powered off; power-cycle needs it on") {
				t.Errorf("power-cycle when off: %v", err)
			}
			if _, err := do(oob.PowerOn, node); err != nil {
				t.Fatalf("power-on: %v", err)
			}
			if !status(node) {
				t.Fatal("off after power-on")
			}
			if _, err := do(oob.PowerCycle, node); err != nil {
				t.Fatalf("power-cycle: %v", err)
			}
			// ipmi_sim cycles as off, then on a second later.
			deadline := time.Now().Add(5 * time.Second)
			for !status(node) {
				if time.Now().After(deadline) {
					t.Fatal("not back on after power-cycle")
				}
				time.Sleep(200 * time.Millisecond)
			}
			r, err := do(oob.Health, node)
			if err != nil {
				t.Fatalf("health: %v", err)
			}
			want := []oob.HealthItem{{Item: "CPU_T1", Status: oob.StatusOK}, {Item: "CPU_T2", Status: oob.StatusWarning}, {Item: "CPU_T3", Status: oob.StatusCritical}}
			if fmt.Sprint(r.Health) != fmt.Sprint(want) {
				t.Errorf("health %v, want %v", r.Health, want)
			}
		})
	}
	// Failures: a missing password file, an unknown node, a BMC that does
	// not answer (exit 1 with the message on stderr).
	if _, err := do(oob.PowerStatus, "wrong"); err == nil || !strings.Contains(err.Error(), "OOB program execution failed (node wrong: password file:") {
		t.Errorf("missing password file: %v", err)
	}
	if _, err := do(oob.PowerOn, "nosuch"); err == nil || !strings.Contains(err.Error(), "node nosuch is not in "+conf) {
		t.Errorf("unknown node: %v", err)
	}
	syscall.Kill(-sim.cmd.Process.Pid, syscall.SIGKILL)
	start := time.Now()
	bmc := fmt.Sprintf("127.0.0.1:%d", sim.port)
	if _, err := do(oob.PowerStatus, "sim2"); err == nil ||
		!strings.Contains(err.Error(), "OOB program execution failed (ipmitool chassis power status") || !strings.Contains(err.Error(), bmc) {
		t.Errorf("BMC gone: %v", err)
	}
	t.Logf("a BMC that is gone is reported after %v", time.Since(start).Round(time.Millisecond))
}
