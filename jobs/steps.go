package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Step is one unit of an opcode's work. Its completion is recorded in the
// state (fsm.StepRecord) before the next step starts, so a new leader
// resumes an opcode at its first unrecorded step. A step must therefore be
// safe to run again: it either is idempotent (asking for a state the world
// is already in succeeds without effect) or it looks at the world first.
type Step struct {
	Name string
	Run  func(ctx context.Context, sc *StepContext) (result any, err error)
	// NoRepeat marks a step that must not simply run again when a leader
	// died while it may have been in progress (say, a migration that has
	// started moving memory). After a failover, Check looks at the world
	// first and says whether the step's effect is there already (then it
	// is recorded without running) or not (then it runs). A NoRepeat step
	// without Check cannot resume: the opcode fails with a reason naming
	// the failover.
	NoRepeat bool
	Check    func(ctx context.Context, sc *StepContext) (done bool, err error)
	// Retry marks a step that only decides and records (a placement):
	// when the state refuses its record because another job changed what
	// it decided on, it runs again (a bounded number of times).
	Retry bool
}

// StepContext is what a running step sees: the job and opcode, whether
// the opcode was resumed by another executor, and a log.
type StepContext struct {
	Job     *fsm.Job
	OpIndex int
	// Index is the step's position in the opcode's steps.
	Index int
	// Resumed is true when an earlier executor started the opcode.
	Resumed bool
	logs    []string
	changes []fsm.StepChange
	sleep   func(ctx context.Context, d time.Duration) error
	// dryRun is set for an opcode with dry_run: the steps run their
	// checks, but their agent calls, sleeps and configuration changes
	// are only described (would), never made.
	dryRun bool
	would  []string
	// name gives the name of a node or instance UUID (the UUID itself
	// when the state has no such object), for a dry run's account.
	name func(uuid string) string
	// stored reads an instance's stored record by UUID (nil: none), for
	// the secrets of drbd disks in the records the step proposes.
	stored func(uuid string) *fsm.Instance
}

// DryRun reports whether the opcode is a dry run (see Executor.runOp).
func (sc *StepContext) DryRun() bool { return sc.dryRun }

// Change queues a configuration change made by the step; it is applied
// in one transaction with the step's record, or the step fails. In a dry
// run the change is described instead. This is the one place where the
// records steps propose get the secrets of their new drbd disks
// (withDRBDSecrets).
func (sc *StepContext) Change(c fsm.StepChange) {
	if sc.dryRun {
		sc.wouldf("record %s", describeChange(c, sc.nameOf))
		return
	}
	if p := c.InstancePut; p != nil {
		var old *fsm.Instance
		if sc.stored != nil {
			old = sc.stored(p.Instance.UUID)
		}
		c.InstancePut = &fsm.InstancePut{Instance: withDRBDSecrets(p.Instance, old), ExpectSerial: p.ExpectSerial}
	}
	sc.changes = append(sc.changes, c)
}

// wouldf notes, in a dry run, what the opcode would have done: in its log
// and in its result.
func (sc *StepContext) wouldf(format string, args ...any) {
	l := fmt.Sprintf(format, args...)
	sc.would = append(sc.would, l)
	sc.logs = append(sc.logs, "dry run: would "+l)
}

func (sc *StepContext) nameOf(uuid string) string {
	if sc.name == nil || uuid == "" {
		return uuid
	}
	return sc.name(uuid)
}

// describeChange names a configuration change for a dry run's account.
func describeChange(c fsm.StepChange, name func(string) string) string {
	switch {
	case c.InstancePut != nil:
		in := c.InstancePut.Instance
		sec := ""
		if len(in.SecondaryNodes) > 0 {
			sec = ", secondary " + name(in.SecondaryNodes[0])
		}
		return fmt.Sprintf("instance %s (primary %s%s, admin state %s, %d MiB memory, %d vcpus)",
			in.Name, name(in.PrimaryNode), sec, in.AdminState, in.MemoryMiB, in.VCPUs)
	case c.InstanceRemove != nil:
		return fmt.Sprintf("the removal of instance %s", name(c.InstanceRemove.UUID))
	case c.ReservationMove != nil:
		return fmt.Sprintf("the move of reservation %s to %s", name(c.ReservationMove.UUID), name(c.ReservationMove.PrimaryNode))
	}
	b, _ := json.Marshal(c)
	return "the configuration change " + string(b)
}

