package fsm

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// hostname returns a valid hostname of exactly n characters (n >= 1).
func hostname(n int) string {
	var labels []string
	for n > 0 {
		l := min(n, 63)
		if n-l == 1 { // a label of its own, and a dot before it
			l--
		}
		labels = append(labels, strings.Repeat("a", l))
		n -= l
		if n > 0 {
			n-- // the dot
		}
	}
	return strings.Join(labels, ".")
}

func jsonList(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

func numberedList(n int, item func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = item(i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func params(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"k` + strconv.Itoa(i) + `":1`
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func disks(n int, size int64) string {
	return jsonList(n, `{"size":`+strconv.FormatInt(size, 10)+`}`)
}

// TestLimits holds every opcode bound at its boundary: the value at the
// limit is accepted, one past it is refused with an error that names
// the field and the limit.
func TestLimits(t *testing.T) {
	create := func(fields string) string {
		return `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1",` + fields + `}`
	}
	delay := func(fields string) string { return `{"OP_ID":"OP_TEST_DELAY",` + fields + `}` }
	cluster := func(fields string) string { return `{"OP_ID":"OP_CLUSTER_SET_PARAMS",` + fields + `}` }
	tags := func(list string) string { return `{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":` + list + `}` }
	for _, c := range []struct {
		name      string
		ok, bad   string
		field     string
		limitText string // in the refusal's message
	}{
		{"test delay repeat", delay(`"duration":0,"repeat":1000`), delay(`"duration":0,"repeat":1001`), "repeat", "1000"},
		{"test delay repeat 2e9", delay(`"duration":0,"repeat":1`), delay(`"duration":0,"repeat":2000000000`), "repeat", "1000"},
		{"test delay duration", delay(`"duration":3600`), delay(`"duration":3600.001`), "duration", "3600"},
		{"test delay total", delay(`"duration":86.4,"repeat":1000`), delay(`"duration":86.5,"repeat":1000`), "repeat", "86400"},
		{"test delay on_nodes", delay(`"duration":0,"on_nodes":` + jsonList(1000, `"n1"`)), delay(`"duration":0,"on_nodes":` + jsonList(1001, `"n1"`)), "on_nodes", "1000"},
		{"disks per instance", create(`"disks":` + disks(16, 1)), create(`"disks":` + disks(17, 1)), "disks", "16"},
		{"disk size", create(`"disks":` + disks(1, MaxDiskSizeMiB)), create(`"disks":` + disks(1, MaxDiskSizeMiB+1)), "disks.0.size", "1073741824"},
		{"disk size 2^63-1", create(`"disks":` + disks(1, 1)), create(`"disks":[{"size":9223372036854775807}]`), "disks.0.size", "1073741824"},
		{"disk sum", create(`"disks":` + disks(4, MaxDiskSizeMiB)), create(`"disks":` + disks(5, MaxDiskSizeMiB)), "disks", "4294967296"},
		{"disk sum overflowing int64", create(`"disks":` + disks(2, 1)), create(`"disks":[{"size":9223372036854775807},{"size":9223372036854775807}]`), "disks.0.size", "1073741824"},
		{"NICs per instance", create(`"nics":` + jsonList(8, `{}`)), create(`"nics":` + jsonList(9, `{}`)), "nics", "8"},
		{"NIC link length", create(`"nics":[{"link":"` + strings.Repeat("b", 128) + `"}]`), create(`"nics":[{"link":"` + strings.Repeat("b", 129) + `"}]`), "nics.0.link", "128"},
		{"disk name", create(`"disks":[{"size":1,"name":"d0"}]`), create(`"disks":[{"size":1,"name":"../d0"}]`), "disks.0.name", `'/'`},
		{"memory", create(`"beparams":{"memory":67108864}`), create(`"beparams":{"memory":67108865}`), "beparams.memory", "67108864"},
		{"maxmem", create(`"beparams":{"maxmem":67108864}`), create(`"beparams":{"maxmem":9223372036854775807}`), "beparams.maxmem", "67108864"},
		{"minmem", create(`"beparams":{"minmem":0}`), create(`"beparams":{"minmem":-1}`), "beparams.minmem", "67108864"},
		{"vcpus", create(`"beparams":{"vcpus":1024}`), create(`"beparams":{"vcpus":1025}`), "beparams.vcpus", "1024"},
		{"OS name length", create(`"os_type":"` + strings.Repeat("d", 128) + `"`), create(`"os_type":"` + strings.Repeat("d", 129) + `"`), "os_type", "128"},
		{"OS name path", create(`"os_type":"debootstrap+default"`), create(`"os_type":"../../bin/sh"`), "os_type", "not an OS name"},
		{"instance name length", create(`"disks":[{"size":1}]`), `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"` + hostname(256) + `"}`, "instance_name", "255"},
		{"instance name at 255", `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"` + hostname(255) + `"}`, `{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"` + strings.Repeat("x", 256) + `"}`, "instance_name", "255"},
		{"iallocator", create(`"iallocator":"hail"`), create(`"iallocator":"hail,hail"`), "iallocator", "listed twice"},
		{"failover iallocator", `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","iallocator":"hail"}`, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","iallocator":"x y"}`, "iallocator", "' '"},
		{"replace-disks indexes", `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"w","mode":"replace_on_primary","disks":[15]}`, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"w","mode":"replace_on_primary","disks":[16]}`, "disks", "15"},
		{"set-params disks", `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"w","disks":` + jsonList(16, `["add",-1,{"size":1}]`) + `}`, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"w","disks":` + jsonList(17, `["add",-1,{"size":1}]`) + `}`, "disks", "16"},
		{"set-params disk size", `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"w","disks":[["add",-1,{"size":1073741824}]]}`, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"w","disks":[["add",-1,{"size":1073741825}]]}`, "disks.0.size", "1073741824"},
		{"set-params memory", `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"w","beparams":{"memory":67108864}}`, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"w","beparams":{"memory":67108865}}`, "beparams.memory", "67108864"},
		{"shutdown timeout", `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"w","timeout":86400}`, `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"w","timeout":86401}`, "timeout", "86400"},
		{"candidate_pool_size", cluster(`"candidate_pool_size":64`), cluster(`"candidate_pool_size":65`), "candidate_pool_size", "64"},
		{"candidate_pool_size 2^63-1", cluster(`"candidate_pool_size":1`), cluster(`"candidate_pool_size":9223372036854775807`), "candidate_pool_size", "64"},
		{"max_raft_voters", cluster(`"max_raft_voters":9`), cluster(`"max_raft_voters":11`), "max_raft_voters", "9"},
		{"default_iallocator", cluster(`"default_iallocator":"hail"`), cluster(`"default_iallocator":"a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q"`), "default_iallocator", "at most 16"},
		{"default_iallocator unset", cluster(`"default_iallocator":""`), cluster(`"default_iallocator":"../x"`), "default_iallocator", "'/'"},
		{"tag count", tags(numberedList(4096, func(i int) string { return `"t` + strconv.Itoa(i) + `"` })), tags(numberedList(4097, func(i int) string { return `"t` + strconv.Itoa(i) + `"` })), "tags", "4096"},
		{"tag length", tags(`["` + strings.Repeat("t", 128) + `"]`), tags(`["` + strings.Repeat("t", 129) + `"]`), "tags", "128"},
		{"tag object name", `{"OP_ID":"OP_TAGS_SET","kind":"node","name":"` + strings.Repeat("n", 255) + `","tags":["a"]}`, `{"OP_ID":"OP_TAGS_SET","kind":"node","name":"` + strings.Repeat("n", 256) + `","tags":["a"]}`, "name", "255"},
		{"group name", `{"OP_ID":"OP_GROUP_ADD","group_name":"` + strings.Repeat("g", 128) + `"}`, `{"OP_ID":"OP_GROUP_ADD","group_name":"` + strings.Repeat("g", 129) + `"}`, "group_name", "128"},
		{"group ref", `{"OP_ID":"OP_GROUP_REMOVE","group_name":"` + strings.Repeat("g", 128) + `"}`, `{"OP_ID":"OP_GROUP_REMOVE","group_name":"` + strings.Repeat("g", 129) + `"}`, "group_name", "128"},
		{"node ref", `{"OP_ID":"OP_NODE_REMOVE","node_name":"` + strings.Repeat("n", 255) + `"}`, `{"OP_ID":"OP_NODE_REMOVE","node_name":"` + strings.Repeat("n", 256) + `"}`, "node_name", "255"},
		{"node ref path", `{"OP_ID":"OP_NODE_REMOVE","node_name":"n1"}`, `{"OP_ID":"OP_NODE_REMOVE","node_name":"../n1"}`, "node_name", "'/'"},
		{"osparams keys", create(`"osparams":` + strings.ReplaceAll(params(64), ":1", `:"v"`)), create(`"osparams":` + strings.ReplaceAll(params(65), ":1", `:"v"`)), "osparams", "64"},
		{"osparams key", `{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"w","osparams":{"a":1}}`, `{"OP_ID":"OP_INSTANCE_REINSTALL","instance_name":"w","osparams":{"a/b":1}}`, "osparams.a/b", "'/'"},
		{"OOB node names", `{"OP_ID":"OP_OOB_COMMAND","command":"health","node_names":` + numberedList(10000, func(i int) string { return `"n` + strconv.Itoa(i) + `"` }) + `}`, `{"OP_ID":"OP_OOB_COMMAND","command":"health","node_names":` + numberedList(10001, func(i int) string { return `"n` + strconv.Itoa(i) + `"` }) + `}`, "node_names", "10000"},
		{"EPO names", `{"OP_ID":"OP_CLUSTER_EPO","names":["n1"],"wait_timeout":86400}`, `{"OP_ID":"OP_CLUSTER_EPO","names":["n1"],"wait_timeout":86401}`, "wait_timeout", "86400"},
		{"EPO name", `{"OP_ID":"OP_CLUSTER_EPO","names":["n1"]}`, `{"OP_ID":"OP_CLUSTER_EPO","names":["../n1"]}`, "names", "'/'"},
		{"ssh_port", `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"ssh_port":65535}}`, `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"ssh_port":65536}}`, "ndparams.ssh_port", "65535"},
		{"spindle_count", `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"spindle_count":2147483648}}`, `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"spindle_count":1e300}}`, "ndparams.spindle_count", "at most 2147483648"},
		{"cpu_speed", `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"cpu_speed":1000000}}`, `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"cpu_speed":1000001}}`, "ndparams.cpu_speed", "at most 1000000"},
		{"oob_program length", `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"ovs_name":"` + strings.Repeat("o", 4096) + `"}}`, `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"ovs_name":"` + strings.Repeat("o", 4097) + `"}}`, "ndparams.ovs_name", "4096"},
		{"depends", delay(`"duration":0,"depends":` + jsonList(100, `[1,[]]`)), delay(`"duration":0,"depends":` + jsonList(101, `[1,[]]`)), "depends", "100"},
		{"reason entries", delay(`"duration":0,"reason":` + jsonList(32, `["a","b",1]`)), delay(`"duration":0,"reason":` + jsonList(33, `["a","b",1]`)), "reason", "32"},
		{"reason text", delay(`"duration":0,"reason":[["a","` + strings.Repeat("r", 4096) + `",1]]`), delay(`"duration":0,"reason":[["a","` + strings.Repeat("r", 4097) + `",1]]`), "reason", "4096"},
		{"comment", delay(`"duration":0,"comment":"` + strings.Repeat("c", 4096) + `"`), delay(`"duration":0,"comment":"` + strings.Repeat("c", 4097) + `"`), "comment", "4096"},
		{"duplicate key", delay(`"duration":0`), delay(`"duration":0,"duration":3`), "duration", "duplicate key"},
		{"duplicate key folded", delay(`"duration":0`), delay(`"duration":0,"DURATION":3`), "DURATION", "duplicate key"},
		{"duplicate nested key", `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"ssh_port":22}}`, `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"ssh_port":22,"ssh_port":23}}`, "ndparams.ssh_port", "duplicate key"},
		{"duplicate key in depends", delay(`"duration":0,"depends":[[1,[]]]`), delay(`"duration":0,"depends":[{"a":1,"a":2}]`), "depends.0.a", "duplicate key"},
		{"invalid UTF-8", delay(`"duration":0,"comment":"é"`), delay("\"duration\":0,\"comment\":\"\xff\""), "comment", "UTF-8"},
		{"lone surrogate", delay(`"duration":0,"comment":"\ud83d\ude00"`), delay(`"duration":0,"comment":"\ud83d"`), "comment", "surrogate"},
		{"invalid UTF-8 in a map", `{"OP_ID":"OP_GROUP_ADD","group_name":"g","ndparams":{"oob_program":"/x"}}`, "{\"OP_ID\":\"OP_GROUP_ADD\",\"group_name\":\"g\",\"ndparams\":{\"oob_program\":\"\xc3\"}}", "ndparams.oob_program", "UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ParseOpcode([]byte(c.ok)); err != nil {
				t.Fatalf("boundary value refused: %v", err)
			}
			_, err := ParseOpcode([]byte(c.bad))
			if err == nil {
				t.Fatalf("value past the limit accepted")
			}
			e := AsError(err)
			if e.Code != CodeInval || e.Field != c.field || !strings.Contains(e.Msg, c.limitText) {
				t.Fatalf("got %s [%s] %q, want wrong_input [%s] mentioning %q", e.Code, e.Field, e.Msg, c.field, c.limitText)
			}
		})
	}
}

