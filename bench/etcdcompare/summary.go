package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// benchCase names one case of a comparison: the system ("etcd" or "gnt"),
// where the clients send, and how many there are.
type benchCase struct {
	system  string
	target  string
	clients int
}

// benchResult is what one BENCH line says about its case.
type benchResult struct {
	rate float64
	p50  time.Duration
}

// parseBenchLine reads a line printed by this command ("BENCH etcd ...")
// or by gnt's TestBenchJobThroughput ("BENCH jobs ..."). ok is false for
// any other line; err names the field at fault in a BENCH line that does
// not parse.
func parseBenchLine(line string) (c benchCase, r benchResult, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "BENCH" {
		return c, r, false, nil
	}
	switch f[1] {
	case "etcd":
		c.system = "etcd"
	case "jobs":
		c.system = "gnt"
	default:
		return c, r, false, nil
	}
	var haveRate, haveP50 bool
	for _, kv := range f[2:] {
		k, v, found := strings.Cut(kv, "=")
		if !found {
			continue
		}
		switch k {
		case "to":
			c.target = v
		case "clients":
			if c.clients, err = strconv.Atoi(v); err != nil || c.clients <= 0 {
				return c, r, true, fmt.Errorf("clients=%q is not a positive number", v)
			}
		case "rate":
			if r.rate, err = strconv.ParseFloat(v, 64); err != nil || !(r.rate >= 0) || math.IsInf(r.rate, 0) {
				return c, r, true, fmt.Errorf("rate=%q is not a rate", v)
			}
			haveRate = true
		case "p50":
			if r.p50, err = time.ParseDuration(v); err != nil || r.p50 < 0 {
				return c, r, true, fmt.Errorf("p50=%q is not a duration", v)
			}
			haveP50 = true
		}
	}
	switch {
	case c.target == "":
		return c, r, true, fmt.Errorf("no to= field")
	case c.clients == 0:
		return c, r, true, fmt.Errorf("no clients= field")
	case !haveRate:
		return c, r, true, fmt.Errorf("no rate= field")
	case !haveP50:
		return c, r, true, fmt.Errorf("no p50= field")
	}
	return c, r, true, nil
}

// parseFailoverLine reads a failover line: this command's ("BENCH etcd
// failover ... recovery=D", one kill) or gnt's TestBenchFailover's
// ("BENCH failover rounds=N median=D max=D all=[D D ...]", a series of
// kills). ok is false for any other line.
func parseFailoverLine(line string) (system string, times []time.Duration, ok bool, err error) {
	f := strings.Fields(line)
	switch {
	case len(f) >= 3 && f[0] == "BENCH" && f[1] == "etcd" && f[2] == "failover":
		for _, kv := range f[3:] {
			if v, found := strings.CutPrefix(kv, "recovery="); found {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return "etcd", nil, true, fmt.Errorf("recovery=%q is not a duration", v)
				}
				return "etcd", []time.Duration{d}, true, nil
			}
		}
		return "etcd", nil, true, fmt.Errorf("no recovery= field")
	case len(f) >= 2 && f[0] == "BENCH" && f[1] == "failover":
		_, list, found := strings.Cut(line, "all=[")
		if !found {
			return "gnt", nil, true, fmt.Errorf("no all=[...] field")
		}
		list, _, found = strings.Cut(list, "]")
		if !found {
			return "gnt", nil, true, fmt.Errorf("all=[ without its ]")
		}
		for _, v := range strings.Fields(list) {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "gnt", nil, true, fmt.Errorf("all=[...]: %q is not a duration", v)
			}
			times = append(times, d)
		}
		if len(times) == 0 {
			return "gnt", nil, true, fmt.Errorf("all=[] lists no kill")
		}
		return "gnt", times, true, nil
	}
	return "", nil, false, nil
}

// summarizeLines reads BENCH lines and writes, for each case, the median
// rate and the median p50 over its runs, etcd's and gnt's cases of the
// same target and client count next to each other.
func summarizeLines(in io.Reader, out io.Writer) error {
	runs := make(map[benchCase][]benchResult)
	kills := make(map[string][]float64)
	sc := bufio.NewScanner(in)
	for n := 1; sc.Scan(); n++ {
		system, times, ok, err := parseFailoverLine(sc.Text())
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if ok {
			for _, d := range times {
				kills[system] = append(kills[system], float64(d))
			}
			continue
		}
		c, r, ok, err := parseBenchLine(sc.Text())
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if ok {
			runs[c] = append(runs[c], r)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(runs) == 0 && len(kills) == 0 {
		return fmt.Errorf("no BENCH lines")
	}
	cases := make([]benchCase, 0, len(runs))
	for c := range runs {
		cases = append(cases, c)
	}
	sort.Slice(cases, func(i, j int) bool {
		a, b := cases[i], cases[j]
		if a.target != b.target {
			return a.target < b.target
		}
		if a.clients != b.clients {
			return a.clients < b.clients
		}
		return a.system < b.system
	})
	for _, c := range cases {
		rs := runs[c]
		rates := make([]float64, len(rs))
		p50s := make([]float64, len(rs))
		for i, r := range rs {
			rates[i], p50s[i] = r.rate, float64(r.p50)
		}
		fmt.Fprintf(out, "%-4s to=%-6s clients=%-4d rate %6.0f/s  p50 %v  (median of %d)\n",
			c.system, c.target, c.clients, median(rates), time.Duration(median(p50s)).Round(10*time.Microsecond), len(rs))
	}
	for _, system := range []string{"etcd", "gnt"} {
		if ts := kills[system]; len(ts) > 0 {
			fmt.Fprintf(out, "%-4s kill -9 of the leader to the next successful write: median %v  max %v  (%d kills)\n",
				system, time.Duration(median(ts)).Round(time.Millisecond), time.Duration(slices.Max(ts)).Round(time.Millisecond), len(ts))
		}
	}
	return nil
}

// median returns the median of xs, which it sorts.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}
