package osdef

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// writeOS makes an OS definition: files maps a file name to its content;
// the scripts (create, import, export, rename, verify) get mode 0755, the
// rest 0644.
func writeOS(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		mode := os.FileMode(0o644)
		if slices.Contains([]string{ScriptCreate, ScriptImport, ScriptExport, ScriptRename, ScriptVerify}, name) {
			mode = 0o755
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}

// osFiles is a valid API 20 OS whose create records its environment and
// marks its first disk.
func osFiles(api string) map[string]string {
	m := map[string]string{
		FileAPIVersion: api,
		FileVariants:   "default\nminimal\n",
		FileParameters: "dhcp Whether to use DHCP\n",
		ScriptCreate:   "#!/bin/sh\nenv > \"$DISK_0_PATH.env\"\necho marked-by-create >> \"$DISK_0_PATH\"\necho created $INSTANCE_NAME\n",
		ScriptImport:   "#!/bin/sh\ncat > \"$IMPORT_DISK_PATH\"\n",
		ScriptExport:   "#!/bin/sh\ncat \"$EXPORT_DISK_PATH\"\n",
		ScriptRename:   "#!/bin/sh\necho renamed $OLD_INSTANCE_NAME to $INSTANCE_NAME\n",
		ScriptVerify:   "#!/bin/sh\n[ \"$1\" = parameters ] || exit 2\ncase \"$OSP_DHCP\" in ''|yes|no) exit 0;; esac\necho \"bad dhcp $OSP_DHCP\" >&2; exit 1\n",
	}
	return m
}

func testConfig(dirs ...string) Config {
	return Config{SearchPath: dirs, Owner: os.Geteuid()}
}

func searchDir(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "os")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(d), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDiscover(t *testing.T) {
	a, b := searchDir(t), searchDir(t)
	writeOS(t, filepath.Join(a, "good"), osFiles("20\n15\n"))
	old := osFiles("5\n10\n")
	delete(old, FileVariants)
	delete(old, FileParameters)
	delete(old, ScriptVerify)
	writeOS(t, filepath.Join(a, "old"), old)
	writeOS(t, filepath.Join(b, "good"), map[string]string{FileAPIVersion: "20\n"}) // shadowed by a/good
	cases := []struct {
		name  string
		edit  func(m map[string]string)
		chmod map[string]os.FileMode
		want  string
	}{
		{"future", func(m map[string]string) { m[FileAPIVersion] = "30\n" }, nil, "API version(s) 30 not supported; gnt speaks 20, 15, 10"},
		{"noversion", func(m map[string]string) { delete(m, FileAPIVersion) }, nil, "no ganeti_api_version file"},
		{"badversion", func(m map[string]string) { m[FileAPIVersion] = "20\nxx\n" }, nil, `ganeti_api_version line 2: "xx" is not an API version`},
		{"nocreate", func(m map[string]string) { delete(m, ScriptCreate) }, nil, "create: no such file or directory"},
		{"noverify", func(m map[string]string) { delete(m, ScriptVerify) }, nil, "verify: no such file or directory"},
		{"noparams", func(m map[string]string) { delete(m, FileParameters) }, nil, "no parameters.list file (API version 20 needs one; it may be empty)"},
		{"badvariant", func(m map[string]string) { m[FileVariants] = "a+b\n" }, nil, `variants.list line 1: variant "a+b"`},
		{"writable", nil, map[string]os.FileMode{ScriptCreate: 0o775}, "create is writable by group or others (mode 0775)"},
		{"notexec", nil, map[string]os.FileMode{ScriptRename: 0o644}, "rename is not executable by its owner"},
		{"bad+name", nil, nil, `OS name "bad+name" is not letters`},
	}
	for _, c := range cases {
		m := osFiles("20\n")
		if c.edit != nil {
			c.edit(m)
		}
		writeOS(t, filepath.Join(b, c.name), m)
		for f, mode := range c.chmod {
			if err := os.Chmod(filepath.Join(b, c.name, f), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	missing := filepath.Join(t.TempDir(), "missing")
	rep := testConfig(a, missing, b).Discover()
	if len(rep.Errors) != 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
	byName := map[string]OS{}
	var names []string
	for _, o := range rep.OSes {
		byName[o.Name] = o
		names = append(names, o.Name)
	}
	if !slices.IsSorted(names) || len(names) != len(cases)+2 {
		t.Errorf("OSes %v: want %d, sorted", names, len(cases)+2)
	}
	g := byName["good"]
	if !g.Valid || g.Path != filepath.Join(a, "good") || g.Version != 20 || !slices.Equal(g.APIVersions, []int{20, 15}) ||
		!slices.Equal(g.Names(), []string{"good+default", "good+minimal"}) || len(g.Parameters) != 1 {
		t.Errorf("good = %+v", g)
	}
	o := byName["old"]
	if !o.Valid || o.Version != 10 || !slices.Equal(o.Names(), []string{"old"}) {
		t.Errorf("old = %+v", o)
	}
	for _, c := range cases {
		got := byName[c.name]
		if got.Valid || !strings.Contains(got.Error, c.want) {
			t.Errorf("%s: valid %v, error %q; want invalid with %q", c.name, got.Valid, got.Error, c.want)
		}
	}

	// A search directory writable by others makes its scripts refused.
	if err := os.Chmod(a, 0o777); err != nil {
		t.Fatal(err)
	}
	if g := testConfig(a).Discover().OSes[0]; g.Valid || !strings.Contains(g.Error, "writable by group or others (mode 0777)") {
		t.Errorf("in a world-writable dir: %+v", g)
	}
	if rep := testConfig("relative/os").Discover(); len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], `"relative/os" is not an absolute directory`) {
		t.Errorf("relative search path: %+v", rep)
	}
}

func TestDiscoverLimit(t *testing.T) {
	a := searchDir(t)
	for i := 0; i <= MaxOSes; i++ {
		if err := os.Mkdir(filepath.Join(a, "os"+strings.Repeat("x", i/26)+string(rune('a'+i%26))), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rep := testConfig(a).Discover()
	if len(rep.OSes) != MaxOSes || len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], "more than 256 OS definitions") {
		t.Errorf("%d OSes, errors %v", len(rep.OSes), rep.Errors)
	}
}

// TestNoop finds Debian's ganeti-os-noop in the default search path.
func TestNoop(t *testing.T) {
	if _, err := os.Stat("/usr/share/ganeti/os/noop"); err != nil {
		t.Skip("ganeti-os-noop is not installed (apt-get install ganeti-os-noop):", err)
	}
	c := Config{}
	o, err := c.Lookup("noop")
	if err != nil || !o.Valid || o.Version != 10 {
		t.Fatalf("noop: %+v, %v", o, err)
	}
	if _, err := c.Lookup("noop+x"); !errors.Is(err, ErrVariant) {
		t.Errorf("noop+x: %v", err)
	}
	out, err := c.Install(context.Background(), Input{Instance: fsm.Instance{Name: "i1", OS: "noop"}})
	if err != nil {
		t.Errorf("noop create: %q, %v", out, err)
	}
}

func TestLookup(t *testing.T) {
	a := searchDir(t)
	writeOS(t, filepath.Join(a, "good"), osFiles("20\n"))
	c := testConfig(a)
	for _, ok := range []string{"good+default", "good+minimal"} {
		if _, err := c.Lookup(ok); err != nil {
			t.Errorf("Lookup(%s): %v", ok, err)
		}
	}
	for _, bad := range []struct {
		name string
		is   error
		want string
	}{
		{"good", ErrVariant, "OS good needs a variant (good+VARIANT), one of: default, minimal"},
		{"good+other", ErrVariant, `OS good has no variant "other"; its variants: default, minimal`},
		{"nope+default", ErrUnknown, "no OS nope in the search path " + a},
		{"../etc", ErrUnknown, "is not letters"},
		{"", ErrUnknown, "must be 1 to 64"},
	} {
		_, err := c.Lookup(bad.name)
		if !errors.Is(err, bad.is) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Lookup(%q) = %v; want %v with %q", bad.name, err, bad.is, bad.want)
		}
	}
	if err := os.Chmod(filepath.Join(a, "good", ScriptCreate), 0o757); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup("good+default"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("Lookup of a writable script: %v", err)
	}
}

func testInstance(disk string) fsm.Instance {
	return fsm.Instance{
		Name: "web1", UUID: "u-1", OS: "good+minimal", MemoryMiB: 512, VCPUs: 2,
		Disks: []fsm.Disk{{UUID: "d-0", SizeMiB: 1024, Mode: "rw"}, {UUID: "d-1", SizeMiB: 10, Mode: "ro", Name: "data"}},
		NICs:  []fsm.NIC{{UUID: "n-0", MAC: "aa:00:00:00:00:01", IP: "192.0.2.1", Mode: "bridged", Link: "br0"}, {UUID: "n-1", MAC: "aa:00:00:00:00:02", Mode: "routed", Link: "100"}},
	}
}

func TestEnv(t *testing.T) {
	in := Input{Instance: testInstance(""), Hypervisor: "kvm", DiskPaths: []string{"/srv/disk0", "/dev/vg/d1"},
		HVParams: map[string]string{"kernel_path": "/boot/vmlinuz"}, OSParams: map[string]string{"dhcp": "no"}, Debug: 1}
	want20 := map[string]string{
		"OS_API_VERSION": "20", "INSTANCE_NAME": "web1", "INSTANCE_OS": "good+minimal", "OS_NAME": "good", "OS_VARIANT": "minimal",
		"INSTANCE_UUID": "u-1", "HYPERVISOR": "kvm", "INSTANCE_HV_kernel_path": "/boot/vmlinuz",
		"INSTANCE_BE_maxmem": "512", "INSTANCE_BE_minmem": "512", "INSTANCE_BE_vcpus": "2",
		"DISK_COUNT": "2", "DISK_0_PATH": "/srv/disk0", "DISK_0_ACCESS": "rw", "DISK_0_UUID": "d-0", "DISK_0_SIZE": "1024", "DISK_0_BACKEND_TYPE": "file:loop",
		"DISK_1_PATH": "/dev/vg/d1", "DISK_1_ACCESS": "ro", "DISK_1_UUID": "d-1", "DISK_1_SIZE": "10", "DISK_1_NAME": "data", "DISK_1_BACKEND_TYPE": "block",
		"NIC_COUNT": "2", "NIC_0_MAC": "aa:00:00:00:00:01", "NIC_0_UUID": "n-0", "NIC_0_IP": "192.0.2.1", "NIC_0_MODE": "bridged", "NIC_0_LINK": "br0", "NIC_0_BRIDGE": "br0",
		"NIC_1_MAC": "aa:00:00:00:00:02", "NIC_1_UUID": "n-1", "NIC_1_MODE": "routed", "NIC_1_LINK": "100",
		"OSP_DHCP": "no", "DEBUG_LEVEL": "1", "PATH": scriptPath,
	}
	for _, c := range []struct {
		version int
		drop    []string
	}{{20, nil}, {15, []string{"OSP_DHCP"}}, {10, []string{"OSP_DHCP", "OS_VARIANT"}}} {
		want := map[string]string{}
		for k, v := range want20 {
			if !slices.Contains(c.drop, k) {
				want[k] = v
			}
		}
		want["OS_API_VERSION"] = map[int]string{20: "20", 15: "15", 10: "10"}[c.version]
		got := Env(c.version, in)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("v%d: %s=%q, want %q", c.version, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("v%d: unexpected %s=%q", c.version, k, got[k])
			}
		}
	}
	// Without filled-in parameters, the instance's own.
	own := testInstance("")
	own.HVParams = map[string]any{"kernel_path": "/boot/vmlinuz", "acpi": true}
	own.BEParams = map[string]any{"auto_balance": false, "minmem": 256.0}
	own.OSParams = map[string]any{"dhcp": "yes", "size": 8.0, "x": nil}
	got := Env(20, Input{Instance: own})
	for k, v := range map[string]string{"INSTANCE_HV_kernel_path": "/boot/vmlinuz", "INSTANCE_HV_acpi": "True",
		"INSTANCE_BE_auto_balance": "False", "INSTANCE_BE_minmem": "256", "INSTANCE_BE_maxmem": "512", "INSTANCE_BE_vcpus": "2",
		"OSP_DHCP": "yes", "OSP_SIZE": "8", "OSP_X": ""} {
		if got[k] != v {
			t.Errorf("own parameters: %s=%q, want %q", k, got[k], v)
		}
	}
	// A disk without a path gets no DISK_n_PATH.
	if got := Env(20, Input{Instance: testInstance("")}); got["DISK_0_PATH"] != "" || got["DISK_0_BACKEND_TYPE"] != "" || got["DISK_COUNT"] != "2" {
		t.Errorf("no paths: %v", got)
	}
}

