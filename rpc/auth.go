package rpc

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"
)

// Access is the level of access a route requires. Every route is
// registered with one (Server.routes); the zero value is no level, and
// registering a route with it panics.
type Access int

// Access levels, from the least to the most.
const (
	// AccessNone: anyone. Only /version, and the signed join, which has
	// its own authentication.
	AccessNone Access = iota + 1
	// AccessInit: anyone while this gntd holds no cluster (POST
	// /2/gnt/init, which refuses remote addresses by itself), write once
	// it does.
	AccessInit
	// AccessRead: a user with read access, a client certificate, or
	// anyone when the cluster option rapi_anonymous_read is set.
	AccessRead
	// AccessWrite: a user with write access, or a client certificate.
	AccessWrite
)

func (a Access) String() string {
	switch a {
	case AccessNone:
		return "none"
	case AccessInit:
		return "none before init, then write"
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	}
	return fmt.Sprintf("access(%d)", int(a))
}

// Route is one endpoint of the API with the access it requires.
type Route struct {
	Method string
	Path   string // a net/http pattern path, e.g. /2/nodes/{name}
	Access Access
}

// Routes lists every endpoint of the API in the order they were
// registered.
func (s *Server) Routes() []Route { return append([]Route(nil), s.table...) }

// Error codes of refused credentials and requests.
const (
	CodeForbidden        = "forbidden"              // a user without the access the route needs
	CodeUnsupportedMedia = "unsupported_media_type" // a change whose body is not JSON
	CodeBadOrigin        = "bad_origin"             // a request from another web origin
)

// HeaderUser carries the user a follower authenticated on a request it
// forwards, for the leader's logs. The leader believes it only from a
// gntd with a client certificate of the cluster.
const HeaderUser = "X-Gnt-User"

// Reasons of refused requests (label "reason" of
// gnt_api_auth_failures_total).
const (
	failNoCredentials = "no_credentials"
	failMalformed     = "malformed"
	failUnknownUser   = "unknown_user"
	failBadPassword   = "bad_password"
	failReadOnly      = "read_only"
	failOrigin        = "origin"
	failContentType   = "content_type"
)

// userKey is the context key of the authenticated user's name.
type userKey struct{}

// requestUser returns who the request was authenticated as ("" for
// anonymous requests and while authentication is off).
func requestUser(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// auth is the authentication state of a Server.
type auth struct {
	disabled bool
	cache    credCache
	failures *prometheus.CounterVec
	logs     logLimiter
	now      func() time.Time
	// slots bounds the password hashes computed at once.
	slots chan struct{}
	// leaderIndex asks the leader how far a follower must catch up
	// before it refuses credentials (authcatchup.go).
	leaderIndex leaderIndexProbe
	// dummy is the hash unknown users are checked against (dummyHash).
	dummyOnce sync.Once
	dummy     []byte
}

// logLimiter lets through one log line a second and counts the others.
type logLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) < time.Second {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

func (s *Server) initAuth(opts ServerOptions) {
	s.auth.disabled = opts.AuthDisabled
	s.auth.now = time.Now
	s.auth.slots = make(chan struct{}, runtime.GOMAXPROCS(0))
	s.auth.failures = register(s.reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gnt", Subsystem: "api", Name: "auth_failures_total",
		Help: "API requests refused for their credentials or origin, by reason (no_credentials, malformed, unknown_user, bad_password, read_only, origin, content_type).",
	}, []string{"reason"}))
	for _, r := range []string{failNoCredentials, failMalformed, failUnknownUser, failBadPassword, failReadOnly, failOrigin, failContentType} {
		s.auth.failures.WithLabelValues(r)
	}
}

// handle registers a route with the access it requires; there is no
// other way to register one.
func (s *Server) handle(acc Access, method, path string, h http.HandlerFunc) {
	if acc < AccessNone || acc > AccessWrite {
		panic(fmt.Sprintf("rpc: route %s %s registered without an access level", method, path))
	}
	s.mux.HandleFunc(method+" "+muxPath(path), s.guard(acc, h))
	s.table = append(s.table, Route{Method: method, Path: path, Access: acc})
}

// muxPath is the ServeMux pattern of a route's path: "/" alone is "/{$}"
// (a bare "/" matches every path).
func muxPath(path string) string {
	if path == "/" {
		return "/{$}"
	}
	return path
}

