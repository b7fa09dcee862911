// Package rpctest is an in-memory rpc.Backend over a real fsm.FSM, for
// tests of the API server and of its clients. Commands are applied
// directly to the state machine with an incrementing index; leadership,
// clock, peers and failures are set by the test.
package rpctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// ClusterKey is the cluster key of every fake cluster; its join key is
// rpc.DeriveKey(ClusterKey, rpc.JoinKeyLabel).
var ClusterKey = []byte("rpctest cluster key")

// Backend is a fake rpc.Backend. It is safe for concurrent use.
type Backend struct {
	f      *fsm.FSM
	spec   fsm.NodeSpec
	origin *Backend // the backend a replica shares its state with

	mu          sync.Mutex
	index       uint64
	leaderAddr  string
	leaderName  string
	self        bool
	lastContact time.Duration
	now         func() time.Time
	uuids       int
	key         []byte
	peers       []rpc.Peer
	peersErr    error
	applyHook   func(fsm.Command) error
	verifyErr   error
	transferTo  string
	transferErr error
	verifyCalls int
	applyCalls  int
	joins       []rpc.JoinRequest
	transfers   []string
	runtime     map[string]rpc.NodeRuntime
	seen        map[string]string // rpc.Runtime.Seen (SetRuntimeSeen)
	onPoll      func()            // RuntimeAfterPoll's poll (SetOnPoll)
}

var _ rpc.Backend = (*Backend)(nil)

// New returns the fake of a gntd that has no cluster yet: its state is
// empty and it knows no leader. node is its own node name; its primary IP
// is 192.0.2.1.
func New(node string) *Backend {
	return &Backend{
		f:    fsm.New(),
		spec: fsm.NodeSpec{Name: node, PrimaryIP: "192.0.2.1", Version: "test"},
		now:  time.Now,
	}
}

// NewCluster returns the fake of the leader of a new cluster
// "cluster.example.com" whose first node is node1 (192.0.2.1).
func NewCluster() *Backend {
	b := New("node1")
	if err := b.Init(context.Background(), rpc.InitRequest{ClusterName: "cluster.example.com"}); err != nil {
		panic(fmt.Sprintf("rpctest: init: %v", err))
	}
	return b
}

// NewReplica returns the fake of another candidate of origin's cluster:
// it shares origin's state (as a perfectly replicated follower would) and
// join key, and knows no leader until SetLeader. Commands given to its
// ApplyCommand go to origin.
func NewReplica(origin *Backend, node string) *Backend {
	b := New(node)
	b.f, b.origin = origin.f, origin
	b.spec.PrimaryIP = "192.0.2.99"
	b.key = origin.JoinKey()
	return b
}

// FSM implements rpc.Backend.
func (b *Backend) FSM() *fsm.FSM { return b.f }

// ApplyCommand applies a command as the log would, whoever leads, and
// returns the state machine's response and the index it was applied at.
func (b *Backend) ApplyCommand(cmd fsm.Command) (fsm.Response, uint64, error) {
	if b.origin != nil {
		return b.origin.ApplyCommand(cmd)
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Response{}, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.index++
	out := b.f.Apply(b.index, data)
	resp, ok := out.(fsm.Response)
	if !ok {
		return fsm.Response{}, b.index, fmt.Errorf("rpctest: unexpected apply result %T: %v", out, out)
	}
	return resp, b.index, nil
}

// Apply implements rpc.Backend: only the leader applies; the apply hook,
// when set, may refuse first.
func (b *Backend) Apply(ctx context.Context, cmd fsm.Command) (fsm.Response, uint64, error) {
	b.mu.Lock()
	b.applyCalls++
	hook, self := b.applyHook, b.self
	b.mu.Unlock()
	if hook != nil {
		if err := hook(cmd); err != nil {
			return fsm.Response{}, 0, err
		}
	}
	if !self {
		return fsm.Response{}, 0, rpc.ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return fsm.Response{}, 0, err
	}
	return b.ApplyCommand(cmd)
}

// Leader implements rpc.Backend.
func (b *Backend) Leader() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leaderAddr, b.self
}

