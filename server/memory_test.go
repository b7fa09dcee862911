package server

import (
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "200MiB": 200 << 20, "1G": 1 << 30, " 512 KiB ": 512 << 10, "7": 7, "3B": 3, "2TiB": 2 << 40} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"":                      "empty",
		"MiB":                   "does not start with a number",
		"-1MiB":                 "does not start with a number",
		"1.5GiB":                `unit ".5GiB"`,
		"10MB":                  `unit "MB"`,
		"99999999999999999TiB":  "more than",
		"99999999999999999999":  "value out of range",
		strings.Repeat("9", 40): "more than 32 characters",
	} {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSize(%q): %v, want an error containing %q", in, err, msg)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"200MiB", "0", "1G", "x", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

func TestMemorySettingsRefusesTinyLimits(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "100")
	if _, err := MemorySettings("16MiB"); err == nil || !strings.Contains(err.Error(), "less than 32MiB") {
		t.Errorf("16MiB: %v", err)
	}
	if _, err := MemorySettings("lots"); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Errorf("lots: %v", err)
	}
	got, err := MemorySettings("0")
	if err != nil || !strings.Contains(got, "no memory limit") || !strings.Contains(got, "GOGC=100 (environment)") {
		t.Errorf("0: %q, %v", got, err)
	}
}

// TestMemoryLimitLeavesRoomForMappedFiles: Go's limit is the target less
// the resident pages of mapped files (the test binary's own, here), and
// follows them.
func TestMemoryLimitLeavesRoomForMappedFiles(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "100")
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev); memTarget.Store(0) })
	files := residentFileBytes()
	if files <= 0 {
		t.Fatalf("no resident file pages read from /proc/self/status (%d): the binary itself is one", files)
	}
	got, err := MemorySettings("200MiB")
	if err != nil {
		t.Fatal(err)
	}
	lim := debug.SetMemoryLimit(-1)
	if lim >= 200<<20 || lim < 100<<20 {
		t.Fatalf("Go's limit %d for a 200MiB target with %d bytes of mapped files resident", lim, files)
	}
	if !strings.Contains(got, fmt.Sprintf("Go's own memory: %dMiB", lim>>20)) {
		t.Errorf("settings %q do not name Go's limit %dMiB", got, lim>>20)
	}
	// Far more resident file pages than the target: never below half.
	memTarget.Store(files / 2)
	if lim := adjustMemoryLimit(); lim != files/4 {
		t.Errorf("target %d with %d bytes of files resident: limit %d, want half the target", files/2, files, lim)
	}
	if _, err := MemorySettings("0"); err != nil || adjustMemoryLimit() != 0 {
		t.Errorf("no limit: the target stays set (%v)", err)
	}
}
