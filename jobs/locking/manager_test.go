package locking

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var bg = context.Background()

// TestConflicts checks, through the manager, which pairs of requests may
// be held together: the matrix as callers see it.
func TestConflicts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     Request
		conflict bool
	}{
		{"different instances exclusive", ix("i1"), ix("i2"), false},
		{"same instance shared", is("i1"), is("i1"), false},
		{"same instance shared then exclusive", is("i1"), ix("i1"), true},
		{"same instance exclusive then shared", ix("i1"), is("i1"), true},
		{"whole level exclusive vs member shared", whole(LevelInstance, Exclusive), is("i1"), true},
		{"member shared vs whole level exclusive", is("i1"), whole(LevelInstance, Exclusive), true},
		{"whole level shared vs member shared", whole(LevelInstance, Shared), is("i1"), false},
		{"whole level shared vs member exclusive", whole(LevelInstance, Shared), ix("i1"), true},
		{"member exclusive vs whole level shared", ix("i1"), whole(LevelInstance, Shared), true},
		{"whole level shared twice", whole(LevelInstance, Shared), whole(LevelInstance, Shared), false},
		{"whole level exclusive twice", whole(LevelInstance, Exclusive), whole(LevelInstance, Exclusive), true},
		{"different levels", ix("i1"), whole(LevelNode, Exclusive), false},
		{"same name on different levels", members(LevelNode, Exclusive, "x"), members(LevelNodeRes, Exclusive, "x"), false},
		{"BGL shared twice", members(LevelCluster, Shared, BGL), members(LevelCluster, Shared, BGL), false},
		{"BGL shared then exclusive", members(LevelCluster, Shared, BGL), members(LevelCluster, Exclusive, BGL), true},
		{"whole cluster level vs BGL", whole(LevelCluster, Exclusive), members(LevelCluster, Shared, BGL), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t)
			if p := start(t, bg, m, 1, 0, 0, tc.a); p.result(t) != nil {
				t.Fatal("first request not granted on an empty manager")
			}
			p := start(t, bg, m, 2, 0, 0, tc.b)
			queued := hasPending(m, 2)
			if queued != tc.conflict {
				t.Fatalf("second request queued=%v, want %v; state:\n%s", queued, tc.conflict, formatInfos(m.Snapshot()))
			}
			m.ReleaseAll(1)
			if err := p.result(t); err != nil {
				t.Fatalf("second request after the release: %v", err)
			}
			m.ReleaseAll(2)
			checkEmpty(t, m)
		})
	}
}

func hasPending(m *Manager, owner int64) bool {
	for _, li := range m.Snapshot() {
		for _, p := range li.Pending {
			if slices.Contains(p.Owners, owner) {
				return true
			}
		}
	}
	return false
}

