// Command gnt-oob-fake is an OOB helper for demos and tests: it speaks
// the protocol of doc/design-oob.rst (`gnt-oob-fake COMMAND NODE`, exit 0
// with JSON on stdout, 1 with a message on stderr, 2 for what it does not
// know) and keeps each node's power state in a file. A node may have a
// command that stands for it: powering the node off stops that process
// (its process group, SIGTERM then SIGKILL), powering it on starts it
// again, detached, in a session of its own. `gntd dev` configures it so
// that powering a dev node off really stops its gntd.
//
//	gnt-oob-fake [--config FILE] power-on|power-off|power-cycle|power-status|health NODE
//
// The configuration (--config, else $GNT_OOB_FAKE_CONFIG) is JSON:
//
//	{"state_dir": "/var/lib/gnt/oob-fake",
//	 "stop_timeout": "10s",
//	 "nodes": {"node23": {"command": ["/usr/bin/gntd", "agent", ...],
//	                      "pid_file": "/var/lib/gnt/oob-fake/node23.pid",
//	                      "log_file": "/var/lib/gnt/node23/gntd.log"}}}
//
// In the state directory, <node>.power holds "on" or "off" (no file: on),
// <node>.health, when present, is printed as the node's health answer, and
// <node>.fail, when present ("<exit status> <message>"), makes every
// command on the node fail that way: faults for demos and tests.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gnt-cluster/gnt/buildinfo"
)

// commit and buildDate are set by `make build` with -ldflags -X (see
// buildinfo.Text).
var commit, buildDate string

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println("gnt-oob-fake version " + buildinfo.Text(commit, buildDate))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(exitStatus(err, os.Stderr))
}

// exitStatus prints err (if any) on stderr and returns the protocol's
// exit status for it.
func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, err)
	if e, ok := err.(*exitError); ok {
		return e.code
	}
	return 1
}
