package server

import (
	"context"
	"errors"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs"
	"github.com/gnt-cluster/gnt/repair"
	"github.com/gnt-cluster/gnt/rpc"
)

// runMaintd is the maintd leader service: repair rounds (harep included)
// and maintd's HTTP API on the maintd port, for one leadership.
func (s *Server) runMaintd(ctx context.Context, epoch uint64) error {
	svc := &repair.Service{
		FSM: s.fsm, Apply: s, Epoch: epoch, Diagnose: s.diagnoseObservations,
		Quorum: s.VerifyLeader, Tick: s.cfg.Timing().Maintd,
		Log: s.log.Named("maintd"),
		// Served on this gntd's maintd port (maintdport.go), HTTPS with
		// the API's users and certificates: reads need read access, POST
		// /1/cancel/ID write access.
		Authorize: s.api.Authorize,
	}
	h := svc.Handler()
	s.mu.Lock()
	s.maintd, s.maintdHandler, s.maintdEpoch = svc, h, epoch
	s.maintdAddr = s.maintdListen
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.maintd == svc {
			s.maintd, s.maintdHandler, s.maintdAddr = nil, nil, ""
		}
		s.mu.Unlock()
	}()
	err := svc.Run(ctx)
	if errors.Is(err, fsm.ErrFenced) {
		return jobs.ErrFenced
	}
	return err
}

// maintdService is the running maintd, or nil.
func (s *Server) maintdService() *repair.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maintd
}

// maintdStatus is where maintd listens, for Status.
func (s *Server) maintdStatus() *rpc.MaintdStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maintd == nil || s.maintdAddr == "" {
		return nil
	}
	return &rpc.MaintdStatus{Addr: s.maintdAddr, Epoch: s.maintdEpoch}
}

// RepairView is the answer of GET /2/gnt/repair.
type RepairView struct {
	Plan        *repair.RoundPlan `json:"plan"`
	Maintenance *fsm.Maintenance  `json:"maintenance"`
	// Incidents are the maintenance state's incidents with the
	// operator's next step (as maintd's /1/status).
	Incidents []repair.IncidentStatus `json:"incidents"`
	// Recorded is the last round this leader recorded, when it did.
	Recorded   *repair.RoundPlan `json:"recorded,omitempty"`
	RecordedAt string            `json:"recorded_at,omitempty"`
	MaintdAddr string            `json:"maintd_addr,omitempty"`
}

// Repair implements rpc.Backend: the leader's maintd view, with a fresh
// plan of the next round.
func (s *Server) Repair(ctx context.Context) (any, error) {
	svc := s.maintdService()
	if svc == nil {
		return nil, rpc.ErrNotLeader
	}
	v := RepairView{Plan: svc.Plan(ctx)}
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		v.Maintenance = st.Maint()
		v.Incidents = repair.Incidents(v.Maintenance)
	})
	if _, _, rec, at := svc.Last(); rec != nil {
		v.Recorded, v.RecordedAt = rec, at.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	if st := s.maintdStatus(); st != nil {
		v.MaintdAddr = st.Addr
	}
	return v, nil
}

// diagnoseObservations are the latest verified self-diagnose results, by
// node name.
func (s *Server) diagnoseObservations() map[string]repair.Observation {
	res := s.DiagnoseResults()
	out := make(map[string]repair.Observation, len(res))
	for name, r := range res {
		out[name] = repair.Observation{Node: r.Node, Time: r.Time, Status: r.Status, Command: r.Command, Original: r.Raw}
	}
	return out
}

// diagnoseInterval is how often the leader polls the self-diagnose
// collectors (maint_diagnose_interval).
func (s *Server) diagnoseInterval() time.Duration {
	var d time.Duration
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		d = time.Duration(st.Maint().Repair.DiagnoseInterval * float64(time.Second))
	})
	return d
}

// diagnoseCommand is the configured self-diagnose command.
func (s *Server) diagnoseCommand() string {
	c := ""
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if st.Cluster != nil {
			c = st.Cluster.DiagnoseCollectorFilename
		}
	})
	return c
}
