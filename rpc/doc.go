// Package rpc is gnt's API: the RAPI-compatible HTTP/JSON server every
// master candidate runs (reads from the local state, writes forwarded to
// the Raft leader), its error codes, and the Go client the CLI and tests
// use. It declares the small interfaces it needs from the daemon it runs in
// (Backend) and knows nothing of Raft.
package rpc
