package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The user-id pool (seed 003 "User-id pool", Ganeti's lib/uidpool.py): a
// cluster-wide list of user ids reserved for guests' processes. The kvm
// driver runs a guest with security_model=pool under an unused uid of it.
// It is kept as sorted, inclusive ranges [lo, hi] (a single uid: lo ==
// hi), Ganeti's list of pairs; its text form is "1000-1009,1020", the
// form `gnt cluster init/modify --uid-pool` take and `gnt cluster info`
// shows. An empty pool switches the feature off.

// UIDRange is an inclusive range of user ids, [lo, hi].
type UIDRange [2]int64

// Limits of the uid pool, checked wherever a pool is parsed or changed.
const (
	// MinPoolUID is the lowest uid a pool may hold: uid 0 is root's, and
	// a guest running as root would gain nothing from the pool.
	MinPoolUID = 1
	// MaxPoolUID is the highest: uid_t is 32 bits and 4294967295 is
	// (uid_t)-1, which setuid and chown take as "no change".
	MaxPoolUID = 1<<32 - 2
	// MaxUIDPoolRanges bounds the ranges of a pool.
	MaxUIDPoolRanges = 1024
	// MaxUIDPoolSize bounds the uids of a pool together: more guests than
	// any node runs, and small enough for a node to look through.
	MaxUIDPoolSize = 65536
)

// MaxUIDPoolText bounds the text form ParseUIDPool reads.
const MaxUIDPoolText = 64 << 10

// ParseUIDPool reads a pool definition: comma-separated uids and ranges
// "lo-hi" (inclusive), spaces around each allowed, empty items skipped (as
// Ganeti does). The result is sorted and checked (CheckUIDPool); field
// names the request field in errors.
func ParseUIDPool(field, s string) ([]UIDRange, *Error) {
	if len(s) > MaxUIDPoolText {
		return nil, errf(CodeInval, field, "%s: %d bytes, over the limit of %d", field, len(s), MaxUIDPoolText)
	}
	var out []UIDRange
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if len(out) == MaxUIDPoolRanges {
			return nil, errf(CodeInval, field, "%s: more than %d ranges", field, MaxUIDPoolRanges)
		}
		lo, hi, isRange := strings.Cut(item, "-")
		if !isRange {
			hi = lo
		}
		a, e := parseUID(field, strings.TrimSpace(lo), item)
		if e != nil {
			return nil, e
		}
		b, e := parseUID(field, strings.TrimSpace(hi), item)
		if e != nil {
			return nil, e
		}
		out = append(out, UIDRange{a, b})
	}
	slices.SortFunc(out, cmpUIDRange)
	if e := CheckUIDPool(field, out); e != nil {
		return nil, e
	}
	return out, nil
}

func parseUID(field, s, item string) (int64, *Error) {
	if s == "" || strings.Trim(s, "0123456789") != "" || len(s) > 10 {
		return 0, errf(CodeInval, field, "%s: %q is not a user id or a range of them (lo-hi, decimal, one hyphen)", field, item)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errf(CodeInval, field, "%s: %q: %v", field, item, err)
	}
	return n, nil
}

func cmpUIDRange(a, b UIDRange) int {
	if c := cmp.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return cmp.Compare(a[1], b[1])
}

// CheckUIDPool checks a pool: each range's bounds (lo ≤ hi, within
// MinPoolUID..MaxPoolUID), no two ranges sharing a uid, at most
// MaxUIDPoolRanges ranges and MaxUIDPoolSize uids. The ranges need not be
// sorted.
func CheckUIDPool(field string, pool []UIDRange) *Error {
	if len(pool) > MaxUIDPoolRanges {
		return errf(CodeInval, field, "%s: %d ranges, over the limit of %d", field, len(pool), MaxUIDPoolRanges)
	}
	var total int64
	for _, r := range pool {
		switch {
		case r[0] > r[1]:
			return errf(CodeInval, field, "%s: range %s: the lower bound %d is larger than the higher bound %d", field, formatUIDRange(r), r[0], r[1])
		case r[0] < MinPoolUID:
			return errf(CodeInval, field, "%s: range %s: user id %d is below %d (uid 0 is root's and is reserved)", field, formatUIDRange(r), r[0], MinPoolUID)
		case r[1] > MaxPoolUID:
			return errf(CodeInval, field, "%s: range %s: user id %d is above the highest allowed, %d", field, formatUIDRange(r), r[1], int64(MaxPoolUID))
		}
		total += r[1] - r[0] + 1
		if total > MaxUIDPoolSize {
			return errf(CodeInval, field, "%s: more than %d user ids, over the limit of the uid pool's size", field, MaxUIDPoolSize)
		}
	}
	s := slices.Clone(pool)
	slices.SortFunc(s, cmpUIDRange)
	for i := 1; i < len(s); i++ {
		if s[i][0] <= s[i-1][1] {
			return errf(CodeInval, field, "%s: ranges %s and %s overlap", field, formatUIDRange(s[i-1]), formatUIDRange(s[i]))
		}
	}
	return nil
}