func TestAcquireHeldAndSnapshot(t *testing.T) {
	m := newTestManager(t)
	err := m.Acquire(bg, 7, 0, []Request{
		members(LevelCluster, Shared, BGL),
		ix("inst2", "inst1"),
		members(LevelNodeRes, Shared, "node1"),
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "cluster/[lockset]:IS cluster/BGL:S instance/[lockset]:IX instance/inst1:X instance/inst2:X node-res/[lockset]:IS node-res/node1:S"
	if got := heldNames(m, 7); got != want {
		t.Errorf("Held:\n got %s\nwant %s", got, want)
	}
	modes := map[string]string{}
	for _, li := range m.Held(7) {
		modes[li.Name] = li.Mode
	}
	if modes["instance/inst1"] != "exclusive" || modes["cluster/BGL"] != "shared" || modes["instance/[lockset]"] != "shared" {
		t.Errorf("public modes %v", modes)
	}
	if err := m.Acquire(bg, 8, 0, []Request{members(LevelCluster, Shared, BGL)}, 0); err != nil {
		t.Fatal(err)
	}
	p := start(t, bg, m, 9, 0, 0, ix("inst1"))
	snap := m.Snapshot()
	var bgl, inst1 LockInfo
	for _, li := range snap {
		switch li.Name {
		case "cluster/BGL":
			bgl = li
		case "instance/inst1":
			inst1 = li
		}
	}
	if bgl.Mode != "shared" || !slices.Equal(bgl.Owners, []int64{7, 8}) {
		t.Errorf("BGL: %+v", bgl)
	}
	if inst1.Mode != "exclusive" || !slices.Equal(inst1.Owners, []int64{7}) ||
		len(inst1.Pending) != 1 || inst1.Pending[0].Mode != "exclusive" || !slices.Equal(inst1.Pending[0].Owners, []int64{9}) {
		t.Errorf("inst1: %+v", inst1)
	}
	m.ReleaseAll(7)
	if err := p.result(t); err != nil {
		t.Fatal(err)
	}
	m.ReleaseAll(8)
	m.ReleaseAll(9)
	checkEmpty(t, m)
}

// grantOrder queues owners on one exclusive lock held by owner 1 and
// returns the order in which releases hand it on.
func grantOrder(t *testing.T, prios map[int64]int, arrival []int64) []int64 {
	m := newTestManager(t)
	if start(t, bg, m, 1, 0, 0, ix("i1")).result(t) != nil {
		t.Fatal("not granted")
	}
	ps := map[int64]*pending{}
	for _, o := range arrival {
		ps[o] = start(t, bg, m, o, prios[o], 0, ix("i1"))
	}
	var order []int64
	holder := int64(1)
	for range arrival {
		m.ReleaseAll(holder)
		holder = 0
		for _, o := range arrival {
			if strings.Contains(heldNames(m, o), "instance/i1:X") {
				if holder != 0 {
					t.Fatalf("owners %d and %d both hold i1", holder, o)
				}
				holder = o
			}
		}
		if holder == 0 {
			t.Fatalf("nobody got i1 after a release; state:\n%s", formatInfos(m.Snapshot()))
		}
		if err := ps[holder].result(t); err != nil {
			t.Fatal(err)
		}
		order = append(order, holder)
	}
	m.ReleaseAll(holder)
	checkEmpty(t, m)
	return order
}

func TestPriorityOrder(t *testing.T) {
	got := grantOrder(t, map[int64]int{2: 10, 3: 0, 4: -5, 5: 19, 6: -20}, []int64{2, 3, 4, 5, 6})
	if want := []int64{6, 4, 3, 2, 5}; !slices.Equal(got, want) {
		t.Errorf("granted in order %v, want %v (by priority)", got, want)
	}
}

func TestFIFOWithinPriority(t *testing.T) {
	got := grantOrder(t, map[int64]int{5: 3, 3: 3, 4: 3, 2: 3}, []int64{5, 3, 4, 2})
	if want := []int64{5, 3, 4, 2}; !slices.Equal(got, want) {
		t.Errorf("granted in order %v, want arrival order %v", got, want)
	}
}

// TestNoOvertaking: a shared request compatible with the holders waits
// behind an earlier exclusive waiter; shared waiters are granted together.
func TestNoOvertaking(t *testing.T) {
	m := newTestManager(t)
	start(t, bg, m, 1, 0, 0, is("i1")).result(t)
	start(t, bg, m, 6, 0, 0, is("i1")).result(t)
	p2 := start(t, bg, m, 2, 0, 0, ix("i1")) // waits for 1 and 6
	p3 := start(t, bg, m, 3, 0, 0, is("i1")) // compatible with 1, not with 2
	p4 := start(t, bg, m, 4, 0, 0, is("i1"))
	p5 := start(t, bg, m, 5, 0, 0, ix("i2")) // another member: not in the way
	if err := p5.result(t); err != nil {
		t.Fatal(err)
	}
	if got := waitingOwners(m, "instance/i1"); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Fatalf("waiting for i1: %v, want [2 3 4]; state:\n%s", got, formatInfos(m.Snapshot()))
	}
	m.ReleaseAll(6) // 2 still waits for 1, so 3 and 4 wait behind it
	if got := waitingOwners(m, "instance/i1"); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Fatalf("waiting for i1: %v, want [2 3 4]; state:\n%s", got, formatInfos(m.Snapshot()))
	}
	m.ReleaseAll(1)
	if err := p2.result(t); err != nil {
		t.Fatal(err)
	}
	if got := waitingOwners(m, "instance/i1"); !slices.Equal(got, []int64{3, 4}) {
		t.Fatalf("waiting for i1: %v, want [3 4]", got)
	}
	m.ReleaseAll(2)
	for _, p := range []*pending{p3, p4} { // granted together
		if err := p.result(t); err != nil {
			t.Fatal(err)
		}
	}
	m.ReleaseAll(3)
	m.ReleaseAll(4)
	m.ReleaseAll(5)
	checkEmpty(t, m)
}

