package repair

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/gnt-cluster/gnt/fsm"
)

// The maintd scenarios (testdata/maintd/*.txt) build a state as a
// snapshot a real FSM restores, plan rounds at given times, and apply the
// plans through the FSM as the leader would (fsm.RepairRound). Changes of
// the world between rounds (a job ends, a node dies) edit the FSM's own
// snapshot records and restore them.
//
// Commands:
//
//	state                  input: lines "cluster k=v...", "node NAME k=v...",
//	                       "instance NAME TEMPLATE PRIMARY [SECONDARY] k=v..."
//	                       (down, forthcoming, mem=MiB, vcpus=N, tags=a,b),
//	                       "job ID STATUS", "maint {json}"
//	diagnose               input: lines "NODE {json}" (replaces all)
//	plan now=S [noquorum=TEXT] [full] [service]
//	                       service: what the Service records (a round
//	                       whose jobs are not due is planned with HoldJobs)
//	cancel node=NAME now=S an operator cancels the node's incident
//	apply                  applies the last plan
//	job id=N status=S [end=S] [error=TEXT]  a job's (and its opcodes')
//	                       status changes; end sets when it ended, error
//	                       the opcodes' error result
//	node NAME k=v...       a node changes (offline, drained, liveness, since, tags,
//	                       candidate, mcap); "cluster" takes pool= and voters=
//	instance NAME k=v...   an instance changes (primary, secondary, tags)
//	show                   the maintenance state and the tags

// baseTime is time 0 of the scenarios (seconds are relative to it).
const baseTime = 1_700_000_000

func at(sec int64) time.Time { return time.Unix(baseTime+sec, 0) }

type scenario struct {
	f    *fsm.FSM
	obs  map[string]Observation
	last *RoundPlan
	idx  uint64
}

// records returns the FSM's snapshot as records.
func (sc *scenario) records(t testing.TB) (header json.RawMessage, recs []map[string]any) {
	data, err := sc.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(nil, 1<<26)
	first := true
	for s.Scan() {
		if first {
			header = append(json.RawMessage(nil), s.Bytes()...)
			first = false
			continue
		}
		var r map[string]any
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return header, recs
}

func (sc *scenario) restore(t testing.TB, header json.RawMessage, recs []map[string]any) {
	var buf bytes.Buffer
	buf.Write(header)
	buf.WriteByte('\n')
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	f := fsm.New()
	if err := f.Restore(&buf); err != nil {
		t.Fatalf("restore: %v", err)
	}
	sc.f = f
	sc.idx = f.Index()
}

// edit changes the value of every record of type typ for which match
// returns true.
func (sc *scenario) edit(t *testing.T, typ string, match func(v map[string]any) bool, change func(v map[string]any)) {
	h, recs := sc.records(t)
	n := 0
	for _, r := range recs {
		if r["t"] != typ {
			continue
		}
		v := r["v"].(map[string]any)
		if match(v) {
			change(v)
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no %s record matched", typ)
	}
	sc.restore(t, h, recs)
}

func kv(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		} else {
			m[f] = "true"
		}
	}
	return m
}

func list(s string) []string {
	if s == "" {
		return []string{}
	}
	out := strings.Split(s, ",")
	sort.Strings(out)
	return out
}

func secsArg(t testing.TB, s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q is not a number of seconds", s)
	}
	return v
}

// applyNode sets node fields from k=v pairs.
func applyNode(t testing.TB, n map[string]any, a map[string]string) {
	for k, v := range a {
		switch k {
		case "offline", "drained", "powered":
			n[k] = v == "true"
		case "dead", "suspect", "alive":
			n["liveness"] = k
			n["liveness_since"] = (baseTime + secsArg(t, v)) * 1e9
		case "tags":
			n["tags"] = list(v)
		case "candidate":
			n["master_candidate"] = v == "true"
		case "mcap":
			n["master_capable"] = v == "true"
		case "oob":
			n["ndparams"] = map[string]any{"oob_program": v}
		case "hv":
			n["hypervisor"] = v
		case "nodrbd":
			n["storage"] = map[string]any{"no_drbd": fmt.Sprintf("node %v has no DRBD", n["name"])}
		default:
			t.Fatalf("unknown node field %q", k)
		}
	}
}

