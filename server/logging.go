package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// LogLevels is a parsed log level setting: a default level and levels of
// their own for subsystems (the names after the gntd's own in log lines:
// raft, raft-net, api, executor, maintd, agent, gossip, ...).
type LogLevels struct {
	Default hclog.Level
	Sub     map[string]hclog.Level
}

// ParseLogLevels parses "LEVEL[,SUBSYSTEM=LEVEL...]", for example
// "info,raft=debug,api=warn". Levels are trace, debug, info, warn, error
// and off; an empty string means info.
func ParseLogLevels(s string) (LogLevels, error) {
	out := LogLevels{Default: hclog.Info, Sub: map[string]hclog.Level{}}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	if len(s) > 1024 {
		return out, fmt.Errorf("log level: %d bytes, more than 1024", len(s))
	}
	seenDefault := false
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, lvl, sub := strings.Cut(part, "=")
		if !sub {
			lvl, name = part, ""
		}
		l, err := parseLevel(lvl)
		if err != nil {
			return out, fmt.Errorf("log level, item %d (%q): %w", i+1, part, err)
		}
		switch {
		case !sub && seenDefault:
			return out, fmt.Errorf("log level, item %d (%q): a second default level; name a subsystem (SUBSYSTEM=LEVEL)", i+1, part)
		case !sub:
			out.Default, seenDefault = l, true
		case name == "" || strings.ContainsAny(name, " \t=.") || len(name) > 64:
			return out, fmt.Errorf("log level, item %d (%q): subsystem name %q is not a name (1-64 characters, no spaces, dots or '=')", i+1, part, name)
		default:
			if _, dup := out.Sub[name]; dup {
				return out, fmt.Errorf("log level, item %d (%q): subsystem %q given twice", i+1, part, name)
			}
			out.Sub[name] = l
		}
	}
	return out, nil
}

func parseLevel(s string) (hclog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace":
		return hclog.Trace, nil
	case "debug":
		return hclog.Debug, nil
	case "info":
		return hclog.Info, nil
	case "warn", "warning":
		return hclog.Warn, nil
	case "error":
		return hclog.Error, nil
	case "off":
		return hclog.Off, nil
	}
	return hclog.NoLevel, fmt.Errorf("level %q is not one of trace, debug, info, warn, error, off", s)
}

// String gives the setting back in ParseLogLevels' form.
func (l LogLevels) String() string {
	parts := []string{l.Default.String()}
	names := make([]string, 0, len(l.Sub))
	for n := range l.Sub {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		parts = append(parts, n+"="+l.Sub[n].String())
	}
	return strings.Join(parts, ",")
}

// NewLogger is gntd's logger: hclog text lines, or JSON lines with
// jsonLines, named name, at levels.
func NewLogger(name string, levels LogLevels, jsonLines bool, out io.Writer) hclog.Logger {
	if out == nil {
		out = os.Stderr
	}
	base := hclog.New(&hclog.LoggerOptions{Name: name, Level: levels.Default, JSONFormat: jsonLines, Output: out,
		// Independent levels: a subsystem's level (and Raft's Warn)
		// must not change its parent's.
		IndependentLevels: true})
	if len(levels.Sub) == 0 {
		return base
	}
	return subsystemLogger{Logger: base, levels: levels.Sub}
}

// subsystemLogger gives named sub-loggers the level configured for their
// subsystem: the first name after the root's ("node11.raft" → "raft").
type subsystemLogger struct {
	hclog.Logger
	levels map[string]hclog.Level
}

func (l subsystemLogger) Named(name string) hclog.Logger { return l.wrap(l.Logger.Named(name)) }

func (l subsystemLogger) ResetNamed(name string) hclog.Logger {
	return l.wrap(l.Logger.ResetNamed(name))
}

func (l subsystemLogger) With(args ...any) hclog.Logger {
	return subsystemLogger{Logger: l.Logger.With(args...), levels: l.levels}
}

func (l subsystemLogger) wrap(n hclog.Logger) hclog.Logger {
	if lvl, ok := l.levelOf(n.Name()); ok {
		n.SetLevel(lvl)
	}
	return subsystemLogger{Logger: n, levels: l.levels}
}

// levelOf is the configured level of the subsystem a logger's full name
// belongs to.
func (l subsystemLogger) levelOf(full string) (hclog.Level, bool) {
	_, rest, ok := strings.Cut(full, ".")
	if !ok {
		rest = full
	}
	sub, _, _ := strings.Cut(rest, ".")
	lvl, ok := l.levels[sub]
	return lvl, ok
}

// hasLevelFor reports whether log's subsystem name has a configured level.
func hasLevelFor(log hclog.Logger, name string) bool {
	if sl, ok := log.(subsystemLogger); ok {
		_, has := sl.levels[name]
		return has
	}
	return false
}

// peerNoise is how long Raft's failures to reach one peer are logged at
// debug after the first, which is logged at warn.
const peerNoise = time.Minute

// quietPeerErrors wraps Raft's logger: hashicorp/raft logs every failed
// heartbeat, append or vote request to a peer at ERROR, many times a
// second while a member is down. A network failure to reach a peer is
// expected in a cluster built to lose members, so it is logged at WARN
// once per peer and minute, and at DEBUG in between; any other error
// stays at ERROR.
func quietPeerErrors(log hclog.Logger) hclog.Logger {
	return &peerErrorLogger{Logger: log, last: map[string]time.Time{}, now: time.Now}
}

type peerErrorLogger struct {
	hclog.Logger
	mu   sync.Mutex
	last map[string]time.Time
	now  func() time.Time
}

// peerMessages are Raft's messages about failing to reach a peer, with
// the argument naming the peer.
var peerMessages = map[string]string{
	"failed to appendEntries to":              "peer",
	"failed to heartbeat to":                  "peer",
	"failed to pipeline appendEntries":        "peer",
	"failed to start pipeline replication to": "peer",
	"failed to send snapshot to":              "peer",
	"failed to make requestVote RPC":          "target",
}

func (l *peerErrorLogger) Error(msg string, args ...any) {
	key, ok := peerMessages[msg]
	if !ok {
		l.Logger.Error(msg, args...)
		return
	}
	var peer string
	var err error
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case key:
			peer = fmt.Sprint(args[i+1])
		case "error":
			err, _ = args[i+1].(error)
		}
	}
	if peer == "" || !networkFailure(err) {
		l.Logger.Error(msg, args...)
		return
	}
	l.mu.Lock()
	now := l.now()
	first := now.Sub(l.last[peer]) >= peerNoise
	if first {
		l.last[peer] = now
		if len(l.last) > 1024 { // members come and go: forget the stale ones
			for p, t := range l.last {
				if now.Sub(t) >= peerNoise {
					delete(l.last, p)
				}
			}
		}
	}
	l.mu.Unlock()
	if first {
		l.Logger.Warn(msg+" (peer unreachable; the same failure is logged at debug for a minute)", args...)
		return
	}
	l.Logger.Debug(msg, args...)
}

func (l *peerErrorLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Error {
		l.Error(msg, args...)
		return
	}
	l.Logger.Log(level, msg, args...)
}

// networkFailure tells a failure to reach a peer (refused, reset, timed
// out, closed) from other errors.
func networkFailure(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return true
	}
	return false
}
