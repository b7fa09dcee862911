package server

import (
	"context"
	"encoding/pem"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// Renewal of the cluster CA (gnt cluster renew-crypto), driven by the
// leader and fed by joins:
//
//   - POST /2/gnt/renew-crypto makes a new CA and applies phase trust:
//     the bundle is the new CA and the old, the sealed key the new CA's.
//     Every gntd learns the bundle at its next join and keeps its
//     certificate of the old CA (the leader signs none of the new CA yet,
//     so no gntd presents a certificate another does not trust).
//   - Once every node of the configuration that is not offline reports
//     trusting the new CA, the leader applies phase issue: joins now get
//     certificates of the new CA, which every gntd accepts.
//   - Once every such node reports a certificate of the new CA, the leader
//     applies phase done: the bundle is the new CA alone, and every gntd
//     refuses the old one's certificates from its next join on.
//
// The reports live in the leader's memory: a new leader learns them again
// within a join interval, and the phase itself is in the replicated state.

// certReport is what a node's last join said of its certificates.
type certReport struct {
	trust  string // fingerprint of the newest CA it trusts
	issuer string // fingerprint of the CA of its certificate
	at     time.Time
}

// rotation is the leader's record of the nodes' reports.
type rotation struct {
	mu      sync.Mutex // held while a phase change is applied, too
	reports map[string]certReport
	now     func() time.Time
}

// record keeps a node's report.
func (r *rotation) record(node, trust, issuer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reports == nil {
		r.reports = map[string]certReport{}
	}
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	r.reports[node] = certReport{trust: trust, issuer: issuer, at: now()}
}

// rotationMember is a node of the configuration as a renewal sees it.
type rotationMember struct {
	name    string
	offline bool
}

// rotationStep is one step of a rotation: from phase from it moves to
// phase next once every member that is not offline reports what done
// accepts.
type rotationStep[R any] struct {
	from, next string
	done       func(R) bool
}

// nextRotationPhase says which phase a rotation in phase moves to by its
// table of steps, given the reports of members; "" means it stays (no
// step leaves phase, a member has not reported what the step waits for,
// or every member is offline).
func nextRotationPhase[R any](phase string, steps []rotationStep[R], members []rotationMember, reports map[string]R) string {
	for _, st := range steps {
		if st.from != phase {
			continue
		}
		waited := 0
		for _, m := range members {
			if m.offline {
				continue
			}
			waited++
			rep, ok := reports[m.name]
			if !ok || !st.done(rep) {
				return ""
			}
		}
		if waited == 0 {
			return ""
		}
		return st.next
	}
	return ""
}

// nextPhase says which phase a renewal in phase moves to, given the
// newest CA's fingerprint and the reports of members; "" means it stays.
func nextPhase(phase, newCA string, members []rotationMember, reports map[string]certReport) string {
	return nextRotationPhase(phase, []rotationStep[certReport]{
		{fsm.PhaseTrust, fsm.PhaseIssue, func(r certReport) bool { return r.trust == newCA }},
		{fsm.PhaseIssue, fsm.PhaseDone, func(r certReport) bool { return r.trust == newCA && r.issuer == newCA }},
	}, members, reports)
}

// progress is the per-node view of a renewal at now.
func progress(newCA string, members []rotationMember, reports map[string]certReport, now time.Time) []rpc.RenewCryptoNode {
	out := make([]rpc.RenewCryptoNode, 0, len(members))
	for _, m := range members {
		n := rpc.RenewCryptoNode{Name: m.name, Offline: m.offline}
		if rep, ok := reports[m.name]; ok {
			n.Reported = true
			n.TrustsNew = rep.trust == newCA
			n.CertNew = rep.issuer == newCA
			n.Age = now.Sub(rep.at).Round(time.Millisecond).Seconds()
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// pkiState is a copy of the replica's PKI, or nil.
func (s *Server) pkiState() *fsm.PKI {
	var p *fsm.PKI
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if st.PKI != nil {
			c := *st.PKI
			p = &c
		}
	})
	return p
}

// rotationView reads the PKI and the members from the replica.
func (s *Server) rotationView() (*fsm.PKI, []rotationMember, string) {
	var (
		p       *fsm.PKI
		members []rotationMember
		name    string
	)
	s.fsm.Read(func(st *fsm.State, _ uint64) {
		if st.PKI != nil {
			c := *st.PKI
			p = &c
		}
		if st.Cluster != nil {
			name = st.Cluster.Name
		}
		for _, n := range st.SortedNodes() {
			members = append(members, rotationMember{name: n.Name, offline: n.Offline})
		}
	})
	return p, members, name
}

// newestCA is the first certificate of a bundle, as its exact PEM text,
// and its fingerprint.
func newestCA(bundle string) (string, string, error) {
	b, rest := pem.Decode([]byte(bundle))
	if b == nil {
		return "", "", errors.New("the CA bundle holds no certificate")
	}
	certs, err := pki.ParseCerts([]byte(bundle[:len(bundle)-len(rest)]))
	if err != nil {
		return "", "", err
	}
	return bundle[:len(bundle)-len(rest)], pki.Fingerprint(certs[0]), nil
}

// renewStatus builds the answer of GET /2/gnt/renew-crypto.
func (s *Server) renewStatus() (rpc.RenewCryptoStatus, error) {
	p, members, _ := s.rotationView()
	if p == nil {
		return rpc.RenewCryptoStatus{}, &fsm.Error{Code: fsm.CodeState, Msg: "the cluster has no CA (it was initialised before TLS)"}
	}
	certs, err := pki.ParseCerts([]byte(p.CACerts))
	if err != nil {
		return rpc.RenewCryptoStatus{}, err
	}
	st := rpc.RenewCryptoStatus{Phase: p.Phase, Serial: p.Serial, CA: pki.Fingerprint(certs[0])}
	for _, c := range certs {
		st.Trusted = append(st.Trusted, pki.Fingerprint(c))
	}
	r := &s.tls.rot
	r.mu.Lock()
	st.Nodes = progress(st.CA, members, r.reports, time.Now())
	r.mu.Unlock()
	return st, nil
}

// isLeader reports whether this gntd leads with its leadership established.
func (s *Server) isLeader() bool {
	_, self := s.Leader()
	return self
}

// RenewCryptoStatus implements rpc.CryptoRenewer.
func (s *Server) RenewCryptoStatus(ctx context.Context) (rpc.RenewCryptoStatus, error) {
	if !s.isLeader() {
		return rpc.RenewCryptoStatus{}, rpc.ErrNotLeader
	}
	return s.renewStatus()
}

// RenewCrypto implements rpc.CryptoRenewer: it makes a new CA and applies
// phase trust, unless a renewal is under way already.
func (s *Server) RenewCrypto(ctx context.Context) (rpc.RenewCryptoStatus, error) {
	if !s.isLeader() {
		return rpc.RenewCryptoStatus{}, rpc.ErrNotLeader
	}
	r := &s.tls.rot
	r.mu.Lock()
	p, _, name := s.rotationView()
	if p == nil {
		r.mu.Unlock()
		return rpc.RenewCryptoStatus{}, &fsm.Error{Code: fsm.CodeState, Msg: "the cluster has no CA to renew (it was initialised before TLS)"}
	}
	started := false
	if !p.Rotating() {
		if err := s.startRenewal(ctx, p, name); err != nil {
			r.mu.Unlock()
			return rpc.RenewCryptoStatus{}, err
		}
		started = true
	}
	r.mu.Unlock()
	st, err := s.renewStatus()
	st.Started = started
	return st, err
}

func (s *Server) startRenewal(ctx context.Context, p *fsm.PKI, cluster string) error {
	now := time.Now()
	ca, err := pki.NewCA(cluster, now)
	if err != nil {
		return err
	}
	key := s.currentKey(p) // the renewed one right after a renewal of cluster.key
	if key == nil {
		return errors.New("this gntd holds no cluster key")
	}
	sealed, err := pki.Seal(pki.SealKey(key), ca.KeyPEM())
	if err != nil {
		return err
	}
	cmd := fsm.PKIRotate{Now: now.UnixNano(), Serial: p.Serial, Phase: fsm.PhaseTrust,
		CACerts: string(ca.CertPEM) + p.CACerts, CAKeySealed: sealed}
	if err := s.applyRotate(ctx, cmd); err != nil {
		return err
	}
	s.log.Info("renewing the cluster CA: trusting the new CA beside the old", "new", pki.Fingerprint(ca.Cert))
	return nil
}

func (s *Server) applyRotate(ctx context.Context, cmd fsm.PKIRotate) error {
	resp, _, err := s.Apply(ctx, cmd)
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err
	}
	return nil
}

// rotationJoin records a join's report and moves a renewal on when every
// node is ready for its next phase (on the leader).
func (s *Server) rotationJoin(ctx context.Context, req rpc.JoinRequest) {
	r := &s.tls.rot
	r.record(req.Node.Name, req.TrustFP, req.CertIssuerFP)
	if !s.pkiState().Rotating() {
		return // the usual case: no node list to read
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, members, _ := s.rotationView()
	if !p.Rotating() {
		return
	}
	first, newCA, err := newestCA(p.CACerts)
	if err != nil {
		s.log.Error("renewing the cluster CA: the bundle", "error", err)
		return
	}
	next := nextPhase(p.Phase, newCA, members, r.reports)
	if next == "" {
		return
	}
	cmd := fsm.PKIRotate{Now: time.Now().UnixNano(), Serial: p.Serial, Phase: next, CACerts: p.CACerts, CAKeySealed: p.CAKeySealed}
	if next == fsm.PhaseDone {
		cmd.CACerts = first
	}
	if err := s.applyRotate(ctx, cmd); err != nil {
		s.log.Warn("renewing the cluster CA", "phase", next, "error", err)
		return
	}
	switch next {
	case fsm.PhaseIssue:
		s.log.Info("renewing the cluster CA: every node trusts the new CA; issuing its certificates", "new", newCA)
	case fsm.PhaseDone:
		s.log.Info("renewing the cluster CA: every node holds a certificate of the new CA; the old CA is no longer trusted", "new", newCA)
	}
}

// SignClientCert implements rpc.CryptoRenewer: an admin client
// certificate of the newest CA, refused while a renewal is in phase trust
// (not every gntd trusts the newest CA yet).
func (s *Server) SignClientCert(ctx context.Context, csrPEM string) (rpc.ClientCertResponse, error) {
	if !s.isLeader() {
		return rpc.ClientCertResponse{}, rpc.ErrNotLeader
	}
	csr, err := pki.ParseCSR([]byte(csrPEM))
	if err != nil {
		return rpc.ClientCertResponse{}, &fsm.Error{Code: fsm.CodeInval, Field: "csr", Msg: err.Error()}
	}
	name := csr.Subject.CommonName
	if e := fsm.ValidateRAPIUserName("csr common name", name); e != nil {
		return rpc.ClientCertResponse{}, e
	}
	if p := s.pkiState(); p != nil && p.Phase == fsm.PhaseTrust {
		return rpc.ClientCertResponse{}, &fsm.Error{Code: fsm.CodeState, Msg: "the cluster CA is being renewed and not every gntd trusts the new CA yet (phase trust); ask again in a few seconds"}
	}
	ca, bundle, err := s.clusterCA()
	if err != nil {
		return rpc.ClientCertResponse{}, err
	}
	cert, err := ca.Sign(csr.PublicKey, pki.Leaf{Name: name, Org: pki.OrgAdmin}, time.Now(), pki.NodeValidity)
	if err != nil {
		return rpc.ClientCertResponse{}, err
	}
	s.log.Info("admin client certificate issued", "name", name, "ca", pki.Fingerprint(ca.Cert))
	return rpc.ClientCertResponse{Cert: string(cert), CACerts: bundle}, nil
}

// certReportOf is what this gntd reports in its joins: the newest CA it
// trusts and the CA of its certificate.
func certReportOf(st *pki.Store) (trust, issuer string) {
	cas := st.CAs()
	if len(cas) > 0 {
		trust = pki.Fingerprint(cas[0])
	}
	if leaf := st.Leaf(); leaf != nil {
		for _, ca := range cas {
			if leaf.CheckSignatureFrom(ca) == nil {
				issuer = pki.Fingerprint(ca)
				break
			}
		}
	}
	return trust, issuer
}

// syncCAKeyFile keeps the CA key of the data dir (ca-key.pem, which gnt
// cluster issue-client-cert and gntd dev read) that of the newest trusted
// CA after a renewal; only a gntd that has the file keeps it.
func (s *Server) syncCAKeyFile() {
	path := s.dir.file(caKeyFile)
	data, err := s.readSecret(caKeyFile)
	if err != nil {
		return
	}
	cas := s.tls.store.CAs()
	if len(cas) == 0 {
		return
	}
	if k, err := pki.ParseKey(data); err == nil && k.PublicKey.Equal(cas[0].PublicKey) {
		return
	}
	ca, _, err := s.clusterCA()
	if err != nil || !ca.Cert.Equal(cas[0]) {
		return // the replica has not caught up yet: next join
	}
	if err := writeFileAtomic(path, ca.KeyPEM(), 0o600); err != nil {
		s.log.Error("writing the renewed CA key", "file", path, "error", err)
		return
	}
	s.log.Info("the CA key of the data dir is the renewed CA's", "file", path)
}

var _ rpc.CryptoRenewer = (*Server)(nil)