func (sc *scenario) build(t testing.TB, input string) {
	cluster := map[string]any{"name": "cluster", "uuid": "uuid-cluster", "serial_no": 1, "ctime": baseTime, "mtime": baseTime,
		"candidate_pool_size": 10, "max_raft_voters": 5, "default_iallocator": "hail", "ndparams": map[string]any{}, "tags": []string{},
		"master_node": "uuid-node1"}
	var nodes, insts []map[string]any
	var jobs []map[string]any
	maint := map[string]any{}
	next := int64(1)
	for _, l := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "cluster":
			for k, v := range kv(f[1:]) {
				switch k {
				case "tags":
					cluster["tags"] = list(v)
				case "oob":
					cluster["ndparams"] = map[string]any{"oob_program": v}
				case "pool":
					cluster["candidate_pool_size"] = secsArg(t, v)
				case "voters":
					cluster["max_raft_voters"] = secsArg(t, v)
				default:
					t.Fatalf("unknown cluster field %q", k)
				}
			}
		case "node":
			n := map[string]any{"name": f[1], "uuid": "uuid-" + f[1], "group": "uuid-group", "primary_ip": fmt.Sprintf("192.0.2.%d", len(nodes)+1),
				"secondary_ip": "", "master_candidate": false, "master_capable": true, "vm_capable": true, "offline": false, "drained": false,
				"powered": true, "ndparams": map[string]any{}, "tags": []string{}, "serial_no": 1, "ctime": baseTime, "mtime": baseTime,
				"resources": map[string]any{"memory_mib": 65536, "disk_mib": 1 << 20, "cpus": 16}, "addrs": map[string]any{},
				"liveness": "alive", "liveness_since": int64(baseTime) * 1e9}
			applyNode(t, n, kv(f[2:]))
			nodes = append(nodes, n)
		case "instance":
			if len(f) < 4 {
				t.Fatalf("instance NAME TEMPLATE PRIMARY [SECONDARY] k=v...: %q", l)
			}
			rest := f[4:]
			sec := []string{}
			if len(rest) > 0 && !strings.Contains(rest[0], "=") && rest[0] != "down" && rest[0] != "forthcoming" {
				sec = []string{"uuid-" + rest[0]}
				rest = rest[1:]
			}
			a := kv(rest)
			admin := "up"
			if a["down"] == "true" {
				admin = "down"
			}
			in := map[string]any{"name": f[1], "uuid": "uuid-" + f[1], "forthcoming": false, "primary_node": "uuid-" + f[3],
				"secondary_nodes": sec, "disk_template": f[2], "disks": []any{}, "nics": []any{}, "memory": 1024, "vcpus": 1,
				"os": "debian", "admin_state": admin, "tags": list(a["tags"]), "serial_no": 1, "ctime": baseTime, "mtime": baseTime}
			if f[2] != "diskless" {
				in["disks"] = []any{map[string]any{"uuid": "disk-" + f[1], "size": 1024, "mode": "rw"}}
			}
			if a["forthcoming"] == "true" {
				in["forthcoming"], in["admin_state"] = true, "down"
			}
			if m := a["mem"]; m != "" {
				in["memory"] = secsArg(t, m)
			}
			if d := a["disk"]; d != "" && f[2] != "diskless" {
				in["disks"] = []any{map[string]any{"uuid": "disk-" + f[1], "size": secsArg(t, d), "mode": "rw"}}
			}
			if v := a["vcpus"]; v != "" {
				in["vcpus"] = secsArg(t, v)
			}
			if a["auto_balance"] == "false" {
				in["beparams"] = map[string]any{"auto_balance": false}
			}
			insts = append(insts, in)
		case "job":
			id, _ := strconv.ParseInt(f[1], 10, 64)
			jobs = append(jobs, fakeJob(id, f[2]))
			if id >= next {
				next = id + 1
			}
		case "maint":
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(l, "maint"))), &maint); err != nil {
				t.Fatalf("maint: %v", err)
			}
		default:
			t.Fatalf("unknown state line %q", l)
		}
	}
	header := json.RawMessage(`{"format":"gnt-fsm","version":3,"index":100}`)
	var recs []map[string]any
	add := func(typ string, v any) {
		b, _ := json.Marshal(v)
		var m any
		_ = json.Unmarshal(b, &m)
		recs = append(recs, map[string]any{"t": typ, "v": m})
	}
	add("cluster", cluster)
	add("group", map[string]any{"name": "default", "uuid": "uuid-group", "alloc_policy": "preferred", "ndparams": map[string]any{}, "tags": []string{}, "serial_no": 1})
	for _, n := range nodes {
		add("node", n)
	}
	for _, i := range insts {
		add("instance", i)
	}
	for _, j := range jobs {
		add("job", j)
	}
	if len(maint) > 0 {
		m := fsm.DefaultMaintenance()
		b, _ := json.Marshal(maint)
		if err := json.Unmarshal(b, m); err != nil {
			t.Fatalf("maint: %v", err)
		}
		add("maintenance", m)
	}
	add("queue", map[string]any{"next_job_id": next, "epoch": 1, "finished": []int64{}})
	sc.restore(t, header, recs)
}

