package rpc

import "github.com/gnt-cluster/gnt/buildinfo"

// Version is gnt's software version, of the daemon and the client alike.
const Version = buildinfo.Version

// VersionText is what `gnt --version` and `gntd --version` print after the
// program's name without a build date: the software version and the
// commit the binary was built from (buildinfo.Text).
func VersionText(stamped string) string { return buildinfo.Text(stamped, "") }

// Commit is the commit VersionText names, as one word: the revision,
// with "-dirty" when built with uncommitted changes, or "unknown".
func Commit(stamped string) string { return buildinfo.Commit(stamped) }
