package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Prefill sizes: the filler keeps at least prefillAhead bytes of written
// zeros past bolt's last page, writing prefillChunk bytes at a time.
const (
	prefillAhead = 4 << 20
	prefillChunk = 512 << 10
	// pokeEvery: the filler looks again once about this many bytes were
	// written (each entry counted at least pokeEvery/64, a page or so).
	pokeEvery = 256 << 10
)

// prefillStore is the Raft log and stable store: raft-boltdb, with the
// blocks just past the end of its data kept written with zeros.
//
// Why: bolt grows its file by truncating it larger, which leaves a sparse
// tail, and a Raft log only ever appends. So every commit wrote into
// blocks the file system had not allocated yet, and its fdatasync had to
// commit the file system's journal too. On this project's machines an
// fdatasync after a 4 KiB write into a sparse region took 380–625 µs at
// the median, against 190–210 µs after one over blocks already written;
// a whole StoreLogs took about 11 % less at the median with the zeros
// (BenchmarkStoreLogs). The leader's write and a follower's write are
// both on the path of every Raft entry, one after the other.
//
// Why it is safe: the zeros are written only at or past the file's end,
// and only while holding mu, which every write to bolt also holds, so no
// write transaction is running. Every page bolt uses lies below its
// high-water mark, and every page below that mark has been written, so
// below the file's end: the zeros never touch a page of bolt's. Bolt only
// reaches them by allocating new pages, which it writes in full before
// referring to them. Bolt is opened with NoGrowSync so that it does not
// truncate the file back to its own idea of its size; it then extends the
// file by writing (should it outrun the filler), and fdatasync persists
// the new size with the data. Any error stops the filler with a warning,
// leaving bolt as it would be without it.
type prefillStore struct {
	*raftboltdb.BoltStore

	log  hclog.Logger
	file *os.File // the same file, for the meta pages, its size and the zeros

	mu sync.Mutex // held by every bolt write and by each chunk of zeros

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	ahead, chunk int64
	zeros        []byte // chunk bytes of zeros, written again and again
	// written estimates the bytes bolt has added since the filler last
	// looked (under mu): waking the filler after every write costs more
	// than it saves.
	written int64
}

var (
	_ raft.LogStore    = (*prefillStore)(nil)
	_ raft.StableStore = (*prefillStore)(nil)
)

// newPrefillStore wraps store, whose file is path, and starts its filler.
func newPrefillStore(store *raftboltdb.BoltStore, path string, log hclog.Logger) (*prefillStore, error) {
	return newPrefillStoreSized(store, path, log, prefillAhead, prefillChunk)
}

// newPrefillStoreSized is newPrefillStore keeping ahead bytes of zeros,
// written chunk bytes at a time (tests use smaller ones).
func newPrefillStoreSized(store *raftboltdb.BoltStore, path string, log hclog.Logger, ahead, chunk int64) (*prefillStore, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	s := &prefillStore{
		BoltStore: store,
		log:       log,
		file:      f,
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		ahead:     ahead,
		chunk:     chunk,
		zeros:     make([]byte, chunk),
	}
	go s.run()
	s.poke()
	return s, nil
}

func (s *prefillStore) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *prefillStore) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		for {
			more, err := s.fillOnce()
			if err != nil {
				s.log.Warn("raft log prefill stopped; bolt grows its file as usual", "error", err)
				<-s.stop
				return
			}
			if !more {
				break
			}
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}
}

