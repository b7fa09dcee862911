package locking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// recorder keeps, apart from the manager, what each owner was told it
// holds, and reports two owners holding conflicting locks. An owner
// records its holdings after Acquire returns and drops them before it
// releases, so the recorder never shows more than is really held.
type recorder struct {
	mu    sync.Mutex
	holds map[int64][]LockInfo
}

func (r *recorder) set(owner int64, held []LockInfo) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(held) == 0 {
		delete(r.holds, owner)
		return nil
	}
	for other, oh := range r.holds {
		if other == owner {
			continue
		}
		if err := conflict(held, oh); err != nil {
			return fmt.Errorf("owners %d and %d: %v", owner, other, err)
		}
	}
	r.holds[owner] = held
	return nil
}

// conflict applies the package's rules to two owners' holdings, member
// against member, whole level against member, and set lock against set
// lock by the matrix.
func conflict(a, b []LockInfo) error {
	parse := func(h []LockInfo) map[Level]map[string]string {
		out := map[Level]map[string]string{}
		for _, li := range h {
			var ls, name string
			for i := range li.Name {
				if li.Name[i] == '/' {
					ls, name = li.Name[:i], li.Name[i+1:]
					break
				}
			}
			l, err := ParseLevel(ls)
			if err != nil {
				panic(err)
			}
			if out[l] == nil {
				out[l] = map[string]string{}
			}
			out[l][name] = li.OwnerModes[0]
		}
		return out
	}
	gm := map[string]gmode{"IS": gIS, "IX": gIX, "S": gS, "X": gX}
	pa, pb := parse(a), parse(b)
	for l, ma := range pa {
		mb := pb[l]
		if mb == nil {
			continue
		}
		sa, sb := ma[setName], mb[setName]
		if sa != "" && sb != "" && !compat(gm[sa], gm[sb]) {
			return fmt.Errorf("%s held %s and %s", wireName(l, ""), sa, sb)
		}
		for name, x := range ma {
			if name == setName {
				continue
			}
			if y, ok := mb[name]; ok && (x == "X" || y == "X") {
				return fmt.Errorf("%s held %s and %s", wireName(l, name), x, y)
			}
			if sb == "X" || (sb == "S" && x == "X") {
				return fmt.Errorf("%s held %s while the other holds the level %s", wireName(l, name), x, sb)
			}
		}
		for name, y := range mb {
			if name != setName && (sa == "X" || (sa == "S" && y == "X")) {
				return fmt.Errorf("%s held %s while the other holds the level %s", wireName(l, name), y, sa)
			}
		}
	}
	return nil
}

// covers reports whether held includes every lock of reqs in at least the
// mode asked.
func covers(held []LockInfo, reqs []Request) error {
	modes := map[string]string{}
	for _, li := range held {
		modes[li.Name] = li.OwnerModes[0]
	}
	for _, r := range reqs {
		if len(r.Names) == 0 {
			got := modes[wireName(r.Level, "")]
			if got != "X" && (r.Mode == Exclusive || got != "S") {
				return fmt.Errorf("%s held %q, want whole level %v", wireName(r.Level, ""), got, r.Mode)
			}
			continue
		}
		set := modes[wireName(r.Level, "")]
		if set == "X" || (set == "S" && r.Mode == Shared) {
			continue // the whole level, asked in the same call or before
		}
		if set == "" {
			return fmt.Errorf("%s not held", wireName(r.Level, ""))
		}
		for _, n := range r.Names {
			got := modes[wireName(r.Level, n)]
			if got == "" || (r.Mode == Exclusive && got != "X") {
				return fmt.Errorf("%s held %q, want %v", wireName(r.Level, n), got, r.Mode)
			}
		}
	}
	return nil
}

func equalHeld(a, b []LockInfo) bool {
	return formatInfos(a) == formatInfos(b)
}

