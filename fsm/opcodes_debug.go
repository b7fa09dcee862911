package fsm

// MaxTestCrashTimes bounds OP_TEST_CRASH's times.
const MaxTestCrashTimes = 100

// Crash modes of OP_TEST_CRASH.
const (
	CrashExit  = "exit"  // the gntd exits at once (os.Exit), the default
	CrashPanic = "panic" // a panic in the executor's goroutine ends the gntd
)

// OpTestCrash is gnt's debugging opcode that kills the gntd whose executor
// runs it, to test the poison-job guard (attempts.go). Only a gntd started
// with --debug accepts or runs it: the API refuses it otherwise (DebugOnly)
// and an executor without --debug fails it.
type OpTestCrash struct {
	OpCommon
	// Mode is how the gntd dies: CrashExit (empty means it) or
	// CrashPanic.
	Mode string `json:"mode,omitempty"`
	// Times is how many executors it kills: once its job has recorded
	// more than Times attempts it succeeds instead. 0: every executor
	// that runs it.
	Times int `json:"times,omitempty"`
}

// Validate implements Opcode.
func (o *OpTestCrash) Validate() *Error {
	if o.Mode != "" && o.Mode != CrashExit && o.Mode != CrashPanic {
		return errf(CodeInval, "mode", "mode must be %q or %q, got %q", CrashExit, CrashPanic, o.Mode)
	}
	if o.Times < 0 || o.Times > MaxTestCrashTimes {
		return errf(CodeInval, "times", "times must be between 0 (every executor) and %d, got %d", MaxTestCrashTimes, o.Times)
	}
	return nil
}

// Summary implements Opcode.
func (o *OpTestCrash) Summary() string { return "TEST_CRASH" }

// Locks implements Opcode: none.
func (o *OpTestCrash) Locks(*State) []LockDecl { return nil }

// DebugOnly reports whether an opcode is accepted only by a gntd started
// with --debug.
func DebugOnly(op Opcode) bool {
	_, ok := op.(*OpTestCrash)
	return ok
}
