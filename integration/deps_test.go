package integration

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/gnt-cluster/gnt"

// allowed lists, per package, the project packages it may import
// (ARCHITECTURE.md, "Packages and who may import whom").
var allowed = map[string][]string{
	"fsm":         {},
	"transport":   {},
	"oob":         {},
	"netlimit":    {},
	"pki":         {},
	"qlang":       {},
	"buildinfo":   {},
	"rpc":         {"fsm", "qlang", "buildinfo"},
	"confd":       {"fsm"},
	"agent":       {"fsm", "oob"},
	"jobs":        {"fsm", "oob", "qlang"},
	"repair":      {"fsm"},
	"server":      {"fsm", "transport", "rpc", "confd", "jobs", "repair", "agent", "oob", "netlimit", "pki"},
	"integration": {"fsm", "transport", "rpc", "confd", "jobs", "repair", "agent", "oob", "server", "netlimit", "pki"},
	"cmd/gntd":    {"server", "rpc", "confd", "fsm", "buildinfo"},
	"cmd/gnt":     {"rpc", "confd", "fsm", "pki", "qlang", "buildinfo"},
}

type goPackage struct {
	ImportPath string
	Dir        string
	Imports    []string
	Deps       []string
	GoFiles    []string
}

func listPackages(t *testing.T, args ...string) []goPackage {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func short(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

// TestImportRules keeps the dependency graph of ARCHITECTURE.md: each
// package imports only the project packages it may, and nothing imports cmd
// or integration.
func TestImportRules(t *testing.T) {
	for _, p := range listPackages(t, module+"/...") {
		name := short(p.ImportPath)
		top := name
		if strings.HasPrefix(name, "cmd/gnt-oob-") {
			top = "cmd/gntd"
		} else if i := strings.Index(name, "/"); i > 0 && !strings.HasPrefix(name, "cmd/") {
			top = name[:i] // subpackages (e.g. rpc/rpctest) follow their parent
		}
		rules, ok := allowed[top]
		if !ok {
			t.Errorf("package %s is not in the import rules of ARCHITECTURE.md; add it to the table", name)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := short(imp)
			depTop := dep
			if i := strings.Index(dep, "/"); i > 0 && !strings.HasPrefix(dep, "cmd/") {
				depTop = dep[:i]
			}
			if depTop == top {
				continue
			}
			okDep := false
			for _, a := range rules {
				if a == depTop {
					okDep = true
				}
			}
			if !okDep {
				t.Errorf("%s imports %s, which ARCHITECTURE.md does not allow", name, dep)
			}
		}
	}
}

// TestCLIDoesNotLinkRaft: the gnt binary must link neither hashicorp/raft
// nor memberlist.
func TestCLIDoesNotLinkRaft(t *testing.T) {
	pkgs := listPackages(t, "-deps", module+"/cmd/gnt")
	for _, p := range pkgs {
		for _, banned := range []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist"} {
			if p.ImportPath == banned || strings.HasPrefix(p.ImportPath, banned+"/") {
				t.Errorf("cmd/gnt links %s", p.ImportPath)
			}
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("go list returned no packages")
	}
}

// TestPackageComments: every package says what it owns.
func TestPackageComments(t *testing.T) {
	for _, p := range listPackages(t, module+"/...") {
		found := false
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if file.Doc != nil && strings.TrimSpace(file.Doc.Text()) != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("package %s has no package comment", short(p.ImportPath))
		}
	}
}
