package fsm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// fastTarget has a field of every kind fastDecode reads.
type fastTarget struct {
	OpCommon
	S        string            `json:"s"`
	B        bool              `json:"b,omitempty"`
	I        int               `json:"i"`
	I8       int8              `json:"i8"`
	F        float64           `json:"f"`
	PS       *string           `json:"ps"`
	PB       *bool             `json:"pb"`
	PI       *int64            `json:"pi"`
	PF       *float64          `json:"pf"`
	SS       []string          `json:"ss"`
	IS       []int             `json:"is"`
	Raw      json.RawMessage   `json:"raw"`
	Raws     []json.RawMessage `json:"raws"`
	Untagged string
	Dash     string `json:"-"`
	//lint:ignore U1000 an unexported field: encoding/json never sets it, nor must fastDecode
	skip string
}

// fastAgrees decodes doc into two fresh values from mk, quickly and
// through encoding/json alone, and fails t unless the quick path either
// declined and left its target untouched, or decoded exactly what
// encoding/json did. It reports whether the quick path decoded.
func fastAgrees(t testing.TB, doc []byte, mk func() any) bool {
	t.Helper()
	quick, slow := mk(), mk()
	ok := fastDecode(doc, quick)
	slowErr := decodeSlow(doc, slow)
	if !ok {
		if !reflect.DeepEqual(quick, mk()) {
			t.Fatalf("fastDecode declined %q but changed its target: %+v", doc, quick)
		}
		return false
	}
	if slowErr != nil {
		t.Fatalf("fastDecode accepted %q, encoding/json refuses it: %v", doc, slowErr)
	}
	if !reflect.DeepEqual(quick, slow) {
		t.Fatalf("fastDecode read %q as\n%#v\nencoding/json as\n%#v", doc, quick, slow)
	}
	return true
}

func newFastTarget() any { return &fastTarget{} }

// The documents fastDecode must read itself: the opcodes' common shapes.
var fastAccepted = []string{
	`{}`,
	` { } `,
	`{"OP_ID":"OP_TAGS_SET","s":"x","b":true,"i":-7,"i8":127,"f":2.5,"ps":"p","pb":false,"pi":9007199254740993,"pf":-0.0,"ss":["a","b"],"is":[1,-2,0],"raw":{"a":[1,"x\n\u00e9",null,true,{}]},"raws":[1,"s",[],{"b":null}],"Untagged":"u"}`,
	"{\n\t\"s\" : \"a\" ,\r\n \"i\" :\t0 }",
	`{"s":"é 日本"}`,
	`{"s":""}`,
	`{"i":-0}`,
	`{"f":1e-3}`,
	`{"f":-12.5E+2}`,
	`{"f":7}`,
	`{"f":1.7976931348623157e308}`,
	`{"i8":-128}`,
	`{"ss":[]}`,
	`{"is":[]}`,
	`{"raws":[]}`,
	`{"raw":"a\\\"b\/c\b\f\n\r\t\uABCD"}`,
	`{"raw":[[[[[]]]]]}`,
	`{"reason":[["gnt:user","fix the rack",1700000000000000000],["gnt:library:rlib2","PUT /2/jobs",1]]}`,
	`{"reason":[]}`,
	`{"depends":[[-1,["success","error"]],[5,[]]],"priority":-20,"comment":"c","debug_level":0,"dry_run":true}`,
}