// guard wraps the handler of a route with the checks of its access level.
func (s *Server) guard(acc Access, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.auth.disabled {
			h(w, r)
			return
		}
		if r.Context().Value(inBatchKey{}) != nil {
			// A request of a batched forward: the batch itself was
			// authorized (a follower's certificate), and its follower
			// authorized this request.
			if u := r.Header.Get(HeaderUser); u != "" {
				if rec, ok := w.(*statusRecorder); ok {
					rec.user = u
				}
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
			h(w, r)
			return
		}
		user, aerr := s.authorize(r, acc)
		if aerr != nil {
			if aerr.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Basic realm="`+AuthRealm+`"`)
			}
			writeError(w, aerr)
			return
		}
		if user != "" {
			if rec, ok := w.(*statusRecorder); ok {
				rec.user = user
			}
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		h(w, r)
	}
}

// verifyPassword checks a password against u through the cache of
// verified credentials. Hashes are computed by at most as many requests at
// once as there are CPUs, so that a flood of guesses queues instead of
// taking every CPU from the gntd. An unknown user (u nil) is checked
// against a hash of the same cost, so the time of the answer does not
// tell whether the user exists.
func (s *Server) verifyPassword(ctx context.Context, u *fsm.RAPIUser, password string) (bool, *APIError) {
	now := s.auth.now()
	if u != nil && s.auth.cache.hit(credKey(u, password), now) {
		return true, nil
	}
	select {
	case s.auth.slots <- struct{}{}:
	case <-ctx.Done():
		return false, asAPIError(ctx.Err())
	}
	defer func() { <-s.auth.slots }()
	if u == nil {
		_ = bcrypt.CompareHashAndPassword(s.dummyHash(), []byte(password))
		return false, nil
	}
	return s.auth.cache.verify(u, password, now), nil
}

// dummyHash is a bcrypt hash of nobody's password at the server's cost.
func (s *Server) dummyHash() []byte {
	s.auth.dummyOnce.Do(func() {
		h, err := bcrypt.GenerateFromPassword([]byte("no such user"), s.bcryptCost)
		if err != nil { // cannot happen with a valid cost: compare with the minimum
			h, _ = bcrypt.GenerateFromPassword([]byte("no such user"), bcrypt.MinCost)
		}
		s.auth.dummy = h
	})
	return s.auth.dummy
}

// Authorize checks a request of another HTTP service of the gntd
// (maintd's repair.Service.Authorize) with the API's users, certificates
// and rules: read access, or write access when write is set. It answers
// a refusal itself and returns false then. With AuthDisabled it allows
// everything.
func (s *Server) Authorize(w http.ResponseWriter, r *http.Request, write bool) bool {
	if s.auth.disabled {
		return true
	}
	acc := AccessRead
	if write {
		acc = AccessWrite
	}
	if _, aerr := s.authorize(r, acc); aerr != nil {
		if aerr.Status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Basic realm="`+AuthRealm+`"`)
		}
		writeError(w, aerr)
		return false
	}
	return true
}

