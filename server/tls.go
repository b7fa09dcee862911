package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// Files of the data dir that hold TLS material. Keys are mode 0600.
const (
	caCertFile   = "ca.pem"     // the CA certificates this gntd trusts
	caKeyFile    = "ca-key.pem" // the CA key (candidates; gnt cluster issue-client-cert reads it)
	nodeCertFile = "node.pem"   // this gntd's certificate
	nodeKeyFile  = "node-key.pem"
	// rapiCertFile is an operator's certificate and key for the API port
	// (Ganeti's rapi.pem), served instead of the node certificate to
	// clients other than gntds.
	rapiCertFile = "rapi.pem"
)

// tlsState is this gntd's identity and what it needs to sign others'.
type tlsState struct {
	store *pki.Store

	mu       sync.Mutex
	ca       *pki.CA // the unsealed cluster CA, for the sealed value caSealed
	caSealed string
	client   *http.Client // to other gntds' APIs (pool checks, probes)
	node     *http.Transport

	rot rotation // the leader's record of a renewal of the CA (rotate.go)
	// refused is set when the cluster refused this gntd's node
	// certificate (the node was removed, then added again): the next
	// join asks for a new one without presenting the old.
	refused atomic.Bool
}

// peerCheck refuses the node certificate of a node removed from the
// cluster after the certificate was issued (an older one that a node
// removed and added again still holds, or a removed node's). Plain nodes
// hold no state and check nothing.
func (s *Server) peerCheck(c *x509.Certificate) error {
	if pki.Org(c) != pki.OrgNode {
		return nil
	}
	var at int64
	s.fsm.Read(func(st *fsm.State, _ uint64) { at = st.RemovedAt(c.Subject.CommonName) })
	if at == 0 || c.NotBefore.Add(pki.Backdate).UnixNano() > at {
		return nil
	}
	return fmt.Errorf("the certificate of node %s was issued before the node was removed from the cluster (%s)",
		c.Subject.CommonName, time.Unix(0, at).UTC().Format(time.RFC3339))
}

// certRefused reports whether a request failed because the other side
// refused this gntd's certificate in the TLS handshake.
func certRefused(err error) bool {
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "tls: bad certificate") || strings.Contains(msg, "tls: unknown certificate") ||
		strings.Contains(msg, "tls: certificate required")
}

