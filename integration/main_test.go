package integration

import (
	"os"
	"testing"
)

// TestMain removes the binaries the harness built for this run (it never
// removes a GNT_BIN_DIR it was given). Started as a flood child of
// TestConnectionFlood, it is that child instead.
func TestMain(m *testing.M) {
	if spec := os.Getenv(floodChildEnv); spec != "" {
		os.Exit(floodChild(spec))
	}
	code := m.Run()
	if binDir != "" && binDir != os.Getenv("GNT_BIN_DIR") {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
