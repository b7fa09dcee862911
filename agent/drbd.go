package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// DRBD 8.4 as the kvm driver drives it (kvm_drbd.go): the two readers of
// what the kernel says (/proc/drbd, drbdsetup show) and the runner of the
// tools (drbdsetup, drbdmeta). Both readers are parsers of outside input:
// bounded, and strict where gnt acts on what they read.

// Bounds of DRBD's tools and of what is parsed of them.
const (
	// MaxProcDRBD bounds /proc/drbd (and a drbdsetup show) as read.
	MaxProcDRBD = 1 << 20
	// MaxProcDRBDLines bounds its lines.
	MaxProcDRBDLines = 1 << 16
	// MaxDRBDMinor is DRBD's highest minor (MINORMASK).
	MaxDRBDMinor = 1<<20 - 1
	// DRBDTimeout bounds one run of a DRBD tool.
	DRBDTimeout = 60 * time.Second
	// maxDRBDWord bounds a state or role word of /proc/drbd.
	maxDRBDWord = 32
)

// DRBDRunner runs a DRBD tool ("drbdsetup" or "drbdmeta") with its
// arguments and returns its stdout. ErrNoDRBDTools says it is not
// installed.
type DRBDRunner func(ctx context.Context, tool string, args ...string) ([]byte, error)

// ErrNoDRBDTools is a DRBD tool that is not installed.
var ErrNoDRBDTools = errors.New("DRBD tools (drbd-utils) are not installed")

// RunDRBD runs drbdsetup or drbdmeta from the node's PATH, /sbin or
// /usr/sbin (Debian's /sbin/drbdsetup runs /lib/drbd/drbdsetup-84 for a
// DRBD 8.4 module), in the C locale, with DRBDTimeout, keeping at most
// MaxProcDRBD bytes of stdout.
func RunDRBD(ctx context.Context, tool string, args ...string) ([]byte, error) {
	if tool != "drbdsetup" && tool != "drbdmeta" {
		return nil, fmt.Errorf("%s is not a DRBD tool gnt runs", tool)
	}
	path := findTool(tool)
	if path == "" {
		return nil, fmt.Errorf("%w (no %s)", ErrNoDRBDTools, tool)
	}
	return runTool(ctx, path, tool, args, DRBDTimeout, MaxProcDRBD)
}

// ProcDRBD is what /proc/drbd says: the module's version and each minor
// it lists.
type ProcDRBD struct {
	// Version is the module's version ("8.4.11"); Major and Minor its
	// first two numbers.
	Version      string
	Major, Minor int
	// Devices are the minors listed, by minor. An unconfigured one
	// (allocated, but neither attached nor connected) has Connection
	// DRBDUnconfigured and no roles or disk states.
	Devices map[int]fsm.DRBDDevice
}

// DRBDUnconfigured is the connection state /proc/drbd shows of a minor
// that is neither attached nor connected.
const DRBDUnconfigured = "Unconfigured"

// ParseProcDRBD reads /proc/drbd (DRBD 8.x): the version line, then a
// line per minor, "N: cs:<conn> ro:<role>/<peer role> ds:<disk>/<peer
// disk> ..." or "N: cs:Unconfigured", each followed by indented lines:
// statistics (not read), and during a resync "[==>...] sync'ed: P%" and
// "finish: H:MM:SS". Other lines before the first minor (srcversion,
// GIT-hash) are skipped; blank lines too. Refused: more than
// MaxProcDRBD bytes or MaxProcDRBDLines lines, no version line, a minor
// line that does not read so, a minor above MaxDRBDMinor or listed
// twice, an indented line before any minor, a progress out of 0–100.
func ParseProcDRBD(data []byte) (ProcDRBD, error) {
	var p ProcDRBD
	if len(data) > MaxProcDRBD {
		return p, fmt.Errorf("/proc/drbd: %d bytes, at most %d", len(data), MaxProcDRBD)
	}
	if n := bytes.Count(data, []byte("\n")); n > MaxProcDRBDLines {
		return p, fmt.Errorf("/proc/drbd: %d lines, at most %d", n, MaxProcDRBDLines)
	}
	p.Devices = map[int]fsm.DRBDDevice{}
	cur := -1
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		if strings.TrimSpace(line) == "" {
			continue
		}
		if p.Version == "" {
			if err := p.parseVersion(line); err != nil {
				return p, fmt.Errorf("/proc/drbd line %d: %w", n, err)
			}
			continue
		}
		trimmed := strings.TrimLeft(line, " \t")
		if minor, rest, ok := minorLine(trimmed); ok {
			d, err := parseMinorLine(minor, rest)
			if err != nil {
				return p, fmt.Errorf("/proc/drbd line %d: %w", n, err)
			}
			if _, dup := p.Devices[minor]; dup {
				return p, fmt.Errorf("/proc/drbd line %d: minor %d is listed twice", n, minor)
			}
			p.Devices[minor], cur = d, minor
			continue
		}
		if trimmed == line {
			if cur >= 0 {
				return p, fmt.Errorf("/proc/drbd line %d: %q is neither a minor's line nor indented under one", n, truncate(line, 80))
			}
			continue // srcversion:, GIT-hash: and the like
		}
		if cur < 0 {
			return p, fmt.Errorf("/proc/drbd line %d: an indented line before any minor", n)
		}
		d := p.Devices[cur]
		if err := parseResyncLine(&d, trimmed); err != nil {
			return p, fmt.Errorf("/proc/drbd line %d (minor %d): %w", n, cur, err)
		}
		p.Devices[cur] = d
	}
	if p.Version == "" {
		return p, errors.New("/proc/drbd: no version line")
	}
	return p, nil
}

