// Package qlang is Ganeti's query language: a parser of the text filter
// syntax (Ganeti's lib/qlang.py, the `--filter` of the gnt-* list commands)
// into the list form that /2/query accepts as its filter
// (["&", ["==", "name", "x"], ...]), and a pure evaluator of a list-form
// filter against a row of typed fields (Ganeti's lib/query.py filter
// compiler). It does no I/O and imports nothing of the project.
package qlang

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Operators of the list form, with Ganeti's spelling.
const (
	OpOr          = "|"
	OpAnd         = "&"
	OpNot         = "!"
	OpTrue        = "?"
	OpEqual       = "=="
	OpEqualLegacy = "="
	OpNotEqual    = "!="
	OpLT          = "<"
	OpLE          = "<="
	OpGT          = ">"
	OpGE          = ">="
	OpRegexp      = "=~"
	OpContains    = "=[]"
)

// Bounds on input. MaxDepth is Ganeti's: a list-form filter nests at most
// 10 lists (query.py's _LEVELS_MAX).
const (
	MaxTextLen = 4096 // bytes of a text filter
	MaxDepth   = 10   // nesting of lists in the list form, and of parentheses in text
	MaxNodes   = 1000 // lists (operators) in one filter
)

// Error is a refused filter. Pos is the 1-based byte position in the text
// filter where the problem was found; 0 for a list-form filter, whose
// problems are located by Path instead.
type Error struct {
	Pos  int
	Path string // for list form: where in the list, e.g. "[1][2]"
	Msg  string
}

func (e *Error) Error() string {
	switch {
	case e.Pos > 0:
		return fmt.Sprintf("filter: at position %d: %s", e.Pos, e.Msg)
	case e.Path != "":
		return fmt.Sprintf("filter: at %s: %s", e.Path, e.Msg)
	}
	return "filter: " + e.Msg
}

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tNumber
	tString
	tOp // comparison operators and parentheses
	tKeyword
)

type token struct {
	kind tokKind
	text string // as written (for ident, op, keyword); unquoted for strings
	num  int64
	pos  int // 0-based byte offset
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of filter"
	case tString:
		return strconv.Quote(t.text)
	case tKeyword:
		return "keyword " + strconv.Quote(t.text)
	case tNumber:
		return "number " + t.text
	case tIdent:
		return "field name " + strconv.Quote(t.text)
	}
	return strconv.Quote(t.text)
}

var keywords = map[string]bool{"and": true, "or": true, "not": true, "in": true, "true": true, "false": true}

// parser is a recursive-descent parser with a hand-written lexer; the lexer
// is driven by the parser because a regular expression after =~ is lexed
// differently from the rest.
type parser struct {
	src    string
	pos    int
	tok    token
	parens int
	nodes  int
}

// Parse parses a text filter into the list form. The grammar, loosest
// binding first:
//
//	filter    = or
//	or        = and { "or" and }
//	and       = not { "and" not }
//	not       = "not" not | "(" filter ")" | condition
//	condition = field                            ["?", field]
//	          | field op value                   op one of == = != < <= > >=
//	          | field "=~" regexp | field "!~" regexp
//	          | field "=*" string | field "!*" string   (DNS-name glob)
//	          | value "in" field | value "not" "in" field
//	value     = string | integer | true | false
//	regexp    = ["m"] D chars D [flags]   D one of / # ^ |, flags of s and i
//
// Strings are quoted with " or ', with \ escaping the next character. true
// and false are an extension of gnt (Ganeti tests a boolean field by naming
// it: "offline", "not offline").
func Parse(text string) ([]any, error) {
	if len(text) > MaxTextLen {
		return nil, &Error{Msg: fmt.Sprintf("filter is %d bytes long, at most %d are allowed", len(text), MaxTextLen)}
	}
	p := &parser{src: text}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind == tEOF {
		return nil, p.errAt(p.tok, "expected a condition, found an empty filter")
	}
	f, _, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.errAt(p.tok, "expected \"and\", \"or\" or the end of the filter, found %s", p.tok.describe())
	}
	return f, nil
}

