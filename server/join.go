package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// nodeSpec is how this gntd presents itself.
func (s *Server) nodeSpec() fsm.NodeSpec {
	res := s.cfg.Resources
	if res.CPUs == 0 {
		res.CPUs = runtime.NumCPU()
	}
	if res.MemoryMiB == 0 {
		res.MemoryMiB = memTotalMiB()
	}
	if res.DiskMiB == 0 {
		var st syscall.Statfs_t
		if syscall.Statfs(s.cfg.DataDir, &st) == nil {
			res.DiskMiB = int64(st.Blocks) * st.Bsize >> 20
		}
	}
	return fsm.NodeSpec{Name: s.cfg.Name, PrimaryIP: s.cfg.Bind, Addrs: s.cfg.Addrs(), Resources: res, Version: Version,
		Hypervisor: s.cfg.HypervisorName()}
}

// Init implements rpc.Backend: create the cluster key, bootstrap a
// one-server Raft group and apply ClusterInit with this node.
func (s *Server) Init(ctx context.Context, req rpc.InitRequest) error {
	if e := fsm.ValidateHostname("cluster_name", req.ClusterName); e != nil {
		return e
	}
	uidPool, e := fsm.UIDRangesFromJSON("uid_pool", req.UIDPool)
	if e != nil {
		return e
	}
	s.mu.Lock()
	busy := s.node != nil || s.id.ClusterUUID != "" || s.key != nil
	s.mu.Unlock()
	if busy || s.dir.hasRaft() {
		return &fsm.Error{Code: fsm.CodeState, Msg: "this gntd already belongs to a cluster (or holds a cluster key); refusing to initialise a new one over its data"}
	}
	key, err := s.dir.createKey()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.setKey(key)
	s.mu.Unlock()
	spec := s.nodeSpec()
	spec.UUID = uuid.NewString()
	ca, err := s.initPKI(req.ClusterName, key, spec, time.Now())
	if err != nil {
		return fmt.Errorf("init: the cluster CA: %w", err)
	}
	if err := s.startRaft(true); err != nil {
		return err
	}
	r := s.raft()
	deadline := time.Now().Add(10 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			return errors.New("init: this gntd did not become leader of its new one-server group")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A new cluster's maintd does not do harep's work unless asked
	// (seed 002).
	harep := req.MaintdHarep != nil && *req.MaintdHarep
	cmd := fsm.ClusterInit{
		Now: time.Now().UnixNano(), Name: req.ClusterName, UUID: uuid.NewString(), GroupUUID: uuid.NewString(),
		Node: spec, CandidatePoolSize: req.CandidatePoolSize, MaxVoters: req.MaxVoters, PKI: ca, MaintdHarep: &harep, UIDPool: uidPool,
	}
	resp, _, err := s.Apply(ctx, cmd)
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err
	}
	s.mu.Lock()
	s.id.ClusterUUID, s.id.ClusterName = cmd.UUID, cmd.Name
	id := s.id
	s.mu.Unlock()
	s.log.Info("cluster initialised", "cluster", cmd.Name, "uuid", cmd.UUID)
	return s.dir.writeIdentity(id)
}

