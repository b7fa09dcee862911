package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// harness drives an FSM from datadriven scripts with a fake clock and
// deterministic UUIDs.
type harness struct {
	f     *FSM
	index uint64
	now   int64
	start int64 // the fake clock's start, for relative times in scripts
	uuids int
}

func newHarness() *harness {
	const start = 1_700_000_000_000_000_000
	return &harness{f: New(), now: start, start: start}
}

func (h *harness) uuid() string {
	h.uuids++
	return fmt.Sprintf("00000000-0000-0000-0000-%012d", h.uuids)
}

// initCluster initialises cluster "c" with its first node, n1, at ip.
func (h *harness) initCluster(ip string) {
	if r := h.apply(ClusterInit{Now: h.now, Name: "c", UUID: h.uuid(), GroupUUID: h.uuid(), Node: NodeSpec{Name: "n1", UUID: h.uuid(), PrimaryIP: ip}}).(Response); r.Err != nil {
		panic(r.Err)
	}
}

func (h *harness) apply(c Command) any {
	data, err := Encode(c)
	if err != nil {
		panic(err)
	}
	h.index++
	h.now += 1_000_000_000
	return h.f.Apply(h.index, data)
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	arg := func(key, def string) string {
		for _, a := range d.CmdArgs {
			if a.Key == key && len(a.Vals) > 0 {
				return a.Vals[0]
			}
		}
		return def
	}
	atoi := func(key string, def int) int {
		v, err := strconv.Atoi(arg(key, strconv.Itoa(def)))
		if err != nil {
			t.Fatalf("%s: %s is not a number", d.Pos, key)
		}
		return v
	}
	switch d.Cmd {
	case "init":
		r := h.apply(ClusterInit{Now: h.now, Name: arg("name", "cluster"), UUID: h.uuid(), GroupUUID: h.uuid(),
			Node:              NodeSpec{Name: arg("node", "node1"), UUID: h.uuid(), PrimaryIP: arg("ip", "192.0.2.1")},
			CandidatePoolSize: atoi("pool", 0), MaxVoters: atoi("voters", 0)})
		return h.respString(r.(Response))
	case "submit":
		var ops []json.RawMessage
		var uuids []string
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				ops = append(ops, json.RawMessage(line))
				uuids = append(uuids, h.uuid())
			}
		}
		before := h.f.Hash()
		r := h.apply(JobSubmit{Now: h.now, Ops: ops, UUIDs: uuids}).(Response)
		if r.Err != nil && h.f.Hash() != before {
			t.Fatalf("%s: failed submission changed the state", d.Pos)
		}
		return h.respString(r)
	case "leader":
		r := h.apply(LeaderEstablish{Now: h.now, Node: arg("node", "node1")}).(Response)
		if r.Err != nil {
			return h.respString(r)
		}
		return fmt.Sprintf("epoch %d", r.Epoch)
	case "register":
		r := h.apply(NodeRegister{Now: h.now, Node: NodeSpec{Name: arg("node", ""), PrimaryIP: arg("ip", ""),
			Addrs:     Addrs{API: arg("api", ""), Raft: arg("raft", "")},
			Resources: Resources{MemoryMiB: int64(atoi("mem", 0)), DiskMiB: int64(atoi("disk", 0))}}}).(Response)
		return h.respString(r)
	case "update":
		u := JobUpdate{Now: h.now, Epoch: uint64(atoi("epoch", 0)), JobID: int64(atoi("job", 0)),
			OpIndex: atoi("op", 0), Action: arg("action", ""), Status: arg("status", ""),
			Result: json.RawMessage(arg("result", "null")), Step: atoi("step", 0), StepName: arg("step-name", "")}
		if l := arg("log", ""); l != "" {
			u.Log = []string{l}
		}
		if l := strings.TrimSpace(d.Input); l != "" {
			if err := json.Unmarshal([]byte(l), &u.Locks); err != nil {
				t.Fatalf("%s: locks: %v", d.Pos, err)
			}
		}
		return h.mustNotChangeOnError(t, d, u)
	case "step-change":
		u := JobUpdate{Now: h.now, Epoch: uint64(atoi("epoch", 0)), JobID: int64(atoi("job", 0)),
			OpIndex: atoi("op", 0), Action: arg("action", ActionStep), Status: arg("status", ""),
			Step: atoi("step", 0), StepName: arg("step-name", "s")}
		if err := json.Unmarshal([]byte(strings.TrimSpace(d.Input)), &u.Changes); err != nil {
			t.Fatalf("%s: changes: %v", d.Pos, err)
		}
		return h.mustNotChangeOnError(t, d, u)
	case "instances":
		var b strings.Builder
		h.f.Read(func(s *State, _ uint64) {
			for _, i := range s.SortedInstances() {
				var sec []string
				for _, u := range i.SecondaryNodes {
					sec = append(sec, s.NodeName(u))
				}
				var ips []string
				for _, n := range i.NICs {
					ips = append(ips, n.IP)
				}
				fmt.Fprintf(&b, "%s %s pnode=%s snodes=%v mem=%d admin=%s forthcoming=%v ips=%v serial=%d\n", i.Name, i.DiskTemplate,
					s.NodeName(i.PrimaryNode), sec, i.MemoryMiB, i.AdminState, i.Forthcoming, ips, i.SerialNo)
			}
			fmt.Fprintf(&b, "cluster serial=%d\n", s.Cluster.SerialNo)
		})
		return b.String()
	case "cancel":
		return h.mustNotChangeOnError(t, d, JobCancel{Now: h.now, JobID: int64(atoi("job", 0)), Who: arg("who", "")})
	case "archive":
		c := JobArchive{Now: h.now, Epoch: uint64(atoi("epoch", 0)), OlderThan: int64(atoi("older-than", 0)) * 1e9}
		for _, a := range d.CmdArgs {
			if a.Key == "ids" {
				for _, v := range a.Vals {
					id, _ := strconv.ParseInt(v, 10, 64)
					c.IDs = append(c.IDs, id)
				}
			}
		}
		return h.mustNotChangeOnError(t, d, c)
	case "submit-many":
		var m JobSubmitMany
		m.Now = h.now
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			var spec JobSpec
			for _, op := range strings.Split(line, " ; ") {
				spec.Ops = append(spec.Ops, json.RawMessage(op))
				spec.UUIDs = append(spec.UUIDs, h.uuid())
			}
			m.Jobs = append(m.Jobs, spec)
		}
		return h.mustNotChangeOnError(t, d, m)
	case "deps":
		var out string
		h.f.Read(func(s *State, _ uint64) {
			j := s.Jobs[int64(atoi("job", 0))]
			v, msg := s.CheckDependencies(j, j.CurrentOp())
			out = fmt.Sprintf("%s %s", []string{"continue", "wait", "cancel", "wrong-status"}[v], msg)
		})
		return strings.TrimSpace(out)
	case "archived":
		var b strings.Builder
		h.f.Read(func(s *State, _ uint64) {
			for _, id := range s.ArchivedJobIDs() {
				a := s.Archived[id]
				fmt.Fprintf(&b, "archived %d %s summary=%v opstatus=%v error=%s\n", a.ID, a.Status, a.Summary, a.OpStatus, a.Error)
			}
			fmt.Fprintf(&b, "active=%v finished=%v\n", s.SortedJobIDs(), s.Finished)
		})
		return b.String()
	case "raw":
		h.index++
		r := h.f.Apply(h.index, []byte(strings.TrimSpace(d.Input)))
		switch v := r.(type) {
		case Response:
			return h.respString(v)
		case *Error:
			return fmt.Sprintf("fatal %s: %s", v.Code, v.Msg)
		}
		return fmt.Sprintf("%#v", r)
	case "nodes":
		return h.nodes()
	case "liveness":
		// One change per input line: NODE STATE SINCE (seconds after the
		// harness's start time).
		c := NodeLiveness{Now: h.now, Epoch: uint64(atoi("epoch", 0)), Changes: []LivenessChange{}}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if f := strings.Fields(line); len(f) == 3 {
				sec, _ := strconv.ParseInt(f[2], 10, 64)
				c.Changes = append(c.Changes, LivenessChange{Node: f[0], State: f[1], Since: h.start + sec*1e9})
			} else if len(f) != 0 {
				t.Fatalf("%s: want NODE STATE SINCE, got %q", d.Pos, line)
			}
		}
		return h.mustNotChangeOnError(t, d, c)
	case "live":
		var b strings.Builder
		h.f.Read(func(s *State, idx uint64) {
			for _, n := range s.SortedNodes() {
				since := "-"
				if n.LivenessSince != 0 {
					since = strconv.FormatInt((n.LivenessSince-h.start)/1e9, 10)
				}
				live := n.Liveness
				if live == "" {
					live = "unknown"
				}
				fmt.Fprintf(&b, "%s %s since=%s serial=%d\n", n.Name, live, since, n.SerialNo)
			}
			fmt.Fprintf(&b, "cluster serial=%d index=%d\n", s.Cluster.SerialNo, idx)
		})
		return b.String()
	case "cluster":
		var b strings.Builder
		h.f.Read(func(s *State, idx uint64) {
			c := s.Cluster
			fmt.Fprintf(&b, "name=%s serial=%d pool=%d voters=%d master=%s tags=%v index=%d\n",
				c.Name, c.SerialNo, c.CandidatePoolSize, c.MaxVoters, s.NodeName(c.MasterNode), c.Tags, idx)
		})
		return b.String()
	case "groups":
		var b strings.Builder
		h.f.Read(func(s *State, _ uint64) {
			for _, g := range s.SortedGroups() {
				fmt.Fprintf(&b, "%s policy=%s nd=%v tags=%v serial=%d\n", g.Name, g.AllocPolicy, g.NDParams, g.Tags, g.SerialNo)
			}
		})
		return b.String()
	case "job":
		var b strings.Builder
		h.f.Read(func(s *State, _ uint64) {
			j := s.Jobs[int64(atoi("id", 0))]
			if j == nil {
				b.WriteString("no such job\n")
				return
			}
			fmt.Fprintf(&b, "job %d %s executor=%v summary=%v\n", j.ID, j.Status, j.Executor, j.Summary)
			for i, op := range j.Ops {
				fmt.Fprintf(&b, "  op %d %s prio=%d result=%s\n", i, op.Status, op.Priority, op.Result)
				if len(op.Depends) > 0 {
					dj, _ := json.Marshal(op.Depends)
					fmt.Fprintf(&b, "    depends %s\n", dj)
				}
				if len(op.Locks) > 0 {
					lj, _ := json.Marshal(op.Locks)
					fmt.Fprintf(&b, "    locks %s\n", lj)
				}
				for k, st := range op.Steps {
					fmt.Fprintf(&b, "    step %d %s epoch=%d result=%s\n", k, st.Name, st.Epoch, st.Result)
				}
				for _, l := range op.Log {
					fmt.Fprintf(&b, "    log %d %s\n", l.Serial, l.Msg)
				}
			}
		})
		return b.String()
	case "repair-round":
		var c RepairRound
		if err := json.Unmarshal([]byte(strings.TrimSpace(d.Input)), &c); err != nil {
			t.Fatalf("%s: repair round: %v", d.Pos, err)
		}
		c.Now, c.Epoch = h.now, uint64(atoi("epoch", 0))
		r := h.mustNotChangeOnError(t, d, c)
		return r
	case "maint-incident":
		return h.mustNotChangeOnError(t, d, MaintIncident{Now: h.now, UUID: arg("uuid", ""), Action: arg("action", "")})
	case "maint":
		var b strings.Builder
		h.f.Read(func(s *State, _ uint64) {
			m := s.Maint()
			fmt.Fprintf(&b, "round-delay=%d balance=%v thresh=%g max-moves=%d jobs=%v round=%d serial=%d cluster-serial=%d diagnose=%q\n",
				m.RoundDelay, m.Balance, m.BalanceThreshold, m.MaxMoves(), m.Jobs, m.Round, m.SerialNo, s.Cluster.SerialNo, s.Cluster.DiagnoseCollectorFilename)
			rj, _ := json.Marshal(m.Repair)
			fmt.Fprintf(&b, "repair %s\n", rj)
			for _, in := range m.Incidents {
				fmt.Fprintf(&b, "incident %s node=%s action=%s status=%s jobs=%v tag=%s original=%s serial=%d reason=%q\n",
					in.UUID, in.Node, in.Action, in.RepairStatus, in.Jobs, in.Tag, in.Original, in.SerialNo, in.Reason)
			}
			for _, u := range sortedKeys(m.Fences) {
				f := m.Fences[u]
				fmt.Fprintf(&b, "fence %s job=%d dead-since=%d\n", f.Node, f.JobID, f.DeadSince)
			}
		})
		return b.String()
	case "tags":
		var b strings.Builder
		h.f.Read(func(s *State, _ uint64) {
			for _, i := range s.SortedInstances() {
				fmt.Fprintf(&b, "instance %s %v\n", i.Name, i.Tags)
			}
			for _, n := range s.SortedNodes() {
				fmt.Fprintf(&b, "node %s %v\n", n.Name, n.Tags)
			}
			fmt.Fprintf(&b, "cluster %v\n", s.Cluster.Tags)
		})
		return b.String()
	case "snapshot":
		data, err := h.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		g := New()
		if err := g.Restore(bytes.NewReader(data)); err != nil {
			t.Fatalf("%s: restore: %v", d.Pos, err)
		}
		if g.Hash() != h.f.Hash() || g.Index() != h.f.Index() {
			t.Fatalf("%s: restored state differs", d.Pos)
		}
		return fmt.Sprintf("restored %d bytes at index %d, same hash", len(data), g.Index())
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

