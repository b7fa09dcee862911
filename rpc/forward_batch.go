package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Batched forwarding.
//
// A follower forwards the writes it cannot apply to the leader. Sent as one
// HTTP request each, a forwarded job cost about as much CPU again as a job
// sent to the leader: the follower's HTTP client round trip, and the
// leader's request parsing, answer writing and their system calls. So the
// writes a follower forwards to one leader meanwhile travel together, in
// one POST /2/gnt/forward: its body holds each request (method, URI,
// headers, body), and its answer streams each request's answer (status,
// headers, body) as soon as the leader has it. The leader serves each
// request through its ordinary handlers, concurrently, so that they share
// its next Raft entry; a request in a batch is answered exactly as it
// would have been alone.
//
// A follower keeps at most forwardSlots batches to one leader unsettled;
// a batch settles when each of its requests has been answered or, for a
// held submission (?wait=D), applied. Writes that come meanwhile wait and
// go together in the next batch, the way the leader's applier gathers
// commands while Raft is busy.
//
// The body is a version byte (forwardVersion), the number of requests,
// and for each: method, URI, the headers as a count and
// name/value pairs, and the body. Numbers are uvarints, strings a uvarint
// length and the bytes. The answer is a stream of frames: the request's
// position in the batch, a kind byte ('a': applied, the answer follows
// later; 'r': the answer), and for 'r' the status, the headers and the
// body, each frame preceded by its length.

const (
	forwardPath        = "/2/gnt/forward"
	forwardContentType = "application/x-gnt-forward"
	forwardVersion     = 1

	// forwardSlots is how many batches a follower keeps unsettled per
	// leader. More slots mean smaller batches and less waiting for one:
	// in alternating pairs with clients spread over the candidates
	// (2026-11-23), three beat two in five pairs of six at 64 clients
	// (2,441–2,874 against 1,862–3,261 jobs/s) and at 256 (3,704–4,396
	// against 3,093–4,361); four against three was a draw in three;
	// freeing the slot once the leader had taken the batch in did worse
	// than two.
	forwardSlots = 3
	// forwardMaxItems bounds the requests of one batch.
	forwardMaxItems = 256
	// forwardBodyFactor times the body limit bounds a batch's body.
	forwardBodyFactor = 8
	// forwardTimeout bounds a whole batch: its longest request is a
	// submission held for MaxJobWait.
	forwardTimeout = MaxJobWait + 30*time.Second
	// forwardRetryUnbatched is how long a follower forwards one request
	// at a time to a leader that answered 404 to a batch (a gntd that
	// predates batches), before it tries a batch again.
	forwardRetryUnbatched = time.Minute

	frameApplied = 'a'
	frameAnswer  = 'r'

	maxForwardHeaders = 256     // header values of one request or answer
	maxForwardString  = 1 << 16 // a method, URI, host or header field
	maxForwardAnswer  = 1 << 26 // an answer's body
	maxForwardFrame   = maxForwardAnswer + 1<<20
)

// A held submission (?wait=D) forwarded in a batch is not held by the
// leader when the follower holds a replica: the follower marks it with
// headerAwaitHere, the leader answers as soon as the job is queued and
// names the wait in headerAwaitThere, and the follower waits for the job
// on its own replica (awaitForwarded). So the wait ends when the client
// goes away, which only the follower sees: a leader holding it would keep
// it, and the batch's answer stream, open for up to MaxJobWait.
const (
	headerAwaitHere  = "X-Gnt-Await-Here"
	headerAwaitThere = "X-Gnt-Await"
)

// inBatchKey marks the context of the requests a leader serves from a
// batch.
type inBatchKey struct{}

// followerAwaits says the request came in a batch from a follower that
// waits for its held submissions itself.
func followerAwaits(r *http.Request) bool {
	return r.Context().Value(inBatchKey{}) != nil && r.Header.Get(headerAwaitHere) != ""
}

// fwdRequest is one request of a batch.
type fwdRequest struct {
	Method, URI string
	Header      http.Header
	Body        []byte
}