// Join implements rpc.Backend on the leader: record what the node reports
// and tell it whether it is a master candidate.
func (s *Server) Join(ctx context.Context, req rpc.JoinRequest) (rpc.JoinResponse, error) {
	var (
		resp    rpc.JoinResponse
		node    *fsm.Node
		changed bool
	)
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if st.Cluster == nil {
			return
		}
		resp.ClusterName, resp.ClusterUUID = st.Cluster.Name, st.Cluster.UUID
		if n := st.LookupNode(req.Node.Name); n != nil {
			c := *n
			node = &c
			changed = n.Addrs != req.Node.Addrs || n.Resources != req.Node.Resources || n.Version != req.Node.Version
		}
		for _, c := range st.Candidates() {
			if c.Addrs.API != "" {
				resp.Candidates = append(resp.Candidates, c.Addrs.API)
			}
			if c.Addrs.Gossip != "" {
				resp.Gossip = append(resp.Gossip, c.Addrs.Gossip)
			}
		}
	})
	if resp.ClusterUUID == "" {
		return resp, &fsm.Error{Code: fsm.CodeState, Msg: "the cluster is not initialised"}
	}
	if req.ClusterUUID != "" && req.ClusterUUID != resp.ClusterUUID {
		return resp, &fsm.Error{Code: fsm.CodeState, Field: "cluster_uuid",
			Msg: fmt.Sprintf("node %s belongs to cluster %s, not to this cluster (%s)", req.Node.Name, req.ClusterUUID, resp.ClusterUUID)}
	}
	if node == nil {
		return resp, &fsm.Error{Code: fsm.CodeNoEnt, Field: "name",
			Msg: fmt.Sprintf("node %s is not in the cluster configuration; add it with 'gnt node add %s --primary-ip %s'", req.Node.Name, req.Node.Name, req.Node.PrimaryIP)}
	}
	if changed {
		r, _, err := s.Apply(ctx, fsm.NodeRegister{Now: time.Now().UnixNano(), Node: req.Node})
		if err != nil {
			return resp, err
		}
		if r.Err != nil {
			return resp, r.Err
		}
	}
	if err := s.signNode(req, &resp); err != nil {
		return resp, err
	}
	s.rotationJoin(ctx, req)
	s.keyRotationJoin(ctx, req)
	resp.Key = keyRenewalOf(s.pkiState())
	resp.MasterCandidate = node.MasterCandidate
	if r := s.raft(); r != nil {
		resp.InRaft = inConfiguration(r, req.Node.Name)
	}
	return resp, nil
}

// joinLoop registers this gntd with the cluster every JoinInterval and
// starts or stops the local Raft server as the candidate flag says.
func (s *Server) joinLoop(ctx context.Context) {
	for {
		s.joinOnce(ctx)
		interval := s.cfg.Timing().JoinInterval
		s.mu.Lock()
		if s.id.ClusterUUID == "" {
			interval = min(interval, time.Second) // not in a cluster yet: retry soon
		}
		s.mu.Unlock()
		sleepCtx(ctx, interval)
		if ctx.Err() != nil {
			return
		}
	}
}

