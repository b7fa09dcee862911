package rpc

import (
	"encoding/json"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestWithTrail: the reason trail is added to an opcode's text only when
// the object has no reason yet, and the result decodes to the opcode plus
// the trail.
func TestWithTrail(t *testing.T) {
	trail := []byte(`[["gnt:library:rlib2","POST /2/jobs",1700000000000000123]]`)
	for _, c := range []struct {
		raw string
		ok  bool
		op  bool // the result is an opcode ParseOpcode takes
	}{
		{`{"OP_ID":"OP_TEST_DELAY","duration":0}`, true, true},
		{"{\"OP_ID\":\"OP_TEST_DELAY\"}\n  ", true, true},
		{`{"OP_ID":"OP_TEST_DELAY","reason":[["a","b",1]]}`, false, false},
		{`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["reason"]}`, false, false},
		{`{}`, true, false},
		{"{ \n }", true, false},
		{`[]`, false, false},
		{``, false, false},
		{` }`, false, false},
	} {
		out, ok := withTrail([]byte(c.raw), trail)
		if ok != c.ok {
			t.Errorf("%q: ok=%v, want %v", c.raw, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%q gave invalid JSON %s: %v", c.raw, out, err)
		}
		if string(m["reason"]) != string(trail) {
			t.Errorf("%q: reason %s", c.raw, m["reason"])
		}
		if c.op {
			op, err := fsm.ParseOpcode(out)
			if err != nil || len(op.Common().Reason) != 1 || op.Common().Reason[0].TimeNS != 1700000000000000123 {
				t.Errorf("%q: parsed %+v %v", c.raw, op, err)
			}
		}
	}
}