// fakeJob is a job record with one OP_TEST_DELAY opcode in a status.
func fakeJob(id int64, status string) map[string]any {
	return map[string]any{"id": id, "status": status, "ops": []any{map[string]any{
		"input": map[string]any{"OP_ID": "OP_TEST_DELAY", "duration": 0}, "status": status, "priority": 0, "log": []any{},
		"result": nil, "start_timestamp": nil, "exec_timestamp": nil, "end_timestamp": nil, "gnt_uuid": fmt.Sprintf("op-%d", id),
	}}, "summary": []string{"TEST_DELAY"}, "received_timestamp": []int64{baseTime, 0}, "start_timestamp": nil,
		"end_timestamp": nil, "executor": true, "log_serial": 0}
}

func shortRef(s string) string {
	if len(s) > 8 && strings.Count(s, "-") == 4 {
		return s[:8]
	}
	return s
}

// shortIDs shortens the derived UUIDs in a text so outputs stay readable.
func shortIDs(s string) string {
	out := s
	for {
		i := findUUID(out)
		if i < 0 {
			return out
		}
		out = out[:i+8] + out[i+36:]
	}
}

// findUUID returns the index of the first UUID-formatted word, or -1.
func findUUID(s string) int {
	isHex := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }
	for i := 0; i+36 <= len(s); i++ {
		ok := true
		for k := 0; k < 36 && ok; k++ {
			c := s[i+k]
			switch k {
			case 8, 13, 18, 23:
				ok = c == '-'
			default:
				ok = isHex(c)
			}
		}
		if ok && (i == 0 || !isHex(s[i-1]) && s[i-1] != '-') {
			return i
		}
	}
	return -1
}

func opSummary(raw json.RawMessage) string {
	var o map[string]any
	_ = json.Unmarshal(raw, &o)
	s := fmt.Sprint(o["OP_ID"])
	var args []string
	for _, k := range []string{"instance_name", "node_name", "node_names", "command", "mode", "iallocator", "target_node", "drained", "master_candidate", "auto_promote", "duration", "depends"} {
		if v, ok := o[k]; ok {
			b, _ := json.Marshal(v)
			args = append(args, k+"="+string(b))
		}
	}
	if r, ok := o["reason"].([]any); ok && len(r) > 0 {
		if e, ok := r[0].([]any); ok && len(e) == 3 {
			args = append(args, fmt.Sprintf("reason=%v", e[0]))
		}
	}
	return s + "(" + strings.Join(args, " ") + ")"
}

