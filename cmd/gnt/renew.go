package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// renewPoll is how often `gnt cluster renew-crypto` asks how the renewal
// stands.
const renewPoll = 300 * time.Millisecond

func (e environment) clusterRenewCryptoCommand() *cli.Command {
	return &cli.Command{
		Name: "renew-crypto",
		Usage: "renew the cluster's credentials, rolling, without a failed request: only what is asked " +
			"(no flag: --new-cluster-certificate). Follows each renewal to its end (--submit: only starts it)",
		Description: "--new-cluster-certificate renews the cluster CA and every node certificate: the new CA is trusted beside the old " +
			"until every node holds a certificate of it, then the old is dropped; the CA file and client certificate this command uses are refreshed.\n" +
			"--new-cluster-key (alias --new-confd-hmac-key, Ganeti's name) renews cluster.key, the secret of every gntd's data dir from which " +
			"the confd HMAC key, the join, node RPC, self-diagnose and gossip keys and the CA key's seal derive: every gntd learns the new key " +
			"and accepts both, then signs with the new one, then drops the old one. Afterwards copy the new cluster.key (from any node's data dir) " +
			"to confd clients (gnt confd reads ~/.config/gnt/cluster.key) and to nodes that were offline; see docs/security.md.\n" +
			"With both flags the CA is renewed first, then the key.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "new-cluster-certificate", Usage: "renew the cluster CA and every node certificate (the default when no flag is given)"},
			&cli.BoolFlag{Name: "new-cluster-key", Aliases: []string{"new-confd-hmac-key"}, Usage: "renew cluster.key (the confd HMAC key, and every key derived from it)"},
		},
		Action: e.do(e.clusterRenewCryptoAll),
	}
}

// clusterRenewCryptoAll renews what the flags ask for: the CA (the
// default), then the cluster key.
func (e environment) clusterRenewCryptoAll(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	certs, key := c.Bool("new-cluster-certificate"), c.Bool("new-cluster-key")
	if !certs && !key {
		certs = true
	}
	if certs {
		if err := e.clusterRenewCrypto(ctx, s, c, args); err != nil {
			return err
		}
		if key && s.cfg.Submit {
			fmt.Fprintf(s.stdout, "Not renewing the cluster key: with --submit the CA renewal is under way, and the key is renewed after it; run renew-crypto --new-cluster-key once it is done\n")
			return nil
		}
	}
	if key {
		return s.renewClusterKey(ctx)
	}
	return nil
}

// renewClusterKey starts a renewal of cluster.key and follows it.
func (s *session) renewClusterKey(ctx context.Context) error {
	var st rpc.RenewKeyStatus
	if _, err := s.api.Do(ctx, http.MethodPost, "/2/gnt/renew-key", nil, nil, &st); err != nil {
		return err
	}
	if st.Started {
		fmt.Fprintf(s.stdout, "Renewing the cluster key: every node learns the new key %s and accepts both\n", st.KeyID)
	} else {
		fmt.Fprintf(s.stdout, "A renewal of the cluster key is under way already (phase %s, new key %s)\n", st.Phase, st.KeyID)
	}
	if s.cfg.Submit {
		fmt.Fprintf(s.stdout, "Not waiting (--submit). GET /2/gnt/renew-key says phase done at the end; then copy the new cluster.key to confd clients\n")
		return nil
	}
	fctx := ctx
	if s.follow != nil {
		fctx = s.follow
	}
	phase := ""
	for {
		if _, err := s.api.Do(fctx, http.MethodGet, "/2/gnt/renew-key", nil, nil, &st); err != nil {
			return err
		}
		if st.Phase != phase {
			phase = st.Phase
			fmt.Fprintf(s.stdout, "phase %s: %s\n", phase, keyWaitingFor(st))
		}
		if st.Phase == fsm.KeyPhaseDone || st.Phase == "" {
			break
		}
		select {
		case <-fctx.Done():
			return fctx.Err()
		case <-time.After(renewPoll):
		}
	}
	fmt.Fprintf(s.stdout, "The cluster key is renewed (%s): every node signs with it; the old key is refused. "+
		"Copy cluster.key from a node's data dir to confd clients and to nodes that were offline\n", st.KeyID)
	return nil
}

