package locking

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Level is one of Ganeti's lock levels. Locks are acquired in increasing
// level order.
type Level int

// The lock levels, numbered as Ganeti's locking.LEVEL_* (stable-2.10's
// node-alloc level is gone, as on Ganeti master).
const (
	LevelCluster Level = iota
	LevelInstance
	LevelNodeGroup
	LevelNode
	LevelNodeRes
	LevelNetwork

	numLevels = int(LevelNetwork) + 1
)

// BGL is the name of the single member of LevelCluster, Ganeti's Big
// Ganeti Lock.
const BGL = "BGL"

var levelNames = [numLevels]string{"cluster", "instance", "nodegroup", "node", "node-res", "network"}

// String returns Ganeti's name of the level, as used in wire lock names
// ("instance" in "instance/inst1").
func (l Level) String() string {
	if l < 0 || int(l) >= numLevels {
		return "level(" + strconv.Itoa(int(l)) + ")"
	}
	return levelNames[l]
}

func (l Level) valid() bool { return l >= 0 && int(l) < numLevels }

// ParseLevel is the inverse of Level.String.
func ParseLevel(s string) (Level, error) {
	for i, n := range levelNames {
		if n == s {
			return Level(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown level %q", ErrInvalidRequest, s)
}

// Mode is what a request asks of a lock: to share it or to hold it alone.
type Mode int

// The two modes a caller asks for. (Set locks are also held in the
// intention modes, which callers never name; see the package comment.)
const (
	Shared Mode = iota
	Exclusive
)

// String returns "shared" or "exclusive", the words of Ganeti's lock query.
func (m Mode) String() string {
	switch m {
	case Shared:
		return "shared"
	case Exclusive:
		return "exclusive"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Request is what an opcode needs at one level.
type Request struct {
	Level Level
	// Names are the members wanted; nil or empty means the whole level
	// (Ganeti's ALL_SET). The BGL is Level=LevelCluster, Names={"BGL"}.
	Names []string
	Mode  Mode
}

// ErrInvalidRequest is wrapped by every error about a malformed request.
var ErrInvalidRequest = errors.New("invalid lock request")

// gmode is the mode in which a lock is held or awaited, in the
// multi-granularity scheme: members are held S or X, set locks any of the
// four. The zero value means "not held".
type gmode uint8

const (
	gNone gmode = iota
	gIS
	gIX
	gS
	gX
	numGModes
)

var gmodeNames = [numGModes]string{"", "IS", "IX", "S", "X"}

func (g gmode) String() string { return gmodeNames[g] }

// compatible[a] has bit b set when a holder in mode a and one in mode b may
// coexist (the classic matrix: IS–{IS,IX,S}, IX–{IS,IX}, S–{IS,S}, X–none).
var compatible = [numGModes]uint8{
	gNone: 0,
	gIS:   1<<gIS | 1<<gIX | 1<<gS,
	gIX:   1<<gIS | 1<<gIX,
	gS:    1<<gIS | 1<<gS,
	gX:    0,
}

func compat(a, b gmode) bool { return compatible[a]&(1<<b) != 0 }

// lub is the weakest mode at least as strong as both: what an owner holding
// a must hold to also have b. With no SIX mode, S and IX together need X.
func lub(a, b gmode) gmode {
	switch {
	case a == b || b == gNone:
		return a
	case a == gNone:
		return b
	case a == gX || b == gX:
		return gX
	case a == gIS:
		return b
	case b == gIS:
		return a
	}
	return gX // {IX, S}
}

// publicMode is how a held mode shows in LockInfo: Ganeti held a lockset's
// own lock shared while owning any of its members, so both intention modes
// read "shared".
func (g gmode) publicMode() string {
	switch g {
	case gIS, gIX, gS:
		return Shared.String()
	case gX:
		return Exclusive.String()
	}
	return ""
}

// step is one lock of a normalised request: a level's set lock (name "")
// or a member, with the mode to hold it in.
type step struct {
	level Level
	name  string
	mode  gmode
	whole bool // the set lock step of a whole-level request
}

// setName is how a level's set lock is named on the wire.
const setName = "[lockset]"

func wireName(level Level, name string) string {
	if name == "" {
		name = setName
	}
	return level.String() + "/" + name
}

// before orders locks globally: by level, the set lock before the members,
// then members by name. Acquisition follows this order.
func before(la Level, na string, lb Level, nb string) bool {
	if la != lb {
		return la < lb
	}
	if na == "" || nb == "" {
		return na == "" && nb != ""
	}
	return na < nb
}

func validate(r Request) error {
	if !r.Level.valid() {
		return fmt.Errorf("%w: unknown level %d", ErrInvalidRequest, int(r.Level))
	}
	if r.Mode != Shared && r.Mode != Exclusive {
		return fmt.Errorf("%w: unknown mode %d at level %s", ErrInvalidRequest, int(r.Mode), r.Level)
	}
	for _, n := range r.Names {
		switch {
		case n == "":
			return fmt.Errorf("%w: empty lock name at level %s", ErrInvalidRequest, r.Level)
		case r.Level == LevelCluster && n != BGL:
			return fmt.Errorf("%w: level cluster has only the lock %q, not %q", ErrInvalidRequest, BGL, n)
		}
	}
	return nil
}

func memberMode(m Mode) gmode {
	if m == Exclusive {
		return gX
	}
	return gS
}

func intentMode(m Mode) gmode {
	if m == Exclusive {
		return gIX
	}
	return gIS
}

// normalize validates reqs and turns them into steps in the global order,
// appended to buf. Several requests for one level merge: a whole-level
// request absorbs the others and takes the strongest mode asked at that
// level; otherwise names are sorted and deduplicated, a name asked twice
// takes the stronger mode, and the set lock is IX if any member is
// exclusive, else IS. The caller's slices are not modified.
func normalize(reqs []Request, buf []step) ([]step, error) {
	for _, r := range reqs {
		if err := validate(r); err != nil {
			return nil, err
		}
	}
	// The common case, one request, needs neither merging nor (for one
	// name) sorting.
	if len(reqs) == 1 && len(reqs[0].Names) <= 1 {
		r := reqs[0]
		if len(r.Names) == 0 {
			return append(buf, step{level: r.Level, mode: memberMode(r.Mode), whole: true}), nil
		}
		return append(buf,
			step{level: r.Level, mode: intentMode(r.Mode)},
			step{level: r.Level, name: r.Names[0], mode: memberMode(r.Mode)}), nil
	}
	var present, whole [numLevels]bool
	var strongest [numLevels]Mode
	for _, r := range reqs {
		present[r.Level] = true
		if len(r.Names) == 0 {
			whole[r.Level] = true
		}
		strongest[r.Level] = max(strongest[r.Level], r.Mode)
	}
	type member struct {
		name string
		mode gmode
	}
	var members []member
	for l := range numLevels {
		if !present[l] {
			continue
		}
		level := Level(l)
		if whole[l] {
			buf = append(buf, step{level: level, mode: memberMode(strongest[l]), whole: true})
			continue
		}
		members = members[:0]
		for _, r := range reqs {
			if r.Level != level {
				continue
			}
			for _, n := range r.Names {
				members = append(members, member{n, memberMode(r.Mode)})
			}
		}
		slices.SortFunc(members, func(a, b member) int {
			switch {
			case a.name < b.name:
				return -1
			case a.name > b.name:
				return 1
			}
			return int(b.mode) - int(a.mode) // stronger first, kept by the dedup
		})
		members = slices.CompactFunc(members, func(a, b member) bool { return a.name == b.name })
		buf = append(buf, step{level: level, mode: intentMode(strongest[l])})
		for _, mb := range members {
			buf = append(buf, step{level: level, name: mb.name, mode: mb.mode})
		}
	}
	return buf, nil
}
