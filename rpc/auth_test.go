package rpc_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"
)

// Users of the auth tests: reader may read, writer may write, hashed has
// write access with a bcrypt hash.
const (
	readerPW = "r3ad-only"
	writerPW = "wr1te"
	hashedPW = "bcrypt-pw"
)

var hashedOnce = sync.OnceValues(func() ([]byte, error) { return bcrypt.GenerateFromPassword([]byte(hashedPW), bcrypt.MinCost) })

func hashedHash(t testing.TB) []byte {
	h, err := hashedOnce()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// authBackend is the leader of a cluster with the test users.
func authBackend(t testing.TB) *rpctest.Backend {
	t.Helper()
	b := rpctest.NewCluster()
	b.SetLeader("", "node1", true)
	h := hashedHash(t)
	resp, _, err := b.ApplyCommand(fsm.RAPIUsersReplace{Now: 1, Users: []fsm.RAPIUser{
		{Name: "reader", Scheme: fsm.SchemeHA1, Hash: rpc.HA1("reader", readerPW)},
		{Name: "writer", Scheme: fsm.SchemeHA1, Hash: rpc.HA1("writer", writerPW), Write: true},
		{Name: "hashed", Scheme: fsm.SchemeBcrypt, Hash: string(h), Read: true, Write: true},
	}})
	if err != nil || resp.Err != nil {
		t.Fatalf("users: %v %v", err, resp.Err)
	}
	return b
}

func setAnonymousRead(t *testing.T, b *rpctest.Backend, on bool) {
	t.Helper()
	op := fmt.Sprintf(`{"OP_ID":"OP_CLUSTER_SET_PARAMS","rapi_anonymous_read":%v}`, on)
	if resp, _, err := b.ApplyCommand(jobSubmit(b, op)); err != nil || resp.Err != nil {
		t.Fatalf("anonymous read: %v %v", err, resp.Err)
	}
}

func authServer(t *testing.T, b *rpctest.Backend, log *syncBuffer) (*rpc.Server, *prometheus.Registry) {
	var opts rpc.ServerOptions
	if log != nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Warn})
	}
	return authServerWith(t, b, opts)
}

// authServerWith is authServer with options of the test's own; it sets
// the hold, the registry and the bcrypt cost.
func authServerWith(t *testing.T, b *rpctest.Backend, opts rpc.ServerOptions) (*rpc.Server, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	opts.HoldTimeout, opts.Metrics, opts.BcryptCost = 10*time.Millisecond, reg, bcrypt.MinCost
	return rpc.NewServer(b, opts), reg
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// identity is who a request of the table comes from.
type identity struct {
	name string
	set  func(r *http.Request)
}

func basic(user, pw string) func(r *http.Request) {
	return func(r *http.Request) { r.SetBasicAuth(user, pw) }
}

// verifiedCert marks a request as coming over TLS with a client
// certificate the TLS configuration verified (what the cluster CA's
// verification leaves in the connection state).
func verifiedCert(cn string) func(r *http.Request) {
	return func(r *http.Request) {
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}}
	}
}

var (
	anonymous   = identity{"anonymous", func(*http.Request) {}}
	tlsNoCert   = identity{"tls-without-certificate", func(r *http.Request) { r.TLS = &tls.ConnectionState{} }}
	readUser    = identity{"read-user", basic("reader", readerPW)}
	writeUser   = identity{"write-user", basic("writer", writerPW)}
	bcryptUser  = identity{"bcrypt-write-user", basic("hashed", hashedPW)}
	clientCert  = identity{"client-certificate", verifiedCert("node2")}
	badPassword = identity{"bad-password", basic("writer", "guess")}
	unknownUser = identity{"unknown-user", basic("mallory", writerPW)}
)

// routeRequest builds a request for a route, its path parameters filled.
func routeRequest(rt rpc.Route, id identity) *http.Request {
	path := strings.NewReplacer("{name}", "node1", "{id}", "1").Replace(rt.Path)
	var body []byte
	if rt.Method != http.MethodGet && rt.Method != http.MethodHead {
		body = []byte(`{}`)
	}
	r := httptest.NewRequest(rt.Method, path, bytes.NewReader(body))
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	id.set(r)
	return r
}

