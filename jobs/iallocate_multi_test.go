package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
	"github.com/gnt-cluster/gnt/jobs/iallocator"
)

// onN1 speaks Ganeti's iallocator protocol: it places every instance of a
// multi-allocate request on n1, heedless of room; named "partial" it
// leaves the last one unplaced.
const onN1 = `#!/usr/bin/python3
import json, os, sys
d = json.load(open(sys.argv[1]))
r = d["request"]
if r["type"] != "multi-allocate":
    print(json.dumps({"success": False, "info": "mode %s not supported" % r["type"], "result": []}))
    sys.exit(0)
ins = r["instances"]
n = len(ins) - 1 if os.path.basename(sys.argv[0]) == "partial" else len(ins)
print(json.dumps({"success": True, "info": "", "result": [[[i["name"], ["n1"]] for i in ins[:n]], [i["name"] for i in ins[n:]]]}))
`

func multiSetup(t *testing.T) (*fsm.FSM, *iallocator.Runner) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 for the test allocator")
	}
	d := &direct{f: fsm.New()}
	d.Apply(context.Background(), fsm.ClusterInit{Now: 1, Name: "c", UUID: "u1", GroupUUID: "g1",
		Node: fsm.NodeSpec{Name: "n1", UUID: "n1", PrimaryIP: "192.0.2.1", Resources: fsm.Resources{MemoryMiB: 8192, DiskMiB: 100000, CPUs: 4}}})
	dir := filepath.Join(t.TempDir(), "iallocators")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"py": onN1, "partial": onN1, "garbage": "#!/bin/sh\necho 'Traceback: oops'\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d.f, &iallocator.Runner{Dir: dir, Owner: os.Geteuid(), TempDir: t.TempDir()}
}

func noDead(st *fsm.State) alloc.Options { return AllocOptions(st, nil) }

// TestCapacityWith: the list is tried in order; an external allocator's
// multi-allocate placements count while each fits after the ones before.
func TestCapacityWith(t *testing.T) {
	f, r := multiSetup(t)
	ctx := context.Background()
	spec := alloc.Request{Name: "probe", Template: fsm.DTDiskless, MemoryMiB: 2048, VCPUs: 1}
	res, err := CapacityWith(ctx, f, r, noDead, "garbage,py", spec, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.IAllocator != "py" || res.Count != 4 || res.Primaries["n1"] != 4 || len(res.Failed) != 1 ||
		!strings.Contains(res.Failed[0], "iallocator garbage failed: the answer is not a JSON object") ||
		!strings.HasPrefix(res.Limit, "iallocator py: placement 5 (n1) does not fit: ") {
		t.Errorf("garbage,py: %+v", res)
	}
	hail, err := CapacityWith(ctx, f, r, noDead, "hail", spec, "", "")
	if err != nil || hail.IAllocator != "hail" || hail.Count != 4 || len(hail.Failed) != 0 {
		t.Errorf("hail: %+v %v", hail, err)
	}
	if _, err := CapacityWith(ctx, f, r, noDead, "garbage", spec, "", ""); err == nil || !strings.Contains(err.Error(), "iallocator garbage: the answer is not a JSON object") {
		t.Errorf("garbage alone: %v, want its reason", err)
	}
	if _, err := CapacityWith(ctx, f, r, noDead, "../x", spec, "", ""); err == nil {
		t.Error("a list naming a path was accepted")
	}
}

// TestMultiAllocateWith: an external allocator's multi-allocate answer
// gives each instance's nodes; one that leaves an instance unplaced is
// refused, naming it, and the next is tried; the built-in answers nil
// (each creation places itself).
func TestMultiAllocateWith(t *testing.T) {
	f, r := multiSetup(t)
	ctx := context.Background()
	reqs := []alloc.Request{{Name: "a", Template: fsm.DTDiskless, MemoryMiB: 128}, {Name: "b", Template: fsm.DTDiskless, MemoryMiB: 128}}
	logged := 0
	logf := func(string, ...any) { logged++ }
	got, err := MultiAllocateWith(ctx, f, r, noDead, "partial,py", reqs, "noop", "fake", logf)
	if err != nil || len(got) != 2 || strings.Join(got["a"], ",") != "n1" || strings.Join(got["b"], ",") != "n1" {
		t.Errorf("partial,py: %v %v", got, err)
	}
	if logged != 1 {
		t.Errorf("the failure of partial was logged %d times, want once", logged)
	}
	if _, err := MultiAllocateWith(ctx, f, r, noDead, "partial", reqs, "noop", "fake", nil); err == nil || !strings.Contains(err.Error(), "could not place b") {
		t.Errorf("partial alone: %v, want the unplaced instance named", err)
	}
	if got, err := MultiAllocateWith(ctx, f, r, noDead, "garbage,hail", reqs, "noop", "fake", nil); err != nil || got != nil {
		t.Errorf("garbage,hail: %v %v, want nil (the built-in: each creation places itself)", got, err)
	}
}
