package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestNetworkPortConsole: on real gntds (the fake driver), instances that
// need a network port get the pool's lowest free one, shown by the API
// and `gnt instance list -o network_port`; a removed instance's port is
// given out again; an instance with vnc_bind_address and no serial
// console answers the console endpoint with Ganeti's "vnc" kind, which
// `gnt instance console` prints, with how its TLS is set for a vnc_tls
// console; TLS settings that break the rules are refused by name.
func TestNetworkPortConsole(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	c.WaitLeader(10 * time.Second)
	node := c.Member("node21")
	c.WaitAgent(node, 30*time.Second)
	run := func(args ...string) string { t.Helper(); return c.MustGNT(t, args...) }
	get := func(path string) map[string]any { t.Helper(); return c.GetObject(t, path) }
	run("cluster", "modify", "--enabled-hypervisors", "fake,kvm")
	// The fake driver's instances (which simulate kvm's) need a port
	// with vnc_bind_address: vnc1 and vnc2; plain1 needs none.
	run("instance", "add", "-t", "diskless", "-n", "node21", "--no-install", "-H", "vnc_bind_address=0.0.0.0,serial_console=false", "vnc1")
	run("instance", "add", "-t", "diskless", "-n", "node21", "--no-install", "--no-start", "-H", "vnc_bind_address=127.0.0.1", "vnc2")
	run("instance", "add", "-t", "diskless", "-n", "node21", "--no-install", "--no-start", "plain1")
	for name, want := range map[string]any{"vnc1": float64(11000), "vnc2": float64(11001), "plain1": nil} {
		if got := get("/2/instances/" + name)["network_port"]; got != want {
			t.Errorf("%s: network_port %v, want %v", name, got, want)
		}
	}
	out := run("instance", "list", "--no-headers", "-o", "name,network_port")
	for _, line := range []string{"vnc2 11001", "plain1 ?", "vnc1 11000"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " ")+" ", strings.Join(strings.Fields(line), " ")+" ") {
			t.Errorf("gnt instance list -o name,network_port lacks %q:\n%s", line, out)
		}
	}

	if out := run("instance", "info", "vnc2"); !strings.Contains(out, "Allocated network port: 11001\n") {
		t.Errorf("gnt instance info vnc2 lacks the port:\n%s", out)
	}
	con := get("/2/instances/vnc1/console")
	want := map[string]any{"instance": "vnc1", "kind": "vnc", "host": node.IP, "port": float64(11000), "display": float64(5100)}
	if fmt.Sprint(con) != fmt.Sprint(want) {
		t.Errorf("console of vnc1: %v, want %v", con, want)
	}
	if out := run("instance", "console", "vnc1"); !strings.Contains(out, fmt.Sprintf("Instance vnc1 has VNC listening on %s:11000 (display 5100).", node.IP)) {
		t.Errorf("gnt instance console vnc1: %q", out)
	}

	// VNC over TLS: the console's answer and gnt instance console say
	// how it is secured; what breaks the rules is refused by name.
	run("instance", "modify", "-H", "vnc_tls=true,vnc_x509_path=/etc/gnt/vnc-x509,vnc_x509_verify=true", "vnc1")
	if con := get("/2/instances/vnc1/console"); con["kind"] != "vnc" || con["port"] != float64(11000) ||
		!strings.Contains(fmt.Sprint(con["message"]), "VNC over TLS (VeNCrypt, x509)") {
		t.Errorf("console of vnc1 over TLS: %v", con)
	}
	if out := run("instance", "console", "vnc1"); !strings.Contains(out, fmt.Sprintf("Instance vnc1 has VNC listening on %s:11000 (display 5100).\nVNC over TLS (VeNCrypt, x509): the server's certificate is signed by /etc/gnt/vnc-x509/ca-cert.pem on the node, and the client must present a certificate signed by it.\n", node.IP)) {
		t.Errorf("gnt instance console vnc1 over TLS: %q", out)
	}
	for _, bad := range []struct{ hv, inst, want string }{
		{"vnc_tls=true", "plain1", "vnc_tls=true needs vnc_bind_address"},
		{"vnc_tls=true,vnc_x509_verify=true", "vnc2", "vnc_x509_verify=true needs vnc_x509_path"},
		{"vnc_x509_path=etc/vnc", "vnc2", "is not an absolute path"},
		{"vnc_x509_path=default", "vnc1", "vnc_x509_verify=true needs vnc_x509_path"},
	} {
		if out, err := c.GNT("instance", "modify", "-H", bad.hv, bad.inst); err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("instance modify -H %s %s: %v, want %q\n%s", bad.hv, bad.inst, err, bad.want, out)
		}
	}

	// Removal frees the port; the next instance that needs one takes it.
	run("instance", "remove", "-f", "vnc1")
	run("instance", "add", "-t", "diskless", "-n", "node21", "--no-install", "--no-start", "-H", "vnc_bind_address=127.0.0.1", "vnc3")
	if got := get("/2/instances/vnc3")["network_port"]; got != float64(11000) {
		t.Errorf("vnc3 after vnc1's removal: network_port %v, want 11000", got)
	}
	// The cluster's vnc_bind_address: plain1 gets its port in that change.
	run("cluster", "modify", "-H", "fake:vnc_bind_address=0.0.0.0")
	if got := get("/2/instances/plain1")["network_port"]; got != float64(11002) {
		t.Errorf("plain1 after the cluster's vnc_bind_address: network_port %v, want 11002", got)
	}

}
