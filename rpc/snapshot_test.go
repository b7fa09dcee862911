package rpc

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
)

// testSnapshot returns a whole snapshot file of a fresh state.
func testSnapshot(t testing.TB) (SnapshotHeader, []byte) {
	t.Helper()
	body, err := fsm.New().Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	h := SnapshotHeader{Format: SnapshotFormat, Version: SnapshotFileVersion, ClusterName: "c.example.com", ClusterUUID: "u-1",
		LogVersion: fsm.LogVersion, Index: 7, Term: 2, Created: "2026-11-27T00:00:00Z", Leader: "n1", GntVersion: Version,
		Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
	return h, append(h.Encode(), body...)
}

func TestSnapshotFileRoundTrip(t *testing.T) {
	h, file := testSnapshot(t)
	got, st, err := ReadSnapshot(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if got != h || st == nil {
		t.Fatalf("header %+v, want %+v", got, h)
	}
}

// TestSnapshotFileBad: every damaged or foreign file is refused with an
// error that says what is wrong.
func TestSnapshotFileBad(t *testing.T) {
	h, file := testSnapshot(t)
	body := file[len(h.Encode()):]
	withHeader := func(mod func(*SnapshotHeader)) []byte {
		c := h
		mod(&c)
		return append(c.Encode(), body...)
	}
	flipped := append([]byte(nil), file...)
	flipped[len(flipped)-3] ^= 0x20
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"not json", []byte("hello\n"), "not a JSON header"},
		{"no newline", []byte(`{"format":"gnt-snapshot"}`), "no end"},
		{"huge header", append(bytes.Repeat([]byte("{"), MaxSnapshotHeader+10), '\n'), "no header line within"},
		{"bad json", []byte("{\"format\":\n"), "bad header"},
		{"unknown field", []byte(strings.Replace(string(file), `"format"`, `"colour":1,"format"`, 1)), "unknown field"},
		{"two values", []byte(strings.Replace(string(file), "}\n", "}{}\n", 1)), "more than one"},
		{"other format", withHeader(func(h *SnapshotHeader) { h.Format = "gnt-fsm" }), `format "gnt-fsm"`},
		{"newer file version", withHeader(func(h *SnapshotHeader) { h.Version = 2 }), "file version 2"},
		{"zero size", withHeader(func(h *SnapshotHeader) { h.Size = 0 }), "size 0 is outside"},
		{"huge size", withHeader(func(h *SnapshotHeader) { h.Size = MaxSnapshotBytes + 1 }), "outside"},
		{"bad digest", withHeader(func(h *SnapshotHeader) { h.SHA256 = "xyz" }), "not 64 lower-case hex"},
		{"upper digest", withHeader(func(h *SnapshotHeader) { h.SHA256 = strings.ToUpper(h.SHA256) }), "lower-case"},
		{"negative log", withHeader(func(h *SnapshotHeader) { h.LogVersion = -1 }), "negative"},
		{"no cluster", withHeader(func(h *SnapshotHeader) { h.ClusterUUID = "" }), "cluster_uuid"},
		{"newer log", withHeader(func(h *SnapshotHeader) { h.LogVersion = fsm.LogVersion + 1 }), fmt.Sprintf("log version %d", fsm.LogVersion+1)},
		{"truncated", file[:len(file)-5], "truncated"},
		{"trailing bytes", append(append([]byte(nil), file...), 'x'), "more bytes follow"},
		{"flipped byte", flipped, "sha256"},
		{"size too large", withHeader(func(h *SnapshotHeader) { h.Size++ }), "truncated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, st, err := ReadSnapshot(bytes.NewReader(tc.in))
			if err == nil || st != nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestSnapshotBodyReadsExactly: the body reader stops at the announced
// size and checks what follows only at its end.
func TestSnapshotBodyReadsExactly(t *testing.T) {
	h, file := testSnapshot(t)
	br := bufio.NewReader(bytes.NewReader(file))
	if _, err := ReadSnapshotHeader(br); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(SnapshotBody(br, h))
	if err != nil || int64(len(data)) != h.Size {
		t.Fatalf("read %d bytes, %v; want %d", len(data), err, h.Size)
	}
}

func FuzzReadSnapshot(f *testing.F) {
	_, file := testSnapshot(f)
	f.Add(file)
	f.Add([]byte("{}\n"))
	f.Add(file[:40])
	f.Fuzz(func(t *testing.T, in []byte) {
		h, st, err := ReadSnapshot(bytes.NewReader(in))
		if err == nil && (st == nil || h.Format != SnapshotFormat) {
			t.Fatalf("accepted without a state or format: %+v", h)
		}
		if err == nil {
			sum := sha256.Sum256(in[len(in)-int(h.Size):])
			if hex.EncodeToString(sum[:]) != h.SHA256 {
				t.Fatalf("accepted a body whose digest differs")
			}
		}
	})
}
