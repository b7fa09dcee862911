package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T, now time.Time) *CA {
	t.Helper()
	ca, err := NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue makes a key and a certificate of org for name, signed by ca at now.
func issue(t *testing.T, ca *CA, name, org string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte) {
	t.Helper()
	kp, err := NewKeyPair(name)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ParseCSR(kp.CSR)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Sign(csr.PublicKey, Leaf{Name: name, Org: org, DNS: []string{name}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}, now, validity)
	if err != nil {
		t.Fatal(err)
	}
	return cert, kp.KeyPEM
}

func store(t *testing.T, ca *CA, certPEM, keyPEM []byte, extraCAs ...*CA) *Store {
	t.Helper()
	s := NewStore()
	bundle := bytes.Clone(ca.CertPEM)
	for _, c := range extraCAs {
		bundle = append(bundle, c.CertPEM...)
	}
	if err := s.SetTrust(bundle); err != nil {
		t.Fatal(err)
	}
	if certPEM != nil {
		if err := s.SetIdentity(certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestCALoadRoundTrip(t *testing.T) {
	ca := mustCA(t, t0)
	back, err := LoadCA(ca.CertPEM, ca.KeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	if !back.Cert.Equal(ca.Cert) || !back.Key.Equal(ca.Key) {
		t.Fatal("CA changed through PEM")
	}
	other := mustCA(t, t0)
	if _, err := LoadCA(ca.CertPEM, other.KeyPEM()); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("mismatched key: %v", err)
	}
	if !ca.Cert.NotBefore.Equal(t0.Add(-Backdate)) {
		t.Fatalf("CA starts %v, want an hour before issue", ca.Cert.NotBefore)
	}
}

func TestSignRefuses(t *testing.T) {
	ca := mustCA(t, t0)
	k, _ := NewKey()
	for _, tc := range []struct {
		name string
		leaf Leaf
		pub  any
		want string
	}{
		{"no name", Leaf{Org: OrgNode}, &k.PublicKey, "name"},
		{"long name", Leaf{Name: strings.Repeat("a", 254), Org: OrgNode}, &k.PublicKey, "name"},
		{"unknown org", Leaf{Name: "x", Org: "root"}, &k.PublicKey, "organisation"},
		{"not ecdsa", Leaf{Name: "x", Org: OrgNode}, "key", "only ECDSA"},
	} {
		if _, err := ca.Sign(tc.pub, tc.leaf, t0, NodeValidity); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Never beyond the CA's own end.
	cert, err := ca.Sign(&k.PublicKey, Leaf{Name: "x", Org: OrgAdmin}, t0, 20*CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseCerts(cert)
	if c[0].NotAfter.After(ca.Cert.NotAfter) {
		t.Fatal("leaf outlives its CA")
	}
	if len(c[0].ExtKeyUsage) != 1 || c[0].ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("admin usages %v, want client only", c[0].ExtKeyUsage)
	}
}

func TestParseBadInput(t *testing.T) {
	ca := mustCA(t, t0)
	kp, _ := NewKeyPair("n1")
	bad := map[string][]byte{
		"empty":     nil,
		"garbage":   []byte("hello"),
		"cert":      ca.CertPEM,
		"two csr":   append(bytes.Clone(kp.CSR), kp.CSR...),
		"tampered":  tamper(kp.CSR),
		"oversized": bytes.Repeat([]byte("A"), MaxPEM+1),
	}
	for name, in := range bad {
		if _, err := ParseCSR(in); err == nil {
			t.Errorf("ParseCSR(%s) accepted", name)
		}
	}
	for name, in := range map[string][]byte{
		"empty": nil, "garbage": []byte("hello"), "key": kp.KeyPEM,
		"trailing": append(bytes.Clone(ca.CertPEM), "junk"...), "oversized": bytes.Repeat([]byte("A"), MaxPEM+1),
	} {
		if _, err := ParseCerts(in); err == nil {
			t.Errorf("ParseCerts(%s) accepted", name)
		}
	}
	for name, in := range map[string][]byte{"empty": nil, "cert": ca.CertPEM, "garbage": []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")} {
		if _, err := ParseKey(in); err == nil {
			t.Errorf("ParseKey(%s) accepted", name)
		}
	}
}

// tamper changes one character in the middle of a PEM body.
func tamper(p []byte) []byte {
	out := bytes.Clone(p)
	i := len(out) / 2
	if out[i] == 'A' {
		out[i] = 'B'
	} else {
		out[i] = 'A'
	}
	return out
}

func TestNeedsRenewal(t *testing.T) {
	ca := mustCA(t, t0)
	certPEM, _ := issue(t, ca, "n1", OrgNode, t0, NodeValidity)
	c, _ := ParseCerts(certPEM)
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{t0, false},
		{t0.Add(-2 * Backdate), true}, // not started yet
		{t0.Add(200 * 24 * time.Hour), false},
		{t0.Add(250 * 24 * time.Hour), true}, // less than a third left
		{t0.Add(400 * 24 * time.Hour), true}, // ended
	} {
		if got := NeedsRenewal(c[0], tc.at); got != tc.want {
			t.Errorf("NeedsRenewal at %v = %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestSeal(t *testing.T) {
	key := SealKey([]byte("0123456789abcdef0123456789abcdef01234567\n"))
	ca := mustCA(t, t0)
	sealed, err := Seal(key, ca.KeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "PRIVATE") {
		t.Fatal("sealed value shows the key")
	}
	plain, err := Unseal(key, sealed)
	if err != nil || !bytes.Equal(plain, ca.KeyPEM()) {
		t.Fatalf("unseal: %v", err)
	}
	other := SealKey([]byte("another cluster key, another cluster key\n"))
	for name, tc := range map[string]struct {
		key []byte
		in  string
	}{
		"wrong key": {other, sealed},
		"tampered":  {key, sealed[:len(sealed)-4] + "AAA="},
		"no prefix": {key, "abc"},
		"short":     {key, sealPrefix + "AAAA"},
		"not b64":   {key, sealPrefix + "!!"},
		"bad key":   {[]byte("short"), sealed},
	} {
		if _, err := Unseal(tc.key, tc.in); err == nil {
			t.Errorf("%s: unsealed", name)
		}
	}
}

// handshake runs one TLS handshake between a client and a server config
// over a pipe and returns the client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (cerr, serr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(b, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3: the client learns of a refused certificate only
			// when it reads.
			_, err = s.Write([]byte("x"))
		}
		b.Close()
		done <- err
	}()
	c := tls.Client(a, client)
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = io.ReadFull(c, make([]byte, 1))
	}
	a.Close()
	return cerr, <-done
}

func TestMutualTLS(t *testing.T) {
	ca := mustCA(t, time.Now().Add(-3*NodeValidity))
	foreign := mustCA(t, t0)
	n1 := mk(t, ca, ca, "n1", OrgNode, time.Now())
	n2 := mk(t, ca, ca, "n2", OrgNode, time.Now())
	admin := mk(t, ca, ca, "admin", OrgAdmin, time.Now())
	outsider := mk(t, foreign, foreign, "n2", OrgNode, time.Now())
	expired := NewStore()
	expired.SetClock(func() time.Time { return time.Now().Add(-2 * NodeValidity) })
	if err := expired.SetTrust(ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	if c, k := issue(t, ca, "old", OrgNode, time.Now().Add(-2*NodeValidity), NodeValidity); expired.SetIdentity(c, k) != nil {
		t.Fatal("identity at its time")
	}
	expired.SetClock(time.Now)
	skewed := mk(t, ca, ca, "ahead", OrgNode, time.Now().Add(10*time.Minute))
	noCert := store(t, ca, nil, nil)

	req := n1.ServerTLS(tls.RequireAndVerifyClientCert)
	opt := n1.ServerTLS(tls.VerifyClientCertIfGiven)
	for _, tc := range []struct {
		name   string
		server *tls.Config
		client *tls.Config
		ok     bool
	}{
		{"node to node", req, n2.ClientTLS(), true},
		{"clock ten minutes ahead", req, skewed.ClientTLS(), true},
		{"foreign CA", req, outsider.ClientTLS(), false},
		{"no client certificate", req, noCert.ClientTLS(), false},
		{"admin on a node-only port", req, admin.ClientTLS(), false},
		{"expired", req, expired.ClientTLS(), false},
		{"optional: no certificate", opt, noCert.ClientTLS(), true},
		{"optional: admin", opt, admin.ClientTLS(), true},
		{"optional: foreign", opt, outsider.ClientTLS(), false},
		{"server of a foreign CA", outsider.ServerTLS(tls.RequireAndVerifyClientCert), n2.ClientTLS(), false},
	} {
		cerr, serr := handshake(t, tc.server, tc.client)
		if ok := cerr == nil && serr == nil; ok != tc.ok {
			t.Errorf("%s: client %v, server %v; want ok=%v", tc.name, cerr, serr, tc.ok)
		}
	}
}

// mk is a store trusting trust, holding a certificate of org for name
// signed by ca at now.
func mk(t *testing.T, trust, ca *CA, name, org string, now time.Time) *Store {
	t.Helper()
	c, k := issue(t, ca, name, org, now, NodeValidity)
	return store(t, trust, c, k)
}

func TestPeerCheckAndRotation(t *testing.T) {
	old, next := mustCA(t, time.Now()), mustCA(t, time.Now())
	server := mk(t, old, old, "n1", OrgNode, time.Now())
	removed := mk(t, old, old, "gone", OrgNode, time.Now())
	server.SetPeerCheck(func(c *x509.Certificate) error {
		if c.Subject.CommonName == "gone" {
			return errors.New("node gone was removed from the cluster")
		}
		return nil
	})
	if cerr, serr := handshake(t, server.ServerTLS(tls.RequireAndVerifyClientCert), removed.ClientTLS()); cerr == nil || serr == nil || !strings.Contains(serr.Error(), "removed") {
		t.Fatalf("removed node: client %v, server %v", cerr, serr)
	}
	// Rotation: both CAs trusted, so a node with a new certificate and one
	// with an old one talk both ways.
	bundle := append(bytes.Clone(next.CertPEM), old.CertPEM...)
	if err := server.SetTrust(bundle); err != nil {
		t.Fatal(err)
	}
	c, k := issue(t, next, "n2", OrgNode, time.Now(), NodeValidity)
	renewed := NewStore()
	if err := renewed.SetTrust(bundle); err != nil {
		t.Fatal(err)
	}
	if err := renewed.SetIdentity(c, k); err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]*Store{"new to old": {server, renewed}, "old to new": {renewed, server}} {
		if cerr, serr := handshake(t, pair[0].ServerTLS(tls.RequireAndVerifyClientCert), pair[1].ClientTLS()); cerr != nil || serr != nil {
			t.Errorf("%s: client %v, server %v", name, cerr, serr)
		}
	}
	// Old CA dropped: its certificates are refused.
	if err := server.SetTrust(next.CertPEM); err == nil {
		if err := server.SetIdentity(c, k); err != nil {
			t.Fatal(err)
		}
	}
	oldNode := mk(t, old, old, "n3", OrgNode, time.Now())
	if cerr, serr := handshake(t, server.ServerTLS(tls.RequireAndVerifyClientCert), oldNode.ClientTLS()); cerr == nil && serr == nil {
		t.Fatal("a certificate of the dropped CA got through")
	}
}

func TestSetIdentityNeedsChain(t *testing.T) {
	ca, other := mustCA(t, t0), mustCA(t, t0)
	c, k := issue(t, other, "n1", OrgNode, time.Now(), NodeValidity)
	s := store(t, ca, nil, nil)
	if err := s.SetIdentity(c, k); err == nil {
		t.Fatal("accepted a certificate of another CA")
	}
	if err := s.SetTrust([]byte("junk")); err == nil {
		t.Fatal("accepted a junk bundle")
	}
	leafOnly, _ := issue(t, ca, "n2", OrgNode, time.Now(), NodeValidity)
	if err := s.SetTrust(leafOnly); err == nil {
		t.Fatal("accepted a leaf as a CA")
	}
}

func TestFallbackBeforeIdentity(t *testing.T) {
	s := NewStore()
	// A gntd not in a cluster serves its API with a throw-away
	// certificate, and refuses node-only ports.
	cerr, serr := handshake(t, s.ServerTLS(tls.VerifyClientCertIfGiven), &tls.Config{InsecureSkipVerify: true})
	if cerr != nil || serr != nil {
		t.Fatalf("fallback: %v %v", cerr, serr)
	}
	if _, serr := handshake(t, s.ServerTLS(tls.RequireAndVerifyClientCert), &tls.Config{InsecureSkipVerify: true}); serr == nil {
		t.Fatal("node-only port served without a certificate")
	}
}

func TestOperatorTLS(t *testing.T) {
	ca := mustCA(t, time.Now())
	server := mk(t, ca, ca, "n1", OrgNode, time.Now())
	c, k := issue(t, ca, "admin", OrgAdmin, time.Now(), NodeValidity)
	cfg, err := OperatorTLS(ca.CertPEM, c, k)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	if cerr, serr := handshake(t, server.ServerTLS(tls.VerifyClientCertIfGiven), cfg); cerr != nil || serr != nil {
		t.Fatalf("operator: %v %v", cerr, serr)
	}
	cfg.ServerName = "127.0.0.2" // not the server's address
	if cerr, _ := handshake(t, server.ServerTLS(tls.VerifyClientCertIfGiven), cfg); cerr == nil {
		t.Fatal("accepted a certificate for another address")
	}
	if _, err := OperatorTLS([]byte("x"), nil, nil); err == nil {
		t.Fatal("accepted a junk CA file")
	}
}

func FuzzParseCSR(f *testing.F) {
	kp, _ := NewKeyPair("n1")
	f.Add(kp.CSR)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := ParseCSR(data)
		if err == nil && csr.CheckSignature() != nil {
			t.Fatal("accepted a request whose signature does not check")
		}
	})
}

func FuzzParseCerts(f *testing.F) {
	ca, _ := NewCA("f", t0)
	f.Add(ca.CertPEM)
	f.Add(append(bytes.Clone(ca.CertPEM), ca.CertPEM...))
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := ParseCerts(data)
		if err == nil && len(certs) == 0 {
			t.Fatal("no error and no certificate")
		}
	})
}

