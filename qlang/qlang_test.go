package qlang

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// js decodes the expected list form written as JSON, the way /2/query
// receives it.
func js(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad test JSON %s: %v", s, err)
	}
	return v
}

// roundTrip encodes a parse result to JSON and back, so that integers
// compare with the float64 of the expectation.
func roundTrip(t *testing.T, f []any) any {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return js(t, string(b))
}

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`name == "foobar"`, `["==","name","foobar"]`},
		{`name=='foobar'`, `["==","name","foobar"]`},
		{`name="foobar"`, `["==","name","foobar"]`},
		{`mem == 128`, `["==","mem",128]`},
		{`negfield != -1`, `["!=","negfield",-1]`},
		{`ctime < 1234`, `["<","ctime",1234]`},
		{`ctime > +1234`, `[">","ctime",1234]`},
		{`mtime <= 9999`, `["<=","mtime",9999]`},
		{`mtime >= 9999`, `[">=","mtime",9999]`},
		{`offline == true`, `["==","offline",true]`},
		{`offline != false`, `["!=","offline",false]`},
		{`master`, `["?","master"]`},
		{`not master`, `["!",["?","master"]]`},
		{`notxyz`, `["?","notxyz"]`},
		{`not andxyz`, `["!",["?","andxyz"]]`},
		{`valA==1 and valB==2 or valC==3`, `["|",["&",["==","valA",1],["==","valB",2]],["==","valC",3]]`},
		{`valA==1 and valB==2 and valC==3`, `["&",["==","valA",1],["==","valB",2],["==","valC",3]]`},
		{`(xyz=="v" or k == 256 and x == "y")`, `["|",["==","xyz","v"],["&",["==","k",256],["==","x","y"]]]`},
		{"(name\n==\"foobar\") and (xyz==\"va)ue\" and k == 256 or x ==\t\"y\"\n) and mc",
			`["&",["==","name","foobar"],["|",["&",["==","xyz","va)ue"],["==","k",256]],["==","x","y"]],["?","mc"]]`},
		{`master and not other`, `["&",["?","master"],["!",["?","other"]]]`},
		{`not (master or other == 4)`, `["!",["|",["?","master"],["==","other",4]]]`},
		{`some=="val\"ue"`, `["==","some","val\"ue"]`},
		{`some=='it\'s'`, `["==","some","it's"]`},
		{`"x" in tags`, `["=[]","tags","x"]`},
		{`123 in ips`, `["=[]","ips",123]`},
		{`99 not in ips`, `["!",["=[]","ips",99]]`},
		{`"a" in valA and "b" not in valB`, `["&",["=[]","valA","a"],["!",["=[]","valB","b"]]]`},
		{`name =~ m/test/`, `["=~","name","test"]`},
		{`name =~ /te\.st/`, `["=~","name","te\\.st"]`},
		{`name =~ m/a\/b/`, `["=~","name","a/b"]`},
		{`name =~ m#^node.*example.com$#i`, `["=~","name","(?i)^node.*example.com$"]`},
		{`name =~ m|gi|si`, `["=~","name","(?is)gi"]`},
		{`name =~ ^x^s`, `["=~","name","(?s)x"]`},
		{`name !~ m/test/`, `["!",["=~","name","test"]]`},
		{`notname =~ m/test/`, `["=~","notname","test"]`},
		{`(name =~ m/^n/ and master) or pip =~ |^3.*|`, `["|",["&",["=~","name","^n"],["?","master"]],["=~","pip","^3.*"]]`},
		{`name =* '*.site'`, `["=~","name","^[^.]*\\.site(\\..*)?$"]`},
		{`name !* "web?"`, `["!",["=~","name","^web[^.](\\..*)?$"]]`},
		{`disk.sizes == 1 and nic.ips/0 == "x"`, `["&",["==","disk.sizes",1],["==","nic.ips/0","x"]]`},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if g, w := roundTrip(t, got), js(t, tc.want); !reflect.DeepEqual(g, w) {
			t.Errorf("Parse(%q) = %v, want %v", tc.in, g, w)
		}
	}
}

