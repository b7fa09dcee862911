package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// renewAPI plays a leader through a renewal: each GET of the status
// moves it one phase on; the CA bundle follows the phase, and a client
// certificate request is signed with the new CA.
type renewAPI struct {
	t        *testing.T
	old, new *pki.CA
	mu       sync.Mutex
	phase    int // 0 trust, 1 issue, 2 done
	reqs     []string
	postCode int // answer to POST /2/gnt/renew-crypto, 200 when 0
}

func (a *renewAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = append(a.reqs, r.Method+" "+r.URL.Path)
	phases := []string{"trust", "issue", "done"}
	status := func() rpc.RenewCryptoStatus {
		return rpc.RenewCryptoStatus{Phase: phases[a.phase], CA: pki.Fingerprint(a.new.Cert),
			Nodes: []rpc.RenewCryptoNode{{Name: "n1", Reported: true, TrustsNew: a.phase > 0, CertNew: a.phase > 1}, {Name: "n2", Offline: true}}}
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.Method + " " + r.URL.Path {
	case "POST /2/gnt/renew-crypto":
		if a.postCode != 0 {
			w.WriteHeader(a.postCode)
			json.NewEncoder(w).Encode(rpc.APIError{Status: a.postCode, Message: "write access needed", ErrorCode: "forbidden"})
			return
		}
		st := status()
		st.Started = true
		json.NewEncoder(w).Encode(st)
	case "GET /2/gnt/renew-crypto":
		if a.phase < 2 {
			a.phase++
		}
		json.NewEncoder(w).Encode(status())
	case "GET /2/gnt/ca":
		bundle := string(a.new.CertPEM) + string(a.old.CertPEM)
		if a.phase == 2 {
			bundle = string(a.new.CertPEM)
		}
		json.NewEncoder(w).Encode(rpc.CAResponse{CACerts: bundle})
	case "POST /2/gnt/client-cert":
		var req rpc.ClientCertRequest
		json.NewDecoder(r.Body).Decode(&req)
		csr, err := pki.ParseCSR([]byte(req.CSR))
		if err != nil || a.phase != 1 {
			a.t.Errorf("client-cert in phase %d: %v", a.phase, err)
			w.WriteHeader(400)
			return
		}
		cert, err := a.new.Sign(csr.PublicKey, pki.Leaf{Name: csr.Subject.CommonName, Org: pki.OrgAdmin}, time.Now(), pki.NodeValidity)
		if err != nil {
			a.t.Fatal(err)
		}
		json.NewEncoder(w).Encode(rpc.ClientCertResponse{Cert: string(cert), CACerts: string(a.new.CertPEM) + string(a.old.CertPEM)})
	default:
		w.WriteHeader(404)
	}
}

func TestRenewCryptoCLI(t *testing.T) {
	now := time.Now()
	oldCA, err := pki.NewCA("c", now)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA("c", now)
	if err != nil {
		t.Fatal(err)
	}
	setUp := func() (string, map[string]string) {
		home := t.TempDir()
		cert, key, err := pki.IssueAdmin(oldCA, "alice", now)
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteClientFiles(filepath.Join(home, ".config", "gnt"), oldCA.CertPEM, cert, key); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(home, ".config", "gnt"), map[string]string{"HOME": home}
	}
	read := func(dir, name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	// Followed to the end: the CA file has both CAs, then the new alone;
	// the client certificate is renewed in phase issue, for a new key.
	api := &renewAPI{t: t, old: oldCA, new: newCA}
	srv := httptest.NewServer(api)
	defer srv.Close()
	dir, env := setUp()
	oldKey := read(dir, pki.ClientKeyFile)
	r := gnt(t, env, "--server", strings.TrimPrefix(srv.URL, "http://"), "cluster", "renew-crypto")
	if r.err != nil {
		t.Fatalf("renew-crypto: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	for _, want := range []string{"Renewing the cluster CA", "phase issue", "waiting for n1)", `Renewed the client certificate "alice"`, "The cluster CA is renewed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if got := strings.Join(api.reqs, ", "); got != "POST /2/gnt/renew-crypto, GET /2/gnt/ca, GET /2/gnt/renew-crypto, POST /2/gnt/client-cert, GET /2/gnt/renew-crypto, GET /2/gnt/ca" {
		t.Errorf("requests: %s", got)
	}
	if ca := read(dir, pki.ClientCAFile); !bytes.Equal(ca, newCA.CertPEM) {
		t.Errorf("ca.pem after the renewal:\n%s", ca)
	}
	key := read(dir, pki.ClientKeyFile)
	if bytes.Equal(key, oldKey) {
		t.Error("the client key was not replaced")
	}
	if st, _ := os.Stat(filepath.Join(dir, pki.ClientKeyFile)); st.Mode().Perm() != 0o600 {
		t.Errorf("client-key.pem has mode %o", st.Mode().Perm())
	}
	pair, err := pki.OperatorTLS(newCA.CertPEM, read(dir, pki.ClientCertFile), key)
	if err != nil {
		t.Fatalf("the renewed files do not make a client: %v", err)
	}
	if leaf := pair.Certificates[0].Leaf; leaf.CheckSignatureFrom(newCA.Cert) != nil || leaf.Subject.CommonName != "alice" {
		t.Errorf("client.pem is not alice's of the new CA")
	}

	// --submit: started, the CA file holds both, nothing else.
	api2 := &renewAPI{t: t, old: oldCA, new: newCA}
	srv2 := httptest.NewServer(api2)
	defer srv2.Close()
	dir, env = setUp()
	cert := read(dir, pki.ClientCertFile)
	r = gnt(t, env, "--server", strings.TrimPrefix(srv2.URL, "http://"), "--submit", "cluster", "renew-crypto")
	if r.err != nil || !strings.Contains(r.stdout, "Not waiting") {
		t.Fatalf("renew-crypto --submit: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	if got := strings.Join(api2.reqs, ", "); got != "POST /2/gnt/renew-crypto, GET /2/gnt/ca" {
		t.Errorf("requests with --submit: %s", got)
	}
	if ca := read(dir, pki.ClientCAFile); string(ca) != string(newCA.CertPEM)+string(oldCA.CertPEM) {
		t.Errorf("ca.pem after --submit:\n%s", ca)
	}
	if !bytes.Equal(read(dir, pki.ClientCertFile), cert) {
		t.Error("--submit replaced the client certificate")
	}

	// Refused: an error, and the files are as they were.
	api3 := &renewAPI{t: t, old: oldCA, new: newCA, postCode: 403}
	srv3 := httptest.NewServer(api3)
	defer srv3.Close()
	dir, env = setUp()
	r = gnt(t, env, "--server", strings.TrimPrefix(srv3.URL, "http://"), "cluster", "renew-crypto")
	if r.err == nil || !strings.Contains(r.err.Error(), "write access") {
		t.Fatalf("a refused renewal: %v\n%s", r.err, r.stdout)
	}
	if ca := read(dir, pki.ClientCAFile); !bytes.Equal(ca, oldCA.CertPEM) {
		t.Error("a refused renewal changed ca.pem")
	}
	if r := gnt(t, env, "--server", strings.TrimPrefix(srv3.URL, "http://"), "cluster", "renew-crypto", "extra"); r.err == nil {
		t.Error("renew-crypto with an argument is not refused")
	}
}

// renewKeyAPI plays a leader through a renewal of cluster.key: each GET
// of the status moves it one phase on.
type renewKeyAPI struct {
	mu    sync.Mutex
	phase int // 0 trust, 1 use, 2 done
	reqs  []string
}

func (a *renewKeyAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = append(a.reqs, r.Method+" "+r.URL.Path)
	phases := []string{"trust", "use", "done"}
	status := func() rpc.RenewKeyStatus {
		return rpc.RenewKeyStatus{Phase: phases[a.phase], KeyID: "ab12",
			Nodes: []rpc.RenewKeyNode{{Name: "n1", Reported: true, HoldsNew: a.phase > 0, UsesNew: a.phase > 1}, {Name: "n2", Offline: true}}}
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.Method + " " + r.URL.Path {
	case "POST /2/gnt/renew-key":
		st := status()
		st.Started = true
		json.NewEncoder(w).Encode(st)
	case "GET /2/gnt/renew-key":
		if a.phase < 2 {
			a.phase++
		}
		json.NewEncoder(w).Encode(status())
	default:
		w.WriteHeader(404)
	}
}

// TestRenewKeyCLI: --new-cluster-key (and Ganeti's --new-confd-hmac-key)
// renews cluster.key only, following it to its end; --submit only starts
// it.
func TestRenewKeyCLI(t *testing.T) {
	env := map[string]string{"HOME": t.TempDir()}
	for _, flag := range []string{"--new-cluster-key", "--new-confd-hmac-key"} {
		api := &renewKeyAPI{}
		srv := httptest.NewServer(api)
		r := gnt(t, env, "--server", strings.TrimPrefix(srv.URL, "http://"), "cluster", "renew-crypto", flag)
		srv.Close()
		if r.err != nil {
			t.Fatalf("%s: %v\n%s%s", flag, r.err, r.stdout, r.stderr)
		}
		for _, want := range []string{"Renewing the cluster key", "phase use: every node signs with the new key (waiting for n1)", "phase done", "The cluster key is renewed (ab12)"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s: output lacks %q:\n%s", flag, want, r.stdout)
			}
		}
		if got := strings.Join(api.reqs, ", "); got != "POST /2/gnt/renew-key, GET /2/gnt/renew-key, GET /2/gnt/renew-key" {
			t.Errorf("%s: requests %s", flag, got)
		}
	}
	api := &renewKeyAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r := gnt(t, env, "--server", strings.TrimPrefix(srv.URL, "http://"), "--submit", "cluster", "renew-crypto", "--new-cluster-key")
	if r.err != nil || !strings.Contains(r.stdout, "Not waiting") {
		t.Fatalf("--submit: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	if got := strings.Join(api.reqs, ", "); got != "POST /2/gnt/renew-key" {
		t.Errorf("requests with --submit: %s", got)
	}
}
