package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gnt-cluster/gnt/qlang"
	"github.com/urfave/cli/v2"
)

// filterFlag is Ganeti's -F/--filter of list commands: the argument is a
// query filter, not names.
func filterFlag() cli.Flag {
	return &cli.BoolFlag{Name: "filter", Aliases: []string{"F"},
		Usage: "treat the one argument as a query filter, e.g. 'pinst_cnt > 0 and not offline' (see docs/api.md, \"Queries\")"}
}

// filterChars are Ganeti's QLANG_FILTER_DETECTION_CHARS: one argument
// holding any of them is a filter even without --filter (no name holds
// them).
const filterChars = "()=/!~'\"\\<> \t\n\r\f\v"

// globChars are Ganeti's QLANG_GLOB_DETECTION_CHARS.
const globChars = "*?"

func hasGlob(args []string) bool {
	for _, a := range args {
		if strings.ContainsAny(a, globChars) {
			return true
		}
	}
	return false
}

// applyFilter turns a filter argument into the listing's keep: the
// filter, parsed here (so that a bad one is refused before anything is
// sent), is evaluated by the server's /2/query/{resource}, and only the
// objects it names are listed. Names with glob characters become a
// filter too. Without either it returns l and args as they are.
func (s *session) applyFilter(ctx context.Context, c *cli.Context, l listing, resource string, args []string) (listing, []string, error) {
	force := c.Bool("filter")
	var f []any
	switch {
	case force || (len(args) == 1 && strings.ContainsAny(args[0], filterChars)):
		if len(args) != 1 {
			return l, nil, usagef(c, "--filter takes exactly one argument, the filter, got %d", len(args))
		}
		var err error
		if f, err = qlang.Parse(args[0]); err != nil {
			return l, nil, usagef(c, "%v", err)
		}
	case hasGlob(args):
		// Names with * or ? are DNS-name globs, as in Ganeti: the
		// listing is of the objects matching any of the names.
		f = []any{qlang.OpOr}
		for _, a := range args {
			if strings.ContainsAny(a, globChars) {
				f = append(f, []any{qlang.OpRegexp, l.key, qlang.GlobPattern(a)})
			} else {
				f = append(f, []any{qlang.OpEqual, l.key, a})
			}
		}
	default:
		return l, args, nil
	}
	var q url.Values
	if s.cfg.Consistent {
		q = with(nil, "consistent", "1")
	}
	var res struct {
		Data [][][2]any `json:"data"`
	}
	body := map[string]any{"fields": []string{l.key}, "qfilter": f}
	if _, err := s.api.Do(ctx, http.MethodPut, "/2/query/"+resource, q, body, &res); err != nil {
		return l, nil, err
	}
	keep := map[string]bool{}
	for _, row := range res.Data {
		if len(row) != 1 {
			return l, nil, fmt.Errorf("the server's query answer has %d values per item, want 1", len(row))
		}
		keep[fmt.Sprint(row[0][1])] = true
	}
	prev := l.keep
	l.keep = func(o object) bool { return keep[str(o, l.key)] && (prev == nil || prev(o)) }
	return l, nil, nil
}
