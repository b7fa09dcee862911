package osdef

import (
	"slices"
	"strings"
	"testing"
)

func TestParseAPIVersions(t *testing.T) {
	good := []struct {
		in   string
		want []int
	}{
		{"20\n", []int{20}},
		{"20\n15\n10\n", []int{20, 15, 10}},
		{"5\n10", []int{5, 10}}, // Debian's ganeti-os-noop
		{"\n 20 \r\n\n", []int{20}},
	}
	for _, c := range good {
		got, err := ParseAPIVersions([]byte(c.in))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseAPIVersions(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, want string }{
		{"", "lists no API version"},
		{"\n\n", "lists no API version"},
		{"twenty\n", `line 1: "twenty" is not an API version (a number from 1 to 1000)`},
		{"20\n0\n", `line 2: "0" is not an API version`},
		{"-20\n", `"-20" is not an API version`},
		{"1001\n", `"1001" is not an API version`},
		{"20 15\n", `"20 15" is not an API version`},
		{"20\n20\n", "line 2: version 20 is listed twice"},
		{"2\x000\n", "contains a NUL byte"},
		{"\xff\n", "not UTF-8 text"},
		{strings.Repeat("\n", MaxFileBytes) + "20", "bytes; at most 65536"},
	}
	for _, c := range bad {
		got, err := ParseAPIVersions([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || got != nil {
			t.Errorf("ParseAPIVersions(%q) = %v, %v; want an error with %q", clip(c.in), got, err, c.want)
		}
	}
}

func TestNegotiateVersion(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want int
	}{{[]int{20}, 20}, {[]int{15, 20}, 20}, {[]int{5, 10}, 10}, {[]int{30, 15}, 15}} {
		if got, err := NegotiateVersion(c.in); err != nil || got != c.want {
			t.Errorf("NegotiateVersion(%v) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	if _, err := NegotiateVersion([]int{5, 30}); err == nil || !strings.Contains(err.Error(), "API version(s) 5, 30 not supported; gnt speaks 20, 15, 10") {
		t.Errorf("NegotiateVersion(5, 30) = %v", err)
	}
}

func TestParseVariants(t *testing.T) {
	good := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"default\n", []string{"default"}},
		{"# comment\nbookworm\n\n  trixie  \nsid-1.2_x\n", []string{"bookworm", "trixie", "sid-1.2_x"}},
	}
	for _, c := range good {
		got, err := ParseVariants([]byte(c.in))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseVariants(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, want string }{
		{"a+b\n", `line 1: variant "a+b" is not letters`},
		{"ok\n-x\n", `line 2: variant "-x" is not letters`},
		{"two words\n", `variant "two words" is not letters`},
		{"a/b\n", `variant "a/b"`},
		{strings.Repeat("v", MaxVariantLen+1), "must be 1 to 64 characters"},
		{"a\nb\na\n", `line 3: variant "a" is listed twice`},
		{manyLines("v", MaxVariants+1), "lists more than 256 variants"},
		{"a\x00\n", "NUL byte"},
		{"\xfe\n", "not UTF-8"},
	}
	for _, c := range bad {
		got, err := ParseVariants([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || got != nil {
			t.Errorf("ParseVariants(%q) = %v, %v; want an error with %q", clip(c.in), got, err, c.want)
		}
	}
}

func manyLines(prefix string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(prefix)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(string(rune('a' + i/26%26)))
		b.WriteString("\n")
	}
	return b.String()
}

func TestParseParameters(t *testing.T) {
	got, err := ParseParameters([]byte("# comment\ndhcp Whether to enable (yes) or disable (no) dhcp\nroot_size\tThe size of the root partition, in GiB\n\nbare\n"))
	want := []Param{{"dhcp", "Whether to enable (yes) or disable (no) dhcp"}, {"root_size", "The size of the root partition, in GiB"}, {"bare", ""}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ParseParameters = %v, %v; want %v", got, err, want)
	}
	if got, err := ParseParameters(nil); err != nil || got != nil {
		t.Errorf("ParseParameters(empty) = %v, %v", got, err)
	}
	bad := []struct{ in, want string }{
		{"1st a number\n", `line 1: "1st" is not a parameter name`},
		{"ok fine\nroot-size x\n", `line 2: "root-size" is not a parameter name`},
		{"_x y\n", `"_x" is not a parameter name`},
		{strings.Repeat("p", MaxParamNameLen+1) + " d\n", "is not a parameter name (1 to 64"},
		{"dhcp a\nDHCP b\n", `line 2: parameter "DHCP" is listed twice (names are upper-cased into OSP_DHCP)`},
		{"p " + strings.Repeat("d", MaxDescriptionLen+1), "the description of p is 1025 bytes; at most 1024"},
		{manyLines("p", MaxParameters+1), "lists more than 256 parameters"},
		{"p\x00 d", "NUL byte"},
	}
	for _, c := range bad {
		got, err := ParseParameters([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || got != nil {
			t.Errorf("ParseParameters(%q) = %v, %v; want an error with %q", clip(c.in), got, err, c.want)
		}
	}
}

func TestCheckOSName(t *testing.T) {
	for _, ok := range []string{"noop", "debootstrap", "gnt-image", "a.b_c"} {
		if err := CheckOSName(ok); err != nil {
			t.Errorf("CheckOSName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".hidden", "a/b", "..", "a+b", "-x", strings.Repeat("o", MaxOSNameLen+1)} {
		if err := CheckOSName(bad); err == nil {
			t.Errorf("CheckOSName(%q) accepted", bad)
		}
	}
}

func FuzzParseAPIVersions(f *testing.F) {
	for _, s := range []string{"20\n", "5\n10", "", "x", "20\n20", "0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := ParseAPIVersions(data)
		if err != nil {
			if vs != nil {
				t.Fatalf("an error and versions %v", vs)
			}
			return
		}
		if len(vs) == 0 {
			t.Fatal("accepted with no version")
		}
		for i, v := range vs {
			if v < 1 || v > MaxAPIVersion || slices.Contains(vs[:i], v) {
				t.Fatalf("accepted version %d in %v", v, vs)
			}
		}
	})
}

func FuzzParseVariants(f *testing.F) {
	for _, s := range []string{"default\n", "# c\na\nb", "a+b", "a\na", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := ParseVariants(data)
		if err != nil {
			if vs != nil {
				t.Fatalf("an error and variants %v", vs)
			}
			return
		}
		if len(vs) > MaxVariants {
			t.Fatalf("%d variants accepted", len(vs))
		}
		for i, v := range vs {
			if CheckVariant(v) != nil || strings.ContainsAny(v, "+/ \t") || slices.Contains(vs[:i], v) {
				t.Fatalf("accepted variant %q in %v", v, vs)
			}
		}
	})
}

func FuzzParseParameters(f *testing.F) {
	for _, s := range []string{"dhcp yes or no\n", "a\tb\nc d e", "1x y", "a x\nA y", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParseParameters(data)
		if err != nil {
			if ps != nil {
				t.Fatalf("an error and parameters %v", ps)
			}
			return
		}
		if len(ps) > MaxParameters {
			t.Fatalf("%d parameters accepted", len(ps))
		}
		seen := map[string]bool{}
		for _, p := range ps {
			u := strings.ToUpper(p.Name)
			if p.Name == "" || len(p.Name) > MaxParamNameLen || !isLetter(p.Name[0]) || !nameChars(p.Name, "_") || seen[u] || len(p.Description) > MaxDescriptionLen {
				t.Fatalf("accepted parameter %+v in %v", p, ps)
			}
			seen[u] = true
		}
	})
}
