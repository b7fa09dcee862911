package oob

import (
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestEPOPlans runs the plan scenarios of testdata/epo: "nodes" and
// "instances" describe the configuration, "plan" prints what an EPO does
// (go test -run TestEPOPlans -rewrite regenerates the expectations).
func TestEPOPlans(t *testing.T) {
	datadriven.Walk(t, "testdata/epo", func(t *testing.T, path string) {
		var (
			nodes     []NodeView
			instances []InstanceView
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "nodes":
				nodes = nil
				for _, line := range lines(d.Input) {
					f := strings.Fields(line)
					n := NodeView{Name: f[0], Group: "default", Powered: true, OOB: true}
					for _, flag := range f[1:] {
						switch {
						case flag == "master":
							n.Master, n.Candidate = true, true
						case flag == "candidate":
							n.Candidate = true
						case flag == "offline":
							n.Offline = true
						case flag == "unpowered":
							n.Powered = false
						case flag == "no-oob":
							n.OOB = false
						case strings.HasPrefix(flag, "group="):
							n.Group = strings.TrimPrefix(flag, "group=")
						default:
							t.Fatalf("%s: unknown node flag %q", d.Pos, flag)
						}
					}
					nodes = append(nodes, n)
				}
				return ""
			case "instances":
				instances = nil
				for _, line := range lines(d.Input) {
					f := strings.Fields(line)
					in := InstanceView{Name: f[0]}
					for _, flag := range f[1:] {
						switch {
						case flag == "up":
							in.Up = true
						case strings.HasPrefix(flag, "nodes="):
							in.Nodes = strings.Split(strings.TrimPrefix(flag, "nodes="), ",")
						default:
							t.Fatalf("%s: unknown instance flag %q", d.Pos, flag)
						}
					}
					instances = append(instances, in)
				}
				return ""
			case "plan":
				var req EPORequest
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "on":
						req.On = true
					case "all":
						req.All = true
					case "groups":
						req.Groups = true
						req.Names = append(req.Names, a.Vals...)
					case "nodes":
						req.Names = append(req.Names, a.Vals...)
					default:
						t.Fatalf("%s: unknown plan argument %q", d.Pos, a.Key)
					}
				}
				in := append([]NodeView(nil), nodes...)
				p, err := PlanEPO(in, instances, req)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return strings.Join(p.Describe(), "\n") + "\n"
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
