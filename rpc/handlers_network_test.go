package rpc_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// TestNetworkRoutes: the /2/networks resources create, connect, show
// (with the addresses a NIC uses), tag and refuse to remove a network,
// and refuse bad input naming the field.
func TestNetworkRoutes(t *testing.T) {
	b := rpctest.NewCluster()
	e := newEnv(t, b)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/2/networks", `{"name":"lan","network":"10.9.0.0/28","gateway":"10.9.0.1","gateway6":null,"network6":null,"mac_prefix":null,"add_reserved_ips":["10.9.0.2"],"tags":["a"]}`},
		{"PUT", "/2/networks/lan/connect", `{"group_name":"default","network_mode":"bridged","network_link":"br0","network_vlan":""}`},
		{"PUT", "/2/networks/lan/tags?tag=b", ""},
	} {
		sep := "?"
		if strings.Contains(c.path, "?") {
			sep = "&"
		}
		if r := e.do(c.method, c.path+sep+"wait=10s", c.body); r.status != http.StatusOK {
			t.Fatalf("%s %s: %s", c.method, c.path, r)
		}
	}
	var nu string
	b.FSM().Read(func(st *fsm.State, _ uint64) { nu = st.LookupNetwork("lan").UUID })
	n1 := nodeOf(b, "node1").UUID
	if err := b.AddInstance(fsm.Instance{Name: "web", UUID: "u-web", PrimaryNode: n1, DiskTemplate: "diskless", AdminState: "down",
		NICs: []fsm.NIC{{UUID: "nic0", MAC: "aa:00:00:00:00:01", IP: "10.9.0.3", Mode: "bridged", Link: "br0", Network: nu}}, Tags: []string{}}); err != nil {
		t.Fatal(err)
	}

	r := e.do("GET", "/2/networks/lan", "")
	var got rpc.NetworkInfo
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET: %s", r)
	}
	if got.Network != "10.9.0.0/28" || *got.Gateway != "10.9.0.1" || got.Network6 != nil || got.FreeCount != 11 || got.Reserved != 5 ||
		got.Map != "XXXX...........X" || got.ExternalReservations != "10.9.0.0, 10.9.0.1, 10.9.0.2, 10.9.0.15" ||
		strings.Join(got.InstList, ",") != "web" || len(got.GroupList) != 1 || strings.Join(got.GroupList[0], ",") != "default,bridged,br0," ||
		strings.Join(got.Tags, ",") != "a,b" || got.UUID != nu {
		t.Errorf("GET /2/networks/lan: %s", r)
	}
	var fields map[string]any
	_ = json.Unmarshal(r.body, &fields)
	for _, f := range rpc.NetworkFieldNames {
		if _, ok := fields[f]; !ok {
			t.Errorf("field %s missing", f)
		}
	}
	if r := e.do("GET", "/2/networks", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `{"name":"lan","uri":"/2/networks/lan"}`) {
		t.Errorf("list: %s", r)
	}
	if r := e.do("GET", "/2/networks?bulk=1", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"free_count":11`) {
		t.Errorf("bulk: %s", r)
	}
	if r := e.do("GET", "/2/networks/lan/tags", ""); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `["a","b"]` {
		t.Errorf("tags: %s", r)
	}
	if r := e.do("GET", "/2/instances/web", ""); !strings.Contains(string(r.body), `"nic.networks.names":["lan"]`) {
		t.Errorf("instance: %s", r)
	}
	if r := e.do("GET", "/2/query/network?fields=name,free_count,inst_cnt", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `[[0,"lan"],[0,11],[0,1]]`) {
		t.Errorf("query: %s", r)
	}
	if r := e.do("GET", "/2/networks/nosuch", ""); r.status != http.StatusNotFound {
		t.Errorf("an unknown network: %s", r)
	}

	// Refused: bad input names the field; removal of a connected network
	// and disconnection while a NIC uses it change nothing.
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/2/networks", `{"network_name":"big","network":"10.0.0.0/8"}`, "network"},
		{"POST", "/2/networks", `{"network_name":"g","network":"10.1.0.0/24","gateway":"10.2.0.1"}`, "gateway"},
		{"POST", "/2/networks", `{"network":"10.1.0.0/24"}`, "network_name"},
		{"POST", "/2/networks", `{"network_name":"lan","network":"10.1.0.0/24"}`, "network_name"},
		{"PUT", "/2/networks/lan/modify", `{"add_reserved_ips":["10.9.0.3"]}`, "add_reserved_ips"},
		{"PUT", "/2/networks/lan/modify", `{"network_name":"other","mac_prefix":"aa:bb:cc"}`, "network_name"},
		{"PUT", "/2/networks/lan/connect", `{"group_name":"default","network_mode":"nat","network_link":"br0"}`, "network_mode"},
		{"DELETE", "/2/networks/lan", "", "network_name"},
		{"PUT", "/2/networks/lan/disconnect", `{"group_name":"default"}`, "network_name"},
		{"PUT", "/2/networks/a%20b/modify", `{"mac_prefix":"aa:bb:cc"}`, "network_name"},
	} {
		before := configOf(t, b)
		r := e.do(c.method, c.path+"?wait=10s", c.body)
		if r.status < 400 {
			t.Errorf("%s %s %s: accepted: %s", c.method, c.path, c.body, r)
			continue
		}
		if ae := r.apiError(t); ae.Field != c.field {
			t.Errorf("%s %s %s: %s, want field %s", c.method, c.path, c.body, r, c.field)
		}
		if configOf(t, b) != before {
			t.Errorf("%s %s: a refused change changed the configuration", c.method, c.path)
		}
	}
}

// configOf is the networks and instances of the state as JSON.
func configOf(t *testing.T, b *rpctest.Backend) string {
	t.Helper()
	var out []byte
	b.FSM().Read(func(st *fsm.State, _ uint64) {
		out, _ = json.Marshal(map[string]any{"networks": st.Networks, "instances": st.Instances})
	})
	return string(out)
}
