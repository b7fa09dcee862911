package fsm

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"sync"
	"unicode/utf8"
)

// fastDecode is DecodeStrict's quick path. Every replica decodes every
// opcode of every job it applies, and encoding/json spent about 5 µs and
// 21 allocations on a one-tag OP_TAGS_SET, a sixth of the gntds' CPU per
// configuration job. fastDecode reads the common shape of an opcode (a
// flat JSON object of strings, numbers, booleans, lists of them, raw
// values and reason entries) straight into the struct, and declines
// (returns false, v left as it was) whatever it is not sure to read as
// encoding/json would: escapes, null, case-folded or repeated keys,
// unknown keys, nested objects, numbers a field cannot hold, any syntax
// error. DecodeStrict then decodes it the slow way, so the result and
// every error message stay encoding/json's (or CheckJSON's, for what
// encoding/json would accept silently: repeated keys, invalid UTF-8). It only decodes into a zero
// value, because encoding/json keeps the fields a document does not name,
// and a half-filled target must be reset before the slow path.
//
// FuzzFastDecode holds it to that: whenever fastDecode accepts a
// document, encoding/json accepts it too and decodes the same value.
func fastDecode(raw []byte, v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return false
	}
	target := rv.Elem()
	p := fastPlanFor(target.Type())
	if p == nil || !target.IsZero() {
		return false
	}
	d := fastDecoder{NewJSONReader(raw)}
	if d.object(target, p) && d.End() {
		return true
	}
	target.SetZero()
	return false
}

// fastKind is how a field's JSON value is read.
type fastKind uint8

const (
	fkNone         fastKind = iota // not read here: the type gets no plan
	fkString                       // string
	fkBool                         // bool
	fkInt                          // int, int8 ... int64
	fkFloat                        // float64
	fkStrings                      // []string
	fkInts                         // []int ... []int64
	fkUnmarshaler                  // T with *T a json.Unmarshaler (json.RawMessage)
	fkUnmarshalers                 // []T with *T a json.Unmarshaler (ReasonEntry)
)

type fastField struct {
	index []int
	kind  fastKind
	ptr   bool // *string, *bool, *int..., *float64: allocated when present
	bit   int  // position in the seen-keys bitmap
}

type fastPlan struct {
	fields map[string]*fastField
}

var fastPlans sync.Map // reflect.Type -> *fastPlan (nil: no quick path)

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	stringsType         = reflect.TypeFor[[]string]()
)

func fastPlanFor(t reflect.Type) *fastPlan {
	if p, ok := fastPlans.Load(t); ok {
		return p.(*fastPlan)
	}
	p := buildFastPlan(t)
	fastPlans.Store(t, p)
	return p
}

// buildFastPlan maps a struct type's JSON keys to its fields, or returns
// nil when the type is one whose decoding it does not mirror: not a
// struct, one with its own unmarshaler, embedded pointers or tagged
// embedded structs, names that collide (encoding/json's precedence rules
// are not repeated here), or more than 64 keys. A type with a field of a
// kind fastDecode does not read (a map, a struct, a list of structs) gets
// none either: it would decline every document naming that field, after
// reading the ones before it for nothing (restoring a snapshot, whose job
// records have such fields, took a fifth longer that way).
func buildFastPlan(t reflect.Type) *fastPlan {
	if t.Kind() != reflect.Struct || customDecoding(t) {
		return nil
	}
	p := &fastPlan{fields: map[string]*fastField{}}
	if !p.add(t, nil) || len(p.fields) > 64 {
		return nil
	}
	for _, f := range p.fields {
		if f.kind == fkNone {
			return nil
		}
	}
	return p
}

