package main

import (
	"strings"
	"testing"
)

const infoInstance = `{"name": "web1", "uuid": "u1", "admin_state": "up", "pnode": "n1", "snodes": ["n2"],
 "disk_template": "drbd", "disk.sizes": [1024, 2048], "beparams": {"memory": 512, "vcpus": 1}}`

// TestInstanceInfoDiskStatus: gnt instance info runs the /info job
// (OP_INSTANCE_QUERY_DATA) and shows each disk's status on the primary and
// the secondary; --static runs it static (no node asked: the drbd ids
// only); a failed job leaves the reason in
// place of the status.
func TestInstanceInfoDiskStatus(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/instances/web1", 200, infoInstance)
	f.on("POST", "/2/jobs", 200, `7`)
	f.on("GET", "/2/jobs/7", 200, `{"id": 7, "status": "success", "opstatus": ["success"], "oplog": [[]],
	  "opresult": [{"web1": {"config_state": "up", "run_state": "down", "disks": [
	    {"pstatus": ["/dev/xenvg/d0", null, null, null, null, false, 1], "sstatus": ["/dev/xenvg/d0", null, null, null, null, false, 1]},
	    {"pstatus": ["/dev/xenvg/d1", null, null, null, null, false, 1], "sstatus": null}]}}]}`)
	r := gnt(t, nil, "--server", f.addr(), "instance", "info", "web1")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	reqs := f.requests()
	if len(reqs) < 1 || !strings.HasPrefix(reqs[0].String(), `POST /2/jobs {"ops":[{"OP_ID":"OP_INSTANCE_QUERY_DATA","instances":["web1"],"static":false}]`) {
		t.Errorf("requests %v: want the /info job first", reqs)
	}
	for _, want := range []string{
		"State: configured to be up, actual state is down\n",
		"    - disk/0: size 1.0G\n      on primary: /dev/xenvg/d0, status ok\n      on secondary: /dev/xenvg/d0, status ok\n",
		"      on secondary: no status (the node does not hold the disk, or is offline)\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}

	// --static: a static /info job (no node asked), its drbd ids shown,
	// no status line.
	g := newFake(t)
	g.on("GET", "/2/instances/web1", 200, infoInstance)
	g.on("POST", "/2/jobs", 200, `6`)
	g.on("GET", "/2/jobs/6", 200, `{"id": 6, "status": "success", "opstatus": ["success"], "oplog": [[]],
	  "opresult": [{"web1": {"config_state": "up", "run_state": null, "disks": [
	    {"drbd_info": {"port": 11000, "primary_node": "n1", "primary_minor": 0, "secondary_node": "n2", "secondary_minor": 3}, "pstatus": null, "sstatus": null},
	    {"drbd_info": {"port": 11001, "primary_node": "n1", "primary_minor": 1, "secondary_node": "n2", "secondary_minor": 4}, "pstatus": null, "sstatus": null}]}}]}`)
	r = gnt(t, nil, "--server", g.addr(), "instance", "info", "--static", "web1")
	if r.code != 0 || strings.Contains(r.stdout, "on primary") || !strings.Contains(r.stdout, "State: configured to be up\n") ||
		!strings.Contains(r.stdout, "    - disk/1: size 2.0G\n      drbd: port 11001, primary n1 minor 1, secondary n2 minor 4\n") {
		t.Errorf("--static: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if reqs := g.requests(); len(reqs) < 1 || !strings.HasPrefix(reqs[0].String(), `POST /2/jobs {"ops":[{"OP_ID":"OP_INSTANCE_QUERY_DATA","instances":["web1"],"static":true}]`) {
		t.Errorf("--static: requests %v: want a static /info job", reqs)
	}

	// A drbd disk: its port and minors, each side's device and sync.
	k := newFake(t)
	k.on("GET", "/2/instances/web1", 200, infoInstance)
	k.on("POST", "/2/jobs", 200, `9`)
	k.on("GET", "/2/jobs/9", 200, `{"id": 9, "status": "success", "opstatus": ["success"], "oplog": [[]],
	  "opresult": [{"web1": {"config_state": "up", "run_state": "up", "disks": [
	    {"drbd_info": {"port": 11000, "primary_node": "n1", "primary_minor": 0, "secondary_node": "n2", "secondary_minor": 3},
	     "pstatus": ["/dev/drbd0", 147, 0, 40.5, 20, true, 1], "sstatus": ["/dev/drbd3", 147, 3, 40.5, null, true, 2]},
	    {"drbd_info": {"port": 11001, "primary_node": "n1", "primary_minor": 1, "secondary_node": "n2", "secondary_minor": 4},
	     "pstatus": ["/dev/drbd1", 147, 1, null, null, false, 1], "sstatus": ["/dev/drbd4", 147, 4, null, null, true, 4]}]}}]}`)
	r = gnt(t, nil, "--server", k.addr(), "instance", "info", "web1")
	for _, want := range []string{
		"    - disk/0: size 1.0G\n      drbd: port 11000, primary n1 minor 0, secondary n2 minor 3\n" +
			"      on primary: /dev/drbd0 (147:0), *RECOVERING* 40.5%, ETA 20s, status ok\n" +
			"      on secondary: /dev/drbd3 (147:3), *RECOVERING* 40.5%, ETA unknown, status sync\n",
		"      on primary: /dev/drbd1 (147:1), in sync, status ok\n      on secondary: /dev/drbd4 (147:4), *DEGRADED*, status faulty\n",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("drbd: exit %d, stdout lacks %q:\n%s", r.code, want, r.stdout)
		}
	}

	h := newFake(t)
	h.on("GET", "/2/instances/web1", 200, infoInstance)
	h.on("POST", "/2/jobs", 200, `8`)
	h.on("GET", "/2/jobs/8", 200, `{"id": 8, "status": "error", "opstatus": ["error"], "oplog": [[]],
	  "opresult": [{"code": "wrong_state", "message": "querying instance web1: node n1 is dead"}]}`)
	r = gnt(t, nil, "--server", h.addr(), "instance", "info", "web1")
	if r.code != 0 || !strings.Contains(r.stdout, "status: unknown: ") || !strings.Contains(r.stdout, "node n1 is dead") {
		t.Errorf("a failed /info job: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