// authorize checks a request against the access its route requires and
// returns who it is authenticated as.
func (s *Server) authorize(r *http.Request, acc Access) (string, *APIError) {
	if aerr := s.checkOrigin(r); aerr != nil {
		return "", aerr
	}
	var (
		users    map[string]*fsm.RAPIUser
		anonRead bool
		inited   bool
		index    uint64
	)
	if f := s.b.FSM(); f != nil {
		f.Read(func(st *fsm.State, idx uint64) {
			users, anonRead, inited, index = st.RAPIUsers, st.RAPIAnonymousRead(), st.Cluster != nil, idx
		})
	}
	if acc == AccessNone || acc == AccessInit && !inited {
		return "", nil
	}
	if acc == AccessInit {
		acc = AccessWrite
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		// A certificate of this cluster's CA (the TLS configuration
		// verifies it): a gntd or an administrator, full access.
		who := "cert:" + r.TLS.VerifiedChains[0][0].Subject.CommonName
		if u := r.Header.Get(HeaderUser); u != "" {
			who += " for " + u
		}
		return who, nil
	}
	if r.Header.Get("Authorization") == "" {
		if acc == AccessRead && anonRead {
			return "", nil
		}
		return "", s.refuse(r, failNoCredentials, "", http.StatusUnauthorized,
			fmt.Sprintf("%s %s needs %s access: send a RAPI user with HTTP basic auth, or a client certificate of this cluster", r.Method, r.URL.Path, acc))
	}
	name, password, ok := r.BasicAuth()
	if !ok {
		return "", s.refuse(r, failMalformed, "", http.StatusUnauthorized,
			"the Authorization header is not HTTP basic auth (Basic, then base64 of user:password)")
	}
	// A follower's replica may not have applied a change of the user
	// that the leader has answered (authcatchup.go): before it refuses,
	// it catches up with the leader once and checks again.
	caught := false
	catchUp := func() bool {
		if caught {
			return false
		}
		caught = true
		return s.authCatchUp(r.Context(), index)
	}
	u := users[name]
	if u == nil && catchUp() {
		u = s.rapiUser(name)
	}
	ok, aerr := s.verifyPassword(r.Context(), u, password)
	if aerr == nil && u != nil && (!ok || acc == AccessWrite && !u.CanWrite()) && catchUp() {
		// The password is hashed again only if the record changed.
		if nu := s.rapiUser(name); nu == nil || *nu != *u {
			u = nu
			ok, aerr = s.verifyPassword(r.Context(), u, password)
		}
	}
	switch {
	case aerr != nil:
		return "", aerr
	case u == nil:
		return "", s.refuse(r, failUnknownUser, name, http.StatusUnauthorized, "wrong user name or password")
	case !ok:
		return "", s.refuse(r, failBadPassword, name, http.StatusUnauthorized, "wrong user name or password")
	}
	if acc == AccessWrite && !u.CanWrite() {
		return "", s.refuse(r, failReadOnly, name, http.StatusForbidden,
			fmt.Sprintf("user %s has read access; %s %s needs write access", name, r.Method, r.URL.Path))
	}
	return name, nil
}

// rapiUser returns the named user of the local replica, or nil.
func (s *Server) rapiUser(name string) *fsm.RAPIUser {
	var u *fsm.RAPIUser
	if f := s.b.FSM(); f != nil {
		f.Read(func(st *fsm.State, _ uint64) { u = st.RAPIUsers[name] })
	}
	return u
}

// checkOrigin refuses what a web page of another origin could make a
// browser send: a request whose Origin is not the API's own, and a change
// whose body is not JSON (a form or text/plain POST needs no CORS
// preflight; a JSON one does, and the API answers none).
func (s *Server) checkOrigin(r *http.Request) *APIError {
	if origin := r.Header.Get("Origin"); origin != "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if own := scheme + "://" + r.Host; !strings.EqualFold(origin, own) {
			return s.refuse(r, failOrigin, "", http.StatusForbidden,
				fmt.Sprintf("requests from the web origin %.100q are refused; the API's own origin is %s", origin, own))
		}
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.ContentLength == 0 || r.URL.Path == forwardPath {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	// A snapshot file is not JSON; application/octet-stream needs a CORS
	// preflight as JSON does (it is not one of the simple types).
	if err == nil && mt == "application/octet-stream" && r.URL.Path == SnapshotPath {
		return nil
	}
	if err != nil || mt != "application/json" {
		e := s.refuse(r, failContentType, "", http.StatusUnsupportedMediaType,
			fmt.Sprintf("a request body must have Content-Type application/json, not %.100q", ct))
		e.ErrorCode, e.Field = CodeUnsupportedMedia, "Content-Type"
		return e
	}
	return nil
}

// refuse counts and logs (at most once a second) a refused request, and
// returns its error. The password is never logged.
func (s *Server) refuse(r *http.Request, reason, user string, status int, msg string) *APIError {
	s.auth.failures.WithLabelValues(reason).Inc()
	if ok, suppressed := s.auth.logs.allow(s.auth.now()); ok {
		if len(user) > 64 {
			user = user[:64]
		}
		s.log.Warn("API request refused", "reason", reason, "user", strconv.Quote(user), "remote", r.RemoteAddr,
			"method", r.Method, "path", r.URL.Path, "refusals_not_logged", suppressed)
	}
	code := CodeUnauthorized
	if status == http.StatusForbidden {
		code = CodeForbidden
	}
	if reason == failOrigin {
		code = CodeBadOrigin
	}
	return &APIError{Status: status, ErrorCode: code, Message: msg, Explain: msg}
}
