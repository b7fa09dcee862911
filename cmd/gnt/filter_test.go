package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestListFilter: a filter (with -F, or one argument that can only be a
// filter, as in Ganeti) is parsed here, sent to /2/query in list form, and
// only the objects the server names are listed; a bad filter is refused
// before anything is sent, naming the position.
func TestListFilter(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, twoNodes)
	f.on("PUT", "/2/query/node", 200, `{"fields":[{"name":"name","title":"Node","kind":"text","doc":"Node name"}],"data":[[[0,"n2"]]]}`)
	for _, args := range [][]string{
		{"node", "list", "--no-headers", "--fields", "name", "-F", `role == "D" or "x" in tags`},
		{"node", "list", "--no-headers", "--fields", "name", `role == "D" or "x" in tags`},
	} {
		before := len(f.requests())
		r := gnt(t, nil, append([]string{"--server", f.addr()}, args...)...)
		if r.code != 0 || r.stdout != "n2\n" {
			t.Errorf("%q: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
			continue
		}
		reqs := f.requests()[before:]
		if len(reqs) != 2 || reqs[0].Method != "PUT" || reqs[0].Path != "/2/query/node" {
			t.Fatalf("requests %v", reqs)
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(reqs[0].Body), &body); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"fields": []any{"name"}, "qfilter": []any{"|", []any{"==", "role", "D"}, []any{"=[]", "tags", "x"}}}
		if !reflect.DeepEqual(body, want) {
			t.Errorf("query body %v", body)
		}
	}
	before := len(f.requests())
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"node", "list", "-F", "role =="}, "at position 8: expected a quoted string"},
		{[]string{"node", "list", "-F", "n1", "n2"}, "--filter takes exactly one argument, the filter, got 2"},
		{[]string{"instance", "list", "name = (web"}, "at position 8: expected a quoted string"},
	} {
		r := gnt(t, nil, append([]string{"--server", f.addr()}, tc.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%q: exit %d stderr %q, want %q", tc.args, r.code, r.stderr, tc.msg)
		}
	}
	if n := len(f.requests()); n != before {
		t.Errorf("bad filters sent %d requests", n-before)
	}
	// Globs among names make a filter, as in Ganeti.
	before = len(f.requests())
	r := gnt(t, nil, "--server", f.addr(), "node", "list", "--no-headers", "--fields", "name", "n?", "x1")
	if r.code != 0 || r.stdout != "n2\n" {
		t.Errorf("globs: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if reqs := f.requests()[before:]; len(reqs) != 2 || !strings.Contains(reqs[0].Body, `["|",["=~","name","^n[^.](\\..*)?$"],["==","name","x1"]]`) {
		t.Errorf("glob query %v", reqs)
	}
	// Plain names stay names.
	r = gnt(t, nil, "--server", f.addr(), "node", "list", "--no-headers", "--fields", "name", "n1")
	if r.stdout != "n1\n" {
		t.Errorf("names: %q %q", r.stdout, r.stderr)
	}
}
