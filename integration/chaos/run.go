package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/integration"
	"github.com/gnt-cluster/gnt/repair"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/server"
)

// Config shapes one run.
type Config struct {
	Seed       uint64
	Candidates int
	Nodes      int
	Clients    int
	// Length is how long faults are injected (the workload runs a little
	// longer on both sides).
	Length time.Duration
	// Kinds are injected in this order, once each; nil means random kinds
	// (of those the cluster can take) until Length has passed.
	Kinds []string
	// Hold and Gap bound how long a fault lasts and the quiet time after
	// it is healed.
	Hold, Gap [2]time.Duration
	// SnapshotThreshold and TrailingLogs, when set, make Raft snapshot
	// and truncate its log that often, so that restarted and cut-off
	// members catch up from snapshots.
	SnapshotThreshold, TrailingLogs int
	// Network is how network faults are made: InProcess (the default) or
	// IPTables (the process must run in a network namespace of its own).
	Network string
	// MaxWrites bounds the writes of the run (0: 8000), so that every job
	// stays in the active queue for the accounting.
	MaxWrites int64
	// LinearTimeout bounds Porcupine's check of one object (0: 1 min).
	LinearTimeout time.Duration
	// Artifacts is the directory under which a failing run keeps its files.
	Artifacts string
	// Logf prints progress (nil: t.Logf).
	Logf func(format string, args ...any)
}

// ConvergeWithin is how soon after healing every candidate must have
// applied the same index with the same state hash.
const ConvergeWithin = 10 * time.Second

// Report is the outcome of one run.
type Report struct {
	Seed       uint64        `json:"seed"`
	Candidates int           `json:"candidates"`
	Elapsed    time.Duration `json:"elapsed"`
	// Operations by outcome.
	Ops, OK, Failed, Indeterminate int
	Faults                         map[string]int
	Sets                           SetResult
	Linear                         LinearResult
	// WorstRecovery is the longest time from a fault's start to the first
	// acknowledgement of a write invoked after it; WorstFault names that
	// fault.
	WorstRecovery time.Duration
	WorstFault    string
	// Leaderships is the number of leaderships established (from the
	// members' logs), the initial one included.
	Leaderships int
	// Converged is how long after healing the candidates agreed.
	Converged time.Duration
	// MaintdAfterElection is how long after its election the final
	// leader's maintd first answered on port 1816 (MaintdMeasured: when
	// it was elected during the run); Maintd is what the probes of port
	// 1816 showed.
	MaintdAfterElection time.Duration
	MaintdMeasured      bool
	Maintd              MaintdResult
	Violations          []string
	// Dir holds the run's files when it failed.
	Dir string
}

// Line is the run's one-line summary.
func (r *Report) Line() string {
	return summaryLine(1, []*Report{r})
}

// Summary is the one-line summary of several runs.
func Summary(reports []*Report) string { return summaryLine(len(reports), reports) }

func summaryLine(runs int, reports []*Report) string {
	var ops, ok, failed, indet, lost, unexp, dup, rec, lin, checked, unknown, viol int
	faults := map[string]int{}
	var worst, maintd time.Duration
	worstFault := ""
	measured := false
	for _, r := range reports {
		if r.MaintdMeasured {
			maintd, measured = max(maintd, r.MaintdAfterElection), true
		}
		ops, ok, failed, indet = ops+r.Ops, ok+r.OK, failed+r.Failed, indet+r.Indeterminate
		lost, unexp, dup, rec = lost+r.Sets.Lost, unexp+r.Sets.Unexpected, dup+r.Sets.Duplicated, rec+r.Sets.Recovered
		lin, checked, unknown = lin+r.Linear.Ok, checked+r.Linear.Checked, unknown+r.Linear.Unknown
		viol += len(r.Violations)
		for k, n := range r.Faults {
			faults[k] += n
		}
		if r.WorstRecovery > worst {
			worst, worstFault = r.WorstRecovery, r.WorstFault
		}
	}
	var fk []string
	total := 0
	for _, k := range sortedKeys(faults) {
		fk = append(fk, fmt.Sprintf("%s=%d", k, faults[k]))
		total += faults[k]
	}
	line := fmt.Sprintf("runs=%d operations=%d (ok=%d failed=%d indeterminate=%d) faults=%d (%s) lost=%d unexpected=%d duplicated=%d recovered=%d linearizable=%d/%d (%d unknown) worst-write-recovery=%s",
		runs, ops, ok, failed, indet, total, strings.Join(fk, " "), lost, unexp, dup, rec, lin, checked, unknown, worst.Round(time.Millisecond))
	if worstFault != "" {
		line += " (" + worstFault + ")"
	}
	m := "n/a"
	if measured {
		m = maintd.Round(time.Millisecond).String()
	}
	return line + fmt.Sprintf(" maintd-after-election=%s violations=%d", m, viol)
}

