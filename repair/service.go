package repair

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
)

// Applier replicates a command (the server's one Raft-apply helper).
type Applier interface {
	Apply(ctx context.Context, cmd fsm.Command) (fsm.Response, uint64, error)
}

// StateReader reads the local replica.
type StateReader interface {
	Read(fn func(s *fsm.State, index uint64))
}

// Service is maintd on the leader: it plans a round every tick and records
// it when it is due, and serves maintd's HTTP API while it runs. One
// Service runs per leadership (epoch); it is memory rebuilt from the
// replicated state, so the next leader's Service carries on the same
// incidents.
//
// Goroutines: Run's own loop, and the HTTP server it starts and stops.
type Service struct {
	FSM   StateReader
	Apply Applier
	Epoch uint64
	// Diagnose returns the latest verified self-diagnose results by node
	// name (nil: none).
	Diagnose func() map[string]Observation
	// Quorum confirms the leader still reaches a majority of candidates.
	Quorum func(ctx context.Context) error
	// Listen is maintd's HTTP address (port 1816); empty: no HTTP.
	Listen string
	// Tick is how often the service plans (default 1 s).
	Tick  time.Duration
	Clock func() time.Time
	Log   hclog.Logger
	// OnListening, if set, is told the HTTP address once bound.
	OnListening func(addr string)
	// TLS, when set, makes the HTTP API HTTPS with this configuration
	// (gntd's node certificate; client certificates optional).
	TLS *tls.Config
	// Authorize, if set, decides every HTTP request before it is served:
	// write is true for a request that changes something (AccessOf:
	// POST /1/cancel/ID) and false for a read (every GET). It returns true
	// to let the request through (without answering it), or answers the
	// refusal itself and returns false: 401 with a WWW-Authenticate
	// challenge for missing or bad credentials (maintd adds a basic-auth
	// challenge to a 401 without one, so that a browser asks for a user
	// and password), 403 for a read-only user's write. A refusal it does
	// not answer is a 403. nil lets every request through.
	Authorize func(w http.ResponseWriter, r *http.Request, write bool) bool
	// WrapListener, if set, wraps the HTTP listener (the gntd's
	// connection caps); HTTPServer, if set, configures the HTTP server
	// (its timeouts and header limit) before it serves. Without it the
	// server has only a 10 s ReadHeaderTimeout.
	WrapListener func(net.Listener) net.Listener
	HTTPServer   func(*http.Server)

	mu       sync.Mutex
	last     *RoundPlan // the last plan computed
	lastAt   time.Time
	recorded *RoundPlan // the last plan recorded
	recAt    time.Time
	// refused is why the state refused the last round this service
	// tried to record ("" once one is recorded), since refusedAt;
	// refusedLog is when that was last logged.
	refused    string
	refusedAt  time.Time
	refusedLog time.Time
	// inputs are what the last plan was computed from; a tick whose
	// inputs are the same, before the plan's wake time, plans nothing.
	inputs planInputs
}

// planInputs identify a plan's inputs besides the clock: the state (its
// applied index), the self-diagnose results, quorum; and until when the
// clock does not matter (RoundPlan.Wake, bounded by IdleReplan).
type planInputs struct {
	valid    bool
	index    uint64
	diagnose uint64
	noQuorum string
	until    time.Time
}

// IdleReplan bounds how long the Service goes without planning while
// nothing it reads changes: a safety net for a time-dependent decision
// the planner's wake time might not cover.
const IdleReplan = 10 * time.Second