// Logf adds a line to the opcode's log; it is recorded with the step.
func (sc *StepContext) Logf(format string, args ...any) {
	sc.logs = append(sc.logs, fmt.Sprintf(format, args...))
}

// Sleep waits for d or until ctx ends; a dry run only says it would.
func (sc *StepContext) Sleep(ctx context.Context, d time.Duration) error {
	if sc.dryRun {
		if d > 0 {
			sc.wouldf("wait %s", d)
		}
		return ctx.Err()
	}
	return sc.sleep(ctx, d)
}

// stepsFor returns the steps of an executor opcode, or an error for an
// opcode this gntd cannot run. st is the opcode's record: steps that an
// earlier executor decided (a recorded plan) are rebuilt from it.
func (e *Executor) stepsFor(op fsm.Opcode, st *fsm.OpState) ([]Step, error) {
	switch o := op.(type) {
	case *fsm.OpTestDelay:
		return testDelaySteps(o)
	case *fsm.OpTestCrash:
		return e.testCrashSteps(o), nil
	case *fsm.OpInstanceCreate:
		return e.createSteps(o), nil
	case *fsm.OpInstanceRemove:
		return e.removeSteps(o), nil
	case *fsm.OpInstanceStartup:
		return []Step{startStep(e, o.Ref(), o.NoRemember)}, nil
	case *fsm.OpInstanceShutdown:
		return []Step{stopStep(e, o.Ref(), o.Timeout, false, o.NoRemember, o.IgnoreOfflineNodes)}, nil
	case *fsm.OpInstanceReboot:
		return []Step{e.rebootStep(o)}, nil
	case *fsm.OpInstanceFailover:
		if e.forthcoming(o.Ref()) {
			return []Step{e.reservationMoveStep(o.Ref(), o.TargetNode)}, nil
		}
		return e.failoverStepsFor(o, st), nil
	case *fsm.OpInstanceMigrate:
		if e.forthcoming(o.Ref()) && !o.Cleanup {
			return []Step{e.reservationMoveStep(o.Ref(), o.TargetNode)}, nil
		}
		return e.migrateSteps(o, st), nil
	case *fsm.OpInstanceReinstall:
		return e.reinstallSteps(o), nil
	case *fsm.OpInstanceReplaceDisks:
		return e.replaceDisksSteps(o, st), nil
	case *fsm.OpInstanceRecreateDisks:
		return e.recreateDisksSteps(o, st), nil
	case *fsm.OpInstanceRename:
		return []Step{e.renameStep(o)}, nil
	case *fsm.OpInstanceSetParams:
		return e.setParamsSteps(o), nil
	case *fsm.OpInstanceQueryData:
		return e.queryDataSteps(o), nil
	case *fsm.OpInstanceMultiAlloc:
		return e.multiAllocSteps(o), nil
	case *fsm.OpInstanceGrowDisk:
		return e.growDiskSteps(o), nil
	case *fsm.OpInstanceActivateDisks:
		return []Step{e.activateDisksStep(o)}, nil
	case *fsm.OpInstanceDeactivateDisks:
		return []Step{e.deactivateDisksStep(o)}, nil
	case *fsm.OpNodeEvacuate:
		return e.evacuateSteps(o, st), nil
	case *fsm.OpInstanceChangeGroup:
		return e.changeGroupSteps(o, st), nil
	case *fsm.OpGroupEvacuate:
		return e.groupEvacuateSteps(o, st), nil
	case *fsm.OpNodeMigrate:
		return e.nodeMigrateSteps(o, st), nil
	case *fsm.OpOobCommand:
		return e.oobSteps(o, st)
	case *fsm.OpClusterEpo:
		return e.epoSteps(o, st)
	case *fsm.OpRepairCommand:
		return e.repairSteps(o), nil
	case *fsm.OpNodeQueryStorage:
		return e.queryStorageSteps(o), nil
	case *fsm.OpNodeModifyStorage:
		return e.modifyStorageSteps(o), nil
	case *fsm.OpRepairNodeStorage:
		return e.repairStorageSteps(o), nil
	}
	return nil, fmt.Errorf("opcode %s has no executor in this gntd", op.Common().OpID)
}

