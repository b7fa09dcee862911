package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// Organisations of the certificates the CA signs: they say what a
// certificate is for.
const (
	OrgCA    = "gnt-ca"    // the cluster CA itself
	OrgNode  = "gnt-node"  // a gntd of the cluster (server and client)
	OrgAdmin = "gnt-admin" // an operator's client certificate
)

// Lifetimes and renewal.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	NodeValidity = 365 * 24 * time.Hour
	// Backdate is how long before its issue a certificate becomes valid:
	// machines whose clocks are minutes apart still accept it at once.
	Backdate = time.Hour
	// MaxPEM bounds any PEM input this package parses.
	MaxPEM = 64 << 10
)

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     *ecdsa.PrivateKey
}

// NewCA makes a CA for the named cluster, valid from now-Backdate for
// CAValidity.
func NewCA(cluster string, now time.Time) (*CA, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	skid := keyID(&key.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "gnt cluster CA " + cluster, Organization: []string{OrgCA}},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: encodeCert(der), Key: key}, nil
}

// LoadCA reads a CA from its key and its certificate in PEM; certPEM may
// be a bundle, of which the certificate of the key is taken.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	for _, c := range certs {
		if c.IsCA && key.PublicKey.Equal(c.PublicKey) {
			return &CA{Cert: c, CertPEM: encodeCert(c.Raw), Key: key}, nil
		}
	}
	return nil, errors.New("CA key does not match the CA certificate")
}

// KeyPEM is the CA's private key in PEM.
func (ca *CA) KeyPEM() []byte { return EncodeKey(ca.Key) }

// Leaf describes a certificate to sign.
type Leaf struct {
	// Name is the common name: the node's name, or the admin's.
	Name string
	// Org is OrgNode or OrgAdmin.
	Org string
	// DNS and IPs are the subject alternative names (node certificates).
	DNS []string
	IPs []net.IP
}

// Sign issues a certificate for pub as l describes, valid from
// now-Backdate for validity (never beyond the CA's own end). Node
// certificates serve as server and client; admin ones as client only.
func (ca *CA) Sign(pub crypto.PublicKey, l Leaf, now time.Time, validity time.Duration) ([]byte, error) {
	if l.Name == "" || len(l.Name) > 253 {
		return nil, errors.New("a certificate needs a name of 1-253 bytes")
	}
	if _, ok := pub.(*ecdsa.PublicKey); !ok {
		return nil, fmt.Errorf("public key of type %T: only ECDSA keys are signed", pub)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	switch l.Org {
	case OrgNode:
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	case OrgAdmin:
	default:
		return nil, fmt.Errorf("unknown certificate organisation %q", l.Org)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	end := now.Add(validity)
	if end.After(ca.Cert.NotAfter) {
		end = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: l.Name, Organization: []string{l.Org}},
		NotBefore:      now.Add(-Backdate),
		NotAfter:       end,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    usage,
		DNSNames:       l.DNS,
		IPAddresses:    l.IPs,
		AuthorityKeyId: ca.Cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, err
	}
	return encodeCert(der), nil
}

// NewKey makes a private key for a certificate.
func NewKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// EncodeKey is a private key in PEM (PKCS #8).
func EncodeKey(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err) // an ECDSA P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// ParseKey reads an ECDSA private key in PEM (PKCS #8 or SEC 1).
func ParseKey(data []byte) (*ecdsa.PrivateKey, error) {
	if len(data) > MaxPEM {
		return nil, fmt.Errorf("key of %d bytes is larger than %d", len(data), MaxPEM)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	switch b.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("a %T key, not ECDSA", k)
		}
		return ek, nil
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	}
	return nil, fmt.Errorf("PEM block of type %q is not a private key", b.Type)
}

// NewCSR makes a certificate request for key, named name.
func NewCSR(key *ecdsa.PrivateKey, name string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ParseCSR reads a certificate request in PEM and checks its signature
// (the requester holds the key). Only ECDSA P-256 keys are accepted.
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	if len(data) > MaxPEM {
		return nil, fmt.Errorf("certificate request of %d bytes is larger than %d", len(data), MaxPEM)
	}
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE REQUEST" || len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("want one PEM block of type CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	k, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		return nil, errors.New("certificate request: only ECDSA P-256 keys are signed")
	}
	return csr, nil
}

// ParseCerts reads one or more certificates in PEM; anything else in the
// input is an error.
func ParseCerts(data []byte) ([]*x509.Certificate, error) {
	if len(data) > MaxPEM {
		return nil, fmt.Errorf("certificates of %d bytes are larger than %d", len(data), MaxPEM)
	}
	var out []*x509.Certificate
	for {
		b, rest := pem.Decode(data)
		if b == nil {
			if len(strings.TrimSpace(string(data))) > 0 {
				return nil, errors.New("trailing data that is not PEM")
			}
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block of type %q is not a certificate", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		data = rest
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate")
	}
	return out, nil
}

// Fingerprint is the hex SHA-256 of a certificate, as shown to operators.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// NeedsRenewal reports whether a certificate has less than a third of its
// lifetime left at now (or has not started, or has ended).
func NeedsRenewal(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return now.Before(c.NotBefore) || now.After(c.NotAfter.Add(-life/3))
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyID(pub *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(der)
	return sum[:20]
}
