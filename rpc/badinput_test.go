package rpc_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

type badCase struct {
	name   string
	method string
	path   string
	body   string
	status int
	code   string
	field  string
}

const wrong = "wrong_input"

// TestBadInput sends bad requests to every parser and checks the status,
// error_code and field of the answer, and that the state did not move.
func TestBadInput(t *testing.T) {
	big := `{"node_name":"` + strings.Repeat("a", rpc.DefaultMaxBody) + `"}`
	longTag := strings.Repeat("t", 129)
	cases := []badCase{
		// POST /2/nodes
		{"node add unknown field", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.2","bogus":1}`, 400, wrong, "bogus"},
		{"node add wrong type", "POST", "/2/nodes", `{"node_name":5,"primary_ip":"192.0.2.2"}`, 400, wrong, "node_name"},
		{"node add empty name", "POST", "/2/nodes", `{"node_name":"","primary_ip":"192.0.2.2"}`, 400, wrong, "node_name"},
		{"node add missing name", "POST", "/2/nodes", `{"primary_ip":"192.0.2.2"}`, 400, wrong, "node_name"},
		{"node add invalid name", "POST", "/2/nodes", `{"node_name":"bad_name!","primary_ip":"192.0.2.2"}`, 400, wrong, "node_name"},
		{"node add bad ip", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"not-an-ip"}`, 400, wrong, "primary_ip"},
		{"node add no ip", "POST", "/2/nodes", `{"node_name":"node2"}`, 400, wrong, "primary_ip"},
		{"node add empty body", "POST", "/2/nodes", ``, 400, wrong, "node_name"},
		{"node add bad json", "POST", "/2/nodes", `{`, 400, wrong, ""},
		{"node add trailing data", "POST", "/2/nodes", `{}{}`, 400, wrong, ""},
		{"node add not an object", "POST", "/2/nodes", `[1]`, 400, wrong, ""},
		{"node add bad ndparam", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.2","ndparams":{"zzz":1}}`, 400, wrong, "ndparams.zzz"},
		{"node add bool as string", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.2","master_capable":"yes"}`, 400, wrong, "master_capable"},
		{"node add readd", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.2","readd":true}`, 400, wrong, "readd"},
		{"node add bad dry-run", "POST", "/2/nodes?dry-run=maybe", `{"node_name":"node2","primary_ip":"192.0.2.2"}`, 400, wrong, "dry-run"},
		{"node add mc not capable", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.2","master_candidate":true,"master_capable":false}`, 400, wrong, "master_candidate"},
		{"node add too large", "POST", "/2/nodes", big, 413, rpc.CodeTooLarge, ""},

		// PUT /2/nodes/{n}/modify
		{"node modify unknown field", "PUT", "/2/nodes/node1/modify", `{"bogus":true}`, 400, wrong, "bogus"},
		{"node modify wrong type", "PUT", "/2/nodes/node1/modify", `{"offline":"yes"}`, 400, wrong, "offline"},
		{"node modify nothing", "PUT", "/2/nodes/node1/modify", ``, 400, wrong, ""},
		{"node modify empty object", "PUT", "/2/nodes/node1/modify", `{}`, 400, wrong, ""},
		{"node modify name in body", "PUT", "/2/nodes/node1/modify", `{"node_name":"x","offline":true}`, 400, wrong, "node_name"},
		{"node modify two states", "PUT", "/2/nodes/node1/modify", `{"offline":true,"drained":true}`, 400, wrong, ""},
		{"node modify bad sip", "PUT", "/2/nodes/node1/modify", `{"secondary_ip":"zz"}`, 400, wrong, "secondary_ip"},
		{"node modify bad ndparam", "PUT", "/2/nodes/node1/modify", `{"ndparams":{"ssh_port":-1}}`, 400, wrong, "ndparams.ssh_port"},
		{"node modify invalid path name", "PUT", "/2/nodes/bad!name/modify", `{"offline":true}`, 400, wrong, "node_name"},
		{"node modify bad json", "PUT", "/2/nodes/node1/modify", `{"offline":`, 400, wrong, ""},
		{"node modify too large", "PUT", "/2/nodes/node1/modify", big, 413, rpc.CodeTooLarge, ""},

		// PUT /2/nodes/{n}/role
		{"role master", "PUT", "/2/nodes/node1/role", `"master"`, 400, wrong, "role"},
		{"role invalid", "PUT", "/2/nodes/node1/role", `"bogus"`, 400, wrong, "role"},
		{"role empty string", "PUT", "/2/nodes/node1/role", `""`, 400, wrong, "role"},
		{"role number", "PUT", "/2/nodes/node1/role", `5`, 400, wrong, "role"},
		{"role object", "PUT", "/2/nodes/node1/role", `{"role":"regular"}`, 400, wrong, "role"},
		{"role empty body", "PUT", "/2/nodes/node1/role", ``, 400, wrong, "role"},
		{"role trailing data", "PUT", "/2/nodes/node1/role", `"regular" "x"`, 400, wrong, "role"},
		{"role bad force", "PUT", "/2/nodes/node1/role?force=maybe", `"regular"`, 400, wrong, "force"},
		{"role bad auto-promote", "PUT", "/2/nodes/node1/role?auto-promote=2", `"regular"`, 400, wrong, "auto-promote"},
		{"role invalid path name", "PUT", "/2/nodes/-bad/role", `"regular"`, 400, wrong, "node_name"},

		// DELETE /2/nodes/{n}
		{"node remove invalid name", "DELETE", "/2/nodes/bad!name", ``, 400, wrong, "node_name"},

		// /2/networks
		{"network add both names", "POST", "/2/networks", `{"name":"n","network_name":"n","network":"10.0.0.0/24"}`, 400, wrong, "name"},
		{"network add unknown field", "POST", "/2/networks", `{"network_name":"n","network":"10.0.0.0/24","bogus":1}`, 400, wrong, "bogus"},
		{"network add wrong type", "POST", "/2/networks", `{"network_name":"n","network":["10.0.0.0/24"]}`, 400, wrong, "network"},
		{"network add reserved not a list", "POST", "/2/networks", `{"network_name":"n","network":"10.0.0.0/24","add_reserved_ips":"10.0.0.5"}`, 400, wrong, "add_reserved_ips"},
		{"network add too big", "POST", "/2/networks", `{"network_name":"n","network":"10.0.0.0/12"}`, 400, wrong, "network"},
		{"network add bad json", "POST", "/2/networks", `{"network_name":`, 400, wrong, ""},
		{"network add too large", "POST", "/2/networks", big, 413, rpc.CodeTooLarge, ""},
		{"network modify nothing", "PUT", "/2/networks/lan/modify", `{}`, 400, wrong, ""},
		{"network connect no group", "PUT", "/2/networks/lan/connect", `{"network_mode":"routed","network_link":"rt"}`, 400, wrong, "group_name"},
		{"network invalid path name", "DELETE", "/2/networks/bad!name", ``, 400, wrong, "network_name"},
		{"network rename no new name", "PUT", "/2/networks/lan/rename", `{}`, 400, wrong, "new_name"},
		{"network rename bad new name", "PUT", "/2/networks/lan/rename", `{"new_name":"a b"}`, 400, wrong, "new_name"},
		{"network tags bad tag", "PUT", "/2/networks/lan/tags?tag=a%20b", ``, 400, wrong, "tags"},

		// POST /2/groups
		{"group add both names", "POST", "/2/groups", `{"name":"g1","group_name":"g1"}`, 400, wrong, "name"},
		{"group add bad policy", "POST", "/2/groups", `{"group_name":"g1","alloc_policy":"sometimes"}`, 400, wrong, "alloc_policy"},
		{"group add no name", "POST", "/2/groups", `{}`, 400, wrong, "group_name"},
		{"group add invalid name", "POST", "/2/groups", `{"group_name":"bad name"}`, 400, wrong, "group_name"},
		{"group add unknown field", "POST", "/2/groups", `{"group_name":"g1","bogus":1}`, 400, wrong, "bogus"},
		{"group add wrong type", "POST", "/2/groups", `{"group_name":["g1"]}`, 400, wrong, "group_name"},

		// PUT /2/groups/{g}/modify, DELETE /2/groups/{g}
		{"group modify nothing", "PUT", "/2/groups/default/modify", `{}`, 400, wrong, ""},
		{"group modify wrong type", "PUT", "/2/groups/default/modify", `{"alloc_policy":1}`, 400, wrong, "alloc_policy"},
		{"group modify bad policy", "PUT", "/2/groups/default/modify", `{"alloc_policy":"x"}`, 400, wrong, "alloc_policy"},
		{"group modify name in body", "PUT", "/2/groups/default/modify", `{"group_name":"x"}`, 400, wrong, "group_name"},
		{"group remove invalid name", "DELETE", "/2/groups/bad%20name", ``, 400, wrong, "group_name"},

		// PUT /2/modify
		{"cluster modify even voters", "PUT", "/2/modify", `{"max_raft_voters":4}`, 400, wrong, "max_raft_voters"},
		{"cluster modify wrong type", "PUT", "/2/modify", `{"candidate_pool_size":"x"}`, 400, wrong, "candidate_pool_size"},
		{"cluster modify zero pool", "PUT", "/2/modify", `{"candidate_pool_size":0}`, 400, wrong, "candidate_pool_size"},
		{"cluster modify nothing", "PUT", "/2/modify", `{}`, 400, wrong, ""},
		{"cluster modify unknown field", "PUT", "/2/modify", `{"bogus":1}`, 400, wrong, "bogus"},
		{"cluster modify float", "PUT", "/2/modify", `{"candidate_pool_size":1.5}`, 400, wrong, "candidate_pool_size"},
		{"uid pool with root", "PUT", "/2/modify", `{"uid_pool":[[0,10]]}`, 400, wrong, "uid_pool"},
		{"uid pool reversed", "PUT", "/2/modify", `{"uid_pool":[[20,10]]}`, 400, wrong, "uid_pool"},
		{"uid pool overlap", "PUT", "/2/modify", `{"add_uids":[[1000,1010],[1005,1006]]}`, 400, wrong, "add_uids"},
		{"uid pool too large", "PUT", "/2/modify", `{"uid_pool":[[1,100000]]}`, 400, wrong, "uid_pool"},
		{"uid pool not pairs", "PUT", "/2/modify", `{"remove_uids":[[1000,1001,1002]]}`, 400, wrong, "remove_uids.0"},
		{"uid pool a string", "PUT", "/2/modify", `{"uid_pool":"1000-1009"}`, 400, wrong, "uid_pool"},
		{"uid pool above uid_t", "PUT", "/2/modify", `{"uid_pool":[[4294967295,4294967295]]}`, 400, wrong, "uid_pool"},

		// tags
		{"tags no tag", "PUT", "/2/tags", ``, 400, wrong, "tags"},
		{"tags invalid tag", "PUT", "/2/tags?tag=a%20b", ``, 400, wrong, "tags"},
		{"tags empty tag", "PUT", "/2/tags?tag=", ``, 400, wrong, "tags"},
		{"tags too long", "PUT", "/2/tags?tag=" + longTag, ``, 400, wrong, "tags"},
		{"node tags invalid tag", "DELETE", "/2/nodes/node1/tags?tag=a|b", ``, 400, wrong, "tags"},
		{"node tags invalid name", "PUT", "/2/nodes/bad!/tags?tag=x", ``, 400, wrong, "name"},
		{"group tags invalid name", "PUT", "/2/groups/bad%20g/tags?tag=x", ``, 400, wrong, "name"},
		{"instance tags no tag", "PUT", "/2/instances/inst1/tags", ``, 400, wrong, "tags"},

		// POST /2/jobs
		{"job no ops", "POST", "/2/jobs", `{"ops":[]}`, 400, wrong, "ops"},
		{"job empty body", "POST", "/2/jobs", ``, 400, wrong, "ops"},
		{"job unknown opcode", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_NOPE"}]}`, 400, wrong, "OP_ID"},
		{"job no OP_ID", "POST", "/2/jobs", `{"ops":[{"duration":1}]}`, 400, wrong, "OP_ID"},
		{"job op not object", "POST", "/2/jobs", `{"ops":[5]}`, 400, wrong, "ops"},
		{"job unknown field", "POST", "/2/jobs", `{"opz":[]}`, 400, wrong, "opz"},
		{"job wait not a duration", "POST", "/2/jobs?wait=soon", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0}]}`, 400, wrong, "wait"},
		{"job wait zero", "POST", "/2/jobs?wait=0s", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0}]}`, 400, wrong, "wait"},
		{"job wait negative", "POST", "/2/jobs?wait=-1s", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0}]}`, 400, wrong, "wait"},
		{"startup wait bad", "PUT", "/2/instances/inst1/startup?wait=x", ``, 400, wrong, "wait"},
		{"job bad duration", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":-1}]}`, 400, wrong, "duration"},
		{"job op unknown field", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1,"bogus":1}]}`, 400, wrong, "bogus"},
		{"job bad reason", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1,"reason":"x"}]}`, 400, wrong, "reason"},
		{"job bad priority", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1,"priority":99}]}`, 400, wrong, "priority"},
		{"job second op bad", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":1},{"OP_ID":"OP_TEST_DELAY","duration":"x"}]}`, 400, wrong, "duration"},
		{"job ops wrong type", "POST", "/2/jobs", `{"ops":{}}`, 400, wrong, "ops"},

		// reads
		{"job id not a number", "GET", "/2/jobs/abc", ``, 400, wrong, "job_id"},
		{"job id zero", "GET", "/2/jobs/0", ``, 400, wrong, "job_id"},
		{"job unknown", "GET", "/2/jobs/999", ``, 404, "unknown_entity", "job_id"},
		{"wait no fields", "GET", "/2/jobs/1/wait", ``, 400, wrong, "fields"},
		{"wait unknown field name", "GET", "/2/jobs/1/wait?fields=bogus", ``, 400, wrong, "fields"},
		{"wait bad serial", "GET", "/2/jobs/1/wait?fields=status&previous_log_serial=x", ``, 400, wrong, "previous_log_serial"},
		{"wait bad timeout", "GET", "/2/jobs/1/wait?fields=status&timeout=-1", ``, 400, wrong, "timeout"},
		{"wait nan timeout", "GET", "/2/jobs/1/wait?fields=status&timeout=NaN", ``, 400, wrong, "timeout"},
		{"wait bad index", "GET", "/2/jobs/1/wait?fields=status&index=x", ``, 400, wrong, "index"},
		{"wait body unknown field", "GET", "/2/jobs/1/wait", `{"fields":["status"],"bogus":1}`, 400, wrong, "bogus"},
		{"wait body fields wrong type", "GET", "/2/jobs/1/wait", `{"fields":"status"}`, 400, wrong, "fields"},
		{"wait body bad previous info", "GET", "/2/jobs/1/wait", `{"fields":["status"],"previous_job_info":5}`, 400, wrong, "previous_job_info"},
		{"wait bad job id", "GET", "/2/jobs/x/wait?fields=status", ``, 400, wrong, "job_id"},
		{"wait unknown job", "GET", "/2/jobs/999/wait?fields=status", ``, 404, "unknown_entity", "job_id"},
		{"blocking bad index", "GET", "/2/nodes?index=x", ``, 400, wrong, "index"},
		{"blocking bad wait", "GET", "/2/nodes?index=1&wait=forever", ``, 400, wrong, "wait"},
		{"blocking negative wait", "GET", "/2/nodes?index=1&wait=-1s", ``, 400, wrong, "wait"},
		{"bad consistent flag", "GET", "/2/info?consistent=maybe", ``, 400, wrong, "consistent"},
		{"bad bulk flag", "GET", "/2/nodes?bulk=2", ``, 400, wrong, "bulk"},
		{"unknown node", "GET", "/2/nodes/nope", ``, 404, "unknown_entity", "node_name"},
		{"invalid node name", "GET", "/2/nodes/bad!name", ``, 400, wrong, "node_name"},
		{"unknown node role", "GET", "/2/nodes/nope/role", ``, 404, "unknown_entity", "node_name"},
		{"unknown group", "GET", "/2/groups/nope", ``, 404, "unknown_entity", "group_name"},
		{"unknown instance", "GET", "/2/instances/nope", ``, 404, "unknown_entity", "instance_name"},
		{"unknown node tags", "GET", "/2/nodes/nope/tags", ``, 404, "unknown_entity", "name"},
		{"unknown group tags", "GET", "/2/groups/nope/tags", ``, 404, "unknown_entity", "name"},
		{"unknown instance tags", "GET", "/2/instances/nope/tags", ``, 404, "unknown_entity", "name"},
		{"bad hash flag", "GET", "/2/gnt/status?hash=x", ``, 400, wrong, "hash"},
		{"unknown path", "GET", "/2/nope", ``, 404, rpc.CodeNotFound, ""},
		{"unknown subpath", "GET", "/2/nodes/node1/nope", ``, 404, rpc.CodeNotFound, ""},
		{"wrong method", "PATCH", "/2/nodes", ``, 405, rpc.CodeMethod, ""},
		{"post to info", "POST", "/2/info", `{}`, 405, rpc.CodeMethod, ""},
		{"cancel an unknown job", "DELETE", "/2/jobs/99999", ``, 404, "unknown_entity", "job_id"},

		// instances
		{"instance create body version 2", "POST", "/2/instances", `{"__version__":2,"instance_name":"web1"}`, 400, wrong, "__version__"},
		{"instance create two names", "POST", "/2/instances", `{"name":"a","instance_name":"b"}`, 400, wrong, "name"},
		{"instance create unknown field", "POST", "/2/instances", `{"instance_name":"web1","bogus":1}`, 400, wrong, "bogus"},
		{"instance create bad template", "POST", "/2/instances", `{"instance_name":"web1","disk_template":"weird","disks":[{"size":1}]}`, 400, wrong, "disk_template"},
		{"instance create no disks", "POST", "/2/instances", `{"instance_name":"web1","disk_template":"drbd"}`, 400, wrong, "disks"},
		{"instance create bad disk size", "POST", "/2/instances", `{"instance_name":"web1","disks":[{"size":-5}]}`, 400, wrong, "disks.0.size"},
		{"instance create bad mac", "POST", "/2/instances", `{"instance_name":"web1","nics":[{"mac":"zz"}]}`, 400, wrong, "nics"},
		{"instance create snode on plain", "POST", "/2/instances", `{"instance_name":"web1","disks":[{"size":5}],"pnode":"a","snode":"b"}`, 400, wrong, "snode"},
		{"instance create not an object", "POST", "/2/instances", `[1]`, 400, wrong, ""},
		{"instance remove bad name", "DELETE", "/2/instances/bad!name", ``, 400, wrong, "instance_name"},
		{"instance reboot bad type", "POST", "/2/instances/web1/reboot?type=gentle", ``, 400, wrong, "reboot_type"},
		{"instance startup bad flag", "PUT", "/2/instances/web1/startup?force=maybe", ``, 400, wrong, "force"},
		{"instance migrate bad mode", "PUT", "/2/instances/web1/migrate", `{"mode":"teleport"}`, 400, wrong, "mode"},
		{"replace-disks bad mode", "POST", "/2/instances/web1/replace-disks?mode=replace_all", ``, 400, wrong, "mode"},
		{"replace-disks auto with disks", "POST", "/2/instances/web1/replace-disks", `{"mode":"replace_auto","disks":[0]}`, 400, wrong, "disks"},
		{"rename bad new name", "PUT", "/2/instances/web1/rename", `{"new_name":"bad name"}`, 400, wrong, "new_name"},
		{"modify nothing", "PUT", "/2/instances/web1/modify", `{}`, 400, wrong, ""},
		{"modify remove disk", "PUT", "/2/instances/web1/modify", `{"disks":[["remove",0,{}]]}`, 400, wrong, "disks"},
		{"recreate three nodes", "POST", "/2/instances/web1/recreate-disks", `{"nodes":["a","b","c"]}`, 400, wrong, "nodes"},
		{"evacuate bad mode", "POST", "/2/nodes/node1/evacuate", `{"mode":"everything"}`, 400, wrong, "mode"},
		{"capacity negative memory", "GET", "/2/gnt/capacity?memory=-1", ``, 400, wrong, "memory"},
		{"capacity bad disk", "GET", "/2/gnt/capacity?disk=ten", ``, 400, wrong, "disk"},
		{"capacity disk 2^63-1", "GET", "/2/gnt/capacity?disk=9223372036854775807", ``, 400, wrong, "disk"},
		{"capacity disks overflowing", "GET", "/2/gnt/capacity?disk=1073741824&disk=1073741824&disk=1073741824&disk=1073741824&disk=1", ``, 400, wrong, "disk"},
		{"capacity 17 disks", "GET", "/2/gnt/capacity?" + strings.TrimSuffix(strings.Repeat("disk=1&", 17), "&"), ``, 400, wrong, "disk"},
		{"capacity memory", "GET", "/2/gnt/capacity?memory=67108865", ``, 400, wrong, "memory"},
		{"capacity vcpus", "GET", "/2/gnt/capacity?vcpus=9223372036854775807", ``, 400, wrong, "vcpus"},
		{"capacity iallocator not a file name", "GET", "/2/gnt/capacity?memory=128&iallocator=../bin/sh", ``, 400, wrong, "iallocator"},
		{"capacity iallocator unknown", "GET", "/2/gnt/capacity?memory=128&iallocator=hail,nothere", ``, 400, wrong, "iallocator"},
		{"balance max_moves over the limit", "POST", "/2/gnt/balance", `{"max_moves":1001}`, 400, wrong, "max_moves"},
		{"balance negative max_moves", "POST", "/2/gnt/balance", `{"max_moves":-1}`, 400, wrong, "max_moves"},
		{"balance threshold over 1", "POST", "/2/gnt/balance", `{"threshold":1.5}`, 400, wrong, "threshold"},
		{"balance unknown field", "POST", "/2/gnt/balance", `{"moves":3}`, 400, wrong, "moves"},
		{"balance not an object", "POST", "/2/gnt/balance", `[1]`, 400, wrong, ""},
		{"balance bad dry-run", "POST", "/2/gnt/balance?dry-run=maybe", ``, 400, wrong, "dry-run"},
		{"cancel job zero", "DELETE", "/2/jobs/0", ``, 400, wrong, "job_id"},
		{"cancel job by name", "DELETE", "/2/jobs/abc", ``, 400, wrong, "job_id"},
		{"cancel reason invalid UTF-8", "DELETE", "/2/jobs/1?reason=%ff", ``, 400, wrong, "reason"},
		{"cancel reason too long", "DELETE", "/2/jobs/1?reason=" + strings.Repeat("r", 4097), ``, 400, wrong, "reason"},
		{"reason too long", "PUT", "/2/tags?tag=a&reason=" + strings.Repeat("r", 4097), ``, 400, wrong, "reason"},
		{"archive an unknown job", "POST", "/2/gnt/jobs/99999/archive", ``, 404, "unknown_entity", "job_id"},
		{"submit no jobs", "POST", "/2/gnt/jobs", `{"jobs":[]}`, 400, wrong, "jobs"},
		{"submit jobs not a list", "POST", "/2/gnt/jobs", `{"jobs":{"a":1}}`, 400, wrong, "jobs"},
		{"submit jobs unknown field", "POST", "/2/gnt/jobs", `{"jobs":[[{"OP_ID":"OP_TEST_DELAY","duration":0}]],"x":1}`, 400, wrong, "x"},
		{"submit jobs bad opcode", "POST", "/2/gnt/jobs", `{"jobs":[[{"OP_ID":"OP_TEST_DELAY","duration":0}],[{"OP_ID":"OP_NOPE"}]]}`, 400, wrong, "OP_ID"},
		{"submit jobs empty job", "POST", "/2/gnt/jobs", `{"jobs":[[]]}`, 400, wrong, "ops"},
		{"submit jobs self dependency", "POST", "/2/gnt/jobs", `{"jobs":[[{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[-1,[]]]}]]}`, 400, wrong, "depends"},
		{"submit jobs bad dependency status", "POST", "/2/gnt/jobs", `{"jobs":[[{"OP_ID":"OP_TEST_DELAY","duration":0}],[{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[-1,["running"]]]}]]}`, 400, wrong, "depends"},
		{"submit dependency on a future job", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"depends":[[999999,[]]]}]}`, 400, wrong, "depends"},

		// Limits (docs/api.md, "Limits"): refused before anything is queued.
		{"limit: test delay repeat 2e9", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":2000000000}]}`, 400, wrong, "repeat"},
		{"limit: test delay repeat 1001", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":1001}]}`, 400, wrong, "repeat"},
		{"limit: job of 20000 opcodes", "POST", "/2/jobs", `{"ops":` + opList(20000) + `}`, 400, wrong, "ops"},
		{"limit: job of 1001 opcodes", "POST", "/2/jobs", `{"ops":` + opList(1001) + `}`, 400, wrong, "ops"},
		{"limit: submission of 1001 jobs", "POST", "/2/gnt/jobs", `{"jobs":[` + strings.TrimSuffix(strings.Repeat(opList(1)+",", 1001), ",") + `]}`, 400, wrong, "jobs"},
		{"limit: submission with a job of 1001 opcodes", "POST", "/2/gnt/jobs", `{"jobs":[` + opList(1) + "," + opList(1001) + `]}`, 400, wrong, "ops"},
		{"limit: submission of 11000 opcodes", "POST", "/2/gnt/jobs", `{"jobs":[` + strings.TrimSuffix(strings.Repeat(opList(1000)+",", 11), ",") + `]}`, 400, wrong, "jobs"},
		{"limit: instance 17 disks", "POST", "/2/instances", `{"instance_name":"web9","disks":[` + strings.TrimSuffix(strings.Repeat(`{"size":1},`, 17), ",") + `]}`, 400, wrong, "disks"},
		{"limit: instance disk 2^63-1", "POST", "/2/instances", `{"instance_name":"web9","disks":[{"size":9223372036854775807}]}`, 400, wrong, "disks.0.size"},
		{"limit: instance disks overflowing", "POST", "/2/instances", `{"instance_name":"web9","disks":[{"size":1073741824},{"size":1073741824},{"size":1073741824},{"size":1073741824},{"size":1}]}`, 400, wrong, "disks"},
		{"limit: instance 9 NICs", "POST", "/2/instances", `{"instance_name":"web9","disks":[{"size":1}],"nics":[{},{},{},{},{},{},{},{},{}]}`, 400, wrong, "nics"},
		{"limit: instance memory", "POST", "/2/instances", `{"instance_name":"web9","disks":[{"size":1}],"beparams":{"memory":67108865}}`, 400, wrong, "beparams.memory"},
		{"limit: instance OS path", "POST", "/2/instances", `{"instance_name":"web9","disks":[{"size":1}],"os":"../../bin/sh"}`, 400, wrong, "os_type"},
		{"limit: instance duplicate key", "POST", "/2/instances", `{"instance_name":"web9","disks":[{"size":1}],"instance_name":"web8"}`, 400, wrong, "instance_name"},
		{"limit: instance invalid UTF-8", "POST", "/2/instances", "{\"instance_name\":\"web9\",\"disks\":[{\"size\":1,\"name\":\"\xff\"}]}", 400, wrong, "disks.0.name"},
		{"limit: reinstall OS path", "POST", "/2/instances/web1/reinstall", `{"os_type":"../../bin/sh"}`, 400, wrong, "os_type"},
		{"limit: cluster pool 2^63-1", "PUT", "/2/modify", `{"candidate_pool_size":9223372036854775807}`, 400, wrong, "candidate_pool_size"},
		{"limit: cluster pool 65", "PUT", "/2/modify", `{"candidate_pool_size":65}`, 400, wrong, "candidate_pool_size"},
		{"limit: cluster bad allocator list", "PUT", "/2/modify", `{"default_iallocator":"hail,,anything"}`, 400, wrong, "default_iallocator"},
		{"limit: cluster allocator invalid UTF-8", "PUT", "/2/modify", "{\"default_iallocator\":\"\xc3\"}", 400, wrong, "default_iallocator"},
		{"limit: cluster duplicate key", "PUT", "/2/modify", `{"candidate_pool_size":3,"candidate_pool_size":9223372036854775807}`, 400, wrong, "candidate_pool_size"},
		{"limit: job duplicate key", "POST", "/2/jobs", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0,"repeat":1,"repeat":2000000000}]}`, 400, wrong, "ops.0.repeat"},
		{"limit: reason invalid UTF-8", "POST", "/2/jobs?reason=%ff", `{"ops":[{"OP_ID":"OP_TEST_DELAY","duration":0}]}`, 400, wrong, "reason"},

		// gnt
		{"init when initialised", "POST", "/2/gnt/init", `{"cluster_name":"other"}`, 409, "wrong_state", ""},
		{"failover unknown field", "POST", "/2/gnt/master-failover", `{"bogus":1}`, 400, wrong, "bogus"},
		{"failover unknown target", "POST", "/2/gnt/master-failover", `{"target":"nope"}`, 404, "unknown_entity", "target"},
		{"failover invalid target", "POST", "/2/gnt/master-failover", `{"target":"bad name"}`, 400, wrong, "target"},
		{"failover wrong type", "POST", "/2/gnt/master-failover", `{"target":1}`, 400, wrong, "target"},
		{"join unsigned", "POST", "/2/gnt/join", `{"node":{"name":"node1"}}`, 401, rpc.CodeUnauthorized, ""},
		{"join too large", "POST", "/2/gnt/join", big, 413, rpc.CodeTooLarge, ""},
	}
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fingerprint(b)
			calls := b.ApplyCalls()
			r := doHTTP(t, e.ts.URL, tc.method, tc.path, tc.body)
			checkErr(t, r, tc.status, tc.code, tc.field)
			if after := fingerprint(b); after != before {
				t.Errorf("state changed: %s -> %s", before, after)
			}
			if b.ApplyCalls() != calls {
				t.Errorf("Apply was called")
			}
			// A client's CheckWrite refuses it the same way, or leaves
			// it to the server (what needs the state).
			u, _ := url.Parse(tc.path)
			ce := rpc.CheckWrite(tc.method, u.Path, u.Query(), []byte(tc.body))
			if ce != nil && (ce.ErrorCode != tc.code || ce.Field != tc.field || ce.Status != tc.status) {
				t.Errorf("CheckWrite: %d %s [%s] %s; the server %d %s [%s]", ce.Status, ce.ErrorCode, ce.Field, ce.Message, tc.status, tc.code, tc.field)
			}
			if ce == nil && strings.HasPrefix(tc.name, "limit: ") {
				t.Errorf("CheckWrite let it through")
			}
		})
	}
}

// opList is a JSON list of n OP_TEST_DELAY opcodes.
func opList(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(`{"OP_ID":"OP_TEST_DELAY","duration":0},`, n), ",") + "]"
}

func checkErr(t *testing.T, r result, status int, code, field string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status: want %d, got %s", status, r)
	}
	ae := r.apiError(t)
	if ae.ErrorCode != code || ae.Field != field {
		t.Errorf("want error_code %q field %q, got %q %q (%s)", code, field, ae.ErrorCode, ae.Field, ae.Message)
	}
	if ae.Status != status || ae.Message == "" {
		t.Errorf("error body: code %d, message %q", ae.Status, ae.Message)
	}
	if r.header.Get(rpc.HeaderIndex) == "" || r.header.Get(rpc.HeaderKnownLeader) == "" || r.header.Get(rpc.HeaderLastContact) == "" {
		t.Errorf("metadata headers missing: %v", r.header)
	}
	if status == 405 && r.header.Get("Allow") == "" {
		t.Errorf("405 without Allow")
	}
}

// TestRefusedByState: requests that are well formed but that the state
// machine refuses go through Apply and change nothing but the index.
func TestRefusedByState(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	cases := []badCase{
		{"node exists", "POST", "/2/nodes", `{"node_name":"node1","primary_ip":"192.0.2.9"}`, 409, "already_exists", "node_name"},
		{"ip in use", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.1"}`, 409, "resource_not_unique", "primary_ip"},
		{"unknown group", "POST", "/2/nodes", `{"node_name":"node2","primary_ip":"192.0.2.2","group":"nope"}`, 404, "unknown_entity", "group"},
		{"modify unknown node", "PUT", "/2/nodes/nope/modify", `{"offline":true}`, 404, "unknown_entity", "node_name"},
		{"master role change", "PUT", "/2/nodes/node1/role", `"drained"`, 400, wrong, ""},
		{"remove master", "DELETE", "/2/nodes/node1", ``, 409, "wrong_state", "node_name"},
		{"remove unknown node", "DELETE", "/2/nodes/nope", ``, 404, "unknown_entity", "node_name"},
		{"tags unknown node", "PUT", "/2/nodes/nope/tags?tag=x", ``, 404, "unknown_entity", "name"},
		{"tags unknown instance", "PUT", "/2/instances/nope/tags?tag=x", ``, 404, "unknown_entity", "name"},
		{"delete missing tag", "DELETE", "/2/tags?tag=missing", ``, 404, "unknown_entity", "tags"},
		{"group exists", "POST", "/2/groups", `{"name":"default"}`, 409, "already_exists", "group_name"},
		{"remove only group", "DELETE", "/2/groups/default", ``, 409, "wrong_state", "group_name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hash := b.FSM().Hash()
			idx := b.FSM().Index()
			r := e.do(tc.method, tc.path, tc.body)
			checkErr(t, r, tc.status, tc.code, tc.field)
			if b.FSM().Hash() != hash {
				t.Errorf("state changed")
			}
			if got := r.header.Get(rpc.HeaderIndex); got != strconv.FormatUint(idx+1, 10) {
				t.Errorf("X-Gnt-Index %s, want the apply index %d", got, idx+1)
			}
		})
	}
}

