package fsm

import (
	"encoding/json"
	"testing"
)

func TestAppendJSONEscape(t *testing.T) {
	good := []struct{ in, want string }{
		{`\"`, `"`}, {`\\`, `\`}, {`\/`, `/`}, {`\b`, "\b"}, {`\f`, "\f"},
		{`\n`, "\n"}, {`\r`, "\r"}, {`\t`, "\t"}, {`\u0041`, "A"}, {`\u00e9`, "é"},
		{`\uD83D\uDE00`, "😀"}, {`\ud83d\ude00x`, "😀"},
	}
	for _, c := range good {
		out, next, _, fault := appendJSONEscape([]byte("p"), []byte(c.in), 0)
		if fault != escOK || string(out) != "p"+c.want {
			t.Errorf("%s: got %q, fault %d; want %q", c.in, out, fault, c.want)
		}
		if n := len(c.in); c.in[n-1] == 'x' && next != n-1 || c.in[n-1] != 'x' && next != n {
			t.Errorf("%s: next %d", c.in, next)
		}
	}
	bad := []struct {
		in    string
		fault jsonEscFault
		hi    rune
	}{
		{`\`, escSyntax, 0}, {`\x`, escSyntax, 0}, {`\u12`, escSyntax, 0}, {`\u12g4`, escSyntax, 0},
		{`\ud83d`, escHalfSurrogate, 0xd83d}, {`\ude00`, escHalfSurrogate, 0xde00},
		{`\ud83dx`, escHalfSurrogate, 0xd83d}, {`\ud83d\n`, escHalfSurrogate, 0xd83d},
		{`\ud83d\u12`, escSyntax, 0}, {`\ud83d\u0041`, escBadPair, 0}, {`\ud83d\ud83d`, escBadPair, 0},
	}
	for _, c := range bad {
		out, _, hi, fault := appendJSONEscape([]byte("p"), []byte(c.in), 0)
		if fault != c.fault || hi != c.hi || string(out) != "p" {
			t.Errorf("%s: fault %d hi %x out %q; want fault %d hi %x and nothing appended", c.in, fault, hi, out, c.fault, c.hi)
		}
	}
}

// FuzzAppendJSONEscape checks that an escape appendJSONEscape accepts
// decodes as encoding/json decodes it.
func FuzzAppendJSONEscape(f *testing.F) {
	for _, s := range []string{`\n`, `\u0041`, `\ud83d\ude00`, `\ud83d`, `\x`, `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || s[0] != '\\' {
			return // the callers call it at a backslash
		}
		b := []byte(s)
		out, next, _, fault := appendJSONEscape(nil, b, 0)
		if fault != escOK {
			return
		}
		var want string
		if err := json.Unmarshal([]byte(`"`+s[:next]+`"`), &want); err != nil {
			t.Fatalf("%q accepted (%q) but encoding/json refuses it: %v", s[:next], out, err)
		}
		if string(out) != want {
			t.Fatalf("%q decodes to %q, encoding/json says %q", s[:next], out, want)
		}
	})
}
