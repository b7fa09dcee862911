package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Defaults of ServerOptions and limits of the API.
const (
	DefaultHoldTimeout = 5 * time.Second  // how long a write waits for a leader
	DefaultMaxBody     = 1 << 20          // request body limit in bytes
	DefaultBlockWait   = 5 * time.Minute  // ?index=N without ?wait=
	MaxBlockWait       = 10 * time.Minute // longer ?wait= values are cut to this
	leaderPoll         = 20 * time.Millisecond
)

// ServerOptions configures a Server. The zero value is usable.
type ServerOptions struct {
	// Logger receives request and error logs; default: no logging.
	Logger hclog.Logger
	// HoldTimeout is how long a write (or a consistent read) waits for a
	// leader to be known, or for an unreachable leader to answer, before it
	// is refused with 503 no_leader. Default DefaultHoldTimeout.
	HoldTimeout time.Duration
	// Metrics is the registry the request metrics are registered with and
	// that GET /metrics exposes; default: a registry of the server's own.
	Metrics *prometheus.Registry
	// MaxBody is the request body limit in bytes; default DefaultMaxBody.
	MaxBody int64
	// IsLocalAddr decides whether a remote address may call POST
	// /2/gnt/init; default: a loopback address or one of this host's
	// interface addresses.
	IsLocalAddr func(ip net.IP) bool
	// ForwardClient sends requests on to the leader; default: a client that
	// gives up dialing after 2 s and follows no redirects, over TLS with
	// ForwardTLS when that is set.
	ForwardClient *http.Client
	// ForwardFrom, when set, is the address forwarded requests leave from
	// (the gntd's own IP), so that the leader sees a registered node's
	// address (netlimit's per-address cap exempts those).
	ForwardFrom net.Addr
	// ForwardTLS, when set, makes forwarded requests HTTPS with this
	// configuration (a gntd's node certificate); plain HTTP otherwise
	// (tests).
	ForwardTLS *tls.Config
	// Stopping is done when the gntd stops serving its state. Long waits
	// (held submissions, blocking queries, job waits) then answer at once
	// with what they have, as on their timeout, and a write held for a
	// leader is refused with a retryable 503 instead of holding on, so
	// that clients move to another candidate before the gntd exits.
	// Default: never.
	Stopping context.Context
	// AuthDisabled turns off authentication, authorization and the
	// checks against cross-site requests (auth.go): every request is
	// served as before RAPI users existed. The zero value enforces them.
	AuthDisabled bool
	// BcryptCost is the cost of the bcrypt hashes of passwords this
	// server proposes; default DefaultBcryptCost.
	BcryptCost int
	// Debug accepts debugging opcodes (OP_TEST_CRASH): set with gntd
	// --debug.
	Debug bool
	// AuthCatchUp bounds how long a follower waits for its replica to
	// catch up with the leader before it refuses credentials it does not
	// know (authcatchup.go); default DefaultAuthCatchUp.
	AuthCatchUp time.Duration
}

// Server is the HTTP API of one gntd. It answers reads from the local
// replica and forwards writes to the Raft leader.
type Server struct {
	b       Backend
	log     hclog.Logger
	hold    time.Duration
	maxBody int64
	isLocal func(net.IP) bool
	fwd     *http.Client
	scheme  string // of forwarded requests
	mux     *http.ServeMux
	reg     *prometheus.Registry
	stop    context.Context // ServerOptions.Stopping
	debug   bool            // ServerOptions.Debug

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// reforwards counts tokened writes forwarded again after a forward
	// broke without an answer.
	reforwards prometheus.Counter
	// fwdBatch gathers forwarded writes into batches (forward_batch.go);
	// fwdBatches and fwdBatched count the batches sent and the requests
	// they held.
	fwdBatch   *forwarder
	fwdBatches prometheus.Counter
	fwdBatched prometheus.Counter
	// subWorkers serve the requests of batches the leader receives.
	subWorkers *workers
	// table lists the routes with their access levels (Routes).
	table []Route
	// auth holds the authentication state (auth.go).
	auth auth
	// floor is the index of the newest write this gntd answered
	// (readyourwrites.go).
	floor      readFloor
	bcryptCost int
	// authWait is ServerOptions.AuthCatchUp.
	authWait time.Duration
}

// NewServer returns the API server of a gntd.
func NewServer(b Backend, opts ServerOptions) *Server {
	s := &Server{
		b:       b,
		log:     opts.Logger,
		hold:    opts.HoldTimeout,
		maxBody: opts.MaxBody,
		isLocal: opts.IsLocalAddr,
		fwd:     opts.ForwardClient,
		scheme:  "http",
		reg:     opts.Metrics,
		mux:     http.NewServeMux(),
		stop:    opts.Stopping,
		debug:   opts.Debug,

		bcryptCost: opts.BcryptCost,
	}
	if s.authWait = opts.AuthCatchUp; s.authWait <= 0 {
		s.authWait = DefaultAuthCatchUp
	}
	if s.bcryptCost <= 0 {
		s.bcryptCost = DefaultBcryptCost
	}
	if s.stop == nil {
		s.stop = context.Background()
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if s.hold <= 0 {
		s.hold = DefaultHoldTimeout
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBody
	}
	if s.isLocal == nil {
		s.isLocal = isLocalAddr
	}
	if opts.ForwardTLS != nil {
		s.scheme = "https"
	}
	if s.fwd == nil {
		s.fwd = &http.Client{
			Transport: &http.Transport{
				Proxy:               nil,
				DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: opts.ForwardFrom}).DialContext,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     90 * time.Second,
				TLSClientConfig:     opts.ForwardTLS,
				TLSHandshakeTimeout: 5 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	s.requests = register(s.reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gnt", Subsystem: "api", Name: "requests_total",
		Help: "API requests by route pattern, method and HTTP status.",
	}, []string{"route", "method", "code"}))
	s.latency = register(s.reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "gnt", Subsystem: "api", Name: "request_duration_seconds",
		Help:    "API request latency by route pattern and method.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route", "method"}))
	s.reforwards = register(s.reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "gnt", Subsystem: "api", Name: "forward_resends_total",
		Help: "Tokened writes a follower forwarded to the leader again after a forward broke without an answer.",
	}))
	s.fwdBatches = register(s.reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "gnt", Subsystem: "api", Name: "forward_batches_total",
		Help: "Batches of writes this follower forwarded to the leader in one request (POST /2/gnt/forward).",
	}))
	s.fwdBatched = register(s.reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "gnt", Subsystem: "api", Name: "forward_batched_requests_total",
		Help: "Writes this follower forwarded to the leader inside batches.",
	}))
	s.fwdBatch = &forwarder{s: s, lanes: map[string]*lane{}}
	s.subWorkers = newWorkers()
	register(s.reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "gnt", Subsystem: "api", Name: "forward_queued",
		Help: "Writes waiting on this follower for a batch to the leader (every batch slot is busy).",
	}, s.fwdBatch.queued))
	s.initAuth(opts)
	s.routes()
	return s
}