func TestRun(t *testing.T) {
	a := searchDir(t)
	writeOS(t, filepath.Join(a, "good"), osFiles("20\n15\n"))
	c := testConfig(a)
	disk := filepath.Join(t.TempDir(), "disk0")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	in := Input{Instance: testInstance(""), Hypervisor: "fake", DiskPaths: []string{disk}, Reinstall: true, OSParams: map[string]string{"dhcp": "yes"}}
	out, err := c.Install(context.Background(), in)
	if err != nil || out != "created web1\n" {
		t.Fatalf("Install = %q, %v", out, err)
	}
	if b, _ := os.ReadFile(disk); string(b) != "marked-by-create\n" {
		t.Errorf("disk: %q", b)
	}
	envB, _ := os.ReadFile(disk + ".env")
	env := string(envB)
	for _, want := range []string{"INSTANCE_REINSTALL=1\n", "OS_VARIANT=minimal\n", "DISK_0_PATH=" + disk + "\n", "OSP_DHCP=yes\n", "OS_API_VERSION=20\n", "PWD=" + filepath.Join(a, "good")} {
		if !strings.Contains(env, want) {
			t.Errorf("the create script's environment lacks %q:\n%s", want, env)
		}
	}
	if os.Getenv("HOME") != "" && strings.Contains(env, "HOME=") {
		t.Errorf("gntd's environment leaked: %s", env)
	}

	if out, err := c.Rename(context.Background(), in, "old1"); err != nil || out != "renamed old1 to web1\n" {
		t.Errorf("Rename = %q, %v", out, err)
	}
	var dump strings.Builder
	if _, err := c.Export(context.Background(), in, 0, &dump); err != nil || dump.String() != "marked-by-create\n" {
		t.Errorf("Export = %q, %v", dump.String(), err)
	}
	if _, err := c.Import(context.Background(), in, 0, strings.NewReader("imported\n")); err != nil {
		t.Errorf("Import: %v", err)
	}
	if b, _ := os.ReadFile(disk); string(b) != "imported\n" {
		t.Errorf("disk after import: %q", b)
	}
	if _, err := c.Import(context.Background(), in, 5, strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "has no disk 5 (it has 2)") {
		t.Errorf("Import of disk 5: %v", err)
	}
	if _, err := c.Verify(context.Background(), in); err != nil {
		t.Errorf("Verify(dhcp=yes): %v", err)
	}
	in.OSParams["dhcp"] = "maybe"
	out, err = c.Verify(context.Background(), in)
	var se *ScriptError
	if !errors.As(err, &se) || se.Script != ScriptVerify || out != "bad dhcp maybe\n" || !strings.Contains(err.Error(), "exited with exit status 1") {
		t.Errorf("Verify(dhcp=maybe) = %q, %v", out, err)
	}
	// Install verifies the parameters first: refused, the disk untouched.
	if err := os.WriteFile(disk, []byte("before\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = c.Install(context.Background(), in)
	if !errors.As(err, &se) || se.Script != ScriptVerify || out != "bad dhcp maybe\n" {
		t.Errorf("Install(dhcp=maybe) = %q, %v; want the verify script's refusal", out, err)
	}
	if b, _ := os.ReadFile(disk); string(b) != "before\n" {
		t.Errorf("disk after a refused install: %q", b)
	}
}

func TestRunBounds(t *testing.T) {
	a := searchDir(t)
	m := osFiles("20\n")
	m[ScriptCreate] = "#!/bin/sh\nhead -c 5000 /dev/zero | tr '\\0' x\nexit 3\n"
	m[ScriptRename] = "#!/bin/sh\necho started\nsleep 60 &\nwait\n"
	writeOS(t, filepath.Join(a, "good"), m)
	c := testConfig(a)
	c.MaxOutput = 100
	in := Input{Instance: testInstance("")}
	out, err := c.Install(context.Background(), in)
	if !strings.HasPrefix(out, strings.Repeat("x", 100)+"\n[4900 more bytes of output dropped]") || err == nil || !strings.Contains(err.Error(), "exited with exit status 3") {
		t.Errorf("Install = %q, %v", clip(out), err)
	}
	c.Timeout = 300 * time.Millisecond
	out, err = c.Rename(context.Background(), in, "x")
	if out != "started\n" || err == nil || !strings.Contains(err.Error(), "timed out after 300ms; its process group was killed") {
		t.Errorf("Rename = %q, %v", out, err)
	}
	// A Run with an OS that did not come from Lookup is refused.
	if _, err := c.Run(context.Background(), OS{Name: "x", Valid: true}, Call{Script: ScriptCreate}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Run of an unchecked OS: %v", err)
	}
}

// TestBuiltin installs the shipped gnt-image and runs it: the marker and
// the environment are on the disk, the disk keeps its size, verify checks
// the label.
func TestBuiltin(t *testing.T) {
	a := searchDir(t)
	if err := InstallBuiltin(a, ""); err != nil {
		t.Fatal(err)
	}
	c := testConfig(a)
	o, err := c.Lookup("gnt-image+default")
	if err != nil || o.Version != 20 || !slices.Equal(o.Names(), []string{"gnt-image+default"}) || len(o.Parameters) != 1 {
		t.Fatalf("gnt-image: %+v, %v", o, err)
	}
	disk := filepath.Join(t.TempDir(), "disk0")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 1<<20); err != nil {
		t.Fatal(err)
	}
	inst := testInstance("")
	inst.OS = "gnt-image+default"
	in := Input{Instance: inst, Hypervisor: "kvm", DiskPaths: []string{disk}, OSParams: map[string]string{"label": "hello world"}}
	out, err := c.Install(context.Background(), in)
	if err != nil || !strings.Contains(out, "wrote the marker of web1 (gnt-image+default) on "+disk) {
		t.Fatalf("create: %q, %v", out, err)
	}
	b, _ := os.ReadFile(disk)
	if len(b) != 1<<20 {
		t.Errorf("the disk is %d bytes now", len(b))
	}
	marker := string(b[:bytesIndex(b, 0)])
	for _, want := range []string{"GNT-IMAGE 1\ninstance=web1\nos=gnt-image+default\nvariant=default\nreinstall=0\nlabel=hello world\n", "DISK_0_PATH=" + disk + "\n", "HYPERVISOR=kvm\n", "--- end ---\n"} {
		if !strings.Contains(marker, want) {
			t.Errorf("marker lacks %q:\n%s", want, marker)
		}
	}
	in.Instance.Name, in.Reinstall = "web2", true
	if _, err := c.Install(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(disk)
	if m := string(b[:bytesIndex(b, 0)]); !strings.Contains(m, "instance=web2\n") || !strings.Contains(m, "reinstall=1\n") || strings.Contains(m, "web1") {
		t.Errorf("marker after the reinstall:\n%s", m)
	}
	if _, err := c.Verify(context.Background(), in); err != nil {
		t.Errorf("verify: %v", err)
	}
	in.OSParams["label"] = "bad;label"
	if out, err := c.Verify(context.Background(), in); err == nil || !strings.Contains(out, "label 'bad;label' has characters other than") {
		t.Errorf("verify of a bad label: %q, %v", out, err)
	}
	// The install verifies first: a bad label writes nothing.
	before, _ := os.ReadFile(disk)
	if out, err := c.Install(context.Background(), in); err == nil || !strings.Contains(out, "label 'bad;label' has characters other than") {
		t.Errorf("install with a bad label: %q, %v", out, err)
	}
	if after, _ := os.ReadFile(disk); string(after) != string(before) {
		t.Error("an install refused by verify changed the disk")
	}
	// No disk: nothing written, no failure.
	in.OSParams["label"] = "ok"
	in.Instance.Disks, in.DiskPaths = nil, nil
	if out, err := c.Install(context.Background(), in); err != nil || !strings.Contains(out, "has no disk; nothing to write") {
		t.Errorf("diskless: %q, %v", out, err)
	}
}

func bytesIndex(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return len(b)
}