// mustNotChangeOnError applies a command and fails the test when a
// refused command changed the state.
func (h *harness) mustNotChangeOnError(t *testing.T, d *datadriven.TestData, c Command) string {
	before := h.f.Hash()
	r := h.apply(c).(Response)
	if r.Err != nil && h.f.Hash() != before {
		t.Fatalf("%s: refused %s changed the state", d.Pos, c.CommandType())
	}
	return h.respString(r)
}

func (h *harness) respString(r Response) string {
	if r.Err != nil {
		if r.Err.Field != "" {
			return fmt.Sprintf("error %s [%s]: %s", r.Err.Code, r.Err.Field, r.Err.Msg)
		}
		return fmt.Sprintf("error %s: %s", r.Err.Code, r.Err.Msg)
	}
	if r.Job != nil {
		s := fmt.Sprintf("job %d %s", r.Job.ID, r.Job.Status)
		for _, op := range r.Job.Ops {
			for _, l := range op.Log {
				s += "\n  log: " + l.Msg
			}
			if op.Status == StatusSuccess && string(op.Result) != "null" {
				s += "\n  result: " + string(op.Result)
			}
		}
		return s
	}
	if len(r.JobIDs) > 0 {
		return fmt.Sprintf("jobs %v", r.JobIDs)
	}
	return "ok"
}

