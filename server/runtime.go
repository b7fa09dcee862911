package server

import (
	"context"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// The runtime view: a recent view of each node's instances as its agent
// reports them (the node RPC's list), which the API's runtime fields
// (an instance's status and oper_state, the cluster's hypervisors) read
// without calling any node. The leader keeps it always; another gntd
// keeps it while its API is asked for runtime fields (for
// runtimeIdleAfter after the last such read), so that reads on every
// candidate see it. It is refreshed every runtimePollInterval, and at
// once when the configuration of instances or nodes changes or a job
// finishes (checked every runtimeTick). A node that is offline is not
// asked; one whose agent does not answer within runtimePollTimeout is
// recorded as not answering.

const (
	runtimeTick         = time.Second
	runtimePollInterval = 10 * time.Second
	runtimePollTimeout  = 5 * time.Second
	runtimeIdleAfter    = 2 * time.Minute
	runtimeConcurrency  = 16
)

// runtimeState is the view and what decides when to refresh it.
type runtimeState struct {
	mu       sync.Mutex
	nodes    map[string]rpc.NodeRuntime // by node UUID
	seen     map[string]string          // the instances' placement at the poll (rpc.Runtime.Seen)
	lastRead time.Time
	kick     chan struct{}
	// force makes the loop poll at its next wake-up even when nothing
	// changed; polled is closed (and replaced) when a poll's view is
	// stored (RuntimeAfterPoll waits on it).
	force  bool
	polled chan struct{}
}

// RuntimeAfterPoll implements rpc.RuntimeWaiter: it has the poller poll
// now and returns the view the poll stores, or after timeout (or when
// ctx ends) the view there is.
func (s *Server) RuntimeAfterPoll(ctx context.Context, timeout time.Duration) rpc.Runtime {
	r := &s.runtime
	r.mu.Lock()
	if r.polled == nil {
		r.polled = make(chan struct{})
	}
	r.force, r.lastRead = true, time.Now()
	ch, kick := r.polled, r.kick
	r.mu.Unlock()
	select {
	case kick <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	return s.Runtime()
}

// Runtime implements rpc.RuntimeSource. A read on a gntd whose view is
// missing or old asks the poller for a round (without waiting for it).
func (s *Server) Runtime() rpc.Runtime {
	now := time.Now()
	r := &s.runtime
	r.mu.Lock()
	r.lastRead = now
	nodes := make(map[string]rpc.NodeRuntime, len(r.nodes))
	oldest := now
	for k, v := range r.nodes {
		nodes[k] = v
		if v.At.Before(oldest) {
			oldest = v.At
		}
	}
	kick, seen := r.kick, r.seen
	r.mu.Unlock()
	if len(nodes) == 0 || now.Sub(oldest) > runtimePollInterval {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	return rpc.Runtime{Nodes: nodes, Seen: seen, Now: now}
}

// runtimeLister asks one node's agent for its instances.
type runtimeLister func(ctx context.Context, n *fsm.Node) (rpc.NodeResult, error)

// listNode is the runtimeLister of the node RPC.
func (s *Server) listNode(ctx context.Context, n *fsm.Node) (rpc.NodeResult, error) {
	c, err := s.nodes.client(n)
	if err != nil {
		return rpc.NodeResult{}, err
	}
	return c.Do(ctx, rpc.NodeRequest{Op: rpc.NodeOpList})
}

// runtimeLoop keeps the view until ctx ends.
func (s *Server) runtimeLoop(ctx context.Context) {
	t := time.NewTicker(runtimeTick)
	defer t.Stop()
	var (
		lastPoll time.Time
		lastFP   uint64
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.runtime.kick:
		}
		_, leader := s.Leader()
		s.runtime.mu.Lock()
		active := leader || time.Since(s.runtime.lastRead) < runtimeIdleAfter
		if !active {
			s.runtime.nodes, s.runtime.seen = nil, nil // an old view is no view
		}
		s.runtime.mu.Unlock()
		if !active {
			continue
		}
		// A read's kick only wakes the loop early: it polls when the
		// view is due or the configuration changed.
		fp := runtimeFingerprint(s.fsm)
		s.runtime.mu.Lock()
		force := s.runtime.force
		s.runtime.force = false
		s.runtime.mu.Unlock()
		if !force && fp == lastFP && time.Since(lastPoll) < runtimePollInterval {
			continue
		}
		lastFP, lastPoll = fp, time.Now()
		seen := runtimeSeen(s.fsm)
		nodes := pollRuntime(ctx, s.fsm, s.listNode, time.Now)
		s.runtime.mu.Lock()
		s.runtime.nodes, s.runtime.seen = nodes, seen
		if s.runtime.polled != nil {
			close(s.runtime.polled)
		}
		s.runtime.polled = make(chan struct{})
		s.runtime.mu.Unlock()
	}
}

// runtimeFingerprint summarizes what, when it changes, makes the view
// worth refreshing at once: the instances' configuration (placement,
// admin state), the nodes' flags and the jobs that finished.
func runtimeFingerprint(f *fsm.FSM) uint64 {
	h := fnv.New64a()
	f.Read(func(st *fsm.State, _ uint64) {
		for _, i := range st.SortedInstances() {
			h.Write([]byte(i.UUID + "/" + i.PrimaryNode + "/" + i.AdminState + "/" + strconv.FormatInt(i.SerialNo, 10) + ";"))
		}
		for _, n := range st.SortedNodes() {
			h.Write([]byte(n.UUID + "/" + n.Addrs.Agent + "/" + strconv.FormatBool(n.Offline) + "/" + n.Liveness + ";"))
		}
		h.Write([]byte(strconv.Itoa(len(st.Finished))))
		if k := len(st.Finished); k > 0 {
			h.Write([]byte("/" + strconv.FormatInt(st.Finished[k-1], 10)))
		}
	})
	return h.Sum64()
}

// runtimeSeen is the instances' placement before a poll (rpc.Runtime.Seen):
// an instance placed otherwise when the view is read has moved since.
func runtimeSeen(f *fsm.FSM) map[string]string {
	var seen map[string]string
	f.Read(func(st *fsm.State, _ uint64) { seen = placements(st) })
	return seen
}

// placements is every instance's rpc.RuntimePlacement, by UUID (empty,
// not nil, without instances).
func placements(st *fsm.State) map[string]string {
	seen := make(map[string]string, len(st.Instances))
	for _, i := range st.Instances {
		seen[i.UUID] = rpc.RuntimePlacement(i)
	}
	return seen
}

// pollRuntime asks every node that is not offline and has an agent
// address for its instances, at most runtimeConcurrency at a time, each
// within runtimePollTimeout, and returns the new view.
func pollRuntime(ctx context.Context, f *fsm.FSM, list runtimeLister, now func() time.Time) map[string]rpc.NodeRuntime {
	var nodes []*fsm.Node
	f.Read(func(st *fsm.State, _ uint64) {
		for _, n := range st.SortedNodes() {
			if !n.Offline && n.Addrs.Agent != "" {
				c := *n
				nodes = append(nodes, &c)
			}
		}
	})
	out := make(map[string]rpc.NodeRuntime, len(nodes))
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, runtimeConcurrency)
	)
	for _, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func(n *fsm.Node) {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, runtimePollTimeout)
			res, err := list(cctx, n)
			cancel()
			insts := res.Instances
			nr := rpc.NodeRuntime{At: now(), Driver: res.Driver, Accel: res.Accel, AccelNote: res.AccelNote, Taps: res.Taps}
			if err != nil {
				nr.Err = err.Error()
				if nr.Err == "" {
					nr.Err = "no answer"
				}
			} else {
				nr.Instances = make(map[string]rpc.NodeInstanceStatus, len(insts))
				for _, in := range insts {
					nr.Instances[in.UUID] = in
				}
			}
			mu.Lock()
			out[n.UUID] = nr
			mu.Unlock()
		}(n)
	}
	wg.Wait()
	return out
}
