package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Meta is what every response says about the state it was read from.
type Meta struct {
	Index       uint64        // X-Gnt-Index: applied Raft index of the answering gntd
	KnownLeader bool          // X-Gnt-Known-Leader
	LastContact time.Duration // X-Gnt-Last-Contact
	Server      string        // address that answered
	JobStatus   string        // X-Gnt-Job-Status: status of a job right after its submission
}

// Client talks to the API of any candidate from a list, moving on to the
// next address when one is down. It is safe for concurrent use.
type Client struct {
	servers []string
	http    *http.Client
	scheme  string // "https", or "http" for a client made without TLS (tests)

	mu      sync.Mutex
	cur     int
	resends atomic.Int64
	// creds are the basic auth credentials sent with every request
	// (SetBasicAuth); nil: none.
	creds atomic.Pointer[[2]string]
}

// SetBasicAuth makes the client send a RAPI user's name and password
// with every request (HTTP basic auth); an empty user sends none.
func (c *Client) SetBasicAuth(user, password string) {
	if user == "" {
		c.creds.Store(nil)
		return
	}
	c.creds.Store(&[2]string{user, password})
}

// Resends returns how many job submissions this client resent because it
// did not learn the outcome of an earlier try (see Submit).
func (c *Client) Resends() int64 { return c.resends.Load() }

// ClientOptions configure NewClientWith.
type ClientOptions struct {
	// TLS is the client's TLS configuration (the cluster CA to trust, and
	// a client certificate if it has one). Every gntd serves its API over
	// HTTPS only; a client without TLS speaks plain HTTP, which only test
	// servers answer.
	TLS *tls.Config
	// LocalAddr, when set, is the address the client's connections leave
	// from (a gntd's own IP).
	LocalAddr net.Addr
}

// NewClient returns a client for the given host:port addresses speaking
// plain HTTP: for tests against in-process servers. Real clusters need
// NewClientWith and TLS.
func NewClient(servers []string) *Client {
	return NewClientWith(servers, ClientOptions{})
}

// NewClientWith returns a client for the given host:port addresses.
func NewClientWith(servers []string, o ClientOptions) *Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: o.LocalAddr}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     o.TLS,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	scheme := "http"
	if o.TLS != nil {
		scheme = "https"
	}
	return &Client{servers: servers, http: &http.Client{Transport: tr}, scheme: scheme}
}

// url is the address of path on server (host:port) with the client's
// scheme.
func (c *Client) url(server, path string) string { return c.scheme + "://" + server + path }

// Servers returns the configured addresses.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// retryable reports whether a failure should make the client try the next
// server: the server could not be reached, or it answered that it has no
// leader (nothing was applied then). A write whose outcome is unknown (its
// connection broke after it was sent, or leadership was lost while it was
// committed) is resent only when resending is safe: a read, or a job
// submission with a token (Submit). Any other write may have been
// applied, and resending it could run a job twice; the caller gets the
// error and decides.
func retryable(err error, idempotent bool) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode == CodeNoLeader || ae.ErrorCode == CodeUnavailable || ae.ErrorCode == CodeNotCandidate ||
			idempotent && ae.ErrorCode == CodeIndeterminate
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	if !idempotent {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "connection reset")
}

// settled is the error to report for a tokened write whose last try
// failed with err: once an earlier try's outcome was unknown, a later
// "no leader" or server error does not mean nothing was applied, so the
// answer is indeterminate. A refusal (4xx) stands: a resend of an applied
// submission would have found its job.
func settled(err error, uncertain bool) error {
	var ae *APIError
	if !uncertain || errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
		return err
	}
	return &APIError{Status: http.StatusServiceUnavailable, ErrorCode: CodeIndeterminate,
		Message: "an earlier try's outcome is unknown, and resending it did not settle it: " + err.Error()}
}

// Do sends one request and decodes the JSON answer into out (when non-nil).
// body is encoded as JSON unless it is a []byte. Requests that fail because
// a server is unreachable, or has no leader, are retried on the next server
// until ctx ends; a write is resent only when it surely was not applied.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body any, out any) (Meta, error) {
	return c.do(ctx, method, path, query, nil, body, out)
}

// do is Do with extra request headers (used by signed requests).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, header http.Header, body any, out any) (Meta, error) {
	var payload []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		payload = b
	default:
		var err error
		if payload, err = json.Marshal(b); err != nil {
			return Meta{}, err
		}
	}
	if len(c.servers) == 0 {
		return Meta{}, errors.New("no server addresses configured")
	}
	var lastErr error
	backoff := 10 * time.Millisecond
	tokened := header.Get(HeaderSubmitToken) != ""
	uncertain := false // an earlier try of this tokened write may have been applied
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		i := c.cur
		c.mu.Unlock()
		server := c.servers[i%len(c.servers)]
		meta, err := c.once(ctx, server, method, path, query, header, payload, out)
		if err == nil {
			return meta, nil
		}
		lastErr = err
		if !retryable(err, method == http.MethodGet || tokened) || ctx.Err() != nil {
			return meta, settled(err, uncertain)
		}
		if tokened && !retryable(err, false) {
			uncertain = true
			c.resends.Add(1) // only the token makes this resend safe
		}
		c.mu.Lock()
		if c.cur == i {
			c.cur = i + 1
		}
		c.mu.Unlock()
		if (attempt+1)%len(c.servers) == 0 {
			select {
			case <-ctx.Done():
				return meta, settled(fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr), uncertain)
			case <-time.After(backoff):
			}
			if backoff < 500*time.Millisecond {
				backoff *= 2
			}
		}
	}
}