// keyWaitingFor says what a phase of a key renewal waits for.
func keyWaitingFor(st rpc.RenewKeyStatus) string {
	var names []string
	for _, n := range st.Nodes {
		switch {
		case n.Offline:
		case st.Phase == fsm.KeyPhaseTrust && !n.HoldsNew, st.Phase == fsm.KeyPhaseUse && !n.UsesNew:
			names = append(names, n.Name)
		}
	}
	switch st.Phase {
	case fsm.KeyPhaseTrust:
		return "every node learns the new key (waiting for " + strings.Join(names, ", ") + ")"
	case fsm.KeyPhaseUse:
		return "every node signs with the new key (waiting for " + strings.Join(names, ", ") + ")"
	case fsm.KeyPhaseDone:
		return "the old key is dropped"
	}
	return "no renewal"
}

// renewFiles are the client's TLS files that a renewal refreshes.
type renewFiles struct {
	ca, cert, key string
}

func (e environment) clusterRenewCrypto(ctx context.Context, s *session, c *cli.Context, args []string) error {
	if err := nArgs(c, args, 0, 0); err != nil {
		return err
	}
	var f renewFiles
	f.ca, f.cert, f.key = tlsPaths(c, e.getenv)
	if f.ca == dataDirCA {
		f.ca = "" // the gntd keeps its data dir's file itself
	}
	var st rpc.RenewCryptoStatus
	if _, err := s.api.Do(ctx, http.MethodPost, "/2/gnt/renew-crypto", nil, nil, &st); err != nil {
		return err
	}
	if st.Started {
		fmt.Fprintf(s.stdout, "Renewing the cluster CA: the new CA %s is trusted beside the old\n", short(st.CA))
	} else {
		fmt.Fprintf(s.stdout, "A renewal of the cluster CA is under way already (phase %s, new CA %s)\n", st.Phase, short(st.CA))
	}
	if err := s.refreshCA(ctx, f); err != nil {
		return err
	}
	if s.cfg.Submit {
		fmt.Fprintf(s.stdout, "Not waiting (--submit). Before the renewal ends (GET /2/gnt/renew-crypto says phase done), "+
			"refresh the CA file of every client, and renew client certificates in phase issue: "+
			"certificates of the old CA are refused after it\n")
		return nil
	}
	fctx := ctx
	if s.follow != nil {
		fctx = s.follow
	}
	phase, renewed := "", f.cert == ""
	for {
		if _, err := s.api.Do(fctx, http.MethodGet, "/2/gnt/renew-crypto", nil, nil, &st); err != nil {
			return err
		}
		if st.Phase != phase {
			phase = st.Phase
			fmt.Fprintf(s.stdout, "phase %s: %s\n", phase, waitingFor(st))
		}
		if !renewed && (st.Phase == fsm.PhaseIssue || st.Phase == fsm.PhaseDone) {
			if err := s.renewClientCert(fctx, f); err != nil {
				return err
			}
			renewed = true
		}
		if st.Phase == fsm.PhaseDone || st.Phase == "" {
			break
		}
		select {
		case <-fctx.Done():
			return fctx.Err()
		case <-time.After(renewPoll):
		}
	}
	if err := s.refreshCA(fctx, f); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "The cluster CA is renewed: every node holds a certificate of %s; the old CA is no longer trusted\n", short(st.CA))
	return nil
}