func FuzzUnseal(f *testing.F) {
	key := SealKey([]byte("k"))
	s, _ := Seal(key, []byte("secret"))
	f.Add(s)
	f.Fuzz(func(t *testing.T, in string) {
		if plain, err := Unseal(key, in); err == nil && in != s && bytes.Equal(plain, []byte("secret")) && !strings.HasPrefix(in, sealPrefix) {
			t.Fatal("opened something that is not a sealed value")
		}
	})
}

func TestClientFiles(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, time.Now())
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca-key.pem"), ca.KeyPEM(), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCAFromDir(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable CA key: %v", err)
	}
	os.Chmod(filepath.Join(dir, "ca-key.pem"), 0o600)
	back, err := LoadCAFromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := IssueAdmin(back, "admin", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "client")
	if err := WriteClientFiles(out, ca.CertPEM, cert, key); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(out, ClientKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("client key: %v %v", st, err)
	}
	c, _ := ParseCerts(cert)
	if Org(c[0]) != OrgAdmin {
		t.Fatalf("org %q", Org(c[0]))
	}
}

// TestAPICertificate: an operator's certificate (Ganeti's rapi.pem) is
// served to clients of the API port; gntds, which ask for
// InternalServerName, still get the node certificate, and node-only ports
// never serve it.
func TestAPICertificate(t *testing.T) {
	ca := mustCA(t, time.Now())
	s := mk(t, ca, ca, "n1", OrgNode, time.Now())
	other := mustCA(t, time.Now())
	c, k := issue(t, other, "rapi.example.com", OrgNode, time.Now(), NodeValidity)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	s.SetAPICertificate(&pair)
	served := func(server *tls.Config, client *tls.Config) string {
		t.Helper()
		var got string
		client = client.Clone()
		client.VerifyConnection = func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0].Subject.CommonName
			return nil
		}
		client.InsecureSkipVerify = true
		handshake(t, server, client)
		return got
	}
	api := s.ServerTLS(tls.VerifyClientCertIfGiven)
	if got := served(api, &tls.Config{ServerName: "10.0.0.1"}); got != "rapi.example.com" {
		t.Errorf("an API client got %q, want the operator's certificate", got)
	}
	if got := served(api, s.ClientTLS()); got != "n1" {
		t.Errorf("a gntd got %q, want the node certificate", got)
	}
	if got := served(s.ServerTLS(tls.RequireAndVerifyClientCert), &tls.Config{}); got != "n1" {
		t.Errorf("a node-only port served %q", got)
	}
	s.SetAPICertificate(nil)
	if got := served(api, &tls.Config{}); got != "n1" {
		t.Errorf("after removing it, an API client got %q", got)
	}
}

