package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// nodesJSON is a bulk node listing: node1 the master, node2 with an
// instance, node3 without an OOB helper (powered null), node4 unpowered.
const nodesJSON = `[
 {"name": "node1", "role": "M", "powered": true, "pinst_list": [], "sinst_list": [], "master_candidate": true, "addrs": {}},
 {"name": "node2", "role": "C", "powered": true, "pinst_list": ["web1"], "sinst_list": [], "master_candidate": true, "addrs": {}},
 {"name": "node3", "role": "R", "powered": null, "pinst_list": [], "sinst_list": [], "addrs": {}},
 {"name": "node4", "role": "O", "powered": false, "offline": true, "pinst_list": [], "sinst_list": [], "addrs": {}}]`

func oobJob(result string) string {
	return `{"id": 7, "status": "success", "ops": [{}], "opstatus": ["success"], "opresult": [` + result + `], "oplog": [[]], "summary": ["OOB_COMMAND"]}`
}

// submitted decodes the opcodes of the job the client submitted.
func submitted(t *testing.T, f *fakeAPI) []map[string]any {
	t.Helper()
	for _, r := range f.requests() {
		if r.Method == "POST" && r.Path == "/2/jobs" {
			var body struct {
				Ops []map[string]any `json:"ops"`
			}
			if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
				t.Fatal(err)
			}
			for _, op := range body.Ops {
				delete(op, "reason")
			}
			return body.Ops
		}
	}
	t.Fatal("no job submitted")
	return nil
}

func compactJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// gntIn runs the client with stdin and whether it is a terminal.
func gntIn(t *testing.T, stdin string, terminal bool, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runEnv(context.Background(), append([]string{"gnt"}, args...),
		environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }, plainHTTP: true,
			stdin: strings.NewReader(stdin), terminal: terminal})
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err, code: exitCode(err)}
}

func TestNodePowerJobs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ops  string
		out  string
	}{
		{[]string{"node", "power", "off", "node4"},
			`[{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"node4","offline":true},{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["node4"]}]`,
			"Node  Status\nnode4 powered off\n"},
		{[]string{"node", "power", "off", "node4", "--ignore-status", "--oob-timeout", "20"},
			`[{"OP_ID":"OP_OOB_COMMAND","command":"power-off","ignore_status":true,"node_names":["node4"],"timeout":20}]`, ""},
		{[]string{"node", "power", "off", "node1", "node4", "--auto-promote"},
			`[{"OP_ID":"OP_NODE_SET_PARAMS","auto_promote":true,"node_name":"node4","offline":true},{"OP_ID":"OP_OOB_COMMAND","command":"power-off","node_names":["node1","node4"],"transfer_leadership":true}]`,
			"Node node1 is the master node: its master role is handed to another master candidate first\n"},
		{[]string{"node", "power", "on", "node4", "--power-delay", "0.5"},
			`[{"OP_ID":"OP_OOB_COMMAND","command":"power-on","node_names":["node4"],"power_delay":0.5}]`, ""},
		{[]string{"node", "power", "cycle", "node1", "--force"},
			`[{"OP_ID":"OP_OOB_COMMAND","command":"power-cycle","node_names":["node1"],"transfer_leadership":true}]`, ""},
		{[]string{"node", "power", "status"}, `[{"OP_ID":"OP_OOB_COMMAND","command":"power-status"}]`, ""},
		// Without nodes and with --force: every node with a helper, the
		// master left out of off and cycle.
		{[]string{"node", "power", "off", "--force", "--ignore-status"},
			`[{"OP_ID":"OP_OOB_COMMAND","command":"power-off","ignore_status":true,"node_names":["node2","node4"]}]`, ""},
		{[]string{"node", "power", "on", "--force"},
			`[{"OP_ID":"OP_OOB_COMMAND","command":"power-on","node_names":["node1","node2","node4"]}]`, ""},
		{[]string{"node", "health", "node1"}, `[{"OP_ID":"OP_OOB_COMMAND","command":"health","node_names":["node1"]}]`, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := newFake(t)
			f.on("GET", "/2/nodes", 200, nodesJSON)
			f.on("GET", "/2/jobs/7", 200, oobJob(`[[[0,"node4"],[0,null]]]`))
			r := gnt(t, nil, append([]string{"--server", f.addr()}, tc.args...)...)
			if r.code != 0 && !strings.Contains(tc.args[1], "health") {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := compactJSON(submitted(t, f)); got != tc.ops {
				t.Errorf("opcodes\n got %s\nwant %s", got, tc.ops)
			}
			if !strings.Contains(r.stdout, tc.out) {
				t.Errorf("stdout %q lacks %q", r.stdout, tc.out)
			}
		})
	}
}

