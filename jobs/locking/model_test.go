package locking

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// refModel is a reference implementation of the grant rules, written for
// clarity rather than speed: holdings in one map, the calls in another,
// and after every operation it grants, until nothing changes, the first
// waiter (in queue order) that the rules allow at the first lock (in the
// global order) where some waiter is allowed. It shares only normalize
// and the mode tables with the manager.
type refModel struct {
	holds map[refKey]map[int64]gmode
	whole map[int64]*[numLevels]gmode
	calls map[int64]*refCall
	seq   uint64
}

type refKey struct {
	level Level
	name  string
}

type refCall struct {
	prio      int
	seq       uint64
	steps     []step
	next      int
	taken     []refTaken
	prevWhole [numLevels]gmode
}

type refTaken struct {
	key  refKey
	prev gmode
}

func newRefModel() *refModel {
	return &refModel{holds: map[refKey]map[int64]gmode{}, whole: map[int64]*[numLevels]gmode{}, calls: map[int64]*refCall{}}
}

func (r *refModel) held(k refKey, o int64) gmode { return r.holds[k][o] }

func (r *refModel) set(k refKey, o int64, g gmode) {
	if g == gNone {
		delete(r.holds[k], o)
		if len(r.holds[k]) == 0 {
			delete(r.holds, k)
		}
		return
	}
	if r.holds[k] == nil {
		r.holds[k] = map[int64]gmode{}
	}
	r.holds[k][o] = g
}

func (r *refModel) wholeOf(o int64) *[numLevels]gmode {
	if r.whole[o] == nil {
		r.whole[o] = new([numLevels]gmode)
	}
	return r.whole[o]
}

// acquire starts a call; it reports whether it finished at once.
func (r *refModel) acquire(o int64, prio int, reqs []Request) (done bool, err error) {
	steps, err := normalize(reqs, nil)
	if err != nil || len(steps) == 0 {
		return true, err
	}
	if r.calls[o] != nil {
		return false, ErrBusy
	}
	r.seq++
	r.calls[o] = &refCall{prio: prio, seq: r.seq, steps: steps, prevWhole: *r.wholeOf(o)}
	r.settle()
	return r.calls[o] == nil, nil
}

func (r *refModel) abandon(o int64) {
	c := r.calls[o]
	if c == nil {
		return
	}
	for i := len(c.taken) - 1; i >= 0; i-- {
		r.set(c.taken[i].key, o, c.taken[i].prev)
	}
	*r.wholeOf(o) = c.prevWhole
	delete(r.calls, o)
}

func (r *refModel) giveUp(o int64) {
	r.abandon(o)
	r.settle()
}

func (r *refModel) release(o int64, reqs []Request) {
	r.abandon(o)
	touched := map[Level]bool{}
	for _, q := range reqs {
		if !q.Level.valid() {
			continue
		}
		touched[q.Level] = true
		if len(q.Names) == 0 {
			r.wholeOf(o)[q.Level] = gNone
			for k := range r.holds {
				if k.level == q.Level && k.name != "" {
					r.set(k, o, gNone)
				}
			}
		}
		for _, n := range q.Names {
			r.set(refKey{q.Level, n}, o, gNone)
		}
	}
	for l := range touched {
		setKey := refKey{l, ""}
		if r.held(setKey, o) == gNone {
			continue
		}
		var intent gmode
		for k, hs := range r.holds {
			if k.level == l && k.name != "" && hs[o] != gNone {
				intent = lub(intent, intentFor(hs[o]))
			}
		}
		r.set(setKey, o, lub(r.wholeOf(o)[l], intent))
	}
	r.settle()
}

func intentFor(member gmode) gmode {
	if member == gX {
		return gIX
	}
	return gIS
}

func (r *refModel) releaseAll(o int64) {
	r.abandon(o)
	for k := range r.holds {
		r.set(k, o, gNone)
	}
	*r.wholeOf(o) = [numLevels]gmode{}
	r.settle()
}

func (r *refModel) setPriority(o int64, prio int) {
	if c := r.calls[o]; c != nil {
		c.prio = prio
		r.settle()
	}
}

type refWaiter struct {
	owner int64
	c     *refCall
	want  gmode
	conv  bool
}

// waiters lists the calls waiting for k, in queue order.
func (r *refModel) waiters(k refKey) []refWaiter {
	var ws []refWaiter
	for o, c := range r.calls {
		st := c.steps[c.next]
		if (refKey{st.level, st.name}) == k {
			cur := r.held(k, o)
			ws = append(ws, refWaiter{o, c, lub(cur, st.mode), cur != gNone})
		}
	}
	slices.SortFunc(ws, func(a, b refWaiter) int {
		if a.conv != b.conv {
			if a.conv {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.c.prio, b.c.prio), cmp.Compare(a.c.seq, b.c.seq))
	})
	return ws
}

func (r *refModel) keys() []refKey {
	seen := map[refKey]bool{}
	for k := range r.holds {
		seen[k] = true
	}
	for _, c := range r.calls {
		st := c.steps[c.next]
		seen[refKey{st.level, st.name}] = true
	}
	var ks []refKey
	for k := range seen {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b refKey) int {
		switch {
		case before(a.level, a.name, b.level, b.name):
			return -1
		case before(b.level, b.name, a.level, a.name):
			return 1
		}
		return 0
	})
	return ks
}

