package qlang

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
)

// Kind is the type of a field, with Ganeti's names (design-query2.rst,
// "Field definition").
type Kind string

// Field kinds.
const (
	KindUnknown   Kind = "unknown"
	KindText      Kind = "text"
	KindBool      Kind = "bool"
	KindNumber    Kind = "number"
	KindUnit      Kind = "unit" // a number of MiB
	KindTimestamp Kind = "timestamp"
	KindOther     Kind = "other"
)

// Schema tells the compiler a field's kind; ok is false for a field that
// does not exist.
type Schema func(field string) (kind Kind, ok bool)

// Filter is a compiled list-form filter. The nil *Filter matches every row.
type Filter struct {
	match  func(Row) bool
	fields []string
}

// Row is one item: field name to value. A field absent from the row has no
// value for this item (Ganeti's "no data"/"unavailable"); every comparison
// on it is false.
type Row map[string]any

// Match tells whether the row passes the filter.
func (f *Filter) Match(r Row) bool {
	if f == nil {
		return true
	}
	return f.match(r)
}

// Fields lists the fields the filter reads, each once, in order of first use.
func (f *Filter) Fields() []string {
	if f == nil {
		return nil
	}
	return f.fields
}

// Compile checks a list-form filter as Ganeti's query.py does and returns
// its evaluator: every list is an operator followed by its operands; logic
// operators (| &) take filters, ! takes one filter, ? one field name, and
// the binary operators (== = != < <= > >= =~ =[]) a field name and a value
// of the field's kind (a string for text, an integer for number and unit,
// a number for timestamp, true/false for bool, anything for other; =~
// always a regular expression). A field the schema does not know, an
// unknown operator, a wrong count of operands, a value of the wrong kind,
// an invalid regular expression, more than MaxDepth levels or more than
// MaxNodes operators are refused. A nil filter (JSON null) matches all.
func Compile(filter any, schema Schema) (*Filter, error) {
	if filter == nil {
		return nil, nil
	}
	c := &compiler{schema: schema, seen: map[string]bool{}}
	fn, err := c.compile(filter, 0, "filter")
	if err != nil {
		return nil, err
	}
	return &Filter{match: fn, fields: c.fields}, nil
}

type compiler struct {
	schema Schema
	nodes  int
	fields []string
	seen   map[string]bool
}

func errPath(path, format string, args ...any) error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (c *compiler) compile(f any, level int, path string) (func(Row) bool, error) {
	l, ok := f.([]any)
	if !ok || len(l) == 0 {
		return nil, errPath(path, "expected a non-empty list [operator, operands...], got %s", describe(f))
	}
	if level >= MaxDepth {
		return nil, errPath(path, "filter nested too deep: at most %d levels are allowed", MaxDepth)
	}
	c.nodes++
	if c.nodes > MaxNodes {
		return nil, errPath(path, "filter has more than %d operators", MaxNodes)
	}
	op, ok := l[0].(string)
	if !ok {
		return nil, errPath(path+"[0]", "expected an operator (a string), got %s", describe(l[0]))
	}
	args := l[1:]
	switch op {
	case OpOr, OpAnd:
		subs := make([]func(Row) bool, len(args))
		for i, a := range args {
			fn, err := c.compile(a, level+1, fmt.Sprintf("%s[%d]", path, i+1))
			if err != nil {
				return nil, err
			}
			subs[i] = fn
		}
		if op == OpOr {
			return func(r Row) bool {
				for _, s := range subs {
					if s(r) {
						return true
					}
				}
				return false
			}, nil
		}
		return func(r Row) bool {
			for _, s := range subs {
				if !s(r) {
					return false
				}
			}
			return true
		}, nil
	case OpNot:
		if len(args) != 1 {
			return nil, errPath(path, "operator %q expects exactly one operand, got %d", op, len(args))
		}
		sub, err := c.compile(args[0], level+1, path+"[1]")
		if err != nil {
			return nil, err
		}
		return func(r Row) bool { return !sub(r) }, nil
	case OpTrue:
		if len(args) != 1 {
			return nil, errPath(path, "operator %q expects exactly one operand, got %d", op, len(args))
		}
		name, _, err := c.field(args[0], path+"[1]")
		if err != nil {
			return nil, err
		}
		return func(r Row) bool { v, ok := r[name]; return ok && truth(v) }, nil
	case OpEqual, OpEqualLegacy, OpNotEqual, OpLT, OpLE, OpGT, OpGE, OpRegexp, OpContains:
		if len(args) != 2 {
			return nil, errPath(path, "operator %q expects exactly two operands (a field and a value), got %d", op, len(args))
		}
		name, kind, err := c.field(args[0], path+"[1]")
		if err != nil {
			return nil, err
		}
		val := args[1]
		if op == OpRegexp {
			s, ok := val.(string)
			if !ok {
				return nil, errPath(path+"[2]", "operator %q expects a regular expression (a string), got %s", op, describe(val))
			}
			re, err := regexp.Compile(s)
			if err != nil {
				return nil, errPath(path+"[2]", "invalid regular expression: %v", err)
			}
			return func(r Row) bool {
				v, ok := r[name].(string)
				return ok && re.MatchString(v)
			}, nil
		}
		if op != OpContains {
			if err := checkKind(kind, val); err != nil {
				return nil, errPath(path+"[2]", "cannot compare field %q (kind %s) with %s: %v", name, kind, describe(val), err)
			}
		}
		switch op {
		case OpEqual, OpEqualLegacy:
			return func(r Row) bool { v, ok := r[name]; return ok && equal(v, val) }, nil
		case OpNotEqual:
			return func(r Row) bool { v, ok := r[name]; return ok && !equal(v, val) }, nil
		case OpContains:
			return func(r Row) bool { v, ok := r[name]; return ok && contains(v, val) }, nil
		}
		want := map[string]func(int) bool{
			OpLT: func(c int) bool { return c < 0 }, OpLE: func(c int) bool { return c <= 0 },
			OpGT: func(c int) bool { return c > 0 }, OpGE: func(c int) bool { return c >= 0 },
		}[op]
		return func(r Row) bool {
			v, ok := r[name]
			if !ok {
				return false
			}
			cmp, ok := compare(v, val)
			return ok && want(cmp)
		}, nil
	}
	return nil, errPath(path+"[0]", "unknown operator %q (known: | & ! ? == = != < <= > >= =~ =[])", op)
}

