package server

import (
	"context"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// bridgeCheckTimeout bounds one node's answer to bridges-exist when a
// request is vetted.
const bridgeCheckTimeout = 10 * time.Second

// NodeMissingBridges implements rpc.BridgeSource through the node RPC.
func (s *Server) NodeMissingBridges(ctx context.Context, node *fsm.Node, names []string) (map[string]string, error) {
	c, err := s.nodes.client(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, bridgeCheckTimeout)
	defer cancel()
	return c.MissingBridges(ctx, names)
}

var _ rpc.BridgeSource = (*Server)(nil)
