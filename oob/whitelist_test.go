package oob

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// programsTree builds a whitelist directory for the tests:
//
//	<root>/programs/            0755  the whitelist
//	  good                      0755  a helper
//	  sub/helper                0750  a helper in a subdirectory
//	  link -> good                    a symlink inside
//	  sublink -> sub                  a directory symlink inside
//	  out -> <root>/outside           a symlink that leaves the directory
//	  upout -> ../outside             the same, relative
//	  dirout -> <root>              a directory symlink that leaves it
//	  gw                        0775  group-writable
//	  ww                        0757  world-writable
//	  noexec                    0644
//	  setdir/                         a directory
//	  opensub/x                 0755  in a world-writable directory
//	<root>/outside              0755  a helper outside
//	<root>/alias -> programs          the directory reached through a symlink
func programsTree(t testing.TB) (root string, wl Whitelist) {
	root = t.TempDir()
	dir := filepath.Join(root, "programs")
	mk := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, "sub"), filepath.Join(dir, "setdir"), filepath.Join(dir, "opensub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "opensub"), 0o777); err != nil {
		t.Fatal(err)
	}
	mk(filepath.Join(dir, "good"), 0o755)
	mk(filepath.Join(dir, "sub", "helper"), 0o750)
	mk(filepath.Join(dir, "gw"), 0o775)
	mk(filepath.Join(dir, "ww"), 0o757)
	mk(filepath.Join(dir, "noexec"), 0o644)
	mk(filepath.Join(dir, "opensub", "x"), 0o755)
	mk(filepath.Join(root, "outside"), 0o755)
	for link, target := range map[string]string{
		filepath.Join(dir, "link"):    "good",
		filepath.Join(dir, "sublink"): "sub",
		filepath.Join(dir, "out"):     filepath.Join(root, "outside"),
		filepath.Join(dir, "upout"):   "../outside",
		filepath.Join(dir, "dirout"):  root,
		filepath.Join(root, "alias"):  "programs",
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	return root, Whitelist{Dir: dir, Owner: os.Geteuid()}
}

// TestWhitelistCheck: the path rule, case by case. want "" is accepted;
// otherwise the refusal must contain want, the path and the rule.
func TestWhitelistCheck(t *testing.T) {
	root, wl := programsTree(t)
	dir := wl.Dir
	cases := []struct {
		name, path, want string
	}{
		{"helper", dir + "/good", ""},
		{"in a subdirectory", dir + "/sub/helper", ""},
		{"symlink inside", dir + "/link", ""},
		{"through a directory symlink inside", dir + "/sublink/helper", ""},
		{"empty", "", "the path is empty"},
		{"relative", "programs/good", "not an absolute path"},
		{"dot-dot", dir + "/../programs/good", `not a clean path (it has "." or ".." elements`},
		{"dot-dot out", dir + "/../outside", "not a clean path"},
		{"dot", dir + "/./good", "not a clean path"},
		{"trailing slash", dir + "/good/", "not a clean path"},
		{"double slash", dir + "//good", "not a clean path"},
		{"NUL", dir + "/good\x00", "contains a NUL byte"},
		{"outside the directory", "/bin/sh", "not inside the OOB programs directory " + dir},
		{"outside, next to it", root + "/outside", "not inside the OOB programs directory"},
		{"a prefix of the name", dir + "x/good", "not inside the OOB programs directory"},
		{"the directory itself", dir, "not inside the OOB programs directory"},
		{"through the directory's alias", root + "/alias/good", "not inside the OOB programs directory"},
		{"symlink out", dir + "/out", "the symlink " + dir + "/out leads to " + root + "/outside, outside the OOB programs directory"},
		{"relative symlink out", dir + "/upout", "leads to " + root + "/outside, outside"},
		{"directory symlink out", dir + "/dirout/outside", "the symlink " + dir + "/dirout leads to " + root + ", outside"},
		{"group-writable", dir + "/gw", dir + "/gw is writable by group or others (mode 0775)"},
		{"world-writable", dir + "/ww", dir + "/ww is writable by group or others (mode 0757)"},
		{"not executable", dir + "/noexec", "is not executable by its owner (mode 0644)"},
		{"directory", dir + "/setdir", dir + "/setdir is a directory, not a regular file"},
		{"missing", dir + "/missing", dir + "/missing: no such file or directory"},
		{"missing directory", dir + "/nodir/x", dir + "/nodir: no such file or directory"},
		{"world-writable directory on the way", dir + "/opensub/x", "the directory " + dir + "/opensub is writable by group or others (mode 0777)"},
	}
	for _, c := range cases {
		err := wl.Check(c.path)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var re *RefusedError
		if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %q: got %v, want a refusal", c.name, c.path, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || !strings.Contains(msg, strconv.Quote(c.path)) || !strings.Contains(msg, wl.Rule()) {
			t.Errorf("%s: %q: got %q, want it to contain %q, the path and the rule", c.name, c.path, msg, c.want)
		}
	}
}

