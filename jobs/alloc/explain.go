package alloc

import (
	"fmt"
	"sort"
	"strings"
)

// maxListed bounds the nodes one part of a message names.
const maxListed = 10

// shortage is a node that lacks something: what it has, and what it
// would need when that is not the request's amount.
type shortage struct {
	name       string
	have, need int64
	// unit is the storage unit of a disk shortage (row.unit).
	unit string
}

// explain says why search found nothing in the scope: per group, the
// resource short on which nodes, then the nodes that are no candidates.
func (t *table) explain(nd need, sc *scope) string {
	if len(t.rows) == 0 {
		return "the cluster has no nodes"
	}
	var parts []string
	for _, g := range sc.groups {
		msg := t.explainGroup(g, nd, sc)
		if len(sc.groups) > 1 {
			msg = "in group " + t.groups[g].name + ": " + msg
		}
		parts = append(parts, msg)
	}
	if !sc.pinned && !sc.grouped {
		var unalloc []string
		for i := range t.groups {
			if t.groups[i].rank == 2 && len(t.groups[i].members) > 0 {
				unalloc = append(unalloc, t.groups[i].name)
			}
		}
		if len(unalloc) > 0 {
			parts = append(parts, "node group "+listNames(unalloc)+isAre(len(unalloc))+" unallocable")
		}
	}
	if len(parts) == 0 {
		return "no node group takes instances"
	}
	return strings.Join(parts, "; ")
}

// notes collects the nodes that are no candidates, by reason.
type notes struct {
	t    *table
	skip []bool
	bad  map[string][]string
	seen map[int32]bool
	// noDRBD is the reasons of the nodes without DRBD, as they gave them.
	noDRBD []string
}

func (t *table) notes(skip []bool) *notes {
	return &notes{t: t, skip: skip, bad: map[string][]string{}, seen: map[int32]bool{}}
}

// note records row k if it is no candidate, and says whether it is not.
func (n *notes) note(k int32) bool {
	r := &n.t.rows[k]
	reason := r.bad
	if reason == "" && n.skip != nil && n.skip[k] {
		reason = badExcluded
	}
	if reason == "" {
		return false
	}
	if !n.seen[k] {
		n.seen[k] = true
		n.bad[reason] = append(n.bad[reason], r.name)
		if reason == badNoDRBD {
			n.noDRBD = append(n.noDRBD, r.noDRBD)
		}
	}
	return true
}

func (n *notes) parts() []string {
	var out []string
	for _, reason := range badOrder {
		names := n.bad[reason]
		switch {
		case len(names) == 0:
		case reason == badNoDRBD:
			out = append(out, listNames(names)+isAre(len(names))+" "+reason+" ("+listReasons(n.noDRBD)+")")
		default:
			out = append(out, listNames(names)+isAre(len(names))+" "+reason)
		}
	}
	return out
}

func (t *table) explainGroup(g int32, nd need, sc *scope) string {
	prims := sc.prims
	if prims == nil {
		prims = t.groups[g].members
	}
	nb := t.notes(sc.skip)
	var mem, disk, cpu, n1 []shortage
	var okPrim []int32
	usable := 0
	for _, k := range prims {
		if nb.note(k) {
			continue
		}
		usable++
		r := &t.rows[k]
		switch {
		case r.freeMem() < nd.mem:
			mem = append(mem, shortage{name: r.name, have: r.freeMem()})
		case r.freeDisk() < nd.disk:
			disk = append(disk, shortage{name: r.name, have: r.freeDisk(), unit: r.unit})
		case r.freeCPU() < nd.cpu:
			cpu = append(cpu, shortage{name: r.name, have: r.freeCPU()})
		case r.freeMem()-nd.mem < r.rMem:
			n1 = append(n1, shortage{name: r.name, have: r.freeMem(), need: r.rMem + nd.mem})
		default:
			okPrim = append(okPrim, k)
		}
	}
	all := func(n int) bool { return !sc.pinned && n == usable }
	var parts []string
	if len(okPrim) == 0 || !nd.drbd {
		if len(mem) > 0 {
			parts = append(parts, shortPart(all(len(mem)), "no node has %d MiB free memory", "too little free memory (%d MiB needed)", nd.mem, mem, "%s has %d"))
		}
		if len(disk) > 0 {
			parts = append(parts, shortPart(all(len(disk)), "no node has %d MiB free disk", "too little free disk (%d MiB needed)", nd.disk, disk, "%s has %d"))
		}
		if len(cpu) > 0 {
			parts = append(parts, shortPart(all(len(cpu)), "no node has %d free vcpus", "too few free vcpus (%d needed)", nd.cpu, cpu, "%s has %d"))
		}
		if len(n1) > 0 {
			parts = append(parts, "N+1 redundancy would break (memory kept to take over the drbd instances of a failed peer): "+
				listShort(n1, func(s shortage) string {
					return fmt.Sprintf("%s has %d MiB free, needs %d", s.name, s.have, s.need)
				}))
		}
		if usable == 0 && len(nb.seen) == 0 {
			parts = append(parts, "it has no nodes")
		}
	} else {
		parts = append(parts, t.explainSecondary(g, nd, sc.secs, okPrim, nb))
	}
	return strings.Join(append(parts, nb.parts()...), "; ")
}

