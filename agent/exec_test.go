package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// hooksCopy copies testdata/<name> to a temporary directory (the scripts
// keep their state beside themselves), without the scripts in drop.
func hooksCopy(t *testing.T, name string, drop ...string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dst := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		skip := e.Name() == "README"
		for _, d := range drop {
			skip = skip || e.Name() == d
		}
		if skip {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, _ := e.Info()
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func newExec(t *testing.T, hooks string, cfg ExecConfig) *Exec {
	t.Helper()
	cfg.HooksDir, cfg.StateDir = hooks, filepath.Join(t.TempDir(), "exec")
	if cfg.Node == "" {
		cfg.Node = "node21"
	}
	e, err := NewExec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestExecLifecycle drives the shell hypervisor of testdata/hooks through
// an instance's life; every operation asked twice does nothing the second
// time (the status script says the state is there, or the journal says
// the op id was done).
func TestExecLifecycle(t *testing.T) {
	inst := testInstance()
	ctx := ctxT(t)
	e := newExec(t, hooksCopy(t, "hooks"), ExecConfig{})
	twice := func(what string, op func() (Result, error)) Result {
		t.Helper()
		r, err := op()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !r.Changed {
			t.Fatalf("%s changed nothing: %q", what, r.Output)
		}
		again, err := op()
		if err != nil || again.Changed {
			t.Fatalf("%s again: %+v %v", what, again, err)
		}
		return r
	}
	if _, err := e.Status(ctx, inst); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status of an unknown instance: %v", err)
	}
	for _, d := range inst.Disks {
		r := twice("disk-create", func() (Result, error) { return e.DiskCreate(ctx, inst, d.UUID) })
		if !strings.Contains(r.Output, "created disk") {
			t.Fatalf("disk-create output: %q", r.Output)
		}
	}
	r := twice("os-install", func() (Result, error) { return e.InstallOS(ctx, inst, "install-1") })
	if !strings.Contains(r.Output, "installing debootstrap variant 'bookworm' on 2 disk(s), reinstall=0") ||
		!strings.Contains(r.Output, "a warning on stderr") {
		t.Fatalf("os-install output (stdout and stderr): %q", r.Output)
	}
	r = twice("instance-start", func() (Result, error) { return e.Start(ctx, inst) })
	if !strings.Contains(r.Output, "with 512 MiB and 2 vcpus") {
		t.Fatalf("start output: %q", r.Output)
	}
	st, err := e.Status(ctx, inst)
	if err != nil || st.State != StateRunning || len(st.Disks) != 2 || !st.Disks[0].Attached || st.OS != inst.OS || st.LastOp == nil {
		t.Fatalf("status after start: %+v %v", st, err)
	}
	boot := st.BootID
	r = twice("instance-reboot", func() (Result, error) { return e.Reboot(ctx, inst, RebootOptions{OpID: "reboot-1"}) })
	if st, _ := e.Status(ctx, inst); st.BootID == boot {
		t.Fatal("reboot kept the boot id")
	}
	if !strings.Contains(r.Output, "hard reboot of web1.example.com for reboot-1 (shutdown within 120s, force 0)") {
		t.Fatalf("reboot output (the script gets the default shutdown timeout): %q", r.Output)
	}
	r = twice("instance-reboot", func() (Result, error) {
		return e.Reboot(ctx, inst, RebootOptions{OpID: "reboot-2", Type: RebootSoft, Timeout: 7 * time.Second})
	})
	if !strings.Contains(r.Output, "soft reboot of web1.example.com for reboot-2 (shutdown within 7s, force 0)") {
		t.Fatalf("reboot output (the script gets the shutdown timeout): %q", r.Output)
	}
	if _, err := e.Reboot(ctx, inst, RebootOptions{OpID: "reboot-3", Timeout: -time.Second}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reboot with a negative timeout: %v", err)
	}
	twice("disk-replace", func() (Result, error) { return e.DiskReplace(ctx, inst, disk1, "replace-1") })
	// Each disk once per op id: the jobs replace every disk under one.
	twice("disk-replace of the other disk", func() (Result, error) { return e.DiskReplace(ctx, inst, disk0, "replace-1") })
	twice("disk-detach", func() (Result, error) { return e.DiskDetach(ctx, inst, disk1) })
	twice("disk-attach", func() (Result, error) { return e.DiskAttach(ctx, inst, disk1) })
	if _, err := e.DiskRemove(ctx, inst, disk1); !errors.Is(err, ErrState) {
		t.Fatalf("remove of an attached disk of a running instance: %v", err)
	}
	if _, err := e.InstallOS(ctx, inst, "install-2"); !errors.Is(err, ErrState) {
		t.Fatalf("install on a running instance: %v", err)
	}
	if _, err := e.Remove(ctx, inst); !errors.Is(err, ErrState) {
		t.Fatalf("remove of a running instance: %v", err)
	}
	list, err := e.List(ctx)
	if err != nil || len(list) != 1 || list[0].UUID != inst.UUID || list[0].State != StateRunning {
		t.Fatalf("list: %+v %v", list, err)
	}
	r = twice("instance-stop", func() (Result, error) { return e.Stop(ctx, inst, StopOptions{Timeout: 7 * time.Second}) })
	if !strings.Contains(r.Output, "timeout 7 s, force 0") {
		t.Fatalf("stop output: %q", r.Output)
	}
	r = twice("os-install (reinstall)", func() (Result, error) { return e.InstallOS(ctx, inst, "install-2") })
	if !strings.Contains(r.Output, "reinstall=1") {
		t.Fatalf("reinstall output: %q", r.Output)
	}
	twice("disk-remove", func() (Result, error) { return e.DiskRemove(ctx, inst, disk1) })
	twice("instance-remove", func() (Result, error) { return e.Remove(ctx, inst) })
	if _, err := e.Status(ctx, inst); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status after remove: %v", err)
	}
}

// TestExecEnvironment: a script sees the instance in Ganeti's OS API
// variables and gnt's, nothing of gntd's own environment, and the request
// as JSON on stdin.
func TestExecEnvironment(t *testing.T) {
	t.Setenv("GNTD_SECRET", "must not leak")
	inst := testInstance()
	ctx := ctxT(t)
	hooks := hooksCopy(t, "hooks")
	e := newExec(t, hooks, ExecConfig{Node: "node21", Hypervisor: "kvm"})
	for _, d := range inst.Disks {
		must(t, "disk-create")(e.DiskCreate(ctx, inst, d.UUID))
	}
	must(t, "os-install")(e.InstallOS(ctx, inst, "job-1-0"))
	dir := filepath.Join(hooks, "state", inst.UUID)
	data, err := os.ReadFile(filepath.Join(dir, "os-install.env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	want := map[string]string{
		"OS_API_VERSION": "20", "OS_NAME": "debootstrap", "OS_VARIANT": "bookworm", "INSTANCE_OS": "debootstrap+bookworm",
		"INSTANCE_NAME": inst.Name, "INSTANCE_UUID": inst.UUID, "INSTANCE_PRIMARY_NODE": "node-uuid-21",
		"INSTANCE_SECONDARY_NODES": "node-uuid-22", "HYPERVISOR": "kvm", "DEBUG_LEVEL": "0",
		"DISK_COUNT": "2", "DISK_0_UUID": disk0, "DISK_0_SIZE": "10240", "DISK_0_ACCESS": "rw", "DISK_0_NAME": "root",
		"DISK_1_UUID": disk1, "DISK_1_SIZE": "2048",
		"NIC_COUNT": "1", "NIC_0_MAC": "aa:00:00:11:22:33", "NIC_0_IP": "192.0.2.10", "NIC_0_MODE": "bridged",
		"NIC_0_LINK": "br0", "NIC_0_BRIDGE": "br0", "NIC_0_UUID": "n0",
		"INSTANCE_BE_maxmem": "512", "INSTANCE_BE_vcpus": "2",
		"GNT_OP": "os-install", "GNT_OP_ID": "job-1-0", "GNT_NODE": "node21", "PATH": hooksPath,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"GNTD_SECRET", "HOME", "INSTANCE_REINSTALL", "DISK_1_NAME"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s is set", k)
		}
	}
	var stdin struct {
		Op       Op           `json:"op"`
		Node     string       `json:"node"`
		OpID     string       `json:"op_id"`
		Instance fsm.Instance `json:"instance"`
	}
	data, err = os.ReadFile(filepath.Join(dir, "os-install.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &stdin); err != nil {
		t.Fatalf("stdin is not JSON: %v: %s", err, data)
	}
	if stdin.Op != OpOSInstall || stdin.Node != "node21" || stdin.OpID != "job-1-0" || stdin.Instance.UUID != inst.UUID || len(stdin.Instance.Disks) != 2 {
		t.Fatalf("stdin: %+v", stdin)
	}
}

// TestExecFailures: a script that fails, hangs past its timeout, prints
// garbage where JSON is expected, is missing, or is not executable fails
// the operation with its output quoted; a missing one is "not supported".
func TestExecFailures(t *testing.T) {
	inst := testInstance()
	ctx := ctxT(t)

	t.Run("fails", func(t *testing.T) {
		e := newExec(t, hooksCopy(t, "hooks-bad", "status"), ExecConfig{})
		_, err := e.Start(ctx, inst)
		var oe *OpError
		if !errors.As(err, &oe) || oe.Op != OpStart {
			t.Fatalf("got %v, want an OpError", err)
		}
		for _, want := range []string{"checking the host", "no bridge br0 on this host", "exit status 3"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not quote %q: %v", want, err)
			}
		}
		st, err := e.List(ctx)
		if !errors.Is(err, ErrNotSupported) {
			t.Fatalf("list without a script: %+v %v", st, err)
		}
	})
	t.Run("hangs", func(t *testing.T) {
		hooks := hooksCopy(t, "hooks-bad", "status")
		e := newExec(t, hooks, ExecConfig{Timeouts: map[Op]time.Duration{OpStop: 300 * time.Millisecond}})
		start := time.Now()
		// Stop's own timeout is the shutdown timeout plus 30 s: a forced
		// stop with a tiny shutdown timeout still waits that long, so
		// the hang is cut by cancelling the call instead.
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := e.Stop(cctx, inst, StopOptions{Timeout: time.Millisecond, Force: true})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "process group was killed") || !strings.Contains(err.Error(), "shutting down...") {
			t.Fatalf("hung stop: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("hung stop returned after %v", d)
		}
		assertDead(t, filepath.Join(hooks, "child.pid"))
	})
	t.Run("timeout", func(t *testing.T) {
		hooks := hooksCopy(t, "hooks-bad", "status", "instance-stop")
		if err := os.WriteFile(filepath.Join(hooks, "instance-start"), []byte("#!/bin/sh\nsleep 300 &\necho $! > child.pid\necho booting\nwait\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		e := newExec(t, hooks, ExecConfig{Timeout: 300 * time.Millisecond})
		start := time.Now()
		_, err := e.Start(ctx, inst)
		if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") || !strings.Contains(err.Error(), "booting") {
			t.Fatalf("start past its timeout: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("returned after %v", d)
		}
		assertDead(t, filepath.Join(hooks, "child.pid"))
	})
	t.Run("garbage status", func(t *testing.T) {
		e := newExec(t, hooksCopy(t, "hooks-bad"), ExecConfig{})
		_, err := e.Status(ctx, inst)
		if err == nil || !strings.Contains(err.Error(), "no valid status JSON") || !strings.Contains(err.Error(), "Domain is running (probably)") {
			t.Fatalf("garbage status: %v", err)
		}
		// Every checked operation asks status first and fails the same way.
		if _, err := e.Start(ctx, inst); err == nil || !strings.Contains(err.Error(), "no valid status JSON") {
			t.Fatalf("start with a garbage status: %v", err)
		}
	})
	t.Run("bad status values", func(t *testing.T) {
		hooks := hooksCopy(t, "hooks-bad")
		for body, want := range map[string]string{
			`{"state": "runing"}`:                   `unknown state "runing"`,
			`{"disks": []}`:                         `no "state"`,
			`{"state": "running", "disks": [{}]}`:   "disk 0 has no uuid",
			`{"state": "running"} {"state": "x"}`:   "no valid status JSON",
			`{"state": "running", "disks": "none"}`: "no valid status JSON",
		} {
			script := "#!/bin/sh\ncat <<'EOF'\n" + body + "\nEOF\n"
			if err := os.WriteFile(filepath.Join(hooks, "status"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			e := newExec(t, hooks, ExecConfig{})
			if _, err := e.Status(ctx, inst); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("status %s: got %v, want %q", body, err, want)
			}
		}
	})
	t.Run("missing", func(t *testing.T) {
		e := newExec(t, hooksCopy(t, "hooks-bad"), ExecConfig{})
		_, err := e.DiskCreate(ctx, inst, disk0)
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "no disk-create script") {
			t.Fatalf("missing script: %v", err)
		}
		if _, err := e.MigrateFinish(ctx, inst, Migration{ID: "m"}); !errors.Is(err, ErrNotSupported) {
			t.Fatalf("missing script: %v", err)
		}
	})
	t.Run("not executable", func(t *testing.T) {
		e := newExec(t, hooksCopy(t, "hooks-bad", "status"), ExecConfig{})
		_, err := e.InstallOS(ctx, inst, "op")
		var oe *OpError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), "not an executable file") {
			t.Fatalf("non-executable script: %v", err)
		}
	})
	t.Run("output is bounded", func(t *testing.T) {
		e := newExec(t, hooksCopy(t, "hooks-bad", "status"), ExecConfig{MaxOutput: 4096})
		_, err := e.Reboot(ctx, inst, RebootOptions{OpID: "r"})
		var oe *OpError
		if !errors.As(err, &oe) {
			t.Fatalf("flooding reboot: %v", err)
		}
		if len(oe.Output) > 4096+100 || !strings.Contains(oe.Output, "more bytes of output dropped") || !strings.HasPrefix(oe.Output, "line 0 ") {
			t.Fatalf("output of %d bytes: ...%s", len(oe.Output), oe.Output[max(0, len(oe.Output)-200):])
		}
		// A failed reboot is not done: the same op id runs again.
		if _, err := e.Reboot(ctx, inst, RebootOptions{OpID: "r"}); err == nil {
			t.Fatal("a failed op id was recorded as done")
		}
	})
}

// assertDead waits for the process whose pid is in file to be gone: the
// script's child, killed with its process group.
func assertDead(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the script did not write its child's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the script's child %d survived", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecMigrate: the two halves of a migration through scripts, with
// the journal making each step a no-op the second time and refusing an
// abort that would lose the only copy.
func TestExecMigrate(t *testing.T) {
	inst := testInstance()
	ctx := ctxT(t)
	srcHooks, dstHooks := hooksCopy(t, "hooks"), hooksCopy(t, "hooks")
	src := newExec(t, srcHooks, ExecConfig{Node: "node21"})
	dst := newExec(t, dstHooks, ExecConfig{Node: "node22"})
	for _, d := range inst.Disks {
		must(t, "create on source")(src.DiskCreate(ctx, inst, d.UUID))
		must(t, "create on target")(dst.DiskCreate(ctx, inst, d.UUID))
	}
	must(t, "start")(src.Start(ctx, inst))
	st, _ := src.Status(ctx, inst)
	boot := st.BootID
	// The test's migrate-send takes the target's hooks directory for its
	// address.
	m := Migration{ID: "m1", PeerNode: "node22", Peer: dstHooks}
	if _, err := dst.MigrateFinish(ctx, inst, m); !errors.Is(err, ErrState) {
		t.Fatalf("finish before prepare: %v", err)
	}
	for i := 0; i < 2; i++ {
		c := i == 0
		if got := must(t, "prepare")(dst.MigratePrepare(ctx, inst, Migration{ID: "m1", PeerNode: "node21"})); got != c {
			t.Fatalf("prepare #%d changed=%v", i, got)
		}
		if got := must(t, "send")(src.MigrateSend(ctx, inst, m)); got != c {
			t.Fatalf("send #%d changed=%v", i, got)
		}
		if got := must(t, "finish")(dst.MigrateFinish(ctx, inst, m)); got != c {
			t.Fatalf("finish #%d changed=%v", i, got)
		}
	}
	s, err1 := src.Status(ctx, inst)
	d, err2 := dst.Status(ctx, inst)
	if err1 != nil || err2 != nil || s.State != StateStopped || d.State != StateRunning || d.BootID != boot ||
		s.Migration == nil || s.Migration.Phase != PhaseSent || d.Migration == nil || d.Migration.Phase != PhaseFinished {
		t.Fatalf("after migration: source %+v (%v), target %+v (%v)", s, err1, d, err2)
	}
	if _, err := src.MigrateAbort(ctx, inst, m); !errors.Is(err, ErrState) {
		t.Fatalf("abort on a source that sent: %v", err)
	}
	if _, err := dst.MigrateAbort(ctx, inst, m); !errors.Is(err, ErrState) {
		t.Fatalf("abort on a target that finished: %v", err)
	}
	if _, err := src.MigrateSend(ctx, inst, Migration{ID: "m2", PeerNode: "node22", Peer: dstHooks}); !errors.Is(err, ErrState) {
		t.Fatalf("send of a stopped instance: %v", err)
	}

	// An aborted preparation: the target script cleans up, then nothing
	// more to abort.
	m3 := Migration{ID: "m3", PeerNode: "node22"}
	must(t, "prepare on the old source")(src.MigratePrepare(ctx, inst, m3))
	must(t, "abort")(src.MigrateAbort(ctx, inst, m3))
	if must(t, "abort again")(src.MigrateAbort(ctx, inst, m3)) {
		t.Fatal("second abort changed something")
	}
	if st, _ := src.Status(ctx, inst); st.State != StateStopped || st.Migration.Phase != PhaseAborted {
		t.Fatalf("after abort: %+v", st)
	}
}

// TestExecDiskGrow: the disk-grow script gets the grown size; asked again
// it is not run (the status script reports the size); a smaller size is
// refused before any script runs.
func TestExecDiskGrow(t *testing.T) {
	inst := testInstance()
	ctx := ctxT(t)
	e := newExec(t, hooksCopy(t, "hooks"), ExecConfig{})
	for _, d := range inst.Disks {
		must(t, "disk-create")(e.DiskCreate(ctx, inst, d.UUID))
	}
	big := grown(inst)
	r, err := e.DiskGrow(ctx, big, disk0)
	if err != nil || !r.Changed || !strings.Contains(r.Output, "grew disk 0") {
		t.Fatalf("grow: %+v %v", r, err)
	}
	if again, err := e.DiskGrow(ctx, big, disk0); err != nil || again.Changed {
		t.Fatalf("grow again: %+v %v", again, err)
	}
	st, err := e.Status(ctx, inst)
	if err != nil || st.Disks[0].SizeMiB != big.Disks[0].SizeMiB {
		t.Fatalf("status after the grow: %+v %v", st, err)
	}
	if _, err := e.DiskGrow(ctx, inst, disk0); !errors.Is(err, ErrState) {
		t.Fatalf("a shrink: %v", err)
	}
}