func signedJoin(t *testing.T, e *env, key []byte, ts int64, body string, sigBody string) result {
	t.Helper()
	return e.do("POST", "/2/gnt/join", body,
		rpc.HeaderTimestamp, strconv.FormatInt(ts, 10), rpc.HeaderSignature, rpc.Sign(key, ts, []byte(sigBody)))
}

func TestJoinBadInput(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	key := b.JoinKey()
	now := time.Now().Unix()
	good := `{"node":{"name":"node1","primary_ip":"192.0.2.1"}}`
	cases := []struct {
		name   string
		hdr    []string
		body   string
		status int
		code   string
		field  string
	}{
		{"no headers", nil, good, 401, rpc.CodeUnauthorized, ""},
		{"no signature", []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10)}, good, 401, rpc.CodeUnauthorized, ""},
		{"bad signature", []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, strings.Repeat("ab", 32)}, good, 401, rpc.CodeUnauthorized, ""},
		{"signature not hex", []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, "zz"}, good, 401, rpc.CodeUnauthorized, ""},
		{"wrong key", []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign([]byte("other"), now, []byte(good))}, good, 401, rpc.CodeUnauthorized, ""},
		{"other body", []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, []byte(good+" "))}, good, 401, rpc.CodeUnauthorized, ""},
		{"stale", []string{rpc.HeaderTimestamp, strconv.FormatInt(now-360, 10), rpc.HeaderSignature, rpc.Sign(key, now-360, []byte(good))}, good, 401, rpc.CodeUnauthorized, ""},
		{"future", []string{rpc.HeaderTimestamp, strconv.FormatInt(now+360, 10), rpc.HeaderSignature, rpc.Sign(key, now+360, []byte(good))}, good, 401, rpc.CodeUnauthorized, ""},
		{"timestamp not canonical", []string{rpc.HeaderTimestamp, "+" + strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, []byte(good))}, good, 401, rpc.CodeUnauthorized, ""},
		{"timestamp not a number", []string{rpc.HeaderTimestamp, "now", rpc.HeaderSignature, rpc.Sign(key, now, []byte(good))}, good, 401, rpc.CodeUnauthorized, ""},
	}
	signed := func(body string) []string {
		return []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, []byte(body))}
	}
	for _, c := range []struct{ name, body, field string }{
		{"unknown field", `{"node":{"name":"node1"},"bogus":1}`, "bogus"},
		{"unknown node field", `{"node":{"name":"node1","bogus":1}}`, "bogus"},
		{"wrong type", `{"node":{"name":5}}`, "node.name"},
		{"bad json", `{"node":`, ""},
		{"empty body", ``, "node"},
		{"no name", `{"node":{}}`, "node.name"},
		{"invalid name", `{"node":{"name":"bad name"}}`, "node.name"},
		{"bad ip", `{"node":{"name":"node1","primary_ip":"x"}}`, "node.primary_ip"},
		{"bad secondary ip", `{"node":{"name":"node1","primary_ip":"192.0.2.1","secondary_ip":"1.2.3"}}`, "node.secondary_ip"},
	} {
		cases = append(cases, struct {
			name   string
			hdr    []string
			body   string
			status int
			code   string
			field  string
		}{c.name, signed(c.body), c.body, 400, wrong, c.field})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fingerprint(b)
			r := e.do("POST", "/2/gnt/join", tc.body, tc.hdr...)
			checkErr(t, r, tc.status, tc.code, tc.field)
			if fingerprint(b) != before || len(b.Joins()) != 0 {
				t.Errorf("state changed or join handled")
			}
		})
	}

	t.Run("not initialised", func(t *testing.T) {
		u := newEnv(t, rpctest.New("node9"))
		r := signedJoin(t, u, key, now, good, good)
		checkErr(t, r, 503, rpc.CodeUnavailable, "")
	})
}

