package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// No Raft amnesia.
//
// A Raft server's log and stable store (its term and its vote) are its
// promises: a voter that forgets them can vote twice in a term or drop
// entries it acknowledged, and when that happens to a majority, two
// leaders can be elected in one term or committed writes lost. So once
// this gntd has been a member of a Raft configuration, node.json records
// it (identity.RaftMember, written by watchMembership), and a gntd whose
// Raft store is then missing or empty refuses to start (checkRaftStore),
// saying what happened and what to do: `gntd agent --rejoin` asks the
// leader to remove it from the configuration (a signed request, as joins
// are: Server.Rejoin), moves the broken store aside and starts with an
// empty one; the candidate-pool keeper adds it back as a non-voter and
// promotes it once it has caught up (pool.go). Leaving the Raft group
// (no longer a candidate) clears the record with the state it archives.
//
// A raft.db that is not a sound bolt file is refused with one line naming
// the file (boltcheck.go), never with bbolt's panic.

// raftStoreState is what checkRaftStore found.
type raftStoreState struct {
	// lost, when not empty, says how this member's Raft state was lost.
	lost string
	// corrupt is set when raft.db is not a sound bolt database.
	corrupt error
}

// checkRaftStore examines the Raft store of a data dir before anything
// opens it. member is the Raft ID node.json records ("" when this gntd
// never was a member: then only corruption is looked for).
func (d dataDir) checkRaftStore(member string) (raftStoreState, error) {
	var st raftStoreState
	db := filepath.Join(d.raftPath(), raftDBFile)
	info, err := os.Stat(d.raftPath())
	switch {
	case errors.Is(err, os.ErrNotExist):
		if member != "" {
			st.lost = fmt.Sprintf("its Raft directory %s is missing", d.raftPath())
		}
		return st, nil
	case err != nil:
		return st, err
	case !info.IsDir():
		return st, fmt.Errorf("%s is not a directory", d.raftPath())
	}
	info, err = os.Stat(db)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if member != "" {
			st.lost = fmt.Sprintf("%s is missing", db)
		}
		return st, nil
	case err != nil:
		return st, err
	case info.Size() == 0:
		if member != "" {
			st.lost = fmt.Sprintf("%s is empty (0 bytes)", db)
		}
		return st, nil
	}
	if err := checkBoltFile(db); err != nil {
		if !errors.Is(err, errBoltCorrupt) {
			return st, fmt.Errorf("reading %s: %w", db, err)
		}
		st.corrupt = err
		return st, nil
	}
	if member == "" {
		return st, nil
	}
	term, entries, err := readRaftStore(db)
	if err != nil {
		return st, err
	}
	snaps, _ := filepath.Glob(filepath.Join(d.raftPath(), "snapshots", "*", "meta.json"))
	switch {
	case term == 0:
		st.lost = fmt.Sprintf("%s holds no current term (its stable store is empty)", db)
	case !entries && len(snaps) == 0:
		st.lost = fmt.Sprintf("%s holds no log entries and there is no snapshot", db)
	}
	return st, nil
}

// readRaftStore reads, read-only, the current term and whether the log
// has any entry from a raft.db that checkBoltFile passed. bbolt is
// recovered from all the same, so that a file that changed under the
// check still gives an error rather than a stack trace.
func readRaftStore(path string) (term uint64, entries bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s is corrupt: %v", path, p)
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return 0, false, fmt.Errorf("%s is locked: is another gntd using this data dir?", path)
		}
		return 0, false, fmt.Errorf("opening %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte("conf")); b != nil {
			if v := b.Get([]byte("CurrentTerm")); len(v) == 8 {
				term = binary.BigEndian.Uint64(v)
			}
		}
		if b := tx.Bucket([]byte("logs")); b != nil {
			k, _ := b.Cursor().First()
			entries = k != nil
		}
		return nil
	})
	return term, entries, err
}

// amnesiaError is the refusal to start over a lost Raft state.
func amnesiaError(d dataDir, member, lost string) error {
	return fmt.Errorf("refusing to start: this gntd was a Raft member (ID %q, recorded in %s) but %s: "+
		"it may have voted or acknowledged writes it no longer remembers, and starting would risk lost writes or two leaders. "+
		"Start it once with 'gntd agent --rejoin' (with --join naming a reachable candidate): the leader removes it from "+
		"the Raft configuration and it comes back as a non-voter that catches up before it votes again. "+
		"Do this for one node at a time, while the others hold a majority",
		member, d.file(identityFile), lost)
}

