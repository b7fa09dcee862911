package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/jobs/alloc"
)

var hexSecret = regexp.MustCompile(`^[0-9a-f]{40}$`)

// drbdID is the stored logical id of an instance's disk k.
func drbdID(t *testing.T, d *direct, name string, k int) fsm.DRBDLogicalID {
	t.Helper()
	in := instanceState(d, name)
	if in == nil || len(in.Disks) <= k || in.Disks[k].DRBD == nil {
		t.Fatalf("%s disk %d has no logical id: %+v", name, k, in)
	}
	return *in.Disks[k].DRBD
}

// TestDRBDSecretAndEnds: a drbd instance's create records each disk's id
// with a secret the executor drew; later steps (failover, migration)
// keep it; every agent call carries the ids with each end's node name
// and address, which the state never stores.
func TestDRBDSecretAndEnds(t *testing.T) {
	d, nodes, _ := downCluster(t)
	id := drbdID(t, d, "web1", 0)
	n2, n3 := nodeUUID(d, "n2"), nodeUUID(d, "n3")
	if !hexSecret.MatchString(id.Secret) || id.Port < fsm.FirstNetworkPort || len(id.Ends) != 2 ||
		id.Ends[0] != (fsm.DRBDEnd{Node: n2, Minor: 0}) || id.Ends[1] != (fsm.DRBDEnd{Node: n3, Minor: 0}) {
		t.Fatalf("web1's id after create: %+v", id)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	if after := drbdID(t, d, "web1", 0); fmt.Sprint(after) != fmt.Sprint(id) {
		t.Errorf("failover and migration changed the id: %+v, was %+v", after, id)
	}
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	calls := 0
	for _, c := range nodes.seen {
		if c.Instance == nil || c.Instance.Name != "web1" {
			continue
		}
		calls++
		got := c.Instance.Disks[0].DRBD
		want := []fsm.DRBDEnd{{Node: n2, Minor: 0, Name: "n2", IP: "192.0.2.2"}, {Node: n3, Minor: 0, Name: "n3", IP: "192.0.2.3"}}
		if got == nil || got.Secret != id.Secret || got.Port != id.Port || fmt.Sprint(got.Ends) != fmt.Sprint(want) {
			t.Fatalf("%s carried %+v, want the secret, port and ends %+v", c.Op, got, want)
		}
	}
	if calls == 0 {
		t.Fatal("no agent call about web1 was seen")
	}
}

// TestWithDRBDSecrets: a secret is drawn for a disk that needs an id and
// has none, in the record or the stored record; never for a reservation
// or a forthcoming disk, nor over a stored or carried secret; the record
// given is not changed.
func TestWithDRBDSecrets(t *testing.T) {
	rec := fsm.Instance{UUID: "i", DiskTemplate: fsm.DTDrbd, Disks: []fsm.Disk{
		{UUID: "stored"}, {UUID: "new"}, {UUID: "carried", DRBD: &fsm.DRBDLogicalID{Secret: "ab"}}, {UUID: "later", Forthcoming: true}, {UUID: "new2"},
	}}
	stored := &fsm.Instance{UUID: "i", DiskTemplate: fsm.DTDrbd, Disks: []fsm.Disk{{UUID: "stored", DRBD: &fsm.DRBDLogicalID{Port: 11000, Secret: "cd"}}}}
	before, _ := json.Marshal(rec)
	out := withDRBDSecrets(rec, stored)
	if after, _ := json.Marshal(rec); string(after) != string(before) {
		t.Errorf("the record given changed: %s", after)
	}
	secret := func(k int) string {
		if out.Disks[k].DRBD == nil {
			return ""
		}
		return out.Disks[k].DRBD.Secret
	}
	if secret(0) != "" || secret(2) != "ab" || secret(3) != "" {
		t.Errorf("stored %q, carried %q, forthcoming %q: want none drawn", secret(0), secret(2), secret(3))
	}
	if !hexSecret.MatchString(secret(1)) || !hexSecret.MatchString(secret(4)) || secret(1) == secret(4) {
		t.Errorf("new disks' secrets %q and %q: want two distinct drawn ones", secret(1), secret(4))
	}
	resv := rec
	resv.Forthcoming = true
	if out := withDRBDSecrets(resv, nil); out.Disks[1].DRBD != nil {
		t.Errorf("a reservation's disk got a secret")
	}
	plain := rec
	plain.DiskTemplate = fsm.DTPlain
	if out := withDRBDSecrets(plain, nil); out.Disks[1].DRBD != nil {
		t.Errorf("a plain disk got a secret")
	}
}

// TestQueryDataDRBD: a drbd disk's logical_id (secret hidden) and
// drbd_info, and its pstatus and sstatus from the drbd devices the nodes
// report (Ganeti's block device status: path, major 147, minor, sync
// progress, degraded, ldisk status).
func TestQueryDataDRBD(t *testing.T) {
	d, nodes, _ := downCluster(t)
	id := drbdID(t, d, "web1", 0)
	pct, eta := 40.5, 20
	nodes.mu.Lock()
	nodes.drbd = func(node, _ string) (fsm.DRBDDevice, bool) {
		if node == "n2" {
			return fsm.DRBDDevice{Minor: 0, Connection: "SyncSource", Role: "Primary", PeerRole: "Secondary", Disk: "UpToDate", PeerDisk: "Inconsistent",
				SyncPercent: &pct, EstimatedSeconds: &eta}, true
		}
		return fsm.DRBDDevice{Minor: 0, Connection: "SyncTarget", Role: "Secondary", PeerRole: "Primary", Disk: "Inconsistent", PeerDisk: "UpToDate",
			SyncPercent: &pct, EstimatedSeconds: &eta}, true
	}
	nodes.mu.Unlock()
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_QUERY_DATA","instances":["web1"],"static":false}`)
	var res map[string]struct {
		Disks []map[string]any `json:"disks"`
	}
	if err := json.Unmarshal(j.Ops[0].Result, &res); err != nil {
		t.Fatal(err)
	}
	disk := res["web1"].Disks[0]
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	n2, n3 := nodeUUID(d, "n2"), nodeUUID(d, "n3")
	for field, want := range map[string]string{
		"logical_id": fmt.Sprintf(`["%s","%s",%d,0,0,null]`, n2, n3, id.Port),
		"drbd_info":  fmt.Sprintf(`{"port":%d,"primary_minor":0,"primary_node":"n2","secondary_minor":0,"secondary_node":"n3"}`, id.Port),
		"pstatus":    `["/dev/drbd0",147,0,40.5,20,true,1]`,
		"sstatus":    `["/dev/drbd0",147,0,40.5,20,true,2]`,
	} {
		if got := js(disk[field]); got != want {
			t.Errorf("%s = %s, want %s", field, got, want)
		}
	}
}

// drbdCluster is downCluster (web1: drbd on n2 and n3, n4 spare) with an
// executor that does not sleep between polls, and the agents' drbd
// devices reported by dev (nil: none, as the fake driver), which learns
// how many times the node reported its devices.
func drbdCluster(t *testing.T, dev func(node, disk string, poll int) (fsm.DRBDDevice, bool)) (*direct, *fakeNodes) {
	t.Helper()
	d, nodes, _ := downClusterWith(t, func(ex *Executor) { ex.Sleep = noSleep }, "n4")
	if dev != nil {
		polls := map[string]int{} // per node
		nodes.mu.Lock()
		nodes.drbd = func(node, disk string) (fsm.DRBDDevice, bool) {
			polls[node]++
			return dev(node, disk, polls[node])
		}
		nodes.mu.Unlock()
	}
	return d, nodes
}

// syncing is a device resyncing from its primary until poll `done`, then
// in sync.
func syncing(done int) func(node, disk string, poll int) (fsm.DRBDDevice, bool) {
	return func(_, _ string, poll int) (fsm.DRBDDevice, bool) {
		if poll >= done {
			return fsm.DRBDDevice{Connection: "Connected", Role: "Primary", PeerRole: "Secondary", Disk: "UpToDate", PeerDisk: "UpToDate"}, true
		}
		pct, eta := 40.0+float64(poll), 30-poll
		return fsm.DRBDDevice{Connection: "SyncSource", Role: "Primary", PeerRole: "Secondary", Disk: "UpToDate", PeerDisk: "Inconsistent",
			SyncPercent: &pct, EstimatedSeconds: &eta}, true
	}
}

// TestGrowDiskOrderAndSync: grow-disk grows the secondary's storage
// before the primary's, then waits for the resync, logging its progress
// at each poll; with wait_for_sync false it does not wait.
func TestGrowDiskOrderAndSync(t *testing.T) {
	d, nodes := drbdCluster(t, syncing(3))
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"web1","disk":0,"amount":1024}`)
	nodes.mu.Lock()
	var grows []string
	for _, c := range nodes.calls {
		if strings.HasPrefix(c, NodeOpDiskGrow) {
			grows = append(grows, c)
		}
	}
	calls := strings.Join(nodes.calls, " ")
	nodes.calls, nodes.seen = nil, nil
	nodes.mu.Unlock()
	if got := strings.Join(grows, " "); got != "disk-grow@n3 disk-grow@n2" {
		t.Errorf("grow calls %s, want the secondary's first", got)
	}
	if !strings.HasSuffix(calls, "disk-grow@n2 status@n2 status@n2 status@n2") {
		t.Errorf("calls %s: want three polls of the primary after the grow", calls)
	}
	log := jobLog(j)
	for _, want := range []string{
		"grow-disk: waiting for the resync of web1: disk/0 SyncSource UpToDate/Inconsistent, 41.0% synced, about 29s left",
		"42.0% synced, about 28s left",
		"grow-disk: the disks of web1 are in sync",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_GROW_DISK","instance_name":"web1","disk":0,"amount":1024,"wait_for_sync":false}`)
	if log := jobLog(j); !strings.Contains(log, "not waiting for the resync of disk 0 of web1") {
		t.Errorf("wait_for_sync false: log\n%s", log)
	}
	if c := nodes.callsTo("n2"); slices.Contains(c, "status@n2") {
		t.Errorf("wait_for_sync false polled: %v", c)
	}
}