// register registers c, or returns the collector already registered under
// the same description (several servers may share one registry).
func register[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("rpc: registering metrics: %v", err))
	}
	return c
}

// Handler returns the HTTP handler of the whole API.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// routes registers every endpoint of docs/api.md with the access it
// requires (auth.go). Each path also gets a method-less pattern that
// answers 405 in JSON, and "/" answers 404.
//
// The access levels follow Ganeti's: reads need read access, changes
// write access, and so do the reads Ganeti guards with write because they
// hold a server-side wait or submit a job (/2/jobs/{id}/wait; Ganeti's
// node storage listing, GET /2/nodes/{name}/storage). Only /version, the signed join and
// the init of a gntd without a cluster need nothing.
func (s *Server) routes() {
	allowed := map[string][]string{}
	add := func(acc Access, method, path string, h http.HandlerFunc) {
		if method != http.MethodGet {
			h = refuseDryRun(h)
		}
		s.handle(acc, method, path, h)
		allowed[path] = append(allowed[path], method)
	}
	// op registers a change made by opcodes: it honours ?dry-run=1
	// (prepareOps sets dry_run on every opcode).
	op := func(method, path string, build opsBuilder) {
		s.handle(AccessWrite, method, path, s.jobHandler(build))
		allowed[path] = append(allowed[path], method)
	}
	const (
		none = AccessNone
		read = AccessRead
		wr   = AccessWrite
	)
	add(none, "GET", "/version", s.handleVersion)
	add(read, "GET", "/2/features", s.handleFeatures)
	// / and /2 have no function; Ganeti serves GET on them for legacy
	// reasons, answering null.
	add(read, "GET", "/", s.handleNull)
	add(read, "GET", "/2", s.handleNull)
	add(read, "GET", "/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}).ServeHTTP)

	add(read, "GET", "/2/info", s.blockingRead(s.serveInfo))
	// The endpoints that submit a job (check.go), all write access.
	for _, jr := range jobRoutes {
		op(jr.method, jr.path, jr.build)
	}
	add(read, "GET", "/2/tags", s.blockingRead(s.serveTags(fsm.TagCluster, "")))

	add(read, "GET", "/2/nodes", s.blockingRead(s.serveNodes))
	add(read, "GET", "/2/nodes/{name}", s.blockingRead(s.serveNode))
	add(read, "GET", "/2/nodes/{name}/role", s.blockingRead(s.serveNodeRole))
	add(read, "GET", "/2/nodes/{name}/tags", s.blockingRead(s.serveTags(fsm.TagNode, "name")))

	add(read, "GET", "/2/groups", s.blockingRead(s.serveGroups))
	add(read, "GET", "/2/groups/{name}", s.blockingRead(s.serveGroup))
	add(read, "GET", "/2/groups/{name}/tags", s.blockingRead(s.serveTags(fsm.TagNodeGroup, "name")))

	add(read, "GET", "/2/networks", s.blockingRead(s.serveNetworks))
	add(read, "GET", "/2/networks/{name}", s.blockingRead(s.serveNetwork))
	add(read, "GET", "/2/networks/{name}/tags", s.blockingRead(s.serveTags(fsm.TagNetwork, "name")))

	add(read, "GET", "/2/instances", s.blockingRead(s.serveInstances))
	add(read, "GET", "/2/instances/{name}", s.blockingRead(s.serveInstance))
	add(read, "GET", "/2/instances/{name}/tags", s.blockingRead(s.serveTags(fsm.TagInstance, "name")))
	// More of doc/rapi.rst's resources (handlers_more.go).
	for _, mr := range append(s.moreRoutes(), s.filterRoutes()...) { // handlers_more.go, handlers_filters.go
		if mr.ownDryRun {
			s.handle(mr.acc, mr.method, mr.path, mr.h)
			allowed[mr.path] = append(allowed[mr.path], mr.method)
			continue
		}
		add(mr.acc, mr.method, mr.path, mr.h)
	}

	add(read, "GET", "/2/query/{resource}", s.blockingRead(s.handleQueryGet))
	add(read, "PUT", "/2/query/{resource}", s.handleQueryPut) // only reads, as in Ganeti
	add(read, "GET", "/2/query/{resource}/fields", s.handleQueryFields)

	add(read, "GET", "/2/jobs", s.blockingRead(s.serveJobs))
	add(read, "GET", "/2/jobs/{id}", s.blockingReadOn(waitJobChange, s.serveJob))
	add(wr, "DELETE", "/2/jobs/{id}", s.handleJobCancel)
	add(wr, "GET", "/2/jobs/{id}/wait", s.handleJobWait)
	add(wr, "POST", "/2/gnt/jobs", s.handleSubmitJobs)
	add(read, "GET", "/2/gnt/capacity", s.blockingRead(s.serveCapacity))
	// Balancing honours ?dry-run=1 itself (handlers_balance.go).
	s.handle(wr, "POST", "/2/gnt/balance", s.handleBalance)
	allowed["/2/gnt/balance"] = append(allowed["/2/gnt/balance"], "POST")
	add(wr, "POST", "/2/gnt/jobs/{id}/archive", s.handleJobArchive)

	add(read, "GET", "/2/raft/peers", s.blockingRead(s.servePeers))
	add(wr, "POST", "/2/gnt/master-failover", s.handleMasterFailover)
	add(AccessInit, "POST", "/2/gnt/init", s.handleInit)
	add(none, "POST", "/2/gnt/join", s.handleJoin)
	add(none, "POST", "/2/gnt/rejoin", s.handleRejoin)
	add(none, "GET", "/2/gnt/ca", s.handleCA) // public certificates, signed with the join key
	add(wr, "POST", forwardPath, s.handleForward)
	add(read, "GET", "/2/gnt/status", s.handleStatus)
	add(read, "GET", "/2/gnt/oob-check", s.handleOOBCheck)
	add(read, "GET", "/2/os", s.handleOS) // handlers_os.go
	add(read, "GET", "/2/gnt/os", s.handleOSDiagnose)
	add(read, "GET", "/2/gnt/repair", s.handleRepair)
	add(wr, "POST", "/2/gnt/maintd/incidents/{id}/cancel", s.handleIncident(fsm.IncidentActionCancel))
	add(wr, "DELETE", "/2/gnt/maintd/incidents/{id}", s.handleIncident(fsm.IncidentActionForget))
	add(wr, "GET", "/2/gnt/rapi-users", s.handleRAPIUsers)
	add(wr, "PUT", "/2/gnt/rapi-users", s.handleRAPIUsersImport)
	add(wr, "POST", "/2/gnt/rapi-users", s.handleRAPIUserAdd)
	add(wr, "PUT", "/2/gnt/rapi-users/{name}", s.handleRAPIUserPasswd)
	add(wr, "DELETE", "/2/gnt/rapi-users/{name}", s.handleRAPIUserRemove)
	add(wr, "POST", "/2/gnt/renew-crypto", s.handleRenewCrypto(true))
	add(read, "GET", "/2/gnt/renew-crypto", s.handleRenewCrypto(false))
	add(wr, "POST", "/2/gnt/renew-key", s.handleRenewKey(true))
	add(read, "GET", "/2/gnt/renew-key", s.handleRenewKey(false))
	add(wr, "POST", "/2/gnt/client-cert", s.handleClientCert)
	// The whole state, secrets included (sealed CA key, password
	// hashes): write access both ways (handlers_snapshot.go).
	add(wr, "GET", SnapshotPath, s.handleSnapshotSave)
	add(wr, "PUT", SnapshotPath, s.handleSnapshotRestore)

	for path, methods := range allowed {
		for _, m := range methods {
			if m == http.MethodGet {
				methods = append(methods, http.MethodHead)
				break
			}
		}
		sort.Strings(methods)
		allow := strings.Join(methods, ", ")
		s.mux.HandleFunc(muxPath(path), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, &APIError{Status: http.StatusMethodNotAllowed, ErrorCode: CodeMethod,
				Message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)})
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &APIError{Status: http.StatusNotFound, ErrorCode: CodeNotFound,
			Message: fmt.Sprintf("no such resource: %s", r.URL.Path)})
	})
}

