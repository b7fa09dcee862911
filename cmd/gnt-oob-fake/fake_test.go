package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type fakeRun struct {
	stdout, stderr string
	code           int
}

func runFake(t *testing.T, config string, args ...string) fakeRun {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append([]string{"gnt-oob-fake", "--config", config}, args...), &out, &errb,
		func(string) string { return "" })
	code := exitStatus(err, &errb)
	return fakeRun{out.String(), errb.String(), code}
}

func writeConfig(t *testing.T, c Config) string {
	t.Helper()
	dir := t.TempDir()
	if c.StateDir == "" {
		c.StateDir = filepath.Join(dir, "state")
	}
	b, _ := json.Marshal(c)
	p := filepath.Join(dir, "oob-fake.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPowerStateFiles(t *testing.T) {
	cfg := writeConfig(t, Config{})
	if r := runFake(t, cfg, "power-status", "n1"); r.code != 0 || r.stdout != "{\"powered\": true}\n" {
		t.Fatalf("status of a new node: %+v", r)
	}
	if r := runFake(t, cfg, "power-off", "n1"); r.code != 0 || r.stdout != "" {
		t.Fatalf("off: %+v", r)
	}
	if r := runFake(t, cfg, "power-status", "n1"); r.stdout != "{\"powered\": false}\n" {
		t.Fatalf("status after off: %+v", r)
	}
	if r := runFake(t, cfg, "power-cycle", "n1"); r.code != 1 || !strings.Contains(r.stderr, "node n1 is powered off; power-cycle needs it on") {
		t.Fatalf("cycle when off: %+v", r)
	}
	if r := runFake(t, cfg, "health", "n1"); r.code != 0 || !strings.Contains(r.stdout, `"UNKNOWN"`) {
		t.Fatalf("health when off: %+v", r)
	}
	if r := runFake(t, cfg, "power-on", "n1"); r.code != 0 || r.stdout != "" {
		t.Fatalf("on: %+v", r)
	}
	if r := runFake(t, cfg, "power-cycle", "n1"); r.code != 0 {
		t.Fatalf("cycle: %+v", r)
	}
	if r := runFake(t, cfg, "health", "n1"); r.code != 0 || r.stdout != "[[\"fake power supply\", \"OK\"], [\"fake ambient temperature\", \"OK\"]]\n" {
		t.Fatalf("health: %+v", r)
	}
}

func TestFaultsAndUsage(t *testing.T) {
	cfg := writeConfig(t, Config{})
	var c Config
	b, _ := os.ReadFile(cfg)
	json.Unmarshal(b, &c)
	os.MkdirAll(c.StateDir, 0o755)
	os.WriteFile(filepath.Join(c.StateDir, "n2.health"), []byte(`[["Fan","CRITICAL"]]`), 0o644)
	if r := runFake(t, cfg, "health", "n2"); r.stdout != `[["Fan","CRITICAL"]]` {
		t.Errorf("health file: %+v", r)
	}
	os.WriteFile(filepath.Join(c.StateDir, "n2.fail"), []byte("2 BMC firmware too old\n"), 0o644)
	if r := runFake(t, cfg, "power-on", "n2"); r.code != 2 || r.stderr != "BMC firmware too old\n" {
		t.Errorf("injected fault: %+v", r)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"reboot", "n1"}, 2, `command "reboot" is not supported`},
		{[]string{"power-on"}, 2, "usage: gnt-oob-fake"},
		{[]string{"power-on", "../etc"}, 1, "invalid node name"},
	} {
		if r := runFake(t, cfg, tc.args...); r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: %+v", tc.args, r)
		}
	}
	if r := runFake(t, filepath.Join(t.TempDir(), "missing.json"), "power-on", "n1"); r.code != 1 || !strings.Contains(r.stderr, "reading the configuration") {
		t.Errorf("missing config: %+v", r)
	}
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"gnt-oob-fake", "power-on", "n1"}, &out, &errb, func(string) string { return "" })
	if exitStatus(err, &errb) != 1 || !strings.Contains(errb.String(), "no configuration") {
		t.Errorf("no config: %v", err)
	}
}

// TestNodeProcess: a node with a command: power-off stops the process
// (and what it started in its group), power-on starts it again detached.
func TestNodeProcess(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "node.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho started\nsleep 60 &\necho $! > "+dir+"/child\nwait\n"), 0o755)
	cfg := writeConfig(t, Config{StopTimeout: "2s", Nodes: map[string]Node{
		"n3": {Command: []string{script}, PIDFile: filepath.Join(dir, "n3.pid"), LogFile: filepath.Join(dir, "n3.log")},
	}})
	defer func() {
		if b, err := os.ReadFile(filepath.Join(dir, "n3.pid")); err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}()
	if r := runFake(t, cfg, "power-on", "n3"); r.code != 0 {
		t.Fatalf("on: %+v", r)
	}
	b, err := os.ReadFile(filepath.Join(dir, "n3.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !isProcess(pid, script) {
		t.Fatalf("pid %d is not running %s", pid, script)
	}
	if pgid, _ := syscall.Getpgid(pid); pgid != pid {
		t.Errorf("started in process group %d, want a session of its own", pgid)
	}
	// A second power-on does not start another one.
	runFake(t, cfg, "power-on", "n3")
	if b2, _ := os.ReadFile(filepath.Join(dir, "n3.pid")); string(b2) != string(b) {
		t.Errorf("started twice: %s then %s", b, b2)
	}
	var child int
	for i := 0; i < 100 && child == 0; i++ {
		cb, _ := os.ReadFile(filepath.Join(dir, "child"))
		child, _ = strconv.Atoi(strings.TrimSpace(string(cb)))
		time.Sleep(10 * time.Millisecond)
	}
	if r := runFake(t, cfg, "power-off", "n3"); r.code != 0 {
		t.Fatalf("off: %+v", r)
	}
	if isProcess(pid, script) || isProcess(child, "sleep") {
		t.Errorf("still running after power-off: %d %d", pid, child)
	}
	if r := runFake(t, cfg, "power-status", "n3"); r.stdout != "{\"powered\": false}\n" {
		t.Errorf("status: %+v", r)
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "n3.log")); !strings.Contains(string(log), "gnt-oob-fake power-on n3") || !strings.Contains(string(log), "started") {
		t.Errorf("log: %s", log)
	}
	if r := runFake(t, cfg, "power-on", "n3"); r.code != 0 {
		t.Fatalf("on again: %+v", r)
	}
	b3, _ := os.ReadFile(filepath.Join(dir, "n3.pid"))
	pid3, _ := strconv.Atoi(strings.TrimSpace(string(b3)))
	if pid3 == pid || !isProcess(pid3, script) {
		t.Errorf("not started again: %d", pid3)
	}
}
