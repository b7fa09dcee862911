package netlimit

import (
	"net/http"
	"time"
)

// Defaults of HTTPLimits.
const (
	// DefaultReadHeaderTimeout bounds reading a request's line and
	// headers: a client that sends them slowly (or nothing) loses its
	// connection then.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included,
	// from its first byte (bodies are bounded in size by each server: 1
	// MiB, 8 MiB for a follower's batch of forwarded writes). It ends when
	// the body has been read: net/http clears the read deadline once a
	// handler has read its request to the end, so a handler that then
	// waits (a blocking query, a held submission) is not cut by it.
	DefaultReadTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a kept-alive connection may wait for
	// its next request; above the 90 s after which the project's clients
	// drop their idle connections, so that the server seldom closes one
	// under a request being sent.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's line and headers.
	DefaultMaxHeaderBytes = 64 << 10
)

// HTTPLimits are the timeouts and the header limit of an http.Server.
// Zero means the default; a negative duration means none.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its answer, the handler's work included, so it must be above
	// the longest answer a server holds on purpose (a blocking query);
	// zero (the default) leaves it to the handlers, which bound their own
	// waits (http.ResponseController.SetWriteDeadline can set one).
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
}

func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Configure sets srv's timeouts and header limit.
func (h HTTPLimits) Configure(srv *http.Server) {
	srv.ReadHeaderTimeout = orDefault(h.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	srv.ReadTimeout = orDefault(h.ReadTimeout, DefaultReadTimeout)
	srv.WriteTimeout = orDefault(h.WriteTimeout, 0)
	srv.IdleTimeout = orDefault(h.IdleTimeout, DefaultIdleTimeout)
	srv.MaxHeaderBytes = h.MaxHeaderBytes
	if srv.MaxHeaderBytes == 0 {
		srv.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
}

// Server returns an http.Server of handler with these limits.
func (h HTTPLimits) Server(handler http.Handler) *http.Server {
	srv := &http.Server{Handler: handler}
	h.Configure(srv)
	return srv
}
