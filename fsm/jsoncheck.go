package fsm

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckJSON refuses what encoding/json would let through silently: a key
// given twice in one object (encoding/json keeps the last; keys that
// differ only in case count as the same, as encoding/json matches struct
// fields so), bytes that are not UTF-8 and \u escapes of half a surrogate
// pair (encoding/json turns both into U+FFFD), and nesting deeper than
// maxJSONDepth levels inside the outermost value (as deep as the quick
// path's JSONReader reads a field's raw value). The error names the key
// at fault as a dotted path (ndparams.ssh_port, ops.0.repeat). Checking
// allocates nothing but for keys that need case folding and objects of
// more than 16 keys.
//
// Syntax errors are left to the decoder that runs next: CheckJSON returns
// nil at the first one, so messages about them stay encoding/json's.
// DecodeStrict runs it before its slow path; its quick path declines
// repeated keys, escapes and invalid UTF-8 on its own (FuzzCheckJSON holds
// the two paths to the same answer).
func CheckJSON(raw []byte) *Error {
	var stack [16]pathSeg
	c := jsonChecker{b: raw, path: stack[:0]}
	c.value(0)
	return c.err
}

// pathSeg is one step of the path to a value: a key of an object, or
// an index of a list (key nil). The checker keeps the path as a stack
// and spells it out only for an error.
type pathSeg struct {
	key []byte
	idx int
}

type jsonChecker struct {
	b    []byte
	i    int
	err  *Error
	bad  bool // a syntax error: stop, and leave it to the decoder
	path []pathSeg
}

// where spells out the path to the value being read, with extra (a key
// not yet pushed) when it is not nil.
func (c *jsonChecker) where(extra []byte) string {
	var sb strings.Builder
	for k, p := range c.path {
		if k > 0 {
			sb.WriteByte('.')
		}
		if p.key != nil {
			sb.Write(p.key)
		} else {
			sb.WriteString(strconv.Itoa(p.idx))
		}
	}
	if extra != nil {
		if len(c.path) > 0 {
			sb.WriteByte('.')
		}
		sb.Write(extra)
	}
	return sb.String()
}

func (c *jsonChecker) ws() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *jsonChecker) stop() bool { return c.err != nil || c.bad }

func (c *jsonChecker) fail(field string, format string, args ...any) {
	if c.err == nil {
		c.err = errf(CodeInval, field, format, args...)
	}
}

func (c *jsonChecker) value(depth int) {
	c.ws()
	if c.i >= len(c.b) {
		c.bad = true
		return
	}
	switch ch := c.b[c.i]; {
	case ch == '{':
		if depth > maxJSONDepth {
			c.fail(c.where(nil), "JSON nested deeper than %d levels at offset %d", maxJSONDepth, c.i)
			return
		}
		c.object(depth)
	case ch == '[':
		if depth > maxJSONDepth {
			c.fail(c.where(nil), "JSON nested deeper than %d levels at offset %d", maxJSONDepth, c.i)
			return
		}
		c.i++
		c.ws()
		if c.i < len(c.b) && c.b[c.i] == ']' {
			c.i++
			return
		}
		for k := 0; ; k++ {
			c.path = append(c.path, pathSeg{idx: k})
			c.value(depth + 1)
			c.path = c.path[:len(c.path)-1]
			if c.stop() {
				return
			}
			c.ws()
			if c.i < len(c.b) && c.b[c.i] == ',' {
				c.i++
				continue
			}
			if c.i < len(c.b) && c.b[c.i] == ']' {
				c.i++
				return
			}
			c.bad = true
			return
		}
	case ch == '"':
		c.str()
	default:
		// Literals and numbers: skip their bytes; the decoder judges them.
		for c.i < len(c.b) {
			switch c.b[c.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return
			}
			if c.b[c.i] >= utf8.RuneSelf {
				c.bad = true
				return
			}
			c.i++
		}
	}
}