func (h *harness) nodes() string {
	var b strings.Builder
	h.f.Read(func(s *State, _ uint64) {
		for _, n := range s.SortedNodes() {
			flags := []string{}
			for name, v := range map[string]bool{"mcap": n.MasterCapable, "vmcap": n.VMCapable, "powered": n.Powered} {
				if !v {
					flags = append(flags, "!"+name)
				}
			}
			fmt.Fprintf(&b, "%s %s pip=%s sip=%s group=%s serial=%d tags=%v %s\n", n.Name, RoleLetter[s.Role(n)],
				n.PrimaryIP, n.SecondaryIP, s.Groups[n.Group].Name, n.SerialNo, n.Tags, strings.Join(sortedStrings(flags), ","))
		}
	})
	return b.String()
}

func sortedStrings(s []string) []string {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return sortedKeys(m)
}

func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return h.run(t, d) })
	})
}

// TestSnapshotV1 restores a snapshot written in format version 1 (kept in
// testdata) and checks it upgrades to the current model.
func TestSnapshotV1(t *testing.T) {
	data, err := os.ReadFile("testdata/snapshot-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	f := New()
	if err := f.Restore(bytes.NewReader(data)); err != nil {
		t.Fatalf("restore v1: %v", err)
	}
	if f.Index() != 42 {
		t.Errorf("index = %d, want 42", f.Index())
	}
	f.Read(func(s *State, _ uint64) {
		if s.Cluster.Name != "old.example.com" || s.Cluster.MaxVoters != DefaultMaxVoters {
			t.Errorf("cluster = %+v", s.Cluster)
		}
		n := s.LookupNode("node2.example.com")
		if n == nil || !n.Powered || !n.Drained || s.Role(n) != RoleDrained {
			t.Errorf("node2 = %+v", n)
		}
		if m := s.Master(); m == nil || m.Name != "node1.example.com" {
			t.Errorf("master = %v", m)
		}
		if s.NodeByIP("192.0.2.2") != n {
			t.Errorf("ip index not rebuilt")
		}
		if j := s.Jobs[7]; j == nil || j.Status != StatusSuccess || s.NextJobID != 8 {
			t.Errorf("jobs not restored: %+v next=%d", j, s.NextJobID)
		}
	})
	// The upgraded state snapshots in the current format and restores.
	cur, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(cur)); err != nil || g.Hash() != f.Hash() {
		t.Fatalf("re-restore: %v", err)
	}
}

// TestRestoreBad feeds broken snapshots; each must fail and leave the
// state as it was.
func TestRestoreBad(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	good, _ := h.f.Snapshot()
	lines := strings.SplitAfter(string(good), "\n")
	cases := map[string]string{
		"empty":           "",
		"not json":        "hello",
		"garbage header":  "{\"format\":1}\n",
		"future version":  `{"format":"gnt-fsm","version":99,"index":1}` + "\n",
		"truncated":       strings.Join(lines[:len(lines)-2], ""),
		"unknown record":  lines[0] + `{"t":"bogus","v":{}}` + "\n",
		"bad record":      lines[0] + `{"t":"node","v":{"name":5}}` + "\n",
		"unknown field":   lines[0] + `{"t":"cluster","v":{"nme":"x"}}` + "\n",
		"v1 bad version":  `{"version":3,"state":{}}`,
		"node bad group":  lines[0] + `{"t":"node","v":{"name":"a","uuid":"u","group":"nope"}}` + "\n" + `{"t":"queue","v":{"next_job_id":1}}` + "\n",
		"job id too high": lines[0] + `{"t":"job","v":{"id":5}}` + "\n" + `{"t":"queue","v":{"next_job_id":2}}` + "\n",
	}
	before := h.f.Hash()
	for name, snap := range cases {
		if err := h.f.Restore(strings.NewReader(snap)); err == nil {
			t.Errorf("%s: restore succeeded", name)
		}
		if h.f.Hash() != before {
			t.Fatalf("%s: failed restore changed the state", name)
		}
	}
}

// FuzzRestore: no snapshot input may panic; a successful restore must
// re-encode and restore to the same state.
func FuzzRestore(f *testing.F) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	good, _ := h.f.Snapshot()
	f.Add(good)
	if v1, err := os.ReadFile("testdata/snapshot-v1.json"); err == nil {
		f.Add(v1)
	}
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := New()
		if err := g.Restore(bytes.NewReader(data)); err != nil {
			return
		}
		again, err := g.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		k := New()
		if err := k.Restore(bytes.NewReader(again)); err != nil {
			t.Fatalf("re-restore of an accepted snapshot failed: %v", err)
		}
	})
}

