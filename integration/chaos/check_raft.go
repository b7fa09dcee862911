package chaos

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Raft invariants and leader-only services.

// Sample is one member's own view (GET /2/gnt/status), polled during the
// run.
type Sample struct {
	Member string `json:"member"`
	// Call is when the status was asked for, At when it came (ns since
	// the start of the run): the member's view is of a time in between.
	Call        int64  `json:"call"`
	At          int64  `json:"at"`
	State       string `json:"state"`
	Term        uint64 `json:"term"`
	Established bool   `json:"established"`
	Applied     uint64 `json:"applied"`
	// MaintdAddr and MaintdEpoch are the maintd the member says it runs
	// (rpc.Status.Maintd; empty and 0 when none).
	MaintdAddr  string `json:"maintd_addr,omitempty"`
	MaintdEpoch uint64 `json:"maintd_epoch,omitempty"`
	// Gossip lists the gossip members the member does not see alive, as
	// "name:state".
	Gossip []string `json:"gossip,omitempty"`
}

// Establishment is a member's log line saying that it established its
// leadership: it then runs the executor and the other leader-only
// services with that epoch.
type Establishment struct {
	Member string `json:"member"`
	Epoch  uint64 `json:"epoch"`
	Term   uint64 `json:"term"`
}

var establishedLine = regexp.MustCompile(`leadership established: epoch=(\d+) term=(\d+)`)

// ParseEstablishments finds the establishments in a member's log.
func ParseEstablishments(member, log string) []Establishment {
	var out []Establishment
	for _, m := range establishedLine.FindAllStringSubmatch(log, -1) {
		e, _ := strconv.ParseUint(m[1], 10, 64)
		t, _ := strconv.ParseUint(m[2], 10, 64)
		out = append(out, Establishment{Member: member, Epoch: e, Term: t})
	}
	return out
}

// CheckLeaders checks election safety on the samples: no two members
// ever said they were leader in the same term, nor had established
// leadership in the same term.
func CheckLeaders(samples []Sample) []string {
	leaders := map[uint64]map[string]bool{}
	established := map[uint64]map[string]bool{}
	note := func(m map[uint64]map[string]bool, term uint64, member string) {
		if m[term] == nil {
			m[term] = map[string]bool{}
		}
		m[term][member] = true
	}
	for _, s := range samples {
		if s.State == "leader" {
			note(leaders, s.Term, s.Member)
			if s.Established {
				note(established, s.Term, s.Member)
			}
		}
	}
	var out []string
	for _, term := range sortedTerms(leaders) {
		if len(leaders[term]) > 1 {
			out = append(out, fmt.Sprintf("two leaders in term %d: %s", term, strings.Join(sortedKeys(leaders[term]), ", ")))
		}
	}
	for _, term := range sortedTerms(established) {
		if len(established[term]) > 1 {
			out = append(out, fmt.Sprintf("leader services established on several members in term %d: %s", term, strings.Join(sortedKeys(established[term]), ", ")))
		}
	}
	return out
}

// CheckLeaderServices checks the executor, the leader-only service that
// exists so far: at most one member establishes leadership per term, an
// epoch belongs to one establishment, and the steps of every opcode were
// recorded by epochs that never go back (a deposed executor never
// recorded a step after its successor did), each an epoch that some
// member established.
func CheckLeaderServices(ests []Establishment, jobs []Job) []string {
	var out []string
	byTerm := map[uint64]map[string]bool{}
	byEpoch := map[uint64][]string{}
	for _, e := range ests {
		byEpoch[e.Epoch] = append(byEpoch[e.Epoch], e.Member)
		if e.Term == 0 {
			continue // the member could not tell the term
		}
		if byTerm[e.Term] == nil {
			byTerm[e.Term] = map[string]bool{}
		}
		byTerm[e.Term][e.Member] = true
	}
	for _, term := range sortedTerms(byTerm) {
		if len(byTerm[term]) > 1 {
			out = append(out, fmt.Sprintf("leader services established by several members in term %d: %s", term, strings.Join(sortedKeys(byTerm[term]), ", ")))
		}
	}
	var epochs []uint64
	for e := range byEpoch {
		epochs = append(epochs, e)
	}
	sort.Slice(epochs, func(i, j int) bool { return epochs[i] < epochs[j] })
	for _, e := range epochs {
		if len(byEpoch[e]) > 1 {
			out = append(out, fmt.Sprintf("executor epoch %d established %d times (%s)", e, len(byEpoch[e]), strings.Join(byEpoch[e], ", ")))
		}
	}
	for _, j := range jobs {
		for i, op := range j.Ops {
			var prev uint64
			for k, s := range op.Steps {
				if s.Epoch < prev {
					out = append(out, fmt.Sprintf("job %d opcode %d: step %d (%s) recorded by epoch %d after a step of epoch %d", j.ID, i, k, s.Name, s.Epoch, prev))
				}
				prev = max(prev, s.Epoch)
				if len(ests) > 0 && len(byEpoch[s.Epoch]) == 0 {
					out = append(out, fmt.Sprintf("job %d opcode %d: step %d (%s) recorded by epoch %d, which no member established", j.ID, i, k, s.Name, s.Epoch))
				}
			}
			// The executor records each step but the last, which the
			// opcode's finish records.
			if op.OpID == "OP_TEST_DELAY" && op.Status == "success" && len(op.Steps) != op.StepCount()-1 {
				out = append(out, fmt.Sprintf("job %d opcode %d succeeded with %d steps recorded, want %d", j.ID, i, len(op.Steps), op.StepCount()-1))
			}
		}
	}
	return out
}

func sortedTerms[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