// corruptError is the refusal to open a raft.db that is not a sound bolt
// file.
func corruptError(d dataDir, member string, err error) error {
	db := filepath.Join(d.raftPath(), raftDBFile)
	if member != "" {
		return fmt.Errorf("refusing to start: %s is corrupt (%v); start with 'gntd agent --rejoin' to move it aside and rejoin the cluster as a fresh non-voter", db, err)
	}
	return fmt.Errorf("refusing to start: %s is corrupt (%v); move the %s directory aside to start without Raft state", db, err, d.raftPath())
}

// checkAmnesia runs when the gntd is created: it refuses a data dir whose
// Raft state was lost or is corrupt, unless rejoin is set, in which case
// it says whether Run must rejoin first.
func (s *Server) checkAmnesia(rejoin bool) (needRejoin bool, err error) {
	member := s.id.RaftMember
	st, err := s.dir.checkRaftStore(member)
	if err != nil {
		return false, err
	}
	switch {
	case st.corrupt != nil && !rejoin:
		return false, corruptError(s.dir, member, st.corrupt)
	case st.lost != "" && !rejoin:
		return false, amnesiaError(s.dir, member, st.lost)
	case st.corrupt != nil || st.lost != "":
		if s.id.ClusterUUID == "" {
			return false, fmt.Errorf("cannot rejoin: %s names no cluster", s.dir.file(identityFile))
		}
		why := st.lost
		if st.corrupt != nil {
			why = fmt.Sprintf("%s is corrupt (%v)", filepath.Join(s.dir.raftPath(), raftDBFile), st.corrupt)
		}
		s.log.Warn("Raft state lost; rejoining as requested (--rejoin)", "why", why)
		return true, nil
	case rejoin:
		s.log.Info("--rejoin: the Raft state is intact; starting as usual")
	}
	return false, nil
}

// rejoinAttempt bounds one rejoin request; rejoinRetry is the pause
// between attempts while no leader answers.
const (
	rejoinAttempt = 15 * time.Second
	rejoinRetry   = time.Second
)

