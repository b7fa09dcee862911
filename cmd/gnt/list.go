package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"
)

// listing describes the bulk listing of one kind of object.
type listing struct {
	kind     string // "node"
	path     string // "/2/nodes"
	key      string // field the command-line names match ("name", "id")
	defaults []listColumn
	fields   []field // the fields -o selects among, for list-fields
	// keep, when set, filters the objects listed.
	keep func(object) bool
	// query holds extra query parameters of the listing request.
	query url.Values
	// derive, when set, adds to each object the fields -o may name that
	// the listing derives from others (an instance's nic.count, be/...).
	derive func(object)
}

// bulk reads all objects of a kind, both as the server sent them and
// decoded, keeping only those named (in the order named) when names are
// given. Unknown names are an error.
func (s *session) bulk(ctx context.Context, l listing, names []string) ([]json.RawMessage, []object, error) {
	var raws []json.RawMessage
	q := url.Values{"bulk": {"1"}}
	for k, v := range l.query {
		q[k] = v
	}
	if _, err := s.getInto(ctx, l.path, q, &raws); err != nil {
		return nil, nil, err
	}
	objs := make([]object, len(raws))
	for i, r := range raws {
		if err := decode(r, &objs[i]); err != nil {
			return nil, nil, err
		}
	}
	if l.keep != nil {
		var kr []json.RawMessage
		var ko []object
		for i, o := range objs {
			if l.keep(o) {
				kr, ko = append(kr, raws[i]), append(ko, o)
			}
		}
		raws, objs = kr, ko
	}
	if len(names) == 0 {
		return raws, objs, nil
	}
	var (
		outRaw  []json.RawMessage
		outObj  []object
		missing []string
	)
	for _, n := range names {
		found := false
		for i, o := range objs {
			if str(o, l.key) == n || str(o, "uuid") == n {
				outRaw, outObj = append(outRaw, raws[i]), append(outObj, o)
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("unknown %s(s): %s", l.kind, strings.Join(missing, ", "))
	}
	return outRaw, outObj, nil
}

// list prints a listing as a table (Ganeti's list options: -o,
// --no-headers, --separator, --units), or the server's objects with
// --json.
func (s *session) list(ctx context.Context, l listing, names []string, c *cli.Context) error {
	opts, err := readListOpts(c, s.cfg)
	if err != nil {
		return err
	}
	raws, objs, err := s.bulk(ctx, l, names)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSONList(s.stdout, raws)
	}
	if l.derive != nil {
		for _, o := range objs {
			l.derive(o)
		}
	}
	if bad := opts.unknownFields(l.fields, objs); len(bad) > 0 {
		return usagef(c, "unknown field(s) of %ss: %s (see 'gnt %s list-fields')", l.kind, strings.Join(bad, ", "), l.noun())
	}
	cols := opts.columns(l.defaults, l.fields)
	titles := make([]string, len(cols))
	for i, col := range cols {
		titles[i] = col.title
	}
	rows := make([][]string, len(objs))
	for i, o := range objs {
		rows[i] = make([]string, len(cols))
		for j, col := range cols {
			rows[i][j] = opts.cell(col, o, l.fields)
		}
	}
	return printCells(s.stdout, titles, rows, opts)
}

// noun is the command noun of the listing ("node group" is "group").
func (l listing) noun() string {
	if l.kind == "node group" {
		return "group"
	}
	return l.kind
}

// listFieldsCommand is `gnt NOUN list-fields [FIELD...]`: the fields -o
// takes, with Ganeti's columns Name, Type, Title, Description. It needs no
// server.
func listFieldsCommand(l listing) *cli.Command {
	return &cli.Command{
		Name:      "list-fields",
		Usage:     "list the fields " + l.noun() + " list -o takes, with their descriptions",
		ArgsUsage: "[FIELD...]",
		Flags:     listFieldsFlags(),
		Action: func(c *cli.Context) error {
			args, err := lateFlags(c)
			if errors.Is(err, errHelpAsked) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, g := range []string{"output", "json"} {
				if c.IsSet(g) {
					return usagef(c, "list-fields takes --no-headers and --separator, not --%s", g)
				}
			}
			opts := listOpts{NoHeaders: c.Bool("no-headers"), Separator: c.String("separator")}
			if c.IsSet("separator") && (opts.Separator == "" || strings.ContainsAny(opts.Separator, "\n\r")) {
				return usagef(c, "--separator %q: want a non-empty separator without line breaks", opts.Separator)
			}
			defs := l.fields
			if len(args) > 0 {
				defs = nil
				var bad []string
				for _, a := range args {
					d, ok := lookupDef(l.fields, a)
					if !ok {
						bad = append(bad, a)
					}
					defs = append(defs, d)
				}
				if len(bad) > 0 {
					return usagef(c, "unknown field(s) of %ss: %s", l.kind, strings.Join(bad, ", "))
				}
			}
			rows := make([][]string, len(defs))
			for i, d := range defs {
				rows[i] = []string{d.name, d.kind, d.title, d.desc}
			}
			return printCells(c.App.Writer, []string{"Name", "Type", "Title", "Description"}, rows, opts)
		},
	}
}

// info reads the named objects one by one (all of them when none is named)
// and prints each with show, or the server's answers with --json: the
// object for one name, an array for several or none.
func (s *session) info(ctx context.Context, l listing, names []string, show func(object)) error {
	var (
		raws []json.RawMessage
		objs []object
	)
	if len(names) == 0 {
		var err error
		if raws, objs, err = s.bulk(ctx, l, nil); err != nil {
			return err
		}
	}
	for _, n := range names {
		var o object
		raw, err := s.getInto(ctx, l.path+"/"+url.PathEscape(n), nil, &o)
		if err != nil {
			return err
		}
		raws, objs = append(raws, raw), append(objs, o)
	}
	if s.cfg.JSON() {
		if len(names) == 1 {
			return printJSON(s.stdout, raws[0])
		}
		return printJSONList(s.stdout, raws)
	}
	for _, o := range objs {
		show(o)
	}
	return nil
}
