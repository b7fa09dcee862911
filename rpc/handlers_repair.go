package rpc

import (
	"errors"
	"net/http"

	"github.com/gnt-cluster/gnt/fsm"
)

// handleRepair: GET /2/gnt/repair, the leader's maintd view (what the next
// round would do and why, the incidents, the circuit breaker).
func (s *Server) handleRepair(w http.ResponseWriter, r *http.Request) {
	answerOnLeader(s, w, r, nil, s.b.Repair)
}

// handleIncident: POST /2/gnt/maintd/incidents/{id}/cancel and DELETE
// /2/gnt/maintd/incidents/{id} (forget, Ganeti's gnt-cluster
// remove-repair).
func (s *Server) handleIncident(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if id == "" || len(id) > 64 {
			writeError(w, badRequest("id", "incident id must be 1 to 64 characters, got %q", id))
			return
		}
		s.onLeader(w, r, nil, func() error {
			resp, idx, err := s.b.Apply(r.Context(), fsm.MaintIncident{Now: s.b.Now().UnixNano(), UUID: id, Action: action})
			if errors.Is(err, ErrNotLeader) {
				return ErrNotLeader
			}
			if err != nil {
				writeError(w, asAPIError(err))
				return nil
			}
			if resp.Err != nil {
				writeError(w, FromFSM(resp.Err))
				return nil
			}
			setIndex(w, idx)
			writeJSON(w, map[string]string{"incident": id, "action": action})
			return nil
		})
	}
}