// diagnoseSum is a fingerprint of the self-diagnose results.
func diagnoseSum(obs map[string]Observation) uint64 {
	names := make([]string, 0, len(obs))
	for n := range obs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := fnv.New64a()
	for _, n := range names {
		o := obs[n]
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s\x00", n, o.Time.UnixNano(), o.Status, o.Command)
		h.Write(o.Original)
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// refusedLogEvery is how often the same refusal of a round is logged.
const refusedLogEvery = time.Minute

func (s *Service) clock() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

func (s *Service) log() hclog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return hclog.NewNullLogger()
}

// ErrFenced is returned by Run when a newer leader's epoch refused a
// round: it wraps fsm.ErrFenced.
var ErrFenced = fmt.Errorf("repair round fenced: %w", fsm.ErrFenced)

// Run serves HTTP and runs rounds until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.Listen != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serve(ctx)
		}()
	}
	tick := s.Tick
	if tick <= 0 {
		tick = time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if err := s.step(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Plan computes what a round would do now, without recording anything.
func (s *Service) Plan(ctx context.Context) *RoundPlan {
	p, _, _ := s.plan(ctx, s.clock(), false)
	return p
}

// plan computes what a round would do at now (the plan shown), and what
// to record now: the same plan when its jobs are due, otherwise the
// round's bookkeeping alone (RoundInput.HoldJobs), so that an incident is
// in the state, with its id, from the round that first sees it.
//
// With skipSame set (the ticks of Run), nothing is planned when the inputs
// are those of the last plan and its wake time has not come: same is
// true and p, record nil.
func (s *Service) plan(ctx context.Context, now time.Time, skipSame bool) (p, record *RoundPlan, same bool) {
	in := RoundInput{Now: now}
	if s.Diagnose != nil {
		in.Diagnose = s.Diagnose()
	}
	if s.Quorum != nil {
		qctx, c := context.WithTimeout(ctx, 5*time.Second)
		if err := s.Quorum(qctx); err != nil {
			in.NoQuorum = "the leader cannot confirm a majority of the candidates: " + err.Error()
		}
		c()
	}
	var inputs planInputs
	if skipSame {
		inputs = planInputs{valid: true, diagnose: diagnoseSum(in.Diagnose), noQuorum: in.NoQuorum}
	}
	s.FSM.Read(func(st *fsm.State, index uint64) {
		if skipSame {
			inputs.index = index
			s.mu.Lock()
			last := s.inputs
			s.mu.Unlock()
			if last.valid && last.index == index && last.diagnose == inputs.diagnose && last.noQuorum == inputs.noQuorum && now.Before(last.until) {
				same = true
				return
			}
		}
		if !st.Initialized() {
			p = &RoundPlan{Notes: []string{"cluster not initialised"}}
			return
		}
		in.State = st
		p, record = PlanRound(in), nil
		wake := p.Wake
		if Due(st, p, now) {
			record = p
		} else {
			in.HoldJobs = true
			record = PlanRound(in)
			if w := record.Wake; w > 0 && (wake == 0 || w < wake) {
				wake = w
			}
		}
		inputs.until = now.Add(IdleReplan)
		if wake > 0 && time.Unix(0, wake).Before(inputs.until) {
			inputs.until = time.Unix(0, wake)
		}
	})
	if same {
		return nil, nil, true
	}
	if skipSame {
		s.mu.Lock()
		s.inputs = inputs
		s.mu.Unlock()
	}
	s.mu.Lock()
	if s.refused != "" {
		p.Refused = fmt.Sprintf("since %s: %s", s.refusedAt.UTC().Format(time.RFC3339), s.refused)
	}
	s.mu.Unlock()
	return p, record, false
}

// replanNext makes the next tick plan whatever its inputs (the last
// record was not taken).
func (s *Service) replanNext() {
	s.mu.Lock()
	s.inputs = planInputs{}
	s.mu.Unlock()
}

func (s *Service) step(ctx context.Context) error {
	now := s.clock()
	p, rec, same := s.plan(ctx, now, true)
	if same {
		return nil // nothing it reads changed since the last plan
	}
	s.mu.Lock()
	s.last, s.lastAt = p, now
	s.mu.Unlock()
	if rec == nil || rec.Empty() {
		return nil
	}
	p = rec
	cmd := p.Command
	cmd.Epoch = s.Epoch
	resp, _, err := s.Apply.Apply(ctx, cmd)
	if err != nil || resp.Err != nil {
		s.replanNext()
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log().Warn("recording a repair round", "error", err)
		}
		return nil
	}
	if resp.Err != nil {
		if errors.Is(resp.Err, fsm.ErrFenced) {
			return ErrFenced
		}
		// Shown on the page and in the plan, logged when it changes and
		// once a minute: rounds are planned every tick.
		s.mu.Lock()
		why := resp.Err.Error()
		if why != s.refused {
			s.refused, s.refusedAt, s.refusedLog = why, now, time.Time{}
		}
		logIt := now.Sub(s.refusedLog) >= refusedLogEvery
		if logIt {
			s.refusedLog = now
		}
		s.mu.Unlock()
		if logIt {
			s.log().Error("repair round refused", "error", resp.Err)
		}
		return nil
	}
	s.mu.Lock()
	s.recorded, s.recAt = p, now
	s.refused = ""
	s.mu.Unlock()
	for _, n := range p.Notes {
		s.log().Info("maintd: " + n)
	}
	if len(resp.JobIDs) > 0 {
		s.log().Info("maintd round submitted jobs", "jobs", resp.JobIDs)
	}
	return nil
}

// Last returns the last plan computed and when, and the last one recorded.
func (s *Service) Last() (last *RoundPlan, at time.Time, recorded *RoundPlan, recAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.lastAt, s.recorded, s.recAt
}

// serve runs maintd's HTTP server on Listen until ctx ends. When the
// address is still held (the previous leadership's server closing), it
// retries.
func (s *Service) serve(ctx context.Context) {
	var ln net.Listener
	for {
		var err error
		ln, err = net.Listen("tcp", s.Listen)
		if err == nil {
			break
		}
		s.log().Warn("maintd cannot listen yet; retrying", "addr", s.Listen, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	if s.WrapListener != nil {
		ln = s.WrapListener(ln)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if s.HTTPServer != nil {
		s.HTTPServer(srv)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
	}()
	s.log().Info("maintd listening", "addr", ln.Addr().String())
	if s.OnListening != nil {
		s.OnListening(ln.Addr().String())
	}
	if s.TLS != nil {
		ln = tls.NewListener(ln, s.TLS)
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log().Error("maintd HTTP server", "error", err)
	}
	<-done
}
