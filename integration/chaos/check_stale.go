package chaos

import (
	"fmt"
	"slices"
	"sort"
)

// Stale reads are only ever seen where the API says a read is stale.
//
// Every API read says which state it shows: X-Gnt-Index, the Raft index
// its replica had applied. Writes say the index they were applied at, and
// every tag is unique, so the exact content of the state at index I is
// known for every acknowledged write: a read at I must show each tag added
// at or before I and not removed at or before I, and nothing added after
// I, removed at or before I, refused, or never written. Indeterminate
// writes may or may not show. That holds for default reads (stale by
// design, and honest about it) and consistent ones alike; a consistent
// read must moreover show a state at least as new as every write
// acknowledged before it began. A replica's index never goes back while
// its process lives.
//
// confd answers carry the configuration serial instead: two answers with
// one serial must agree, and one process's serials never go back.

// CheckStale returns the reads that show something other than what they
// say.
func CheckStale(ops []*Op, initial State) []string {
	ops = slices.Clone(ops)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	var out []string
	out = append(out, checkTagIndexes(ops, initial)...)
	out = append(out, checkDrainIndexes(ops, initial)...)
	out = append(out, checkConsistentRecency(ops)...)
	out = append(out, checkMonotonic(ops)...)
	out = append(out, checkConfd(ops)...)
	return out
}

// indexedRead reports whether o is an API read that says its index.
func indexedRead(o *Op) bool {
	return o.Outcome == OK && o.Index > 0 && (o.Mode == ModeDefault || o.Mode == ModeConsistent)
}

func checkTagIndexes(ops []*Op, initial State) []string {
	type tagWrites struct {
		added, removed    map[string]uint64 // acknowledged, at index (0: before the run)
		failed            map[string]bool   // addition refused
		maybeAdd, maybeRm map[string]bool   // indeterminate
	}
	objs := map[string]*tagWrites{}
	get := func(obj string) *tagWrites {
		w := objs[obj]
		if w == nil {
			w = &tagWrites{added: map[string]uint64{}, removed: map[string]uint64{}, failed: map[string]bool{},
				maybeAdd: map[string]bool{}, maybeRm: map[string]bool{}}
			for _, t := range initial.Tags[obj] {
				w.added[t] = 0
			}
			objs[obj] = w
		}
		return w
	}
	for _, o := range ops {
		if o.Kind != TagAdd && o.Kind != TagDel {
			continue
		}
		w := get(o.Object)
		switch {
		case o.Kind == TagAdd && o.Outcome == OK:
			w.added[o.Value] = o.Index
		case o.Kind == TagAdd && o.Outcome == Failed:
			w.failed[o.Value] = true
		case o.Kind == TagAdd:
			w.maybeAdd[o.Value] = true
		case o.Outcome == OK:
			w.removed[o.Value] = o.Index
		case o.Outcome == Indeterminate:
			w.maybeRm[o.Value] = true
		}
	}
	var out []string
	for _, o := range ops {
		if o.Kind != TagRead || !indexedRead(o) {
			continue
		}
		w, idx := get(o.Object), o.Index
		shown := map[string]bool{}
		for _, t := range o.Values {
			shown[t] = true
			a, acked := w.added[t]
			r, removed := w.removed[t]
			switch {
			case w.failed[t]:
				out = append(out, fmt.Sprintf("read shows tag %q whose addition was refused: %s", t, o.Describe()))
			case acked && a > idx:
				out = append(out, fmt.Sprintf("read at index %d shows tag %q added at index %d: %s", idx, t, a, o.Describe()))
			case removed && r <= idx:
				out = append(out, fmt.Sprintf("read at index %d shows tag %q removed at index %d: %s", idx, t, r, o.Describe()))
			case !acked && !w.maybeAdd[t]:
				out = append(out, fmt.Sprintf("read shows tag %q that was never written: %s", t, o.Describe()))
			}
		}
		for t, a := range w.added {
			if a > idx || shown[t] || w.maybeRm[t] {
				continue
			}
			if r, removed := w.removed[t]; removed && r <= idx {
				continue
			}
			out = append(out, fmt.Sprintf("read at index %d misses tag %q added at index %d: %s", idx, t, a, o.Describe()))
		}
	}
	return out
}

