package rpc

import (
	"context"
	"errors"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// ErrNotLeader is returned by Backend.Apply and Backend.VerifyLeader when
// this gntd is not (or no longer) the leader; the API then forwards.
var ErrNotLeader = errors.New("not the leader")

// ErrIndeterminate is returned by Backend.Apply when leadership was lost
// while the command was in flight: it may or may not have been applied.
var ErrIndeterminate = errors.New("leadership lost while committing; the outcome is unknown")

// Backend is what the API server needs from the gntd it runs in.
type Backend interface {
	// FSM is the local replica of the state, for reads.
	FSM() *fsm.FSM
	// Apply replicates a command through Raft and returns its response and
	// the index it was applied at. Only the leader can apply; others get
	// ErrNotLeader.
	Apply(ctx context.Context, cmd fsm.Command) (fsm.Response, uint64, error)
	// Leader returns the API address of the leader this gntd knows of, and
	// whether this gntd is the leader and ready (its leadership established).
	Leader() (apiAddr string, self bool)
	// LastContact is the time since this gntd last heard from the leader
	// (0 on the leader).
	LastContact() time.Duration
	// VerifyLeader confirms with a quorum that this gntd is still the
	// leader and waits until the local state has applied everything
	// committed before the call.
	VerifyLeader(ctx context.Context) error
	// Peers lists the Raft configuration with each server's state.
	Peers(ctx context.Context) ([]Peer, error)
	// TransferLeadership hands leadership to the named node (any voter
	// when target is empty) and waits until a new leader is known.
	TransferLeadership(ctx context.Context, target string) (newLeader string, err error)
	// Status is this gntd's own view, answered without a leader.
	Status() Status
	// Init creates a new cluster with this gntd as its first node.
	Init(ctx context.Context, req InitRequest) error
	// Join handles a signed join/registration request from a node's gntd;
	// it runs on the leader.
	Join(ctx context.Context, req JoinRequest) (JoinResponse, error)
	// Rejoin removes a master candidate that lost its Raft state from
	// the Raft configuration (rejoin.go); it runs on the leader.
	Rejoin(ctx context.Context, req RejoinRequest) (RejoinResponse, error)
	// JoinKey is the key join requests are signed with (derived from the
	// cluster key), or nil before the cluster exists.
	JoinKey() []byte
	// Now is the proposer's clock for commands.
	Now() time.Time
	// NewUUID draws a UUID for commands that create objects.
	NewUUID() string
	// Capacity answers how many instances of a specification fit, and
	// where (the answer of the allocators of the request's list on this
	// gntd's replica).
	Capacity(ctx context.Context, req CapacityRequest) (any, error)
	// Balance plans the balancing moves of the cluster on the leader and,
	// unless asked for a dry run, submits them (POST /2/gnt/balance).
	// Others return ErrNotLeader.
	Balance(ctx context.Context, req BalanceRequest) (any, error)
	// Repair is the leader's maintd view: the plan of the next round with
	// its reasons, the incidents and the round state. Others return
	// ErrNotLeader.
	Repair(ctx context.Context) (any, error)
}

// CapacityRequest is GET /2/gnt/capacity: an instance specification.
type CapacityRequest struct {
	DiskTemplate string  `json:"disk_template"`
	MemoryMiB    int64   `json:"memory"`
	Disks        []int64 `json:"disks"`
	VCPUs        int     `json:"vcpus"`
	Group        string  `json:"group,omitempty"`
	// IAllocator is the allocator list to count with ("" is the
	// cluster's default_iallocator).
	IAllocator string `json:"iallocator,omitempty"`
}

// Peer is one server of the Raft configuration.
type Peer struct {
	ID       string `json:"id"` // node name
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"` // voter, nonvoter
	Leader   bool   `json:"leader"`
	// Known reports whether the leader has a recent status from the peer;
	// the fields below are only meaningful then.
	Known        bool    `json:"known"`
	AppliedIndex uint64  `json:"applied_index"`
	LastContact  float64 `json:"last_contact_seconds"`
}

// Status is a gntd's own view of itself and of the Raft group.
type Status struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Build is the gntd's version, commit and build date.
	Build        string  `json:"build,omitempty"`
	Candidate    bool    `json:"candidate"` // runs a Raft server
	RaftState    string  `json:"raft_state"`
	Term         uint64  `json:"term"`
	Leader       string  `json:"leader"` // leader's node name, if known
	LeaderAPI    string  `json:"leader_api"`
	AppliedIndex uint64  `json:"applied_index"`
	LastIndex    uint64  `json:"last_index"`
	CommitIndex  uint64  `json:"commit_index"`
	LastContact  float64 `json:"last_contact_seconds"`
	ClusterUUID  string  `json:"cluster_uuid,omitempty"`
	Established  bool    `json:"leadership_established"`
	FSMHash      string  `json:"fsm_hash,omitempty"`
	// Gossip is this gntd's view of the gossip members (gossip.go); absent
	// while its gossip member is not running.
	Gossip *GossipStatus `json:"gossip,omitempty"`
	// Maintd is the address maintd's HTTP API listens on, with the epoch
	// of the leadership it serves; absent where maintd does not run.
	Maintd *MaintdStatus `json:"maintd,omitempty"`
	// Incarnation is a random id the gntd drew when it started: another
	// one means it restarted (the poison-job guard tells a leader that
	// stepped down from one that died by it).
	Incarnation string `json:"incarnation,omitempty"`
}

