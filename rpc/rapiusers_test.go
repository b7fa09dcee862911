package rpc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"golang.org/x/crypto/bcrypt"
)

// Ganeti's own example (doc/rapi.rst, "Users and passwords").
const ganetiUsersFile = `# Give Jack and Fred read-only access
jack abc123
fred {cleartext}foo555

# Give write access to an imaginary instance creation script
autocreator xyz789 write

# Hashed password for Jessica
jessica {HA1}7046452df2cbb530877058712cf17bd4 write

# Monitoring can query for values
monitoring {HA1}ec018ffe72b8e75bb4d508ed5b6d079c read

# A user who can read and write (the former is implied by granting
# write access)
superuser {HA1}ec018ffe72b8e75bb4d508ed5b6d079c read,write
`

func TestParseUsersFileGaneti(t *testing.T) {
	users, err := rpc.ParseUsersFile([]byte(ganetiUsersFile))
	if err != nil {
		t.Fatal(err)
	}
	want := []rpc.UserEntry{
		{Name: "jack", Scheme: rpc.SchemeCleartext, Secret: "abc123", Read: true},
		{Name: "fred", Scheme: rpc.SchemeCleartext, Secret: "foo555", Read: true},
		{Name: "autocreator", Scheme: rpc.SchemeCleartext, Secret: "xyz789", Write: true},
		{Name: "jessica", Scheme: fsm.SchemeHA1, Secret: "7046452df2cbb530877058712cf17bd4", Write: true},
		{Name: "monitoring", Scheme: fsm.SchemeHA1, Secret: "ec018ffe72b8e75bb4d508ed5b6d079c", Read: true},
		{Name: "superuser", Scheme: fsm.SchemeHA1, Secret: "ec018ffe72b8e75bb4d508ed5b6d079c", Read: true, Write: true},
	}
	if len(users) != len(want) {
		t.Fatalf("got %d users: %+v", len(users), users)
	}
	for i := range want {
		if users[i] != want[i] {
			t.Errorf("user %d = %+v, want %+v", i, users[i], want[i])
		}
	}
	// echo -n 'jack:Ganeti Remote API:abc123' | md5sum (rapi.rst's recipe)
	if got := rpc.HA1("jack", "abc123"); got != "54c12257ee9be413f2f3182435514aae" {
		t.Errorf("HA1(jack, abc123) = %s", got)
	}
}

func TestParseUsersFileForms(t *testing.T) {
	for _, c := range []struct {
		in   string
		want rpc.UserEntry
	}{
		{"a {CLEARTEXT}p", rpc.UserEntry{Name: "a", Scheme: rpc.SchemeCleartext, Secret: "p", Read: true}},
		{"a {ClearText}{p}", rpc.UserEntry{Name: "a", Scheme: rpc.SchemeCleartext, Secret: "{p}", Read: true}},
		{"a {ha1}7046452DF2CBB530877058712CF17BD4 WRITE", rpc.UserEntry{Name: "a", Scheme: fsm.SchemeHA1, Secret: "7046452df2cbb530877058712cf17bd4", Write: true}},
		{"\t a\tp  write,read \r", rpc.UserEntry{Name: "a", Scheme: rpc.SchemeCleartext, Secret: "p", Read: true, Write: true}},
		{"a p#notacomment", rpc.UserEntry{Name: "a", Scheme: rpc.SchemeCleartext, Secret: "p#notacomment", Read: true}},
	} {
		users, err := rpc.ParseUsersFile([]byte(c.in))
		if err != nil || len(users) != 1 || users[0] != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.in, users, err, c.want)
		}
	}
	if users, err := rpc.ParseUsersFile([]byte("\n# only comments\n   \n  # and blanks\n")); err != nil || len(users) != 0 {
		t.Errorf("empty file: %v, %v", users, err)
	}
}

