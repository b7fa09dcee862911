package rpc_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// rejoinCluster is a one-leader fake cluster whose Raft configuration
// holds node1 and node2.
func rejoinCluster(t testing.TB) (*rpctest.Backend, string) {
	b := rpctest.NewCluster()
	b.SetPeers([]rpc.Peer{{ID: "node1", Suffrage: "voter", Leader: true}, {ID: "node2", Suffrage: "voter"}})
	var uuid string
	b.FSM().Read(func(s *fsm.State, _ uint64) { uuid = s.Cluster.UUID })
	return b, uuid
}

func addNode2(t *testing.T, e *env) {
	t.Helper()
	if _, _, err := e.c.AddNode(ctx(t), rpc.AddNodeRequest{NodeName: "node2", PrimaryIP: "192.0.2.2"}, ""); err != nil {
		t.Fatal(err)
	}
}

func TestRejoinBadInput(t *testing.T) {
	b, uuid := rejoinCluster(t)
	e := newEnv(t, b)
	addNode2(t, e)
	key := b.JoinKey()
	now := time.Now().Unix()
	good := `{"node":"node1","cluster_uuid":"` + uuid + `"}`
	signed := func(body string) []string {
		return []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, []byte(body))}
	}
	cases := []struct {
		name   string
		hdr    []string
		body   string
		status int
		code   string
		field  string
	}{
		{"no headers", nil, good, 401, rpc.CodeUnauthorized, ""},
		{"wrong key", []string{rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign([]byte("other"), now, []byte(good))}, good, 401, rpc.CodeUnauthorized, ""},
		{"stale", []string{rpc.HeaderTimestamp, strconv.FormatInt(now-360, 10), rpc.HeaderSignature, rpc.Sign(key, now-360, []byte(good))}, good, 401, rpc.CodeUnauthorized, ""},
		{"other body", signed(good + " "), good, 401, rpc.CodeUnauthorized, ""},
	}
	for _, c := range []struct{ name, body, field string }{
		{"unknown field", `{"node":"node2","cluster_uuid":"x","bogus":1}`, "bogus"},
		{"wrong type", `{"node":5,"cluster_uuid":"x"}`, "node"},
		{"bad json", `{"node":`, ""},
		{"empty body", ``, "node"},
		{"no node", `{"cluster_uuid":"x"}`, "node"},
		{"invalid node", `{"node":"../x","cluster_uuid":"x"}`, "node"},
		{"no cluster", `{"node":"node2"}`, "cluster_uuid"},
		{"cluster too long", `{"node":"node2","cluster_uuid":"` + strings.Repeat("a", 65) + `"}`, "cluster_uuid"},
	} {
		cases = append(cases, struct {
			name   string
			hdr    []string
			body   string
			status int
			code   string
			field  string
		}{c.name, signed(c.body), c.body, 400, wrong, c.field})
	}
	for _, c := range []struct {
		name, body, field string
		status            int
	}{
		{"other cluster", `{"node":"node2","cluster_uuid":"4f1d9a3e-0000-0000-0000-000000000000"}`, "cluster_uuid", 409},
		{"unknown node", `{"node":"node9","cluster_uuid":"` + uuid + `"}`, "node", 404},
	} {
		cases = append(cases, struct {
			name   string
			hdr    []string
			body   string
			status int
			code   string
			field  string
		}{c.name, signed(c.body), c.body, c.status, "", c.field})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fingerprint(b)
			peers, _ := b.Peers(t.Context())
			r := e.do("POST", "/2/gnt/rejoin", tc.body, tc.hdr...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.code != "" {
				checkErr(t, r, tc.status, tc.code, tc.field)
			}
			after, _ := b.Peers(t.Context())
			if fingerprint(b) != before || len(after) != len(peers) {
				t.Errorf("state or Raft configuration changed")
			}
		})
	}
}

