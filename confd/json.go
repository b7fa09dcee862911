package confd

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gnt-cluster/gnt/fsm"
)

// appendString appends s as a JSON string made of ASCII only: quotes,
// backslashes and control characters are escaped, and so is every
// non-ASCII character (\uXXXX, surrogate pairs beyond the BMP), as Python's
// json.dumps does by default. Invalid UTF-8 becomes U+FFFD.
func appendString[T string | []byte](dst []byte, s T) []byte {
	const hexd = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		var rn rune
		var n int
		switch v := any(s).(type) {
		case string:
			rn, n = utf8.DecodeRuneInString(v[i:])
		case []byte:
			rn, n = utf8.DecodeRune(v[i:])
		}
		i += n
		u := func(x rune) {
			dst = append(dst, '\\', 'u', hexd[x>>12&0xf], hexd[x>>8&0xf], hexd[x>>4&0xf], hexd[x&0xf])
		}
		if rn > 0xffff {
			hi, lo := utf16.EncodeRune(rn)
			u(hi)
			u(lo)
		} else {
			u(rn)
		}
	}
	return append(dst, '"')
}

// asciiJSON rewrites encoded JSON so that it is ASCII only: every
// non-ASCII character (they can only occur inside strings) becomes a
// \uXXXX escape. Both ends of confd hash the message as bytes, and Ganeti's
// Haskell daemon reads packets as Latin-1: only ASCII hashes the same
// everywhere.
func asciiJSON(b []byte) []byte {
	ascii := true
	for _, c := range b {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return b
	}
	const hexd = "0123456789abcdef"
	out := make([]byte, 0, len(b)+len(b)/2)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		rn, n := utf8.DecodeRune(b[i:])
		i += n
		u := func(x rune) {
			out = append(out, '\\', 'u', hexd[x>>12&0xf], hexd[x>>8&0xf], hexd[x>>4&0xf], hexd[x&0xf])
		}
		if rn > 0xffff {
			hi, lo := utf16.EncodeRune(rn)
			u(hi)
			u(lo)
		} else {
			u(rn)
		}
	}
	return out
}

// reader reads confd's JSON: fsm's strict reader, with the shapes of
// confd's messages on top (object, list, query).
type reader struct{ fsm.JSONReader }
