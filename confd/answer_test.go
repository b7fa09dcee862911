package confd

import (
	"encoding/json"
	"strings"
	"testing"
)

func dict(f func(q *Query)) Query {
	q := Query{Kind: QueryDict}
	f(&q)
	return q
}

func str(s string) Query { return Query{Kind: QueryString, Str: s} }

// TestAnswers: every request type against a small configuration, with the
// query shapes Ganeti accepts and the wrong ones.
func TestAnswers(t *testing.T) {
	st := testState(t)
	const serial = 17
	cases := []struct {
		name   string
		typ    RequestType
		q      Query
		master string
		status int
		answer string
	}{
		{"ping", ReqPing, Query{}, "", StatusOK, `10000`},
		{"ping ignores its query", ReqPing, str("x"), "", StatusOK, `10000`},

		{"role master (configuration)", ReqNodeRoleByName, str("node1"), "", StatusOK, `0`},
		{"role master by raft leader", ReqNodeRoleByName, str("node2"), "node2", StatusOK, `0`},
		{"role candidate when another leads", ReqNodeRoleByName, str("node1"), "node2", StatusOK, `1`},
		{"role unknown leader falls back", ReqNodeRoleByName, str("node1"), "nosuchnode", StatusOK, `0`},
		{"role candidate", ReqNodeRoleByName, str("node2"), "", StatusOK, `1`},
		{"role drained", ReqNodeRoleByName, str("node3"), "", StatusOK, `3`},
		{"role offline", ReqNodeRoleByName, str("node4"), "", StatusOK, `2`},
		{"role regular", ReqNodeRoleByName, str("node5"), "", StatusOK, `4`},
		{"role drained before offline and candidate", ReqNodeRoleByName, str("node6"), "", StatusOK, `3`},
		{"role by uuid", ReqNodeRoleByName, str("uuid-node5"), "", StatusOK, `4`},
		{"role unknown node", ReqNodeRoleByName, str("node9"), "", StatusError, `0`},
		{"role without query", ReqNodeRoleByName, Query{}, "", StatusError, `2`},
		{"role with dict", ReqNodeRoleByName, dict(func(q *Query) { q.HasIP, q.IP = true, "node1" }), "", StatusError, `2`},

		{"pip by ip", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP = true, "192.0.2.10" }), "", StatusOK, `"192.0.2.5"`},
		{"pip by ip, default link named", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP, q.HasLink, q.Link = true, "192.0.2.11", true, DefaultNICLink }), "", StatusOK, `"192.0.2.2"`},
		{"pip by ip, empty link is the default", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP, q.HasLink = true, "192.0.2.10", true }), "", StatusOK, `"192.0.2.5"`},
		{"pip by ip on link", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP, q.HasLink, q.Link = true, "198.51.100.10", true, "br1" }), "", StatusOK, `"192.0.2.5"`},
		{"pip by ip on the wrong link", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP = true, "198.51.100.10" }), "", StatusError, `0`},
		{"pip by unknown ip", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIP, q.IP = true, "192.0.2.99" }), "", StatusError, `0`},
		{"pip by ip list", ReqNodePipByInstanceIP, dict(func(q *Query) { q.HasIPList, q.IPList = true, []string{"192.0.2.10", "192.0.2.99", "192.0.2.11"} }), "",
			StatusOK, `[[0,"192.0.2.5",17],[1,0,17],[0,"192.0.2.2",17]]`},
		{"pip ip wins over list", ReqNodePipByInstanceIP, dict(func(q *Query) {
			q.HasIP, q.IP, q.HasIPList, q.IPList = true, "192.0.2.11", true, []string{"192.0.2.10"}
		}), "", StatusOK, `"192.0.2.2"`},
		{"pip empty dict", ReqNodePipByInstanceIP, dict(func(q *Query) {}), "", StatusOK, `[]`},
		{"pip plain string", ReqNodePipByInstanceIP, str("192.0.2.10"), "", StatusError, `2`},
		{"pip null", ReqNodePipByInstanceIP, Query{}, "", StatusError, `2`},
		{"pip bad dict", ReqNodePipByInstanceIP, dict(func(q *Query) { q.BadDict = true }), "", StatusError, `2`},

		{"master", ReqClusterMaster, Query{}, "", StatusOK, `"node1"`},
		{"master as raft says", ReqClusterMaster, Query{}, "node2", StatusOK, `"node2"`},
		{"master fields", ReqClusterMaster, dict(func(q *Query) { q.HasFields, q.Fields = true, []int{FieldMNodePip, FieldName, FieldIP} }), "node2",
			StatusOK, `["192.0.2.2","node2","192.0.2.2"]`},
		{"master no fields", ReqClusterMaster, dict(func(q *Query) {}), "", StatusOK, `[]`},
		{"master unknown field", ReqClusterMaster, dict(func(q *Query) { q.HasFields, q.Fields = true, []int{0, 3} }), "", StatusError, `2`},
		{"master plain string", ReqClusterMaster, str("node1"), "", StatusError, `2`},

		{"node pips", ReqNodePipList, Query{}, "", StatusOK, `["192.0.2.1","192.0.2.2","192.0.2.3","192.0.2.4","192.0.2.5","192.0.2.6"]`},
		{"mc pips", ReqMcPipList, Query{}, "", StatusOK, `["192.0.2.1","192.0.2.2","192.0.2.6"]`},

		{"instance ips, default link", ReqInstancesIPsList, Query{}, "", StatusOK, `["192.0.2.10","192.0.2.11"]`},
		{"instance ips, default named", ReqInstancesIPsList, str(DefaultNICLink), "", StatusOK, `["192.0.2.10","192.0.2.11"]`},
		{"instance ips on link", ReqInstancesIPsList, str("br1"), "", StatusOK, `["198.51.100.10"]`},
		{"instance ips on empty link", ReqInstancesIPsList, str("br9"), "", StatusOK, `[]`},
		{"instance ips with dict", ReqInstancesIPsList, dict(func(q *Query) {}), "", StatusError, `2`},

		{"drbd of a node without drbd", ReqNodeDrbd, str("node1"), "", StatusOK, `[]`},
		{"drbd of a node with drbd", ReqNodeDrbd, str("node5"), "", StatusOK, `[["node5",3,"inst2","disk/0","secondary","node2"],["node5",4,"inst2","disk/1","secondary","node2"]]`},
		{"drbd of a drbd primary", ReqNodeDrbd, str("node2"), "", StatusOK, `[["node2",0,"inst2","disk/0","primary","node5"],["node2",1,"inst2","disk/1","primary","node5"]]`},
		{"drbd unknown node", ReqNodeDrbd, str("nope"), "", StatusError, `0`},
		{"drbd no query", ReqNodeDrbd, Query{}, "", StatusError, `2`},

		{"node instances unknown", ReqNodeInstances, str("nope"), "", StatusError, `0`},
		{"node instances dict", ReqNodeInstances, dict(func(q *Query) {}), "", StatusError, `2`},

		{"instance disks unknown", ReqInstanceDisks, str("nope"), "", StatusError, `0`},
		{"instance disks", ReqInstanceDisks, str("inst2"), "", StatusOK, `[{"uuid":"d2","size":2048,"mode":"rw","drbd":{"port":11000,"secret":"","ends":[{"node":"uuid-node2","minor":0},{"node":"uuid-node5","minor":3}]}},{"uuid":"d3","size":10,"mode":"ro","drbd":{"port":11001,"secret":"","ends":[{"node":"uuid-node2","minor":1},{"node":"uuid-node5","minor":4}]}}]`},
		{"instance disks none", ReqInstanceDisks, str("inst3"), "", StatusOK, `[]`},
		{"instance disks null", ReqInstanceDisks, Query{}, "", StatusError, `2`},

		{"config cluster name", ReqConfigQuery, str("/cluster/name"), "", StatusOK, `"cluster.example.com"`},
		{"config serial", ReqConfigQuery, str("/serial_no"), "", StatusOK, `17`},
		{"config version", ReqConfigQuery, str("/version"), "", StatusOK, `10000`},
		{"config node field", ReqConfigQuery, str("/nodes/uuid-node3/drained"), "", StatusOK, `true`},
		{"config list index", ReqConfigQuery, str("/instances/uuid-inst1/nics/1/link"), "", StatusOK, `"br1"`},
		{"config list index out of range", ReqConfigQuery, str("/instances/uuid-inst1/nics/2"), "", StatusError, `2`},
		{"config list index leading zero", ReqConfigQuery, str("/instances/uuid-inst1/nics/01"), "", StatusError, `2`},
		{"config list index negative", ReqConfigQuery, str("/instances/uuid-inst1/nics/-1"), "", StatusError, `2`},
		{"config tags", ReqConfigQuery, str("/cluster/tags"), "", StatusOK, `["a"]`},
		{"config group by uuid", ReqConfigQuery, str("/nodegroups/uuid-group/name"), "", StatusOK, `"default"`},
		{"config missing key", ReqConfigQuery, str("/cluster/diagnose_data_collector_filename"), "", StatusError, `2`},
		{"config atomic indexed", ReqConfigQuery, str("/cluster/name/x"), "", StatusError, `2`},
		{"config unknown node", ReqConfigQuery, str("/nodes/nope"), "", StatusError, `2`},
		{"config no slash", ReqConfigQuery, str("cluster"), "", StatusError, `2`},
		{"config root", ReqConfigQuery, str(""), "", StatusError, `2`},
		{"config slash only", ReqConfigQuery, str("/"), "", StatusError, `2`},
		{"config bad escape", ReqConfigQuery, str("/cluster/~2"), "", StatusError, `2`},
		{"config null", ReqConfigQuery, Query{}, "", StatusError, `2`},

		{"data collectors", ReqDataCollectors, Query{}, "", StatusOK, `{}`},
	}
	for _, c := range cases {
		req := &Request{Protocol: 1, Type: c.typ, Query: c.q, RSalt: "r"}
		ans, status, ser := AppendAnswer(nil, View{State: st, Master: c.master, Version: 10000}, req)
		if status != c.status || string(ans) != c.answer || ser != serial {
			t.Errorf("%s: status %d answer %s serial %d; want %d %s %d", c.name, status, ans, ser, c.status, c.answer, serial)
		}
	}
}

