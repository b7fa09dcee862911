package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// TestDecodeAnswer: an answer is decoded as it is read, as json.Unmarshal
// of the whole would decode it, and a bad one is refused naming why.
func TestDecodeAnswer(t *testing.T) {
	defer func(n int64) { maxAnswer = n }(maxAnswer)
	maxAnswer = 16
	broken := errors.New("connection reset")
	cases := []struct {
		name string
		body io.Reader
		want any
		err  string
	}{
		{"object", strings.NewReader(`{"a":[1,"x"]}` + "\n"), map[string]any{"a": []any{1.0, "x"}}, ""},
		{"exactly the limit", strings.NewReader(`"0123456789abcd"`), "0123456789abcd", ""},
		{"empty body", strings.NewReader(""), nil, ""},
		{"white space only", strings.NewReader(" \n"), nil, "decoding answer of GET /2/x: EOF"},
		{"truncated", strings.NewReader(`[1,2`), nil, "decoding answer of GET /2/x"},
		{"trailing garbage", strings.NewReader(`[1] x`), nil, "invalid character 'x'"},
		{"two values", strings.NewReader(`1 2`), nil, "more than one JSON value"},
		{"larger than the limit", strings.NewReader(`"0123456789abcdef"`), nil, "the answer is larger than 16 bytes"},
		{"broken read", io.MultiReader(strings.NewReader(`[1,`), iotest.ErrReader(broken)), nil, "connection reset"},
	}
	for _, tc := range cases {
		var got any
		err := decodeAnswer(tc.body, &got, "GET", "/2/x")
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s: decoded %#v, want %#v", tc.name, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
		}
	}
	var got any
	if err := decodeAnswer(io.MultiReader(strings.NewReader(`[1,`), iotest.ErrReader(broken)), &got, "GET", "/2/x"); !errors.Is(err, broken) {
		t.Errorf("a failed read is %v, not the read's own error", err)
	}
}

// FuzzDecodeAnswer: decoding as the answer arrives accepts what
// json.Unmarshal accepts (and an empty body), and decodes the same value.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2] `, `"x"`, `1 2`, ``, ` `, `[1`, `{}x`, `]`, "null\n", `"\u00e9\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want any
		err := decodeAnswer(bytes.NewReader(b), &got, "GET", "/x")
		werr := json.Unmarshal(b, &want)
		if len(b) == 0 {
			werr = nil
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: streamed decode %v, json.Unmarshal %v", b, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: streamed %#v, whole %#v", b, got, want)
		}
	})
}
