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
	fctx := s.followCtx(ctx)
	if err := s.followRenewal(fctx, "/2/gnt/renew-key", &st, func() (string, string) { return st.Phase, keyWaitingFor(st) }, nil); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "The cluster key is renewed (%s): every node signs with it; the old key is refused. "+
		"Copy cluster.key from a node's data dir to confd clients and to nodes that were offline\n", st.KeyID)
	return nil
}

// followCtx is the context a job or a renewal is followed in: the
// session's follow context when it has one, else ctx.
func (s *session) followCtx(ctx context.Context) context.Context {
	if s.follow != nil {
		return s.follow
	}
	return ctx
}

// followRenewal asks path how a renewal stands (into the status st)
// until its phase is done, or there is none, printing each new phase with
// what it waits for (phase returns both from st); step (nil: none) runs
// after each answer.
func (s *session) followRenewal(ctx context.Context, path string, st any, phase func() (string, string), step func(phase string) error) error {
	last := ""
	for {
		if _, err := s.api.Do(ctx, http.MethodGet, path, nil, nil, st); err != nil {
			return err
		}
		p, waiting := phase()
		if p != last {
			last = p
			fmt.Fprintf(s.stdout, "phase %s: %s\n", p, waiting)
		}
		if step != nil {
			if err := step(p); err != nil {
				return err
			}
		}
		if p == fsm.PhaseDone || p == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(renewPoll):
		}
	}
}

// What each phase of a renewal waits for: of a key, of a CA.
var (
	keyPhases = map[string]string{
		fsm.KeyPhaseTrust: "every node learns the new key",
		fsm.KeyPhaseUse:   "every node signs with the new key",
		fsm.KeyPhaseDone:  "the old key is dropped",
	}
	caPhases = map[string]string{
		fsm.PhaseTrust: "every node learns to trust the new CA",
		fsm.PhaseIssue: "every node gets a certificate of the new CA",
		fsm.PhaseDone:  "the old CA is dropped",
	}
)

// phaseWaits says what a phase of a renewal waits for: texts[phase], with
// the names of the nodes not there yet (lagging, offline ones left out)
// in every phase but done (a CA's and a key's renewal both end in
// fsm.PhaseDone).
func phaseWaits[N any](phase string, texts map[string]string, nodes []N, lagging func(N) (string, bool)) string {
	text, ok := texts[phase]
	if !ok {
		return "no renewal"
	}
	if phase == fsm.PhaseDone {
		return text
	}
	var names []string
	for _, n := range nodes {
		if name, ok := lagging(n); ok {
			names = append(names, name)
		}
	}
	return text + " (waiting for " + strings.Join(names, ", ") + ")"
}

// keyWaitingFor says what a phase of a key renewal waits for.
func keyWaitingFor(st rpc.RenewKeyStatus) string {
	return phaseWaits(st.Phase, keyPhases, st.Nodes, func(n rpc.RenewKeyNode) (string, bool) {
		return n.Name, !n.Offline && (st.Phase == fsm.KeyPhaseTrust && !n.HoldsNew || st.Phase == fsm.KeyPhaseUse && !n.UsesNew)
	})
}

// waitingFor says what a phase of a CA renewal waits for.
func waitingFor(st rpc.RenewCryptoStatus) string {
	return phaseWaits(st.Phase, caPhases, st.Nodes, func(n rpc.RenewCryptoNode) (string, bool) {
		return n.Name, !n.Offline && (st.Phase == fsm.PhaseTrust && !n.TrustsNew || st.Phase == fsm.PhaseIssue && !n.CertNew)
	})
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
	fctx := s.followCtx(ctx)
	renewed := f.cert == ""
	err := s.followRenewal(fctx, "/2/gnt/renew-crypto", &st, func() (string, string) { return st.Phase, waitingFor(st) }, func(phase string) error {
		if renewed || (phase != fsm.PhaseIssue && phase != fsm.PhaseDone) {
			return nil
		}
		renewed = true
		return s.renewClientCert(fctx, f)
	})
	if err != nil {
		return err
	}
	if err := s.refreshCA(fctx, f); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "The cluster CA is renewed: every node holds a certificate of %s; the old CA is no longer trusted\n", short(st.CA))
	return nil
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
