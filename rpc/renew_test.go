package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// renewBackend is the test backend with a fake CryptoRenewer that
// records what reached it.
type renewBackend struct {
	*rpctest.Backend
	csrs   []string
	starts int
}

func (b *renewBackend) RenewCrypto(context.Context) (rpc.RenewCryptoStatus, error) {
	b.starts++
	return rpc.RenewCryptoStatus{Phase: "trust", Started: true}, nil
}

func (b *renewBackend) RenewCryptoStatus(context.Context) (rpc.RenewCryptoStatus, error) {
	return rpc.RenewCryptoStatus{Phase: "trust"}, nil
}

func (b *renewBackend) SignClientCert(_ context.Context, csr string) (rpc.ClientCertResponse, error) {
	b.csrs = append(b.csrs, csr)
	return rpc.ClientCertResponse{Cert: "cert", CACerts: "ca"}, nil
}

// TestRenewCryptoBadInput: bad bodies of the renewal routes are refused
// naming the field and never reach the backend.
func TestRenewCryptoBadInput(t *testing.T) {
	b := &renewBackend{Backend: rpctest.NewCluster()}
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	kp, err := pki.NewKeyPair("alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, body, field string
		status            int
	}{
		{"/2/gnt/client-cert", `{}`, "csr", 400},
		{"/2/gnt/client-cert", `{"csr":""}`, "csr", 400},
		{"/2/gnt/client-cert", `{"csr":"` + strings.Repeat("x", rpc.MaxCSRBytes+1) + `"}`, "csr", 400},
		{"/2/gnt/client-cert", `{"csr":"x","name":"bob"}`, "name", 400},
		{"/2/gnt/client-cert", `[1]`, "", 400},
		{"/2/gnt/renew-crypto", `{"now":1}`, "now", 400},
		{"/2/gnt/renew-crypto", `junk`, "", 400},
	} {
		rec := serve(h, "POST", tc.path, []byte(tc.body), "Content-Type", "application/json")
		if rec.Code != tc.status {
			t.Errorf("POST %s %.40q: %d %s, want %d", tc.path, tc.body, rec.Code, rec.Body, tc.status)
			continue
		}
		var ae rpc.APIError
		if err := json.Unmarshal(rec.Body.Bytes(), &ae); err != nil || ae.Field != tc.field || ae.Message == "" {
			t.Errorf("POST %s %.40q: error %s, want field %q", tc.path, tc.body, rec.Body, tc.field)
		}
	}
	if len(b.csrs) != 0 || b.starts != 0 {
		t.Fatalf("bad input reached the backend: %d CSRs, %d starts", len(b.csrs), b.starts)
	}
	body, _ := json.Marshal(rpc.ClientCertRequest{CSR: string(kp.CSR)})
	if rec := serve(h, "POST", "/2/gnt/client-cert", body, "Content-Type", "application/json"); rec.Code != 200 || len(b.csrs) != 1 {
		t.Fatalf("a good CSR: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, "POST", "/2/gnt/renew-crypto", nil); rec.Code != 200 || b.starts != 1 {
		t.Fatalf("an empty POST: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, "GET", "/2/gnt/renew-crypto", nil); rec.Code != 200 || b.starts != 1 || !strings.Contains(rec.Body.String(), `"phase":"trust"`) {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body)
	}

	// A backend that cannot renew answers 501.
	plain := rpc.NewServer(rpctest.NewCluster(), rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	if rec := serve(plain, "GET", "/2/gnt/renew-crypto", nil); rec.Code != http.StatusNotImplemented {
		t.Fatalf("without a renewer: %d %s", rec.Code, rec.Body)
	}
}

// TestJoinFingerprints: the fingerprints a join reports are 64 lower-case
// hex digits or empty; anything else is refused naming the field, and
// the join changes nothing.
func TestJoinFingerprints(t *testing.T) {
	b := rpctest.NewCluster()
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	key := b.JoinKey()
	good := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		trust, issuer, field string
	}{
		{"abc", "", "trust_fp"},
		{strings.ToUpper(good), "", "trust_fp"},
		{good, good[:63] + "g", "cert_issuer_fp"},
		{good, good + "00", "cert_issuer_fp"},
		{"", "", ""},
		{good, good, ""},
	} {
		body, _ := json.Marshal(rpc.JoinRequest{Node: fsm.NodeSpec{Name: "node1", PrimaryIP: "192.0.2.1"}, TrustFP: tc.trust, CertIssuerFP: tc.issuer})
		now := time.Now().Unix()
		before := len(b.Joins())
		rec := serve(h, "POST", "/2/gnt/join", body, rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, body))
		if tc.field == "" {
			if rec.Code != 200 {
				t.Errorf("trust %q issuer %q: %d %s", tc.trust, tc.issuer, rec.Code, rec.Body)
			}
			continue
		}
		var ae rpc.APIError
		json.Unmarshal(rec.Body.Bytes(), &ae)
		if rec.Code != 400 || ae.Field != tc.field || len(b.Joins()) != before {
			t.Errorf("trust %q issuer %q: %d %s, want 400 on %s and no join", tc.trust, tc.issuer, rec.Code, rec.Body, tc.field)
		}
	}
}

// keyRenewBackend is the test backend with a fake KeyRenewer.
type keyRenewBackend struct {
	*rpctest.Backend
	starts int
}

func (b *keyRenewBackend) RenewKey(context.Context) (rpc.RenewKeyStatus, error) {
	b.starts++
	return rpc.RenewKeyStatus{Phase: "trust", Started: true}, nil
}

func (b *keyRenewBackend) RenewKeyStatus(context.Context) (rpc.RenewKeyStatus, error) {
	return rpc.RenewKeyStatus{Phase: "use"}, nil
}

// TestRenewKeyRoutes: POST /2/gnt/renew-key takes no body but an empty
// object; bad bodies never reach the backend; a backend that cannot
// renew the key answers 501.
func TestRenewKeyRoutes(t *testing.T) {
	b := &keyRenewBackend{Backend: rpctest.NewCluster()}
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	for _, body := range []string{`{"now":1}`, `junk`, `[]`} {
		if rec := serve(h, "POST", "/2/gnt/renew-key", []byte(body), "Content-Type", "application/json"); rec.Code != 400 {
			t.Errorf("POST %q: %d %s, want 400", body, rec.Code, rec.Body)
		}
	}
	if b.starts != 0 {
		t.Fatalf("bad input reached the backend %d times", b.starts)
	}
	if rec := serve(h, "POST", "/2/gnt/renew-key", []byte(`{}`), "Content-Type", "application/json"); rec.Code != 200 || b.starts != 1 || !strings.Contains(rec.Body.String(), `"started":true`) {
		t.Fatalf("POST {}: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, "GET", "/2/gnt/renew-key", nil); rec.Code != 200 || b.starts != 1 || !strings.Contains(rec.Body.String(), `"phase":"use"`) {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body)
	}
	plain := rpc.NewServer(rpctest.NewCluster(), rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	if rec := serve(plain, "POST", "/2/gnt/renew-key", nil); rec.Code != http.StatusNotImplemented {
		t.Fatalf("without a renewer: %d %s", rec.Code, rec.Body)
	}
}

// TestJoinKeyIDs: the key IDs a join reports are at most two non-empty
// lower-case hex strings of at most fsm.MaxKeyIDLen; anything else is
// refused naming key_ids, and the join changes nothing.
func TestJoinKeyIDs(t *testing.T) {
	b := rpctest.NewCluster()
	h := rpc.NewServer(b, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: 10 * time.Millisecond}).Handler()
	key := b.JoinKey()
	for _, tc := range []struct {
		ids  []string
		good bool
	}{
		{nil, true},
		{[]string{"ab12"}, true},
		{[]string{"ab12", "cd34"}, true},
		{[]string{strings.Repeat("f", fsm.MaxKeyIDLen)}, true},
		{[]string{"ab", "cd", "ef"}, false},
		{[]string{""}, false},
		{[]string{"AB"}, false},
		{[]string{"ab", "xy"}, false},
		{[]string{strings.Repeat("f", fsm.MaxKeyIDLen+1)}, false},
	} {
		body, _ := json.Marshal(rpc.JoinRequest{Node: fsm.NodeSpec{Name: "node1", PrimaryIP: "192.0.2.1"}, KeyIDs: tc.ids})
		now := time.Now().Unix()
		before := len(b.Joins())
		rec := serve(h, "POST", "/2/gnt/join", body, rpc.HeaderTimestamp, strconv.FormatInt(now, 10), rpc.HeaderSignature, rpc.Sign(key, now, body))
		if tc.good {
			if rec.Code != 200 {
				t.Errorf("%q: %d %s", tc.ids, rec.Code, rec.Body)
			}
			continue
		}
		var ae rpc.APIError
		json.Unmarshal(rec.Body.Bytes(), &ae)
		if rec.Code != 400 || ae.Field != "key_ids" || len(b.Joins()) != before {
			t.Errorf("%q: %d %s, want 400 on key_ids and no join", tc.ids, rec.Code, rec.Body)
		}
	}
}

// TestVerifyAny: a request signed with any of the keys is accepted; one
// signed with another key, or stale, is refused with Verify's error.
func TestVerifyAny(t *testing.T) {
	k1, k2, k3 := []byte("key one"), []byte("key two"), []byte("key three")
	now := time.Unix(1700000000, 0)
	body := []byte(`{}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	for _, tc := range []struct {
		name string
		keys [][]byte
		sig  string
		ts   string
		want error
	}{
		{"first key", [][]byte{k1, k2}, rpc.Sign(k1, now.Unix(), body), ts, nil},
		{"second key", [][]byte{k1, k2}, rpc.Sign(k2, now.Unix(), body), ts, nil},
		{"other key", [][]byte{k1, k2}, rpc.Sign(k3, now.Unix(), body), ts, rpc.ErrBadSignature},
		{"no keys", nil, rpc.Sign(k1, now.Unix(), body), ts, rpc.ErrBadSignature},
		{"stale", [][]byte{k1, k2}, rpc.Sign(k2, now.Unix()-1000, body), strconv.FormatInt(now.Unix()-1000, 10), rpc.ErrBadTimestamp},
	} {
		err := rpc.VerifyAny(tc.keys, tc.ts, tc.sig, body, now)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