// SetLeader sets the leader's API address and whether this gntd is the
// leader; name is the leader's node name (for Status and the cluster
// info).
func (b *Backend) SetLeader(addr, name string, self bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaderAddr, b.leaderName, b.self = addr, name, self
}

// LastContact implements rpc.Backend.
func (b *Backend) LastContact() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastContact
}

// SetLastContact sets what LastContact answers.
func (b *Backend) SetLastContact(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastContact = d
}

// VerifyLeader implements rpc.Backend.
func (b *Backend) VerifyLeader(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.verifyCalls++
	if !b.self {
		return rpc.ErrNotLeader
	}
	return b.verifyErr
}

// SetVerifyError makes VerifyLeader fail on the leader.
func (b *Backend) SetVerifyError(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.verifyErr = err
}

// VerifyCalls counts VerifyLeader calls.
func (b *Backend) VerifyCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.verifyCalls
}

// ApplyCalls counts Apply calls (not ApplyCommand).
func (b *Backend) ApplyCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applyCalls
}

// SetApplyHook installs a function Apply calls first; when it returns an
// error Apply returns it without applying.
func (b *Backend) SetApplyHook(fn func(fsm.Command) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.applyHook = fn
}

// Peers implements rpc.Backend: the peers set with SetPeers, or this gntd
// alone.
func (b *Backend) Peers(ctx context.Context) ([]rpc.Peer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peersErr != nil {
		return nil, b.peersErr
	}
	if b.peers != nil {
		return append([]rpc.Peer(nil), b.peers...), nil
	}
	return []rpc.Peer{{ID: b.spec.Name, Address: b.spec.PrimaryIP + ":1817", Suffrage: "voter",
		Leader: b.self, Known: true, AppliedIndex: b.index}}, nil
}

// SetPeers sets what Peers answers.
func (b *Backend) SetPeers(p []rpc.Peer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peers = p
}

// SetPeersError makes Peers fail (rpc.ErrNotLeader: only the leader
// knows).
func (b *Backend) SetPeersError(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peersErr = err
}

// TransferLeadership implements rpc.Backend: on the leader it records the
// target and answers the result set with SetTransferResult, or the
// target, or this node.
func (b *Backend) TransferLeadership(ctx context.Context, target string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.self {
		return "", rpc.ErrNotLeader
	}
	b.transfers = append(b.transfers, target)
	switch {
	case b.transferErr != nil:
		return "", b.transferErr
	case b.transferTo != "":
		return b.transferTo, nil
	case target != "":
		return target, nil
	}
	return b.spec.Name, nil
}

// SetTransferResult sets what TransferLeadership answers.
func (b *Backend) SetTransferResult(leader string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.transferTo, b.transferErr = leader, err
}

// Transfers lists the targets TransferLeadership was called with.
func (b *Backend) Transfers() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.transfers...)
}

// Status implements rpc.Backend.
func (b *Backend) Status() rpc.Status {
	b.mu.Lock()
	st := rpc.Status{
		Name: b.spec.Name, Version: b.spec.Version, Candidate: true, RaftState: "follower",
		Leader: b.leaderName, LeaderAPI: b.leaderAddr, LastIndex: b.index, CommitIndex: b.index,
		LastContact: b.lastContact.Seconds(), Established: b.self,
	}
	if b.self {
		st.RaftState, st.Leader, st.LastContact = "leader", b.spec.Name, 0
	}
	b.mu.Unlock()
	b.f.Read(func(s *fsm.State, idx uint64) {
		st.AppliedIndex = idx
		if s.Cluster != nil {
			st.ClusterUUID = s.Cluster.UUID
		}
	})
	return st
}

// Init implements rpc.Backend: it applies the cluster-init command and
// makes this gntd the established leader.
func (b *Backend) Init(ctx context.Context, req rpc.InitRequest) error {
	spec := b.spec
	spec.UUID = b.NewUUID()
	resp, _, err := b.ApplyCommand(fsm.ClusterInit{
		Now: b.Now().UnixNano(), Name: req.ClusterName, UUID: b.NewUUID(), GroupUUID: b.NewUUID(),
		Node: spec, CandidatePoolSize: req.CandidatePoolSize, MaxVoters: req.MaxVoters,
	})
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err
	}
	b.mu.Lock()
	b.key = rpc.DeriveKey(ClusterKey, rpc.JoinKeyLabel)
	b.self, b.leaderName = true, spec.Name
	b.mu.Unlock()
	resp, _, err = b.ApplyCommand(fsm.LeaderEstablish{Now: b.Now().UnixNano(), Node: spec.Name})
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err
	}
	return nil
}

