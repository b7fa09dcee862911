package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// newIncarnation draws the id of this gntd's run: 16 random bytes in
// hex. A gntd that restarts draws another, so the poison-job guard can
// tell a leader that stepped down (same incarnation) from one that died.
func newIncarnation() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b[:])
}

// peerStatusOf asks the gntd at API address api for its status (GET
// /2/gnt/status, over the cluster's TLS), for at most 2 s.
func (s *Server) peerStatusOf(ctx context.Context, api string) (rpc.Status, error) {
	var st rpc.Status
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+api+"/2/gnt/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return st, fmt.Errorf("at %s: %w", api, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("at %s answered %s", api, resp.Status)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&st); err != nil {
		return st, fmt.Errorf("at %s: %w", api, err)
	}
	return st, nil
}

// incarnationProbe is the executor's jobs.IncarnationProbe: it asks a
// node's gntd for its status; this gntd answers for itself.
type incarnationProbe struct{ s *Server }

// Incarnation returns the incarnation the node's gntd runs with.
func (p incarnationProbe) Incarnation(ctx context.Context, n *fsm.Node) (string, error) {
	if n.Name == p.s.cfg.Name {
		return p.s.incarnation, nil
	}
	if n.Addrs.API == "" {
		return "", errors.New("the node has not registered an API address")
	}
	st, err := p.s.peerStatusOf(ctx, n.Addrs.API)
	if err != nil {
		return "", fmt.Errorf("the gntd %w", err)
	}
	if st.Name != n.Name {
		return "", fmt.Errorf("the gntd at %s is %q, not %q", n.Addrs.API, st.Name, n.Name)
	}
	return st.Incarnation, nil
}