// TestWaitForSyncStalls: a disk whose state does not change fails the
// wait after drbdSyncStalled polls, naming the disk and its state; a
// device the node does not report (the fake driver) is not waited for.
func TestWaitForSyncStalls(t *testing.T) {
	d, nodes := drbdCluster(t, func(node, _ string, _ int) (fsm.DRBDDevice, bool) {
		return fsm.DRBDDevice{Connection: "WFConnection", Role: "Primary", PeerRole: "Unknown", Disk: "UpToDate", PeerDisk: "DUnknown"}, true
	})
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_on_secondary"}`)
	want := fmt.Sprintf("replace_on_secondary: disk/0 of web1 on n2 has not changed for %d polls 2s apart: WFConnection UpToDate/DUnknown", drbdSyncStalled)
	if !strings.Contains(res, want) {
		t.Errorf("result %s, want %q", res, want)
	}
	if n := strings.Count(strings.Join(nodes.callsTo("n2"), " "), "status@n2"); n != drbdSyncStalled+1 {
		t.Errorf("%d polls, want %d", n, drbdSyncStalled+1)
	}
	nodes.mu.Lock()
	nodes.drbd = nil
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_on_secondary"}`)
}

// TestCreateWaitsForSync: a drbd instance's create waits for the first
// resync before it installs the OS (wait_for_sync true by default), and
// does not with wait_for_sync false.
func TestCreateWaitsForSync(t *testing.T) {
	d, nodes := drbdCluster(t, syncing(2))
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web2","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":256},"os_type":"debian","pnode":"n3","snode":"n4"}`)
	wantCallsAndLog(t, nodes, j, "disk-create@n4 status@n3 status@n3 os-install@n3", "create: the disks of web2 are in sync")
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web3","disk_template":"drbd","disks":[{"size":1024}],"beparams":{"memory":256},"os_type":"debian","pnode":"n3","snode":"n4","wait_for_sync":false}`)
	if log := jobLog(j); !strings.Contains(log, "not waiting for the resync of web3's disks (wait_for_sync is false)") {
		t.Errorf("log:\n%s", log)
	}
}

