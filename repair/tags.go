package repair

import (
	"fmt"
	"strconv"
	"strings"
)

// Ganeti's autorepair tags (HTools/Tags/Constants.hs). They are the whole
// interface between harep and operators or external tools, so they are
// read and written exactly as Ganeti does:
//
//	ganeti:watcher:autorepair:<type>                      enable
//	ganeti:watcher:autorepair:suspend[:[<unix-seconds>]]  suspend
//	ganeti:watcher:autorepair:pending:<type>:<uuid>:<unix-seconds>:<jobs>
//	ganeti:watcher:autorepair:result:<type>:<uuid>:<unix-seconds>:<result>:<jobs>
//
// where <jobs> is a '+'-separated list of job ids, possibly empty.

// AutorepairPrefix starts every autorepair tag.
const AutorepairPrefix = "ganeti:watcher:autorepair:"

const (
	suspendWord = "suspend"
	pendingWord = "pending:"
	resultWord  = "result:"
)

// Kinds of autorepair tags.
const (
	TagEnable  = "enable"
	TagSuspend = "suspend"
	TagPending = "pending"
	TagResult  = "result"
)

// Tag is one parsed autorepair tag.
type Tag struct {
	Kind string // TagEnable, TagSuspend, TagPending or TagResult
	// Type is the repair type of an enable, pending or result tag.
	Type string
	// Forever marks a permanent suspension; otherwise Until is when the
	// suspension ends (Unix seconds).
	Forever bool
	Until   int64
	// ID is the repair's id and Time when it started (pending, Unix
	// seconds) or ended (result).
	ID   string
	Time int64
	// Result is a result tag's outcome (ResultEnoperm, ...).
	Result string
	// Jobs are the repair's jobs (pending and result tags).
	Jobs []int64
}

// TypeRank orders the autorepair types from the least destructive
// (fix-storage 0) to the most (reinstall 3); an unknown type ranks -1.
func TypeRank(t string) int {
	switch t {
	case TypeFixStorage:
		return 0
	case TypeMigrate:
		return 1
	case TypeFailover:
		return 2
	case TypeReinstall:
		return 3
	}
	return -1
}

// ResultRank orders the repair results as Ganeti does (enoperm 0 <
// success 1 < failure 2); an unknown result ranks -1.
func ResultRank(r string) int {
	switch r {
	case ResultEnoperm:
		return 0
	case ResultSuccess:
		return 1
	case ResultFailure:
		return 2
	}
	return -1
}

// ParseTag parses an autorepair tag. ok is false for a tag that is not an
// autorepair tag (no prefix); err describes a malformed one (unknown type
// or result, bad timestamp or job id, wrong number of fields), which
// harep reports and otherwise ignores.
func ParseTag(tag string) (t Tag, ok bool, err error) {
	rest, ok := strings.CutPrefix(tag, AutorepairPrefix)
	if !ok {
		return Tag{}, false, nil
	}
	bad := func(format string, args ...any) (Tag, bool, error) {
		return Tag{}, true, fmt.Errorf("autorepair tag %q: %s", tag, fmt.Sprintf(format, args...))
	}
	switch {
	case rest == suspendWord || rest == suspendWord+":":
		return Tag{Kind: TagSuspend, Forever: true}, true, nil
	case strings.HasPrefix(rest, suspendWord+":"):
		until, err := parseUint(rest[len(suspendWord)+1:])
		if err != nil {
			return bad("bad suspension end %q (Unix seconds)", rest[len(suspendWord)+1:])
		}
		return Tag{Kind: TagSuspend, Until: until}, true, nil
	case strings.HasPrefix(rest, pendingWord):
		f := strings.Split(rest[len(pendingWord):], ":")
		if len(f) != 4 {
			return bad("a pending tag has 4 fields (type:uuid:time:jobs), found %d", len(f))
		}
		t, msg := repairFields(TagPending, f[0], f[1], f[2], f[3])
		if msg != "" {
			return bad("%s", msg)
		}
		return t, true, nil
	case strings.HasPrefix(rest, resultWord):
		f := strings.Split(rest[len(resultWord):], ":")
		if len(f) != 5 {
			return bad("a result tag has 5 fields (type:uuid:time:result:jobs), found %d", len(f))
		}
		t, msg := repairFields(TagResult, f[0], f[1], f[2], f[4])
		if msg != "" {
			return bad("%s", msg)
		}
		if ResultRank(f[3]) < 0 {
			return bad("unknown result %q (enoperm, success or failure)", f[3])
		}
		t.Result = f[3]
		return t, true, nil
	}
	if TypeRank(rest) < 0 {
		return bad("unknown autorepair type %q (fix-storage, migrate, failover or reinstall)", rest)
	}
	return Tag{Kind: TagEnable, Type: rest}, true, nil
}

// repairFields fills a pending or result tag's common fields, or says
// what is wrong with them.
func repairFields(kind, typ, id, ts, jobs string) (Tag, string) {
	if TypeRank(typ) < 0 {
		return Tag{}, fmt.Sprintf("unknown autorepair type %q", typ)
	}
	if id == "" {
		return Tag{}, "empty repair id"
	}
	sec, err := parseUint(ts)
	if err != nil {
		return Tag{}, fmt.Sprintf("bad timestamp %q (Unix seconds)", ts)
	}
	t := Tag{Kind: kind, Type: typ, ID: id, Time: sec}
	if jobs != "" {
		for _, j := range strings.Split(jobs, "+") {
			id, err := parseUint(j)
			if err != nil || id == 0 {
				return Tag{}, fmt.Sprintf("bad job id %q", j)
			}
			t.Jobs = append(t.Jobs, id)
		}
	}
	return t, ""
}

// parseUint reads a non-negative decimal number of digits only (no sign,
// no spaces) that fits in an int64.
func parseUint(s string) (int64, error) {
	if s == "" {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// String formats the tag in Ganeti's form; a parsed tag formats to a tag
// that parses back to it (a permanent suspension is written without the
// trailing ':', numbers without leading zeros).
func (t Tag) String() string {
	var b strings.Builder
	b.WriteString(AutorepairPrefix)
	switch t.Kind {
	case TagEnable:
		b.WriteString(t.Type)
	case TagSuspend:
		b.WriteString(suspendWord)
		if !t.Forever {
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(t.Until, 10))
		}
	case TagPending, TagResult:
		if t.Kind == TagPending {
			b.WriteString(pendingWord)
		} else {
			b.WriteString(resultWord)
		}
		b.WriteString(t.Type)
		b.WriteByte(':')
		b.WriteString(t.ID)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(t.Time, 10))
		b.WriteByte(':')
		if t.Kind == TagResult {
			b.WriteString(t.Result)
			b.WriteByte(':')
		}
		for i, j := range t.Jobs {
			if i > 0 {
				b.WriteByte('+')
			}
			b.WriteString(strconv.FormatInt(j, 10))
		}
	}
	return b.String()
}

// PendingTag is the pending tag of a repair without its job list: it
// ends in ':' and the round appends the ids of the jobs it submits.
func PendingTag(typ, id string, startSec int64) string {
	return Tag{Kind: TagPending, Type: typ, ID: id, Time: startSec}.String()
}

// ResultTag is the result tag of a finished repair.
func ResultTag(typ, id string, endSec int64, result string, jobs []int64) string {
	return Tag{Kind: TagResult, Type: typ, ID: id, Time: endSec, Result: result, Jobs: jobs}.String()
}
