package server

import (
	"context"
	"net/netip"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
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

// TestClusterHosts: the per-address caps spare this gntd's own address
// and every address a node registered, and nothing else.
func TestClusterHosts(t *testing.T) {
	f := fsm.New()
	a := &fsmApplier{f: f}
	a.Apply(context.Background(), fsm.ClusterInit{Now: t0.UnixNano(), Name: "c", UUID: "cu", GroupUUID: "gu",
		Node: fsm.NodeSpec{Name: "node1", UUID: "u1", PrimaryIP: "192.0.2.1", SecondaryIP: "198.51.100.1",
			Addrs: fsm.Addrs{API: "192.0.2.2:5080", Raft: "192.0.2.3:1817", Agent: "[2001:db8::4]:1811", Gossip: "192.0.2.5:1818"}}})
	s := &Server{cfg: Config{Bind: "192.0.2.9"}, fsm: f}
	s.conns.hosts.load = s.loadClusterHosts
	for addr, want := range map[string]bool{
		"192.0.2.1": true, "198.51.100.1": true, "192.0.2.2": true, "192.0.2.3": true, "2001:db8::4": true,
		"192.0.2.5": true, "192.0.2.9": true, "192.0.2.99": false, "127.0.0.1": false, "0.0.0.0": false,
	} {
		if got := s.conns.hosts.has(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: exempt %v, want %v", addr, got, want)
		}
	}
	var none hostSet
	if none.has(netip.MustParseAddr("192.0.2.1")) {
		t.Error("a set without a loader spares an address")
	}
}
