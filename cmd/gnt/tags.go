package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// tagCommands makes add-tags, remove-tags and list-tags for a kind of
// object. named says whether the commands take the object's name first;
// path gives the tags resource of the named object.
func (e environment) tagCommands(kind string, named bool, path func(name string) string) []*cli.Command {
	nameUsage := ""
	if named {
		nameUsage = "NAME "
	}
	// split separates the object's name from the tags.
	split := func(c *cli.Context, args []string, needTags bool) (string, []string, error) {
		min := 0
		if named {
			min++
		}
		if needTags {
			min++
		}
		max := -1
		if !needTags {
			max = min
		}
		if err := nArgs(c, args, min, max); err != nil {
			return "", nil, err
		}
		if named {
			return args[0], args[1:], nil
		}
		return "", args, nil
	}
	change := func(method string) cli.ActionFunc {
		return e.do(func(ctx context.Context, s *session, c *cli.Context, args []string) error {
			name, tags, err := split(c, args, true)
			if err != nil {
				return err
			}
			_, err = s.change(ctx, method, path(name), url.Values{"tag": tags}, nil)
			return err
		})
	}
	return []*cli.Command{
		{
			Name:      "add-tags",
			Usage:     "add tags to the " + kind,
			ArgsUsage: nameUsage + "TAG...",
			Action:    change(http.MethodPut),
		},
		{
			Name:      "remove-tags",
			Usage:     "remove tags from the " + kind,
			ArgsUsage: nameUsage + "TAG...",
			Action:    change(http.MethodDelete),
		},
		{
			Name:      "list-tags",
			Usage:     "list the tags of the " + kind,
			ArgsUsage: strings.TrimSpace(nameUsage),
			Action: e.do(func(ctx context.Context, s *session, c *cli.Context, args []string) error {
				name, _, err := split(c, args, false)
				if err != nil {
					return err
				}
				var tags []string
				raw, err := s.getInto(ctx, path(name), nil, &tags)
				if err != nil {
					return err
				}
				if s.cfg.JSON() {
					return printJSON(s.stdout, raw)
				}
				sort.Strings(tags)
				for _, t := range tags {
					fmt.Fprintln(s.stdout, t)
				}
				return nil
			}),
		},
	}
}
