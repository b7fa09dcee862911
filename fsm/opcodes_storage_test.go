package fsm

import (
	"errors"
	"strings"
	"testing"
)

// TestStorageOpcodes: the storage-unit opcodes parse with Ganeti's fields
// and refuse bad ones naming the field.
func TestStorageOpcodes(t *testing.T) {
	op, err := ParseOpcode([]byte(`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["node1"],"storage_type":"file","output_fields":["name","size","used","free"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if q := op.(*OpNodeQueryStorage); q.StorageType != StorageFile || len(q.OutputFields) != 4 || q.Summary() != "NODE_QUERY_STORAGE(node1)" || IsConfigOnly(op) {
		t.Fatalf("parsed %+v", q)
	}
	op, err = ParseOpcode([]byte(`{"OP_ID":"OP_NODE_MODIFY_STORAGE","node_name":"node1","storage_type":"lvm-pv","name":"/dev/sdb","changes":{"allocatable":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m := op.(*OpNodeModifyStorage); m.Changes.Allocatable == nil || *m.Changes.Allocatable || IsConfigOnly(op) {
		t.Fatalf("parsed %+v", m)
	}
	if _, err := ParseOpcode([]byte(`{"OP_ID":"OP_REPAIR_NODE_STORAGE","node_name":"node1","storage_type":"lvm-vg","name":"xenvg"}`)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, field, msg string }{
		{`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["node1"],"storage_type":"rados","output_fields":["name"]}`, "storage_type", "not supported"},
		{`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["node1"],"storage_type":"tape","output_fields":["name"]}`, "storage_type", "unknown storage type"},
		{`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["node1"],"storage_type":"file","output_fields":[]}`, "output_fields", "at least one"},
		{`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["node1"],"storage_type":"file","output_fields":["name","colour"]}`, "output_fields", `"colour"`},
		{`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["no de"],"storage_type":"file","output_fields":["name"]}`, "nodes", ""},
		{`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["node1"],"storage_type":"file","output_fields":["name"],"name":"a\u0001"}`, "name", "control"},
		{`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["node1"],"storage_type":"file","output_fields":["name"],"bogus":1}`, "bogus", ""},
		{`{"OP_ID":"OP_NODE_MODIFY_STORAGE","node_name":"node1","storage_type":"lvm-vg","name":"xenvg","changes":{"allocatable":false}}`, "storage_type", "no modifiable fields"},
		{`{"OP_ID":"OP_NODE_MODIFY_STORAGE","node_name":"node1","storage_type":"lvm-pv","name":"/dev/sdb","changes":{}}`, "changes", "allocatable"},
		{`{"OP_ID":"OP_NODE_MODIFY_STORAGE","node_name":"node1","storage_type":"lvm-pv","name":"","changes":{"allocatable":true}}`, "name", "1 to"},
		{`{"OP_ID":"OP_NODE_MODIFY_STORAGE","node_name":"node1","storage_type":"lvm-pv","name":"/dev/sdb","changes":{"size":1}}`, "size", ""},
		{`{"OP_ID":"OP_NODE_MODIFY_STORAGE","storage_type":"lvm-pv","name":"/dev/sdb","changes":{"allocatable":true}}`, "node_name", ""},
		{`{"OP_ID":"OP_REPAIR_NODE_STORAGE","node_name":"node1","storage_type":"file","name":"/srv"}`, "storage_type", "cannot be repaired"},
		{`{"OP_ID":"OP_REPAIR_NODE_STORAGE","node_name":"node1","storage_type":"lvm-vg","name":"` + strings.Repeat("v", MaxStorageName+1) + `"}`, "name", "1 to"},
	} {
		_, err := ParseOpcode([]byte(tc.body))
		var fe *Error
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("%.100s: %v, want a refusal of %s saying %q", tc.body, err, tc.field, tc.msg)
		}
	}
}
