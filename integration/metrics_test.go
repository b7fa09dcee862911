package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads a member's /metrics and parses it with Prometheus' own
// text parser, which refuses malformed output.
func scrape(m *Member) (map[string]*dto.MetricFamily, error) {
	resp, err := m.c.HTTP().Get(m.c.URL(m, "/metrics"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

// sample is the value of the family's series whose labels include want
// (all of them), and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Summary != nil:
			return float64(m.GetSummary().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// TestMetricsScrape scrapes the leader and a follower after work that
// touches every metric docs/metrics.md lists (jobs, locks, an OOB run, a
// leader change), and checks each with the Prometheus text parser: its
// type, and a value that follows from what was done.
func TestMetricsScrape(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1,
		ExtraArgs: []string{"--raft-snapshot-threshold", "64", "--raft-trailing-logs", "32"}})
	leader := c.WaitLeader(10 * time.Second)
	fakeOOB(t, c)
	if out, err := c.GNT("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21", "web1"); err != nil {
		t.Fatalf("instance add: %v\n%s", err, out)
	}
	if out, err := c.GNT("node", "power", "status", "node21"); err != nil {
		t.Fatalf("power status: %v\n%s", err, out)
	}
	// Enough writes for a snapshot (threshold 64).
	for i := 0; i < 80; i++ {
		if out, err := c.GNT("cluster", "add-tags", fmt.Sprintf("m%d", i)); err != nil {
			t.Fatalf("add-tags: %v\n%s", err, out)
		}
	}

	type want struct {
		name   string
		typ    dto.MetricType
		labels map[string]string
		check  func(v float64) error
	}
	atLeast := func(min float64) func(float64) error {
		return func(v float64) error {
			if v < min {
				return fmt.Errorf("%v, want at least %v", v, min)
			}
			return nil
		}
	}
	equals := func(x float64) func(float64) error {
		return func(v float64) error {
			if v != x {
				return fmt.Errorf("%v, want %v", v, x)
			}
			return nil
		}
	}
	common := []want{
		{"gnt_build_info", dto.MetricType_GAUGE, map[string]string{"version": "0.1.0"}, equals(1)},
		{"gnt_raft_has_leader", dto.MetricType_GAUGE, nil, equals(1)},
		{"gnt_raft_term", dto.MetricType_GAUGE, nil, atLeast(1)},
		{"gnt_raft_commit_index", dto.MetricType_GAUGE, nil, atLeast(80)},
		{"gnt_raft_applied_index", dto.MetricType_GAUGE, nil, atLeast(80)},
		{"gnt_raft_last_index", dto.MetricType_GAUGE, nil, atLeast(80)},
		{"gnt_raft_voters", dto.MetricType_GAUGE, nil, equals(3)},
		{"gnt_raft_leader_changes_total", dto.MetricType_COUNTER, nil, atLeast(1)},
		{"gnt_raft_store_commit_seconds", dto.MetricType_HISTOGRAM, nil, atLeast(1)},
		{"gnt_raft_snapshot_seconds", dto.MetricType_HISTOGRAM, nil, atLeast(1)},
		{"gnt_raft_snapshot_bytes", dto.MetricType_GAUGE, nil, atLeast(1)},
		{"gnt_jobs", dto.MetricType_GAUGE, map[string]string{"status": "success"}, atLeast(2)},
		{"gnt_jobs", dto.MetricType_GAUGE, map[string]string{"status": "running"}, atLeast(0)},
		// hashicorp/raft's own, bridged from go-metrics.
		{"gnt_raft_fsm_apply", dto.MetricType_SUMMARY, nil, atLeast(1)},
	}
	leaderOnly := []want{
		{"gnt_raft_is_leader", dto.MetricType_GAUGE, nil, equals(1)},
		{"gnt_job_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"opcode": "OP_INSTANCE_CREATE", "result": "success"}, atLeast(1)},
		{"gnt_lock_wait_seconds", dto.MetricType_HISTOGRAM, nil, atLeast(1)},
		{"gnt_oob_runs_total", dto.MetricType_COUNTER, map[string]string{"command": "power-status", "result": "success"}, atLeast(1)},
		{"gnt_raft_follower_last_contact_seconds", dto.MetricType_GAUGE, map[string]string{"peer": "node12"}, atLeast(0)},
		{"gnt_raft_follower_applied_lag", dto.MetricType_GAUGE, map[string]string{"peer": "node12"}, atLeast(0)},
		{"gnt_repair_breaker_open", dto.MetricType_GAUGE, nil, equals(0)},
	}
	follower := c.Followers(leader)[0]
	followerOnly := []want{{"gnt_raft_is_leader", dto.MetricType_GAUGE, nil, equals(0)}}

	check := func(m *Member, wants []want) error {
		fams, err := scrape(m)
		if err != nil {
			return fmt.Errorf("%s: /metrics does not parse: %v", m.Name, err)
		}
		var errs []string
		for _, w := range wants {
			f := fams[w.name]
			if f == nil {
				errs = append(errs, w.name+": absent")
				continue
			}
			if f.GetType() != w.typ {
				errs = append(errs, fmt.Sprintf("%s: type %s, want %s", w.name, f.GetType(), w.typ))
				continue
			}
			v, ok := sample(fams, w.name, w.labels)
			if !ok {
				l, _ := json.Marshal(w.labels)
				errs = append(errs, fmt.Sprintf("%s: no series with labels %s", w.name, l))
				continue
			}
			if err := w.check(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s%v: %v", w.name, w.labels, err))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s:\n  %s", m.Name, strings.Join(errs, "\n  "))
		}
		return nil
	}
	// The breaker gauge needs a maintd round; snapshots and the
	// follower's status poll come on their own timers.
	c.Eventually(30*time.Second, 250*time.Millisecond, "every metric on the leader and a follower", func() error {
		if err := check(leader, append(common, leaderOnly...)); err != nil {
			return err
		}
		return check(follower, append(common, followerOnly...))
	})
}