// TestServerConfigRacingIdentity: a server configuration built from the
// old identity while a new one is installed is not cached, so the next
// handshake presents the new certificate (a renewal would otherwise
// leave a gntd serving its old certificate until its next change).
func TestServerConfigRacingIdentity(t *testing.T) {
	ca := mustCA(t, time.Now())
	server := mk(t, ca, ca, "n1", OrgNode, time.Now())
	client := mk(t, ca, ca, "n2", OrgNode, time.Now())
	c, k := issue(t, ca, "n1-renewed", OrgNode, time.Now(), NodeValidity)
	server.beforeCache = func() {
		server.beforeCache = nil // once (the hook is read under the lock)
		if err := server.SetIdentity(c, k); err != nil {
			t.Error(err)
		}
	}
	presented := func() string {
		t.Helper()
		var cn string
		cfg := client.ClientTLS()
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			cn = cs.PeerCertificates[0].Subject.CommonName
			return verify(cs)
		}
		if cerr, serr := handshake(t, server.ServerTLS(tls.RequireAndVerifyClientCert), cfg); cerr != nil || serr != nil {
			t.Fatalf("handshake: client %v, server %v", cerr, serr)
		}
		return cn
	}
	if cn := presented(); cn != "n1" {
		t.Fatalf("the handshake during the change presented %q, want the old n1", cn)
	}
	if cn := presented(); cn != "n1-renewed" {
		t.Fatalf("the handshake after the change presented %q, want n1-renewed", cn)
	}
}