func printPlan(p *RoundPlan, full bool) string {
	var b strings.Builder
	if p.NoQuorum != "" {
		fmt.Fprintf(&b, "no quorum: %s\n", p.NoQuorum)
	}
	br := p.Breaker
	state := "closed"
	if br.Open {
		state = "open"
	} else if br.Overridden {
		state = "overridden"
	}
	fmt.Fprintf(&b, "breaker %s: %d/%d unhealthy %v, limit %d\n", state, len(br.Unhealthy), br.Nodes, br.Unhealthy, br.Limit)
	if len(p.Waiting) > 0 {
		fmt.Fprintf(&b, "waiting %v\n", p.Waiting)
	}
	if p.Urgent {
		b.WriteString("urgent\n")
	}
	for _, n := range p.Nodes {
		if n.Why != "" || n.Incident != "" || full {
			fmt.Fprintf(&b, "node %s: down=%q incident=%s %s why=%q\n", n.Name, n.Down, shortRef(n.Incident), n.Action, n.Why)
		}
	}
	for _, in := range p.Instances {
		if in.State != StateHealthy || in.Why != "" || full {
			fmt.Fprintf(&b, "instance %s: %s allowed=%s needed=%s why=%q\n", in.Name, in.State, in.Allowed, in.Needed, in.Why)
		}
	}
	c := &p.Command
	for k, j := range c.Jobs {
		ops := make([]string, len(j.Ops))
		for i, op := range j.Ops {
			ops[i] = opSummary(op)
		}
		fmt.Fprintf(&b, "job %d: %s\n", fsm.RoundJob(k), strings.Join(ops, ", "))
	}
	for _, e := range c.Tags {
		for _, a := range e.Add {
			fmt.Fprintf(&b, "tag %s %s + %s", e.Kind, e.Name, a.Text)
			if len(a.Jobs) > 0 || a.WithJobs {
				fmt.Fprintf(&b, "%v", a.Jobs)
			}
			b.WriteString("\n")
		}
		for _, r := range e.Remove {
			fmt.Fprintf(&b, "tag %s %s - %s\n", e.Kind, e.Name, r)
		}
	}
	for _, e := range c.Incidents {
		switch {
		case e.New != nil:
			fmt.Fprintf(&b, "incident new %s node=%s action=%s status=%s why=%q\n", e.New.UUID, e.New.Node, e.New.Action, e.New.RepairStatus, e.New.Reason)
		case e.Forget:
			fmt.Fprintf(&b, "incident forget %s\n", e.UUID)
		default:
			why := ""
			if e.Reason != nil {
				why = *e.Reason
			}
			fmt.Fprintf(&b, "incident %s status=%s jobs+%v why=%q\n", e.UUID, e.Status, e.AddJobs, why)
		}
	}
	for _, fe := range c.Fences {
		fmt.Fprintf(&b, "fence %s job=%d\n", fe.NodeUUID, fe.Job)
	}
	if c.RoundJobs != nil {
		fmt.Fprintf(&b, "round-jobs %v\n", *c.RoundJobs)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return shortIDs(b.String())
}

func (sc *scenario) run(t *testing.T, d *datadriven.TestData) string {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, " ")
	}
	switch d.Cmd {
	case "state":
		sc.build(t, d.Input)
		sc.obs = map[string]Observation{}
		return "ok"
	case "diagnose":
		sc.obs = map[string]Observation{}
		for _, l := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			name, js, ok := strings.Cut(strings.TrimSpace(l), " ")
			if !ok {
				continue
			}
			var o struct {
				Status  string `json:"status"`
				Command string `json:"command"`
			}
			if err := json.Unmarshal([]byte(js), &o); err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			sc.obs[name] = Observation{Node: name, Status: o.Status, Command: o.Command, Original: json.RawMessage(js)}
		}
		return "ok"
	case "plan":
		now := at(secsArg(t, args["now"]))
		var p *RoundPlan
		held := ""
		sc.f.Read(func(st *fsm.State, _ uint64) {
			in := RoundInput{State: st, Now: now, Diagnose: sc.obs, NoQuorum: args["noquorum"]}
			p = PlanRound(in)
			again := PlanRound(in)
			a, _ := json.Marshal(p)
			b, _ := json.Marshal(again)
			if !bytes.Equal(a, b) {
				t.Fatalf("%s: PlanRound is not deterministic", d.Pos)
			}
			if _, svc := args["service"]; svc && !Due(st, p, now) {
				// What the Service records: the bookkeeping alone.
				in.HoldJobs = true
				p = PlanRound(in)
				held = fmt.Sprintf("held: %d job(s) not due; count-round=%v\n", len(again.Command.Jobs), p.Command.CountRound)
			}
		})
		sc.last = p
		_, full := args["full"]
		return held + printPlan(p, full)
	case "cancel":
		// An operator cancels the incident of a node.
		var id string
		sc.f.Read(func(st *fsm.State, _ uint64) {
			for _, in := range st.Maint().Incidents {
				if in.Node == args["node"] {
					id = in.UUID
				}
			}
		})
		data, err := fsm.Encode(fsm.MaintIncident{Now: at(secsArg(t, args["now"])).UnixNano(), UUID: id, Action: fsm.IncidentActionCancel})
		if err != nil {
			t.Fatal(err)
		}
		sc.idx++
		if r := sc.f.Apply(sc.idx, data).(fsm.Response); r.Err != nil {
			return "error: " + r.Err.Error()
		}
		return "ok"
	case "apply":
		if sc.last == nil || sc.last.Empty() {
			return "nothing to apply"
		}
		cmd := sc.last.Command
		cmd.Epoch = 1
		data, err := fsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		sc.idx++
		r := sc.f.Apply(sc.idx, data).(fsm.Response)
		if r.Err != nil {
			return "error: " + r.Err.Error()
		}
		return fmt.Sprintf("jobs %v", r.JobIDs)
	case "job":
		id := secsArg(t, args["id"])
		sc.edit(t, "job", func(v map[string]any) bool { return v["id"].(float64) == float64(id) }, func(v map[string]any) {
			v["status"] = args["status"]
			for _, op := range v["ops"].([]any) {
				op.(map[string]any)["status"] = args["status"]
				if e, ok := args["error"]; ok {
					// Ganeti's encoding of an opcode's failure.
					op.(map[string]any)["result"] = []any{"OpExecError", []any{e}}
				}
			}
			if e, ok := args["end"]; ok {
				v["end_timestamp"] = []int64{baseTime + secsArg(t, e), 0}
			}
		})
		return "ok"
	case "node":
		name := d.CmdArgs[0].Key
		sc.edit(t, "node", func(v map[string]any) bool { return v["name"] == name }, func(v map[string]any) {
			a := map[string]string{}
			for _, x := range d.CmdArgs[1:] {
				a[x.Key] = strings.Join(x.Vals, ",")
				if len(x.Vals) == 0 {
					a[x.Key] = "true"
				}
			}
			applyNode(t, v, a)
		})
		return "ok"
	case "instance":
		name := d.CmdArgs[0].Key
		sc.edit(t, "instance", func(v map[string]any) bool { return v["name"] == name }, func(v map[string]any) {
			for _, x := range d.CmdArgs[1:] {
				val := strings.Join(x.Vals, ",")
				switch x.Key {
				case "primary":
					v["primary_node"] = "uuid-" + val
				case "secondary":
					v["secondary_nodes"] = []string{"uuid-" + val}
				case "tags":
					v["tags"] = list(val)
				default:
					t.Fatalf("unknown instance field %q", x.Key)
				}
			}
		})
		return "ok"
	case "show":
		var b strings.Builder
		sc.f.Read(func(st *fsm.State, _ uint64) {
			m := st.Maint()
			fmt.Fprintf(&b, "round %d jobs %v evacuated %v\n", m.Round, m.Jobs, m.Evacuated)
			for _, in := range m.Incidents {
				fmt.Fprintf(&b, "incident %s node=%s action=%s status=%s jobs=%v tag=%s why=%q\n", in.UUID, in.Node, in.Action, in.RepairStatus, in.Jobs, in.Tag, in.Reason)
			}
			for _, u := range sortedFenceKeys(m.Fences) {
				fmt.Fprintf(&b, "fence %s job=%d\n", m.Fences[u].Node, m.Fences[u].JobID)
			}
			for _, n := range st.SortedNodes() {
				if len(n.Tags) > 0 {
					fmt.Fprintf(&b, "node %s tags %v\n", n.Name, n.Tags)
				}
			}
			for _, i := range st.SortedInstances() {
				if len(i.Tags) > 0 {
					fmt.Fprintf(&b, "instance %s tags %v\n", i.Name, i.Tags)
				}
			}
			for _, id := range st.SortedJobIDs() {
				j := st.Jobs[id]
				fmt.Fprintf(&b, "job %d %s %v\n", id, j.Status, j.Summary)
			}
		})
		return shortIDs(b.String())
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func sortedFenceKeys(m map[string]*fsm.Fence) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestMaintdScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/maintd", func(t *testing.T, path string) {
		sc := &scenario{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return sc.run(t, d) })
	})
}

