package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// exitError carries the protocol's exit status: 1 failed, 2 unsupported.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitCode(err error) int {
	var e *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.code
	}
	return 1
}

func run(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("gnt-oob-ipmi", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := getenv("GNT_OOB_IPMI_CONFIG")
	if def == "" {
		def = DefaultConfig
	}
	config := fs.String("config", def, "configuration file")
	if err := fs.Parse(args[1:]); err != nil {
		return &exitError{2, err.Error()}
	}
	if fs.NArg() != 2 {
		return &exitError{2, fmt.Sprintf("usage: gnt-oob-ipmi [--config FILE] COMMAND NODE (got %d arguments)", fs.NArg())}
	}
	command, node := fs.Arg(0), fs.Arg(1)
	switch command {
	case "power-on", "power-off", "power-cycle", "power-status", "health":
	default:
		return &exitError{2, fmt.Sprintf("command %q is not supported", command)}
	}
	text, err := os.ReadFile(*config)
	if err != nil {
		return fmt.Errorf("reading the configuration: %v", err)
	}
	cfg, err := ParseConfig(string(text))
	if err != nil {
		return fmt.Errorf("configuration %s: %v", *config, err)
	}
	bmc, ok := cfg.Nodes[node]
	if !ok {
		return fmt.Errorf("node %s is not in %s", node, *config)
	}
	if _, err := os.Stat(bmc.PasswordFile); err != nil {
		return fmt.Errorf("node %s: password file: %v", node, err)
	}
	t := &tool{cfg: cfg, bmc: bmc}
	switch command {
	case "power-status":
		on, err := t.powered(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "{\"powered\": %v}\n", on)
	case "power-on", "power-off":
		_, err := t.run(ctx, "chassis", "power", strings.TrimPrefix(command, "power-"))
		return err
	case "power-cycle":
		on, err := t.powered(ctx)
		if err != nil {
			return err
		}
		if !on {
			return fmt.Errorf("node %s is powered off; power-cycle needs it on", node)
		}
		_, err = t.run(ctx, "chassis", "power", "cycle")
		return err
	case "health":
		out, err := t.run(ctx, "-c", "sdr", "elist")
		if err != nil {
			return err
		}
		items, err := ParseSDR(out)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(items)
		fmt.Fprintf(stdout, "%s\n", b)
	}
	return nil
}

// tool runs ipmitool against one BMC.
type tool struct {
	cfg *Config
	bmc BMC
}

// args are ipmitool's connection options for the BMC.
func (t *tool) args() []string {
	a := []string{"-I", t.bmc.Interface, "-H", t.bmc.Host, "-p", strconv.Itoa(t.bmc.Port), "-U", t.bmc.User, "-f", t.bmc.PasswordFile}
	if t.cfg.Privilege != "" {
		a = append(a, "-L", t.cfg.Privilege)
	}
	if t.cfg.Retries > 0 {
		a = append(a, "-R", strconv.Itoa(t.cfg.Retries))
	}
	if t.cfg.Cipher >= 0 && t.bmc.Interface == "lanplus" {
		a = append(a, "-C", strconv.Itoa(t.cfg.Cipher))
	}
	return a
}

// run runs one ipmitool command within the configured time and returns
// its stdout; a failure carries its stderr.
func (t *tool) run(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.cfg.Ipmitool, append(t.args(), args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	what := "ipmitool " + strings.Join(args, " ")
	bmc := t.bmc.Host + ":" + strconv.Itoa(t.bmc.Port)
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return nil, fmt.Errorf("%s: no answer from %s within %v", what, bmc, t.cfg.Timeout)
	case err != nil:
		msg := strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(errb.String()), "\n", " ; ")), " ")
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("%s on %s: %s", what, bmc, msg)
	}
	return out.Bytes(), nil
}

func (t *tool) powered(ctx context.Context) (bool, error) {
	out, err := t.run(ctx, "chassis", "power", "status")
	if err != nil {
		return false, err
	}
	return ParsePowerStatus(out)
}

// ParsePowerStatus reads `ipmitool chassis power status`: "Chassis Power
// is on" or "... off".
func ParsePowerStatus(out []byte) (bool, error) {
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "Chassis Power is "); ok {
			switch strings.TrimSpace(rest) {
			case "on":
				return true, nil
			case "off":
				return false, nil
			}
		}
	}
	return false, fmt.Errorf("unexpected answer to chassis power status: %q", truncate(out, 200))
}

// ParseSDR reads `ipmitool -c sdr elist` (name,reading,unit,status per
// line) into health items ([item, status] with the protocol's statuses).
func ParseSDR(out []byte) ([][2]string, error) {
	items := [][2]string{}
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 2 {
			return nil, fmt.Errorf("sdr line %d is not comma-separated: %q", i+1, truncate([]byte(line), 200))
		}
		name := strings.TrimSpace(f[0])
		if name == "" {
			return nil, fmt.Errorf("sdr line %d has no sensor name: %q", i+1, truncate([]byte(line), 200))
		}
		status, keep := sensorStatus(strings.TrimSpace(f[len(f)-1]))
		if keep {
			items = append(items, [2]string{name, status})
		}
	}
	return items, nil
}

// sensorStatus maps ipmitool's sensor status to a health status; keep is
// false for a sensor without a reading (ns).
func sensorStatus(s string) (status string, keep bool) {
	switch strings.ToLower(s) {
	case "ok":
		return "OK", true
	case "nc", "lnc", "unc":
		return "WARNING", true
	case "cr", "lcr", "ucr", "nr", "lnr", "unr":
		return "CRITICAL", true
	case "ns":
		return "", false
	}
	return "UNKNOWN", true
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
