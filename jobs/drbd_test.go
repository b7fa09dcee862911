package jobs

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
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
