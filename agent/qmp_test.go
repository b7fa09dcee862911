package agent

import (
	"strings"
	"testing"
)

// TestParseQMP: QEMU's messages parse to their kind; anything else is
// refused with a message saying what is wrong.
func TestParseQMP(t *testing.T) {
	good := []struct {
		in   string
		want func(m qmpMessage) bool
	}{
		{`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}`, func(m qmpMessage) bool { return m.Greeting }},
		{`{"return": {}, "id": "gnt-1"}`, func(m qmpMessage) bool { return string(m.Return) == "{}" && m.ID == "gnt-1" }},
		{`{"return": [{"cpu-index": 0}], "id": 7}`, func(m qmpMessage) bool { return m.ID == "7" }},
		{`{"error": {"class": "GenericError", "desc": "Node name too long"}, "id": "gnt-2"}`, func(m qmpMessage) bool {
			return m.Error != nil && m.Error.Class == "GenericError" && m.ID == "gnt-2"
		}},
		{`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "POWERDOWN"}`, func(m qmpMessage) bool { return m.Event == "POWERDOWN" }},
		{"  {\"return\": 3}\r\n", func(m qmpMessage) bool { return string(m.Return) == "3" }},
	}
	for _, c := range good {
		m, err := parseQMP([]byte(c.in))
		if err != nil || !c.want(m) {
			t.Errorf("%s: %+v %v", c.in, m, err)
		}
	}
	bad := []struct{ in, want string }{
		{``, "empty message"},
		{`   `, "empty message"},
		{`[1]`, "not a JSON object"},
		{`null`, "not a JSON object"},
		{`"return"`, "not a JSON object"},
		{`{"return": {}`, "not a JSON object"},
		{`{"return": {}} {"return": {}}`, "trailing data"},
		{`{}`, "exactly one of"},
		{`{"return": 1, "error": {"class": "X"}}`, "exactly one of"},
		{`{"id": "x"}`, "exactly one of"},
		{`{"error": "boom"}`, "error reply is not an object"},
		{`{"error": {"desc": "no class"}}`, "without a class"},
		{`{"event": ""}`, "event without a name"},
		{`{"event": 3}`, "event without a name"},
		{`{"QMP": 1}`, "greeting is not an object"},
		{`{"return": {}, "id": {"a": 1}}`, "id is neither"},
		{`{"return": "` + strings.Repeat("x", maxQMPLine) + `"}`, "over the limit"},
	}
	for _, c := range bad {
		if _, err := parseQMP([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60s: %v, want an error with %q", c.in, err, c.want)
		}
	}
}

// FuzzParseQMP: no input crashes the parser, and what it accepts is one
// kind of message.
func FuzzParseQMP(f *testing.F) {
	for _, s := range []string{`{"QMP": {"version": {}}}`, `{"return": {}, "id": "gnt-1"}`, `{"error": {"class": "GenericError", "desc": "x"}}`,
		`{"event": "STOP", "timestamp": {}}`, `{"return": [], "id": 3}`, `{}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseQMP(b)
		if err != nil {
			return
		}
		kinds := 0
		for _, k := range []bool{m.Greeting, m.Return != nil, m.Error != nil, m.Event != ""} {
			if k {
				kinds++
			}
		}
		if kinds != 1 {
			t.Fatalf("%q parsed to %d kinds: %+v", b, kinds, m)
		}
		if m.Error != nil && m.Error.Class == "" {
			t.Fatalf("%q: an error without a class", b)
		}
	})
}
