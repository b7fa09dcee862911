package fsm

import (
	"encoding/json"
	"strings"
	"testing"
)

// paramsFSM is a state with one node and a stopped diskless instance i1
// (restored from a snapshot of an older build).
func paramsFSM(t *testing.T) (*FSM, *harness) {
	t.Helper()
	old := `{"format":"gnt-fsm","version":2,"index":7,"log_version":9}
{"t":"cluster","v":{"name":"c","uuid":"cu","serial_no":1,"ctime":1,"mtime":1,"candidate_pool_size":10,"max_raft_voters":5,"default_iallocator":"hail","ndparams":{},"tags":[],"master_node":"nu"}}
{"t":"group","v":{"name":"default","uuid":"gu","alloc_policy":"preferred","ndparams":{},"tags":[],"serial_no":1,"ctime":1,"mtime":1}}
{"t":"node","v":{"name":"n1","uuid":"nu","group":"gu","primary_ip":"192.0.2.1","secondary_ip":"192.0.2.1","master_candidate":true,"master_capable":true,"vm_capable":true,"offline":false,"drained":false,"powered":true,"ndparams":{},"tags":[],"resources":{"memory_mib":4096,"disk_mib":10000,"cpus":4},"addrs":{},"serial_no":1,"ctime":1,"mtime":1}}
{"t":"instance","v":{"name":"i1","uuid":"iu","forthcoming":false,"primary_node":"nu","secondary_nodes":[],"disk_template":"diskless","disks":[],"nics":[{"uuid":"nic0","mac":"aa:00:00:00:00:01","mode":"bridged"}],"memory":128,"vcpus":1,"os":"","admin_state":"up","tags":[],"serial_no":1,"ctime":1,"mtime":1,"hypervisor":"kvm"}}
{"t":"queue","v":{"next_job_id":1,"epoch":0,"finished":[]}}
`
	h := newHarness()
	if err := h.f.Restore(strings.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	h.index = 7
	return h.f, h
}

func submitOp(h *harness, op string) Response {
	return h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{h.uuid()}}).(Response)
}

