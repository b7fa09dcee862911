package rpc

import (
	"context"
	"errors"
	"net/http"

	"github.com/gnt-cluster/gnt/fsm"
)

// RejoinRequest is the body of POST /2/gnt/rejoin, signed with the join
// key as joins are: a master candidate that lost its Raft state (its log
// or its stable store, so its votes and what it acknowledged) asks the
// leader to remove it from the Raft configuration, so that it can come
// back as a fresh non-voter that catches up before it votes again.
type RejoinRequest struct {
	Node        string `json:"node"`
	ClusterUUID string `json:"cluster_uuid"`
}

// RejoinResponse says what the leader did.
type RejoinResponse struct {
	// Removed is set when the node was in the Raft configuration and the
	// leader removed it (false: it was not in it).
	Removed bool `json:"removed"`
	// Leader is the name of the leader that answered.
	Leader string `json:"leader"`
}

// handleRejoin checks the signature and the request, then runs the
// removal on the leader (a follower forwards).
func (s *Server) handleRejoin(w http.ResponseWriter, r *http.Request) {
	req, body, ok := readSigned(s, w, r, "a rejoin request", validateRejoin)
	if !ok {
		return
	}
	s.onLeader(w, r, body, func() error {
		resp, err := s.b.Rejoin(r.Context(), req)
		if errors.Is(err, ErrNotLeader) {
			return ErrNotLeader
		}
		if err != nil {
			writeError(w, asAPIError(err))
			return nil
		}
		writeJSON(w, resp)
		return nil
	})
}

func validateRejoin(req RejoinRequest) *APIError {
	if e := fsm.ValidateHostname("node", req.Node); e != nil {
		return FromFSM(e)
	}
	if req.ClusterUUID == "" {
		return badRequest("cluster_uuid", "cluster_uuid is required: the cluster the node belongs to")
	}
	if len(req.ClusterUUID) > 64 {
		return badRequest("cluster_uuid", "cluster_uuid is %d bytes, at most 64", len(req.ClusterUUID))
	}
	return nil
}

// Rejoin sends a rejoin request signed with the join key (DeriveKey of
// the cluster key with JoinKeyLabel).
func (c *Client) Rejoin(ctx context.Context, key []byte, req RejoinRequest) (RejoinResponse, error) {
	var out RejoinResponse
	err := c.postSigned(ctx, "/2/gnt/rejoin", key, req, &out)
	return out, err
}
