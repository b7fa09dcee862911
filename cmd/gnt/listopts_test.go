package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/rpc"
)

// TestListOptions: Ganeti's -o [+]FIELD,..., --no-headers, --separator
// and --units on list commands; --json, and -o json with a warning.
func TestListOptions(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, twoNodes)
	f.on("GET", "/2/instances", 200, `[{"name": "web1", "pnode": "n1", "os": "debian", "admin_state": "up", "beparams": {"memory": 1536, "vcpus": 2},
		"disk_usage": 10240, "snodes": ["n2"], "disk.sizes": [10240, 512], "nic.macs": ["aa:00:00:00:00:01"], "status": "running", "oper_ram": 1536}]`)
	f.on("GET", "/2/groups", 200, `[{"name": "default", "node_cnt": 2, "alloc_policy": "preferred", "node_list": ["n1", "n2"]}]`)
	f.on("GET", "/2/jobs", 200, `[{"id": 7, "status": "success", "summary": ["A", "B"], "priority": 0}]`)
	for _, tc := range []struct {
		args   []string
		stdout string
		stderr string
	}{
		{[]string{"node", "list", "-o", "name,mtotal,dtotal,master_capable"},
			"Node MTotal DTotal MasterCapable\nn1   8.0G   100.0G Y\nn2   ?      512M   N\n", ""},
		{[]string{"node", "list", "-o", "name,mtotal,dfree", "--units", "g", "--separator=:", "--no-headers"},
			"n1:8.0:90.0\nn2:?:?\n", ""},
		{[]string{"node", "list", "-o", "name,mfree", "--separator", "|"}, "Node|MFree\nn1|7680\nn2|?\n", ""},
		{[]string{"node", "list", "-o", "name,dtotal", "--units", "t", "--no-headers"}, "n1 0.1\nn2 0.0\n", ""},
		{[]string{"node", "list", "-o", "+pip", "--no-headers", "n2"}, "n2 D default 192.0.2.2 ? ? 512M ? 4 0 1 no-mc,unpowered unknown 192.0.2.2\n", ""},
		{[]string{"-o", "name,role", "node", "list", "--no-headers"}, "n1 M\nn2 D\n", ""},
		{[]string{"node", "list", "--fields", "name,group.uuid", "--no-headers"}, "n1 ?\nn2 ?\n", ""},
		{[]string{"instance", "list", "-o", "name,pnode,snodes,beparams.memory,disk_usage", "--units", "m"},
			"Instance Primary_node Secondary_Nodes ConfigMemory DiskUsage\nweb1     n1           n2              1536         10240\n", ""},
		{[]string{"instance", "list", "--no-headers"}, "web1 debian n1 up 1.5G 2\n", ""},
		// Fields Ganeti's list derives: counts and be/ parameters.
		{[]string{"instance", "list", "-o", "name,status,oper_ram,nic.count,disk.count,be/memory,be/vcpus"},
			"Instance Status  Memory NICs Disks ConfigMemory ConfigVCPUs\nweb1     running 1.5G   1    2     1.5G         2\n", ""},
		{[]string{"group", "list", "-o", "name,node_list", "--separator", ";"}, "Group;NodeList\ndefault;n1,n2\n", ""},
		{[]string{"job", "list", "-o", "id,priority,summary", "--no-headers"}, "7 0 A,B\n", ""},
		{[]string{"job", "list", "-o", "+priority"}, "ID Status  Summary Prio\n7  success A,B     0\n", ""},
		{[]string{"--json", "group", "list"}, "[\n  {\n    \"name\": \"default\",\n    \"node_cnt\": 2,\n    \"alloc_policy\": \"preferred\",\n    \"node_list\": [\n      \"n1\",\n      \"n2\"\n    ]\n  }\n]\n", ""},
		{[]string{"group", "list", "-o", "json"}, "[\n  {\n    \"name\": \"default\",\n    \"node_cnt\": 2,\n    \"alloc_policy\": \"preferred\",\n    \"node_list\": [\n      \"n1\",\n      \"n2\"\n    ]\n  }\n]\n",
			"gnt: warning: -o json is deprecated: -o now selects the fields of list commands, as in Ganeti; use --json\n"},
		{[]string{"-o", "table", "job", "list", "--no-headers"}, "7 success A,B\n",
			"gnt: warning: -o table is deprecated: -o now selects the fields of list commands, as in Ganeti; tables are the default\n"},
	} {
		r := gnt(t, nil, append([]string{"--server", f.addr()}, tc.args...)...)
		if r.code != 0 || r.stdout != tc.stdout || r.stderr != tc.stderr {
			t.Errorf("%v: exit %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q", tc.args, r.code, r.stdout, tc.stdout, r.stderr, tc.stderr)
		}
	}
}

