package rpc

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// readCatchUp is how long a read waits for this gntd's replica to apply a
// write it answered before it is served through the leader instead. Under
// load the commit index reaches followers with every append, within this;
// on a quiet cluster it comes with the leader's next heartbeat (Raft's
// commit timeout, 50 ms), and a round trip to the leader is shorter.
const readCatchUp = 3 * time.Millisecond

// readFloor is the highest Raft index at which the leader answered a
// write this gntd forwarded: Ganeti's tools read their own writes (its
// RAPI runs on the master only), so every later read this gntd serves must
// show the state at that index or later, for any client.
type readFloor struct{ v atomic.Uint64 }

// note raises the floor to the index an answer of the leader carries
// (X-Gnt-Index, the leader's applied index when it answered).
func (f *readFloor) note(h http.Header) {
	idx, err := strconv.ParseUint(h.Get(HeaderIndex), 10, 64)
	if err != nil {
		return
	}
	for {
		cur := f.v.Load()
		if idx <= cur || f.v.CompareAndSwap(cur, idx) {
			return
		}
	}
}

// caughtUp reports whether the local replica has applied every write this
// gntd answered, waiting up to readCatchUp for it.
func (s *Server) caughtUp(ctx context.Context) bool {
	floor := s.floor.v.Load()
	f := s.b.FSM()
	if floor == 0 || f == nil || f.Index() >= floor {
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, readCatchUp)
	defer cancel()
	return f.WaitIndex(wctx, floor-1) >= floor
}

// unknownYet reports whether a job id is above the highest this replica
// knows of while another gntd leads: the job may exist on the leader
// already (a write answered by another candidate), so the read goes there
// instead of answering 404.
func (s *Server) unknownYet(st *fsm.State, id int64) bool {
	if id < st.NextJobID {
		return false
	}
	_, self := s.b.Leader()
	return !self
}