func (c *jsonChecker) object(depth int) {
	c.i++ // '{'
	c.ws()
	if c.i < len(c.b) && c.b[c.i] == '}' {
		c.i++
		return
	}
	var fewBuf [16][]byte
	few := fewBuf[:0]
	var many map[string]struct{}
	for {
		c.ws()
		key, ok := c.str()
		if !ok {
			return
		}
		fk := foldKey(key)
		dup := false
		if many != nil {
			_, dup = many[string(fk)]
			many[string(fk)] = struct{}{}
		} else {
			for _, k := range few {
				dup = dup || bytes.Equal(k, fk)
			}
			if len(few) < cap(fewBuf) {
				few = append(few, fk)
			} else {
				many = make(map[string]struct{}, 4*len(few))
				for _, k := range few {
					many[string(k)] = struct{}{}
				}
				many[string(fk)] = struct{}{}
			}
		}
		if dup {
			at := c.where(key)
			c.fail(at, "duplicate key %q in a JSON object (each key may be given once)", at)
			return
		}
		c.ws()
		if c.i >= len(c.b) || c.b[c.i] != ':' {
			c.bad = true
			return
		}
		c.i++
		c.path = append(c.path, pathSeg{key: key})
		c.value(depth + 1)
		c.path = c.path[:len(c.path)-1]
		if c.stop() {
			return
		}
		c.ws()
		if c.i < len(c.b) && c.b[c.i] == ',' {
			c.i++
			continue
		}
		if c.i < len(c.b) && c.b[c.i] == '}' {
			c.i++
			return
		}
		c.bad = true
		return
	}
}

// foldKey maps a key to one representative of the keys encoding/json
// matches with it (simple case folding).
func foldKey(k []byte) []byte {
	ascii := true
	for i := 0; i < len(k); i++ {
		if c := k[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			ascii = false
			break
		}
	}
	if ascii {
		return k
	}
	var sb []byte
	for _, r := range string(k) {
		// The representative of a folding orbit is its lower-case ASCII
		// letter when it has one (so that plain keys stay as they are),
		// else its smallest rune.
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if 'a' <= f && f <= 'z' || f < m && !('a' <= m && m <= 'z') {
				m = f
			}
		}
		sb = utf8.AppendRune(sb, m)
	}
	return sb
}

// str reads a string and returns its unescaped text (a slice of the
// input when it has no escapes); ok is false when the checker stopped (an
// error or a syntax error).
func (c *jsonChecker) str() ([]byte, bool) {
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		c.bad = true
		return nil, false
	}
	c.i++
	start := c.i
	var out []byte // only built when there is an escape
	escaped := false
	for c.i < len(c.b) {
		ch := c.b[c.i]
		switch {
		case ch == '"':
			s := c.b[start:c.i]
			c.i++
			if !escaped {
				return s, true
			}
			return out, true
		case ch == '\\':
			if !escaped {
				out = append(out, c.b[start:c.i]...)
				escaped = true
			}
			at := c.i
			var (
				hi    rune
				fault jsonEscFault
			)
			out, c.i, hi, fault = appendJSONEscape(out, c.b, c.i)
			switch fault {
			case escSyntax:
				c.bad = true
				return nil, false
			case escHalfSurrogate:
				c.fail(c.where(nil), "JSON string at offset %d has half a UTF-16 surrogate pair (\\u%04x)", at, hi)
				return nil, false
			case escBadPair:
				c.fail(c.where(nil), "JSON string at offset %d has half a UTF-16 surrogate pair", at)
				return nil, false
			}
		case ch < 0x20:
			c.bad = true
			return nil, false
		case ch < utf8.RuneSelf:
			if escaped {
				out = append(out, ch)
			}
			c.i++
		default:
			r, n := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && n <= 1 {
				c.fail(c.where(nil), "JSON text at offset %d is not valid UTF-8", c.i)
				return nil, false
			}
			if escaped {
				out = append(out, c.b[c.i:c.i+n]...)
			}
			c.i += n
		}
	}
	c.bad = true
	return nil, false
}
