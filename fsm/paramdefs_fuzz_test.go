package fsm

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzNormalizeParams: parameter maps from outside (any JSON object)
// against every table: never a panic; what is accepted normalizes to
// itself again (stored values are final), and an error names a field.
func FuzzNormalizeParams(f *testing.F) {
	for _, s := range []string{`{"acpi":"yes","serial_speed":"115200"}`, `{"kernel_path":"/k","migration_port":8102.0}`,
		`{"mode":"routed","vlan":".5:7"}`, `{"maxmem":1e300}`, `{"stripes":2}`, `{"x":null}`, `{"vlan":":4096"}`, `{"acpi":"default"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) != nil {
			return
		}
		tables := [][]ParamDef{hvParamDefs[HVKVM], BEParamDefs, NICParamDefs, diskParamDefs[DTDrbd], diskParamDefs[DTPlain]}
		for _, defs := range tables {
			for _, reset := range []bool{false, true} {
				out, e := NormalizeParams("p", "test", defs, m, reset)
				if e != nil {
					if e.Field == "" {
						t.Fatalf("%s: error without a field: %s", s, e.Msg)
					}
					continue
				}
				again, e := NormalizeParams("p", "test", defs, out, reset)
				if e != nil || !reflect.DeepEqual(again, out) {
					t.Fatalf("%s: normalized %v is not stable: %v %v", s, out, again, e)
				}
			}
		}
	})
}