// TestOversizedReportSpoilsOnlyItsNode: a self-diagnose report longer than
// an incident may keep would make the FSM refuse the whole round; the
// planner fails that node's incident at once (keeping the report's digest,
// so the same report is the same incident) and the other node's repair is
// recorded.
func TestOversizedReportSpoilsOnlyItsNode(t *testing.T) {
	sc := &scenario{}
	sc.build(t, "node node1\nnode node21\nnode node22")
	big := fmt.Sprintf(`{"details":%q,"status":"evacuate"}`, strings.Repeat("x", fsm.MaxIncidentOriginalBytes))
	sc.obs = map[string]Observation{
		"node21": {Node: "node21", Status: fsm.ActionEvacuate, Original: json.RawMessage(big)},
		"node22": {Node: "node22", Status: fsm.ActionLiveRepair, Command: "reseat", Original: json.RawMessage(`{"command":"reseat","status":"live-repair"}`)},
	}
	plan := func(sec int64) *RoundPlan {
		var p *RoundPlan
		sc.f.Read(func(st *fsm.State, _ uint64) { p = PlanRound(RoundInput{State: st, Now: at(sec), Diagnose: sc.obs}) })
		return p
	}
	apply := func(p *RoundPlan) fsm.Response {
		cmd := p.Command
		cmd.Epoch = 1
		data, err := fsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		sc.idx++
		return sc.f.Apply(sc.idx, data).(fsm.Response)
	}
	if r := apply(plan(10)); r.Err != nil || len(r.JobIDs) != 1 {
		t.Fatalf("round: jobs %v, error %v; want node22's repair job", r.JobIDs, r.Err)
	}
	var incs []fsm.Incident
	sc.f.Read(func(st *fsm.State, _ uint64) {
		for _, in := range st.Maint().Incidents {
			incs = append(incs, *in)
		}
	})
	if len(incs) != 2 {
		t.Fatalf("incidents: %+v, want one per node", incs)
	}
	for _, in := range incs {
		switch in.Node {
		case "node21":
			if in.RepairStatus != fsm.IncidentFailed || !strings.Contains(in.Reason, "bad self-diagnose report") ||
				len(in.Original) > fsm.MaxIncidentOriginalBytes || !strings.HasPrefix(in.Tag, fsm.MaintdFailedTagPrefix) {
				t.Errorf("node21's incident: %+v; want failed with its reason, a bounded original and the repairfailed tag", in)
			}
		case "node22":
			if in.RepairStatus != fsm.IncidentPending || len(in.Jobs) != 1 {
				t.Errorf("node22's incident: %+v; want pending with its job", in)
			}
		}
	}
	// The same oversized report again is the same incident: nothing new.
	p := plan(20)
	for _, e := range p.Command.Incidents {
		if e.New != nil {
			t.Errorf("second round notes a new incident for %s: %+v", e.New.Node, e.New)
		}
	}
}

