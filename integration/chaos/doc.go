// Package chaos attacks a real gnt cluster the way Jepsen attacks a
// database, and checks that nothing it acknowledged was lost.
//
// A run starts gntd processes with the integration harness (3 or 5
// candidates and a few nodes, each on its own 127.x.0.y address, with
// --debug for fault injection), drives them with several concurrent
// clients, and meanwhile injects faults one at a time, each logged with
// its time (nemesis.go): kill -9 of the leader, of a follower, of a random
// candidate or of all of them (restarted from their data dirs),
// SIGSTOP/SIGCONT of the leader for longer than the election timeout, a
// leadership transfer, network partitions of the Raft traffic (isolated
// leader, majority/minority, bridge, ring of overlapping majorities,
// one-way cut), latency and loss, and a gossip-only cut (memberlist's UDP
// dropped, one member's or between two groups; Raft, the API and gossip's
// TCP left alone). Network faults go through the in-process fault wrapper
// of the Raft transport (POST /debug/faults), which needs neither root nor
// iptables, or through iptables rules in a network namespace the test
// makes for itself (network.go); the gossip-only cut exists only with
// iptables.
//
// The workload (workload.go) writes unique values: tags added to and
// removed from the cluster, its nodes and its node group, the drained
// flag of the nodes, OP_TEST_DELAY jobs (alone, or two with a
// dependency) marked with a unique comment, and cancels of recent jobs.
// It reads back through the API (the answering candidate's replica, and
// ?consistent=1), the gnt CLI and confd. Every operation is recorded with
// its invocation and return times and its outcome: ok, failed (surely not
// applied) or indeterminate (it may have been applied: a timeout, a
// broken connection, leadership lost while committing).
//
// After the run every fault is healed and the checkers (check_*.go) read
// the history and the final state:
//   - linearizability of the consistent reads and of the writes, per
//     object, with Porcupine (indeterminate writes stay open; a check that
//     times out counts as a failure); the HTML page is kept on failure;
//   - set and queue accounting after healing: no acknowledged tag or job
//     lost, nothing unexpected, no job present twice (by its marker), and
//     indeterminate writes that did happen counted as recovered;
//   - Raft invariants: at most one leader per term in every status sample,
//     and all candidates at the same applied index and state hash within
//     10 s of healing;
//   - leader-only services: at most one member establishes leadership (and
//     so runs the executor) per term, epochs are never shared, the steps
//     of each opcode were recorded by non-decreasing epochs, and no job is
//     left unfinished;
//   - maintd's port (1816), probed on every member throughout the run
//     (check_maintd.go): an epoch answers on one member only, two
//     leaderships' maintd never answer at once (but for a paused leader's
//     handover), a member's maintd closes within 2 s of its status saying
//     it is no longer leader, and the final leader's maintd answers soon
//     after healing (the run reports how soon after its election);
//   - stale reads only where the API says so: a read answered at index I
//     (X-Gnt-Index) shows exactly the writes applied up to I, and a
//     consistent read's I covers every write acknowledged before it began;
//     confd answers of one serial agree, and one process's serials never
//     go back.
//
// Runs are seeded: the seed is printed and GNT_CHAOS_SEED replays the
// same choices (operations, faults, targets and timings; not the
// interleavings, which the machine decides). A failing run keeps its data
// dirs, member logs, history, fault log and Porcupine pages under a
// directory the output names.
package chaos