// Join implements rpc.Backend: on the leader it records the request and
// applies a node-register command.
func (b *Backend) Join(ctx context.Context, req rpc.JoinRequest) (rpc.JoinResponse, error) {
	b.mu.Lock()
	self := b.self
	if self {
		b.joins = append(b.joins, req)
	}
	b.mu.Unlock()
	if !self {
		return rpc.JoinResponse{}, rpc.ErrNotLeader
	}
	resp, _, err := b.ApplyCommand(fsm.NodeRegister{Now: b.Now().UnixNano(), Node: req.Node})
	if err != nil {
		return rpc.JoinResponse{}, err
	}
	if resp.Err != nil {
		return rpc.JoinResponse{}, resp.Err
	}
	var out rpc.JoinResponse
	b.f.Read(func(s *fsm.State, _ uint64) {
		out.ClusterName, out.ClusterUUID = s.Cluster.Name, s.Cluster.UUID
		if n := s.LookupNode(req.Node.Name); n != nil {
			out.MasterCandidate = n.MasterCandidate
		}
		for _, n := range s.Candidates() {
			if n.Addrs.API != "" {
				out.Candidates = append(out.Candidates, n.Addrs.API)
			}
		}
	})
	return out, nil
}

// Joins lists the join requests the leader handled.
func (b *Backend) Joins() []rpc.JoinRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]rpc.JoinRequest(nil), b.joins...)
}

// JoinKey implements rpc.Backend.
func (b *Backend) JoinKey() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.key
}

// Now implements rpc.Backend.
func (b *Backend) Now() time.Time {
	b.mu.Lock()
	now := b.now
	b.mu.Unlock()
	return now()
}

// SetNow replaces the clock.
func (b *Backend) SetNow(now func() time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = now
}

// Balance implements rpc.Backend: the test backend has no balancer.
func (b *Backend) Balance(context.Context, rpc.BalanceRequest) (any, error) {
	return nil, &fsm.Error{Code: fsm.CodeState, Msg: "the test backend has no balancer"}
}

// Capacity implements rpc.Backend: the test backend has no allocator.
func (b *Backend) Capacity(context.Context, rpc.CapacityRequest) (any, error) {
	return nil, errors.New("the test backend has no allocator")
}

// Repair implements rpc.Backend: the test backend runs no maintd, so the
// leader answers with the maintenance state of its replica only.
func (b *Backend) Repair(context.Context) (any, error) {
	if _, self := b.Leader(); !self {
		return nil, rpc.ErrNotLeader
	}
	var m *fsm.Maintenance
	b.FSM().Read(func(st *fsm.State, _ uint64) { m = st.Maint() })
	return map[string]any{"maintenance": m}, nil
}

// NewUUID implements rpc.Backend with deterministic UUIDs.
func (b *Backend) NewUUID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.uuids++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", b.uuids)
}

// Epoch returns the executor epoch recorded in the state (for JobUpdate
// commands).
func (b *Backend) Epoch() uint64 {
	var e uint64
	b.f.Read(func(s *fsm.State, _ uint64) { e = s.Epoch })
	return e
}

// UpdateJob applies a job update of the current epoch.
func (b *Backend) UpdateJob(id int64, op int, action, status string, result any, log ...string) error {
	u := fsm.JobUpdate{Now: b.Now().UnixNano(), Epoch: b.Epoch(), JobID: id, OpIndex: op, Action: action, Status: status, Log: log}
	if result != nil {
		raw, err := json.Marshal(result)
		if err != nil {
			return err
		}
		u.Result = raw
	}
	resp, _, err := b.ApplyCommand(u)
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err
	}
	return nil
}

