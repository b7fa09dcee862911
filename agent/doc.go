// Package agent is the node agent's hypervisor layer: the Driver
// interface through which the leader's opcodes act on the instances of one
// node (start, stop, reboot, live migration in two halves, per-disk
// create/remove/attach/detach/replace, OS install, status), and its three
// drivers:
//
//   - KVM runs each instance as a qemu-system-x86_64 process, daemonized
//     so that it outlives gntd, controlled through QMP on a unix socket
//     (qmp.go, a small client with a fuzzed reply parser); records under
//     <data-dir>/agent/kvm/, runtime files (pid file, QMP and serial
//     sockets) under <data-dir>/agent/kvm/run/<uuid>/, disks as raw files
//     under the file storage directories. KVM or TCG, probed once at start
//     (kvm.go, kvm_qemu.go, kvm_params.go, kvm_migrate.go).
//   - Fake keeps each instance as a JSON record under its directory
//     (<data-dir>/agent/fake/ in gntd), written atomically, so the
//     simulated world survives restarts; operations can be slowed down
//     and made to fail or hang, for tests and chaos runs.
//   - Exec runs one operator script per operation from a hooks directory,
//     in the spirit of Ganeti's OS API: the instance is given as
//     environment variables (OS_API_VERSION, INSTANCE_NAME, DISK_COUNT,
//     DISK_0_UUID, NIC_0_MAC, ...) and as JSON on stdin; scripts run with
//     a timeout in their own process group, and their output is captured
//     (bounded) and returned for the job log.
//
// It also runs operator commands from whitelist directories (Commands,
// commands.go): the self-diagnose collector (Diagnoser, diagnose.go), whose
// canonical result the leader polls, signed, through the node RPC, and the
// repair commands of OP_REPAIR_COMMAND, which get the diagnose result on
// stdin.
//
// Every driver operation is idempotent: asking for a state the instance is
// already in succeeds without effect (Result.Changed is false). Operations
// whose effect is an event rather than a state (reboot, disk replace, OS
// install) carry a caller-chosen OpID; the same OpID twice is done once.
// Each Driver method documents what it checks first.
//
// The package knows nothing of the network: the node RPC (package rpc)
// calls a driver through an adapter that package server wires. It imports
// only fsm, for the instance configuration types.
//
// Goroutines: KVM probes the accelerator in a goroutine of its own at
// start (bounded by its timeout), and List asks its running guests through
// QMP in up to eight goroutines it waits for; its guests are processes of
// their own session, not children it waits for. Exec and Commands start one process group per script run
// and wait for it (killing the group at the timeout); Fake sleeps in its
// caller's goroutine for delays and hangs. The Diagnoser runs a collection
// in a goroutine of its own, which callers wait for and share; it ends
// with the command (bounded by its timeout), even when every caller gave
// up.
package agent
