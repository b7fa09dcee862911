package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestRenewCrypto renews the cluster CA with `gnt cluster renew-crypto`
// while 8 clients write through every candidate: no write fails or is
// lost, every member ends with a certificate of the new CA, the CLI's
// files are refreshed, and certificates of the old CA are refused on
// Raft (1817) and the node RPC (1811) afterwards.
func TestRenewCrypto(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	first := c.Members[0]
	oldBundle, err := os.ReadFile(filepath.Join(first.DataDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	oldCAs, err := pki.ParseCerts(oldBundle)
	if err != nil || len(oldCAs) != 1 {
		t.Fatalf("the CA before the renewal: %d certificates, %v", len(oldCAs), err)
	}
	oldCA, err := pki.LoadCAFromDir(first.DataDir)
	if err != nil {
		t.Fatal(err)
	}

	// The writers' TLS: a store whose trust bundle and client certificate
	// the watcher below keeps up with the renewal, as an operator's
	// client following it would.
	store := pki.NewStore()
	if err := store.SetTrust(oldBundle); err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.IssueAdmin(oldCA, "renew-writer", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SetIdentity(cert, key); err != nil {
		t.Fatal(err)
	}
	clientTLS := store.ClientTLS()
	clientFor := func(m *Member) *rpc.Client {
		return rpc.NewClientWith([]string{m.APIAddr()}, rpc.ClientOptions{TLS: clientTLS})
	}

	stop := make(chan struct{})
	var (
		wg              sync.WaitGroup
		watchErr        atomic.Value
		renewedIdentity atomic.Bool
		violations      syncList
	)
	// The watcher.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl := clientFor(first)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var ca rpc.CAResponse
			var st rpc.RenewCryptoStatus
			_, err := cl.Do(ctx, http.MethodGet, "/2/gnt/ca", nil, nil, &ca)
			if err == nil && !bytes.Equal([]byte(ca.CACerts), store.CAPEM()) {
				err = store.SetTrust([]byte(ca.CACerts))
			}
			if err == nil {
				_, err = cl.Do(ctx, http.MethodGet, "/2/gnt/renew-crypto", nil, nil, &st)
			}
			if err == nil && (st.Phase == fsm.PhaseTrust || st.Phase == fsm.PhaseDone) {
				// The order of the phases, seen on the members' disks:
				// no certificate of the new CA while not every gntd
				// trusts it (phase trust before and after the look:
				// phases only move forward), and every member on the
				// new CA once the old is dropped.
				newCount, total := certsOfNewCA(c, st.CA)
				var after rpc.RenewCryptoStatus
				if _, err2 := cl.Do(ctx, http.MethodGet, "/2/gnt/renew-crypto", nil, nil, &after); err2 == nil {
					switch {
					case st.Phase == fsm.PhaseTrust && after.Phase == fsm.PhaseTrust && newCount > 0:
						violations.Add(fmt.Sprintf("phase trust: %d of %d members hold a certificate of the new CA", newCount, total))
					case st.Phase == fsm.PhaseDone && after.CA == st.CA && newCount != total:
						violations.Add(fmt.Sprintf("phase done: %d of %d members hold a certificate of the new CA", newCount, total))
					}
				}
			}
			if err == nil && !renewedIdentity.Load() && (st.Phase == fsm.PhaseIssue || st.Phase == fsm.PhaseDone) {
				var kp pki.KeyPair
				if kp, err = pki.NewKeyPair("renew-writer"); err == nil {
					var out rpc.ClientCertResponse
					if _, err = cl.Do(ctx, http.MethodPost, "/2/gnt/client-cert", nil, rpc.ClientCertRequest{CSR: string(kp.CSR)}, &out); err == nil {
						if err = store.SetIdentity([]byte(out.Cert), kp.KeyPEM); err == nil {
							renewedIdentity.Store(true)
						}
					}
				}
			}
			cancel()
			if err != nil {
				watchErr.Store(err.Error())
			}
		}
	}()
	// The writers: tags on the cluster and on every node, each write
	// confirmed by its job.
	tw := c.StartTagWriters(t, 8, 1800, "renew", "renew-crypto test", clientFor)
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
	out, err := c.GNT("cluster", "renew-crypto")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("gnt cluster renew-crypto: %v\n%s", err, out)
	}
	t.Logf("gnt cluster renew-crypto took %v:\n%s", took.Round(time.Millisecond), out)
	during := tw.Writes() - before

	// Every member trusts the new CA only and holds a certificate of it.
	var newCA *pki.CA
	c.Eventually(30*time.Second, 200*time.Millisecond, "every member trusts the new CA alone and holds its certificate", func() error {
		for _, m := range c.Members {
			bundle, err := os.ReadFile(filepath.Join(m.DataDir, "ca.pem"))
			if err != nil {
				return err
			}
			cas, err := pki.ParseCerts(bundle)
			if err != nil {
				return err
			}
			if len(cas) != 1 || cas[0].Equal(oldCAs[0]) {
				return fmt.Errorf("%s trusts %d CAs (the old: %v)", m.Name, len(cas), cas[0].Equal(oldCAs[0]))
			}
			nodeCert, err := os.ReadFile(filepath.Join(m.DataDir, "node.pem"))
			if err != nil {
				return err
			}
			leaf, err := pki.ParseCerts(nodeCert)
			if err != nil {
				return err
			}
			if err := leaf[0].CheckSignatureFrom(cas[0]); err != nil {
				return fmt.Errorf("%s's node.pem is not of the new CA: %v", m.Name, err)
			}
		}
		ca, err := pki.LoadCAFromDir(first.DataDir)
		if err != nil {
			return err
		}
		if ca.Cert.Equal(oldCAs[0]) {
			return fmt.Errorf("%s's ca-key.pem is still the old CA's", first.Name)
		}
		newCA = ca
		return nil
	})
	time.Sleep(time.Second) // writes go on after the end, with the new CA alone
	close(stop)
	wg.Wait()
	tw.CheckNoneFailed(t)
	if v := violations.get(); len(v) > 0 {
		t.Errorf("the renewal's phases out of order, %d times; the first: %s", len(v), v[0])
	}
	if !renewedIdentity.Load() {
		t.Errorf("the writers' client certificate was not renewed (watcher: %v)", watchErr.Load())
	}
	t.Logf("renew-crypto: %d writes by %d clients in all, %d while the command ran (%v), %d failed",
		tw.Writes(), tw.Writers(), during, took.Round(time.Millisecond), tw.Failed())
	refused := 0
	for _, m := range c.Members {
		for _, line := range strings.Split(m.Log(), "\n") {
			if strings.Contains(line, "handshake") || strings.Contains(line, "bad certificate") || strings.Contains(line, "unknown certificate authority") {
				refused++
				if refused <= 3 {
					t.Logf("%s: %s", m.Name, line)
				}
			}
		}
	}
	t.Logf("TLS handshake errors in the members' logs: %d", refused)
	if os.Getenv("GNT_RENEW_DEBUG") != "" {
		for _, m := range c.Members {
			for _, line := range strings.Split(m.Log(), "\n") {
				if strings.Contains(line, "renewing the cluster CA") || strings.Contains(line, "trusting the cluster CA") ||
					strings.Contains(line, "certificate installed") || strings.Contains(line, "handshake") || strings.Contains(line, "certificate issued") {
					t.Logf("%s: %s", m.Name, line)
				}
			}
		}
	}

	// No write is lost: every confirmed tag is there.
	cl := clientFor(first)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tw.CheckNoneLost(ctx, t, cl)

	// The CLI's files: the new CA alone, and a client certificate of it.
	cliDir := filepath.Join(c.Dir, ".config", "gnt")
	cliCA, err := os.ReadFile(filepath.Join(cliDir, pki.ClientCAFile))
	if err != nil || !bytes.Equal(cliCA, newCA.CertPEM) {
		t.Errorf("the CLI's ca.pem after the renewal is not the new CA alone (%v):\n%s", err, cliCA)
	}
	cliCert, err := os.ReadFile(filepath.Join(cliDir, pki.ClientCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if leaf, err := pki.ParseCerts(cliCert); err != nil || leaf[0].CheckSignatureFrom(newCA.Cert) != nil || pki.Org(leaf[0]) != pki.OrgAdmin {
		t.Errorf("the CLI's client.pem is not an admin certificate of the new CA: %v", err)
	}
	if out, err := c.GNT("cluster", "info"); err != nil {
		t.Errorf("gnt cluster info with the renewed files: %v\n%s", err, out)
	}

	// Certificates of the old CA are refused at the handshake on Raft and
	// the node RPC; one of the new CA gets through (the test can fail).
	oldNode := nodeTLSOf(t, oldCA)
	newNode := nodeTLSOf(t, newCA)
	for _, m := range c.Members {
		addrs := []string{m.AgentAddr()}
		if m.Candidate {
			addrs = append(addrs, m.RaftAddr())
		}
		for _, addr := range addrs {
			if err := tryTLS(addr, oldNode); err == nil {
				t.Errorf("%s accepted a node certificate of the old CA", addr)
			}
			if err := tryTLS(addr, newNode); err != nil {
				t.Errorf("%s refused a node certificate of the new CA: %v", addr, err)
			}
		}
	}
}

// syncList is a list of strings safe for concurrent use.
type syncList struct {
	mu sync.Mutex
	l  []string
}

func (s *syncList) Add(x string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l = append(s.l, x)
}

func (s *syncList) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.l...)
}

