package jobs

import (
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
)

// TestEvacuationPlan: an external allocator's node-evacuate answer
// becomes the moves gnt runs, each instance's new nodes naming its kind;
// answers that would keep an instance on the evacuated node, leave it in
// place or give a drbd instance one node are refused, and instances the
// answer could not move fail the plan with the allocator's reasons.
func TestEvacuationPlan(t *testing.T) {
	d, epoch := instanceSetup(t, "n3", "n4")
	runExecutorWith(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch})
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"r1","disk_template":"drbd","disks":[{"size":1024}],"pnode":"n1","snode":"n2","forthcoming":true,"os_type":"noop"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"p1","disk_template":"plain","disks":[{"size":1024}],"pnode":"n2","forthcoming":true,"os_type":"noop"}`)
	moved := func(name string, nodes ...string) iallocator.Moved {
		return iallocator.Moved{Name: name, Group: "default", Nodes: nodes}
	}
	for _, c := range []struct {
		name, node string
		ans        iallocator.Answer
		want       string // the moves "instance:kind:primary:secondary", or the error
	}{
		{"new secondary", "n2", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n1", "n3"), moved("p1", "n4")}},
			"r1:replace_secondary:n1:n3 p1:recreate:n4:"},
		{"relocate", "n2", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n3", "n4")}}, "r1:relocate:n3:n4"},
		{"failover", "n1", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n2", "n3")}}, "r1:failover_replace:n2:n3"},
		{"failover only", "n3", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n2", "n1")}}, "r1:failover:n2:n1"},
		{"stays on the node", "n2", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n2", "n3")}}, "error: the answer leaves r1 on n2, the node being evacuated"},
		{"in place", "n3", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n1", "n2")}}, "error: the answer leaves r1 where it is"},
		{"one node for drbd", "n2", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n3")}}, "error: the answer gives drbd instance r1 1 node(s)"},
		{"unknown node", "n2", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n1", "n9")}}, "error: node n9, which does not exist"},
		{"not moved", "n2", iallocator.Answer{Moved: []iallocator.Moved{moved("r1", "n1", "n3")}, NotMoved: []iallocator.NotMoved{{Name: "p1", Reason: "n4 is full"}, {Name: "x"}}},
			"error: cannot evacuate n2: p1: n4 is full; x: no reason given"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p alloc.Plan
			var err error
			d.f.Read(func(s *fsm.State, _ uint64) { p, err = evacuationPlan(s, c.node, alloc.EvacAll, &c.ans) })
			var got []string
			for _, m := range p.Moves {
				got = append(got, strings.Join([]string{m.Instance, m.Kind, m.NewPrimaryName, m.NewSecondaryName}, ":"))
			}
			s := strings.Join(got, " ")
			if err != nil {
				s = "error: " + err.Error()
			}
			if !strings.Contains(s, strings.TrimPrefix(c.want, "error: ")) || strings.HasPrefix(c.want, "error") != (err != nil) {
				t.Errorf("got %q, want %q", s, c.want)
			}
		})
	}
}
