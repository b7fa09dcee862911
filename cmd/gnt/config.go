package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// DefaultServer is the API address used when nothing else names one.
const DefaultServer = "127.0.0.1:5080"

// defaultPort is the API port added to addresses given without one
// (Ganeti's defaultRapiPort).
const defaultPort = "5080"

// Config is what the global flags and the environment select for one run.
type Config struct {
	Servers []string // API addresses, tried in order
	Output  string   // "table" or "json"
	Fields  string   // -o FIELDS of list commands (Ganeti's -o)
	// Deprecated is a warning about an old spelling used (-o json).
	Deprecated string
	Submit     bool          // print the job id instead of waiting
	Reason     string        // reason trail text for changes
	Timeout    time.Duration // overall time limit
	Consistent bool          // reads go through the leader
	Creds      credentials   // the RAPI user, if any (credentials.go)
	TLS        *tls.Config   // the API client's (clientTLS)
	// plainHTTP makes the client speak plain HTTP: only the tests'
	// in-process servers do; no flag or variable sets it.
	plainHTTP bool
}

// JSON reports whether the output is for machines.
func (c Config) JSON() bool { return c.Output == "json" }

// globalConfig copies the global flags into a Config.
func globalConfig(c *cli.Context, getenv func(string) string) (Config, error) {
	tlsCfg, err := clientTLS(c, getenv)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{
		Output:     "table",
		Submit:     c.Bool("submit"),
		Reason:     c.String("reason"),
		Timeout:    c.Duration("timeout"),
		Consistent: c.Bool("consistent"),
		TLS:        tlsCfg,
	}
	// -o was the output format before it became Ganeti's field selection
	// of list commands: "json" and "table" keep working, with a warning.
	switch o := c.String("output"); {
	case !c.IsSet("output"):
	case o == "json" || o == "table":
		cfg.Output = o
		cfg.Deprecated = fmt.Sprintf("-o %s is deprecated: -o now selects the fields of list commands, as in Ganeti; ", o)
		if o == "json" {
			cfg.Deprecated += "use --json"
		} else {
			cfg.Deprecated += "tables are the default"
		}
	case strings.TrimSpace(o) == "":
		return cfg, usagef(c, "-o needs FIELD,... (or +FIELD,... to add to the default fields)")
	default:
		cfg.Fields = o
	}
	if c.Bool("json") {
		if c.IsSet("output") && c.String("output") == "table" {
			return cfg, usagef(c, "-o table and --json contradict each other")
		}
		cfg.Output = "json"
	}
	if cfg.Timeout <= 0 {
		return cfg, usagef(c, "--timeout must be positive")
	}
	flagServers := ""
	if c.IsSet("server") {
		flagServers = c.String("server")
		if strings.TrimSpace(flagServers) == "" {
			return cfg, usagef(c, "--server needs at least one address")
		}
	}
	servers, err := resolveServers(flagServers, getenv)
	if err != nil {
		return cfg, err
	}
	cfg.Servers = servers
	if cfg.Creds, err = resolveCredentials(c.String("user"), getenv); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// resolveServers picks the API addresses: the --server flag, else
// $GNT_SERVER, else the list in the file $GNT_CONFIG (which must then
// exist), else the list in $HOME/.config/gnt/servers if that file exists,
// else DefaultServer.
func resolveServers(flagValue string, getenv func(string) string) ([]string, error) {
	if flagValue != "" {
		return parseServerList(flagValue, "--server")
	}
	if v := getenv("GNT_SERVER"); strings.TrimSpace(v) != "" {
		return parseServerList(v, "$GNT_SERVER")
	}
	if p := getenv("GNT_CONFIG"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading the server list named by $GNT_CONFIG: %w", err)
		}
		return parseServerList(string(data), p)
	}
	if home := getenv("HOME"); home != "" {
		p := filepath.Join(home, ".config", "gnt", "servers")
		data, err := os.ReadFile(p)
		switch {
		case err == nil:
			return parseServerList(string(data), p)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("reading the server list: %w", err)
		}
	}
	return []string{DefaultServer}, nil
}

// parseServerList reads addresses separated by commas, blanks or newlines;
// "#" starts a comment that runs to the end of the line.
func parseServerList(text, source string) ([]string, error) {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
			addr, err := normalizeServer(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", source, err)
			}
			out = append(out, addr)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no server address", source)
	}
	return out, nil
}

// normalizeServer turns "host", "host:port", "[v6]:port", "v6" or
// "http://host:port/" into host:port.
func normalizeServer(s string) (string, error) {
	a := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://"), "/")
	if strings.Contains(a, "/") {
		return "", fmt.Errorf("bad server address %q: want HOST[:PORT] (the API is HTTPS)", s)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]"), defaultPort
		if strings.Contains(host, ":") && net.ParseIP(host) == nil {
			return "", fmt.Errorf("bad server address %q: want HOST[:PORT]", s)
		}
	}
	if host == "" {
		return "", fmt.Errorf("bad server address %q: no host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("bad server address %q: bad port", s)
	}
	return net.JoinHostPort(host, port), nil
}
