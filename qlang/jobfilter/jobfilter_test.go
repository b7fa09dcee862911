package jobfilter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/qlang"
)

func decode(t testing.TB, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func job(id int64, ops ...string) *Job {
	j := &Job{ID: id}
	for _, o := range ops {
		d := json.NewDecoder(bytes.NewReader([]byte(o)))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			panic(err)
		}
		j.Ops = append(j.Ops, m)
		var rows []qlang.Row
		if trail, ok := m["reason"].([]any); ok {
			for _, e := range trail {
				l := e.([]any)
				ts, _ := l[2].(json.Number).Int64()
				rows = append(rows, ReasonRow(l[0].(string), l[1].(string), ts))
			}
		}
		j.Reasons = append(j.Reasons, rows)
	}
	return j
}

func TestMatch(t *testing.T) {
	maintd := `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1","reason":[["gnt:daemon:maintd","incident x: evacuate n1",1700000000000000000]]}`
	create := `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web2","beparams":{"memory":512},"reason":[["gnt:user","pink bunny",1]]}`
	for _, c := range []struct {
		preds string
		wm    int64
		job   *Job
		want  bool
	}{
		{`[]`, 0, job(5, create), true},
		{`[["jobid", [">", "id", "watermark"]]]`, 4, job(5, create), true},
		{`[["jobid", [">", "id", "watermark"]]]`, 5, job(5, create), false},
		{`[["jobid", ["|", ["=", "id", 3], ["<=", "id", "watermark"]]]]`, 7, job(5, create), true},
		{`[["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]]`, 0, job(5, create), true},
		{`[["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]]`, 0, job(5, maintd), false},
		{`[["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]]`, 0, job(5, maintd, create), true},
		{`[["opcode", ["=", "instance_name", "web2"]]]`, 0, job(5, create), true},
		{`[["opcode", ["=~", "instance_name", "^web"]]]`, 0, job(5, maintd), true},
		{`[["opcode", ["?", "beparams"]]]`, 0, job(5, maintd), false},
		{`[["reason", ["=", "source", "gnt:daemon:maintd"]]]`, 0, job(5, maintd), true},
		{`[["reason", ["=", "source", "gnt:daemon:maintd"]]]`, 0, job(5, create), false},
		{`[["reason", ["=~", "reason", "pink bunny"]]]`, 0, job(5, create), true},
		{`[["reason", [">", "timestamp", 1000]]]`, 0, job(5, create), false},
		{`[["reason", ["=", "source", "gnt:daemon:maintd"]], ["opcode", ["=", "OP_ID", "OP_INSTANCE_MIGRATE"]]]`, 0, job(5, maintd), true},
		{`[["reason", ["=", "source", "gnt:daemon:maintd"]], ["opcode", ["=", "OP_ID", "OP_NODE_EVACUATE"]]]`, 0, job(5, maintd), false},
	} {
		ps, err := Compile(decode(t, c.preds), c.wm)
		if err != nil {
			t.Errorf("%s: %v", c.preds, err)
			continue
		}
		if got := ps.Match(c.job); got != c.want {
			t.Errorf("%s (watermark %d) on job %d: %v, want %v", c.preds, c.wm, c.job.ID, got, c.want)
		}
	}
}

func TestCompileBad(t *testing.T) {
	for _, c := range []struct{ preds, want string }{
		{`{"jobid": 1}`, "predicates must be a list"},
		{`["jobid"]`, "predicate 0 must be a list"},
		{`[[]]`, "predicate 0 must be a list"},
		{`[[1, ["=", "id", 1]]]`, "name must be a string"},
		{`[["instance", ["=", "name", "x"]]]`, `unknown predicate "instance"`},
		{`[["jobid"]]`, "takes exactly one expression, got 0"},
		{`[["jobid", ["=", "id", 1], ["=", "id", 2]]]`, "takes exactly one expression, got 2"},
		{`[["jobid", null]]`, "got null"},
		{`[["jobid", ["=", "name", 1]]]`, `unknown field "name"`},
		{`[["jobid", ["=", "id", "x"]]]`, "expected an integer"},
		{`[["reason", ["=", "who", "x"]]]`, `unknown field "who"`},
		{`[["reason", ["=~", "reason", "("]]]`, "invalid regular expression"},
		{`[["opcode", ["~", "OP_ID", "x"]]]`, "unknown operator"},
		{`[["opcode", ["=", "OP_ID", 3]]]`, "expected a string"},
		{`[["opcode", "OP_ID"]]`, "expected a non-empty list"},
		{`[` + strings.Repeat(`["jobid", ["=", "id", 1]],`, MaxPredicates) + `["jobid", ["=", "id", 1]]]`, "at most 32 predicates"},
	} {
		_, err := Compile(decode(t, c.preds), 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.preds, err, c.want)
		}
	}
}

