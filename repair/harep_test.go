package repair

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/gnt-cluster/gnt/fsm"
)

// world builds a cluster state through a real fsm.FSM (the state's
// indexes are its own) and runs PlanHarep on it. Times in scripts are
// seconds after start; tags carry absolute Unix seconds (start is
// 1700000000).
type world struct {
	f     *fsm.FSM
	index uint64
	now   int64 // ns; commands are stamped with it
	epoch uint64
	last  HarepPlan
	ids   map[string]string // derived repair id -> alias in output
	jobs  map[string]int64  // job names of the script
}

const worldStart = 1_700_000_000

func newWorld() *world {
	return &world{f: fsm.New(), now: worldStart * 1e9, ids: map[string]string{}, jobs: map[string]int64{}}
}

func (w *world) apply(c fsm.Command) fsm.Response {
	data, err := fsm.Encode(c)
	if err != nil {
		panic(err)
	}
	w.index++
	return w.f.Apply(w.index, data).(fsm.Response)
}

func (w *world) must(t *testing.T, d *datadriven.TestData, c fsm.Command) fsm.Response {
	t.Helper()
	r := w.apply(c)
	if r.Err != nil {
		t.Fatalf("%s: %s: %s", d.Pos, c.CommandType(), r.Err.Msg)
	}
	return r
}

// submit runs configuration opcodes as one job (the fast path).
func (w *world) submit(t *testing.T, d *datadriven.TestData, ops ...any) fsm.Response {
	t.Helper()
	js := fsm.JobSubmit{Now: w.now}
	for _, op := range ops {
		b, _ := json.Marshal(op)
		js.Ops = append(js.Ops, b)
		js.UUIDs = append(js.UUIDs, fmt.Sprintf("uuid-%d-%d", w.index, len(js.UUIDs)))
	}
	return w.must(t, d, js)
}

func (w *world) read(fn func(s *fsm.State)) {
	w.f.Read(func(s *fsm.State, _ uint64) { fn(s) })
}

