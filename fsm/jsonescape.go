package fsm

import (
	"unicode/utf16"
	"unicode/utf8"
)

// jsonEscFault says why appendJSONEscape refused an escape.
type jsonEscFault uint8

const (
	// escOK: the escape was decoded.
	escOK jsonEscFault = iota
	// escSyntax: not an escape of JSON, or the text ends inside it.
	escSyntax
	// escHalfSurrogate: \u of half a UTF-16 surrogate pair with no
	// second half after it (or a low half first).
	escHalfSurrogate
	// escBadPair: a high surrogate followed by a \u that is not a low one.
	escBadPair
)

// appendJSONEscape decodes the escape of a JSON string whose backslash is
// b[i] onto out, a surrogate pair (two \u escapes) as one character. It
// returns out, the offset after what it read, the first \u's value (with
// escHalfSurrogate) and the fault, escOK when the escape was good.
func appendJSONEscape(out, b []byte, i int) ([]byte, int, rune, jsonEscFault) {
	if i+1 >= len(b) {
		return out, i, 0, escSyntax
	}
	e := b[i+1]
	i += 2
	switch e {
	case '"', '\\', '/':
		return append(out, e), i, 0, escOK
	case 'b':
		return append(out, '\b'), i, 0, escOK
	case 'f':
		return append(out, '\f'), i, 0, escOK
	case 'n':
		return append(out, '\n'), i, 0, escOK
	case 'r':
		return append(out, '\r'), i, 0, escOK
	case 't':
		return append(out, '\t'), i, 0, escOK
	case 'u':
	default:
		return out, i, 0, escSyntax
	}
	rn, ok := hex4(b, i)
	if !ok {
		return out, i, 0, escSyntax
	}
	i += 4
	if utf16.IsSurrogate(rn) {
		// Only a high surrogate followed by a low one is a character; a
		// lone half is refused.
		if rn >= 0xdc00 || i+1 >= len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return out, i, rn, escHalfSurrogate
		}
		i += 2
		lo, ok := hex4(b, i)
		if !ok {
			return out, i, 0, escSyntax
		}
		i += 4
		if rn = utf16.DecodeRune(rn, lo); rn == utf8.RuneError {
			return out, i, 0, escBadPair
		}
	}
	return utf8.AppendRune(out, rn), i, 0, escOK
}

// hex4 reads the four hex digits of a \u escape at b[i].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var v rune
	for _, c := range b[i : i+4] {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			v |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			v |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}
