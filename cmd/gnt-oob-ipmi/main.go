// Command gnt-oob-ipmi is an OOB helper (doc/design-oob.rst) that drives
// each node's BMC over IPMI LAN with ipmitool:
//
//	gnt-oob-ipmi [--config FILE] power-on|power-off|power-cycle|power-status|health NODE
//
// power-on, power-off and power-cycle are `chassis power on|off|cycle`
// (power-cycle of a chassis that is off is refused, as the design's table
// says IPMI does); power-status is `chassis power status`, printed as
// {"powered": true|false}; health is `sdr elist`, each sensor an item:
// ok is OK, non-critical (nc, lnc, unc) WARNING, critical and
// non-recoverable (cr, lcr, ucr, nr, lnr, unr) CRITICAL, other readings
// UNKNOWN; sensors without a reading (ns) are left out.
//
// The configuration (--config, else $GNT_OOB_IPMI_CONFIG, else
// /etc/gnt/oob-ipmi.conf) has one line per node:
//
//	# node    interface  host        port  user   password-file
//	node21    lanplus    10.0.1.21   623   admin  /etc/gnt/ipmi/node21.pw
//	node22    lan        bmc22       -     ADMIN  /etc/gnt/ipmi/shared.pw
//
// and options for all nodes: "option ipmitool PATH", "option timeout 20s"
// (each ipmitool call), "option retries N" (-R), "option privilege LEVEL"
// (-L), "option cipher N" (-C, lanplus). Exit 0: success, JSON on stdout;
// 1: failure, the message on stderr; 2: a command this helper does not know.
package main

import (
	"context"
	"fmt"
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
		fmt.Println("gnt-oob-ipmi version " + buildinfo.Text(commit, buildDate))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(exitCode(err))
}
