package rpc

import "sync"

// replayCache remembers the MACs of recently admitted node RPC requests,
// so that a captured request sent again within the clock window is
// refused. It is bounded: MACs are bucketed by their request's timestamp;
// when full, buckets that left the window go first, then the oldest
// buckets, and the floor rises to the newest timestamp dropped. A request
// stamped at or before the floor is refused, because the cache can no
// longer tell whether it is a replay: a flood narrows the window instead
// of letting replays through. (confd keeps the same kind of cache for its
// UDP requests.)
type replayCache struct {
	mu    sync.Mutex
	max   int
	seen  map[[32]byte]int64
	byTS  map[int64][][32]byte
	floor int64
}

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, seen: map[[32]byte]int64{}, byTS: map[int64][][32]byte{}, floor: -1 << 62}
}

// admit records a request's MAC, stamped ts (unix seconds) and received
// at now, and reports whether it may be served: newer than the floor and
// not seen before.
func (c *replayCache) admit(mac [32]byte, ts, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts <= c.floor {
		return false
	}
	if _, dup := c.seen[mac]; dup {
		return false
	}
	if len(c.seen) >= c.max {
		c.evict(now)
		if ts <= c.floor {
			return false
		}
	}
	c.seen[mac] = ts
	c.byTS[ts] = append(c.byTS[ts], mac)
	return true
}

func (c *replayCache) evict(now int64) {
	skew := int64(MaxClockSkew.Seconds())
	for ts, macs := range c.byTS {
		if ts < now-skew {
			c.drop(ts, macs)
		}
	}
	for len(c.seen) >= c.max && len(c.byTS) > 0 {
		oldest, first := int64(0), true
		for ts := range c.byTS {
			if first || ts < oldest {
				oldest, first = ts, false
			}
		}
		c.drop(oldest, c.byTS[oldest])
		c.floor = max(c.floor, oldest)
	}
}

func (c *replayCache) drop(ts int64, macs [][32]byte) {
	for _, m := range macs {
		delete(c.seen, m)
	}
	delete(c.byTS, ts)
}

func (c *replayCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}
