package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/gnt-cluster/gnt/fsm"
)

// handleInit creates the cluster: only on a gntd whose state is not
// initialised, and only when asked from this host.
func (s *Server) handleInit(w http.ResponseWriter, r *http.Request) {
	if !s.isLocal(remoteIP(r)) {
		writeError(w, &APIError{Status: http.StatusUnauthorized, ErrorCode: CodeUnauthorized,
			Message: "cluster init is only accepted from a local address"})
		return
	}
	body, aerr := s.readBody(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req InitRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := validateInit(req); aerr != nil {
		writeError(w, aerr)
		return
	}
	f := s.b.FSM()
	if f == nil {
		writeError(w, &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeNotCandidate,
			Message: "this gntd holds no state and cannot create a cluster"})
		return
	}
	if name := clusterName(f); name != "" {
		writeError(w, FromFSM(&fsm.Error{Code: fsm.CodeState, Msg: "cluster " + name + " is already initialised"}))
		return
	}
	if err := s.b.Init(r.Context(), req); err != nil {
		writeError(w, asAPIError(err))
		return
	}
	out := InitResponse{ClusterName: req.ClusterName, ClusterUUID: s.b.Status().ClusterUUID}
	f.Read(func(st *fsm.State, idx uint64) {
		setIndex(w, idx)
		if st.Cluster != nil {
			out.ClusterName, out.ClusterUUID = st.Cluster.Name, st.Cluster.UUID
		}
	})
	writeJSON(w, out)
}

func clusterName(f *fsm.FSM) string {
	var name string
	f.Read(func(st *fsm.State, _ uint64) {
		if st.Cluster != nil {
			name = st.Cluster.Name
		}
	})
	return name
}

func validateInit(req InitRequest) *APIError {
	if e := fsm.ValidateHostname("cluster_name", req.ClusterName); e != nil {
		return FromFSM(e)
	}
	if req.CandidatePoolSize < 0 || req.CandidatePoolSize > fsm.MaxCandidatePoolSize {
		return badRequest("candidate_pool_size", "candidate_pool_size must be 1 to %d, got %d", fsm.MaxCandidatePoolSize, req.CandidatePoolSize)
	}
	if req.MaxVoters < 0 || req.MaxVoters > fsm.MaxRaftVoters || (req.MaxVoters != 0 && req.MaxVoters%2 == 0) {
		return badRequest("max_raft_voters", "max_raft_voters must be 1, 3, 5, 7 or 9, got %d", req.MaxVoters)
	}
	if _, e := fsm.UIDRangesFromJSON("uid_pool", req.UIDPool); e != nil {
		return FromFSM(e)
	}
	return nil
}

// handleJoin registers a node's gntd. The signature is checked before
// anything else reads the body; a follower checks it and forwards, and the
// leader checks it again.
func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	req, body, ok := readSigned(s, w, r, "a join request", validateJoin)
	if !ok {
		return
	}
	s.onLeader(w, r, body, func() error {
		resp, err := s.b.Join(r.Context(), req)
		if errors.Is(err, ErrNotLeader) {
			return ErrNotLeader
		}
		if err != nil {
			writeError(w, asAPIError(err))
			return nil
		}
		if resp.Candidates == nil {
			resp.Candidates = []string{}
		}
		writeJSON(w, resp)
		return nil
	})
}

// handleCA answers the cluster CA certificates, signed with the join key.
func (s *Server) handleCA(w http.ResponseWriter, r *http.Request) {
	key := s.b.JoinKey()
	var certs string
	s.b.FSM().Read(func(st *fsm.State, _ uint64) {
		if st.PKI != nil {
			certs = st.PKI.CACerts
		}
	})
	if key == nil || certs == "" {
		writeError(w, notInitialised())
		return
	}
	body, _ := json.Marshal(CAResponse{CACerts: certs})
	ts := s.b.Now().Unix()
	w.Header().Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	w.Header().Set(HeaderSignature, Sign(key, ts, body))
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// readSigned reads a request signed with the join key (joins and
// rejoins): the signature is checked before anything else reads the body,
// then the body is decoded strictly into T and validated. On failure it
// has answered, and ok is false.
func readSigned[T any](s *Server, w http.ResponseWriter, r *http.Request, what string, validate func(T) *APIError) (req T, body []byte, ok bool) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		writeError(w, aerr)
		return req, nil, false
	}
	keys := s.joinKeys()
	if len(keys) == 0 {
		writeError(w, notInitialised())
		return req, nil, false
	}
	if err := VerifyAny(keys, r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature), body, s.b.Now()); err != nil {
		writeError(w, &APIError{Status: http.StatusUnauthorized, ErrorCode: CodeUnauthorized, Message: err.Error()})
		return req, nil, false
	}
	if len(body) == 0 {
		writeError(w, badRequest("node", "the body must be %s", what))
		return req, nil, false
	}
	if aerr := decodeBody(body, &req); aerr != nil {
		writeError(w, aerr)
		return req, nil, false
	}
	if aerr := validate(req); aerr != nil {
		writeError(w, aerr)
		return req, nil, false
	}
	return req, body, true
}

func validateJoin(req JoinRequest) *APIError {
	if len(req.CSR) > 16<<10 {
		return badRequest("csr", "the certificate request has %d bytes; the limit is %d", len(req.CSR), 16<<10)
	}
	if e := req.Node.Validate("node"); e != nil {
		return FromFSM(e)
	}
	if e := fsm.ValidateName("cluster_uuid", req.ClusterUUID, fsm.MaxHostnameLen); e != nil {
		return FromFSM(e)
	}
	for field, fp := range map[string]string{"trust_fp": req.TrustFP, "cert_issuer_fp": req.CertIssuerFP} {
		if aerr := validateFingerprint(field, fp); aerr != nil {
			return aerr
		}
	}
	if aerr := validateKeyIDs(req.KeyIDs); aerr != nil {
		return aerr
	}
	for field, ip := range map[string]string{"node.primary_ip": req.Node.PrimaryIP, "node.secondary_ip": req.Node.SecondaryIP} {
		if ip != "" && net.ParseIP(ip) == nil {
			return badRequest(field, "%s %q is not a valid IP address", field, ip)
		}
	}
	return nil
}

// handleMasterFailover hands the Raft leadership (Ganeti's master role)
// to the target node, or to any voter; it runs on the leader.
func (s *Server) handleMasterFailover(w http.ResponseWriter, r *http.Request) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req MasterFailoverRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		writeError(w, aerr)
		return
	}
	if req.Target != "" {
		if e := fsm.ValidateHostname("target", req.Target); e != nil {
			writeError(w, FromFSM(e))
			return
		}
	}
	answerOnLeader(s, w, r, body, func(ctx context.Context) (MasterFailoverResponse, error) {
		if f := s.b.FSM(); f != nil && req.Target != "" {
			var aerr *APIError
			f.Read(func(st *fsm.State, _ uint64) {
				if st.LookupNode(req.Target) == nil {
					aerr = unknownEntity("target", "node %q does not exist", req.Target)
				}
			})
			if aerr != nil {
				return MasterFailoverResponse{}, aerr
			}
		}
		leader, err := s.b.TransferLeadership(ctx, req.Target)
		return MasterFailoverResponse{Master: leader}, err
	})
}
