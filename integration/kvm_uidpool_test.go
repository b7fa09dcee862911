package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// TestKVMUIDPool: the user-id pool from the operator to a guest, through
// real gntds: Ganeti's client sets the pool (ModifyCluster uid_pool) and
// reads it back (GetInfo), gnt cluster info shows it, a guest of
// security_model=pool created through the API runs (its marker on the
// serial console) with every uid of its qemu from the pool; with the pool
// narrowed to that one uid (allowed while the guest uses it, as in
// Ganeti) a second such guest fails to start, the job naming the used-up
// pool, and no qemu of it runs.
func TestKVMUIDPool(t *testing.T) {
	skipUnlessRoot(t, "qemu's -runas needs root")
	py := ganetiPython(t)
	kernel, initrd := needKVMGuest(t)
	c, m := kvmNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	addUser(ctx, t, c, "ops", "ops-secret", true)

	const lo = 3999990100
	out := runGanetiClient(ctx, t, c, py, m, fmt.Sprintf(`
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))
print("modify", c.WaitForJobCompletion(c.ModifyCluster(uid_pool=[[%d, %d]], add_uids=[[%d, %d]]), period=0.1, retries=600))
print("pool", c.GetInfo()["uid_pool"])
try:
    c.ModifyCluster(remove_uids=[[%d, %d]])
    print("bad accepted")
except rc.GanetiApiError as e:
    print("bad refused", e.code)
`, lo, lo+1, lo+5, lo+5, lo, lo))
	for _, want := range []string{"modify True", fmt.Sprintf("pool [[%d, %d], [%d, %d]]", lo, lo+1, lo+5, lo+5), "bad refused 400"} {
		if !strings.Contains(out, want) {
			t.Fatalf("Ganeti's client: %q missing from\n%s", want, out)
		}
	}
	if info, err := c.GNT("cluster", "info"); err != nil || !strings.Contains(info, fmt.Sprintf("uid pool: %d-%d, %d\n", lo, lo+1, lo+5)) {
		t.Fatalf("gnt cluster info: %v\n%s", err, info)
	}

	create := func(name string) (string, string) {
		t.Helper()
		return createKVMGuest(ctx, t, c, m, name, kernel, initrd, []any{}, map[string]any{"security_model": "pool"})
	}
	if st, log := create("vm1"); st != fsm.StatusSuccess {
		t.Fatalf("instance create vm1: %s\n%s", st, log)
	}
	info, err := c.Client().Instance(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	guestCounter(t, m, info.UUID, -1, 3*time.Minute)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", qemuPID(m, info.UUID)))
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			uids = strings.Fields(rest)
		}
	}
	if len(uids) != 4 {
		t.Fatalf("vm1's qemu runs with uids %v, want one uid of the pool", uids)
	}
	uid, _ := strconv.ParseInt(uids[0], 10, 64)
	if uids[1] != uids[0] || uids[2] != uids[0] || uids[3] != uids[0] || !(uid >= lo && uid <= lo+1 || uid == lo+5) {
		t.Fatalf("vm1's qemu runs with uids %v, want one uid of the pool", uids)
	}

	// The pool narrowed to vm1's uid: a second pool guest cannot start.
	if out, err := c.GNT("cluster", "modify", "--uid-pool", uids[0]); err != nil {
		t.Fatalf("gnt cluster modify --uid-pool %s: %v\n%s", uids[0], err, out)
	}
	st, log := create("vm2")
	if st == fsm.StatusSuccess || !strings.Contains(log, "no unused uid in the uid pool") {
		t.Fatalf("instance create vm2 with the pool used up: %s\n%s", st, log)
	}
	if info2, err := c.Client().Instance(ctx, "vm2"); err == nil && qemuPID(m, info2.UUID) != 0 {
		t.Fatal("vm2's qemu runs though its start failed")
	}
	if qemuPID(m, info.UUID) == 0 {
		t.Fatal("vm1 stopped when its uid was taken out of the pool")
	}
}