// refusedBy says how the access checks refused an answer: "401" (with the
// basic auth challenge), "403" (forbidden), or "" when they let it
// through (whatever the handler then answered).
func refusedBy(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	switch rec.Code {
	case http.StatusUnauthorized:
		if rec.Header().Get("WWW-Authenticate") == "" {
			return "" // the handler's own refusal (a bad join signature)
		}
		if got := rec.Header().Get("WWW-Authenticate"); got != `Basic realm="Ganeti Remote API"` {
			t.Errorf("WWW-Authenticate: %q", got)
		}
		return "401"
	case http.StatusForbidden:
		var ae rpc.APIError
		if json.Unmarshal(rec.Body.Bytes(), &ae) == nil && ae.ErrorCode == rpc.CodeForbidden {
			return "403"
		}
	}
	return ""
}

// TestPermissionTable: every route of the API, for each identity, is let
// through or refused as its access level says.
func TestPermissionTable(t *testing.T) {
	probe, _ := authServer(t, rpctest.NewCluster(), nil)
	routes := probe.Routes()
	if len(routes) < 70 {
		t.Fatalf("only %d routes", len(routes))
	}
	levels := map[rpc.Access]int{}
	for _, rt := range routes {
		levels[rt.Access]++
		switch {
		case rt.Path == "/version" || rt.Path == "/2/gnt/join" || rt.Path == "/2/gnt/rejoin" || rt.Path == "/2/gnt/ca":
			if rt.Access != rpc.AccessNone {
				t.Errorf("%s %s: %s", rt.Method, rt.Path, rt.Access)
			}
		case rt.Path == "/2/gnt/init":
			if rt.Access != rpc.AccessInit {
				t.Errorf("%s %s: %s", rt.Method, rt.Path, rt.Access)
			}
		case rt.Method == http.MethodPut && rt.Path == "/2/query/{resource}":
			if rt.Access != rpc.AccessRead {
				t.Errorf("%s %s: %s, want read (a query only reads, as in Ganeti)", rt.Method, rt.Path, rt.Access)
			}
		case rt.Method == http.MethodGet && rt.Path != "/2/jobs/{id}/wait" && !strings.HasPrefix(rt.Path, "/2/gnt/rapi-users") &&
			rt.Path != "/2/nodes/{name}/storage" && // submits a job; write in Ganeti's doc/rapi.rst
			rt.Path != rpc.SnapshotPath: // the whole state, secrets included: write
			if rt.Access != rpc.AccessRead {
				t.Errorf("%s %s: %s, want read", rt.Method, rt.Path, rt.Access)
			}
		default:
			if rt.Access != rpc.AccessWrite {
				t.Errorf("%s %s: %s, want write", rt.Method, rt.Path, rt.Access)
			}
		}
	}
	if levels[rpc.AccessNone] != 4 || levels[rpc.AccessInit] != 1 {
		t.Errorf("levels %v: only /version, the join and the rejoin (both signed) and the CA certificates need nothing", levels)
	}

	want := func(acc rpc.Access, id identity, anonRead bool) string {
		switch {
		case acc == rpc.AccessNone:
			return ""
		case id.name == clientCert.name:
			return ""
		case id.name == anonymous.name || id.name == tlsNoCert.name:
			if acc == rpc.AccessRead && anonRead {
				return ""
			}
			return "401"
		case id.name == badPassword.name || id.name == unknownUser.name:
			return "401"
		case id.name == readUser.name:
			if acc == rpc.AccessRead {
				return ""
			}
			return "403"
		}
		return "" // the write users
	}
	for _, anonRead := range []bool{false, true} {
		for _, rt := range routes {
			for _, id := range []identity{anonymous, tlsNoCert, readUser, writeUser, bcryptUser, clientCert, badPassword, unknownUser} {
				// A fresh cluster each time: the request may change it.
				b := authBackend(t)
				if anonRead {
					setAnonymousRead(t, b, true)
				}
				srv, _ := authServer(t, b, nil)
				before := fingerprint(b)
				rec := httptest.NewRecorder()
				srv.Handler().ServeHTTP(rec, routeRequest(rt, id))
				got, exp := refusedBy(t, rec), want(rt.Access, id, anonRead)
				if got != exp {
					t.Errorf("anonymous read %v: %s %s as %s: %d %s, want refused %q",
						anonRead, rt.Method, rt.Path, id.name, rec.Code, strings.TrimSpace(rec.Body.String()), exp)
				}
				if got != "" && fingerprint(b) != before {
					t.Errorf("%s %s as %s: refused, and the state changed", rt.Method, rt.Path, id.name)
				}
			}
		}
	}
}

