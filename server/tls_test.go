package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
)

var (
	testCAOnce sync.Once
	testCA     *pki.CA
)

// testIdentity is a store holding a node certificate named name of one CA
// shared by the package's tests.
func testIdentity(t *testing.T, name string) *pki.Store {
	t.Helper()
	testCAOnce.Do(func() {
		var err error
		if testCA, err = pki.NewCA("test", time.Now()); err != nil {
			panic(err)
		}
	})
	kp, err := pki.NewKeyPair(name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := testCA.Sign(&kp.Key.PublicKey, nodeLeaf(fsm.NodeSpec{Name: name, PrimaryIP: "127.0.0.1"}), time.Now(), pki.NodeValidity)
	if err != nil {
		t.Fatal(err)
	}
	st := pki.NewStore()
	if err := st.SetTrust(testCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	if err := st.SetIdentity(cert, kp.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLoadTLS: the data dir's TLS files at start: none (a gntd not in a
// cluster), a CA and node certificate, an expired or foreign node
// certificate (left for the next join to replace), a key readable by
// others and a broken rapi.pem (refused, naming the file).
func TestLoadTLS(t *testing.T) {
	testIdentity(t, "warm-up") // makes testCA
	write := func(dir, name string, data []byte, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, name), mode) // WriteFile keeps an existing file's mode
	}
	load := func(dir string) (*Server, error) {
		s := &Server{dir: dataDir{dir}, log: hclog.NewNullLogger()}
		return s, s.loadTLS()
	}
	dir := t.TempDir()
	if s, err := load(dir); err != nil || s.tls.store.Leaf() != nil {
		t.Fatalf("empty data dir: %v", err)
	}
	kp, _ := pki.NewKeyPair("n1")
	cert, err := testCA.Sign(&kp.Key.PublicKey, nodeLeaf(fsm.NodeSpec{Name: "n1", PrimaryIP: "127.0.0.1"}), time.Now(), pki.NodeValidity)
	if err != nil {
		t.Fatal(err)
	}
	write(dir, caCertFile, testCA.CertPEM, 0o644)
	write(dir, nodeCertFile, cert, 0o644)
	write(dir, nodeKeyFile, kp.KeyPEM, 0o600)
	s, err := load(dir)
	if err != nil || s.tls.store.Leaf() == nil || s.needsCertificate(time.Now()) {
		t.Fatalf("CA and node certificate: %v", err)
	}
	if !s.needsCertificate(time.Now().Add(300 * 24 * time.Hour)) {
		t.Error("a certificate with less than a third of its life left is not renewed")
	}
	foreign, _ := pki.NewCA("other", time.Now())
	fcert, _ := foreign.Sign(&kp.Key.PublicKey, pki.Leaf{Name: "n1", Org: pki.OrgNode}, time.Now(), pki.NodeValidity)
	write(dir, nodeCertFile, fcert, 0o644)
	if s, err := load(dir); err != nil || s.tls.store.Leaf() != nil || !s.needsCertificate(time.Now()) {
		t.Fatalf("a foreign node certificate: %v, leaf %v", err, s.tls.store.Leaf())
	}
	write(dir, nodeCertFile, cert, 0o644)
	write(dir, rapiCertFile, []byte("not a certificate"), 0o600)
	if _, err := load(dir); err == nil || !strings.Contains(err.Error(), rapiCertFile) {
		t.Fatalf("a broken rapi.pem: %v", err)
	}
	write(dir, rapiCertFile, append(bytes.Clone(cert), kp.KeyPEM...), 0o644)
	if _, err := load(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a rapi.pem readable by others: %v", err)
	}
	os.Chmod(filepath.Join(dir, rapiCertFile), 0o600)
	if _, err := load(dir); err != nil {
		t.Fatalf("a good rapi.pem: %v", err)
	}
	os.Chmod(filepath.Join(dir, nodeKeyFile), 0o644)
	if s, err := load(dir); err != nil || s.tls.store.Leaf() != nil {
		t.Fatalf("a node key readable by others is used: %v", err)
	}
}

// TestDebugGuard: --debug's endpoints answer only a client certificate of
// the cluster; the rest of the API is left to its own checks.
func TestDebugGuard(t *testing.T) {
	testIdentity(t, "warm-up") // makes testCA
	h := debugGuard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		path string
		cert bool
		want int
	}{
		{"/debug/faults", false, http.StatusUnauthorized},
		{"/debug/pprof/profile", false, http.StatusUnauthorized},
		{"/debug/faults", true, http.StatusTeapot},
		{"/2/info", false, http.StatusTeapot},
	} {
		r := httptest.NewRequest("POST", tc.path, nil)
		if tc.cert {
			r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{testCA.Cert}}}
		} else {
			r.TLS = &tls.ConnectionState{}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s with certificate %v: %d, want %d", tc.path, tc.cert, w.Code, tc.want)
		}
	}
}
