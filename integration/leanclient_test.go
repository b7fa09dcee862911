package integration

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// leanClient is the benchmarks' second load generator: one keep-alive
// HTTP/1.1 connection, one request at a time on it (as a client with
// rpc.Client), but written and read by hand, as load generators such as
// wrk do, instead of through net/http's client (a writer and a reader
// goroutine per connection and a channel hand-off each way per request).
// The gntds see the same requests as from rpc.Client and answer them the
// same way; the load generator just takes less of the two cores they
// share with it. It understands what gntd sends: a status line, headers,
// and a body with Content-Length or chunked.
type leanClient struct {
	addr string
	tls  *tls.Config // nil: plain TCP (the test's own server)
	conn net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	buf  []byte
}

// leanAnswer is what post read: the status code, the X-Gnt-Job-Status
// header and the body.
type leanAnswer struct {
	code      int
	jobStatus string
	body      []byte
}

func (c *leanClient) dial() error {
	conn, err := net.DialTimeout("tcp", c.addr, 2*time.Second)
	if err != nil {
		return err
	}
	if c.tls != nil {
		tc := tls.Client(conn, c.tls)
		tc.SetDeadline(time.Now().Add(2 * time.Second))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return err
		}
		tc.SetDeadline(time.Time{})
		conn = tc
	}
	c.conn, c.br, c.bw = conn, bufio.NewReaderSize(conn, 4096), bufio.NewWriterSize(conn, 4096)
	return nil
}

func (c *leanClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// post sends one POST with a JSON body and reads the whole answer. On any
// error the connection is closed; the next post dials again.
func (c *leanClient) post(path string, body []byte, timeout time.Duration) (leanAnswer, error) {
	if c.conn == nil {
		if err := c.dial(); err != nil {
			return leanAnswer{}, err
		}
	}
	c.conn.SetDeadline(time.Now().Add(timeout))
	b := c.buf[:0]
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.addr...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	c.buf = b
	if _, err := c.bw.Write(b); err != nil {
		c.close()
		return leanAnswer{}, err
	}
	if err := c.bw.Flush(); err != nil {
		c.close()
		return leanAnswer{}, err
	}
	a, keep, err := c.read()
	if err != nil || !keep {
		c.close()
	}
	return a, err
}

// read reads one answer; keep is false when the server closes the
// connection after it.
func (c *leanClient) read() (a leanAnswer, keep bool, err error) {
	line, err := c.line()
	if err != nil {
		return a, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return a, false, fmt.Errorf("bad status line %q", line)
	}
	if a.code, err = strconv.Atoi(string(line[9:12])); err != nil {
		return a, false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, keep := -1, false, true
	for {
		h, err := c.line()
		if err != nil {
			return a, false, err
		}
		if len(h) == 0 {
			break
		}
		i := bytes.IndexByte(h, ':')
		if i < 0 {
			return a, false, fmt.Errorf("bad header line %q", h)
		}
		name, value := h[:i], bytes.TrimSpace(h[i+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return a, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("X-Gnt-Job-Status")):
			a.jobStatus = string(value)
		}
	}
	switch {
	case chunked:
		for {
			sz, err := c.line()
			if err != nil {
				return a, false, err
			}
			if i := bytes.IndexByte(sz, ';'); i >= 0 {
				sz = sz[:i]
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(sz)), 16, 32)
			if err != nil {
				return a, false, fmt.Errorf("bad chunk size %q", sz)
			}
			if n == 0 {
				// Trailers, up to the blank line.
				for {
					l, err := c.line()
					if err != nil {
						return a, false, err
					}
					if len(l) == 0 {
						return a, keep, nil
					}
				}
			}
			start := len(a.body)
			a.body = append(a.body, make([]byte, n)...)
			if _, err := io.ReadFull(c.br, a.body[start:]); err != nil {
				return a, false, err
			}
			if l, err := c.line(); err != nil || len(l) != 0 {
				return a, false, errors.New("chunk not followed by CRLF")
			}
		}
	case length >= 0:
		a.body = make([]byte, length)
		if _, err := io.ReadFull(c.br, a.body); err != nil {
			return a, false, err
		}
		return a, keep, nil
	}
	return a, false, errors.New("answer with neither Content-Length nor chunked body")
}

// line reads one CRLF-terminated line, without the CRLF.
func (c *leanClient) line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(l, "\r\n"), nil
}

// TestLeanClient checks the lean load generator against net/http's
// server: a body with Content-Length, a chunked one, a closed connection
// and an error status, in turn on one client.
func TestLeanClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/length":
			w.Header().Set("X-Gnt-Job-Status", "success")
			w.Write(body)
		case "/chunked":
			w.Write([]byte("part1,"))
			w.(http.Flusher).Flush()
			w.Write([]byte("part2"))
		case "/close":
			w.Header().Set("Connection", "close")
			w.Write([]byte("bye"))
		default:
			http.Error(w, "no such path", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := &leanClient{addr: srv.Listener.Addr().String()}
	defer c.close()
	for _, tc := range []struct {
		path, body, want, status string
		code                     int
		open                     bool
	}{
		{"/length", `{"ops":[]}`, `{"ops":[]}`, "success", 200, true},
		{"/chunked", "", "part1,part2", "", 200, true},
		{"/close", "", "bye", "", 200, false},
		{"/length", "again", "again", "success", 200, true},
		{"/missing", "", "no such path\n", "", 404, true},
	} {
		a, err := c.post(tc.path, []byte(tc.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if a.code != tc.code || string(a.body) != tc.want || a.jobStatus != tc.status || (c.conn != nil) != tc.open {
			t.Errorf("%s: code %d body %q status %q open %v; want %d %q %q %v", tc.path, a.code, a.body, a.jobStatus, c.conn != nil, tc.code, tc.want, tc.status, tc.open)
		}
	}
}