// rejoin asks the leader, through the candidates of --join, to remove
// this gntd from the Raft configuration, then moves its Raft state aside
// and clears the membership record: the gntd then starts as a node that
// is not yet in the Raft group, the join loop starts Raft when the leader
// says it is a candidate, and the pool keeper adds it as a non-voter. It
// retries until a leader answers or ctx ends.
func (s *Server) rejoin(ctx context.Context) error {
	var targets []string
	for _, t := range s.cfg.Join {
		if t != s.cfg.APIAddr() {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		return errors.New("--rejoin needs --join with the API address of another master candidate, to reach the leader")
	}
	s.mu.Lock()
	key := s.joinKey
	req := rpc.RejoinRequest{Node: s.cfg.Name, ClusterUUID: s.id.ClusterUUID}
	s.mu.Unlock()
	if key == nil {
		return fmt.Errorf("--rejoin needs the cluster key %s", s.dir.file(keyFile))
	}
	for {
		actx, cancel := context.WithTimeout(ctx, rejoinAttempt)
		err := s.fetchTrust(actx, targets, key)
		var resp rpc.RejoinResponse
		if err == nil {
			resp, err = s.apiClient(targets).Rejoin(actx, key, req)
		}
		cancel()
		if err == nil {
			s.log.Info("removed from the Raft configuration by the leader", "leader", resp.Leader, "was_member", resp.Removed)
			break
		}
		var ae *rpc.APIError
		if errors.As(err, &ae) && ae.Status < 500 {
			return fmt.Errorf("rejoin refused by the cluster: %s", ae.Message)
		}
		s.log.Warn("rejoin: no leader answered yet; retrying", "error", err)
		if sleepCtx(ctx, rejoinRetry); ctx.Err() != nil {
			return fmt.Errorf("rejoin: stopped before a leader answered: %w", err)
		}
	}
	if s.dir.hasRaft() {
		to := s.dir.raftPath() + ".lost-" + time.Now().UTC().Format("20060102T150405")
		if err := os.Rename(s.dir.raftPath(), to); err != nil {
			return fmt.Errorf("moving the lost Raft state aside: %w", err)
		}
		s.log.Info("moved the lost Raft state aside", "to", to)
	}
	s.fsm.Reset()
	return s.setRaftMember("")
}

// setRaftMember records (id) or clears ("") the Raft membership in
// node.json.
func (s *Server) setRaftMember(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id.RaftMember == id {
		return nil
	}
	s.id.RaftMember = id
	return s.dir.writeIdentity(s.id)
}

// recordMember records the membership of Raft server r, unless r is no
// longer this gntd's Raft server (stopRaft began: its state may be being
// archived, with the record cleared).
func (s *Server) recordMember(r *raft.Raft) error {
	s.mu.Lock()
	if s.node == nil || s.node.raft != r || s.id.RaftMember == s.cfg.Name {
		s.mu.Unlock()
		return nil
	}
	s.id.RaftMember = s.cfg.Name
	ident := s.id
	// Written under mu, so that a stopRaft that clears the record after
	// this cannot be overtaken by this write.
	err := s.dir.writeIdentity(ident)
	s.mu.Unlock()
	return err
}

// watchMembership records the membership once the Raft server r holds
// state and its configuration contains this gntd; it ends then, or when
// r shuts down.
func (s *Server) watchMembership(r *raft.Raft) {
	self := raft.ServerID(s.cfg.Name)
	for r.State() != raft.Shutdown {
		if r.LastIndex() > 0 {
			if f := r.GetConfiguration(); f.Error() == nil {
				for _, srv := range f.Configuration().Servers {
					if srv.ID == self {
						if err := s.recordMember(r); err != nil {
							s.log.Error("recording Raft membership in "+identityFile, "error", err)
						}
						return
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Rejoin implements rpc.Backend on the leader: remove a candidate that
// lost its Raft state from the configuration, so that the pool keeper
// adds it back as a non-voter that must catch up before it votes.
func (s *Server) Rejoin(ctx context.Context, req rpc.RejoinRequest) (rpc.RejoinResponse, error) {
	r := s.raft()
	if r == nil || r.State() != raft.Leader {
		return rpc.RejoinResponse{}, rpc.ErrNotLeader
	}
	var e *fsm.Error
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		switch {
		case st.Cluster == nil:
			e = &fsm.Error{Code: fsm.CodeState, Msg: "the cluster is not initialised"}
		case st.Cluster.UUID != req.ClusterUUID:
			e = &fsm.Error{Code: fsm.CodeState, Field: "cluster_uuid",
				Msg: fmt.Sprintf("node %s belongs to cluster %s, not to this cluster (%s)", req.Node, req.ClusterUUID, st.Cluster.UUID)}
		case st.LookupNode(req.Node) == nil:
			e = &fsm.Error{Code: fsm.CodeNoEnt, Field: "node", Msg: fmt.Sprintf("node %s is not in the cluster configuration", req.Node)}
		}
	})
	if e != nil {
		return rpc.RejoinResponse{}, e
	}
	if req.Node == s.cfg.Name {
		return rpc.RejoinResponse{}, &fsm.Error{Code: fsm.CodeState, Field: "node",
			Msg: fmt.Sprintf("node %s is the leader: its Raft state is not lost", req.Node)}
	}
	out := rpc.RejoinResponse{Leader: s.cfg.Name}
	// Promotion needs a fresh stabilization period after the rejoin.
	s.mu.Lock()
	delete(s.peerStatus, req.Node)
	s.mu.Unlock()
	if !inConfiguration(r, req.Node) {
		return out, nil
	}
	s.log.Warn("removing a candidate that lost its Raft state; it rejoins as a non-voter", "node", req.Node)
	if err := r.RemoveServer(raft.ServerID(req.Node), 0, 10*time.Second).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return rpc.RejoinResponse{}, rpc.ErrNotLeader
		}
		return rpc.RejoinResponse{}, fmt.Errorf("removing %s from the Raft configuration: %w", req.Node, err)
	}
	out.Removed = true
	return out, nil
}
