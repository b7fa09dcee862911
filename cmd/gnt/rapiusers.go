package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gnt-cluster/gnt/rpc"
	"github.com/urfave/cli/v2"
)

// clusterRAPIUsersCommand is gnt cluster rapi-users: the API's users, in
// Ganeti's rapi_users format, kept in the replicated state.
func (e environment) clusterRAPIUsersCommand() *cli.Command {
	pwFile := &cli.StringFlag{Name: "password-file", Usage: "read the password from `FILE` (its first line; plain, {cleartext}... or {HA1}...) instead of asking"}
	return &cli.Command{
		Name:  "rapi-users",
		Usage: "the users of the API (Ganeti's rapi_users), kept by the cluster",
		Subcommands: []*cli.Command{
			{
				Name:      "import",
				Usage:     "replace every user with those of a users file (USER PASSWORD [read|write|read,write] per line)",
				ArgsUsage: "FILE",
				Action:    e.do(rapiUsersImport),
			},
			{
				Name:   "list",
				Usage:  "list the users and their access",
				Action: e.do(rapiUsersList),
			},
			{
				Name:      "add",
				Usage:     "add a user with read access (and write access with --write)",
				ArgsUsage: "USER",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "write", Usage: "the user may change the cluster"}, pwFile},
				Action:    e.do(e.rapiUserAdd),
			},
			{
				Name:      "passwd",
				Usage:     "change a user's password",
				ArgsUsage: "USER",
				Flags:     []cli.Flag{pwFile},
				Action:    e.do(e.rapiUserPasswd),
			},
			{
				Name:      "remove",
				Usage:     "remove a user",
				ArgsUsage: "USER",
				Action:    e.do(rapiUserRemove),
			},
		},
	}
}

func rapiUsersImport(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	// Checked here first, so that a bad line is named with the file's
	// name and nothing is sent; the server checks again.
	if _, err := rpc.ParseUsersFile(data); err != nil {
		return fmt.Errorf("%s: %w; no user was changed", args[0], err)
	}
	n, err := s.api.ImportRAPIUsers(ctx, string(data))
	if err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "Imported %d users from %s\n", n, args[0])
	return nil
}

func rapiUsersList(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	users, err := s.api.RAPIUsers(ctx)
	if err != nil {
		return err
	}
	if s.cfg.JSON() {
		raw, err := json.Marshal(users)
		if err != nil {
			return err
		}
		return printJSON(s.stdout, raw)
	}
	rows := make([]object, len(users))
	for i, u := range users {
		rows[i] = object{"name": u.Name, "access": u.Access}
	}
	return printTable(s.stdout, []column{
		{title: "User", value: func(o object) string { return str(o, "name") }},
		{title: "Access", value: func(o object) string { return str(o, "access") }},
	}, rows, true)
}

func (e environment) rapiUserAdd(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	pw, err := e.newPassword(c, args[0])
	if err != nil {
		return err
	}
	if err := s.api.AddRAPIUser(ctx, args[0], pw, c.Bool("write")); err != nil {
		return err
	}
	access := "read"
	if c.Bool("write") {
		access = "read,write"
	}
	fmt.Fprintf(s.stdout, "Added user %s (%s)\n", args[0], access)
	return nil
}

func (e environment) rapiUserPasswd(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	pw, err := e.newPassword(c, args[0])
	if err != nil {
		return err
	}
	if err := s.api.SetRAPIUserPassword(ctx, args[0], pw); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "Changed the password of %s\n", args[0])
	return nil
}

func rapiUserRemove(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 1, 1); err != nil {
		return err
	}
	if err := s.api.RemoveRAPIUser(ctx, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "Removed user %s\n", args[0])
	return nil
}

// newPassword reads a new password from --password-file, or asks for it
// twice on the terminal.
func (e environment) newPassword(c *cli.Context, user string) (string, error) {
	if p := c.String("password-file"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		line, _, _ := strings.Cut(string(data), "\n")
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			return "", fmt.Errorf("%s: the first line is empty; it holds the password", p)
		}
		return line, nil
	}
	pw, err := e.readPassword(fmt.Sprintf("New password for %s: ", user))
	if err != nil {
		return "", fmt.Errorf("%w: use --password-file", err)
	}
	again, err := e.readPassword("Again: ")
	if err != nil {
		return "", err
	}
	if pw != again {
		return "", errors.New("the passwords differ; nothing was changed")
	}
	if pw == "" {
		return "", errors.New("empty password; nothing was changed")
	}
	return pw, nil
}