func lines(in string) [][]string {
	var out [][]string
	for _, l := range strings.Split(in, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

func (w *world) run(t *testing.T, d *datadriven.TestData) string {
	arg := func(key string) string {
		for _, a := range d.CmdArgs {
			if a.Key == key {
				if len(a.Vals) == 0 {
					return "true"
				}
				return a.Vals[0]
			}
		}
		return ""
	}
	secs := func(key string) int64 {
		v, err := strconv.ParseInt(arg(key), 10, 64)
		if err != nil {
			t.Fatalf("%s: %s must be a number of seconds", d.Pos, key)
		}
		return v
	}
	switch d.Cmd {
	case "init":
		// A cluster with node1 (the leader) in group "default", and the
		// groups named in groups=.
		w.must(t, d, fsm.ClusterInit{Now: w.now, Name: "cluster", UUID: "cluster-uuid", GroupUUID: "group-default",
			Node: fsm.NodeSpec{Name: "node1", UUID: "node-node1", PrimaryIP: "192.0.2.1"}})
		w.epoch = w.must(t, d, fsm.LeaderEstablish{Now: w.now, Node: "node1"}).Epoch
		for _, g := range d.CmdArgs {
			if g.Key == "groups" {
				for _, name := range g.Vals {
					w.submit(t, d, map[string]any{"OP_ID": "OP_GROUP_ADD", "group_name": name})
				}
			}
		}
		return "ok"
	case "nodes":
		// NAME [GROUP], one per line.
		for i, f := range lines(d.Input) {
			op := map[string]any{"OP_ID": "OP_NODE_ADD", "node_name": f[0], "primary_ip": fmt.Sprintf("192.0.2.%d", 100+i+int(w.index))}
			op["group"] = "default"
			if len(f) > 1 {
				op["group"] = f[1]
			}
			w.submit(t, d, op)
		}
		return "ok"
	case "node":
		// node NAME offline|drained|online|dead|alive [since=S]
		name := d.CmdArgs[0].Key
		switch st := d.CmdArgs[1].Key; st {
		case "offline", "drained":
			w.submit(t, d, map[string]any{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name, st: true})
		case "online":
			w.submit(t, d, map[string]any{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name, "offline": false, "drained": false})
		case "dead", "alive", "suspect":
			live := map[string]string{"dead": fsm.LivenessDead, "alive": fsm.LivenessAlive, "suspect": fsm.LivenessSuspect}[st]
			w.must(t, d, fsm.NodeLiveness{Now: w.now, Epoch: w.epoch, Changes: []fsm.LivenessChange{
				{Node: name, State: live, Since: (worldStart + secs("since")) * 1e9}}})
		default:
			t.Fatalf("%s: unknown node state %q", d.Pos, st)
		}
		return "ok"
	case "instances":
		// NAME TEMPLATE PRIMARY [SECONDARY] [forthcoming], one per line;
		// an existing instance is moved to the nodes given.
		var changes []fsm.StepChange
		w.read(func(s *fsm.State) {
			for _, f := range lines(d.Input) {
				in := fsm.Instance{Name: f[0], UUID: "inst-" + f[0], DiskTemplate: f[1], PrimaryNode: s.LookupNode(f[2]).UUID,
					AdminState: fsm.AdminUp, SecondaryNodes: []string{}}
				var expect int64
				if old := s.LookupInstance(f[0]); old != nil {
					in, expect = *old, old.SerialNo
					in.PrimaryNode, in.SecondaryNodes = s.LookupNode(f[2]).UUID, []string{}
				}
				for _, x := range f[3:] {
					if x == "forthcoming" {
						in.Forthcoming = true
					} else {
						in.SecondaryNodes = append(in.SecondaryNodes, s.LookupNode(x).UUID)
					}
				}
				changes = append(changes, fsm.StepChange{InstancePut: &fsm.InstancePut{Instance: in, ExpectSerial: expect}})
			}
		})
		id := w.submitDelay(t, d)
		w.must(t, d, fsm.JobUpdate{Now: w.now, Epoch: w.epoch, JobID: id, Action: fsm.ActionFinish, Status: fsm.StatusSuccess,
			Result: json.RawMessage("null"), StepName: "put", Changes: changes})
		return "ok"
	case "tag", "untag":
		// tag cluster | group=NAME | instance=NAME, then one tag a line.
		kind, name := fsm.TagCluster, ""
		if g := arg("group"); g != "" {
			kind, name = fsm.TagNodeGroup, g
		} else if i := arg("instance"); i != "" {
			kind, name = fsm.TagInstance, i
		}
		var tags []string
		for _, f := range lines(d.Input) {
			tags = append(tags, w.unalias(f[0]))
		}
		op := map[string]any{"OP_ID": "OP_TAGS_SET", "kind": kind, "tags": tags}
		if d.Cmd == "untag" {
			op["OP_ID"] = "OP_TAGS_DEL"
		}
		if name != "" {
			op["name"] = name
		}
		w.submit(t, d, op)
		return "ok"
	case "job":
		// job STATUS [archived] [name=NAME]: a job that ended up so; tags
		// name it {NAME}.
		id := w.submitDelay(t, d)
		if n := arg("name"); n != "" {
			w.jobs[n] = id
		}
		w.driveJob(t, d, id, d.CmdArgs[0].Key)
		if arg("archived") != "" {
			w.must(t, d, fsm.JobArchive{Now: w.now, IDs: []int64{id}})
		}
		return fmt.Sprintf("job %d", id)
	case "finish":
		// finish instance=NAME STATUS: drive the job of the instance's
		// pending repair (its last job) to a status.
		var id int64
		w.read(func(s *fsm.State) {
			for _, text := range s.LookupInstance(arg("instance")).Tags {
				if tag, ok, err := ParseTag(text); ok && err == nil && tag.Kind == TagPending && len(tag.Jobs) > 0 {
					id = tag.Jobs[len(tag.Jobs)-1]
				}
			}
		})
		if id == 0 {
			t.Fatalf("%s: instance %s has no pending repair with a job", d.Pos, arg("instance"))
		}
		w.driveJob(t, d, id, d.CmdArgs[1].Key)
		var st string
		w.read(func(s *fsm.State) { st = s.Jobs[id].Status })
		return fmt.Sprintf("job %d %s", id, st)
	case "plan":
		return w.plan(t, d, secs("at"))
	case "apply":
		return w.applyPlan(t, d)
	case "tags":
		return w.alias(w.tags())
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func (w *world) submitDelay(t *testing.T, d *datadriven.TestData) int64 {
	return w.must(t, d, fsm.JobSubmit{Now: w.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)},
		UUIDs: []string{""}}).JobID
}

// driveJob takes a queued job to a status through the executor's
// updates.
func (w *world) driveJob(t *testing.T, d *datadriven.TestData, id int64, status string) {
	upd := func(op int, action, st string) {
		w.must(t, d, fsm.JobUpdate{Now: w.now, Epoch: w.epoch, JobID: id, OpIndex: op, Action: action, Status: st, Result: json.RawMessage("null")})
	}
	var ops []string
	w.read(func(s *fsm.State) {
		for _, op := range s.Jobs[id].Ops {
			ops = append(ops, op.Status)
		}
	})
	switch status {
	case fsm.StatusQueued:
	case fsm.StatusWaiting:
		upd(0, fsm.ActionWait, "")
	case fsm.StatusRunning:
		upd(0, fsm.ActionStart, "")
	case fsm.StatusCanceling:
		upd(0, fsm.ActionStart, "")
		w.must(t, d, fsm.JobCancel{Now: w.now, JobID: id})
	case fsm.StatusCanceled:
		w.must(t, d, fsm.JobCancel{Now: w.now, JobID: id})
	case fsm.StatusSuccess, fsm.StatusError:
		for op, st := range ops {
			if st != fsm.StatusSuccess {
				upd(op, fsm.ActionFinish, status)
				if status == fsm.StatusError {
					break
				}
			}
		}
	default:
		t.Fatalf("%s: unknown job status %q", d.Pos, status)
	}
}

// down is how maintd's round decides that a node is down: offline or
// drained, or dead in gossip for the grace period.
func down(s *fsm.State, now time.Time) func(string) NodeDown {
	grace := time.Duration(s.Maint().Repair.DeadGrace * float64(time.Second))
	return func(u string) NodeDown {
		n := s.Nodes[u]
		switch {
		case n == nil:
			return NodeDown{}
		case n.Offline:
			return NodeDown{Why: "offline"}
		case n.Drained:
			return NodeDown{Why: "drained"}
		case n.Liveness == fsm.LivenessDead:
			if d := now.Sub(time.Unix(0, n.LivenessSince)); d >= grace {
				return NodeDown{Why: "dead for " + d.String(), Dead: true, DeadSince: n.LivenessSince}
			}
		}
		return NodeDown{}
	}
}

func (w *world) plan(t *testing.T, d *datadriven.TestData, at int64) string {
	in := HarepInput{Now: time.Unix(worldStart+at, 0), Skip: map[string]bool{}, Reason: "scenario"}
	fences := map[string]FenceState{}
	var asked []string
	for _, a := range d.CmdArgs {
		if a.Key == "delay" {
			in.JobDelay, _ = strconv.ParseFloat(a.Vals[0], 64)
		}
	}
	for _, l := range strings.Split(d.Input, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), f[0]))
		switch f[0] {
		case "skip": // skip NODE
			w.read(func(s *fsm.State) { in.Skip[s.LookupNode(f[1]).UUID] = true })
		case "no-new": // no-new REASON
			in.NoNewRepairs = rest
		case "fence": // fence NODE job N | fence NODE round K | fence NODE blocked REASON
			var fs FenceState
			switch f[2] {
			case "job":
				fs.Job, _ = strconv.ParseInt(f[3], 10, 64)
			case "round":
				k, _ := strconv.Atoi(f[3])
				fs.Job = fsm.RoundJob(k)
			case "blocked":
				fs.Blocked = strings.Join(f[3:], " ")
			}
			w.read(func(s *fsm.State) { fences[s.LookupNode(f[1]).UUID] = fs })
		default:
			t.Fatalf("%s: unknown plan option %q", d.Pos, f[0])
		}
	}
	var out strings.Builder
	w.read(func(s *fsm.State) {
		in.State = s
		in.Down = down(s, in.Now)
		first := true
		in.Fence = func(u string) FenceState {
			if first {
				asked = append(asked, s.NodeName(u))
			}
			if f, ok := fences[u]; ok {
				return f
			}
			return FenceState{Blocked: "no fencing configured in the scenario"}
		}
		w.last = PlanHarep(in)
		first = false
		again := PlanHarep(in)
		if !reflect.DeepEqual(w.last, again) {
			t.Fatalf("%s: two passes over the same input differ", d.Pos)
		}
		checkPlan(t, d, s, w.last)
		var show map[string]bool
		for _, a := range d.CmdArgs {
			if a.Key == "show" {
				show = map[string]bool{}
				for _, v := range a.Vals {
					show[v] = true
				}
			}
		}
		w.printPlan(&out, w.last, show)
	})
	if len(asked) > 0 {
		fmt.Fprintf(&out, "fencing asked for %v\n", asked)
	}
	return w.alias(out.String())
}