// TestWholeLevelIsNotStarved is the design document's example: A holds
// inst4, B wants all instances, C wants inst1. C does not overtake B
// (which would let a stream of member requests starve B); with a higher
// priority it does.
func TestWholeLevelIsNotStarved(t *testing.T) {
	for _, cprio := range []int{0, -1} {
		m := newTestManager(t)
		start(t, bg, m, 1, 0, 0, ix("inst4")).result(t)
		pb := start(t, bg, m, 2, 0, 0, whole(LevelInstance, Exclusive))
		pc := start(t, bg, m, 3, cprio, 0, ix("inst1"))
		if cprio < 0 {
			if err := pc.result(t); err != nil {
				t.Fatal(err)
			}
			m.ReleaseAll(3)
		} else if got := waitingOwners(m, "instance/[lockset]"); !slices.Equal(got, []int64{2, 3}) {
			t.Fatalf("waiting for the instance set lock: %v, want [2 3]", got)
		}
		m.ReleaseAll(1)
		if err := pb.result(t); err != nil {
			t.Fatal(err)
		}
		if cprio == 0 && !hasPending(m, 3) {
			t.Fatal("C got inst1 while B holds every instance")
		}
		m.ReleaseAll(2)
		if cprio == 0 {
			if err := pc.result(t); err != nil {
				t.Fatal(err)
			}
			m.ReleaseAll(3)
		}
		checkEmpty(t, m)
	}
}

func TestTimeoutReleasesWhatTheCallTook(t *testing.T) {
	m := newTestManager(t)
	start(t, bg, m, 1, 0, 0, ix("i2")).result(t)
	// Owner 2 holds node n9 and i1 shared from an earlier call.
	start(t, bg, m, 2, 0, 0, members(LevelNode, Exclusive, "n9"), is("i1")).result(t)
	before := heldNames(m, 2)
	p := start(t, bg, m, 2, 0, 20*time.Millisecond,
		ix("i1", "i2", "i3"), members(LevelNode, Exclusive, "n1"))
	// While waiting for i2 it holds i1, converted to exclusive.
	if got := heldNames(m, 2); !strings.Contains(got, "instance/i1:X") || strings.Contains(got, "i2") {
		t.Errorf("while waiting: %s", got)
	}
	if err := p.result(t); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Acquire: %v, want ErrTimeout", err)
	}
	if got := heldNames(m, 2); got != before {
		t.Errorf("after the timeout owner 2 holds\n %s\nwant what it held before\n %s", got, before)
	}
	// Another owner can take i1 shared at once, and i3 and n1 exclusive.
	if err := start(t, bg, m, 3, 0, 0, is("i1", "i3")).result(t); err != nil {
		t.Fatal(err)
	}
	p4 := start(t, bg, m, 4, 0, 0, ix("i3"))
	if !hasPending(m, 4) {
		t.Fatal("i3 taken shared by 3, yet 4 got it exclusive")
	}
	m.ReleaseAll(3)
	if err := p4.result(t); err != nil {
		t.Fatal(err)
	}
	if err := start(t, bg, m, 5, 0, 0, members(LevelNode, Exclusive, "n1")).result(t); err != nil {
		t.Fatal(err)
	}
	for _, o := range []int64{1, 2, 4, 5} {
		m.ReleaseAll(o)
	}
	checkEmpty(t, m)
}

