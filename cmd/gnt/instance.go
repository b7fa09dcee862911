package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"
)

func (e environment) instanceCommand() *cli.Command {
	return &cli.Command{
		Name:  "instance",
		Usage: "instance operations (gnt-instance)",
		Subcommands: append([]*cli.Command{
			{
				Name:      "list",
				Usage:     "list instances",
				ArgsUsage: "[NAME... | FILTER]",
				Flags:     append(listFlags(), filterFlag()),
				Action:    e.do(instanceList),
			},
			listFieldsCommand(instanceListing),
			{
				Name:      "info",
				Usage:     "show instances' configuration",
				ArgsUsage: "[NAME...]",
				Action:    e.do(instanceInfo),
			},
		}, append(e.instanceOpCommands(), e.tagCommands("instance", true, func(n string) string { return "/2/instances/" + url.PathEscape(n) + "/tags" })...)...),
	}
}

var instanceListing = listing{
	kind: "instance",
	path: "/2/instances",
	key:  "name",
	defaults: []listColumn{
		{title: "Instance", field: "name"},
		{title: "OS", field: "os"},
		{title: "Primary_node", field: "pnode"},
		{title: "AdminState", field: "admin_state"},
		{title: "Memory", field: "beparams.memory"},
		{title: "VCPUs", field: "beparams.vcpus"},
	},
	fields: instanceFieldDefs,
}

func instanceList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	l, names, err := s.applyFilter(ctx, c, instanceListing, "instance", args)
	if err != nil {
		return err
	}
	return s.list(ctx, l, names, c)
}

func instanceInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	return s.info(ctx, instanceListing, args, func(o object) { showInstance(s.stdout, o) })
}

func showInstance(w io.Writer, o object) {
	fmt.Fprintf(w, "Instance name: %s\n", str(o, "name"))
	fmt.Fprintf(w, "UUID: %s\n", str(o, "uuid"))
	fmt.Fprintf(w, "Serial number: %s\n", str(o, "serial_no"))
	fmt.Fprintf(w, "Creation time: %s\n", epoch(o, "ctime"))
	fmt.Fprintf(w, "Modification time: %s\n", epoch(o, "mtime"))
	fmt.Fprintf(w, "State: configured to be %s\n", str(o, "admin_state"))
	if flag(o, "forthcoming") {
		fmt.Fprintf(w, "  Forthcoming: True (a reservation; not yet created)\n")
	}
	fmt.Fprintf(w, "  Nodes:\n")
	fmt.Fprintf(w, "    - primary: %s\n", str(o, "pnode"))
	snodes := list(o, "snodes")
	fmt.Fprintf(w, "    - secondaries: %s\n", orNone(strings.Join(snodes, ", ")))
	fmt.Fprintf(w, "  Operating system: %s\n", str(o, "os"))
	fmt.Fprintf(w, "  Disk template: %s\n", str(o, "disk_template"))
	fmt.Fprintf(w, "  Hardware:\n")
	fmt.Fprintf(w, "    - VCPUs: %s\n", str(o, "beparams.vcpus"))
	fmt.Fprintf(w, "    - memory: %s\n", mebibytes(o, "beparams.memory"))
	macs, ips, modes, links := list(o, "nic.macs"), list(o, "nic.ips"), list(o, "nic.modes"), list(o, "nic.links")
	vlans := list(o, "nic.vlans")
	fmt.Fprintf(w, "    - NICs:\n")
	for i, mac := range macs {
		fmt.Fprintf(w, "      - nic/%d: MAC: %s, IP: %s, mode: %s, link: %s, vlan: %s\n", i, mac, at(ips, i), at(modes, i), at(links, i), orNone(at(vlans, i)))
	}
	fmt.Fprintf(w, "  Disks:\n")
	sizes, _ := lookupField(o, "disk.sizes")
	xs, _ := sizes.([]any)
	for i, sz := range xs {
		fmt.Fprintf(w, "    - disk/%d: size %s\n", i, mebibytes(object{"s": sz}, "s"))
	}
	fmt.Fprintf(w, "  Disk usage: %s\n", mebibytes(o, "disk_usage"))
	// Ganeti's form: each parameter, "default (value)" when it is not
	// the instance's own.
	for _, p := range []struct{ title, field string }{
		{"Hypervisor", "hvparams"}, {"Back-end", "beparams"}, {"OS", "osparams"},
	} {
		eff, _ := o[p.field].(map[string]any)
		own, _ := o["custom_"+p.field].(map[string]any)
		if own == nil {
			own = map[string]any{}
		}
		if p.field == "hvparams" {
			fmt.Fprintf(w, "  Hypervisor: %s\n", orNone(str(o, "hypervisor")))
			fmt.Fprintf(w, "  Allocated network port: %s\n", orNone(str(o, "network_port")))
		}
		fmt.Fprintf(w, "  %s parameters:\n", p.title)
		printParams(w, "    ", eff, own)
	}
	fmt.Fprintf(w, "  Tags: %s\n", tagList(o))
}

func at(xs []string, i int) string {
	if i < len(xs) && xs[i] != "None" && xs[i] != "" {
		return xs[i]
	}
	return "None"
}