// fwdAnswer is the leader's answer to one request of a batch.
type fwdAnswer struct {
	Status int
	Header http.Header
	Body   []byte
}

// errNotSent marks a forward that never left this gntd: the write was
// not applied, and trying again is safe.
var errNotSent = errors.New("the request was not sent")

// errUnbatched says the leader serves no batches: forward alone.
var errUnbatched = errors.New("the leader does not take batched forwards")

// Encoding.

func appendString[T string | []byte](b []byte, s T) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendHeader(b []byte, h http.Header) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		for _, v := range vs {
			b = appendString(appendString(b, k), v)
		}
	}
	return b
}

// encodeForwardBatch encodes the body of a POST /2/gnt/forward.
func encodeForwardBatch(reqs []fwdRequest) []byte {
	b := []byte{forwardVersion}
	b = binary.AppendUvarint(b, uint64(len(reqs)))
	for _, r := range reqs {
		b = appendString(b, r.Method)
		b = appendString(b, r.URI)
		b = appendHeader(b, r.Header)
		b = appendString(b, r.Body)
	}
	return b
}

// answerFrame is the frame of request k's answer, with its length.
func answerFrame(k int, a fwdAnswer) []byte {
	b := append(binary.AppendUvarint(nil, uint64(k)), frameAnswer)
	b = binary.AppendUvarint(b, uint64(a.Status))
	b = appendHeader(b, a.Header)
	return withLength(appendString(b, a.Body))
}

// appliedFrame is the frame saying request k was applied, with its
// length.
func appliedFrame(k int) []byte {
	return withLength(append(binary.AppendUvarint(nil, uint64(k)), frameApplied))
}

func withLength(frame []byte) []byte {
	return append(binary.AppendUvarint(make([]byte, 0, len(frame)+binary.MaxVarintLen64), uint64(len(frame))), frame...)
}

// Decoding. frameIn reads a frame in memory; the first error sticks, and
// every later read returns zero values.

type frameIn struct {
	b   []byte
	off int
	err error
}

func (f *frameIn) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf(format, args...)
	}
}

// uvarint reads a number of at most max.
func (f *frameIn) uvarint(what string, max uint64) uint64 {
	if f.err != nil {
		return 0
	}
	v, k := binary.Uvarint(f.b[f.off:])
	switch {
	case k == 0:
		f.fail("%s: %w", what, io.ErrUnexpectedEOF)
	case k < 0:
		f.fail("%s: varint overflows 64 bits", what)
	case v > max:
		f.fail("%s is %d, more than %d", what, v, max)
	}
	if f.err != nil {
		return 0
	}
	f.off += k
	return v
}

func (f *frameIn) byte(what string) byte {
	if f.err != nil {
		return 0
	}
	if f.off >= len(f.b) {
		f.fail("%s: %w", what, io.ErrUnexpectedEOF)
		return 0
	}
	f.off++
	return f.b[f.off-1]
}

// bytes reads a string of at most max bytes, without copying.
func (f *frameIn) bytes(what string, max int) []byte {
	n := f.uvarint(what+" length", uint64(max))
	if f.err != nil {
		return nil
	}
	if n > uint64(len(f.b)-f.off) {
		f.fail("%s of %d bytes: %w", what, n, io.ErrUnexpectedEOF)
		return nil
	}
	out := f.b[f.off : f.off+int(n) : f.off+int(n)]
	f.off += int(n)
	return out
}

func (f *frameIn) str(what string, max int) string { return string(f.bytes(what, max)) }

func (f *frameIn) header(what string) http.Header {
	n := f.uvarint(what+" count", maxForwardHeaders)
	h := make(http.Header, n)
	for i := uint64(0); i < n && f.err == nil; i++ {
		k := f.str(what+" name", maxForwardString)
		v := f.str(what+" value", maxForwardString)
		if f.err == nil && (k == "" || strings.ContainsAny(k, ":\r\n \t") || strings.ContainsAny(v, "\r\n")) {
			f.fail("%s %q is not a valid header field", what, k)
		}
		h[k] = append(h[k], v)
	}
	return h
}

