package integration

import (
	"os"
	"testing"
)

// TestMain removes the binaries the harness built for this run (it never
// removes a GNT_BIN_DIR it was given).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" && binDir != os.Getenv("GNT_BIN_DIR") {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
