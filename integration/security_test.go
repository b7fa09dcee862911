package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// tryTLS dials addr with cfg and reports whether the server accepted the
// handshake: after it, the server waits for a request, so a read times
// out; a refused client certificate shows as an alert or a closed
// connection instead (with TLS 1.3 only at the first read).
func tryTLS(addr string, cfg *tls.Config) error {
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil // the server waits for us: the handshake was accepted
	}
	if err == nil {
		return errors.New("the server sent data before any request")
	}
	return err
}

// forgedRequestVote is what an outsider sends to take the leadership: a
// Raft RequestVote in hashicorp/raft's wire format, for a term far ahead.
func forgedRequestVote(t *testing.T, term uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteByte(1) // rpcRequestVote
	req := raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte("127.9.9.9:1817")},
		Term: term, LastLogIndex: 1 << 40, LastLogTerm: term}
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(&req); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTLSRefusesOutsiders: Raft (1817) and the node RPC (1811) complete a
// handshake only with a node certificate of this cluster's CA: not without
// a certificate, not with another CA's node certificate, not with an admin
// certificate; a forged RequestVote sent in plain TCP changes nothing (no
// new term, same leader, same state).
func TestTLSRefusesOutsiders(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	st0, err := c.Status(leader)
	if err != nil {
		t.Fatal(err)
	}
	mark := markState(ctx, t, c)

	foreign, err := pki.NewCA("another cluster", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fcert, fkey, err := foreignNode(foreign)
	if err != nil {
		t.Fatal(err)
	}
	outsider := pki.NewStore()
	if err := outsider.SetTrust(foreign.CertPEM); err != nil {
		t.Fatal(err)
	}
	if err := outsider.SetIdentity(fcert, fkey); err != nil {
		t.Fatal(err)
	}
	noCert := &tls.Config{InsecureSkipVerify: true}
	foreignCfg := outsider.ClientTLS()
	foreignCfg.VerifyConnection = nil // the outsider would take any server
	admin := c.AdminTLS().Clone()
	admin.InsecureSkipVerify = true
	foreignCfg.ClientSessionCache, admin.ClientSessionCache = nil, nil

	for _, m := range c.Members {
		addrs := []string{m.AgentAddr()}
		if m.Candidate {
			addrs = append(addrs, m.RaftAddr())
		}
		for _, addr := range addrs {
			if err := tryTLS(addr, c.NodeTLS()); err != nil {
				t.Errorf("%s with a node certificate of the cluster: %v", addr, err)
			}
			for name, cfg := range map[string]*tls.Config{"no certificate": noCert, "another CA's node certificate": foreignCfg, "an admin certificate": admin} {
				if err := tryTLS(addr, cfg); err == nil {
					t.Errorf("%s accepted a handshake with %s", addr, name)
				}
			}
		}
		if !m.Candidate {
			continue
		}
		// A client with a certificate of the cluster that speaks garbage
		// once through the handshake: the connection is dropped.
		if tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", m.RaftAddr(), c.NodeTLS()); err != nil {
			t.Errorf("%s: %v", m.RaftAddr(), err)
		} else {
			tc.SetDeadline(time.Now().Add(2 * time.Second))
			tc.Write([]byte("\x01\xff\xff garbage that is no msgpack"))
			if answer, _ := io.ReadAll(tc); len(answer) > 0 {
				t.Errorf("%s answered garbage with %q", m.RaftAddr(), answer)
			}
			tc.Close()
		}
		conn, err := net.DialTimeout("tcp", m.RaftAddr(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		conn.Write(forgedRequestVote(t, st0.Term+100))
		answer, _ := io.ReadAll(conn)
		conn.Close()
		if len(answer) > 0 && answer[0] != 0x15 { // a TLS alert record is all it may get
			t.Errorf("%s answered a plain RequestVote with %d bytes: %q", m.RaftAddr(), len(answer), answer[:min(len(answer), 32)])
		}
	}
	// A loaded machine may see an election of its own (the leader lease
	// is 100 ms), but never the intruder's term, and the configuration and
	// the job queue stay as they were.
	l := c.WaitLeader(10 * time.Second)
	for _, m := range c.Candidates() {
		if st, err := c.Status(m); err != nil || st.Term >= st0.Term+100 || st.Leader != l.Name {
			t.Errorf("%s after the forged vote: term %d (was %d), leader %q, %v", m.Name, st.Term, st0.Term, st.Leader, err)
		}
	}
	now := markState(ctx, t, c)
	if now.serial != mark.serial || now.nextJob != mark.nextJob {
		t.Errorf("the outsider changed the state: serial %d -> %d, next job %d -> %d", mark.serial, now.serial, mark.nextJob, now.nextJob)
	}
}

// putUser adds a RAPI user, again if a leader change left the outcome of
// a try unknown (setting its password if the try had added it).
func putUser(ctx context.Context, t *testing.T, c *Cluster, name, password string, write bool) {
	t.Helper()
	c.Eventually(30*time.Second, 200*time.Millisecond, "adding user "+name, func() error {
		err := c.Client().AddRAPIUser(ctx, name, password, write)
		if err != nil {
			users, lerr := c.Client().RAPIUsers(ctx)
			for _, u := range users {
				if lerr == nil && u.Name == name {
					return c.Client().SetRAPIUserPassword(ctx, name, password)
				}
			}
		}
		return err
	})
}

// addUser adds a RAPI user (putUser) and waits until every running
// candidate has applied it.
func addUser(ctx context.Context, t *testing.T, c *Cluster, name, password string, write bool) {
	t.Helper()
	putUser(ctx, t, c, name, password, write)
	// A follower authenticates against its own replica; it catches up
	// with the leader before it refuses (TestUserAtOnceOnFollowers), but
	// not while it knows no leader, which a test that goes on to stop
	// members may meet: wait until every running candidate has applied
	// as far as the furthest one.
	var index uint64
	for _, m := range c.Candidates() {
		if st, err := c.Status(m); err == nil && m.Running() && st.AppliedIndex > index {
			index = st.AppliedIndex
		}
	}
	for _, m := range c.Candidates() {
		if !m.Running() {
			continue
		}
		c.Eventually(30*time.Second, 50*time.Millisecond, "user "+name+" replicated to "+m.Name, func() error {
			st, err := c.Status(m)
			if err != nil {
				return err
			}
			if st.AppliedIndex < index {
				return fmt.Errorf("applied index %d, want %d", st.AppliedIndex, index)
			}
			return nil
		})
	}
}

func foreignNode(ca *pki.CA) (cert, key []byte, err error) {
	kp, err := pki.NewKeyPair("node12")
	if err != nil {
		return nil, nil, err
	}
	cert, err = ca.Sign(&kp.Key.PublicKey, pki.Leaf{Name: "node12", Org: pki.OrgNode}, time.Now(), pki.NodeValidity)
	return cert, kp.KeyPEM, err
}

// apiCall sends one request to m's API as user:password ("" for none)
// with the cluster CA trusted and no client certificate.
func apiCall(t *testing.T, c *Cluster, m *Member, user, password, method, path, contentType string, header http.Header, body string) (int, http.Header, []byte) {
	t.Helper()
	cfg := c.AdminTLS().Clone()
	// No certificate, and no session of the admin's to resume either (a
	// resumed session is authenticated as the one it resumes).
	cfg.Certificates, cfg.ClientSessionCache = nil, nil
	cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.URL(m, path), rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// TestAPIAuthentication: with real gntds, requests without credentials,
// with a wrong password, a read user's writes and cross-site requests are
// refused (401 with Ganeti's realm, 403, 415) on the leader and on a
// follower, and the cluster's state does not move; a write user writes
// through a follower; anonymous reads only when the cluster allows them;
// maintd asks the same users; the gnt CLI authenticates with a user and
// no certificate.
func TestAPIAuthentication(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := c.Client()
	addUser(ctx, t, c, "reader", "r-secret", false)
	addUser(ctx, t, c, "writer", "w-secret", true)
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	// The follower must know the users before it is asked.
	c.Eventually(10*time.Second, 50*time.Millisecond, "users on the follower", func() error {
		if code, _, body := apiCall(t, c, follower, "reader", "r-secret", "GET", "/2/info", "", nil, ""); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	refusedUnchanged(ctx, t, c, false, "after refused requests", func() {
		for _, m := range []*Member{leader, follower} {
			for _, tc := range []struct {
				name, user, pw, method, path, ctype string
				header                              http.Header
				body                                string
				code                                int
			}{
				{"anonymous write", "", "", "PUT", "/2/tags?tag=x", "", nil, "", 401},
				{"anonymous read", "", "", "GET", "/2/info", "", nil, "", 401},
				{"anonymous node removal", "", "", "DELETE", "/2/nodes/node12", "", nil, "", 401},
				{"wrong password", "writer", "nope", "PUT", "/2/tags?tag=x", "", nil, "", 401},
				{"unknown user", "mallory", "x", "GET", "/2/info", "", nil, "", 401},
				{"read user writes", "reader", "r-secret", "PUT", "/2/tags?tag=x", "", nil, "", 403},
				{"read user waits on a job", "reader", "r-secret", "GET", "/2/jobs/1/wait", "", nil, "", 403},
				{"text/plain change", "writer", "w-secret", "POST", "/2/groups", "text/plain", nil, `{"name":"g2"}`, 415},
				{"foreign origin", "writer", "w-secret", "PUT", "/2/tags?tag=x", "", http.Header{"Origin": {"https://evil.example"}}, "", 403},
				{"read user reads", "reader", "r-secret", "GET", "/2/info", "", nil, "", 200},
			} {
				code, hdr, body := apiCall(t, c, m, tc.user, tc.pw, tc.method, tc.path, tc.ctype, tc.header, tc.body)
				if code != tc.code {
					t.Errorf("%s on %s: %d %s, want %d", tc.name, m.Name, code, body, tc.code)
					continue
				}
				if code == 401 && hdr.Get("WWW-Authenticate") != `Basic realm="Ganeti Remote API"` {
					t.Errorf("%s on %s: WWW-Authenticate %q", tc.name, m.Name, hdr.Get("WWW-Authenticate"))
				}
				if code >= 400 && (!bytes.Contains(body, []byte(`"explain"`)) || !bytes.Contains(body, []byte(`"message"`))) {
					t.Errorf("%s on %s: error body without Ganeti's keys: %s", tc.name, m.Name, body)
				}
			}
		}
	})

	// A write user writes through the follower.
	code, _, body := apiCall(t, c, follower, "writer", "w-secret", "PUT", "/2/tags?tag=by-writer", "", nil, "")
	if code != 200 {
		t.Fatalf("writer's tag through %s: %d %s", follower.Name, code, body)
	}
	c.Eventually(10*time.Second, 50*time.Millisecond, "the writer's tag", func() error {
		tags, err := cl.ListTags(ctx, "cluster", "")
		if err != nil || !strings.Contains(strings.Join(tags, ","), "by-writer") {
			return fmt.Errorf("tags %v, %v", tags, err)
		}
		return nil
	})

	// maintd asks the same users. A maintd port that is no longer the
	// leader's answers 307 to the leader's; Go's client drops the
	// credentials on a redirect to another host, so they are sent again,
	// as a client that follows the leader does.
	maintd := func(user, pw, method, path string) int {
		cfg := c.AdminTLS().Clone()
		cfg.Certificates, cfg.ClientSessionCache = nil, nil
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg},
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if len(via) >= 3 {
					return fmt.Errorf("%d redirects", len(via))
				}
				if user != "" {
					req.SetBasicAuth(user, pw)
				}
				return nil
			}}
		req, _ := http.NewRequest(method, "https://"+leader.IP+":1816"+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("maintd %s %s: %v", method, path, err)
		}
		resp.Body.Close()
		if resp.StatusCode == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("maintd 401 without a Basic challenge")
		}
		return resp.StatusCode
	}
	c.Eventually(10*time.Second, 100*time.Millisecond, "maintd answers the reader", func() error {
		if code := maintd("reader", "r-secret", "GET", "/1/status"); code != 200 {
			return fmt.Errorf("status %d", code)
		}
		return nil
	})
	if code := maintd("", "", "GET", "/1/status"); code != 401 {
		t.Errorf("anonymous maintd read: %d", code)
	}
	if code := maintd("reader", "r-secret", "POST", "/1/cancel/1"); code != 403 {
		t.Errorf("maintd cancel by a read user: %d", code)
	}

	// The CLI with a user and no certificate.
	home := t.TempDir()
	cfgDir := filepath.Join(home, ".config", "gnt")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(c.Dir, ".config", "gnt", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cfgDir, "ca.pem"), ca, 0o644)
	gnt := func(env []string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "gnt"), append([]string{"--server", strings.Join(c.Servers(), ",")}, args...)...)
		cmd.Env = append(append(os.Environ(), "GNT_SERVER=", "HOME="+home, "GNT_USER=", "GNT_PASSWORD="), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := gnt(nil, "cluster", "info"); err == nil || !strings.Contains(out, "401") && !strings.Contains(strings.ToLower(out), "needs read access") {
		t.Errorf("the CLI without credentials: %v\n%s", err, out)
	}
	if out, err := gnt([]string{"GNT_USER=writer", "GNT_PASSWORD=w-secret"}, "cluster", "add-tags", "cli-writer"); err != nil {
		t.Errorf("the CLI as writer: %v\n%s", err, out)
	}
	if out, err := gnt([]string{"GNT_USER=reader", "GNT_PASSWORD=r-secret"}, "cluster", "add-tags", "cli-reader"); err == nil || !strings.Contains(out, "write access") {
		t.Errorf("the CLI as reader writing: %v\n%s", err, out)
	}

	// Anonymous reads, once the cluster allows them.
	id, meta, err := cl.ModifyCluster(ctx, map[string]any{"rapi_anonymous_read": true}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if j, err := cl.WaitJob(ctx, id, meta.Index); err != nil || j.Status != "success" {
		t.Fatalf("anonymous reads on: %v %+v", err, j)
	}
	c.Eventually(10*time.Second, 50*time.Millisecond, "anonymous read", func() error {
		if code, _, body := apiCall(t, c, follower, "", "", "GET", "/2/info", "", nil, ""); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if code, _, _ := apiCall(t, c, follower, "", "", "PUT", "/2/tags?tag=anon", "", nil, ""); code != 401 {
		t.Errorf("anonymous write with anonymous reads on: %d", code)
	}
	var failures float64
	if v, err := metricValues(leader, "gnt_api_auth_failures_total"); err == nil {
		for _, n := range v {
			failures += n
		}
	}
	if failures == 0 {
		t.Error("no failed login was counted on the leader")
	}
	_ = rpc.AuthRealm
}

// TestGanetiRAPIClient runs Ganeti's own RAPI client (python3-ganeti-rapi,
// with pycurl) against the cluster over HTTPS with a RAPI user and the CA
// file, unchanged: reads, a tag written as a job and waited for, and a
// wrong password raising GanetiApiError with code 401.
func TestGanetiRAPIClient(t *testing.T) {
	// Debian's python3 (python3-ganeti-rapi installs for it), not one
	// that a PATH may put first.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if out, err := exec.Command(py, "-c", "import pycurl, ganeti.rapi.client").CombinedOutput(); err != nil {
		t.Skipf("Ganeti's RAPI client is not installed (apt-get install python3-ganeti-rapi python3-pycurl): %v %s", err, out)
	}
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addUser(ctx, t, c, "ops", "ops-secret", true)
	leader := c.WaitLeader(10 * time.Second)
	ca := filepath.Join(c.Dir, ".config", "gnt", "ca.pem")
	script := `
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
cfg = rc.GenericCurlConfig(cafile=ca)
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=cfg)
print("version", c.GetVersion())
info = c.GetInfo()
print("cluster", info["name"])
jid = c.AddClusterTags(["from-ganeti-client"])
print("job", jid, c.WaitForJobCompletion(jid, period=0.1, retries=200))
print("tags", c.GetClusterTags())
print("nodes", len(c.GetNodes(bulk=True)))
bad = rc.GanetiRapiClient(host, port=port, username=user, password="wrong", curl_config_fn=cfg)
try:
    bad.GetInfo()
    print("wrong password accepted")
except rc.GanetiApiError as e:
    print("refused", e.code)
`
	out, err := exec.CommandContext(ctx, py, "-c", script, leader.IP, "5080", ca, "ops", "ops-secret").CombinedOutput()
	if err != nil {
		t.Fatalf("Ganeti's client: %v\n%s", err, out)
	}
	for _, want := range []string{"version 2", "cluster test.example.com", "True", "from-ganeti-client", "refused 401"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Ganeti's client output lacks %q:\n%s", want, out)
		}
	}

	// Through a follower, as Ganeti's tools do against the master: a
	// write, then at once its job, 100 times; read-your-writes makes
	// each wait find the job.
	loop := `
import sys
from ganeti.rapi import client as rc
host, port, ca, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw, curl_config_fn=rc.GenericCurlConfig(cafile=ca))
ok = 0
for i in range(100):
    jid = c.AddClusterTags(["ryw-%d" % i])
    if c.WaitForJobCompletion(jid, period=0.05, retries=400):
        ok += 1
print("completed", ok)
`
	follower := c.Followers(leader)[0]
	out, err = exec.CommandContext(ctx, py, "-c", loop, follower.IP, "5080", ca, "ops", "ops-secret").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "completed 100") {
		t.Fatalf("write then wait through follower %s: %v\n%s", follower.Name, err, out)
	}
}

