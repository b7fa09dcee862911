package locking

import (
	"math"
	"testing"
	"time"
)

func TestStrategyTimeouts(t *testing.T) {
	ts := DefaultStrategy().Timeouts()
	if len(ts) != 28 {
		t.Fatalf("%d attempts, want 28: %v", len(ts), ts)
	}
	head := []float64{5, 7.95, 14.18, 29.25, 72.31, 75, 75}
	for i, want := range head {
		if got := ts[i].Seconds(); math.Abs(got-want) > 0.005 {
			t.Errorf("attempt %d: %.3f s, want %.2f s", i, got, want)
		}
	}
	for i := len(head); i < len(ts); i++ {
		if ts[i] != 75*time.Second {
			t.Errorf("attempt %d: %v, want 75s", i, ts[i])
		}
	}
	var sum time.Duration
	for _, d := range ts {
		sum += d
	}
	if s := sum.Seconds(); math.Abs(s-1853.7) > 0.5 {
		t.Errorf("sum %.2f s, want about 1854 s", s)
	}
	if s := (sum - ts[len(ts)-1]).Seconds(); s >= 1800 {
		t.Errorf("the strategy goes on after reaching 1800 s (%.1f s before the last attempt)", s)
	}
}

func TestStrategyScales(t *testing.T) {
	full := DefaultStrategy().Timeouts()
	small := Strategy{Min: 5 * time.Millisecond, Max: 75 * time.Millisecond, Total: 1800 * time.Millisecond}.Timeouts()
	if len(small) != len(full) {
		t.Fatalf("%d attempts scaled down, %d at full size", len(small), len(full))
	}
	for i := range full {
		if d := math.Abs(float64(small[i]*1000 - full[i])); d > float64(time.Millisecond) {
			t.Errorf("attempt %d: %v scaled, %v full", i, small[i], full[i])
		}
	}
	if ts := (Strategy{Min: 0, Max: time.Second, Total: time.Second}).Timeouts(); len(ts) != 0 {
		t.Errorf("Min 0 gives %v, want no attempts", ts)
	}
	if ts := (Strategy{Min: 2 * time.Second, Max: time.Second, Total: 5 * time.Second}).Timeouts(); len(ts) != 3 || ts[2] != 2*time.Second {
		t.Errorf("Max below Min gives %v, want 3 attempts of 2s", ts)
	}
}

func TestStrategyAttemptJitter(t *testing.T) {
	for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
		s := DefaultStrategy()
		s.Rand = func() float64 { return r }
		base := s.Timeouts()
		for n, b := range base {
			got, ok := s.Attempt(n)
			if !ok {
				t.Fatalf("attempt %d of %d: exhausted", n, len(base))
			}
			want := float64(b) * (1 + (2*r-1)*Jitter)
			if math.Abs(float64(got)-want) > 1 {
				t.Errorf("r=%v attempt %d: %v, want %v", r, n, got, time.Duration(want))
			}
			if lo, hi := float64(b)*0.95-1, float64(b)*1.05+1; float64(got) < lo || float64(got) > hi { // 1 ns of rounding
				t.Errorf("r=%v attempt %d: %v outside ±5%% of %v", r, n, got, b)
			}
		}
		if d, ok := s.Attempt(len(base)); ok || d != 0 {
			t.Errorf("attempt %d: %v, %v; want exhausted", len(base), d, ok)
		}
	}
	// The default source stays within ±5 % too.
	s := DefaultStrategy()
	for range 1000 {
		d, _ := s.Attempt(0)
		if d < 4750*time.Millisecond || d > 5250*time.Millisecond {
			t.Fatalf("attempt 0 with the default source: %v", d)
		}
	}
}