// TestNewSecondaryReconnects: replace_new_secondary takes the old
// secondary's devices down (disk-detach there, with the record naming
// it), records the new secondary (the state gives it its minor, port
// and secret stay), creates the disks on the new node with ids naming
// it, connects the primary's devices to it (disk-attach on the primary),
// waits for the resync, and only then removes the old secondary's copy.
func TestNewSecondaryReconnects(t *testing.T) {
	d, nodes := drbdCluster(t, syncing(3)) // poll 1: the status before the attach
	before := drbdID(t, d, "web1", 0)
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","remote_node":"n4"}`)
	after := drbdID(t, d, "web1", 0)
	n2, n4 := nodeUUID(d, "n2"), nodeUUID(d, "n4")
	if after.Port != before.Port || after.Secret != before.Secret || fmt.Sprint(after.Ends) != fmt.Sprint([]fsm.DRBDEnd{{Node: n2}, {Node: n4}}) {
		t.Errorf("id after the new secondary %+v, before %+v", after, before)
	}
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	var seq []string
	for k, c := range nodes.seen {
		if c.Op == NodeOpBridgesExist {
			continue
		}
		seq = append(seq, nodes.calls[k])
		if c.Op == NodeOpDiskDetach {
			if ends := c.Instance.Disks[0].DRBD.Ends; len(ends) != 2 || ends[1].Name != "n3" {
				t.Errorf("%s carried ends %+v, want the old secondary n3's", nodes.calls[k], ends)
			}
		}
		if c.Op == NodeOpDiskCreate || c.Op == NodeOpDiskAttach {
			ends := c.Instance.Disks[0].DRBD.Ends
			if len(ends) != 2 || ends[1].Node != n4 || ends[1].Name != "n4" || ends[1].IP != "192.0.2.4" {
				t.Errorf("%s carried ends %+v, want n4's", nodes.calls[k], ends)
			}
		}
	}
	if got := strings.Join(seq, " "); got != "disk-detach@n3 disk-create@n4 status@n2 disk-attach@n2 status@n2 status@n2 instance-remove@n3" {
		t.Errorf("calls %s", got)
	}
	if log := jobLog(j); !strings.Contains(log, "new secondary n4: the disks of web1 are in sync") {
		t.Errorf("log:\n%s", log)
	}
}

// stallingNodes is fakeNodes whose first disk-create never answers: the
// executor making it stops there, as a leader that steps down.
type stallingNodes struct {
	*fakeNodes
	once sync.Once
	hit  chan struct{}
}

func (s *stallingNodes) Call(ctx context.Context, node *fsm.Node, c NodeCall) (NodeReply, error) {
	if c.Op == NodeOpDiskCreate {
		stall := false
		s.once.Do(func() { stall = true })
		if stall {
			close(s.hit)
			<-ctx.Done()
			return NodeReply{}, ctx.Err()
		}
	}
	return s.fakeNodes.Call(ctx, node, c)
}

