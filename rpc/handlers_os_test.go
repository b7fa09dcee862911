package rpc

import (
	"slices"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

func osTestView() ([]*fsm.Node, OSView) {
	nodes := []*fsm.Node{{UUID: "u1", Name: "n1"}, {UUID: "u2", Name: "n2"}, {UUID: "u3", Name: "n3"}}
	img := func(variants ...string) NodeOS {
		return NodeOS{Name: "img", Path: "/os/img", Valid: true, APIVersions: []int{20, 15}, Variants: variants,
			Parameters: []NodeOSParam{{"label", "a label"}, {"size", "a size"}}}
	}
	noop := NodeOS{Name: "noop", Path: "/usr/share/ganeti/os/noop", Valid: true, APIVersions: []int{5, 10}, Variants: []string{}}
	view := OSView{Nodes: map[string]NodeOSView{
		"u1": {Report: &NodeOSReport{SearchPath: []string{"/os"}, OSes: []NodeOS{img("a", "b"), noop,
			{Name: "broken", Valid: false, Error: "no ganeti_api_version file"}}}},
		"u2": {Report: &NodeOSReport{SearchPath: []string{"/os"}, OSes: []NodeOS{img("b", "c"), noop, {Name: "broken", Valid: true}}}},
		"u3": {Err: "connection refused"},
	}}
	view.Nodes["u2"].Report.OSes[0].Parameters = view.Nodes["u2"].Report.OSes[0].Parameters[1:]
	return nodes, view
}

func TestDiagnoseOS(t *testing.T) {
	nodes, view := osTestView()
	d := diagnoseOS(nodes, view)
	var names []string
	for _, o := range d.OSes {
		names = append(names, o.Names()...)
	}
	// img: the variants both nodes have; broken: invalid on n1; n3 did
	// not answer and does not count.
	if !slices.Equal(names, []string{"img+b", "noop"}) {
		t.Errorf("names %v", names)
	}
	img := d.OSes[1]
	if img.Name != "img" || !img.Valid || !slices.Equal(img.APIVersions, []int{20, 15}) || len(img.Parameters) != 1 || img.Parameters[0].Name != "size" || len(img.Nodes) != 2 {
		t.Errorf("img: %+v", img)
	}
	broken := d.OSes[0]
	if broken.Valid || broken.Nodes[0].Error != "no ganeti_api_version file" || !broken.Nodes[1].Valid {
		t.Errorf("broken: %+v", broken)
	}
	if len(d.Nodes) != 3 || d.Nodes[2].Error != "connection refused" || d.Nodes[0].Error != "" {
		t.Errorf("nodes: %+v", d.Nodes)
	}
	// An OS missing on a node that reported is not valid.
	view.Nodes["u2"].Report.OSes = view.Nodes["u2"].Report.OSes[:1]
	d = diagnoseOS(nodes, view)
	for _, o := range d.OSes {
		if o.Name == "noop" && (o.Valid || !slices.ContainsFunc(o.Nodes, func(s OSNodeStatus) bool {
			return s.Node == "n2" && s.Error == "not found in the node's OS search path"
		})) {
			t.Errorf("noop missing on n2: %+v", o)
		}
	}
	// Nothing reported: nothing listed.
	if d := diagnoseOS(nodes, OSView{}); len(d.OSes) != 0 || d.Nodes[0].Error != "not asked yet" {
		t.Errorf("empty view: %+v", d)
	}
}

func TestCheckOSOn(t *testing.T) {
	nodes, view := osTestView()
	n1, n2, n3 := nodes[0:1], nodes[0:2], nodes[2:3]
	for _, c := range []struct {
		name     string
		nodes    []*fsm.Node
		explicit bool
		want     string
	}{
		{"img+b", n2, true, ""},
		{"img+a", n1, true, ""},
		{"noop", nodes, false, ""}, // n3 did not answer: passed over with the allocator
		{"img+a", n2, true, `unknown variant "a" of OS img on node n2: its variants are img+b, img+c`},
		{"img", n1, true, "OS img needs a variant: one of img+a, img+b"},
		{"noop+x", n1, true, `OS noop has no variants, "x" given (name it noop)`},
		{"nosuch", n1, true, `unknown OS "nosuch": node n1 has no OS nosuch in its search path /os`},
		{"broken", n2, true, "OS broken is not valid on node n1: no ganeti_api_version file"},
		{"noop", nodes, true, "cannot check OS noop on node n3: it has not reported its OS definitions (connection refused)"},
		{"noop", n3, false, "cannot check OS noop: none of the 1 candidate node(s) has reported its OS definitions yet"},
	} {
		aerr := checkOSOn(c.name, c.nodes, view, c.explicit)
		switch {
		case c.want == "" && aerr != nil:
			t.Errorf("%s: %v", c.name, aerr.Message)
		case c.want != "" && (aerr == nil || aerr.Status != 400 || aerr.Field != "os_type" || !strings.Contains(aerr.Message, c.want)):
			t.Errorf("%s: %+v; want 400 os_type %q", c.name, aerr, c.want)
		}
	}
}

// TestCheckOSParams: OS parameters an OS does not declare in its
// parameters.list are refused by name, with what it declares; an OS
// below API 20 takes none; nodes without a report or without the OS are
// passed over (checkOSOn speaks of them).
func TestCheckOSParams(t *testing.T) {
	nodes, view := osTestView()
	n1, n2 := nodes[0:1], nodes[0:2]
	for _, c := range []struct {
		name   string
		params []string
		nodes  []*fsm.Node
		field  string
		want   string
	}{
		{"img+a", []string{"label", "size"}, n1, "", ""},
		{"img+b", []string{"size"}, nodes, "", ""},
		{"img+b", nil, nodes, "", ""},
		{"img+b", []string{"label"}, n2, "osparams.label", `unknown OS parameter "label": OS img on node n2 declares size (its parameters.list; gnt os info img)`},
		{"img+a", []string{"colour"}, n1, "osparams.colour", `unknown OS parameter "colour": OS img on node n1 declares label, size`},
		{"noop", []string{"dist"}, nodes, "osparams", "OS noop takes no OS parameters (got dist): its API versions on node n1 are 5, 10, and only API 20 declares parameters"},
		{"nosuch", []string{"x"}, nodes, "", ""},
	} {
		aerr := checkOSParams(c.name, c.params, c.nodes, view)
		switch {
		case c.want == "" && aerr != nil:
			t.Errorf("%s %v: %v", c.name, c.params, aerr.Message)
		case c.want != "" && (aerr == nil || aerr.Status != 400 || aerr.Field != c.field || !strings.Contains(aerr.Message, c.want)):
			t.Errorf("%s %v: %+v; want 400 %s %q", c.name, c.params, aerr, c.field, c.want)
		}
	}
	if got := setParamNames(map[string]any{"b": "1", "a": "x", "gone": fsm.ParamDefault}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("setParamNames: %v (a parameter set back to default is not checked)", got)
	}
}
