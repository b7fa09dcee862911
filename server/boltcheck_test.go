package server

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// writeRaftDB makes a raft.db as a member's would be: a current term and
// logs entries of size bytes (big ones span overflow pages, many ones
// branch pages).
func writeRaftDB(t testing.TB, path string, logs, size int) {
	t.Helper()
	s := openBolt(t, path)
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	var batch []*raft.Log
	for i := 1; i <= logs; i++ {
		batch = append(batch, testLog(uint64(i), size))
		if len(batch) == 64 || i == logs {
			if err := s.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckBoltFileSound(t *testing.T) {
	for _, c := range []struct {
		name       string
		logs, size int
	}{{"empty", 0, 0}, {"a few", 5, 100}, {"many small", 3000, 64}, {"overflow pages", 40, 20000}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), raftDBFile)
			writeRaftDB(t, path, c.logs, c.size)
			if err := checkBoltFile(path); err != nil {
				t.Fatalf("a sound raft.db refused: %v", err)
			}
		})
	}
}

// rootPage is the page id of the root bucket's page of a bolt file.
func rootPage(t *testing.T, data []byte) int64 {
	m, ok := parseBoltMeta(data)
	if !ok {
		t.Fatal("no valid first meta page")
	}
	m1, ok1 := parseBoltMeta(data[m.pageSize:])
	if ok1 && m1.txid > m.txid {
		m = m1
	}
	return int64(m.root)
}

func TestCheckBoltFileCorrupt(t *testing.T) {
	ps := int64(os.Getpagesize())
	cases := []struct {
		name  string
		spoil func(t *testing.T, data []byte) []byte
	}{
		{"both meta pages zeroed", func(t *testing.T, d []byte) []byte {
			clear(d[:2*ps])
			return d
		}},
		{"random bytes over every data page", func(t *testing.T, d []byte) []byte {
			rand.New(rand.NewSource(1)).Read(d[2*ps:])
			return d
		}},
		{"random bytes over the root page", func(t *testing.T, d []byte) []byte {
			root := rootPage(t, d)
			rand.New(rand.NewSource(2)).Read(d[root*ps : (root+1)*ps])
			return d
		}},
		{"root page's elements point past the page", func(t *testing.T, d []byte) []byte {
			root := rootPage(t, d)
			p := d[root*ps:]
			for i := 0; i < int(p[10]); i++ {
				off := boltPageHeader + i*boltElement
				copy(p[off+4:off+8], []byte{0xff, 0xff, 0xff, 0x7f}) // pos
			}
			return d
		}},
		{"truncated to three pages", func(t *testing.T, d []byte) []byte { return d[:3*ps] }},
		{"shorter than its meta pages", func(t *testing.T, d []byte) []byte { return d[:700] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), raftDBFile)
			writeRaftDB(t, path, 3000, 64)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, c.spoil(t, data), 0o600); err != nil {
				t.Fatal(err)
			}
			err = checkBoltFile(path)
			if !errors.Is(err, errBoltCorrupt) {
				t.Fatalf("a spoiled raft.db: %v, want a corruption error", err)
			}
			t.Logf("%v", err)
		})
	}
}

// FuzzCheckBolt: whatever a file holds, checkBolt answers without
// panicking, and a file it passes is one bbolt opens, read-write as
// startRaft does (its free-page scan panics in a goroutine of its own on
// a damaged tree: that would crash this test), and reads every bucket of.
func FuzzCheckBolt(f *testing.F) {
	dir := f.TempDir()
	// Small seeds: the fuzzer minimises every new input, and each run
	// writes and opens a file.
	for i, shape := range [][2]int{{0, 0}, {5, 100}, {60, 64}} {
		path := filepath.Join(dir, "seed"+string(rune('a'+i)))
		writeRaftDB(f, path, shape[0], shape[1])
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if checkBolt(bytes.NewReader(data), int64(len(data))) != nil {
			return
		}
		path := filepath.Join(dir, "try.db") // one run at a time per process
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		opts := *boltOptions()
		opts.Timeout = time.Second
		db, err := bbolt.Open(path, 0o600, &opts)
		if err != nil {
			return // a clean error is fine
		}
		defer db.Close()
		_ = db.View(func(tx *bbolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
				if b == nil {
					return nil // a key of the root bucket that is not a bucket
				}
				return b.ForEach(func(k, v []byte) error { return nil })
			})
		})
	})
}

// openRaftBolt, as startRaft opens raft.db: a sound file opens, a new one
// is created, a corrupt one is an error naming it.
func TestOpenRaftBolt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, raftDBFile)
	writeRaftDB(t, path, 50, 100)
	s, err := openRaftBolt(path)
	if err != nil {
		t.Fatalf("sound raft.db: %v", err)
	}
	s.Close()
	fresh := filepath.Join(dir, "new.db")
	if s, err = openRaftBolt(fresh); err != nil {
		t.Fatalf("new raft.db: %v", err)
	}
	s.Close()
	spoilFile(t, path)
	if _, err := openRaftBolt(path); err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, errBoltCorrupt) {
		t.Fatalf("corrupt raft.db: %v, want an error naming %s", err, path)
	}
}
