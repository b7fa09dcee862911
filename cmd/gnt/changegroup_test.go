package main

import (
	"strings"
	"testing"
)

// TestChangeGroupJobs: gnt instance change-group and gnt group evacuate
// submit Ganeti's opcodes through POST /2/jobs with the flags given;
// --dry-run marks the job a dry run.
func TestChangeGroupJobs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ops  string
		dry  bool
	}{
		{[]string{"instance", "change-group", "web1"}, `[{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","instance_name":"web1"}]`, false},
		{[]string{"instance", "change-group", "-I", "mine,hail", "--to", "g2", "--to", "g3", "--early-release", "web1"},
			`[{"OP_ID":"OP_INSTANCE_CHANGE_GROUP","early_release":true,"iallocator":"mine,hail","instance_name":"web1","target_groups":["g2","g3"]}]`, false},
		{[]string{"group", "evacuate", "--dry-run", "--to", "g2", "default"},
			`[{"OP_ID":"OP_GROUP_EVACUATE","group_name":"default","target_groups":["g2"]}]`, true},
		{[]string{"group", "evacuate", "--force-failover", "--sequential", "default"},
			`[{"OP_ID":"OP_GROUP_EVACUATE","force_failover":true,"group_name":"default","sequential":true}]`, false},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := newFake(t)
			f.on("GET", "/2/jobs/7", 200, oobJob(`{"jobs":[[true,7]]}`))
			r := gnt(t, nil, append([]string{"--server", f.addr()}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := compactJSON(submitted(t, f)); got != tc.ops {
				t.Errorf("opcodes\n got %s\nwant %s", got, tc.ops)
			}
			for _, req := range f.requests() {
				if req.Method == "POST" && req.Path == "/2/jobs" && (req.Query.Get("dry-run") != "") != tc.dry {
					t.Errorf("query %q, dry run %v", req.Query, tc.dry)
				}
			}
		})
	}
	f := newFake(t)
	if r := gnt(t, nil, "--server", f.addr(), "group", "evacuate"); r.code != 2 {
		t.Errorf("evacuate without a group: exit %d, %s", r.code, r.stderr)
	}
}
