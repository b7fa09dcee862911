package rpc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"golang.org/x/crypto/bcrypt"
)

// TestCredCache: a verified password is remembered for credCacheTTL
// under a key of user, password and stored form, so a changed hash or
// another password misses; failures are never remembered; the cache
// stays within credCacheSize.
func TestCredCache(t *testing.T) {
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	u := &fsm.RAPIUser{Name: "jack", Scheme: fsm.SchemeBcrypt, Hash: string(h)}
	var c credCache
	now := time.Unix(1000, 0)
	if c.verify(u, "wrong", now) || len(c.entries) != 0 {
		t.Fatal("a wrong password verified, or was remembered")
	}
	if !c.verify(u, "pw", now) || !c.hit(credKey(u, "pw"), now.Add(credCacheTTL-time.Second)) {
		t.Fatal("a verified password is not remembered")
	}
	if c.hit(credKey(u, "pw"), now.Add(credCacheTTL)) {
		t.Fatal("an entry outlived its TTL")
	}
	// The stored form is part of the key: after a passwd, the old
	// password is checked against the new hash, and fails.
	c.put(credKey(u, "pw"), now)
	h2, _ := bcrypt.GenerateFromPassword([]byte("new"), bcrypt.MinCost)
	u2 := &fsm.RAPIUser{Name: "jack", Scheme: fsm.SchemeBcrypt, Hash: string(h2)}
	if c.verify(u2, "pw", now) {
		t.Fatal("the old password verified against the new hash")
	}
	// HA1 compares too.
	ha := &fsm.RAPIUser{Name: "jill", Scheme: fsm.SchemeHA1, Hash: HA1("jill", "x")}
	if !c.verify(ha, "x", now) || c.verify(ha, "y", now) {
		t.Fatal("HA1 check")
	}
	// Bounded.
	for i := 0; i < 3*credCacheSize; i++ {
		c.put(credKey(&fsm.RAPIUser{Name: fmt.Sprint(i)}, "p"), now)
	}
	if len(c.entries) > credCacheSize {
		t.Fatalf("%d entries, the bound is %d", len(c.entries), credCacheSize)
	}
}

// TestLogLimiter: one refusal log a second, and the next one counts those
// left out.
func TestLogLimiter(t *testing.T) {
	var l logLimiter
	now := time.Unix(1000, 0)
	if ok, _ := l.allow(now); !ok {
		t.Fatal("first refused")
	}
	for i := 0; i < 5; i++ {
		if ok, _ := l.allow(now.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatal("more than one a second")
		}
	}
	if ok, n := l.allow(now.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("after a second: %v, %d left out", ok, n)
	}
}

// TestRouteAccessRequired: registering a route without a level panics.
func TestRouteAccessRequired(t *testing.T) {
	s := &Server{}
	defer func() {
		if recover() == nil {
			t.Fatal("a route without an access level was registered")
		}
	}()
	s.handle(0, "GET", "/x", nil)
}

// TestVerifyPasswordSlots: an unknown user is checked against a hash of
// the server's cost; a request waiting for a hashing slot gives up with
// its context.
func TestVerifyPasswordSlots(t *testing.T) {
	s := &Server{bcryptCost: bcrypt.MinCost}
	s.auth.now = time.Now
	s.auth.slots = make(chan struct{}, 1)
	if ok, aerr := s.verifyPassword(t.Context(), nil, "pw"); ok || aerr != nil {
		t.Fatalf("unknown user: %v %v", ok, aerr)
	}
	if cost, err := bcrypt.Cost(s.auth.dummy); err != nil || cost != bcrypt.MinCost {
		t.Fatalf("dummy hash cost %d, %v", cost, err)
	}
	ha := &fsm.RAPIUser{Name: "jill", Scheme: fsm.SchemeHA1, Hash: HA1("jill", "x")}
	s.auth.slots <- struct{}{} // every slot busy
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if ok, aerr := s.verifyPassword(ctx, ha, "x"); ok || aerr == nil {
		t.Fatalf("with no slot and a canceled request: %v %v", ok, aerr)
	}
	<-s.auth.slots
	if ok, aerr := s.verifyPassword(t.Context(), ha, "x"); !ok || aerr != nil {
		t.Fatalf("with a slot: %v %v", ok, aerr)
	}
	// Remembered now: no slot needed.
	s.auth.slots <- struct{}{}
	if ok, aerr := s.verifyPassword(ctx, ha, "x"); !ok || aerr != nil {
		t.Fatalf("remembered: %v %v", ok, aerr)
	}
}
