package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// Files of the client's configuration directory (~/.config/gnt) that
// `gntd dev` and `gnt cluster issue-client-cert` write.
const (
	caFileName         = pki.ClientCAFile
	clientCertFileName = pki.ClientCertFile
	clientKeyFileName  = pki.ClientKeyFile
	// dataDirCA is the CA certificate in a gntd's default data dir, used
	// when gnt runs on a candidate with nothing configured.
	dataDirCA = "/var/lib/gnt/ca.pem"
)

// tlsFlags are the global flags that select the TLS files.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ca-file", Usage: "the cluster CA certificate `FILE` the servers are checked against " +
			"(default: $GNT_CA_FILE, else ~/.config/gnt/ca.pem, else " + dataDirCA + ")"},
		&cli.StringFlag{Name: "cert-file", Usage: "client certificate `FILE` of the cluster CA (default: $GNT_CLIENT_CERT, else ~/.config/gnt/client.pem if it exists)"},
		&cli.StringFlag{Name: "cert-key-file", Usage: "key `FILE` of the client certificate (default: $GNT_CLIENT_KEY, else ~/.config/gnt/client-key.pem)"},
	}
}

// pick is the flag's value, else the environment variable's, else the
// first of the files that exists ("" if none).
func pick(c *cli.Context, flag, env string, getenv func(string) string, files ...string) string {
	if c != nil && c.IsSet(flag) {
		return c.String(flag)
	}
	if v := getenv(env); v != "" {
		return v
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err == nil {
			return f
		}
	}
	return ""
}

// tlsPaths are the CA file, the client certificate and its key the
// client uses: from the flags, the environment, else the files of
// ~/.config/gnt that exist ("" for none).
func tlsPaths(c *cli.Context, getenv func(string) string) (caPath, certPath, keyPath string) {
	dir := ""
	if home := getenv("HOME"); home != "" {
		dir = filepath.Join(home, ".config", "gnt")
	}
	join := func(name string) string {
		if dir == "" {
			return ""
		}
		return filepath.Join(dir, name)
	}
	caPath = pick(c, "ca-file", "GNT_CA_FILE", getenv, join(caFileName), dataDirCA)
	certPath = pick(c, "cert-file", "GNT_CLIENT_CERT", getenv, join(clientCertFileName))
	keyPath = pick(c, "cert-key-file", "GNT_CLIENT_KEY", getenv, join(clientKeyFileName))
	return caPath, certPath, keyPath
}

// clientTLS builds the TLS configuration of the API client from the flags,
// the environment and the files of ~/.config/gnt. Without a CA file the
// system's CAs are used, which a cluster's certificate does not chain to:
// the error then says where the CA file is looked for.
func clientTLS(c *cli.Context, getenv func(string) string) (*tls.Config, error) {
	caPath, certPath, keyPath := tlsPaths(c, getenv)
	if caPath == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	ca, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("the CA file: %w", err)
	}
	var cert, key []byte
	if certPath != "" {
		if cert, err = os.ReadFile(certPath); err != nil {
			return nil, fmt.Errorf("the client certificate: %w", err)
		}
		if keyPath == "" {
			return nil, fmt.Errorf("the client certificate %s needs its key (--cert-key-file)", certPath)
		}
		st, err := os.Stat(keyPath)
		if err != nil {
			return nil, fmt.Errorf("the client key: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%s has mode %o; a key must not be readable by group or others (chmod 600)", keyPath, st.Mode().Perm())
		}
		if key, err = os.ReadFile(keyPath); err != nil {
			return nil, fmt.Errorf("the client key: %w", err)
		}
	}
	cfg, err := pki.OperatorTLS(ca, cert, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caPath, err)
	}
	return cfg, nil
}

// newAPIClient is the API client of one run: HTTPS with cfg.TLS, or plain
// HTTP for the tests' in-process servers.
func newAPIClient(cfg Config, servers []string) *rpc.Client {
	if cfg.plainHTTP {
		return rpc.NewClient(servers)
	}
	return rpc.NewClientWith(servers, rpc.ClientOptions{TLS: cfg.TLS})
}

// errNoCA explains a certificate the client could not verify.
var errNoCA = errors.New("the server's certificate is not of a CA this client trusts: give the cluster's CA file " +
	"with --ca-file or $GNT_CA_FILE, or put it in ~/.config/gnt/ca.pem (gntd dev writes it; on a candidate it is <data-dir>/ca.pem)")

// issueClientCert is `gnt cluster issue-client-cert`: it needs no server,
// only the CA key of a candidate's data dir.
func (e environment) issueClientCert(c *cli.Context) error {
	out := c.String("out-dir")
	if out == "" {
		home := e.getenv("HOME")
		if home == "" {
			return usagef(c, "no --out-dir and no $HOME")
		}
		out = filepath.Join(home, ".config", "gnt")
	}
	ca, err := pki.LoadCAFromDir(c.String("data-dir"))
	if err != nil {
		return err
	}
	cert, key, err := pki.IssueAdmin(ca, c.String("name"), time.Now())
	if err != nil {
		return err
	}
	bundle, err := os.ReadFile(filepath.Join(c.String("data-dir"), "ca.pem"))
	if err != nil {
		return err
	}
	if err := pki.WriteClientFiles(out, bundle, cert, key); err != nil {
		return err
	}
	leaf, _ := pki.ParseCerts(cert)
	fmt.Fprintf(e.stdout, "Wrote %s, %s and %s in %s (certificate %q, valid until %s)\n",
		pki.ClientCAFile, pki.ClientCertFile, pki.ClientKeyFile, out, c.String("name"), leaf[0].NotAfter.UTC().Format("2006-01-02"))
	return nil
}
