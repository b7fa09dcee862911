package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadBootID(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content, want string
	}{
		{"linux", "0f7c2f3e-5a4b-4c7e-9d0e-3b1f2a6c8d90\n", "0f7c2f3e-5a4b-4c7e-9d0e-3b1f2a6c8d90"},
		{"spaces around", "  abc \t\n", "abc"},
		{"empty", "", ""},
		{"blank", " \n\n", ""},
		{"two words", "abc def\n", ""},
		{"control byte", "ab\x01c", ""},
		{"non-ascii", "abcé", ""},
		{"too long", strings.Repeat("a", maxBootIDLen+1), ""},
		{"longest", strings.Repeat("a", maxBootIDLen), strings.Repeat("a", maxBootIDLen)},
		{"over the read bound", strings.Repeat(" ", maxBootIDRead) + "abc", ""},
	}
	for _, c := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := ReadBootID(p); got != c.want {
			t.Errorf("%s: ReadBootID = %q, want %q", c.name, got, c.want)
		}
	}
	if got := ReadBootID(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: %q", got)
	}
	if _, err := os.Stat(DefaultBootIDFile); err == nil && ReadBootID("") == "" {
		t.Errorf("%s exists but gave no boot id", DefaultBootIDFile)
	}
}

func FuzzParseBootID(f *testing.F) {
	f.Add("0f7c2f3e-5a4b-4c7e-9d0e-3b1f2a6c8d90\n")
	f.Add(" a b ")
	f.Fuzz(func(t *testing.T, s string) {
		id := parseBootID(s)
		if id == "" {
			return
		}
		if len(id) > maxBootIDLen || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) || !strings.Contains(s, id) {
			t.Fatalf("parseBootID(%q) = %q", s, id)
		}
	})
}
