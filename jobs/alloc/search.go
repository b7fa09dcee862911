package alloc

// choice is one placement the search found: rows and the growth of the
// group's Σ contrib it causes.
type choice struct {
	pri, sec int32 // sec is -1 without a secondary
	g        int32
	delta    float64
}

// scope is where a search may look.
type scope struct {
	groups  []int32 // in order of preference: by policy rank, then name
	prims   []int32 // fixed primary candidates; nil: the group's members
	secs    []int32 // fixed secondary candidates; nil: the group's members
	skip    []bool  // rows never to choose; nil when none
	pinned  bool    // the nodes were given by the caller
	grouped bool    // the group was given by the caller
}

func (t *table) usable(k int32, skip []bool) bool {
	return t.rows[k].bad == "" && (skip == nil || !skip[k])
}

// fitsPrim: the node has the memory, disk and vcpus and keeps its N+1
// reserve after giving the memory.
func (t *table) fitsPrim(k int32, nd need) bool {
	r := &t.rows[k]
	return r.freeDisk() >= nd.disk && r.freeCPU() >= nd.cpu && r.freeMem()-nd.mem >= r.rMem
}

// secGeneric: the node has the disk and could back the memory of some
// primary (it passes N+1 now and has the instance's memory free).
func (t *table) secGeneric(k int32, nd need) bool {
	r := &t.rows[k]
	return r.freeDisk() >= nd.disk && r.freeMem() >= nd.mem && r.freeMem() >= r.rMem
}

// secFor: given secGeneric, the node passes N+1 as secondary of primary p.
// A node whose free memory covers its reserve and the instance passes
// whatever p (no peer exceeds rMem) without reading its peers.
func (t *table) secFor(k, p int32, nd need) bool {
	r := &t.rows[k]
	if r.freeMem()-nd.mem >= r.rMem {
		return true
	}
	return r.freeMem() >= t.peersOf(k).get(p)+nd.mem
}

func (t *table) deltaPrim(k int32, nd need) float64 {
	r := &t.rows[k]
	return grow(r.memUsed, nd.mem, r.memTotal) + grow(r.diskUsed, nd.disk, r.diskTotal) + grow(r.cpuUsed, nd.cpu, r.cpuCap)
}

func (t *table) deltaSec(k int32, nd need) float64 {
	r := &t.rows[k]
	return grow(r.diskUsed, nd.disk, r.diskTotal)
}

// search returns the best placement in the scope: the best of the first
// policy rank where any group has one, the lowest group score after
// placement winning within a rank, ties going to the earlier group.
func (t *table) search(nd need, sc *scope) (choice, bool) {
	var best choice
	var bestScore float64
	ok := false
	for _, g := range sc.groups {
		if ok && t.groups[g].rank > t.groups[best.g].rank {
			break
		}
		c, found := t.bestInGroup(g, nd, sc)
		if !found {
			continue
		}
		if s := t.groups[g].score(c.delta); !ok || s < bestScore {
			best, bestScore, ok = c, s, true
		}
	}
	return best, ok
}

// bestInGroup finds the placement with the smallest score growth in one
// group. Primaries are tried in name order and a later one replaces the
// best only when strictly better, so ties go to the first name.
func (t *table) bestInGroup(g int32, nd need, sc *scope) (best choice, ok bool) {
	prims := sc.prims
	if prims == nil {
		prims = t.groups[g].members
	}
	if !nd.drbd {
		for _, p := range prims {
			if !t.usable(p, sc.skip) || !t.fitsPrim(p, nd) {
				continue
			}
			if d := t.deltaPrim(p, nd); !ok || d < best.delta {
				best, ok = choice{pri: p, sec: -1, g: g, delta: d}, true
			}
		}
		return best, ok
	}
	secs := sc.secs
	if secs == nil {
		secs = t.groups[g].members
	}
	// The candidate buffers are the table's, reused: Capacity searches
	// thousands of times.
	ls := lazySorted{sorted: t.sorted[:0], heap: t.cands[:0]}
	defer func() { t.sorted, t.cands = ls.sorted[:0], ls.heap[:0] }()
	for _, s := range secs {
		if t.usable(s, sc.skip) && t.secGeneric(s, nd) {
			r := &t.rows[s]
			ls.heap = append(ls.heap, secCand{i: s, d: t.deltaSec(s, nd), universal: r.freeMem()-nd.mem >= r.rMem})
		}
	}
	if len(ls.heap) == 0 {
		return best, false
	}
	ls.init()
	first, _ := ls.at(0)
	for _, p := range prims {
		if !t.usable(p, sc.skip) || !t.fitsPrim(p, nd) {
			continue
		}
		dp := t.deltaPrim(p, nd)
		if ok && dp+first.d >= best.delta {
			continue
		}
		// Secondaries in order of their own growth: the first that can
		// back p is p's best; stop once none can beat the best so far.
		for k := 0; ; k++ {
			c, more := ls.at(k)
			if !more || ok && dp+c.d >= best.delta {
				break
			}
			if c.i == p {
				continue
			}
			if c.universal || t.secFor(c.i, p, nd) {
				best, ok = choice{pri: p, sec: c.i, g: g, delta: dp + c.d}, true
				break
			}
		}
	}
	return best, ok
}

// secCand is a possible secondary with its score growth; universal when
// it passes N+1 whatever the primary.
type secCand struct {
	i         int32
	d         float64
	universal bool
}

func candLess(a, b secCand) bool { return a.d < b.d || a.d == b.d && a.i < b.i }

// lazySorted yields candidates in ascending order, sorting only as far as
// it is read: a sorted prefix in front of a min-heap of the rest. Most
// primaries read one or two, so a search costs O(nodes), not a sort.
type lazySorted struct {
	sorted []secCand
	heap   []secCand
}

func (l *lazySorted) init() {
	for i := len(l.heap)/2 - 1; i >= 0; i-- {
		l.down(i)
	}
}

func (l *lazySorted) down(i int) {
	h := l.heap
	for {
		m := i
		if c := 2*i + 1; c < len(h) && candLess(h[c], h[m]) {
			m = c
		}
		if c := 2*i + 2; c < len(h) && candLess(h[c], h[m]) {
			m = c
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// at returns the k-th smallest candidate, if there are more than k.
func (l *lazySorted) at(k int) (secCand, bool) {
	for len(l.sorted) <= k {
		if len(l.heap) == 0 {
			return secCand{}, false
		}
		l.sorted = append(l.sorted, l.heap[0])
		last := len(l.heap) - 1
		l.heap[0] = l.heap[last]
		l.heap = l.heap[:last]
		l.down(0)
	}
	return l.sorted[k], true
}