// FuzzParseOpcode: no opcode body may panic, and an accepted opcode
// re-encodes to one that is accepted again.
func FuzzParseOpcode(f *testing.F) {
	for _, s := range []string{
		`{"OP_ID":"OP_NODE_ADD","node_name":"n2","primary_ip":"192.0.2.2"}`,
		`{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"n2","drained":true}`,
		`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}`,
		`{"OP_ID":"OP_TEST_DELAY","duration":0.5}`,
		`{"OP_ID":"OP_TEST_CRASH","mode":"panic","times":2}`,
		`{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"oob_program":"/bin/x"}}`,
		`{"OP_ID":"OP_CLUSTER_SET_PARAMS","candidate_pool_size":3,"reason":[["a","b",1]]}`,
		`{"OP_ID":"OP_GROUP_RENAME","group_name":"g","new_name":"h"}`,
		`{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g","nodes":["n1","n2"],"force":true}`,
		`{"OP_ID":"OP_CLUSTER_REDIST_CONF"}`,
		`{"OP_ID":"OP_INSTANCE_QUERY_DATA","instances":["web1"],"static":true}`,
		`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instance_names":["web1","web2"]}`,
		`{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"web1","disk":0,"amount":1024,"wait_for_sync":true}`,
		`{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS","instance_name":"web1","ignore_size":true}`,
		`{"OP_ID":"OP_INSTANCE_DEACTIVATE_DISKS","instance_name":"web1","force":true}`,
		`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"web1","target_groups":["g2"],"iallocator":"hail"}`,
		`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g1","target_groups":["g2"],"sequential":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		op, err := ParseOpcode(data)
		if err != nil {
			if AsError(err).Code == "" {
				t.Fatalf("error without code: %v", err)
			}
			return
		}
		again, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseOpcode(again); err != nil {
			t.Fatalf("re-encoded opcode refused: %v\n%s", err, again)
		}
	})
}

// framesRoundTrip encodes cmd, checks that it became a command of type
// typ whose body decode reads back to what cmd is in JSON, and returns the
// encoded command.
func framesRoundTrip[C Command](t *testing.T, cmd C, typ CommandType, decode func([]byte) (C, *Error)) []byte {
	t.Helper()
	b, err := Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if CommandType(b[0]) != typ {
		t.Fatalf("%T encoded as type %d, want %d", cmd, b[0], typ)
	}
	back, e := decode(b[1:])
	if e != nil {
		t.Fatal(e)
	}
	want, _ := json.Marshal(cmd)
	if got, _ := json.Marshal(back); string(got) != string(want) {
		t.Errorf("%T round trip:\n got %s\nwant %s", cmd, got, want)
	}
	return b
}

// TestEncodeMatchesJSON: a JobSubmit's frames decode to what was
// encoded, and a batch's frames give back its commands.
func TestEncodeMatchesJSON(t *testing.T) {
	js := JobSubmit{Now: 1234567890123, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a\"b"]}`), json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":1}`)},
		UUIDs: []string{"u-1", "quote\"d"}, Token: "client:1"}
	got := framesRoundTrip(t, js, CmdJobSubmitFrames, DecodeJobSubmit)
	if _, err := Encode(JobSubmit{Now: 1, Ops: []json.RawMessage{nil}, UUIDs: []string{""}}); err == nil {
		t.Fatal("empty opcode encoded")
	}
	le, _ := Encode(LeaderEstablish{Now: 5, Node: "n1"})
	batch, err := EncodeBatch([][]byte{got, le})
	if err != nil {
		t.Fatal(err)
	}
	if CommandType(batch[0]) != CmdFrames {
		t.Fatalf("batch type %d, want CmdFrames", batch[0])
	}
	cmds, e := DecodeFrames(batch[1:])
	if e != nil || len(cmds) != 2 || !bytes.Equal(cmds[0], got) || !bytes.Equal(cmds[1], le) {
		t.Fatalf("frames decode to %q (%v)", cmds, e)
	}
	if _, err := EncodeBatch([][]byte{{}}); err == nil {
		t.Fatal("empty batch entry accepted")
	}
	if _, err := EncodeBatch([][]byte{got, batch}); err == nil {
		t.Fatal("nested batch accepted")
	}
}

// TestBatchForms: a batch applies the same in the JSON form older logs
// hold and in frames; damaged frames are refused whole, changing nothing.
func TestBatchForms(t *testing.T) {
	setup := func() *harness {
		h := newHarness()
		h.initCluster("10.0.0.1")
		return h
	}
	var cmds [][]byte
	for i := 0; i < 3; i++ {
		op := fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["t%d"]}`, i)
		c, err := Encode(JobSubmit{Now: 1, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}})
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	frames, err := EncodeBatch(cmds)
	if err != nil {
		t.Fatal(err)
	}
	var entries []BatchEntry
	for _, c := range cmds {
		// Older logs hold JSON batches of JSON submissions.
		js, e := DecodeJobSubmit(c[1:])
		if e != nil {
			t.Fatal(e)
		}
		body, _ := json.Marshal(js)
		entries = append(entries, BatchEntry{Type: CmdJobSubmit, Body: body})
	}
	body, _ := json.Marshal(Batch{Entries: entries})
	legacy := append([]byte{byte(CmdBatch)}, body...)

	var hashes []string
	for _, entry := range [][]byte{frames, legacy} {
		h := setup()
		h.index++
		resp, ok := h.f.Apply(h.index, entry).(BatchResponse)
		if !ok || len(resp) != 3 {
			t.Fatalf("batch answered %#v", h.f.Apply(h.index, entry))
		}
		for i, r := range resp {
			if r.Err != nil || r.JobID == 0 {
				t.Fatalf("command %d: %+v", i, r)
			}
		}
		hashes = append(hashes, h.f.Hash())
	}
	if hashes[0] != hashes[1] {
		t.Fatal("frames and the JSON batch give different states")
	}
	// A JobSubmit in the JSON form of older logs applies as its frames do.
	var legacyHash []string
	for _, form := range []string{"frames", "json"} {
		h := setup()
		for i := 0; i < 3; i++ {
			entry := cmds[i]
			if form == "json" {
				c, e := DecodeJobSubmit(cmds[i][1:])
				if e != nil {
					t.Fatal(e)
				}
				body, _ := json.Marshal(c)
				entry = append([]byte{byte(CmdJobSubmit)}, body...)
			}
			h.index++
			if r, ok := h.f.Apply(h.index, entry).(Response); !ok || r.Err != nil || r.JobID == 0 {
				t.Fatalf("%s submit %d: %+v", form, i, h.f.Apply(h.index, entry))
			}
		}
		legacyHash = append(legacyHash, h.f.Hash())
	}
	if legacyHash[0] != legacyHash[1] {
		t.Fatal("a JSON JobSubmit and its frames give different states")
	}

	bad := map[string][]byte{
		"empty":             {},
		"truncated length":  {0x80},
		"length past end":   append([]byte{0x7f}, cmds[0]...),
		"zero length":       {0x00},
		"last frame short":  frames[1 : len(frames)-1],
		"overlong varint":   {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"garbage after one": append(append([]byte(nil), frames[1:]...), 0x05, 'x'),
	}
	for name, body := range bad {
		h := setup()
		before := h.f.Hash()
		h.index++
		r, ok := h.f.Apply(h.index, append([]byte{byte(CmdFrames)}, body...)).(Response)
		if !ok || r.Err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if h.f.Hash() != before {
			t.Errorf("%s: state changed", name)
		}
	}
}

// FuzzDecodeJobSubmit: any body either decodes to a submission whose
// encoding gives the body back, or is refused with an error.
func FuzzDecodeJobSubmit(f *testing.F) {
	c, _ := Encode(JobSubmit{Now: -5, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY"}`)}, UUIDs: []string{"u"}})
	f.Add(c[1:])
	c, _ = Encode(JobSubmit{Now: 7, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY"}`)}, UUIDs: []string{"u"}, Token: "t:1"})
	f.Add(c[1:])
	f.Add([]byte{0x02, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, body []byte) {
		js, e := DecodeJobSubmit(body)
		if e != nil {
			if e.Code == "" {
				t.Fatalf("refusal without code: %v", e)
			}
			return
		}
		for _, op := range js.Ops {
			if len(op) == 0 {
				return // Encode refuses empty opcodes; Apply refuses them too
			}
		}
		again, err := Encode(js)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again[1:], body) {
			// Varints have one canonical form on output; a body with a
			// padded one decodes to the same values.
			back, e := DecodeJobSubmit(again[1:])
			if e != nil || back.Now != js.Now || len(back.Ops) != len(js.Ops) || len(back.UUIDs) != len(js.UUIDs) || back.Token != js.Token {
				t.Fatalf("re-encoding differs: %x vs %x", again[1:], body)
			}
		}
	})
}

