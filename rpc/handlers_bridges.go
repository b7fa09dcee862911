package rpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// BridgeSource is a backend that can ask a node which bridges it lacks
// (the node RPC's bridges-exist).
type BridgeSource interface {
	// NodeMissingBridges returns the bridges of names that node lacks,
	// each with why; empty: all are there.
	NodeMissingBridges(ctx context.Context, node *fsm.Node, names []string) (map[string]string, error)
}

// vetClusterBridges refuses a cluster modify whose new NIC defaults
// (nicparams mode or link) make a bridged NIC of an instance use a
// bridge its primary node lacks: every node whose instances' NICs take
// the new default is asked first (bridges-exist), and the refusal names
// the node, the bridge and the instances, before anything changes. An
// offline node is not asked (it runs nothing), nor one whose gntd does
// not know the operation; one that cannot be asked refuses the change.
func (s *Server) vetClusterBridges(ctx context.Context, op fsm.Opcode) *APIError {
	o, ok := op.(*fsm.OpClusterSetParams)
	if !ok || o.NICParams == nil {
		return nil
	}
	src, ok := s.b.(BridgeSource)
	if !ok {
		return nil
	}
	m, ferr := fsm.NormalizeParams("nicparams", "NIC", fsm.NICParamDefs, o.NICParams, true)
	if ferr != nil {
		return nil // the opcode's own checks refuse it
	}
	type need struct {
		node    fsm.Node
		bridges []string
		users   map[string][]string // bridge -> instance names
	}
	var needs []*need
	s.b.FSM().Read(func(st *fsm.State, _ uint64) {
		if st.Cluster == nil {
			return
		}
		next := *st.Cluster
		next.NICParams = fsm.MergeParams(st.Cluster.NICParams, m)
		byNode := map[string]*need{}
		for _, in := range st.Instances {
			n := st.Nodes[in.PrimaryNode]
			if in.Forthcoming || n == nil || n.Offline {
				continue
			}
			for k := range in.NICs {
				mode, link, _ := fsm.FilledNIC(&next, &in.NICs[k])
				oldMode, oldLink, _ := fsm.FilledNIC(st.Cluster, &in.NICs[k])
				if (mode != "" && mode != fsm.NICModeBridged) || link == "" || (mode == oldMode && link == oldLink) {
					continue
				}
				nd := byNode[n.UUID]
				if nd == nil {
					nd = &need{node: *n, users: map[string][]string{}}
					byNode[n.UUID] = nd
					needs = append(needs, nd)
				}
				if !slices.Contains(nd.bridges, link) {
					nd.bridges = append(nd.bridges, link)
				}
				if !slices.Contains(nd.users[link], in.Name) {
					nd.users[link] = append(nd.users[link], in.Name)
				}
			}
		}
	})
	slices.SortFunc(needs, func(a, b *need) int { return strings.Compare(a.node.Name, b.node.Name) })
	var msgs []string
	for _, nd := range needs {
		slices.Sort(nd.bridges)
		missing, err := src.NodeMissingBridges(ctx, &nd.node, nd.bridges)
		var ne *NodeError
		if errors.As(err, &ne) && ne.ErrorCode == NodeCodeUnknownOp {
			continue
		}
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("cannot check bridges %s on node %s: %v", strings.Join(nd.bridges, ", "), nd.node.Name, err))
			continue
		}
		for _, b := range nd.bridges {
			if why, ok := missing[b]; ok {
				slices.Sort(nd.users[b])
				msgs = append(msgs, fmt.Sprintf("bridge %q %s on node %s (used by the NICs of %s)", b, why, nd.node.Name, strings.Join(nd.users[b], ", ")))
			}
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return FromFSM(&fsm.Error{Code: fsm.CodeState, Field: "nicparams", Msg: "the new NIC defaults cannot be applied: " + strings.Join(msgs, "; ")})
}
