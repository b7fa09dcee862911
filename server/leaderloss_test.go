package server

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// fakeRaft is the part of a follower leaderLoss sees, under the test's
// control.
type fakeRaft struct {
	mu      sync.Mutex
	state   raft.RaftState
	leader  raft.ServerAddress
	lid     raft.ServerID
	contact time.Time
	servers []raft.Server
	cfg     raft.ReloadableConfig
	reloads []raft.ReloadableConfig
	// onReload runs after each reload, under no lock (a test elects a new
	// leader there).
	onReload func(f *fakeRaft, rc raft.ReloadableConfig)
}

func (f *fakeRaft) State() raft.RaftState { f.mu.Lock(); defer f.mu.Unlock(); return f.state }
func (f *fakeRaft) LeaderWithID() (raft.ServerAddress, raft.ServerID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader, f.lid
}
func (f *fakeRaft) LastContact() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.contact }
func (f *fakeRaft) GetConfiguration() raft.ConfigurationFuture {
	f.mu.Lock()
	defer f.mu.Unlock()
	return confFuture{raft.Configuration{Servers: append([]raft.Server(nil), f.servers...)}}
}
func (f *fakeRaft) ReloadableConfig() raft.ReloadableConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg
}
func (f *fakeRaft) ReloadConfig(rc raft.ReloadableConfig) error {
	f.mu.Lock()
	f.cfg = rc
	f.reloads = append(f.reloads, rc)
	hook := f.onReload
	f.mu.Unlock()
	if hook != nil {
		hook(f, rc)
	}
	return nil
}
func (f *fakeRaft) set(fn func(f *fakeRaft)) { f.mu.Lock(); fn(f); f.mu.Unlock() }
func (f *fakeRaft) reloaded() []raft.ReloadableConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]raft.ReloadableConfig(nil), f.reloads...)
}

type confFuture struct{ c raft.Configuration }

func (c confFuture) Error() error                      { return nil }
func (c confFuture) Index() uint64                     { return 1 }
func (c confFuture) Configuration() raft.Configuration { return c.c }

// refused is the error a dial to a port nobody listens on returns.
var refused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// follower returns node "b" following leader "a" (at 127.0.0.1) in a
// three-voter group whose base timeouts are 200 ms, and a watcher with a
// 5 ms lease and 5 ms steps.
func follower(probe func(string) error) (*fakeRaft, *leaderLoss) {
	f := &fakeRaft{
		state: raft.Follower, leader: "127.0.0.1:1817", lid: "a",
		contact: time.Now().Add(-time.Second),
		servers: []raft.Server{
			{ID: "a", Address: "127.0.0.1:1817", Suffrage: raft.Voter},
			{ID: "b", Address: "127.0.0.2:1817", Suffrage: raft.Voter},
			{ID: "c", Address: "127.0.0.3:1817", Suffrage: raft.Voter},
			{ID: "d", Address: "127.0.0.4:1817", Suffrage: raft.Nonvoter},
		},
		cfg: raft.ReloadableConfig{HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, TrailingLogs: 77},
	}
	l := newLeaderLoss(LANTiming(), hclog.NewNullLogger())
	l.r, l.id, l.probe = f, "b", probe
	l.lease, l.step, l.settle = 5*time.Millisecond, 5*time.Millisecond, 2*time.Second
	l.base = f.cfg
	return f, l
}

