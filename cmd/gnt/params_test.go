package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseParamOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		got  func() (any, error)
		want string // JSON, or "error: substring"
	}{
		{"cluster -H", func() (any, error) {
			return parseHVParams([]string{`kvm:kernel_path=/boot/vmlinuz,acpi=false,migration_port=8200,kernel_args=ro console=ttyS0\,115200`, "fake:-acpi"})
		}, `{"fake":{"acpi":"default"},"kvm":{"acpi":false,"kernel_args":"ro console=ttyS0,115200","kernel_path":"/boot/vmlinuz","migration_port":8200}}`},
		{"cluster -H bare bool and no_", func() (any, error) { return parseHVParams([]string{"kvm:use_chroot,no_acpi"}) },
			`{"kvm":{"acpi":false,"use_chroot":true}}`},
		{"cluster -H unknown key kept for the server", func() (any, error) { return parseHVParams([]string{"kvm:kernel_pth=/k"}) },
			`{"kvm":{"kernel_pth":"/k"}}`},
		{"cluster -H no name", func() (any, error) { return parseHVParams([]string{"kernel_path=/k"}) }, "error: the name before"},
		{"cluster -H empty name", func() (any, error) { return parseHVParams([]string{":acpi=true"}) }, "error: does not start with a name"},
		{"cluster -H twice", func() (any, error) { return parseHVParams([]string{"kvm:acpi=true", "kvm:vga=std"}) }, "error: given twice"},
		{"cluster -H bad bool", func() (any, error) { return parseHVParams([]string{"kvm:acpi=maybe"}) }, "error: want true or false"},
		{"cluster -H bad int", func() (any, error) { return parseHVParams([]string{"kvm:serial_speed=fast"}) }, "error: want an integer"},
		{"cluster -H bare non-bool", func() (any, error) { return parseHVParams([]string{"kvm:kernel_path"}) }, "error: needs a value"},
		{"cluster -H key twice", func() (any, error) { return parseHVParams([]string{"kvm:acpi=true,acpi=false"}) }, "error: given twice"},
		{"-D", func() (any, error) {
			return parseDiskParams([]string{"drbd:resync-rate=1000,protocol=B", "plain:stripes=2"})
		},
			`{"drbd":{"protocol":"B","resync-rate":1000},"plain":{"stripes":2}}`},
		{"-D empty key", func() (any, error) { return parseDiskParams([]string{"drbd:=1"}) }, "error: empty parameter name"},
		{"-B", func() (any, error) {
			return typedParams("maxmem=2G,minmem=512,vcpus=2,auto_balance=no,always_failover", fsm.BEParamDefs)
		},
			`{"always_failover":true,"auto_balance":false,"maxmem":2048,"minmem":512,"vcpus":2}`},
		{"-B bad memory", func() (any, error) { return typedParams("maxmem=lots", fsm.BEParamDefs) }, "error: bad size"},
		{"-N", func() (any, error) { return typedParams("mode=routed,link=100,vlan=.5", fsm.NICParamDefs) },
			`{"link":"100","mode":"routed","vlan":".5"}`},
		{"instance -H with hypervisor", func() (any, error) {
			hv, p, err := parseInstanceHV([]string{"kvm:kernel_path=/k,acpi=no"}, true)
			return []any{hv, p}, err
		}, `["kvm",{"acpi":false,"kernel_path":"/k"}]`},
		{"instance -H hypervisor only", func() (any, error) {
			hv, p, err := parseInstanceHV([]string{"fake"}, true)
			return []any{hv, p}, err
		}, `["fake",{}]`},
		{"instance -H two hypervisors", func() (any, error) {
			_, _, err := parseInstanceHV([]string{"kvm:acpi=no", "fake:acpi=no"}, true)
			return nil, err
		}, "error: two hypervisors"},
		{"instance modify -H names no hypervisor", func() (any, error) {
			_, _, err := parseInstanceHV([]string{"kvm:acpi=no"}, false)
			return nil, err
		}, "error: the hypervisor is not changed here"},
		{"instance modify -H reset", func() (any, error) {
			hv, p, err := parseInstanceHV([]string{"-kernel_path,vnc_bind_address=default"}, false)
			return []any{hv, p}, err
		}, `["",{"kernel_path":"default","vnc_bind_address":"default"}]`},
		{"-O", func() (any, error) { return parseOSParams(`dist=bookworm,mirror=http://deb.debian.org/debian,-arch`) },
			`{"arch":"default","dist":"bookworm","mirror":"http://deb.debian.org/debian"}`},
		{"-O bare", func() (any, error) { return parseOSParams("dist") }, "error: needs a value"},
		{"--net mods", func() (any, error) {
			return parseNICMods([]string{"add:mode=routed,ip=192.0.2.5", "0:link=br1", "1:remove", "remove"})
		},
			`[["add",-1,{"ip":"192.0.2.5","mode":"routed"}],["modify",0,{"link":"br1"}],["remove",1,{}],["remove",-1,{}]]`},
		{"--net bad op", func() (any, error) { return parseNICMods([]string{"swap:link=br1"}) }, "error: want add"},
		{"--net unknown key", func() (any, error) { return parseNICMods([]string{"0:bridge=br1"}) }, "error: unknown NIC parameter"},
		{"--net modify nothing", func() (any, error) { return parseNICMods([]string{"0:"}) }, "error: nothing to modify"},
		{"--disk", func() (any, error) { return parseDiskMods([]string{"0:name=data,mode=ro"}) }, `[["modify",0,{"mode":"ro","name":"data"}]]`},
		{"--disk size", func() (any, error) { return parseDiskMods([]string{"0:size=10G"}) }, "error: grow-disk"},
		{"--disk no index", func() (any, error) { return parseDiskMods([]string{"name=x"}) }, "error: want IDX"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := c.got()
			if w, ok := strings.CutPrefix(c.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("got %v, %v; want an error with %q", v, err, w)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonOf(t, v); got != c.want {
				t.Errorf("got %s\nwant %s", got, c.want)
			}
		})
	}
}

