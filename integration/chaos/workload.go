package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gnt-cluster/gnt/confd"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/integration"
	"github.com/gnt-cluster/gnt/rpc"
)

// markerPrefix starts the comment of every job the workload submits.
const markerPrefix = "chaos-"

// Timeouts of one operation. A write that gets no answer in time is
// indeterminate; the API holds a write up to 5 s while it has no leader,
// so a write outlives one leaderless hold.
const (
	writeTimeout = 10 * time.Second
	// heldWait is how long a held job submission waits for its job,
	// within writeTimeout.
	heldWait     = 6 * time.Second
	readTimeout  = 5 * time.Second
	confdTimeout = time.Second
)

// workload is the clients of one run.
type workload struct {
	c       *integration.Cluster
	h       *History
	seed    uint64
	objects []string // tag objects
	nodes   []string // nodes whose drained flag the workload flips
	key     []byte   // cluster key, for confd
	// maxWrites bounds the writes of a run, so that every job stays in
	// the active queue (fsm.MaxFinishedJobs) for the accounting.
	maxWrites int64
	writes    atomic.Int64
}

// client is one of the workload's concurrent clients.
type client struct {
	id   int
	w    *workload
	rng  *rand.Rand
	api  *rpc.Client         // every candidate, starting with a random one
	home *integration.Member // answers its default reads and confd queries
	n    int                 // operations so far, for unique values
	// owned are the tags this client added (acknowledged) and has not
	// removed yet, by object; removals pick among them.
	owned map[string][]string
	// drains are the nodes whose drained flag only this client writes
	// (one writer per flag keeps at most one write in flight on it).
	drains []string
	// jobs are the last jobs this client submitted (acknowledged), which
	// it may cancel.
	jobs []submitted
}

type submitted struct {
	id     int64
	marker string
}

// run starts the clients and returns when ctx ends and every operation
// in flight has returned.
func (w *workload) run(ctx context.Context, clients int) {
	cands := w.c.Candidates()
	servers := w.c.Servers()
	var wg sync.WaitGroup
	for i := range clients {
		rng := rand.New(rand.NewPCG(w.seed, uint64(1000+i)))
		start := rng.IntN(len(servers))
		rot := append(append([]string(nil), servers[start:]...), servers[:start]...)
		cl := &client{id: i, w: w, rng: rng, api: w.c.NewClient(rot), home: cands[i%len(cands)], owned: map[string][]string{}}
		for k, n := range w.nodes {
			if k%clients == i {
				cl.drains = append(cl.drains, n)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl.loop(ctx)
		}()
	}
	wg.Wait()
}

// weights of the operation mix, in per mille.
var mix = []struct {
	weight int
	op     func(c *client, ctx context.Context)
}{
	{255, (*client).tagAdd},
	{15, (*client).cancelJob},
	{130, (*client).tagDel},
	{200, func(c *client, ctx context.Context) { c.tagRead(ctx, ModeConsistent) }},
	{120, func(c *client, ctx context.Context) { c.tagRead(ctx, ModeDefault) }},
	{60, (*client).drainSet},
	{50, func(c *client, ctx context.Context) { c.drainRead(ctx, ModeConsistent) }},
	{30, func(c *client, ctx context.Context) { c.drainRead(ctx, ModeDefault) }},
	{90, (*client).confdRead},
	{45, (*client).submitJobs},
	{5, (*client).cliRead},
}

func (c *client) loop(ctx context.Context) {
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	for ctx.Err() == nil {
		r := c.rng.IntN(total)
		for _, m := range mix {
			if r < m.weight {
				m.op(c, ctx)
				break
			}
			r -= m.weight
		}
		sleep(ctx, time.Duration(5+c.rng.IntN(20))*time.Millisecond)
	}
}

// mayWrite counts a write against the run's bound.
func (c *client) mayWrite() bool { return c.w.writes.Add(1) <= c.w.maxWrites }

// record completes an operation and adds it to the history.
func (c *client) record(o *Op, err error, meta rpc.Meta) {
	o.Return = c.w.h.Now()
	o.Outcome, o.Code = classify(err)
	if err != nil {
		o.Err = err.Error()
	}
	o.Index = meta.Index
	if o.Server == "" {
		o.Server = meta.Server
	}
	c.w.h.Add(o)
}

func (c *client) newOp(kind Kind, object string) *Op {
	c.n++
	return &Op{Client: c.id, Kind: kind, Object: object, Call: c.w.h.Now()}
}

// writeCtx and readCtx bound one operation; they do not end with the run,
// so that the operations in flight when it stops get their answer.
func writeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), writeTimeout)
}

func readCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), readTimeout)
}

func (c *client) tagAdd(ctx context.Context) {
	if !c.mayWrite() {
		return
	}
	obj := c.w.objects[c.rng.IntN(len(c.w.objects))]
	o := c.newOp(TagAdd, obj)
	o.Value = fmt.Sprintf("c%d-%d", c.id, c.n)
	kind, name := splitObject(obj)
	wctx, cancel := writeCtx()
	id, meta, err := c.api.AddTags(wctx, kind, name, []string{o.Value}, "chaos")
	cancel()
	c.finishChange(o, id, meta, err)
	if o.Outcome == OK {
		c.owned[obj] = append(c.owned[obj], o.Value)
	}
}

func (c *client) tagDel(ctx context.Context) {
	var objs []string
	for obj, tags := range c.owned {
		if len(tags) > 0 {
			objs = append(objs, obj)
		}
	}
	if len(objs) == 0 {
		c.tagAdd(ctx)
		return
	}
	if !c.mayWrite() {
		return
	}
	slices.Sort(objs) // map order is random; the seed decides
	obj := objs[c.rng.IntN(len(objs))]
	tags := c.owned[obj]
	k := c.rng.IntN(len(tags))
	tag := tags[k]
	c.owned[obj] = append(tags[:k], tags[k+1:]...)
	o := c.newOp(TagDel, obj)
	o.Value = tag
	kind, name := splitObject(obj)
	wctx, cancel := writeCtx()
	id, meta, err := c.api.RemoveTags(wctx, kind, name, []string{tag}, "chaos")
	cancel()
	c.finishChange(o, id, meta, err)
}

// finishChange records a configuration change. Such a job is applied at
// submission ("fast path"): a job id with status success means applied at
// the index of the answer. Any other status would leave the change to the
// executor, at an index nobody reports: indeterminate.
func (c *client) finishChange(o *Op, id int64, meta rpc.Meta, err error) {
	if err == nil {
		o.JobIDs = []int64{id}
		if meta.JobStatus != fsm.StatusSuccess {
			err = &rpc.APIError{ErrorCode: "queued:" + meta.JobStatus, Message: "configuration job left to the executor"}
		}
	}
	c.record(o, err, meta)
}

// readVia is where a read of mode o.Mode goes: a consistent read through
// any candidate (?consistent=1), a default one to the client's home
// candidate, whose process is recorded with the operation.
func (c *client) readVia(o *Op) (*rpc.Client, url.Values) {
	if o.Mode == ModeConsistent {
		return c.api, url.Values{"consistent": {"1"}}
	}
	o.PID = c.home.PID()
	return c.w.c.ClientFor(c.home), nil
}

// samePID forgets the process of a default read when the home candidate
// was restarted meanwhile: the answer may have come from either.
func (c *client) samePID(o *Op) {
	if o.PID != 0 && c.home.PID() != o.PID {
		o.PID = 0
	}
}

func (c *client) tagRead(ctx context.Context, mode string) {
	obj := c.w.objects[c.rng.IntN(len(c.w.objects))]
	o := c.newOp(TagRead, obj)
	o.Mode = mode
	kind, name := splitObject(obj)
	api, q := c.readVia(o)
	rctx, cancel := readCtx()
	var tags []string
	meta, err := api.Do(rctx, http.MethodGet, tagsPath(kind, name), q, nil, &tags)
	cancel()
	c.samePID(o)
	o.Values = tags
	c.record(o, err, meta)
}

func (c *client) drainSet(ctx context.Context) {
	if len(c.drains) == 0 {
		c.tagAdd(ctx)
		return
	}
	if !c.mayWrite() {
		return
	}
	node := c.drains[c.rng.IntN(len(c.drains))]
	v := c.rng.IntN(2) == 1
	o := c.newOp(DrainSet, "node/"+node)
	o.Value = fmt.Sprint(v)
	wctx, cancel := writeCtx()
	id, meta, err := c.api.ModifyNode(wctx, node, rpc.ModifyNodeRequest{Drained: &v}, "chaos")
	cancel()
	c.finishChange(o, id, meta, err)
}

