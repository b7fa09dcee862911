package fsm

import (
	"fmt"
	"strings"
	"testing"
)

// TestMoreOpcodesBadInput: the opcodes of opcodes_more.go and
// opcodes_changegroup.go refuse bad input naming the field.
func TestMoreOpcodesBadInput(t *testing.T) {
	groups := make([]string, MaxTargetGroups+1)
	for k := range groups {
		groups[k] = fmt.Sprintf("%q", fmt.Sprintf("g%d", k))
	}
	many := make([]string, MaxQueryDataInstances+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"i%d"`, i)
	}
	for _, c := range []struct{ in, field string }{
		{`{"OP_ID":"OP_GROUP_RENAME","group_name":"g"}`, "new_name"},
		{`{"OP_ID":"OP_GROUP_RENAME","new_name":"h"}`, "group_name"},
		{`{"OP_ID":"OP_GROUP_RENAME","group_name":"g","new_name":"a b"}`, "new_name"},
		{`{"OP_ID":"OP_GROUP_RENAME","group_name":"g","new_name":"` + strings.Repeat("x", MaxGroupNameLen+1) + `"}`, "new_name"},
		{`{"OP_ID":"OP_GROUP_RENAME","group_name":"g","new_name":"h","x":1}`, "x"},
		{`{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g"}`, "nodes"},
		{`{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g","nodes":[]}`, "nodes"},
		{`{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g","nodes":["n1","n1"]}`, "nodes"},
		{`{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g","nodes":[""]}`, "nodes"},
		{`{"OP_ID":"OP_GROUP_ASSIGN_NODES","group_name":"g","nodes":[1]}`, "nodes"},
		{`{"OP_ID":"OP_GROUP_ASSIGN_NODES","nodes":["n1"]}`, "group_name"},
		{`{"OP_ID":"OP_CLUSTER_REDIST_CONF","force":true}`, "force"},
		{`{"OP_ID":"OP_INSTANCE_QUERY_DATA","instances":["a b"]}`, "instances"},
		{`{"OP_ID":"OP_INSTANCE_QUERY_DATA","instances":[` + strings.Join(many, ",") + `]}`, "instances"},
		{`{"OP_ID":"OP_INSTANCE_QUERY_DATA","static":"yes"}`, "static"},
		{`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC"}`, "instance_names"},
		{`{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"w","disk":0}`, "amount"},
		{`{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"w","disk":0,"amount":1073741825}`, "amount"},
		{`{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"w","disk":16,"amount":1}`, "disk"},
		{`{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"w","disk":-1,"amount":1}`, "disk"},
		{`{"OP_ID":"OP_INSTANCE_GROW_DISK","disk":0,"amount":1}`, "instance_name"},
		{`{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS"}`, "instance_name"},
		{`{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS","instance_name":"w","disks":[0]}`, "disks"},
		{`{"OP_ID":"OP_INSTANCE_DEACTIVATE_DISKS","instance_name":"w","force":"yes"}`, "force"},
		{`{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"w","disk":0,"amount":1,"ignore_ipolicy":true}`, "ignore_ipolicy"},
		{`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instance_names":["a","a"]}`, "instance_names"},
		{`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instance_names":["a b"]}`, "instance_names"},
		{`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instances":[{"instance_name":"a"}]}`, "instances"},
		{`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instance_names":["a"],"failed":["a"]}`, "failed"},
		{`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","failed":["a b"]}`, "failed"},
		{`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instance_names":[],"failed":[]}`, "instance_names"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP"}`, "instance_name"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"` + strings.Repeat("x", MaxHostnameLen+1) + `"}`, "instance_name"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":[""]}`, "target_groups.0"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":["g","g"]}`, "target_groups.1"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":["` + strings.Repeat("x", MaxGroupNameLen+1) + `"]}`, "target_groups.0"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":[` + strings.Join(groups, ",") + `]}`, "target_groups"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":"g"}`, "target_groups"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","iallocator":"../x"}`, "iallocator"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","early_release":"yes"}`, "early_release"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","sequential":true}`, "sequential"},
		{`{"OP_ID":"OP_GROUP_EVACUATE"}`, "group_name"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"` + strings.Repeat("x", MaxGroupNameLen+1) + `"}`, "group_name"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","target_groups":["g"]}`, "target_groups.0"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","target_groups":["h","h"]}`, "target_groups.1"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","force_failover":1}`, "force_failover"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","iallocator":"a,a"}`, "iallocator"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","instance_name":"w"}`, "instance_name"},
	} {
		_, err := ParseOpcode([]byte(c.in))
		if err == nil {
			t.Errorf("%.80s: accepted", c.in)
			continue
		}
		if e := AsError(err); e.Field != c.field || e.Code != CodeInval {
			t.Errorf("%.80s: %v (field %q), want field %q", c.in, e, e.Field, c.field)
		}
	}
}

// TestGroupAssignNodesSplit: moving one node of a drbd instance into
// another group is refused unless forced, and moving both is not a split.
func TestGroupAssignNodesSplit(t *testing.T) {
	s := &State{Groups: map[string]*Group{"g1": {Name: "default", UUID: "g1"}, "g2": {Name: "other", UUID: "g2"}},
		Nodes:     map[string]*Node{"n1": {Name: "node1", UUID: "n1", Group: "g1"}, "n2": {Name: "node2", UUID: "n2", Group: "g1"}},
		Instances: map[string]*Instance{"i1": {Name: "db1", UUID: "i1", PrimaryNode: "n1", SecondaryNodes: []string{"n2"}}}}
	s.reindex()
	apply := func(o *OpGroupAssignNodes) *Error {
		tx := s.begin(1)
		_, e := o.apply(tx, "")
		return e
	}
	if e := apply(&OpGroupAssignNodes{GroupName: "other", Nodes: []string{"node2"}}); e == nil || e.Code != CodeState || !strings.Contains(e.Msg, "db1") {
		t.Errorf("a split: %v", e)
	}
	if e := apply(&OpGroupAssignNodes{GroupName: "other", Nodes: []string{"node2"}, Force: true}); e != nil {
		t.Errorf("a forced split: %v", e)
	}
	if e := apply(&OpGroupAssignNodes{GroupName: "other", Nodes: []string{"node1", "node2"}}); e != nil {
		t.Errorf("moving both nodes: %v", e)
	}
	if e := apply(&OpGroupAssignNodes{GroupName: "nosuch", Nodes: []string{"node1"}}); e == nil || e.Code != CodeNoEnt {
		t.Errorf("an unknown group: %v", e)
	}
}

// TestChangeGroupOpcodesParse: Ganeti's OP_INSTANCE_CHANGE_GROUP and
// OP_GROUP_EVACUATE with every parameter gnt takes parse, and so does a
// multi-allocation none of whose instances could be placed.
func TestChangeGroupOpcodesParse(t *testing.T) {
	for _, in := range []string{
		`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","iallocator":"hail,mine","target_groups":["g2","g3"],"early_release":true}`,
		`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","target_groups":["h"],"sequential":true,"force_failover":true,"early_release":true}`,
		`{"OP_ID":"OP_INSTANCE_MULTI_ALLOC","instance_names":[],"failed":["b"]}`,
	} {
		if _, err := ParseOpcode([]byte(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}
