package fsm

import (
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of values the reader skips or keeps raw.
const maxJSONDepth = 64

// JSONReader is a small strict JSON reader, for the shapes confd exchanges
// (objects of a few known keys whose values are strings, integers, or
// anything, skipped or kept raw) and for DecodeStrict's quick path
// (fastDecode). It reads the bytes it is given and nothing else: no length a
// packet states is trusted, strings are unescaped into a buffer the caller
// sized to the input, and nesting deeper than maxJSONDepth is refused
// rather than followed. It accepts exactly RFC 8259 JSON that is valid
// UTF-8 without lone surrogates (Python's and Haskell's encoders produce
// nothing else); encoding/json is the oracle of the fuzz tests that use it
// (confd's FuzzPacket and FuzzRequest, FuzzFastDecode).
type JSONReader struct {
	b []byte
	i int
}

// NewJSONReader reads b.
func NewJSONReader(b []byte) JSONReader { return JSONReader{b: b} }

// Pos is the reader's offset in its input; SetPos goes back to one.
func (r *JSONReader) Pos() int { return r.i }

// SetPos moves the reader to offset i (one Pos returned).
func (r *JSONReader) SetPos(i int) { r.i = i }

func (r *JSONReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// Peek returns the next byte after whitespace, or 0 at the end.
func (r *JSONReader) Peek() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *JSONReader) Eat(c byte) bool {
	if r.Peek() == c {
		r.i++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (r *JSONReader) End() bool {
	r.ws()
	return r.i == len(r.b)
}

// Str reads a string value. Without escapes it returns a slice of the
// input; with escapes it appends the unescaped text to *buf and returns
// that part of it. *buf must have room for the rest of the input (the
// unescaped form is never longer), so that earlier results stay valid.
// With a nil buf the unescaped text goes to a buffer of its own.
func (r *JSONReader) Str(buf *[]byte) ([]byte, bool) {
	if !r.Eat('"') {
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

func (r *JSONReader) strEscaped(buf *[]byte, start int) ([]byte, bool) {
	var out []byte
	if buf != nil {
		out = *buf
	}
	first := len(out)
	out = append(out, r.b[start:r.i]...)
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			r.i++
			if buf != nil {
				*buf = out
			}
			return out[first:], true
		case c == '\\':
			var fault jsonEscFault
			if out, r.i, _, fault = appendJSONEscape(out, r.b, r.i); fault != escOK {
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

// Int reads a JSON number that is an integer literal (no fraction, no
// exponent) fitting in an int64 with room to spare.
func (r *JSONReader) Int() (int64, bool) {
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

// Skip reads any value and returns its bytes (a slice of the input).
func (r *JSONReader) Skip() ([]byte, bool) {
	r.ws()
	start := r.i
	if !r.value(0) {
		return nil, false
	}
	return r.b[start:r.i], true
}

func (r *JSONReader) value(depth int) bool {
	switch c := r.Peek(); c {
	case '{':
		if depth >= maxJSONDepth {
			return false
		}
		r.i++
		if r.Eat('}') {
			return true
		}
		for {
			if !r.skipString() || !r.Eat(':') || !r.value(depth+1) {
				return false
			}
			if r.Eat('}') {
				return true
			}
			if !r.Eat(',') {
				return false
			}
		}
	case '[':
		if depth >= maxJSONDepth {
			return false
		}
		r.i++
		if r.Eat(']') {
			return true
		}
		for {
			if !r.value(depth + 1) {
				return false
			}
			if r.Eat(']') {
				return true
			}
			if !r.Eat(',') {
				return false
			}
		}
	case '"':
		return r.skipString()
	case 't':
		return r.Lit("true")
	case 'f':
		return r.Lit("false")
	case 'n':
		return r.Lit("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return r.number()
		}
		return false
	}
}

// skipString checks a string without keeping it.
func (r *JSONReader) skipString() bool {
	// Without escapes nothing is copied; with them, the unescaped text
	// (never longer than the string) is built and dropped.
	_, ok := r.Str(nil)
	return ok
}

func (r *JSONReader) Lit(s string) bool {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

func (r *JSONReader) number() bool {
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
