package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentRefusesBadConfiguration: flags and config files are checked
// before anything starts, with a message naming what is wrong.
func TestAgentRefusesBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gntd.json")
	if err := os.WriteFile(cfg, []byte(`{"name": "n1", "bind": "127.0.0.1", "colour": "blue"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--name", "bad_name!", "--bind", "127.0.0.1"}, "--name"},
		{[]string{"--name", "n1", "--bind", "not-an-ip"}, "--bind"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--api-port", "70000"}, "--api-port"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--join", "nocolon"}, "--join"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--profile", "fast"}, "--profile"},
		{[]string{"--config", cfg}, "colour"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--hypervisor", "xen"}, "--hypervisor"},
		{[]string{"--config", filepath.Join(dir, "missing.json")}, "config file"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--max-conns", "-2"}, "--max-conns (-2)"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--max-conns-per-ip", "-5"}, "--max-conns-per-ip (-5)"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--max-conns", "100", "--max-conns-per-ip", "101"}, "per-address connection cap (101) is above the overall cap (100)"},
		{[]string{"--name", "n1", "--bind", "127.0.0.1", "--max-conns", "100"}, "per-address connection cap (512) is above the overall cap (100)"},
	}
	for _, tc := range cases {
		args := append([]string{"gntd", "agent", "--data-dir", filepath.Join(dir, "data")}, tc.args...)
		var out bytes.Buffer
		err := run(context.Background(), args, &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestHelpPlaceholders: a flag's usage names its value with at most one
// back-quoted word (urfave/cli takes the first back-quoted text as the
// placeholder: `make guest` in --hypervisor's usage made it read
// "--hypervisor make guest").
func TestHelpPlaceholders(t *testing.T) {
	for _, cmd := range []string{"agent", "dev"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"gntd", cmd, "--help"}, &out, &out); err != nil {
			t.Fatalf("gntd %s --help: %v", cmd, err)
		}
		for _, line := range strings.Split(out.String(), "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "--") {
				continue
			}
			// "--flag PLACEHOLDER  usage" or "--flag  usage" (a bool): what
			// stands before the two spaces names the value, in capitals.
			head, _, _ := strings.Cut(line, "  ")
			for _, w := range strings.Fields(head) {
				w = strings.TrimSuffix(w, ",")
				if strings.HasPrefix(w, "-") || w == "value" || strings.ToUpper(w) == w {
					continue
				}
				t.Errorf("gntd %s: %q: %q is no value name (a second back-quoted text in the usage?)", cmd, line, w)
			}
		}
	}
}
