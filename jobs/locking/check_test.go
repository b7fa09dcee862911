package locking

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// newTestManager returns a manager whose whole state is checked after
// every operation; a broken invariant fails the test.
func newTestManager(t testing.TB) *Manager {
	m := NewManager()
	m.checkHook = func() {
		if err := m.invariants(); err != nil {
			t.Errorf("invariant broken: %v\n%s", err, m.dumpLocked())
		}
	}
	return m
}

// invariants checks the state under m.mu: no two owners hold conflicting
// modes, the counts and the owners' bookkeeping agree with the holders,
// queues are in order and hold no waiter that could be granted, and
// nothing unused is kept.
func (m *Manager) invariants() error {
	if len(m.dirty) != 0 || m.settling {
		return fmt.Errorf("%d dirty locks left", len(m.dirty))
	}
	var all []*lock
	for l := range numLevels {
		if m.sets[l].name != "" || m.sets[l].level != Level(l) {
			return fmt.Errorf("set lock %d is %v/%q", l, m.sets[l].level, m.sets[l].name)
		}
		all = append(all, m.sets[l])
		for name, lk := range m.members[l] {
			if lk.name != name || lk.level != Level(l) {
				return fmt.Errorf("member %s/%s is %v/%q", Level(l), name, lk.level, lk.name)
			}
			if len(lk.holders) == 0 && len(lk.queue) == 0 {
				return fmt.Errorf("unused lock %s kept", wireName(lk.level, lk.name))
			}
			all = append(all, lk)
		}
	}
	held := map[*owner]int{}
	for _, lk := range all {
		name := wireName(lk.level, lk.name)
		var count [numGModes]int32
		for o, g := range lk.holders {
			if g == gNone || (lk.name != "" && g != gS && g != gX) {
				return fmt.Errorf("%s held %v by %d", name, g, o.id)
			}
			count[g]++
			if m.owners[o.id] != o {
				return fmt.Errorf("%s held by unknown owner %d", name, o.id)
			}
			if _, ok := o.held[lk]; !ok {
				return fmt.Errorf("%s held by %d, which does not know it", name, o.id)
			}
			held[o]++
			for p, h := range lk.holders {
				if p != o && !compat(g, h) {
					return fmt.Errorf("%s held %v by %d and %v by %d", name, g, o.id, h, p.id)
				}
			}
		}
		if count != lk.count {
			return fmt.Errorf("%s counts %v, holders give %v", name, lk.count, count)
		}
		var blocked []gmode
		for i, w := range lk.queue {
			if i > 0 && !ahead(lk.queue[i-1], w) {
				return fmt.Errorf("%s queue out of order at %d", name, i)
			}
			if w.lk != lk || w.c.waiting != w || w.c.owner.call != w.c || w.c.state != callRunning {
				return fmt.Errorf("%s: waiter %d is not its call's wait", name, w.c.owner.id)
			}
			ok := lk.compatHolders(w)
			for _, b := range blocked {
				ok = ok && compat(w.mode, b)
			}
			if ok {
				return fmt.Errorf("%s: waiter %d (%v) could be granted", name, w.c.owner.id, w.mode)
			}
			blocked = append(blocked, w.mode)
		}
	}
	for id, o := range m.owners {
		if o.id != id {
			return fmt.Errorf("owner %d filed as %d", o.id, id)
		}
		if len(o.held) == 0 && o.call == nil {
			return fmt.Errorf("owner %d kept while holding and waiting for nothing", id)
		}
		if held[o] != len(o.held) {
			return fmt.Errorf("owner %d knows %d locks, holds %d", id, len(o.held), held[o])
		}
		var nMem, nX [numLevels]int32
		for lk := range o.held {
			if lk.name != "" {
				nMem[lk.level]++
				if lk.holders[o] == gX {
					nX[lk.level]++
				}
			}
		}
		if nMem != o.nMem || nX != o.nX {
			return fmt.Errorf("owner %d member counts %v/%v, holdings give %v/%v", id, o.nMem, o.nX, nMem, nX)
		}
		if o.call != nil {
			if o.call.waiting == nil || o.call.owner != o {
				return fmt.Errorf("owner %d has a call that is not waiting", id)
			}
			continue
		}
		for l := range numLevels {
			if got, want := m.sets[l].holders[o], o.setMode(Level(l)); got != want {
				return fmt.Errorf("owner %d holds %v on %s, its holdings need %v", id, got, wireName(Level(l), ""), want)
			}
		}
	}
	return nil
}

