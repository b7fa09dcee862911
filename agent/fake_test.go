package agent

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

func newFake(t *testing.T, dir string) *Fake {
	t.Helper()
	f, err := NewFake(FakeConfig{Dir: dir, Node: "node21"})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// withDisks gives the instance's disks to a fake node.
func withDisks(t *testing.T, f *Fake, inst fsm.Instance) {
	t.Helper()
	for _, d := range inst.Disks {
		must(t, "disk-create")(f.DiskCreate(ctxT(t), inst, d.UUID))
	}
}

func startOn(t *testing.T, f *Fake, inst fsm.Instance) {
	t.Helper()
	withDisks(t, f, inst)
	must(t, "start")(f.Start(ctxT(t), inst))
}

// TestFakeIdempotence: every operation, asked twice, changes the record
// the first time and does nothing the second.
func TestFakeIdempotence(t *testing.T) {
	inst := testInstance()
	cases := []struct {
		name  string
		setup func(t *testing.T, f *Fake)
		op    func(ctx context.Context, f *Fake) (Result, error)
	}{
		{"disk-create", nil, func(ctx context.Context, f *Fake) (Result, error) { return f.DiskCreate(ctx, inst, disk0) }},
		{"disk-remove", func(t *testing.T, f *Fake) { withDisks(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.DiskRemove(ctx, inst, disk1) }},
		{"disk-attach", func(t *testing.T, f *Fake) { withDisks(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.DiskAttach(ctx, inst, disk0) }},
		{"disk-detach", func(t *testing.T, f *Fake) { startOn(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.DiskDetach(ctx, inst, disk1) }},
		{"disk-replace", func(t *testing.T, f *Fake) { startOn(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) {
				return f.DiskReplace(ctx, inst, disk0, "job-7-step-2")
			}},
		{"disk-grow", func(t *testing.T, f *Fake) { withDisks(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.DiskGrow(ctx, grown(inst), disk0) }},
		{"os-install", func(t *testing.T, f *Fake) { withDisks(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.InstallOS(ctx, inst, "job-7-step-3") }},
		{"instance-start", func(t *testing.T, f *Fake) { withDisks(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.Start(ctx, inst) }},
		{"instance-stop", func(t *testing.T, f *Fake) { startOn(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.Stop(ctx, inst, StopOptions{}) }},
		{"instance-reboot", func(t *testing.T, f *Fake) { startOn(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) {
				return f.Reboot(ctx, inst, RebootOptions{OpID: "job-9-step-0"})
			}},
		{"instance-remove", func(t *testing.T, f *Fake) { withDisks(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) { return f.Remove(ctx, inst) }},
		{"migrate-prepare", func(t *testing.T, f *Fake) { withDisks(t, f, inst) },
			func(ctx context.Context, f *Fake) (Result, error) {
				return f.MigratePrepare(ctx, inst, Migration{ID: "m1", PeerNode: "node22"})
			}},
		{"migrate-receive", func(t *testing.T, f *Fake) {
			withDisks(t, f, inst)
			must(t, "prepare")(f.MigratePrepare(ctxT(t), inst, Migration{ID: "m1"}))
		}, func(ctx context.Context, f *Fake) (Result, error) {
			return f.MigrateReceive(ctx, Handoff{Migration: "m1", Instance: inst, BootID: "b1", Source: "node22"})
		}},
		{"migrate-finish", func(t *testing.T, f *Fake) {
			withDisks(t, f, inst)
			must(t, "prepare")(f.MigratePrepare(ctxT(t), inst, Migration{ID: "m1"}))
			must(t, "receive")(f.MigrateReceive(ctxT(t), Handoff{Migration: "m1", Instance: inst, BootID: "b1"}))
		}, func(ctx context.Context, f *Fake) (Result, error) {
			return f.MigrateFinish(ctx, inst, Migration{ID: "m1"})
		}},
		{"migrate-abort (target)", func(t *testing.T, f *Fake) {
			withDisks(t, f, inst)
			must(t, "prepare")(f.MigratePrepare(ctxT(t), inst, Migration{ID: "m1"}))
		}, func(ctx context.Context, f *Fake) (Result, error) {
			return f.MigrateAbort(ctx, inst, Migration{ID: "m1"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, t.TempDir())
			if tc.setup != nil {
				tc.setup(t, f)
			}
			ctx := ctxT(t)
			if !must(t, "first call")(tc.op(ctx, f)) {
				t.Fatal("the first call changed nothing")
			}
			before, berr := f.Status(ctx, inst)
			res, err := tc.op(ctx, f)
			if err != nil {
				t.Fatalf("second call: %v", err)
			}
			if res.Changed {
				t.Fatalf("the second call changed something: %q", res.Output)
			}
			after, aerr := f.Status(ctx, inst)
			if comparable(before) != comparable(after) || (berr == nil) != (aerr == nil) {
				t.Fatalf("the second call changed the record:\n%s\n%s", comparable(before), comparable(after))
			}
		})
	}
}

// TestFakeChecks: operations on instances in the wrong state fail with
// typed errors and change nothing.
func TestFakeChecks(t *testing.T) {
	inst := testInstance()
	ctx := ctxT(t)
	f := newFake(t, t.TempDir())

	_, err := f.Status(ctx, inst)
	wantErr(t, "status of an unknown instance", err, ErrNotFound)
	_, err = f.Start(ctx, inst)
	wantErr(t, "start without disks", err, ErrState)
	if _, err := f.Status(ctx, inst); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a failed start left a record: %v", err)
	}
	_, err = f.DiskAttach(ctx, inst, disk0)
	wantErr(t, "attach of a missing disk", err, ErrNotFound)
	_, err = f.DiskCreate(ctx, inst, "no-such-disk")
	wantErr(t, "create of a disk not in the configuration", err, ErrInvalid)
	_, err = f.Start(ctx, fsm.Instance{UUID: "../../etc/passwd"})
	wantErr(t, "a UUID that is a path", err, ErrInvalid)
	_, err = f.InstallOS(ctx, inst, "")
	wantErr(t, "install without an op id", err, ErrInvalid)
	_, err = f.Reboot(ctx, inst, RebootOptions{OpID: "x", Type: "gentle"})
	wantErr(t, "unknown reboot type", err, ErrInvalid)

	startOn(t, f, inst)
	bigger := inst
	bigger.Disks = append([]fsm.Disk(nil), inst.Disks...)
	bigger.Disks[0].SizeMiB *= 2
	_, err = f.DiskCreate(ctx, bigger, disk0)
	wantErr(t, "create over a disk of another size", err, ErrState)
	// Growing, on a node of its own.
	g := newFake(t, t.TempDir())
	_, err = g.DiskGrow(ctx, bigger, disk0)
	wantErr(t, "grow of a disk not present", err, ErrNotFound)
	withDisks(t, g, inst)
	_, err = g.DiskGrow(ctx, inst, "no-such-disk")
	wantErr(t, "grow of a disk not in the configuration", err, ErrInvalid)
	must(t, "grow")(g.DiskGrow(ctx, bigger, disk0))
	if st, err := g.Status(ctx, inst); err != nil || st.Disks[0].SizeMiB != bigger.Disks[0].SizeMiB {
		t.Fatalf("after the grow: %+v %v", st, err)
	}
	_, err = g.DiskGrow(ctx, inst, disk0)
	wantErr(t, "grow to a smaller size (a shrink)", err, ErrState)
	must(t, "create of the grown disk at its grown size")(g.DiskCreate(ctx, bigger, disk0))
	_, err = f.Remove(ctx, inst)
	wantErr(t, "remove of a running instance", err, ErrState)
	_, err = f.InstallOS(ctx, inst, "op1")
	wantErr(t, "install on a running instance", err, ErrState)
	_, err = f.DiskRemove(ctx, inst, disk0)
	wantErr(t, "remove of an attached disk of a running instance", err, ErrState)
	_, err = f.MigratePrepare(ctx, inst, Migration{ID: "m"})
	wantErr(t, "prepare where it runs", err, ErrState)
	_, err = f.MigrateFinish(ctx, inst, Migration{ID: "m"})
	wantErr(t, "finish without a migration", err, ErrState)

	st, err := f.Status(ctx, inst)
	if err != nil || st.State != StateRunning || len(st.Disks) != 2 || !st.Disks[0].Attached || st.LastOp == nil || st.LastOp.Error == "" {
		t.Fatalf("after refused operations: %+v, %v", st, err)
	}

	// Detach, then the disk can go while the instance runs.
	must(t, "detach")(f.DiskDetach(ctx, inst, disk1))
	must(t, "remove detached")(f.DiskRemove(ctx, inst, disk1))
	// The instance's reboot of a stopped instance starts it.
	must(t, "stop")(f.Stop(ctx, inst, StopOptions{Force: true}))
	withDisks(t, f, inst)
	res, err := f.Reboot(ctx, inst, RebootOptions{OpID: "r1"})
	if err != nil || !strings.Contains(res.Output, "started") {
		t.Fatalf("reboot of a stopped instance: %+v %v", res, err)
	}
}

// TestFakeSurvivesRestart: a new Fake on the same directory sees what the
// old one did, and a reboot op id done before the restart is still done.
func TestFakeSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	inst := testInstance()
	ctx := ctxT(t)
	f := newFake(t, dir)
	startOn(t, f, inst)
	must(t, "install")(f.DiskReplace(ctx, inst, disk1, "replace-1"))
	before, err := f.Status(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	// A write that a crash cut short leaves a temporary file behind.
	if err := os.WriteFile(filepath.Join(dir, inst.UUID+".json.tmp"), []byte("{tor"), 0o600); err != nil {
		t.Fatal(err)
	}

	g := newFake(t, dir)
	after, err := g.Status(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if comparable(before) != comparable(after) || after.State != StateRunning || after.BootID == "" {
		t.Fatalf("after restart:\n%s\nwant\n%s", comparable(after), comparable(before))
	}
	if d, _ := after.Disk(disk1); d.Generation != "replace-1" {
		t.Fatalf("disk generation after restart: %+v", d)
	}
	if must(t, "replace again")(g.DiskReplace(ctx, inst, disk1, "replace-1")) {
		t.Fatal("a replace done before the restart was done again")
	}
	// Each disk once per op id: the jobs replace every disk under one.
	if !must(t, "replace of the other disk")(g.DiskReplace(ctx, inst, disk0, "replace-1")) {
		t.Fatal("the other disk's replace under the same op id did nothing")
	}
	if d, _ := mustStatus(t, g, inst).Disk(disk0); d.Generation != "replace-1" {
		t.Fatalf("the other disk's generation: %+v", d)
	}
	if _, err := os.Stat(filepath.Join(dir, inst.UUID+".json.tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	list, err := g.List(ctx)
	if err != nil || len(list) != 1 || list[0].UUID != inst.UUID {
		t.Fatalf("list: %+v %v", list, err)
	}
	must(t, "stop")(g.Stop(ctx, inst, StopOptions{}))
	must(t, "remove")(g.Remove(ctx, inst))
	if list, err := newFake(t, dir).List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after remove and restart: %+v %v", list, err)
	}
}

// twoNodes is a source and a target fake whose handoffs go straight to
// each other, as gntd sends them through the node RPC.
func twoNodes(t *testing.T) (src, dst *Fake, lost *atomic.Bool) {
	t.Helper()
	var target *Fake
	lost = &atomic.Bool{}
	src, err := NewFake(FakeConfig{Dir: t.TempDir(), Node: "node21", Send: func(ctx context.Context, m Migration, h Handoff) error {
		if m.Peer != "127.0.0.22:1811" {
			return errors.New("wrong peer " + m.Peer)
		}
		if _, err := target.MigrateReceive(ctx, h); err != nil {
			return err
		}
		if lost.Load() {
			return errors.New("connection reset (the answer was lost)")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	target, err = NewFake(FakeConfig{Dir: t.TempDir(), Node: "node22"})
	if err != nil {
		t.Fatal(err)
	}
	return src, target, lost
}

// TestFakeMigrate: prepare on the target, send from the source, finish on
// the target; the boot id travels (a live migration does not reboot) and
// the source no longer runs the instance. Every step repeated is a no-op.
func TestFakeMigrate(t *testing.T) {
	inst := testInstance()
	ctx := ctxT(t)
	src, dst, _ := twoNodes(t)
	withDisks(t, src, inst)
	must(t, "install")(src.InstallOS(ctx, inst, "install-1"))
	must(t, "start")(src.Start(ctx, inst))
	withDisks(t, dst, inst)
	boot := mustStatus(t, src, inst).BootID
	m := Migration{ID: "job-5-m", PeerNode: "node22", Peer: "127.0.0.22:1811"}

	_, err := src.MigrateSend(ctx, inst, m)
	wantErr(t, "send before the target is prepared", err, ErrState)
	if st := mustStatus(t, src, inst); st.State != StateRunning {
		t.Fatalf("a failed send stopped the source: %+v", st)
	}
	for i := 0; i < 2; i++ {
		c := i == 0
		if got := must(t, "prepare")(dst.MigratePrepare(ctx, inst, Migration{ID: m.ID, PeerNode: "node21"})); got != c {
			t.Fatalf("prepare #%d changed=%v", i, got)
		}
		if got := must(t, "send")(src.MigrateSend(ctx, inst, m)); got != c {
			t.Fatalf("send #%d changed=%v", i, got)
		}
		if got := must(t, "finish")(dst.MigrateFinish(ctx, inst, m)); got != c {
			t.Fatalf("finish #%d changed=%v", i, got)
		}
	}
	s, d := mustStatus(t, src, inst), mustStatus(t, dst, inst)
	if s.State != StateStopped || s.Migration.Phase != PhaseSent || len(s.Disks) != 2 {
		t.Fatalf("source after migration: %+v", s)
	}
	if d.State != StateRunning || d.BootID != boot || d.Migration.Phase != PhaseFinished || !d.Disks[0].Attached || d.OS != inst.OS {
		t.Fatalf("target after migration: %+v (boot id %s before)", d, boot)
	}
	// The running instance keeps what it was started with.
	if d.MemoryMiB != inst.MemoryMiB || d.VCPUs != inst.VCPUs || s.MemoryMiB != 0 || s.VCPUs != 0 {
		t.Errorf("memory/vcpus: target %d/%d, source %d/%d, started with %d/%d", d.MemoryMiB, d.VCPUs, s.MemoryMiB, s.VCPUs, inst.MemoryMiB, inst.VCPUs)
	}
	_, err = src.MigrateAbort(ctx, inst, m)
	wantErr(t, "abort on a source that sent", err, ErrState)
	_, err = dst.MigrateAbort(ctx, inst, m)
	wantErr(t, "abort on a target that finished", err, ErrState)

	// And back, with a new migration id; the old one on the source is
	// superseded by its new role as target.
	back := Migration{ID: "job-6-m", PeerNode: "node21", Peer: "127.0.0.21:1811"}
	must(t, "prepare back")(src.MigratePrepare(ctx, inst, back))
	if st := mustStatus(t, src, inst); st.State != StateIncoming {
		t.Fatalf("source as a target: %+v", st)
	}
}

func mustStatus(t *testing.T, f *Fake, inst fsm.Instance) Status {
	t.Helper()
	st, err := f.Status(ctxT(t), inst)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestFakeMigrateInterrupted: a send whose answer is lost leaves the
// source running and the target holding a received copy; sending again
// completes it, and an abort in the right order (source, then target)
// puts everything back instead.
func TestFakeMigrateInterrupted(t *testing.T) {
	inst := testInstance()
	m := Migration{ID: "m1", PeerNode: "node22", Peer: "127.0.0.22:1811"}

	t.Run("retry", func(t *testing.T) {
		ctx := ctxT(t)
		src, dst, lost := twoNodes(t)
		startOn(t, src, inst)
		withDisks(t, dst, inst)
		must(t, "prepare")(dst.MigratePrepare(ctx, inst, m))
		lost.Store(true)
		if _, err := src.MigrateSend(ctx, inst, m); err == nil {
			t.Fatal("send with a lost answer succeeded")
		}
		if s, d := mustStatus(t, src, inst), mustStatus(t, dst, inst); s.State != StateRunning || d.State != StateReceived {
			t.Fatalf("after a lost answer: source %s, target %s", s.State, d.State)
		}
		_, err := dst.Start(ctx, inst)
		wantErr(t, "start of a received copy", err, ErrState)
		lost.Store(false)
		must(t, "send again")(src.MigrateSend(ctx, inst, m))
		must(t, "finish")(dst.MigrateFinish(ctx, inst, m))
		if s, d := mustStatus(t, src, inst), mustStatus(t, dst, inst); s.State != StateStopped || d.State != StateRunning {
			t.Fatalf("after retry: source %s, target %s", s.State, d.State)
		}
	})
	t.Run("abort", func(t *testing.T) {
		ctx := ctxT(t)
		src, dst, lost := twoNodes(t)
		startOn(t, src, inst)
		withDisks(t, dst, inst)
		must(t, "prepare")(dst.MigratePrepare(ctx, inst, m))
		lost.Store(true)
		src.MigrateSend(ctx, inst, m)
		must(t, "abort source")(src.MigrateAbort(ctx, inst, m))
		must(t, "abort target")(dst.MigrateAbort(ctx, inst, m))
		if must(t, "abort target again")(dst.MigrateAbort(ctx, inst, m)) {
			t.Fatal("second abort changed something")
		}
		if s, d := mustStatus(t, src, inst), mustStatus(t, dst, inst); s.State != StateRunning || d.State != StateStopped || len(d.Disks) != 2 {
			t.Fatalf("after abort: source %+v, target %+v", s, d)
		}
	})
	t.Run("diskless target forgets an aborted preparation", func(t *testing.T) {
		ctx := ctxT(t)
		_, dst, _ := twoNodes(t)
		dl := inst
		dl.Disks, dl.DiskTemplate = nil, "diskless"
		must(t, "prepare")(dst.MigratePrepare(ctx, dl, m))
		must(t, "abort")(dst.MigrateAbort(ctx, dl, m))
		if _, err := dst.Status(ctx, dl); !errors.Is(err, ErrNotFound) {
			t.Fatalf("status after abort: %v", err)
		}
	})
}

// TestFakeFaults: injected failures before and after the effect, hangs
// ended by the context or by clearing, limited counts, delays.
func TestFakeFaults(t *testing.T) {
	inst := testInstance()
	f := newFake(t, t.TempDir())
	withDisks(t, f, inst)
	ctx := ctxT(t)

	f.InjectFault(Fault{Op: OpStart, Err: "no bridge br0", Times: 1})
	_, err := f.Start(ctx, inst)
	var oe *OpError
	if !errors.As(err, &oe) || !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), "no bridge br0") {
		t.Fatalf("injected failure: %v", err)
	}
	if st := mustStatus(t, f, inst); st.State != StateStopped || st.LastOp.Error == "" {
		t.Fatalf("a failure before the effect changed the state: %+v", st)
	}
	if len(f.Faults()) != 0 {
		t.Fatalf("a one-time fault stayed armed: %+v", f.Faults())
	}

	f.InjectFault(Fault{Op: OpStart, Instance: inst.Name, Err: "reply lost", After: true})
	if _, err := f.Start(ctx, inst); !errors.Is(err, ErrInjected) {
		t.Fatalf("failure after the effect: %v", err)
	}
	if st := mustStatus(t, f, inst); st.State != StateRunning {
		t.Fatalf("a failure after the effect did not leave it running: %+v", st)
	}
	f.ClearFaults()

	f.InjectFault(Fault{Op: OpStop, Hang: true})
	hctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = f.Stop(hctx, inst, StopOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang ended by the context: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := f.Stop(ctx, inst, StopOptions{}); done <- err }()
	time.Sleep(20 * time.Millisecond)
	f.ClearFaults()
	if err := <-done; !errors.Is(err, ErrInjected) {
		t.Fatalf("hang ended by clearing: %v", err)
	}
	if st := mustStatus(t, f, inst); st.State != StateRunning {
		t.Fatalf("a hung stop stopped it: %+v", st)
	}

	// Other instances are not held up by one instance's hang.
	other := testInstance()
	other.UUID, other.Name, other.Disks = "other-uuid", "other", nil
	f.InjectFault(Fault{Instance: inst.UUID, Hang: true})
	go f.Reboot(ctx, inst, RebootOptions{OpID: "x"})
	time.Sleep(10 * time.Millisecond)
	octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
	must(t, "start of another instance")(f.Start(octx, other))
	ocancel()
	f.ClearFaults()

	f.InjectFault(Fault{Op: OpStatus, Delay: 30 * time.Millisecond, Times: 1})
	start := time.Now()
	mustStatus(t, f, inst)
	if time.Since(start) < 30*time.Millisecond {
		t.Fatal("injected delay not applied")
	}
}

// TestFakeDelays: an operation takes its configured time only when it
// changes something; a shutdown slower than the stop timeout is cut short.
func TestFakeDelays(t *testing.T) {
	inst := testInstance()
	f, err := NewFake(FakeConfig{Dir: t.TempDir(), Delay: 40 * time.Millisecond, Delays: map[Op]time.Duration{OpStop: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	withDisks(t, f, inst)
	start := time.Now()
	must(t, "start")(f.Start(ctx, inst))
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("start took %v", d)
	}
	// A start without effect is not delayed: it changes nothing (the
	// delay is taken only by operations that change something).
	if must(t, "start again")(f.Start(ctx, inst)) {
		t.Fatal("a second start changed something")
	}
	start = time.Now()
	res, err := f.Stop(ctx, inst, StopOptions{Timeout: 50 * time.Millisecond})
	if err != nil || !strings.Contains(res.Output, "destroyed") || time.Since(start) > 5*time.Second {
		t.Fatalf("stop with a guest slower than the timeout: %+v %v after %v", res, err, time.Since(start))
	}
	must(t, "start")(f.Start(ctx, inst))
	res, err = f.Stop(ctx, inst, StopOptions{Force: true})
	if err != nil || !strings.Contains(res.Output, "forced") {
		t.Fatalf("forced stop: %+v %v", res, err)
	}
}

// grown is inst with its first disk twice as large.
func grown(inst fsm.Instance) fsm.Instance {
	g := inst
	g.Disks = append([]fsm.Disk(nil), inst.Disks...)
	g.Disks[0].SizeMiB *= 2
	return g
}

// TestFakeRunResources: a running instance reports the memory and VCPUs
// it was started with; a configuration change shows at the next start
// (a reboot), and a stopped instance reports none.
func TestFakeRunResources(t *testing.T) {
	inst := testInstance()
	inst.MemoryMiB, inst.VCPUs = 512, 2
	ctx := ctxT(t)
	f := newFake(t, t.TempDir())
	withDisks(t, f, inst)
	if st := mustStatus(t, f, inst); st.MemoryMiB != 0 || st.VCPUs != 0 {
		t.Fatalf("stopped: %+v", st)
	}
	must(t, "start")(f.Start(ctx, inst))
	bigger := inst
	bigger.MemoryMiB, bigger.VCPUs = 1024, 4
	if st := mustStatus(t, f, bigger); st.MemoryMiB != 512 || st.VCPUs != 2 {
		t.Fatalf("running, configuration changed: %d MiB %d vcpus", st.MemoryMiB, st.VCPUs)
	}
	must(t, "reboot")(f.Reboot(ctx, bigger, RebootOptions{OpID: "r1", Type: "hard"}))
	if st := mustStatus(t, f, bigger); st.MemoryMiB != 1024 || st.VCPUs != 4 {
		t.Fatalf("after reboot: %d MiB %d vcpus", st.MemoryMiB, st.VCPUs)
	}
	must(t, "stop")(f.Stop(ctx, bigger, StopOptions{}))
	if st := mustStatus(t, f, bigger); st.MemoryMiB != 0 || st.VCPUs != 0 {
		t.Fatalf("stopped again: %+v", st)
	}
}

// TestScriptStatusCheck: a status script's answer with bad figures is
// refused, naming them.
func TestScriptStatusCheck(t *testing.T) {
	for _, tc := range []struct {
		st   scriptStatus
		want string
	}{
		{scriptStatus{State: "running", Memory: 512, VCPUs: 2}, ""},
		{scriptStatus{State: "running"}, ""},
		{scriptStatus{State: "running", Memory: -1}, "negative memory -1"},
		{scriptStatus{State: "running", VCPUs: -2}, "vcpus -2"},
		{scriptStatus{}, `no "state"`},
		{scriptStatus{State: "paused"}, `unknown state "paused"`},
	} {
		err := tc.st.check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.st, err, tc.want)
		}
	}
}

// TestFakeMissingBridges: without configured bridges every bridge is
// there; with them, any other is missing.
func TestFakeMissingBridges(t *testing.T) {
	for _, c := range []struct {
		bridges []string
		want    map[string]string
	}{
		{nil, map[string]string{}},
		{[]string{"br0"}, map[string]string{"br1": BridgeAbsent}},
		{[]string{}, map[string]string{"br0": BridgeAbsent, "br1": BridgeAbsent}},
	} {
		f, err := NewFake(FakeConfig{Dir: t.TempDir(), Bridges: c.bridges})
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.MissingBridges(t.Context(), []string{"br0", "br1"})
		if err != nil || !maps.Equal(got, c.want) {
			t.Errorf("bridges %v: %v %v, want %v", c.bridges, got, err, c.want)
		}
	}
}

// TestFakeDRBDSecondaryAttach: as the kvm driver, the fake attaches a
// drbd disk on the instance's primary node only; on its secondary an
// attach assembles (nothing to simulate) and leaves it not attached.
func TestFakeDRBDSecondaryAttach(t *testing.T) {
	ctx := ctxT(t)
	inst := testInstance()
	inst.Disks = inst.Disks[:1]
	inst.Disks[0].DRBD = &fsm.DRBDLogicalID{Port: 11000, Secret: "s", Ends: []fsm.DRBDEnd{
		{Node: "node-uuid-21", Name: "node21", Minor: 0}, {Node: "node-uuid-22", Name: "node22", Minor: 0}}}
	for _, c := range []struct {
		node     string
		attached bool
	}{{"node21", true}, {"node22", false}} {
		f, err := NewFake(FakeConfig{Dir: t.TempDir(), Node: c.node})
		if err != nil {
			t.Fatal(err)
		}
		withDisks(t, f, inst)
		if changed := must(t, "attach on "+c.node)(f.DiskAttach(ctx, inst, disk0)); changed != c.attached {
			t.Errorf("attach on %s changed %v, want %v", c.node, changed, c.attached)
		}
		if d, _ := mustStatus(t, f, inst).Disk(disk0); d.Attached != c.attached {
			t.Errorf("on %s the disk is attached %v, want %v", c.node, d.Attached, c.attached)
		}
	}
}