func TestHostnameHelper(t *testing.T) {
	for _, n := range []int{1, 63, 64, 65, 127, 128, 255, 256} {
		if h := hostname(n); len(h) != n || (n <= 255 && ValidateHostname("h", h) != nil) {
			t.Errorf("hostname(%d) = %q (%d)", n, h, len(h))
		}
	}
}

// TestSubmissionLimits: the opcodes of a job and the jobs (and opcodes)
// of a submission, at their limits and one past, through Apply: a refused
// submission changes nothing (the state's hash, its serial and its next
// job id stay).
func TestSubmissionLimits(t *testing.T) {
	op := json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)
	ops := func(n int) []json.RawMessage {
		out := make([]json.RawMessage, n)
		for i := range out {
			out[i] = op
		}
		return out
	}
	uuids := func(n int) []string { return make([]string, n) }
	many := func(jobs, each int) []JobSpec {
		out := make([]JobSpec, jobs)
		for k := range out {
			out[k] = JobSpec{Ops: ops(each), UUIDs: uuids(each)}
		}
		return out
	}
	big := json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2000000000}`)
	for _, c := range []struct {
		name    string
		cmd     Command
		refused bool
		field   string
	}{
		{"1000 opcodes", JobSubmit{Ops: ops(MaxOpsPerJob), UUIDs: uuids(MaxOpsPerJob)}, false, ""},
		{"1001 opcodes", JobSubmit{Ops: ops(MaxOpsPerJob + 1), UUIDs: uuids(MaxOpsPerJob + 1)}, true, "ops"},
		{"20000 opcodes", JobSubmit{Ops: ops(20000), UUIDs: uuids(20000)}, true, "ops"},
		{"repeat 2e9", JobSubmit{Ops: []json.RawMessage{big}, UUIDs: uuids(1)}, true, "repeat"},
		{"1000 jobs", JobSubmitMany{Jobs: many(MaxJobsPerSubmission, 1)}, false, ""},
		{"1001 jobs", JobSubmitMany{Jobs: many(MaxJobsPerSubmission+1, 1)}, true, "jobs"},
		{"10000 opcodes over jobs", JobSubmitMany{Jobs: many(10, 1000)}, false, ""},
		{"10010 opcodes over jobs", JobSubmitMany{Jobs: many(10, 1001)}, true, "ops"},
		{"10010 opcodes over jobs of 1000", JobSubmitMany{Jobs: append(many(10, 1000), many(1, 10)...)}, true, "jobs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness()
			h.initCluster("192.0.2.1")
			before := h.f.Hash()
			var serial, next int64
			h.f.Read(func(s *State, _ uint64) { serial, next = s.Cluster.SerialNo, s.NextJobID })
			r := h.apply(c.cmd).(Response)
			if !c.refused {
				if r.Err != nil {
					t.Fatalf("refused: %v", r.Err)
				}
				return
			}
			if r.Err == nil || r.Err.Code != CodeInval || r.Err.Field != c.field {
				t.Fatalf("got %+v, want wrong_input on %s", r.Err, c.field)
			}
			var serial2, next2 int64
			h.f.Read(func(s *State, _ uint64) { serial2, next2 = s.Cluster.SerialNo, s.NextJobID })
			if h.f.Hash() != before || serial2 != serial || next2 != next {
				t.Fatalf("refused submission changed the state (serial %d -> %d, next job %d -> %d)", serial, serial2, next, next2)
			}
		})
	}
}

// TestInstanceBounds: the instance record itself refuses what no request
// may ask for, whatever put it there.
func TestInstanceBounds(t *testing.T) {
	base := func() *Instance {
		return &Instance{Name: "web1", UUID: "u", DiskTemplate: DTPlain, MemoryMiB: 128, VCPUs: 1, OS: "debootstrap+default",
			Disks: []Disk{{UUID: "d", SizeMiB: 1024, Mode: "rw"}}, NICs: []NIC{{UUID: "n", MAC: "aa:00:00:00:00:01"}}}
	}
	nDisks := func(n int, size int64) []Disk {
		out := make([]Disk, n)
		for i := range out {
			out[i] = Disk{UUID: fmt.Sprint(i), SizeMiB: size}
		}
		return out
	}
	for _, c := range []struct {
		name   string
		edit   func(i *Instance)
		field  string // empty: accepted
		needle string
	}{
		{"as is", func(*Instance) {}, "", ""},
		{"16 disks", func(i *Instance) { i.Disks = nDisks(16, 1) }, "", ""},
		{"17 disks", func(i *Instance) { i.Disks = nDisks(17, 1) }, "instance.disks", "16"},
		{"disk at limit", func(i *Instance) { i.Disks = nDisks(1, MaxDiskSizeMiB) }, "", ""},
		{"disk past limit", func(i *Instance) { i.Disks = nDisks(1, MaxDiskSizeMiB+1) }, "instance.disks.0.size", "1073741824"},
		{"disk of 2^63-1", func(i *Instance) { i.Disks = nDisks(1, 1<<63-1) }, "instance.disks.0.size", "1073741824"},
		{"sum at limit", func(i *Instance) { i.Disks = nDisks(4, MaxDiskSizeMiB) }, "", ""},
		{"sum past limit", func(i *Instance) { i.Disks = nDisks(5, MaxDiskSizeMiB) }, "instance.disks", "4294967296"},
		{"8 NICs", func(i *Instance) { i.NICs = make([]NIC, 8) }, "", ""},
		{"9 NICs", func(i *Instance) { i.NICs = make([]NIC, 9) }, "instance.nics", "8"},
		{"memory at limit", func(i *Instance) { i.MemoryMiB = MaxMemoryMiB }, "", ""},
		{"memory past limit", func(i *Instance) { i.MemoryMiB = MaxMemoryMiB + 1 }, "instance.memory", "67108864"},
		{"vcpus past limit", func(i *Instance) { i.VCPUs = MaxVCPUs + 1 }, "instance.vcpus", "1024"},
		{"OS path", func(i *Instance) { i.OS = "../../bin/sh" }, "instance.os", "OS name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := base()
			c.edit(in)
			e := in.ValidateBounds()
			switch {
			case c.field == "" && e != nil:
				t.Fatalf("refused: %v", e)
			case c.field != "" && (e == nil || e.Field != c.field || !strings.Contains(e.Msg, c.needle)):
				t.Fatalf("got %+v, want a refusal on %s mentioning %s", e, c.field, c.needle)
			}
		})
	}
}

func TestNodeSpecBounds(t *testing.T) {
	ok := NodeSpec{Name: "n1", UUID: "u", PrimaryIP: "192.0.2.1", Addrs: Addrs{API: "192.0.2.1:5080", Raft: "[2001:db8::1]:1817"}, Version: "1.0"}
	if e := ok.Validate("node"); e != nil {
		t.Fatal(e)
	}
	for _, c := range []struct {
		edit  func(n *NodeSpec)
		field string
	}{
		{func(n *NodeSpec) { n.Name = "bad name" }, "node.name"},
		{func(n *NodeSpec) { n.Addrs.Gossip = strings.Repeat("a", MaxHostnameLen+7) }, "node.addrs.gossip"},
		{func(n *NodeSpec) { n.Addrs.API = "a\nb" }, "node.addrs.api"},
		{func(n *NodeSpec) { n.Version = strings.Repeat("v", MaxNameLen+1) }, "node.version"},
		{func(n *NodeSpec) { n.Resources.MemoryMiB = 1 << 62 }, "node.resources.memory_mib"},
	} {
		n := ok
		c.edit(&n)
		if e := n.Validate("node"); e == nil || e.Field != c.field {
			t.Errorf("%+v: got %v, want a refusal on %s", n, e, c.field)
		}
	}
}

func TestResourcesBounds(t *testing.T) {
	for _, c := range []struct {
		r     Resources
		field string
	}{
		{Resources{MemoryMiB: MaxMemoryMiB, DiskMiB: MaxNodeDiskMiB, CPUs: MaxNodeCPUs}, ""},
		{Resources{MemoryMiB: MaxMemoryMiB + 1}, "r.memory_mib"},
		{Resources{DiskMiB: MaxNodeDiskMiB + 1}, "r.disk_mib"},
		{Resources{CPUs: MaxNodeCPUs + 1}, "r.cpus"},
		{Resources{MemoryMiB: -1}, "r.memory_mib"},
	} {
		e := c.r.Validate("r")
		if (c.field == "") != (e == nil) || (e != nil && e.Field != c.field) {
			t.Errorf("%+v: got %v, want field %q", c.r, e, c.field)
		}
	}
}

// TestCheckJSON: what encoding/json would accept silently is refused,
// naming the key; everything else, syntax errors included, is left alone.
func TestCheckJSON(t *testing.T) {
	for _, c := range []struct {
		doc   string
		field string // "-": accepted
	}{
		{`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}`, "-"},
		{`{"a":1,"a":2}`, "a"},
		{`{"a":1,"A":2}`, "A"},
		{`{"K":1,"\u212a":2}`, "\u212a"}, // the Kelvin sign folds to k
		{`{"a\u0062":1,"ab":2}`, "ab"},
		{`{"x":{"y":[0,{"z":1,"z":2}]}}`, "x.y.1.z"},
		{"{\"a\":\"\xff\"}", "a"},
		{`{"a":"\udc00"}`, "a"},
		{`{"a":"\ud800x"}`, "a"},
		{`{"a":"\ud800\u0041"}`, "a"},
		{`{"a":"\ud83d\ude00"}`, "-"},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), "-"},
		{strings.Repeat("[", 66) + strings.Repeat("]", 66), "*"},
		{`{"a":1,`, "-"},   // a syntax error: left to the decoder
		{`{"a" 1}`, "-"},   // likewise
		{`{"a":1}}`, "-"},  // trailing data: likewise
		{`{"a":tru}`, "-"}, // likewise
	} {
		e := CheckJSON([]byte(c.doc))
		switch {
		case c.field == "-" && e != nil:
			t.Errorf("%q refused: %v", c.doc, e)
		case c.field != "-" && (e == nil || e.Field != c.field && c.field != "*"):
			t.Errorf("%q: got %+v, want a refusal on %q", c.doc, e, c.field)
		}
	}
}

// FuzzCheckJSON: CheckJSON never panics; what it accepts that is JSON
// is valid UTF-8 with no key given twice in an object; and DecodeStrict's
// two paths agree on it (the quick path never accepts what the strict
// check refuses).
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":[{"b":1,"B":2}]}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}",
		`{"OP_ID":"OP_TEST_DELAY","duration":0,"duration":1}`, `{"OP_ID":"OP_TEST_DELAY","depends":[{"a":1,"a":1}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		e := CheckJSON(doc)
		if e == nil && json.Valid(doc) {
			if !utf8Valid(doc) {
				t.Fatalf("accepted invalid UTF-8: %q", doc)
			}
			if k, dup := exactDuplicate(doc); dup {
				t.Fatalf("accepted %q with key %q twice", doc, k)
			}
		}
		fastAgrees(t, doc, func() any { return &OpTestDelay{} })
		if e != nil && fastDecode(doc, &OpTestDelay{}) {
			t.Fatalf("quick path accepted %q, which CheckJSON refuses: %v", doc, e)
		}
	})
}

