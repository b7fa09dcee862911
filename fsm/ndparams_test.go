package fsm

import (
	"reflect"
	"strings"
	"testing"
)

// TestOpcodeNDParams: every opcode type with an "ndparams" field is known
// to OpcodeNDParams, which returns that field, so that no opcode sets node
// parameters past the API's checks.
func TestOpcodeNDParams(t *testing.T) {
	for _, id := range OpcodeIDs() {
		op := opcodeTypes[id]()
		v := reflect.ValueOf(op).Elem()
		var field reflect.Value
		for i := 0; i < v.NumField(); i++ {
			if name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); name == "ndparams" {
				field = v.Field(i)
			}
		}
		if !field.IsValid() {
			if OpcodeNDParams(op) != nil {
				t.Errorf("%s has no ndparams but OpcodeNDParams returns some", id)
			}
			continue
		}
		want := map[string]any{"oob_program": "/x/" + id}
		field.Set(reflect.ValueOf(want))
		if got := OpcodeNDParams(op); got == nil || got["oob_program"] != want["oob_program"] {
			t.Errorf("%s: OpcodeNDParams = %v, want its ndparams field", id, got)
		}
	}
}
