package rpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func sampleBatch() []fwdRequest {
	return []fwdRequest{
		{Method: "PUT", URI: "/2/tags?tag=a&reason=x", Header: http.Header{"X-Gnt-Submit-Token": {"t-1"}, "X-Forwarded-For": {"127.0.0.1"}}, Body: nil},
		{Method: "POST", URI: "/2/jobs?wait=5s", Header: http.Header{"Content-Type": {"application/json"}, "Accept": {"a", "b"}}, Body: []byte(`{"ops":[]}`)},
	}
}

// norm makes empty bodies and headers compare equal however they were
// made.
func norm(reqs []fwdRequest) []fwdRequest {
	out := append([]fwdRequest(nil), reqs...)
	for i := range out {
		if len(out[i].Body) == 0 {
			out[i].Body = nil
		}
		if len(out[i].Header) == 0 {
			out[i].Header = http.Header{}
		}
	}
	return out
}

func TestForwardBatchRoundTrip(t *testing.T) {
	in := sampleBatch()
	got, err := decodeForwardBatch(encodeForwardBatch(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(norm(got), norm(in)) {
		t.Errorf("decoded %+v, sent %+v", got, in)
	}
}

// TestForwardBatchBadInput: every damaged batch is refused whole, with
// an error naming what is wrong.
func TestForwardBatchBadInput(t *testing.T) {
	good := encodeForwardBatch(sampleBatch())
	hdr := func(name string) []byte {
		return encodeForwardBatch([]fwdRequest{{Method: "PUT", URI: "/2/tags", Header: http.Header{name: {"v"}}}})
	}
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, "empty body"},
		{"version", append([]byte{2}, good[1:]...), "format version 2"},
		{"no requests", []byte{forwardVersion, 0}, "no requests"},
		{"too many", binary.AppendUvarint([]byte{forwardVersion}, forwardMaxItems+1), "request count is 257"},
		{"overflowing count", append([]byte{forwardVersion}, bytes.Repeat([]byte{0xff}, 11)...), "overflows"},
		{"trailing", append(append([]byte(nil), good...), 0), "1 bytes after request 1"},
		{"header name with colon", hdr("X:Y"), "not a valid header field"},
		{"empty header name", hdr(""), "not a valid header field"},
		{"huge method", binary.AppendUvarint([]byte{forwardVersion, 1}, maxForwardString+1), "method length is 65537"},
		{"string beyond the body", binary.AppendUvarint([]byte{forwardVersion, 1}, 100), "method of 100 bytes"},
		{"too many headers", binary.AppendUvarint([]byte{forwardVersion, 1, 1, 'P', 1, '/'}, maxForwardHeaders+1), "header count is 257"},
	}
	for _, c := range cases {
		_, err := decodeForwardBatch(c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	// Cut anywhere, a batch is refused.
	for i := 0; i < len(good); i++ {
		if _, err := decodeForwardBatch(good[:i]); err == nil {
			t.Errorf("batch cut at %d of %d bytes accepted", i, len(good))
		}
	}
}

func TestForwardFrameRoundTrip(t *testing.T) {
	a := fwdAnswer{Status: 409, Header: http.Header{"Content-Type": {"application/json"}, "X-Gnt-Index": {"12"}}, Body: []byte(`{"code":409}`)}
	stream := append(appliedFrame(3), answerFrame(3, a)...)
	stream = append(stream, answerFrame(0, fwdAnswer{Status: 200})...)
	r := bufio.NewReader(bytes.NewReader(stream))
	k, got, err := readForwardFrame(r, 4)
	if err != nil || k != 3 || got != nil {
		t.Fatalf("applied frame: %d %+v %v", k, got, err)
	}
	k, got, err = readForwardFrame(r, 4)
	if err != nil || k != 3 || !reflect.DeepEqual(*got, a) {
		t.Fatalf("answer frame: %d %+v %v", k, got, err)
	}
	k, got, err = readForwardFrame(r, 4)
	if err != nil || k != 0 || got.Status != 200 || len(got.Body) != 0 {
		t.Fatalf("empty answer frame: %d %+v %v", k, got, err)
	}
	if _, _, err := readForwardFrame(r, 4); err == nil {
		t.Fatal("read a frame past the end")
	}
}

// TestForwardFrameBadInput: a damaged answer stream is an error, never a
// wrong answer handed to a client.
func TestForwardFrameBadInput(t *testing.T) {
	frame := func(b ...byte) []byte { return withLength(b) }
	answer := answerFrame(1, fwdAnswer{Status: 200, Header: http.Header{"A": {"b"}}, Body: []byte("1\n")})
	cases := []struct {
		name   string
		stream []byte
		want   string
	}{
		{"empty", nil, "frame length"},
		{"position out of range", frame(4, 'a'), "request position is 4, more than 3"},
		{"unknown kind", frame(0, 'x'), "neither 'a' nor 'r'"},
		{"no kind", frame(0), "frame kind"},
		{"status below 100", frame(0, 'r', 99, 0, 0), "status 99"},
		{"status above 999", withLength(binary.AppendUvarint([]byte{0, 'r'}, 1000)), "status is 1000"},
		{"trailing bytes in a frame", frame(0, 'a', 0), "1 bytes after the frame"},
		{"frame too long", binary.AppendUvarint(nil, maxForwardFrame+1), "frame length is"},
		{"frame cut", answer[:len(answer)-1], "unexpected EOF"},
		{"body beyond the frame", frame(0, 'r', 200, 1, 0, 5, 'x'), "answer body of 5 bytes"},
	}
	for _, c := range cases {
		_, _, err := readForwardFrame(bufio.NewReader(bytes.NewReader(c.stream)), 4)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestForwardItemMeasure: an item's size bounds its encoding, and fields
// a leader would refuse keep it out of batches.
func TestForwardItemMeasure(t *testing.T) {
	total := 0
	var reqs []fwdRequest
	for _, r := range sampleBatch() {
		it := &fwdItem{req: r}
		if !it.measure() {
			t.Fatalf("%+v not batchable", r)
		}
		total += it.size
		reqs = append(reqs, r)
	}
	if n := len(encodeForwardBatch(reqs)); n > total+1+binary.MaxVarintLen64 {
		t.Errorf("encoded %d bytes, sizes say at most %d", n, total+1+binary.MaxVarintLen64)
	}
	long := strings.Repeat("x", maxForwardString+1)
	many := http.Header{}
	for i := 0; i <= maxForwardHeaders; i++ {
		many.Add("X-Many", "v")
	}
	for name, r := range map[string]fwdRequest{
		"long URI":          {Method: "PUT", URI: "/" + long},
		"long header value": {Method: "PUT", URI: "/", Header: http.Header{"X-Long": {long}}},
		"long header name":  {Method: "PUT", URI: "/", Header: http.Header{long: {"v"}}},
		"too many values":   {Method: "PUT", URI: "/", Header: many},
	} {
		it := &fwdItem{req: r}
		if it.measure() {
			t.Errorf("%s: batchable", name)
		}
	}
}

// TestWorkers: calls never wait for a busy worker, and idle workers are
// reused rather than new ones started.
func TestWorkers(t *testing.T) {
	p := newWorkers()
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Add(1)
		p.run(func() { defer wg.Done(); <-release })
	}
	close(release) // all 50 are running at once, or this would not return
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("calls waited for each other")
	}
	for i := 0; i < 200; i++ {
		ran := make(chan struct{})
		p.run(func() { close(ran) })
		<-ran
	}
	if n := p.started.Load(); n != 50 {
		t.Errorf("%d workers started; want the 50 that ran at once, reused", n)
	}
}

func FuzzDecodeForwardBatch(f *testing.F) {
	f.Add(encodeForwardBatch(sampleBatch()))
	f.Add([]byte{forwardVersion, 1, 3, 'P', 'U', 'T', 1, '/', 0, 0})
	f.Add([]byte{forwardVersion, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		reqs, err := decodeForwardBatch(body)
		if err != nil {
			return
		}
		if len(reqs) == 0 || len(reqs) > forwardMaxItems {
			t.Fatalf("accepted a batch of %d requests", len(reqs))
		}
		again, err := decodeForwardBatch(encodeForwardBatch(reqs))
		if err != nil || !reflect.DeepEqual(norm(again), norm(reqs)) {
			t.Fatalf("round trip: %+v != %+v (%v)", again, reqs, err)
		}
	})
}

func FuzzReadForwardFrame(f *testing.F) {
	f.Add(append(appliedFrame(1), answerFrame(0, fwdAnswer{Status: 503, Header: http.Header{"X": {"y"}}, Body: []byte("{}")})...))
	f.Add([]byte{2, 0, 'a'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bufio.NewReader(bytes.NewReader(stream))
		for i := 0; i < 8; i++ {
			k, a, err := readForwardFrame(r, 2)
			if err != nil {
				return
			}
			if k < 0 || k > 1 {
				t.Fatalf("position %d of 2", k)
			}
			if a != nil && (a.Status < 100 || a.Status > 999) {
				t.Fatalf("status %d", a.Status)
			}
		}
	})
}
