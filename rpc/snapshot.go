package rpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// A cluster snapshot file (gnt cluster snapshot save/restore, GET and PUT
// /2/gnt/snapshot) is one header line of JSON (SnapshotHeader) followed by
// exactly Size bytes: the replicated state in the FSM's snapshot format
// (fsm.SnapshotVersion), whose SHA-256 the header carries. Nothing may
// follow. The header comes first, so a reader can refuse a file before
// reading its body, and the body is checked as it streams
// (SnapshotBody).

// SnapshotFormat names the file format in its header.
const SnapshotFormat = "gnt-snapshot"

// SnapshotFileVersion is the version of the file format written.
const SnapshotFileVersion = 1

// MaxSnapshotHeader bounds the header line, in bytes.
const MaxSnapshotHeader = 16 << 10

// MaxSnapshotBytes bounds the body of a snapshot that is restored.
const MaxSnapshotBytes = 4 << 30

// SnapshotPath is the API path of the cluster snapshot.
const SnapshotPath = "/2/gnt/snapshot"

// SnapshotHeader describes a cluster snapshot.
type SnapshotHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// ClusterName and ClusterUUID are the cluster it was saved from.
	ClusterName string `json:"cluster_name"`
	ClusterUUID string `json:"cluster_uuid"`
	// LogVersion is the log version of the state (fsm.LogVersion of the
	// build that last led the cluster): a gntd reading an older one
	// refuses the snapshot.
	LogVersion int `json:"log_version"`
	// Index and Term are the Raft index of the last entry the state
	// reflects, and that entry's term.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// Created is when the leader took it (RFC 3339, UTC); Leader is the
	// node that did; GntVersion its software version.
	Created    string `json:"created"`
	Leader     string `json:"leader"`
	GntVersion string `json:"gnt_version"`
	// Size is the length of the body in bytes; SHA256 its digest in hex.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Encode returns the header line, newline included.
func (h SnapshotHeader) Encode() []byte {
	b, _ := json.Marshal(h) // plain fields: cannot fail
	return append(b, '\n')
}

// CheckLogVersion refuses a snapshot whose state this build cannot read.
func (h SnapshotHeader) CheckLogVersion() error {
	if h.LogVersion > fsm.LogVersion {
		return fmt.Errorf("the snapshot holds a state of log version %d and this gnt reads up to log version %d: restore it with a newer gnt", h.LogVersion, fsm.LogVersion)
	}
	return nil
}

// ReadSnapshotHeader reads and checks the header line of a snapshot file.
// It reads nothing past the line.
func ReadSnapshotHeader(br *bufio.Reader) (SnapshotHeader, error) {
	var h SnapshotHeader
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxSnapshotHeader:
		return h, fmt.Errorf("not a gnt snapshot: no header line within the first %d bytes", min(br.Size(), MaxSnapshotHeader))
	case err == io.EOF && len(line) == 0:
		return h, errors.New("not a gnt snapshot: the file is empty")
	case err == io.EOF:
		return h, errors.New("not a gnt snapshot: the header line has no end (a truncated file?)")
	case err != nil:
		return h, fmt.Errorf("reading the snapshot header: %w", err)
	}
	if len(line) == 0 || line[0] != '{' {
		return h, errors.New("not a gnt snapshot: the first line is not a JSON header")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Errorf("not a gnt snapshot: bad header: %v", err)
	}
	if dec.More() {
		return h, errors.New("not a gnt snapshot: bad header: more than one JSON value on the header line")
	}
	if h.Format != SnapshotFormat {
		return h, fmt.Errorf("not a gnt snapshot: header format %q, want %q", h.Format, SnapshotFormat)
	}
	if h.Version < 1 || h.Version > SnapshotFileVersion {
		return h, fmt.Errorf("snapshot file version %d is not supported (this gnt reads version 1 to %d)", h.Version, SnapshotFileVersion)
	}
	if h.Size <= 0 || h.Size > MaxSnapshotBytes {
		return h, fmt.Errorf("snapshot header: size %d is outside 1..%d bytes", h.Size, int64(MaxSnapshotBytes))
	}
	if d, err := hex.DecodeString(h.SHA256); err != nil || len(d) != sha256.Size || strings.ToLower(h.SHA256) != h.SHA256 {
		return h, fmt.Errorf("snapshot header: sha256 %q is not %d lower-case hex digits", h.SHA256, 2*sha256.Size)
	}
	if h.LogVersion < 0 {
		return h, fmt.Errorf("snapshot header: log_version %d is negative", h.LogVersion)
	}
	if h.ClusterUUID == "" || h.ClusterName == "" {
		return h, errors.New("snapshot header: cluster_name and cluster_uuid must be set")
	}
	return h, nil
}

// SnapshotBody reads the body of a snapshot whose header h was read from
// br: exactly h.Size bytes, then the end of input. Its last Read returns
// an error instead of io.EOF when the body is shorter or longer than the
// header says or its SHA-256 differs, so a consumer that reads to the end
// never accepts a damaged body.
func SnapshotBody(br *bufio.Reader, h SnapshotHeader) io.Reader {
	return &snapshotBody{r: br, left: h.Size, want: h.SHA256, sum: sha256.New(), size: h.Size}
}

