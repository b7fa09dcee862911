package main

import (
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	in := `== round 1/3
BENCH etcd to=leader clients=64 puts=100 failed=0 rate=4000 puts/s p50=14.1ms p99=40ms max=50ms
BENCH jobs to=leader clients=64 gen=rpc jobs=30980 failed=0 rate=3872 jobs/s p50=15.77ms p99=33.03ms max=46.91ms cpu/job: gntds 306us client 105us
BENCH etcd to=leader clients=64 puts=100 failed=0 rate=3000 puts/s p50=20ms p99=40ms max=50ms
BENCH jobs to=leader clients=64 gen=rpc jobs=1 failed=0 rate=3000 jobs/s p50=19ms p99=1ms max=1ms
BENCH etcd to=leader clients=64 puts=100 failed=0 rate=2000 puts/s p50=30ms p99=40ms max=50ms
BENCH etcd to=leader clients=1 puts=100 failed=0 rate=500 puts/s p50=1.9ms p99=4ms max=5ms
BENCH etcd failover killed=1 endpoint=127.0.0.31:2379 recovery=1.2s
BENCH etcd failover killed=2 endpoint=127.0.0.32:2379 recovery=900ms
BENCH etcd failover killed=3 endpoint=127.0.0.33:2379 recovery=1.5s
BENCH failover rounds=4 median=150ms max=300ms all=[150ms 140ms 300ms 160ms]
BENCH graceful-stop rounds=1 median=25ms max=25ms all=[25ms]
`
	var out strings.Builder
	if err := summarizeLines(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"etcd to=leader clients=1    rate    500/s  p50 1.9ms  (median of 1)",
		"etcd to=leader clients=64   rate   3000/s  p50 20ms  (median of 3)",
		"gnt  to=leader clients=64   rate   3436/s  p50 17.39ms  (median of 2)",
		"etcd kill -9 of the leader to the next successful write: median 1.2s  max 1.5s  (3 kills)",
		"gnt  kill -9 of the leader to the next successful write: median 155ms  max 300ms  (4 kills)",
	}
	if got := strings.TrimSpace(out.String()); got != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

func TestParseBenchLineBad(t *testing.T) {
	for _, tc := range []struct{ line, err string }{
		{"BENCH etcd clients=1 rate=1 p50=1ms", "no to= field"},
		{"BENCH etcd to=leader rate=1 p50=1ms", "no clients= field"},
		{"BENCH etcd to=leader clients=1 p50=1ms", "no rate= field"},
		{"BENCH etcd to=leader clients=1 rate=1", "no p50= field"},
		{"BENCH etcd to=leader clients=x rate=1 p50=1ms", `clients="x"`},
		{"BENCH etcd to=leader clients=0 rate=1 p50=1ms", `clients="0"`},
		{"BENCH jobs to=leader clients=1 rate=fast p50=1ms", `rate="fast"`},
		{"BENCH jobs to=leader clients=1 rate=-1 p50=1ms", `rate="-1"`},
		{"BENCH jobs to=leader clients=1 rate=NaN p50=1ms", `rate="NaN"`},
		{"BENCH jobs to=leader clients=1 rate=+Inf p50=1ms", `rate="+Inf"`},
		{"BENCH jobs to=leader clients=1 rate=1 p50=soon", `p50="soon"`},
	} {
		_, _, ok, err := parseBenchLine(tc.line)
		if !ok || err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: ok=%v err=%v, want an error containing %q", tc.line, ok, err, tc.err)
		}
	}
	for _, line := range []string{"", "BENCH", "BENCH noop to=leader", "== round 1", "ok  github.com/x 1s"} {
		if _, _, ok, err := parseBenchLine(line); ok || err != nil {
			t.Errorf("%q: ok=%v err=%v, want it skipped", line, ok, err)
		}
	}
	if err := summarizeLines(strings.NewReader("nothing\n"), &strings.Builder{}); err == nil {
		t.Error("no BENCH lines: no error")
	}
}

func TestParseFailoverLineBad(t *testing.T) {
	for _, tc := range []struct{ line, err string }{
		{"BENCH etcd failover killed=1", "no recovery= field"},
		{"BENCH etcd failover recovery=soon", `recovery="soon"`},
		{"BENCH etcd failover recovery=-1s", `recovery="-1s"`},
		{"BENCH failover rounds=1 median=1s", "no all=[...] field"},
		{"BENCH failover rounds=1 all=[1s 2s", "without its ]"},
		{"BENCH failover rounds=1 all=[1s x]", `"x" is not a duration`},
		{"BENCH failover rounds=0 all=[]", "lists no kill"},
	} {
		_, _, ok, err := parseFailoverLine(tc.line)
		if !ok || err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: ok=%v err=%v, want an error containing %q", tc.line, ok, err, tc.err)
		}
	}
	for _, line := range []string{"BENCH etcd to=leader clients=1 rate=1 p50=1ms", "BENCH graceful-stop all=[1s]", "failover"} {
		if _, _, ok, err := parseFailoverLine(line); ok || err != nil {
			t.Errorf("%q: ok=%v err=%v, want it skipped", line, ok, err)
		}
	}
}

func FuzzParseFailoverLine(f *testing.F) {
	f.Add("BENCH etcd failover killed=1 endpoint=127.0.0.31:2379 recovery=1.2s")
	f.Add("BENCH failover rounds=2 median=1s max=1s all=[1s 2s]")
	f.Fuzz(func(t *testing.T, line string) {
		_, times, ok, err := parseFailoverLine(line)
		if ok && err == nil && len(times) == 0 {
			t.Errorf("%q: accepted with no times", line)
		}
		for _, d := range times {
			if d <= 0 {
				t.Errorf("%q: accepted %v", line, d)
			}
		}
	})
}

func FuzzParseBenchLine(f *testing.F) {
	f.Add("BENCH etcd to=leader clients=64 puts=100 failed=0 rate=4000 puts/s p50=14.1ms")
	f.Add("BENCH jobs to=spread clients=1 rate=1 p50=1µs")
	f.Fuzz(func(t *testing.T, line string) {
		c, r, ok, err := parseBenchLine(line)
		if ok && err == nil && (c.clients <= 0 || c.target == "" || !(r.rate >= 0) || r.p50 < time.Duration(0)) {
			t.Errorf("%q: accepted %+v %+v", line, c, r)
		}
	})
}
