package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"sort"
	"sync"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/qlang"
	"github.com/gnt-cluster/gnt/qlang/jobfilter"
)

// Job filter rules (Ganeti's design-optables), as the queue applies them:
// to every job that has not started, each time the executor picks jobs
// to run, in the order of the rules (priority, watermark, UUID), the
// first rule whose predicates all match and whose action is not CONTINUE
// deciding: ACCEPT runs the job, PAUSE leaves it queued (until the rule
// is removed or changed), REJECT cancels it (a JobCancel naming the rule,
// which the FSM refuses unless the rule is still a REJECT rule and the
// job still unstarted), RATE_LIMIT n runs it only while fewer than n
// started jobs are under that rule (counted job by job as they are
// picked). A job that has started runs to its end whatever the rules
// (Ganeti's gnt-filter: "Has no effect if the job is already running").
// The decision reads the replicated state only; the FSM, while a rule
// that can hold jobs exists, queues every submission for the executor.

// filterCache keeps the compiled rules and the jobs as the predicates see
// them, between picks; only Run's goroutine uses it.
type filterCache struct {
	rules map[string]cachedRule
	jobs  map[int64]*jobfilter.Job
}

type cachedRule struct {
	src  *fsm.JobFilter
	rule *jobfilter.Rule // nil: its predicates did not compile
}

// filterReject is a job a REJECT rule cancels.
type filterReject struct {
	job    int64
	filter string
}

// chain returns the state's rules compiled, in the order they apply.
func (e *Executor) chain(s *fsm.State) []*jobfilter.Rule {
	c := &e.filters
	next := make(map[string]cachedRule, len(s.Filters))
	var out []*jobfilter.Rule
	for uuid, f := range s.Filters {
		cr, ok := c.rules[uuid]
		if !ok || cr.src != f {
			cr = cachedRule{src: f, rule: compileRule(f)}
			if cr.rule == nil {
				e.Log.Warn("filter rule does not compile; it matches no job", "filter", uuid)
			}
		}
		next[uuid] = cr
		if cr.rule != nil {
			out = append(out, cr.rule)
		}
	}
	c.rules = next
	jobfilter.Sort(out)
	return out
}

func compileRule(f *fsm.JobFilter) *jobfilter.Rule {
	v, err := decodeNumbers(f.Predicates)
	if err != nil {
		return nil
	}
	ps, err := jobfilter.Compile(v, f.Watermark)
	if err != nil {
		return nil
	}
	return &jobfilter.Rule{UUID: f.UUID, Watermark: f.Watermark, Priority: f.Priority,
		Action: jobfilter.Action{Name: f.Action, N: f.RateLimit}, Preds: ps}
}

func decodeNumbers(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// filterJob is the job as the predicates see it (cached: a job's opcodes
// never change).
func (e *Executor) filterJob(j *fsm.Job, seen map[int64]*jobfilter.Job) *jobfilter.Job {
	fj := e.filters.jobs[j.ID]
	if fj == nil {
		fj = &jobfilter.Job{ID: j.ID}
		for _, op := range j.Ops {
			m := map[string]any{}
			if v, err := decodeNumbers(op.Input); err == nil {
				if mm, ok := v.(map[string]any); ok {
					m = mm
				}
			}
			fj.Ops = append(fj.Ops, m)
			var rows []qlang.Row
			if o, err := op.Opcode(); err == nil {
				for _, r := range o.Common().Reason {
					rows = append(rows, jobfilter.ReasonRow(r.Source, r.Text, r.TimeNS))
				}
			}
			fj.Reasons = append(fj.Reasons, rows)
		}
	}
	seen[j.ID] = fj
	return fj
}

// unstarted reports whether the filter rules apply to the job: no opcode
// of it has run and its first is queued.
func unstarted(j *fsm.Job, idx int) bool {
	return j.StartTS == nil && idx >= 0 && j.Ops[idx].Status == fsm.StatusQueued
}

// pickFiltered is pick with filter rules: started jobs first, then the
// unstarted ones by priority and id as the rules let them run. It also
// returns the unstarted jobs a REJECT rule applies to, whatever n is.
func (e *Executor) pickFiltered(s *fsm.State, n int, running map[int64]bool, mu *sync.Mutex) ([]int64, []filterReject) {
	chain := e.chain(s)
	seen := map[int64]*jobfilter.Job{}
	var (
		started []int64
		cands   []pickCand
		rejects []filterReject
	)
	counts := map[*jobfilter.Rule]int{}
	mu.Lock()
	s.EachExecutorJob(func(j *fsm.Job) {
		idx := j.CurrentOp()
		if idx < 0 {
			return
		}
		if running[j.ID] || !unstarted(j, idx) {
			// Started: it counts against the rate limit of the rule
			// that applies to it.
			if r := jobfilter.Applies(chain, e.filterJob(j, seen)); r != nil && r.Action.Name == jobfilter.RateLimit {
				counts[r]++
			}
			if running[j.ID] {
				return
			}
			if j.Ops[idx].Status == fsm.StatusRunning {
				started = append(started, j.ID)
				return
			}
		}
		if v, _ := s.CheckDependencies(j, idx); v == fsm.DepWait {
			return
		}
		cands = append(cands, pickCand{j.ID, j.Priority()})
	})
	mu.Unlock()
	sort.Slice(started, func(a, b int) bool { return started[a] < started[b] })
	sort.Slice(cands, func(a, b int) bool { return cands[a].before(cands[b]) })
	out := started
	for _, c := range cands {
		j := s.Jobs[c.id]
		if unstarted(j, j.CurrentOp()) {
			r := jobfilter.Applies(chain, e.filterJob(j, seen))
			switch {
			case r == nil, r.Action.Name == jobfilter.Accept:
			case r.Action.Name == jobfilter.Pause:
				continue
			case r.Action.Name == jobfilter.Reject:
				rejects = append(rejects, filterReject{job: j.ID, filter: r.UUID})
				continue
			case r.Action.Name == jobfilter.RateLimit:
				if counts[r] >= r.Action.N || len(out) >= n {
					continue
				}
				counts[r]++
			}
		}
		if len(out) < n {
			out = append(out, c.id)
		}
	}
	e.filters.jobs = seen
	return out, rejects
}

// rejectJobs cancels the jobs REJECT rules apply to. The FSM checks the
// rule again; a refusal (the rule changed meanwhile) leaves the job to
// the next pick.
func (e *Executor) rejectJobs(ctx context.Context, rejects []filterReject) {
	for _, r := range rejects {
		resp, _, err := e.Apply.Apply(ctx, fsm.JobCancel{Now: e.Clock().UnixNano(), JobID: r.job, Filter: r.filter, Who: "filter rule " + r.filter})
		if err == nil && resp.Err != nil {
			err = resp.Err
		}
		if err != nil {
			e.Log.Info("job not rejected by filter rule", "job", r.job, "filter", r.filter, "error", err)
			continue
		}
		e.Log.Info("job rejected by filter rule", "job", r.job, "filter", r.filter)
	}
}
