package agent

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPowerdown: a graceful stop sends the ACPI powerdown again every
// interval until the guest is gone (a booting guest ignores the first)
// or the timeout has passed, then gives up; failed sends are retried,
// and their error is told only when none went through. The clock is a
// fake one that the waits advance.
func TestPowerdown(t *testing.T) {
	const every = 5 * time.Second
	for _, tc := range []struct {
		name      string
		timeout   time.Duration
		heedAfter int // the guest powers off on this request (0: never)
		failFirst int // sends that fail first
		wantGone  bool
		wantSent  int
		wantErr   bool
	}{
		{name: "first request heeded", timeout: 2 * time.Minute, heedAfter: 1, wantGone: true, wantSent: 1},
		{name: "booting guest ignores the first two", timeout: 2 * time.Minute, heedAfter: 3, wantGone: true, wantSent: 3},
		{name: "never heeded", timeout: 30 * time.Second, wantSent: 6},
		{name: "timeout not a multiple of the interval", timeout: 12 * time.Second, wantSent: 3},
		{name: "timeout shorter than the interval", timeout: 2 * time.Second, wantSent: 1},
		{name: "no timeout", timeout: 0, wantSent: 1},
		{name: "monitor busy at first", timeout: time.Minute, heedAfter: 1, failFirst: 2, wantGone: true, wantSent: 1},
		{name: "monitor never answers", timeout: 20 * time.Second, failFirst: 100, wantSent: 0, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := time.Unix(1000, 0)
			now := func() time.Time { return clock }
			tries, heard := 0, 0
			send := func(context.Context) error {
				tries++
				if tries <= tc.failFirst {
					return errors.New("monitor busy")
				}
				heard++
				return nil
			}
			var waited time.Duration
			wait := func(_ context.Context, d time.Duration) bool {
				if d > every || d < 0 {
					t.Errorf("a wait of %s", d)
				}
				clock, waited = clock.Add(d), waited+d
				return tc.heedAfter > 0 && heard >= tc.heedAfter
			}
			gone, sent, err := powerdown(context.Background(), tc.timeout, every, now, send, wait)
			if gone != tc.wantGone || sent != tc.wantSent || (err != nil) != tc.wantErr {
				t.Errorf("gone %v, sent %d, err %v; want %v, %d, error %v", gone, sent, err, tc.wantGone, tc.wantSent, tc.wantErr)
			}
			if !gone && waited != tc.timeout {
				t.Errorf("waited %s in all before giving up, want the timeout %s", waited, tc.timeout)
			}
		})
	}
	// An ended context stops at once after the first request.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	gone, sent, _ := powerdown(ctx, time.Minute, every, time.Now,
		func(context.Context) error { calls++; return nil },
		func(context.Context, time.Duration) bool { return false })
	if gone || sent != 1 || calls != 1 {
		t.Errorf("with an ended context: gone %v, sent %d, calls %d", gone, sent, calls)
	}
}
