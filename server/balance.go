package server

import (
	"context"
	"encoding/json"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/repair"
	"github.com/gnt-cluster/gnt/rpc"
)

// BalanceResult is the answer of POST /2/gnt/balance: the plan, and the
// jobs of its moves when they were submitted.
type BalanceResult struct {
	repair.BalancePlan
	DryRun bool    `json:"dry_run"`
	Jobs   []int64 `json:"jobs"`
}

// Balance implements rpc.Backend: the built-in balancer's plan on the
// leader's state, its moves submitted together (one job each) unless the
// request is a dry run. Nodes maintd is evacuating take no part, as in
// maintd's own balancing.
func (s *Server) Balance(ctx context.Context, req rpc.BalanceRequest) (any, error) {
	if _, self := s.Leader(); !self {
		return nil, rpc.ErrNotLeader
	}
	now := s.Now().UnixNano()
	var (
		res  = BalanceResult{DryRun: req.DryRun, Jobs: []int64{}}
		errS error
	)
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if !st.Initialized() {
			errS = &fsm.Error{Code: fsm.CodeState, Msg: "cluster is not initialised"}
			return
		}
		m := st.Maint()
		in := repair.BalanceInput{State: st, Threshold: m.BalanceThreshold, MaxMoves: m.MaxMoves(), Now: now, Out: map[string]bool{}}
		if req.MaxMoves > 0 {
			in.MaxMoves = req.MaxMoves
		}
		if req.Threshold != nil {
			in.Threshold = *req.Threshold
		}
		for _, inc := range m.Incidents {
			if !fsm.IncidentFinal(inc.RepairStatus) && fsm.ActionRank(inc.Action) >= fsm.ActionRank(fsm.ActionEvacuate) {
				in.Out[inc.NodeUUID] = true
			}
		}
		res.BalancePlan = repair.PlanBalance(in)
	})
	if errS != nil {
		return nil, errS
	}
	if res.Moves == nil {
		res.Moves = []repair.BalanceMove{}
	}
	if res.Notes == nil {
		res.Notes = []string{}
	}
	if req.DryRun || len(res.Moves) == 0 {
		return res, nil
	}
	cmd := fsm.JobSubmitMany{Now: now}
	for _, mv := range res.Moves {
		b, err := json.Marshal(mv.Opcode(repair.BalanceReasonSource, now))
		if err != nil {
			return nil, err
		}
		cmd.Jobs = append(cmd.Jobs, fsm.JobSpec{Ops: []json.RawMessage{b}, UUIDs: []string{s.NewUUID()}})
	}
	resp, _, err := s.Apply(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if resp.Err != nil {
		return nil, resp.Err
	}
	res.Jobs = resp.JobIDs
	return res, nil
}