func TestAcquireTimeoutPublic(t *testing.T) {
	m := newTestManager(t)
	if err := m.Acquire(bg, 1, 0, []Request{whole(LevelNode, Exclusive)}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := m.Acquire(bg, 2, 0, []Request{members(LevelNetwork, Shared, "net1")}, 0); err != nil {
		t.Fatal(err)
	}
	err := m.Acquire(bg, 2, 0, []Request{members(LevelCluster, Shared, BGL), whole(LevelInstance, Shared), members(LevelNode, Shared, "n1")}, 10*time.Millisecond)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Acquire: %v, want ErrTimeout", err)
	}
	if got := heldNames(m, 2); got != "network/[lockset]:IS network/net1:S" {
		t.Errorf("owner 2 holds %s, want only net1", got)
	}
	// The whole instance level it had while waiting is forgotten: asking
	// for and releasing a member leaves nothing at that level.
	if err := m.Acquire(bg, 2, 0, []Request{is("i1")}, 0); err != nil {
		t.Fatal(err)
	}
	m.Release(2, []Request{is("i1"), members(LevelNetwork, Shared, "net1")})
	m.ReleaseAll(1)
	checkEmpty(t, m)
}

func TestContextCancel(t *testing.T) {
	m := newTestManager(t)
	start(t, bg, m, 1, 0, 0, ix("i2")).result(t)
	ctx, cancel := context.WithCancel(bg)
	p := start(t, ctx, m, 2, 0, 0, ix("i1", "i2"))
	if got := heldNames(m, 2); got != "instance/[lockset]:IX instance/i1:X" {
		t.Errorf("while waiting: %s", got)
	}
	cancel()
	if err := p.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	if h := m.Held(2); len(h) != 0 {
		t.Errorf("owner 2 keeps %s", formatInfos(h))
	}
	// An Acquire with a context already done takes nothing, even a free lock.
	if err := m.Acquire(ctx, 3, 0, []Request{ix("i3")}, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a canceled context: %v", err)
	}
	if h := m.Held(3); len(h) != 0 {
		t.Errorf("owner 3 holds %s", formatInfos(h))
	}
	m.ReleaseAll(1)
	checkEmpty(t, m)
}

