package locking

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrTimeout is returned by Acquire when the timeout passed before every
// lock was held; the locks taken by that call have been given back.
var ErrTimeout = errors.New("lock acquisition timed out")

// ErrReleased is returned by an Acquire that was waiting when Release or
// ReleaseAll was called for the same owner; the locks taken by that call
// have been given back before the release was applied.
var ErrReleased = errors.New("lock acquisition abandoned: the owner released its locks")

// ErrBusy is returned by Acquire when the same owner already has an
// Acquire waiting: an owner asks for one set of locks at a time.
var ErrBusy = errors.New("owner already has a lock acquisition in progress")

// Manager is the lock manager. Its zero value is not usable; call
// NewManager. All methods are safe for concurrent use.
type Manager struct {
	mu       sync.Mutex
	seq      uint64
	sets     [numLevels]*lock
	members  [numLevels]map[string]*lock
	owners   map[int64]*owner
	dirty    []*lock // locks whose queue may have become grantable, or that may be unused
	settling bool
	visit    int // while settling, the index in dirty being visited

	// Free lists (up to maxFree each), so that the uncontended path does
	// not allocate a lock, an owner or their maps every time a name comes
	// back into use.
	freeLocks  []*lock
	freeOwners []*owner

	// checkHook, when set (by tests), runs under mu at the end of every
	// operation that changed the state.
	checkHook func()
}

// maxFree bounds each free list: what a burst of locks or owners leaves
// behind beyond it goes to the garbage collector.
const maxFree = 64

// lock is one lock: a level's set lock (name "") or a member.
type lock struct {
	level   Level
	name    string
	holders map[*owner]gmode
	count   [numGModes]int32 // holders per mode
	queue   []*waiter        // in grant order: conversions first, then by (priority, seq)
	dirty   bool             // in Manager.dirty
}

// owner is one job's view: what it holds and its Acquire in progress.
type owner struct {
	id    int64
	held  map[*lock]struct{}
	whole [numLevels]gmode // whole-level requests held (gS or gX)
	nMem  [numLevels]int32 // members held per level
	nX    [numLevels]int32 // of which exclusive
	call  *call            // the Acquire waiting, if any
}

// call is one Acquire: its steps, how far it got and what it changed.
type call struct {
	owner     *owner
	prio      int
	seq       uint64
	steps     []step
	next      int     // index of the step being waited for or taken next
	taken     []taken // steps that changed a holding, to undo on failure
	prevWhole [numLevels]gmode
	waiting   *waiter // set while queued
	state     callState
	done      chan struct{} // closed when state leaves callRunning, once someone waits on it

	stepBuf  [4]step
	takenBuf [4]taken
}

type callState uint8

const (
	callRunning callState = iota
	callDone
	callFailed
)

// taken records a holding changed by a call and the mode it had before
// (gNone: not held).
type taken struct {
	lk   *lock
	prev gmode
}

// waiter is a call queued on one lock.
type waiter struct {
	c    *call
	lk   *lock
	mode gmode // the mode wanted: lub of the one held and the step's
	conv bool  // the owner already holds lk and wants a stronger mode
}

// NewManager returns a manager that holds no locks.
func NewManager() *Manager {
	m := &Manager{owners: map[int64]*owner{}}
	for l := range numLevels {
		m.sets[l] = &lock{level: Level(l), holders: map[*owner]gmode{}}
		m.members[l] = map[string]*lock{}
	}
	return m
}

// Acquire blocks until every lock of reqs is held by owner, the timeout
// passes (timeout <= 0 means no timeout), or ctx ends. Locks are taken one
// by one in the global order (level, the set lock before the members,
// members by name), all within the one timeout. On timeout it returns
// ErrTimeout, on cancellation ctx.Err(); either way every holding this
// call took or strengthened is given back, and what the owner held before
// the call is kept. If the last lock was granted before Acquire noticed
// the timeout or cancellation, it returns nil and the locks are held.
//
// priority orders the waits (lower is more urgent, Ganeti's −20…19).
// Locks the owner already holds in the same or a stronger mode are not
// asked again; a shared lock it holds is converted to exclusive as soon as
// no other owner holds it (see the package comment).
//
// Without taking anything, it returns an error wrapping ErrInvalidRequest
// for a malformed request and ErrBusy if owner already has an Acquire
// waiting. A waiting Acquire abandoned by Release or ReleaseAll for the
// same owner returns ErrReleased.
func (m *Manager) Acquire(ctx context.Context, owner int64, priority int, reqs []Request, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	c, err := m.begin(owner, priority, reqs)
	if err != nil || c == nil {
		return err
	}
	if fn, _ := ctx.Value(waitHookKey{}).(func()); fn != nil {
		fn()
	}
	return m.wait(ctx, c, deadline)
}

type waitHookKey struct{}

