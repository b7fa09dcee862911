package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// AgentAddr is the member's node agent (node RPC) address.
func (m *Member) AgentAddr() string { return m.IP + ":1811" }

// NodeKey reads the cluster key from the member's data dir and derives the
// node RPC key from it, as the leader does.
func (c *Cluster) NodeKey(m *Member) []byte {
	c.t.Helper()
	key, err := os.ReadFile(filepath.Join(m.DataDir, "cluster.key"))
	if err != nil {
		c.t.Fatalf("cluster key of %s: %v", m.Name, err)
	}
	return rpc.NodeKey(key)
}

// NodeClient is a node RPC client of m's agent, signing with the cluster
// key found in m's data dir.
func (c *Cluster) NodeClient(m *Member) *rpc.NodeClient {
	return rpc.NewNodeClientTLS(m.Name, m.AgentAddr(), c.NodeKey(m), c.tls.nodeT)
}

// WaitAgent waits until m's agent answers a signed request (a status of
// an instance it does not know: not_found).
func (c *Cluster) WaitAgent(m *Member, timeout time.Duration) {
	c.t.Helper()
	nc := c.NodeClient(m)
	c.Eventually(timeout, 50*time.Millisecond, fmt.Sprintf("agent of %s answers", m.Name), func() error {
		if !m.Running() {
			return fmt.Errorf("%s is not running", m.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := nc.Status(ctx, fsm.Instance{UUID: "00000000-0000-0000-0000-000000000000"})
		if err == nil || errors.Is(err, rpc.ErrNodeNotFound) {
			return nil
		}
		return err
	})
}