// refuseDryRun wraps a change that is not made by opcodes (job cancel and
// archive, users, incidents, init, join, master failover): ?dry-run=1
// there is refused, naming the route, rather than ignored while the
// change is made.
func refuseDryRun(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Has("dry-run") {
			dry, aerr := queryFlag(q, "dry-run")
			if aerr != nil {
				writeError(w, aerr)
				return
			}
			if dry {
				writeError(w, badRequest("dry-run", "%s %s has no dry run (it is not made by opcodes); send it without dry-run=1", r.Method, r.Pattern[strings.IndexByte(r.Pattern, ' ')+1:]))
				return
			}
		}
		h(w, r)
	}
}

// statusRecorder remembers the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	user   string // who the request was authenticated as (auth.go)
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap returns the writer the recorder wraps (http.ResponseController,
// notifyApplied).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush lets streaming handlers (promhttp) flush through the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// serveHTTP sets the metadata headers every answer carries (handlers
// overwrite X-Gnt-Index with the index they actually read or wrote at),
// dispatches and records metrics.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	s.setMeta(rec.Header(), s.index())
	s.mux.ServeHTTP(rec, r)

	route := r.Pattern
	if i := strings.IndexByte(route, ' '); i >= 0 {
		route = route[i+1:]
	}
	if route == "" {
		route = "unmatched"
	}
	method := r.Method
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		method = "other"
	}
	dur := time.Since(start)
	s.requests.WithLabelValues(route, method, strconv.Itoa(rec.status)).Inc()
	s.latency.WithLabelValues(route, method).Observe(dur.Seconds())
	if rec.status >= 500 {
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", dur, "user", rec.user)
	} else {
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", dur, "user", rec.user)
	}
}

func (s *Server) index() uint64 {
	if f := s.b.FSM(); f != nil {
		return f.Index()
	}
	return 0
}

// setMeta writes the read metadata headers.
func (s *Server) setMeta(h http.Header, index uint64) {
	addr, self := s.b.Leader()
	var lc time.Duration
	if !self {
		lc = s.b.LastContact()
	}
	h.Set(HeaderIndex, strconv.FormatUint(index, 10))
	h.Set(HeaderKnownLeader, strconv.FormatBool(self || addr != ""))
	h.Set(HeaderLastContact, strconv.FormatInt(lc.Milliseconds(), 10))
}

