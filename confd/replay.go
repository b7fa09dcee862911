package confd

import (
	"crypto/sha1"
	"sync"
)

// replayCache remembers the MACs of recent requests so that an exact
// replay inside the clock window is refused; Ganeti's daemon answers
// replays, which lets anyone who sees a request make every candidate
// answer it again for five minutes.
//
// It is bounded: at most capacity MACs, in shards by the MAC's first byte
// (the MAC is uniformly distributed), each bucketed by request timestamp.
// When a shard is full, buckets whose timestamps left the window go first;
// if that is not enough, the bucket with the oldest timestamp is dropped
// and the shard's floor rises to that timestamp: from then on the shard
// refuses every request stamped at or before the floor, because it can no
// longer tell whether such a request is a replay. So a flood narrows the
// window instead of letting replays through; the floor never passes the
// oldest timestamp still remembered, so requests stamped in the current
// second keep being answered as long as one second's requests fit.
type replayCache struct {
	shards   [replayShards]replayShard
	perShard int
}

const replayShards = 16

type replayShard struct {
	mu    sync.Mutex
	seen  map[[sha1.Size]byte]int64
	byTS  map[int64][][sha1.Size]byte
	floor int64
}

func newReplayCache(capacity int) *replayCache {
	c := &replayCache{perShard: max(capacity/replayShards, 1)}
	for i := range c.shards {
		c.shards[i].seen = map[[sha1.Size]byte]int64{}
		c.shards[i].byTS = map[int64][][sha1.Size]byte{}
		c.shards[i].floor = -1 << 62
	}
	return c
}

// admit records mac for a request stamped ts (seconds), the server's
// clock being now, and reports whether the request may be answered: its
// MAC was not seen, and it is newer than the shard's floor.
func (c *replayCache) admit(mac [sha1.Size]byte, ts, now int64) bool {
	sh := &c.shards[mac[0]%replayShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ts <= sh.floor {
		return false
	}
	if _, dup := sh.seen[mac]; dup {
		return false
	}
	if len(sh.seen) >= c.perShard {
		sh.evict(now, c.perShard)
		if ts <= sh.floor {
			return false
		}
	}
	sh.seen[mac] = ts
	sh.byTS[ts] = append(sh.byTS[ts], mac)
	return true
}

// evict makes room: first every bucket outside the window, then the
// oldest buckets, raising the floor, until the shard is below capacity.
func (sh *replayShard) evict(now int64, capacity int) {
	skew := int64(MaxClockSkew.Seconds())
	for ts, macs := range sh.byTS {
		if ts < now-skew {
			sh.drop(ts, macs)
		}
	}
	for len(sh.seen) >= capacity {
		oldest, first := int64(0), true
		for ts := range sh.byTS {
			if first || ts < oldest {
				oldest, first = ts, false
			}
		}
		if first {
			return
		}
		sh.drop(oldest, sh.byTS[oldest])
		sh.floor = max(sh.floor, oldest)
	}
}

func (sh *replayShard) drop(ts int64, macs [][sha1.Size]byte) {
	for _, m := range macs {
		delete(sh.seen, m)
	}
	delete(sh.byTS, ts)
}

// len is the number of MACs remembered.
func (c *replayCache) len() int {
	n := 0
	for i := range c.shards {
		c.shards[i].mu.Lock()
		n += len(c.shards[i].seen)
		c.shards[i].mu.Unlock()
	}
	return n
}