func (c *Client) once(ctx context.Context, server, method, path string, query url.Values, header http.Header, payload []byte, out any) (Meta, error) {
	u := c.url(server, path)
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return Meta{}, err
	}
	for k, vs := range header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cr := c.creds.Load(); cr != nil {
		req.SetBasicAuth(cr[0], cr[1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Meta{Server: server}, err
	}
	defer resp.Body.Close()
	meta := parseMeta(resp.Header)
	meta.Server = server
	if _, raw := out.(rawBody); resp.StatusCode < 300 && out != nil && !raw {
		// Decoded as it arrives: a bulk answer (tens of MB at scale) is
		// not held as bytes as well as decoded.
		return meta, decodeAnswer(resp.Body, out, method, path)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorAnswer))
	if err != nil {
		return meta, err
	}
	if resp.StatusCode >= 300 {
		ae := &APIError{}
		if json.Unmarshal(data, ae) != nil || ae.ErrorCode == "" {
			ae = &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(data)), ErrorCode: "http_" + strconv.Itoa(resp.StatusCode)}
		}
		ae.Status = resp.StatusCode
		return meta, ae
	}
	if raw, ok := out.(rawBody); ok {
		*raw.data, *raw.header = data, resp.Header
		return meta, nil
	}
	return meta, nil
}

// maxErrorAnswer bounds what is read of an error answer, of a raw one,
// and of an answer nobody decodes; maxAnswer bounds a decoded answer.
var (
	maxErrorAnswer int64 = 64 << 20
	maxAnswer      int64 = 1 << 30
)

// decodeAnswer decodes the JSON answer body into out as it is read
// (nothing for an empty body), refusing an answer larger than maxAnswer
// or with more than white space after its value. A failed read is
// returned as it is, as a read of the whole answer would fail.
func decodeAnswer(body io.Reader, out any, method, path string) error {
	lr := &answerReader{r: body, left: maxAnswer}
	dec := json.NewDecoder(lr)
	err := dec.Decode(out)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return nil
		} else if err == nil {
			err = errors.New("more than one JSON value")
		}
	} else if err == io.EOF && lr.read == 0 {
		return nil
	}
	if lr.err != nil {
		return lr.err
	}
	return fmt.Errorf("decoding answer of %s %s: %w", method, path, err)
}

// answerReader reads at most left bytes of r and remembers a failed read.
type answerReader struct {
	r          io.Reader
	left, read int64
	err        error // the read's own failure, or the answer being too large
}

func (a *answerReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if a.left <= 0 {
		// One byte more than allowed tells a longer answer from the end.
		var one [1]byte
		n, err := a.r.Read(one[:])
		if n == 0 {
			if err != nil && err != io.EOF {
				a.err = err
			}
			return 0, err
		}
		a.err = fmt.Errorf("the answer is larger than %d bytes", maxAnswer)
		return 0, a.err
	}
	if int64(len(p)) > a.left {
		p = p[:a.left]
	}
	n, err := a.r.Read(p)
	a.left -= int64(n)
	a.read += int64(n)
	if err != nil && err != io.EOF {
		a.err = err
	}
	return n, err
}

// rawBody, as the out of do, receives the answer's bytes and headers
// undecoded.
type rawBody struct {
	data   *[]byte
	header *http.Header
}

// Header names of the read metadata.
const (
	HeaderIndex       = "X-Gnt-Index"
	HeaderKnownLeader = "X-Gnt-Known-Leader"
	HeaderLastContact = "X-Gnt-Last-Contact" // milliseconds
	HeaderForwarded   = "X-Gnt-Forwarded"
	HeaderJobStatus   = "X-Gnt-Job-Status"
	HeaderSignature   = "X-Gnt-Signature"
	HeaderTimestamp   = "X-Gnt-Timestamp"
	// HeaderSubmitToken names a job submission (fsm.JobSubmit.Token): a
	// request resent with the same token answers with the job the first
	// one created instead of creating another.
	HeaderSubmitToken = "X-Gnt-Submit-Token"
)

func parseMeta(h http.Header) Meta {
	var m Meta
	m.Index, _ = strconv.ParseUint(h.Get(HeaderIndex), 10, 64)
	m.KnownLeader = h.Get(HeaderKnownLeader) == "true"
	m.JobStatus = h.Get(HeaderJobStatus)
	if ms, err := strconv.ParseFloat(h.Get(HeaderLastContact), 64); err == nil {
		m.LastContact = time.Duration(ms * float64(time.Millisecond))
	}
	return m
}