func TestNodePowerStatusTable(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/nodes", 200, nodesJSON)
	f.on("GET", "/2/jobs/7", 200, oobJob(`[[[0,"node1"],[0,{"powered":true}]],[[0,"node2"],[2,null]],[[0,"node4"],[0,{"powered":false}]]]`))
	r := gnt(t, nil, "--server", f.addr(), "node", "power", "status")
	want := "Node  Power Status\nnode1 on\nnode2 unknown\nnode4 off\n"
	if r.stdout != want || r.code != 1 || !strings.Contains(r.stderr, "power-status failed on 1 node(s)") {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %s", r.code, r.stdout, want, r.stderr)
	}
}

func TestNodeHealthTable(t *testing.T) {
	f := newFake(t)
	f.on("GET", "/2/jobs/7", 200, oobJob(`[[[0,"node1"],[0,[["Ambient Temp","OK"],["FAN 1","CRITICAL"]]]],[[0,"node2"],[0,[]]]]`))
	r := gnt(t, nil, "--server", f.addr(), "node", "health")
	want := "Node  Status\nnode1 Ambient Temp=OK\n      FAN 1=CRITICAL\nnode2 (no items)\n"
	if r.stdout != want || r.code != 0 {
		t.Errorf("exit %d %s\nstdout %q\nwant   %q", r.code, r.stderr, r.stdout, want)
	}
}