// TestParamsRefused: each bad key or value is refused, naming the field,
// and changes nothing.
func TestParamsRefused(t *testing.T) {
	cm := func(body string) string { return `{"OP_ID":"OP_CLUSTER_SET_PARAMS",` + body + `}` }
	ic := func(body string) string {
		return `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"new1","disk_template":"diskless",` + body + `}`
	}
	im := func(body string) string {
		return `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"i1",` + body + `}`
	}
	for _, c := range []struct{ name, op, field string }{
		{"unknown hv key", cm(`"hvparams":{"kvm":{"kernel_pth":"/k"}}`), "hvparams.kvm.kernel_pth"},
		{"unknown hypervisor", cm(`"hvparams":{"xen-pvm":{"kernel_path":"/k"}}`), "hvparams.xen-pvm"},
		{"bad bool", cm(`"hvparams":{"kvm":{"acpi":"maybe"}}`), "hvparams.kvm.acpi"},
		{"bad enum", cm(`"hvparams":{"kvm":{"disk_type":"floppy"}}`), "hvparams.kvm.disk_type"},
		{"relative path", cm(`"hvparams":{"kvm":{"kernel_path":"boot/vmlinuz"}}`), "hvparams.kvm.kernel_path"},
		{"int range", cm(`"hvparams":{"kvm":{"migration_port":70000}}`), "hvparams.kvm.migration_port"},
		{"int fraction", cm(`"hvparams":{"kvm":{"migration_downtime":1.5}}`), "hvparams.kvm.migration_downtime"},
		{"unknown be key", cm(`"beparams":{"memroy":512}`), "beparams.memroy"},
		{"minmem over maxmem", cm(`"beparams":{"minmem":512,"maxmem":256}`), "beparams.minmem"},
		{"nic mode route", cm(`"nicparams":{"mode":"route"}`), "nicparams.mode"},
		{"nic vlan", cm(`"nicparams":{"vlan":".5000"}`), "nicparams.vlan"},
		{"unknown nic key", cm(`"nicparams":{"bridge":"br0"}`), "nicparams.bridge"},
		{"disk template", cm(`"diskparams":{"rbd":{"pool":"x"}}`), "diskparams.rbd"},
		{"disk key", cm(`"diskparams":{"drbd":{"resync_rate":1}}`), "diskparams.drbd.resync_rate"},
		{"disk value", cm(`"diskparams":{"drbd":{"protocol":"D"}}`), "diskparams.drbd.protocol"},
		{"disk format", cm(`"diskparams":{"file":{"format":"vmdk"}}`), "diskparams.file.format"},
		{"disk format of plain", cm(`"diskparams":{"plain":{"format":"qcow2"}}`), "diskparams.plain.format"},
		{"osparams value", cm(`"osparams":{"debootstrap":{"dist":7}}`), "osparams.debootstrap.dist"},
		{"enabled unknown", cm(`"enabled_hypervisors":["xen-hvm"]`), "enabled_hypervisors"},
		{"default not enabled", cm(`"enabled_hypervisors":["fake"],"default_hypervisor":"exec"`), "default_hypervisor"},
		{"disable a used hypervisor", cm(`"enabled_hypervisors":["fake"],"default_hypervisor":"fake"`), "enabled_hypervisors"},
		{"create global hv", ic(`"hypervisor":"kvm","hvparams":{"migration_port":1}`), "hvparams.migration_port"},
		{"create unknown hv key", ic(`"hvparams":{"no_such":1}`), "hvparams.no_such"},
		{"create key of another hv", ic(`"hypervisor":"exec","hvparams":{"acpi":true}`), "hvparams.acpi"},
		{"create routed without ip", ic(`"nics":[{"mode":"routed"}]`), "nics.0.ip"},
		{"create routed with the unspecified ip", ic(`"nics":[{"mode":"routed","ip":"0.0.0.0"}]`), "nics.0.ip"},
		{"create routed with a multicast ip", ic(`"nics":[{"mode":"routed","ip":"224.0.0.1"}]`), "nics.0.ip"},
		{"create nic mode route", ic(`"nics":[{"mode":"route","ip":"192.0.2.9"}]`), "nics.0.mode"},
		{"create kvm openvswitch nic", ic(`"hypervisor":"kvm","nics":[{"mode":"bridged"},{"mode":"openvswitch","link":"sw0"}]`), "nics.1.mode"},
		{"create kvm nic with a vlan", ic(`"nics":[{"mode":"bridged","vlan":".10"}]`), "nics.0.vlan"},
		{"modify kvm nic to openvswitch", im(`"nics":[["modify",0,{"mode":"openvswitch"}]]`), "nics.0.mode"},
		{"modify kvm nic vlan", im(`"nics":[["add",-1,{"vlan":"100"}]]`), "nics.1.vlan"},
		{"create unknown be key", ic(`"beparams":{"memory":128,"cpus":2}`), "beparams.cpus"},
		{"modify unknown be key", im(`"beparams":{"bogus":1}`), "beparams.bogus"},
		{"create be value of the wrong type", ic(`"beparams":{"vcpus":"two"}`), "beparams.vcpus"},
		{"create unknown top-level field", ic(`"beparams":{"vcpus":2},"cpus":2`), "cpus"},
		{"create unknown hypervisor", ic(`"hypervisor":"xen-pvm"`), "hypervisor"},
		{"create instance_uuid", ic(`"instance_uuid":"0b6ad5a3-5a8a-4f0e-9b7e-8c3f2c1d4e5f"`), "instance_uuid"},
		{"modify global hv", im(`"hvparams":{"migration_bandwidth":10}`), "hvparams.migration_bandwidth"},
		{"modify bad hv value", im(`"hvparams":{"serial_speed":"fast"}`), "hvparams.serial_speed"},
		{"modify runtime_mem over maxmem", im(`"runtime_mem":256`), "runtime_mem"},
		{"modify runtime_mem under minmem", im(`"runtime_mem":64`), "runtime_mem"},
		{"modify runtime_mem under a lowered minmem", im(`"runtime_mem":32,"beparams":{"minmem":64}`), "runtime_mem"},
		{"modify runtime_mem zero", im(`"runtime_mem":0`), "runtime_mem"},
		{"modify disk_template", im(`"disk_template":"drbd"`), "disk_template"},
		{"modify offline while up", im(`"offline":true`), "offline"},
		{"modify nic to routed without ip", im(`"nics":[["modify",0,{"mode":"routed"}]]`), "nics.0.ip"},
		{"modify nic to routed with a loopback ip", im(`"nics":[["modify",0,{"mode":"routed","ip":"127.0.0.1"}]]`), "nics.0.ip"},
		{"modify missing nic", im(`"nics":[["modify",3,{"link":"br1"}]]`), "nics.0"},
		{"modify nic op", im(`"nics":[["swap",0,{}]]`), "nics.0"},
		{"modify unknown field", im(`"hotplug":true`), "hotplug"},
		{"vnc_tls cluster", cm(`"hvparams":{"kvm":{"vnc_tls":true}}`), "hvparams.kvm.vnc_tls"},
		{"create vnc_tls", ic(`"hvparams":{"vnc_tls":"yes"}`), "hvparams.vnc_tls"},
		{"modify vnc_tls", im(`"hvparams":{"vnc_tls":true}`), "hvparams.vnc_tls"},
		{"modify vnc_tls dropping the bind address", im(`"hvparams":{"vnc_tls":true,"vnc_bind_address":""}`), "hvparams.vnc_tls"},
		{"cluster vnc_x509_verify without path", cm(`"hvparams":{"kvm":{"vnc_bind_address":"0.0.0.0","vnc_tls":true,"vnc_x509_verify":true}}`), "hvparams.kvm.vnc_x509_verify"},
		{"create vnc_x509_verify without path", ic(`"hvparams":{"vnc_x509_verify":true}`), "hvparams.vnc_x509_verify"},
		{"modify vnc_x509_verify without path", im(`"hvparams":{"vnc_bind_address":"lo","vnc_tls":true,"vnc_x509_verify":"yes"}`), "hvparams.vnc_x509_verify"},
		{"relative vnc_x509_path", cm(`"hvparams":{"kvm":{"vnc_x509_path":"etc/vnc"}}`), "hvparams.kvm.vnc_x509_path"},
		{"create relative vnc_x509_path", ic(`"hvparams":{"vnc_x509_path":"./vnc"}`), "hvparams.vnc_x509_path"},
		{"x509 verify not a bool", im(`"hvparams":{"vnc_x509_verify":"sure"}`), "hvparams.vnc_x509_verify"},
		{"group diskparams", `{"OP_ID":"OP_GROUP_SET_PARAMS","group_name":"default","diskparams":{"plain":{"stripes":0}}}`, "diskparams.plain.stripes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, h := paramsFSM(t)
			// The cluster's default hypervisor is kvm for the cases
			// that rely on it.
			if r := submitOp(h, cm(`"default_hypervisor":"kvm"`)); r.Err != nil {
				t.Fatal(r.Err)
			}
			before := f.Hash()
			r := submitOp(h, c.op)
			if r.Err == nil {
				t.Fatalf("%s accepted", c.op)
			}
			if r.Err.Field != c.field {
				t.Errorf("field %q, want %q (%s)", r.Err.Field, c.field, r.Err.Msg)
			}
			if strings.Contains(c.name, "vnc_tls") && !strings.Contains(r.Err.Msg, "vnc_tls=true needs vnc_bind_address") {
				t.Errorf("message %q does not say vnc_tls needs vnc_bind_address", r.Err.Msg)
			}
			if strings.HasSuffix(c.name, "without path") && !strings.Contains(r.Err.Msg, "vnc_x509_verify=true needs vnc_x509_path") {
				t.Errorf("message %q does not say vnc_x509_verify needs vnc_x509_path", r.Err.Msg)
			}
			if f.Hash() != before {
				t.Error("a refused submission changed the state")
			}
		})
	}
}