func (c *compiler) field(a any, path string) (string, Kind, error) {
	name, ok := a.(string)
	if !ok {
		return "", "", errPath(path, "expected a field name (a string), got %s", describe(a))
	}
	kind, ok := c.schema(name)
	if !ok {
		return "", "", errPath(path, "unknown field %q", name)
	}
	if !c.seen[name] {
		c.seen[name] = true
		c.fields = append(c.fields, name)
	}
	return name, kind, nil
}

// checkKind is Ganeti's _VERIFY_FN: the value a field is compared with must
// be of the field's kind.
func checkKind(k Kind, v any) error {
	switch k {
	case KindText:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("expected a string")
		}
	case KindBool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("expected true or false")
		}
	case KindNumber, KindUnit:
		f, ok := number(v)
		if !ok || f != math.Trunc(f) {
			return fmt.Errorf("expected an integer")
		}
	case KindTimestamp:
		if _, ok := number(v); !ok {
			return fmt.Errorf("expected a number")
		}
	case KindOther:
	default:
		return fmt.Errorf("field of kind %s cannot be compared", k)
	}
	return nil
}

// describe names a list-form value for an error message, shortened.
func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	s := string(b)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// number reads any Go or JSON number as float64.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, !math.IsNaN(n)
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// truth is Python's truth of a field value: false, 0, "", an empty list or
// map, and nil are false.
func truth(v any) bool {
	if v == nil {
		return false
	}
	if f, ok := number(v); ok {
		return f != 0
	}
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return x != ""
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Map, reflect.Array:
		return rv.Len() > 0
	case reflect.Pointer, reflect.Interface:
		return !rv.IsNil()
	}
	return true
}

// equal compares two values, numbers by value whatever their Go type, lists
// element by element.
func equal(a, b any) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	if la, ok := list(a); ok {
		lb, ok := list(b)
		if !ok || len(la) != len(lb) {
			return false
		}
		for i := range la {
			if !equal(la[i], lb[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// list returns the elements of a slice or array value.
func list(v any) ([]any, bool) {
	if l, ok := v.([]any); ok {
		return l, true
	}
	if l, ok := v.([]string); ok {
		out := make([]any, len(l))
		for i, s := range l {
			out[i] = s
		}
		return out, true
	}
	rv := reflect.ValueOf(v)
	if v == nil || (rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array) {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

// contains is Python's "in": an element of a list, a substring of a
// string, a key of a map.
func contains(container, v any) bool {
	switch c := container.(type) {
	case string:
		s, ok := v.(string)
		return ok && strings.Contains(c, s)
	case map[string]any:
		s, ok := v.(string)
		if !ok {
			return false
		}
		_, in := c[s]
		return in
	}
	l, ok := list(container)
	if !ok {
		return false
	}
	for _, e := range l {
		if equal(e, v) {
			return true
		}
	}
	return false
}

// compare orders two numbers or two strings; ok is false for other pairs.
func compare(a, b any) (int, bool) {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		if !ok {
			return 0, false
		}
		switch {
		case fa < fb:
			return -1, true
		case fa > fb:
			return 1, true
		}
		return 0, true
	}
	sa, ok1 := a.(string)
	sb, ok2 := b.(string)
	if !ok1 || !ok2 {
		return 0, false
	}
	return strings.Compare(sa, sb), true
}
