package agent

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// The kvm driver's hypervisor parameters are fsm's table of the kvm
// hypervisor (fsm.HVParamDefs(fsm.HVKVM)): its keys, kinds, defaults and
// checks, the same the leader validates at submission. An instance's
// hvparams may hold only these keys; each value is checked by fsm's rules.
// A key the driver does not act on yet (kvmNotYet) is accepted only at its
// default, so a setting that would change the guest is refused rather
// than dropped.

// kvmNotYet are the kvm hypervisor parameters the driver knows (fsm's
// table) but does not act on yet: any value but the default is refused.
var kvmNotYet = map[string]bool{
	"spice_bind":       true,
	"cdrom_image_path": true, "kvm_extra": true,
	"mem_path": true, "use_chroot": true, "user_shutdown": true,
}

// kvmParams are an instance's hypervisor parameters, checked, with fsm's
// defaults filled in (values in fsm's stored form: bools as bool, integers
// as float64).
type kvmParams map[string]any

// parseKVMParams checks hv against fsm's kvm table: unknown keys, values
// of the wrong kind and settings the driver does not honour are refused,
// the key named; so are VNC settings that break fsm.CheckVNC's rules.
func parseKVMParams(hv map[string]any) (kvmParams, error) {
	defs := fsm.HVParamDefs(fsm.HVKVM)
	norm, e := fsm.NormalizeParams("hvparams", "hypervisor kvm", defs, hv, false)
	if e != nil {
		return nil, invalid("%s", e.Msg)
	}
	out := kvmParams(fsm.ParamDefaults(defs))
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(norm)) {
		v := norm[k]
		if kvmNotYet[k] && v != out[k] {
			errs = append(errs, k+": the kvm driver does not support it yet; only its default "+showDefault(out[k])+" is accepted")
			continue
		}
		out[k] = v
	}
	if len(errs) > 0 {
		return nil, invalid("hypervisor parameters: %s", strings.Join(errs, "; "))
	}
	if e := fsm.CheckVNC("hvparams", out); e != nil {
		return nil, invalid("%s", e.Msg)
	}
	return out, nil
}

func showDefault(v any) string {
	if s, ok := v.(string); ok && s == "" {
		return "(empty)"
	}
	return fmt.Sprint(v)
}

func (p kvmParams) str(k string) string { s, _ := p[k].(string); return s }
func (p kvmParams) bool(k string) bool  { b, _ := p[k].(bool); return b }
func (p kvmParams) int(k string) int {
	switch n := p[k].(type) {
	case float64:
		return int(n)
	case int:
		return n
	}
	return 0
}

// instanceParams checks the instance's hypervisor parameters, as the
// leader sends them: its effective ones (fsm.FillHVParams), the cluster's
// filled in. An instance of another hypervisor is refused.
func instanceParams(inst fsm.Instance) (kvmParams, error) {
	if inst.Hypervisor != "" && inst.Hypervisor != fsm.HVKVM {
		return nil, invalid("instance %s is for hypervisor %s; this node runs kvm", inst.Name, inst.Hypervisor)
	}
	return parseKVMParams(inst.HVParams)
}
