package fsm

import "sort"

// RemovedNodeMemory is how long a removed node is remembered: a node
// certificate lives a year (package pki), so one issued before the removal
// is refused for as long as it could be presented.
const RemovedNodeMemory int64 = 366 * 24 * 3600 * 1e9

// MaxRemovedNodes bounds the memory of removed nodes; past it the oldest
// are forgotten first.
const MaxRemovedNodes = 10000

// removedNode is a snapshot record of RemovedNodes.
type removedNode struct {
	Name string `json:"name"`
	At   int64  `json:"at"`
}

// noteRemoved records that a node was removed at now (a copy of the map:
// frozen views share the old one), forgetting removals older than
// RemovedNodeMemory and, past MaxRemovedNodes, the oldest.
func (s *State) noteRemoved(name string, now int64) {
	m := make(map[string]int64, len(s.RemovedNodes)+1)
	for n, at := range s.RemovedNodes {
		if now-at < RemovedNodeMemory {
			m[n] = at
		}
	}
	m[name] = now
	for len(m) > MaxRemovedNodes {
		oldest, at := "", int64(0)
		for n, t := range m {
			if oldest == "" || t < at || t == at && n < oldest {
				oldest, at = n, t
			}
		}
		delete(m, oldest)
	}
	s.RemovedNodes = m
}

// RemovedAt is when the named node was last removed from the cluster
// (Unix nanoseconds), or 0 if it was not within RemovedNodeMemory.
func (s *State) RemovedAt(name string) int64 { return s.RemovedNodes[name] }

func (s *State) sortedRemoved() []removedNode {
	out := make([]removedNode, 0, len(s.RemovedNodes))
	for n, at := range s.RemovedNodes {
		out = append(out, removedNode{Name: n, At: at})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