func setIndex(w http.ResponseWriter, index uint64) {
	w.Header().Set(HeaderIndex, strconv.FormatUint(index, 10))
}

// Error helpers.

func badRequest(field, format string, args ...any) *APIError {
	msg := fmt.Sprintf(format, args...)
	return &APIError{Status: http.StatusBadRequest, ErrorCode: string(fsm.CodeInval), Field: field, Message: msg, Explain: msg}
}

func noLeader(msg string) *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeNoLeader, Message: msg}
}

func notInitialised() *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeUnavailable, Message: "the cluster is not initialised on this gntd"}
}

func unknownEntity(field, format string, args ...any) *APIError {
	return FromFSM(&fsm.Error{Code: fsm.CodeNoEnt, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// asAPIError maps any error a backend call returned to an API error.
func asAPIError(err error) *APIError {
	var ae *APIError
	var fe *fsm.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		return FromFSM(fe)
	case errors.Is(err, ErrIndeterminate):
		return &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeIndeterminate, Message: err.Error()}
	case errors.Is(err, ErrNotLeader):
		return noLeader(err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return &APIError{Status: http.StatusGatewayTimeout, ErrorCode: CodeTimeout, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeUnavailable, Message: err.Error()}
	}
	return &APIError{Status: http.StatusInternalServerError, ErrorCode: string(fsm.CodeFault), Message: err.Error()}
}

// WriteError answers with e as the API's JSON error body, for handlers
// outside this package that answer in the API's place (a gntd that holds
// no state, or is stopping).
func WriteError(w http.ResponseWriter, e *APIError) { writeError(w, e) }

func writeError(w http.ResponseWriter, e *APIError) {
	b := e.body()
	body, _ := json.Marshal(b)
	writeRaw(w, b.Status, body)
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, asAPIError(fmt.Errorf("encoding answer: %w", err)))
		return
	}
	writeRaw(w, http.StatusOK, body)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// readBody reads the whole request body, refusing more than MaxBody bytes.
func (s *Server) readBody(r *http.Request) ([]byte, *APIError) {
	return s.readBodyLimit(r, s.maxBody)
}

// readOptional reads the request body and, when there is one, decodes it
// into v (a JSON object, unknown fields refused); no body leaves v as it
// is. It returns the body, for forwarding.
func (s *Server) readOptional(r *http.Request, v any) ([]byte, *APIError) {
	body, aerr := s.readBody(r)
	if aerr != nil || len(body) == 0 {
		return body, aerr
	}
	return body, decodeBody(body, v)
}

// readBodyLimit reads a body of at most limit bytes.
func (s *Server) readBodyLimit(r *http.Request, limit int64) ([]byte, *APIError) {
	tooLarge := &APIError{Status: http.StatusRequestEntityTooLarge, ErrorCode: CodeTooLarge,
		Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	if r.Body == nil {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, badRequest("", "reading the request body: %v", err)
	}
	if int64(len(data)) > limit {
		return nil, tooLarge
	}
	return data, nil
}

// Query parsing.

// queryFlag reads a boolean query flag: 1/0, true/false; a flag given
// without a value is true.
func queryFlag(q url.Values, name string) (bool, *APIError) {
	if !q.Has(name) {
		return false, nil
	}
	switch strings.ToLower(q.Get(name)) {
	case "1", "true", "":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, badRequest(name, "query parameter %s must be 1 or 0 (true or false), got %q", name, q.Get(name))
}

// blocking is what ?index=N&wait=D asked for.
type blocking struct {
	set   bool
	index uint64
	wait  time.Duration
}

func parseBlocking(q url.Values) (blocking, *APIError) {
	var (
		b    blocking
		aerr *APIError
	)
	if !q.Has("index") {
		return b, nil
	}
	idx, err := strconv.ParseUint(q.Get("index"), 10, 64)
	if err != nil {
		return b, badRequest("index", "query parameter index must be a non-negative integer, got %q", q.Get("index"))
	}
	b.set, b.index = true, idx
	if b.wait, aerr = queryWait(q, DefaultBlockWait, MaxBlockWait); aerr != nil {
		return b, aerr
	}
	return b, nil
}

// queryWait reads ?wait=D, a positive duration cut to max; without it,
// def.
func queryWait(q url.Values, def, max time.Duration) (time.Duration, *APIError) {
	if !q.Has("wait") {
		return def, nil
	}
	d, err := time.ParseDuration(q.Get("wait"))
	if err != nil || d <= 0 {
		return 0, badRequest("wait", "query parameter wait must be a positive duration such as 5s, got %q", q.Get("wait"))
	}
	return min(d, max), nil
}

// Leader routing.

// onLeader runs local when this gntd is the leader, and otherwise forwards
// the request (with its buffered body) to the leader. local returns
// ErrNotLeader, without having answered, when it found out it is not the
// leader after all; the request is then forwarded. While no leader is
// known, or the known one cannot be dialed, it polls until HoldTimeout.
func (s *Server) onLeader(w http.ResponseWriter, r *http.Request, body []byte, local func() error) {
	s.onLeaderChecked(w, r, body, nil, false, false, local)
}

// onLeaderChecked is onLeader with a check of the request that needs no
// leader (check may be nil). It runs once, the first time the request
// would have to wait (no leader known, or the known one unreachable), so
// that bad input is refused at once instead of after the wait, while a
// request that reaches a leader is checked there only. tokened says the
// handler honours the submission token (a resend finds the job the
// first made), which makes a broken forward of the request safe to
// repeat. batch says the request may be forwarded in a batch with others
// (forwardBatched): its handler answers as soon as its command is applied,
// or calls notifyApplied before it holds the answer.
func (s *Server) onLeaderChecked(w http.ResponseWriter, r *http.Request, body []byte, check func() *APIError, tokened, batch bool, local func() error) {
	ctx := r.Context()
	deadline := time.Now().Add(s.hold)
	forwarded := r.Header.Get(HeaderForwarded) != ""
	why := "no leader is known"
	// A write with a submission token may be forwarded again after a
	// forward broke without an answer: the leader that then takes it
	// answers with the job the first made, if the first made one. Once a
	// forward may have been applied, failing to settle it is
	// indeterminate, not "no leader".
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	resendable := tokened && write && r.Header.Get(HeaderSubmitToken) != ""
	uncertain := false
	unsettled := func(e *APIError) *APIError {
		if uncertain {
			e.ErrorCode = CodeIndeterminate
			e.Message = "an earlier forward of this write broke without an answer, and forwarding it again did not settle it: " + e.Message
		}
		return e
	}
	for {
		addr, self := s.b.Leader()
		switch {
		case self:
			if err := local(); !errors.Is(err, ErrNotLeader) {
				return
			}
			why = "this gntd lost its leadership"
		case forwarded:
			writeError(w, noLeader("this gntd is not the leader and the request was already forwarded once"))
			return
		case addr != "":
			fwd := s.forward
			if batch {
				fwd = s.forwardBatched
			}
			err := fwd(w, r, addr, body)
			if err == nil {
				return
			}
			// A forward the leader refused unapplied (it is not the
			// leader any more: a leader change) is as safe to repeat as
			// one that could not be sent: it is held like one.
			dial := isDialError(err) || errors.Is(err, errLeaderGone)
			if (!dial && !resendable) || ctx.Err() != nil {
				e := noLeader(fmt.Sprintf("forwarding to the leader at %s failed: %v", addr, err))
				if write && (!dial || uncertain) {
					// The leader may have received the write.
					e.ErrorCode = CodeIndeterminate
				}
				writeError(w, e)
				return
			}
			if errors.Is(err, errLeaderGone) {
				why = fmt.Sprintf("the gntd at %s is no longer the leader (%v) and no other leader answered", addr, err)
			} else if dial {
				why = fmt.Sprintf("the leader at %s cannot be reached: %v", addr, err)
			} else {
				uncertain = true
				s.reforwards.Inc()
				why = fmt.Sprintf("forwarding to the leader at %s broke without an answer (%v)", addr, err)
				s.log.Debug("forwarding a tokened write again", "path", r.URL.Path, "leader", addr, "error", err)
			}
		}
		if check != nil {
			if aerr := check(); aerr != nil {
				writeError(w, aerr)
				return
			}
			check = nil
		}
		if !time.Now().Before(deadline) {
			writeError(w, unsettled(noLeader(fmt.Sprintf("%s (waited %s)", why, s.hold))))
			return
		}
		select {
		case <-ctx.Done():
			writeError(w, unsettled(asAPIError(ctx.Err())))
			return
		case <-s.stop.Done():
			// Nothing was applied here (a forward may have been, if
			// uncertain): safe to retry elsewhere.
			writeError(w, unsettled(noLeader(why+"; this gntd is stopping")))
			return
		case <-time.After(leaderPoll):
		}
	}
}

// waitCtx is parent, ended early when the gntd stops (ServerOptions.Stopping).
func (s *Server) waitCtx(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(s.stop, cancel)
	return ctx, func() { stop(); cancel() }
}

// isDialError says the forward failed before the leader could have
// received the request.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.Is(err, errNotSent) || errors.As(err, &oe) && oe.Op == "dial"
}

var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true,
}

// errLeaderGone marks a forward the gntd it went to refused because it is
// not the leader (any more): nothing was applied, and the follower holds
// the request for the next leader as when none is known.
var errLeaderGone = errors.New("it is not the leader")

// maxRefusalBody bounds the 503 body read to recognise a no_leader
// refusal.
const maxRefusalBody = 64 << 10

// leaderGone returns errLeaderGone, with the refusal's message, when a
// forward's answer is a no_leader refusal: the gntd it reached is not the
// leader and applied nothing (an answer whose outcome is unknown is
// indeterminate, never no_leader).
func leaderGone(status int, body []byte) error {
	if status != http.StatusServiceUnavailable {
		return nil
	}
	var e APIError
	if json.Unmarshal(body, &e) != nil || e.ErrorCode != CodeNoLeader {
		return nil
	}
	return fmt.Errorf("%w: %s", errLeaderGone, e.Message)
}

// forward sends the request to the leader's API and copies its answer
// back. It returns an error, having written nothing, when no answer came.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, addr string, body []byte) error {
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, s.baseURL(addr)+r.URL.RequestURI(), rd)
	if err != nil {
		return err
	}
	req.Header = forwardHeader(r)
	resp, err := s.fwd.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer io.Reader = resp.Body
	if resp.StatusCode < http.StatusInternalServerError {
		s.floor.note(resp.Header)
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		if err != nil {
			return err // no answer, as a broken forward
		}
		if err := leaderGone(resp.StatusCode, data); err != nil {
			return err
		}
		answer = io.MultiReader(bytes.NewReader(data), resp.Body)
	}
	if err := copyAnswer(w, resp.StatusCode, resp.Header, answer); err != nil {
		s.log.Debug("copying the leader's answer", "path", r.URL.Path, "error", err)
	}
	return nil
}

