// Command gnt is the command-line client of a gnt cluster. It offers
// Ganeti's command vocabulary (gnt-cluster, gnt-node, gnt-group,
// gnt-instance, gnt-job) as nouns of one binary, e.g.
//
//	gnt node modify node3 --drained yes
//
// and speaks the cluster's RAPI-compatible HTTP API (docs/api.md) to any
// master candidate from a list, moving on to the next one when a candidate
// is down. Changes are jobs: gnt waits for them and prints their log unless
// --submit is given.
//
// Exit status: 0 on success, 1 when the cluster refused a request or a job
// failed, 2 on a usage error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}