// TestClusterParamsStored: accepted cluster and group parameters are
// stored in their normalized form, "default" removes one, and the filled
// instance parameters follow.
func TestClusterParamsStored(t *testing.T) {
	f, h := paramsFSM(t)
	for _, op := range []string{
		`{"OP_ID":"OP_CLUSTER_SET_PARAMS","enabled_hypervisors":["kvm","fake"],"default_hypervisor":"kvm","hvparams":{"kvm":{"kernel_path":"/boot/vmlinuz","acpi":"false","migration_bandwidth":"64"}},"beparams":{"memory":256,"auto_balance":false},"nicparams":{"mode":"openvswitch","link":"sw0","vlan":".100"},"diskparams":{"drbd":{"resync-rate":1000}},"osparams":{"debootstrap":{"dist":"bookworm"}}}`,
		`{"OP_ID":"OP_CLUSTER_SET_PARAMS","hvparams":{"kvm":{"kernel_path":"default"}}}`,
		`{"OP_ID":"OP_GROUP_SET_PARAMS","group_name":"default","diskparams":{"plain":{"stripes":2}}}`,
		`{"OP_ID":"OP_GROUP_SET_PARAMS","group_name":"default","diskparams":{"sharedfile":{"format":"qcow2"}}}`,
	} {
		if r := submitOp(h, op); r.Err != nil {
			t.Fatalf("%s: %v", op, r.Err)
		}
	}
	f.Read(func(s *State, _ uint64) {
		c := s.Cluster
		if got := c.HVParams["kvm"]; len(got) != 2 || got["acpi"] != false || got["migration_bandwidth"] != float64(64) {
			t.Errorf("kvm hvparams %v", got)
		}
		if c.BEParams["maxmem"] != float64(256) || c.BEParams["auto_balance"] != false || c.BEParams["memory"] != nil {
			t.Errorf("beparams %v", c.BEParams)
		}
		if c.NICParams["mode"] != "openvswitch" || c.DiskParams["drbd"]["resync-rate"] != float64(1000) || c.OSParams["debootstrap"]["dist"] != "bookworm" {
			t.Errorf("nic %v disk %v os %v", c.NICParams, c.DiskParams, c.OSParams)
		}
		if s.Groups["gu"].DiskParams["plain"]["stripes"] != float64(2) {
			t.Errorf("group diskparams %v", s.Groups["gu"].DiskParams)
		}
		if got := FilledDiskParams(c, s.Groups["gu"]); got["sharedfile"]["format"] != DiskFormatQcow2 || got["file"]["format"] != DiskFormatRaw {
			t.Errorf("filled disk formats: file %v, sharedfile %v", got["file"], got["sharedfile"])
		}
		filled := FillHVParams(c, s.Instances["iu"])
		if filled["acpi"] != false || filled["kernel_path"] != "" || filled["migration_bandwidth"] != float64(64) {
			t.Errorf("filled %v", filled)
		}
	})
}