// TestDRBDSecretAcrossLeaderChange: a create that a leader left after
// its record step is resumed by the next leader, whose agent calls carry
// the secret the first one drew and recorded: no step proposes another.
func TestDRBDSecretAcrossLeaderChange(t *testing.T) {
	d, epoch := instanceSetup(t, "n3")
	nodes := newFakeNodes()
	stalling := &stallingNodes{fakeNodes: nodes, hit: make(chan struct{})}
	first := startExecutor(t, &Executor{FSM: d.f, Apply: d, Epoch: epoch, Nodes: stalling})
	id := submitUUID(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web1","disk_template":"drbd","disks":[{"size":1024},{"size":512}],"beparams":{"memory":512},"pnode":"n2","snode":"n3"}`)
	select {
	case <-stalling.hit: // the record is stored; the disks are being created
	case <-time.After(20 * time.Second):
		t.Fatalf("the first leader never created disks:\n%s", jobLog(readJobCopy(d, id)))
	}
	first.stop()
	recorded := instanceState(d, "web1")
	secrets := map[string]string{}
	for _, disk := range recorded.Disks {
		if disk.DRBD == nil || !hexSecret.MatchString(disk.DRBD.Secret) {
			t.Fatalf("recorded disk %+v", disk)
		}
		secrets[disk.UUID] = disk.DRBD.Secret
	}
	// The second leader's calls are counted from here (the first one's
	// are over once it stopped).
	nodes.mu.Lock()
	firstCalls := nodes.seen
	nodes.seen = nil
	nodes.mu.Unlock()
	r, _, _ := d.Apply(t.Context(), fsm.LeaderEstablish{Now: 9, Node: "n1", LogVersion: fsm.LogVersion})
	startExecutor(t, &Executor{FSM: d.f, Apply: d, Epoch: r.Epoch, Nodes: nodes})
	j := finished(t, d, id)
	if j.Status != fsm.StatusSuccess {
		t.Fatalf("%s %s\n%s", j.Status, opResult(j, 0), jobLog(j))
	}
	for _, disk := range instanceState(d, "web1").Disks {
		if disk.DRBD.Secret != secrets[disk.UUID] {
			t.Errorf("disk %s's secret changed after the leader change", disk.UUID)
		}
	}
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	creates := 0
	for k, c := range append(firstCalls, nodes.seen...) {
		if c.Instance == nil {
			continue
		}
		if c.Op == NodeOpDiskCreate && k >= len(firstCalls) {
			creates++
		}
		for _, disk := range c.Instance.Disks {
			if disk.DRBD == nil || disk.DRBD.Secret != secrets[disk.UUID] {
				t.Errorf("%s carried disk %s with another secret", c.Op, disk.UUID)
			}
		}
	}
	if creates != 4 {
		t.Errorf("%d disk-create calls by the second leader, want 4: %v\n%s", creates, nodes.calls, jobLog(j))
	}
}

// TestActivateDisksWaitForSync: activate-disks waits for the resync only
// when wait_for_sync asks it to (Ganeti's default is not to).
func TestActivateDisksWaitForSync(t *testing.T) {
	// The primary's polls 1 and 2 are the two activations' checks; the
	// wait sees a resync at poll 3, none at poll 4.
	d, nodes := drbdCluster(t, syncing(4))
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS","instance_name":"web1"}`)
	polls := func() int { return strings.Count(strings.Join(nodes.callsTo("n2"), " "), "status@n2") }
	if n := polls(); n != 1 {
		t.Errorf("%d status calls without wait_for_sync, want 1 (the check of the disks)", n)
	}
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS","instance_name":"web1","wait_for_sync":true}`)
	if n := polls(); n != 1+1+2 {
		t.Errorf("%d status calls in all, want 4 (two checks, two more polls)", n)
	}
	if log := jobLog(j); !strings.Contains(log, "activate-disks: the disks of web1 are in sync") {
		t.Errorf("log:\n%s", log)
	}
}

// TestMoveStepsLayout: a move of a plan runs as one step per part; a job
// whose recorded steps name one step per move (started by an older
// gntd) goes on with one step per move.
func TestMoveStepsLayout(t *testing.T) {
	plan := alloc.Plan{Moves: []alloc.Move{
		{Instance: "web1", Kind: alloc.MoveFailoverReplace, NewPrimary: "n2", NewPrimaryName: "n2", NewSecondary: "n3", NewSecondaryName: "n3", OldPrimary: "n1"},
		{Instance: "web2", Kind: alloc.MoveReplaceSecondary, NewSecondary: "n4", NewSecondaryName: "n4", OldSecondary: "n1"},
	}}
	names := func(recorded ...string) string {
		st := &fsm.OpState{Steps: []fsm.StepRecord{{Name: "plan", Result: mustJSON(plan)}}}
		for _, r := range recorded {
			st.Steps = append(st.Steps, fsm.StepRecord{Name: r})
		}
		var out []string
		for _, s := range (&Executor{}).moveSteps(st, Step{Name: "plan"}) {
			out = append(out, s.Name)
		}
		return strings.Join(out, ", ")
	}
	parts := "plan, failover_replace web1: move to n2, failover_replace web1: record the secondary n3, failover_replace web1: create the disks on n3, " +
		"replace_secondary web2: record the secondary n4, replace_secondary web2: create the disks on n4"
	if got := names(); got != parts {
		t.Errorf("new job: %s", got)
	}
	if got := names("failover_replace web1: move to n2"); got != parts {
		t.Errorf("a job of this gntd resumed: %s", got)
	}
	if got, want := names("failover_replace web1"), "plan, failover_replace web1, replace_secondary web2"; got != want {
		t.Errorf("a job of an older gntd: %s, want %s", got, want)
	}
}

// TestMoveChecksTargetDisks: failover and migration refuse a target whose
// drbd disk is degraded there (nothing is stopped or moved); failover's
// ignore_consistency goes on with a warning.
func TestMoveChecksTargetDisks(t *testing.T) {
	d, nodes := drbdCluster(t, func(node, _ string, _ int) (fsm.DRBDDevice, bool) {
		if node == "n3" {
			pct := 12.5
			return fsm.DRBDDevice{Connection: "SyncTarget", Role: "Secondary", PeerRole: "Primary", Disk: "Inconsistent", PeerDisk: "UpToDate", SyncPercent: &pct}, true
		}
		return fsm.DRBDDevice{Connection: "SyncSource", Role: "Primary", PeerRole: "Secondary", Disk: "UpToDate", PeerDisk: "Inconsistent"}, true
	})
	want := "disk/0 of web1 is degraded on n3 (SyncTarget Inconsistent/UpToDate, 12.5% synced): aborting the failover (activate the disks and wait for the resync)"
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`)
	if !strings.Contains(res, want) {
		t.Errorf("failover: %s", res)
	}
	// The migration waits for the resync first: it does not end here.
	res, _ = failed(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	if !strings.Contains(res, "migration: disk/0 of web1 on n2 has not changed") {
		t.Errorf("migration: %s", res)
	}
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n2") {
		t.Fatalf("a refused move moved web1")
	}
	for _, c := range append(nodes.callsTo("n2"), nodes.callsTo("n3")...) {
		if c == "instance-stop@n2" || c == "migrate-send@n2" || c == "migrate-prepare@n3" {
			t.Errorf("the refused moves called %s", c)
		}
	}
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1","ignore_consistency":true}`)
	if log := jobLog(j); !strings.Contains(log, "WARNING: disk/0 of web1 is degraded on n3 (SyncTarget Inconsistent/UpToDate, 12.5% synced); the failover goes on as asked") {
		t.Errorf("log:\n%s", log)
	}
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n3") {
		t.Errorf("failover with ignore_consistency left web1 on %s", in.PrimaryNode)
	}
}

