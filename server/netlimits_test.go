package server

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/netlimit"
)

// TestFitFileLimit: the three servers' overall caps leave fdReserve
// descriptors of the soft limit, the per-address cap follows, and no cap
// stays none.
func TestFitFileLimit(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   netlimit.Limits
		soft uint64
		want netlimit.Limits
	}{
		{"defaults fit 20000", netlimit.Limits{}, 20000, netlimit.Limits{MaxConns: 4096, MaxConnsPerIP: 512}},
		{"defaults lowered at 4096", netlimit.Limits{}, 4096, netlimit.Limits{MaxConns: 1024, MaxConnsPerIP: 512}},
		{"per-address follows the overall cap", netlimit.Limits{}, 1024 + 3*300, netlimit.Limits{MaxConns: 300, MaxConnsPerIP: 300}},
		{"a tiny limit keeps the floor", netlimit.Limits{}, 1024, netlimit.Limits{MaxConns: minConnCap, MaxConnsPerIP: minConnCap}},
		{"explicit caps that fit", netlimit.Limits{MaxConns: 100, MaxConnsPerIP: 10}, 20000, netlimit.Limits{MaxConns: 100, MaxConnsPerIP: 10}},
		{"no cap stays none", netlimit.Limits{MaxConns: -1, MaxConnsPerIP: -1}, 2048, netlimit.Limits{MaxConns: -1, MaxConnsPerIP: -1}},
		{"unknown limit", netlimit.Limits{}, 0, netlimit.Limits{MaxConns: 4096, MaxConnsPerIP: 512}},
	} {
		if got := fitFileLimit(tt.in, tt.soft, hclog.NewNullLogger()); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