// TestListOptionsRefused: bad list options are usage errors naming what
// is wrong, and nothing is printed.
func TestListOptionsRefused(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, twoNodes)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"node", "list", "-o", "name,nosuch,mtotal"}, "unknown field(s) of nodes: nosuch (see 'gnt node list-fields')"},
		{[]string{"node", "list", "--units", "k"}, `--units "k": want h, m, g or t`},
		{[]string{"node", "list", "--separator="}, `--separator "": want a non-empty separator`},
		{[]string{"node", "list", "-o", "name", "--fields", "name"}, "-o and --fields both select the fields: give one"},
		{[]string{"node", "list", "--json", "-o", "name"}, "-o FIELDS formats the table; --json prints the server's objects whole"},
		{[]string{"node", "list", "--json", "--no-headers"}, "--no-headers formats the table"},
		{[]string{"node", "list", "-o", ""}, "-o needs FIELD,..."},
		{[]string{"node", "list", "-o", "table", "--json"}, "-o table and --json contradict each other"},
		{[]string{"cluster", "info", "-o", "name"}, "-o name: -o selects the fields of list commands"},
		{[]string{"node", "list-fields", "nosuch"}, "unknown field(s) of nodes: nosuch"},
		{[]string{"node", "list-fields", "--separator", ""}, `--separator "": want a non-empty separator`},
		{[]string{"node", "list-fields", "-o", "name"}, "list-fields takes --no-headers and --separator, not --output"},
		{[]string{"job", "list-fields", "--json"}, "list-fields takes --no-headers and --separator, not --json"},
	} {
		r := gnt(t, nil, append([]string{"--server", f.addr()}, tc.args...)...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: exit %d stdout %q stderr %q, want 2 and %q", tc.args, r.code, r.stdout, r.stderr, tc.msg)
		}
	}
}

// TestListFields: list-fields describes each field with Ganeti's columns,
// needs no server, and selects fields by name.
func TestListFields(t *testing.T) {
	r := gnt(t, nil, "--server", deadAddr(t), "node", "list-fields", "name", "mtotal", "gnt_liveness")
	want := "Name         Type         Title    Description\n" +
		"name         Text         Node     Node name\n" +
		"mtotal       Storage size MTotal   Total amount of memory of physical machine\n" +
		"gnt_liveness Text         Liveness gnt: the node's gntd as gossip sees it: alive, suspect, dead or unknown\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d stdout\n%s\nwant\n%s\nstderr %s", r.code, r.stdout, want, r.stderr)
	}
	for _, noun := range []string{"node", "instance", "group", "job"} {
		r := gnt(t, nil, noun, "list-fields", "--no-headers", "--separator", "|")
		if r.code != 0 || strings.Count(r.stdout, "\n") < 10 || strings.Contains(r.stdout, "Description") {
			t.Errorf("%s list-fields: exit %d stdout %q stderr %q", noun, r.code, r.stdout, r.stderr)
		}
	}
}

// TestFieldsAreServed: every field list-fields describes is a field of the
// API's objects (rpc's types), so -o never offers a field the server does
// not send, and every field of those types is described.
func TestFieldsAreServed(t *testing.T) {
	served := func(v any) object {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var o object
		if err := decode(b, &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	jobs := object{}
	for _, f := range rpc.JobBulkFields {
		jobs[f] = nil
	}
	for _, tc := range []struct {
		kind string
		obj  object
		defs []field
	}{
		{"node", served(rpc.NodeInfo{}), nodeFields},
		{"instance", served(rpc.InstanceInfo{}), instanceFieldDefs},
		{"group", served(rpc.GroupInfo{}), groupFields},
		{"network", served(rpc.NetworkInfo{}), networkFields},
		{"job", jobs, jobFieldDefs},
	} {
		if tc.kind == "instance" {
			instanceListing.derive(tc.obj)
		}
		for _, d := range tc.defs {
			if _, ok := lookupField(tc.obj, d.name); !ok {
				t.Errorf("%s field %s is described but not served", tc.kind, d.name)
			}
		}
		for k := range tc.obj {
			if _, ok := lookupDef(tc.defs, k); !ok {
				t.Errorf("%s field %s is served but not described: add it to the list-fields table", tc.kind, k)
			}
		}
	}
}

// FuzzListOptions: any -o, --separator and --units either print a table
// (a header and one line per node, sizes in the units asked for) or are
// refused as a usage error naming the option; never a crash.
func FuzzListOptions(f *testing.F) {
	api := newFake(f)
	api.on("GET", "/2/nodes", 200, twoNodes)
	f.Add("name,mtotal", "|", "g")
	f.Add("+pip,dfree", "", "")
	f.Add("json", "", "h")
	f.Add(",,", "\n", "x")
	f.Add("beparams.memory", ";", "t")
	f.Fuzz(func(t *testing.T, fields, sep, units string) {
		args := []string{"--server", api.addr(), "node", "list", "--units=" + units}
		if fields != "" {
			args = append(args, "-o", fields)
		}
		if sep != "" {
			args = append(args, "--separator="+sep)
		}
		r := gnt(t, nil, args...)
		switch r.code {
		case 0:
			if fields != "json" && strings.Count(r.stdout, "\n") < 3 {
				t.Errorf("%v: %q", args, r.stdout)
			}
		case 2:
			if !strings.Contains(r.stderr, "Usage error: ") || r.stdout != "" {
				t.Errorf("%v: stdout %q stderr %q", args, r.stdout, r.stderr)
			}
		default:
			t.Errorf("%v: exit %d stderr %q", args, r.code, r.stderr)
		}
	})
}
