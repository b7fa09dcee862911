package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/confd"
	"github.com/gnt-cluster/gnt/fsm"
)

type fsmSource struct{ f *fsm.FSM }

func (s fsmSource) View(fn func(*fsm.State, string)) bool {
	s.f.Read(func(st *fsm.State, _ uint64) { fn(st, "") })
	return true
}

// confdServer runs a real confd server on 127.0.0.1 over a cluster of one
// node (node1, the master) and returns its address and a key file.
func confdServer(t *testing.T) (addr, keyFile string) {
	key := []byte("0123456789abcdef0123456789abcdef01234567\n")
	keyFile = filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	f := fsm.New()
	entry, err := fsm.Encode(fsm.ClusterInit{Now: 1, Name: "cluster.example.com", UUID: "c", GroupUUID: "g",
		Node: fsm.NodeSpec{Name: "node1", UUID: "n1", PrimaryIP: "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(1, entry); r.(fsm.Response).Err != nil {
		t.Fatal(r)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := confd.NewServer(confd.ServerOptions{Key: key, Source: fsmSource{f}, Version: 10000, Workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, conn); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return conn.LocalAddr().String(), keyFile
}

func TestConfdQueryCLI(t *testing.T) {
	addr, keyFile := confdServer(t)
	r := gnt(t, nil, "confd", "query", "node-role-byname", "node1", "--address", addr, "--key-file", keyFile)
	if r.code != 0 || !strings.Contains(r.stdout, "answer:   0 (master)") || !strings.Contains(r.stdout, "serial:   1") ||
		!strings.Contains(r.stdout, "replies:  1 of 1 asked (needed 1); agreed: yes; consistent: yes") {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The key from $GNT_KEY_FILE, JSON for scripts.
	r = gnt(t, map[string]string{"GNT_KEY_FILE": keyFile}, "--json", "confd", "query", "cluster-master", "--fields", "name,mnode-pip", "--address", addr)
	var out struct {
		Type     string
		Status   int
		Answer   []string
		Serial   int64
		Received int
		Agreed   bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		t.Fatalf("%v exit %d\n%s%s", err, r.code, r.stdout, r.stderr)
	}
	if out.Type != "CLUSTER_MASTER" || out.Status != 0 || len(out.Answer) != 2 || out.Answer[0] != "node1" || out.Answer[1] != "127.0.0.1" || out.Received != 1 || !out.Agreed {
		t.Errorf("%+v", out)
	}
	// An error answer is printed, and the exit status says so.
	r = gnt(t, nil, "confd", "query", "node-role-byname", "nosuch", "--address", addr, "--key-file", keyFile)
	if r.code != 1 || !strings.Contains(r.stdout, "answer:   error 0 (unknown entry)") {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Candidates found from the API server list: the confd server on
	// its host answers MC_PIP_LIST (127.0.0.1, the node's primary IP),
	// and the query goes there.
	_, port, _ := net.SplitHostPort(addr)
	r = gnt(t, nil, "confd", "query", "ping", "--server", "127.0.0.1:5080", "--port", port, "--key-file", keyFile)
	if r.code != 0 || !strings.Contains(r.stdout, "answer:   10000") || !strings.Contains(r.stdout, "from:     127.0.0.1:"+port) || r.stderr != "" {
		t.Errorf("discovery: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A wrong key: no reply, a clear failure.
	bad := filepath.Join(t.TempDir(), "k")
	os.WriteFile(bad, []byte("ffff\n"), 0o600)
	r = gnt(t, nil, "--timeout", "300ms", "confd", "query", "ping", "--address", addr, "--key-file", bad)
	if r.code != 1 || !strings.Contains(r.stderr, "no confd reply") {
		t.Errorf("wrong key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestConfdQueryCLIBadInput(t *testing.T) {
	_, keyFile := confdServer(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"confd", "query"}, 2, "missing argument"},
		{[]string{"confd", "query", "node-role"}, 2, "unknown confd request type"},
		{[]string{"confd", "query", "12"}, 2, "unknown confd request type 12"},
		{[]string{"confd", "query", "node-pip-by-instance-ip"}, 2, "needs an instance IP"},
		{[]string{"confd", "query", "cluster-master", "x"}, 2, "takes no QUERY"},
		{[]string{"confd", "query", "cluster-master", "--fields", "name,size"}, 2, "unknown cluster-master field"},
		{[]string{"confd", "query", "ping", "--link", "br0"}, 2, "--link and --fields apply"},
		{[]string{"confd", "query", "node-role-byname", "a", "b"}, 2, "too many arguments"},
		{[]string{"confd", "query", "ping", "--query-json", "[1]"}, 2, "is not a query confd accepts"},
		{[]string{"confd", "query", "ping", "--query-json", "{", "--address", "127.0.0.1"}, 2, "is not a query confd accepts"},
		{[]string{"confd", "query", "ping", "--coverage", "-2", "--address", "127.0.0.1"}, 2, "--coverage"},
		{[]string{"confd", "query", "ping", "--port", "70000", "--address", "127.0.0.1"}, 2, "--port"},
		{[]string{"confd", "query", "ping", "--address", "127.0.0.1,,x"}, 2, "empty address"},
		{[]string{"confd", "query", "ping", "--coverage", "2", "--address", "127.0.0.1"}, 1, "coverage exceeds"},
		{[]string{"confd", "query", "ping", "--key-file", "/nonexistent/key"}, 1, "reading the cluster key"},
	} {
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "--key-file") {
			args = append(args, "--key-file", keyFile)
		}
		r := gnt(t, nil, args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
	}
}