// FuzzDecodeFrames: any body either splits into frames, which encode
// again to the same frames, or is refused with an error.
func FuzzDecodeFrames(f *testing.F) {
	c, _ := Encode(LeaderEstablish{Now: 5, Node: "n1"})
	b, _ := EncodeBatch([][]byte{c, c})
	f.Add(b[1:])
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, body []byte) {
		cmds, e := DecodeFrames(body)
		if e != nil {
			if cmds != nil || e.Code == "" {
				t.Fatalf("refusal %v with frames %q", e, cmds)
			}
			return
		}
		again, err := EncodeBatch(cmds)
		if err != nil {
			// Frames may hold what EncodeBatch refuses (a nested batch);
			// Apply refuses those per command.
			return
		}
		// A padded length varint decodes like the short one, so compare
		// the frames, not the bytes.
		back, e := DecodeFrames(again[1:])
		if e != nil || len(back) != len(cmds) {
			t.Fatalf("re-encoded frames do not decode: %v", e)
		}
		for i := range cmds {
			if !bytes.Equal(back[i], cmds[i]) {
				t.Fatalf("frame %d changed: %x vs %x", i, back[i], cmds[i])
			}
		}
	})
}

// TestFreezeIsolated: a frozen view does not change when the state does.
func TestFreezeIsolated(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	z := h.f.Freeze()
	before, _ := z.Encode()
	// Encoding runs while applies go on (raft's Persist does): -race
	// checks that nothing frozen is written to.
	done := make(chan []byte)
	go func() {
		b, _ := z.Encode()
		done <- b
	}()
	for i := 0; i < 50; i++ {
		h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"node","name":"n1","tags":["x%d"]}`, i))}, UUIDs: []string{""}})
		h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["y"]}`)}, UUIDs: []string{""}})
	}
	if during := <-done; string(during) != string(before) {
		t.Fatal("frozen view changed while it was being encoded")
	}
	after, _ := z.Encode()
	if string(before) != string(after) {
		t.Fatal("frozen view changed after later applies")
	}
	now, _ := h.f.Snapshot()
	if string(now) == string(before) {
		t.Fatal("state did not change")
	}
}

