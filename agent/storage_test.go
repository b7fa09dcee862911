package agent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseVGS(t *testing.T) {
	us, err := ParseVGS([]byte("  xenvg|10236.00|2048.50\n  data|100.00|100.00\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []StorageUnit{
		{Type: StorageLVMVG, Name: "xenvg", SizeMiB: 10236, UsedMiB: 8188, FreeMiB: 2048, Allocatable: true},
		{Type: StorageLVMVG, Name: "data", SizeMiB: 100, UsedMiB: 0, FreeMiB: 100, Allocatable: true},
	}
	if len(us) != len(want) {
		t.Fatalf("got %v, want %v", us, want)
	}
	for i := range want {
		if us[i] != want[i] {
			t.Errorf("unit %d: got %+v, want %+v", i, us[i], want[i])
		}
	}
}

func TestParsePVS(t *testing.T) {
	us, err := ParsePVS([]byte("  /dev/sda2|xenvg|5000.00|1000.00|a--\n  /dev/sdb1|xenvg|5236.00|1048.00|u--\n  /dev/sdc||20.00|20.00|---\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []StorageUnit{
		{Type: StorageLVMPV, Name: "/dev/sda2", VG: "xenvg", SizeMiB: 5000, UsedMiB: 4000, FreeMiB: 1000, Allocatable: true},
		{Type: StorageLVMPV, Name: "/dev/sdb1", VG: "xenvg", SizeMiB: 5236, UsedMiB: 4188, FreeMiB: 1048, Allocatable: false},
		{Type: StorageLVMPV, Name: "/dev/sdc", SizeMiB: 20, UsedMiB: 0, FreeMiB: 20, Allocatable: false},
	}
	if len(us) != len(want) {
		t.Fatalf("got %v, want %v", us, want)
	}
	for i := range want {
		if us[i] != want[i] {
			t.Errorf("unit %d: got %+v, want %+v", i, us[i], want[i])
		}
	}
}

func TestParseLVMBadInput(t *testing.T) {
	for _, c := range []struct {
		name, vgs, pvs, want string
	}{
		{"too few fields", "xenvg|100", "/dev/sda|vg|1|1", "fields"},
		{"too many fields", "xenvg|100|1|x", "/dev/sda|vg|1|1|a--|x", "fields"},
		{"size not a number", "xenvg|big|1", "/dev/sda|vg|big|1|a--", "not a size"},
		{"negative", "xenvg|-1|0", "/dev/sda|vg|-1|0|a--", "not a size"},
		{"NaN", "xenvg|NaN|0", "/dev/sda|vg|NaN|0|a--", "not a size"},
		{"huge", "xenvg|1e300|0", "/dev/sda|vg|1e300|0|a--", "not a size"},
		{"free over size", "xenvg|10|20", "/dev/sda|vg|10|20|a--", "free of"},
		{"empty name", "|10|5", "|vg|10|5|a--", "must be 1 to"},
		{"control byte in name", "xe\x01vg|10|5", "/dev/s\x01da|vg|10|5|a--", "does not print"},
		{"long name", strings.Repeat("v", 200) + "|10|5", strings.Repeat("p", 200) + "|vg|10|5|a--", "must be 1 to"},
	} {
		if _, err := ParseVGS([]byte(c.vgs)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParseVGS(%q) = %v, want an error with %q", c.name, c.vgs, err, c.want)
		}
		if _, err := ParsePVS([]byte(c.pvs)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParsePVS(%q) = %v, want an error with %q", c.name, c.pvs, err, c.want)
		}
	}
	if _, err := ParsePVS([]byte("/dev/sda|vg|10|5|")); err == nil || !strings.Contains(err.Error(), "pv_attr") {
		t.Errorf("empty pv_attr: %v", err)
	}
	many := strings.Repeat("vg|1|1\n", MaxStorageUnits+1)
	if _, err := ParseVGS([]byte(many)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d units: %v", MaxStorageUnits+1, err)
	}
	if _, err := ParseVGS(make([]byte, MaxLVMOutput+1)); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("long output: %v", err)
	}
}

func FuzzParseLVM(f *testing.F) {
	f.Add([]byte("  xenvg|10236.00|2048.50\n"))
	f.Add([]byte("  /dev/sda2|xenvg|5000.00|1000.00|a--\n"))
	f.Add([]byte("|||\n\n|"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) ([]StorageUnit, error){ParseVGS, ParsePVS} {
			us, err := parse(b)
			if err != nil {
				continue
			}
			for _, u := range us {
				if u.Name == "" || u.SizeMiB < 0 || u.FreeMiB < 0 || u.UsedMiB < 0 || u.FreeMiB+u.UsedMiB != u.SizeMiB {
					t.Fatalf("accepted a bad unit %+v from %q", u, b)
				}
			}
		}
	})
}