// TestLeaderLossStandsAndRestores: the leader's connection ends and its
// port refuses: the follower shortens both timeouts to the lease (other
// settings kept), and puts them back once a new leader is known.
func TestLeaderLossStandsAndRestores(t *testing.T) {
	var probed []string
	f, l := follower(func(addr string) error { probed = append(probed, addr); return refused })
	f.onReload = func(f *fakeRaft, rc raft.ReloadableConfig) {
		if rc.HeartbeatTimeout == 5*time.Millisecond {
			f.set(func(f *fakeRaft) { f.state, f.leader, f.lid = raft.Follower, "127.0.0.3:1817", "c" })
		}
	}
	l.check(context.Background(), peerClosed{ip: "127.0.0.1", at: time.Now()})
	got := f.reloaded()
	if len(got) != 2 {
		t.Fatalf("reloads = %+v, want shorten then restore", got)
	}
	if got[0].HeartbeatTimeout != 5*time.Millisecond || got[0].ElectionTimeout != 5*time.Millisecond || got[0].TrailingLogs != 77 {
		t.Errorf("shortened config = %+v, want both timeouts at the lease and TrailingLogs kept", got[0])
	}
	if got[1] != l.base {
		t.Errorf("restored config = %+v, want %+v", got[1], l.base)
	}
	if len(probed) != 1 || probed[0] != "127.0.0.1:1817" {
		t.Errorf("probed %v, want the leader's Raft address once", probed)
	}
}

// TestLeaderLossLeavesAliveLeaders: every case where the leader may be
// alive, or this server has no election to stand in, changes nothing.
func TestLeaderLossLeavesAliveLeaders(t *testing.T) {
	cases := []struct {
		name  string
		ip    string
		probe error
		setup func(f *fakeRaft)
	}{
		{"another peer's connection", "127.0.0.3", refused, nil},
		{"port still listening", "127.0.0.1", nil, nil},
		{"port unreachable, not refused", "127.0.0.1", errors.New("i/o timeout"), nil},
		{"leader spoke since", "127.0.0.1", refused, func(f *fakeRaft) { f.contact = time.Now().Add(time.Hour) }},
		{"no leader known", "127.0.0.1", refused, func(f *fakeRaft) { f.leader, f.lid = "", "" }},
		{"candidate already", "127.0.0.1", refused, func(f *fakeRaft) { f.state = raft.Candidate }},
		{"not a voter", "127.0.0.1", refused, func(f *fakeRaft) { f.servers[1].Suffrage = raft.Nonvoter }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, l := follower(func(string) error { return tc.probe })
			if tc.setup != nil {
				f.set(tc.setup)
			}
			l.check(context.Background(), peerClosed{ip: tc.ip, at: time.Now()})
			if got := f.reloaded(); len(got) != 0 {
				t.Fatalf("reloads = %+v, want none", got)
			}
		})
	}
}

// TestLeaderLossRestoresWithoutNewLeader: when no new leader appears within
// settle, the timeouts are put back anyway.
func TestLeaderLossRestoresWithoutNewLeader(t *testing.T) {
	f, l := follower(func(string) error { return refused })
	l.settle = 30 * time.Millisecond
	l.check(context.Background(), peerClosed{ip: "127.0.0.1", at: time.Now()})
	got := f.reloaded()
	if len(got) != 2 || got[1] != l.base {
		t.Fatalf("reloads = %+v, want shorten then restore to %+v", got, l.base)
	}
}

// TestLeaderLossRank: voters other than the dead leader, by ID; non-voters
// have no rank.
func TestLeaderLossRank(t *testing.T) {
	_, l := follower(nil)
	for _, tc := range []struct {
		self, leader string
		rank         int
		ok           bool
	}{
		{"b", "a", 0, true}, {"c", "a", 1, true}, {"b", "c", 1, true}, {"a", "c", 0, true},
		{"d", "a", 0, false}, {"a", "a", 0, false}, {"x", "a", 0, false},
	} {
		l.id = raft.ServerID(tc.self)
		rank, ok := l.rank(raft.ServerID(tc.leader))
		if rank != tc.rank || ok != tc.ok {
			t.Errorf("rank of %s with leader %s = %d, %v; want %d, %v", tc.self, tc.leader, rank, ok, tc.rank, tc.ok)
		}
	}
}

// TestLeaderLossNotifyNeverBlocks: a flood of ended connections is
// absorbed, never blocking the transport's reader.
func TestLeaderLossNotifyNeverBlocks(t *testing.T) {
	_, l := follower(nil)
	done := make(chan struct{})
	go func() {
		for i := 0; i < 1000; i++ {
			l.notify("127.0.0.1")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("notify blocked with nobody reading")
	}
}
