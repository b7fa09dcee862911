// Package buildinfo says which build of gnt a binary is: the software
// version, the commit it was built from and when. It imports nothing of
// the project, so that every binary (the OOB helpers too) can print it.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version is gnt's software version, of every binary alike.
const Version = "0.1.0"

// Text is what a binary's --version prints after its name: the version,
// the commit and, when known, the build date. The commit is the one Go
// stamped (vcs.revision, when built with -buildvcs from a git checkout),
// else stamped (set with -ldflags -X by `make build`, which also works
// from a git worktree, where Go stamps nothing), else "unknown". built is
// the build date `make build` stamps (-ldflags -X main.buildDate=...);
// empty leaves it out.
func Text(stamped, built string) string {
	rev, modified := commitOf(stamped)
	var parts []string
	switch {
	case rev == "":
		parts = append(parts, "commit unknown")
	case modified:
		parts = append(parts, "commit "+rev, "with uncommitted changes")
	default:
		parts = append(parts, "commit "+rev)
	}
	if built = strings.TrimSpace(built); built != "" {
		parts = append(parts, "built "+built)
	}
	return Version + " (" + strings.Join(parts, ", ") + ")"
}

// Commit is the commit Text names, as one word: the revision, with
// "-dirty" when built with uncommitted changes, or "unknown".
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
