package integration

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestClusterBalance runs gnt cluster balance against real gntds: two
// reservations on node21 make it the most loaded node; the dry run prints
// the plan (a reservation moved in the configuration) and changes
// nothing; the real run submits the move as a job, waits for it, and the
// reservation is recorded on its new node; bad limits are refused.
func TestClusterBalance(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 2})
	c.WaitLeader(10 * time.Second)
	for _, n := range []string{"node21", "node22"} {
		c.WaitAgent(c.Member(n), 30*time.Second)
	}
	for _, name := range []string{"res1", "res2"} {
		if out, err := c.GNT("instance", "add", "--forthcoming", "-t", "plain", "--disk", "1G", "--memory", "512", "--os-type", "noop", "-n", "node21", name); err != nil {
			t.Fatalf("instance add %s: %v\n%s", name, err, out)
		}
	}
	primary := func(name string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		in, err := c.Client().Instance(ctx, name)
		if err != nil {
			t.Fatalf("instance %s: %v", name, err)
		}
		return in.PNode
	}

	out, err := c.GNT("cluster", "balance", "--dry-run", "--threshold", "0.01")
	if err != nil {
		t.Fatalf("balance --dry-run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "1. move-reservation res") || !strings.Contains(out, "from node21 to ") || strings.Contains(out, "(job ") {
		t.Errorf("dry run should print a reservation's move off node21 and no job:\n%s", out)
	}
	if primary("res1") != "node21" || primary("res2") != "node21" {
		t.Fatalf("the dry run moved a reservation")
	}

	// ?dry-run=1, as the opcode routes take it, is a dry run too.
	var plan struct {
		Moves []struct{ Instance, From string } `json:"moves"`
		Jobs  []int64                           `json:"jobs"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client().Do(ctx, "POST", "/2/gnt/balance", url.Values{"dry-run": {"1"}}, map[string]any{"threshold": 0.01}, &plan); err != nil {
		t.Fatalf("POST /2/gnt/balance?dry-run=1: %v", err)
	}
	if len(plan.Moves) != 1 || plan.Moves[0].From != "node21" || len(plan.Jobs) != 0 {
		t.Errorf("?dry-run=1: %+v, want one move off node21 and no job", plan)
	}
	if primary("res1") != "node21" || primary("res2") != "node21" {
		t.Fatalf("the dry run moved a reservation")
	}

	if out, code := c.GNTExit("cluster", "balance", "--max-moves", "1001"); code == 0 || !strings.Contains(out, "max_moves must be between 1 and 1000") {
		t.Errorf("--max-moves 1001: exit %d, want the limit named:\n%s", code, out)
	}

	out, err = c.GNT("cluster", "balance", "--max-moves", "1", "--threshold", "0.01")
	if err != nil {
		t.Fatalf("balance: %v\n%s", err, out)
	}
	if !strings.Contains(out, "(job ") || !strings.Contains(out, "1 move(s) done") {
		t.Errorf("balance should name its job and wait for it:\n%s", out)
	}
	moved := 0
	for _, name := range []string{"res1", "res2"} {
		if primary(name) != "node21" {
			moved++
		}
	}
	if moved != 1 {
		t.Errorf("%d reservations moved off node21, want 1 (--max-moves 1)", moved)
	}
}