// TestInitBeforeCluster: a gntd without a cluster lets anyone (on a local
// address) call init; once initialised, init needs write access.
func TestInitBeforeCluster(t *testing.T) {
	b := rpctest.New("node1")
	srv, _ := authServer(t, b, nil)
	r := httptest.NewRequest("POST", "/2/gnt/init", strings.NewReader(`{"cluster_name":"c.example.com"}`))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "127.0.0.1:5555"
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("init: %d %s", rec.Code, rec.Body)
	}
	// Users exist only in a cluster: before it, only /version and init
	// answer without a certificate.
	if rec := serve(srv.Handler(), "GET", "/2/info", nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("info: %d", rec.Code)
	}
	r = httptest.NewRequest("POST", "/2/gnt/init", strings.NewReader(`{"cluster_name":"c.example.com"}`))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "127.0.0.1:5555"
	rec = httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, r)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("second init: %d %s", rec.Code, rec.Body)
	}
}

// TestAuthAnswers: the bodies and headers of refusals, in Ganeti's error
// shape, and the failures counted by reason.
func TestAuthAnswers(t *testing.T) {
	var logs syncBuffer
	b := authBackend(t)
	srv, reg := authServer(t, b, &logs)
	h := srv.Handler()
	check := func(rec *httptest.ResponseRecorder, status int, code, msg string) {
		t.Helper()
		var ae rpc.APIError
		if err := json.Unmarshal(rec.Body.Bytes(), &ae); err != nil {
			t.Fatalf("body %q: %v", rec.Body, err)
		}
		if rec.Code != status || ae.Status != status || ae.ErrorCode != code || !strings.Contains(ae.Message, msg) || ae.Explain == "" {
			t.Fatalf("%d %s, want %d %s with %q", rec.Code, rec.Body, status, code, msg)
		}
	}
	rec := serve(h, "GET", "/2/info", nil)
	check(rec, 401, rpc.CodeUnauthorized, "needs read access")
	if got := rec.Header().Get("WWW-Authenticate"); got != `Basic realm="Ganeti Remote API"` {
		t.Fatalf("WWW-Authenticate %q", got)
	}
	rec = serve(h, "GET", "/2/info", nil, "Authorization", "Bearer abc")
	check(rec, 401, rpc.CodeUnauthorized, "not HTTP basic auth")
	rec = serve(h, "GET", "/2/info", nil, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("writer:s3cret-guess")))
	check(rec, 401, rpc.CodeUnauthorized, "wrong user name or password")
	rec = serve(h, "GET", "/2/info", nil, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("nobody:x")))
	check(rec, 401, rpc.CodeUnauthorized, "wrong user name or password")
	before := fingerprint(b)
	rec = serve(h, "PUT", "/2/tags?tag=x", nil, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("reader:"+readerPW)))
	check(rec, 403, rpc.CodeForbidden, "user reader has read access; PUT /2/tags needs write access")
	if fingerprint(b) != before {
		t.Fatal("a refused write changed the state")
	}
	rec = serve(h, "PUT", "/2/tags?tag=x", nil, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("writer:"+writerPW)))
	if rec.Code != http.StatusOK || fingerprint(b) == before {
		t.Fatalf("write user: %d %s", rec.Code, rec.Body)
	}
	for reason, n := range map[string]float64{"no_credentials": 1, "malformed": 1, "bad_password": 1, "unknown_user": 1, "read_only": 1, "origin": 0} {
		if got := testutil.ToFloat64(authFailures(t, reg, reason)); got != n {
			t.Errorf("failures %s = %v, want %v", reason, got, n)
		}
	}
	if strings.Contains(logs.String(), "s3cret-guess") {
		t.Fatalf("a password was logged:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "API request refused") {
		t.Fatalf("no refusal logged:\n%s", logs.String())
	}
}

