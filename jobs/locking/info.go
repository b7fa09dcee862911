package locking

import (
	"maps"
	"slices"
)

// LockInfo describes one lock, with the fields of Ganeti's lock query
// (name, mode, owner, pending).
type LockInfo struct {
	// Name is the wire name: "instance/inst1", "cluster/BGL", or
	// "instance/[lockset]" for a level's set lock.
	Name string
	// Mode is "shared" or "exclusive", or "" when nobody holds the lock.
	// A set lock held in an intention mode reads "shared", as Ganeti held
	// a lockset's own lock shared while owning any of its members.
	Mode string
	// Owners are the holders, in increasing order.
	Owners []int64
	// OwnerModes gives, parallel to Owners, the mode each holds in the
	// multi-granularity scheme: "IS", "IX", "S" or "X" (members only S
	// or X). It tells, for example, "instance/[lockset]" held for an
	// exclusive member (IX) from the whole level held shared (S).
	OwnerModes []string
	// Pending are the waiters in the order they will be served, grouped
	// as consecutive waiters wanting the same mode.
	Pending []PendingInfo
}

// PendingInfo is a group of owners waiting for a lock in one mode.
type PendingInfo struct {
	// Mode is "shared" or "exclusive", as LockInfo.Mode.
	Mode string
	// Owners are the waiting owners, in the order they will be served.
	Owners []int64
	// LockMode is the multi-granularity mode wanted: "IS", "IX", "S" or
	// "X".
	LockMode string
}

// Held lists the locks owner holds, in the global order, each with the
// owner's own mode (Owners is just owner). Locks taken so far by a
// waiting Acquire are included.
func (m *Manager) Held(owner int64) []LockInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owners[owner]
	if o == nil {
		return nil
	}
	locks := slices.SortedFunc(maps.Keys(o.held), cmpLocks)
	out := make([]LockInfo, 0, len(locks))
	for _, lk := range locks {
		g := lk.holders[o]
		out = append(out, LockInfo{
			Name:       wireName(lk.level, lk.name),
			Mode:       g.publicMode(),
			Owners:     []int64{owner},
			OwnerModes: []string{g.String()},
		})
	}
	return out
}

// Snapshot lists every lock that is held or waited for, in the global
// order, with its holders and waiters.
func (m *Manager) Snapshot() []LockInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []LockInfo
	for l := range numLevels {
		if info, ok := m.sets[l].info(); ok {
			out = append(out, info)
		}
		for _, name := range slices.Sorted(maps.Keys(m.members[l])) {
			if info, ok := m.members[l][name].info(); ok {
				out = append(out, info)
			}
		}
	}
	return out
}

func (lk *lock) info() (LockInfo, bool) {
	if len(lk.holders) == 0 && len(lk.queue) == 0 {
		return LockInfo{}, false
	}
	info := LockInfo{Name: wireName(lk.level, lk.name)}
	holders := slices.SortedFunc(maps.Keys(lk.holders), func(a, b *owner) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	for _, o := range holders {
		g := lk.holders[o]
		info.Owners = append(info.Owners, o.id)
		info.OwnerModes = append(info.OwnerModes, g.String())
		if g == gX || info.Mode == "" {
			info.Mode = g.publicMode()
		}
	}
	for _, w := range lk.queue {
		if n := len(info.Pending); n > 0 && info.Pending[n-1].LockMode == w.mode.String() {
			info.Pending[n-1].Owners = append(info.Pending[n-1].Owners, w.c.owner.id)
			continue
		}
		info.Pending = append(info.Pending, PendingInfo{
			Mode:     w.mode.publicMode(),
			Owners:   []int64{w.c.owner.id},
			LockMode: w.mode.String(),
		})
	}
	return info, true
}
