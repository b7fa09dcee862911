package integration

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// clusterTLS is what a test needs to talk to a cluster over TLS: an admin
// client certificate (API, maintd) and a node certificate (node RPC, the
// way the leader talks to agents), both minted from the first
// candidate's CA.
type clusterTLS struct {
	admin *tls.Config
	node  *pki.Store
	http  *http.Client
	nodeT *http.Transport
}

// insecureHTTP asks gntds things before a cluster (and its CA) exists, or
// only whether they answer.
var insecureHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
	Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// setUpTLS mints the test's certificates from the CA in dataDir and writes
// the admin's files where the gnt CLI finds them (HOME is c.Dir).
func (c *Cluster) setUpTLS(dataDir string) {
	c.t.Helper()
	ca, err := pki.LoadCAFromDir(dataDir)
	if err != nil {
		c.t.Fatalf("cluster CA: %v", err)
	}
	bundle, err := os.ReadFile(filepath.Join(dataDir, "ca.pem"))
	if err != nil {
		c.t.Fatal(err)
	}
	cert, key, err := pki.IssueAdmin(ca, "test-admin", time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	if err := pki.WriteClientFiles(filepath.Join(c.Dir, ".config", "gnt"), bundle, cert, key); err != nil {
		c.t.Fatal(err)
	}
	admin, err := pki.OperatorTLS(bundle, cert, key)
	if err != nil {
		c.t.Fatal(err)
	}
	kp, err := pki.NewKeyPair("test-node")
	if err != nil {
		c.t.Fatal(err)
	}
	nodeCert, err := ca.Sign(&kp.Key.PublicKey, pki.Leaf{Name: "test-node", Org: pki.OrgNode}, time.Now(), pki.NodeValidity)
	if err != nil {
		c.t.Fatal(err)
	}
	node := pki.NewStore()
	if err := node.SetTrust(bundle); err != nil {
		c.t.Fatal(err)
	}
	if err := node.SetIdentity(nodeCert, kp.KeyPEM); err != nil {
		c.t.Fatal(err)
	}
	c.tls = &clusterTLS{
		admin: admin, node: node,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			Proxy: nil, TLSClientConfig: admin, MaxIdleConnsPerHost: 16}},
		nodeT: rpc.NewNodeTransport(node.ClientTLS()),
	}
}

// HTTP is an HTTP client with the test's admin certificate; URL makes
// the addresses it takes.
func (c *Cluster) HTTP() *http.Client { return c.tls.http }

// URL is https://<m's API address><path>.
func (c *Cluster) URL(m *Member, path string) string { return "https://" + m.APIAddr() + path }

// AdminTLS is the TLS configuration of the test's admin client
// certificate.
func (c *Cluster) AdminTLS() *tls.Config { return c.tls.admin }

// NodeTLS is the TLS configuration of a node certificate of the cluster,
// for tests that act as a gntd.
func (c *Cluster) NodeTLS() *tls.Config { return c.tls.node.ClientTLS() }

// NewClient is an API client of servers with the admin certificate.
func (c *Cluster) NewClient(servers []string) *rpc.Client {
	return rpc.NewClientWith(servers, rpc.ClientOptions{TLS: c.tls.admin})
}

// RefreshTLS rebuilds the test's admin client from the CLI's files in
// ~/.config/gnt (HOME is c.Dir), after `gnt cluster renew-crypto`
// renewed them; NodeTLS keeps its certificate of the old CA.
func (c *Cluster) RefreshTLS() {
	c.t.Helper()
	dir := filepath.Join(c.Dir, ".config", "gnt")
	var files [3][]byte
	for i, name := range []string{pki.ClientCAFile, pki.ClientCertFile, pki.ClientKeyFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			c.t.Fatal(err)
		}
		files[i] = data
	}
	admin, err := pki.OperatorTLS(files[0], files[1], files[2])
	if err != nil {
		c.t.Fatal(err)
	}
	c.tls.admin = admin
	c.tls.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: admin, MaxIdleConnsPerHost: 16}}
}
