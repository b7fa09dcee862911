package rpc_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// bridging is a backend whose nodes have the bridges of have (a node
// not in it: none), recording what it was asked.
type bridging struct {
	*rpctest.Backend
	mu    sync.Mutex
	have  map[string][]string
	asked chan string
}

func (b *bridging) NodeMissingBridges(_ context.Context, n *fsm.Node, names []string) (map[string]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked <- n.Name + ":" + strings.Join(names, ",")
	out := map[string]string{}
	for _, name := range names {
		if !slices.Contains(b.have[n.Name], name) {
			out[name] = "does not exist"
		}
	}
	return out, nil
}

// takeAsked returns what was asked since the last call.
func (b *bridging) takeAsked() []string {
	var a []string
	for {
		select {
		case q := <-b.asked:
			a = append(a, q)
		default:
			return a
		}
	}
}

// TestClusterNICParamsBridges: a cluster modify changing the default NIC
// link (or mode) asks the primary node of every instance whose bridged
// NICs take the default whether the new bridge exists, and is refused
// (409, naming the bridge, the node and the instances) with nothing
// changed when one lacks it, a dry run too; NICs with a link or mode of
// their own, and offline nodes, are not asked about. With the bridge
// there the change is made.
func TestClusterNICParamsBridges(t *testing.T) {
	b := &bridging{Backend: rpctest.NewCluster(), have: map[string][]string{}, asked: make(chan string, 16)}
	addNode(t, b.Backend, "node2", "192.0.2.2")
	addNode(t, b.Backend, "node3", "192.0.2.3")
	if r, _, _ := b.ApplyCommand(jobSubmit(b.Backend, `{"OP_ID":"OP_NODE_SET_PARAMS","node_name":"node3","offline":true}`)); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, in := range []fsm.Instance{
		{Name: "i1", UUID: "u1", PrimaryNode: nodeOf(b.Backend, "node1").UUID, NICs: []fsm.NIC{{MAC: "aa:00:00:00:00:01"}}},
		{Name: "i2", UUID: "u2", PrimaryNode: nodeOf(b.Backend, "node2").UUID, NICs: []fsm.NIC{
			{MAC: "aa:00:00:00:00:02", Link: "br7"},
			{MAC: "aa:00:00:00:00:03", Mode: fsm.NICModeRouted, IP: "198.51.100.3"}}},
		{Name: "i3", UUID: "u3", PrimaryNode: nodeOf(b.Backend, "node1").UUID, NICs: []fsm.NIC{{MAC: "aa:00:00:00:00:04", Mode: fsm.NICModeBridged}}},
		{Name: "i4", UUID: "u4", PrimaryNode: nodeOf(b.Backend, "node3").UUID, NICs: []fsm.NIC{{MAC: "aa:00:00:00:00:05"}}},
	} {
		in.OS, in.AdminState, in.DiskTemplate = "debian", "up", "diskless"
		if err := b.AddInstance(in); err != nil {
			t.Fatal(err)
		}
	}
	srv := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	state := func() string {
		return readState(b.Backend, func(st *fsm.State) string {
			return fmt.Sprint(st.Cluster.NICParams, st.Cluster.SerialNo, len(st.Jobs))
		})
	}
	before := state()
	for _, path := range []string{"/2/modify", "/2/modify?dry-run=1"} {
		r := doHTTP(t, ts.URL, "PUT", path, `{"nicparams":{"link":"br9"}}`)
		want := `bridge "br9" does not exist on node node1 (used by the NICs of i1, i3)`
		if r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, want) {
			t.Errorf("PUT %s: %s, want 409 with %q", path, r, want)
		}
		if a := b.takeAsked(); !slices.Equal(a, []string{"node1:br9"}) {
			t.Errorf("PUT %s asked %v, want node1 about br9 only", path, a)
		}
		if s := state(); s != before {
			t.Errorf("PUT %s changed the state: %s, was %s", path, s, before)
		}
	}
	// Other parameters are not checked.
	if r := doHTTP(t, ts.URL, "PUT", "/2/modify", `{"nicparams":{"vlan":""}}`); r.status != http.StatusOK {
		t.Errorf("vlan: %s", r)
	}
	if a := b.takeAsked(); len(a) != 0 {
		t.Errorf("vlan asked %v", a)
	}
	b.mu.Lock()
	b.have["node1"] = []string{"br9"}
	b.mu.Unlock()
	if r := doHTTP(t, ts.URL, "PUT", "/2/modify", `{"nicparams":{"link":"br9"}}`); r.status != http.StatusOK {
		t.Errorf("with br9 on node1: %s", r)
	}
	if a := b.takeAsked(); !slices.Equal(a, []string{"node1:br9"}) {
		t.Errorf("asked %v", a)
	}
	if l := readState(b.Backend, func(st *fsm.State) any { return st.Cluster.NICParams["link"] }); l != "br9" {
		t.Errorf("link after the change: %v", l)
	}
}
