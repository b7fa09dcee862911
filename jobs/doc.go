// Package jobs runs the job queue on the Raft leader: the executor picks
// queued jobs that need it (those that are not pure configuration changes,
// which the state machine applies at submission), runs their opcodes in
// order and records every state change through Raft, fenced by the
// leader's executor epoch.
//
// Goroutines: Executor.Run starts one goroutine per running job (at most
// Concurrency); all of them end when Run's context is canceled, which the
// server does when it loses leadership. Memory here is only a cache of the
// replicated queue: a new leader's executor rebuilds it from the state and
// resumes every job a previous leader left running.
package jobs