func (p *parser) errAt(t token, format string, args ...any) error {
	return &Error{Pos: t.pos + 1, Msg: fmt.Sprintf(format, args...)}
}

// node counts one more list in the result and refuses too deep a nesting.
func (p *parser) node(at token, depth int) error {
	p.nodes++
	if p.nodes > MaxNodes {
		return p.errAt(at, "filter has more than %d operators", MaxNodes)
	}
	if depth > MaxDepth {
		return p.errAt(at, "filter nested too deep: at most %d levels are allowed", MaxDepth)
	}
	return nil
}

func (p *parser) parseOr() ([]any, int, error) {
	return p.parseLogic("or", OpOr, p.parseAnd)
}

func (p *parser) parseAnd() ([]any, int, error) {
	return p.parseLogic("and", OpAnd, p.parseNot)
}

func (p *parser) parseLogic(word, op string, sub func() ([]any, int, error)) ([]any, int, error) {
	first, depth, err := sub()
	if err != nil {
		return nil, 0, err
	}
	if !(p.tok.kind == tKeyword && p.tok.text == word) {
		return first, depth, nil
	}
	at := p.tok
	out := []any{op, first}
	for p.tok.kind == tKeyword && p.tok.text == word {
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		f, d, err := sub()
		if err != nil {
			return nil, 0, err
		}
		depth = max(depth, d)
		out = append(out, f)
	}
	if err := p.node(at, depth+1); err != nil {
		return nil, 0, err
	}
	return out, depth + 1, nil
}

func (p *parser) parseNot() ([]any, int, error) {
	switch {
	case p.tok.kind == tKeyword && p.tok.text == "not":
		at := p.tok
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		f, d, err := p.parseNot()
		if err != nil {
			return nil, 0, err
		}
		if err := p.node(at, d+1); err != nil {
			return nil, 0, err
		}
		return []any{OpNot, f}, d + 1, nil
	case p.tok.kind == tOp && p.tok.text == "(":
		open := p.tok
		p.parens++
		if p.parens > MaxDepth {
			return nil, 0, p.errAt(open, "parentheses nested too deep: at most %d levels are allowed", MaxDepth)
		}
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		f, d, err := p.parseOr()
		if err != nil {
			return nil, 0, err
		}
		if !(p.tok.kind == tOp && p.tok.text == ")") {
			return nil, 0, p.errAt(p.tok, "expected \")\" closing the \"(\" at position %d, found %s", open.pos+1, p.tok.describe())
		}
		p.parens--
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		return f, d, nil
	}
	return p.parseCondition()
}

var binops = map[string]string{
	"==": OpEqual, "=": OpEqual, "!=": OpNotEqual,
	"<": OpLT, "<=": OpLE, ">": OpGT, ">=": OpGE,
}