// TestVNCTLSParams: vnc_tls with a bind address, and vnc_x509_verify with
// a path, are taken: the cluster's stored, an instance's modify and create
// accepted at submission, where the cluster's path fills in theirs.
func TestVNCTLSParams(t *testing.T) {
	f, h := paramsFSM(t)
	for _, op := range []string{
		`{"OP_ID":"OP_CLUSTER_SET_PARAMS","default_hypervisor":"kvm","hvparams":{"kvm":{"vnc_x509_path":"/etc/gnt/vnc","vnc_x509_verify":true}}}`,
		`{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"i1","hvparams":{"vnc_bind_address":"0.0.0.0","vnc_tls":"yes"}}`,
		`{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"new1","disk_template":"diskless","pnode":"n1","hvparams":{"vnc_bind_address":"127.0.0.1","vnc_tls":true,"vnc_x509_verify":false}}`,
	} {
		if r := submitOp(h, op); r.Err != nil {
			t.Fatalf("%s: %v", op, r.Err)
		}
	}
	f.Read(func(s *State, _ uint64) {
		if got := s.Cluster.HVParams["kvm"]; got["vnc_x509_path"] != "/etc/gnt/vnc" || got["vnc_x509_verify"] != true {
			t.Errorf("cluster kvm hvparams %v", got)
		}
	})
	// The cluster's verify needs its path: dropping the path is refused.
	if r := submitOp(h, `{"OP_ID":"OP_CLUSTER_SET_PARAMS","hvparams":{"kvm":{"vnc_x509_path":"default"}}}`); r.Err == nil || r.Err.Field != "hvparams.kvm.vnc_x509_verify" {
		t.Errorf("dropping the cluster's vnc_x509_path under its vnc_x509_verify: %v", r.Err)
	}
}

