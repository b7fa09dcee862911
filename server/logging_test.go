package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestParseLogLevels(t *testing.T) {
	good := []struct {
		in, want string
	}{
		{"", "info"},
		{"debug", "debug"},
		{"WARN", "warn"},
		{"warning", "warn"},
		{"info,raft=debug", "info,raft=debug"},
		{" error , api=trace , raft-net=off ", "error,api=trace,raft-net=off"},
		{"raft=debug", "info,raft=debug"},
	}
	for _, g := range good {
		l, err := ParseLogLevels(g.in)
		if err != nil {
			t.Errorf("%q: %v", g.in, err)
			continue
		}
		if l.String() != g.want {
			t.Errorf("%q: %s, want %s", g.in, l, g.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"loud", `level "loud" is not one of`},
		{"info,debug", "a second default level"},
		{"info,raft=", `level "" is not one of`},
		{"info,=debug", "is not a name"},
		{"info,raft.net=debug", "is not a name"},
		{"info,raft=debug,raft=warn", `subsystem "raft" given twice`},
		{"info,,", `level "" is not one of`},
		{strings.Repeat("a", 1025), "more than 1024"},
	}
	for _, b := range bad {
		_, err := ParseLogLevels(b.in)
		if err == nil || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("%.40q: error %v, want one containing %q", b.in, err, b.msg)
		}
	}
}

func FuzzParseLogLevels(f *testing.F) {
	for _, s := range []string{"", "info", "info,raft=debug", "x=y=z", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLogLevels(s)
		if err != nil {
			return
		}
		// What parses prints back to a setting that parses the same.
		again, err := ParseLogLevels(l.String())
		if err != nil || again.String() != l.String() {
			t.Fatalf("%q → %q → %v, %v", s, l.String(), again, err)
		}
	})
}

func TestSubsystemLevels(t *testing.T) {
	var buf bytes.Buffer
	levels, err := ParseLogLevels("warn,api=debug")
	if err != nil {
		t.Fatal(err)
	}
	log := NewLogger("node11", levels, false, &buf)
	log.Info("root info")                       // below warn: dropped
	log.Named("api").Debug("api debug")         // api at debug: kept
	log.Named("api").Named("x").Debug("deep")   // api.x is api's: kept
	log.Named("maintd").Info("maintd info")     // default warn: dropped
	log.With("k", 1).Named("api").Debug("with") // With keeps the levels
	out := buf.String()
	for _, want := range []string{"api debug", "deep", "with"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing from:\n%s", want, out)
		}
	}
	for _, not := range []string{"root info", "maintd info"} {
		if strings.Contains(out, not) {
			t.Errorf("%q logged:\n%s", not, out)
		}
	}
}

func TestJSONLogLines(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger("node11", LogLevels{Default: hclog.Info}, true, &buf)
	log.Info("one", "key", "value")
	log.Named("raft").Warn("two", "error", errors.New("boom"))
	sc := bufio.NewScanner(&buf)
	n := 0
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		if line["@message"] == nil || line["@level"] == nil || line["@module"] == nil {
			t.Errorf("line lacks @message/@level/@module: %v", line)
		}
		n++
	}
	if n != 2 {
		t.Errorf("%d lines, want 2", n)
	}
}

func TestRaftPeerErrorsQuieted(t *testing.T) {
	var buf bytes.Buffer
	base := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &buf})
	now := time.Unix(1000, 0)
	l := &peerErrorLogger{Logger: base, last: map[string]time.Time{}, now: func() time.Time { return now }}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	expect := func(what, level string) {
		t.Helper()
		ls := lines()
		if len(ls) != 1 || !strings.Contains(ls[0], "["+level) {
			t.Errorf("%s: %q, want one %s line", what, ls, level)
		}
	}
	l.Error("failed to appendEntries to", "peer", "node12", "error", refused)
	expect("first failure to reach node12", "WARN")
	l.Error("failed to heartbeat to", "peer", "node12", "error", refused)
	expect("repeat within the minute", "DEBUG")
	l.Error("failed to make requestVote RPC", "target", "node13", "term", 3, "error", fmt.Errorf("wrapped: %w", syscall.ECONNRESET))
	expect("another peer", "WARN")
	l.Error("failed to appendEntries to", "peer", "node12", "error", errors.New("log not found"))
	expect("not a network failure", "ERROR")
	l.Error("failed to commit logs", "error", refused)
	expect("not a peer message", "ERROR")
	l.Log(hclog.Error, "failed to appendEntries to", "peer", "node12", "error", refused)
	expect("Log at error, repeat", "DEBUG")
	now = now.Add(peerNoise)
	l.Error("failed to appendEntries to", "peer", "node12", "error", refused)
	expect("a minute later", "WARN")
}
