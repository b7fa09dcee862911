package confd

import (
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON reader for the shapes confd exchanges: objects of a few
// known keys whose values are strings, integers, or anything (skipped or
// kept raw). It reads the bytes it is given and nothing else: no length a
// packet states is trusted, strings are unescaped into a buffer the caller
// sized to the input, and nesting deeper than maxDepth is refused rather
// than followed. It accepts exactly RFC 8259 JSON that is valid UTF-8
// without lone surrogates (Python's and Haskell's encoders produce nothing
// else); encoding/json is the oracle of its fuzz test.

// maxDepth bounds the nesting of values the reader skips or keeps raw.
const maxDepth = 64

type reader struct {
	b []byte
	i int
}

func (r *reader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, or 0 at the end.
func (r *reader) peek() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *reader) eat(c byte) bool {
	if r.peek() == c {
		r.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (r *reader) end() bool {
	r.ws()
	return r.i == len(r.b)
}

// str reads a string value. Without escapes it returns a slice of the
// input; with escapes it appends the unescaped text to *buf and returns
// that part of it. *buf must have room for the rest of the input (the
// unescaped form is never longer), so that earlier results stay valid.
func (r *reader) str(buf *[]byte) ([]byte, bool) {
	if !r.eat('"') {
		return nil, false
	}
	start := r.i
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			return s, true
		case c == '\\':
			return r.strEscaped(buf, start)
		case c < 0x20:
			return nil, false
		case c < utf8.RuneSelf:
			r.i++
		default:
			rn, n := utf8.DecodeRune(r.b[r.i:])
			if rn == utf8.RuneError && n <= 1 {
				return nil, false
			}
			r.i += n
		}
	}
	return nil, false
}

func (r *reader) strEscaped(buf *[]byte, start int) ([]byte, bool) {
	out := *buf
	first := len(out)
	out = append(out, r.b[start:r.i]...)
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			r.i++
			*buf = out
			return out[first:], true
		case c == '\\':
			if r.i+1 >= len(r.b) {
				return nil, false
			}
			e := r.b[r.i+1]
			r.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				rn, ok := r.hex4()
				if !ok {
					return nil, false
				}
				if utf16.IsSurrogate(rn) {
					// Only a high surrogate followed by a low one is a
					// character; a lone half is refused.
					if rn >= 0xdc00 || r.i+1 >= len(r.b) || r.b[r.i] != '\\' || r.b[r.i+1] != 'u' {
						return nil, false
					}
					r.i += 2
					lo, ok := r.hex4()
					if !ok {
						return nil, false
					}
					rn = utf16.DecodeRune(rn, lo)
					if rn == utf8.RuneError {
						return nil, false
					}
				}
				out = utf8.AppendRune(out, rn)
			default:
				return nil, false
			}
		case c < 0x20:
			return nil, false
		case c < utf8.RuneSelf:
			out = append(out, c)
			r.i++
		default:
			rn, n := utf8.DecodeRune(r.b[r.i:])
			if rn == utf8.RuneError && n <= 1 {
				return nil, false
			}
			out = append(out, r.b[r.i:r.i+n]...)
			r.i += n
		}
	}
	return nil, false
}

func (r *reader) hex4() (rune, bool) {
	if r.i+4 > len(r.b) {
		return 0, false
	}
	var v rune
	for _, c := range r.b[r.i : r.i+4] {
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
	r.i += 4
	return v, true
}

// int reads a JSON number that is an integer literal (no fraction, no
// exponent) fitting in an int64 with room to spare.
func (r *reader) int() (int64, bool) {
	r.ws()
	start := r.i
	neg := false
	if r.i < len(r.b) && r.b[r.i] == '-' {
		neg = true
		r.i++
	}
	digits := r.i
	var v int64
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		if r.i-digits >= 18 {
			return 0, false
		}
		v = v*10 + int64(r.b[r.i]-'0')
		r.i++
	}
	n := r.i - digits
	if n == 0 || (n > 1 && r.b[digits] == '0') {
		return 0, false
	}
	if r.i < len(r.b) {
		switch r.b[r.i] {
		case '.', 'e', 'E':
			r.i = start
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	return v, true
}

// skip reads any value and returns its bytes (a slice of the input).
func (r *reader) skip() ([]byte, bool) {
	r.ws()
	start := r.i
	if !r.value(0) {
		return nil, false
	}
	return r.b[start:r.i], true
}

func (r *reader) value(depth int) bool {
	switch c := r.peek(); c {
	case '{':
		if depth >= maxDepth {
			return false
		}
		r.i++
		if r.eat('}') {
			return true
		}
		for {
			if !r.skipString() || !r.eat(':') || !r.value(depth+1) {
				return false
			}
			if r.eat('}') {
				return true
			}
			if !r.eat(',') {
				return false
			}
		}
	case '[':
		if depth >= maxDepth {
			return false
		}
		r.i++
		if r.eat(']') {
			return true
		}
		for {
			if !r.value(depth + 1) {
				return false
			}
			if r.eat(']') {
				return true
			}
			if !r.eat(',') {
				return false
			}
		}
	case '"':
		return r.skipString()
	case 't':
		return r.lit("true")
	case 'f':
		return r.lit("false")
	case 'n':
		return r.lit("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return r.number()
		}
		return false
	}
}

// skipString checks a string without keeping it.
func (r *reader) skipString() bool {
	var scratch [64]byte
	buf := scratch[:0]
	// An escaped string longer than the scratch array spills to the heap;
	// the spill is bounded by the string's real length.
	_, ok := r.str(&buf)
	return ok
}

func (r *reader) lit(s string) bool {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

func (r *reader) number() bool {
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	digits := func() int {
		n := 0
		for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
			r.i++
			n++
		}
		return n
	}
	start := r.i
	n := digits()
	if n == 0 || (n > 1 && r.b[start] == '0') {
		return false
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if digits() == 0 {
			return false
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

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