func (c *client) drainRead(ctx context.Context, mode string) {
	if len(c.w.nodes) == 0 {
		c.tagRead(ctx, mode)
		return
	}
	node := c.w.nodes[c.rng.IntN(len(c.w.nodes))]
	o := c.newOp(DrainRead, "node/"+node)
	o.Mode = mode
	api, q := c.readVia(o)
	rctx, cancel := readCtx()
	var info rpc.NodeInfo
	meta, err := api.Do(rctx, http.MethodGet, "/2/nodes/"+url.PathEscape(node), q, nil, &info)
	cancel()
	c.samePID(o)
	o.Value = fmt.Sprint(info.Drained)
	c.record(o, err, meta)
}

// confdRead asks the client's home candidate for a node's role over
// confd: 3 is drained, 4 a regular node.
func (c *client) confdRead(ctx context.Context) {
	if len(c.w.nodes) == 0 {
		c.tagRead(ctx, ModeDefault)
		return
	}
	node := c.w.nodes[c.rng.IntN(len(c.w.nodes))]
	o := c.newOp(DrainRead, "node/"+node)
	o.Mode = ModeConfd
	o.Server = c.home.IP + ":1814"
	o.PID = c.home.PID()
	cl := confd.Client{Key: c.w.key, Peers: []string{o.Server}}
	qctx, cancel := context.WithTimeout(context.Background(), confdTimeout)
	res, err := cl.Query(qctx, confd.ReqNodeRoleByName, confd.Query{Kind: confd.QueryString, Str: node}, 1)
	cancel()
	if c.home.PID() != o.PID {
		o.PID = 0
	}
	if err == nil {
		o.Serial = res.Reply.Serial
		switch a := strings.TrimSpace(string(res.Reply.Answer)); {
		case res.Reply.Status != 0:
			err = fmt.Errorf("confd status %d: %s", res.Reply.Status, a)
		case a == "3":
			o.Value = "true"
		case a == "4":
			o.Value = "false"
		default:
			o.Value = "role " + a
		}
	}
	o.Return = c.w.h.Now()
	o.Outcome = OK
	if err != nil {
		o.Outcome, o.Err = Failed, err.Error()
	}
	c.w.h.Add(o)
}

// submitJobs submits an OP_TEST_DELAY job, or two of them, the second
// depending on the first; each opcode's comment is a unique marker.
func (c *client) submitJobs(ctx context.Context) {
	if !c.mayWrite() {
		return
	}
	o := c.newOp(JobSubmit, "")
	o.Repeat = 1 + c.rng.IntN(4)
	dur := 0.05 + 0.05*float64(c.rng.IntN(4))
	op := func(marker string, deps bool) map[string]any {
		m := map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": dur, "repeat": o.Repeat, "comment": marker}
		if deps {
			m["depends"] = [][]any{{-1, []string{"success"}}}
		}
		return m
	}
	wctx, cancel := writeCtx()
	defer cancel()
	if c.rng.IntN(5) > 0 {
		o.Markers = []string{fmt.Sprintf("%sc%d-%d", markerPrefix, c.id, c.n)}
		ops := []map[string]any{op(o.Markers[0], false)}
		var (
			id   int64
			meta rpc.Meta
			err  error
		)
		if c.rng.IntN(2) == 0 {
			// Held: answered when the job has ended (a follower waits
			// for it on its own replica), with its status.
			o.Mode = ModeHeld
			id, meta, err = c.api.SubmitJobHeld(wctx, ops, "chaos", heldWait)
			o.Status = meta.JobStatus
		} else {
			id, meta, err = c.api.SubmitJob(wctx, ops, "chaos")
		}
		if err == nil {
			o.JobIDs = []int64{id}
		}
		c.record(o, err, meta)
		c.remember(o)
		return
	}
	o.Markers = []string{fmt.Sprintf("%sc%d-%da", markerPrefix, c.id, c.n), fmt.Sprintf("%sc%d-%db", markerPrefix, c.id, c.n)}
	ids, meta, err := c.api.SubmitJobs(wctx, [][]map[string]any{{op(o.Markers[0], false)}, {op(o.Markers[1], true)}}, "chaos")
	if err == nil {
		o.JobIDs = ids
		if len(ids) != len(o.Markers) {
			err = fmt.Errorf("%d ids for %d jobs", len(ids), len(o.Markers))
		}
	}
	c.record(o, err, meta)
	c.remember(o)
}