// fillOnce writes one chunk of zeros at the file's end if fewer than
// s.ahead bytes of it lie past bolt's high-water mark. It reports whether
// it wrote one.
func (s *prefillStore) fillOnce() (bool, error) {
	// A first look without the lock: reading the meta pages while bolt
	// writes one can only see a torn page, which fails its checksum, and
	// the other one is then used. Errors count only under the lock.
	if end, err := s.fillAt(); err == nil && end < 0 {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	end, err := s.fillAt()
	if err != nil || end < 0 {
		return false, err
	}
	if _, err := s.file.WriteAt(s.zeros, end); err != nil {
		return false, err
	}
	return true, syscall.Fdatasync(int(s.file.Fd()))
}

// fillAt returns the file's end when fewer than s.ahead bytes of it lie
// past bolt's high-water mark, and -1 when enough do.
func (s *prefillStore) fillAt() (int64, error) {
	hwm, err := boltHighWater(s.file)
	if err != nil {
		return 0, err
	}
	st, err := s.file.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size()-hwm >= s.ahead {
		return -1, nil
	}
	return st.Size(), nil
}

// StoreLog implements raft.LogStore.
func (s *prefillStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs implements raft.LogStore.
func (s *prefillStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	err := s.BoltStore.StoreLogs(logs)
	for _, l := range logs {
		s.written += int64(len(l.Data)) + pokeEvery/64
	}
	poke := s.written >= pokeEvery
	if poke {
		s.written = 0
	}
	s.mu.Unlock()
	if poke {
		s.poke()
	}
	return err
}

// DeleteRange implements raft.LogStore.
func (s *prefillStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.BoltStore.DeleteRange(min, max)
}

// Set implements raft.StableStore.
func (s *prefillStore) Set(k, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.BoltStore.Set(k, v)
}

// SetUint64 implements raft.StableStore.
func (s *prefillStore) SetUint64(k []byte, v uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.BoltStore.SetUint64(k, v)
}

// Close stops the filler and closes the file and the store.
func (s *prefillStore) Close() error {
	close(s.stop)
	<-s.done
	s.file.Close()
	return s.BoltStore.Close()
}

// Bolt's file format (version 2): two meta pages at the start, each a
// 16-byte page header and then magic, version, page size, flags (uint32
// each), the root bucket (16 bytes), the freelist's page, the high-water
// page id, the transaction id and an FNV-64a checksum of the fields before
// it (uint64 each), in the machine's byte order (little-endian here).
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltMetaOffset = 16
	boltMetaSumTo  = boltMetaOffset + 56
	boltMetaLen    = boltMetaOffset + 64
)

var errNoBoltMeta = errors.New("no valid bolt meta page")

// boltHighWater returns the end of the last page bolt has allocated in f
// (its meta's page id times its page size), from whichever valid meta
// page says more. The second meta page is one page into the file: the
// first one's page size, or the machine's if the first is not valid.
func boltHighWater(f *os.File) (int64, error) {
	hwm, pageSize := int64(-1), int64(0)
	for i := 0; i < 2; i++ {
		off := int64(0)
		if i == 1 {
			off = pageSize
			if off == 0 {
				off = int64(os.Getpagesize())
			}
		}
		end, ps, ok, err := readBoltMeta(f, off)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		if i == 0 {
			pageSize = ps
		}
		hwm = max(hwm, end)
	}
	if hwm < 0 {
		return 0, errNoBoltMeta
	}
	return hwm, nil
}

// readBoltMeta reads the meta page at off: the end of bolt's high-water
// page, the page size, and whether the page holds a valid meta at all.
func readBoltMeta(f *os.File, off int64) (end, pageSize int64, ok bool, err error) {
	buf := make([]byte, boltMetaLen)
	if _, err := f.ReadAt(buf, off); errors.Is(err, io.EOF) {
		return 0, 0, false, nil // a file too short to hold this page
	} else if err != nil {
		return 0, 0, false, fmt.Errorf("reading bolt meta page at %d: %w", off, err)
	}
	le := binary.LittleEndian
	m := buf[boltMetaOffset:]
	if le.Uint32(m[0:]) != boltMagic || le.Uint32(m[4:]) != boltVersion {
		return 0, 0, false, nil
	}
	h := fnv.New64a()
	h.Write(buf[boltMetaOffset:boltMetaSumTo])
	if sum := le.Uint64(m[56:]); sum != 0 && sum != h.Sum64() {
		return 0, 0, false, nil
	}
	pageSize = int64(le.Uint32(m[8:]))
	if pageSize < 512 || pageSize > 1<<20 {
		return 0, 0, false, nil
	}
	return int64(le.Uint64(m[40:])) * pageSize, pageSize, true, nil
}
