package main

import (
	"bytes"
	"context"
	goflag "flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var updateCLIDoc = goflag.Bool("update-cli-doc", false, "rewrite docs/cli.md from gnt's help")

const cliDocPath = "../../docs/cli.md"

// cliReference renders the help of gnt and of every command under it,
// in the order of the command tree, as docs/cli.md.
func cliReference(t *testing.T) []byte {
	t.Helper()
	var doc bytes.Buffer
	doc.WriteString("# gnt command reference\n\n" +
		"Generated from gnt's own help (`go test ./cmd/gnt -run TestCLIReference -update-cli-doc`);\n" +
		"`TestCLIReference` fails when this file and the help differ. The settings of gntd are in\n" +
		"[config.md](config.md).\n")
	version := regexp.MustCompile(`(?m)^VERSION:\n(   .*\n)+\n?`)
	var walk func(path []string, cmds []*cli.Command)
	help := func(path []string) {
		var out bytes.Buffer
		args := append(append([]string{"gnt"}, path...), "--help")
		err := runEnv(context.Background(), args, environment{stdout: &out, stderr: &out, getenv: func(string) string { return "" }})
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		title := strings.Join(append([]string{"gnt"}, path...), " ")
		fmt.Fprintf(&doc, "\n## %s\n\n```\n%s```\n", title, version.ReplaceAllString(out.String(), ""))
	}
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			p := append(append([]string{}, path...), c.Name)
			help(p)
			walk(p, c.Subcommands)
		}
	}
	help(nil)
	walk(nil, newApp(environment{getenv: func(string) string { return "" }}).Commands)
	return doc.Bytes()
}

// TestCLIReference: docs/cli.md is gnt's help as it is.
func TestCLIReference(t *testing.T) {
	got := cliReference(t)
	if *updateCLIDoc {
		if err := os.WriteFile(cliDocPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatalf("%v (write it with -update-cli-doc)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/cli.md is not gnt's help as it is: go test ./cmd/gnt -run TestCLIReference -update-cli-doc")
	}
}