func TestParseBad(t *testing.T) {
	deep := strings.Repeat("not ", MaxDepth) + "x"
	for _, tc := range []struct {
		in   string
		pos  int    // 0: no position
		want string // in the message
	}{
		{``, 1, "expected a condition, found an empty filter"},
		{`   `, 4, "empty filter"},
		{`#invalid!filter#`, 1, `unexpected character "#"`},
		{`m/x/,`, 5, `unexpected character ","`},
		{`name=~m#a#g`, 11, `unknown regular expression flag 'g'`},
		{`asdf =~ m|abc|I`, 15, `unknown regular expression flag 'I'`},
		{`name=~^[^`, 7, "invalid regular expression"},
		{`name=~^abc`, 7, "regular expression opened with ^ is not closed"},
		{`name =~ /foobarbaz#`, 9, "not closed"},
		{`name =~ m/(/`, 9, "invalid regular expression"},
		{`name =~ "x"`, 9, "expected a regular expression"},
		{`name <> "v"`, 7, `expected a quoted string, an integer, true or false after "<", found ">"`},
		{`name => 1`, 7, `after "=", found ">"`},
		{`name =< 1`, 7, `after "=", found "<"`},
		{`name == value`, 9, `found field name "value"`},
		{`name ==`, 8, "found end of filter"},
		{`name == "x`, 9, `string opened with " is not closed`},
		{`name == 1x`, 10, `expected an integer, found "1x"`},
		{`name == 99999999999999999999`, 9, "out of range"},
		{`a and`, 6, "expected a condition"},
		{`a or or b`, 6, `found keyword "or"`},
		{`(a and b`, 9, `expected ")" closing the "(" at position 1`},
		{`a)`, 2, `expected "and", "or" or the end of the filter, found ")"`},
		{`a b`, 3, `found field name "b"`},
		{`"x" tags`, 5, `expected "in" or "not in" after the value "x"`},
		{`"x" in 5`, 8, "expected a field name after \"in\", found number 5"},
		{`name =* foo`, 9, "expected a quoted glob pattern"},
		{`true`, 5, `expected "in" or "not in"`},
		{`name == "é" ä`, 14, `unexpected character "ä"`},
		{deep, 1, "nested too deep: at most 10 levels"},
		{strings.Repeat("(", MaxDepth+1) + "x" + strings.Repeat(")", MaxDepth+1), MaxDepth + 1, "parentheses nested too deep: at most 10"},
		{strings.Repeat("x", MaxTextLen+1), 0, "4097 bytes long, at most 4096"},
	} {
		_, err := Parse(tc.in)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%q) = %v, want an *Error", tc.in, err)
			continue
		}
		if !strings.Contains(e.Msg, tc.want) || (tc.pos != 0 && e.Pos != tc.pos) {
			t.Errorf("Parse(%q): %v (pos %d), want %q at position %d", tc.in, err, e.Pos, tc.want, tc.pos)
		}
	}
	// The deepest accepted nesting is MaxDepth.
	if _, err := Parse(strings.Repeat("not ", MaxDepth-1) + "x"); err != nil {
		t.Errorf("%d levels refused: %v", MaxDepth, err)
	}
}

var schema = Schema(func(f string) (Kind, bool) {
	k, ok := map[string]Kind{
		"name": KindText, "mem": KindUnit, "vcpus": KindNumber, "ctime": KindTimestamp,
		"offline": KindBool, "tags": KindOther, "pnode": KindText, "nothing": KindOther,
	}[f]
	return k, ok
})