// TestParseLVS reads every logical volume's size and state from lvs,
// and refuses malformed listings naming what is wrong.
func TestParseLVS(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      map[string]LV
	}{
		{"two volumes", "  a.b|64.00|-wi-a-----\n  c.d|128.50|-wi-------\n", map[string]LV{"a.b": {64, true}, "c.d": {128, false}}},
		{"short attr is inactive", "a.b|1|-wi-\n", map[string]LV{"a.b": {1, false}}},
		{"blank lines", "\n  \n a.b | 2 | -wi-a- \n\n", map[string]LV{"a.b": {2, true}}},
		{"empty volume group", "", map[string]LV{}},
	} {
		got, err := ParseLVS([]byte(c.out))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
	for _, c := range []struct{ name, out, want string }{
		{"two fields", "a.b|64.00\n", "line 1 has 2 fields, want 3"},
		{"four fields", "a.b|64.00|-wi-a-----|x\n", "line 1 has 4 fields, want 3"},
		{"bad size", "a.b|lots|-wi-a-----\n", `lv_size of a.b "lots" is not a size`},
		{"negative size", "a.b|-1|-wi-a-----\n", "is not a size"},
		{"NaN size", "a.b|NaN|-wi-a-----\n", "is not a size"},
		{"no attr", "a.b|64.00|\n", "lv_attr of a.b"},
		{"long attr", "a.b|64.00|" + strings.Repeat("a", 17) + "\n", "want 1 to 16 characters"},
		{"control byte in name", "a\x01b|64.00|-wi-a-----\n", "lv_name"},
		{"empty name", "|64.00|-wi-a-----\n", "lv_name"},
		{"bad row after good ones", "a.b|1|-wi-a-----\nc.d|x|-wi-a-----\n", `lv_size of c.d "x"`},
		{"name twice", "a.b|1|-wi-a-----\na.b|2|-wi-------\n", "a.b is listed twice"},
		{"too long", strings.Repeat("a.b|1|-wi-a-----\n", MaxLVMOutput/16), "over the limit"},
	} {
		if got, err := ParseLVS([]byte(c.out)); err == nil || got != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v %v, want an error with %q and nothing listed", c.name, got, err, c.want)
		}
	}
}

// FuzzParseLVS: whatever ParseLVS accepts has one entry per listed line,
// each a name LVM prints and a size of 0 or more.
func FuzzParseLVS(f *testing.F) {
	f.Add([]byte("  a.b|64.00|-wi-a-----\n"))
	f.Add([]byte("  a.b|64.00|-wi-a-----\n  c.d|128.50|-wi-------\n"))
	f.Add([]byte("|||\n"))
	f.Add([]byte("a.b|1|x\na.b|1|x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lvs, err := ParseLVS(b)
		if err != nil {
			if lvs != nil {
				t.Fatalf("error %v with a listing %v", err, lvs)
			}
			return
		}
		lines := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(l) != "" {
				lines++
			}
		}
		if len(lvs) != lines {
			t.Fatalf("%d volumes from %d lines of %q", len(lvs), lines, b)
		}
		for name, lv := range lvs {
			if checkLVMName("", name) != nil || lv.SizeMiB < 0 {
				t.Fatalf("accepted %q %+v from %q", name, lv, b)
			}
		}
	})
}

func TestStorageList(t *testing.T) {
	dir := t.TempDir()
	calls := map[string]int{}
	s := Storage{FileDirs: []string{dir, dir + "/not-yet/there", ""}, Run: func(_ context.Context, tool string, _ ...string) ([]byte, error) {
		calls[tool]++
		switch tool {
		case "vgs":
			return []byte("  xenvg|100.00|40.00\n"), nil
		case "pvs":
			return nil, errors.New("pvs: permission denied")
		}
		return nil, ErrNoLVM
	}}
	rep, err := s.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Units) != 3 {
		t.Fatalf("units %+v, want 2 file and 1 lvm-vg", rep.Units)
	}
	for _, u := range rep.Units[:2] {
		if u.Type != StorageFile || u.SizeMiB <= 0 || u.FreeMiB > u.SizeMiB || !u.Allocatable {
			t.Errorf("file unit %+v", u)
		}
	}
	if rep.Units[1].Name != dir+"/not-yet/there" {
		t.Errorf("a dir that does not exist yet is named as configured: %+v", rep.Units[1])
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], "permission denied") {
		t.Errorf("errors %v, want the failure of pvs", rep.Errors)
	}
	rep, err = s.List(context.Background(), StorageLVMVG)
	if err != nil || len(rep.Units) != 1 || rep.Units[0].Name != "xenvg" || len(rep.Errors) != 0 {
		t.Errorf("lvm-vg only: %+v, %v", rep, err)
	}
	if _, err := s.List(context.Background(), "rados"); err == nil || !strings.Contains(err.Error(), "rados") {
		t.Errorf("unknown type: %v", err)
	}
	noLVM := Storage{FileDirs: []string{dir}, Run: func(context.Context, string, ...string) ([]byte, error) { return nil, ErrNoLVM }}
	rep, err = noLVM.List(context.Background(), "")
	if err != nil || len(rep.Units) != 1 || len(rep.Errors) != 0 {
		t.Errorf("without LVM: %+v, %v; want the file unit and no error", rep, err)
	}
}

func TestCheckVGName(t *testing.T) {
	for _, ok := range []string{"xenvg", "vg_0.data+x-1"} {
		if err := CheckVGName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-vg", ".", "..", "v g", "vg/x", strings.Repeat("v", 129)} {
		if err := CheckVGName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s := Storage{Run: func(context.Context, string, ...string) ([]byte, error) {
		t.Fatal("ran with a bad name")
		return nil, nil
	}}
	if _, err := s.RepairVG(context.Background(), "--all"); err == nil {
		t.Error("RepairVG accepted --all")
	}
}