// Reads.

// blockingRead wraps a read with ?consistent=1 (forward to the leader,
// which confirms its leadership first) and ?index=N&wait=D (block until the
// local state has applied an index above N). serve answers, or returns
// ErrNotLeader without answering to have the request forwarded.
func (s *Server) blockingRead(serve func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return s.blockingReadOn(nil, serve)
}

// waitFunc blocks until the resource a request names has changed after
// index, or ctx ends.
type waitFunc func(ctx context.Context, r *http.Request, f *fsm.FSM, index uint64)

// waitJobChange waits for a change of the job the path names: a blocking
// query on one job wakes when that job changes, not at every change of
// the state. A finished job never changes again, so it answers at once.
func waitJobChange(ctx context.Context, r *http.Request, f *fsm.FSM, index uint64) {
	id, aerr := parseJobID(r)
	if aerr != nil {
		return // the handler answers the error
	}
	done := func() bool {
		final := false
		f.Read(func(st *fsm.State, _ uint64) {
			j := st.Jobs[id]
			final = (j != nil && fsm.Finalized(j.Status)) || st.Archived[id] != nil
		})
		return final || f.JobIndex(id) > index
	}
	for {
		ch := f.JobChanged(id)
		if done() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// blockingReadOn is blockingRead with a resource-specific wait (nil: any
// change of the state).
func (s *Server) blockingReadOn(wait waitFunc, serve func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return s.blockingReadBody(wait, nil, serve)
}

// blockingReadBody is blockingReadOn for a read with a body (PUT
// /2/query), which a read through the leader forwards.
func (s *Server) blockingReadBody(wait waitFunc, body []byte, serve func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		consistent, aerr := queryFlag(q, "consistent")
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		blk, aerr := parseBlocking(q)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if s.b.FSM() == nil {
			writeError(w, &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeNotCandidate,
				Message: "this gntd is not a master candidate and holds no state"})
			return
		}
		local := func() error {
			if consistent {
				if err := s.b.VerifyLeader(r.Context()); err != nil {
					if errors.Is(err, ErrNotLeader) {
						return ErrNotLeader
					}
					e := asAPIError(err)
					if e.Status == http.StatusInternalServerError {
						e = noLeader(fmt.Sprintf("confirming leadership: %v", err))
					}
					writeError(w, e)
					return nil
				}
			}
			if blk.set {
				wctx, wcancel := s.waitCtx(r.Context())
				defer wcancel()
				ctx, cancel := context.WithTimeout(wctx, blk.wait)
				if wait != nil {
					wait(ctx, r, s.b.FSM(), blk.index)
				} else {
					s.b.FSM().WaitIndex(ctx, blk.index)
				}
				cancel()
			}
			return serve(w, r)
		}
		// Read your writes: a replica that has not applied a write this
		// gntd answered serves the read through the leader.
		if !consistent && s.caughtUp(r.Context()) {
			if err := local(); !errors.Is(err, ErrNotLeader) {
				return
			}
		}
		s.onLeader(w, r, body, local)
	}
}