type snapshotBody struct {
	r    *bufio.Reader
	left int64
	size int64
	want string
	sum  hash.Hash
	err  error
}

func (b *snapshotBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		b.err = b.finish()
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.sum.Write(p[:n])
	b.left -= int64(n)
	if errors.Is(err, io.EOF) {
		if b.left > 0 {
			b.err = fmt.Errorf("snapshot truncated: the body has %d of the %d bytes its header announces", b.size-b.left, b.size)
			return n, b.err
		}
		err = nil
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *snapshotBody) finish() error {
	if _, err := b.r.ReadByte(); err == nil {
		return fmt.Errorf("snapshot damaged: more bytes follow the %d bytes of body its header announces", b.size)
	} else if !errors.Is(err, io.EOF) {
		return err
	}
	if got := hex.EncodeToString(b.sum.Sum(nil)); got != b.want {
		return fmt.Errorf("snapshot damaged: the body's sha256 is %s, the header says %s", got, b.want)
	}
	return io.EOF
}

// ReadSnapshot reads a whole snapshot file: the header, then the state it
// holds, checked against the header's size and digest and decoded.
func ReadSnapshot(r io.Reader) (SnapshotHeader, *fsm.State, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	h, err := ReadSnapshotHeader(br)
	if err != nil {
		return h, nil, err
	}
	if err := h.CheckLogVersion(); err != nil {
		return h, nil, err
	}
	st, err := DecodeSnapshotBody(SnapshotBody(br, h))
	return h, st, err
}

// DecodeSnapshotBody decodes the state of a snapshot body (SnapshotBody)
// and reads it to its end. A body whose length or digest is wrong is
// reported as such, even when the damage also made it undecodable.
func DecodeSnapshotBody(body io.Reader) (*fsm.State, error) {
	st, _, err := fsm.DecodeSnapshot(body)
	// Read on to the end (the decoder may stop early), so that the
	// length and digest are checked.
	if _, cerr := io.Copy(io.Discard, body); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

// RestoreResponse is the answer of PUT /2/gnt/snapshot.
type RestoreResponse struct {
	// Index is the Raft index the restored state starts at.
	Index uint64 `json:"index"`
	// Counts are the objects of the restored state.
	Counts fsm.Counts `json:"counts"`
	// Kept says what was kept from the running cluster.
	Kept []string `json:"kept"`
}

// SaveSnapshot streams the cluster's snapshot file from the leader into
// w, checking it on the way (an answer cut short or damaged is an error),
// and returns its header. It moves on to the next server only while
// nothing was written to w.
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer) (SnapshotHeader, error) {
	resp, err := c.send(ctx, http.MethodGet, SnapshotPath, nil)
	if err != nil {
		return SnapshotHeader{}, err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	h, err := ReadSnapshotHeader(br)
	if err != nil {
		return h, fmt.Errorf("the server's answer: %w", err)
	}
	if _, err := w.Write(h.Encode()); err != nil {
		return h, err
	}
	if _, err := io.Copy(w, SnapshotBody(br, h)); err != nil {
		return h, fmt.Errorf("receiving the snapshot from %s: %w", resp.Request.URL.Host, err)
	}
	return h, nil
}

// RestoreSnapshot sends a snapshot file to be restored; open returns the
// file from its start (it is called again for each server tried).
func (c *Client) RestoreSnapshot(ctx context.Context, open func() (io.Reader, error)) (RestoreResponse, error) {
	var out RestoreResponse
	resp, err := c.send(ctx, http.MethodPut, SnapshotPath, open)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("decoding the answer of PUT %s: %w", SnapshotPath, err)
	}
	return out, nil
}

// send sends one streamed request and returns a successful answer with
// its body unread. It tries the next server when one cannot be reached or
// answers that it has no leader (nothing was done then), as Do does.
func (c *Client) send(ctx context.Context, method, path string, open func() (io.Reader, error)) (*http.Response, error) {
	if len(c.servers) == 0 {
		return nil, errors.New("no server addresses configured")
	}
	var lastErr error
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		i := c.cur
		c.mu.Unlock()
		server := c.servers[i%len(c.servers)]
		var body io.Reader
		if open != nil {
			var err error
			if body, err = open(); err != nil {
				return nil, err
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, c.url(server, path), body)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		if cr := c.creds.Load(); cr != nil {
			req.SetBasicAuth(cr[0], cr[1])
		}
		resp, err := c.http.Do(req)
		if err == nil && resp.StatusCode < 300 {
			return resp, nil
		}
		if err == nil {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			ae := &APIError{}
			if json.Unmarshal(data, ae) != nil || ae.ErrorCode == "" {
				ae = &APIError{Message: strings.TrimSpace(string(data)), ErrorCode: "http_" + strconv.Itoa(resp.StatusCode)}
			}
			ae.Status = resp.StatusCode
			err = ae
		}
		lastErr = err
		if !retryable(err, false) || ctx.Err() != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.cur == i {
			c.cur = i + 1
		}
		c.mu.Unlock()
		if (attempt+1)%len(c.servers) == 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
