package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/confd"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestRenewClusterKey renews cluster.key with `gnt cluster renew-crypto
// --new-cluster-key` while 8 clients write through every candidate and a
// watcher follows every member's gossip view: no write fails or is lost,
// no member ever sees another dead, and every member ends holding the new
// key alone. Afterwards confd answers the new key and drops the old one's
// queries, the node RPC and joins refuse the old key, the CA key (sealed
// under the new key) still signs, and a gntd restarted with the new key
// works.
func TestRenewClusterKey(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	first := c.Members[0]
	oldKey, err := os.ReadFile(filepath.Join(first.DataDir, "cluster.key"))
	if err != nil {
		t.Fatal(err)
	}
	cands := c.Candidates()
	var confdPeers []string
	for _, m := range cands {
		confdPeers = append(confdPeers, confdAddr(m))
	}
	n := len(c.Members)
	c.Eventually(30*time.Second, 200*time.Millisecond, "every member sees every other alive in the gossip", func() error {
		return gossipAllAlive(c, n)
	})

	stop := make(chan struct{})
	var (
		wg          sync.WaitGroup
		gossipBad   syncList
		gossipLooks atomic.Int64
	)
	// The gossip watcher: every member sees every member alive (or, for a
	// probe missed on this loaded machine, suspect, which is not a
	// failure: memberlist's own next probe refutes it), never dead.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, m := range c.Members {
				st, err := c.Status(m)
				if err != nil || st.Gossip == nil {
					continue // a busy API says nothing of the gossip
				}
				gossipLooks.Add(1)
				seen := 0
				for _, gm := range st.Gossip.Members {
					switch gm.State {
					case "alive", "suspect":
						seen++
					default:
						gossipBad.Add(fmt.Sprintf("%s sees %s %s", m.Name, gm.Name, gm.State))
					}
				}
				if seen != n {
					gossipBad.Add(fmt.Sprintf("%s sees %d of %d members", m.Name, seen, n))
				}
			}
		}
	}()
	// The writers: tags on the cluster and on every node, each write
	// confirmed by its job.
	tw := c.StartTagWriters(t, 8, 1800, "rekey", "renew-key test", c.ClientFor)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	time.Sleep(500 * time.Millisecond) // the writers are under way
	start := time.Now()
	before := tw.Writes()
	out, err := c.GNT("cluster", "renew-crypto", "--new-cluster-key")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("gnt cluster renew-crypto --new-cluster-key: %v\n%s", err, out)
	}
	t.Logf("gnt cluster renew-crypto --new-cluster-key took %v:\n%s", took.Round(time.Millisecond), out)
	during := tw.Writes() - before

	// Every member holds the new key alone, mode 0600.
	var newKey []byte
	c.Eventually(30*time.Second, 200*time.Millisecond, "every member holds the new key alone", func() error {
		var k0 []byte
		for _, m := range c.Members {
			k, err := os.ReadFile(filepath.Join(m.DataDir, "cluster.key"))
			if err != nil {
				return err
			}
			if bytes.Equal(k, oldKey) {
				return fmt.Errorf("%s holds the old key", m.Name)
			}
			if k0 != nil && !bytes.Equal(k, k0) {
				return fmt.Errorf("%s holds another key than %s", m.Name, c.Members[0].Name)
			}
			k0 = k
			if st, err := os.Stat(filepath.Join(m.DataDir, "cluster.key")); err != nil || st.Mode().Perm() != 0o600 {
				return fmt.Errorf("%s's cluster.key: mode %v, %v", m.Name, st.Mode().Perm(), err)
			}
			if _, err := os.Stat(filepath.Join(m.DataDir, "cluster.key.new")); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s keeps cluster.key.new (%v)", m.Name, err)
			}
		}
		newKey = k0
		return nil
	})
	time.Sleep(time.Second) // writes go on after the end, with the new key alone
	close(stop)
	wg.Wait()
	tw.CheckNoneFailed(t)
	if v := gossipBad.get(); len(v) > 0 {
		t.Errorf("the gossip lost members %d times in %d looks; the first: %s", len(v), gossipLooks.Load(), strings.Join(v[:min(len(v), 5)], "; "))
	}
	if gossipLooks.Load() == 0 {
		t.Error("the gossip watcher never saw a member's status")
	}
	t.Logf("renew-key: %d writes by %d clients in all, %d while the command ran (%v), %d failed; %d gossip looks",
		tw.Writes(), tw.Writers(), during, took.Round(time.Millisecond), tw.Failed(), gossipLooks.Load())

	// No write is lost.
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tw.CheckNoneLost(ctx, t, cl)

	// confd: the new key's queries are answered, the old key's dropped.
	qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
	res, err := (&confd.Client{Key: newKey, Peers: confdPeers}).Query(qctx, confd.ReqPing, confd.Query{}, -1)
	qcancel()
	if err != nil || res.TimedOut || len(res.Answers) < res.Needed {
		t.Errorf("confd with the new key: %+v %v", res, err)
	}
	qctx, qcancel = context.WithTimeout(ctx, time.Second)
	res, err = (&confd.Client{Key: oldKey, Peers: confdPeers}).Query(qctx, confd.ReqPing, confd.Query{}, -1)
	qcancel()
	if err == nil && len(res.Answers) > 0 {
		t.Errorf("confd answered a query signed with the old key: %+v", res)
	}

	// The node RPC and joins refuse the old key; the new one gets through.
	for _, m := range c.Members {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := rpc.NewNodeClientTLS(m.Name, m.AgentAddr(), rpc.NodeKey(oldKey), c.tls.nodeT).Status(sctx, fsm.Instance{UUID: "00000000-0000-0000-0000-000000000000"})
		var ne *rpc.NodeError
		if !errors.As(err, &ne) || ne.ErrorCode != rpc.NodeCodeUnauthorized {
			t.Errorf("%s's node RPC with the old key: %v, want %s", m.Name, err, rpc.NodeCodeUnauthorized)
		}
		_, err = rpc.NewNodeClientTLS(m.Name, m.AgentAddr(), rpc.NodeKey(newKey), c.tls.nodeT).Status(sctx, fsm.Instance{UUID: "00000000-0000-0000-0000-000000000000"})
		scancel()
		if err != nil && !errors.Is(err, rpc.ErrNodeNotFound) {
			t.Errorf("%s's node RPC with the new key: %v", m.Name, err)
		}
	}
	node := c.Members[len(c.Members)-1]
	_, err = c.ClientFor(c.WaitLeader(10*time.Second)).Join(ctx, rpc.DeriveKey(oldKey, rpc.JoinKeyLabel),
		rpc.JoinRequest{Node: fsm.NodeSpec{Name: node.Name, PrimaryIP: node.IP}})
	var ae *rpc.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Errorf("a join signed with the old key: %v, want 401", err)
	}

	// The CA key, sealed under the new key, still signs.
	kp, err := pki.NewKeyPair("after-rekey")
	if err != nil {
		t.Fatal(err)
	}
	var cc rpc.ClientCertResponse
	if _, err := cl.Do(ctx, http.MethodPost, "/2/gnt/client-cert", nil, rpc.ClientCertRequest{CSR: string(kp.CSR)}, &cc); err != nil || cc.Cert == "" {
		t.Errorf("a client certificate after the renewal of the key: %v", err)
	}
	var st rpc.RenewKeyStatus
	if _, err := cl.Do(ctx, http.MethodGet, "/2/gnt/renew-key", nil, nil, &st); err != nil || st.Phase != fsm.KeyPhaseDone {
		t.Errorf("GET /2/gnt/renew-key after the renewal: %+v %v", st, err)
	}

	// A candidate and the node restarted with the new key: they join,
	// gossip, serve the node RPC, and the candidate takes writes.
	cand := cands[len(cands)-1]
	for _, m := range []*Member{cand, node} {
		m.Stop()
		m.Start(t)
	}
	c.WaitAgent(node, 30*time.Second)
	c.WaitAgent(cand, 30*time.Second)
	c.Eventually(30*time.Second, 200*time.Millisecond, "the restarted members are back in the gossip", func() error {
		return gossipAllAlive(c, n)
	})
	c.Eventually(30*time.Second, 200*time.Millisecond, "a write through the restarted candidate", func() error {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		wc := c.ClientFor(cand)
		id, meta, err := wc.AddTags(wctx, fsm.TagCluster, "", []string{"rekey:restarted"}, "renew-key test")
		if err != nil {
			return err
		}
		job, err := wc.WaitJob(wctx, id, meta.Index)
		if err == nil && job.Status != fsm.StatusSuccess {
			err = fmt.Errorf("job %d is %s", id, job.Status)
		}
		return err
	})
	for _, m := range c.Members {
		for _, line := range strings.Split(m.Log(), "\n") {
			if strings.Contains(line, "cluster key") && (strings.Contains(line, "[ERROR]") || strings.Contains(line, "[WARN]")) {
				t.Errorf("%s logged: %s", m.Name, line)
			}
		}
	}
}