// AddInstance puts an instance into the state (no opcode creates one
// yet) by restoring a snapshot of the state with the instance added; the
// index advances by one.
func (b *Backend) AddInstance(inst fsm.Instance) error { return b.AddInstances(inst) }

// AddInstances is AddInstance of many instances in one restore.
func (b *Backend) AddInstances(insts ...fsm.Instance) error {
	if b.origin != nil {
		return b.origin.AddInstances(insts...)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	snap, err := b.f.Snapshot()
	if err != nil {
		return err
	}
	nl := bytes.IndexByte(snap, '\n')
	if nl < 0 {
		return errors.New("rpctest: snapshot without header")
	}
	var hdr map[string]any
	if err := json.Unmarshal(snap[:nl], &hdr); err != nil {
		return err
	}
	b.index++
	hdr["index"] = b.index
	head, _ := json.Marshal(hdr)
	var buf bytes.Buffer
	buf.Write(head)
	buf.Write(snap[nl:])
	for _, inst := range insts {
		v, err := json.Marshal(inst)
		if err != nil {
			return err
		}
		rec, _ := json.Marshal(map[string]any{"t": "instance", "v": json.RawMessage(v)})
		buf.Write(rec)
		buf.WriteByte('\n')
	}
	return b.f.Restore(&buf)
}

// Runtime implements rpc.RuntimeSource: the node entries SetRuntime
// gave, judged at the backend's clock.
func (b *Backend) Runtime() rpc.Runtime {
	b.mu.Lock()
	defer b.mu.Unlock()
	nodes := make(map[string]rpc.NodeRuntime, len(b.runtime))
	for k, v := range b.runtime {
		nodes[k] = v
	}
	return rpc.Runtime{Nodes: nodes, Seen: b.seen, Now: b.now()}
}

// SetRuntimeSeen sets the view's instance placements (rpc.Runtime.Seen;
// nil: not kept).
func (b *Backend) SetRuntimeSeen(seen map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = seen
}

// SetOnPoll sets what RuntimeAfterPoll's poll does (a test changes the
// view there with SetRuntime and SetRuntimeSeen).
func (b *Backend) SetOnPoll(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onPoll = fn
}

// RuntimeAfterPoll implements rpc.RuntimeWaiter: it runs the SetOnPoll
// function, then answers the view.
func (b *Backend) RuntimeAfterPoll(context.Context, time.Duration) rpc.Runtime {
	b.mu.Lock()
	fn := b.onPoll
	b.mu.Unlock()
	if fn != nil {
		fn()
	}
	return b.Runtime()
}

// SetRuntime sets the runtime view entry of a node (by UUID).
func (b *Backend) SetRuntime(node string, nr rpc.NodeRuntime) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.runtime == nil {
		b.runtime = map[string]rpc.NodeRuntime{}
	}
	b.runtime[node] = nr
}

// Rejoin implements rpc.Backend: on the leader it checks the cluster and
// the node as the real one does and takes the node out of the peers set
// with SetPeers.
func (b *Backend) Rejoin(ctx context.Context, req rpc.RejoinRequest) (rpc.RejoinResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.self {
		return rpc.RejoinResponse{}, rpc.ErrNotLeader
	}
	var e *fsm.Error
	b.f.Read(func(s *fsm.State, _ uint64) {
		switch {
		case s.Cluster == nil:
			e = &fsm.Error{Code: fsm.CodeState, Msg: "the cluster is not initialised"}
		case s.Cluster.UUID != req.ClusterUUID:
			e = &fsm.Error{Code: fsm.CodeState, Field: "cluster_uuid", Msg: "node belongs to another cluster"}
		case s.LookupNode(req.Node) == nil:
			e = &fsm.Error{Code: fsm.CodeNoEnt, Field: "node", Msg: "no node " + req.Node}
		}
	})
	if e != nil {
		return rpc.RejoinResponse{}, e
	}
	out := rpc.RejoinResponse{Leader: b.spec.Name}
	kept := b.peers[:0:0]
	for _, p := range b.peers {
		if p.ID == req.Node {
			out.Removed = true
			continue
		}
		kept = append(kept, p)
	}
	if b.peers != nil {
		b.peers = kept
	}
	return out, nil
}
