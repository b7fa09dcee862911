package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
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
				Usage:     "show instances' configuration and, unless --static, each disk's status on its nodes",
				ArgsUsage: "[NAME...]",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "static", Aliases: []string{"s"},
					Usage: "the configuration only (drbd ports and minors included): the /info job asks no node for the disks' status"}},
				Action: e.do(instanceInfo),
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
	derive: rpc.AddDerivedInstanceFields,
}

func instanceList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	l, names, err := s.applyFilter(ctx, c, instanceListing, "instance", args)
	if err != nil {
		return err
	}
	return s.list(ctx, l, names, c)
}

func instanceInfo(ctx context.Context, s *session, c *cli.Context, args []string) error {
	var status diskStatuses
	if !s.cfg.JSON() {
		status = s.instanceDiskStatus(ctx, args, c.Bool("static"))
		status.static = c.Bool("static")
	}
	return s.info(ctx, instanceListing, args, func(o object) { showInstance(s.stdout, o, status) })
}

// diskStatuses is what the /info job (OP_INSTANCE_QUERY_DATA) said of the
// instances' disks: by instance name, each disk's pstatus and sstatus,
// and whether it runs on its primary (run_state: up or down); err is why
// the nodes could not be asked. A static job (--static) asks no node: it
// gives the disks' configuration (drbd_info) only.
type diskStatuses struct {
	by     map[string][]diskStatus
	run    map[string]string
	err    error
	static bool
}

// diskStatus is one disk's block device status on the primary and the
// secondary, as the /info job gives them.
type diskStatus struct {
	PStatus []any `json:"pstatus"`
	SStatus []any `json:"sstatus"`
	// DRBDInfo is a drbd disk's port and each node's minor (null for
	// other disks).
	DRBDInfo map[string]any `json:"drbd_info"`
}

// instanceDiskStatus runs one OP_INSTANCE_QUERY_DATA job for the named
// instances (all without names) and keeps what it says of their disks,
// static as Ganeti's --static: from the configuration, no node asked. A
// job that fails leaves the reason, shown in place of the status.
func (s *session) instanceDiskStatus(ctx context.Context, names []string, static bool) diskStatuses {
	op, _ := json.Marshal(map[string]any{"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": append([]string{}, names...), "static": static})
	id, meta, err := s.api.Submit(ctx, http.MethodPost, "/2/jobs", nil, rpc.SubmitJobRequest{Ops: []json.RawMessage{op}})
	if err != nil {
		return diskStatuses{err: err}
	}
	j, _, err := s.waitJob(ctx, int64(id), meta.Index)
	if err == nil && j.Status != fsm.StatusSuccess {
		err = j.failure()
	}
	if err != nil {
		return diskStatuses{err: err}
	}
	var res map[string]struct {
		Disks    []diskStatus `json:"disks"`
		RunState string       `json:"run_state"`
	}
	if len(j.OpResult) == 0 {
		return diskStatuses{err: fmt.Errorf("job %d answered no result", id)}
	}
	if err := json.Unmarshal(j.OpResult[0], &res); err != nil {
		return diskStatuses{err: fmt.Errorf("decoding job %d's result: %w", id, err)}
	}
	out := diskStatuses{by: map[string][]diskStatus{}, run: map[string]string{}}
	for name, r := range res {
		out.by[name] = r.Disks
		out.run[name] = r.RunState
	}
	return out
}

// diskStatusLine is Ganeti's "on primary: PATH, status ok" for one
// block device status (null: the node does not hold the disk or was not
// asked).
func diskStatusLine(st []any) string {
	if len(st) < 7 {
		return "no status (the node does not hold the disk, or is offline)"
	}
	path, _ := st[0].(string)
	if path == "" {
		path = "(no path reported)"
	}
	if major, ok := st[1].(float64); ok {
		return drbdStatusLine(path, major, st)
	}
	state := "ok"
	if degraded, _ := st[5].(bool); degraded {
		state = "degraded"
	}
	if lds, _ := st[6].(float64); lds != 1 {
		state = "faulty or unknown"
	}
	return path + ", status " + state
}

// drbdStatusLine is diskStatusLine for a device with numbers (a drbd
// device), as Ganeti's gnt-instance info: "/dev/drbd0 (147:0), in sync,
// status ok", or a resync's progress, or *DEGRADED*.
func drbdStatusLine(path string, major float64, st []any) string {
	minor, _ := st[2].(float64)
	line := fmt.Sprintf("%s (%d:%d), ", path, int(major), int(minor))
	degraded, _ := st[5].(bool)
	switch pct, ok := st[3].(float64); {
	case ok:
		eta := "unknown"
		if s, ok := st[4].(float64); ok {
			eta = fmt.Sprintf("%ds", int(s))
		}
		line += fmt.Sprintf("*RECOVERING* %.1f%%, ETA %s", pct, eta)
	case degraded:
		line += "*DEGRADED*"
	default:
		line += "in sync"
	}
	lds, _ := st[6].(float64)
	name := map[float64]string{1: "ok", 2: "sync", 3: "unknown", 4: "faulty"}[lds]
	if name == "" {
		name = "unknown"
	}
	return line + ", status " + name
}

// drbdInfoLine is a drbd disk's port and minors (drbd_info), "" when the
// disk has none.
func drbdInfoLine(info map[string]any) string {
	if info == nil {
		return ""
	}
	num := func(k string) string { return fmt.Sprint(info[k]) }
	return fmt.Sprintf("drbd: port %s, primary %s minor %s, secondary %s minor %s",
		num("port"), num("primary_node"), num("primary_minor"), num("secondary_node"), num("secondary_minor"))
}

func showInstance(w io.Writer, o object, status diskStatuses) {
	fmt.Fprintf(w, "Instance name: %s\n", str(o, "name"))
	fmt.Fprintf(w, "UUID: %s\n", str(o, "uuid"))
	fmt.Fprintf(w, "Serial number: %s\n", str(o, "serial_no"))
	fmt.Fprintf(w, "Creation time: %s\n", epoch(o, "ctime"))
	fmt.Fprintf(w, "Modification time: %s\n", epoch(o, "mtime"))
	// Ganeti's line; the actual state only from the nodes (not --static).
	if run := status.run[str(o, "name")]; run != "" {
		fmt.Fprintf(w, "State: configured to be %s, actual state is %s\n", str(o, "admin_state"), run)
	} else {
		fmt.Fprintf(w, "State: configured to be %s\n", str(o, "admin_state"))
	}
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
	disks := status.by[str(o, "name")]
	for i, sz := range xs {
		fmt.Fprintf(w, "    - disk/%d: size %s\n", i, mebibytes(object{"s": sz}, "s"))
		switch {
		case status.err != nil && status.static:
			fmt.Fprintf(w, "      configuration unknown: %v\n", status.err)
		case status.err != nil:
			fmt.Fprintf(w, "      status: unknown: %v\n", status.err)
		case i < len(disks):
			if l := drbdInfoLine(disks[i].DRBDInfo); l != "" {
				fmt.Fprintf(w, "      %s\n", l)
			}
			if status.static {
				continue
			}
			fmt.Fprintf(w, "      on primary: %s\n", diskStatusLine(disks[i].PStatus))
			if len(list(o, "snodes")) > 0 {
				fmt.Fprintf(w, "      on secondary: %s\n", diskStatusLine(disks[i].SStatus))
			}
		}
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
