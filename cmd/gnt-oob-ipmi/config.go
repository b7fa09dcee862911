package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultConfig is where the configuration is looked for.
const DefaultConfig = "/etc/gnt/oob-ipmi.conf"

// BMC is how to reach one node's BMC.
type BMC struct {
	Interface    string // lanplus (IPMI 2.0) or lan (IPMI 1.5)
	Host         string
	Port         int
	User         string
	PasswordFile string
}

// Config is the parsed configuration file.
type Config struct {
	Nodes     map[string]BMC
	Ipmitool  string
	Timeout   time.Duration
	Retries   int // 0: ipmitool's default
	Privilege string
	Cipher    int // -1: ipmitool's default
}

// ParseConfig reads the configuration: node lines "node interface host
// port user password-file" and "option name value" lines; "#" starts a
// comment. Errors name the line.
func ParseConfig(text string) (*Config, error) {
	c := &Config{Nodes: map[string]BMC{}, Ipmitool: "ipmitool", Timeout: 20 * time.Second, Cipher: -1}
	for i, line := range strings.Split(text, "\n") {
		if k := strings.IndexByte(line, '#'); k >= 0 {
			line = line[:k]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		errf := func(format string, args ...any) error {
			return fmt.Errorf("line %d: "+format, append([]any{i + 1}, args...)...)
		}
		if f[0] == "option" {
			if len(f) != 3 {
				return nil, errf("want \"option NAME VALUE\"")
			}
			switch name, v := f[1], f[2]; name {
			case "ipmitool":
				c.Ipmitool = v
			case "timeout":
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 || d > time.Minute {
					return nil, errf("timeout %q: want a duration up to 1m", v)
				}
				c.Timeout = d
			case "retries":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > 10 {
					return nil, errf("retries %q: want 0 to 10", v)
				}
				c.Retries = n
			case "privilege":
				switch strings.ToUpper(v) {
				case "CALLBACK", "USER", "OPERATOR", "ADMINISTRATOR":
					c.Privilege = strings.ToUpper(v)
				default:
					return nil, errf("privilege %q: want USER, OPERATOR or ADMINISTRATOR", v)
				}
			case "cipher":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > 17 {
					return nil, errf("cipher %q: want a cipher suite id 0 to 17", v)
				}
				c.Cipher = n
			default:
				return nil, errf("unknown option %q", name)
			}
			continue
		}
		if len(f) != 6 {
			return nil, errf("want \"node interface host port user password-file\", got %d fields", len(f))
		}
		b := BMC{Interface: f[1], Host: f[2], Port: 623, User: f[4], PasswordFile: f[5]}
		if _, dup := c.Nodes[f[0]]; dup {
			return nil, errf("node %s is configured twice", f[0])
		}
		if b.Interface != "lanplus" && b.Interface != "lan" {
			return nil, errf("interface %q: want lanplus or lan", b.Interface)
		}
		if strings.HasPrefix(b.Host, "-") {
			return nil, errf("host %q must not start with '-'", b.Host)
		}
		if f[3] != "-" {
			p, err := strconv.Atoi(f[3])
			if err != nil || p < 1 || p > 65535 {
				return nil, errf("port %q: want 1 to 65535 or -", f[3])
			}
			b.Port = p
		}
		if strings.HasPrefix(b.User, "-") {
			return nil, errf("user %q must not start with '-'", b.User)
		}
		if !filepath.IsAbs(b.PasswordFile) {
			return nil, errf("password file %q: want an absolute path", b.PasswordFile)
		}
		c.Nodes[f[0]] = b
	}
	return c, nil
}