// UIDRangesFromJSON converts Ganeti's JSON form of a pool, a list of
// [lo, hi] pairs, checking that each is a pair; CheckUIDPool checks the
// rest.
func UIDRangesFromJSON(field string, pairs [][]int64) ([]UIDRange, *Error) {
	if len(pairs) > MaxUIDPoolRanges {
		return nil, errf(CodeInval, field, "%s: %d ranges, over the limit of %d", field, len(pairs), MaxUIDPoolRanges)
	}
	out := make([]UIDRange, 0, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, errf(CodeInval, fmt.Sprintf("%s.%d", field, i), "%s: item %d has %d numbers; each is a pair [lower, higher] (equal for one uid)", field, i, len(p))
		}
		out = append(out, UIDRange{p[0], p[1]})
	}
	slices.SortFunc(out, cmpUIDRange)
	if e := CheckUIDPool(field, out); e != nil {
		return nil, e
	}
	return out, nil
}

// UIDRangesJSON is a pool in Ganeti's JSON form (never nil).
func UIDRangesJSON(pool []UIDRange) [][]int64 {
	out := make([][]int64, 0, len(pool))
	for _, r := range pool {
		out = append(out, []int64{r[0], r[1]})
	}
	return out
}

// FormatUIDPool is a pool's text form, "1000-1009, 1020" (Ganeti's), which
// ParseUIDPool reads back.
func FormatUIDPool(pool []UIDRange) string {
	parts := make([]string, 0, len(pool))
	for _, r := range pool {
		parts = append(parts, formatUIDRange(r))
	}
	return strings.Join(parts, ", ")
}

func formatUIDRange(r UIDRange) string {
	if r[0] == r[1] {
		return strconv.FormatInt(r[0], 10)
	}
	return fmt.Sprintf("%d-%d", r[0], r[1])
}

// AddUIDs adds ranges to a pool, as Ganeti's AddToUidPool: a range the
// pool already has is left as it is; one that overlaps a range of the
// pool otherwise is refused, naming both. The pool is not changed.
func AddUIDs(field string, pool, add []UIDRange) ([]UIDRange, *Error) {
	out := slices.Clone(pool)
	for _, r := range add {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, cmpUIDRange)
	if e := CheckUIDPool(field, out); e != nil {
		return nil, e
	}
	return out, nil
}

// RemoveUIDs removes ranges from a pool, as Ganeti's RemoveFromUidPool:
// each must be a range of the pool exactly (a part of one is refused,
// naming the pool's ranges). The pool is not changed.
func RemoveUIDs(field string, pool, rm []UIDRange) ([]UIDRange, *Error) {
	out := slices.Clone(pool)
	for _, r := range rm {
		i := slices.Index(out, r)
		if i < 0 {
			have := FormatUIDPool(pool)
			if have == "" {
				have = "empty"
			}
			return nil, errf(CodeInval, field, "%s: %s is not a range of the uid pool (%s); remove whole ranges as they are listed", field, formatUIDRange(r), have)
		}
		out = slices.Delete(out, i, i+1)
	}
	return out, nil
}

// UIDPoolSize is the number of uids of a pool.
func UIDPoolSize(pool []UIDRange) int64 {
	var n int64
	for _, r := range pool {
		n += r[1] - r[0] + 1
	}
	return n
}