// run is the state of one run.
type run struct {
	t   *testing.T
	cfg Config
	c   *integration.Cluster
	h   *History
	nem *nemesis
	rep *Report

	objects, nodes []string
	initial, final State

	mu      sync.Mutex
	samples []Sample
	probes  []MaintdProbe
}

// RunOnce runs one cluster through the workload and the faults, then
// checks, and fills rep. Violations are reported with t.Errorf; rep says
// what happened either way (also when the run fails half-way).
func RunOnce(t *testing.T, cfg Config, rep *Report) {
	if cfg.MaxWrites == 0 {
		cfg.MaxWrites = 8000
	}
	if cfg.LinearTimeout == 0 {
		cfg.LinearTimeout = time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	began := time.Now()
	*rep = Report{Seed: cfg.Seed, Candidates: cfg.Candidates, Faults: map[string]int{}}
	r := &run{t: t, cfg: cfg, rep: rep}
	args := []string{"--debug"}
	if cfg.SnapshotThreshold > 0 {
		args = append(args, "--raft-snapshot-threshold", strconv.Itoa(cfg.SnapshotThreshold), "--raft-trailing-logs", strconv.Itoa(cfg.TrailingLogs))
	}
	r.c = integration.NewCluster(t, integration.ClusterOptions{Candidates: cfg.Candidates, Nodes: cfg.Nodes, ExtraArgs: args})
	t.Cleanup(func() {
		if t.Failed() || len(r.rep.Violations) > 0 {
			r.keep()
		}
	})
	r.c.WaitLeader(30 * time.Second)
	r.discover()
	r.initial = r.readState(false)

	r.h = NewHistory(time.Now())
	r.nem = newNemesis(t, r.c, r.h, cfg.Seed, cfg.Network, cfg.Logf)
	key, err := os.ReadFile(filepath.Join(r.c.Members[0].DataDir, "cluster.key"))
	if err != nil {
		t.Fatal(err)
	}
	w := &workload{c: r.c, h: r.h, seed: cfg.Seed, objects: r.objects, nodes: r.nodes, key: key, maxWrites: cfg.MaxWrites}

	pollCtx, stopPoll := context.WithCancel(context.Background())
	pollDone := r.poll(pollCtx)
	defer func() { stopPoll(); <-pollDone }()
	loadCtx, stopLoad := context.WithCancel(context.Background())
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); w.run(loadCtx, cfg.Clients) }()
	defer func() { stopLoad(); <-loadDone }()

	// Faults, one at a time, on the test's goroutine (restarting a member
	// may fail the test).
	r.nem.run(context.Background(), schedule{kinds: cfg.Kinds, allKinds: FaultKinds(cfg.Candidates, cfg.Network),
		until: time.Now().Add(cfg.Length), hold: cfg.Hold, gap: cfg.Gap, warmup: 2 * time.Second})
	stopLoad()
	<-loadDone
	r.nem.healAll()
	healed, healedAt := time.Now(), r.h.Now()
	cfg.Logf("%7.3fs workload stopped, all healed; %d writes", secs(r.h.Now()), min(w.writes.Load(), cfg.MaxWrites))

	r.converge(healed)
	r.tombstone(cfg.Clients)
	r.waitJobs()
	r.final = r.readState(true)
	r.finalMaintd(healedAt)
	stopPoll()
	<-pollDone

	r.check()
	r.rep.Elapsed = time.Since(began)
	for i, v := range r.rep.Violations {
		if i == maxReported {
			t.Errorf("... and %d more violations", len(r.rep.Violations)-i)
			break
		}
		t.Errorf("%s", v)
	}
}