// decodeForwardBatch decodes the body of a POST /2/gnt/forward, whole:
// an error names what is wrong, and then no request of it is served. The
// requests' bodies point into body.
func decodeForwardBatch(body []byte) ([]fwdRequest, error) {
	if len(body) == 0 {
		return nil, errors.New("empty body")
	}
	if body[0] != forwardVersion {
		return nil, fmt.Errorf("format version %d, this gntd reads %d", body[0], forwardVersion)
	}
	f := &frameIn{b: body, off: 1}
	n := f.uvarint("request count", forwardMaxItems)
	if f.err == nil && n == 0 {
		f.fail("no requests")
	}
	reqs := make([]fwdRequest, 0, n)
	for i := uint64(0); i < n && f.err == nil; i++ {
		var r fwdRequest
		r.Method = f.str("method", maxForwardString)
		r.URI = f.str("URI", maxForwardString)
		r.Header = f.header("header")
		r.Body = f.bytes("body", len(body))
		if f.err != nil {
			f.err = fmt.Errorf("request %d: %w", i, f.err)
		}
		reqs = append(reqs, r)
	}
	if f.err == nil && f.off != len(body) {
		f.fail("%d bytes after request %d", len(body)-f.off, n-1)
	}
	if f.err != nil {
		return nil, f.err
	}
	return reqs, nil
}

// readForwardFrame reads the next frame of a batch's answer to n
// requests: the request's position, and its answer (nil for an applied
// frame). A frame is its length and then its bytes, so that it is read
// whole before it is decoded.
func readForwardFrame(r *bufio.Reader, n int) (int, *fwdAnswer, error) {
	size, err := binary.ReadUvarint(r)
	switch {
	case errors.Is(err, io.EOF):
		return 0, nil, fmt.Errorf("frame length: %w", io.ErrUnexpectedEOF)
	case err != nil:
		return 0, nil, fmt.Errorf("frame length: %w", err)
	case size > maxForwardFrame:
		return 0, nil, fmt.Errorf("frame length is %d, more than %d", size, maxForwardFrame)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("frame of %d bytes: %w", size, io.ErrUnexpectedEOF)
	}
	return decodeForwardFrame(buf, n)
}

// decodeForwardFrame decodes one frame (without its length).
func decodeForwardFrame(b []byte, n int) (int, *fwdAnswer, error) {
	f := &frameIn{b: b}
	k := int(f.uvarint("request position", uint64(n-1)))
	kind := f.byte("frame kind")
	var a *fwdAnswer
	switch {
	case f.err != nil:
	case kind == frameApplied:
	case kind == frameAnswer:
		a = &fwdAnswer{}
		st := f.uvarint("status", 999)
		if f.err == nil && st < 100 {
			f.fail("status %d is not an HTTP status", st)
		}
		a.Status = int(st)
		a.Header = f.header("answer header")
		a.Body = f.bytes("answer body", maxForwardAnswer)
	default:
		f.fail("frame kind %q is neither 'a' nor 'r'", kind)
	}
	if f.err == nil && f.off != len(b) {
		f.fail("%d bytes after the frame", len(b)-f.off)
	}
	if f.err != nil {
		return 0, nil, f.err
	}
	return k, a, nil
}

// The follower's side.

// forwarder gathers the writes forwarded to each leader address into
// batches.
type forwarder struct {
	s     *Server
	mu    sync.Mutex
	lanes map[string]*lane
}

// lane is the forwarding to one leader address.
type lane struct {
	addr    string
	queue   []*fwdItem
	busy    int       // unsettled batches
	noBatch time.Time // until then, forward one request at a time (a batch got 404)
}

// fwdItem is one forwarded request, waiting for its answer.
type fwdItem struct {
	req  fwdRequest
	size int
	done chan fwdResult // buffered: the sender never blocks
}