// TestDRBDDiskParamRanges: the drbd disk parameters take what the kvm
// driver's DRBD 8.4 commands take (agent kvm_drbd.go params): a value
// outside is refused at submission, cluster-wide and per group, naming
// the parameter and its range, and the bounds themselves are accepted.
func TestDRBDDiskParamRanges(t *testing.T) {
	cm := func(kv string) string {
		return `{"OP_ID":"OP_CLUSTER_SET_PARAMS","diskparams":{"drbd":{` + kv + `}}}`
	}
	gm := func(kv string) string {
		return `{"OP_ID":"OP_GROUP_SET_PARAMS","group_name":"default","diskparams":{"drbd":{` + kv + `}}}`
	}
	for _, c := range []struct {
		kv, key, want string // want: what the refusal names ("" = accepted)
	}{
		{`"resync-rate":0`, "resync-rate", "1..4194304"},
		{`"resync-rate":4194305`, "resync-rate", "1..4194304"},
		{`"resync-rate":1`, "resync-rate", ""},
		{`"resync-rate":4194304`, "resync-rate", ""},
		{`"c-plan-ahead":0`, "c-plan-ahead", "1..300"},
		{`"c-plan-ahead":301`, "c-plan-ahead", "1..300"},
		{`"c-plan-ahead":1`, "c-plan-ahead", ""},
		{`"c-fill-target":1048577`, "c-fill-target", "0..1048576"},
		{`"c-fill-target":0`, "c-fill-target", ""},
		{`"c-delay-target":0`, "c-delay-target", "1..100"},
		{`"c-max-rate":249`, "c-max-rate", "250..4194304"},
		{`"c-max-rate":4194305`, "c-max-rate", "250..4194304"},
		{`"c-max-rate":250`, "c-max-rate", ""},
		{`"c-min-rate":4194305`, "c-min-rate", "0..4194304"},
		{`"c-min-rate":0`, "c-min-rate", ""},
		{`"disk-barriers":"x"`, "disk-barriers", "each once"},
		{`"disk-barriers":"bb"`, "disk-barriers", "each once"},
		{`"disk-barriers":"nb"`, "disk-barriers", "each once"},
		{`"disk-barriers":"bfd"`, "disk-barriers", ""},
		{`"disk-barriers":"n"`, "disk-barriers", ""},
	} {
		for _, op := range []string{cm(c.kv), gm(c.kv)} {
			f, h := paramsFSM(t)
			before := f.Hash()
			r := submitOp(h, op)
			if c.want == "" {
				if r.Err != nil {
					t.Errorf("%s refused: %s", op, r.Err.Msg)
				}
				continue
			}
			if r.Err == nil {
				t.Errorf("%s accepted", op)
				continue
			}
			if r.Err.Field != "diskparams.drbd."+c.key || !strings.Contains(r.Err.Msg, c.want) {
				t.Errorf("%s: field %q, message %q; want field diskparams.drbd.%s and %q named", op, r.Err.Field, r.Err.Msg, c.key, c.want)
			}
			if f.Hash() != before {
				t.Errorf("%s: a refused submission changed the state", op)
			}
		}
	}
}