// certsOfNewCA counts the members whose node.pem was issued by the CA of
// fingerprint newCA, as their ca.pem names it.
func certsOfNewCA(c *Cluster, newCA string) (n, total int) {
	for _, m := range c.Members {
		total++
		bundle, err1 := os.ReadFile(filepath.Join(m.DataDir, "ca.pem"))
		cert, err2 := os.ReadFile(filepath.Join(m.DataDir, "node.pem"))
		if err1 != nil || err2 != nil {
			continue
		}
		cas, err1 := pki.ParseCerts(bundle)
		leaf, err2 := pki.ParseCerts(cert)
		if err1 != nil || err2 != nil {
			continue
		}
		for _, ca := range cas {
			if pki.Fingerprint(ca) == newCA && leaf[0].CheckSignatureFrom(ca) == nil {
				n++
			}
		}
	}
	return n, total
}

// nodeTLSOf is a client that presents a node certificate of ca and does
// not check the server's: a refusal can only be the server's.
func nodeTLSOf(t *testing.T, ca *pki.CA) *tls.Config {
	t.Helper()
	kp, err := pki.NewKeyPair("test-node")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Sign(&kp.Key.PublicKey, pki.Leaf{Name: "test-node", Org: pki.OrgNode}, time.Now(), pki.NodeValidity)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cert, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}
}

