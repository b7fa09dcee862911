package repair

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
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
	nodes int               // nodes added, for their addresses
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
		for _, f := range lines(d.Input) {
			w.nodes++
			op := map[string]any{"OP_ID": "OP_NODE_ADD", "node_name": f[0], "primary_ip": fmt.Sprintf("10.0.%d.%d", w.nodes/250, w.nodes%250+1)}
			op["group"] = "default"
			if len(f) > 1 {
				op["group"] = f[1]
			}
			w.submit(t, d, op)
		}
		return "ok"
	case "node":
		// node NAME offline|drained|online, or node NAME
		// dead|suspect|alive since=S (gossip's view since S).
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
		res := json.RawMessage("null")
		if st == fsm.StatusError {
			// What the status quotes of a failed job.
			res = json.RawMessage(`"cannot choose a new secondary with the allocator (hail): no node has enough free memory"`)
		}
		w.must(t, d, fsm.JobUpdate{Now: w.now, Epoch: w.epoch, JobID: id, OpIndex: op, Action: action, Status: st, Result: res})
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

// TestHarepOpcodes checks the opcodes of each repair type field by field:
// Ganeti's harep parameters, the comment and the reason trail.
func TestHarepOpcodes(t *testing.T) {
	now := time.Unix(worldStart, 5)
	p := &planner{in: HarepInput{JobDelay: 10, Reason: "because"}, nowNS: now.UnixNano()}
	p.tmpl = p.opTemplates()
	inst := &fsm.Instance{Name: "web1"}
	reason := fmt.Sprintf(`"reason":[["harep","because",%d]]`, now.UnixNano())
	common := `"OP_ID":"%s","comment":"automated repairs by harep (gnt)",` + reason
	delay := fmt.Sprintf(`{`+common+`,"duration":10,"on_master":true}`, "OP_TEST_DELAY")
	for typ, want := range map[string][]string{
		TypeFailover: {delay, fmt.Sprintf(`{`+common+`,"instance_name":"web1","shutdown_timeout":120}`, "OP_INSTANCE_FAILOVER")},
		TypeFixStorage: {delay, fmt.Sprintf(`{`+common+`,"instance_name":"web1","mode":"replace_new_secondary","iallocator":"hail"}`,
			"OP_INSTANCE_REPLACE_DISKS")},
		TypeReinstall: {delay, fmt.Sprintf(`{`+common+`,"instance_name":"web1","iallocator":"hail"}`, "OP_INSTANCE_RECREATE_DISKS"),
			fmt.Sprintf(`{`+common+`,"instance_name":"web1"}`, "OP_INSTANCE_REINSTALL")},
	} {
		ops := p.ops(inst, typ)
		if len(ops) != len(want) {
			t.Fatalf("%s: %d opcodes, want %d", typ, len(ops), len(want))
		}
		for i, op := range ops {
			if string(op) != want[i] {
				t.Errorf("%s op %d:\n got %s\nwant %s", typ, i, op, want[i])
			}
			if _, err := fsm.ParseOpcode(op); err != nil {
				t.Errorf("%s op %d refused: %v", typ, i, err)
			}
		}
	}
}

func TestDerivedID(t *testing.T) {
	a := derivedID("inst", "repair", TypeFailover, 1)
	if !derivedRe.MatchString(a) || len(a) != 36 {
		t.Fatalf("derived id %q is not a version-8 UUID", a)
	}
	for _, b := range []string{
		derivedID("inst2", "repair", TypeFailover, 1),
		derivedID("inst", "enoperm", TypeFailover, 1),
		derivedID("inst", "repair", TypeReinstall, 1),
		derivedID("inst", "repair", TypeFailover, 2),
	} {
		if a == b {
			t.Errorf("different inputs give the same id %s", a)
		}
	}
	if derivedID("inst", "repair", TypeFailover, 1) != a {
		t.Error("the same inputs give different ids")
	}
}

