// Package rpc is gnt's API: the RAPI-compatible HTTP/JSON server every
// master candidate runs (reads from the local state, writes forwarded to
// the Raft leader), its error codes, and the Go client the CLI and tests
// use. It declares the small interfaces it needs from the daemon it runs in
// (Backend) and knows nothing of Raft.
//
// It also holds the node RPC (noderpc.go, nodeserver.go, nodeclient.go):
// the signed HTTP/JSON protocol on port 1811 through which the leader acts
// on a node's hypervisor driver, its server (calling the NodeAgent that
// the daemon passes in) and the typed NodeClient the opcodes use; and the
// self-diagnose report codec (diagnose.go): mond's report format, its
// HMAC signature by the reporting node and its verification, which both
// the agent (serving it) and the leader's poller (checking it) use.
package rpc
