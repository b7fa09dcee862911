package oob

import "testing"

func TestProgramInheritance(t *testing.T) {
	type m = map[string]any
	cluster := m{"oob_program": "/usr/lib/gnt/oob", "ssh_port": 22.0}
	cases := []struct {
		name   string
		levels []map[string]any
		want   string
		ok     bool
	}{
		{"cluster default empty", []map[string]any{{"oob_program": ""}, {}, {}}, "", false},
		{"cluster sets", []map[string]any{cluster, {}, {}}, "/usr/lib/gnt/oob", true},
		{"group overrides", []map[string]any{cluster, {"oob_program": "/opt/ipmi"}, {}}, "/opt/ipmi", true},
		{"node overrides group", []map[string]any{cluster, {"oob_program": "/opt/ipmi"}, {"oob_program": "/opt/node"}}, "/opt/node", true},
		{"node opts out", []map[string]any{cluster, {}, {"oob_program": "!"}}, "", false},
		{"group opts out", []map[string]any{cluster, {"oob_program": "!"}, {}}, "", false},
		{"node back in under opted-out group", []map[string]any{cluster, {"oob_program": "!"}, {"oob_program": "/opt/node"}}, "/opt/node", true},
		{"node empties", []map[string]any{cluster, {}, {"oob_program": ""}}, "", false},
		{"node without cluster", []map[string]any{{"oob_program": ""}, {}, {"oob_program": "/opt/node"}}, "/opt/node", true},
		{"default inherits", []map[string]any{cluster, {"oob_program": "default"}, {"oob_program": "default"}}, "/usr/lib/gnt/oob", true},
		{"nil inherits", []map[string]any{cluster, {"oob_program": nil}, nil}, "/usr/lib/gnt/oob", true},
		{"no levels", nil, "", false},
		{"wrong type ignored", []map[string]any{cluster, {"oob_program": 7.0}, {}}, "/usr/lib/gnt/oob", true},
	}
	for _, c := range cases {
		got, ok := Program(c.levels...)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Program = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
