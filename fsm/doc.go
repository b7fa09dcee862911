// Package fsm owns gnt's replicated state: the cluster configuration (cluster,
// node groups, nodes, instances, tags) and the job queue, the numbered command
// types that change it, a deterministic Apply, versioned snapshots and the read
// views every other package uses.
//
// Nothing here does I/O, reads a clock or draws random numbers: the proposer
// stamps time and UUIDs into each command before it is replicated, so every
// candidate that applies the same log reaches the same state. Apply validates
// every command again and, when it fails, returns a typed *Error and changes
// nothing.
//
// A change to what a command or an opcode means (a new type, a new field, a
// changed rule) must raise LogVersion: replicas of older builds then stop
// when a leader of the new build takes over, instead of applying its entries
// their own way (see LogVersion).
package fsm