// benchCluster builds, through the FSM, a cluster of 1000 nodes in 10
// groups and 20000 instances (half drbd, the rest plain, a few
// diskless), with 50 nodes down (30 offline, 10 drained, 10 dead) and a
// tag mix: enable tags on the cluster and some groups and instances,
// suspensions (one expired), old results, enoperm results, pending
// repairs with running or finished jobs, failures, malformed tags.
func benchCluster(tb testing.TB) (*fsm.FSM, uint64) {
	f := fsm.New()
	var index uint64
	now := int64(worldStart) * 1e9
	apply := func(c fsm.Command) fsm.Response {
		data, err := fsm.Encode(c)
		if err != nil {
			tb.Fatal(err)
		}
		index++
		r := f.Apply(index, data).(fsm.Response)
		if r.Err != nil {
			tb.Fatalf("%s: %s", c.CommandType(), r.Err.Msg)
		}
		return r
	}
	submit := func(ops []map[string]any) fsm.Response {
		js := fsm.JobSubmit{Now: now}
		for _, op := range ops {
			b, _ := json.Marshal(op)
			js.Ops = append(js.Ops, b)
			js.UUIDs = append(js.UUIDs, fmt.Sprintf("u-%d-%d", index, len(js.UUIDs)))
		}
		return apply(js)
	}
	apply(fsm.ClusterInit{Now: now, Name: "bench", UUID: "cluster", GroupUUID: "g-default",
		Node: fsm.NodeSpec{Name: "node0000", UUID: "node-0000", PrimaryIP: "10.0.0.1"}})
	epoch := apply(fsm.LeaderEstablish{Now: now, Node: "node0000"}).Epoch
	var ops []map[string]any
	for g := 1; g < 10; g++ {
		ops = append(ops, map[string]any{"OP_ID": "OP_GROUP_ADD", "group_name": fmt.Sprintf("g%d", g)})
	}
	submit(ops)
	ops = nil
	for n := 1; n < 1000; n++ {
		g := "default"
		if n%10 != 0 {
			g = fmt.Sprintf("g%d", n%10)
		}
		ops = append(ops, map[string]any{"OP_ID": "OP_NODE_ADD", "node_name": fmt.Sprintf("node%04d", n),
			"primary_ip": fmt.Sprintf("10.1.%d.%d", n/200, n%200+1), "group": g})
	}
	submit(ops)
	var nodes []*fsm.Node
	f.Read(func(s *fsm.State, _ uint64) { nodes = s.SortedNodes() })
	nodeInGroup := map[string][]*fsm.Node{}
	for _, n := range nodes {
		nodeInGroup[n.Group] = append(nodeInGroup[n.Group], n)
	}

	// Instances: each one's nodes in one group.
	var changes []fsm.StepChange
	groups := sortedKeysOf(nodeInGroup)
	for i := 0; i < 20000; i++ {
		g := groups[i%len(groups)]
		gn := nodeInGroup[g]
		p := gn[(i*7)%len(gn)]
		in := fsm.Instance{Name: fmt.Sprintf("inst%05d", i), UUID: fmt.Sprintf("inst-%05d", i), PrimaryNode: p.UUID,
			SecondaryNodes: []string{}, AdminState: fsm.AdminUp}
		switch {
		case i%2 == 0:
			in.DiskTemplate = fsm.DTDrbd
			in.SecondaryNodes = []string{gn[(i*7+1+i%5)%len(gn)].UUID}
		case i%50 == 1:
			in.DiskTemplate = fsm.DTDiskless
		default:
			in.DiskTemplate = fsm.DTPlain
		}
		changes = append(changes, fsm.StepChange{InstancePut: &fsm.InstancePut{Instance: in}})
	}
	// In chunks: a transaction looks staged records up one by one.
	for len(changes) > 0 {
		n := min(len(changes), 200)
		id := apply(fsm.JobSubmit{Now: now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)}, UUIDs: []string{""}}).JobID
		apply(fsm.JobUpdate{Now: now, Epoch: epoch, JobID: id, Action: fsm.ActionFinish, Status: fsm.StatusSuccess,
			Result: json.RawMessage("null"), StepName: "put", Changes: changes[:n]})
		changes = changes[n:]
	}

	// Jobs for pending repairs: 100 running, 100 finished.
	job := func() int64 {
		return apply(fsm.JobSubmit{Now: now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)}, UUIDs: []string{""}}).JobID
	}
	var running, done []int64
	for k := 0; k < 100; k++ {
		r := job()
		apply(fsm.JobUpdate{Now: now, Epoch: epoch, JobID: r, Action: fsm.ActionStart})
		running = append(running, r)
		d := job()
		apply(fsm.JobUpdate{Now: now, Epoch: epoch, JobID: d, Action: fsm.ActionFinish, Status: fsm.StatusSuccess, Result: json.RawMessage("null")})
		done = append(done, d)
	}

	// Tags.
	t0 := int64(worldStart)
	ops = []map[string]any{
		{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": []string{AutorepairPrefix + TypeFailover, AutorepairPrefix + "bogus"}},
		{"OP_ID": "OP_TAGS_SET", "kind": "nodegroup", "name": "g1", "tags": []string{AutorepairPrefix + TypeReinstall}},
		{"OP_ID": "OP_TAGS_SET", "kind": "nodegroup", "name": "g2", "tags": []string{fmt.Sprintf("%ssuspend:%d", AutorepairPrefix, t0+3600)}},
		{"OP_ID": "OP_TAGS_SET", "kind": "nodegroup", "name": "g3", "tags": []string{fmt.Sprintf("%ssuspend:%d", AutorepairPrefix, t0-3600)}},
		{"OP_ID": "OP_TAGS_SET", "kind": "nodegroup", "name": "g4", "tags": []string{AutorepairPrefix + TypeFixStorage}},
	}
	for i := 0; i < 20000; i++ {
		name := fmt.Sprintf("inst%05d", i)
		tags := []string{"owner:team" + strconv.Itoa(i%17)}
		u := fmt.Sprintf("0000%04d-0000-8000-8000-%012d", i%10000, i)
		switch {
		case i%20 == 3:
			tags = append(tags, AutorepairPrefix+TypeReinstall)
		case i%100 == 7:
			tags = append(tags, AutorepairPrefix+"suspend")
		case i%10 == 5:
			tags = append(tags, ResultTag(TypeFailover, u, t0-86400, ResultSuccess, []int64{done[i%100]}))
		case i%50 == 9:
			tags = append(tags, ResultTag(TypeReinstall, u, t0-86400, ResultEnoperm, nil))
		case i%200 == 11:
			tags = append(tags, PendingTag(TypeFailover, u, t0-600)+strconv.FormatInt(running[i/200%100], 10))
		case i%200 == 13:
			tags = append(tags, PendingTag(TypeFixStorage, u, t0-600)+strconv.FormatInt(done[i/200%100], 10))
		case i%500 == 17:
			tags = append(tags, ResultTag(TypeFailover, u, t0-600, ResultFailure, []int64{done[0]}))
		case i%1000 == 19:
			tags = append(tags, AutorepairPrefix+"pending:failover:broken")
		}
		ops = append(ops, map[string]any{"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": name, "tags": tags})
		if len(ops) == 200 {
			submit(ops)
			ops = nil
		}
	}
	submit(ops)

	// 50 nodes down: 30 offline, 10 drained, 10 dead for 10 minutes.
	ops = nil
	live := fsm.NodeLiveness{Now: now, Epoch: epoch}
	for k := 0; k < 50; k++ {
		n := nodes[100+k*17]
		switch {
		case k < 30:
			ops = append(ops, map[string]any{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": n.Name, "offline": true})
		case k < 40:
			ops = append(ops, map[string]any{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": n.Name, "drained": true})
		default:
			live.Changes = append(live.Changes, fsm.LivenessChange{Node: n.Name, State: fsm.LivenessDead, Since: now - 600e9})
		}
	}
	submit(ops)
	apply(live)
	return f, epoch
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// benchFSM is benchCluster's state, built once per test binary (the
// benchmark function runs several times).
var (
	benchOnce sync.Once
	benchFSM  *fsm.FSM
)

// BenchmarkPlanHarep plans a pass over benchCluster. The project's
// target is a whole maintd round under 50 ms for that state, harep
// included.
func BenchmarkPlanHarep(b *testing.B) {
	benchOnce.Do(func() { benchFSM, _ = benchCluster(b) })
	f := benchFSM
	now := time.Unix(worldStart, 0)
	f.Read(func(s *fsm.State, _ uint64) {
		fence := func(string) FenceState { return FenceState{Job: fsm.RoundJob(0)} }
		in := HarepInput{State: s, Now: now, Down: down(s, now), Fence: fence, Skip: map[string]bool{}, JobDelay: 10, Reason: "bench"}
		p := PlanHarep(in)
		counts := map[string]int{}
		for _, st := range p.Instances {
			counts[st.State]++
		}
		b.Logf("%d instances %v, %d tag edits, %d repairs", len(p.Instances), counts, len(p.Tags), len(p.Repairs))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			PlanHarep(in)
		}
	})
}
