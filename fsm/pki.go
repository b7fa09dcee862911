package fsm

import "strings"

// PKI is the cluster's certificate authority as the replicated state holds
// it: the CA certificates every gntd trusts, and the CA key sealed with a
// key derived from cluster.key (package pki), so that whichever candidate
// leads can sign node certificates while the state alone reveals nothing.
type PKI struct {
	// CACerts are the trusted CA certificates in PEM, newest first: one,
	// or two while the CA is being rotated.
	CACerts string `json:"ca_certs"`
	// CAKeySealed is the newest CA's private key, sealed.
	CAKeySealed string `json:"ca_key_sealed"`
	// Serial counts changes of the CA (1 at init).
	Serial int64 `json:"serial"`
}

// MaxPKIBytes bounds the PEM and sealed key a PKI record may carry.
const MaxPKIBytes = 64 << 10

func validatePKI(p *PKI) *Error {
	switch {
	case p == nil:
		return nil
	case !strings.HasPrefix(p.CACerts, "-----BEGIN CERTIFICATE-----"):
		return errf(CodeInval, "pki.ca_certs", "the CA certificates must be PEM certificates")
	case len(p.CACerts) > MaxPKIBytes || len(p.CAKeySealed) > MaxPKIBytes:
		return errf(CodeInval, "pki", "the CA certificates and sealed key are limited to %d bytes each", MaxPKIBytes)
	case p.CAKeySealed == "":
		return errf(CodeInval, "pki.ca_key_sealed", "the sealed CA key is missing")
	}
	return nil
}
