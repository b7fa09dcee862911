package rpc_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// The parameters of Ganeti's opcodes behind the RAPI resources gnt
// serves (OP_INSTANCE_CREATE, OP_INSTANCE_SET_PARAMS,
// OP_INSTANCE_REINSTALL, OP_INSTANCE_REPLACE_DISKS, OP_NODE_EVACUATE,
// OP_CLUSTER_SET_PARAMS, from doc/rapi.rst's opcode_params), each either
// honoured or refused with a 400 naming it (docs/api.md has the table).
var ganetiRefused = map[string][]string{
	"POST /2/instances": {"force_variant", "file_driver", "file_storage_dir", "osparams_private", "osparams_secret",
		"pnode_uuid", "snode_uuid", "source_handshake", "source_instance_name", "source_shutdown_timeout",
		"source_x509_ca", "src_node", "src_node_uuid", "src_path", "compress", "instance_communication",
		"helper_startup_timeout", "helper_shutdown_timeout"},
	"PUT /2/instances/web2/modify": {"force_variant", "ignore_ipolicy", "disk_template", "ext_params",
		"file_driver", "file_storage_dir", "pnode", "pnode_uuid", "remote_node", "remote_node_uuid", "iallocator",
		"osparams_private", "conflicts_check", "hotplug", "instance_communication"},
	"POST /2/instances/web2/reinstall":     {"force_variant", "osparams_private", "osparams_secret"},
	"POST /2/instances/web2/replace-disks": {"remote_node_uuid", "ignore_ipolicy"},
	"POST /2/nodes/node1/evacuate":         {"remote_node_uuid", "ignore_soft_errors"},
	"PUT /2/modify": {"force", "hv_state", "disk_state", "vg_name", "os_hvp", "osparams_private_cluster",
		"max_running_jobs", "max_tracked_jobs", "maintain_node_health",
		"prealloc_wipe_disks", "ipolicy", "drbd_helper", "default_iallocator_params", "mac_prefix", "master_netdev",
		"master_netmask", "reserved_lvs", "hidden_os", "blacklisted_os", "use_external_mip_script",
		"enabled_disk_templates", "modify_etc_hosts", "file_storage_dir", "shared_file_storage_dir",
		"gluster_storage_dir", "install_image", "instance_communication_network", "zeroing_image",
		"compression_tools", "enabled_user_shutdown", "enabled_data_collectors", "data_collector_interval"},
}

// refusedValue is a value of the right shape for a refused parameter, so
// the refusal is about the parameter, not its value.
func refusedValue(p string) any {
	switch p {
	case "max_running_jobs", "max_tracked_jobs", "source_shutdown_timeout", "helper_startup_timeout",
		"helper_shutdown_timeout", "master_netmask", "data_collector_interval":
		return 1
	case "disk_template":
		return "drbd"
	case "hv_state", "disk_state", "os_hvp", "osparams_private", "osparams_secret", "osparams_private_cluster",
		"ext_params", "ipolicy", "default_iallocator_params", "enabled_data_collectors":
		return map[string]any{}
	case "reserved_lvs", "hidden_os", "blacklisted_os", "enabled_disk_templates", "compression_tools":
		return []any{}
	case "force_variant", "compress", "instance_communication", "maintain_node_health", "prealloc_wipe_disks",
		"use_external_mip_script", "modify_etc_hosts", "enabled_user_shutdown", "ignore_ipolicy", "wait_for_sync",
		"conflicts_check", "hotplug", "ignore_soft_errors", "force":
		return true
	}
	return "x"
}

// TestGanetiParametersRefusedByName: every parameter gnt does not take is
// refused with a 400 naming it and saying why, and changes nothing.
func TestGanetiParametersRefusedByName(t *testing.T) {
	e := moreEnv(t)
	before := configState(t, e.b)
	base := map[string]map[string]any{
		"POST /2/instances": {"__version__": 1, "instance_name": "pw9", "disk_template": "diskless"},
	}
	for route, params := range ganetiRefused {
		method, path, _ := strings.Cut(route, " ")
		for _, p := range params {
			body := map[string]any{}
			for k, v := range base[route] {
				body[k] = v
			}
			body[p] = refusedValue(p)
			raw, _ := json.Marshal(body)
			r := e.do(method, path, string(raw))
			if r.status != http.StatusBadRequest {
				t.Errorf("%s %s: %s, want 400", route, p, r)
				continue
			}
			ae := r.apiError(t)
			if ae.Field != p {
				t.Errorf("%s %s: field %q (%s)", route, p, ae.Field, ae.Message)
			}
			if !strings.Contains(ae.Message, "not supported") && !strings.Contains(ae.Message, "unknown field") && !strings.Contains(ae.Message, "does not take") {
				t.Errorf("%s %s: %s", route, p, ae.Message)
			}
		}
	}
	if after := configState(t, e.b); after != before {
		t.Error("refused parameters changed the configuration")
	}
}