// TestRandomisedConcurrent has owners acquire (blocking, with timeouts,
// with contexts that end, adding to what they hold), release in part or
// in whole and change each other's priorities, all at random. The
// manager's invariants are checked under its lock after every operation,
// and the recorder checks, outside it, that no two owners were ever told
// they hold conflicting locks. Every Acquire must either hold all it
// asked or leave the owner's holdings as they were.
func TestRandomisedConcurrent(t *testing.T) {
	m := newTestManager(t)
	rec := &recorder{holds: map[int64][]LockInfo{}}
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	const owners, rounds = 12, 150
	var wg sync.WaitGroup
	for o := range int64(owners) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer m.ReleaseAll(o)
			rng := rand.New(rand.NewPCG(uint64(o), 42))
			for range rounds {
				if ctx.Err() != nil {
					t.Error("test context ended: deadlock?")
					return
				}
				switch op := rng.IntN(10); {
				case op < 6:
					reqs := randomRequests(rng)
					before := m.Held(o)
					// Without a timeout only when holding nothing: an
					// owner adding to its holdings could deadlock.
					var timeout time.Duration
					if len(before) > 0 || rng.IntN(3) > 0 {
						timeout = time.Duration(rng.IntN(3000)) * time.Microsecond
					}
					actx, acancel := ctx, context.CancelFunc(func() {})
					if rng.IntN(5) == 0 {
						actx, acancel = context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
					}
					err := m.Acquire(actx, o, rng.IntN(41)-20, reqs, timeout)
					acancel()
					after := m.Held(o)
					switch {
					case err == nil:
						if err := covers(after, reqs); err != nil {
							t.Errorf("owner %d after Acquire(%v): %v", o, reqs, err)
						}
					case errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
						if !equalHeld(before, after) {
							t.Errorf("owner %d after a failed Acquire(%v) holds\n%s\nhad\n%s", o, reqs, formatInfos(after), formatInfos(before))
						}
					default:
						t.Errorf("owner %d: Acquire: %v", o, err)
					}
					if err := rec.set(o, after); err != nil {
						t.Error(err)
					}
				case op < 8:
					reqs := randomRequests(rng)
					rec.set(o, nil)
					m.Release(o, reqs)
					if err := rec.set(o, m.Held(o)); err != nil {
						t.Error(err)
					}
				case op < 9:
					rec.set(o, nil)
					m.ReleaseAll(o)
				default:
					m.SetPriority(rng.Int64N(owners), rng.IntN(41)-20)
				}
			}
			rec.set(o, nil)
		}()
	}
	wg.Wait()
	checkEmpty(t, m)
}

// TestNoDeadlock: owners asking, without timeouts, for overlapping sets
// of locks listed in random orders all finish. A deadlock would show as
// Acquire returning the context's error when its deadline passes; the
// deadline bounds the test, it does not measure it.
func TestNoDeadlock(t *testing.T) {
	m := newTestManager(t)
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	instances := []string{"i1", "i2", "i3", "i4"}
	nodes := []string{"n1", "n2", "n3"}
	var wg sync.WaitGroup
	for o := range int64(16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(o), 7))
			for range 40 {
				var reqs []Request
				pick := func(pool []string) []string {
					p := append([]string(nil), pool...)
					rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
					return p[:1+rng.IntN(len(p))]
				}
				reqs = append(reqs, members(LevelInstance, Mode(rng.IntN(4)/3^1), pick(instances)...))
				reqs = append(reqs, members(LevelNode, Exclusive, pick(nodes)...))
				reqs = append(reqs, members(LevelNodeRes, Exclusive, pick(nodes)...))
				if rng.IntN(8) == 0 {
					reqs = append(reqs, whole(Level(1+rng.IntN(4)), Mode(rng.IntN(2))))
				}
				if rng.IntN(2) == 0 {
					reqs = append(reqs, members(LevelCluster, Shared, BGL))
				}
				rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
				if err := m.Acquire(ctx, o, rng.IntN(3), reqs, 0); err != nil {
					t.Errorf("owner %d: %v (deadlock?)\n%s", o, err, formatInfos(m.Snapshot()))
					return
				}
				time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				m.ReleaseAll(o)
			}
		}()
	}
	wg.Wait()
	checkEmpty(t, m)
}
