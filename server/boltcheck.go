package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// openRaftBolt opens raft.db for Raft: a file that exists is first checked
// with checkBoltFile, and a panic of bbolt's own goroutine (the one
// opening) becomes an error naming the file, never a stack trace.
func openRaftBolt(path string) (store *raftboltdb.BoltStore, err error) {
	if st, serr := os.Stat(path); serr == nil && st.Size() > 0 {
		if err := checkBoltFile(path); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			store, err = nil, fmt.Errorf("%s is corrupt: bbolt: %v", path, p)
		}
	}()
	return raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: boltOptions()})
}

// checkBoltFile checks the structure of a bolt database file (raft.db)
// before bbolt opens it: bbolt trusts its pages, and on a file with
// damaged pages it panics, in goroutines of its own that no recover can
// catch (the free-page scan of Open), or faults on a page beyond the end
// of its memory map. This walk reads the file with bounds checks instead:
// a valid meta page, every page reachable from the root bucket within the
// file and referenced once, of the right type, each element's key and
// value inside its page, nested buckets likewise. It returns an error
// saying what is wrong and where, or nil when bbolt can open the file and
// read every bucket without tripping over it. It reads what it checks,
// page by page, so its memory stays within a page or two whatever the
// file's size.
func checkBoltFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return checkBolt(f, st.Size())
}

// bbolt's on-disk format (go.etcd.io/bbolt page.go, db.go, bucket.go);
// the meta's magic and version are prefill.go's.
const (
	boltPageHeader     = 16 // id u64, flags u16, count u16, overflow u32
	boltElement        = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	boltBucketHeader   = 16 // root pgid u64, sequence u64
	boltBranchPage     = 0x01
	boltLeafPage       = 0x02
	boltMetaPage       = 0x04
	boltFreelistPage   = 0x10
	boltBucketLeaf     = 0x01
	boltNoFreelist     = ^uint64(0)
	boltMaxDepth       = 64
	boltMinPageSize    = 512
	boltMaxPageSize    = 1 << 16
	boltMetaChecksumAt = 56 // the checksum covers the meta's first 56 bytes
)

// errBoltCorrupt is wrapped by every structural error of checkBolt.
var errBoltCorrupt = errors.New("not a sound bolt database")

type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64 // the high water mark: pages [0, pgid) are in use
	txid     uint64
}

// parseBoltMeta reads the meta at the start of a meta page; ok is false
// when it is not a valid one (magic, version, checksum).
func parseBoltMeta(page []byte) (boltMeta, bool) {
	if len(page) < boltPageHeader+64 {
		return boltMeta{}, false
	}
	m := page[boltPageHeader:]
	le := binary.LittleEndian
	if le.Uint32(m[0:]) != boltMagic || le.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	if sum := le.Uint64(m[boltMetaChecksumAt:]); sum != 0 {
		h := fnv.New64a()
		h.Write(m[:boltMetaChecksumAt])
		if h.Sum64() != sum {
			return boltMeta{}, false
		}
	}
	return boltMeta{pageSize: le.Uint32(m[8:]), root: le.Uint64(m[16:]), freelist: le.Uint64(m[32:]),
		pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, true
}

type boltWalker struct {
	r        io.ReaderAt
	size     int64
	meta     boltMeta
	pageSize int64
	seen     map[uint64]bool
}

func checkBolt(r io.ReaderAt, size int64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errBoltCorrupt, fmt.Sprintf(format, args...))
	}
	if size < 2*boltMinPageSize {
		return bad("%d bytes, shorter than its two meta pages", size)
	}
	first := make([]byte, min(int64(boltPageHeader+64), size))
	if _, err := r.ReadAt(first, 0); err != nil {
		return err
	}
	// As bbolt: the page size is the first meta's when it is valid, else
	// the default, and the second meta follows the first page.
	pageSize := int64(os.Getpagesize())
	m0, ok0 := parseBoltMeta(first)
	if ok0 {
		pageSize = int64(m0.pageSize)
	}
	if pageSize < boltMinPageSize || pageSize > boltMaxPageSize || pageSize&(pageSize-1) != 0 {
		return bad("page size %d is not a power of two in [%d, %d]", pageSize, boltMinPageSize, boltMaxPageSize)
	}
	if size < 2*pageSize {
		return bad("%d bytes, shorter than its two meta pages of %d", size, pageSize)
	}
	second := make([]byte, boltPageHeader+64)
	if _, err := r.ReadAt(second, pageSize); err != nil {
		return err
	}
	m1, ok1 := parseBoltMeta(second)
	var m boltMeta
	switch {
	case ok0 && ok1:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case ok0:
		m = m0
	case ok1:
		m = m1
	default:
		return bad("neither meta page is valid (magic, version or checksum)")
	}
	if int64(m.pageSize) != pageSize {
		return bad("the meta pages disagree on the page size (%d, %d)", pageSize, m.pageSize)
	}
	if m.pgid < 3 || m.pgid > uint64(size/pageSize) {
		return bad("the meta says %d pages are in use, the file holds %d", m.pgid, size/pageSize)
	}
	w := &boltWalker{r: r, size: size, meta: m, pageSize: pageSize, seen: map[uint64]bool{0: true, 1: true}}
	if m.freelist != boltNoFreelist {
		p, err := w.page(m.freelist, boltFreelistPage)
		if err != nil {
			return err
		}
		// count 0xFFFF: the real count is the first element.
		n, off := uint64(binary.LittleEndian.Uint16(p[10:])), uint64(boltPageHeader)
		if n == 0xFFFF {
			if len(p) < boltPageHeader+8 {
				return bad("freelist page %d is truncated", m.freelist)
			}
			n, off = binary.LittleEndian.Uint64(p[boltPageHeader:]), boltPageHeader+8
		}
		if n > uint64(len(p)) || off+8*n > uint64(len(p)) {
			return bad("freelist page %d lists %d pages, more than it holds", m.freelist, n)
		}
		for i := uint64(0); i < n; i++ {
			if id := binary.LittleEndian.Uint64(p[off+8*i:]); id < 2 || id >= m.pgid {
				return bad("freelist page %d lists page %d, outside [2, %d)", m.freelist, id, m.pgid)
			}
		}
	}
	return w.tree(m.root, 0)
}

