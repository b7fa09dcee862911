// Package integration holds gnt's end-to-end tests: a harness that starts
// real gntd processes, each on its own 127.0.0.x address with its own data
// dir, and drives them through the public API and the gnt CLI; the tests
// that kill and restart them; and the benchmarks that print figures.
//
// The harness builds bin/gntd and bin/gnt itself unless GNT_BIN_DIR names
// a directory that holds them. Every process a test starts is killed in
// t.Cleanup, and its log is printed when the test fails.
package integration