func (p *parser) parseCondition() ([]any, int, error) {
	start := p.tok
	switch start.kind {
	case tIdent:
		field := start.text
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		opTok := p.tok
		if opTok.kind != tOp || opTok.text == "(" || opTok.text == ")" {
			// A bare field name tests the field's truth.
			if err := p.node(start, 1); err != nil {
				return nil, 0, err
			}
			return []any{OpTrue, field}, 1, nil
		}
		switch opTok.text {
		case "=~", "!~":
			re, err := p.lexRegexp()
			if err != nil {
				return nil, 0, err
			}
			return p.wrapNot(opTok, opTok.text == "!~", []any{OpRegexp, field, re})
		case "=*", "!*":
			if err := p.next(); err != nil {
				return nil, 0, err
			}
			if p.tok.kind != tString {
				return nil, 0, p.errAt(p.tok, "expected a quoted glob pattern after %q, found %s", opTok.text, p.tok.describe())
			}
			pat := GlobPattern(p.tok.text)
			if err := p.next(); err != nil {
				return nil, 0, err
			}
			return p.wrapNot(opTok, opTok.text == "!*", []any{OpRegexp, field, pat})
		}
		op, ok := binops[opTok.text]
		if !ok {
			return nil, 0, p.errAt(opTok, "expected a comparison (== != < <= > >= =~ !~ =* !*), found %s", opTok.describe())
		}
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		v, ok := p.value()
		if !ok {
			return nil, 0, p.errAt(p.tok, "expected a quoted string, an integer, true or false after %q, found %s", opTok.text, p.tok.describe())
		}
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		return p.wrapNot(opTok, false, []any{op, field, v})
	case tString, tNumber, tKeyword:
		v, ok := p.value()
		if !ok {
			break
		}
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		negate := false
		if p.tok.kind == tKeyword && p.tok.text == "not" {
			negate = true
			if err := p.next(); err != nil {
				return nil, 0, err
			}
		}
		if !(p.tok.kind == tKeyword && p.tok.text == "in") {
			return nil, 0, p.errAt(p.tok, "expected \"in\" or \"not in\" after the value %s, found %s", start.describe(), p.tok.describe())
		}
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		if p.tok.kind != tIdent {
			return nil, 0, p.errAt(p.tok, "expected a field name after \"in\", found %s", p.tok.describe())
		}
		field := p.tok.text
		if err := p.next(); err != nil {
			return nil, 0, err
		}
		return p.wrapNot(start, negate, []any{OpContains, field, v})
	}
	return nil, 0, p.errAt(start, "expected a condition (a field name, \"not\", \"(\" or a value before \"in\"), found %s", start.describe())
}

func (p *parser) wrapNot(at token, negate bool, cond []any) ([]any, int, error) {
	if err := p.node(at, 1); err != nil {
		return nil, 0, err
	}
	if !negate {
		return cond, 1, nil
	}
	if err := p.node(at, 2); err != nil {
		return nil, 0, err
	}
	return []any{OpNot, cond}, 2, nil
}

// value turns the current token into a right-hand value, if it is one.
func (p *parser) value() (any, bool) {
	switch p.tok.kind {
	case tString:
		return p.tok.text, true
	case tNumber:
		return p.tok.num, true
	case tKeyword:
		switch p.tok.text {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	return nil, false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isFieldChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || c == '_' || c == '/' || c == '.'
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) && isSpace(p.src[p.pos]) {
		p.pos++
	}
}

// next lexes the next token into p.tok.
func (p *parser) next() error {
	p.skipSpace()
	start := p.pos
	if p.pos >= len(p.src) {
		p.tok = token{kind: tEOF, pos: start}
		return nil
	}
	c := p.src[p.pos]
	switch {
	case isAlpha(c):
		for p.pos < len(p.src) && isFieldChar(p.src[p.pos]) {
			p.pos++
		}
		w := p.src[start:p.pos]
		if keywords[w] {
			p.tok = token{kind: tKeyword, text: w, pos: start}
		} else {
			p.tok = token{kind: tIdent, text: w, pos: start}
		}
		return nil
	case isDigit(c) || ((c == '-' || c == '+') && p.pos+1 < len(p.src) && isDigit(p.src[p.pos+1])):
		p.pos++
		for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
			p.pos++
		}
		w := p.src[start:p.pos]
		n, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return &Error{Pos: start + 1, Msg: fmt.Sprintf("integer %s is out of range (64 bits)", w)}
		}
		if p.pos < len(p.src) && isFieldChar(p.src[p.pos]) {
			return &Error{Pos: p.pos + 1, Msg: fmt.Sprintf("expected an integer, found %q", p.src[start:p.pos+1])}
		}
		p.tok = token{kind: tNumber, text: w, num: n, pos: start}
		return nil
	case c == '"' || c == '\'':
		s, err := p.lexQuoted(c)
		if err != nil {
			return err
		}
		p.tok = token{kind: tString, text: s, pos: start}
		return nil
	case c == '(' || c == ')':
		p.pos++
		p.tok = token{kind: tOp, text: string(c), pos: start}
		return nil
	}
	for _, op := range []string{"==", "!=", "<=", ">=", "=~", "!~", "=*", "!*", "=", "<", ">"} {
		if strings.HasPrefix(p.src[p.pos:], op) {
			p.pos += len(op)
			p.tok = token{kind: tOp, text: op, pos: start}
			return nil
		}
	}
	return &Error{Pos: start + 1, Msg: fmt.Sprintf("unexpected character %q", p.src[start:start+runeLen(p.src[start:])])}
}

