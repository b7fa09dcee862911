// Package oob owns out-of-band node management as Ganeti defines it
// (doc/design-oob.rst): running an OOB helper as
// `<program> <command> <node-name>` with a time bound after which its whole
// process group is killed, reading its bounded output, and turning exit
// status and output into a result or an error with the design's messages
// (protocol.go, runner.go); the inheritance of the oob_program node
// parameter with the "!" opt-out (program.go); and the emergency power-off
// plan, a pure function from a view of the configuration to the ordered
// list of what to do (epo.go).
//
// It imports no other package of the project: the job engine (jobs) turns
// the configuration into the views this package reads, runs the helper
// through a Runner, and records what happened.
package oob