func (p *fastPlan) add(t reflect.Type, prefix []int) bool {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts := tag, ""
		for j := 0; j < len(tag); j++ {
			if tag[j] == ',' {
				name, opts = tag[:j], tag[j+1:]
				break
			}
		}
		index := append(append([]int(nil), prefix...), i)
		if f.Anonymous {
			ft := f.Type
			if ft.Kind() == reflect.Pointer || name != "" {
				return false
			}
			if ft.Kind() == reflect.Struct {
				if customDecoding(ft) || !p.add(ft, index) {
					return false
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if !plainTagName(name) || (opts != "" && opts != "omitempty") {
			return false
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := p.fields[name]; dup {
			return false
		}
		ff := &fastField{index: index, bit: len(p.fields)}
		ff.kind, ff.ptr = fastKindOf(f.Type)
		p.fields[name] = ff
	}
	return true
}

// plainTagName accepts the tag names the opcodes use; anything else
// (encoding/json has its own rules for odd characters) disables the plan.
func plainTagName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// unmarshals reports whether t is decoded by its own UnmarshalJSON
// (through a pointer to it: encoding/json takes the field's address).
func unmarshals(t reflect.Type) bool {
	return t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(jsonUnmarshalerType)
}

// customDecoding reports whether encoding/json decodes t (or *t) through
// a method of its own.
func customDecoding(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshalerType) || pt.Implements(jsonUnmarshalerType) ||
		t.Implements(textUnmarshalerType) || pt.Implements(textUnmarshalerType)
}

func fastKindOf(t reflect.Type) (fastKind, bool) {
	if unmarshals(t) {
		return fkUnmarshaler, false
	}
	ptr := false
	if t.Kind() == reflect.Pointer {
		t, ptr = t.Elem(), true
	}
	if customDecoding(t) {
		return fkNone, false
	}
	switch t.Kind() {
	case reflect.String:
		return fkString, ptr
	case reflect.Bool:
		return fkBool, ptr
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fkInt, ptr
	case reflect.Float64:
		return fkFloat, ptr
	case reflect.Slice:
		if ptr {
			return fkNone, false
		}
		e := t.Elem()
		switch {
		case unmarshals(e):
			return fkUnmarshalers, false
		case customDecoding(e):
			return fkNone, false
		case e.Kind() == reflect.String:
			return fkStrings, false
		case e.Kind() >= reflect.Int && e.Kind() <= reflect.Int64:
			return fkInts, false
		}
	}
	return fkNone, false
}

// fastDecoder reads one document with the strict JSONReader; every
// method returns false at the first thing it will not decide, and the
// caller gives up.
type fastDecoder struct {
	JSONReader
}

func (d *fastDecoder) object(v reflect.Value, p *fastPlan) bool {
	if !d.Eat('{') {
		return false
	}
	if d.Eat('}') {
		return true
	}
	var seen uint64
	for {
		key, ok := d.plainString()
		if !ok || !d.Eat(':') {
			return false
		}
		f := p.fields[string(key)]
		if f == nil || seen&(1<<f.bit) != 0 {
			return false
		}
		seen |= 1 << f.bit
		if !d.field(v.FieldByIndex(f.index), f) {
			return false
		}
		if d.Eat('}') {
			return true
		}
		if !d.Eat(',') {
			return false
		}
	}
}

func (d *fastDecoder) field(v reflect.Value, f *fastField) bool {
	if f.ptr {
		n := reflect.New(v.Type().Elem())
		if !d.scalar(n.Elem(), f.kind) {
			return false
		}
		v.Set(n)
		return true
	}
	switch f.kind {
	case fkUnmarshaler:
		return d.unmarshal(v)
	case fkStrings, fkInts, fkUnmarshalers:
		return d.slice(v, f.kind)
	}
	return d.scalar(v, f.kind)
}

func (d *fastDecoder) slice(v reflect.Value, kind fastKind) bool {
	if !d.Eat('[') {
		return false
	}
	// The elements are read first and the slice made once at its length:
	// reflect.Append allocates on every call.
	var (
		strs    []string
		ints    []int64
		spanBuf [4][2]int
		spans   = spanBuf[:0]
		n       int
	)
	if !d.Eat(']') {
		for {
			switch kind {
			case fkStrings:
				s, ok := d.plainString()
				if !ok {
					return false
				}
				strs = append(strs, string(s))
			case fkInts:
				lit, integer, ok := d.number()
				if !ok || !integer {
					return false
				}
				i, err := strconv.ParseInt(string(lit), 10, 64)
				if err != nil {
					return false
				}
				ints = append(ints, i)
			default:
				start, ok := d.rawValue()
				if !ok {
					return false
				}
				spans = append(spans, [2]int{start, d.i})
			}
			n++
			if d.Eat(']') {
				break
			}
			if !d.Eat(',') {
				return false
			}
		}
	}
	if kind == fkStrings && v.Type() == stringsType {
		if strs == nil {
			strs = []string{}
		}
		v.Set(reflect.ValueOf(strs))
		return true
	}
	s := reflect.MakeSlice(v.Type(), n, n)
	for i := 0; i < n; i++ {
		e := s.Index(i)
		switch kind {
		case fkStrings:
			e.SetString(strs[i])
		case fkInts:
			if e.OverflowInt(ints[i]) {
				return false
			}
			e.SetInt(ints[i])
		default:
			if e.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(d.b[spans[i][0]:spans[i][1]]) != nil {
				return false
			}
		}
	}
	v.Set(s)
	return true
}

// unmarshal hands one value's bytes to the field's own UnmarshalJSON, as
// encoding/json does; an error there is left for the slow path to report.
func (d *fastDecoder) unmarshal(v reflect.Value) bool {
	start, ok := d.rawValue()
	return ok && v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(d.b[start:d.i]) == nil
}

// rawValue checks the syntax of one value other than null (which
// encoding/json hands some unmarshalers and not others) and returns
// where it starts; d.i is then where it ends.
func (d *fastDecoder) rawValue() (int, bool) {
	if d.Peek() == 'n' {
		return 0, false
	}
	start := d.i
	if !d.value(0) {
		return start, false
	}
	// An object inside a raw value may repeat a key, which the reader
	// does not look for: CheckJSON does (and the slow path reports it).
	raw := d.b[start:d.i]
	return start, bytes.IndexByte(raw, '{') < 0 || CheckJSON(raw) == nil
}

func (d *fastDecoder) scalar(v reflect.Value, kind fastKind) bool {
	switch kind {
	case fkString:
		s, ok := d.plainString()
		if !ok {
			return false
		}
		v.SetString(string(s))
		return true
	case fkBool:
		switch {
		case d.Peek() == 't' && d.Lit("true"):
			v.SetBool(true)
		case d.Peek() == 'f' && d.Lit("false"):
			v.SetBool(false)
		default:
			return false
		}
		return true
	case fkInt:
		lit, integer, ok := d.number()
		if !ok || !integer {
			return false
		}
		n, err := strconv.ParseInt(string(lit), 10, 64)
		if err != nil || v.OverflowInt(n) {
			return false
		}
		v.SetInt(n)
		return true
	case fkFloat:
		lit, _, ok := d.number()
		if !ok {
			return false
		}
		n, err := strconv.ParseFloat(string(lit), 64)
		if err != nil {
			return false
		}
		v.SetFloat(n)
		return true
	}
	return false
}

// plainString reads a string without escapes, control characters or
// invalid UTF-8 (encoding/json rewrites the last) and returns its bytes.
func (d *fastDecoder) plainString() ([]byte, bool) {
	if !d.Eat('"') {
		return nil, false
	}
	start := d.i
	ascii := true
	for ; d.i < len(d.b); d.i++ {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// number reads a JSON number and says whether it is an integer (no
// fraction, no exponent).
func (d *fastDecoder) number() (lit []byte, integer, ok bool) {
	d.ws()
	start := d.i
	if !d.JSONReader.number() {
		return nil, false, false
	}
	lit = d.b[start:d.i]
	for _, c := range lit {
		if c == '.' || c == 'e' || c == 'E' {
			return lit, false, true
		}
	}
	return lit, true, true
}
