package jobs

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// storageAgents answers storage-list with the same units on every node
// (the node's name in the file unit's), and records the modify and repair
// calls.
type storageAgents struct {
	mu    sync.Mutex
	calls []NodeCall
	down  string // a node that does not answer
}

func (a *storageAgents) Call(_ context.Context, node *fsm.Node, c NodeCall) (NodeReply, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
	if node.Name == a.down {
		return NodeReply{}, &NodeCallError{Code: "transport", Msg: "connection refused"}
	}
	switch c.Op {
	case NodeOpStorageList:
		r := NodeReply{Storage: []StorageUnit{
			{Type: fsm.StorageFile, Name: "/srv/" + node.Name, Size: 100, Used: 40, Free: 60, Allocatable: true},
			{Type: fsm.StorageLVMPV, Name: "/dev/sdb", Size: 50, Used: 50, Free: 0, Allocatable: false},
			{Type: fsm.StorageLVMPV, Name: "/dev/sda", Size: 70, Used: 20, Free: 50, Allocatable: true},
			{Type: fsm.StorageLVMVG, Name: "xenvg", Size: 120, Used: 70, Free: 50, Allocatable: true},
		}}
		if node.Name == "n2" {
			r.StorageErrors = []string{"pvs: something odd"}
		}
		return r, nil
	case NodeOpStorageModify, NodeOpStorageRepair:
		return NodeReply{Changed: true}, nil
	}
	return NodeReply{}, &NodeCallError{Code: "not_supported", Msg: c.Op}
}

// TestStorageOpcodes: OP_NODE_QUERY_STORAGE's result is the rows of the
// units of the type (and name) asked, fields in the order asked, by node
// and name, with a node's failed listings in the log; a missing node
// fails the job; modify and repair hand the unit to the node's agent.
func TestStorageOpcodes(t *testing.T) {
	d, epoch := instanceSetup(t)
	agents := &storageAgents{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Executor{FSM: d.f, Apply: d, Epoch: epoch, Concurrency: 2, Strategy: fastStrategy, Nodes: agents}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()

	rows := func(op string) ([][]any, *fsm.Job) {
		t.Helper()
		j := waitStatus(t, d.f, submit(t, d, op), fsm.StatusSuccess)
		var out [][]any
		if err := json.Unmarshal(j.Ops[0].Result, &out); err != nil {
			t.Fatalf("%s: result %s: %v", op, j.Ops[0].Result, err)
		}
		return out, j
	}
	got, j := rows(`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["n2"],"storage_type":"lvm-pv","output_fields":["name","free","allocatable","node"]}`)
	b, _ := json.Marshal(got)
	if string(b) != `[["/dev/sda",50,true,"n2"],["/dev/sdb",0,false,"n2"]]` {
		t.Errorf("lvm-pv of n2: %s", b)
	}
	if !strings.Contains(logText(j), "warning: on n2: pvs: something odd") {
		t.Errorf("log %q lacks the failed listing", logText(j))
	}
	got, _ = rows(`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":[],"storage_type":"file","output_fields":["node","name","size","used"]}`)
	if len(got) < 2 {
		t.Fatalf("file units of every node: %v", got)
	}
	prev := ""
	for _, r := range got {
		node, _ := r[0].(string)
		if node <= prev || r[1] != "/srv/"+node || r[2] != float64(100) || r[3] != float64(40) {
			t.Errorf("file units of every node, by node: %v", got)
		}
		prev = node
	}
	got, _ = rows(`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["n1"],"storage_type":"lvm-vg","output_fields":["type"],"name":"nonexistent"}`)
	if len(got) != 0 {
		t.Errorf("a name no unit has: %v", got)
	}

	j = waitStatus(t, d.f, submit(t, d, `{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["n1","n9"],"storage_type":"file","output_fields":["name"]}`), fsm.StatusError)
	if !strings.Contains(string(j.Ops[0].Result), "no such node: n9") {
		t.Errorf("missing node: %s", j.Ops[0].Result)
	}

	agents.mu.Lock()
	agents.down = "n1"
	agents.mu.Unlock()
	got, j = rows(`{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["n1","n2"],"storage_type":"lvm-vg","output_fields":["node"]}`)
	if b, _ := json.Marshal(got); string(b) != `[["n2"]]` || !strings.Contains(logText(j), "warning: the storage units of n1 are not listed") {
		t.Errorf("n1 down, of n1 and n2: %s, log %q", b, logText(j))
	}
	j = waitStatus(t, d.f, submit(t, d, `{"OP_ID":"OP_NODE_QUERY_STORAGE","nodes":["n1"],"storage_type":"lvm-vg","output_fields":["node"]}`), fsm.StatusError)
	if !strings.Contains(string(j.Ops[0].Result), "connection refused") {
		t.Errorf("n1 down, asked alone: %s", j.Ops[0].Result)
	}
	agents.mu.Lock()
	agents.down = ""
	agents.mu.Unlock()

	waitStatus(t, d.f, submit(t, d, `{"OP_ID":"OP_NODE_MODIFY_STORAGE","node_name":"n2","storage_type":"lvm-pv","name":"/dev/sdb","changes":{"allocatable":true}}`), fsm.StatusSuccess)
	waitStatus(t, d.f, submit(t, d, `{"OP_ID":"OP_REPAIR_NODE_STORAGE","node_name":"n2","storage_type":"lvm-vg","name":"xenvg"}`), fsm.StatusSuccess)
	agents.mu.Lock()
	defer agents.mu.Unlock()
	var mod, rep *NodeCall
	for i := range agents.calls {
		switch agents.calls[i].Op {
		case NodeOpStorageModify:
			mod = &agents.calls[i]
		case NodeOpStorageRepair:
			rep = &agents.calls[i]
		}
	}
	if mod == nil || mod.StorageName != "/dev/sdb" || mod.Allocatable == nil || !*mod.Allocatable {
		t.Errorf("modify call %+v", mod)
	}
	if rep == nil || rep.StorageName != "xenvg" {
		t.Errorf("repair call %+v", rep)
	}
}