func TestMatch(t *testing.T) {
	rows := []Row{
		{"name": "web1.example.com", "mem": 512, "vcpus": int64(2), "ctime": 1700000000.5, "offline": false, "tags": []string{"web", "prod"}, "pnode": "n1"},
		{"name": "db1", "mem": 4096, "vcpus": 8, "ctime": 1600000000.0, "offline": true, "tags": []any{"db"}, "pnode": "n2"},
		{"name": "bare", "mem": 128, "vcpus": 1, "offline": false, "tags": []string{}},
	}
	for _, tc := range []struct {
		filter string // text, or list form when it starts with [
		want   []string
	}{
		{`name == "db1"`, []string{"db1"}},
		{`["=","name","db1"]`, []string{"db1"}},
		{`name != "db1"`, []string{"web1.example.com", "bare"}},
		{`mem >= 512`, []string{"web1.example.com", "db1"}},
		{`mem < 512`, []string{"bare"}},
		{`vcpus <= 2 and vcpus > 1`, []string{"web1.example.com"}},
		{`ctime > 1650000000`, []string{"web1.example.com"}}, // bare has no ctime: false
		{`ctime < 1650000000 or not ctime`, []string{"db1", "bare"}},
		{`offline`, []string{"db1"}},
		{`not offline`, []string{"web1.example.com", "bare"}},
		{`offline == false`, []string{"web1.example.com", "bare"}},
		{`"web" in tags`, []string{"web1.example.com"}},
		{`"db" in tags or "prod" in tags`, []string{"web1.example.com", "db1"}},
		{`"db" not in tags`, []string{"web1.example.com", "bare"}},
		{`tags`, []string{"web1.example.com", "db1"}},
		{`"example" in name`, []string{"web1.example.com"}},
		{`name =~ m/^WEB/i`, []string{"web1.example.com"}},
		{`name =* "web1"`, []string{"web1.example.com"}},
		{`name =* "*"`, []string{"web1.example.com", "db1", "bare"}},
		{`name =* "we?"`, nil},
		{`name > "c"`, []string{"web1.example.com", "db1"}},
		{`pnode == "n1" or pnode == "n2"`, []string{"web1.example.com", "db1"}},
		{`tags == "x"`, nil},
		{`["==","tags",["db"]]`, []string{"db1"}},
		{`["|"]`, nil},
		{`["&"]`, []string{"web1.example.com", "db1", "bare"}},
		{`null`, []string{"web1.example.com", "db1", "bare"}},
		{`["==","mem",512.0]`, []string{"web1.example.com"}},
	} {
		var f any
		var err error
		if tc.filter == "null" || strings.HasPrefix(tc.filter, "[") {
			f = js(t, tc.filter)
		} else if f, err = Parse(tc.filter); err != nil {
			t.Errorf("Parse(%q): %v", tc.filter, err)
			continue
		}
		// Through JSON, as a client sends it.
		if l, ok := f.([]any); ok {
			f = roundTrip(t, l)
		}
		c, err := Compile(f, schema)
		if err != nil {
			t.Errorf("Compile(%s): %v", tc.filter, err)
			continue
		}
		var got []string
		for _, r := range rows {
			if c.Match(r) {
				got = append(got, r["name"].(string))
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s matched %q, want %q", tc.filter, got, tc.want)
		}
	}
}

func TestCompileBad(t *testing.T) {
	deep := `["?","name"]`
	for i := 0; i < MaxDepth; i++ {
		deep = `["!",` + deep + `]`
	}
	many := `["|"` + strings.Repeat(`,["?","name"]`, MaxNodes) + `]`
	for _, tc := range []struct{ in, want string }{
		{`[]`, `at filter: expected a non-empty list [operator, operands...], got []`},
		{`"name"`, `at filter: expected a non-empty list`},
		{`[1,"name"]`, `at filter[0]: expected an operator (a string), got 1`},
		{`["~","name","x"]`, `at filter[0]: unknown operator "~"`},
		{`["==","name"]`, `operator "==" expects exactly two operands (a field and a value), got 1`},
		{`["!",["?","a"],["?","b"]]`, `operator "!" expects exactly one operand, got 2`},
		{`["?"]`, `operator "?" expects exactly one operand, got 0`},
		{`["&",["?","name"],["==","xyz",1]]`, `at filter[2][1]: unknown field "xyz"`},
		{`["?",3]`, `at filter[1]: expected a field name (a string), got 3`},
		{`["==","name",1]`, `at filter[2]: cannot compare field "name" (kind text) with 1: expected a string`},
		{`["<","mem","1"]`, `cannot compare field "mem" (kind unit) with "1": expected an integer`},
		{`["==","mem",1.5]`, `expected an integer`},
		{`["==","offline","yes"]`, `expected true or false`},
		{`[">","ctime","x"]`, `expected a number`},
		{`["=~","name",1]`, `expects a regular expression (a string), got 1`},
		{`["=~","name","("]`, `at filter[2]: invalid regular expression`},
		{`["|",["?","name"],"x"]`, `at filter[2]: expected a non-empty list`},
		{deep, `nested too deep: at most 10 levels`},
		{many, `more than 1000 operators`},
	} {
		_, err := Compile(js(t, tc.in), schema)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%s) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParse: the parser never panics; what it accepts has at most MaxDepth
// levels and compiles, through JSON, when every field is known.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`name == "x"`, `a and (b or not c)`, `"x" not in tags`, `n =~ m/^a/i`, `n =* "*.x"`, `m < -3`, `((a))`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q): error %v is not an *Error", s, err)
			}
			return
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("Parse(%q) = %v: not JSON: %v", s, got, err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if _, err := Compile(v, func(string) (Kind, bool) { return KindOther, true }); err != nil {
			t.Fatalf("Parse(%q) = %s, which does not compile: %v", s, b, err)
		}
	})
}

// FuzzCompile: list-form filters from JSON never panic the compiler or
// the evaluator.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{`["==","name","x"]`, `["&",["?","offline"],["!",["=[]","tags","a"]]]`, `["<","mem",3]`, `["=~","name","^a"]`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	row := Row{"name": "a", "mem": 3, "vcpus": 1.0, "offline": true, "tags": []string{"a"}, "ctime": 5.5, "nothing": nil}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		c, err := Compile(v, schema)
		if err != nil {
			return
		}
		c.Match(row)
		c.Match(Row{})
	})
}
