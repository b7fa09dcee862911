package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
)

// Storage units (gnt-node list-storage, modify-storage, repair-storage):
// each is a job the nodes' agents answer.

// defaultStorageFields are list-storage's columns (Ganeti's).
const defaultStorageFields = "node,type,name,size,used,free,allocatable"

var storageTitles = map[string]string{
	"node": "Node", "type": "Type", "name": "Name", "size": "Size", "used": "Used", "free": "Free", "allocatable": "Allocatable",
}

func (e environment) storageCommands() []*cli.Command {
	types := strings.Join(fsm.StorageTypes, ", ")
	return []*cli.Command{
		{
			Name:      "list-storage",
			Usage:     "list the storage units of nodes (all nodes when none is named)",
			ArgsUsage: "[NODE...]",
			Description: "One job (OP_NODE_QUERY_STORAGE) asks each node's agent for its units of the type: " +
				"file (the file storage directories, as df measures them), lvm-vg and lvm-pv (vgs/pvs; none on a node without LVM). " +
				"Fields: " + defaultStorageFields + " (sizes in MiB; --units as the list commands).",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "storage-type", Aliases: []string{"t"}, Value: fsm.StorageFile, Usage: "storage `TYPE`: " + types},
				&cli.StringFlag{Name: "fields", Usage: "the `FIELDS` to show, FIELD,... (as the global -o; default " + defaultStorageFields + ")"},
				&cli.BoolFlag{Name: "no-headers", Usage: "leave out the header line"},
				&cli.StringFlag{Name: "separator", Usage: "separate the columns with `SEP` instead of aligning them (sizes then default to --units m)"},
				&cli.StringFlag{Name: "units", Usage: "`UNIT` of sizes: h (human; the default), m, g or t"},
			},
			Action: e.do(nodeListStorage),
		},
		{
			Name:      "modify-storage",
			Usage:     "change a storage unit: the allocatable flag of an LVM physical volume (pvchange -x on the node)",
			ArgsUsage: "NODE TYPE NAME",
			Flags:     []cli.Flag{yesNoFlag("allocatable", "whether LVM may allocate new extents on the physical volume")},
			Action:    e.do(nodeModifyStorage),
		},
		{
			Name:      "repair-storage",
			Usage:     "repair a storage unit: vgreduce --removemissing of an LVM volume group (type lvm-vg only)",
			ArgsUsage: "NODE TYPE NAME",
			Flags:     []cli.Flag{&cli.BoolFlag{Name: "ignore-consistency", Usage: "accepted as Ganeti's; gnt checks no disks before"}},
			Action:    e.do(nodeRepairStorage),
		},
	}
}

func nodeListStorage(ctx context.Context, s *session, c *cli.Context, args []string) error {
	o, err := readListOpts(c, s.cfg)
	if err != nil {
		return err
	}
	fields := o.Fields
	if fields == "" {
		fields = defaultStorageFields
	}
	if strings.HasPrefix(fields, "+") {
		fields = defaultStorageFields + "," + fields[1:]
	}
	fs := strings.Split(fields, ",")
	typ := c.String("storage-type")
	op := map[string]any{"OP_ID": "OP_NODE_QUERY_STORAGE", "nodes": args, "storage_type": typ, "output_fields": fs}
	if args == nil {
		op["nodes"] = []string{}
	}
	// The checks of the opcode run here first, so bad input is a usage
	// error naming it.
	raw, _ := json.Marshal(op)
	if _, err := fsm.ParseOpcode(raw); err != nil {
		return usagef(c, "%s", fsm.AsError(err).Msg)
	}
	j, err := s.change(ctx, http.MethodPost, "/2/jobs", nil, map[string]any{"ops": []any{op}})
	if err != nil || j == nil || s.cfg.JSON() {
		return err
	}
	if len(j.OpResult) != 1 {
		return fmt.Errorf("job %d answered %d results, want 1", int64(j.ID), len(j.OpResult))
	}
	var rows [][]any
	d := json.NewDecoder(bytes.NewReader(j.OpResult[0]))
	d.UseNumber()
	if err := d.Decode(&rows); err != nil {
		return fmt.Errorf("job %d: the result is not a list of rows: %v", int64(j.ID), err)
	}
	titles := make([]string, len(fs))
	for i, f := range fs {
		titles[i] = storageTitles[f]
	}
	cells := make([][]string, len(rows))
	for i, r := range rows {
		if len(r) != len(fs) {
			return fmt.Errorf("job %d: row %d has %d values for %d fields", int64(j.ID), i, len(r), len(fs))
		}
		cells[i] = make([]string, len(fs))
		for k, v := range r {
			switch fs[k] {
			case "size", "used", "free":
				cells[i][k] = formatUnit(v, o.Units)
			case "allocatable":
				cells[i][k] = map[bool]string{true: "Y", false: "N"}[v == true]
			default:
				cells[i][k] = formatValue(v)
			}
		}
	}
	return printCells(s.stdout, titles, cells, o)
}

// storageUnitQuery is TYPE and NAME of modify-storage and repair-storage.
func storageUnitQuery(c *cli.Context, args []string) (url.Values, error) {
	if err := nArgs(c, args, 3, 3); err != nil {
		return nil, err
	}
	if e := fsm.ValidateStorageType("TYPE", args[1]); e != nil {
		return nil, usagef(c, "%s", e.Msg)
	}
	return url.Values{"storage_type": {args[1]}, "name": {args[2]}}, nil
}

func nodeModifyStorage(ctx context.Context, s *session, c *cli.Context, args []string) error {
	q, err := storageUnitQuery(c, args)
	if err != nil {
		return err
	}
	r := flagReader{c: c}
	a := r.yesNo("allocatable")
	if r.err != nil {
		return r.err
	}
	if a == nil {
		return usagef(c, "nothing to change: give --allocatable yes|no")
	}
	q.Set("allocatable", map[bool]string{true: "1", false: "0"}[*a])
	_, err = s.change(ctx, http.MethodPut, nodePath(args[0])+"/storage/modify", q, nil)
	return err
}

func nodeRepairStorage(ctx context.Context, s *session, c *cli.Context, args []string) error {
	q, err := storageUnitQuery(c, args)
	if err != nil {
		return err
	}
	if c.Bool("ignore-consistency") {
		q.Set("ignore_consistency", "1")
	}
	_, err = s.change(ctx, http.MethodPut, nodePath(args[0])+"/storage/repair", q, nil)
	return err
}