// measure sets the item's size in a batch (an upper bound of its
// encoding) and says whether a batch can carry it: a URI, method or header
// field longer than maxForwardString, or more than maxForwardHeaders header
// values, would have the leader refuse the whole batch.
func (it *fwdItem) measure() bool {
	r := it.req
	if len(r.Method) > maxForwardString || len(r.URI) > maxForwardString {
		return false
	}
	it.size = len(r.Method) + len(r.URI) + len(r.Body) + 4*binary.MaxVarintLen64
	n := 0
	for k, vs := range r.Header {
		for _, v := range vs {
			if len(k) > maxForwardString || len(v) > maxForwardString {
				return false
			}
			n++
			it.size += len(k) + len(v) + 2*binary.MaxVarintLen64
		}
	}
	return n <= maxForwardHeaders
}

type fwdResult struct {
	answer *fwdAnswer
	err    error
}

// forwardBatched forwards the request to the leader at addr in a batch
// and copies its answer back, or returns an error having written
// nothing, as forward does.
func (s *Server) forwardBatched(w http.ResponseWriter, r *http.Request, addr string, body []byte) error {
	it := &fwdItem{
		req:  fwdRequest{Method: r.Method, URI: r.URL.RequestURI(), Header: forwardHeader(r), Body: body},
		done: make(chan fwdResult, 1),
	}
	if s.b.FSM() != nil {
		it.req.Header.Set(headerAwaitHere, "1")
	} else {
		it.req.Header.Del(headerAwaitHere)
	}
	if !it.measure() {
		// Fields a batch cannot carry: this one goes alone.
		return s.forward(w, r, addr, body)
	}
	f := s.fwdBatch
	if !f.enqueue(addr, it) {
		return s.forward(w, r, addr, body)
	}
	var res fwdResult
	select {
	case res = <-it.done:
	case <-r.Context().Done():
		if f.withdraw(addr, it) {
			return fmt.Errorf("%w: %w", errNotSent, r.Context().Err())
		}
		return r.Context().Err()
	}
	if errors.Is(res.err, errUnbatched) {
		return s.forward(w, r, addr, body)
	}
	if res.err != nil {
		return res.err
	}
	if err := leaderGone(res.answer.Status, res.answer.Body); err != nil {
		return err
	}
	if res.answer.Status < http.StatusInternalServerError {
		s.floor.note(res.answer.Header)
	}
	if wait := res.answer.Header.Get(headerAwaitThere); wait != "" {
		res.answer.Header.Del(headerAwaitThere)
		s.awaitForwarded(r, res.answer, wait)
	}
	if err := copyAnswer(w, res.answer.Status, res.answer.Header, bytes.NewReader(res.answer.Body)); err != nil {
		s.log.Debug("copying the leader's answer", "path", r.URL.Path, "error", err)
	}
	return nil
}

// awaitForwarded waits on this gntd's replica, for up to wait, for the job
// of a held submission that the leader answered at once (headerAwaitThere),
// and puts the job's status and the index it was read at into the answer.
// It leaves the leader's answer as it is if the replica does not reach the
// leader's index in that time, or the answer is not a submission's.
func (s *Server) awaitForwarded(r *http.Request, a *fwdAnswer, wait string) {
	f := s.b.FSM()
	d, err := time.ParseDuration(wait)
	if f == nil || err != nil || d <= 0 || d > MaxJobWait || a.Status != http.StatusOK {
		return
	}
	var id int64
	if json.Unmarshal(a.Body, &id) != nil {
		return
	}
	after, err := strconv.ParseUint(a.Header.Get(HeaderIndex), 10, 64)
	if err != nil {
		return
	}
	ctx, cancel := s.waitCtx(r.Context())
	status, idx := awaitJob(ctx, f, id, d, after)
	cancel()
	if idx < after || status == "" {
		return
	}
	a.Header.Set(HeaderIndex, strconv.FormatUint(idx, 10))
	a.Header.Set(HeaderJobStatus, status)
}

