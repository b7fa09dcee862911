package alloc

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

const gib = 1024

func wantCode(t *testing.T, err error, code fsm.Code) *fsm.Error {
	t.Helper()
	var fe *fsm.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not an *fsm.Error", err, err)
	}
	if fe.Code != code {
		t.Fatalf("error code %s, want %s: %v", fe.Code, code, err)
	}
	return fe
}

func TestAllocatePlacement(t *testing.T) {
	tests := []struct {
		name    string
		c       *cluster
		req     Request
		opts    Options
		pri     string
		sec     string
		group   string
		errCode fsm.Code
		errMsg  string // exact, when set
		errHas  []string
	}{
		{
			name: "emptiest node",
			c: newCluster().node("n1", "g", 8*gib, 100*gib, 8).node("n2", "g", 8*gib, 100*gib, 8).
				inst("x", TemplatePlain, "n1", "", 4*gib, 10*gib, 2),
			req: plain(1*gib, 1*gib, 1), pri: "n2",
		},
		{
			name: "ties go to the first name",
			c:    newCluster().node("n2", "g", 8*gib, 100*gib, 8).node("n1", "g", 8*gib, 100*gib, 8),
			req:  plain(1*gib, 1*gib, 1), pri: "n1",
		},
		{
			name: "bigger node takes it when both are empty",
			c:    newCluster().node("a", "g", 8*gib, 100*gib, 8).node("b", "g", 16*gib, 200*gib, 16),
			req:  plain(2*gib, 10*gib, 1), pri: "b",
		},
		{
			name: "offline, drained, not vm_capable and dead nodes take nothing",
			c: newCluster().node("a", "g", 64*gib, 900*gib, 64, offline).node("b", "g", 64*gib, 900*gib, 64, drained).
				node("c", "g", 64*gib, 900*gib, 64, notVM).node("d", "g", 64*gib, 900*gib, 64).
				node("e", "g", 8*gib, 100*gib, 8).inst("x", TemplatePlain, "e", "", 6*gib, 10*gib, 1),
			opts: Options{Dead: map[string]bool{uuid("d"): true}},
			req:  plain(1*gib, 1*gib, 1), pri: "e",
		},
		{
			name: "nodes running another hypervisor take nothing; unknown drivers stay usable",
			c: newCluster().node("a", "g", 64*gib, 900*gib, 64, runs("fake")).node("b", "g", 8*gib, 100*gib, 8, runs("kvm")).
				node("c", "g", 4*gib, 100*gib, 8),
			req: func() Request { r := plain(1*gib, 1*gib, 1); r.Hypervisor = "kvm"; return r }(), pri: "b",
		},
		{
			name:    "no node runs the hypervisor",
			c:       newCluster().node("a", "g", 64*gib, 900*gib, 64, runs("fake")),
			req:     Request{Name: "web1", Template: TemplatePlain, MemoryMiB: 1024, Disks: []int64{1024}, VCPUs: 1, Hypervisor: "kvm"},
			errCode: fsm.CodeNoRes, errHas: []string{"a is running another hypervisor"},
		},
		{
			name: "dead by name",
			c:    newCluster().node("a", "g", 64*gib, 900*gib, 64).node("b", "g", 8*gib, 100*gib, 8),
			opts: Options{Dead: map[string]bool{"a": true}},
			req:  plain(1*gib, 1*gib, 1), pri: "b",
		},
		{
			name: "the issue's message",
			c: newCluster().node("node21", "default", 4*gib, 100*gib, 8).node("node22", "default", 4*gib, 100*gib, 8).
				node("node23", "default", 64*gib, 100*gib, 8, offline).
				inst("x", TemplatePlain, "node21", "", 3*gib, 1*gib, 1).inst("y", TemplatePlain, "node22", "", 3584, 1*gib, 1),
			req:     Request{Name: "web1", Template: TemplatePlain, MemoryMiB: 4096, Disks: []int64{1024}, VCPUs: 1},
			errCode: fsm.CodeNoRes,
			errMsg:  "cannot place web1 (plain, 4096 MiB memory, 1024 MiB disk, 1 vcpus): no node has 4096 MiB free memory: node21 has 1024, node22 has 512; node23 is offline",
		},
		{
			name: "short of different things on different nodes",
			c: newCluster().node("a", "g", 2*gib, 100*gib, 8).node("b", "g", 8*gib, 5*gib, 8).node("c", "g", 8*gib, 100*gib, 1).
				node("d", "g", 8*gib, 100*gib, 8, drained).node("e", "g", 8*gib, 100*gib, 8, drained),
			req:     plain(4*gib, 10*gib, 2),
			errCode: fsm.CodeNoRes,
			errMsg:  "cannot place the instance (plain, 4096 MiB memory, 10240 MiB disk, 2 vcpus): too little free memory (4096 MiB needed): a has 2048; too little free disk (10240 MiB needed): b has 5120 (declared disk, no storage report yet); too few free vcpus (2 needed): c has 1; d, e are drained",
		},
		{
			name:    "an empty cluster",
			c:       newCluster(),
			req:     plain(1, 1, 1),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"the cluster has no nodes"},
		},
		{
			name: "forthcoming instances count like real ones",
			c: newCluster().node("a", "g", 8*gib, 100*gib, 8).node("b", "g", 8*gib, 100*gib, 8).
				inst("f", TemplatePlain, "a", "", 7*gib, 1*gib, 1, forthcoming).
				inst("s", TemplatePlain, "b", "", 7*gib, 1*gib, 1, down),
			req:     plain(2*gib, 1*gib, 1),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"no node has 2048 MiB free memory: a has 1024, b has 1024"},
		},
		{
			name: "vcpus are a capacity",
			c: newCluster().node("a", "g", 8*gib, 100*gib, 2).
				inst("x", TemplatePlain, "a", "", 1*gib, 1*gib, 2),
			req:     plain(1*gib, 1*gib, 1),
			errCode: fsm.CodeNoRes,
			errHas:  []string{"no node has 1 free vcpus: a has 0"},
		},
		{
			name: "vcpu ratio",
			c: newCluster().node("a", "g", 8*gib, 100*gib, 2).
				inst("x", TemplatePlain, "a", "", 1*gib, 1*gib, 2),
			opts: Options{VCPURatio: 2},
			req:  plain(1*gib, 1*gib, 2), pri: "a",
		},
		{
			name: "diskless needs no disk",
			c:    newCluster().node("a", "g", 8*gib, 0, 2),
			req:  Request{Template: TemplateDiskless, MemoryMiB: 1 * gib, VCPUs: 1}, pri: "a",
		},
		{
			name: "exclude",
			c:    newCluster().node("a", "g", 8*gib, 100*gib, 8).node("b", "g", 4*gib, 100*gib, 8),
			req:  Request{Template: TemplatePlain, MemoryMiB: 1 * gib, Exclude: []string{"a"}}, pri: "b",
		},
		{
			name:    "all excluded",
			c:       newCluster().node("a", "g", 8*gib, 100*gib, 8),
			req:     Request{Template: TemplatePlain, MemoryMiB: 1 * gib, Exclude: []string{uuid("a")}},
			errCode: fsm.CodeNoRes, errHas: []string{"a is excluded"},
		},

		// Node groups.
		{
			name: "preferred before last_resort even when fuller",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocLastResort).
				node("a", "g1", 8*gib, 100*gib, 8).node("b", "g2", 64*gib, 900*gib, 64).
				inst("x", TemplatePlain, "a", "", 6*gib, 10*gib, 4),
			req: plain(1*gib, 1*gib, 1), pri: "a", group: "g1",
		},
		{
			name: "last_resort when no preferred group fits",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocLastResort).
				node("a", "g1", 8*gib, 100*gib, 8).node("b", "g2", 8*gib, 100*gib, 8).
				inst("x", TemplatePlain, "a", "", 7*gib, 10*gib, 4),
			req: plain(2*gib, 1*gib, 1), pri: "b", group: "g2",
		},
		{
			name: "never unallocable",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g3", fsm.AllocUnallocable).
				node("a", "g1", 8*gib, 100*gib, 8).node("b", "g3", 64*gib, 900*gib, 64).
				inst("x", TemplatePlain, "a", "", 7*gib, 10*gib, 4),
			req:     plain(2*gib, 1*gib, 1),
			errCode: fsm.CodeNoRes,
			errMsg:  "cannot place the instance (plain, 2048 MiB memory, 1024 MiB disk, 1 vcpus): no node has 2048 MiB free memory: a has 1024; node group g3 is unallocable",
		},
		{
			name: "the emptier of two preferred groups",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocPreferred).
				node("a1", "g1", 8*gib, 100*gib, 8).node("a2", "g1", 8*gib, 100*gib, 8).
				node("b1", "g2", 8*gib, 100*gib, 8).node("b2", "g2", 8*gib, 100*gib, 8).
				inst("x", TemplatePlain, "a2", "", 4*gib, 10*gib, 4).inst("y", TemplatePlain, "b1", "", 1*gib, 1*gib, 1),
			req: plain(1*gib, 1*gib, 1), pri: "b2", group: "g2",
		},
		{
			name: "a pinned group",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocLastResort).
				node("a", "g1", 64*gib, 900*gib, 64).node("b", "g2", 8*gib, 100*gib, 8),
			req: Request{Template: TemplatePlain, MemoryMiB: 1 * gib, Group: "g2"}, pri: "b", group: "g2",
		},
		{
			name: "a pinned group that is full names only its nodes",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocPreferred).
				node("a", "g1", 64*gib, 900*gib, 64).node("b", "g2", 1*gib, 100*gib, 8),
			req:     Request{Template: TemplatePlain, MemoryMiB: 2 * gib, Group: uuid("g2")},
			errCode: fsm.CodeNoRes,
			errMsg:  "cannot place the instance (plain, 2048 MiB memory, 0 MiB disk, 0 vcpus): no node has 2048 MiB free memory: b has 1024",
		},
		{
			name: "per group messages",
			c: newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocLastResort).
				node("a", "g1", 1*gib, 100*gib, 8).node("b", "g2", 1*gib, 100*gib, 8, offline),
			req:     Request{Template: TemplatePlain, MemoryMiB: 2 * gib},
			errCode: fsm.CodeNoRes,
			errHas:  []string{"in group g1: no node has 2048 MiB free memory: a has 1024; in group g2: b is offline"},
		},
		{
			name:    "a pinned unallocable group",
			c:       newCluster().group("g3", fsm.AllocUnallocable).node("a", "g3", 8*gib, 100*gib, 8),
			req:     Request{Template: TemplatePlain, Group: "g3"},
			errCode: fsm.CodeInval,
		},
		{
			name:    "an unknown group",
			c:       newCluster().node("a", "g", 8*gib, 100*gib, 8),
			req:     Request{Template: TemplatePlain, Group: "nope"},
			errCode: fsm.CodeNoEnt,
		},
		{
			name:    "only unallocable groups",
			c:       newCluster().group("g3", fsm.AllocUnallocable).node("a", "g3", 8*gib, 100*gib, 8),
			req:     Request{Template: TemplatePlain},
			errCode: fsm.CodeNoRes, errHas: []string{"node group g3 is unallocable"},
		},

		// drbd.
		{
			name: "drbd: two nodes of one group",
			c: newCluster().group("big", fsm.AllocPreferred).group("small", fsm.AllocPreferred).
				node("big1", "big", 256*gib, 9000*gib, 64).
				node("s1", "small", 8*gib, 100*gib, 8).node("s2", "small", 8*gib, 100*gib, 8),
			req: drbd(1*gib, 1*gib, 1), pri: "s1", sec: "s2", group: "small",
		},
		{
			name: "drbd metadata counts on both nodes",
			c:    newCluster().node("a", "g", 8*gib, 1024+DRBDMetaMiB, 8).node("b", "g", 8*gib, 1024+DRBDMetaMiB, 8),
			req:  drbd(1*gib, 1024, 1), pri: "a", sec: "b",
		},
		{
			name:    "drbd metadata short by one",
			c:       newCluster().node("a", "g", 8*gib, 1024+DRBDMetaMiB-1, 8).node("b", "g", 8*gib, 1024+DRBDMetaMiB, 8),
			req:     drbd(1*gib, 1024, 1),
			errCode: fsm.CodeNoRes,
			errMsg:  "cannot place the instance (drbd, 1024 MiB memory, 1152 MiB disk on each node, 1 vcpus): no drbd secondary for a primary on b: no other node has 1152 MiB free disk: a has 1151 (declared disk, no storage report yet)",
		},
		{
			name:    "drbd in a one-node group",
			c:       newCluster().node("a", "g", 8*gib, 100*gib, 8).node("b", "g", 8*gib, 100*gib, 8, offline),
			req:     drbd(1*gib, 1024, 1),
			errCode: fsm.CodeNoRes,
			errMsg:  "cannot place the instance (drbd, 1024 MiB memory, 1152 MiB disk on each node, 1 vcpus): no drbd secondary for a primary on a: a cannot be its own secondary; b is offline",
		},
		{
			name: "drbd: a secondary must be able to take over the memory",
			c: newCluster().node("a", "g", 8*gib, 100*gib, 8).node("b", "g", 8*gib, 100*gib, 8).node("c", "g", 8*gib, 100*gib, 8).
				inst("x", TemplatePlain, "a", "", 7*gib, 1*gib, 1).inst("y", TemplatePlain, "b", "", 7*gib, 1*gib, 1),
			req:     drbd(2*gib, 1*gib, 1),
			errCode: fsm.CodeNoRes,
			errMsg:  "cannot place the instance (drbd, 2048 MiB memory, 1152 MiB disk on each node, 1 vcpus): no drbd secondary for a primary on c: too little free memory to take over as secondary (N+1): a has 1024 MiB free, needs 2048, b has 1024 MiB free, needs 2048",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Allocate(tc.c.st, tc.req, tc.opts)
			if tc.errCode != "" {
				if err == nil {
					t.Fatalf("placed on %v, want an error", res.NodeNames())
				}
				fe := wantCode(t, err, tc.errCode)
				if tc.errMsg != "" && fe.Msg != tc.errMsg {
					t.Fatalf("message\n got %q\nwant %q", fe.Msg, tc.errMsg)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(fe.Msg, s) {
						t.Fatalf("message %q does not contain %q", fe.Msg, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.PrimaryName != tc.pri || res.SecondaryName != tc.sec {
				t.Fatalf("placed on %v, want [%s %s]", res.NodeNames(), tc.pri, tc.sec)
			}
			if res.Primary != uuid(tc.pri) || tc.sec != "" && res.Secondary != uuid(tc.sec) {
				t.Fatalf("UUIDs %v do not match the names %v", res.Nodes(), res.NodeNames())
			}
			if tc.group != "" && (res.GroupName != tc.group || res.Group != uuid(tc.group)) {
				t.Fatalf("group %s (%s), want %s", res.GroupName, res.Group, tc.group)
			}
		})
	}
}

// TestAllocateN1 covers hail's N+1 check on both nodes: p already backs
// 6000 MiB of drbd memory on s1, so s1 cannot back 4096 more for p, and
// cannot give 4096 as primary while keeping its 6000 reserve.
func TestAllocateN1(t *testing.T) {
	c := newCluster().node("p", "g", 16*gib, 100*gib, 16).
		node("s1", "g", 8*gib, 900*gib, 8). // the emptiest disk: preferred as secondary
		node("s2", "g", 8*gib, 100*gib, 8).
		inst("y", TemplateDRBD, "p", "s1", 6000, 1*gib, 1)

	res, err := Allocate(c.st, Request{Template: TemplateDRBD, MemoryMiB: 4096, Disks: []int64{1024}, Nodes: []string{"p"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.SecondaryName != "s2" {
		t.Fatalf("secondary %s, want s2 (s1 would fail N+1)", res.SecondaryName)
	}
	// A secondary of another primary is fine on s1: peers are per primary.
	res, err = Allocate(c.st, Request{Template: TemplateDRBD, MemoryMiB: 4096, Disks: []int64{1024}, Nodes: []string{"s2"}}, Options{})
	if err != nil || res.SecondaryName != "s1" {
		t.Fatalf("secondary of s2: %v %v, want s1", res.NodeNames(), err)
	}

	_, err = Allocate(c.st, Request{Template: TemplateDRBD, MemoryMiB: 4096, Disks: []int64{1024}, Nodes: []string{"p", "s1"}}, Options{})
	fe := wantCode(t, err, fsm.CodeNoRes)
	if want := "no drbd secondary for a primary on p: too little free memory to take over as secondary (N+1): s1 has 8192 MiB free, needs 10096"; !strings.HasSuffix(fe.Msg, want) {
		t.Fatalf("message %q, want it to end with %q", fe.Msg, want)
	}

	_, err = Allocate(c.st, Request{Template: TemplatePlain, MemoryMiB: 4096, Nodes: []string{"s1"}}, Options{})
	fe = wantCode(t, err, fsm.CodeNoRes)
	if want := "N+1 redundancy would break (memory kept to take over the drbd instances of a failed peer): s1 has 8192 MiB free, needs 10096"; !strings.HasSuffix(fe.Msg, want) {
		t.Fatalf("message %q, want it to end with %q", fe.Msg, want)
	}
	// 2096 MiB still fit on s1 beside its reserve.
	if _, err := Allocate(c.st, Request{Template: TemplatePlain, MemoryMiB: 8192 - 6000, Nodes: []string{"s1"}}, Options{}); err != nil {
		t.Fatal(err)
	}
	// Forthcoming drbd instances reserve N+1 memory too.
	c.inst("f", TemplateDRBD, "s2", "s1", 3000, 1*gib, 1, forthcoming)
	if _, err := Allocate(c.st, Request{Template: TemplatePlain, MemoryMiB: 8192 - 6000, Nodes: []string{"s1"}}, Options{}); err != nil {
		t.Fatal(err) // the reserve is the largest peer, 6000, not the sum
	}
	c.inst("f2", TemplateDRBD, "p", "s1", 1000, 1*gib, 1, forthcoming)
	_, err = Allocate(c.st, Request{Template: TemplatePlain, MemoryMiB: 8192 - 6000, Nodes: []string{"s1"}}, Options{})
	wantCode(t, err, fsm.CodeNoRes)
}

// TestAllocatePinned: explicit nodes are checked, not chosen.
func TestAllocatePinned(t *testing.T) {
	c := newCluster().group("g1", fsm.AllocPreferred).group("g2", fsm.AllocPreferred).
		node("a", "g1", 8*gib, 100*gib, 8).node("b", "g1", 8*gib, 100*gib, 8).
		node("c", "g2", 8*gib, 100*gib, 8).node("d", "g1", 8*gib, 100*gib, 8, drained).
		inst("f", TemplateDRBD, "a", "b", 6*gib, 10*gib, 2, forthcoming)

	// Committing the forthcoming instance: its own reservation is not
	// counted against it.
	commitReq := Request{Template: TemplateDRBD, MemoryMiB: 6 * gib, Disks: []int64{10 * gib}, VCPUs: 2, Nodes: []string{"a", "b"}, Instance: "f"}
	if res, err := Allocate(c.st, commitReq, Options{}); err != nil || res.PrimaryName != "a" || res.SecondaryName != "b" {
		t.Fatalf("commit: %v %v", res.NodeNames(), err)
	}
	commitReq.Instance = ""
	_, err := Allocate(c.st, commitReq, Options{})
	wantCode(t, err, fsm.CodeNoRes)
	// Resizing it beyond the node fails cleanly.
	commitReq.Instance, commitReq.MemoryMiB = uuid("f"), 9*gib
	_, err = Allocate(c.st, commitReq, Options{})
	wantCode(t, err, fsm.CodeNoRes)

	for _, tc := range []struct {
		name string
		req  Request
		code fsm.Code
	}{
		{"unknown node", Request{Template: TemplatePlain, Nodes: []string{"zz"}}, fsm.CodeNoEnt},
		{"unknown excluded node", Request{Template: TemplatePlain, Exclude: []string{"zz"}}, fsm.CodeNoEnt},
		{"unknown instance", Request{Template: TemplatePlain, Instance: "zz"}, fsm.CodeNoEnt},
		{"drained node", Request{Template: TemplatePlain, Nodes: []string{"d"}}, fsm.CodeState},
		{"given and excluded", Request{Template: TemplatePlain, Nodes: []string{"a"}, Exclude: []string{"a"}}, fsm.CodeInval},
		{"drbd across groups", Request{Template: TemplateDRBD, Nodes: []string{"a", "c"}}, fsm.CodeInval},
		{"node outside the group", Request{Template: TemplatePlain, Nodes: []string{"a"}, Group: "g2"}, fsm.CodeInval},
		{"same node twice", Request{Template: TemplateDRBD, Nodes: []string{"a", uuid("a")}}, fsm.CodeInval},
		{"same name twice", Request{Template: TemplateDRBD, Nodes: []string{"a", "a"}}, fsm.CodeInval},
		{"secondary for plain", Request{Template: TemplatePlain, Nodes: []string{"a", "b"}}, fsm.CodeInval},
		{"no template", Request{MemoryMiB: 1}, fsm.CodeInval},
		{"rbd template", Request{Template: "rbd"}, fsm.CodeInval},
		{"negative memory", Request{Template: TemplatePlain, MemoryMiB: -1}, fsm.CodeInval},
		{"negative vcpus", Request{Template: TemplatePlain, VCPUs: -1}, fsm.CodeInval},
		{"negative disk", Request{Template: TemplatePlain, Disks: []int64{1, -1}}, fsm.CodeInval},
		{"diskless with disks", Request{Template: TemplateDiskless, Disks: []int64{1}}, fsm.CodeInval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Allocate(c.st, tc.req, Options{})
			if err == nil {
				t.Fatalf("placed on %v", res.NodeNames())
			}
			wantCode(t, err, tc.code)
		})
	}

	// A dead pinned node is refused as such.
	_, err = Allocate(c.st, Request{Template: TemplatePlain, Nodes: []string{"c"}}, Options{Dead: map[string]bool{uuid("c"): true}})
	if fe := wantCode(t, err, fsm.CodeState); !strings.Contains(fe.Msg, "c is dead") {
		t.Fatal(fe.Msg)
	}
}

func TestAllocateScore(t *testing.T) {
	c := newCluster().node("a", "g", 1000, 1000, 4).node("b", "g", 1000, 1000, 4).
		inst("x", TemplatePlain, "b", "", 1000, 1000, 4)
	res, err := Allocate(c.st, Request{Template: TemplatePlain, MemoryMiB: 500, Disks: []int64{500}, VCPUs: 2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// a: 0.5² × 3 = 0.75; b: full, 3; mean 1.875.
	if res.PrimaryName != "a" || math.Abs(res.Score-1.875) > 1e-12 {
		t.Fatalf("%s score %v, want a 1.875", res.PrimaryName, res.Score)
	}
}
