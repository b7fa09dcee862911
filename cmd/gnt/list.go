package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// listing describes the bulk listing of one kind of object.
type listing struct {
	kind     string // "node"
	path     string // "/2/nodes"
	key      string // field the command-line names match ("name", "id")
	defaults []column
	titles   map[string]string // column titles of API fields
	// keep, when set, filters the objects listed.
	keep func(object) bool
	// query holds extra query parameters of the listing request.
	query url.Values
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

// list prints a listing as a table, or the server's objects with -o json.
func (s *session) list(ctx context.Context, l listing, names []string, opts listOpts) error {
	raws, objs, err := s.bulk(ctx, l, names)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		return printJSONList(s.stdout, raws)
	}
	if bad := opts.unknownFields(objs); len(bad) > 0 {
		return &usageError{msg: "unknown field(s): " + strings.Join(bad, ", ")}
	}
	return printTable(s.stdout, opts.columns(l.defaults, l.titles), objs, !opts.NoHeaders)
}

// info reads the named objects one by one (all of them when none is named)
// and prints each with show, or the server's answers with -o json: the
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
