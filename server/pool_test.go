package server

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

func TestPlanMembership(t *testing.T) {
	v := func(id string) raft.Server {
		return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1817"), Suffrage: raft.Voter}
	}
	nv := func(id string) raft.Server {
		return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1817"), Suffrage: raft.Nonvoter}
	}
	c := func(id string, healthy bool) candidateInfo {
		return candidateInfo{name: id, raft: id + ":1817", healthy: healthy}
	}
	cases := []struct {
		name  string
		conf  []raft.Server
		cands []candidateInfo
		max   int
		want  string
	}{
		{"steady", []raft.Server{v("a"), v("b"), v("c")}, []candidateInfo{c("a", false), c("b", true), c("c", true)}, 5,
			"add=[] remove=[] promote=[] demote=[]"},
		{"new candidate joins as non-voter", []raft.Server{v("a")}, []candidateInfo{c("a", false), c("b", true)}, 5,
			"add=[{Nonvoter b b:1817}] remove=[] promote=[] demote=[]"},
		{"healthy non-voter promoted", []raft.Server{v("a"), nv("b")}, []candidateInfo{c("a", false), c("b", true)}, 5,
			"add=[] remove=[] promote=[b] demote=[]"},
		{"unhealthy non-voter waits", []raft.Server{v("a"), nv("b")}, []candidateInfo{c("a", false), c("b", false)}, 5,
			"add=[] remove=[] promote=[] demote=[]"},
		{"voter limit", []raft.Server{v("a"), v("b"), v("c"), nv("d")}, []candidateInfo{c("a", false), c("b", true), c("c", true), c("d", true)}, 3,
			"add=[] remove=[] promote=[] demote=[]"},
		{"too many voters demoted, never the leader", []raft.Server{v("a"), v("b"), v("c"), v("d"), v("e")},
			[]candidateInfo{c("a", false), c("b", true), c("c", true), c("d", true), c("e", true)}, 3,
			"add=[] remove=[] promote=[] demote=[e d]"},
		{"demoted candidate removed, one voter per round", []raft.Server{v("a"), v("b"), v("c"), nv("d")}, []candidateInfo{c("a", false)}, 5,
			"add=[] remove=[b d] promote=[] demote=[]"},
		{"leader never removes itself", []raft.Server{v("a"), v("b")}, []candidateInfo{c("b", true)}, 5,
			"add=[] remove=[] promote=[] demote=[]"},
		{"address change re-added", []raft.Server{v("a"), nv("b")}, []candidateInfo{c("a", false), {name: "b", raft: "b2:1817", healthy: true}}, 5,
			"add=[{Nonvoter b b2:1817}] remove=[] promote=[] demote=[]"},
	}
	for _, tc := range cases {
		got := fmt.Sprint(planMembership(tc.conf, tc.cands, "a", tc.max))
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
