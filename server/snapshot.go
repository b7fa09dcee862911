package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// Saving and restoring the cluster's state (gnt cluster snapshot,
// rpc.Snapshotter).
//
// Save: on the leader, a Barrier makes the local state hold everything
// committed before the request; a frozen view of it (fsm.Freeze, cheap:
// stored objects are never changed in place) is then encoded twice, once
// into SHA-256 alone for the header and once to the client. Nothing is
// built whole in memory, and Raft takes no snapshot for it.
//
// Restore: the leader reads the whole body (checking its length and
// digest), decodes and checks it, keeps what belongs to the running
// cluster (fsm.PrepareRestore), stops its leader services (executor,
// maintd, pool keeper...), and hands the state to hashicorp/raft's
// Restore: Raft writes it as a snapshot at a new index past a hole in the
// log, restores it into the local FSM, and sends it to every follower by
// InstallSnapshot, because their logs cannot reach across the hole; its
// size is bounded by the state, not by a log entry. The leader services
// then start again and establish a new epoch on the restored state, which
// resumes its interrupted jobs as after a failover.
//
// The index the restored state is labelled with must be above every
// follower's applied index, or a follower would decline it as older than
// its own state (fsm.FSM.Restore), and no higher than the index Raft
// gives the snapshot, or entries after it would be skipped. Raft gives it
// max(meta.Index, its last index)+1; meta.Index is set restoreIndexGap
// past the last index seen before the restore, so that it is the larger,
// and the state is labelled meta.Index+1: equal to Raft's index unless
// more than restoreIndexGap entries were appended between the two reads
// (checked afterwards, and logged if it ever happens).

// restoreIndexGap is how far past the log's last index a restored state
// starts.
const restoreIndexGap = 1 << 20

// SaveSnapshot implements rpc.Snapshotter.
func (s *Server) SaveSnapshot(ctx context.Context, start func(rpc.SnapshotHeader) (io.Writer, error)) error {
	n := s.raftNode()
	if n == nil || n.raft.State() != raft.Leader {
		return rpc.ErrNotLeader
	}
	if err := n.raft.Barrier(10 * time.Second).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return rpc.ErrNotLeader
		}
		return fmt.Errorf("snapshot: waiting for the state to hold every committed write: %w", err)
	}
	z := s.fsm.Freeze()
	st := z.State()
	if st.Cluster == nil {
		return &fsm.Error{Code: fsm.CodeState, Msg: "the cluster is not initialised: there is nothing to save"}
	}
	h := rpc.SnapshotHeader{
		Format: rpc.SnapshotFormat, Version: rpc.SnapshotFileVersion,
		ClusterName: st.Cluster.Name, ClusterUUID: st.Cluster.UUID, LogVersion: st.LogVersion,
		Index: z.Index(), Term: s.termOf(n, z.Index()),
		Created: time.Now().UTC().Format(time.RFC3339), Leader: s.cfg.Name, GntVersion: rpc.Version,
	}
	sum := sha256.New()
	size, err := z.WriteTo(sum)
	if err != nil {
		return err
	}
	h.Size, h.SHA256 = size, hex.EncodeToString(sum.Sum(nil))
	w, err := start(h)
	if err != nil {
		return err
	}
	sum.Reset()
	sent, err := z.WriteTo(io.MultiWriter(w, sum))
	if err != nil {
		return err
	}
	if sent != size || hex.EncodeToString(sum.Sum(nil)) != h.SHA256 {
		return fmt.Errorf("snapshot: the state encoded differently the second time (%d bytes, %d before)", sent, size)
	}
	s.log.Info("snapshot saved", "index", h.Index, "term", h.Term, "bytes", size)
	return nil
}

// termOf is the term of the log entry at index: from the log, or from the
// last snapshot when the entry was compacted into it.
func (s *Server) termOf(n *raftNode, index uint64) uint64 {
	var l raft.Log
	if err := n.store.GetLog(index, &l); err == nil {
		return l.Term
	}
	st := n.raft.Stats()
	if st["last_snapshot_index"] == strconv.FormatUint(index, 10) {
		t, _ := strconv.ParseUint(st["last_snapshot_term"], 10, 64)
		return t
	}
	return 0
}

// RestoreSnapshot implements rpc.Snapshotter.
func (s *Server) RestoreSnapshot(ctx context.Context, h rpc.SnapshotHeader, body io.Reader) (rpc.RestoreResponse, error) {
	var out rpc.RestoreResponse
	n := s.raftNode()
	if n == nil || n.raft.State() != raft.Leader {
		return out, rpc.ErrNotLeader
	}
	r := n.raft
	if !s.restoring.CompareAndSwap(false, true) {
		return out, &fsm.Error{Code: fsm.CodeState, Msg: "another snapshot restore is under way"}
	}
	defer s.restoring.Store(false)
	saved, err := rpc.DecodeSnapshotBody(body)
	if err != nil {
		return out, &fsm.Error{Code: fsm.CodeInval, Msg: "nothing was restored: " + err.Error()}
	}
	cf := r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return out, fmt.Errorf("reading the Raft configuration: %w", err)
	}
	var members []string
	for _, srv := range cf.Configuration().Servers {
		members = append(members, string(srv.ID))
	}
	var im *fsm.RestoreImage
	s.fsm.Read(func(st *fsm.State, _ uint64) { im, err = fsm.PrepareRestore(saved, st, members) })
	if err != nil {
		return out, &fsm.Error{Code: fsm.CodeState, Msg: "nothing was restored: " + err.Error()}
	}
	if err := s.pauseLeader(ctx); err != nil {
		return out, err
	}
	defer s.resumeLeader()
	if r.State() != raft.Leader {
		return out, rpc.ErrNotLeader
	}
	metaIndex := r.LastIndex() + restoreIndexGap
	z := im.Frozen(metaIndex + 1)
	size, err := z.WriteTo(io.Discard)
	if err != nil {
		return out, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := z.WriteTo(pw)
		pw.CloseWithError(err)
	}()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: metaIndex, Term: r.CurrentTerm(), Size: size}
	start := time.Now()
	err = r.Restore(meta, pr, time.Minute)
	pr.CloseWithError(errors.New("restore ended"))
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return out, rpc.ErrNotLeader
		}
		return out, fmt.Errorf("restore: %w", err)
	}
	if got := r.Stats()["last_snapshot_index"]; got != strconv.FormatUint(metaIndex+1, 10) {
		s.log.Error("restored state labelled with another index than Raft's snapshot; followers may decline it",
			"label", metaIndex+1, "raft_snapshot_index", got)
	}
	out.Index = metaIndex + 1
	out.Counts = im.State().CountObjects()
	out.Kept = []string{"cluster name and UUID", "cluster CA (pki)", "Raft configuration", "addresses and IPs of the Raft members", "node removals of this cluster"}
	s.log.Warn("cluster state restored from a snapshot", "saved_from", h.ClusterName, "saved_index", h.Index, "saved_at", h.Created,
		"index", out.Index, "bytes", size, "took", time.Since(start))
	return out, nil
}

// pauseLeader stops the leader services (monitorLeadership) and waits
// until they are stopped; resumeLeader lets them start again.
func (s *Server) pauseLeader(ctx context.Context) error {
	s.leaderHold.Add(1)
	s.kickLeadership()
	for s.leaderRunning.Load() {
		if ctx.Err() != nil {
			s.resumeLeader()
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func (s *Server) resumeLeader() {
	s.leaderHold.Add(-1)
	s.kickLeadership()
}

func (s *Server) kickLeadership() {
	select {
	case s.raftEvents <- struct{}{}:
	default:
	}
}