// TestParseUsersFileBad: each bad line refuses the whole file, naming the
// line and why.
func TestParseUsersFileBad(t *testing.T) {
	good := "ok secret write\n"
	for _, c := range []struct {
		in, want string
		line     int
	}{
		{"jack\n", "got one field", 1},
		{"jack abc read write\n", "got 4 fields", 1},
		{"jack abc read, write\n", "got 4 fields", 1},
		{"jack abc admin\n", `unknown option "admin"`, 1},
		{"jack abc read,\n", "empty option", 1},
		{"jack abc ,\n", "empty option", 1},
		{"jack {sha}abc\n", "unknown password scheme {sha}", 1},
		{"jack {abc\n", "no scheme", 1},
		{"jack {HA1}abc\n", "32 hex digits", 1},
		{"jack {HA1}7046452df2cbb530877058712cf17bdz\n", "32 hex digits", 1},
		{"jack {cleartext}\n", "empty password", 1},
		{"jack " + strings.Repeat("x", 73) + "\n", "73 bytes long; the limit is 72", 1},
		{"ja:ck abc\n", "not allowed", 1},
		{strings.Repeat("u", 65) + " abc\n", "the limit is 64", 1},
		{"jack a\x00b\n", "control character", 1},
		{"jack a\rb\n", "control character", 1},
		{"jack abc\nfred x\njack def write\n", "listed already on line 2", 3},
		{"jack \xff\xfe\n", "not valid UTF-8", 0},
	} {
		_, err := rpc.ParseUsersFile([]byte(good + c.in))
		var fe *rpc.UsersFileError
		if !errors.As(err, &fe) {
			t.Errorf("%q: accepted (%v)", c.in, err)
			continue
		}
		wantLine := c.line
		if wantLine > 0 {
			wantLine++ // after the good line
		}
		if fe.Line != wantLine || !strings.Contains(fe.Reason, c.want) {
			t.Errorf("%q: line %d %q, want line %d containing %q", c.in, fe.Line, fe.Reason, wantLine, c.want)
		}
	}
	big := strings.Repeat("# "+strings.Repeat("x", 1000)+"\n", 1100)
	if _, err := rpc.ParseUsersFile([]byte(big)); err == nil || !strings.Contains(err.Error(), "the limit is 1048576") {
		t.Errorf("a file over 1 MiB: %v", err)
	}
}

func TestUserEntryStored(t *testing.T) {
	u := rpc.UserEntry{Name: "jack", Scheme: rpc.SchemeCleartext, Secret: "abc123", Write: true}
	s, err := u.Stored(bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if s.Scheme != fsm.SchemeBcrypt || strings.Contains(s.Hash, "abc123") || !s.Write {
		t.Fatalf("stored %+v", s)
	}
	if e := s.Validate("user"); e != nil {
		t.Fatal(e)
	}
	if bcrypt.CompareHashAndPassword([]byte(s.Hash), []byte("abc123")) != nil {
		t.Fatal("hash does not match the password")
	}
	h, err := rpc.UserEntry{Name: "jack", Scheme: fsm.SchemeHA1, Secret: rpc.HA1("jack", "x")}.Stored(bcrypt.MinCost)
	if err != nil || h.Hash != rpc.HA1("jack", "x") || h.Validate("user") != nil {
		t.Fatalf("HA1 stored %+v, %v", h, err)
	}
}

// FuzzParseUsersFile: any input is parsed or refused with a line number
// inside the file, and what is accepted holds valid users that parse
// again to the same.
func FuzzParseUsersFile(f *testing.F) {
	for _, s := range []string{ganetiUsersFile, "a b", "a {HA1}00000000000000000000000000000000 read,write", "a {x}b", "#", "a b c d", "a\x00 b", "a b\na b"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		users, err := rpc.ParseUsersFile(data)
		if err != nil {
			var fe *rpc.UsersFileError
			if !errors.As(err, &fe) || fe.Line < 0 || fe.Line > strings.Count(string(data), "\n")+1 || fe.Reason == "" {
				t.Fatalf("error %v", err)
			}
			return
		}
		seen := map[string]bool{}
		var again strings.Builder
		for _, u := range users {
			if seen[u.Name] {
				t.Fatalf("user %s twice", u.Name)
			}
			seen[u.Name] = true
			if e := fsm.ValidateRAPIUserName("name", u.Name); e != nil {
				t.Fatalf("accepted name: %v", e)
			}
			var pw string
			switch u.Scheme {
			case fsm.SchemeHA1:
				if (&fsm.RAPIUser{Name: u.Name, Scheme: u.Scheme, Hash: u.Secret}).Validate("u") != nil {
					t.Fatalf("accepted HA1 %q", u.Secret)
				}
				pw = "{HA1}" + u.Secret
			case rpc.SchemeCleartext:
				if u.Secret == "" || len(u.Secret) > rpc.MaxPasswordLen {
					t.Fatalf("accepted password of %d bytes", len(u.Secret))
				}
				pw = "{cleartext}" + u.Secret
			default:
				t.Fatalf("scheme %q", u.Scheme)
			}
			opts := []string{}
			if u.Read {
				opts = append(opts, "read")
			}
			if u.Write {
				opts = append(opts, "write")
			}
			if len(opts) == 0 {
				t.Fatalf("user %s has no access", u.Name)
			}
			again.WriteString(u.Name + " " + pw + " " + strings.Join(opts, ",") + "\n")
		}
		back, err := rpc.ParseUsersFile([]byte(again.String()))
		if err != nil || len(back) != len(users) {
			t.Fatalf("re-parsing %q: %v", again.String(), err)
		}
		for i := range back {
			if back[i] != users[i] {
				t.Fatalf("re-parsed %+v, want %+v", back[i], users[i])
			}
		}
	})
}
