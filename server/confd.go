package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gnt-cluster/gnt/confd"
	"github.com/gnt-cluster/gnt/fsm"
)

// startConfd binds confd's UDP port on this gntd's address and serves it
// until ctx ends. Every gntd binds it; only a candidate answers (the
// source says so), from its own replica, leader or follower. A port that
// cannot be bound stops gntd, as any listener does.
func (s *Server) startConfd(ctx context.Context) (done <-chan struct{}, err error) {
	addr := net.JoinHostPort(s.cfg.Bind, strconv.Itoa(s.cfg.ConfdPort))
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("confd address: %w", err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("confd listener: %w", err)
	}
	srv := confd.NewServer(confd.ServerOptions{
		Source:  confdSource{s},
		Version: buildVersion(Version),
		Logger:  s.log.Named("confd"),
	})
	s.reg.MustRegister(confdCollector{srv})
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		// The key arrives with the data dir or later, when this gntd
		// joins; confd drops everything until then.
		// During a renewal of cluster.key it accepts both keys.
		var key, other []byte
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		sync := func() {
			k, o := s.clusterKeys()
			if len(k) > 0 && (!bytes.Equal(k, key) || !bytes.Equal(o, other)) {
				key, other = k, o
				srv.SetKeys(k, o)
			}
		}
		sync()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					sync()
				}
			}
		}()
		srv.Serve(ctx, conn)
	}()
	return ch, nil
}

// confdSource lets confd read this gntd's replica. The master is the Raft
// leader as this candidate knows it (its server ID is the node name);
// when it knows none, confd falls back to the master the configuration
// records.
type confdSource struct{ s *Server }

func (c confdSource) View(fn func(st *fsm.State, master string)) bool {
	r := c.s.raft()
	if r == nil {
		return false
	}
	_, id := r.LeaderWithID()
	c.s.fsm.Read(func(st *fsm.State, _ uint64) { fn(st, string(id)) })
	return true
}

// buildVersion encodes "major.minor.revision" as Ganeti's BuildVersion
// does: 1000000*major + 10000*minor + revision.
func buildVersion(v string) int {
	parts := strings.SplitN(v, ".", 3)
	out, mult := 0, []int{1000000, 10000, 1}
	for i, p := range parts {
		end := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' })
		if end < 0 {
			end = len(p)
		}
		n, _ := strconv.Atoi(p[:end])
		out += n * mult[i]
	}
	return out
}

// confdCollector exports confd's counters to Prometheus.
type confdCollector struct{ srv *confd.Server }

var (
	confdAnsweredDesc = prometheus.NewDesc("gnt_confd_requests_answered_total",
		"Confd requests answered, by request type.", []string{"type"}, nil)
	confdDroppedDesc = prometheus.NewDesc("gnt_confd_packets_dropped_total",
		"Confd packets dropped without a reply, by reason.", []string{"reason"}, nil)
)

func (confdCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- confdAnsweredDesc
	ch <- confdDroppedDesc
}

func (c confdCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.srv.Stats()
	for t, n := range st.Answered {
		ch <- prometheus.MustNewConstMetric(confdAnsweredDesc, prometheus.CounterValue, float64(n), t.String())
	}
	for r, n := range st.Dropped {
		ch <- prometheus.MustNewConstMetric(confdDroppedDesc, prometheus.CounterValue, float64(n), r)
	}
}
