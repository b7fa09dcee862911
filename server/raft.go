package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/transport"
)

// raftFSM adapts fsm.FSM to raft.FSM. It is the only place Raft calls into
// the state machine.
type raftFSM struct {
	fsm *fsm.FSM
	log hclog.Logger
	// ops times snapshots and restores (nil in some tests).
	ops *opMetrics
}

// Apply implements raft.FSM. An entry of a type this build does not know
// stops the process: applying the rest of the log without it would let this
// replica diverge silently.
func (a *raftFSM) Apply(l *raft.Log) any {
	resp := a.fsm.Apply(l.Index, l.Data)
	if e, ok := resp.(*fsm.Error); ok && e.Code == fsm.CodeUnknownCmd {
		a.log.Error("stopping: cannot apply log entry", "index", l.Index, "error", e.Msg)
		fmt.Fprintf(os.Stderr, "gntd: fatal: log entry %d: %s\n", l.Index, e.Msg)
		os.Exit(70)
	}
	return resp
}

// StoreConfiguration implements raft.ConfigurationStore so that the applied
// index also advances over membership changes.
func (a *raftFSM) StoreConfiguration(index uint64, _ raft.Configuration) { a.fsm.ApplyNoop(index) }

// Snapshot implements raft.FSM: it only freezes a view of the state (Apply
// is blocked meanwhile, so it must be quick); Persist encodes and writes it
// while Apply goes on.
func (a *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	return snapshot{a.fsm.Freeze(), a.ops}, nil
}

// Restore implements raft.FSM.
func (a *raftFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	start := time.Now()
	err := a.fsm.Restore(r)
	if err == nil && a.ops != nil {
		a.ops.restoreDur.Observe(time.Since(start).Seconds())
	}
	return err
}

type snapshot struct {
	z   *fsm.Frozen
	ops *opMetrics
}

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	n, err := s.z.WriteTo(sink)
	if err != nil {
		sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if s.ops != nil {
		s.ops.snapshotDur.Observe(time.Since(start).Seconds())
		s.ops.snapshotBytes.Set(float64(n))
	}
	return nil
}

func (s snapshot) Release() {}

// raftNode is one running Raft server with its stores.
type raftNode struct {
	raft  *raft.Raft
	store *prefillStore
	trans *raft.NetworkTransport
	// stopLoss stops the leaderLoss watcher and waits for it.
	stopLoss func()
}

func raftConfig(cfg *Config, log hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.Name)
	rc.HeartbeatTimeout = cfg.Timing().Heartbeat
	rc.ElectionTimeout = cfg.Timing().Election
	rc.LeaderLeaseTimeout = cfg.Timing().LeaderLease
	rc.CommitTimeout = cfg.Timing().Commit
	rc.MaxAppendEntries = 256
	rc.SnapshotInterval = cfg.Timing().Snapshot
	rc.SnapshotThreshold = 8192
	rc.TrailingLogs = 10240
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	rc.ShutdownOnRemove = false
	raftLog := log.Named("raft")
	if log.GetLevel() < hclog.Warn && !hasLevelFor(log, "raft") {
		// Raft's info lines are many and routine; --log-level
		// info,raft=info asks for them.
		raftLog.SetLevel(hclog.Warn)
	}
	rc.Logger = quietPeerErrors(raftLog)
	return rc
}

// boltOptions are raft.db's bolt options. NoGrowSync: bolt must not
// truncate the file back over the zeros written past its end (prefill.go).
func boltOptions() *bbolt.Options {
	return &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, NoGrowSync: true}
}

// startRaft opens the stores in dir and starts Raft. With bootstrap set it
// first writes a one-server configuration (cluster init); it refuses to
// bootstrap over existing state. With faults set, Raft traffic goes
// through it (fault injection, faults.go). wrap, if set, wraps the Raft
// listener (its connection caps, netlimits.go); id is this gntd's TLS
// identity.
func startRaft(cfg *Config, dir string, f *raftFSM, log hclog.Logger, bootstrap bool, faults *transport.Faults, wrap func(net.Listener) net.Listener, id *pki.Store) (*raftNode, error) {
	var commits prometheus.Observer
	if f.ops != nil {
		commits = f.ops.storeCommit
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	dbPath := filepath.Join(dir, raftDBFile)
	bolt, err := openRaftBolt(dbPath) // boltcheck.go
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w (is another gntd using this data dir, or is the file corrupt?)", dbPath, err)
	}
	store, err := newPrefillStore(bolt, dbPath, log.Named("raft-log"))
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("opening %s: %w", dbPath, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, log.Named("snapshots"))
	if err != nil {
		store.Close()
		return nil, err
	}
	loss := newLeaderLoss(cfg.Timing(), log)
	// Mutual TLS with node certificates of the cluster CA: a connection
	// without one is refused at the handshake, before Raft reads a byte.
	stream, err := transport.NewTCPStreamLayer(cfg.RaftAddr(), transport.WithPeerClosed(loss.notify), transport.WithListener(wrap),
		transport.WithTLS(id.ServerTLS(tls.RequireAndVerifyClientCert), id.ClientTLS()))
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft listener on %s: %w", cfg.RaftAddr(), err)
	}
	var layer raft.StreamLayer = stream
	if faults != nil {
		layer = transport.WrapStreamLayer(stream, faults)
	}
	trans := transport.NewNetworkTransport(layer, log.Named("raft-net"))
	rc := raftConfig(cfg, log)
	if bootstrap {
		has, err := raft.HasExistingState(store, store, snaps)
		if err != nil || has {
			trans.Close()
			store.Close()
			return nil, errors.New("refusing to bootstrap: Raft state exists already")
		}
		conf := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr(), Suffrage: raft.Voter}}}
		if err := raft.BootstrapCluster(rc, store, store, snaps, trans, conf); err != nil {
			trans.Close()
			store.Close()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	if !bootstrap {
		// A replica that starts from an empty log must start from an empty
		// state too: the log will be replayed from its beginning (or from a
		// snapshot), and old in-memory state would be applied twice.
		has, err := raft.HasExistingState(store, store, snaps)
		if err != nil {
			trans.Close()
			store.Close()
			return nil, err
		}
		if !has {
			f.fsm.Reset()
		}
	}
	// Recent entries are served from memory when replicating, instead of
	// being read back from bolt and decoded for every append.
	logs, err := raft.NewLogCache(1024, timedLogStore{store, commits})
	if err != nil {
		trans.Close()
		store.Close()
		return nil, err
	}
	r, err := raft.NewRaft(rc, f, logs, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	loss.r, loss.id = r, rc.LocalID
	loss.probe = func(addr string) error { return stream.Probe(addr, 250*time.Millisecond) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); loss.run(ctx) }()
	return &raftNode{raft: r, store: store, trans: trans, stopLoss: func() { cancel(); <-done }}, nil
}

func (n *raftNode) shutdown() error {
	n.stopLoss()
	err := n.raft.Shutdown().Error()
	n.trans.Close()
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}
