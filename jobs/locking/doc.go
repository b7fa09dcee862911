// Package locking is the leader's in-memory lock manager: the locks a job's
// opcodes take on the cluster, its instances, node groups, nodes, node
// resources and networks, as Ganeti's lock levels, so that jobs touching
// different objects run in parallel and conflicting ones run one after
// the other. It owns no replicated state: a new leader rebuilds it by
// having the executor acquire again for the jobs it resumes. It also
// provides Ganeti's LockAttemptTimeoutStrategy (Strategy); raising a job's
// priority when the strategy is exhausted is the executor's job.
//
// # Model
//
// Owners are job ids. A Request names, per level, members ("instance"
// "inst1") or the whole level (Ganeti's ALL_SET). Locks need not be
// declared: a member exists while someone holds or waits for it.
//
// Each level has a set lock (wire name "instance/[lockset]") besides its
// members, and locks are multi-granularity: a request for members holds
// the set lock in an intention mode (IS for shared members, IX for
// exclusive ones) and then each member S or X; a whole-level request holds
// just the set lock, S or X. Set lock modes are compatible as IS–{IS,IX,S},
// IX–{IS,IX}, S–{IS,S}, X–none, members as S–S. So a whole level held
// exclusive excludes every member, a whole level held shared excludes
// exclusive members, and members of different names never conflict.
//
// Acquire takes the locks of one call one at a time in a global order:
// by level, the set lock before the members, members by name (byte
// order). Every caller that holds only locks from its current call waits
// only for locks later than all it holds, so waits cannot form a cycle:
// no deadlock, whatever the order in which requests were submitted or
// their names listed. All locks of one call share one timeout; when it
// passes, or the context ends, the call gives back everything it took
// and returns, so even a caller that holds locks from an earlier call
// cannot keep a deadlock going beyond its timeout. The executor therefore
// takes all of one opcode's locks in a single Acquire and gives them back
// before the next opcode's Acquire. Owners that keep locks from an earlier
// call and ask, without a timeout, for a lock earlier in the order than
// one they hold, or convert a shared lock that another such owner also
// converts, can deadlock, as with any lock manager.
//
// # Who gets a lock
//
// Each lock has one queue. It is served in this order: conversions (an
// owner that holds the lock and asks for a stronger mode) first, then by
// priority (lower is more urgent; Ganeti's −20…19), then by the time the
// Acquire call started. A waiter is granted as soon as its mode is
// compatible with every other owner's hold and with the mode of every
// waiter ahead of it that is still waiting. So no waiter overtakes an
// earlier one it conflicts with (a shared request does not slip past a
// waiting exclusive one, members do not slip past a waiting whole-level
// request), which bounds every wait within one priority, while compatible
// waiters (shared ones, members of different names) are granted together.
// A waiting Acquire's priority can be changed with SetPriority (Ganeti's
// job priority change).
//
// An owner that holds a lock in the mode asked, or a stronger one, is not
// asked again. An owner that holds a lock shared and asks for it
// exclusive converts it when it is the only holder, and otherwise waits
// like any request, at the head of the queue. An owner holding a level's
// set lock in S and asking for an exclusive member needs X on the set
// lock (there is no SIX mode). Release and ReleaseAll weaken or free a set
// lock as the owner's remaining holdings at that level allow.
//
// # Goroutines
//
// None: the manager is one mutex around plain data. A call that cannot
// take a lock at once queues and waits on a channel (and a timer, if it
// has a timeout); whoever frees the lock grants it on the waiter's behalf
// and moves the call on, so when any method returns the state is settled.
package locking