// enqueue queues it for the leader at addr and sends a batch if a slot
// is free. It returns false when that leader takes no batches.
func (f *forwarder) enqueue(addr string, it *fwdItem) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lanes[addr]
	if l == nil {
		l = &lane{addr: addr}
		f.lanes[addr] = l
	}
	if !l.noBatch.IsZero() && f.s.b.Now().Before(l.noBatch) {
		return false
	}
	l.queue = append(l.queue, it)
	f.launch(l)
	return true
}

// queued counts the writes waiting for a batch.
func (f *forwarder) queued() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, l := range f.lanes {
		n += len(l.queue)
	}
	return float64(n)
}

// withdraw takes it out of the queue if it has not been sent, and says
// whether it did.
func (f *forwarder) withdraw(addr string, it *fwdItem) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lanes[addr]
	if l == nil {
		return false
	}
	for i, q := range l.queue {
		if q == it {
			l.queue = slices.Delete(l.queue, i, i+1)
			return true
		}
	}
	return false
}

// launch sends what is queued while slots are free; f.mu is held.
func (f *forwarder) launch(l *lane) {
	limit := int(f.s.maxBody) * forwardBodyFactor
	for l.busy < forwardSlots && len(l.queue) > 0 {
		n, size := 0, 0
		for n < len(l.queue) && n < forwardMaxItems && (n == 0 || size+l.queue[n].size <= limit) {
			size += l.queue[n].size
			n++
		}
		batch := slices.Clone(l.queue[:n])
		l.queue = slices.Delete(l.queue, 0, n)
		l.busy++
		go f.send(l, batch)
	}
}

// send forwards one batch and hands each request its answer.
func (f *forwarder) send(l *lane, batch []*fwdItem) {
	released := false
	release := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !released {
			released = true
			l.busy--
			f.launch(l)
		}
	}
	defer release()
	answered := make([]bool, len(batch))
	fail := func(err error) {
		for k, it := range batch {
			if !answered[k] {
				answered[k] = true
				it.done <- fwdResult{err: err}
			}
		}
	}
	reqs := make([]fwdRequest, len(batch))
	for k, it := range batch {
		reqs[k] = it.req
	}
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.s.baseURL(l.addr)+forwardPath, bytes.NewReader(encodeForwardBatch(reqs)))
	if err != nil {
		fail(fmt.Errorf("%w: %w", errNotSent, err))
		return
	}
	req.Header.Set("Content-Type", forwardContentType)
	req.Header.Set(HeaderForwarded, "1")
	f.s.fwdBatches.Inc()
	f.s.fwdBatched.Add(float64(len(batch)))
	resp, err := f.s.fwd.Do(req)
	if err != nil {
		fail(err)
		return
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		// A leader from before batches, or one that reads another
		// version of them: nothing of the batch was served.
		f.mu.Lock()
		l.noBatch = f.s.b.Now().Add(forwardRetryUnbatched)
		f.mu.Unlock()
		f.s.log.Info("the leader takes no batched forwards of this version; forwarding one request at a time", "leader", l.addr)
		fail(errUnbatched)
		return
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		// The leader refused the batch whole, before serving any of it
		// (a mismatch of limits between the two, or a bug): each write
		// goes alone and gets its own answer.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		f.s.log.Warn("the leader refused a batch of forwarded writes; forwarding them one at a time", "leader", l.addr,
			"status", resp.StatusCode, "answer", string(bytes.TrimSpace(data)))
		fail(errUnbatched)
		return
	}
	if resp.StatusCode != http.StatusOK {
		// The batch was refused whole (the leader stopping, or no
		// longer a candidate): each request gets that answer, the one
		// it would have got alone.
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardAnswer))
		if err != nil {
			fail(err)
			return
		}
		for k, it := range batch {
			answered[k] = true
			it.done <- fwdResult{answer: &fwdAnswer{Status: resp.StatusCode, Header: resp.Header.Clone(), Body: data}}
		}
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != forwardContentType {
		// Not a gntd's answer to a batch: what it did is unknown.
		fail(fmt.Errorf("the answer to a batch has Content-Type %q, not %s", ct, forwardContentType))
		return
	}
	br := bufio.NewReader(resp.Body)
	settled := make([]bool, len(batch))
	open, unsettled := len(batch), len(batch)
	for open > 0 {
		k, a, err := readForwardFrame(br, len(batch))
		if err == nil && a != nil && answered[k] {
			err = fmt.Errorf("request %d answered twice", k)
		}
		if err != nil {
			fail(fmt.Errorf("the leader's batched answer broke: %w", err))
			return
		}
		if !settled[k] {
			settled[k] = true
			if unsettled--; unsettled == 0 {
				release()
			}
		}
		if a != nil {
			answered[k] = true
			open--
			batch[k].done <- fwdResult{answer: a}
		}
	}
}

