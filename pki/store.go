package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// InternalServerName is the server name gntds send when they talk to each
// other's API port: a gntd answers it with its node certificate even when
// an operator installed another certificate for the RAPI.
const InternalServerName = "gnt-node.internal"

// Store holds one party's TLS identity (certificate and key) and trust
// bundle (the cluster CA certificates, newest first; two during a
// rotation). Its TLS configurations read the current contents at every
// handshake. The zero value is not usable; use NewStore.
type Store struct {
	mu      sync.RWMutex
	cert    *tls.Certificate // nil until an identity is set
	leaf    *x509.Certificate
	caPEM   []byte
	cas     []*x509.Certificate
	pool    *x509.CertPool
	api     *tls.Certificate // an operator's RAPI certificate, or nil
	check   func(*x509.Certificate) error
	servers map[tls.ClientAuthType]cachedServer
	// gen counts changes that drop servers: a configuration built from
	// older contents is not cached (a handshake racing a new identity
	// would otherwise keep serving the old certificate).
	gen uint64
	// beforeCache, in tests, runs between building a server
	// configuration and caching it.
	beforeCache func()
	// fallback is a throw-away self-signed certificate served before this
	// party has an identity (a gntd that has not joined a cluster yet).
	fallback *tls.Certificate
	now      func() time.Time
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{pool: x509.NewCertPool(), now: time.Now}
}

// SetTrust replaces the trust bundle with the CA certificates in caPEM.
func (s *Store) SetTrust(caPEM []byte) error {
	cas, err := ParseCerts(caPEM)
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		if !c.IsCA {
			return fmt.Errorf("CA bundle: %q is not a CA certificate", c.Subject.CommonName)
		}
		pool.AddCert(c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.caPEM, s.cas, s.pool = bytes.Clone(caPEM), cas, pool
	s.servers = nil
	s.gen++
	return nil
}

// SetIdentity replaces the certificate and key; the certificate must
// chain to the trust bundle.
func (s *Store) SetIdentity(certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("certificate and key: %w", err)
	}
	leaf := pair.Leaf
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.pool, CurrentTime: s.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("certificate %q does not chain to the cluster CA: %w", leaf.Subject.CommonName, err)
	}
	s.cert, s.leaf = &pair, leaf
	s.servers = nil
	s.gen++
	return nil
}

// SetAPICertificate makes the API port serve an operator's certificate
// (Ganeti's rapi.pem) to clients other than gntds; nil goes back to the
// node certificate.
func (s *Store) SetAPICertificate(c *tls.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.api = c
}

// SetPeerCheck installs a check run on every verified peer certificate
// after its chain (a gntd refuses the certificates of removed nodes).
func (s *Store) SetPeerCheck(fn func(*x509.Certificate) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.check = fn
	s.servers = nil
	s.gen++
}

// Leaf is the current certificate, or nil.
func (s *Store) Leaf() *x509.Certificate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.leaf
}

// CAs are the trusted CA certificates, newest first.
func (s *Store) CAs() []*x509.Certificate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.cas)
}

// CAPEM is the trust bundle in PEM.
func (s *Store) CAPEM() []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return bytes.Clone(s.caPEM)
}

// VerifyPeer checks a peer's certificate chain against the trust bundle
// for usage, then the peer check. It returns the verified leaf.
func (s *Store) VerifyPeer(chain []*x509.Certificate, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("no certificate")
	}
	s.mu.RLock()
	pool, check, now := s.pool, s.check, s.now()
	s.mu.RUnlock()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if check != nil {
		if err := check(leaf); err != nil {
			return nil, err
		}
	}
	return leaf, nil
}

// Org is the organisation a certificate was issued for (OrgNode,
// OrgAdmin), or "".
func Org(c *x509.Certificate) string {
	if c == nil || len(c.Subject.Organization) != 1 {
		return ""
	}
	return c.Subject.Organization[0]
}

// ServerTLS is the configuration of a TLS server port. With
// tls.RequireAndVerifyClientCert (Raft, node RPC) only gntds of this
// cluster (node certificates) get through the handshake; with
// tls.VerifyClientCertIfGiven (the API, maintd) a client certificate is
// optional, and when given it must be one of this cluster's.
func (s *Store) ServerTLS(clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			return s.serverConfig(clientAuth, hello.ServerName == InternalServerName)
		},
	}
}

// TicketKeyLife is how long a server configuration, and the key of its
// session tickets, is kept before it is built anew.
const TicketKeyLife = 24 * time.Hour

// cachedServer is a server configuration and when it was built.
type cachedServer struct {
	cfg   *tls.Config
	built time.Time
}

