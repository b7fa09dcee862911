package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// openBolt opens a raft-boltdb store at path as startRaft does.
func openBolt(t testing.TB, path string) *raftboltdb.BoltStore {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: boltOptions()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// boltSize returns bolt's own high-water mark of the (closed) file at path.
func boltSize(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.View(func(tx *bbolt.Tx) error { n = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func fileHighWater(t *testing.T, path string) (int64, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return boltHighWater(f)
}

func testLog(i uint64, size int) *raft.Log {
	data := bytes.Repeat([]byte{byte(i)}, size)
	binary.LittleEndian.PutUint64(data, i)
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}
}

// TestBoltHighWater: the high-water mark read from the meta pages is the
// one bolt itself reports, after appends and after deletions.
func TestBoltHighWater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s := openBolt(t, path)
	s.Close()
	for round, n := range []int{0, 10, 500} {
		s := openBolt(t, path)
		base, _ := s.LastIndex()
		for i := 1; i <= n; i++ {
			if err := s.StoreLog(testLog(base+uint64(i), 100+i*37%9000)); err != nil {
				t.Fatal(err)
			}
		}
		if round == 2 {
			if err := s.DeleteRange(1, 300); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		got, err := fileHighWater(t, path)
		if err != nil {
			t.Fatal(err)
		}
		if want := boltSize(t, path); got != want {
			t.Fatalf("round %d: high water %d, bolt says %d", round, got, want)
		}
	}
}

// TestBoltHighWaterBadInput: torn, foreign or short files give the other
// meta page's answer or a clear error, never a panic or a made-up size.
func TestBoltHighWaterBadInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s := openBolt(t, path)
	for i := uint64(1); i <= 50; i++ {
		if err := s.StoreLog(testLog(i, 2000)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := boltSize(t, path)
	ps := os.Getpagesize()
	corrupt := func(b []byte, off int) []byte {
		c := append([]byte(nil), b...)
		c[off] ^= 0xff
		return c
	}
	// Bolt alternates the meta page it writes, so after these writes one
	// page holds the last transaction and the other the one before: each
	// alone gives at most bolt's answer, and at least something sane.
	cases := []struct {
		name    string
		data    []byte
		wantErr bool
		exact   bool
	}{
		{"intact", good, false, true},
		{"first meta's checksum field", corrupt(good, boltMetaOffset+56), false, false},
		{"first meta's page id", corrupt(good, boltMetaOffset+40), false, false},
		{"second meta's magic", corrupt(good, ps+boltMetaOffset), false, false},
		{"both magics", corrupt(corrupt(good, boltMetaOffset), ps+boltMetaOffset), true, false},
		{"wrong version in both", corrupt(corrupt(good, boltMetaOffset+4), ps+boltMetaOffset+4), true, false},
		{"empty file", nil, true, false},
		{"shorter than a meta page", good[:40], true, false},
		{"only the first page", good[:ps], false, false},
		{"zeros", make([]byte, 4*ps), true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.db")
			if err := os.WriteFile(p, c.data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := fileHighWater(t, p)
			switch {
			case c.wantErr && err == nil:
				t.Fatalf("high water %d, want an error", got)
			case !c.wantErr && err != nil:
				t.Fatalf("error %v", err)
			case c.exact && got != want:
				t.Fatalf("high water %d, want %d", got, want)
			case !c.wantErr && (got <= 0 || got > want):
				t.Fatalf("high water %d, want in (0, %d]", got, want)
			}
			if c.wantErr && len(c.data) >= boltMetaLen && !errors.Is(err, errNoBoltMeta) {
				t.Fatalf("error %v, want errNoBoltMeta", err)
			}
		})
	}
}

// FuzzBoltHighWater: any file gives an error or a non-negative size.
func FuzzBoltHighWater(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.db")
	s := openBolt(f, path)
	s.StoreLog(testLog(1, 100))
	s.Close()
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed[:2*os.Getpagesize()])
	f.Add([]byte{})
	f.Add(make([]byte, 200))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "x.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := fileHighWater(t, p)
		if err == nil && got < 0 {
			t.Fatalf("high water %d", got)
		}
	})
}

// waitAhead waits until the store's file reaches at least ahead bytes
// past bolt's high-water mark, and returns how far it is.
func waitAhead(t testing.TB, s *prefillStore, ahead int64) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		hwm, err := boltHighWater(s.file)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.file.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if d := st.Size() - hwm; d >= ahead {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("file is %d bytes past bolt's %d after 20s, want %d", st.Size()-hwm, hwm, ahead)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPrefillStore: with the filler running ahead of bolt (and outrun by
// an entry larger than its lead), every log and stable value reads back,
// bolt's own consistency check passes, and the store reopens intact.
func TestPrefillStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := newPrefillStoreSized(openBolt(t, path), path, hclog.NewNullLogger(), 256<<10, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	waitAhead(t, s, s.ahead)
	sizes := map[uint64]int{}
	const n = 1500
	for i := uint64(1); i <= n; i++ {
		size := 50 + int(i*7919%6000)
		if i%500 == 0 {
			size = 600 << 10 // more than the filler's whole lead
		}
		sizes[i] = size
		if i%3 == 0 {
			err = s.StoreLogs([]*raft.Log{testLog(i, size)})
		} else {
			err = s.StoreLog(testLog(i, size))
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == 1000 {
			if err := s.DeleteRange(1, 400); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("u"), 42); err != nil {
		t.Fatal(err)
	}
	ahead := waitAhead(t, s, s.ahead)
	check := func(st raft.LogStore, ss raft.StableStore) {
		t.Helper()
		first, _ := st.FirstIndex()
		last, _ := st.LastIndex()
		if first != 401 || last != n {
			t.Fatalf("logs %d..%d, want 401..%d", first, last, n)
		}
		for i := first; i <= last; i++ {
			var l raft.Log
			if err := st.GetLog(i, &l); err != nil {
				t.Fatalf("log %d: %v", i, err)
			}
			if want := testLog(i, sizes[i]); !bytes.Equal(l.Data, want.Data) {
				t.Fatalf("log %d: %d bytes read back differ from the %d written", i, len(l.Data), len(want.Data))
			}
		}
		if v, err := ss.Get([]byte("k")); err != nil || string(v) != "v" {
			t.Fatalf("k = %q, %v", v, err)
		}
		if v, err := ss.GetUint64([]byte("u")); err != nil || v != 42 {
			t.Fatalf("u = %d, %v", v, err)
		}
	}
	check(s, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	t.Logf("file %d bytes, bolt's pages end at %d, %d bytes of zeros ahead", st.Size(), boltSize(t, path), ahead)

	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bbolt.Tx) error {
		var errs []error
		for e := range tx.Check() {
			errs = append(errs, e)
		}
		return errors.Join(errs...)
	})
	db.Close()
	if err != nil {
		t.Fatalf("bolt's check: %v", err)
	}

	s2, err := newPrefillStore(openBolt(t, path), path, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check(s2, s2)
	if err := s2.StoreLog(testLog(n+1, 100)); err != nil {
		t.Fatal(err)
	}
}

// TestPrefillStops: a filler that finds no bolt meta pages (here it is
// pointed at a file of garbage) stops with a warning, writes nothing, and
// the store goes on working without it.
func TestPrefillStops(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "raft.db")
	junk := filepath.Join(dir, "junk")
	garbage := bytes.Repeat([]byte("not bolt"), 4096)
	if err := os.WriteFile(junk, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	s, err := newPrefillStore(openBolt(t, path), junk, log)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 20; i++ {
		if err := s.StoreLog(testLog(i, 50000)); err != nil {
			t.Fatal(err)
		}
	}
	var l raft.Log
	if err := s.GetLog(20, &l); err != nil || !bytes.Equal(l.Data, testLog(20, 50000).Data) {
		t.Fatalf("log 20: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "raft log prefill stopped") || !strings.Contains(logs.String(), errNoBoltMeta.Error()) {
		t.Fatalf("log %q, want the filler's warning naming the missing meta page", logs.String())
	}
	if b, _ := os.ReadFile(junk); !bytes.Equal(b, garbage) {
		t.Fatalf("the filler changed a file it could not read as bolt's (%d bytes, was %d)", len(b), len(garbage))
	}
}

// BenchmarkStoreLogs times one StoreLogs of a 3,400-byte entry (a typical
// batched entry at 64 clients) with fdatasync: on raft-boltdb as gntd
// opened it before prefill.go, and on the prefilled store. It reports the
// median and 90th percentile besides the mean, which this machine's slow
// outliers dominate. Run: go test -run XXX -bench StoreLogs ./server/
func BenchmarkStoreLogs(b *testing.B) {
	for _, prefill := range []bool{false, true} {
		b.Run(fmt.Sprintf("prefill=%v", prefill), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "raft.db")
			var store raft.LogStore
			if prefill {
				s, err := newPrefillStore(openBolt(b, path), path, hclog.NewNullLogger())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				waitAhead(b, s, s.ahead)
				store = s
			} else {
				bolt, err := raftboltdb.New(raftboltdb.Options{
					Path:        path,
					BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true},
				})
				if err != nil {
					b.Fatal(err)
				}
				defer bolt.Close()
				store = bolt
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := store.StoreLogs([]*raft.Log{testLog(uint64(i+1), 3400)}); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*9/10].Microseconds()), "p90-µs")
		})
	}
}