func TestInitBadInput(t *testing.T) {
	b := rpctest.New("node1")
	e := newEnv(t, b)
	cases := []badCase{
		{"unknown field", "POST", "/2/gnt/init", `{"cluster_name":"c1","bogus":1}`, 400, wrong, "bogus"},
		{"no name", "POST", "/2/gnt/init", `{}`, 400, wrong, "cluster_name"},
		{"invalid name", "POST", "/2/gnt/init", `{"cluster_name":"bad name"}`, 400, wrong, "cluster_name"},
		{"wrong type", "POST", "/2/gnt/init", `{"cluster_name":"c1","candidate_pool_size":"x"}`, 400, wrong, "candidate_pool_size"},
		{"negative pool", "POST", "/2/gnt/init", `{"cluster_name":"c1","candidate_pool_size":-1}`, 400, wrong, "candidate_pool_size"},
		{"even voters", "POST", "/2/gnt/init", `{"cluster_name":"c1","max_raft_voters":4}`, 400, wrong, "max_raft_voters"},
		{"bad json", "POST", "/2/gnt/init", `{"cluster_name"`, 400, wrong, ""},
		{"reads before init", "GET", "/2/info", ``, 503, rpc.CodeUnavailable, ""},
		{"job wait before init", "GET", "/2/jobs/1/wait?fields=status&timeout=0", ``, 503, rpc.CodeUnavailable, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fingerprint(b)
			r := e.do(tc.method, tc.path, tc.body)
			checkErr(t, r, tc.status, tc.code, tc.field)
			if fingerprint(b) != before {
				t.Errorf("state changed")
			}
		})
	}

	t.Run("not local", func(t *testing.T) {
		srv := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true})
		req := strings.NewReader(`{"cluster_name":"c1"}`)
		rec := serveReq(srv.Handler(), "POST", "/2/gnt/init", req, "192.0.2.50:4000")
		r := result{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		checkErr(t, r, 401, rpc.CodeUnauthorized, "")
		if readState(b, func(st *fsm.State) bool { return st.Initialized() }) {
			t.Fatal("initialised from a remote address")
		}
	})

	t.Run("writes wait for a leader", func(t *testing.T) {
		start := time.Now()
		r := e.do("PUT", "/2/tags?tag=x", "")
		checkErr(t, r, 503, rpc.CodeNoLeader, "")
		if time.Since(start) < testHold {
			t.Errorf("answered after %s, before the hold time", time.Since(start))
		}
	})
}
