package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Snapshotter is what a Backend implements to save and restore the
// cluster's state (GET and PUT /2/gnt/snapshot); without it the routes
// answer 501. Both run on the leader only: others return ErrNotLeader
// before they write anything.
type Snapshotter interface {
	// SaveSnapshot takes a consistent snapshot of the state (everything
	// committed before the call) and streams it: start is called once
	// with the header, before any byte of the body, and returns where the
	// body goes.
	SaveSnapshot(ctx context.Context, start func(SnapshotHeader) (io.Writer, error)) error
	// RestoreSnapshot replaces the cluster's state with the body of a
	// snapshot whose header is h, as one Raft operation. body must be
	// read to its end (SnapshotBody checks the length and digest there);
	// nothing changes unless it was whole and sound.
	RestoreSnapshot(ctx context.Context, h SnapshotHeader, body io.Reader) (RestoreResponse, error)
}

// snapshotTransfer bounds the transfer of a snapshot in either direction
// (the API's usual write timeout is shorter).
const snapshotTransfer = time.Hour

func (s *Server) snapshotter(w http.ResponseWriter) Snapshotter {
	sn, ok := s.b.(Snapshotter)
	if !ok {
		writeError(w, &APIError{Status: http.StatusNotImplemented, ErrorCode: CodeNotImplemented, Message: "this server cannot save or restore snapshots"})
	}
	return sn
}

// handleSnapshotSave is GET /2/gnt/snapshot: the leader streams the
// snapshot file (a follower forwards, streaming the leader's answer).
func (s *Server) handleSnapshotSave(w http.ResponseWriter, r *http.Request) {
	sn := s.snapshotter(w)
	if sn == nil {
		return
	}
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(snapshotTransfer))
	s.onLeader(w, r, nil, func() error {
		started := false
		err := sn.SaveSnapshot(r.Context(), func(h SnapshotHeader) (io.Writer, error) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", fmt.Sprint(int64(len(h.Encode()))+h.Size))
			w.WriteHeader(http.StatusOK)
			started = true
			if _, err := w.Write(h.Encode()); err != nil {
				return nil, err
			}
			return w, nil
		})
		switch {
		case err == nil:
			return nil
		case started:
			// The header is out: only a broken connection tells the
			// client (it also sees the body short of the announced size).
			s.log.Warn("snapshot save broke off", "error", err)
			panic(http.ErrAbortHandler)
		case errors.Is(err, ErrNotLeader):
			return ErrNotLeader
		}
		writeError(w, asAPIError(err))
		return nil
	})
}

// handleSnapshotRestore is PUT /2/gnt/snapshot with a snapshot file as
// the body. Its header is checked first, by whichever gntd receives it; a
// follower then streams the request to the leader, which restores.
func (s *Server) handleSnapshotRestore(w http.ResponseWriter, r *http.Request) {
	sn := s.snapshotter(w)
	if sn == nil {
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(snapshotTransfer))
	rc.SetWriteDeadline(time.Now().Add(snapshotTransfer))
	if r.Body == nil {
		writeError(w, badRequest("", "the request has no body: send a snapshot file"))
		return
	}
	br := bufio.NewReaderSize(r.Body, 64<<10)
	h, err := ReadSnapshotHeader(br)
	if err == nil {
		err = h.CheckLogVersion()
	}
	if err != nil {
		writeError(w, badRequest("", "%v", err))
		return
	}
	addr, self := s.b.Leader()
	switch {
	case self:
		out, err := sn.RestoreSnapshot(r.Context(), h, SnapshotBody(br, h))
		if errors.Is(err, ErrNotLeader) {
			writeError(w, noLeader("this gntd lost its leadership before the restore; nothing was restored"))
			return
		}
		if err != nil {
			writeError(w, asAPIError(err))
			return
		}
		setIndex(w, s.index())
		writeJSON(w, out)
	case r.Header.Get(HeaderForwarded) != "":
		writeError(w, noLeader("this gntd is not the leader and the request was already forwarded once"))
	case addr == "":
		writeError(w, noLeader("no leader is known; nothing was restored"))
	default:
		// The body is streamed on, not held: a snapshot may be large.
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPut, s.baseURL(addr)+r.URL.RequestURI(),
			io.MultiReader(bytes.NewReader(h.Encode()), br))
		if err != nil {
			writeError(w, asAPIError(err))
			return
		}
		req.Header = forwardHeader(r)
		req.ContentLength = -1
		resp, err := s.fwd.Do(req)
		if err != nil {
			e := noLeader(fmt.Sprintf("forwarding the snapshot to the leader at %s failed: %v", addr, err))
			if !isDialError(err) {
				e.ErrorCode = CodeIndeterminate
			}
			writeError(w, e)
			return
		}
		defer resp.Body.Close()
		if err := copyAnswer(w, resp.StatusCode, resp.Header, resp.Body); err != nil {
			s.log.Debug("copying the leader's answer", "path", r.URL.Path, "error", err)
		}
	}
}
