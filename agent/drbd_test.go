package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

func fptr(f float64) *float64 { return &f }
func iptr(i int) *int         { return &i }

// TestParseProcDRBD reads /proc/drbd as DRBD 8.4.11 wrote it (a resync
// under way; captured in a guest), and the states of the other forms.
func TestParseProcDRBD(t *testing.T) {
	syncing := func(a, b int, pct float64, secs int) map[int]fsm.DRBDDevice {
		return map[int]fsm.DRBDDevice{
			a: {Minor: a, Connection: "SyncSource", Role: "Secondary", PeerRole: "Secondary", Disk: "UpToDate", PeerDisk: "Inconsistent",
				SyncPercent: fptr(pct), EstimatedSeconds: iptr(secs)},
			b: {Minor: b, Connection: "SyncTarget", Role: "Secondary", PeerRole: "Secondary", Disk: "Inconsistent", PeerDisk: "UpToDate",
				SyncPercent: fptr(pct), EstimatedSeconds: iptr(secs)},
		}
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join("testdata", "drbd", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, c := range []struct {
		what, in string
		want     ProcDRBD
	}{
		{"8.4.11 resyncing", read("proc-sync-8.4.11.txt"), ProcDRBD{Version: "8.4.11", Major: 8, Minor: 4, Devices: syncing(0, 1, 18.8, 21)}},
		// Blank lines between minors, as 8.4.11 writes them during a
		// resync to a new peer.
		{"8.4.11 resyncing to a new peer", read("proc-newpeer-8.4.11.txt"), ProcDRBD{Version: "8.4.11", Major: 8, Minor: 4, Devices: syncing(1, 3, 93.8, 0)}},
		{"the other forms", "version: 8.4.2 (api:1/proto:86-101)\nGIT-hash: 7ad5f8 build by x, 2013-04-10\n\n" +
			" 2: cs:Unconfigured\n" +
			" 4: cs:WFConnection ro:Primary/Unknown ds:UpToDate/DUnknown C r-----\n    ns:0 nr:0 dw:0\n" +
			" 8: cs:StandAlone ro:Secondary/Unknown ds:UpToDate/DUnknown   r-----\n" +
			" 9: cs:SyncTarget ro:Secondary/Primary ds:Inconsistent/UpToDate A r-----\n" +
			"      [>....................] sync'ed:  2.4% (14996/15360)Mfinish: 1:04:08 speed: 61,736 (61,736) K/sec\n",
			ProcDRBD{Version: "8.4.2", Major: 8, Minor: 4, Devices: map[int]fsm.DRBDDevice{
				2: {Minor: 2, Connection: DRBDUnconfigured},
				4: {Minor: 4, Connection: "WFConnection", Role: "Primary", PeerRole: "Unknown", Disk: "UpToDate", PeerDisk: "DUnknown"},
				8: {Minor: 8, Connection: "StandAlone", Role: "Secondary", PeerRole: "Unknown", Disk: "UpToDate", PeerDisk: "DUnknown"},
				9: {Minor: 9, Connection: "SyncTarget", Role: "Secondary", PeerRole: "Primary", Disk: "Inconsistent", PeerDisk: "UpToDate",
					SyncPercent: fptr(2.4), EstimatedSeconds: iptr(3600 + 4*60 + 8)},
			}}},
	} {
		p, err := ParseProcDRBD([]byte(c.in))
		if err != nil || !reflect.DeepEqual(p, c.want) {
			t.Errorf("%s: %+v %v\nwant %+v", c.what, p, err, c.want)
		}
	}

	// A module without minors (DRBD 9 lists none).
	p, err := ParseProcDRBD([]byte("version: 9.2.4 (api:2/proto:86-122)\nGIT-hash: abc\nTransports (api:18): tcp (9.2.4)\n"))
	if err != nil || p.Major != 9 || p.Minor != 2 || len(p.Devices) != 0 {
		t.Errorf("drbd 9: %+v %v", p, err)
	}
}

// TestParseProcDRBDRefusals: bad input is refused, naming what is wrong.
func TestParseProcDRBDRefusals(t *testing.T) {
	const v = "version: 8.4.11 (api:1/proto:86-101)\n"
	for _, c := range []struct{ in, err string }{
		{"", "no version line"},
		{"\n\n", "no version line"},
		{"vers: 8.4\n", "want the version line"},
		{"version: 8\n", "is not <major>.<minor>"},
		{"version: 8.x.1\n", "is not <major>.<minor>"},
		{"version: -8.4\n", "is not <major>.<minor>"},
		{v + " 0: cs:Connected\n", "want ro:<role>/<peer role> and ds:"},
		{v + " 0: cs:Connected ro:Primary ds:UpToDate/UpToDate\n", "want <word>/<word>"},
		{v + " 0: cs:Connected ro:Primary/Secondary ds:UpToDate/\n", "want <word>/<word>"},
		{v + " 0: cs:Con-nected ro:Primary/Secondary ds:UpToDate/UpToDate\n", "want cs:<connection state> first"},
		{v + " 0: ro:Primary/Secondary ds:UpToDate/UpToDate\n", "want cs:<connection state> first"},
		{v + " 0: \n", "no connection state"},
		{v + " 0: cs:Unconfigured ro:Primary/Secondary\n", "an unconfigured minor with more"},
		{v + " 1048576: cs:Unconfigured\n", "above DRBD's highest"},
		{v + " 3: cs:Unconfigured\n 3: cs:Unconfigured\n", "minor 3 is listed twice"},
		{v + "    ns:0 nr:0\n", "an indented line before any minor"},
		{v + " 0: cs:Unconfigured\nsomething else\n", "neither a minor's line nor indented"},
		{v + " 0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent\n\t[=>] sync'ed: 101% (1/2)K\n", "not a percentage from 0 to 100"},
		{v + " 0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent\n\t[=>] sync'ed: NaN% (1/2)K\n", "not a percentage"},
		{v + " 0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent\n\t[=>] sync'ed: 12\n", "want a percentage"},
		{v + " 0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent\n\tfinish: 0:61:00 speed: 1\n", "is not H:MM:SS"},
		{v + " 0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent\n\tfinish: 12 speed: 1\n", "is not H:MM:SS"},
		{v + " 0: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent\n\tfinish:\n", "finish: no time"},
		{v + strings.Repeat("x", MaxProcDRBD), "bytes, at most"},
		{v + strings.Repeat("\n", MaxProcDRBDLines), "lines, at most"},
	} {
		if _, err := ParseProcDRBD([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%.60q: %v, want %q", c.in, err, c.err)
		}
	}
}

// FuzzParseProcDRBD: any input is parsed or refused, never a panic; a
// parse gives only minors in range with the states a line can say.
func FuzzParseProcDRBD(f *testing.F) {
	for _, name := range []string{"proc-sync-8.4.11.txt", "proc-connected-8.4.11.txt", "proc-newpeer-8.4.11.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", "drbd", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("version: 8.4.2 (api:1/proto:86-101)\n 2: cs:Unconfigured\n 4: cs:WFConnection ro:Primary/Unknown ds:UpToDate/DUnknown C r-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProcDRBD(data)
		if err != nil {
			return
		}
		if p.Version == "" {
			t.Fatal("parsed without a version")
		}
		for m, d := range p.Devices {
			if m != d.Minor || m < 0 || m > MaxDRBDMinor {
				t.Fatalf("minor %d: %+v", m, d)
			}
			if d.Connection != DRBDUnconfigured && (d.Role == "" || d.PeerRole == "" || d.Disk == "" || d.PeerDisk == "") {
				t.Fatalf("minor %d without its states: %+v", m, d)
			}
			if d.SyncPercent != nil && (*d.SyncPercent < 0 || *d.SyncPercent > 100) {
				t.Fatalf("minor %d: progress %v", m, *d.SyncPercent)
			}
		}
	})
}

// TestParseDRBDShow reads drbdsetup show as DRBD 8.4.11 wrote it:
// connected, with two primaries allowed, and detached without a network.
func TestParseDRBDShow(t *testing.T) {
	for _, c := range []struct {
		file string
		want DRBDShow
	}{
		{"show-connected-8.4.11.txt", DRBDShow{Resource: "resource0", Local: "ipv4 127.0.0.1:11000", Peer: "ipv4 127.0.0.2:11000",
			Minor: 0, Disk: "/dev/ram0", MetaDisk: "/dev/ram1"}},
		{"show-dual-8.4.11.txt", DRBDShow{Resource: "resource0", Local: "ipv4 127.0.0.1:11000", Peer: "ipv4 127.0.0.2:11000",
			TwoPrimary: true, Minor: 0, Disk: "/dev/ram0", MetaDisk: "/dev/ram1"}},
		{"show-detached-8.4.11.txt", DRBDShow{Resource: "resource0", Minor: 0}},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", "drbd", c.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseDRBDShow(data)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.file, got, err, c.want)
		}
	}
}

// TestParseDRBDShowRefusals: bad input is refused, naming what is wrong.
func TestParseDRBDShowRefusals(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{"", "no resource"},
		{"resource r0 {\n", `block "resource" is not closed`},
		{"}\n", "closes no block"},
		{"options {\n}\n", `want "resource <name> {"`},
		{"resource {\n}\n", `want "resource <name> {"`},
		{"resource r0 {\n}\nresource r1 {\n}\n", "a second resource"},
		{"resource r0 {\n net {\n  protocol C\n }\n}\n", "without its ';'"},
		{"resource r0 {\n ;\n}\n", "an empty statement"},
		{"protocol C;\n", "outside the resource"},
		{"resource r0 {\n _this_host {\n  volume 0 {\n   device minor x;\n  }\n }\n}\n", "is not \"minor <0-"},
		{"resource r0 {\n _this_host {\n  volume 0 {\n   device minor 1048576;\n  }\n }\n}\n", "is not \"minor <0-"},
		{"resource r0 {\n" + strings.Repeat("a {\n", 8) + strings.Repeat("}\n", 9), "nested deeper than 8"},
		{strings.Repeat("#", MaxProcDRBD+1), "bytes, at most"},
		{strings.Repeat("\n", MaxProcDRBDLines+1), "lines, at most"},
	} {
		if _, err := ParseDRBDShow([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%.60q: %v, want %q", c.in, err, c.err)
		}
	}
}

// FuzzParseDRBDShow: any input is parsed or refused, never a panic.
func FuzzParseDRBDShow(f *testing.F) {
	for _, name := range []string{"show-connected-8.4.11.txt", "show-dual-8.4.11.txt", "show-detached-8.4.11.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", "drbd", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseDRBDShow(data)
		if err == nil && (s.Resource == "" || s.Minor < -1 || s.Minor > MaxDRBDMinor) {
			t.Fatalf("parsed %+v", s)
		}
	})
}

// TestNoDRBD: a node takes drbd disks only with a DRBD 8.4 module that
// does not run drbdadm on its events, and drbd-utils; otherwise it says
// why.
func TestNoDRBD(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	all := func(string) string { return "/sbin/x" }
	none := func(string) string { return "" }
	noMeta := func(t string) string {
		if t == "drbdmeta" {
			return ""
		}
		return "/sbin/" + t
	}
	v84 := write("v84", "version: 8.4.11 (api:1/proto:86-101)\nsrcversion: F73C\n")
	drbdadm := write("drbdadm", "#!/bin/sh\nexit 10\n")
	helperTrue := write("helper-true", "/bin/true\n")
	helperAdm := write("helper-adm", drbdadm+"\n")
	helperGone := write("helper-gone", filepath.Join(dir, "no", "drbdadm")+"\n")
	for _, c := range []struct {
		proc, helper string
		find         func(string) string
		want         string
	}{
		{v84, helperTrue, all, ""},
		{v84, helperGone, all, ""},
		{v84, filepath.Join(dir, "no-param"), all, ""},
		{v84, helperAdm, all, "node n1's drbd module runs " + drbdadm + " on DRBD's events, which drops every resync of gnt's devices " +
			"(drbdadm has no configuration of them): set its usermode_helper to /bin/true, as Ganeti does (modprobe drbd usermode_helper=/bin/true, or echo /bin/true > " + helperAdm + ")"},
		{filepath.Join(dir, "absent"), "", all, "node n1 has no DRBD (no " + filepath.Join(dir, "absent") + ": the drbd kernel module is not loaded)"},
		{filepath.Join(dir, "absent"), "", none, "node n1 has no DRBD (no " + filepath.Join(dir, "absent") + ": the drbd kernel module is not loaded; no drbdsetup, no drbdmeta: drbd-utils is not installed)"},
		{v84, "", noMeta, "node n1 has no DRBD (no drbdmeta: drbd-utils is not installed)"},
		{write("v9", "version: 9.2.4 (api:2/proto:86-122)\n"), "", all, "node n1 has DRBD 9.2.4, which is not supported: gnt drives DRBD 8.4 as Ganeti does"},
		{write("v83", "version: 8.3.11 (api:88/proto:86-96)\n"), "", all, "node n1 has DRBD 8.3.11, which is not supported: gnt drives DRBD 8.4 as Ganeti does"},
		{write("bad", "garbage\n"), "", all, "node n1 has no usable DRBD (/proc/drbd line 1: want the version line"},
	} {
		if c.helper == "" {
			c.helper = helperTrue
		}
		if got := noDRBD("n1", c.proc, c.helper, c.find); got != c.want && (c.want == "" || !strings.HasPrefix(got, c.want)) {
			t.Errorf("%s: %q, want %q", filepath.Base(c.proc), got, c.want)
		}
	}
}