// serveState answers with what fn builds from the local state. fn runs
// under the state's read lock and the answer is encoded there too, so no
// reference to the state escapes; the response is written after.
func (s *Server) serveState(w http.ResponseWriter, fn func(st *fsm.State) (any, *APIError)) error {
	var out []byte
	var aerr *APIError
	s.b.FSM().Read(func(st *fsm.State, idx uint64) {
		setIndex(w, idx)
		if !st.Initialized() {
			aerr = notInitialised()
			return
		}
		v, e := fn(st)
		if e != nil {
			aerr = e
			return
		}
		var err error
		if out, err = json.Marshal(v); err != nil {
			aerr = asAPIError(fmt.Errorf("encoding answer: %w", err))
		}
	})
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	writeRaw(w, http.StatusOK, out)
	return nil
}

// Writes.

// opsBuilder turns a mutating request into its opcodes (JSON objects
// with OP_ID), before the reason trail is added.
// An opcode is a map of fields, or raw JSON passed through as it came.
type opsBuilder func(r *http.Request, body []byte) ([]any, *APIError)

// jobHandler handles a mutation: the request is validated where it
// arrives (bad input is refused without a leader), then built again and
// submitted as a job on the leader.
func (s *Server) jobHandler(build opsBuilder) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, aerr := s.readBody(r)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		// ?wait=D holds the answer until the job is finalized or D has
		// passed; without it the answer comes at once.
		hold, aerr := queryWait(r.URL.Query(), 0, MaxJobWait)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		// The leader builds and checks the opcodes; a follower forwards
		// the request as it came and leaves that to the leader, so its
		// CPU is not spent on a second decoding. Only when the request
		// would have to wait for a leader (none known, or the known one
		// unreachable) does a follower check them, so that bad input is
		// told at once rather than after an election.
		check := func() *APIError {
			if aerr := checkToken(r); aerr != nil {
				return aerr
			}
			_, _, aerr := s.prepareOps(r, body, build, s.b.Now())
			return aerr
		}
		// Except that a request that may set an OOB helper is checked
		// here too, against this gntd's whitelist (vetOOBProgram).
		if mayNameOOBProgram(body) {
			if aerr := check(); aerr != nil {
				writeError(w, aerr)
				return
			}
		}
		s.onLeaderChecked(w, r, body, check, true, true, func() error {
			if aerr := checkToken(r); aerr != nil {
				writeError(w, aerr)
				return nil
			}
			now := s.b.Now()
			ops, parsed, aerr := s.prepareOps(r, body, build, now)
			if aerr != nil {
				writeError(w, aerr)
				return nil
			}
			return s.submit(w, r, ops, parsed, now, hold)
		})
	}
}

// checkToken checks the request's submission token (X-Gnt-Submit-Token),
// if it has one.
func checkToken(r *http.Request) *APIError {
	vs := r.Header.Values(HeaderSubmitToken)
	if len(vs) == 0 {
		return nil
	}
	if len(vs) > 1 {
		return badRequest("token", "%s given %d times", HeaderSubmitToken, len(vs))
	}
	if e := fsm.CheckSubmitToken(vs[0]); e != nil {
		return FromFSM(e)
	}
	return nil
}

