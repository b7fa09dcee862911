package rpc

import (
	"runtime/debug"
	"strings"
)

// Version is gnt's software version, of the daemon and the client alike.
const Version = "0.1.0"

// VersionText is what `gnt --version` and `gntd --version` print after the
// program's name: the software version and the commit the binary was built
// from. The commit is the one Go stamped (vcs.revision, when built with
// -buildvcs from a git checkout), else stamped (set with -ldflags -X by
// `make build`, which also works from a git worktree, where Go stamps
// nothing), else "unknown".
func VersionText(stamped string) string {
	rev, modified := commitOf(stamped)
	switch {
	case rev == "":
		return Version + " (commit unknown)"
	case modified:
		return Version + " (commit " + rev + ", with uncommitted changes)"
	}
	return Version + " (commit " + rev + ")"
}

// Commit is the commit VersionText names, as one word: the revision,
// with "-dirty" when built with uncommitted changes, or "unknown".
func Commit(stamped string) string {
	rev, modified := commitOf(stamped)
	switch {
	case rev == "":
		return "unknown"
	case modified:
		return rev + "-dirty"
	}
	return rev
}

func commitOf(stamped string) (rev string, modified bool) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = strings.TrimSpace(stamped)
		modified = strings.HasSuffix(rev, "-dirty")
		rev = strings.TrimSuffix(rev, "-dirty")
	}
	return rev, modified
}