func TestActions(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // String(), or the error
	}{
		{`"ACCEPT"`, "ACCEPT"}, {`"PAUSE"`, "PAUSE"}, {`"REJECT"`, "REJECT"}, {`"CONTINUE"`, "CONTINUE"},
		{`["RATE_LIMIT", 10]`, "RATE_LIMIT 10"},
		{`"DROP"`, `unknown action "DROP"`},
		{`"accept"`, `unknown action "accept"`},
		{`"RATE_LIMIT"`, "needs its number"},
		{`["RATE_LIMIT", 0]`, "from 1 to"},
		{`["RATE_LIMIT", 1000001]`, "from 1 to"},
		{`["RATE_LIMIT", 1.5]`, "integer"},
		{`["RATE_LIMIT", "3"]`, "integer"},
		{`["PAUSE", 3]`, "must be [\"RATE_LIMIT\", n]"},
		{`3`, "an action is a string"},
	} {
		a, err := ParseAction(decode(t, c.in))
		got := a.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"RATE_LIMIT 10", "RATE_LIMIT 10"}, {"PAUSE", "PAUSE"}, {"RATE_LIMIT x", "integer"}, {"RATE_LIMIT -1", "from 1 to"},
		{"PAUSE 3", "got \"PAUSE 3\""}, {"", "got \"\""}, {"RATE_LIMIT 1 2", "got"},
	} {
		a, err := ParseActionText(c.in)
		got := a.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("text %q: %q, want %q", c.in, got, c.want)
		}
	}
}

// TestApplies: a chain is processed by priority, then watermark, then
// UUID; CONTINUE rules are passed over; no rule means accepted.
func TestApplies(t *testing.T) {
	rule := func(uuid string, prio int, wm int64, action Action, preds string) *Rule {
		ps, err := Compile(decode(t, preds), wm)
		if err != nil {
			t.Fatal(err)
		}
		return &Rule{UUID: uuid, Priority: prio, Watermark: wm, Action: action, Preds: ps}
	}
	maintd := job(9, `{"OP_ID":"OP_NODE_SET_PARAMS","reason":[["gnt:daemon:maintd","drain",1]]}`)
	other := job(10, `{"OP_ID":"OP_TAGS_SET"}`)
	chain := []*Rule{
		rule("c", 5, 0, Action{Name: Pause}, `[]`),
		rule("b", 1, 0, Action{Name: Continue}, `[]`),
		rule("a", 2, 0, Action{Name: Accept}, `[["reason", ["=", "source", "gnt:daemon:maintd"]]]`),
		rule("d", 5, 0, Action{Name: Reject}, `[]`),
	}
	Sort(chain)
	if got := Applies(chain, maintd); got == nil || got.UUID != "a" {
		t.Errorf("maintd job: %v", got)
	}
	if got := Applies(chain, other); got == nil || got.UUID != "c" {
		t.Errorf("other job: %v", got)
	}
	if got := Applies(chain[:2], other); got != nil {
		t.Errorf("CONTINUE and ACCEPT only: %v", got)
	}
}

// FuzzCompile: any predicates either compile or are refused with an
// error; compiled ones evaluate on a job without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`[["jobid", [">", "id", "watermark"]]]`, `[["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]]`,
		`[["reason", ["=~", "reason", "maintenance pink bunny"]]]`, `[]`, `null`, `[["jobid"]]`, `[[1]]`,
		`[["opcode", ["&", ["?", "x"], ["!", ["=[]", "tags", "a"]]]]]`, `{"a":1}`,
	} {
		f.Add([]byte(s))
	}
	j := job(5, `{"OP_ID":"OP_INSTANCE_CREATE","tags":["a"],"x":1,"reason":[["gnt:user","r",1]]}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			return
		}
		ps, err := Compile(v, 3)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		ps.Match(j)
	})
}