// maxReported bounds the violations a run prints; violations.txt has them all.
const maxReported = 40

// discover names the objects the workload writes: the cluster, every
// node, every node group; and the nodes whose drained flag it flips (the
// non-candidates: a candidate cannot be drained while it is master).
func (r *run) discover() {
	r.objects = []string{fsm.TagCluster}
	for _, m := range r.c.Members {
		r.objects = append(r.objects, fsm.TagNode+"/"+m.Name)
		if !m.Candidate {
			r.nodes = append(r.nodes, m.Name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups, err := r.c.Client().Groups(ctx, false)
	if err != nil {
		r.t.Fatalf("listing groups: %v", err)
	}
	for _, g := range groups {
		r.objects = append(r.objects, fsm.TagNodeGroup+"/"+g.Name)
	}
}

// readState reads every object's tags and every node's drained flag
// through consistent reads; with jobs, the jobs too.
func (r *run) readState(jobs bool) State {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := r.c.Client()
	st := State{Tags: map[string][]string{}, Drained: map[string]bool{}}
	consistent := url.Values{"consistent": {"1"}}
	for _, obj := range r.objects {
		kind, name := splitObject(obj)
		var tags []string
		if _, err := cl.Do(ctx, http.MethodGet, tagsPath(kind, name), consistent, nil, &tags); err != nil {
			r.t.Fatalf("reading the tags of %s: %v", obj, err)
		}
		sort.Strings(tags)
		st.Tags[obj] = tags
	}
	for _, n := range r.nodes {
		var info rpc.NodeInfo
		if _, err := cl.Do(ctx, http.MethodGet, "/2/nodes/"+n, consistent, nil, &info); err != nil {
			r.t.Fatalf("reading node %s: %v", n, err)
		}
		st.Drained[n] = info.Drained
	}
	if !jobs {
		return st
	}
	var list []rpc.JobInfo
	q := url.Values{"consistent": {"1"}, "bulk": {"1"}, "archived": {"1"}}
	if _, err := cl.Do(ctx, http.MethodGet, "/2/jobs", q, nil, &list); err != nil {
		r.t.Fatalf("listing jobs: %v", err)
	}
	for _, info := range list {
		j := jobFromInfo(info, false)
		if !j.Archived && slices.ContainsFunc(j.Ops, func(o JobOp) bool { return o.OpID == "OP_TEST_DELAY" }) {
			// The listing leaves the steps out; read the whole job.
			if _, err := cl.Do(ctx, http.MethodGet, "/2/jobs/"+strconv.FormatInt(j.ID, 10), consistent, nil, &info); err != nil {
				r.t.Fatalf("reading job %d: %v", j.ID, err)
			}
			j = jobFromInfo(info, false)
		}
		st.Jobs = append(st.Jobs, j)
	}
	return st
}

// poll samples every candidate's status, and probes every member's
// maintd port, until ctx ends.
func (r *run) poll(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, m := range r.c.Candidates() {
		cl := r.c.ClientFor(m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				call := r.h.Now()
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				st, err := cl.Status(sctx, false)
				cancel()
				if err == nil && st.Candidate {
					s := Sample{Member: m.Name, Call: call, At: r.h.Now(), State: st.RaftState,
						Term: st.Term, Established: st.Established, Applied: st.AppliedIndex}
					if st.Maintd != nil {
						s.MaintdAddr, s.MaintdEpoch = st.Maintd.Addr, st.Maintd.Epoch
					}
					if st.Gossip != nil {
						for _, g := range st.Gossip.Members {
							if g.State != "alive" {
								s.Gossip = append(s.Gossip, g.Name+":"+g.State)
							}
						}
					}
					r.mu.Lock()
					r.samples = append(r.samples, s)
					r.mu.Unlock()
				}
				sleep(ctx, 100*time.Millisecond)
			}
		}()
	}
	for _, m := range r.c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.probeMaintd(ctx, m)
		}()
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// probeMaintd asks GET / of the member's maintd port every
// MaintdProbeEvery until ctx ends, each on a new connection (a kept-alive
// one would outlive a closed listener), and records what came.
func (r *run) probeMaintd(ctx context.Context, m *integration.Member) {
	// Redirects are not followed: a gntd that does not run maintd
	// answers with one to the leader's (or refuses), marked with
	// server.HeaderMaintdRedirect; that is not maintd answering.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: r.c.AdminTLS()},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	u := "https://" + net.JoinHostPort(m.IP, maintdPort) + "/"
	for ctx.Err() == nil {
		p := MaintdProbe{Member: m.Name, Start: r.h.Now()}
		pctx, cancel := context.WithTimeout(ctx, MaintdProbeTimeout)
		req, _ := http.NewRequestWithContext(pctx, http.MethodGet, u, nil)
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err == nil && resp.Header.Get(server.HeaderMaintdRedirect) != "" {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			p.Err = fmt.Sprintf("not maintd: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		} else if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			p.Answered, p.Code = true, resp.StatusCode
			h := resp.Header.Get(repair.HeaderEpoch)
			if e, perr := strconv.ParseUint(h, 10, 64); perr == nil && e > 0 {
				p.Epoch = e
			} else {
				p.Header = h
			}
		} else {
			p.Err = probeError(err)
		}
		cancel()
		p.End = r.h.Now()
		if !p.Answered && ctx.Err() != nil {
			return // stopped, not unanswered
		}
		r.mu.Lock()
		r.probes = append(r.probes, p)
		r.mu.Unlock()
		sleep(ctx, MaintdProbeEvery)
	}
}

// probeError names why a probe got no answer, briefly.
func probeError(err error) string {
	switch {
	case isConnRefused(err):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return "timeout"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// converge waits until every candidate has applied the same index with
// the same state hash; later than ConvergeWithin after healing is a
// violation (it goes on waiting a while to say how long it took).
func (r *run) converge(healed time.Time) {
	var last []string
	for time.Since(healed) < ConvergeWithin+30*time.Second {
		last = last[:0]
		indexes, hashes := map[uint64]bool{}, map[string]bool{}
		ok := true
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, m := range r.c.Candidates() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := r.c.Status(m)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					ok = false
					last = append(last, fmt.Sprintf("%s: %v", m.Name, err))
					return
				}
				indexes[st.AppliedIndex], hashes[st.FSMHash] = true, true
				last = append(last, fmt.Sprintf("%s@%d:%.12s", m.Name, st.AppliedIndex, st.FSMHash))
			}()
		}
		wg.Wait()
		if ok && len(indexes) == 1 && len(hashes) == 1 {
			r.rep.Converged = time.Since(healed)
			if r.rep.Converged > ConvergeWithin {
				r.violation("raft: candidates converged %v after healing, later than %v", r.rep.Converged.Round(time.Millisecond), ConvergeWithin)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	sort.Strings(last)
	r.violation("raft: candidates did not converge within %v of healing: %v", ConvergeWithin+30*time.Second, last)
}

// tombstone makes one write after healing: it must succeed, and it is
// part of the history like any other.
func (r *run) tombstone(clientID int) {
	cl := r.c.Client()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		o := &Op{Client: clientID, Kind: TagAdd, Object: fsm.TagCluster, Value: fmt.Sprintf("tombstone-%d", i), Call: r.h.Now()}
		ctx, cancel := writeCtx()
		id, meta, err := cl.AddTags(ctx, fsm.TagCluster, "", []string{o.Value}, "chaos tombstone")
		cancel()
		o.Return = r.h.Now()
		o.Outcome, o.Code = classify(err)
		o.Index, o.Server = meta.Index, meta.Server
		if err != nil {
			o.Err = err.Error()
		} else {
			o.JobIDs = []int64{id}
		}
		r.h.Add(o)
		if o.Outcome == OK {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.violation("liveness: no write succeeded within 30s after healing")
}

// waitJobs waits until every job has finished (the executor resumes the
// jobs of a dead leader; none may stay unfinished).
func (r *run) waitJobs() {
	cl := r.c.Client()
	deadline := time.Now().Add(2 * time.Minute)
	var open []int64
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var list []rpc.JobInfo
		_, err := cl.Do(ctx, http.MethodGet, "/2/jobs", url.Values{"bulk": {"1"}}, nil, &list)
		cancel()
		if err == nil {
			open = open[:0]
			for _, j := range list {
				if !fsm.Finalized(j.Status) {
					open = append(open, j.ID)
				}
			}
			if len(open) == 0 {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.violation("jobs: %d jobs still unfinished 2m after healing: %v", len(open), open)
}

func (r *run) violation(format string, args ...any) {
	r.rep.Violations = append(r.rep.Violations, fmt.Sprintf(format, args...))
}

// check runs every checker on the history.
func (r *run) check() {
	ops := r.h.Ops()
	rep := r.rep
	for _, o := range ops {
		rep.Ops++
		switch o.Outcome {
		case OK:
			rep.OK++
		case Failed:
			rep.Failed++
		default:
			rep.Indeterminate++
		}
	}
	faults := r.nem.Faults()
	for _, f := range faults {
		rep.Faults[f.Kind]++
	}
	rep.WorstRecovery, rep.WorstFault = worstRecovery(ops, faults)

	rep.Linear = CheckLinearizable(ops, r.initial, r.cfg.LinearTimeout)
	for _, f := range rep.Linear.Failures {
		r.violation("linearizability: %s", f)
	}
	rep.Sets = CheckSets(ops, r.initial, r.final)
	for _, v := range rep.Sets.Violations {
		r.violation("accounting: %s", v)
	}
	r.mu.Lock()
	samples := slices.Clone(r.samples)
	r.mu.Unlock()
	for _, v := range CheckLeaders(samples) {
		r.violation("raft: %s", v)
	}
	var ests []Establishment
	for _, m := range r.c.Candidates() {
		ests = append(ests, ParseEstablishments(m.Name, m.Log())...)
	}
	rep.Leaderships = len(ests)
	if len(ests) == 0 {
		r.violation("leader services: no \"leadership established\" line in any member's log; the check saw nothing")
	}
	for _, v := range CheckLeaderServices(ests, r.final.Jobs) {
		r.violation("leader services: %s", v)
	}
	var elections []Election
	for _, m := range r.c.Members {
		elections = append(elections, ParseElections(m.Name, m.Log(), r.h.start)...)
	}
	r.mu.Lock()
	probes := slices.Clone(r.probes)
	r.mu.Unlock()
	rep.Maintd = CheckMaintd(MaintdHistory{Probes: probes, Samples: samples, Elections: elections,
		Candidates: names(r.c.Candidates()), Faults: faults})
	if rep.Maintd.Answers == 0 {
		r.violation("maintd: no probe of port %s was ever answered; the check saw nothing", maintdPort)
	}
	for _, v := range rep.Maintd.Violations {
		r.violation("maintd: %s", v)
	}
	for _, h := range rep.Maintd.Handover {
		r.cfg.Logf("maintd handover of a paused leader (allowed): %s", h)
	}
	for _, v := range CheckStale(ops, r.initial) {
		r.violation("stale read: %s", v)
	}
	if rep.OK == 0 {
		r.violation("liveness: no operation succeeded")
	}
}

// finalMaintd waits (the probes going on) until the final leader's maintd
// has answered with the epoch its status names, then measures how long
// after the leader's election that first happened.
func (r *run) finalMaintd(healed int64) {
	deadline := time.Now().Add(MaintdAnswerWithin)
	var f FinalMaintd
	var leader *integration.Member
	for {
		if l := r.c.Leader(); l != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := r.c.ClientFor(l).Status(ctx, false)
			cancel()
			if err == nil && st.RaftState == "leader" && st.Maintd != nil {
				leader, f = l, FinalMaintd{Leader: l.Name, Epoch: st.Maintd.Epoch, Healed: healed}
				r.mu.Lock()
				answered := slices.ContainsFunc(r.probes, func(p MaintdProbe) bool {
					return p.Answered && p.Member == f.Leader && p.Epoch == f.Epoch
				})
				r.mu.Unlock()
				if answered {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if leader == nil {
		r.violation("maintd: no established leader named a maintd in its status within %v after the final reads", MaintdAnswerWithin)
		return
	}
	found := false
	for _, e := range ParseElections(leader.Name, leader.Log(), r.h.start) {
		if e.Epoch == f.Epoch {
			f.Elected, found = e.Elected, true
		}
	}
	if !found {
		r.violation("maintd: the final leader %s runs maintd epoch %d, which its log never established", f.Leader, f.Epoch)
		return
	}
	r.mu.Lock()
	probes := slices.Clone(r.probes)
	r.mu.Unlock()
	after, vs := CheckFinalMaintd(probes, f)
	for _, v := range vs {
		r.violation("maintd: %s", v)
	}
	if f.Elected < 0 {
		// Elected before the probes began: when it first answered is
		// not known.
		r.cfg.Logf("%7.3fs final leader %s elected before the run began (epoch %d); its maintd answers", secs(r.h.Now()), f.Leader, f.Epoch)
		return
	}
	r.rep.MaintdAfterElection, r.rep.MaintdMeasured = after, true
	r.cfg.Logf("%7.3fs final leader %s elected at %.3fs (epoch %d): maintd answered %v after the election", secs(r.h.Now()),
		f.Leader, secs(f.Elected), f.Epoch, after.Round(time.Millisecond))
}

// worstRecovery finds, for each fault, how long after it began a write
// invoked since then was first acknowledged (the earliest return among
// them, not the return of the earliest call: a call that waited out the
// fault, resending, would otherwise hide the writes that went through
// meanwhile), and returns the longest such wait.
func worstRecovery(ops []*Op, faults []Fault) (time.Duration, string) {
	var worst time.Duration
	name := ""
	for _, f := range faults {
		first := time.Duration(-1)
		for _, o := range ops {
			if o.Call < f.Start || !o.IsWrite() || o.Outcome != OK {
				continue
			}
			if d := time.Duration(o.Return - f.Start); first < 0 || d < first {
				first = d
			}
		}
		if first > worst {
			worst, name = first, f.Kind
		}
	}
	return worst, name
}

// keep saves what a failing run leaves: history, faults, status samples,
// states, violations, Porcupine pages, member logs and data dirs.
func (r *run) keep() {
	base := r.cfg.Artifacts
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("chaos-%d-%s", r.cfg.Seed, time.Now().Format("20060102-150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Logf("cannot keep the run's files: %v", err)
		return
	}
	r.rep.Dir = dir
	save := func(name string, v any) {
		data, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
		if err != nil {
			r.t.Logf("saving %s: %v", name, err)
		}
	}
	if r.h != nil {
		writeJSONLines(filepath.Join(dir, "history.jsonl"), r.h.Ops())
	}
	if r.nem != nil {
		save("faults.json", r.nem.Faults())
		if _, err := r.rep.Linear.SavePages(dir, r.nem.Faults()); err != nil {
			r.t.Logf("saving the Porcupine pages: %v", err)
		}
	}
	r.mu.Lock()
	writeJSONLines(filepath.Join(dir, "samples.jsonl"), r.samples)
	writeJSONLines(filepath.Join(dir, "maintd-probes.jsonl"), r.probes)
	r.mu.Unlock()
	save("state-initial.json", r.initial)
	save("state-final.json", r.final)
	save("config.json", map[string]any{"seed": r.cfg.Seed, "candidates": r.cfg.Candidates, "nodes": r.cfg.Nodes,
		"clients": r.cfg.Clients, "length": r.cfg.Length.String(), "kinds": r.cfg.Kinds, "network": r.cfg.Network,
		"raft_snapshot_threshold": r.cfg.SnapshotThreshold, "raft_trailing_logs": r.cfg.TrailingLogs})
	os.WriteFile(filepath.Join(dir, "violations.txt"), []byte(strings.Join(r.rep.Violations, "\n")+"\n"), 0o644)
	// Stop the members so that their data dirs hold still, then copy them.
	for _, m := range r.c.Members {
		m.Kill()
		os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
		os.WriteFile(filepath.Join(dir, "logs", m.Name+".log"), []byte(m.Log()), 0o644)
		if err := copyDir(m.DataDir, filepath.Join(dir, "data", m.Name)); err != nil {
			r.t.Logf("copying the data dir of %s: %v", m.Name, err)
		}
	}
	r.t.Logf("the run's files are in %s", dir)
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
