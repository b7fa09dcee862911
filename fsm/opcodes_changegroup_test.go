package fsm

import (
	"fmt"
	"strings"
	"testing"
)

// TestChangeGroupOpcodesRefuse: bad OP_INSTANCE_CHANGE_GROUP and
// OP_GROUP_EVACUATE are refused naming the field; good ones parse.
func TestChangeGroupOpcodesRefuse(t *testing.T) {
	many := make([]string, MaxTargetGroups+1)
	for k := range many {
		many[k] = fmt.Sprintf("%q", fmt.Sprintf("g%d", k))
	}
	for _, c := range []struct{ in, field string }{
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP"}`, "instance_name"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"` + strings.Repeat("x", MaxHostnameLen+1) + `"}`, "instance_name"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":[""]}`, "target_groups.0"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":["g","g"]}`, "target_groups.1"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":["` + strings.Repeat("x", MaxGroupNameLen+1) + `"]}`, "target_groups.0"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":[` + strings.Join(many, ",") + `]}`, "target_groups"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","target_groups":"g"}`, "target_groups"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","iallocator":"../x"}`, "iallocator"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","early_release":"yes"}`, "early_release"},
		{`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","sequential":true}`, "sequential"},
		{`{"OP_ID":"OP_GROUP_EVACUATE"}`, "group_name"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"` + strings.Repeat("x", MaxGroupNameLen+1) + `"}`, "group_name"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","target_groups":["g"]}`, "target_groups.0"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","target_groups":["h","h"]}`, "target_groups.1"},
		{`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","force_failover":true}`, "force_failover"},
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
	for _, in := range []string{
		`{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"w","iallocator":"hail,mine","target_groups":["g2","g3"],"early_release":true}`,
		`{"OP_ID":"OP_GROUP_EVACUATE","group_name":"g","target_groups":["h"],"sequential":true,"force_failover":false,"early_release":true}`,
	} {
		if _, err := ParseOpcode([]byte(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}