// TestMoveRefusesDisconnectedTarget: a secondary whose device is not
// connected to its peer is degraded even when it says UpToDate (DRBD's
// default fencing lets a disconnected secondary say so however much the
// primary wrote since), and so is a disk whose device is not set up on a
// node that reports devices for the other disks.
func TestMoveRefusesDisconnectedTarget(t *testing.T) {
	d, nodes := drbdCluster(t, func(node, _ string, _ int) (fsm.DRBDDevice, bool) {
		return fsm.DRBDDevice{Connection: "WFConnection", Role: "Secondary", PeerRole: "Unknown", Disk: "UpToDate", PeerDisk: "DUnknown"}, true
	})
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`)
	if !strings.Contains(res, "disk/0 of web1 is degraded on n3 (WFConnection UpToDate/DUnknown): aborting the failover") {
		t.Errorf("failover to a disconnected secondary: %s", res)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_CREATE","instance_name":"web2","disk_template":"drbd","disks":[{"size":1024},{"size":512}],"beparams":{"memory":256},"os_type":"debian","pnode":"n3","snode":"n4","wait_for_sync":false}`)
	second := instanceState(d, "web2").Disks[1].UUID
	nodes.mu.Lock()
	nodes.drbd = func(node, disk string) (fsm.DRBDDevice, bool) {
		if node == "n4" && disk == second {
			return fsm.DRBDDevice{}, false
		}
		return fsm.DRBDDevice{Connection: "Connected", Role: "Secondary", PeerRole: "Primary", Disk: "UpToDate", PeerDisk: "UpToDate"}, true
	}
	nodes.mu.Unlock()
	res, _ = failed(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web2"}`)
	if !strings.Contains(res, "disk/1 of web2 has no drbd device set up on n4: aborting the failover") {
		t.Errorf("failover to a secondary without disk 1's device: %s", res)
	}
	if in := instanceState(d, "web2"); in.PrimaryNode != nodeUUID(d, "n3") {
		t.Errorf("a refused failover moved web2")
	}
}

// TestMigrationSetsUpTargetFirst: before a live migration the target's
// drbd devices are set up (disk-attach on the secondary) and the resync
// waited for; only then is the target prepared.
func TestMigrationSetsUpTargetFirst(t *testing.T) {
	// The primary's polls show a resync until the third; the target is
	// in sync when it is checked, after the wait.
	d, nodes := drbdCluster(t, func(node, disk string, poll int) (fsm.DRBDDevice, bool) {
		if node == "n3" {
			poll = 3
		}
		return syncing(3)(node, disk, poll)
	})
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	wantCallsAndLog(t, nodes, j, "disk-attach@n3 status@n2 status@n2 status@n2 status@n3 migrate-prepare@n3", "migration: the disks of web1 are in sync")
	// An evacuation's migration back does the same on n2, the target now.
	nodes.takeCalls()
	runOK(t, d, `{"OP_ID":"OP_NODE_EVACUATE","node_name":"n3","mode":"primary-only"}`)
	if got := nodes.takeCalls(); !strings.Contains(got, "disk-attach@n2 status@n3 status@n2 migrate-prepare@n2 migrate-send@n3") {
		t.Errorf("evacuation calls %s: want the target's disks set up, the resync waited for and the target checked before migrate-prepare", got)
	}
}

// wantCallsAndLog checks that the agent calls so far hold the sequence
// calls and that j's log holds line.
func wantCallsAndLog(t *testing.T, nodes *fakeNodes, j *fsm.Job, calls, line string) {
	t.Helper()
	nodes.mu.Lock()
	got := strings.Join(nodes.calls, " ")
	nodes.mu.Unlock()
	if !strings.Contains(got, calls) {
		t.Errorf("calls %s, want %s among them", got, calls)
	}
	if log := jobLog(j); !strings.Contains(log, line) {
		t.Errorf("log lacks %q:\n%s", line, log)
	}
}

// TestStoppedInstanceDisksSettle: for an instance marked down, the
// primary's devices that the reconnection after a new secondary made
// primary are made secondary again (disk-detach), and an evacuation that
// moves it to its secondary first makes its old primary's devices
// secondary (a stop, no effect on a guest that does not run).
func TestStoppedInstanceDisksSettle(t *testing.T) {
	d, nodes := drbdCluster(t, nil)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"}`)
	nodes.mu.Lock()
	nodes.calls = nil
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","remote_node":"n4"}`)
	got := nodes.takeCalls()
	if !strings.HasSuffix(got, "disk-create@n4 status@n2 disk-attach@n2 status@n2 instance-remove@n3 disk-detach@n2") {
		t.Errorf("calls %s: want the primary's disks detached after the resync", got)
	}
	runOK(t, d, `{"OP_ID":"OP_NODE_EVACUATE","node_name":"n2","mode":"primary-only"}`)
	if got := strings.Join(nodes.callsTo("n2"), " "); !strings.Contains(got, "instance-stop@n2") {
		t.Errorf("calls to the old primary %s: want a stop", got)
	}
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n4") {
		t.Errorf("web1's primary after the evacuation: %s", in.PrimaryNode)
	}
}