// waitingFor says what a phase waits for.
func waitingFor(st rpc.RenewCryptoStatus) string {
	var names []string
	for _, n := range st.Nodes {
		switch {
		case n.Offline:
		case st.Phase == fsm.PhaseTrust && !n.TrustsNew, st.Phase == fsm.PhaseIssue && !n.CertNew:
			names = append(names, n.Name)
		}
	}
	switch st.Phase {
	case fsm.PhaseTrust:
		return "every node learns to trust the new CA (waiting for " + strings.Join(names, ", ") + ")"
	case fsm.PhaseIssue:
		return "every node gets a certificate of the new CA (waiting for " + strings.Join(names, ", ") + ")"
	case fsm.PhaseDone:
		return "the old CA is dropped"
	}
	return "no renewal"
}

// refreshCA writes the cluster's current CA bundle to the client's CA
// file and makes the session trust it.
func (s *session) refreshCA(ctx context.Context, f renewFiles) error {
	var ca rpc.CAResponse
	if _, err := s.api.Do(ctx, http.MethodGet, "/2/gnt/ca", nil, nil, &ca); err != nil {
		return fmt.Errorf("reading the cluster CA: %w", err)
	}
	if _, err := pki.ParseCerts([]byte(ca.CACerts)); err != nil {
		return fmt.Errorf("the cluster CA the server sent: %w", err)
	}
	if f.ca != "" {
		if err := pki.WriteFile(f.ca, []byte(ca.CACerts), 0o644); err != nil {
			return fmt.Errorf("writing the CA file: %w", err)
		}
	}
	if s.cfg.TLS != nil && !s.cfg.plainHTTP {
		certs, _ := pki.ParseCerts([]byte(ca.CACerts))
		pool := x509.NewCertPool()
		for _, c := range certs {
			pool.AddCert(c)
		}
		cfg := s.cfg.TLS.Clone()
		cfg.RootCAs = pool
		s.setTLS(cfg)
	}
	return nil
}

// renewClientCert replaces the session's client certificate by one of
// the newest CA, for a new key, under the same name.
func (s *session) renewClientCert(ctx context.Context, f renewFiles) error {
	name := "admin"
	if data, err := os.ReadFile(f.cert); err == nil {
		if certs, err := pki.ParseCerts(data); err == nil && certs[0].Subject.CommonName != "" {
			name = certs[0].Subject.CommonName
		}
	}
	kp, err := pki.NewKeyPair(name)
	if err != nil {
		return err
	}
	var out rpc.ClientCertResponse
	if _, err := s.api.Do(ctx, http.MethodPost, "/2/gnt/client-cert", nil, rpc.ClientCertRequest{CSR: string(kp.CSR)}, &out); err != nil {
		return fmt.Errorf("renewing the client certificate %s: %w", f.cert, err)
	}
	if f.key == "" {
		return errors.New("the client certificate has no key file")
	}
	if _, err := tls.X509KeyPair([]byte(out.Cert), kp.KeyPEM); err != nil {
		return fmt.Errorf("the client certificate the server sent: %w", err)
	}
	// The key first: a cert file without its key is worse than an old
	// pair.
	if err := pki.WriteFile(f.key, kp.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("writing the client key: %w", err)
	}
	if err := pki.WriteFile(f.cert, []byte(out.Cert), 0o644); err != nil {
		return fmt.Errorf("writing the client certificate: %w", err)
	}
	fmt.Fprintf(s.stdout, "Renewed the client certificate %q of %s\n", name, f.cert)
	if s.cfg.TLS != nil && !s.cfg.plainHTTP {
		cfg, err := pki.OperatorTLS([]byte(out.CACerts), []byte(out.Cert), kp.KeyPEM)
		if err != nil {
			return err
		}
		s.setTLS(cfg)
	}
	return nil
}

// setTLS makes the session's API client use cfg from the next request on.
func (s *session) setTLS(cfg *tls.Config) {
	s.cfg.TLS = cfg
	s.api = newAPIClient(s.cfg, s.cfg.Servers)
	s.api.SetBasicAuth(s.cfg.Creds.User, s.cfg.Creds.Password)
}

func short(fp string) string {
	if len(fp) > 16 {
		return fp[:16]
	}
	return fp
}