// prepareOps builds the opcodes of a request, adds the reason trail and
// dry_run, and validates each with fsm.ParseOpcode, vetOOBProgram, vetOS and
// vetIAllocator. It returns them encoded and as ParseOpcode decoded them
// (without the trail), for the checks against the state (checkDRBDOps).
func (s *Server) prepareOps(r *http.Request, body []byte, build opsBuilder, now time.Time) ([]json.RawMessage, []fsm.Opcode, *APIError) {
	q := r.URL.Query()
	dryRun, aerr := queryFlag(q, "dry-run")
	if aerr != nil {
		return nil, nil, aerr
	}
	if aerr := checkRequestText(r); aerr != nil {
		return nil, nil, aerr
	}
	if reason := q.Get("reason"); len(reason) > fsm.MaxReasonTextLen {
		return nil, nil, badRequest("reason", "reason is %d bytes long; at most %d", len(reason), fsm.MaxReasonTextLen)
	}
	ops, aerr := build(r, body)
	if aerr != nil {
		return nil, nil, aerr
	}
	if e := fsm.CheckJobSize(len(ops)); e != nil {
		return nil, nil, FromFSM(e)
	}
	ns := now.UnixNano()
	var trail []fsm.ReasonEntry
	if reason := q.Get("reason"); reason != "" {
		trail = append(trail, fsm.ReasonEntry{Source: "gnt:user", Text: reason, TimeNS: ns})
	}
	trail = append(trail, fsm.ReasonEntry{Source: "gnt:library:rlib2", Text: r.Method + " " + r.URL.Path, TimeNS: ns})
	trailJSON := fsm.AppendReasonTrail(make([]byte, 0, 128), trail)
	out := make([]json.RawMessage, len(ops))
	parsed := make([]fsm.Opcode, len(ops))
	for i, o := range ops {
		raw, ok := o.(json.RawMessage)
		if !ok {
			var err error
			if raw, err = json.Marshal(o); err != nil {
				return nil, nil, badRequest("", "encoding opcode %d: %v", i, err)
			}
		}
		op, err := fsm.ParseOpcode(raw)
		if err != nil {
			return nil, nil, opError(len(ops), i, fsm.AsError(err))
		}
		aerr := s.vetOOBProgram(op)
		if aerr == nil {
			aerr = s.vetOS(r.Context(), op)
		}
		if aerr == nil {
			aerr = s.vetIAllocator(raw)
		}
		if aerr != nil {
			if len(ops) > 1 {
				aerr.Message = fmt.Sprintf("opcode %d: %s", i, aerr.Message)
				aerr.Explain = aerr.Message
			}
			return nil, nil, aerr
		}
		parsed[i] = op
		if spliced, ok := withTrail(raw, trailJSON); ok && !dryRun && len(op.Common().Reason) == 0 {
			out[i] = spliced
			continue
		}
		// Otherwise the trail goes onto the decoded opcode, which is
		// encoded once.
		c := op.Common()
		c.Reason = append(c.Reason, trail...)
		if dryRun {
			yes := true
			c.DryRun = &yes
		}
		if out[i], err = json.Marshal(op); err != nil {
			return nil, nil, badRequest("", "encoding opcode %d: %v", i, err)
		}
	}
	return out, parsed, nil
}

// withTrail adds "reason": trail to an opcode object that has no reason
// key yet by editing its text, which ParseOpcode has just validated: on
// the busiest path of the leader this saves encoding the typed opcode
// again. ok is false when the object already names a reason (the trail
// must then be appended to it).
func withTrail(raw, trail []byte) (json.RawMessage, bool) {
	t := bytes.TrimRight(raw, " \t\r\n")
	if len(t) < 2 || t[len(t)-1] != '}' || bytes.Contains(raw, []byte(`"reason"`)) {
		return nil, false
	}
	body := bytes.TrimRight(t[:len(t)-1], " \t\r\n")
	if len(body) == 0 {
		return nil, false
	}
	out := make([]byte, 0, len(t)+len(trail)+12)
	out = append(out, body...)
	if body[len(body)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, `"reason":`...)
	out = append(out, trail...)
	return append(out, '}'), true
}

// checkRequestText refuses a request whose path or query, which become
// opcode fields and reason entries, is not valid UTF-8 or holds control
// characters: they would be changed on the way (to U+FFFD), not refused.
func checkRequestText(r *http.Request) *APIError {
	if !utf8.ValidString(r.URL.Path) || strings.ContainsFunc(r.URL.Path, unicode.IsControl) {
		return badRequest("path", "the request path is not valid UTF-8 or holds control characters")
	}
	for k, vs := range r.URL.Query() {
		if !utf8.ValidString(k) {
			return badRequest("query", "a query parameter name is not valid UTF-8")
		}
		for _, v := range vs {
			if !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
				return badRequest(k, "query parameter %s is not valid UTF-8 or holds control characters", k)
			}
		}
	}
	return nil
}

func opError(n, i int, e *fsm.Error) *APIError {
	if n > 1 {
		e = &fsm.Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d: %s", i, e.Msg)}
	}
	return FromFSM(e)
}

// checkDRBDOps refuses, at submission, the opcodes of a job (parsed, in
// order) that would put drbd disks on nodes whose agents said they take
// none (fsm.State.CheckDRBDOp), so that it is never their job that fails.
// Every submission path calls it, on the leader's state, before its Raft
// write.
func checkDRBDOps(st *fsm.State, ops []fsm.Opcode) *fsm.Error {
	for i, op := range ops {
		if e := st.CheckDRBDOp(op); e != nil {
			if len(ops) > 1 {
				e = &fsm.Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("opcode %d: %s", i, e.Msg)}
			}
			return e
		}
	}
	return nil
}

// checkDRBDJobs is checkDRBDOps for the jobs of one submission.
func checkDRBDJobs(st *fsm.State, jobs [][]fsm.Opcode) *fsm.Error {
	for k, ops := range jobs {
		if e := checkDRBDOps(st, ops); e != nil {
			if len(jobs) > 1 {
				e = &fsm.Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("job %d of the submission: %s", k, e.Msg)}
			}
			return e
		}
	}
	return nil
}

