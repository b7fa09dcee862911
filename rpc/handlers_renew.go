package rpc

import (
	"context"
	"errors"
	"net/http"
)

// Renewal of the cluster CA (gnt cluster renew-crypto) and an operator's
// own client certificate. Both run on the leader.

// RenewCryptoStatus is where a renewal of the cluster CA stands, as
// POST and GET /2/gnt/renew-crypto answer.
type RenewCryptoStatus struct {
	// Phase is "" (never renewed), "trust", "issue" or "done" (fsm.PKI).
	Phase string `json:"phase"`
	// Started is true in the answer to the POST that started a renewal,
	// false when one was under way already (the POST then only reports).
	Started bool `json:"started"`
	// Serial counts changes of the CA.
	Serial int64 `json:"serial"`
	// CA is the fingerprint of the newest CA, and Trusted those of every
	// CA the cluster trusts (two during a renewal).
	CA      string   `json:"ca"`
	Trusted []string `json:"trusted"`
	// Nodes is every node of the configuration with what it last
	// reported to this leader.
	Nodes []RenewCryptoNode `json:"nodes"`
}

// RenewCryptoNode is one node's progress in a renewal.
type RenewCryptoNode struct {
	Name string `json:"name"`
	// Offline nodes are not waited for (they cannot report).
	Offline bool `json:"offline,omitempty"`
	// Reported says whether the node joined this leader since it leads;
	// the fields below are only meaningful then.
	Reported bool `json:"reported"`
	// TrustsNew: the newest CA the node trusts is the cluster's newest.
	TrustsNew bool `json:"trusts_new"`
	// CertNew: the node's certificate was issued by the newest CA.
	CertNew bool `json:"cert_new"`
	// Age is the seconds since the node's last report.
	Age float64 `json:"age_seconds,omitempty"`
}

// ClientCertRequest is the body of POST /2/gnt/client-cert: a PEM
// certificate request; its common name names the admin (1 to 64 bytes of
// printable ASCII).
type ClientCertRequest struct {
	CSR string `json:"csr"`
}

// ClientCertResponse is an admin client certificate of the newest CA and
// the CA certificates the cluster trusts.
type ClientCertResponse struct {
	Cert    string `json:"cert"`
	CACerts string `json:"ca_certs"`
}

// CryptoRenewer is what a Backend implements to renew the cluster CA and
// sign operators' client certificates; without it the routes answer 501.
type CryptoRenewer interface {
	// RenewCrypto starts a renewal of the cluster CA (or reports the one
	// under way). Leader only: others return ErrNotLeader.
	RenewCrypto(ctx context.Context) (RenewCryptoStatus, error)
	// RenewCryptoStatus reports the renewal. Leader only.
	RenewCryptoStatus(ctx context.Context) (RenewCryptoStatus, error)
	// SignClientCert signs an admin client certificate for a checked CSR
	// with the newest CA. Leader only.
	SignClientCert(ctx context.Context, csr string) (ClientCertResponse, error)
}

// CodeNotImplemented answers a route this server's backend lacks.
const CodeNotImplemented = "not_implemented"

// MaxCSRBytes bounds a certificate request in a request body.
const MaxCSRBytes = 16 << 10

func (s *Server) renewer(w http.ResponseWriter) CryptoRenewer {
	cr, ok := s.b.(CryptoRenewer)
	if !ok {
		writeError(w, &APIError{Status: http.StatusNotImplemented, ErrorCode: CodeNotImplemented, Message: "this server cannot renew certificates"})
	}
	return cr
}

// handleRenewCrypto is POST /2/gnt/renew-crypto (start) and GET (report).
func (s *Server) handleRenewCrypto(start bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cr := s.renewer(w)
		if cr == nil {
			return
		}
		serveRenewal(s, w, r, start, cr.RenewCrypto, cr.RenewCryptoStatus)
	}
}

// serveRenewal answers a renewal route on the leader: a POST (start) may
// carry an empty JSON object or no body at all and starts the renewal (or
// reports the one under way); a GET reports it.
func serveRenewal[T any](s *Server, w http.ResponseWriter, r *http.Request, start bool, startFn, statusFn func(context.Context) (T, error)) {
	var body []byte
	if start {
		var empty struct{}
		var aerr *APIError
		if body, aerr = s.readOptional(r, &empty); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	report := statusFn
	if start {
		report = startFn
	}
	answerOnLeader(s, w, r, body, report)
}

// answerOnLeader runs fn on the leader (forwarding the request with body
// when this node is not) and answers with what fn returns as JSON, with
// the index this node has applied.
func answerOnLeader[T any](s *Server, w http.ResponseWriter, r *http.Request, body []byte, fn func(context.Context) (T, error)) {
	s.onLeader(w, r, body, func() error {
		v, err := fn(r.Context())
		if errors.Is(err, ErrNotLeader) {
			return ErrNotLeader
		}
		if err != nil {
			writeError(w, asAPIError(err))
			return nil
		}
		setIndex(w, s.index())
		writeJSON(w, v)
		return nil
	})
}

// handleClientCert is POST /2/gnt/client-cert.
func (s *Server) handleClientCert(w http.ResponseWriter, r *http.Request) {
	cr := s.renewer(w)
	if cr == nil {
		return
	}
	body, aerr := s.readBody(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req ClientCertRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		writeError(w, aerr)
		return
	}
	switch {
	case req.CSR == "":
		writeError(w, badRequest("csr", "csr is missing: a PEM certificate request"))
		return
	case len(req.CSR) > MaxCSRBytes:
		writeError(w, badRequest("csr", "the certificate request has %d bytes; the limit is %d", len(req.CSR), MaxCSRBytes))
		return
	}
	s.onLeader(w, r, body, func() error {
		out, err := cr.SignClientCert(r.Context(), req.CSR)
		if errors.Is(err, ErrNotLeader) {
			return ErrNotLeader
		}
		if err != nil {
			writeError(w, asAPIError(err))
			return nil
		}
		writeJSON(w, out)
		return nil
	})
}

// validateFingerprint checks a certificate fingerprint: empty, or 64
// lower-case hex digits.
func validateFingerprint(field, fp string) *APIError {
	if fp == "" {
		return nil
	}
	if len(fp) != 64 {
		return badRequest(field, "%s is %d characters long; a fingerprint is 64 hex digits", field, len(fp))
	}
	for i := 0; i < len(fp); i++ {
		if c := fp[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return badRequest(field, "%s: character %d (%q) is not a lower-case hex digit", field, i, c)
		}
	}
	return nil
}
