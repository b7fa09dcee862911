package rpc

import (
	"context"
	"math"
	"net/http"

	"github.com/gnt-cluster/gnt/fsm"
)

// BalanceRequest is the body of POST /2/gnt/balance: balance the cluster
// with the built-in balancer (maintd's, docs/repair.md), at most MaxMoves
// moves (0: the cluster's maint_balance_max_moves), no two touching the
// same node, when a resource's spread is over Threshold (nil: the
// cluster's maint_balance_thresh). DryRun (or ?dry-run=1) answers the
// plan and submits nothing; otherwise each move is a job, all submitted
// together.
type BalanceRequest struct {
	MaxMoves  int      `json:"max_moves,omitempty"`
	Threshold *float64 `json:"threshold,omitempty"`
	DryRun    bool     `json:"dry_run,omitempty"`
}

// validateBalance checks a balance request's limits.
func validateBalance(req BalanceRequest) *APIError {
	if req.MaxMoves < 0 || req.MaxMoves > fsm.MaxBalanceMaxMoves {
		return badRequest("max_moves", "max_moves must be between 1 and %d (0: the cluster's maint_balance_max_moves), got %d", fsm.MaxBalanceMaxMoves, req.MaxMoves)
	}
	if t := req.Threshold; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 1) {
		return badRequest("threshold", "threshold must be between 0 and 1, got %g", *t)
	}
	return nil
}

// handleBalance is POST /2/gnt/balance, answered on the leader with the
// plan and the ids of the jobs submitted.
func (s *Server) handleBalance(w http.ResponseWriter, r *http.Request) {
	var req BalanceRequest
	body, aerr := s.readOptional(r, &req)
	if aerr == nil {
		// ?dry-run=1, as the opcode routes take it, is a dry run too.
		var dry bool
		dry, aerr = queryFlag(r.URL.Query(), "dry-run")
		req.DryRun = req.DryRun || dry
	}
	if aerr == nil {
		aerr = validateBalance(req)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	answerOnLeader(s, w, r, body, func(ctx context.Context) (any, error) { return s.b.Balance(ctx, req) })
}
