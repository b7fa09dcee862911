package server

import (
	"context"
	"regexp"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestIncarnation: each draw is 32 hex digits and differs from the last,
// and the probe answers for its own gntd without asking over the network
// and refuses a node with no API address.
func TestIncarnation(t *testing.T) {
	a, b := newIncarnation(), newIncarnation()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(a) || a == b {
		t.Fatalf("incarnations %q and %q", a, b)
	}
	s := &Server{cfg: Config{Name: "n1"}, incarnation: a}
	p := incarnationProbe{s}
	if got, err := p.Incarnation(context.Background(), &fsm.Node{Name: "n1"}); err != nil || got != a {
		t.Errorf("own incarnation: %q, %v", got, err)
	}
	if got, err := p.Incarnation(context.Background(), &fsm.Node{Name: "n2"}); err == nil {
		t.Errorf("a node without an API address answered %q", got)
	}
}