// authFailures returns the counter of one reason from the registry.
func authFailures(t *testing.T, reg *prometheus.Registry, reason string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gnt_api_auth_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no gnt_api_auth_failures_total{reason=%q}", reason)
	return nil
}

// TestCrossSite: a change must carry JSON (or nothing), and a request
// from another web origin is refused, whoever sends it.
func TestCrossSite(t *testing.T) {
	b := authBackend(t)
	srv, _ := authServer(t, b, nil)
	h := srv.Handler()
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("writer:"+writerPW))
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
	}{
		{"text/plain POST", "POST", "/2/groups", `{"name":"g2"}`, []string{"Content-Type", "text/plain"}, 415},
		{"form POST", "POST", "/2/groups", `name=g2`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"no content type", "POST", "/2/groups", `{"name":"g2"}`, nil, 415},
		{"foreign origin", "PUT", "/2/tags?tag=a", ``, []string{"Origin", "https://evil.example"}, 403},
		{"foreign origin read", "GET", "/2/info", ``, []string{"Origin", "http://evil.example"}, 403},
		{"foreign origin with a certificate", "PUT", "/2/tags?tag=a", ``, []string{"Origin", "https://evil.example", "cert", ""}, 403},
		{"null origin", "PUT", "/2/tags?tag=a", ``, []string{"Origin", "null"}, 403},
		{"own origin", "PUT", "/2/tags?tag=b", ``, []string{"Origin", "http://example.com"}, 200},
		{"json with charset", "POST", "/2/groups", `{"group_name":"g3"}`, []string{"Content-Type", "application/json; charset=utf-8"}, 200},
		{"empty body without type", "PUT", "/2/tags?tag=c", ``, nil, 200},
	} {
		before := fingerprint(b)
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		r.Header.Set("Authorization", auth)
		for i := 0; i+1 < len(c.hdr); i += 2 {
			if c.hdr[i] == "cert" {
				verifiedCert("admin")(r)
				r.Header.Del("Authorization")
				continue
			}
			r.Header.Set(c.hdr[i], c.hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.status)
		}
		if c.status != 200 && fingerprint(b) != before {
			t.Errorf("%s: refused, and the state changed", c.name)
		}
	}
}

// TestAuthDisabled: with AuthDisabled every request is served as before.
func TestAuthDisabled(t *testing.T) {
	b := authBackend(t)
	srv := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true})
	if rec := serve(srv.Handler(), "PUT", "/2/tags?tag=x", nil); rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// TestRAPIUsersEndpoints manages users through the API with the Go