// parseVersion reads "version: 8.4.11 (api:1/proto:86-101)".
func (p *ProcDRBD) parseVersion(line string) error {
	rest, ok := strings.CutPrefix(line, "version: ")
	if !ok {
		return fmt.Errorf("want the version line (\"version: 8.4.x ...\"), got %q", truncate(line, 80))
	}
	v, _, _ := strings.Cut(rest, " ")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 || len(v) > 32 {
		return fmt.Errorf("version %q is not <major>.<minor>[.<point>]", truncate(v, 40))
	}
	nums := make([]int, 2)
	for i := range nums {
		x, err := strconv.Atoi(parts[i])
		if err != nil || x < 0 || x > 999 {
			return fmt.Errorf("version %q is not <major>.<minor>[.<point>]", v)
		}
		nums[i] = x
	}
	p.Version, p.Major, p.Minor = v, nums[0], nums[1]
	return nil
}

// minorLine splits "N: rest" (N a decimal minor).
func minorLine(s string) (int, string, bool) {
	num, rest, ok := strings.Cut(s, ": ")
	if !ok || num == "" || len(num) > 8 {
		return 0, "", false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	m, _ := strconv.Atoi(num)
	return m, rest, true
}

// parseMinorLine reads what follows "N: " of a minor's line.
func parseMinorLine(minor int, rest string) (fsm.DRBDDevice, error) {
	d := fsm.DRBDDevice{Minor: minor}
	if minor > MaxDRBDMinor {
		return d, fmt.Errorf("minor %d is above DRBD's highest, %d", minor, MaxDRBDMinor)
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return d, fmt.Errorf("minor %d: no connection state", minor)
	}
	cs, ok := strings.CutPrefix(fields[0], "cs:")
	if !ok || !drbdWord(cs) {
		return d, fmt.Errorf("minor %d: want cs:<connection state> first, got %q", minor, truncate(fields[0], 40))
	}
	d.Connection = cs
	if cs == DRBDUnconfigured {
		if len(fields) > 1 {
			return d, fmt.Errorf("minor %d: an unconfigured minor with more: %q", minor, truncate(rest, 80))
		}
		return d, nil
	}
	var haveRoles, haveDisks bool
	for _, f := range fields[1:] {
		var err error
		switch {
		case strings.HasPrefix(f, "ro:"), strings.HasPrefix(f, "st:"):
			d.Role, d.PeerRole, err = drbdPair(f[3:])
			haveRoles = true
		case strings.HasPrefix(f, "ds:"):
			d.Disk, d.PeerDisk, err = drbdPair(f[3:])
			haveDisks = true
		}
		if err != nil {
			return d, fmt.Errorf("minor %d: %s: %w", minor, truncate(f, 60), err)
		}
	}
	if !haveRoles || !haveDisks {
		return d, fmt.Errorf("minor %d: want ro:<role>/<peer role> and ds:<disk>/<peer disk>, got %q", minor, truncate(rest, 80))
	}
	return d, nil
}

// drbdPair splits "<local>/<peer>" of two state words.
func drbdPair(s string) (string, string, error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok || !drbdWord(a) || !drbdWord(b) {
		return "", "", errors.New("want <word>/<word>")
	}
	return a, b, nil
}

// drbdWord accepts a state word: 1 to maxDRBDWord letters.
func drbdWord(s string) bool {
	if s == "" || len(s) > maxDRBDWord {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// parseResyncLine reads the progress of a resync from an indented line
// ("[==>...] sync'ed: 18.8% (53968/61440)K", "finish: 0:00:21 speed:
// ..."; DRBD 8.3 put both on one line); other lines are statistics.
func parseResyncLine(d *fsm.DRBDDevice, s string) error {
	if _, after, ok := strings.Cut(s, "sync'ed:"); ok {
		f := strings.Fields(after)
		if len(f) == 0 || !strings.HasSuffix(f[0], "%") {
			return fmt.Errorf("sync'ed: want a percentage, got %q", truncate(after, 40))
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil || pct < 0 || pct > 100 || pct != pct {
			return fmt.Errorf("sync'ed: %q is not a percentage from 0 to 100", truncate(f[0], 20))
		}
		d.SyncPercent = &pct
	}
	if _, after, ok := strings.Cut(s, "finish:"); ok {
		f := strings.Fields(after)
		if len(f) == 0 {
			return errors.New("finish: no time")
		}
		secs, err := parseHMS(f[0])
		if err != nil {
			return fmt.Errorf("finish: %w", err)
		}
		d.EstimatedSeconds = &secs
	}
	return nil
}

// parseHMS reads H:MM:SS (hours up to 10^6).
func parseHMS(s string) (int, error) {
	p := strings.Split(s, ":")
	if len(p) != 3 {
		return 0, fmt.Errorf("%q is not H:MM:SS", truncate(s, 20))
	}
	var n [3]int
	for i, x := range p {
		v, err := strconv.Atoi(x)
		if err != nil || v < 0 || len(x) > 7 || i > 0 && v > 59 {
			return 0, fmt.Errorf("%q is not H:MM:SS", truncate(s, 20))
		}
		n[i] = v
	}
	return n[0]*3600 + n[1]*60 + n[2], nil
}

// DRBDShow is what `drbdsetup show <minor>` (DRBD 8.4) says of a minor
// that gnt acts on: its resource, its addresses (empty while it has no
// network), whether two primaries are allowed, and its backing devices
// (empty while detached).
type DRBDShow struct {
	Resource   string
	Local      string // "ipv4 10.0.0.1:11000"
	Peer       string
	TwoPrimary bool
	Minor      int // -1 when not shown
	Disk       string
	MetaDisk   string
}

// ParseDRBDShow reads drbdsetup show's configuration of one resource:
// nested blocks ("name {" ... "}") of statements ("key value...;",
// comments from '#'). It reads resource's name, _remote_host's and
// _this_host's address, net's allow-two-primaries, and the volume's
// device minor, disk and meta-disk; the rest is DRBD's settings, not
// read. Refused: more than MaxProcDRBD bytes or MaxProcDRBDLines lines,
// unbalanced braces, nesting deeper than 8, a statement without its ';',
// a resource block missing or given twice, or a bad minor.
func ParseDRBDShow(data []byte) (DRBDShow, error) {
	s := DRBDShow{Minor: -1}
	if len(data) > MaxProcDRBD {
		return s, fmt.Errorf("drbdsetup show: %d bytes, at most %d", len(data), MaxProcDRBD)
	}
	if n := bytes.Count(data, []byte("\n")); n > MaxProcDRBDLines {
		return s, fmt.Errorf("drbdsetup show: %d lines, at most %d", n, MaxProcDRBDLines)
	}
	var stack []string
	resources := 0
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		line := strings.TrimSpace(stripComment(raw))
		switch {
		case line == "":
			continue
		case line == "}":
			if len(stack) == 0 {
				return s, fmt.Errorf("drbdsetup show line %d: '}' closes no block", n)
			}
			stack = stack[:len(stack)-1]
			continue
		case strings.HasSuffix(line, "{"):
			name := strings.Join(strings.Fields(strings.TrimSuffix(line, "{")), " ")
			if len(stack) >= 8 {
				return s, fmt.Errorf("drbdsetup show line %d: blocks nested deeper than 8", n)
			}
			if len(stack) == 0 {
				res, ok := strings.CutPrefix(name, "resource ")
				if !ok || res == "" || strings.ContainsAny(res, " \"") {
					return s, fmt.Errorf("drbdsetup show line %d: want \"resource <name> {\", got %q", n, truncate(line, 60))
				}
				if resources++; resources > 1 {
					return s, fmt.Errorf("drbdsetup show line %d: a second resource", n)
				}
				s.Resource = res
				name = "resource"
			}
			stack = append(stack, name)
			continue
		}
		if !strings.HasSuffix(line, ";") {
			return s, fmt.Errorf("drbdsetup show line %d: a statement without its ';': %q", n, truncate(line, 60))
		}
		if len(stack) == 0 {
			return s, fmt.Errorf("drbdsetup show line %d: a statement outside the resource", n)
		}
		f := strings.Fields(strings.TrimSuffix(line, ";"))
		if len(f) == 0 {
			return s, fmt.Errorf("drbdsetup show line %d: an empty statement", n)
		}
		key, val := f[0], strings.Join(f[1:], " ")
		switch where := strings.Join(stack[1:], "/"); {
		case where == "_remote_host" && key == "address":
			s.Peer = val
		case where == "_this_host" && key == "address":
			s.Local = val
		case where == "net" && key == "allow-two-primaries":
			s.TwoPrimary = val == "yes"
		case strings.HasPrefix(where, "_this_host/volume ") && !strings.Contains(where[len("_this_host/volume "):], "/"):
			switch key {
			case "device":
				m, ok := strings.CutPrefix(val, "minor ")
				x, err := strconv.Atoi(m)
				if !ok || err != nil || x < 0 || x > MaxDRBDMinor {
					return s, fmt.Errorf("drbdsetup show line %d: device %q is not \"minor <0-%d>\"", n, truncate(val, 40), MaxDRBDMinor)
				}
				s.Minor = x
			case "disk":
				s.Disk = unquote(val)
			case "meta-disk":
				v, _, _ := strings.Cut(val, " ")
				s.MetaDisk = unquote(v)
			}
		}
	}
	if len(stack) != 0 {
		return s, fmt.Errorf("drbdsetup show: block %q is not closed", stack[len(stack)-1])
	}
	if resources == 0 {
		return s, errors.New("drbdsetup show: no resource")
	}
	return s, nil
}

// stripComment drops a '#' comment outside double quotes.
func stripComment(s string) string {
	q := false
	for i, c := range s {
		switch {
		case c == '"':
			q = !q
		case c == '#' && !q:
			return s[:i]
		}
	}
	return s
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// procDRBDPath is /proc/drbd, KVMConfig.ProcDRBD overriding it.
const procDRBDPath = "/proc/drbd"

// drbdHelperPath is where the drbd module says which program it runs on
// DRBD's events (its usermode_helper parameter).
const drbdHelperPath = "/sys/module/drbd/parameters/usermode_helper"

// KVMNoDRBD says why a kvm node takes no drbd disks, "" when it takes
// them: /proc/drbd must show a DRBD 8.4 module, drbdsetup and drbdmeta
// must be installed, and the module must not run drbdadm on DRBD's
// events. The leader refuses drbd instances on a node that says why not
// when they are submitted.
func KVMNoDRBD(node string) string {
	return noDRBD(node, procDRBDPath, drbdHelperPath, findTool)
}

// noDRBD is KVMNoDRBD reading proc and the module's helper parameter and
// looking tools up with find.
func noDRBD(node, proc, helperParam string, find func(string) string) string {
	var missing []string
	data, err := readBounded(proc, MaxProcDRBD)
	switch {
	case errors.Is(err, os.ErrNotExist):
		missing = append(missing, "no "+proc+": the drbd kernel module is not loaded")
	case err != nil:
		return "node " + node + " has no usable DRBD (" + err.Error() + ")"
	}
	var tools []string
	for _, t := range []string{"drbdsetup", "drbdmeta"} {
		if find(t) == "" {
			tools = append(tools, t)
		}
	}
	if len(tools) > 0 {
		missing = append(missing, "no "+strings.Join(tools, ", no ")+": drbd-utils is not installed")
	}
	if len(missing) > 0 {
		return "node " + node + " has no DRBD (" + strings.Join(missing, "; ") + ")"
	}
	p, err := ParseProcDRBD(data)
	if err != nil {
		return "node " + node + " has no usable DRBD (" + err.Error() + ")"
	}
	if p.Major != 8 || p.Minor != 4 {
		return fmt.Sprintf("node %s has DRBD %s, which is not supported: gnt drives DRBD 8.4 as Ganeti does", node, p.Version)
	}
	// drbdadm, DRBD's default helper, knows nothing of gnt's devices
	// (there is no drbd.conf for them) and fails: DRBD then drops the
	// connection of every resync (before-resync-source exit code 10).
	if data, err := readBounded(helperParam, 4096); err == nil {
		helper := strings.TrimSpace(string(data))
		if strings.HasPrefix(filepath.Base(helper), "drbdadm") && fileExists(helper) {
			return fmt.Sprintf("node %s's drbd module runs %s on DRBD's events, which drops every resync of gnt's devices "+
				"(drbdadm has no configuration of them): set its usermode_helper to /bin/true, as Ganeti does "+
				"(modprobe drbd usermode_helper=/bin/true, or echo /bin/true > %s)", node, helper, helperParam)
		}
	}
	return ""
}

// readBounded reads a file of at most max bytes (more is an error).
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is longer than %d bytes", path, max)
	}
	return data, nil
}