// checkSubmission checks the jobs of a submission (parsed: their
// opcodes as prepareOps parsed them) on the leader's state before their
// Raft write, in the one order of every submission path (submit,
// POST /2/gnt/jobs, multi-allocations), so an opcode gets the same
// refusal whichever path it came by: the nodes' DRBD first
// (checkDRBDJobs), then the rest of the jobs (fsm.State.CheckJobs: their
// dependencies); with jobs nil only the nodes' DRBD.
func checkSubmission(st *fsm.State, jobs []fsm.JobSpec, parsed [][]fsm.Opcode) *fsm.Error {
	if e := checkDRBDJobs(st, parsed); e != nil || jobs == nil {
		return e
	}
	return st.CheckJobs(jobs)
}

// submit builds the job and applies it through Raft; the answer is the
// job id, with X-Gnt-Index the index it was applied at and
// X-Gnt-Job-Status its status then. With hold > 0 the answer waits until
// the job is finalized (or hold passes): a client that wants the outcome
// then needs one request, not a submission and a wait.
func (s *Server) submit(w http.ResponseWriter, r *http.Request, ops []json.RawMessage, parsed []fsm.Opcode, now time.Time, hold time.Duration) error {
	if aerr := s.refuseDebugOps(ops); aerr != nil {
		writeError(w, aerr)
		return nil
	}
	uuids := make([]string, len(ops))
	for i := range uuids {
		uuids[i] = s.b.NewUUID()
	}
	// Dependencies and the nodes' DRBD are what prepareOps could not
	// check without the state; they are checked on the leader's state
	// (checkSubmission) so a bad one costs no Raft write.
	hasDeps := false
	for _, op := range ops {
		hasDeps = hasDeps || bytes.Contains(op, []byte(`"depends"`))
	}
	var jobs []fsm.JobSpec
	if hasDeps {
		jobs = []fsm.JobSpec{{Ops: ops, UUIDs: uuids}}
	}
	token := r.Header.Get(HeaderSubmitToken)
	var e *fsm.Error
	s.b.FSM().Read(func(st *fsm.State, idx uint64) {
		if st.Resent(token) || !st.Initialized() {
			// A resent submission: it will answer with the job the
			// first one made, which was checked then. (An uninitialized
			// cluster's apply refuses the job, saying why.)
			return
		}
		if e = checkSubmission(st, jobs, [][]fsm.Opcode{parsed}); e != nil {
			setIndex(w, idx)
		}
	})
	if e != nil {
		writeError(w, FromFSM(e))
		return nil
	}
	resp, ok, err := s.applyHere(w, r, fsm.JobSubmit{Now: now.UnixNano(), Ops: ops, UUIDs: uuids, Token: token})
	if !ok {
		return err
	}
	status := ""
	if resp.Job != nil && (resp.Index == 0 || !resp.Job.Executor) {
		// Configuration-only jobs are final already; saying so spares the
		// client a round trip to learn it. (An executor job found by a
		// resent submission is waited for, or left to the client, like
		// any other: its status now is not what the submission index
		// shows.)
		status = resp.Job.Status
	}
	if hold > 0 && !fsm.Finalized(status) {
		if followerAwaits(r) {
			// The follower that forwarded this in a batch waits for the
			// job on its own replica (awaitForwarded): it knows when
			// its client gives up, which the leader does not.
			w.Header().Set(headerAwaitThere, hold.String())
		} else {
			notifyApplied(w)
			var idx uint64
			ctx, cancel := s.waitCtx(r.Context())
			status, idx = awaitJob(ctx, s.b.FSM(), resp.JobID, hold, 0)
			cancel()
			setIndex(w, idx)
		}
	}
	if status != "" {
		w.Header().Set(HeaderJobStatus, status)
	}
	writeJSON(w, resp.JobID)
	return nil
}

// awaitJob waits until job id is finalized, d passes or ctx ends, and
// returns its status then and the index of the state it was read from. A
// job this state does not know ends the wait, unless the state has not yet
// applied index after (a follower waiting for a job the leader made).
func awaitJob(ctx context.Context, f *fsm.FSM, id int64, d time.Duration, after uint64) (string, uint64) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		ch, anyChange := f.JobChanged(id), f.Changed()
		var (
			status string
			index  uint64
		)
		f.Read(func(st *fsm.State, idx uint64) {
			index = idx
			if j, ok := lookupJob(st, id); ok {
				status = j.Status
			}
		})
		if index >= after && (status == "" || fsm.Finalized(status)) {
			return status, index
		}
		if index < after {
			ch = anyChange // the job may not exist here yet
		}
		select {
		case <-ch:
		case <-timer.C:
			return status, index
		case <-ctx.Done():
			return status, index
		}
	}
}

// decodeBody decodes a JSON object body strictly; an empty body is an
// empty object.
func decodeBody(body []byte, v any) *APIError {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := fsm.DecodeStrict(body, v); err != nil {
		return FromFSM(fsm.AsError(err))
	}
	return nil
}

// toMap turns a request struct into an opcode's field map, keeping
// numbers exact.
func toMap(v any) map[string]any {
	raw, err := json.Marshal(v)
	if err != nil {
		return map[string]any{}
	}
	m, _ := rawToMap(raw)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// rawToMap decodes a JSON object, keeping numbers as json.Number.
func rawToMap(raw []byte) (map[string]any, error) {
	if e := fsm.CheckJSON(raw); e != nil {
		return nil, e
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// isLocalAddr reports whether ip is a loopback address or one of this
// host's own addresses.
func isLocalAddr(ip net.IP) bool {
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func remoteIP(r *http.Request) net.IP {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return net.ParseIP(host)
}

// finite guards float query parameters.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