// testDelaySteps is OP_TEST_DELAY: one step per repetition, each sleeping
// the duration (sleeping is idempotent, so a resumed step sleeps again).
// With fail set, the last step fails after its sleep. on_nodes only takes
// the node locks: until the node agent exists the delay runs on the
// leader, which the log says.
//
// The steps are made in proportion to repeat, so it is checked here too
// (ParseOpcode refuses more than fsm.MaxTestDelayRepeat before a job is
// queued): an opcode that reaches the executor otherwise is failed, never
// allowed to allocate.
func testDelaySteps(o *fsm.OpTestDelay) ([]Step, error) {
	if e := o.Validate(); e != nil {
		return nil, e
	}
	n := o.Repeat
	if n == 0 {
		n = 1
	}
	d := time.Duration(o.Duration * float64(time.Second))
	steps := make([]Step, n)
	for i := range steps {
		last := i == n-1
		steps[i] = Step{
			Name: fmt.Sprintf("delay %d/%d", i+1, n),
			Run: func(ctx context.Context, sc *StepContext) (any, error) {
				if i == 0 && len(o.OnNodes) > 0 && !sc.Resumed {
					sc.Logf("delaying on the master while holding the locks of %v (node RPC is not available)", o.OnNodes)
				}
				if err := sc.Sleep(ctx, d); err != nil {
					return nil, err
				}
				if last && o.Fail {
					return nil, fmt.Errorf("test delay failed as requested")
				}
				if n > 1 {
					sc.Logf("delay %d/%d of %gs done", i+1, n, o.Duration)
				}
				return nil, nil
			},
		}
	}
	return steps, nil
}

// inert reports whether an opcode's work cannot reach beyond the leader's
// own goroutine: an OP_TEST_DELAY of one step only sleeps. Without locks
// such an opcode runs without a start record (a no-op job costs one Raft
// entry, not two); every other opcode's attempt is recorded before it
// runs (the poison-job guard, fsm/attempts.go).
func inert(op fsm.Opcode) bool {
	o, ok := op.(*fsm.OpTestDelay)
	return ok && o.Repeat <= 1
}

// CrashExitStatus is the exit status of a gntd that OP_TEST_CRASH kills
// with mode exit (a Go panic exits with the same).
const CrashExitStatus = 2

// testCrashSteps is OP_TEST_CRASH: one step that kills this gntd, as long
// as its job has recorded no more attempts than Times (always when Times
// is 0); once it has, the step succeeds. A gntd without --debug fails it.
func (e *Executor) testCrashSteps(o *fsm.OpTestCrash) []Step {
	return []Step{{Name: "crash", Run: func(ctx context.Context, sc *StepContext) (any, error) {
		if !e.Debug {
			return nil, errors.New("OP_TEST_CRASH runs only on a gntd started with --debug, and this leader's gntd was not")
		}
		n := len(sc.Job.Attempts)
		if o.Times > 0 && n > o.Times {
			sc.Logf("not crashing: attempt %d, and it was to kill %d executors", n, o.Times)
			return nil, nil
		}
		mode := o.Mode
		if mode == "" {
			mode = fsm.CrashExit
		}
		e.Log.Error("OP_TEST_CRASH: killing this gntd as the job asks", "job", sc.Job.ID, "mode", mode, "epoch", e.Epoch, "attempt", n)
		if e.Crash != nil {
			e.Crash(mode)
			<-ctx.Done() // a test's Crash stops the executor: the leader is gone
			return nil, ctx.Err()
		}
		if mode == fsm.CrashPanic {
			panic(fmt.Sprintf("OP_TEST_CRASH of job %d (executor epoch %d)", sc.Job.ID, e.Epoch))
		}
		os.Exit(CrashExitStatus)
		return nil, nil
	}}}
}