// TestRenewCryptoOfflineNode: a node marked offline is not waited for;
// after the renewal its gntd, with its files of the old CA removed as
// docs/security.md says, learns the new CA and gets a certificate of it.
func TestRenewCryptoOfflineNode(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	node := c.Member("node21")
	c.Eventually(30*time.Second, 100*time.Millisecond, node.Name+" has its node certificate", func() error {
		_, err := os.Stat(filepath.Join(node.DataDir, "node.pem"))
		return err
	})
	node.Stop()
	if out, err := c.GNT("node", "modify", "--offline", "yes", node.Name); err != nil {
		t.Fatalf("marking %s offline: %v\n%s", node.Name, err, out)
	}
	if out, err := c.GNT("cluster", "renew-crypto"); err != nil {
		t.Fatalf("gnt cluster renew-crypto with %s offline: %v\n%s", node.Name, err, out)
	}
	if out, err := c.GNT("node", "modify", "--offline", "no", node.Name); err != nil {
		t.Fatalf("marking %s online: %v\n%s", node.Name, err, out)
	}
	newCA, err := pki.LoadCAFromDir(c.Members[0].DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "node.pem", "node-key.pem"} {
		if err := os.Remove(filepath.Join(node.DataDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	node.Start(t)
	c.Eventually(30*time.Second, 200*time.Millisecond, node.Name+" holds a certificate of the new CA", func() error {
		data, err := os.ReadFile(filepath.Join(node.DataDir, "node.pem"))
		if err != nil {
			return err
		}
		leaf, err := pki.ParseCerts(data)
		if err != nil {
			return err
		}
		return leaf[0].CheckSignatureFrom(newCA.Cert)
	})
	if out, err := c.GNT("node", "list"); err != nil || !strings.Contains(out, node.Name) {
		t.Errorf("gnt node list after the renewal: %v\n%s", err, out)
	}
}

// TestRenewCryptoFailover: the leader that started a renewal hands the
// leadership over in phase trust; the new one, which has no reports yet,
// learns them from the joins and finishes the renewal, which a second
// `gnt cluster renew-crypto` follows.
func TestRenewCryptoFailover(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	old := c.WaitLeader(30 * time.Second)
	out, err := c.GNT("--submit", "cluster", "renew-crypto")
	if err != nil || !strings.Contains(out, "Renewing the cluster CA") {
		t.Fatalf("gnt --submit cluster renew-crypto: %v\n%s", err, out)
	}
	if out, err := c.GNT("cluster", "master-failover"); err != nil {
		t.Fatalf("gnt cluster master-failover: %v\n%s", err, out)
	}
	out, err = c.GNT("cluster", "renew-crypto")
	if err != nil || !strings.Contains(out, "under way already") || !strings.Contains(out, "The cluster CA is renewed") {
		t.Fatalf("gnt cluster renew-crypto after the failover: %v\n%s", err, out)
	}
	t.Logf("renewal finished after a failover from %s:\n%s", old.Name, out)
	c.RefreshTLS()
	newCA, err := pki.LoadCAFromDir(c.Members[0].DataDir)
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(30*time.Second, 200*time.Millisecond, "every member holds a certificate of the new CA", func() error {
		for _, m := range c.Members {
			data, err := os.ReadFile(filepath.Join(m.DataDir, "node.pem"))
			if err != nil {
				return err
			}
			leaf, err := pki.ParseCerts(data)
			if err != nil {
				return err
			}
			if err := leaf[0].CheckSignatureFrom(newCA.Cert); err != nil {
				return fmt.Errorf("%s: %v", m.Name, err)
			}
		}
		return nil
	})
	if l := c.WaitLeader(30 * time.Second); l == old {
		t.Errorf("%s still leads after the failover", old.Name)
	}
}
