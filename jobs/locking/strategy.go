package locking

import (
	"math"
	"math/rand/v2"
	"time"
)

// Strategy is Ganeti's LockAttemptTimeoutStrategy: the timeouts of
// successive Acquire attempts for one opcode, growing from Min to Max until
// they add up to Total, after which the caller acquires without a timeout.
// When that blocking attempt would start, Ganeti's executor instead raises
// the opcode's priority by one (until the highest) and starts the
// strategy again; that is the caller's part.
//
// The growth is Ganeti's t(n+1) = clamp((t·1.05)^1.25, Min, Max), computed
// in units of Min/5 so that a strategy scaled down (5 ms, 75 ms, 1.8 s for
// tests) has the same shape as the real one (5 s, 75 s, 1800 s).
type Strategy struct {
	Min, Max, Total time.Duration
	// Rand returns numbers in [0,1) for the ±5 % jitter; nil means
	// math/rand/v2.
	Rand func() float64
}

// Jitter is the relative variation applied to each attempt's timeout
// (Ganeti's ±5 %).
const Jitter = 0.05

// DefaultStrategy returns Ganeti's numbers: LOCK_ATTEMPTS_MINWAIT 5 s,
// LOCK_ATTEMPTS_MAXWAIT 75 s, LOCK_ATTEMPTS_TIMEOUT 1800 s, which give 28
// attempts adding up to about 1854 s.
func DefaultStrategy() Strategy {
	return Strategy{Min: 5 * time.Second, Max: 75 * time.Second, Total: 1800 * time.Second}
}

// Timeouts returns the attempt timeouts before blocking, without jitter.
// It is empty when Min or Total is not positive; a Max below Min is taken
// as Min.
func (s Strategy) Timeouts() []time.Duration {
	if s.Min <= 0 || s.Total <= 0 {
		return nil
	}
	unit := float64(s.Min) / 5 // Ganeti's numbers are in seconds, Min is 5 of them
	lo, hi := 5.0, max(float64(s.Max), float64(s.Min))/unit
	total := float64(s.Total) / unit
	t := lo
	out := []time.Duration{s.Min}
	for sum := t; sum < total; sum += t {
		t = min(max(math.Pow(t*1.05, 1.25), lo), hi)
		out = append(out, time.Duration(math.Round(t*unit)))
	}
	return out
}

// Attempt returns the jittered timeout of attempt n (0-based), and false
// once the strategy is exhausted: attempt n should then block (Acquire
// with no timeout), or the caller raises the priority and starts again at
// attempt 0.
func (s Strategy) Attempt(n int) (time.Duration, bool) {
	ts := s.Timeouts()
	if n < 0 || n >= len(ts) {
		return 0, false
	}
	r := s.Rand
	if r == nil {
		r = rand.Float64
	}
	t := float64(ts[n])
	return time.Duration(t + (r()*2-1)*Jitter*t), true
}
