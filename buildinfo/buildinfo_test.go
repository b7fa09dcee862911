package buildinfo

import "testing"

// TestText: the stamped commit and build date appear when Go stamped no
// revision (as in a test binary).
func TestText(t *testing.T) {
	for _, tc := range []struct{ stamped, built, want string }{
		{"", "", Version + " (commit unknown)"},
		{"abc123", "", Version + " (commit abc123)"},
		{"abc123-dirty", "", Version + " (commit abc123, with uncommitted changes)"},
		{"abc123", "2026-11-27T21:00:00Z", Version + " (commit abc123, built 2026-11-27T21:00:00Z)"},
		{"", "2026-11-27T21:00:00Z", Version + " (commit unknown, built 2026-11-27T21:00:00Z)"},
	} {
		if got := Text(tc.stamped, tc.built); got != tc.want {
			t.Errorf("Text(%q, %q) = %q, want %q", tc.stamped, tc.built, got, tc.want)
		}
	}
	if got := Commit("abc123-dirty"); got != "abc123-dirty" {
		t.Errorf("Commit: %q", got)
	}
}
