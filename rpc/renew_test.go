package rpc_test

import (
	"context"
	"encoding/json"
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
