package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/repair"
)

// The maintd port (1816) is open on every gntd, so that a bookmark of any
// candidate's maintd page survives a failover. The leader serves maintd's
// HTTP API itself; every other gntd checks the request's credentials as
// maintd would (read for GETs, write for the rest) and answers 307
// Temporary Redirect to the same path on the leader's maintd, which checks
// them again (a browser asks for them again there: another origin). With
// no leader known it answers 503 with Ganeti's error body.

// startMaintdPort listens on the maintd port until ctx ends; done is
// closed once the server has stopped.
func (s *Server) startMaintdPort(ctx context.Context) (done chan struct{}, err error) {
	ln, err := net.Listen("tcp", s.cfg.MaintdAddr())
	if err != nil {
		return nil, fmt.Errorf("maintd listener: %w", err)
	}
	s.mu.Lock()
	s.maintdListen = ln.Addr().String()
	s.mu.Unlock()
	srv := &http.Server{Handler: http.HandlerFunc(s.serveMaintdPort), ReadHeaderTimeout: 10 * time.Second}
	configureHTTP(s.conns.maintd, maintdWriteTimeout)(srv)
	ln = tls.NewListener(s.conns.maintd.Wrap(ln), s.tls.store.ServerTLS(tls.VerifyClientCertIfGiven))
	done = make(chan struct{})
	go func() {
		defer close(done)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("maintd port", "error", err)
		}
		<-stopped
	}()
	return done, nil
}

func (s *Server) serveMaintdPort(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.maintdHandler
	s.mu.Unlock()
	if h != nil {
		h.ServeHTTP(w, r)
		return
	}
	// Every answer of a gntd that is not running maintd says so: it is
	// not maintd's (probes and clients tell the two apart by it).
	w.Header().Set(HeaderMaintdRedirect, "1")
	if !s.api.Authorize(w, r, repair.AccessOf(r) == repair.AccessWrite) {
		return
	}
	addr, err := s.leaderMaintd(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]any{"code": http.StatusServiceUnavailable, "message": "maintd runs on the leader: " + err.Error(),
			"explain":    "this gntd is not the leader and cannot tell where the leader's maintd is; try again in a moment or ask the leader",
			"error_code": "no_leader"})
		return
	}
	w.Header().Set(headerLeaderMaintd, addr)
	http.Redirect(w, r, "https://"+addr+r.URL.RequestURI(), http.StatusTemporaryRedirect)
}

// headerLeaderMaintd names, in a follower's redirect, the leader's maintd
// address.
const headerLeaderMaintd = "X-Gnt-Leader-Maintd"

// HeaderMaintdRedirect marks every answer on the maintd port of a gntd
// that does not run maintd (a redirect, its refusal of credentials, or
// 503 without a leader).
const HeaderMaintdRedirect = "X-Gnt-Maintd-Redirect"

// leaderMaintdCache remembers where the leader's maintd listens, for a
// second, per leader.
type leaderMaintdCache struct {
	mu        sync.Mutex
	leaderAPI string
	addr      string
	at        time.Time
}

// leaderMaintd asks the leader where its maintd listens (its status
// answer), or answers from the last second's answer.
func (s *Server) leaderMaintd(ctx context.Context) (string, error) {
	api, self := s.Leader()
	switch {
	case self:
		return "", errors.New("this gntd leads and its maintd is starting")
	case api == "":
		return "", errors.New("no leader known")
	}
	c := &s.maintdLeader
	c.mu.Lock()
	if c.leaderAPI == api && time.Since(c.at) < time.Second {
		addr := c.addr
		c.mu.Unlock()
		return addr, nil
	}
	c.mu.Unlock()
	st, err := s.peerStatusOf(ctx, api)
	if err != nil {
		return "", fmt.Errorf("the leader %w", err)
	}
	if st.Maintd == nil || st.Maintd.Addr == "" {
		return "", fmt.Errorf("the leader at %s runs no maintd yet", api)
	}
	c.mu.Lock()
	c.leaderAPI, c.addr, c.at = api, st.Maintd.Addr, time.Now()
	c.mu.Unlock()
	return st.Maintd.Addr, nil
}