func utf8Valid(b []byte) bool { return strings.ToValidUTF8(string(b), "\x00") == string(b) }

// exactDuplicate is the reference: encoding/json's tokens, keys compared
// as they are.
func exactDuplicate(doc []byte) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // the next string token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		top := func() *frame {
			if len(stack) == 0 {
				return nil
			}
			return stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if f := top(); f != nil && f.obj {
					f.key = true
				}
				stack = append(stack, &frame{obj: true, keys: map[string]bool{}, key: true})
				continue
			case '[':
				if f := top(); f != nil && f.obj {
					f.key = true
				}
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
				continue
			}
		case string:
			if f := top(); f != nil && f.obj && f.key {
				if f.keys[v] {
					return v, true
				}
				f.keys[v] = true
				f.key = false
				continue
			}
		}
		if f := top(); f != nil && f.obj {
			f.key = true
		}
	}
}

// TestLimitsDocumented keeps docs/api.md's "Request content" table in
// step with the constants: the row that starts with each text states the
// limit.
func TestLimitsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(string(doc), "\n") {
		if cells := strings.Split(l, "|"); len(cells) > 3 {
			rows[strings.TrimSpace(cells[1])] = cells[2]
		}
	}
	for _, c := range []struct {
		row  string
		want []string
	}{
		{"opcodes in one job (`POST /2/jobs`, each job of `POST /2/gnt/jobs`)", []string{strconv.Itoa(MaxOpsPerJob)}},
		{"jobs in one `POST /2/gnt/jobs`", []string{strconv.Itoa(MaxJobsPerSubmission)}},
		{"opcodes over all the jobs of one `POST /2/gnt/jobs`", []string{strconv.Itoa(MaxOpsPerSubmission)}},
		{"`OP_TEST_DELAY` `duration` (each repetition)", []string{strconv.Itoa(MaxTestDelaySeconds)}},
		{"`OP_TEST_DELAY` `repeat` (one recorded step each)", []string{strconv.Itoa(MaxTestDelayRepeat)}},
		{"`OP_TEST_DELAY` `duration` × `repeat`", []string{strconv.Itoa(MaxTestDelayTotalSeconds)}},
		{"`OP_TEST_DELAY` `on_nodes`", []string{strconv.Itoa(MaxTestDelayNodes)}},
		{"disks of an instance (`disks` of a creation; disk additions of one modify)", []string{strconv.Itoa(MaxDisksPerInstance)}},
		{"size of one disk", []string{"2^30"}},
		{"sum of an instance's disks", []string{"2^32"}},
		{"NICs of an instance", []string{strconv.Itoa(MaxNICsPerInstance)}},
		{"`beparams` `memory`, `maxmem`, `minmem`", []string{"2^26"}},
		{"`beparams` `vcpus`", []string{strconv.Itoa(MaxVCPUs)}},
		{"a node's reported resources (join)", []string{strconv.Itoa(MaxNodeCPUs)}},
		{"`candidate_pool_size`", []string{strconv.Itoa(MaxCandidatePoolSize)}},
		{"`max_raft_voters`", []string{strconv.Itoa(MaxRaftVoters)}},
		{"`iallocator`, `default_iallocator`", KnownIAllocators},
		{"tags in one request, and on one object", []string{strconv.Itoa(MaxTagsPerObj)}},
		{"one tag", []string{strconv.Itoa(MaxTagLen)}},
		{"node and instance names", []string{strconv.Itoa(MaxHostnameLen)}},
		{"node group names", []string{strconv.Itoa(MaxGroupNameLen)}},
		{"OS names (`os_type`)", []string{strconv.Itoa(MaxNameLen)}},
		{"timeouts (`timeout`, `shutdown_timeout`, `wait_timeout`)", []string{strconv.Itoa(MaxTimeoutSeconds)}},
		{"keys of `hvparams`, `osparams`", []string{strconv.Itoa(MaxParams), strconv.Itoa(MaxNameLen)}},
		{"a node's addresses and version (join)", []string{strconv.Itoa(MaxHostnameLen + 6), strconv.Itoa(MaxNameLen)}},
		{"nodes named by `OP_OOB_COMMAND`, `OP_CLUSTER_EPO`", []string{strconv.Itoa(MaxNodesPerOp)}},
		{"`depends` of one opcode", []string{strconv.Itoa(MaxDepends)}},
		{"`reason` trail given with an opcode", []string{strconv.Itoa(MaxReasonEntries), strconv.Itoa(MaxReasonTextLen)}},
		{"`comment`", []string{strconv.Itoa(MaxCommentLen)}},
		{"`ndparams` values", []string{strconv.Itoa(MaxNDParamString), "65535", "2^31", "10^6"}},
		{"JSON nesting", []string{strconv.Itoa(maxJSONDepth)}},
	} {
		cell, ok := rows[c.row]
		if !ok {
			t.Errorf("docs/api.md has no row %q", c.row)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(cell, w) {
				t.Errorf("docs/api.md row %q says %q, not %s", c.row, cell, w)
			}
		}
	}
	if MaxDiskSizeMiB != 1<<30 || MaxInstanceDiskMiB != 1<<32 || MaxMemoryMiB != 1<<26 {
		t.Errorf("the powers of two docs/api.md states changed")
	}
}