// client, and checks that each change takes effect and that no hash is
// ever answered.
func TestRAPIUsersEndpoints(t *testing.T) {
	b := authBackend(t)
	srv, _ := authServer(t, b, nil)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	ctx := t.Context()
	admin := rpc.NewClient([]string{ts.Listener.Addr().String()})
	admin.SetBasicAuth("writer", writerPW)
	reader := rpc.NewClient([]string{ts.Listener.Addr().String()})
	reader.SetBasicAuth("reader", readerPW)

	if _, err := reader.RAPIUsers(ctx); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("reader lists users: %v", err)
	}
	serial := func() int64 { return readState(b, func(st *fsm.State) int64 { return st.Cluster.SerialNo }) }
	s0 := serial()
	if err := admin.AddRAPIUser(ctx, "jack", "abc123", false); err != nil {
		t.Fatal(err)
	}
	if err := admin.AddRAPIUser(ctx, "jack", "abc123", false); err == nil {
		t.Fatal("jack added twice")
	}
	if err := admin.AddRAPIUser(ctx, "bad:name", "abc123", false); err == nil {
		t.Fatal("a name with ':' was accepted")
	}
	if err := admin.AddRAPIUser(ctx, "jill", "{HA1}"+rpc.HA1("jill", "pw"), true); err != nil {
		t.Fatal(err)
	}
	users, err := admin.RAPIUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []rpc.RAPIUserInfo{{"hashed", "read,write"}, {"jack", "read"}, {"jill", "read,write"}, {"reader", "read"}, {"writer", "write"}}
	if fmt.Sprint(users) != fmt.Sprint(want) || serial() != s0+2 {
		t.Fatalf("users %v (want %v), serial %d -> %d", users, want, s0, serial())
	}
	raw := doHTTP(t, ts.URL, "GET", "/2/gnt/rapi-users", "", "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("writer:"+writerPW)))
	if bytes.Contains(raw.body, []byte("$2a$")) || bytes.Contains(raw.body, []byte(rpc.HA1("jill", "pw"))) || bytes.Contains(raw.body, []byte(`"hash"`)) || bytes.Contains(raw.body, []byte("scheme")) {
		t.Fatalf("the listing shows hashes: %s", raw.body)
	}
	stored := readState(b, func(st *fsm.State) fsm.RAPIUser { return *st.RAPIUser("jack") })
	if stored.Scheme != fsm.SchemeBcrypt || strings.Contains(stored.Hash, "abc123") {
		t.Fatalf("jack stored as %+v", stored)
	}
	jack := rpc.NewClient([]string{ts.Listener.Addr().String()})
	jack.SetBasicAuth("jack", "abc123")
	if _, err := jack.Info(ctx); err != nil {
		t.Fatalf("jack reads: %v", err)
	}
	if err := admin.SetRAPIUserPassword(ctx, "jack", "n3w"); err != nil {
		t.Fatal(err)
	}
	if _, err := jack.Info(ctx); err == nil {
		t.Fatal("the old password still works")
	}
	jack.SetBasicAuth("jack", "n3w")
	if _, err := jack.Info(ctx); err != nil {
		t.Fatalf("new password: %v", err)
	}
	if err := admin.SetRAPIUserPassword(ctx, "nobody", "x"); err == nil {
		t.Fatal("passwd of a missing user")
	}
	if err := admin.RemoveRAPIUser(ctx, "jack"); err != nil {
		t.Fatal(err)
	}
	if _, err := jack.Info(ctx); err == nil {
		t.Fatal("a removed user still reads")
	}

	// An import with a bad line changes nothing and names the line.
	before := fingerprint(b)
	_, err = admin.ImportRAPIUsers(ctx, "writer "+writerPW+" write\nfred {sha}x\n")
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "unknown password scheme") {
		t.Fatalf("bad import: %v", err)
	}
	if fingerprint(b) != before {
		t.Fatal("a refused import changed the state")
	}
	n, err := admin.ImportRAPIUsers(ctx, ganetiUsersFile+"writer "+writerPW+" write\n")
	if err != nil || n != 7 {
		t.Fatalf("import: %d, %v", n, err)
	}
	if _, err := reader.Info(ctx); err == nil {
		t.Fatal("reader is not in the imported file, and still reads")
	}
	jessica := rpc.NewClient([]string{ts.Listener.Addr().String()})
	jessica.SetBasicAuth("jack", "abc123")
	if _, err := jessica.Info(ctx); err != nil {
		t.Fatalf("jack of Ganeti's example reads: %v", err)
	}
}

// testCA is a CA with a server and a client certificate, for the TLS
// tests.
type testCA struct {
	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) tls.Certificate {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testCA{pool: pool, server: issue(2, "node1", x509.ExtKeyUsageServerAuth), client: issue(3, "node2", x509.ExtKeyUsageClientAuth)}
}

