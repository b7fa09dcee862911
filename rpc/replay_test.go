package rpc

import (
	"crypto/sha256"
	"strconv"
	"testing"
)

func macOf(i int) [32]byte { return sha256.Sum256([]byte(strconv.Itoa(i))) }

// TestReplayCache: a MAC is admitted once; the cache stays within its
// bound under a flood by raising its floor, refusing what it can no longer
// tell apart, and it forgets what left the clock window first.
func TestReplayCache(t *testing.T) {
	const now = 1_700_000_000
	c := newReplayCache(100)
	if !c.admit(macOf(1), now, now) || c.admit(macOf(1), now, now) {
		t.Fatal("a MAC must be admitted once")
	}

	// Entries outside the window go before anything else.
	c = newReplayCache(100)
	for i := 0; i < 100; i++ {
		if !c.admit(macOf(i), now-400, now-400) {
			t.Fatalf("old %d refused", i)
		}
	}
	if !c.admit(macOf(1000), now, now) || c.len() != 1 {
		t.Fatalf("expired entries were not evicted first: %d entries", c.len())
	}
	if c.admit(macOf(1000), now, now) {
		t.Fatal("replay admitted after eviction")
	}

	// A flood within the window: never more than the bound, and no MAC
	// is ever admitted twice.
	c = newReplayCache(100)
	admitted := map[[32]byte]int64{}
	for i := 0; i < 1000; i++ {
		ts := int64(now - 250 + i/4) // four requests a second
		m := macOf(i)
		if c.admit(m, ts, now) {
			admitted[m] = ts
		}
		if c.len() > 100 {
			t.Fatalf("%d entries over a bound of 100", c.len())
		}
	}
	// A replay carries its original timestamp (the MAC covers it).
	for m, ts := range admitted {
		if c.admit(m, ts, now) {
			t.Fatal("a MAC admitted during the flood was admitted again")
		}
	}
	// A request stamped at or below the floor is refused even if new;
	// one stamped now is still served.
	if c.admit(macOf(5000), now-250, now) {
		t.Fatal("a request older than the floor was admitted")
	}
	if !c.admit(macOf(5001), now+1, now) {
		t.Fatal("a fresh request was refused")
	}
}