func (s *Store) serverConfig(clientAuth tls.ClientAuthType, internal bool) (*tls.Config, error) {
	s.mu.RLock()
	api := s.api
	c, cached := s.servers[clientAuth]
	gen, hook := s.gen, s.beforeCache
	s.mu.RUnlock()
	if api != nil && !internal && clientAuth != tls.RequireAndVerifyClientCert {
		// Built each time: an operator's certificate is rare and only on
		// the API port.
		cfg, err := s.buildServer(clientAuth)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{*api}
		return cfg, nil
	}
	if cached && time.Since(c.built) < TicketKeyLife {
		return c.cfg, nil
	}
	cfg, err := s.buildServer(clientAuth)
	if err != nil {
		return nil, err
	}
	// Session tickets of this configuration only: a resumed session
	// carries the certificates of its first handshake, and after a new
	// identity or trust bundle (a renewal of the CA) a peer must shake
	// hands anew with the current ones rather than fail on the old.
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, err
	}
	cfg.SetSessionTicketKeys([][32]byte{key})
	if hook != nil {
		hook()
	}
	s.mu.Lock()
	if s.gen == gen {
		if s.servers == nil {
			s.servers = map[tls.ClientAuthType]cachedServer{}
		}
		s.servers[clientAuth] = cachedServer{cfg: cfg, built: time.Now()}
	}
	s.mu.Unlock()
	return cfg, nil
}

func (s *Store) buildServer(clientAuth tls.ClientAuthType) (*tls.Config, error) {
	s.mu.RLock()
	cert, pool := s.cert, s.pool
	s.mu.RUnlock()
	if cert == nil {
		if clientAuth == tls.RequireAndVerifyClientCert {
			return nil, errors.New("this gntd has no cluster certificate yet")
		}
		var err error
		if cert, err = s.fallbackCert(); err != nil {
			return nil, err
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*cert},
		ClientCAs:    pool,
		ClientAuth:   clientAuth,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil // ClientAuth already decided whether one is needed
			}
			leaf, err := s.VerifyPeer(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
			if err != nil {
				return err
			}
			if clientAuth == tls.RequireAndVerifyClientCert && Org(leaf) != OrgNode {
				return fmt.Errorf("certificate %q is not a node certificate", leaf.Subject.CommonName)
			}
			return nil
		},
	}
	return cfg, nil
}

func (s *Store) fallbackCert() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fallback != nil {
		return s.fallback, nil
	}
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := s.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "gntd not in a cluster yet"},
		NotBefore:    now.Add(-Backdate), NotAfter: now.Add(NodeValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	s.fallback = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return s.fallback, nil
}

// ClientTLS is the configuration a gntd dials other gntds with (Raft,
// node RPC, the API between candidates): it presents the node
// certificate, and accepts only a node certificate of this cluster that
// passes the peer check. Host names are not checked: every holder of a
// node certificate holds the cluster key, the root of trust, already.
func (s *Store) ClientTLS() *tls.Config { return s.clientTLS(true) }

// ClientTLSNoCert is ClientTLS without presenting the node certificate:
// for requests that authenticate otherwise (a signed join that asks for a
// new certificate because the old one is refused).
func (s *Store) ClientTLSNoCert() *tls.Config { return s.clientTLS(false) }

func (s *Store) clientTLS(present bool) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         InternalServerName,
		InsecureSkipVerify: true, // verified by VerifyConnection against the current bundle
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			s.mu.RLock()
			defer s.mu.RUnlock()
			if s.cert == nil || !present {
				return &tls.Certificate{}, nil
			}
			return s.cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			leaf, err := s.VerifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if Org(leaf) != OrgNode {
				return fmt.Errorf("certificate %q is not a node certificate", leaf.Subject.CommonName)
			}
			return nil
		},
		ClientSessionCache: tls.NewLRUClientSessionCache(256),
	}
}

// KeyPair is a freshly made key and its certificate request.
type KeyPair struct {
	Key    *ecdsa.PrivateKey
	KeyPEM []byte
	CSR    []byte
}

// NewKeyPair makes a key and a certificate request named name.
func NewKeyPair(name string) (KeyPair, error) {
	k, err := NewKey()
	if err != nil {
		return KeyPair{}, err
	}
	csr, err := NewCSR(k, name)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{Key: k, KeyPEM: EncodeKey(k), CSR: csr}, nil
}

// SetClock replaces the clock that certificates are checked against (tests).
func (s *Store) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
	s.servers = nil
	s.gen++
}

// OperatorTLS is the configuration of an operator's client (the gnt CLI):
// the server must present a certificate of the cluster CA in caPEM for the
// address dialed (its IP or name); with certPEM and keyPEM it presents
// that client certificate too.
func OperatorTLS(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	cas, err := ParseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ClientSessionCache: tls.NewLRUClientSessionCache(64)}
	if len(certPEM) > 0 || len(keyPEM) > 0 {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