// WithWaitHook returns a context with which Acquire calls fn before it
// waits for a lock it cannot have at once (and not when every lock is
// granted without waiting).
func WithWaitHook(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, waitHookKey{}, fn)
}

// begin validates reqs and runs the call as far as it goes without
// waiting. It returns nil if the call finished (or had nothing to do) and
// the call otherwise, queued on its next lock.
func (m *Manager) begin(id int64, priority int, reqs []Request) (*call, error) {
	c := &call{prio: priority}
	steps, err := normalize(reqs, c.stepBuf[:0])
	if err != nil || len(steps) == 0 {
		return nil, err
	}
	c.steps = steps
	c.taken = c.takenBuf[:0]
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owners[id]
	if o == nil {
		o = m.newOwner(id)
	} else if o.call != nil {
		return nil, ErrBusy
	}
	m.seq++
	c.owner, c.seq, c.prevWhole = o, m.seq, o.whole
	m.advance(c)
	if c.state == callDone {
		m.gcOwner(o)
		m.checked()
		return nil, nil
	}
	m.checked()
	c.done = make(chan struct{})
	return c, nil
}

// wait waits for a queued call to finish, and abandons it on deadline or
// cancellation.
func (m *Manager) wait(ctx context.Context, c *call, deadline time.Time) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	var cause error
	select {
	case <-c.done:
		// Closed after the state was set, under the lock: no need to take it.
		if c.state == callDone {
			return nil
		}
		return ErrReleased
	case <-expired:
		cause = ErrTimeout
	case <-ctx.Done():
		cause = ctx.Err()
	}
	switch m.giveUp(c) {
	case callDone:
		return nil
	case callFailed:
		return ErrReleased
	}
	return cause
}

// giveUp abandons c if it is still waiting, and returns the state it was
// in: callRunning if it was abandoned now.
func (m *Manager) giveUp(c *call) callState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state != callRunning {
		return c.state
	}
	m.abandon(c)
	m.settle()
	m.gcOwner(c.owner)
	m.checked()
	return callRunning
}

// Release gives back the locks of reqs that owner holds; it ignores the
// ones it does not hold and the modes of reqs. A whole-level request
// releases everything the owner holds at that level. The level's set lock
// is released when the owner keeps nothing at the level, and weakened to
// what the remaining members need otherwise. If the owner has an Acquire
// waiting, that call is abandoned first (it returns ErrReleased).
func (m *Manager) Release(owner int64, reqs []Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owners[owner]
	if o == nil {
		return
	}
	if o.call != nil {
		m.abandon(o.call)
	}
	var touched [numLevels]bool
	for _, r := range reqs {
		if !r.Level.valid() {
			continue
		}
		touched[r.Level] = true
		if len(r.Names) == 0 {
			o.whole[r.Level] = gNone
			for lk := range o.held {
				if lk.level == r.Level && lk.name != "" {
					m.setHolding(o, lk, gNone)
				}
			}
			continue
		}
		for _, n := range r.Names {
			if lk := m.members[r.Level][n]; lk != nil && lk.holders[o] != gNone {
				m.setHolding(o, lk, gNone)
			}
		}
	}
	for l, t := range touched {
		if !t {
			continue
		}
		set := m.sets[l]
		if cur := set.holders[o]; cur != gNone {
			if want := o.setMode(Level(l)); want != cur {
				m.setHolding(o, set, want)
			}
		}
	}
	m.settle()
	m.gcOwner(o)
	m.checked()
}

// ReleaseAll gives back every lock owner holds, after abandoning its
// waiting Acquire, if any (which returns ErrReleased).
func (m *Manager) ReleaseAll(owner int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owners[owner]
	if o == nil {
		return
	}
	if o.call != nil {
		m.abandon(o.call)
	}
	for lk := range o.held {
		m.setHolding(o, lk, gNone)
	}
	o.whole = [numLevels]gmode{}
	m.settle()
	m.gcOwner(o)
	m.checked()
}

// SetPriority changes the priority of owner's waiting Acquire, if any, and
// moves its place in the queue it waits in; the rest of that call's waits
// use the new priority too. A later Acquire passes its own priority.
func (m *Manager) SetPriority(owner int64, priority int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owners[owner]
	if o == nil || o.call == nil {
		return
	}
	c := o.call
	c.prio = priority
	if w := c.waiting; w != nil {
		lk := w.lk
		lk.queue = slices.DeleteFunc(lk.queue, func(x *waiter) bool { return x == w })
		lk.enqueue(w)
		m.markDirty(lk)
		m.settle()
		m.checked()
	}
}

// setMode is the mode the owner's holdings at level need on its set lock.
func (o *owner) setMode(l Level) gmode {
	var intent gmode
	switch {
	case o.nX[l] > 0:
		intent = gIX
	case o.nMem[l] > 0:
		intent = gIS
	}
	return lub(o.whole[l], intent)
}