// TestSetParamsDiskLimitsAgainstState: adding disks to an instance is
// refused at submission when the instance would pass the disk count or
// the size sum, and nothing changes.
func TestSetParamsDiskLimitsAgainstState(t *testing.T) {
	h := newHarness()
	h.initCluster("192.0.2.1")
	var node string
	h.f.Read(func(s *State, _ uint64) { node = s.Cluster.MasterNode })
	h.f.st.Nodes[node].Resources = Resources{MemoryMiB: MaxMemoryMiB, DiskMiB: MaxNodeDiskMiB, CPUs: 64}
	in := &Instance{Name: "web1", UUID: "i1", PrimaryNode: node, SecondaryNodes: []string{}, DiskTemplate: DTPlain,
		MemoryMiB: 128, VCPUs: 1, AdminState: AdminDown, Tags: []string{}}
	for k := 0; k < 14; k++ {
		in.Disks = append(in.Disks, Disk{UUID: fmt.Sprintf("d%d", k), SizeMiB: MaxDiskSizeMiB / 4, Mode: "rw"})
	}
	h.f.st.Instances[in.UUID] = in
	h.f.st.reindex()
	add := func(n int, size int64) Command {
		mods := make([]string, n)
		for i := range mods {
			mods[i] = `["add",-1,{"size":` + strconv.FormatInt(size, 10) + `}]`
		}
		op := `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"web1","disks":[` + strings.Join(mods, ",") + `]}`
		return JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}}
	}
	// 14 disks of 2^28 MiB hold 3.5 * 2^30; two more of 2^30 fit the
	// count (16) but not the sum (4 * 2^30); two of 1 MiB fit both.
	for _, c := range []struct {
		name    string
		cmd     Command
		refused string
	}{
		{"17 disks", add(3, 1), "more than 16"},
		{"sum past 4 PiB", add(2, MaxDiskSizeMiB), "4294967296"},
		{"16 disks within the sum", add(2, 1), ""},
	} {
		before := h.f.Hash()
		r := h.apply(c.cmd).(Response)
		switch {
		case c.refused == "" && r.Err != nil:
			t.Errorf("%s: refused: %v", c.name, r.Err)
		case c.refused != "" && (r.Err == nil || r.Err.Field != "disks" || !strings.Contains(r.Err.Msg, c.refused)):
			t.Errorf("%s: got %v, want a refusal on disks mentioning %s", c.name, r.Err, c.refused)
		case c.refused != "" && h.f.Hash() != before:
			t.Errorf("%s: the refused submission changed the state", c.name)
		}
	}
}