// FuzzParamOptions: the parameter option parsers never panic, and what
// they accept names only non-empty keys without '=' or ':'.
func FuzzParamOptions(f *testing.F) {
	for _, s := range []string{"kvm:acpi=false,kernel_path=/k", "drbd:resync-rate=1", "maxmem=2G,no_auto_balance", "-x,y=default", `a=b\,c`, "add:mode=routed", "0:remove", ":", "=", ",", "1:size=2G,name=x", "0:mode=routed,mac=aa:00:00:00:00:01", "16M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if m, err := parseHVParams([]string{s}); err == nil {
			for hv, p := range m {
				if hv == "" {
					t.Fatalf("%q: empty hypervisor", s)
				}
				checkKeys(t, s, p)
			}
		}
		if m, err := parseDiskParams([]string{s}); err == nil {
			for _, p := range m {
				checkKeys(t, s, p)
			}
		}
		if p, err := typedParams(s, fsm.BEParamDefs); err == nil {
			checkKeys(t, s, p)
		}
		if _, p, err := parseInstanceHV([]string{s}, true); err == nil {
			checkKeys(t, s, p)
		}
		if p, err := parseOSParams(s); err == nil {
			checkKeys(t, s, p)
		}
		parseNICMods([]string{s})
		parseDiskMods([]string{s})
		// instance add's --disk and --net, alone and beside an indexed one:
		// what they accept has an item for every option, in order.
		for _, specs := range [][]string{{s}, {s, "0:size=1G"}, {"1:mode=routed", s}} {
			for _, parse := range []func(string) (map[string]any, error){diskSpec, nicParams} {
				if out, err := indexedSpecs("--x", specs, parse); err == nil {
					if len(out) != len(specs) {
						t.Fatalf("%q: %d items for %d options", specs, len(out), len(specs))
					}
					for _, p := range out {
						if p == nil {
							t.Fatalf("%q: a missing item in %v", specs, out)
						}
						checkKeys(t, s, p)
					}
				}
			}
		}
	})
}

func checkKeys(t *testing.T, s string, p map[string]any) {
	for k := range p {
		if k == "" || strings.ContainsAny(k, "=:") {
			t.Fatalf("%q gave key %q", s, k)
		}
	}
}
