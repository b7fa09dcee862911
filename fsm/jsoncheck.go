package fsm

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// CheckJSON refuses what encoding/json would let through silently: a key
// given twice in one object (encoding/json keeps the last; keys that
// differ only in case count as the same, as encoding/json matches struct
// fields so), bytes that are not UTF-8 and \u escapes of half a surrogate
// pair (encoding/json turns both into U+FFFD), and nesting deeper than
// maxJSONDepth levels inside the outermost value (as deep as the quick
// path's JSONReader reads a field's raw value). The error names the key at fault as a dotted path.
//
// Syntax errors are left to the decoder that runs next: CheckJSON returns
// nil at the first one, so messages about them stay encoding/json's.
// DecodeStrict runs it before its slow path; its quick path declines
// repeated keys, escapes and invalid UTF-8 on its own (FuzzCheckJSON holds
// the two paths to the same answer).
func CheckJSON(raw []byte) *Error {
	c := jsonChecker{b: raw}
	c.value(0, "")
	return c.err
}

type jsonChecker struct {
	b   []byte
	i   int
	err *Error
	bad bool // a syntax error: stop, and leave it to the decoder
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

func (c *jsonChecker) fail(path, format string, args ...any) {
	if c.err == nil {
		c.err = errf(CodeInval, path, format, args...)
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (c *jsonChecker) value(depth int, path string) {
	c.ws()
	if c.i >= len(c.b) {
		c.bad = true
		return
	}
	switch ch := c.b[c.i]; {
	case ch == '{':
		if depth > maxJSONDepth {
			c.fail(path, "JSON nested deeper than %d levels at offset %d", maxJSONDepth, c.i)
			return
		}
		c.object(depth, path)
	case ch == '[':
		if depth > maxJSONDepth {
			c.fail(path, "JSON nested deeper than %d levels at offset %d", maxJSONDepth, c.i)
			return
		}
		c.i++
		c.ws()
		if c.i < len(c.b) && c.b[c.i] == ']' {
			c.i++
			return
		}
		for k := 0; ; k++ {
			c.value(depth+1, joinPath(path, strconv.Itoa(k)))
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
		c.str(path)
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

func (c *jsonChecker) object(depth int, path string) {
	c.i++ // '{'
	c.ws()
	if c.i < len(c.b) && c.b[c.i] == '}' {
		c.i++
		return
	}
	var few []string
	var many map[string]struct{}
	for {
		c.ws()
		key, ok := c.str(path)
		if !ok {
			return
		}
		fk := foldKey(key)
		dup := false
		if many != nil {
			_, dup = many[fk]
			many[fk] = struct{}{}
		} else {
			for _, k := range few {
				dup = dup || k == fk
			}
			few = append(few, fk)
			if len(few) > 16 {
				many = make(map[string]struct{}, 2*len(few))
				for _, k := range few {
					many[k] = struct{}{}
				}
			}
		}
		if dup {
			c.fail(joinPath(path, key), "duplicate key %q in a JSON object (each key may be given once)", joinPath(path, key))
			return
		}
		c.ws()
		if c.i >= len(c.b) || c.b[c.i] != ':' {
			c.bad = true
			return
		}
		c.i++
		c.value(depth+1, joinPath(path, key))
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
func foldKey(k string) string {
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
	var sb strings.Builder
	for _, r := range k {
		// The representative of a folding orbit is its lower-case ASCII
		// letter when it has one (so that plain keys stay as they are),
		// else its smallest rune.
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if 'a' <= f && f <= 'z' || f < m && !('a' <= m && m <= 'z') {
				m = f
			}
		}
		sb.WriteRune(m)
	}
	return sb.String()
}

// str reads a string and returns its unescaped text; ok is false when
// the checker stopped (an error or a syntax error).
func (c *jsonChecker) str(path string) (string, bool) {
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		c.bad = true
		return "", false
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
				return string(s), true
			}
			return string(out), true
		case ch == '\\':
			if !escaped {
				out = append(out, c.b[start:c.i]...)
				escaped = true
			}
			if c.i+1 >= len(c.b) {
				c.bad = true
				return "", false
			}
			e := c.b[c.i+1]
			c.i += 2
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
				rn, ok := c.hex4()
				if !ok {
					return "", false
				}
				if utf16.IsSurrogate(rn) {
					at := c.i - 6
					if rn >= 0xdc00 || c.i+1 >= len(c.b) || c.b[c.i] != '\\' || c.b[c.i+1] != 'u' {
						c.fail(path, "JSON string at offset %d has half a UTF-16 surrogate pair (\\u%04x)", at, rn)
						return "", false
					}
					c.i += 2
					lo, ok := c.hex4()
					if !ok {
						return "", false
					}
					if rn = utf16.DecodeRune(rn, lo); rn == utf8.RuneError {
						c.fail(path, "JSON string at offset %d has half a UTF-16 surrogate pair", at)
						return "", false
					}
				}
				out = utf8.AppendRune(out, rn)
			default:
				c.bad = true
				return "", false
			}
		case ch < 0x20:
			c.bad = true
			return "", false
		case ch < utf8.RuneSelf:
			if escaped {
				out = append(out, ch)
			}
			c.i++
		default:
			r, n := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && n <= 1 {
				c.fail(path, "JSON text at offset %d is not valid UTF-8", c.i)
				return "", false
			}
			if escaped {
				out = append(out, c.b[c.i:c.i+n]...)
			}
			c.i += n
		}
	}
	c.bad = true
	return "", false
}

func (c *jsonChecker) hex4() (rune, bool) {
	if c.i+4 > len(c.b) {
		c.bad = true
		return 0, false
	}
	var v rune
	for _, ch := range c.b[c.i : c.i+4] {
		v <<= 4
		switch {
		case ch >= '0' && ch <= '9':
			v |= rune(ch - '0')
		case ch >= 'a' && ch <= 'f':
			v |= rune(ch - 'a' + 10)
		case ch >= 'A' && ch <= 'F':
			v |= rune(ch - 'A' + 10)
		default:
			c.bad = true
			return 0, false
		}
	}
	c.i += 4
	return v, true
}