// advance takes c's steps in order until one has to wait (then c is
// queued there) or none is left (then c is done). It decides at once
// whether a lock can be taken, which is right only when every queue is
// settled: at the start of an Acquire.
func (m *Manager) advance(c *call) {
	o := c.owner
	for ; c.next < len(c.steps); c.next++ {
		st := &c.steps[c.next]
		lk := m.lockFor(st.level, st.name)
		cur := lk.holders[o]
		if want := lub(cur, st.mode); want != cur {
			w := waiter{c: c, lk: lk, mode: want, conv: cur != gNone}
			if !lk.grantable(&w) {
				m.queue(c, w)
				return
			}
			c.taken = append(c.taken, taken{lk: lk, prev: cur})
			m.setHolding(o, lk, want)
		}
		m.stepDone(c)
	}
	m.finish(c)
}

// proceed moves a call that was just granted a lock on to its next lock,
// where it queues; the lock is marked for settling, which grants it in
// queue order together with every other call that reaches it.
func (m *Manager) proceed(c *call) {
	o := c.owner
	for ; c.next < len(c.steps); c.next++ {
		st := &c.steps[c.next]
		lk := m.lockFor(st.level, st.name)
		cur := lk.holders[o]
		if want := lub(cur, st.mode); want != cur {
			m.queue(c, waiter{c: c, lk: lk, mode: want, conv: cur != gNone})
			m.markDirty(lk)
			return
		}
		m.stepDone(c)
	}
	m.finish(c)
}

// stepDone records that the step c.next is held.
func (m *Manager) stepDone(c *call) {
	if st := &c.steps[c.next]; st.whole {
		c.owner.whole[st.level] = lub(c.owner.whole[st.level], st.mode)
	}
}

func (m *Manager) queue(c *call, w waiter) {
	wp := new(waiter)
	*wp = w
	w.lk.enqueue(wp)
	c.waiting = wp
	c.owner.call = c
}

func (m *Manager) finish(c *call) {
	c.state = callDone
	if c.owner.call == c {
		c.owner.call = nil
	}
	if c.done != nil {
		close(c.done)
	}
}

// abandon undoes what c took, in reverse order, and takes it out of its
// queue. The caller settles.
func (m *Manager) abandon(c *call) {
	o := c.owner
	if w := c.waiting; w != nil {
		lk := w.lk
		lk.queue = slices.DeleteFunc(lk.queue, func(x *waiter) bool { return x == w })
		c.waiting = nil
		m.markDirty(lk)
	}
	for i := len(c.taken) - 1; i >= 0; i-- {
		t := c.taken[i]
		m.setHolding(o, t.lk, t.prev)
	}
	o.whole = c.prevWhole
	c.state = callFailed
	o.call = nil
	if c.done != nil {
		close(c.done)
	}
}

// lockFor returns the set lock of level (name "") or the named member,
// creating the member if it is not in use.
func (m *Manager) lockFor(level Level, name string) *lock {
	if name == "" {
		return m.sets[level]
	}
	lk := m.members[level][name]
	if lk == nil {
		if n := len(m.freeLocks); n > 0 {
			lk = m.freeLocks[n-1]
			m.freeLocks = m.freeLocks[:n-1]
		} else {
			lk = &lock{holders: map[*owner]gmode{}}
		}
		lk.level, lk.name = level, name
		m.members[level][name] = lk
	}
	return lk
}

func (m *Manager) newOwner(id int64) *owner {
	var o *owner
	if n := len(m.freeOwners); n > 0 {
		o = m.freeOwners[n-1]
		m.freeOwners = m.freeOwners[:n-1]
	} else {
		o = &owner{held: map[*lock]struct{}{}}
	}
	o.id = id
	m.owners[id] = o
	return o
}

// gcOwner forgets an owner that holds nothing and waits for nothing.
func (m *Manager) gcOwner(o *owner) {
	if len(o.held) != 0 || o.call != nil || m.owners[o.id] != o {
		return
	}
	delete(m.owners, o.id)
	if len(m.freeOwners) < maxFree {
		*o = owner{held: o.held}
		m.freeOwners = append(m.freeOwners, o)
	}
}

// gcLock forgets a member lock nobody holds or waits for.
func (m *Manager) gcLock(lk *lock) {
	if lk.name == "" || len(lk.holders) != 0 || len(lk.queue) != 0 || lk.dirty {
		return
	}
	delete(m.members[lk.level], lk.name)
	if len(m.freeLocks) < maxFree {
		lk.name = ""
		lk.queue = lk.queue[:0]
		m.freeLocks = append(m.freeLocks, lk)
	}
}