// TestNodeWithoutTagRoomIsHeld: a node that already has as many tags as a
// node may have cannot take maintd's incident tag, and the state would
// refuse the whole round for it; the node is left alone, saying why, and
// the other node's repair is recorded.
func TestNodeWithoutTagRoomIsHeld(t *testing.T) {
	tags := make([]string, fsm.MaxTagsPerObj)
	for i := range tags {
		tags[i] = fmt.Sprintf("t%05d", i)
	}
	sc := &scenario{}
	sc.build(t, "node node1\nnode node22\nnode node23 tags="+strings.Join(tags, ","))
	obs := func(node string) Observation {
		return Observation{Node: node, Status: fsm.ActionLiveRepair, Command: "reseat", Original: json.RawMessage(`{"command":"reseat","status":"live-repair"}`)}
	}
	sc.obs = map[string]Observation{"node22": obs("node22"), "node23": obs("node23")}
	round := func(sec int64) (*RoundPlan, fsm.Response) {
		var p *RoundPlan
		sc.f.Read(func(st *fsm.State, _ uint64) { p = PlanRound(RoundInput{State: st, Now: at(sec), Diagnose: sc.obs}) })
		cmd := p.Command
		cmd.Epoch = 1
		data, err := fsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		sc.idx++
		return p, sc.f.Apply(sc.idx, data).(fsm.Response)
	}
	p, r := round(10)
	if r.Err != nil || len(r.JobIDs) != 1 {
		t.Fatalf("round: jobs %v, error %v; want node22's repair job", r.JobIDs, r.Err)
	}
	// The jobs end: the next round completes node22's incident and tags
	// node22 (node23, had it been acted on, would refuse this round).
	sc.edit(t, "job", func(map[string]any) bool { return true }, func(v map[string]any) {
		v["status"] = fsm.StatusSuccess
		for _, op := range v["ops"].([]any) {
			op.(map[string]any)["status"] = fsm.StatusSuccess
		}
	})
	if _, r := round(20); r.Err != nil {
		t.Fatalf("second round refused: %v", r.Err)
	}
	for _, ns := range p.Nodes {
		if ns.Name == "node23" && !strings.Contains(ns.Why, "remove some of its tags") {
			t.Errorf("node23's status says %q, want why it is left alone", ns.Why)
		}
	}
	sc.f.Read(func(st *fsm.State, _ uint64) {
		for _, in := range st.Maint().Incidents {
			if in.Node != "node22" || in.RepairStatus != fsm.IncidentCompleted {
				t.Errorf("incident on %s: %+v; want node22's alone, completed", in.Node, in)
			}
		}
	})
}

func TestFirstNames(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b", "c", "d", "e"}, "a, b, c, d, e"},
		{[]string{"a", "b", "c", "d", "e", "f", "g"}, "a, b, c, d, e and 2 more"},
	} {
		if got := FirstNames(c.in, 5); got != c.want {
			t.Errorf("FirstNames(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
