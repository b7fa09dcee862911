// Package server wires one gntd together: the data dir, the Raft server
// (raft adapter, the one apply helper), the API server, the leadership
// monitor with the leader-only services (job executor, candidate-pool
// keeper, job archiver, liveness reconciler), the join/registration loop,
// the gossip member, and `gntd dev`.
//
// Goroutines, and who stops them (all are bound to the context given to
// Server.Run, canceled on SIGINT/SIGTERM):
//   - the HTTP server (closed by Run on exit);
//   - the applier's batching loop (per Raft instance; stopped with it);
//   - monitorLeadership, which starts leaderLoop on gaining leadership and
//     cancels and waits for it on losing it; leaderLoop runs the job
//     executor, the pool keeper, the job archiver and the liveness
//     reconciler (liveness.go) under its own context; the self-diagnose
//     poller (diagnose.go, diagnoseService) is a leader service of the
//     same kind, whose round starts one goroutine per node polled (at
//     most its concurrency under way), does not wait for a slow node
//     (that node is not polled again until it answers) and waits for
//     them all when it stops;
//   - gossipLoop (gossip.go), which starts this gntd's gossip member once
//     the cluster key is known, joins known gossip addresses, and on exit
//     leaves the gossip cluster and stops the member (and with it the
//     member's and memberlist's goroutines);
//   - joinLoop, which registers this gntd with the leader and starts or
//     stops the local Raft server as the candidate flag says;
//   - watchMembership (amnesia.go, one per Raft instance), which records
//     in node.json that this gntd is a Raft member once its configuration
//     holds it, and ends then or when that Raft instance shuts down;
//   - confd (confd.go): the UDP server's readers and a key watcher that
//     hands it the cluster key once this gntd has one; Run cancels their
//     context and waits for them.
//
// Raft observer events are hints only: they are sent without blocking to a
// buffered channel, and monitorLeadership also polls raft.State.
package server