// page reads page id (with its overflow pages), checking that it lies in
// the file, was not seen before and has one of the wanted flags.
func (w *boltWalker) page(id uint64, want uint16) ([]byte, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: page %d: %s", errBoltCorrupt, id, fmt.Sprintf(format, args...))
	}
	if id < 2 || id >= w.meta.pgid {
		return nil, bad("outside the pages in use [2, %d)", w.meta.pgid)
	}
	head := make([]byte, boltPageHeader)
	if _, err := w.r.ReadAt(head, int64(id)*w.pageSize); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if got := le.Uint64(head); got != id {
		return nil, bad("its header says it is page %d", got)
	}
	flags, overflow := le.Uint16(head[8:]), uint64(le.Uint32(head[12:]))
	if flags&want == 0 || flags&^(boltBranchPage|boltLeafPage|boltMetaPage|boltFreelistPage) != 0 {
		return nil, bad("flags %#x where a page of type %#x belongs", flags, want)
	}
	if id+overflow >= w.meta.pgid {
		return nil, bad("%d overflow pages reach past the pages in use (%d)", overflow, w.meta.pgid)
	}
	for i := uint64(0); i <= overflow; i++ {
		if w.seen[id+i] {
			return nil, bad("page %d is referenced twice", id+i)
		}
		w.seen[id+i] = true
	}
	buf := make([]byte, int64(overflow+1)*w.pageSize)
	if _, err := w.r.ReadAt(buf, int64(id)*w.pageSize); err != nil {
		return nil, err
	}
	return buf, nil
}

// tree checks the B+tree of a bucket rooted at page id.
func (w *boltWalker) tree(id uint64, depth int) error {
	if depth > boltMaxDepth {
		return fmt.Errorf("%w: page %d: the tree is deeper than %d", errBoltCorrupt, id, boltMaxDepth)
	}
	p, err := w.page(id, boltBranchPage|boltLeafPage)
	if err != nil {
		return err
	}
	return w.node(p, id, depth)
}

// node checks the elements of a branch or leaf page p (a page read from
// the file, or an inline bucket's page inside its parent's value).
func (w *boltWalker) node(p []byte, id uint64, depth int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: page %d: %s", errBoltCorrupt, id, fmt.Sprintf(format, args...))
	}
	if len(p) < boltPageHeader {
		return bad("shorter than a page header")
	}
	le := binary.LittleEndian
	flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
	if boltPageHeader+count*boltElement > len(p) {
		return bad("%d elements do not fit in %d bytes", count, len(p))
	}
	// inside reports whether [off+pos, off+pos+n) lies in the page.
	inside := func(off int, pos, n uint64) bool {
		return pos <= uint64(len(p)) && n <= uint64(len(p)) && uint64(off)+pos+n <= uint64(len(p))
	}
	for i := 0; i < count; i++ {
		off := boltPageHeader + i*boltElement
		e := p[off : off+boltElement]
		switch {
		case flags&boltBranchPage != 0:
			pos, ksize, child := uint64(le.Uint32(e)), uint64(le.Uint32(e[4:])), le.Uint64(e[8:])
			if !inside(off, pos, ksize) {
				return bad("branch element %d's key lies outside the page", i)
			}
			if err := w.tree(child, depth+1); err != nil {
				return err
			}
		case flags&boltLeafPage != 0:
			eflags, pos, ksize, vsize := le.Uint32(e), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
			if !inside(off, pos, ksize) || !inside(off, pos+ksize, vsize) {
				return bad("leaf element %d's key or value lies outside the page", i)
			}
			if eflags&boltBucketLeaf == 0 {
				continue
			}
			v := p[uint64(off)+pos+ksize : uint64(off)+pos+ksize+vsize]
			if len(v) < boltBucketHeader {
				return bad("leaf element %d is a bucket of %d bytes, shorter than its header", i, len(v))
			}
			if root := le.Uint64(v); root != 0 {
				if err := w.tree(root, depth+1); err != nil {
					return err
				}
				continue
			}
			// An inline bucket: its leaf page follows the header.
			inline := v[boltBucketHeader:]
			if len(inline) < boltPageHeader || le.Uint16(inline[8:])&boltLeafPage == 0 {
				return bad("leaf element %d is an inline bucket without a leaf page", i)
			}
			if err := w.node(inline, id, depth+1); err != nil {
				return err
			}
		default:
			return bad("flags %#x: neither a branch nor a leaf", flags)
		}
	}
	return nil
}
