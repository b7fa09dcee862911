package main

import (
	"strings"
	"testing"
)

// TestFilterCommands: gnt filter add, replace and delete send Ganeti's
// requests; a bad action or predicate is refused here, naming it, with
// nothing sent; list shows the rules with the action in gnt-filter's form.
func TestFilterCommands(t *testing.T) {
	const u = "8b53f7de-f8e2-4470-99bd-1efe746e434f"
	f := newFake(t)
	f.on("POST", "/2/filters", 200, `"`+u+`"`)
	f.on("PUT", "/2/filters/"+u, 200, `"`+u+`"`)
	f.on("DELETE", "/2/filters/"+u, 200, `null`)
	f.on("GET", "/2/filters", 200, `[{"uuid":"`+u+`","watermark":12,"priority":99,"predicates":[["opcode",["=","OP_ID","OP_INSTANCE_REPLACE_DISKS"]]],"action":["RATE_LIMIT",10],"reason_trail":[]}]`)
	for _, c := range []struct {
		args    []string
		out     string
		request string
	}{
		{[]string{"filter", "add", "--predicates", `[["jobid", [">", "id", "watermark"]]]`, "--action", "REJECT"}, u + "\n",
			`POST /2/filters {"action":"REJECT","predicates":[["jobid",["\u003e","id","watermark"]]],"priority":0}`},
		{[]string{"filter", "replace", "--priority", "99", "--action", "RATE_LIMIT 10", u}, u + "\n",
			`PUT /2/filters/` + u + ` {"action":["RATE_LIMIT",10],"priority":99}`},
		{[]string{"filter", "delete", u}, "", `DELETE /2/filters/` + u},
		{[]string{"filter", "list", "--no-headers", "--separator", "|", "--fields", "uuid,priority", u}, u + "|99\n", "GET /2/filters?bulk=1"},
		{[]string{"-o", "+reason_trail", "filter", "list"}, "UUID                                 Priority Watermark Action        Predicates                                             ReasonTrail\n" +
			u + " 99       12        RATE_LIMIT 10 [[\"opcode\",[\"=\",\"OP_ID\",\"OP_INSTANCE_REPLACE_DISKS\"]]] \n", "GET /2/filters?bulk=1"},
		{[]string{"filter", "list", "--no-headers"}, u + " 99 12 RATE_LIMIT 10 [[\"opcode\",[\"=\",\"OP_ID\",\"OP_INSTANCE_REPLACE_DISKS\"]]]\n", "GET /2/filters?bulk=1"},
	} {
		n := len(f.requests())
		r := gnt(t, nil, append([]string{"--server", f.addr()}, c.args...)...)
		reqs := f.requests()[n:]
		if r.code != 0 || r.stdout != c.out || len(reqs) != 1 || reqs[0].String() != c.request {
			t.Errorf("%v: exit %d stdout %q stderr %q; requests %v, want %s", c.args, r.code, r.stdout, r.stderr, reqs, c.request)
		}
	}
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"filter", "add", "--action", "DROP"}, `--action: unknown action "DROP"`},
		{[]string{"filter", "add", "--action", "RATE_LIMIT 0"}, "--action: RATE_LIMIT takes a number of jobs from 1 to"},
		{[]string{"filter", "add", "--predicates", `[["instance", ["=", "name", "x"]]]`}, `--predicates: predicate 0: unknown predicate "instance"`},
		{[]string{"filter", "add", "--predicates", `[["jobid"`}, "--predicates is not JSON"},
		{[]string{"filter", "replace"}, "Usage error"},
	} {
		n := len(f.requests())
		r := gnt(t, nil, append([]string{"--server", f.addr()}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.err) || len(f.requests()) != n {
			t.Errorf("%v: exit %d stderr %q, want %q and no request", c.args, r.code, r.stderr, c.err)
		}
	}
	if r := gnt(t, nil, "--server", f.addr(), "filter", "list", "--fields", "colour"); r.code != 2 || !strings.Contains(r.stderr, "unknown field(s) of filters: colour (see 'gnt filter list-fields')") {
		t.Errorf("unknown field: exit %d stderr %q", r.code, r.stderr)
	}
}