// TestNodePowerPrompts: no nodes named, or instances on a node to power
// off, ask first; without a terminal the client refuses; --force skips.
func TestNodePowerPrompts(t *testing.T) {
	setup := func(t *testing.T) *fakeAPI {
		f := newFake(t)
		f.on("GET", "/2/nodes", 200, nodesJSON)
		f.on("GET", "/2/jobs/7", 200, oobJob(`[]`))
		return f
	}
	jobs := func(f *fakeAPI) int {
		n := 0
		for _, r := range f.requests() {
			if r.Method == "POST" {
				n++
			}
		}
		return n
	}
	t.Run("no terminal", func(t *testing.T) {
		f := setup(t)
		r := gntIn(t, "y\n", false, "--server", f.addr(), "node", "power", "off")
		if r.code != 1 || !strings.Contains(r.stderr, "refusing to power off node2, node4 without confirmation: stdin is not a terminal (use --force)") || jobs(f) != 0 {
			t.Errorf("exit %d jobs %d: %s", r.code, jobs(f), r.stderr)
		}
	})
	t.Run("answer no", func(t *testing.T) {
		f := setup(t)
		r := gntIn(t, "n\n", true, "--server", f.addr(), "node", "power", "cycle")
		if r.code != 1 || !strings.Contains(r.stdout, "Do you really want to power cycle the following nodes: node2, node4? y/[n]/?:") ||
			!strings.Contains(r.stderr, "aborted") || jobs(f) != 0 {
			t.Errorf("exit %d jobs %d: %s %s", r.code, jobs(f), r.stdout, r.stderr)
		}
	})
	t.Run("answer yes after a bad answer", func(t *testing.T) {
		f := setup(t)
		r := gntIn(t, "maybe\nyes\n", true, "--server", f.addr(), "node", "power", "on")
		if r.code != 0 || strings.Count(r.stdout, "y/[n]/?:") != 2 || jobs(f) != 1 {
			t.Errorf("exit %d jobs %d: %s %s", r.code, jobs(f), r.stdout, r.stderr)
		}
	})
	t.Run("instances", func(t *testing.T) {
		f := setup(t)
		r := gntIn(t, "", false, "--server", f.addr(), "node", "power", "off", "node2")
		if r.code != 1 || !strings.Contains(r.stderr, "WARNING: node node2 has instances: web1") ||
			!strings.Contains(r.stderr, "refusing to power off node2 with instances without confirmation") || jobs(f) != 0 {
			t.Errorf("exit %d jobs %d: %s", r.code, jobs(f), r.stderr)
		}
		r = gntIn(t, "y\n", true, "--server", f.addr(), "node", "power", "off", "node2")
		if r.code != 0 || !strings.Contains(r.stdout, "Do you really want to power off node2, which has instances? y/[n]/?:") || jobs(f) != 1 {
			t.Errorf("exit %d jobs %d: %s %s", r.code, jobs(f), r.stdout, r.stderr)
		}
	})
	t.Run("named nodes without instances need no terminal", func(t *testing.T) {
		f := setup(t)
		if r := gntIn(t, "", false, "--server", f.addr(), "node", "power", "off", "node4"); r.code != 0 || jobs(f) != 1 {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
}

func TestClusterEpoCLI(t *testing.T) {
	plan := `{"id": 7, "status": "success", "ops": [{}], "opstatus": ["success"], "opresult": [{"plan": {"selected": ["node2","node4"]}}],
	 "oplog": [[[1, [0, 0], "message", "EPO off: selected nodes node2, node4"]]], "summary": ["CLUSTER_EPO(off)"]}`
	t.Run("force", func(t *testing.T) {
		f := newFake(t)
		f.on("GET", "/2/jobs/7", 200, plan)
		r := gnt(t, nil, "--server", f.addr(), "cluster", "epo", "--groups", "default", "--force")
		if r.code != 0 || compactJSON(submitted(t, f)) != `[{"OP_ID":"OP_CLUSTER_EPO","groups":true,"names":["default"]}]` {
			t.Errorf("exit %d %s: %v", r.code, r.stderr, f.requests())
		}
	})
	t.Run("confirmed", func(t *testing.T) {
		f := newFake(t)
		f.on("GET", "/2/jobs/7", 200, plan)
		r := gntIn(t, "y\n", true, "--server", f.addr(), "cluster", "epo", "--on", "node2", "node4", "--power-delay", "1")
		var posts []request
		for _, q := range f.requests() {
			if q.Method == "POST" {
				posts = append(posts, q)
			}
		}
		if r.code != 0 || len(posts) != 2 || posts[0].Query.Get("dry-run") != "1" || posts[1].Query.Get("dry-run") != "" ||
			!strings.Contains(r.stdout, "EPO off: selected nodes node2, node4") ||
			!strings.Contains(r.stdout, "Do you really want to epo --on the following nodes: node2, node4? y/[n]/?:") ||
			compactJSON(submitted(t, f)) != `[{"OP_ID":"OP_CLUSTER_EPO","names":["node2","node4"],"on":true,"power_delay":1}]` {
			t.Errorf("exit %d %s\n%s\n%v", r.code, r.stderr, r.stdout, posts)
		}
	})
	t.Run("no terminal", func(t *testing.T) {
		f := newFake(t)
		f.on("GET", "/2/jobs/7", 200, plan)
		r := gntIn(t, "", false, "--server", f.addr(), "cluster", "epo", "--all")
		if r.code != 1 || !strings.Contains(r.stderr, "refusing to epo node2, node4 without confirmation") || len(f.requests()) != 2 {
			t.Errorf("exit %d %s %v", r.code, r.stderr, f.requests())
		}
	})
	for _, args := range [][]string{{"--all", "--groups"}, {"--all", "node1"}, {}, {"--submit", "node1"}} {
		f := newFake(t)
		if r := gnt(t, nil, append([]string{"--server", f.addr(), "cluster", "epo"}, args...)...); r.code != 2 {
			t.Errorf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
}

func TestClusterVerifyCLI(t *testing.T) {
	// node1 (a candidate) answers the OOB check itself: this fake.
	f := newFake(t)
	nodes := strings.ReplaceAll(nodesJSON, `"master_candidate": true, "addrs": {}`, `"master_candidate": true, "addrs": {"api": "`+f.addr()+`"}`)
	f.on("GET", "/2/nodes", 200, nodes)
	f.on("GET", "/2/gnt/oob-check", 200, `{"node": "node1", "programs": [{"path": "/opt/oob", "nodes": ["node1","node2","node4"], "error": "out of band helper /opt/oob is not executable"}]}`)
	f.on("GET", "/2/jobs/7", 200, oobJob(`[[[0,"node1"],[0,{"powered":true}]],[[0,"node2"],[0,{"powered":false}]],[[0,"node4"],[2,null]]]`))
	r := gnt(t, nil, "--server", f.addr(), "cluster", "verify")
	for _, want := range []string{
		"* Verifying the OOB helpers on the master candidates\n",
		"  - ERROR: node node1: out of band helper /opt/oob is not executable (the OOB helper of node1, node2, node4)\n",
		"  - ERROR: node node2: recorded power state (on) does not match the OOB helper's (off); fix the record with 'gnt node modify node2 --powered no' if the helper is right\n",
		"  - WARNING: node node4: its OOB helper did not tell its power state (see job 7)\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	// Both candidates (node1, node2) answer from this fake: two helper
	// errors, one mismatch.
	if r.code != 1 || !strings.Contains(r.stderr, "cluster verify found 3 error(s)") {
		t.Errorf("exit %d %s", r.code, r.stderr)
	}
}

// TestNodeInfoPowered: gnt node info shows the power state only for
// nodes with an OOB helper.
func TestNodeInfoPowered(t *testing.T) {
	var with, without bytes.Buffer
	showNode(&with, object{"name": "node1", "powered": false})
	showNode(&without, object{"name": "node3", "powered": nil})
	if !strings.Contains(with.String(), "  powered: False\n") || strings.Contains(without.String(), "powered") {
		t.Errorf("with a helper:\n%s\nwithout:\n%s", with.String(), without.String())
	}
}