func (s *Server) joinOnce(ctx context.Context) {
	s.mu.Lock()
	key := s.joinKey
	targets := append([]string(nil), s.candidates...)
	clusterUUID := s.id.ClusterUUID
	s.mu.Unlock()
	if key == nil {
		s.mu.Lock()
		if err := s.loadKeys(); err != nil {
			s.log.Warn("reading the cluster key", "error", err)
		}
		key = s.joinKey
		s.mu.Unlock()
		if key == nil {
			return // no cluster key yet: nothing to join with
		}
	}
	if r := s.raft(); r != nil && r.State() == raft.Leader {
		targets = []string{s.cfg.APIAddr()}
	}
	targets = append(targets, s.cfg.Join...)
	if len(targets) == 0 {
		return
	}
	// Asking ourselves only helps when we lead: a candidate that
	// restarted after being removed from the Raft group knows no leader,
	// and would hold each attempt for the API's leader wait before the
	// client tried a real candidate.
	if r := s.raft(); r == nil || r.State() != raft.Leader {
		others := targets[:0:0]
		for _, t := range targets {
			if t != s.cfg.APIAddr() {
				others = append(others, t)
			}
		}
		if len(others) == 0 {
			// Restarted with only our own address to join: the replica
			// knows the other candidates (it may be stale, but one of
			// them leads or knows who does).
			s.fsm.Read(func(st *fsm.State, _ uint64) {
				for _, n := range st.Candidates() {
					if n.Name != s.cfg.Name && n.Addrs.API != "" {
						others = append(others, n.Addrs.API)
					}
				}
			})
		}
		if len(others) > 0 {
			targets = others
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	targets = dedupe(targets)
	if err := s.fetchTrust(cctx, targets, key); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("learning the cluster CA", "error", err)
		}
		return
	}
	req := rpc.JoinRequest{Node: s.nodeSpec(), ClusterUUID: clusterUUID}
	req.TrustFP, req.CertIssuerFP = certReportOf(s.tls.store)
	req.KeyIDs = s.keyIDs()
	// A node removed and added again holds a certificate the cluster
	// refuses: its join goes without it (the signature authenticates the
	// join) and asks for a new one.
	refused := s.tls.refused.Load()
	client := s.apiClient(targets)
	if refused {
		req.CertIssuerFP = ""
		client = rpc.NewClientWith(targets, rpc.ClientOptions{TLS: s.tls.store.ClientTLSNoCert(), LocalAddr: s.localTCPAddr()})
	}
	var kp pki.KeyPair
	if refused || s.needsCertificate(time.Now()) {
		var err error
		if kp, err = pki.NewKeyPair(s.cfg.Name); err != nil {
			s.log.Error("making a key for the node certificate", "error", err)
			return
		}
		req.CSR = string(kp.CSR)
	}
	resp, err := client.Join(cctx, key, req)
	if _, other := s.clusterKeys(); err != nil && other != nil && joinSignatureRefused(err) {
		// Back after a renewal of cluster.key ended without this gntd:
		// the new key it holds is the only one accepted now.
		req.KeyIDs = []string{keyID(other), keyID(key)}
		resp, err = client.Join(cctx, rpc.DeriveKey(other, rpc.JoinKeyLabel), req)
	}
	if err != nil {
		if certRefused(err) && !s.tls.refused.Swap(true) {
			s.log.Warn("the cluster refuses this node's certificate (was the node removed and added again?); asking for a new one", "error", err)
		}
		if ctx.Err() == nil {
			s.log.Debug("join", "error", err)
			var ae *rpc.APIError
			if errors.As(err, &ae) && ae.ErrorCode != rpc.CodeNoLeader {
				s.log.Warn("join refused", "error", ae.Message)
			}
		}
		return
	}
	if resp.CACerts != "" {
		if err := s.setTrust(resp.CACerts); err != nil {
			s.log.Error("the CA certificates of the join answer", "error", err)
			return
		}
	}
	if req.CSR != "" && resp.Cert != "" {
		if err := s.setIdentity([]byte(resp.Cert), kp.KeyPEM); err != nil {
			s.log.Error("the node certificate of the join answer", "error", err)
			return
		}
		s.tls.refused.Store(false)
	}
	s.syncCAKeyFile()
	s.followKeyRenewal(resp.Key)
	s.setGossipSeeds(resp.Gossip)
	s.mu.Lock()
	s.candidates = resp.Candidates
	first := s.id.ClusterUUID == ""
	if first {
		s.id.ClusterUUID, s.id.ClusterName = resp.ClusterUUID, resp.ClusterName
	}
	id := s.id
	s.mu.Unlock()
	if first {
		if err := s.dir.writeIdentity(id); err != nil {
			s.log.Error("writing identity", "error", err)
		}
		s.log.Info("joined cluster", "cluster", resp.ClusterName, "candidate", resp.MasterCandidate)
	}
	r := s.raft()
	switch {
	case resp.MasterCandidate && r == nil:
		s.log.Info("this node is a master candidate; starting raft")
		if err := s.startRaft(false); err != nil {
			s.log.Error("starting raft", "error", err)
		}
	case !resp.MasterCandidate && !resp.InRaft && r != nil && r.State() != raft.Leader:
		s.log.Info("this node is no longer a master candidate; stopping raft and archiving its state")
		s.stopRaft(true)
	}
}

// inConfiguration reports whether the named server is in r's latest Raft
// configuration (true when that cannot be read, to stay on the safe side).
func inConfiguration(r *raft.Raft, name string) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return true
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(name) {
			return true
		}
	}
	return false
}

// memTotalMiB reads MemTotal from /proc/meminfo (0 when unknown).
func memTotalMiB() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	return 0
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range in {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