// A signed rejoin of a member takes it out of the Raft configuration,
// through the Go client as a rejoining gntd sends it.
func TestRejoinRemovesTheNode(t *testing.T) {
	b, uuid := rejoinCluster(t)
	e := newEnv(t, b)
	addNode2(t, e)
	key := b.JoinKey()
	now := time.Now().Unix()
	body := `{"node":"node2","cluster_uuid":"` + uuid + `"}`
	r := e.do("POST", "/2/gnt/rejoin", body, rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, []byte(body)))
	if r.status != 200 {
		t.Fatalf("rejoin: %d %s", r.status, r.body)
	}
	var resp rpc.RejoinResponse
	if err := json.Unmarshal(r.body, &resp); err != nil || !resp.Removed || resp.Leader != "node1" {
		t.Fatalf("answer %s (%v), want removed by node1", r.body, err)
	}
	peers, _ := b.Peers(t.Context())
	if len(peers) != 1 || peers[0].ID != "node1" {
		t.Fatalf("peers after the rejoin: %+v, want node1 alone", peers)
	}
	// Again: no longer a member, nothing removed.
	r = e.do("POST", "/2/gnt/rejoin", body, rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, []byte(body)))
	if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 200 || resp.Removed {
		t.Fatalf("second rejoin: %d %s, want 200 and nothing removed", r.status, r.body)
	}
}

func FuzzRejoinRequest(f *testing.F) {
	b, uuid := rejoinCluster(f)
	key := b.JoinKey()
	now := time.Now().Unix()
	good := []byte(`{"node":"node9","cluster_uuid":"` + uuid + `"}`)
	ts := strconv.FormatInt(now, 10)
	f.Add(good, ts, rpc.Sign(key, now, good))
	f.Add(good, ts, "")
	f.Add([]byte(`{`), ts, rpc.Sign(key, now, []byte(`{`)))
	f.Add([]byte(`{"node":"bad name","cluster_uuid":"x"}`), ts, rpc.Sign(key, now, []byte(`{"node":"bad name","cluster_uuid":"x"}`)))
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	f.Fuzz(func(t *testing.T, body []byte, ts, sig string) {
		rec := serve(h, "POST", "/2/gnt/rejoin", body, rpc.HeaderTimestamp, ts, rpc.HeaderSignature, sig)
		checkAnswer(t, rec.Code, rec.Header(), rec.Body.Bytes())
		verr := rpc.Verify(key, ts, sig, body, time.Now())
		if rec.Code < 300 && (verr != nil || !isObject(body)) {
			t.Fatalf("accepted: body %q ts %q sig %q: %v", body, ts, sig, verr)
		}
		if verr != nil && rec.Code != 401 && rec.Code != 413 {
			t.Fatalf("bad signature answered %d", rec.Code)
		}
		if peers, _ := b.Peers(t.Context()); len(peers) != 2 {
			t.Fatalf("the configuration changed: %+v", peers)
		}
	})
}

// A rejoin sent to a follower reaches the leader, which removes the node;
// the Go client sends it as a rejoining gntd does.
func TestRejoinForwarded(t *testing.T) {
	leader, follower := pair(t)
	addNode2(t, leader)
	leader.b.SetPeers([]rpc.Peer{{ID: "node1", Suffrage: "voter", Leader: true}, {ID: "node2", Suffrage: "voter"}})
	var uuid string
	leader.b.FSM().Read(func(s *fsm.State, _ uint64) { uuid = s.Cluster.UUID })
	resp, err := follower.c.Rejoin(ctx(t), leader.b.JoinKey(), rpc.RejoinRequest{Node: "node2", ClusterUUID: uuid})
	if err != nil || !resp.Removed || resp.Leader != "node1" {
		t.Fatalf("rejoin through the follower: %+v, %v", resp, err)
	}
	if peers, _ := leader.b.Peers(t.Context()); len(peers) != 1 {
		t.Fatalf("the leader's peers: %+v", peers)
	}
	if _, err := follower.c.Rejoin(ctx(t), []byte("not the join key"), rpc.RejoinRequest{Node: "node2", ClusterUUID: uuid}); err == nil {
		t.Fatal("a rejoin signed with another key was accepted")
	}
}
