package rpc

import "testing"

// TestVersionText: the commit stamped with -ldflags -X is shown when Go
// stamped none (as in tests), with "-dirty" spelled out.
func TestVersionText(t *testing.T) {
	for stamped, want := range map[string]string{
		"":                   Version + " (commit unknown)",
		"0123456789ab":       Version + " (commit 0123456789ab)",
		"0123456789ab-dirty": Version + " (commit 0123456789ab, with uncommitted changes)",
		"-dirty":             Version + " (commit unknown)",
	} {
		if got := VersionText(stamped); got != want {
			t.Errorf("VersionText(%q) = %q, want %q", stamped, got, want)
		}
	}
}
