package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"strconv"

	"github.com/gnt-cluster/gnt/fsm"
)

// Bulk answers (/2/instances?bulk=1, /2/nodes?bulk=1, /2/jobs?bulk=1,
// /2/query/...) are encoded from a frozen view of the state (fsm.Freeze:
// a copy of the maps of pointers, taken under the read lock in a few
// milliseconds), one item at a time, through a buffer to the client: the
// read lock is not held while they are encoded, and neither the answer
// nor the objects of every item are ever held whole. The bytes are those
// json.Marshal of the whole answer gave (TestStreamedAnswersAsWhole).

// streamBuffer is the buffer of a streamed answer: an answer that fits
// in it is sent in one piece with a Content-Length, as before streaming.
const streamBuffer = 64 << 10

// jsonStream writes one JSON answer in pieces.
type jsonStream struct {
	w       http.ResponseWriter
	out     *bufio.Writer
	sent    int64 // bytes passed on to w: past the first, errors cannot be answered
	scratch bytes.Buffer
	enc     *json.Encoder
	werr    error // the first failed write to w (the client went away)
}

func newJSONStream(w http.ResponseWriter) *jsonStream {
	a := &jsonStream{w: w}
	a.out = bufio.NewWriterSize(streamSink{a}, streamBuffer)
	a.enc = json.NewEncoder(&a.scratch)
	return a
}

// streamSink passes the buffer's contents on to the response.
type streamSink struct{ a *jsonStream }

func (s streamSink) Write(p []byte) (int, error) {
	a := s.a
	if a.werr != nil {
		return 0, a.werr
	}
	if a.sent == 0 {
		a.w.Header().Set("Content-Type", "application/json")
		a.w.WriteHeader(http.StatusOK)
	}
	n, err := a.w.Write(p)
	a.sent += int64(n)
	if err != nil {
		a.werr = err
	}
	return n, err
}

// raw writes JSON text as it is.
func (a *jsonStream) raw(s string) { _, _ = a.out.WriteString(s) }

// value writes v as json.Marshal encodes it (an Encoder writes the same
// bytes and a newline).
func (a *jsonStream) value(v any) error {
	a.scratch.Reset()
	if err := a.enc.Encode(v); err != nil {
		return err
	}
	b := a.scratch.Bytes()
	_, _ = a.out.Write(b[:len(b)-1])
	return nil
}

// array writes the values of seq as a JSON array, stopping early if the
// client went away.
func (a *jsonStream) array(seq iter.Seq[any]) error {
	a.raw("[")
	first := true
	for v := range seq {
		if a.werr != nil {
			return nil
		}
		if !first {
			a.raw(",")
		}
		first = false
		if err := a.value(v); err != nil {
			return err
		}
	}
	a.raw("]")
	return nil
}

// finish ends the answer: an answer that was never passed on goes whole,
// with its length, as writeRaw sends one.
func (a *jsonStream) finish() {
	a.raw("\n")
	if a.sent == 0 {
		a.w.Header().Set("Content-Length", strconv.Itoa(a.out.Buffered()))
	}
	_ = a.out.Flush()
}

// fail answers an error: as an HTTP error if nothing was sent yet, else
// by breaking the connection, so that the client sees a broken answer
// rather than a shorter one.
func (a *jsonStream) fail(aerr *APIError) {
	if a.sent > 0 {
		panic(http.ErrAbortHandler)
	}
	a.out.Reset(nil)
	writeError(a.w, aerr)
}

// serveFrozen answers with what fn writes from a frozen view of the state
// (fsm.Frozen.State: read-only, without the derived indexes). fn runs
// without any lock; an error it returns before the answer's first byte
// went out is answered as an HTTP error.
func (s *Server) serveFrozen(w http.ResponseWriter, fn func(st *fsm.State, a *jsonStream) *APIError) error {
	z := s.b.FSM().Freeze()
	setIndex(w, z.Index())
	st := z.State()
	if !st.Initialized() {
		writeError(w, notInitialised())
		return nil
	}
	streamAnswer(w, func(a *jsonStream) *APIError { return fn(st, a) })
	return nil
}

// streamAnswer answers with what fn writes, or the error it returns.
func streamAnswer(w http.ResponseWriter, fn func(a *jsonStream) *APIError) {
	a := newJSONStream(w)
	if aerr := fn(a); aerr != nil {
		a.fail(aerr)
		return
	}
	a.finish()
}

// encodingError is the error of an answer that does not encode.
func encodingError(err error) *APIError {
	return asAPIError(fmt.Errorf("encoding answer: %w", err))
}

// seqOf yields each item of items as f makes it, one at a time.
func seqOf[T any](items []T, f func(T) any) iter.Seq[any] {
	return func(yield func(any) bool) {
		for _, it := range items {
			if !yield(f(it)) {
				return
			}
		}
	}
}