func checkDrainIndexes(ops []*Op, initial State) []string {
	acked := map[string][]*Op{}
	maybe := map[string][]*Op{}
	for _, o := range ops {
		if o.Kind != DrainSet {
			continue
		}
		switch o.Outcome {
		case OK:
			acked[o.Object] = append(acked[o.Object], o)
		case Indeterminate:
			maybe[o.Object] = append(maybe[o.Object], o)
		}
	}
	var out []string
	for _, o := range ops {
		if o.Kind != DrainRead || !indexedRead(o) {
			continue
		}
		// The value of the last acknowledged write at or before the read's
		// index (all of them if several share that index), or the initial
		// one; or that of an indeterminate write begun before the read
		// ended.
		allowed := map[string]bool{}
		var best uint64
		found := false
		for _, w := range acked[o.Object] {
			if w.Index > o.Index {
				continue
			}
			if !found || w.Index > best {
				best, found = w.Index, true
				clear(allowed)
			}
			if w.Index == best {
				allowed[w.Value] = true
			}
		}
		if !found {
			allowed[fmt.Sprint(initial.Drained[nodeName(o.Object)])] = true
		}
		for _, w := range maybe[o.Object] {
			if w.Call < o.Return {
				allowed[w.Value] = true
			}
		}
		if !allowed[o.Value] {
			out = append(out, fmt.Sprintf("read at index %d shows drained=%s; the state at that index has %v: %s", o.Index, o.Value, sortedKeys(allowed), o.Describe()))
		}
	}
	return out
}

// checkConsistentRecency: a consistent read shows a state at least as new
// as every write acknowledged before it began.
func checkConsistentRecency(ops []*Op) []string {
	var writes []*Op
	for _, o := range ops {
		if o.IsWrite() && o.Outcome == OK && o.Index > 0 {
			writes = append(writes, o)
		}
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].Return < writes[j].Return })
	prefixMax := make([]*Op, len(writes))
	var best *Op
	for i, w := range writes {
		if best == nil || w.Index > best.Index {
			best = w
		}
		prefixMax[i] = best
	}
	var out []string
	for _, o := range ops {
		if !indexedRead(o) || o.Mode != ModeConsistent {
			continue
		}
		n := sort.Search(len(writes), func(i int) bool { return writes[i].Return >= o.Call })
		if n == 0 {
			continue
		}
		if w := prefixMax[n-1]; w.Index > o.Index {
			out = append(out, fmt.Sprintf("stale consistent read: index %d, but %s was acknowledged before it began: %s", o.Index, w.Describe(), o.Describe()))
		}
	}
	return out
}

// checkMonotonic: one process's default reads and confd serials never go
// back: a read that began after another one (of the same process)
// returned shows a state at least as new.
func checkMonotonic(ops []*Op) []string {
	type key struct {
		server, mode string
		pid          int
	}
	groups := map[key][]*Op{}
	for _, o := range ops {
		if o.Outcome != OK || o.PID == 0 || (o.Mode != ModeDefault && o.Mode != ModeConfd) {
			continue
		}
		if o.Mode == ModeDefault && o.Index == 0 {
			continue
		}
		k := key{o.Server, o.Mode, o.PID}
		groups[k] = append(groups[k], o)
	}
	version := func(o *Op) int64 {
		if o.Mode == ModeConfd {
			return o.Serial
		}
		return int64(o.Index)
	}
	var out []string
	for _, byCall := range groups {
		sort.SliceStable(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
		byRet := slices.Clone(byCall)
		sort.SliceStable(byRet, func(i, j int) bool { return byRet[i].Return < byRet[j].Return })
		var newest *Op // of those returned so far
		j := 0
		for _, o := range byCall {
			for ; j < len(byRet) && byRet[j].Return < o.Call; j++ {
				if newest == nil || version(byRet[j]) > version(newest) {
					newest = byRet[j]
				}
			}
			if newest != nil && version(o) < version(newest) {
				what := "index"
				if o.Mode == ModeConfd {
					what = "serial"
				}
				out = append(out, fmt.Sprintf("%s went back from %s %d to %d: %s after %s", o.Server, what, version(newest), version(o), o.Describe(), newest.Describe()))
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkConfd: confd answers of one serial agree.
func checkConfd(ops []*Op) []string {
	type key struct {
		object string
		serial int64
	}
	seen := map[key]*Op{}
	var out []string
	for _, o := range ops {
		if o.Mode != ModeConfd || o.Outcome != OK {
			continue
		}
		k := key{o.Object, o.Serial}
		if p := seen[k]; p != nil && p.Value != o.Value {
			out = append(out, fmt.Sprintf("confd answers of serial %d disagree: %s and %s", o.Serial, p.Describe(), o.Describe()))
			continue
		}
		seen[k] = o
	}
	return out
}