// setHolding sets o's mode on lk (gNone releases it), keeping the counts
// and the owner's bookkeeping. A weaker mode marks lk for settling.
func (m *Manager) setHolding(o *owner, lk *lock, mode gmode) {
	cur := lk.holders[o]
	if cur == mode {
		return
	}
	if cur != gNone {
		lk.count[cur]--
		if lk.name != "" {
			o.nMem[lk.level]--
			if cur == gX {
				o.nX[lk.level]--
			}
		}
	}
	if mode == gNone {
		delete(lk.holders, o)
		delete(o.held, lk)
	} else {
		lk.holders[o] = mode
		lk.count[mode]++
		if cur == gNone {
			o.held[lk] = struct{}{}
		}
		if lk.name != "" {
			o.nMem[lk.level]++
			if mode == gX {
				o.nX[lk.level]++
			}
		}
	}
	if cur != gNone && lub(cur, mode) != mode {
		m.markDirty(lk) // weaker: someone may now be granted, or lk be unused
	}
}

func (m *Manager) markDirty(lk *lock) {
	if lk.dirty {
		return
	}
	lk.dirty = true
	if !m.settling {
		m.dirty = append(m.dirty, lk)
		return
	}
	// While settling, keep the part still to visit in order. (What is
	// marked now comes after the lock being visited.)
	i, _ := slices.BinarySearchFunc(m.dirty[m.visit+1:], lk, cmpLocks)
	m.dirty = slices.Insert(m.dirty, m.visit+1+i, lk)
}

func cmpLocks(a, b *lock) int {
	switch {
	case before(a.level, a.name, b.level, b.name):
		return -1
	case before(b.level, b.name, a.level, a.name):
		return 1
	}
	return 0
}

// settle grants what the changes of this operation allow. Dirty locks are
// visited in the global order; a call granted a lock queues at once on its
// next lock, which comes later in that order, so when a lock is visited
// every call that can reach it in this operation is in its queue, and the
// lock goes to them in queue order.
func (m *Manager) settle() {
	slices.SortFunc(m.dirty, cmpLocks)
	m.settling = true
	for m.visit = 0; m.visit < len(m.dirty); m.visit++ {
		lk := m.dirty[m.visit]
		lk.dirty = false
		m.dispatch(lk)
		m.gcLock(lk)
	}
	m.settling = false
	clear(m.dirty)
	m.dirty = m.dirty[:0]
}

// checked runs the test hook at the end of an operation.
func (m *Manager) checked() {
	if m.checkHook != nil {
		m.checkHook()
	}
}

// dispatch grants, in queue order, every waiter of lk that is compatible
// with lk's holders and with every earlier waiter still waiting.
func (m *Manager) dispatch(lk *lock) {
	var blocked uint8 // modes of earlier waiters left waiting
	var granted []*call
	kept := lk.queue[:0]
	for _, w := range lk.queue {
		if blocked&^compatible[w.mode] == 0 && lk.compatHolders(w) {
			o := w.c.owner
			w.c.taken = append(w.c.taken, taken{lk: lk, prev: lk.holders[o]})
			m.setHolding(o, lk, w.mode)
			w.c.waiting = nil
			granted = append(granted, w.c)
			continue
		}
		blocked |= 1 << w.mode
		kept = append(kept, w)
	}
	clear(lk.queue[len(kept):])
	lk.queue = kept
	for _, c := range granted {
		m.stepDone(c)
		c.next++
		m.proceed(c)
	}
}

// compatHolders reports whether w's mode is compatible with every holder
// of lk other than w's owner.
func (lk *lock) compatHolders(w *waiter) bool {
	own := lk.holders[w.c.owner]
	for g := gIS; g < numGModes; g++ {
		n := lk.count[g]
		if g == own {
			n--
		}
		if n > 0 && !compat(w.mode, g) {
			return false
		}
	}
	return true
}

// grantable reports whether a call arriving at lk with w may take it now:
// compatible with the holders and with every waiter that would be ahead
// of it. (Waiters already queued are all blocked between operations.)
func (lk *lock) grantable(w *waiter) bool {
	if !lk.compatHolders(w) {
		return false
	}
	for _, q := range lk.queue {
		if !ahead(q, w) {
			break
		}
		if !compat(w.mode, q.mode) {
			return false
		}
	}
	return true
}

// ahead reports whether a is served before b: conversions first, then by
// priority (lower first), then by arrival of the Acquire call.
func ahead(a, b *waiter) bool {
	if a.conv != b.conv {
		return a.conv
	}
	if a.c.prio != b.c.prio {
		return a.c.prio < b.c.prio
	}
	return a.c.seq < b.c.seq
}

func (lk *lock) enqueue(w *waiter) {
	i, _ := slices.BinarySearchFunc(lk.queue, w, func(q, w *waiter) int {
		if ahead(q, w) {
			return -1
		}
		return 1
	})
	lk.queue = slices.Insert(lk.queue, i, w)
}