// The leader's side.

// handleForward serves POST /2/gnt/forward: each request of the batch
// through the API's own handlers, concurrently, streaming each answer as
// it comes.
func (s *Server) handleForward(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != forwardContentType {
		e := badRequest("Content-Type", "a batched forward has Content-Type %s, not %q", forwardContentType, ct)
		e.Status = http.StatusUnsupportedMediaType
		writeError(w, e)
		return
	}
	body, aerr := s.readBodyLimit(r, s.maxBody*forwardBodyFactor)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if len(body) > 0 && body[0] != forwardVersion {
		// 404, as from a gntd without batches: the follower forwards
		// each request alone.
		writeError(w, &APIError{Status: http.StatusNotFound, ErrorCode: CodeNotFound,
			Message: fmt.Sprintf("no batched forwards of format version %d here (this gntd reads version %d)", body[0], forwardVersion)})
		return
	}
	reqs, err := decodeForwardBatch(body)
	if err != nil {
		writeError(w, badRequest("", "batched forward: %v", err))
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), inBatchKey{}, true))
	w.Header().Set("Content-Type", forwardContentType)
	w.WriteHeader(http.StatusOK)
	out := newAnswerStream(w)
	var wg sync.WaitGroup
	for k, fr := range reqs {
		sub, aerr := fr.request(r)
		if aerr != nil {
			rec := &subWriter{header: http.Header{}}
			writeError(rec, aerr)
			out.put(answerFrame(k, rec.answer()))
			continue
		}
		wg.Add(1)
		s.subWorkers.run(func() {
			defer wg.Done()
			sw := &subWriter{header: http.Header{}, applied: func() { out.put(appliedFrame(k)) }}
			s.serveHTTP(sw, sub)
			out.put(answerFrame(k, sw.answer()))
		})
	}
	wg.Wait()
	out.close()
}

// request builds the request to serve, as the follower received it and
// marked as forwarded.
func (fr fwdRequest) request(batch *http.Request) (*http.Request, *APIError) {
	switch fr.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		return nil, badRequest("method", "method %q cannot be forwarded", fr.Method)
	}
	if !strings.HasPrefix(fr.URI, "/") {
		return nil, badRequest("uri", "forwarded URI %q does not begin with /", fr.URI)
	}
	r, err := http.NewRequestWithContext(batch.Context(), fr.Method, fr.URI, bytes.NewReader(fr.Body))
	if err != nil {
		return nil, badRequest("uri", "forwarded URI %q: %v", fr.URI, err)
	}
	if r.URL.Path == forwardPath {
		return nil, badRequest("uri", "a batched forward cannot hold another")
	}
	r.Header = fr.Header
	r.Header.Set(HeaderForwarded, "1")
	r.Host = batch.Host
	r.RemoteAddr = batch.RemoteAddr
	r.RequestURI = fr.URI
	return r, nil
}

// workers runs functions on goroutines that outlive one call: a new
// goroutine's stack grows, by copying, to the depth an API handler needs
// (JSON decoding) on each request of a batch, and that copying was 4 % of a
// leader's CPU with batches of forwarded writes. A worker waits
// workerIdle for more work, then ends; there are as many as calls run at
// once.
type workers struct {
	work    chan func() // unbuffered: a send succeeds only to an idle worker
	started atomic.Int64
}