// TestWaitForSyncLogBound: a long resync logs every poll at first, then
// only when a disk's whole percent changes.
func TestWaitForSyncLogBound(t *testing.T) {
	const polls = 200
	d, _ := drbdCluster(t, func(_, _ string, poll int) (fsm.DRBDDevice, bool) {
		if poll > polls {
			return fsm.DRBDDevice{Connection: "Connected", Disk: "UpToDate", PeerDisk: "UpToDate"}, true
		}
		pct := float64(poll) / 4 // a whole percent every 4 polls
		return fsm.DRBDDevice{Connection: "SyncSource", Disk: "UpToDate", PeerDisk: "Inconsistent", SyncPercent: &pct}, true
	})
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_on_secondary"}`)
	n := strings.Count(jobLog(j), "waiting for the resync of web1")
	// 30 lines, then one per whole percent from 7 (poll 31: 7.75%) to 50.
	if want := drbdSyncLines + 50 - 7; n != want {
		t.Errorf("%d progress lines for %d polls, want %d", n, polls, want)
	}
}

// TestModifyAddDiskWaitsForSync: a drbd disk added by modify gets its own
// logical id (a new port, the next minors, a secret of its own), and the
// job waits for its resync unless wait_for_sync is false.
func TestModifyAddDiskWaitsForSync(t *testing.T) {
	d, _ := drbdCluster(t, syncing(3)) // poll 1: whether it runs, for the hot-plug
	first := drbdID(t, d, "web1", 0)
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"web1","disks":[["add",-1,{"size":512}]]}`)
	added := drbdID(t, d, "web1", 1)
	if added.Port == first.Port || added.Secret == first.Secret || !hexSecret.MatchString(added.Secret) ||
		added.Ends[0].Minor != 1 || added.Ends[1].Minor != 1 {
		t.Errorf("the added disk's id %+v (the first's %+v)", added, first)
	}
	if log := jobLog(j); !strings.Contains(log, "modify: the disks of web1 are in sync") {
		t.Errorf("log:\n%s", log)
	}
	j = runOK(t, d, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"web1","disks":[["add",-1,{"size":512}]],"wait_for_sync":false}`)
	if log := jobLog(j); !strings.Contains(log, "not waiting for the resync of the disks added to web1") {
		t.Errorf("log:\n%s", log)
	}
}