func TestReentrantAndUpgrade(t *testing.T) {
	m := newTestManager(t)
	acq := func(o int64, r ...Request) {
		t.Helper()
		if err := m.Acquire(bg, o, 0, r, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	acq(1, is("i1"))
	acq(1, is("i1")) // again: nothing changes
	if got := heldNames(m, 1); got != "instance/[lockset]:IS instance/i1:S" {
		t.Errorf("after asking twice: %s", got)
	}
	acq(1, ix("i1")) // only holder: converted at once
	acq(1, is("i1")) // weaker: stays exclusive
	if got := heldNames(m, 1); got != "instance/[lockset]:IX instance/i1:X" {
		t.Errorf("after the upgrade: %s", got)
	}
	// Whole level shared plus an exclusive member needs X on the set lock;
	// releasing the member brings it back to S.
	acq(1, whole(LevelInstance, Shared))
	if got := heldNames(m, 1); got != "instance/[lockset]:X instance/i1:X" {
		t.Errorf("whole level shared with an exclusive member: %s", got)
	}
	m.Release(1, []Request{is("i1")})
	if got := heldNames(m, 1); got != "instance/[lockset]:S" {
		t.Errorf("after releasing the member: %s", got)
	}
	m.ReleaseAll(1)

	// Two shared holders; 3 waits for exclusive; 1's conversion goes
	// before 3 and is granted when 2 leaves.
	acq(1, is("i1"))
	acq(2, is("i1"))
	p3 := start(t, bg, m, 3, -20, 0, ix("i1"))
	p1 := start(t, bg, m, 1, 19, 0, ix("i1"))
	if got := waitingOwners(m, "instance/i1"); !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("waiting for i1: %v, want the conversion first: [1 3]", got)
	}
	m.ReleaseAll(2)
	if err := p1.result(t); err != nil {
		t.Fatal(err)
	}
	if got := heldNames(m, 1); got != "instance/[lockset]:IX instance/i1:X" {
		t.Errorf("after the conversion: %s", got)
	}
	m.ReleaseAll(1)
	if err := p3.result(t); err != nil {
		t.Fatal(err)
	}
	m.ReleaseAll(3)
	checkEmpty(t, m)
}

func TestRelease(t *testing.T) {
	m := newTestManager(t)
	m.Release(1, []Request{ix("i1")}) // unknown owner
	m.ReleaseAll(1)
	if err := m.Acquire(bg, 1, 0, []Request{ix("i1"), is("i2", "i3"), whole(LevelNode, Shared)}, 0); err != nil {
		t.Fatal(err)
	}
	want := "instance/[lockset]:IX instance/i1:X instance/i2:S instance/i3:S node/[lockset]:S"
	for _, r := range [][]Request{
		{ix("i9")}, // not held
		{members(LevelNetwork, Shared, "net")},
		{{Level: 42, Names: []string{"x"}}}, // invalid: ignored
		{members(LevelNode, Exclusive, "n1")},
		nil,
	} {
		m.Release(1, r)
		if got := heldNames(m, 1); got != want {
			t.Fatalf("after releasing %v: %s", r, got)
		}
	}
	m.Release(1, []Request{ix("i1")}) // the set lock needs only IS now
	if got := heldNames(m, 1); got != "instance/[lockset]:IS instance/i2:S instance/i3:S node/[lockset]:S" {
		t.Errorf("after releasing i1: %s", got)
	}
	// A shared release of an exclusive member releases it all the same.
	m.Release(1, []Request{is("i2"), whole(LevelNode, Exclusive)})
	if got := heldNames(m, 1); got != "instance/[lockset]:IS instance/i3:S" {
		t.Errorf("after releasing i2 and the node level: %s", got)
	}
	// The set lock held only for i3 goes with it.
	m.Release(1, []Request{is("i3")})
	checkEmpty(t, m)

	if err := m.Acquire(bg, 1, 0, []Request{ix("i1"), is("i2")}, 0); err != nil {
		t.Fatal(err)
	}
	m.Release(1, []Request{whole(LevelInstance, Shared)}) // releases every member
	checkEmpty(t, m)
}

// TestReleaseUnblocksDowngrade: weakening a set lock by a release lets a
// waiter in.
func TestReleaseUnblocksDowngrade(t *testing.T) {
	m := newTestManager(t)
	if err := m.Acquire(bg, 1, 0, []Request{ix("i1"), is("i2")}, 0); err != nil {
		t.Fatal(err)
	}
	p := start(t, bg, m, 2, 0, 0, whole(LevelInstance, Shared)) // IX blocks S
	m.Release(1, []Request{ix("i1")})                           // now IS, compatible with S
	if err := p.result(t); err != nil {
		t.Fatal(err)
	}
	m.ReleaseAll(1)
	m.ReleaseAll(2)
	checkEmpty(t, m)
}

func TestReleaseWhileWaiting(t *testing.T) {
	m := newTestManager(t)
	start(t, bg, m, 1, 0, 0, ix("i2")).result(t)
	start(t, bg, m, 2, 0, 0, members(LevelNode, Shared, "n1")).result(t)
	p := start(t, bg, m, 2, 0, 0, ix("i1", "i2"))
	m.Release(2, []Request{members(LevelNode, Shared, "n1")})
	if err := p.result(t); !errors.Is(err, ErrReleased) {
		t.Fatalf("Acquire: %v, want ErrReleased", err)
	}
	if h := m.Held(2); len(h) != 0 {
		t.Errorf("owner 2 keeps %s", formatInfos(h))
	}
	p = start(t, bg, m, 3, 0, 0, ix("i1", "i2"))
	m.ReleaseAll(3)
	if err := p.result(t); !errors.Is(err, ErrReleased) {
		t.Fatalf("Acquire: %v, want ErrReleased", err)
	}
	m.ReleaseAll(1)
	checkEmpty(t, m)
}

func TestBusyAndInvalid(t *testing.T) {
	m := newTestManager(t)
	start(t, bg, m, 1, 0, 0, ix("i1")).result(t)
	p := start(t, bg, m, 2, 0, 0, ix("i1"))
	if err := m.Acquire(bg, 2, 0, []Request{ix("i3")}, 0); !errors.Is(err, ErrBusy) {
		t.Errorf("second Acquire of a waiting owner: %v, want ErrBusy", err)
	}
	err := m.Acquire(bg, 3, 0, []Request{members(LevelCluster, Exclusive, "config")}, 0)
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), `"config"`) {
		t.Errorf("Acquire of cluster/config: %v", err)
	}
	if err := m.Acquire(bg, 3, 0, nil, 0); err != nil {
		t.Errorf("empty Acquire: %v", err)
	}
	m.ReleaseAll(1)
	if err := p.result(t); err != nil {
		t.Fatal(err)
	}
	m.ReleaseAll(2)
	checkEmpty(t, m)
}