func TestLocksConflict(t *testing.T) {
	bglS := LockDecl{Level: LockCluster, Names: []string{LockBGL}}
	bglX := LockDecl{Level: LockCluster, Names: []string{LockBGL}, Exclusive: true}
	n1X := LockDecl{Level: LockNode, Names: []string{"n1"}, Exclusive: true}
	n2X := LockDecl{Level: LockNode, Names: []string{"n2", "n3"}, Exclusive: true}
	n1S := LockDecl{Level: LockNode, Names: []string{"n1"}}
	allS := LockDecl{Level: LockNode}
	allX := LockDecl{Level: LockNode, Exclusive: true}
	i1X := LockDecl{Level: LockInstance, Names: []string{"n1"}, Exclusive: true}
	for _, c := range []struct {
		a, b []LockDecl
		want bool
	}{
		{[]LockDecl{bglS}, []LockDecl{bglS}, false},
		{[]LockDecl{bglS}, []LockDecl{bglX}, true},
		{[]LockDecl{bglS, n1X}, []LockDecl{bglS, n2X}, false},
		{[]LockDecl{bglS, n1X}, []LockDecl{bglS, n1X}, true},
		{[]LockDecl{n1S}, []LockDecl{n1S}, false},
		{[]LockDecl{n1S}, []LockDecl{n1X}, true},
		{[]LockDecl{allS}, []LockDecl{n1S}, false},
		{[]LockDecl{allS}, []LockDecl{n2X}, true},
		{[]LockDecl{allX}, []LockDecl{n1S}, true},
		{[]LockDecl{i1X}, []LockDecl{n1X}, false}, // same name, other level
		{nil, []LockDecl{bglX}, false},
	} {
		if got := LocksConflict(c.a, c.b); got != c.want {
			t.Errorf("LocksConflict(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := LocksConflict(c.b, c.a); got != c.want {
			t.Errorf("LocksConflict(%v, %v) = %v, want %v (not symmetric)", c.b, c.a, got, c.want)
		}
	}
}

// TestSnapshotV2 restores a snapshot written by the version-2 format (the
// build before the job engine) and re-encodes it in the current format.
func TestSnapshotV2(t *testing.T) {
	data, err := os.ReadFile("testdata/snapshot-v2.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f := New()
	if err := f.Restore(bytes.NewReader(data)); err != nil {
		t.Fatalf("restore v2: %v", err)
	}
	f.Read(func(s *State, _ uint64) {
		j := s.Jobs[2]
		if j == nil || j.Status != StatusRunning || len(j.Ops[0].Steps) != 0 || len(s.Archived) != 0 {
			t.Errorf("job 2 = %+v", j)
		}
		if got := s.ExecutorJobs(); len(got) != 1 || got[0].ID != 2 {
			t.Errorf("executor jobs = %v", got)
		}
	})
	cur, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(cur, []byte(`{"format":"gnt-fsm","version":3,`)) {
		t.Errorf("re-encoded header: %.60s", cur)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(cur)); err != nil || g.Hash() != f.Hash() {
		t.Fatalf("re-restore: %v", err)
	}
}

// TestJobChanged: a job watcher wakes when its job changes, not when
// another one does, and when the state is replaced.
func TestJobChanged(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	h.apply(LeaderEstablish{Now: h.now, Node: "n1"})
	delay := []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":1}`)}
	a := h.apply(JobSubmit{Now: h.now, Ops: delay, UUIDs: []string{""}}).(Response).JobID
	b := h.apply(JobSubmit{Now: h.now, Ops: delay, UUIDs: []string{""}}).(Response).JobID
	chA, chB := h.f.JobChanged(a), h.f.JobChanged(b)
	if r := h.apply(JobUpdate{Now: h.now, Epoch: 1, JobID: b, Action: ActionStart}).(Response); r.Err != nil {
		t.Fatal(r.Err)
	}
	select {
	case <-chB:
	default:
		t.Fatal("watcher of the changed job not woken")
	}
	select {
	case <-chA:
		t.Fatal("watcher of another job woken")
	default:
	}
	h.f.Reset()
	select {
	case <-chA:
	default:
		t.Fatal("watcher not woken when the state was replaced")
	}
}

// TestJobStatusFromOpcodes: Ganeti's derivation of a job's status from
// its opcodes' statuses (first error/canceling/canceled decides; all
// success is success; otherwise the last status that is neither success
// nor queued; else queued), plus gnt's pending cancel.
func TestJobStatusFromOpcodes(t *testing.T) {
	for _, c := range []struct {
		ops    []string
		cancel bool
		want   string
	}{
		{[]string{StatusQueued, StatusQueued}, false, StatusQueued},
		{[]string{StatusSuccess, StatusQueued}, false, StatusQueued},
		{[]string{StatusSuccess, StatusWaiting, StatusQueued}, false, StatusWaiting},
		{[]string{StatusSuccess, StatusRunning, StatusQueued}, false, StatusRunning},
		{[]string{StatusSuccess, StatusSuccess}, false, StatusSuccess},
		{[]string{StatusSuccess, StatusError, StatusError}, false, StatusError},
		{[]string{StatusRunning, StatusCanceling}, false, StatusCanceling},
		{[]string{StatusSuccess, StatusCanceled, StatusCanceled}, false, StatusCanceled},
		{[]string{StatusError, StatusCanceled}, false, StatusError},
		{[]string{StatusRunning}, true, StatusCanceling},
		{[]string{StatusSuccess}, true, StatusSuccess},
		{[]string{StatusRunning, StatusError}, true, StatusError},
		{nil, false, StatusQueued},
	} {
		j := &Job{CancelRequested: c.cancel}
		for _, s := range c.ops {
			j.Ops = append(j.Ops, &OpState{Status: s})
		}
		if got := j.computeStatus(); got != c.want {
			t.Errorf("ops %v cancel=%v: status %s, want %s", c.ops, c.cancel, got, c.want)
		}
	}
}

// FuzzReasonEntry: the direct reading of a reason entry agrees with the
// general one wherever it applies, and a refused entry is an error, not a
// panic.
func FuzzReasonEntry(f *testing.F) {
	f.Add([]byte(`["gnt:client","x",1700000000000000123]`))
	f.Add([]byte(` [ "a" , "b\u00e9" , -5 ] `))
	f.Add([]byte(`["a","b",1.5e3]`))
	f.Add([]byte(`["a","b\n",1]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ReasonEntry
		err := json.Unmarshal(b, &r)
		src, text, ts, ok := quickReason(b)
		if !ok || !json.Valid(b) {
			return
		}
		if err != nil {
			t.Fatalf("%q: quick path read it, Unmarshal refused: %v", b, err)
		}
		var raw []any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil || len(raw) != 3 {
			t.Fatalf("%q: quick path read a non-triple", b)
		}
		n, _ := raw[2].(json.Number)
		if raw[0] != src || raw[1] != text || string(n) != strconv.FormatInt(ts, 10) && n.String() != "-0" {
			t.Fatalf("%q: quick %q %q %d, general %v", b, src, text, ts, raw)
		}
		// Writing it back gives what the general encoder gives.
		got, err := json.Marshal(r)
		want, _ := json.Marshal([]any{r.Source, r.Text, r.TimeNS})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v encodes as %s (%v), want %s", r, got, err, want)
		}
	})
}

// TestReasonEntryExact: nanosecond timestamps keep every digit.
func TestReasonEntryExact(t *testing.T) {
	for _, in := range []string{`["a","b",1700000000000000123]`, `["a\"q","b",1700000000000000123]`} {
		var r ReasonEntry
		if err := json.Unmarshal([]byte(in), &r); err != nil || r.TimeNS != 1700000000000000123 {
			t.Fatalf("%s: %+v %v", in, r, err)
		}
	}
	for _, in := range []string{`["a","b"]`, `["a",1,2]`, `["a","b","c"]`, `{}`, `["a","b",1e30]`} {
		var r ReasonEntry
		if err := json.Unmarshal([]byte(in), &r); err == nil {
			t.Fatalf("%s accepted: %+v", in, r)
		}
	}
}

// TestJobUpdateFrames: a JobUpdate's frames decode to what was encoded,
// with and without the rarely set fields, and a damaged body is refused.
func TestJobUpdateFrames(t *testing.T) {
	for _, u := range []JobUpdate{
		{Now: 1700000000000000123, Epoch: 3, JobID: 42, OpIndex: 1, Action: ActionFinish, Status: StatusSuccess, Result: json.RawMessage(`{"a":[1,2]}`), Log: []string{"one", "tw\"o"}, StepName: "delay 1/1"},
		{Now: -1, Action: ActionStart, Locks: []LockDecl{{Level: LockNode, Names: []string{"n1"}, Exclusive: true}}},
		{Now: 5, JobID: 7, Action: ActionStep, Step: 2, StepName: "power off", Changes: []StepChange{{NodePowered: &NodePowered{Node: "u1", Powered: false}}}},
		{Now: 6, Epoch: 4, JobID: 7, Action: ActionAttempt, Incarnation: "0123abcd", Survived: []uint64{2, 3}},
	} {
		b := framesRoundTrip(t, u, CmdJobUpdateFrames, DecodeJobUpdate)
		for cut := 0; cut < len(b)-1; cut++ {
			if _, e := DecodeJobUpdate(b[1 : 1+cut]); e == nil {
				t.Errorf("%s cut to %d bytes: accepted", u.Action, cut)
			}
		}
		if _, e := DecodeJobUpdate(append(append([]byte(nil), b[1:]...), 0)); e == nil {
			t.Errorf("%s with a trailing byte: accepted", u.Action)
		}
	}
	if _, err := Encode(JobUpdate{Action: ActionFinish, Result: json.RawMessage(`{bad`)}); err == nil {
		t.Error("a result that is not JSON was encoded")
	}
}

// TestValidResult: the literals validResult accepts without encoding/json
// are accepted exactly as json.Valid accepts them, and everything near them
// is left to json.Valid.
func TestValidResult(t *testing.T) {
	for _, in := range []string{
		"null", "true", "false", "[]", "{}", `""`, "0", `"x"`, `{"a":1}`, "[1]",
		"", " null", "null ", "nul", "nulll", "NULL", "True", "[", "]", "{", `"`, `"""`,
		"[]]", "{}}", "[ ]", "{ }", "\tnull\n", "1e", "-", "nullnull",
	} {
		if got, want := validResult([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("validResult(%q) = %v, json.Valid says %v", in, got, want)
		}
	}
}

// FuzzDecodeJobUpdate: any body decodes or is refused with an error; what
// decodes encodes again to an update that decodes the same.
func FuzzDecodeJobUpdate(f *testing.F) {
	b, _ := Encode(JobUpdate{Now: 1, Epoch: 2, JobID: 3, Action: ActionFinish, Status: StatusError, Result: json.RawMessage(`"x"`), Log: []string{"l"}})
	f.Add(b[1:])
	b, _ = Encode(JobUpdate{Now: 1, Action: ActionStart, Locks: []LockDecl{{Level: LockNode}}})
	f.Add(b[1:])
	f.Fuzz(func(t *testing.T, body []byte) {
		u, e := DecodeJobUpdate(body)
		if e != nil {
			if e.Code == "" {
				t.Fatalf("refusal without code: %v", e)
			}
			return
		}
		again, err := Encode(u)
		if err != nil {
			t.Fatalf("decoded update does not encode: %v", err)
		}
		back, e := DecodeJobUpdate(again[1:])
		if e != nil {
			t.Fatal(e)
		}
		x, _ := json.Marshal(u)
		y, _ := json.Marshal(back)
		if string(x) != string(y) {
			t.Fatalf("re-encoding changed the update:\n%s\n%s", x, y)
		}
	})
}

// TestJobUpdateLegacyJSON: a JobUpdate in the JSON form of older logs
// applies as its frames do.
func TestJobUpdateLegacyJSON(t *testing.T) {
	var hashes []string
	for _, form := range []string{"frames", "json"} {
		h := newHarness()
		h.initCluster("10.0.0.1")
		le := h.apply(LeaderEstablish{Now: h.now, Node: "n1"}).(Response)
		sub := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)}, UUIDs: []string{""}}).(Response)
		if le.Err != nil || sub.Err != nil {
			t.Fatal(le.Err, sub.Err)
		}
		for _, u := range []JobUpdate{
			{Now: h.now, Epoch: le.Epoch, JobID: sub.JobID, Action: ActionStart},
			{Now: h.now + 1, Epoch: le.Epoch, JobID: sub.JobID, Action: ActionFinish, Status: StatusSuccess, Result: json.RawMessage(`null`), Log: []string{"done"}},
		} {
			entry, _ := Encode(u)
			if form == "json" {
				body, _ := json.Marshal(u)
				entry = append([]byte{byte(CmdJobUpdate)}, body...)
			}
			h.index++
			if r := h.f.Apply(h.index, entry).(Response); r.Err != nil {
				t.Fatalf("%s %s: %v", form, u.Action, r.Err)
			}
		}
		hashes = append(hashes, h.f.Hash())
	}
	if hashes[0] != hashes[1] {
		t.Fatal("a JSON JobUpdate and its frames give different states")
	}
}

// TestSnapshotRecordBytes: writeState builds each record line by hand;
// every line must be exactly what json.Marshal of the record would write,
// so the format and Hash stay those of earlier builds. The state has
// every kind of record, and text that json.Marshal escapes.
func TestSnapshotRecordBytes(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	h.apply(LeaderEstablish{Now: h.now, Node: "n1"})
	ops := []string{
		`{"OP_ID":"OP_NODE_ADD","node_name":"n2","primary_ip":"192.0.2.2"}`,
		`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a:b","c.d"],"reason":[["gnt:user","ünï \"cödé\" \\ \u2028",1]]}`,
		`{"OP_ID":"OP_TAGS_SET","kind":"node","name":"n2","tags":["rack:1"],"reason":[["gnt:user","why <&>",1]]}`,
		`{"OP_ID":"OP_TEST_DELAY","duration":1}`,
	}
	for _, op := range ops {
		if r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{h.uuid()}}).(Response); r.Err != nil {
			t.Fatalf("%s: %v", op, r.Err)
		}
	}
	// Archive a finished job so that an archived record is written too.
	h.f.st.archive(h.f.st.Finished[0], TimestampFromNanos(h.now))
	data, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	for _, l := range lines[1:] {
		var r snapRecord
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(l, want) {
			t.Errorf("record line\n%s\nwant\n%s", l, want)
		}
		kinds[r.T]++
	}
	for _, k := range []string{"cluster", "group", "node", "job", "archived", "queue"} {
		if kinds[k] == 0 {
			t.Errorf("no %s record in the snapshot (%v)", k, kinds)
		}
	}
	if !bytes.Contains(data, []byte(`why \u003c\u0026\u003e`)) || !bytes.Contains(data, []byte(`\u2028`)) {
		t.Error("escaped reason text not found in the snapshot")
	}
}

// TestLogVersion: a leader records its LogVersion; the state and its
// snapshots keep the highest; a replica meets a newer one as it meets an
// unknown command type (the entry, batch or not, is refused whole and
// changes nothing, and raftFSM stops the process), and refuses to restore
// a snapshot of a newer log.
func TestLogVersion(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	if r := h.apply(LeaderEstablish{Now: h.now, Node: "n1"}).(Response); r.Err != nil || h.f.st.LogVersion != 0 {
		t.Fatalf("an entry of an older log: %v, log version %d", r.Err, h.f.st.LogVersion)
	}
	if r := h.apply(LeaderEstablish{Now: h.now, Node: "n1", LogVersion: LogVersion}).(Response); r.Err != nil || r.Epoch != 2 {
		t.Fatalf("this build's version: %+v", r)
	}
	// Version 0 is not written: builds before it decode the record.
	if b, _ := Encode(LeaderEstablish{Now: h.now, Node: "n1"}); bytes.Contains(b, []byte("log_version")) {
		t.Errorf("version 0 written: %s", b)
	}
	if h.f.st.LogVersion != LogVersion {
		t.Fatalf("log version %d recorded, want %d", h.f.st.LogVersion, LogVersion)
	}
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(snap)); err != nil || g.Hash() != h.f.Hash() {
		t.Fatalf("restore: %v", err)
	}
	g.Read(func(s *State, _ uint64) {
		if s.LogVersion != LogVersion {
			t.Errorf("restored log version %d, want %d", s.LogVersion, LogVersion)
		}
	})

	before := h.f.Hash()
	newer, err := Encode(LeaderEstablish{Now: h.now, Node: "n2", LogVersion: LogVersion + 1})
	if err != nil {
		t.Fatal(err)
	}
	submit, err := Encode(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["x"]}`)}, UUIDs: []string{""}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := EncodeBatch([][]byte{submit, newer})
	if err != nil {
		t.Fatal(err)
	}
	for name, entry := range map[string][]byte{"entry": newer, "batch": batch} {
		h.index++
		e, ok := h.f.Apply(h.index, entry).(*Error)
		if !ok || e.Code != CodeUnknownCmd || !strings.Contains(e.Msg, fmt.Sprintf("log version %d", LogVersion+1)) {
			t.Errorf("%s of a newer log answered %#v", name, h.f.Apply(h.index, entry))
		}
		if h.f.Hash() != before {
			t.Errorf("%s of a newer log changed the state", name)
		}
	}

	// A snapshot of a newer log (as a newer build would write it) is
	// refused, and the state stays.
	h.f.st.LogVersion = LogVersion + 1
	newerSnap, err := h.f.Snapshot()
	h.f.st.LogVersion = LogVersion
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(newerSnap, []byte(fmt.Sprintf(`"log_version":%d}`, LogVersion+1))) {
		t.Fatal("no log_version in the snapshot's queue record")
	}
	if err := g.Restore(bytes.NewReader(newerSnap)); err == nil || !strings.Contains(err.Error(), "upgrade this gntd") {
		t.Errorf("restore of a newer snapshot: %v", err)
	}
	// The header says it too, so the refusal comes before any record a
	// newer build may have written in a form this one cannot decode.
	header, _, _ := bytes.Cut(newerSnap, []byte("\n"))
	if !bytes.Contains(header, []byte(fmt.Sprintf(`"log_version":%d`, LogVersion+1))) {
		t.Fatalf("no log_version in the snapshot's header %s", header)
	}
	garbled := append(append(header, '\n'), `{"t":"jobs","v":{"from":"a newer build"}}`+"\n"...)
	if err := g.Restore(bytes.NewReader(garbled)); err == nil || !strings.Contains(err.Error(), "upgrade this gntd") || strings.Contains(err.Error(), "record") {
		t.Errorf("restore of a newer snapshot with a record this build cannot read: %v", err)
	}
	if g.Hash() != before {
		t.Error("a refused restore changed the state")
	}
}

