package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

// devOOB sets `gntd dev` up with gnt-oob-fake as every node's OOB helper:
// each member's power is its gntd process, so powering a dev node off
// stops its gntd and powering it on starts it again (from the command
// line in dev.json). The helper's state and the pid files live in
// <data-dir>/oob-fake; the cluster's oob_program is a small wrapper script
// that passes the helper its configuration, in <data-dir>/oob-programs,
// every member's OOB programs directory (one directory for all: the
// cluster names one path, and whichever candidate leads runs it).
type devOOB struct {
	helper string // the gnt-oob-fake binary
	dir    string
	// oldWrapper is where dev put the wrapper before the OOB programs
	// directory: a cluster that still names it is moved to the new one.
	oldWrapper string
	config     string
	wrapper    string
	out        *syncWriter
}

// devOOBProgramsDir is the OOB programs directory of every dev member.
func devOOBProgramsDir(o DevOptions) string { return filepath.Join(o.DataDir, "oob-programs") }

// newDevOOB finds gnt-oob-fake (DevOptions.OOBHelper, else next to the
// gntd binary); nil when there is none, and dev runs without OOB.
func newDevOOB(o DevOptions, out *syncWriter) *devOOB {
	helper := o.OOBHelper
	if helper == "" {
		helper = filepath.Join(filepath.Dir(o.Binary), "gnt-oob-fake")
	}
	if st, err := os.Stat(helper); err != nil || st.IsDir() || st.Mode().Perm()&0o100 == 0 {
		out.Printf("[dev] no gnt-oob-fake at %s: the nodes get no OOB helper (make build puts it beside gntd)\n", helper)
		return nil
	}
	abs, err := filepath.Abs(helper)
	if err != nil {
		return nil
	}
	progs, err := filepath.Abs(devOOBProgramsDir(o))
	if err != nil {
		return nil
	}
	d := &devOOB{helper: abs, dir: filepath.Join(o.DataDir, "oob-fake"), config: filepath.Join(o.DataDir, "oob-fake.json"),
		wrapper: filepath.Join(progs, "oob-fake.sh"), oldWrapper: filepath.Join(filepath.Dir(progs), "oob-fake.sh"), out: out}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		out.Printf("[dev] oob-fake: %v\n", err)
		return nil
	}
	return d
}

func (d *devOOB) pidFile(name string) string { return filepath.Join(d.dir, name+".pid") }

// recordPID notes the pid of a member's gntd for the helper.
func (d *devOOB) recordPID(name string, pid int) {
	if d == nil {
		return
	}
	_ = os.WriteFile(d.pidFile(name), []byte(strconv.Itoa(pid)+"\n"), 0o644)
	// A member dev starts is powered on, whatever an earlier run left.
	_ = os.WriteFile(filepath.Join(d.dir, name+".power"), []byte("on\n"), 0o644)
}

// setUp writes the helper's configuration and wrapper and makes the
// wrapper the cluster's oob_program, unless the cluster has another one.
func (d *devOOB) setUp(ctx context.Context, client *rpc.Client, members []DevMember) error {
	if d == nil {
		return nil
	}
	type node struct {
		Command []string `json:"command"`
		PIDFile string   `json:"pid_file"`
		LogFile string   `json:"log_file"`
	}
	cfg := struct {
		StateDir string          `json:"state_dir"`
		Nodes    map[string]node `json:"nodes"`
	}{StateDir: d.dir, Nodes: map[string]node{}}
	for _, m := range members {
		cfg.Nodes[m.Name] = node{Command: m.Command, PIDFile: d.pidFile(m.Name), LogFile: filepath.Join(m.DataDir, "gntd-oob.log")}
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := writeFileAtomic(d.config, append(b, '\n'), 0o644); err != nil {
		return err
	}
	script := fmt.Sprintf("#!/bin/sh\n# gntd dev: the nodes' OOB helper (see %s)\nexec %s --config %s \"$@\"\n",
		d.config, shellQuote(d.helper), shellQuote(d.config))
	if err := writeFileAtomic(d.wrapper, []byte(script), 0o755); err != nil {
		return err
	}
	// The whitelist refuses a helper writable by group or others.
	if err := os.Chmod(d.wrapper, 0o755); err != nil {
		return err
	}
	var info rpc.ClusterInfo
	if _, err := client.Do(ctx, "GET", "/2/info", nil, nil, &info); err != nil {
		return err
	}
	switch cur, _ := info.NDParams["oob_program"].(string); cur {
	case d.wrapper:
		return nil
	case "", d.oldWrapper:
	default:
		d.out.Printf("[dev] the cluster's oob_program is %s; leaving it\n", cur)
		return nil
	}
	id, meta, err := client.ModifyCluster(ctx, map[string]any{"ndparams": map[string]any{"oob_program": d.wrapper}}, "gntd dev: gnt-oob-fake")
	if err != nil {
		return err
	}
	if j, err := client.WaitJob(ctx, id, meta.Index); err != nil || j.Status != "success" {
		return fmt.Errorf("setting oob_program: %v %v", err, j)
	}
	d.out.Printf("[dev] OOB helper: gnt-oob-fake (%s); try: gnt node power status\n", d.wrapper)
	return nil
}

// stopRestarted stops, when dev ends, the gntds the helper started again
// after a power-off (they are not dev's children).
func (d *devOOB) stopRestarted(children []*devChild) {
	if d == nil {
		return
	}
	var pids []int
	for _, c := range children {
		b, err := os.ReadFile(d.pidFile(c.member.Name))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == c.member.PID || !runs(pid, c.member.Command[0]) {
			continue
		}
		d.out.Printf("[dev] stopping %s (pid %d, started by gnt-oob-fake)\n", c.member.Name, pid)
		syscall.Kill(-pid, syscall.SIGTERM)
		pids = append(pids, pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for runs(pid, "") && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if runs(pid, "") {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// runs reports whether pid is a live process (not a zombie) running
// program (any, when program is "").
func runs(pid int, program string) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return false
		}
	}
	if program == "" {
		return true
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return argv0 == program
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