// MaintdStatus says where this gntd's maintd listens.
type MaintdStatus struct {
	Addr  string `json:"addr"`
	Epoch uint64 `json:"epoch"`
}

// InitRequest is the body of POST /2/gnt/init.
type InitRequest struct {
	ClusterName       string `json:"cluster_name"`
	CandidatePoolSize int    `json:"candidate_pool_size,omitempty"`
	MaxVoters         int    `json:"max_raft_voters,omitempty"`
	// MaintdHarep says whether maintd does harep's work (default off).
	MaintdHarep *bool `json:"maintd_harep,omitempty"`
	// UIDPool is the cluster's user-id pool, Ganeti's lists of [lo, hi]
	// pairs (absent: none).
	UIDPool [][]int64 `json:"uid_pool,omitempty"`
}

// JoinRequest is what a node's gntd sends, signed with the join key, to
// register itself (addresses, resources, version).
type JoinRequest struct {
	Node fsm.NodeSpec `json:"node"`
	// ClusterUUID is the cluster the node believes it belongs to (empty on
	// the first join).
	ClusterUUID string `json:"cluster_uuid,omitempty"`
	// CSR, when set, asks for a node certificate for the key it holds
	// (PEM certificate request): on the first join and when the
	// certificate is due for renewal or was issued by a CA no longer the
	// newest. The leader ignores its names and certifies the node's.
	CSR string `json:"csr,omitempty"`
	// TrustFP is the fingerprint (pki.Fingerprint) of the newest CA the
	// node trusts, and CertIssuerFP that of the CA that issued its node
	// certificate ("" without one): the leader moves a renewal of the CA
	// (renew-crypto) on when every node reports the new one.
	TrustFP      string `json:"trust_fp,omitempty"`
	CertIssuerFP string `json:"cert_issuer_fp,omitempty"`
	// KeyIDs identify the cluster keys the node holds, the one it signs
	// with first (two while cluster.key is renewed; at most
	// MaxJoinKeyIDs): the leader moves a renewal of the key on when
	// every node reports the new one.
	KeyIDs []string `json:"key_ids,omitempty"`
}

// JoinResponse tells a node what the cluster expects of it.
type JoinResponse struct {
	ClusterName string `json:"cluster_name"`
	ClusterUUID string `json:"cluster_uuid"`
	// MasterCandidate tells the node to run a Raft server.
	MasterCandidate bool `json:"master_candidate"`
	// InRaft says whether the node is in the leader's Raft configuration;
	// a node that is neither a candidate nor in it stops its Raft server.
	InRaft bool `json:"in_raft"`
	// Candidates are the API addresses of all master candidates.
	Candidates []string `json:"candidates"`
	// Gossip are the candidates' gossip addresses, which the node joins.
	Gossip []string `json:"gossip,omitempty"`
	// CACerts are the CA certificates the cluster trusts (PEM, newest
	// first), and Cert the node certificate signed for the request's CSR.
	CACerts string `json:"ca_certs,omitempty"`
	Cert    string `json:"cert,omitempty"`
	// Key is the state of a renewal of cluster.key, nil when the key was
	// never renewed.
	Key *KeyRenewal `json:"key,omitempty"`
}

// CAResponse is GET /2/gnt/ca: the cluster CA certificates, answered with
// a signature by the join key (X-Gnt-Timestamp, X-Gnt-Signature over the
// body) so that a gntd joining for the first time, which has the cluster
// key but no CA yet, can tell the cluster's CA from an impostor's.
type CAResponse struct {
	CACerts string `json:"ca_certs"`
}
