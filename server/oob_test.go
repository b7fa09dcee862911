package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOOBProgramsDirConfig: --oob-programs-dir must be a clean absolute
// path; the server's whitelist is that directory, with helpers owned by
// root or by the user gntd runs as.
func TestOOBProgramsDirConfig(t *testing.T) {
	for dir, want := range map[string]string{
		"":                      "",
		"/etc/gnt/oob-programs": "",
		"etc/gnt/oob-programs":  `--oob-programs-dir "etc/gnt/oob-programs": want a clean absolute path`,
		"/etc/gnt/../oob":       "want a clean absolute path",
		"/etc/gnt/oob/":         "want a clean absolute path",
	} {
		c := DefaultConfig()
		c.Name, c.Bind, c.OOBProgramsDir = "node1", "127.0.0.1", dir
		err := c.Validate()
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", dir, err, want)
		}
	}
	dir := t.TempDir()
	helper := filepath.Join(dir, "oob")
	if err := os.WriteFile(helper, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{OOBProgramsDir: dir}}
	if err := s.CheckOOBProgram(helper); err != nil {
		t.Errorf("helper in the directory: %v", err)
	}
	if err := s.CheckOOBProgram("/bin/sh"); err == nil || !strings.Contains(err.Error(), "not inside the OOB programs directory "+dir) {
		t.Errorf("/bin/sh: %v", err)
	}
	if err := (&Server{}).CheckOOBProgram(helper); err == nil || !strings.Contains(err.Error(), "not inside the OOB programs directory "+DefaultOOBProgramsDir) {
		t.Errorf("default directory: %v", err)
	}
}
