package server

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultMemoryLimit is gntd's soft memory limit (Config.MemoryLimit): a
// candidate of a cluster of 1,000 nodes and 20,000 instances keeps its
// state in well under this, and a transient burst (a bulk answer, a burst
// of writes) makes the collector work harder near it instead of leaving
// the process larger for good.
const DefaultMemoryLimit = "200MiB"

// gcPercent is gntd's GC target below the soft limit: gntd keeps little
// live heap and allocates much short-lived JSON, so a high target saves
// a good share of a busy leader's CPU; the soft limit bounds what it
// costs in memory.
const gcPercent = 400

// ParseSize parses a byte size: a number with an optional unit B, KiB,
// MiB, GiB, TiB (or K, M, G, T, powers of 1024 too). "0" is no limit.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size is empty")
	}
	if len(t) > 32 {
		return 0, fmt.Errorf("size %.32q...: more than 32 characters", t)
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q does not start with a number", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", s, err)
	}
	var mult int64
	switch strings.TrimSpace(t[i:]) {
	case "", "B":
		mult = 1
	case "K", "KiB":
		mult = 1 << 10
	case "M", "MiB":
		mult = 1 << 20
	case "G", "GiB":
		mult = 1 << 30
	case "T", "TiB":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unit %q is not B, KiB, MiB, GiB or TiB", s, strings.TrimSpace(t[i:]))
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is more than %d bytes", s, int64(math.MaxInt64))
	}
	return n * mult, nil
}

// Log is the gntd's logger.
func (s *Server) Log() hclog.Logger { return s.log }

// MemorySettings applies gntd's GC target and soft memory limit (limit
// in ParseSize's form; "0" or "": none) to the process, unless GOGC or
// GOMEMLIMIT in the environment set them, and says what is in force.
func MemorySettings(limit string) (string, error) {
	var parts []string
	if v := os.Getenv("GOGC"); v != "" {
		parts = append(parts, "GOGC="+v+" (environment)")
	} else {
		debug.SetGCPercent(gcPercent)
		parts = append(parts, fmt.Sprintf("GOGC=%d", gcPercent))
	}
	memTarget.Store(0)
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return strings.Join(append(parts, "memory limit "+v+" (GOMEMLIMIT)"), ", "), nil
	}
	n := int64(0)
	if strings.TrimSpace(limit) != "" {
		var err error
		if n, err = ParseSize(limit); err != nil {
			return "", fmt.Errorf("--memory-limit: %w", err)
		}
	}
	if n == 0 {
		debug.SetMemoryLimit(math.MaxInt64)
		return strings.Join(append(parts, "no memory limit"), ", "), nil
	}
	if n < 32<<20 {
		return "", fmt.Errorf("--memory-limit %s is less than 32MiB: gntd would spend its time collecting garbage", limit)
	}
	memTarget.Store(n)
	lim := adjustMemoryLimit()
	return strings.Join(append(parts, fmt.Sprintf("soft memory limit %s (Go's own memory: %dMiB, the limit less %dMiB of mapped files resident now)",
		limit, lim>>20, (n-lim)>>20)), ", "), nil
}

// memTarget is the resident-set target MemorySettings set (0: none, or
// GOMEMLIMIT's).
var memTarget atomic.Int64

// MemoryLimitInterval is how often KeepMemoryLimit derives Go's limit
// again.
const MemoryLimitInterval = 10 * time.Second

// KeepMemoryLimit keeps Go's soft memory limit derived from the target of
// --memory-limit until ctx ends (nothing without one). Go's limit bounds
// its own memory only; the resident set also holds the pages of the files
// gntd maps (its binary, the Raft log's bolt file), some 10 to 20 MiB
// once the log has been read. Go's limit is the target less those, so
// that the process, not just its heap, stays near the target.
func KeepMemoryLimit(ctx context.Context) {
	if memTarget.Load() == 0 {
		return
	}
	t := time.NewTicker(MemoryLimitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			adjustMemoryLimit()
		}
	}
}

// adjustMemoryLimit sets Go's limit from the target and the resident
// pages of mapped files, never below half the target, and returns it.
func adjustMemoryLimit() int64 {
	target := memTarget.Load()
	if target == 0 {
		return 0
	}
	lim := max(target-residentFileBytes(), target/2)
	debug.SetMemoryLimit(lim)
	return lim
}

// residentFileBytes is the process's resident memory that Go does not
// count: pages of mapped files and shared memory (RssFile and RssShmem of
// /proc/self/status; 0 where it cannot be read).
func residentFileBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "RssFile" && k != "RssShmem") {
			continue
		}
		if fs := strings.Fields(v); len(fs) == 2 && fs[1] == "kB" {
			if kb, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
				total += kb << 10
			}
		}
	}
	return total
}