// TestForwardWithClientCertificate: a follower authenticates the user and
// forwards the write to the leader over TLS with its client certificate;
// the leader, which knows no password of the user (its replica could lag),
// accepts the certificate, and learns the user's name for its logs. A
// client without the certificate is refused by the same leader.
func TestForwardWithClientCertificate(t *testing.T) {
	ca := newTestCA(t)
	leaderB := authBackend(t)
	leaderB.SetLeader("", "node1", true)
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	leader := rpc.NewServer(leaderB, rpc.ServerOptions{HoldTimeout: time.Second, Metrics: reg, BcryptCost: bcrypt.MinCost,
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})})
	lts := httptest.NewUnstartedServer(leader.Handler())
	lts.TLS = &tls.Config{Certificates: []tls.Certificate{ca.server}, ClientCAs: ca.pool, ClientAuth: tls.VerifyClientCertIfGiven}
	lts.StartTLS()
	t.Cleanup(lts.Close)

	// The follower holds its own replica, where writer's password is
	// writerPW; the leader's says another (as if the follower lagged):
	// only the certificate can get the write through.
	followerB := authBackend(t)
	followerB.SetLeader("https://"+lts.Listener.Addr().String(), "node1", false)
	fwd := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.client}}}}
	follower := rpc.NewServer(followerB, rpc.ServerOptions{HoldTimeout: time.Second, ForwardClient: fwd, BcryptCost: bcrypt.MinCost})
	fts := httptest.NewServer(follower.Handler())
	t.Cleanup(fts.Close)
	if resp, _, err := leaderB.ApplyCommand(fsm.RAPIUserPut{Now: 2, Mode: fsm.PutPasswd,
		User: fsm.RAPIUser{Name: "writer", Scheme: fsm.SchemeHA1, Hash: rpc.HA1("writer", "the-leader-knows-another")}}); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	c := rpc.NewClient([]string{fts.Listener.Addr().String()})
	c.SetBasicAuth("writer", writerPW)
	if err := c.AddRAPIUser(t.Context(), "via-follower", "pw", false); err != nil {
		t.Fatalf("forwarded write: %v", err)
	}
	if readState(leaderB, func(st *fsm.State) *fsm.RAPIUser { return st.RAPIUser("via-follower") }) == nil {
		t.Fatal("the forwarded write did not reach the leader's state")
	}
	if followerB.ApplyCalls() != 0 {
		t.Fatal("the follower applied")
	}
	if !strings.Contains(logs.String(), "cert:node2 for writer") {
		t.Errorf("the leader did not log the forwarded user:\n%s", logs.String())
	}

	// Straight to the leader without a certificate: the password is
	// checked, and refused.
	tlsOnly := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
	req, _ := http.NewRequest("PUT", lts.URL+"/2/tags?tag=direct", nil)
	req.SetBasicAuth("writer", writerPW)
	resp, err := tlsOnly.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a certificate: %d", resp.StatusCode)
	}
	// And with the certificate, no password is needed.
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.client}}}}
	req, _ = http.NewRequest("PUT", lts.URL+"/2/tags?tag=direct", nil)
	resp, err = withCert.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with a certificate: %d", resp.StatusCode)
	}
}

// TestAuthorizeHook: Server.Authorize, maintd's hook, applies the same
// users and rules to another service's requests.
func TestAuthorizeHook(t *testing.T) {
	srv, _ := authServer(t, authBackend(t), nil)
	for _, c := range []struct {
		id     identity
		write  bool
		status int // 0: allowed
	}{
		{anonymous, false, 401}, {readUser, false, 0}, {readUser, true, 403},
		{writeUser, true, 0}, {clientCert, true, 0}, {badPassword, false, 401},
	} {
		r := httptest.NewRequest("POST", "/1/cancel/x", nil)
		c.id.set(r)
		rec := httptest.NewRecorder()
		ok := srv.Authorize(rec, r, c.write)
		if ok != (c.status == 0) || (!ok && rec.Code != c.status) {
			t.Errorf("%s write=%v: %v %d, want %d", c.id.name, c.write, ok, rec.Code, c.status)
		}
		if c.status == 401 && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no challenge", c.id.name)
		}
	}
	off := rpc.NewServer(authBackend(t), rpc.ServerOptions{AuthDisabled: true})
	if !off.Authorize(httptest.NewRecorder(), httptest.NewRequest("POST", "/1/cancel/x", nil), true) {
		t.Fatal("refused with authentication off")
	}
}

// BenchmarkAuthBasic: the cost of the checks on a read with a bcrypt
// user's basic auth once the password is remembered, beside the same
// read with the checks off.
func BenchmarkAuthBasic(b *testing.B) {
	for _, off := range []bool{true, false} {
		b.Run(fmt.Sprintf("disabled=%v", off), func(b *testing.B) {
			be := authBackend(b)
			srv := rpc.NewServer(be, rpc.ServerOptions{AuthDisabled: off, BcryptCost: bcrypt.MinCost})
			h := srv.Handler()
			r := httptest.NewRequest("GET", "/2/features", nil)
			r.SetBasicAuth("hashed", hashedPW)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}