// TestFailedMigrationAborted: a migration whose send fails is aborted on
// both nodes, the source first (agent/driver.go MigrateAbort), and the
// job's log says so; the instance stays on its primary. When the source
// refuses the abort (it sent the instance) the target is left for
// migrate --cleanup. The same holds for an evacuation's migration.
func TestFailedMigrationAborted(t *testing.T) {
	d, nodes := drbdCluster(t, nil)
	nodes.mu.Lock()
	nodes.fail["migrate-send@n2"] = &NodeCallError{Code: "failed", Msg: "qemu migration failed"}
	nodes.mu.Unlock()
	res, log := failed(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	if !strings.Contains(res, "qemu migration failed") {
		t.Errorf("result %s", res)
	}
	calls := nodes.takeCalls()
	if !strings.HasSuffix(calls, "migrate-prepare@n3 migrate-send@n2 migrate-abort@n2 migrate-abort@n3") {
		t.Errorf("calls %s: want the source then the target aborted after the failed send", calls)
	}
	if !strings.Contains(log, "the migration of web1 is aborted on n2 and n3; it stays on n2") {
		t.Errorf("log:\n%s", log)
	}
	if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n2") {
		t.Errorf("a failed migration moved web1")
	}
	nodes.mu.Lock()
	nodes.fail["migrate-abort@n2"] = &NodeCallError{Code: "wrong_state", Msg: "already sent"}
	nodes.mu.Unlock()
	_, log = failed(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	if c := nodes.callsTo("n3"); slices.Contains(c, "migrate-abort@n3") {
		t.Errorf("the target was aborted after the source refused: %v", c)
	}
	if !strings.Contains(log, "WARNING: the source n2 did not abort the migration") || !strings.Contains(log, "run migrate --cleanup") {
		t.Errorf("log:\n%s", log)
	}
	nodes.mu.Lock()
	delete(nodes.fail, "migrate-abort@n2")
	nodes.calls = nil
	nodes.mu.Unlock()
	failed(t, d, `{"OP_ID":"OP_NODE_EVACUATE","node_name":"n2","mode":"primary-only"}`)
	nodes.mu.Lock()
	calls = strings.Join(nodes.calls, " ")
	nodes.mu.Unlock()
	if !strings.Contains(calls, "migrate-send@n2 migrate-abort@n2 migrate-abort@n3") {
		t.Errorf("evacuation calls %s: want the failed send aborted", calls)
	}
}

// TestFailedPrepareAborted: a migration whose prepare fails on the
// target (or whose answer is lost: the target may have an incoming qemu
// and a promoted device) is aborted, the source first (which refuses
// once it sent the instance: then the target keeps its copy), and
// nothing is sent; the same for an evacuation's migration.
func TestFailedPrepareAborted(t *testing.T) {
	d, nodes := drbdCluster(t, nil)
	nodes.mu.Lock()
	nodes.fail["migrate-prepare@n3"] = &NodeCallError{Code: "failed", Msg: "qemu -incoming failed"}
	nodes.mu.Unlock()
	for _, op := range []string{`{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`, `{"OP_ID":"OP_NODE_EVACUATE","node_name":"n2","mode":"primary-only"}`} {
		nodes.takeCalls()
		res, _ := failed(t, d, op)
		if !strings.Contains(res, "qemu -incoming failed") {
			t.Errorf("%s: result %s", op, res)
		}
		calls := nodes.takeCalls()
		if !strings.Contains(calls, "migrate-prepare@n3 migrate-abort@n2 migrate-abort@n3") || strings.Contains(calls, "migrate-send") {
			t.Errorf("%s: calls %s: want the source, then the target aborted after the failed prepare, nothing sent", op, calls)
		}
		if in := instanceState(d, "web1"); in.PrimaryNode != nodeUUID(d, "n2") {
			t.Errorf("%s: a failed prepare moved web1", op)
		}
	}
	// A prepare run again after the source sent the instance: the source
	// refuses the abort, and the target's copy is kept.
	nodes.mu.Lock()
	nodes.fail["migrate-abort@n2"] = &NodeCallError{Code: "wrong_state", Msg: "already sent"}
	nodes.mu.Unlock()
	nodes.takeCalls()
	failed(t, d, `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1"}`)
	if calls := nodes.takeCalls(); strings.Contains(calls, "migrate-abort@n3") {
		t.Errorf("calls %s: the target was aborted after the source refused", calls)
	}
}

// TestMigrateCleanupEndsMigration: migrate --cleanup aborts a migration
// the secondary is still prepared for (incoming), the primary first, and
// finishes one the secondary received while the primary no longer runs
// the instance, recording the secondary as the primary.
func TestMigrateCleanupEndsMigration(t *testing.T) {
	d, nodes := drbdCluster(t, nil)
	in := instanceState(d, "web1")
	cleanup := `{"OP_ID":"OP_INSTANCE_MIGRATE","instance_name":"web1","cleanup":true}`
	nodes.mu.Lock()
	nodes.mig = map[string]NodeMigration{"n3/" + in.UUID: {ID: "m1", Role: "target", Phase: "prepared"}}
	nodes.mu.Unlock()
	j := runOK(t, d, cleanup)
	wantCallsAndLog(t, nodes, j, "status@n3 migrate-abort@n2 migrate-abort@n3", "instance confirmed to be running on its primary node (n2)")
	if got := instanceState(d, "web1"); got.PrimaryNode != in.PrimaryNode {
		t.Errorf("cleanup of an incoming target moved web1")
	}
	nodes.mu.Lock()
	nodes.mig["n3/"+in.UUID] = NodeMigration{ID: "m2", Role: "target", Phase: "received"}
	nodes.run["n2/"+in.UUID] = false
	nodes.calls = nil
	nodes.mu.Unlock()
	j = runOK(t, d, cleanup)
	wantCallsAndLog(t, nodes, j, "status@n3 migrate-finish@n3", "instance running on secondary node (n3), updating config")
	if got := instanceState(d, "web1"); got.PrimaryNode != nodeUUID(d, "n3") {
		t.Errorf("cleanup of a received migration left web1 on %s", got.PrimaryNode)
	}
	nodes.mu.Lock()
	running := nodes.run["n3/"+in.UUID]
	nodes.mu.Unlock()
	if !running {
		t.Errorf("the received copy was not resumed")
	}
}

// takeCalls returns the agent calls so far, one line, and forgets them.
func (f *fakeNodes) takeCalls() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	got := strings.Join(f.calls, " ")
	f.calls = nil
	return got
}

// TestStartAssemblesSecondary: activate-disks and every start of a drbd
// instance on its primary (start, failover's start on the new primary,
// reboot)
// set up the secondary's devices first (disk-attach there), so that a
// secondary that rebooted resyncs; a secondary that does not answer is a
// warning and the instance starts.
func TestStartAssemblesSecondary(t *testing.T) {
	d, nodes := drbdCluster(t, nil)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_ACTIVATE_DISKS","instance_name":"web1"}`)
	if got := nodes.takeCalls(); !strings.Contains(got, "status@n3 disk-attach@n3 status@n2 disk-attach@n2") {
		t.Errorf("activate-disks calls %s: want the secondary's disks attached before the primary's", got)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"}`)
	nodes.takeCalls()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"web1"}`)
	if got := nodes.takeCalls(); !strings.Contains(got, "disk-attach@n3 instance-start@n2") {
		t.Errorf("start calls %s: want the secondary's disks attached before the start", got)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"web1"}`)
	if got := nodes.takeCalls(); !strings.Contains(got, "disk-attach@n2 instance-start@n3") {
		t.Errorf("failover calls %s: want the new secondary's disks attached before the start on the new primary", got)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_REBOOT","instance_name":"web1","reboot_type":"full"}`)
	if got := nodes.takeCalls(); !strings.Contains(got, "disk-attach@n2 instance-reboot@n3") {
		t.Errorf("reboot calls %s: want the secondary's disks attached before the reboot", got)
	}
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"}`)
	nodes.mu.Lock()
	nodes.fail["disk-attach@n2"] = &NodeCallError{Code: "failed", Msg: "drbdsetup attach failed"}
	nodes.mu.Unlock()
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_STARTUP","instance_name":"web1"}`)
	if log := jobLog(j); !strings.Contains(log, "WARNING: disk/0 of web1 is not set up on its secondary n2") {
		t.Errorf("log:\n%s", log)
	}
}