// checkPlan checks what every plan must satisfy: opcodes fsm accepts,
// valid tags that fit with their job ids, one edit per object.
func checkPlan(t *testing.T, d *datadriven.TestData, s *fsm.State, p HarepPlan) {
	seen := map[string]bool{}
	for _, e := range p.Tags {
		key := e.Kind + "/" + e.Name
		if seen[key] {
			t.Errorf("%s: two tag edits for %s", d.Pos, key)
		}
		seen[key] = true
		for _, a := range e.Add {
			if err := fsm.ValidateTag(a.Text); err != nil {
				t.Errorf("%s: %v", d.Pos, err)
			}
		}
	}
	for _, r := range p.Repairs {
		if err := fsm.ValidateTag(r.Pending + strings.Repeat("9", maxJobIDDigits)); err != nil {
			t.Errorf("%s: pending tag with a job id: %v", d.Pos, err)
		}
		if tag, ok, err := ParseTag(r.Pending); !ok || err != nil || tag.Kind != TagPending || tag.ID != r.ID || tag.Type != r.Type {
			t.Errorf("%s: pending tag %s does not name repair %s (%v)", d.Pos, r.Pending, r.ID, err)
		}
		for _, op := range r.Ops {
			parsed, err := fsm.ParseOpcode(op)
			if err != nil {
				t.Errorf("%s: opcode %s refused: %v", d.Pos, op, err)
				continue
			}
			c := parsed.Common()
			if c.Comment == nil || len(c.Reason) != 1 || c.Reason[0].Source != HarepReasonSource {
				t.Errorf("%s: opcode %s lacks harep's comment or reason", d.Pos, op)
			}
		}
	}
}