func (r *refModel) settle() {
	for {
		// Steps already covered by what the owner holds are passed.
		for o, c := range r.calls {
			for c.next < len(c.steps) {
				st := c.steps[c.next]
				k := refKey{st.level, st.name}
				if cur := r.held(k, o); lub(cur, st.mode) != cur {
					break
				}
				r.stepDone(o, c)
			}
			if c.next == len(c.steps) {
				delete(r.calls, o)
			}
		}
		if !r.grantOne() {
			return
		}
	}
}

func (r *refModel) stepDone(o int64, c *refCall) {
	if st := c.steps[c.next]; st.whole {
		r.wholeOf(o)[st.level] = lub(r.wholeOf(o)[st.level], st.mode)
	}
	c.next++
}

func (r *refModel) grantOne() bool {
	for _, k := range r.keys() {
		var blocked []gmode
		for _, w := range r.waiters(k) {
			ok := true
			for o, g := range r.holds[k] {
				if o != w.owner && !compat(w.want, g) {
					ok = false
				}
			}
			for _, b := range blocked {
				if !compat(w.want, b) {
					ok = false
				}
			}
			if ok {
				w.c.taken = append(w.c.taken, refTaken{k, r.held(k, w.owner)})
				r.set(k, w.owner, w.want)
				r.stepDone(w.owner, w.c)
				return true
			}
			blocked = append(blocked, w.want)
		}
	}
	return false
}

// state formats the model as formatInfos formats a Snapshot.
func (r *refModel) state() string {
	var lines []string
	for _, k := range r.keys() {
		line := wireName(k.level, k.name)
		var owners []int64
		for o := range r.holds[k] {
			owners = append(owners, o)
		}
		slices.Sort(owners)
		for _, o := range owners {
			line += fmt.Sprintf(" %d:%s", o, r.holds[k][o])
		}
		if ws := r.waiters(k); len(ws) > 0 {
			line += " |"
			for _, w := range ws {
				line += fmt.Sprintf(" %d:%s", w.owner, w.want)
			}
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// randomRequests draws a request over a few names per level, so that
// conflicts, whole levels, duplicates and conversions are frequent.
func randomRequests(rng *rand.Rand) []Request {
	pool := map[Level][]string{
		LevelCluster:   {BGL},
		LevelInstance:  {"i1", "i2", "i3"},
		LevelNodeGroup: {"g1"},
		LevelNode:      {"n1", "n2"},
		LevelNodeRes:   {"n1", "n2"},
	}
	levels := []Level{LevelCluster, LevelInstance, LevelNodeGroup, LevelNode, LevelNodeRes}
	var reqs []Request
	for range 1 + rng.IntN(3) {
		l := levels[rng.IntN(len(levels))]
		r := Request{Level: l, Mode: Mode(rng.IntN(2))}
		if rng.IntN(6) > 0 {
			names := pool[l]
			for range 1 + rng.IntN(len(names)) {
				r.Names = append(r.Names, names[rng.IntN(len(names))])
			}
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// TestAgainstModel runs random sequences of operations, deterministic per
// seed, on the manager and on refModel, and compares the whole state
// (holders, modes, queues in order) and which calls finished after each.
func TestAgainstModel(t *testing.T) {
	const owners = 6
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 0x10c5))
		m := newTestManager(t)
		ref := newRefModel()
		calls := map[int64]*call{}
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: "+format+"\noperations:\n%s", append([]any{seed}, append(args, strings.Join(log, "\n"))...)...)
		}
		for range 400 {
			o := 1 + rng.Int64N(owners)
			switch op := rng.IntN(20); {
			case op < 9:
				reqs := randomRequests(rng)
				prio := rng.IntN(3) - 1
				log = append(log, fmt.Sprintf("acquire %d prio %d %v", o, prio, reqs))
				c, err := m.begin(o, prio, reqs)
				done, rerr := ref.acquire(o, prio, reqs)
				if err != rerr {
					fail("acquire error %v, model %v", err, rerr)
				}
				if err == nil {
					if (c == nil) != done {
						fail("acquire finished=%v, model %v", c == nil, done)
					}
					if c != nil {
						calls[o] = c
					}
				}
			case op < 11:
				if c := calls[o]; c != nil {
					log = append(log, fmt.Sprintf("give up %d", o))
					m.giveUp(c)
					ref.giveUp(o)
				}
			case op < 14:
				reqs := randomRequests(rng)
				log = append(log, fmt.Sprintf("release %d %v", o, reqs))
				m.Release(o, reqs)
				ref.release(o, reqs)
			case op < 17:
				log = append(log, fmt.Sprintf("release all %d", o))
				m.ReleaseAll(o)
				ref.releaseAll(o)
			default:
				prio := rng.IntN(5) - 2
				log = append(log, fmt.Sprintf("priority %d %d", o, prio))
				m.SetPriority(o, prio)
				ref.setPriority(o, prio)
			}
			if got, want := formatInfos(m.Snapshot()), ref.state(); got != want {
				fail("state differs\nmanager:\n%s\nmodel:\n%s", got, want)
			}
			for id, c := range calls {
				m.mu.Lock()
				state := c.state
				m.mu.Unlock()
				if (state == callRunning) != (ref.calls[id] != nil) {
					fail("owner %d: call state %d, model waiting=%v", id, state, ref.calls[id] != nil)
				}
				if state != callRunning {
					delete(calls, id)
				}
			}
		}
		for o := range int64(owners) {
			m.ReleaseAll(o + 1)
		}
		checkEmpty(t, m)
	}
}