func runeLen(s string) int {
	for i := range s {
		if i > 0 {
			return i
		}
	}
	return len(s)
}

// lexQuoted reads a string quoted with q, where \ escapes the next character.
func (p *parser) lexQuoted(q byte) (string, error) {
	start := p.pos
	p.pos++
	var b strings.Builder
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == q:
			p.pos++
			return b.String(), nil
		case c == '\\' && p.pos+1 < len(p.src):
			b.WriteByte(p.src[p.pos+1])
			p.pos += 2
		default:
			b.WriteByte(c)
			p.pos++
		}
	}
	return "", &Error{Pos: start + 1, Msg: fmt.Sprintf("string opened with %c is not closed", q)}
}

// lexRegexp reads a regular expression right after =~ or !~ and moves to
// the token after it. A backslash before the delimiter makes it literal;
// other backslashes stay, for the regular expression.
func (p *parser) lexRegexp() (string, error) {
	p.skipSpace()
	start := p.pos
	if p.pos < len(p.src) && p.src[p.pos] == 'm' {
		p.pos++
	}
	if p.pos >= len(p.src) || !strings.ContainsRune("/#^|", rune(p.src[p.pos])) {
		return "", &Error{Pos: p.pos + 1, Msg: "expected a regular expression such as m/^web/ (delimiters / # ^ |)"}
	}
	delim := p.src[p.pos]
	p.pos++
	var b strings.Builder
	closed := false
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c == delim {
			p.pos++
			closed = true
			break
		}
		if c == '\\' && p.pos+1 < len(p.src) {
			if p.src[p.pos+1] != delim {
				b.WriteByte('\\')
			}
			b.WriteByte(p.src[p.pos+1])
			p.pos += 2
			continue
		}
		b.WriteByte(c)
		p.pos++
	}
	if !closed {
		return "", &Error{Pos: start + 1, Msg: fmt.Sprintf("regular expression opened with %c is not closed", delim)}
	}
	flagStart := p.pos
	for p.pos < len(p.src) && isAlpha(p.src[p.pos]) {
		p.pos++
	}
	flags := p.src[flagStart:p.pos]
	seen := map[byte]bool{}
	for i := 0; i < len(flags); i++ {
		if flags[i] != 's' && flags[i] != 'i' {
			return "", &Error{Pos: flagStart + i + 1, Msg: fmt.Sprintf("unknown regular expression flag %q (known: i, s)", flags[i])}
		}
		seen[flags[i]] = true
	}
	re := b.String()
	switch {
	case seen['i'] && seen['s']:
		re = "(?is)" + re
	case seen['i']:
		re = "(?i)" + re
	case seen['s']:
		re = "(?s)" + re
	}
	if _, err := regexp.Compile(re); err != nil {
		return "", &Error{Pos: start + 1, Msg: fmt.Sprintf("invalid regular expression: %v", err)}
	}
	return re, p.next()
}

// GlobPattern turns a DNS-name glob such as "*.site" into the regular
// expression Ganeti uses for it: * and ? match within one name component
// (not a dot), and the pattern may be followed by further components.
func GlobPattern(glob string) string {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(`[^.]*`)
		case '?':
			b.WriteString(`[^.]`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`(\..*)?$`)
	return b.String()
}