// TestGanetiParametersHonoured: the parameters gnt takes round-trip
// through GET.
func TestGanetiParametersHonoured(t *testing.T) {
	e := moreEnv(t)
	runJobs(t, e, &stateNodes{})
	get := func(path string) map[string]any {
		t.Helper()
		r := e.do("GET", path, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %s", path, r)
		}
		var m map[string]any
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	same := func(what string, got any, want string) {
		t.Helper()
		var w any
		if err := json.Unmarshal([]byte(want), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, w) {
			g, _ := json.Marshal(got)
			t.Errorf("%s = %s, want %s", what, g, want)
		}
	}
	// Cluster modify.
	j := jobResult(t, e, "PUT", "/2/modify", `{"enabled_hypervisors":["fake","kvm"],"default_hypervisor":"fake",
		"hvparams":{"fake":{"kernel_args":"console=ttyS0","migration_bandwidth":64}},"beparams":{"vcpus":2},
		"nicparams":{"link":"br7"},"diskparams":{"drbd":{"resync-rate":2000}},"osparams":{"debian":{"dist":"bookworm"}},
		"candidate_pool_size":7,"ndparams":{"ssh_port":2222},"default_iallocator":"hail"}`)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("cluster modify: %s %s", j.Status, j.Ops[0].Result)
	}
	info := get("/2/info")
	same("enabled_hypervisors", info["enabled_hypervisors"], `["fake","kvm"]`)
	same("default_hypervisor", info["default_hypervisor"], `"fake"`)
	hv := info["hvparams"].(map[string]any)["fake"].(map[string]any)
	same("hvparams.fake.kernel_args", hv["kernel_args"], `"console=ttyS0"`)
	same("hvparams.fake.migration_bandwidth", hv["migration_bandwidth"], `64`)
	same("beparams.default.vcpus", info["beparams"].(map[string]any)["default"].(map[string]any)["vcpus"], `2`)
	same("nicparams.default.link", info["nicparams"].(map[string]any)["default"].(map[string]any)["link"], `"br7"`)
	same("diskparams.drbd.resync-rate", info["diskparams"].(map[string]any)["drbd"].(map[string]any)["resync-rate"], `2000`)
	same("osparams", info["osparams"], `{"debian":{"dist":"bookworm"}}`)
	same("candidate_pool_size", info["candidate_pool_size"], `7`)
	same("uid_pool (none yet)", info["uid_pool"], `[]`)
	for _, c := range []struct{ body, want string }{
		{`{"uid_pool":[[1020,1020],[1000,1009]]}`, `[[1000,1009],[1020,1020]]`},
		{`{"add_uids":[[2000,2004]],"remove_uids":[[1020,1020]]}`, `[[1000,1009],[2000,2004]]`},
	} {
		if j := jobResult(t, e, "PUT", "/2/modify", c.body); j.Status != fsm.StatusSuccess {
			t.Fatalf("%s: %s %s", c.body, j.Status, j.Ops[0].Result)
		}
		same("uid_pool after "+c.body, get("/2/info")["uid_pool"], c.want)
	}
	if r := e.do("PUT", "/2/modify", `{"remove_uids":[[1000,1004]]}`); r.status != http.StatusBadRequest ||
		!strings.Contains(string(r.body), "1000-1004 is not a range of the uid pool (1000-1009, 2000-2004)") {
		t.Errorf("removing part of a range: %s", r)
	}
	same("uid_pool after a refused removal", get("/2/info")["uid_pool"], `[[1000,1009],[2000,2004]]`)
	// Ganeti's security_model/security_domain rule, on the effective
	// parameters: refused at create (the job) and at modify (400).
	j = jobResult(t, e, "POST", "/2/instances", `{"__version__":1,"instance_name":"sm1","disk_template":"diskless","pnode":"node1",
		"hypervisor":"kvm","hvparams":{"security_model":"user"},"no_install":true,"start":false}`)
	if j.Status == fsm.StatusSuccess || !strings.Contains(string(j.Ops[0].Result), "security_model=user needs security_domain") {
		t.Errorf("create with security_model=user and no domain: %s %s", j.Status, j.Ops[0].Result)
	}

	// Instance create.
	j = jobResult(t, e, "POST", "/2/instances", `{"__version__":1,"instance_name":"pw1","disk_template":"diskless","pnode":"node1",
		"hypervisor":"fake","hvparams":{"kernel_path":"/boot/k","acpi":false},"os_type":"debian","osparams":{"mirror":"m"},
		"beparams":{"maxmem":256,"minmem":128,"auto_balance":false,"always_failover":true,"spindle_use":2},
		"nics":[{"mode":"routed","ip":"192.0.2.77","link":"100","name":"eth0","mac":"aa:00:00:11:22:33"},{"vlan":".12","mode":"openvswitch"}],
		"tags":["t1","t2"],"conflicts_check":true,"opportunistic_locking":true,"identify_defaults":true,"ignore_ipolicy":true,
		"ip_check":false,"name_check":false,"wait_for_sync":true,"no_install":true,"start":false}`)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("create: %s %s", j.Status, j.Ops[0].Result)
	}
	in := get("/2/instances/pw1")
	same("hypervisor", in["hypervisor"], `"fake"`)
	same("custom_hvparams", in["custom_hvparams"], `{"acpi":false,"kernel_path":"/boot/k"}`)
	hvp := in["hvparams"].(map[string]any)
	same("hvparams.kernel_args", hvp["kernel_args"], `"console=ttyS0"`)
	same("hvparams.acpi", hvp["acpi"], `false`)
	if _, ok := hvp["migration_bandwidth"]; ok {
		t.Error("instance hvparams show a global parameter")
	}
	// identify_defaults: minmem 128 is the default, so it is not the
	// instance's own.
	same("custom_beparams", in["custom_beparams"], `{"always_failover":true,"auto_balance":false,"maxmem":256,"spindle_use":2}`)
	be := in["beparams"].(map[string]any)
	same("beparams.vcpus (cluster default)", be["vcpus"], `2`)
	same("beparams.maxmem", be["maxmem"], `256`)
	same("osparams", in["osparams"], `{"dist":"bookworm","mirror":"m"}`)
	same("custom_osparams", in["custom_osparams"], `{"mirror":"m"}`)
	if r := e.do("PUT", "/2/instances/pw1/modify", `{"hvparams":{"security_domain":"nobody"}}`); r.status != http.StatusBadRequest ||
		!strings.Contains(string(r.body), `security_domain \"nobody\" goes only with security_model=user, not none`) {
		t.Errorf("modify setting a domain under security_model=none: %s", r)
	}
	same("nic.modes", in["nic.modes"], `["routed","openvswitch"]`)
	same("nic.links", in["nic.links"], `["100","br7"]`)
	same("nic.vlans", in["nic.vlans"], `["",".12"]`)
	same("nic.macs[0]", in["nic.macs"].([]any)[0], `"aa:00:00:11:22:33"`)
	same("nic.names[0]", in["nic.names"].([]any)[0], `"eth0"`)
	same("tags", in["tags"], `["t1","t2"]`)

	// Instance modify.
	j = jobResult(t, e, "PUT", "/2/instances/pw1/modify", `{"hvparams":{"kernel_path":"default","serial_speed":115200},
		"beparams":{"vcpus":3},"osparams":{"mirror":"default","suite":"s"},"os_name":"debian+min",
		"nics":[["modify",1,{"link":"sw1"}],["add",-1,{"mode":"bridged","link":"br2"}],["remove",0,{}]],"offline":true}`)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("modify: %s %s", j.Status, j.Ops[0].Result)
	}
	in = get("/2/instances/pw1")
	same("custom_hvparams", in["custom_hvparams"], `{"acpi":false,"serial_speed":115200}`)
	same("beparams.vcpus", in["beparams"].(map[string]any)["vcpus"], `3`)
	same("custom_osparams", in["custom_osparams"], `{"suite":"s"}`)
	same("os", in["os"], `"debian+min"`)
	same("admin_state", in["admin_state"], `"offline"`)
	same("nic.modes", in["nic.modes"], `["openvswitch","bridged"]`)
	same("nic.links", in["nic.links"], `["sw1","br2"]`)

	// Disk modify and group diskparams.
	j = jobResult(t, e, "PUT", "/2/instances/web2/modify", `{"disks":[["modify",0,{"name":"root","mode":"ro"}]]}`)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("disk modify: %s %s", j.Status, j.Ops[0].Result)
	}
	in = get("/2/instances/web2")
	same("disk.names", in["disk.names"], `["root"]`)
	j = jobResult(t, e, "PUT", "/2/groups/default/modify", `{"diskparams":{"plain":{"stripes":2}}}`)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("group modify: %s %s", j.Status, j.Ops[0].Result)
	}
	g := get("/2/groups/default")
	same("custom_diskparams", g["custom_diskparams"], `{"plain":{"stripes":2}}`)
	same("diskparams.drbd.resync-rate", g["diskparams"].(map[string]any)["drbd"].(map[string]any)["resync-rate"], `2000`)
}