// FuzzApply: no log entry may panic the state machine, and an entry it
// refuses whole (one this build cannot read) changes nothing.
func FuzzApply(f *testing.F) {
	seed := func() *harness {
		h := newHarness()
		h.initCluster("192.0.2.1")
		h.apply(LeaderEstablish{Now: h.now, Node: "n1"})
		return h
	}
	le, _ := Encode(LeaderEstablish{Now: 5, Node: "n1"})
	newer, _ := Encode(LeaderEstablish{Now: 5, Node: "n1", LogVersion: LogVersion + 1})
	sub, _ := Encode(JobSubmit{Now: 5, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["a"]}`)}, UUIDs: []string{""}})
	upd, _ := Encode(JobUpdate{Now: 5, Epoch: 1, JobID: 1, Action: ActionFinish, Status: StatusSuccess})
	for _, e := range [][]byte{le, newer, sub, upd, {byte(CmdBatch)}, {200, 1, 2}} {
		f.Add(e)
	}
	batch, _ := EncodeBatch([][]byte{sub, le, upd})
	f.Add(batch)
	f.Fuzz(func(t *testing.T, entry []byte) {
		h := seed()
		before := h.f.Hash()
		h.index++
		if e, ok := h.f.Apply(h.index, entry).(*Error); ok {
			if e.Code != CodeUnknownCmd {
				t.Fatalf("entry refused whole with %v", e)
			}
			if h.f.Hash() != before {
				t.Fatal("an entry refused whole changed the state")
			}
		}
	})
}

// TestRestoreOlderSnapshot: a replica asked to restore a snapshot older
// than its state (hashicorp/raft does that to a follower that applied past
// the leader's snapshot) keeps its state, skips the entries Raft hands
// over again up to its index, and ends where a replica that restored the
// snapshot and replayed those entries ends. A newer snapshot still
// replaces the state.
func TestRestoreOlderSnapshot(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	h.apply(LeaderEstablish{Now: h.now, Node: "n1"})
	delay := []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":1}`)}
	var entries [][]byte // entries[i] is applied at index i+1
	for i := 0; i < 12; i++ {
		data, err := Encode(JobSubmit{Now: h.now + int64(i), Ops: delay, UUIDs: []string{""}})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, data)
	}
	base := h.index // 2
	apply := func(f *FSM, from, to uint64) {
		for i := from; i <= to; i++ {
			f.Apply(i, entries[i-base-1])
		}
	}
	apply(h.f, base+1, base+5)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	atSnap := h.f.Hash()
	apply(h.f, base+6, base+10)
	newer, idx := h.f.Hash(), h.f.Index()

	if err := h.f.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if h.f.Index() != idx || h.f.Hash() != newer {
		t.Fatalf("after restoring the older snapshot: index %d (want %d), state changed: %v", h.f.Index(), idx, h.f.Hash() != newer)
	}
	apply(h.f, base+6, base+10) // Raft hands them over again
	if h.f.Hash() != newer {
		t.Fatal("entries the state already held were applied a second time")
	}
	apply(h.f, base+11, base+12)

	replay := New()
	if err := replay.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if replay.Hash() != atSnap {
		t.Fatal("a fresh replica's restore differs from the snapshot's state")
	}
	apply(replay, base+6, base+12)
	if replay.Hash() != h.f.Hash() || replay.Index() != h.f.Index() {
		t.Fatalf("replica that replayed: index %d, replica that kept its state: index %d; states equal: %v", replay.Index(), h.f.Index(), replay.Hash() == h.f.Hash())
	}

	// A replica behind the snapshot takes it.
	behind := New()
	apply(behind, base+1, base+2)
	if err := behind.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if behind.Index() != base+5 || behind.Hash() != atSnap {
		t.Fatalf("a replica at index %d restoring a snapshot at %d: index %d", base+2, base+5, behind.Index())
	}
}