var derivedRe = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`)

// alias replaces derived repair ids by short names (R1, R2...) in the
// order they first appear in the file.
func (w *world) alias(s string) string {
	return derivedRe.ReplaceAllStringFunc(s, func(id string) string {
		a, ok := w.ids[id]
		if !ok {
			a = fmt.Sprintf("R%d", len(w.ids)+1)
			w.ids[id] = a
		}
		return a
	})
}

var (
	aliasRe   = regexp.MustCompile(`:R[0-9]+:`)
	jobNameRe = regexp.MustCompile(`\{[a-z0-9-]+\}`)
)

// unalias puts the ids back in a tag written with an alias, and the job
// ids for job names.
func (w *world) unalias(tag string) string {
	tag = jobNameRe.ReplaceAllStringFunc(tag, func(n string) string {
		return strconv.FormatInt(w.jobs[n[1:len(n)-1]], 10)
	})
	return aliasRe.ReplaceAllStringFunc(tag, func(a string) string {
		for id, al := range w.ids {
			if ":"+al+":" == a {
				return ":" + id + ":"
			}
		}
		return a
	})
}

// printPlan shows a plan; with show, only what concerns those instances.
func (w *world) printPlan(b *strings.Builder, p HarepPlan, show map[string]bool) {
	for _, st := range p.Instances {
		if show != nil && !show[st.Name] {
			continue
		}
		fmt.Fprintf(b, "%s: %s", st.Name, st.State)
		for _, kv := range [][2]string{{"allowed", st.Allowed}, {"needed", st.Needed}, {"repair", st.Repair}} {
			if kv[1] != "" {
				fmt.Fprintf(b, " %s=%s", kv[0], kv[1])
			}
		}
		if len(st.Jobs) > 0 {
			fmt.Fprintf(b, " jobs=%s", fsm.JoinJobs(st.Jobs))
		}
		b.WriteString("\n")
		if st.Why != "" {
			fmt.Fprintf(b, "  why: %s\n", st.Why)
		}
		for _, pr := range st.Problems {
			fmt.Fprintf(b, "  problem: %s\n", pr)
		}
	}
	for _, e := range p.Tags {
		if show != nil && !(e.Kind == fsm.TagInstance && show[e.Name]) {
			continue
		}
		fmt.Fprintf(b, "edit %s %s\n", e.Kind, e.Name)
		for _, r := range e.Remove {
			fmt.Fprintf(b, "  - %s\n", r)
		}
		for _, a := range e.Add {
			fmt.Fprintf(b, "  + %s\n", a.Text)
		}
	}
	for _, r := range p.Repairs {
		if show != nil && !show[r.Instance] {
			continue
		}
		fmt.Fprintf(b, "repair %s %s %s", r.Instance, r.Type, r.ID)
		if r.FenceJob != 0 {
			fmt.Fprintf(b, " after-fence=%s", refString(r.FenceJob))
		}
		b.WriteString("\n")
		fmt.Fprintf(b, "  + %s<jobs>\n", r.Pending)
		for _, t := range r.RemoveTags {
			fmt.Fprintf(b, "  - %s\n", t)
		}
		for _, op := range r.Ops {
			fmt.Fprintf(b, "  op %s\n", summarizeOp(op))
		}
	}
}

// summarizeOp shows an opcode without its instance name, comment and
// reason (checked by checkPlan).
func summarizeOp(raw json.RawMessage) string {
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	id := m["OP_ID"]
	for _, k := range []string{"OP_ID", "instance_name", "comment", "reason"} {
		delete(m, k)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		v, _ := json.Marshal(m[k])
		parts = append(parts, k+"="+string(v))
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s", id, strings.Join(parts, " ")))
}

// applyPlan commits the last plan as a round would: its repairs' jobs,
// each repair's pending tag naming its job, and the tag edits, in one
// RepairRound.
func (w *world) applyPlan(t *testing.T, d *datadriven.TestData) string {
	rr := fsm.RepairRound{Now: w.now, Epoch: w.epoch}
	rr.Tags = append(rr.Tags, w.last.Tags...)
	for k, r := range w.last.Repairs {
		ops := r.Ops
		if r.FenceJob != 0 {
			if r.FenceJob < 0 {
				t.Fatalf("%s: the scenario round cannot submit fencing jobs", d.Pos)
			}
			ops = append([]json.RawMessage(nil), r.Ops...)
			var m map[string]any
			_ = json.Unmarshal(ops[0], &m)
			m["depends"] = []any{[]any{r.FenceJob, []string{fsm.StatusSuccess}}}
			ops[0], _ = json.Marshal(m)
		}
		rr.Jobs = append(rr.Jobs, fsm.JobSpec{Ops: ops, UUIDs: make([]string, len(ops))})
		rr.Tags = append(rr.Tags, fsm.TagEdit{Kind: fsm.TagInstance, Name: r.Instance, Remove: r.RemoveTags,
			Add: []fsm.TagText{{Text: r.Pending, Jobs: []fsm.JobRef{fsm.RoundJob(k)}}}})
	}
	r := w.apply(rr)
	if r.Err != nil {
		return "error: " + r.Err.Msg
	}
	if len(r.JobIDs) == 0 {
		return "ok"
	}
	return fmt.Sprintf("jobs %s", fsm.JoinJobs(r.JobIDs))
}

// tags lists the autorepair tags of every object.
func (w *world) tags() string {
	var b strings.Builder
	show := func(what string, tags []string) {
		for _, t := range tags {
			if strings.HasPrefix(t, AutorepairPrefix) {
				fmt.Fprintf(&b, "%s %s\n", what, strings.TrimPrefix(t, AutorepairPrefix))
			}
		}
	}
	w.read(func(s *fsm.State) {
		show("cluster", s.Cluster.Tags)
		for _, g := range s.SortedGroups() {
			show("group "+g.Name, g.Tags)
		}
		for _, i := range s.SortedInstances() {
			show("instance "+i.Name, i.Tags)
		}
	})
	if b.Len() == 0 {
		return "no autorepair tags"
	}
	return b.String()
}

func TestHarepScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/harep", func(t *testing.T, path string) {
		w := newWorld()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return w.run(t, d) })
	})
}
