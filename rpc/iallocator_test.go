package rpc_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// allocChecking is a backend that can check allocators, as the server's
// is: hail and "site" are known, every other name is missing.
type allocChecking struct{ *rpctest.Backend }

func (allocChecking) CheckIAllocator(name string) error {
	if name == "hail" || name == "site" {
		return nil
	}
	return errors.New(`iallocator "/etc/gnt/iallocators/` + name + `" refused: no such file or directory`)
}

// TestIAllocatorVetted: an iallocator list naming an allocator the
// answering gntd cannot run is refused at submission with 400, naming
// the field, the name and why, and changes nothing; a list of known ones
// is queued. A backend that cannot check accepts hail only.
func TestIAllocatorVetted(t *testing.T) {
	b := rpctest.NewCluster()
	srv := rpc.NewServer(allocChecking{b}, rpc.ServerOptions{AuthDisabled: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	jobs := func() int { return readState(b, func(st *fsm.State) int { return len(st.Jobs) }) }
	create := `{"__version__":1,"name":"web1","disk_template":"plain","disks":[{"size":512}],"nics":[],"os_type":"noop","iallocator":%q}`
	for _, c := range []struct{ name, method, path, body, field, msg string }{
		{"default missing", "PUT", "/2/modify", `{"default_iallocator":"site,other"}`, "default_iallocator",
			`default_iallocator: "other" is not an allocator this gntd can run: iallocator "/etc/gnt/iallocators/other" refused: no such file or directory`},
		{"default escaped", "PUT", "/2/modify", `{"default\u005fiallocator":"other"}`, "default_iallocator", `"other" is not an allocator`},
		{"default empty element", "PUT", "/2/modify", `{"default_iallocator":"site,"}`, "default_iallocator", "allocator 2 of the list is empty"},
		{"default path", "PUT", "/2/modify", `{"default_iallocator":"/usr/lib/ganeti/iallocators/hail"}`, "default_iallocator", "has the character '/'"},
		{"create", "POST", "/2/instances", strings.Replace(create, "%q", `"other"`, 1), "iallocator", `"other" is not an allocator`},
		{"replace-disks", "POST", "/2/instances/web1/replace-disks", `{"mode":"replace_new_secondary","iallocator":"hail,other"}`, "iallocator", `"other" is not an allocator`},
		{"evacuate", "POST", "/2/nodes/node1/evacuate", `{"mode":"all","iallocator":"x"}`, "iallocator", `"x" is not an allocator`},
	} {
		j0 := jobs()
		r := doHTTP(t, ts.URL, c.method, c.path, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %s", c.name, r)
			continue
		}
		if ae := r.apiError(t); ae.Field != c.field || !strings.Contains(ae.Message, c.msg) {
			t.Errorf("%s: field %q message %q, want %q", c.name, ae.Field, ae.Message, c.msg)
		}
		if jobs() != j0 {
			t.Errorf("%s: the refusal queued a job", c.name)
		}
	}
	if r := doHTTP(t, ts.URL, "PUT", "/2/modify", `{"default_iallocator":"site,hail"}`); r.status != http.StatusOK {
		t.Errorf("site,hail: %s", r)
	}
	// A backend that cannot check: only hail.
	e := newEnv(t, rpctest.NewCluster())
	if r := e.do("PUT", "/2/modify", `{"default_iallocator":"site"}`); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "this gntd runs no external allocators") {
		t.Errorf("unchecking backend, site: %s", r)
	}
	if r := e.do("PUT", "/2/modify", `{"default_iallocator":"hail"}`); r.status != http.StatusOK {
		t.Errorf("unchecking backend, hail: %s", r)
	}
}