// TestNodeFlagLocks: node flag changes, power commands and EPO lock as
// narrowly as Ganeti's: the node alone, every node only when auto_promote
// may promote another in the node's place; OP_OOB_COMMAND the nodes it
// names; OP_CLUSTER_EPO the BGL shared. So power-status of one node and
// the offline-then-power-off of another do not conflict.
func TestNodeFlagLocks(t *testing.T) {
	st := &State{Nodes: map[string]*Node{"u4": {Name: "n4", UUID: "u4"}, "u5": {Name: "n5", UUID: "u5"}}}
	yes, no := true, false
	n4 := []LockDecl{bgl(false), {Level: LockNode, Names: []string{"n4"}, Exclusive: true}}
	all := []LockDecl{bgl(false), {Level: LockNode, Exclusive: true}}
	for _, c := range []struct {
		name string
		op   Opcode
		want []LockDecl
	}{
		{"offline", &OpNodeSetParams{NodeName: "n4", Offline: &yes}, n4},
		{"offline by uuid", &OpNodeSetParams{NodeUUID: "u4", Offline: &yes}, n4},
		{"drained", &OpNodeSetParams{NodeName: "n4", Drained: &yes}, n4},
		{"demote", &OpNodeSetParams{NodeName: "n4", MasterCandidate: &no}, n4},
		{"promote", &OpNodeSetParams{NodeName: "n4", MasterCandidate: &yes}, n4},
		{"back online", &OpNodeSetParams{NodeName: "n4", Offline: &no, AutoPromote: true}, n4},
		{"not master capable", &OpNodeSetParams{NodeName: "n4", MasterCapable: &no}, n4},
		{"offline with auto_promote", &OpNodeSetParams{NodeName: "n4", Offline: &yes, AutoPromote: true}, all},
		{"drained with auto_promote", &OpNodeSetParams{NodeName: "n4", Drained: &yes, AutoPromote: true}, all},
		{"demote with auto_promote", &OpNodeSetParams{NodeName: "n4", MasterCandidate: &no, AutoPromote: true}, all},
		{"power-off", &OpOobCommand{Command: "power-off", NodeNames: []string{"n4"}}, n4},
		{"epo", &OpClusterEpo{All: true}, []LockDecl{bgl(false)}},
	} {
		if got := c.op.Locks(st); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: locks %v, want %v", c.name, got, c.want)
		}
	}
	status := (&OpOobCommand{Command: "power-status", NodeNames: []string{"n5"}}).Locks(st)
	off := (&OpNodeSetParams{NodeName: "n4", Offline: &yes}).Locks(st)
	if LocksConflict(status, off) {
		t.Errorf("power-status of n5 %v conflicts with offline of n4 %v", status, off)
	}
	if !LocksConflict(status, (&OpNodeSetParams{NodeName: "n4", Offline: &yes, AutoPromote: true}).Locks(st)) {
		t.Errorf("offline with auto_promote does not wait for n5's lock")
	}
}