// remember keeps the last few acknowledged jobs for cancelJob.
func (c *client) remember(o *Op) {
	if o.Outcome != OK {
		return
	}
	for k, id := range o.JobIDs {
		c.jobs = append(c.jobs, submitted{id: id, marker: o.Markers[k]})
	}
	if len(c.jobs) > 8 {
		c.jobs = c.jobs[len(c.jobs)-8:]
	}
}

// cancelJob asks to cancel one of the client's recent jobs: at once if
// it has not started, at its next step boundary if it runs; refused if it
// has finished.
func (c *client) cancelJob(ctx context.Context) {
	if len(c.jobs) == 0 {
		c.submitJobs(ctx)
		return
	}
	if !c.mayWrite() {
		return
	}
	j := c.jobs[c.rng.IntN(len(c.jobs))]
	o := c.newOp(JobCancel, "")
	o.JobIDs, o.Markers = []int64{j.id}, []string{j.marker}
	wctx, cancel := writeCtx()
	_, meta, err := c.api.CancelJob(wctx, j.id, "chaos")
	cancel()
	c.record(o, err, meta)
}

// cliRead reads tags with the gnt CLI's --consistent.
func (c *client) cliRead(ctx context.Context) {
	obj := c.w.objects[c.rng.IntN(len(c.w.objects))]
	kind, name := splitObject(obj)
	noun := map[string]string{fsm.TagCluster: "cluster", fsm.TagNode: "node", fsm.TagNodeGroup: "group"}[kind]
	args := []string{"--consistent", "--timeout", readTimeout.String(), noun, "list-tags"}
	if name != "" {
		args = append(args, name)
	}
	o := c.newOp(TagRead, obj)
	o.Mode = ModeCLI
	out, err := c.w.c.GNT(args...)
	o.Return = c.w.h.Now()
	o.Outcome = OK
	if err != nil {
		o.Outcome, o.Err = Failed, fmt.Sprintf("%v: %s", err, strings.TrimSpace(out))
	} else {
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				o.Values = append(o.Values, l)
			}
		}
	}
	c.w.h.Add(o)
}

// classify turns an error into an outcome: failed when the API says that
// nothing was applied (no leader, refused by validation or by the state
// machine, the server not reached), indeterminate otherwise (timeouts,
// broken connections, leadership lost while committing).
func classify(err error) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	var ae *rpc.APIError
	if errors.As(err, &ae) {
		switch {
		case ae.ErrorCode == rpc.CodeNoLeader, ae.ErrorCode == rpc.CodeUnavailable, ae.ErrorCode == rpc.CodeNotCandidate,
			ae.ErrorCode == string(fsm.CodeQueueFull):
			return Failed, ae.ErrorCode
		case ae.ErrorCode == rpc.CodeIndeterminate, ae.ErrorCode == rpc.CodeTimeout, ae.Status >= 500, ae.Status == 0:
			return Indeterminate, ae.ErrorCode
		}
		return Failed, ae.ErrorCode // refused: 4xx
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return Failed, "dial"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Indeterminate, "client_timeout"
	}
	return Indeterminate, "transport"
}

// splitObject splits "kind/name" ("cluster" has no name).
func splitObject(obj string) (kind, name string) {
	kind, name, _ = strings.Cut(obj, "/")
	return kind, name
}

// tagsPath is the API resource of an object's tags.
func tagsPath(kind, name string) string {
	switch kind {
	case fsm.TagNode:
		return "/2/nodes/" + url.PathEscape(name) + "/tags"
	case fsm.TagNodeGroup:
		return "/2/groups/" + url.PathEscape(name) + "/tags"
	case fsm.TagInstance:
		return "/2/instances/" + url.PathEscape(name) + "/tags"
	}
	return "/2/tags"
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