// loadTLS reads the TLS material of the data dir. A node certificate that
// no longer verifies (expired, of a CA no longer trusted) is left for the
// next join to replace; an operator's rapi.pem that does not load stops
// the start.
func (s *Server) loadTLS() error {
	s.tls.store = pki.NewStore()
	s.tls.store.SetPeerCheck(s.peerCheck)
	ca, err := os.ReadFile(s.dir.file(caCertFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.tls.store.SetTrust(ca); err != nil {
		return fmt.Errorf("%s: %w", s.dir.file(caCertFile), err)
	}
	cert, cerr := os.ReadFile(s.dir.file(nodeCertFile))
	key, kerr := s.readSecret(nodeKeyFile)
	switch {
	case cerr == nil && kerr == nil:
		if err := s.tls.store.SetIdentity(cert, key); err != nil {
			s.log.Warn("the node certificate is not usable; asking for a new one at the next join", "file", s.dir.file(nodeCertFile), "error", err)
		}
	case kerr != nil && !errors.Is(kerr, os.ErrNotExist):
		s.log.Warn("the node key is not usable; asking for a new certificate at the next join", "error", kerr)
	}
	if data, err := s.readSecret(rapiCertFile); err == nil {
		pair, err := tls.X509KeyPair(data, data)
		if err != nil {
			return fmt.Errorf("%s: %w (it must hold the certificate and its key in PEM)", s.dir.file(rapiCertFile), err)
		}
		s.tls.store.SetAPICertificate(&pair)
		s.log.Info("the API serves the operator's certificate", "file", s.dir.file(rapiCertFile), "subject", pair.Leaf.Subject.CommonName)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// readSecret reads a key file of the data dir, refusing one that group or
// others may read.
func (s *Server) readSecret(name string) ([]byte, error) {
	path := s.dir.file(name)
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %o; it must not be readable by group or others (chmod 600)", path, st.Mode().Perm())
	}
	return os.ReadFile(path)
}

// setTrust installs and stores the CA bundle when it changed.
func (s *Server) setTrust(bundle string) error {
	if bytes.Equal(s.tls.store.CAPEM(), []byte(bundle)) {
		return nil
	}
	if err := s.tls.store.SetTrust([]byte(bundle)); err != nil {
		return err
	}
	s.log.Info("trusting the cluster CA", "certificates", len(s.tls.store.CAs()), "newest", pki.Fingerprint(s.tls.store.CAs()[0]))
	return writeFileAtomic(s.dir.file(caCertFile), []byte(bundle), 0o644)
}

// setIdentity installs and stores a node certificate and its key.
func (s *Server) setIdentity(cert, key []byte) error {
	if err := s.tls.store.SetIdentity(cert, key); err != nil {
		return err
	}
	if err := writeFileAtomic(s.dir.file(nodeKeyFile), key, 0o600); err != nil {
		return err
	}
	leaf := s.tls.store.Leaf()
	s.log.Info("node certificate installed", "expires", leaf.NotAfter.UTC().Format(time.RFC3339))
	return writeFileAtomic(s.dir.file(nodeCertFile), cert, 0o644)
}

// needsCertificate says whether the next join should ask for a node
// certificate: there is none, it is due for renewal, or it was issued by a
// CA other than the newest trusted one (a rotation is under way).
func (s *Server) needsCertificate(now time.Time) bool {
	leaf := s.tls.store.Leaf()
	cas := s.tls.store.CAs()
	if leaf == nil || len(cas) == 0 {
		return true
	}
	return pki.NeedsRenewal(leaf, now) || leaf.CheckSignatureFrom(cas[0]) != nil
}

// nodeLeaf is what a node's certificate certifies: its name and every
// address it registered.
func nodeLeaf(spec fsm.NodeSpec) pki.Leaf {
	l := pki.Leaf{Name: spec.Name, Org: pki.OrgNode, DNS: []string{spec.Name}}
	seen := map[string]bool{}
	add := func(hostport string) {
		host := hostport
		if h, _, err := net.SplitHostPort(hostport); err == nil {
			host = h
		}
		if ip := net.ParseIP(host); ip != nil && !seen[ip.String()] {
			seen[ip.String()] = true
			l.IPs = append(l.IPs, ip)
		}
	}
	for _, a := range []string{spec.PrimaryIP, spec.SecondaryIP, spec.Addrs.API, spec.Addrs.Raft, spec.Addrs.Agent} {
		add(a)
	}
	return l
}

// initPKI makes the cluster CA and this gntd's certificate at cluster init
// and returns the CA as the replicated state keeps it.
func (s *Server) initPKI(clusterName string, clusterKey []byte, spec fsm.NodeSpec, now time.Time) (*fsm.PKI, error) {
	ca, err := pki.NewCA(clusterName, now)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(s.dir.file(caKeyFile), ca.KeyPEM(), 0o600); err != nil {
		return nil, err
	}
	if err := s.setTrust(string(ca.CertPEM)); err != nil {
		return nil, err
	}
	kp, err := pki.NewKeyPair(spec.Name)
	if err != nil {
		return nil, err
	}
	cert, err := ca.Sign(&kp.Key.PublicKey, nodeLeaf(spec), now, pki.NodeValidity)
	if err != nil {
		return nil, err
	}
	if err := s.setIdentity(cert, kp.KeyPEM); err != nil {
		return nil, err
	}
	sealed, err := pki.Seal(pki.SealKey(clusterKey), ca.KeyPEM())
	if err != nil {
		return nil, err
	}
	s.log.Info("cluster CA created", "fingerprint", pki.Fingerprint(ca.Cert))
	return &fsm.PKI{CACerts: string(ca.CertPEM), CAKeySealed: sealed}, nil
}

// clusterCA is the CA of the replicated state, unsealed with the cluster
// key, and the bundle of trusted certificates.
func (s *Server) clusterCA() (*pki.CA, string, error) {
	var p *fsm.PKI
	s.fsm.Read(func(st *fsm.State, _ uint64) { p = st.PKI })
	if p == nil {
		return nil, "", &fsm.Error{Code: fsm.CodeState, Msg: "the cluster has no CA (it was initialised before TLS)"}
	}
	s.tls.mu.Lock()
	defer s.tls.mu.Unlock()
	if s.tls.ca != nil && s.tls.caSealed == p.CAKeySealed {
		return s.tls.ca, p.CACerts, nil
	}
	// During a renewal of cluster.key the CA key is sealed under the old
	// key, then under the new one: either may open it.
	keyPEM, err := s.unsealWithKeys(pki.SealKey, p.CAKeySealed)
	if err != nil {
		return nil, "", fmt.Errorf("the cluster CA key: %w", err)
	}
	ca, err := pki.LoadCA([]byte(p.CACerts), keyPEM)
	if err != nil {
		return nil, "", err
	}
	s.tls.ca, s.tls.caSealed = ca, p.CAKeySealed
	return ca, p.CACerts, nil
}

// signNode answers a join's certificate request (on the leader).
func (s *Server) signNode(req rpc.JoinRequest, resp *rpc.JoinResponse) error {
	ca, bundle, err := s.clusterCA()
	if err != nil {
		return err
	}
	resp.CACerts = bundle
	if req.CSR == "" {
		return nil
	}
	if p := s.pkiState(); p != nil && p.Phase == fsm.PhaseTrust && req.CertIssuerFP != "" {
		// Renewing the CA: not every gntd trusts the new one yet, so a
		// node that holds a certificate keeps it until phase issue.
		return nil
	}
	csr, err := pki.ParseCSR([]byte(req.CSR))
	if err != nil {
		return &fsm.Error{Code: fsm.CodeInval, Field: "csr", Msg: err.Error()}
	}
	cert, err := ca.Sign(csr.PublicKey, nodeLeaf(req.Node), time.Now(), pki.NodeValidity)
	if err != nil {
		return err
	}
	resp.Cert = string(cert)
	s.log.Info("node certificate issued", "node", req.Node.Name)
	return nil
}

// fetchTrust learns the cluster CA from one of targets when this gntd has
// none yet: the answer is signed with the join key, so an impostor without
// the cluster key cannot hand out its own CA.
func (s *Server) fetchTrust(ctx context.Context, targets []string, joinKey []byte) error {
	if len(s.tls.store.CAs()) > 0 {
		return nil
	}
	c := rpc.NewClientWith(targets, rpc.ClientOptions{TLS: &tls.Config{InsecureSkipVerify: true}, LocalAddr: s.localTCPAddr()})
	bundle, err := c.FetchCA(ctx, joinKey)
	if err != nil {
		return err
	}
	return s.setTrust(bundle)
}

// apiClient is an rpc client to other gntds' APIs, over mutual TLS with the
// node certificate.
func (s *Server) apiClient(targets []string) *rpc.Client {
	return rpc.NewClientWith(targets, rpc.ClientOptions{TLS: s.tls.store.ClientTLS(), LocalAddr: s.localTCPAddr()})
}

// httpClient is a plain HTTP client to other gntds' APIs over mutual TLS
// (URLs "https://"), with a timeout per request.
func (s *Server) httpClient() *http.Client {
	s.tls.mu.Lock()
	defer s.tls.mu.Unlock()
	if s.tls.client == nil {
		s.tls.client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, LocalAddr: s.localTCPAddr()}).DialContext,
			TLSClientConfig:     s.tls.store.ClientTLS(),
			TLSHandshakeTimeout: 2 * time.Second,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	return s.tls.client
}

// nodeTransport is the node RPC transport, over mutual TLS.
func (s *Server) nodeTransport() *http.Transport {
	s.tls.mu.Lock()
	defer s.tls.mu.Unlock()
	if s.tls.node == nil {
		s.tls.node = rpc.NewNodeTransport(s.tls.store.ClientTLS())
	}
	return s.tls.node
}

// localTCPAddr is the address this gntd's connections leave from.
func (s *Server) localTCPAddr() net.Addr {
	ip := net.ParseIP(s.cfg.Bind)
	if ip == nil || ip.IsUnspecified() {
		return nil
	}
	return &net.TCPAddr{IP: ip}
}
