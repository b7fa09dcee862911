package server

import (
	"context"
	"net"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/transport"
)

// leaderLoss shortens the election that follows the death of the leader's
// process.
//
// A follower learns that its leader is gone only when the heartbeat timeout
// (200–400 ms on the LAN timers) passes without a word from it, and a
// follower refuses to vote while it still hears from a leader, so the
// election waits for the slower of the followers' timers: about 350 ms of a
// failover's 450 were spent waiting (make bench, TestBenchFailover).
//
// When the leader's process dies, though (kill -9, a crash, the OOM
// killer), its host's kernel ends every connection it had at once, and a new
// connection to its Raft port is refused. A follower that sees a connection
// from its leader's IP end (transport.WithPeerClosed) and then finds the
// leader's Raft port refusing connections (transport.Refused) knows the
// process is gone. It then lowers Raft's heartbeat and election timeouts to
// the leader lease, the least Raft accepts (they may not be shorter), and
// its own timer fires as soon as the leader has been silent that long; when
// a new leader is known it puts them back.
//
// The followers stand for election one after another, not together: the
// follower of rank k among the voters (by server ID, the dead leader left
// out) waits lease + k·step after it saw the connection end. The first ones
// find the others still attached to the dead leader and are refused, which
// leaves them leaderless; the one that reaches a majority that way is
// elected at its first try. Standing together would split the vote and cost
// an election timeout.
//
// Nothing here decides an election or bypasses Raft's rules: it only moves
// a timer. A wrong guess (a leader that is alive but unreachable from this
// follower and refusing it) makes this follower a candidate that the others
// refuse, as a partition would. A host that dies whole, or a partition that
// drops packets, gives no refusal and leaves the ordinary timeouts in
// charge.
type leaderLoss struct {
	r     raftView
	id    raft.ServerID // this server's ID
	probe func(addr string) error
	log   hclog.Logger
	// closed carries the peers that ended a connection.
	closed chan peerClosed
	// lease is the shortened heartbeat and election timeout; step separates
	// the ranks; base is the timeouts to restore; settle bounds the wait for
	// a new leader before they are restored anyway.
	lease, step, settle time.Duration
	base                raft.ReloadableConfig
}

// raftView is what leaderLoss uses of *raft.Raft (the tests fake it).
type raftView interface {
	State() raft.RaftState
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	LastContact() time.Time
	GetConfiguration() raft.ConfigurationFuture
	ReloadableConfig() raft.ReloadableConfig
	ReloadConfig(raft.ReloadableConfig) error
}

// newLeaderLoss returns the watcher for a Raft server with timing t. Its
// notify method is the transport's WithPeerClosed callback.
func newLeaderLoss(t Timing, log hclog.Logger) *leaderLoss {
	return &leaderLoss{
		log:    log.Named("leader-loss"),
		closed: make(chan peerClosed, 16),
		lease:  t.LeaderLease,
		step:   20 * time.Millisecond,
		settle: 4 * (t.Heartbeat + t.Election),
	}
}

// peerClosed is one connection ended by the peer at ip, seen at at.
type peerClosed struct {
	ip string
	at time.Time
}

// notify records that the peer at ip ended a connection. It never blocks:
// when events queue up faster than they are read, the surplus is dropped
// (the ordinary timeouts still apply).
func (l *leaderLoss) notify(ip string) {
	select {
	case l.closed <- peerClosed{ip: ip, at: time.Now()}:
	default:
	}
}

// run watches until ctx ends. r, id and probe are set before it starts.
func (l *leaderLoss) run(ctx context.Context) {
	l.base = l.r.ReloadableConfig()
	if l.lease >= l.base.HeartbeatTimeout {
		return // nothing to shorten
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-l.closed:
			l.check(ctx, ev)
		}
	}
}

// check handles one ended connection. The leader's port is probed only
// when this follower's turn comes: a connection can end a moment before
// the dying process's listening socket is closed, and a probe at once
// would still find it listening.
func (l *leaderLoss) check(ctx context.Context, ev peerClosed) {
	addr, id, ok := l.leaderAt(ev.ip)
	if !ok {
		return
	}
	rank, ok := l.rank(id)
	if !ok {
		return // not a voter: it stands for no election
	}
	sleepCtx(ctx, time.Until(ev.at.Add(l.lease+time.Duration(rank)*l.step)))
	if ctx.Err() != nil {
		return
	}
	// Still following the same leader, silent for a lease at least, and its
	// port refuses connections?
	if a, _, ok := l.leaderAt(ev.ip); !ok || a != addr || time.Since(l.r.LastContact()) < l.lease {
		return
	}
	if err := l.probe(string(addr)); !transport.Refused(err) {
		return
	}
	fast := l.r.ReloadableConfig()
	fast.HeartbeatTimeout, fast.ElectionTimeout = l.lease, l.lease
	l.log.Warn("the leader's Raft port refuses connections: its process is gone; standing for election now",
		"leader", string(id), "addr", string(addr), "rank", rank)
	if err := l.r.ReloadConfig(fast); err != nil {
		l.log.Error("cannot shorten the election timeouts", "error", err)
		return
	}
	l.waitNewLeader(ctx, addr)
	back := l.r.ReloadableConfig()
	back.HeartbeatTimeout, back.ElectionTimeout = l.base.HeartbeatTimeout, l.base.ElectionTimeout
	if err := l.r.ReloadConfig(back); err != nil {
		l.log.Error("cannot restore the election timeouts", "error", err)
	}
	// Events that queued meanwhile are about the old leader: drop them.
	for {
		select {
		case <-l.closed:
		default:
			return
		}
	}
}

// leaderAt returns the leader this server follows when its address is at
// ip.
func (l *leaderLoss) leaderAt(ip string) (raft.ServerAddress, raft.ServerID, bool) {
	if l.r.State() != raft.Follower {
		return "", "", false
	}
	addr, id := l.r.LeaderWithID()
	host, _, err := net.SplitHostPort(string(addr))
	if addr == "" || err != nil || host != ip {
		return "", "", false
	}
	return addr, id, true
}

// rank is this server's place among the voters other than leader, by ID;
// false when it is not one of them.
func (l *leaderLoss) rank(leader raft.ServerID) (int, bool) {
	f := l.r.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != leader {
			ids = append(ids, string(s.ID))
		}
	}
	sort.Strings(ids)
	for i, id := range ids {
		if id == string(l.id) {
			return i, true
		}
	}
	return 0, false
}

// waitNewLeader returns once this server leads, follows a leader other than
// old, or settle has passed.
func (l *leaderLoss) waitNewLeader(ctx context.Context, old raft.ServerAddress) {
	deadline := time.Now().Add(l.settle)
	for time.Now().Before(deadline) {
		if l.r.State() == raft.Leader {
			return
		}
		if a, _ := l.r.LeaderWithID(); a != "" && a != old {
			return
		}
		sleepCtx(ctx, 5*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
	}
}