const workerIdle = 10 * time.Second

func newWorkers() *workers { return &workers{work: make(chan func())} }

// run calls f on an idle worker, or on a new one.
func (p *workers) run(f func()) {
	select {
	case p.work <- f:
	default:
		p.started.Add(1)
		go p.loop(f)
	}
}

func (p *workers) loop(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-p.work:
		case <-idle.C:
			return
		}
	}
}

// subWriter records one request's answer inside a batch.
type subWriter struct {
	header  http.Header
	status  int
	body    bytes.Buffer
	applied func()
}

func (w *subWriter) Header() http.Header { return w.header }

func (w *subWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *subWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Applied tells the follower that the request's command was applied and
// its answer is held (notifyApplied).
func (w *subWriter) Applied() {
	if w.applied != nil {
		w.applied()
	}
}

func (w *subWriter) answer() fwdAnswer {
	w.WriteHeader(http.StatusOK)
	return fwdAnswer{Status: w.status, Header: w.header, Body: w.body.Bytes()}
}

// notifyApplied tells a batched forward's follower that the request's
// command was applied while its answer is held: the follower need not
// wait for the answer to send its next batch.
func notifyApplied(w http.ResponseWriter) {
	for {
		if a, ok := w.(interface{ Applied() }); ok {
			a.Applied()
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// answerStream writes the frames of a batch's answer: frames that come
// while a write is under way go out together in the next.
type answerStream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	mu   sync.Mutex
	buf  []byte
	kick chan struct{}
	done chan struct{}
	end  chan struct{}
}

func newAnswerStream(w http.ResponseWriter) *answerStream {
	a := &answerStream{w: w, rc: http.NewResponseController(w), kick: make(chan struct{}, 1), done: make(chan struct{}), end: make(chan struct{})}
	go a.run()
	return a
}

func (a *answerStream) put(frame []byte) {
	a.mu.Lock()
	a.buf = append(a.buf, frame...)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *answerStream) run() {
	defer close(a.end)
	var spare []byte
	broken := false
	for {
		last := false
		select {
		case <-a.kick:
		case <-a.done:
			last = true
		}
		a.mu.Lock()
		out := a.buf
		a.buf = spare[:0]
		a.mu.Unlock()
		if len(out) > 0 && !broken {
			// A follower that went away loses its answers, as a client
			// that hangs up does; the requests were served all the same.
			_, err := a.w.Write(out)
			broken = err != nil || a.rc.Flush() != nil
		}
		spare = out
		if last {
			return
		}
	}
}

// close writes what is left and returns when it is written.
func (a *answerStream) close() {
	close(a.done)
	<-a.end
}

// Helpers shared with forward.

// forwardHeader is the request's headers to send on to the leader:
// without hop-by-hop ones, with the client's address in X-Forwarded-For.
func forwardHeader(r *http.Request) http.Header {
	h := make(http.Header, len(r.Header)+2)
	for k, vs := range r.Header {
		if !hopHeaders[k] {
			h[k] = append([]string(nil), vs...)
		}
	}
	h.Set(HeaderForwarded, "1")
	// The follower checked the Origin against its own address, which the
	// leader's is not; and it names the user it authenticated, for the
	// leader's logs (a client cannot set it: it is replaced here).
	h.Del("Origin")
	h.Del(HeaderUser)
	if u := requestUser(r); u != "" {
		h.Set(HeaderUser, u)
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Get("X-Forwarded-For"); prior != "" {
			host = prior + ", " + host
		}
		h.Set("X-Forwarded-For", host)
	}
	return h
}

// copyAnswer writes a leader's answer to the client.
func copyAnswer(w http.ResponseWriter, status int, header http.Header, body io.Reader) error {
	h := w.Header()
	for k, vs := range header {
		if !hopHeaders[k] {
			h[k] = append([]string(nil), vs...)
		}
	}
	w.WriteHeader(status)
	_, err := io.Copy(w, body)
	return err
}

func (s *Server) baseURL(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return s.scheme + "://" + addr
}