// dumpLocked formats the state; m.mu is held.
func (m *Manager) dumpLocked() string {
	var b strings.Builder
	for l := range numLevels {
		locks := []*lock{m.sets[l]}
		for _, lk := range m.members[l] {
			locks = append(locks, lk)
		}
		for _, lk := range locks {
			if info, ok := lk.info(); ok {
				fmt.Fprintln(&b, formatInfo(info))
			}
		}
	}
	return b.String()
}

// formatInfo is a LockInfo in one line: name owner:mode... | waiting owner:mode...
func formatInfo(li LockInfo) string {
	var b strings.Builder
	b.WriteString(li.Name)
	for i, o := range li.Owners {
		fmt.Fprintf(&b, " %d:%s", o, li.OwnerModes[i])
	}
	if len(li.Pending) > 0 {
		b.WriteString(" |")
		for _, p := range li.Pending {
			for _, o := range p.Owners {
				fmt.Fprintf(&b, " %d:%s", o, p.LockMode)
			}
		}
	}
	return b.String()
}

func formatInfos(infos []LockInfo) string {
	var lines []string
	for _, li := range infos {
		lines = append(lines, formatInfo(li))
	}
	return strings.Join(lines, "\n")
}

// sizes returns how many member locks and owners the manager keeps.
func (m *Manager) sizes() (locks, owners int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range numLevels {
		locks += len(m.members[l])
	}
	return locks, len(m.owners)
}

func checkEmpty(t testing.TB, m *Manager) {
	t.Helper()
	if s := m.Snapshot(); len(s) != 0 {
		t.Errorf("locks left:\n%s", formatInfos(s))
	}
	if locks, owners := m.sizes(); locks != 0 || owners != 0 {
		t.Errorf("manager keeps %d member locks and %d owners, want none", locks, owners)
	}
}

// Request shorthands.
func members(l Level, mode Mode, names ...string) Request {
	return Request{Level: l, Names: names, Mode: mode}
}
func whole(l Level, mode Mode) Request { return Request{Level: l, Mode: mode} }
func ix(names ...string) Request       { return members(LevelInstance, Exclusive, names...) }
func is(names ...string) Request       { return members(LevelInstance, Shared, names...) }

// pending is an Acquire started with begin (so that it is queued, in
// order, when start returns) and waited for in a goroutine.
type pending struct {
	owner int64
	err   chan error
}

// start begins an Acquire for owner and returns at once; result() gives
// its outcome.
func start(t testing.TB, ctx context.Context, m *Manager, owner int64, prio int, timeout time.Duration, reqs ...Request) *pending {
	t.Helper()
	p := &pending{owner: owner, err: make(chan error, 1)}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	c, err := m.begin(owner, prio, reqs)
	if err != nil || c == nil {
		p.err <- err
		return p
	}
	go func() { p.err <- m.wait(ctx, c, deadline) }()
	return p
}

// result waits for the Acquire to return. The bound only keeps a broken
// manager from hanging the test; it does not measure anything.
func (p *pending) result(t testing.TB) error {
	t.Helper()
	select {
	case err := <-p.err:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("Acquire of owner %d did not return", p.owner)
		return nil
	}
}

// heldNames lists what owner holds as "name:mode" (multi-granularity modes).
func heldNames(m *Manager, owner int64) string {
	var out []string
	for _, li := range m.Held(owner) {
		out = append(out, li.Name+":"+li.OwnerModes[0])
	}
	return strings.Join(out, " ")
}

func waitingOwners(m *Manager, name string) []int64 {
	for _, li := range m.Snapshot() {
		if li.Name == name {
			var out []int64
			for _, p := range li.Pending {
				out = append(out, p.Owners...)
			}
			return out
		}
	}
	return nil
}
