package fsm

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestOpRepairCommand: OP_REPAIR_COMMAND parses with Ganeti's fields,
// refuses bad ones naming the field, and locks its node exclusively.
func TestOpRepairCommand(t *testing.T) {
	op, err := ParseOpcode([]byte(`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":"replace-disk","input":"{\"status\":\"live-repair\"}",
		"reason":[["gnt:daemon:maintd","incident 1",1]]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := op.(*OpRepairCommand)
	if o.NodeName != "node3" || o.Command != "replace-disk" || o.Input != `{"status":"live-repair"}` || o.Summary() != "REPAIR_COMMAND(node3)" || IsConfigOnly(op) {
		t.Fatalf("parsed %+v (%s)", o, o.Summary())
	}
	want := []LockDecl{{Level: LockCluster, Names: []string{LockBGL}}, {Level: LockNode, Names: []string{"node3"}, Exclusive: true}}
	if got := o.Locks(&State{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("locks %+v", got)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"OP_ID":"OP_REPAIR_COMMAND","command":"x"}`, "node_name"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3"}`, "command"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":"../bin/sh"}`, "command"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":".."}`, "command"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":"a\u0000b"}`, "command"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":"` + strings.Repeat("x", 256) + `"}`, "command"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":"x","input":"` + strings.Repeat("x", MaxRepairInput+1) + `"}`, "input"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":"x","input":{"status":"Ok"}}`, "input"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":["x"]}`, "command"},
		{`{"OP_ID":"OP_REPAIR_COMMAND","node_name":"node3","command":"x","node_uuid":"u"}`, "node_uuid"},
	} {
		_, err := ParseOpcode([]byte(tc.body))
		var fe *Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%.80s: %v, want a refusal of %s", tc.body, err, tc.field)
		}
	}
}