// TestNoResumptionAcrossChanges: a client resumes its session while the
// server's contents stay, and shakes hands anew, with the current
// certificates, once the server's identity changed (a renewal): a resumed
// session would carry the certificates of the first handshake.
func TestNoResumptionAcrossChanges(t *testing.T) {
	ca := mustCA(t, time.Now())
	server := mk(t, ca, ca, "n1", OrgNode, time.Now())
	client := mk(t, ca, ca, "n2", OrgNode, time.Now())
	srvCfg := server.ServerTLS(tls.RequireAndVerifyClientCert)
	cliCfg := client.ClientTLS() // one session cache for every handshake
	try := func() (resumed bool, cn string) {
		t.Helper()
		// Over TCP on loopback: a resumed TLS 1.3 handshake has both
		// sides write at once, which a net.Pipe cannot hold.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		done := make(chan error, 1)
		go func() {
			s := tls.Server(b, srvCfg)
			err := s.Handshake()
			if err == nil {
				_, err = s.Write([]byte("x"))
			}
			done <- err
		}()
		c := tls.Client(a, cliCfg)
		err = c.Handshake()
		if err == nil {
			_, err = io.ReadFull(c, make([]byte, 1)) // and the session ticket
		}
		a.Close()
		if serr := <-done; err != nil || serr != nil {
			t.Fatalf("handshake: client %v, server %v", err, serr)
		}
		st := c.ConnectionState()
		return st.DidResume, st.PeerCertificates[0].Subject.CommonName
	}
	if resumed, _ := try(); resumed {
		t.Fatal("the first handshake resumed")
	}
	if resumed, _ := try(); !resumed {
		t.Fatal("the second handshake did not resume: the test proves nothing")
	}
	c, k := issue(t, ca, "n1-renewed", OrgNode, time.Now(), NodeValidity)
	if err := server.SetIdentity(c, k); err != nil {
		t.Fatal(err)
	}
	if resumed, cn := try(); resumed || cn != "n1-renewed" {
		t.Fatalf("after a new identity: resumed %v, the server presented %q", resumed, cn)
	}
}
