package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// store keeps one JSON file per instance UUID in a directory. A write
// goes to a temporary file that is synced and renamed over the record,
// then the directory is synced, so a crash leaves the old record or the
// new one, never a torn one.
type store struct{ dir string }

func newStore(dir string) (store, error) {
	if dir == "" {
		return store{}, errors.New("agent: no state directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return store{}, fmt.Errorf("agent state directory: %w", err)
	}
	// Leftovers of writes a crash interrupted.
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	for _, t := range tmps {
		os.Remove(t)
	}
	return store{dir: dir}, nil
}

func (s store) path(uuid string) string { return filepath.Join(s.dir, uuid+".json") }

// load reads the record of uuid into v; ok is false when there is none.
func (s store) load(uuid string, v any) (ok bool, err error) {
	data, err := os.ReadFile(s.path(uuid))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("agent record %s is corrupt: %w", s.path(uuid), err)
	}
	return true, nil
}

func (s store) save(uuid string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(s.path(uuid), append(data, '\n'))
}

func (s store) remove(uuid string) error {
	if err := os.Remove(s.path(uuid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(s.dir)
}

// uuids lists the records, sorted.
func (s store) uuids() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".json") {
			out = append(out, strings.TrimSuffix(n, ".json"))
		}
	}
	sort.Strings(out)
	return out, nil
}

// maxDoneOps bounds the op ids a record remembers. A caller retries a
// step long before 64 newer ones of the same instance reached this node.
const maxDoneOps = 64

// opDone says whether done (a record's recent "op:opID") holds op for opID.
func opDone(done []string, op Op, opID string) bool {
	return slices.Contains(done, string(op)+":"+opID)
}

// noteDone adds op for opID (when there is one) to done, keeping the
// newest maxDoneOps.
func noteDone(done []string, op Op, opID string) []string {
	if opID == "" {
		return done
	}
	done = append(done, string(op)+":"+opID)
	if n := len(done); n > maxDoneOps {
		done = done[n-maxDoneOps:]
	}
	return done
}

// lastOp is a record's account of an operation that ended at at: its
// error, or whether it changed anything.
func lastOp(op Op, opID string, at time.Time, changed bool, err error) *LastOp {
	if err != nil {
		return &LastOp{Op: op, OpID: opID, At: at.UTC(), Error: err.Error()}
	}
	return &LastOp{Op: op, OpID: opID, At: at.UTC(), Changed: changed}
}

// findDisk is the disk id of a record's list, or nil.
func findDisk(disks []DiskStatus, id string) *DiskStatus {
	for i := range disks {
		if disks[i].UUID == id {
			return &disks[i]
		}
	}
	return nil
}

// settle stores what an operation decided on a record: work when it
// keeps one, else the removal of the stored one (had).
func settle[R any](s store, op Op, uuid string, had bool, work *R) error {
	var err error
	switch {
	case work != nil:
		err = s.save(uuid, work)
	case had:
		err = s.remove(uuid)
	}
	if err != nil {
		return &OpError{Op: op, Err: err}
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// locks serialises operations per instance. A lock is a one-slot channel
// so that waiting for it respects the caller's context: an operation
// stuck in an injected hang does not make every later call hang too.
type locks struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (l *locks) lock(ctx context.Context, uuid string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]chan struct{}{}
	}
	ch, ok := l.m[uuid]
	if !ok {
		ch = make(chan struct{}, 1)
		l.m[uuid] = ch
	}
	l.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another operation on instance %s: %w", uuid, ctx.Err())
	}
}
