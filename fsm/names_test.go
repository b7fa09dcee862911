package fsm

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// The name rules as Ganeti writes them; the byte loops must agree.
var (
	hostLabelRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	groupNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$`)
	tagRe       = regexp.MustCompile(`^[\w.+*/:@-]+$`)
)

func checkNameRules(t testing.TB, s string) {
	t.Helper()
	if got, want := hostLabelOK(s), hostLabelRe.MatchString(s); got != want {
		t.Fatalf("hostLabelOK(%q) = %v, the regular expression says %v", s, got, want)
	}
	if got, want := groupNameOK(s), groupNameRe.MatchString(s); got != want {
		t.Fatalf("groupNameOK(%q) = %v, the regular expression says %v", s, got, want)
	}
	if got, want := tagCharsOK(s), tagRe.MatchString(s); got != want {
		t.Fatalf("tagCharsOK(%q) = %v, the regular expression says %v", s, got, want)
	}
}

func TestNameRules(t *testing.T) {
	for _, s := range []string{
		"", "a", "-", "a-", "-a", "a-b", "a_b", "a.b", "A9", "é", "a\n", "a b",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 128), strings.Repeat("a", 129),
		"rack:a1", "x/y@z+*", "a\xff", "_a", ".a", "a+", "a*",
	} {
		checkNameRules(t, s)
	}
	// Random strings over the characters at the rules' edges.
	const alphabet = "aZ09-_.+*/:@ \n\xc3\xa9\xff"
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(140))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = "abcXYZ0189"[r.IntN(10)]
			}
		}
		checkNameRules(t, string(b))
	}
	if e := ValidateHostname("name", "node1.example.com."); e != nil {
		t.Fatal(e)
	}
	for _, bad := range []string{".", "a..b", "-a.b", "a.b-", "a_b.c"} {
		if ValidateHostname("name", bad) == nil {
			t.Errorf("hostname %q accepted", bad)
		}
	}
}

func FuzzNameRules(f *testing.F) {
	for _, s := range []string{"", "a-b", "rack:a1", "a.b_c", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkNameRules(t, s) })
}