// nodeTLS is a client configuration holding the node certificate in m's
// data dir as it is now.
func nodeTLS(t *testing.T, m *Member) (*tls.Config, []byte) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(m.DataDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(filepath.Join(m.DataDir, "node.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(m.DataDir, "node-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	st := pki.NewStore()
	if err := st.SetTrust(ca); err != nil {
		t.Fatal(err)
	}
	if err := st.SetIdentity(cert, key); err != nil {
		t.Fatal(err)
	}
	cfg := st.ClientTLS()
	cfg.ClientSessionCache = nil
	return cfg, cert
}

// TestRemovedNodeRefused: once a node is removed from the cluster, the
// node certificate it still holds no longer gets through a handshake on
// Raft, the node RPC or the API of any candidate; added again, the node's
// gntd notices the refusal, gets a new certificate at its next join, and
// that one is accepted.
func TestRemovedNodeRefused(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := c.Members[len(c.Members)-1]
	old, oldCert := nodeTLS(t, node)
	cands := c.Candidates()
	for _, m := range cands {
		if err := tryTLS(m.RaftAddr(), old); err != nil {
			t.Fatalf("%s's certificate before its removal, on %s: %v", node.Name, m.RaftAddr(), err)
		}
	}
	cl := c.Client()
	id, _, err := cl.RemoveNode(ctx, node.Name, "test")
	if err != nil {
		t.Fatal(err)
	}
	expectJobSuccess(ctx, t, c, id, "node remove")
	c.Eventually(20*time.Second, 100*time.Millisecond, "the removed node's certificate refused everywhere", func() error {
		for _, m := range cands {
			for _, addr := range []string{m.RaftAddr(), m.AgentAddr(), m.APIAddr()} {
				if err := tryTLS(addr, old); err == nil {
					return fmt.Errorf("%s still accepts %s's certificate", addr, node.Name)
				}
			}
		}
		return nil
	})

	id, _, err = cl.AddNode(ctx, map[string]any{"node_name": node.Name, "primary_ip": node.IP}, "test")
	if err != nil {
		t.Fatal(err)
	}
	expectJobSuccess(ctx, t, c, id, "node add again")
	var fresh *tls.Config
	c.Eventually(30*time.Second, 200*time.Millisecond, "a new certificate for the node added again", func() error {
		cfg, cert := nodeTLS(t, node)
		if bytes.Equal(cert, oldCert) {
			return errors.New("node.pem is still the old certificate")
		}
		fresh = cfg
		return nil
	})
	for _, m := range cands {
		if err := tryTLS(m.RaftAddr(), fresh); err != nil {
			t.Errorf("the new certificate on %s: %v", m.RaftAddr(), err)
		}
	}
	if !strings.Contains(node.Log(), "asking for a new one") {
		t.Errorf("%s's log does not say its certificate was refused", node.Name)
	}
}
