package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFlagsBecomeRequests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the first request, as request.String prints it
	}{
		{[]string{"node", "modify", "n1", "--drained", "yes"},
			`PUT /2/nodes/n1/modify {"drained":true}`},
		{[]string{"node", "modify", "--offline=no", "n1", "--master-candidate", "no", "--auto-promote", "--secondary-ip", "10.0.0.2"},
			`PUT /2/nodes/n1/modify {"master_candidate":false,"offline":false,"secondary_ip":"10.0.0.2","auto_promote":true}`},
		{[]string{"node", "modify", "n1", "--powered", "no", "--force", "--node-parameters", "oob_program=/bin/oob,spindle_count=2,no_exclusive_storage,-ssh_port"},
			`PUT /2/nodes/n1/modify {"ndparams":{"exclusive_storage":false,"oob_program":"/bin/oob","spindle_count":2,"ssh_port":"default"},"powered":false,"force":true}`},
		{[]string{"node", "add", "n4", "--primary-ip", "192.0.2.4", "-g", "g1", "--vm-capable", "no", "--master-candidate", "yes"},
			`POST /2/nodes {"node_name":"n4","primary_ip":"192.0.2.4","group":"g1","master_candidate":true,"vm_capable":false}`},
		{[]string{"node", "remove", "n1", "-f"}, `DELETE /2/nodes/n1`},
		{[]string{"node", "role", "n1", "drained", "--force", "--auto-promote"},
			`PUT /2/nodes/n1/role?auto-promote=1&force=1 "drained"`},
		{[]string{"node", "add-tags", "n1", "a", "b:c"}, `PUT /2/nodes/n1/tags?tag=a&tag=b%3Ac`},
		{[]string{"node", "remove-tags", "n1", "a"}, `DELETE /2/nodes/n1/tags?tag=a`},
		{[]string{"cluster", "add-tags", "x", "y"}, `PUT /2/tags?tag=x&tag=y`},
		{[]string{"cluster", "modify", "--candidate-pool-size", "3", "--max-raft-voters", "3", "--default-iallocator", "hail", "--node-parameters", "exclusive_storage=yes"},
			`PUT /2/modify {"candidate_pool_size":3,"max_raft_voters":3,"default_iallocator":"hail","ndparams":{"exclusive_storage":true}}`},
		{[]string{"group", "add", "g1", "--alloc-policy", "last_resort", "--node-parameters", "cpu_speed=1.5"},
			`POST /2/groups {"group_name":"g1","alloc_policy":"last_resort","ndparams":{"cpu_speed":1.5}}`},
		{[]string{"group", "modify", "g1", "--alloc-policy", "unallocable"}, `PUT /2/groups/g1/modify {"alloc_policy":"unallocable"}`},
		{[]string{"instance", "modify", "--runtime-memory", "512M", "web2"}, `PUT /2/instances/web2/modify {"runtime_mem":512}`},
		{[]string{"group", "remove", "g1"}, `DELETE /2/groups/g1`},
		{[]string{"group", "add-tags", "g1", "t"}, `PUT /2/groups/g1/tags?tag=t`},
		{[]string{"instance", "remove-tags", "i1", "t"}, `DELETE /2/instances/i1/tags?tag=t`},
		{[]string{"instance", "add", "web1", "--memory", "4G", "--no-move-reservations"},
			`POST /2/instances {"__version__":1,"beparams":{"memory":4096},"gnt_move_reservations":false,"instance_name":"web1","nics":[{}]}`},
		// Without --net one NIC of the cluster's nicparams, as Ganeti's
		// add; --no-nics none.
		{[]string{"instance", "add", "-t", "diskless", "--no-nics", "web1"},
			`POST /2/instances {"__version__":1,"disk_template":"diskless","instance_name":"web1","nics":[]}`},
		// Global flags may follow the command, as with Ganeti's commands.
		{[]string{"node", "remove", "n1", "--reason", "hardware swap", "--force"}, `DELETE /2/nodes/n1?reason=hardware+swap`},
		{[]string{"cluster", "master-failover", "--to", "n2"}, `POST /2/gnt/master-failover {"target":"n2"}`},
		{[]string{"cluster", "modify", "--maintenance-interval", "60", "--auto-balance-cluster", "yes", "--auto-balance-threshold", "0.2",
			"--diagnose-data-collector-filename", "hw", "--diagnose-interval", "30s", "--repair-dead-grace", "2m", "--repair-breaker-share", "0.5",
			"--repair-breaker-nodes", "4", "--repair-max-evacuations", "2", "--repair-round-job-limit", "9", "--repair-job-delay", "0s"},
			`PUT /2/modify {"maint_round_delay":60,"maint_balance":true,"maint_balance_thresh":0.2,"diagnose_data_collector_filename":"hw","maint_diagnose_interval":30,"repair_dead_grace":120,"repair_breaker_share":0.5,"repair_breaker_nodes":4,"repair_max_evacuations":2,"repair_round_job_limit":9,"repair_job_delay":0}`},
		{[]string{"cluster", "modify", "--maintd-harep", "yes"}, `PUT /2/modify {"maintd_harep":true}`},
		{[]string{"cluster", "modify", "--uid-pool", "1020, 1000-1009", "--add-uids", "2000-2001", "--remove-uids", "1020"},
			`PUT /2/modify {"uid_pool":[[1000,1009],[1020,1020]],"add_uids":[[2000,2001]],"remove_uids":[[1020,1020]]}`},
		{[]string{"cluster", "modify", "--uid-pool", ""}, `PUT /2/modify {"uid_pool":[]}`},
		{[]string{"cluster", "init", "c1", "--uid-pool", "1000-1001"}, `POST /2/gnt/init {"cluster_name":"c1","uid_pool":[[1000,1001]]}`},
		{[]string{"cluster", "modify", "-H", "kvm:kernel_path=/boot/vmlinuz,acpi=no", "-H", "fake:-acpi", "-B", "maxmem=1G,auto_balance=no", "-N", "mode=routed,link=100",
			"-D", "drbd:resync-rate=1000", "-O", "debootstrap:dist=bookworm", "--enabled-hypervisors", "kvm,fake"},
			`PUT /2/modify {"enabled_hypervisors":["kvm","fake"],"default_hypervisor":"kvm","hvparams":{"fake":{"acpi":"default"},"kvm":{"acpi":false,"kernel_path":"/boot/vmlinuz"}},"beparams":{"auto_balance":false,"maxmem":1024},"nicparams":{"link":"100","mode":"routed"},"diskparams":{"drbd":{"resync-rate":1000}},"osparams":{"debootstrap":{"dist":"bookworm"}}}`},
		{[]string{"instance", "add", "web2", "-t", "diskless", "-H", "kvm:kernel_path=/k,serial_speed=115200", "-B", "vcpus=2,always_failover", "-O", "dist=bookworm", "--net", "mode=routed,ip=192.0.2.9,vlan=.10"},
			`POST /2/instances {"__version__":1,"beparams":{"always_failover":true,"vcpus":2},"disk_template":"diskless","hvparams":{"kernel_path":"/k","serial_speed":115200},"hypervisor":"kvm","instance_name":"web2","nics":[{"ip":"192.0.2.9","mode":"routed","vlan":".10"}],"osparams":{"dist":"bookworm"}}`},
		{[]string{"instance", "modify", "web2", "-H", "-kernel_path,vnc_bind_address=0.0.0.0", "--net", "0:link=br1", "--net", "add", "--disk", "0:name=root", "--os-name", "debian", "--offline"},
			`PUT /2/instances/web2/modify {"disks":[["modify",0,{"name":"root"}]],"hvparams":{"kernel_path":"default","vnc_bind_address":"0.0.0.0"},"nics":[["modify",0,{"link":"br1"}],["add",-1,{}]],"offline":true,"os_name":"debian"}`},
		// Ganeti's indexed --disk and --net, in index order.
		{[]string{"instance", "add", "-t", "sharedfile", "--disk", "1:size=1G,name=data", "--disk", "0:size=16M,mode=rw", "--net", "0:mode=routed,ip=192.0.2.5,mac=aa:00:00:00:00:01", "i1"},
			`POST /2/instances {"__version__":1,"disk_template":"sharedfile","disks":[{"mode":"rw","size":16},{"name":"data","size":1024}],"instance_name":"i1","nics":[{"ip":"192.0.2.5","mac":"aa:00:00:00:00:01","mode":"routed"}]}`},
		{[]string{"instance", "add", "--disk", "16M", "--disk", "size=2G", "--net", "mac=aa:00:00:00:00:02", "i1"},
			`POST /2/instances {"__version__":1,"disks":[{"size":16},{"size":2048}],"instance_name":"i1","nics":[{"mac":"aa:00:00:00:00:02"}]}`},
		{[]string{"instance", "modify", "--disk", "add:size=1G,name=data", "--disk", "0:mode=ro", "i1"},
			`PUT /2/instances/i1/modify {"disks":[["add",-1,{"name":"data","size":1024}],["modify",0,{"mode":"ro"}]]}`},
		{[]string{"instance", "modify", "--disk", "add:size=1G", "--no-wait-for-sync", "i1"},
			`PUT /2/instances/i1/modify {"disks":[["add",-1,{"size":1024}]],"wait_for_sync":false}`},
		{[]string{"instance", "add", "-t", "drbd", "--disk", "1G", "--no-wait-for-sync", "i1"},
			`POST /2/instances {"__version__":1,"disk_template":"drbd","disks":[{"size":1024}],"instance_name":"i1","nics":[{}],"wait_for_sync":false}`},
		{[]string{"instance", "shutdown", "--shutdown-timeout", "30", "--no-remember", "i1"}, `PUT /2/instances/i1/shutdown?no_remember=1 {"timeout":30}`},
		{[]string{"instance", "shutdown", "--shutdown-timeout", "0", "i1"}, `PUT /2/instances/i1/shutdown {"timeout":0}`},
		{[]string{"instance", "shutdown", "i1"}, `PUT /2/instances/i1/shutdown`},
		{[]string{"instance", "reboot", "i1"}, `POST /2/instances/i1/reboot`},
		{[]string{"instance", "reboot", "--type", "soft", "--shutdown-timeout", "5", "i1"}, `POST /2/instances/i1/reboot?type=soft {"shutdown_timeout":5}`},
		{[]string{"instance", "failover", "-f", "--shutdown-timeout", "10", "-n", "n2", "i1"}, `PUT /2/instances/i1/failover {"shutdown_timeout":10,"target_node":"n2"}`},
		{[]string{"instance", "migrate", "-f", "-I", "hail", "--non-live", "--allow-failover", "i1"}, `PUT /2/instances/i1/migrate {"allow_failover":true,"iallocator":"hail","mode":"non-live"}`},
		{[]string{"instance", "migrate", "-f", "--migration-mode", "live", "-n", "n2", "i1"}, `PUT /2/instances/i1/migrate {"mode":"live","target_node":"n2"}`},
		{[]string{"instance", "grow-disk", "i1", "1", "1G"}, `POST /2/instances/i1/disk/1/grow {"amount":1024,"wait_for_sync":true}`},
		{[]string{"instance", "grow-disk", "--absolute", "--no-wait-for-sync", "i1", "0", "512"}, `POST /2/instances/i1/disk/0/grow {"absolute":true,"amount":512,"wait_for_sync":false}`},
		{[]string{"instance", "activate-disks", "--ignore-size", "i1"}, `PUT /2/instances/i1/activate-disks?ignore_size=1`},
		{[]string{"instance", "deactivate-disks", "-f", "i1"}, `PUT /2/instances/i1/deactivate-disks?force=1`},
		{[]string{"group", "modify", "g1", "-D", "plain:stripes=2"}, `PUT /2/groups/g1/modify {"diskparams":{"plain":{"stripes":2}}}`},
		{[]string{"maint", "cancel", "inc-1"}, `POST /2/gnt/maintd/incidents/inc-1/cancel`},
		{[]string{"maint", "forget", "inc-1"}, `DELETE /2/gnt/maintd/incidents/inc-1`},
		{[]string{"repair", "breaker", "reset"}, `PUT /2/modify {"repair_breaker_override_until":0}`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := newFake(t)
			f.on("POST", "/2/gnt/master-failover", 200, `{"master": "n2"}`)
			f.on("POST", "/2/gnt/init", 200, `{"cluster_name": "c1", "cluster_uuid": "u"}`)
			f.on("POST", "/2/gnt/maintd/incidents/inc-1/cancel", 200, `{"incident": "inc-1", "action": "cancel"}`)
			f.on("DELETE", "/2/gnt/maintd/incidents/inc-1", 200, `{"incident": "inc-1", "action": "forget"}`)
			r := gnt(t, nil, append([]string{"--server", f.addr(), "--timeout", "5s"}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			reqs := f.requests()
			if len(reqs) == 0 {
				t.Fatal("no request")
			}
			if got := reqs[0].String(); got != tc.want {
				t.Errorf("request\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestModifyWaitsAndPrintsChanges(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/jobs/7", 200, `{"id": 7, "status": "success", "ops": [{"OP_ID": "OP_NODE_SET_PARAMS"}],
		"opstatus": ["success"], "opresult": [[["drained", true], ["master_candidate", false]]],
		"oplog": [[[1, [1700000000, 0], "message", "Demoting from master candidate"]]]}`)
	r := gnt(t, nil, "--server", f.addr(), "node", "modify", "n1", "--drained", "yes")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := time.Unix(1700000000, 0).Format(time.ANSIC) + " Demoting from master candidate\n" +
		"Modified node n1\n - drained -> True\n - master_candidate -> False\n"
	if r.stdout != want {
		t.Errorf("stdout\n%q\nwant\n%q", r.stdout, want)
	}
	reqs := f.requests()
	if len(reqs) != 2 || reqs[1].Path != "/2/jobs/7" || reqs[1].Query.Get("index") != "42" || reqs[1].Query.Get("wait") == "" {
		t.Errorf("requests %v: want the job read once, blocking until it changes after the submit index 42", reqs)
	}
}

func TestActivateDisksPrintsWhereTheyAre(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/jobs/7", 200, `{"id": 7, "status": "success", "ops": [{"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS"}],
		"opstatus": ["success"], "opresult": [[["n1", "disk/0", "/srv/d0.img"], ["n1", "disk/1", ""]]], "oplog": [[]]}`)
	r := gnt(t, nil, "--server", f.addr(), "instance", "activate-disks", "i1")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := "n1:disk/0:/srv/d0.img\nn1:disk/1:\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q (Ganeti's NODE:DISK:PATH per disk)", r.stdout, want)
	}
}

func TestWaitFollowsTheLog(t *testing.T) {
	f := newFake(t)
	running := `{"id": 7, "status": "running", "opstatus": ["running"], "opresult": [null],
		"oplog": [[[1, [1700000000, 0], "message", "step one"]]]}`
	done := `{"id": 7, "status": "success", "opstatus": ["success"], "opresult": [null],
		"oplog": [[[1, [1700000000, 0], "message", "step one"], [2, [1700000001, 0], "message", "step two"]]]}`
	f.on("GET", "/2/jobs/7", 200, running, done)
	r := gnt(t, nil, "--server", f.addr(), "node", "remove", "n1", "--force")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if strings.Count(r.stdout, "step one") != 1 || strings.Count(r.stdout, "step two") != 1 {
		t.Errorf("each log entry should be printed once:\n%s", r.stdout)
	}
	reqs := f.requests()
	if len(reqs) != 3 || reqs[2].Query.Get("index") != "50" {
		t.Errorf("requests %v: the second poll should block past the index the first answer was read at (50)", reqs)
	}
}

func TestJobFailure(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/jobs/7", 200, `{"id": 7, "status": "error", "ops": [{"OP_ID": "OP_NODE_SET_PARAMS"}],
		"opstatus": ["error"], "opresult": [{"code": "wrong_state", "message": "the master's flags cannot be changed"}],
		"oplog": [[[1, [1700000000, 0], "message", "checking node n1"]]]}`)
	r := gnt(t, nil, "--server", f.addr(), "node", "modify", "n1", "--offline", "yes")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "checking node n1") {
		t.Errorf("the job's log should be printed: %q", r.stdout)
	}
	if want := "Failure: job 7 failed: the master's flags cannot be changed\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	if strings.Contains(r.stdout, "Modified") {
		t.Errorf("no changes should be printed for a failed job: %q", r.stdout)
	}
}

func TestGanetiErrorResult(t *testing.T) {
	for raw, want := range map[string]string{
		`"plain"`: "plain",
		`["OpPrereqError", ["Node n1 is offline", "wrong_state"]]`:        "Node n1 is offline",
		`{"code": "wrong_input", "field": "node_name", "message": "bad"}`: "bad (field node_name)",
	} {
		if got := resultMessage(json.RawMessage(raw)); got != want {
			t.Errorf("resultMessage(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestSubmitPrintsJobID(t *testing.T) {
	f := newFake(t)
	r := gnt(t, nil, "--server", f.addr(), "--submit", "node", "modify", "n1", "--drained", "yes")
	if r.code != 0 || r.stdout != "JobID: 7\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests; --submit must not wait for the job", n)
	}
	r = gnt(t, nil, "--server", f.addr(), "node", "remove", "n1", "--force", "--submit", "--json")
	if r.code != 0 || r.stdout != "7\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestYesNoIsStrict(t *testing.T) {
	f := newFake(t)
	for _, v := range []string{"maybe", "Yes", "true", "1", ""} {
		r := gnt(t, nil, "--server", f.addr(), "node", "modify", "n1", "--drained", v)
		if r.code != 2 {
			t.Errorf("--drained %q: exit %d, want 2", v, r.code)
		}
		if !strings.Contains(r.stderr, "--drained") || !strings.Contains(r.stderr, "yes or no") {
			t.Errorf("--drained %q: stderr %q", v, r.stderr)
		}
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Errorf("nothing should be sent on a usage error: %v", reqs)
	}
}

// TestNoNICsWithNet: --no-nics beside --net is refused by name (Ganeti's
// add lets --net win; gnt drops neither), and nothing is sent.
func TestNoNICsWithNet(t *testing.T) {
	f := newFake(t)
	for _, args := range [][]string{
		{"instance", "add", "-t", "diskless", "--no-nics", "--net", "mode=routed,ip=192.0.2.9", "i1"},
		{"instance", "add", "-t", "diskless", "--net", "0:link=br1", "--no-nics", "i1"},
	} {
		r := gnt(t, nil, append([]string{"--server", f.addr()}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--no-nics and --net exclude each other") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Errorf("nothing should be sent on a usage error: %v", reqs)
	}
}

func TestUsageErrors(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, twoNodes)
	for _, args := range [][]string{
		{"frobnicate"},
		{"node", "frobnicate"},
		{"node", "modify"},
		{"node", "modify", "n1", "n2", "--drained", "yes"},
		{"node", "modify", "n1", "--no-such-flag"},
		{"node", "modify", "--no-such-flag", "n1"},
		{"node", "add", "n4"}, // --primary-ip is required
		{"node", "role", "n1", "boss"},
		{"node", "role", "n1", "--force"},
		{"job", "info", "abc"},
		{"-o", "yaml", "node", "list"},
		{"node", "list", "--fields", "name,nonsense"},
		{"cluster", "init", "c1", "--candidate-pool-size", "0"},
		{"cluster", "init", "c1", "--uid-pool", "1000-900"},
		{"cluster", "modify", "--uid-pool", "1-70000"},
		{"instance", "grow-disk", "i1", "0"},
		{"instance", "add", "--disk", "1:size=1G", "i1"},
		{"instance", "modify", "--disk", "add:name=x", "i1"},
		{"instance", "add", "--disk", "0:size=1G", "--disk", "0:size=2G", "i1"},
		{"instance", "add", "--disk", "0:size=1G", "--disk", "2G", "i1"},
		{"instance", "add", "--disk", "0:mode=rw", "i1"},
		{"instance", "add", "--disk", "0:size=1G,colour=red", "i1"},
		{"instance", "add", "--net", "0:mode=routed", "--net", "2:mode=bridged", "i1"},
		{"instance", "grow-disk", "i1", "x", "1G"},
		{"instance", "grow-disk", "i1", "16", "1G"},
		{"instance", "grow-disk", "i1", "0", "lots"},
		{"instance", "migrate", "-f", "--non-live", "--migration-mode", "live", "i1"},
		{"instance", "shutdown", "--shutdown-timeout", "soon", "i1"},
		{"node"},
	} {
		r := gnt(t, nil, append([]string{"--server", f.addr()}, args...)...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, r.code, r.stderr)
		}
	}
	for _, req := range f.requests() {
		if req.Method != "GET" {
			t.Errorf("a usage error sent %v", req)
		}
	}
}

func TestAPIErrorIsReported(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes/nx", 404, `{"code": 404, "message": "node \"nx\" does not exist", "error_code": "unknown_entity", "field": "node_name"}`)
	r := gnt(t, nil, "--server", f.addr(), "node", "info", "nx")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	if want := "Failure: node \"nx\" does not exist (field node_name)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	// A refused write is not waited for.
	f.on("PUT", "/2/nodes/n1/modify", 400, `{"code": 400, "message": "please pass at least one modification", "error_code": "wrong_input"}`)
	r = gnt(t, nil, "--server", f.addr(), "node", "modify", "n1")
	if r.code != 1 || r.stderr != "Failure: please pass at least one modification\n" {
		t.Errorf("exit %d stderr %q", r.code, r.stderr)
	}
}

func TestFailoverToNextServer(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/info", 200, `{"name": "c1", "master": "n1"}`)
	r := gnt(t, nil, "--server", deadAddr(t)+","+f.addr(), "--timeout", "10s", "cluster", "getmaster")
	if r.code != 0 || r.stdout != "n1\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// A write also moves on when the first server cannot be dialled.
	r = gnt(t, nil, "--server", deadAddr(t)+","+f.addr(), "--timeout", "10s", "node", "remove", "n1", "--force")
	if r.code != 0 {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
}

func TestAllServersDownTimesOut(t *testing.T) {
	start := time.Now()
	r := gnt(t, nil, "--server", deadAddr(t), "--timeout", "300ms", "cluster", "info")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "Failure: ") {
		t.Errorf("exit %d stderr %q", r.code, r.stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v; --timeout should bound the run", d)
	}
}

const twoNodes = `[
 {"name": "n1", "uuid": "u1", "role": "M", "group": "default", "pip": "192.0.2.1", "mtotal": 8192, "mfree": 7680, "dtotal": 102400, "dfree": 92160,
  "ctotal": 8, "pinst_cnt": 2, "sinst_cnt": 0, "master_capable": true, "vm_capable": true, "powered": true, "addrs": {"api": "192.0.2.1:5080"},
  "gnt_liveness": "alive", "gnt_liveness_since": 1700000000.5},
 {"name": "n2", "uuid": "u2", "role": "D", "group": "default", "pip": "192.0.2.2", "mtotal": null, "dtotal": 512,
  "ctotal": 4, "pinst_cnt": 0, "sinst_cnt": 1, "master_capable": false, "vm_capable": true, "powered": false,
  "gnt_liveness": "unknown", "gnt_liveness_since": null}
]`

func TestNodeList(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, twoNodes)
	r := gnt(t, nil, "--server", f.addr(), "node", "list")
	want := "" +
		"Node Role Group   PrimaryIP MTotal MFree DTotal DFree CPUs Pinst Sinst Flags           Liveness\n" +
		"n1   M    default 192.0.2.1 8.0G   7.5G  100.0G 90.0G 8    2     0     -               alive\n" +
		"n2   D    default 192.0.2.2 ?      ?     512M   ?     4    0     1     no-mc,unpowered unknown\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d stderr %q stdout\n%s\nwant\n%s", r.code, r.stderr, r.stdout, want)
	}
	if q := f.requests()[0].Query.Get("bulk"); q != "1" {
		t.Errorf("bulk=%q", q)
	}
	r = gnt(t, nil, "--server", f.addr(), "node", "list", "--no-headers", "--fields", "name,master_capable,addrs.api", "n2", "n1")
	if want := "n2 N ?\nn1 Y 192.0.2.1:5080\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
	r = gnt(t, nil, "--server", f.addr(), "node", "list", "n9")
	if r.code != 1 || !strings.Contains(r.stderr, "n9") {
		t.Errorf("unknown node: exit %d stderr %q", r.code, r.stderr)
	}
}

func TestJSONOutputIsTheServerAnswer(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, twoNodes)
	f.on("GET", "/2/nodes/n1", 200, `{"name": "n1", "mtotal": 8192}`)
	r := gnt(t, nil, "--server", f.addr(), "-o", "json", "node", "list")
	var got, want any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	_ = json.Unmarshal([]byte(twoNodes), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	r = gnt(t, nil, "--server", f.addr(), "node", "info", "n1", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || !reflect.DeepEqual(got, map[string]any{"name": "n1", "mtotal": 8192.0}) {
		t.Errorf("node info -o json: %q (%v)", r.stdout, err)
	}
	// A change waited for prints the finished job.
	r = gnt(t, nil, "--server", f.addr(), "--json", "node", "remove", "n1", "--force")
	var j map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j["status"] != "success" {
		t.Errorf("node remove -o json: %q (%v)", r.stdout, err)
	}
}

func TestServerDefaults(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".config", "gnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "gnt", "servers"), []byte("# candidates\n10.0.0.1\n10.0.0.2:6000 # second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	explicit := filepath.Join(dir, "explicit")
	if err := os.WriteFile(explicit, []byte("a.example, b.example:7000,[::1]:5081\n\n::2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		flag string
		env  map[string]string
		want []string
		err  bool
	}{
		{"nothing", "", nil, []string{"127.0.0.1:5080"}, false},
		{"home file missing", "", map[string]string{"HOME": filepath.Join(dir, "nohome")}, []string{"127.0.0.1:5080"}, false},
		{"home file", "", map[string]string{"HOME": home}, []string{"10.0.0.1:5080", "10.0.0.2:6000"}, false},
		{"GNT_CONFIG before home", "", map[string]string{"HOME": home, "GNT_CONFIG": explicit},
			[]string{"a.example:5080", "b.example:7000", "[::1]:5081", "[::2]:5080"}, false},
		{"GNT_CONFIG missing", "", map[string]string{"HOME": home, "GNT_CONFIG": filepath.Join(dir, "none")}, nil, true},
		{"GNT_SERVER before files", "", map[string]string{"HOME": home, "GNT_CONFIG": explicit, "GNT_SERVER": "x:1,y"},
			[]string{"x:1", "y:5080"}, false},
		{"flag first", "http://z:2/", map[string]string{"GNT_SERVER": "x:1"}, []string{"z:2"}, false},
		{"bad port", "z:http", nil, nil, true},
		{"https", "https://z", nil, []string{"z:5080"}, false},
		{"a path", "https://z/x", nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveServers(tc.flag, func(k string) string { return tc.env[k] })
			if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, %v; want %v (error %v)", got, err, tc.want, tc.err)
			}
		})
	}

	// End to end: the server list file is used when --server is absent.
	f := newFake(t)
	f.on("GET", "/2/info", 200, `{"name": "c1", "master": "n1"}`)
	list := filepath.Join(dir, "list")
	if err := os.WriteFile(list, []byte(deadAddr(t)+"\n"+f.addr()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := gnt(t, map[string]string{"GNT_CONFIG": list}, "--timeout", "10s", "cluster", "getmaster")
	if r.code != 0 || r.stdout != "n1\n" {
		t.Errorf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestInitGoesToTheFirstServerOnly(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.on("POST", "/2/gnt/init", 200, `{"cluster_name": "c1", "cluster_uuid": "uuid-1"}`)
	r := gnt(t, nil, "--server", a.addr()+","+b.addr(), "cluster", "init", "c1", "--candidate-pool-size", "3", "--max-raft-voters", "3")
	if r.code != 0 || r.stdout != "Initialised cluster c1 (UUID uuid-1)\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := a.requests(); len(got) != 1 || got[0].String() != `POST /2/gnt/init {"cluster_name":"c1","candidate_pool_size":3,"max_raft_voters":3}` {
		t.Errorf("first server got %v", got)
	}
	if got := b.requests(); len(got) != 0 {
		t.Errorf("second server got %v", got)
	}
	// Init does not fail over: another gntd is another cluster.
	r = gnt(t, nil, "--server", deadAddr(t)+","+b.addr(), "--timeout", "300ms", "cluster", "init", "c1")
	if r.code != 1 || len(b.requests()) != 0 {
		t.Errorf("exit %d, second server got %v", r.code, b.requests())
	}
}

func TestHumanViews(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/info", 200, `{"name": "c1", "uuid": "uuid-1", "master": "n1", "leader": "n1", "serial_no": 12,
		"candidate_pool_size": 10, "max_raft_voters": 5, "default_iallocator": "", "ndparams": {"oob_program": "", "spindle_count": 1},
		"tags": ["b", "a"], "architecture": ["linux", "amd64"], "ctime": 1700000000.5, "mtime": 0}`)
	f.on("GET", "/2/raft/peers", 200, `[{"id": "n1", "address": "192.0.2.1:5081", "suffrage": "voter", "leader": true, "known": true, "applied_index": 90, "last_contact_seconds": 0},
		{"id": "n2", "address": "192.0.2.2:5081", "suffrage": "nonvoter", "leader": false, "known": false}]`)
	f.on("GET", "/2/jobs/7", 200, `{"id": 7, "status": "success", "priority": 0, "summary": ["NODE_SET_PARAMS(n1)"],
		"ops": [{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "n1", "drained": true}], "opstatus": ["success"],
		"opresult": [[["drained", true]]], "oplog": [[[1, [1700000000, 0], "message", "hello"]]],
		"received_ts": [1700000000, 0], "start_ts": [1700000000, 0], "end_ts": [1700000001, 500000]}`)
	f.on("GET", "/2/jobs", 200, `[{"id": 7, "status": "success", "summary": ["NODE_SET_PARAMS(n1)"]}, {"id": 8, "status": "running", "summary": ["A", "B"]}]`)
	f.on("GET", "/2/tags", 200, `["zeta", "alpha"]`)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"cluster", "info"}, []string{"Cluster name: c1\n", "Master node: n1\n", "Raft leader: n1\n",
			"Tags: a, b\n", "  - candidate pool size: 10\n", "  - maximum Raft voters: 5\n",
			"  - default instance allocator: (none)\n", "  - spindle_count: 1\n", "Architecture (this node): linux (amd64)\n"}},
		{[]string{"cluster", "peers"}, []string{"ID Address        Suffrage Leader Applied LastContact\n",
			"n1 192.0.2.1:5081 voter    Y      90      0s\n", "n2 192.0.2.2:5081 nonvoter N      ?       ?\n"}},
		{[]string{"job", "list"}, []string{"ID Status  Summary\n7  success NODE_SET_PARAMS(n1)\n8  running A,B\n"}},
		{[]string{"job", "info", "7"}, []string{"- Job ID: 7\n", "  Status: success\n", "    - Opcode: OP_NODE_SET_PARAMS\n",
			"        drained: true\n", "      Result: [[\"drained\",true]]\n", " hello\n", "Total processing time: 1.500000 seconds"}},
		{[]string{"cluster", "list-tags"}, []string{"alpha\nzeta\n"}},
	} {
		r := gnt(t, nil, append([]string{"--server", f.addr()}, tc.args...)...)
		if r.code != 0 {
			t.Errorf("%v: exit %d stderr %q", tc.args, r.code, r.stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

func TestParseNDParams(t *testing.T) {
	got, err := parseNDParams(`oob_program=/usr/bin/oob --x\,y,ssh_port=2222,exclusive_storage,no_ovs,-cpu_speed,ovs_name=default`)
	want := map[string]any{"oob_program": "/usr/bin/oob --x,y", "ssh_port": 2222.0, "exclusive_storage": true,
		"ovs": false, "cpu_speed": "default", "ovs_name": "default"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v\nwant %v", got, err, want)
	}
	for _, bad := range []string{"ssh_port=many", "exclusive_storage=maybe", "oob_program", "ssh_port=1,ssh_port=2", "=x"} {
		if _, err := parseNDParams(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestHoistGlobalFlags(t *testing.T) {
	app := newApp(environment{})
	got := hoistGlobalFlags([]string{"gnt", "node", "modify", "n1", "--drained", "yes", "--submit", "-o", "json", "--reason=r", "--", "--timeout"}, app.Flags)
	want := []string{"gnt", "--submit", "-o", "json", "--reason=r", "node", "modify", "n1", "--drained", "yes", "--", "--timeout"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestDependencies keeps the client small: it must not link the Raft or
// gossip libraries (ARCHITECTURE.md).
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/gnt-cluster/gnt/server", "github.com/gnt-cluster/gnt/transport"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("gnt links %s", dep)
			}
		}
	}
}