// The documents it must leave to encoding/json (which accepts some and
// refuses the others).
var fastDeclined = []string{
	``,
	` `,
	`null`,
	`[]`,
	`"s"`,
	`{"s":"a\nb"}`,
	`{"s":"a\u0041"}`,
	"{\"s\":\"a\tb\"}",
	"{\"s\":\"\xff\"}",
	"{\"s\":\"\xc3\"}",
	`{"s":null}`,
	`{"ps":null}`,
	`{"raw":null}`,
	`{"ss":null}`,
	`{"ss":[null]}`,
	`{"reason":[null]}`,
	`{"S":"x"}`,
	`{"op_id":"x"}`,
	`{"s":"a","s":"b"}`,
	`{"zz":1}`,
	`{"skip":"x"}`,
	`{"Dash":"x"}`,
	`{"-":"x"}`,
	`{"m":{}}`,
	`{"n":{"X":1}}`,
	`{"i":1.5}`,
	`{"i":1e2}`,
	`{"i8":128}`,
	`{"i":99999999999999999999}`,
	`{"f":1e999}`,
	`{"i":01}`,
	`{"i":+1}`,
	`{"i":-}`,
	`{"f":.5}`,
	`{"f":1.}`,
	`{"f":1e}`,
	`{"f":"1"}`,
	`{"s":1}`,
	`{"b":True}`,
	`{"b":1}`,
	`{"ss":[1]}`,
	`{"is":["1"]}`,
	`{"is":[1.5]}`,
	`{"raw":[1,]}`,
	`{"raw":{"a"}}`,
	`{"raw":{1:2}}`,
	`{"raw":"\x"}`,
	`{"raw":"\u12"}`,
	`{"raw":tru}`,
	`{"raw":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	`{"reason":[["a","b"]]}`,
	`{"reason":["a"]}`,
	`{"s":"a",}`,
	`{,"s":"a"}`,
	`{"s":"a" "i":1}`,
	`{"s" "a"}`,
	`{"s":"a"`,
	`{"s":"a`,
	`{"s":"a"} x`,
	`{"s":"a"}{}`,
	`{"ss":["a" "b"]}`,
	`{"ss":["a",]}`,
	`{"ss":["a"`,
}

func TestFastDecodeAgrees(t *testing.T) {
	for _, doc := range fastAccepted {
		if !fastAgrees(t, []byte(doc), newFastTarget) {
			t.Errorf("fastDecode declined %q, one of the shapes it is for", doc)
		}
	}
	for _, doc := range fastDeclined {
		if fastAgrees(t, []byte(doc), newFastTarget) {
			t.Errorf("fastDecode accepted %q, which it must leave to encoding/json", doc)
		}
	}
}

// A target with fields already set is left to encoding/json, which keeps
// what the document does not name; so is one without a usable plan.
func TestFastDecodeDeclinesTargets(t *testing.T) {
	doc := []byte(`{"i":1}`)
	pre := &fastTarget{S: "keep"}
	if fastDecode(doc, pre) {
		t.Fatal("fastDecode decoded into a target that was not zero")
	}
	if err := DecodeStrict(doc, pre); err != nil || pre.S != "keep" || pre.I != 1 {
		t.Fatalf("DecodeStrict into a filled target: %v, %+v", err, pre)
	}
	var notPointer fastTarget
	if fastDecode(doc, notPointer) || fastDecode(doc, (*fastTarget)(nil)) {
		t.Fatal("fastDecode decoded into a non-pointer or nil pointer")
	}
	var m map[string]any
	if fastDecode(doc, &m) {
		t.Fatal("fastDecode decoded into a map")
	}
}

type (
	ownDecoder struct{ A string }
	textField  string
	withText   struct {
		T textField `json:"t"`
	}
	withPtrEmbed struct {
		*OpCommon
	}
	withTaggedEmbed struct {
		OpCommon `json:"common"`
	}
	withClash struct {
		OpCommon
		OpID string `json:"OP_ID"`
	}
	withStringOpt struct {
		N int `json:"n,string"`
	}
	withOddName struct {
		N int `json:"n.x"`
	}
	withMap struct {
		S string         `json:"s"`
		M map[string]any `json:"m"`
	}
	withStruct struct {
		S string          `json:"s"`
		N struct{ X int } `json:"n"`
	}
	withStructs struct {
		S string            `json:"s"`
		N []struct{ X int } `json:"n"`
	}
)

func (o *ownDecoder) UnmarshalJSON([]byte) error { return nil }
func (t *textField) UnmarshalText([]byte) error  { return nil }

func TestFastPlans(t *testing.T) {
	for _, v := range []any{ownDecoder{}, withPtrEmbed{}, withTaggedEmbed{}, withClash{}, withStringOpt{}, withOddName{}, 5} {
		if p := buildFastPlan(reflect.TypeOf(v)); p != nil {
			t.Errorf("%T has a quick plan; encoding/json decodes it by rules fastDecode does not repeat", v)
		}
	}
	// A type with a field of a kind the quick path does not read gets no
	// plan: each document naming it would be read up to it for nothing.
	for _, v := range []any{withText{}, withMap{}, withStruct{}, withStructs{}} {
		if p := buildFastPlan(reflect.TypeOf(v)); p != nil {
			t.Errorf("%T has a quick plan, with a field fastDecode does not read", v)
		}
		mk := func() any { return reflect.New(reflect.TypeOf(v)).Interface() }
		if fastAgrees(t, []byte(`{"s":"x"}`), mk) {
			t.Errorf("fastDecode decoded into a %T", v)
		}
	}
}

// The opcodes every job benchmark and most jobs use have a plan; for each
// opcode with one, a document setting every field decodes quickly to
// what encoding/json makes of it.
func TestFastDecodeEveryOpcode(t *testing.T) {
	for _, id := range []string{"OP_TAGS_SET", "OP_TAGS_DEL", "OP_TEST_DELAY", "OP_INSTANCE_REBOOT", "OP_CLUSTER_EPO"} {
		if fastPlanFor(reflect.TypeOf(opcodeTypes[id]()).Elem()) == nil {
			t.Errorf("%s has no quick plan", id)
		}
	}
	var without []string
	ids := make([]string, 0, len(opcodeTypes))
	for id := range opcodeTypes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		mk := func() any { return opcodeTypes[id]() }
		p := fastPlanFor(reflect.TypeOf(mk()).Elem())
		if p == nil {
			without = append(without, id)
			continue
		}
		doc := map[string]json.RawMessage{}
		for name, f := range p.fields {
			if v := fastSample(reflect.TypeOf(mk()).Elem().FieldByIndex(f.index).Type, f.kind); v != "" {
				doc[name] = json.RawMessage(v)
			}
		}
		doc["OP_ID"] = json.RawMessage(fmt.Sprintf("%q", id))
		raw, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !fastAgrees(t, raw, mk) {
			t.Errorf("%s: fastDecode declined %s", id, raw)
		}
	}
	t.Logf("opcodes left to encoding/json (a map, struct or list of structs among their fields): %v", without)
}

// fastSample is a JSON value for a field of type ft read as kind.
func fastSample(ft reflect.Type, kind fastKind) string {
	switch kind {
	case fkString:
		return `"x"`
	case fkBool:
		return `true`
	case fkInt:
		return `3`
	case fkFloat:
		return `1.5`
	case fkStrings:
		return `["a","b"]`
	case fkInts:
		return `[1,2]`
	case fkUnmarshaler:
		return `[[-1,["success"]]]`
	case fkUnmarshalers:
		// Other element types' own decoders want their own shapes; the
		// table tests cover a slice of json.RawMessage.
		if ft.Elem() == reflect.TypeFor[ReasonEntry]() {
			return `[["gnt:user","why",1700000000000000000]]`
		}
	}
	return ""
}

func BenchmarkDecodeOpcode(b *testing.B) {
	raw := []byte(`{"OP_ID":"OP_TAGS_SET","kind":"node","name":"node21","tags":["b12-3"],"reason":[["gnt:library:rlib2","POST /2/jobs",1700000000000000000]]}`)
	for _, c := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"quick", DecodeStrict}, {"encoding-json", decodeSlow}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var op OpTagsSet
				if err := c.decode(raw, &op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzFastDecode: whatever the document, the quick path either declines
// it without touching its target or decodes what encoding/json does.
func FuzzFastDecode(f *testing.F) {
	for _, doc := range append(append([]string(nil), fastAccepted...), fastDeclined...) {
		f.Add([]byte(doc), uint8(0))
	}
	f.Add([]byte(`{"OP_ID":"OP_TAGS_SET","kind":"node","name":"n1","tags":["a"]}`), uint8(1))
	f.Add([]byte(`{"OP_ID":"OP_TEST_DELAY","duration":0.5,"repeat":3,"on_nodes":["n1"]}`), uint8(2))
	targets := []func() any{
		newFastTarget,
		func() any { return &OpTagsSet{} },
		func() any { return &OpTestDelay{} },
		func() any { return &OpTagsDel{} },
		func() any { return &OpInstanceReboot{} },
	}
	f.Fuzz(func(t *testing.T, doc []byte, which uint8) {
		fastAgrees(t, doc, targets[int(which)%len(targets)])
	})
}

// reasonTrailJSON is the reference: the trail as a list of []any triples
// through json.Marshal.
func reasonTrailJSON(trail []ReasonEntry) []byte {
	l := make([][]any, len(trail))
	for i, r := range trail {
		l[i] = []any{r.Source, r.Text, r.TimeNS}
	}
	b, _ := json.Marshal(l)
	return b
}

func TestAppendReasonTrail(t *testing.T) {
	for _, s := range []string{"", "gnt:user", "PUT /2/jobs", `a"b`, `a\b`, "<&>", "é", "\u2028", "a\x00b", "\x7f", "\xff", "tab\there"} {
		trail := []ReasonEntry{{Source: s, Text: "t " + s, TimeNS: -5}, {Source: "gnt:x", Text: s, TimeNS: 1700000000000000000}}
		if got, want := AppendReasonTrail(nil, trail), reasonTrailJSON(trail); string(got) != string(want) {
			t.Errorf("trail with %q: got %s, json.Marshal %s", s, got, want)
		}
	}
	if got := string(AppendReasonTrail(nil, nil)); got != "[]" {
		t.Errorf("empty trail: %s", got)
	}
}

func FuzzAppendReasonTrail(f *testing.F) {
	f.Add("gnt:user", "why <now>", int64(1))
	f.Fuzz(func(t *testing.T, src, text string, ts int64) {
		trail := []ReasonEntry{{Source: src, Text: text, TimeNS: ts}}
		got, want := AppendReasonTrail(nil, trail), reasonTrailJSON(trail)
		if string(got) != string(want) {
			t.Fatalf("got %s, json.Marshal %s", got, want)
		}
		var back []ReasonEntry
		if err := DecodeStrict(got, &back); err != nil {
			t.Fatalf("%s does not decode: %v", got, err)
		}
	})
}
