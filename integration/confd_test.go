package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/confd"
)

// confdResult is `gnt --json confd query`'s output.
type confdResult struct {
	Type       string          `json:"type"`
	Status     int             `json:"status"`
	Answer     json.RawMessage `json:"answer"`
	Serial     int64           `json:"serial"`
	From       string          `json:"from"`
	Received   int             `json:"received"`
	Agreed     bool            `json:"agreed"`
	Consistent bool            `json:"consistent"`
	Replies    []struct {
		From   string          `json:"from"`
		Answer json.RawMessage `json:"answer"`
		Serial int64           `json:"serial"`
	} `json:"replies"`
}

func (c *Cluster) confd(t *testing.T, args ...string) (confdResult, error) {
	t.Helper()
	key := filepath.Join(c.Members[0].DataDir, "cluster.key")
	out, err := c.GNT(append([]string{"--json", "--timeout", "3s", "confd", "query", "--key-file", key}, args...)...)
	var r confdResult
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		return r, fmt.Errorf("gnt confd query %v: %v %v\n%s", args, err, jerr, out)
	}
	return r, nil
}

func confdAddr(m *Member) string { return m.IP + ":1814" }

// TestConfdStaleFollower: every candidate answers confd from its own
// replica. A follower cut off from the leader's replication keeps
// answering, with its older serial; the client, asking it and the leader,
// returns the leader's newer answer and says the replies disagreed. After
// healing, every candidate gives the same answer with the same serial.
func TestConfdStaleFollower(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1, ExtraArgs: []string{"--debug"}})
	leader := c.WaitLeader(20 * time.Second)
	var follower, other *Member
	for _, m := range c.Candidates() {
		if m == leader {
			continue
		}
		if follower == nil {
			follower = m
		} else {
			other = m
		}
	}
	ask := func(m *Member, args ...string) (confdResult, error) {
		return c.confd(t, append(args, "--address", confdAddr(m))...)
	}
	// Every candidate answers, the same answer with the same serial.
	var before int64
	c.Eventually(20*time.Second, 100*time.Millisecond, "all candidates answer alike", func() error {
		serials := map[int64]bool{}
		for _, m := range c.Candidates() {
			r, err := ask(m, "node-role-byname", "node21")
			if err != nil {
				return err
			}
			if r.Status != 0 || string(r.Answer) != "4" {
				return fmt.Errorf("%s answers %d %s", m.Name, r.Status, r.Answer)
			}
			serials[r.Serial] = true
			before = r.Serial
		}
		if len(serials) != 1 {
			return fmt.Errorf("serials differ: %v", serials)
		}
		return nil
	})
	if r, err := ask(follower, "cluster-master"); err != nil || string(r.Answer) != `"`+leader.Name+`"` {
		t.Fatalf("cluster-master from %s: %+v %v, want %s", follower.Name, r, err, leader.Name)
	}

	// Cut the follower off the leader's replication, then change the
	// configuration through the leader.
	if err := follower.Partition(leader); err != nil {
		t.Fatal(err)
	}
	if out, err := c.GNT("node", "modify", "node21", "--drained", "yes"); err != nil {
		t.Fatalf("node modify: %v\n%s", err, out)
	}
	var after int64
	c.Eventually(10*time.Second, 50*time.Millisecond, "the leader answers the change", func() error {
		r, err := ask(leader, "node-role-byname", "node21")
		if err != nil {
			return err
		}
		if string(r.Answer) != "3" || r.Serial <= before {
			return fmt.Errorf("leader answers %s serial %d", r.Answer, r.Serial)
		}
		after = r.Serial
		return nil
	})
	time.Sleep(time.Second) // time enough to replicate, were it not cut off
	r, err := ask(follower, "node-role-byname", "node21")
	if err != nil || r.Status != 0 || string(r.Answer) != "4" || r.Serial != before {
		t.Fatalf("the cut-off follower answers %+v %v; want its stale answer 4 with serial %d", r, err, before)
	}
	// It still names a master: its Raft leader is gone, so the one its
	// configuration records.
	if r, err := ask(follower, "cluster-master"); err != nil || string(r.Answer) != `"`+leader.Name+`"` {
		t.Errorf("cluster-master from the cut-off follower: %+v %v", r, err)
	}
	both := confdAddr(follower) + "," + confdAddr(leader)
	r, err = c.confd(t, "node-role-byname", "node21", "--address", both, "--coverage", "-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Answer) != "3" || r.Serial != after || r.From != confdAddr(leader) || r.Received != 2 || r.Agreed || !r.Consistent {
		t.Errorf("client over the stale follower and the leader: %+v; want the leader's 3 with serial %d, not agreed", r, after)
	}
	// Found from the cluster (MC_PIP_LIST), any two of three: at least
	// one is up to date, and its answer wins.
	if r, err := c.confd(t, "node-role-byname", "node21"); err != nil || string(r.Answer) != "3" || r.Serial != after {
		t.Errorf("client over the candidates it found: %+v %v", r, err)
	}

	// Heal: the follower catches up and all agree again.
	for _, m := range []*Member{follower, leader} {
		if err := m.Heal(); err != nil {
			t.Fatal(err)
		}
	}
	c.Eventually(30*time.Second, 100*time.Millisecond, "all candidates agree after healing", func() error {
		var serial int64 = -1
		for _, m := range []*Member{leader, follower, other} {
			r, err := ask(m, "node-role-byname", "node21")
			if err != nil {
				return err
			}
			if string(r.Answer) != "3" || r.Serial < after || (serial >= 0 && r.Serial != serial) {
				return fmt.Errorf("%s answers %s serial %d", m.Name, r.Answer, r.Serial)
			}
			serial = r.Serial
		}
		r, err := c.confd(t, "node-role-byname", "node21", "--address", both+","+confdAddr(other), "--coverage", "-1")
		if err != nil {
			return err
		}
		if !r.Agreed || string(r.Answer) != "3" {
			return fmt.Errorf("client: %+v", r)
		}
		return nil
	})
	// A packet signed with another key is dropped and counted.
	conn, err := net.Dial("udp", confdAddr(leader))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bad := confd.BuildRequest(confd.NewMAC([]byte("not the cluster key\n")), time.Now(), confd.ReqPing, confd.Query{}, confd.NewRSalt())
	if _, err := conn.Write(bad); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := conn.Read(make([]byte, 100)); err == nil {
		t.Errorf("a packet with a wrong HMAC was answered (%d bytes)", n)
	}
	c.Eventually(5*time.Second, 100*time.Millisecond, "the drop is counted", func() error {
		resp, err := c.HTTP().Get(c.URL(leader, "/metrics"))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, want := range []string{`gnt_confd_packets_dropped_total{reason="bad_hmac"} 1`, `gnt_confd_requests_answered_total{type="NODE_ROLE_BYNAME"}`} {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("no %s in /metrics", want)
			}
		}
		return nil
	})
}