// TestNewSecondaryKeepsOldCopyUntilSynced: when the new secondary's
// resync fails, the old secondary's volumes are still there (its
// devices were only taken down): nothing removed them.
func TestNewSecondaryKeepsOldCopyUntilSynced(t *testing.T) {
	d, nodes := drbdCluster(t, func(node, _ string, _ int) (fsm.DRBDDevice, bool) {
		return fsm.DRBDDevice{Connection: "WFConnection", Role: "Primary", PeerRole: "Unknown", Disk: "UpToDate", PeerDisk: "DUnknown"}, true
	})
	res, _ := failed(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","remote_node":"n4"}`)
	if !strings.Contains(res, "has not changed") {
		t.Errorf("result %s", res)
	}
	if got := strings.Join(nodes.callsTo("n3"), " "); got != "disk-detach@n3" {
		t.Errorf("calls to the old secondary %s: want its devices taken down only", got)
	}
}

// TestSettleOnlyWhatWasActivated: after a new secondary, the primary's
// devices that reconnectDRBD's attach made primary are made secondary
// again when the instance does not run there, marked up or not; a device
// that was primary before (disks an operator activated) stays, and a
// running instance's devices are left alone.
func TestSettleOnlyWhatWasActivated(t *testing.T) {
	role := "Primary"
	d, nodes := drbdCluster(t, func(node, _ string, _ int) (fsm.DRBDDevice, bool) {
		r := "Secondary"
		if node == "n2" {
			r = role
		}
		return fsm.DRBDDevice{Connection: "Connected", Role: r, Disk: "UpToDate", PeerDisk: "UpToDate"}, true
	})
	in := instanceState(d, "web1")
	replace := func(to string) string {
		runOK(t, d, `{"OP_ID":"OP_INSTANCE_REPLACE_DISKS","instance_name":"web1","mode":"replace_new_secondary","remote_node":"`+to+`"}`)
		return strings.Join(nodes.callsTo("n2"), " ")
	}
	// Marked up but not running, its devices already primary: kept.
	nodes.mu.Lock()
	nodes.run["n2/"+in.UUID] = false
	nodes.mu.Unlock()
	if got := replace("n4"); strings.Contains(got, "disk-detach@n2") {
		t.Errorf("calls to the primary %s: a device primary before was deactivated", got)
	}
	// Marked up but not running, its devices secondary: the attach made
	// them primary, the job makes them secondary again.
	role = "Secondary"
	nodes.takeCalls()
	if got := replace("n3"); !strings.HasSuffix(got, "disk-attach@n2 status@n2 disk-detach@n2") {
		t.Errorf("calls to the primary %s: want the device the job activated deactivated", got)
	}
	// Running: nothing deactivated.
	nodes.mu.Lock()
	nodes.run["n2/"+in.UUID] = true
	nodes.mu.Unlock()
	nodes.takeCalls()
	if got := replace("n4"); strings.Contains(got, "disk-detach@n2") {
		t.Errorf("calls to the primary %s: a running instance's device was deactivated", got)
	}
}

// TestRecreateOnNewNodesRemovesOldCopies: recreate-disks that moves a
// drbd instance to new nodes removes what the nodes it left have of it
// (their devices down, their volumes removed) once the new disks are
// created and in sync; a node still kept is not touched.
func TestRecreateOnNewNodesRemovesOldCopies(t *testing.T) {
	d, nodes := drbdCluster(t, nil)
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SHUTDOWN","instance_name":"web1"}`)
	nodes.takeCalls()
	j := runOK(t, d, `{"OP_ID":"OP_INSTANCE_RECREATE_DISKS","instance_name":"web1","nodes":["n2","n4"]}`)
	wantCallsAndLog(t, nodes, j, "disk-create@n4 status@n2 disk-attach@n2 status@n2 instance-remove@n3 disk-detach@n2",
		"Changing the instance's nodes: what the older nodes have of its disks (n3) is removed once the new disks are created")
	if c := nodes.callsTo("n2"); slices.Contains(c, "instance-remove@n2") {
		t.Errorf("the kept primary's copy was removed: %v", c)
	}
}

// TestModifyAddDiskNotRunning: a disk added to an instance marked up
// whose guest does not run is created, not attached (a drbd device
// would stay primary with no guest); a running one gets it hot-plugged.
func TestModifyAddDiskNotRunning(t *testing.T) {
	d, nodes := drbdCluster(t, nil)
	in := instanceState(d, "web1")
	nodes.mu.Lock()
	nodes.run["n2/"+in.UUID] = false
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"web1","disks":[["add",-1,{"size":512}]]}`)
	if got := nodes.takeCalls(); strings.Contains(got, "disk-attach") || !strings.Contains(got, "disk-create@n2") {
		t.Errorf("calls %s: want the disk created, not attached", got)
	}
	nodes.mu.Lock()
	nodes.run["n2/"+in.UUID] = true
	nodes.mu.Unlock()
	runOK(t, d, `{"OP_ID":"OP_INSTANCE_SET_PARAMS","instance_name":"web1","disks":[["add",-1,{"size":512}]]}`)
	if got := nodes.takeCalls(); !strings.Contains(got, "disk-create@n2 disk-attach@n2") {
		t.Errorf("calls %s: want the disk hot-plugged into the running instance", got)
	}
}