// explainSecondary says why no node can be the drbd secondary of any of
// the nodes that could be primary.
func (t *table) explainSecondary(g int32, nd need, secs []int32, okPrim []int32, nb *notes) string {
	if secs == nil {
		secs = t.groups[g].members
	}
	var disk, mem []shortage
	var self []string
	usable := 0
	for _, k := range secs {
		if nb.note(k) {
			continue
		}
		usable++
		r := &t.rows[k]
		if r.freeDisk() < nd.disk {
			disk = append(disk, shortage{name: r.name, have: r.freeDisk(), unit: r.unit})
			continue
		}
		// The least memory k needs to back one of the primaries.
		least, other := int64(-1), false
		for _, p := range okPrim {
			if p == k {
				continue
			}
			other = true
			if v := t.peersOf(k).get(p); least < 0 || v < least {
				least = v
			}
			if least == 0 {
				break
			}
		}
		if !other {
			self = append(self, r.name)
			usable--
			continue
		}
		mem = append(mem, shortage{name: r.name, have: r.freeMem(), need: max(r.rMem, least+nd.mem)})
	}
	names := make([]string, len(okPrim))
	for i, p := range okPrim {
		names[i] = t.rows[p].name
	}
	var parts []string
	if len(disk) > 0 {
		parts = append(parts, shortPart(len(disk) == usable, "no other node has %d MiB free disk", "too little free disk (%d MiB needed)", nd.disk, disk, "%s has %d"))
	}
	if len(mem) > 0 {
		parts = append(parts, "too little free memory to take over as secondary (N+1): "+
			listShort(mem, func(s shortage) string {
				return fmt.Sprintf("%s has %d MiB free, needs %d", s.name, s.have, s.need)
			}))
	}
	if len(parts) == 0 && len(self) > 0 {
		parts = append(parts, listNames(self)+" cannot be its own secondary")
	}
	if len(parts) == 0 {
		parts = append(parts, "no other node takes instances")
	}
	return "no drbd secondary for a primary on " + listNames(names) + ": " + strings.Join(parts, ", ")
}

// explainNewSecondary says why no node can become the drbd secondary of
// an instance with primary p.
func (t *table) explainNewSecondary(p int32, nd need) string {
	nb := t.notes(nil)
	msg := t.explainSecondary(t.rows[p].group, nd, nil, []int32{p}, nb)
	return strings.Join(append([]string{msg}, nb.parts()...), "; ")
}

// shortPart formats one short resource: "no node has X: a has 1, b has 2"
// when every candidate lacks it, else "too little X (N needed): ...".
func shortPart(every bool, allFmt, someFmt string, amount int64, items []shortage, itemFmt string) string {
	head := fmt.Sprintf(someFmt, amount)
	if every {
		head = fmt.Sprintf(allFmt, amount)
	}
	return head + ": " + listShort(items, func(s shortage) string {
		if s.unit != "" {
			return fmt.Sprintf(itemFmt, s.name, s.have) + " (" + s.unit + ")"
		}
		return fmt.Sprintf(itemFmt, s.name, s.have)
	})
}

// listShort lists nodes with the most of the resource first (the closest
// to fitting), then by name, at most maxListed of them.
func listShort(items []shortage, format func(shortage) string) string {
	sort.Slice(items, func(i, j int) bool {
		if items[i].have != items[j].have {
			return items[i].have > items[j].have
		}
		return items[i].name < items[j].name
	})
	out := make([]string, 0, min(len(items), maxListed))
	for i, s := range items {
		if i == maxListed {
			break
		}
		out = append(out, format(s))
	}
	return strings.Join(out, ", ") + more(len(items))
}

// listNames lists names (already in order), at most maxListed of them.
func listNames(names []string) string {
	if len(names) > maxListed {
		return strings.Join(names[:maxListed], ", ") + more(len(names))
	}
	return strings.Join(names, ", ")
}

// listReasons joins the first reasons nodes gave, each naming its node.
func listReasons(rs []string) string {
	const most = 3
	if len(rs) > most {
		return strings.Join(rs[:most], "; ") + fmt.Sprintf("; and %d more", len(rs)-most)
	}
	return strings.Join(rs, "; ")
}

func more(n int) string {
	if n > maxListed {
		return fmt.Sprintf(" and %d more", n-maxListed)
	}
	return ""
}

func isAre(n int) string {
	if n == 1 {
		return " is"
	}
	return " are"
}