// TestNodeDrbdUnrecorded: a drbd disk whose record has no logical id yet
// makes NODE_DRBD of its nodes NOT IMPLEMENTED, naming the instance; the
// secrets never leave in INSTANCE_DISKS, and the state keeps them.
func TestNodeDrbdUnrecorded(t *testing.T) {
	st := testState(t)
	if ans, _, _ := AppendAnswer(nil, View{State: st}, &Request{Type: ReqInstanceDisks, Query: str("inst2")}); strings.Contains(string(ans), `"ab"`) ||
		st.LookupInstance("inst2").Disks[0].DRBD.Secret != "ab" {
		t.Errorf("instance disks %s; stored secret %q", ans, st.LookupInstance("inst2").Disks[0].DRBD.Secret)
	}
	st.LookupInstance("inst2").Disks[1].DRBD = nil
	ans, status, _ := AppendAnswer(nil, View{State: st}, &Request{Type: ReqNodeDrbd, Query: str("node5")})
	if status != StatusNotImplemented || !strings.Contains(string(ans), "the drbd minors of instance inst2 are not recorded yet") {
		t.Errorf("status %d answer %s", status, ans)
	}
}

func TestNodeInstancesAnswer(t *testing.T) {
	st := testState(t)
	ans, status, _ := AppendAnswer(nil, View{State: st}, &Request{Type: ReqNodeInstances, Query: str("node5")})
	var got [2][]struct{ Name string }
	if err := json.Unmarshal(ans, &got); err != nil || status != StatusOK {
		t.Fatalf("%s: %v", ans, err)
	}
	if len(got[0]) != 1 || got[0][0].Name != "inst1" || len(got[1]) != 1 || got[1][0].Name != "inst2" || strings.Contains(string(ans), `"ab"`) {
		t.Errorf("node5 instances (drbd secrets left out): %s", ans)
	}
}

// TestConfigEscapes: RFC 6901 escapes reach keys with "/" and "~".
func TestConfigEscapes(t *testing.T) {
	toks, ok := parsePointer("/a~1b/c~0d/~01")
	if !ok || len(toks) != 3 || toks[0] != "a/b" || toks[1] != "c~d" || toks[2] != "~1" {
		t.Errorf("%q %v", toks, ok)
	}
	for _, bad := range []string{"a", "/~", "/x~", "/~2"} {
		if _, ok := parsePointer(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestEmptyConfiguration: a candidate without configuration says so,
// with serial 0, whatever the question.
func TestEmptyConfiguration(t *testing.T) {
	for _, typ := range RequestTypes() {
		ans, status, ser := AppendAnswer(nil, View{}, &Request{Type: typ})
		if status != StatusError || ser != 0 || !json.Valid(ans) {
			t.Errorf("%v: %d %s %d", typ, status, ans, ser)
		}
	}
}
