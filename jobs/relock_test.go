package jobs

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/locking"
)

// shiftingOp is an opcode whose locks follow the state the way an
// instance's follow its nodes: here the node named by node, which the
// test changes while the opcode waits.
type shiftingOp struct {
	fsm.OpCommon
	node *atomic.Value
}

func (o *shiftingOp) Common() *fsm.OpCommon { return &o.OpCommon }
func (o *shiftingOp) Validate() *fsm.Error  { return nil }
func (o *shiftingOp) Summary() string       { return "TEST_SHIFTING" }
func (o *shiftingOp) Locks(*fsm.State) []fsm.LockDecl {
	return []fsm.LockDecl{{Level: fsm.LockNode, Names: []string{o.node.Load().(string)}, Exclusive: true}}
}

// TestPrepareRelocksWhenTheLocksChanged: an opcode's locks are read
// from the state before they are waited for; when the state changed
// meanwhile (a job holding them gave the instance another node), prepare
// drops the locks it got and takes the ones the opcode needs now, and
// returns those.
func TestPrepareRelocksWhenTheLocksChanged(t *testing.T) {
	d, epoch := setup(t)
	id := submit(t, d, `{"OP_ID":"OP_TEST_DELAY","duration":0}`)
	var job *fsm.Job
	d.f.Read(func(s *fsm.State, _ uint64) { job = s.Jobs[id] })
	e := &Executor{FSM: d.f, Apply: d, Epoch: epoch, Clock: time.Now, Locks: locking.NewManager(),
		Strategy: locking.Strategy{Min: 20 * time.Millisecond, Max: 50 * time.Millisecond, Total: time.Second}}
	e.defaults()
	ctx := context.Background()
	const other = 999
	if err := e.Locks.Acquire(ctx, other, 0, []locking.Request{{Level: locking.LevelNode, Names: []string{"n1"}, Mode: locking.Exclusive}}, 0); err != nil {
		t.Fatal(err)
	}
	node := &atomic.Value{}
	node.Store("n1")
	type result struct {
		decl []fsm.LockDecl
		err  error
	}
	done := make(chan result, 1)
	go func() {
		decl, err := e.prepare(ctx, job, 0, &shiftingOp{node: node})
		done <- result{decl, err}
	}()
	time.Sleep(100 * time.Millisecond) // it waits for n1
	node.Store("n2")                   // the other job moved the instance
	e.Locks.ReleaseAll(other)
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("prepare did not return")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.decl) != 1 || len(r.decl[0].Names) != 1 || r.decl[0].Names[0] != "n2" {
		t.Fatalf("prepare returned locks %s, want node n2", fsm.DescribeLocks(r.decl))
	}
	var held []string
	for _, l := range e.Locks.Held(id) {
		if !strings.HasSuffix(l.Name, "/[lockset]") { // the level's intention lock
			held = append(held, l.Name)
		}
	}
	if len(held) != 1 || held[0] != "node/n2" {
		t.Fatalf("the job holds %v, want only node/n2", held)
	}
}