// TestWhitelistDirectory: the whitelist directory itself must exist, be a
// directory, be owned right and not be writable by group or others; it
// may be reached through a symlink.
func TestWhitelistDirectory(t *testing.T) {
	root, wl := programsTree(t)
	alias := Whitelist{Dir: filepath.Join(root, "alias"), Owner: wl.Owner}
	if err := alias.Check(alias.Dir + "/good"); err != nil {
		t.Errorf("directory reached through a symlink: %v", err)
	}
	if err := alias.Check(alias.Dir + "/out"); err == nil || !strings.Contains(err.Error(), "outside the OOB programs directory") {
		t.Errorf("symlink out of an aliased directory: %v", err)
	}
	missing := Whitelist{Dir: filepath.Join(root, "none"), Owner: wl.Owner}
	if err := missing.Check(missing.Dir + "/x"); err == nil || !strings.Contains(err.Error(), "the OOB programs directory "+missing.Dir+": no such file or directory") {
		t.Errorf("missing directory: %v", err)
	}
	file := Whitelist{Dir: filepath.Join(root, "outside"), Owner: wl.Owner}
	if err := file.Check(file.Dir + "/x"); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("directory is a file: %v", err)
	}
	rel := Whitelist{Dir: "programs"}
	if err := rel.Check("/programs/x"); err == nil || !strings.Contains(err.Error(), `the OOB programs directory "programs" is not an absolute path`) {
		t.Errorf("relative directory: %v", err)
	}
	if err := os.Chmod(wl.Dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := wl.Check(wl.Dir + "/good"); err == nil || !strings.Contains(err.Error(), "the directory "+wl.Dir+" is writable by group or others (mode 0775)") {
		t.Errorf("group-writable directory: %v", err)
	}
	os.Chmod(wl.Dir, 0o755)
	if (Whitelist{}).DirPath() != DefaultProgramsDir || !strings.Contains((Whitelist{}).Rule(), "inside "+DefaultProgramsDir+", to a regular file owned by root,") {
		t.Errorf("zero whitelist: %s", (Whitelist{}).Rule())
	}
	if r := (Whitelist{Owner: 1000}).Rule(); !strings.Contains(r, "owned by root or uid 1000 (the user gntd runs as)") {
		t.Errorf("rule with an owner: %s", r)
	}
}

// TestWhitelistOwner: a helper (or a directory) owned by another user
// than root and the gntd's is refused. Changing owners needs root.
func TestWhitelistOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	_, wl := programsTree(t)
	const nobody = 65534
	if err := os.Chown(wl.Dir+"/good", nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := wl.Check(wl.Dir + "/good"); err == nil || !strings.Contains(err.Error(), wl.Dir+"/good is owned by uid 65534") {
		t.Errorf("helper of another user: %v", err)
	}
	if err := os.Chown(wl.Dir+"/sub", nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := wl.Check(wl.Dir + "/sub/helper"); err == nil || !strings.Contains(err.Error(), "the directory "+wl.Dir+"/sub is owned by uid 65534") {
		t.Errorf("directory of another user: %v", err)
	}
	// Root owns it, gntd runs as another user: accepted (root may always
	// own the helpers).
	if err := os.Chown(wl.Dir+"/sub", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := (Whitelist{Dir: wl.Dir, Owner: nobody}).Check(wl.Dir + "/sub/helper"); err != nil {
		t.Errorf("root-owned helper, gntd as another user: %v", err)
	}
}