func TestSetPriority(t *testing.T) {
	m := newTestManager(t)
	start(t, bg, m, 1, 0, 0, ix("i1")).result(t)
	p2 := start(t, bg, m, 2, 5, 0, ix("i1"))
	p3 := start(t, bg, m, 3, 5, 0, ix("i1"))
	m.SetPriority(3, 4)
	m.SetPriority(99, 0) // unknown: ignored
	if got := waitingOwners(m, "instance/i1"); !slices.Equal(got, []int64{3, 2}) {
		t.Fatalf("waiting: %v, want [3 2]", got)
	}
	m.ReleaseAll(1)
	if err := p3.result(t); err != nil {
		t.Fatal(err)
	}
	m.ReleaseAll(3)
	if err := p2.result(t); err != nil {
		t.Fatal(err)
	}
	m.ReleaseAll(2)
	checkEmpty(t, m)
}

// TestNamesFreed: locks come and go with use; nothing grows.
func TestNamesFreed(t *testing.T) {
	m := newTestManager(t)
	for i := range 200 {
		name := "inst" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		if err := m.Acquire(bg, int64(i), 0, []Request{ix(name), members(LevelNode, Shared, name)}, 0); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			m.ReleaseAll(int64(i - 1))
			m.Release(int64(i), []Request{ix(name), members(LevelNode, Shared, name)})
		}
	}
	checkEmpty(t, m)
	// A burst of names leaves at most maxFree spare structures behind.
	var many []string
	for i := range 5 * maxFree {
		many = append(many, "burst"+strings.Repeat("-", i))
	}
	for o := range int64(3) {
		if err := m.Acquire(bg, o, 0, []Request{is(many...)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for o := range int64(3) {
		m.ReleaseAll(o)
	}
	checkEmpty(t, m)
	if len(m.freeLocks) > maxFree || len(m.freeOwners) > maxFree {
		t.Errorf("%d spare locks and %d spare owners kept, want at most %d", len(m.freeLocks), len(m.freeOwners), maxFree)
	}
}
