package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeInstall: make install DESTDIR=... lays out the binaries, the
// OOB helper in its whitelist directory, the systemd unit, the example
// config and the completion scripts; every binary's --version names its
// commit and build date; systemd-analyze verify accepts the unit (its
// ExecStart pointed at the binary under DESTDIR, the only one there is).
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dest := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-C", root, "install", "DESTDIR="+dest, "BIN="+filepath.Join(t.TempDir(), "bin"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	files := map[string]os.FileMode{
		"usr/local/bin/gntd":                               0o755,
		"usr/local/bin/gnt":                                0o755,
		"usr/local/bin/gnt-oob-fake":                       0o755,
		"etc/gnt/oob-programs/gnt-oob-ipmi":                0o755,
		"etc/gnt/gntd.json":                                0o644,
		"usr/local/lib/systemd/system/gntd.service":        0o644,
		"usr/local/share/bash-completion/completions/gnt":  0o644,
		"usr/local/share/bash-completion/completions/gntd": 0o644,
		"usr/local/share/doc/gnt/install.md":               0o644,
		"usr/local/share/doc/gnt/config.md":                0o644,
	}
	for f, mode := range files {
		fi, err := os.Stat(filepath.Join(dest, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", f, fi.Mode().Perm(), mode)
		}
	}
	for _, d := range []string{"etc/gnt/hypervisor", "etc/gnt/node-diagnose-commands", "etc/gnt/node-repair-commands"} {
		if fi, err := os.Stat(filepath.Join(dest, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, bin := range []string{"usr/local/bin/gntd", "usr/local/bin/gnt", "usr/local/bin/gnt-oob-fake", "etc/gnt/oob-programs/gnt-oob-ipmi"} {
		out, err := exec.Command(filepath.Join(dest, bin), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "version 0.") || !strings.Contains(string(out), "commit ") ||
			strings.Contains(string(out), "commit unknown") || !strings.Contains(string(out), ", built 20") {
			t.Errorf("%s --version: %v: %q, want the version, the commit and the build date", bin, err, out)
		}
	}
	unit, err := os.ReadFile(filepath.Join(dest, "usr/local/lib/systemd/system/gntd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/bin/gntd agent --config /etc/gnt/gntd.json", "ProtectSystem=strict",
		"ReadWritePaths=/var/lib/gnt", "NoNewPrivileges=true", "KillMode=process"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	if strings.Contains(string(unit), "@") {
		t.Errorf("the unit has an unfilled placeholder:\n%s", unit)
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit was not verified")
	}
	check := filepath.Join(t.TempDir(), "gntd.service")
	local := strings.ReplaceAll(string(unit), "/usr/local/bin/gntd", filepath.Join(dest, "usr/local/bin/gntd"))
	if err := os.WriteFile(check, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", check).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