// gossipAllAlive checks that every member sees n members alive.
func gossipAllAlive(c *Cluster, n int) error {
	for _, m := range c.Members {
		st, err := c.Status(m)
		if err != nil {
			return err
		}
		if st.Gossip == nil {
			return fmt.Errorf("%s reports no gossip", m.Name)
		}
		alive := 0
		for _, gm := range st.Gossip.Members {
			if gm.State == "alive" {
				alive++
			}
		}
		if alive != n {
			return fmt.Errorf("%s sees %d of %d members alive", m.Name, alive, n)
		}
	}
	return nil
}

// TestRenewClusterKeyOfflineNode: a node marked offline is not waited
// for; after the renewal its gntd, holding the old key alone, is refused.
// Holding the new key beside the old (cluster.key.new, as a node that went
// down in the middle of the renewal, or one the operator copied the new
// key to) it is back by itself.
func TestRenewClusterKeyOfflineNode(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	node := c.Member("node21")
	c.WaitAgent(node, 30*time.Second)
	node.Stop()
	if out, err := c.GNT("node", "modify", "--offline", "yes", node.Name); err != nil {
		t.Fatalf("marking %s offline: %v\n%s", node.Name, err, out)
	}
	if out, err := c.GNT("cluster", "renew-crypto", "--new-confd-hmac-key"); err != nil {
		t.Fatalf("gnt cluster renew-crypto --new-confd-hmac-key with %s offline: %v\n%s", node.Name, err, out)
	}
	if out, err := c.GNT("node", "modify", "--offline", "no", node.Name); err != nil {
		t.Fatalf("marking %s online: %v\n%s", node.Name, err, out)
	}
	newKey, err := os.ReadFile(filepath.Join(c.Members[0].DataDir, "cluster.key"))
	if err != nil {
		t.Fatal(err)
	}
	// With the old key its joins are refused.
	mark := c.LogLen()
	node.Start(t)
	c.Eventually(30*time.Second, 200*time.Millisecond, node.Name+"'s join with the old key is refused", func() error {
		if len(c.LoggedSince(mark, "join refused")) == 0 {
			return errors.New("no refused join logged yet")
		}
		return nil
	})
	node.Stop()
	// A node that had learned the new key before it went down (it holds
	// cluster.key.new beside the old key) catches up by itself: its join
	// signed with the old key is refused, the one signed with the new key
	// is not, and the end of the renewal replaces its cluster.key.
	if err := os.WriteFile(filepath.Join(node.DataDir, "cluster.key.new"), newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	node.Start(t)
	c.Eventually(30*time.Second, 200*time.Millisecond, node.Name+" holds the new key alone", func() error {
		k, err := os.ReadFile(filepath.Join(node.DataDir, "cluster.key"))
		if err != nil || !bytes.Equal(k, newKey) {
			return fmt.Errorf("cluster.key is not the new key (%v)", err)
		}
		if _, err := os.Stat(filepath.Join(node.DataDir, "cluster.key.new")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cluster.key.new is still there (%v)", err)
		}
		return nil
	})
	c.WaitAgent(node, 30*time.Second)
	c.Eventually(30*time.Second, 200*time.Millisecond, "both members alive in the gossip", func() error {
		return gossipAllAlive(c, 2)
	})
}
