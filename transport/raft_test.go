package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// These tests run real raft over real TCP on 127.0.0.101-103 with bolt
// stores, every node's stream layer wrapped with its own Faults.

// testFSM records the data of every applied entry.
type testFSM struct {
	mu      sync.Mutex
	entries []string
}

func (f *testFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return len(f.entries)
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fsmSnapshot(slices.Clone(f.entries)), nil
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	f.entries = entries
	f.mu.Unlock()
	return nil
}

func (f *testFSM) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

type fsmSnapshot []string

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

// recordingLayer remembers the remote address of every accepted connection.
type recordingLayer struct {
	raft.StreamLayer
	mu      sync.Mutex
	remotes []string
}

func (l *recordingLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err == nil {
		l.mu.Lock()
		l.remotes = append(l.remotes, c.RemoteAddr().String())
		l.mu.Unlock()
	}
	return c, err
}

func (l *recordingLayer) remoteIPs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ips []string
	for _, r := range l.remotes {
		ips = append(ips, peerKey(r))
	}
	return ips
}

type node struct {
	addr   raft.ServerAddress
	raft   *raft.Raft
	fsm    *testFSM
	faults *Faults
	stream *recordingLayer
}

// testLogger sends raft's logs to t.Log until the test ends, and drops the
// few lines that goroutines finishing after the test still write.
func testLogger(t *testing.T, name string) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop) // registered first, so it runs after the nodes stopped
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: w, Level: hclog.Info})
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p[:len(p)-1]))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// startCluster starts one bootstrapped voter per IP and stops them all at
// the end of the test.
func startCluster(t *testing.T, ips ...string) []*node {
	t.Helper()
	nodes := make([]*node, len(ips))
	var servers []raft.Server
	for i, ip := range ips {
		s := newLayer(t, ip)
		n := &node{
			addr:   raft.ServerAddress(s.Addr().String()),
			fsm:    &testFSM{},
			faults: &Faults{},
		}
		n.stream = &recordingLayer{StreamLayer: WrapStreamLayer(s, n.faults)}
		nodes[i] = n
		servers = append(servers, raft.Server{ID: raft.ServerID(n.addr), Address: n.addr})
	}
	for _, n := range nodes {
		logger := testLogger(t, string(n.addr))
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(n.addr)
		conf.HeartbeatTimeout = 150 * time.Millisecond
		conf.ElectionTimeout = 150 * time.Millisecond
		conf.LeaderLeaseTimeout = 100 * time.Millisecond
		conf.CommitTimeout = 5 * time.Millisecond
		conf.Logger = logger

		dir := t.TempDir()
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, logger)
		if err != nil {
			t.Fatal(err)
		}
		trans := NewNetworkTransport(n.stream, logger)
		r, err := raft.NewRaft(conf, n.fsm, store, store, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		n.raft = r
		t.Cleanup(func() {
			if err := r.Shutdown().Error(); err != nil {
				t.Errorf("shutdown %s: %v", n.addr, err)
			}
			trans.CloseStreams() // Shutdown closes the listener, not pooled connections
			store.Close()
		})
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// waitFor polls cond until it holds or the bound passes.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stableLeader waits until exactly one of nodes is leader and all of them
// name it, and returns it.
func stableLeader(t *testing.T, nodes []*node) *node {
	t.Helper()
	var leader *node
	waitFor(t, 10*time.Second, "one leader all agree on", func() bool {
		leader = nil
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if addr, _ := n.raft.LeaderWithID(); addr != leader.addr {
				return false
			}
		}
		return true
	})
	return leader
}

func apply(t *testing.T, n *node, data string) {
	t.Helper()
	if err := n.raft.Apply([]byte(data), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply %q on %s: %v", data, n.addr, err)
	}
}

// waitReplicated waits until every node's FSM holds exactly want.
func waitReplicated(t *testing.T, nodes []*node, want []string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("all FSMs hold %q", want), func() bool {
		for _, n := range nodes {
			if !slices.Equal(n.fsm.get(), want) {
				return false
			}
		}
		return true
	})
}

func TestRaftReplicatesOverTCP(t *testing.T) {
	nodes := startCluster(t, ipA, ipB, ipC)
	leader := stableLeader(t, nodes)

	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("entry-%d", i))
		apply(t, leader, want[i])
	}
	waitReplicated(t, nodes, want)

	// Every connection a node accepted came from a peer's own IP, never
	// from 127.0.0.1: dials leave from the bind address.
	for _, n := range nodes {
		ips := n.stream.remoteIPs()
		if len(ips) == 0 && n != leader {
			t.Errorf("follower %s accepted no connection", n.addr)
		}
		for _, ip := range ips {
			if ip == peerKey(string(n.addr)) || !slices.Contains([]string{ipA, ipB, ipC}, ip) {
				t.Errorf("%s accepted a connection from %s", n.addr, ip)
			}
		}
	}
	// The leader dialed every follower.
	for _, n := range nodes {
		if n != leader && !slices.Contains(n.stream.remoteIPs(), peerKey(string(leader.addr))) {
			t.Errorf("follower %s has no connection from leader IP %s: %v",
				n.addr, peerKey(string(leader.addr)), n.stream.remoteIPs())
		}
	}
}

func TestRaftLeaderIsolationAndHeal(t *testing.T) {
	nodes := startCluster(t, ipA, ipB, ipC)
	old := stableLeader(t, nodes)
	want := []string{"before"}
	apply(t, old, want[0])
	waitReplicated(t, nodes, want)

	// The followers cut the leader off by its address. On their side that
	// matches connections they accepted from it by source IP only.
	var rest []*node
	for _, n := range nodes {
		if n != old {
			rest = append(rest, n)
			n.faults.Block(string(old.addr))
		}
	}
	start := time.Now()

	// A write on the isolated leader must not commit.
	lost := old.raft.Apply([]byte("lost"), 5*time.Second)

	newLeader := stableLeader(t, rest)
	t.Logf("new leader %s after %v", newLeader.addr, time.Since(start))
	waitFor(t, 5*time.Second, "isolated leader steps down", func() bool {
		return old.raft.State() != raft.Leader
	})
	if err := lost.Error(); !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) {
		t.Fatalf("apply on isolated leader: %v, want leadership lost", err)
	}

	for i := range 5 {
		want = append(want, fmt.Sprintf("during-%d", i))
		apply(t, newLeader, want[len(want)-1])
	}
	waitReplicated(t, rest, want)
	if got := old.fsm.get(); !slices.Equal(got, want[:1]) {
		t.Fatalf("isolated node applied %q", got)
	}

	for _, n := range rest {
		n.faults.Heal()
	}
	start = time.Now()
	if got := stableLeader(t, nodes); got != newLeader {
		t.Fatalf("after heal %s leads, want %s", got.addr, newLeader.addr)
	}
	waitReplicated(t, nodes, want)
	t.Logf("old leader caught up %v after heal", time.Since(start))
	if old.raft.State() != raft.Follower {
		t.Fatalf("old leader is %v after heal, want Follower", old.raft.State())
	}
}
