package main

import (
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestParseNICParamsBad: --nic-parameters refuses what it cannot read,
// naming it.
func TestParseNICParamsBad(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "want mode=MODE"},
		{"bridged", "want mode=MODE"},
		{"mode=bridged,link", "not \"link\""},
		{"mode=bridged,bridge=br0", "not \"bridge=br0\""},
		{"mode=bridged,mode=routed", "names mode twice"},
		{"link=br0", "mode is required"},
		{"mode=bridged,,link=br0", "not \"\""},
	} {
		if _, err := parseNICParams(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
	got, err := parseNICParams("mode=openvswitch,link=sw1,vlan=.100")
	if err != nil || got["network_mode"] != "openvswitch" || got["network_link"] != "sw1" || got["network_vlan"] != ".100" {
		t.Errorf("a good spec: %v %v", got, err)
	}
	if got, err := parseNICParams("mode=routed"); err != nil || got["network_link"] != "" {
		t.Errorf("routed without a link: %v %v", got, err)
	}
}

// FuzzParseNICParams: whatever the spec, the parser answers fields of
// OP_NETWORK_CONNECT with a mode, or an error.
func FuzzParseNICParams(f *testing.F) {
	for _, s := range []string{"mode=bridged,link=br0", "mode=routed", "link=x", "=,=", "mode=a,vlan=.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseNICParams(s)
		if err != nil {
			return
		}
		if _, ok := m["network_mode"]; !ok {
			t.Fatalf("%q: no mode in %v", s, m)
		}
		for k := range m {
			if k != "network_mode" && k != "network_link" && k != "network_vlan" {
				t.Fatalf("%q: field %s", s, k)
			}
		}
		// What the CLI sends passes the opcode's own checks or is
		// refused by them, never crashes them.
		op := &fsm.OpNetworkConnect{NetworkName: "n", GroupName: "g"}
		op.NetworkMode, _ = m["network_mode"].(string)
		op.NetworkLink, _ = m["network_link"].(string)
		op.NetworkVLAN, _ = m["network_vlan"].(string)
		_ = op.Validate()
	})
}
