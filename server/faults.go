package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/gnt-cluster/gnt/transport"
)

// Fault injection for tests and chaos runs. With --debug, this gntd's Raft
// transport goes through a transport.Faults, driven by
//
//	POST /debug/faults  {"block": [addr...], "unblock": [addr...],
//	                     "cut_to": [addr...],
//	                     "block_all": true, "heal": true,
//	                     "delay": "50ms", "drop_rate": 0.1}
//
// An address is a Raft address (host:port) or a bare host; peers are
// matched by IP. Blocking cuts Raft traffic with the peer both ways at
// this node: it refuses connections from the peer and dials to it fail,
// and open connections are closed. So blocking the leader on one
// follower partitions that follower from the leader's replication.
// cut_to is a one-way cut (transport.Faults.CutTo): what this node sends
// to the peer is lost, what the peer sends still arrives; unblock lifts it
// too. Only Raft traffic is affected (not the API, nor confd). Fields
// apply in the order heal, block_all, unblock, block, cut_to, delay,
// drop_rate.

// FaultRequest is the body of POST /debug/faults.
type FaultRequest struct {
	Block    []string `json:"block,omitempty"`
	Unblock  []string `json:"unblock,omitempty"`
	CutTo    []string `json:"cut_to,omitempty"`
	BlockAll bool     `json:"block_all,omitempty"`
	Heal     bool     `json:"heal,omitempty"`
	Delay    string   `json:"delay,omitempty"`
	DropRate *float64 `json:"drop_rate,omitempty"`
}

func faultsHandler(f *transport.Faults) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a FaultRequest", http.StatusMethodNotAllowed)
			return
		}
		var req FaultRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, "bad fault request: "+err.Error(), http.StatusBadRequest)
			return
		}
		var delay time.Duration
		if req.Delay != "" {
			d, err := time.ParseDuration(req.Delay)
			if err != nil || d < 0 {
				http.Error(w, "bad delay "+req.Delay, http.StatusBadRequest)
				return
			}
			delay = d
		}
		if req.DropRate != nil && (*req.DropRate < 0 || *req.DropRate > 1) {
			http.Error(w, "drop_rate must be within [0, 1]", http.StatusBadRequest)
			return
		}
		if req.Heal {
			f.Heal()
		}
		if req.BlockAll {
			f.BlockAll()
		}
		for _, a := range req.Unblock {
			f.Unblock(a)
		}
		for _, a := range req.Block {
			f.Block(a)
		}
		for _, a := range req.CutTo {
			f.CutTo(a)
		}
		if req.Delay != "" {
			f.SetDelay(delay)
		}
		if req.DropRate != nil {
			f.SetDropRate(*req.DropRate)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}` + "\n"))
	})
}
