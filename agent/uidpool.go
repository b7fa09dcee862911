package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gnt-cluster/gnt/fsm"
)

// The user-id pool on a node (seed 003 "User-id pool", Ganeti's
// RequestUnusedUid): a guest of security_model=pool runs under a uid of
// the cluster's pool that no process of the node uses. Each uid has a
// lock file, <dir>/<uid>; to take one the driver
//
//  1. lists the pool's uids in random order, those without a lock file
//     first;
//  2. creates the uid's lock file (it may exist) and takes an exclusive
//     flock on it without waiting (a uid another start holds is skipped);
//  3. looks through /proc for a process with that uid (real, effective,
//     saved or file-system); if there is one it unlocks and goes on;
//  4. otherwise it keeps the lock while qemu starts under the uid, and
//     unlocks once qemu runs under it (or releases the uid when the start
//     failed).
//
// The lock file stays while the guest runs ("most probably in use"); the
// uid is released, its lock file removed, when the guest's qemu ends. A
// gntd restart loses nothing: the uid of a running guest is in its
// record and its process, and the check of step 3 keeps it from being
// handed out twice even without its lock file.

// uidPoolCtxKey carries the cluster's uid pool of a request.
type uidPoolCtxKey struct{}

// WithUIDPool returns ctx carrying the cluster's user-id pool, which the
// leader sends with the operations that start a guest (the node RPC's
// uid_pool): a driver starting a guest of security_model=pool takes its
// uid from it.
func WithUIDPool(ctx context.Context, pool []fsm.UIDRange) context.Context {
	return context.WithValue(ctx, uidPoolCtxKey{}, pool)
}

// uidPoolFrom is the pool WithUIDPool put in ctx (nil: none sent).
func uidPoolFrom(ctx context.Context) []fsm.UIDRange {
	p, _ := ctx.Value(uidPoolCtxKey{}).([]fsm.UIDRange)
	return p
}

// uidLocks hands out uids of a pool with lock files in dir.
type uidLocks struct {
	dir string
	// inUse tells whether a process runs with the uid (procUIDInUse;
	// tests may replace it).
	inUse func(uid int64) (bool, error)
}

// lockedUID is a uid taken from the pool, its lock file held until
// unlock.
type lockedUID struct {
	uid int64
	f   *os.File
}

// unlock lets the lock go, keeping the lock file: the uid is in use.
func (l *lockedUID) unlock() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// ErrUIDPoolExhausted is a start refused because every uid of the pool is
// in use on the node.
var ErrUIDPoolExhausted = errors.New("no unused uid in the uid pool")

// request takes an unused uid of pool (the algorithm above).
func (u *uidLocks) request(pool []fsm.UIDRange) (*lockedUID, error) {
	if len(pool) == 0 {
		return nil, errors.New("the cluster's uid pool is empty (gnt cluster modify --uid-pool)")
	}
	if e := fsm.CheckUIDPool("uid_pool", pool); e != nil {
		return nil, e
	}
	if err := os.MkdirAll(u.dir, 0o755); err != nil {
		return nil, fmt.Errorf("uid pool lock directory: %w", err)
	}
	taken := map[int64]bool{}
	ents, err := os.ReadDir(u.dir)
	if err != nil {
		return nil, fmt.Errorf("uid pool lock directory: %w", err)
	}
	for _, e := range ents {
		if n, err := strconv.ParseInt(e.Name(), 10, 64); err == nil {
			taken[n] = true
		}
	}
	var free, held []int64
	for _, r := range pool {
		for uid := r[0]; uid <= r[1]; uid++ {
			if taken[uid] {
				held = append(held, uid)
			} else {
				free = append(free, uid)
			}
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	rand.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	for _, uid := range append(free, held...) {
		f, err := os.OpenFile(u.path(uid), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("uid pool lock file of uid %d: %w", uid, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another start holds it
			}
			return nil, fmt.Errorf("uid pool lock file of uid %d: %w", uid, err)
		}
		used, err := u.inUse(uid)
		if err != nil {
			f.Close()
			return nil, err
		}
		if used {
			f.Close()
			continue
		}
		return &lockedUID{uid: uid, f: f}, nil
	}
	return nil, fmt.Errorf("%w: all %d uids of %s are in use on this node", ErrUIDPoolExhausted, fsm.UIDPoolSize(pool), fsm.FormatUIDPool(pool))
}

// release returns uid to the pool: its lock file is removed (and the lock
// held, if any, let go). It does not check that no process uses the uid,
// as Ganeti's ReleaseUid does not.
func (u *uidLocks) release(l *lockedUID) error {
	l.unlock()
	return u.releaseUID(l.uid)
}

func (u *uidLocks) releaseUID(uid int64) error {
	if err := os.Remove(u.path(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("uid pool: releasing uid %d: %w", uid, err)
	}
	return nil
}

func (u *uidLocks) path(uid int64) string { return filepath.Join(u.dir, strconv.FormatInt(uid, 10)) }

// procUIDInUse tells whether any process of the node has uid as its real,
// effective, saved or file-system uid (/proc/<pid>/status).
func procUIDInUse(uid int64) (bool, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return false, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		uids, zombie, err := procUIDs(n)
		if err != nil || zombie {
			continue // gone meanwhile, or dead and not yet reaped
		}
		for _, x := range uids {
			if x == uid {
				return true, nil
			}
		}
	}
	return false, nil
}

// procUIDs are the uids of /proc/<pid>/status's Uid line (real,
// effective, saved, file-system), and whether the process is a zombie
// (dead, waiting for its parent to reap it: it runs nothing).
func procUIDs(pid string) (uids []int64, zombie bool, err error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return nil, false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if st, ok := strings.CutPrefix(line, "State:"); ok {
			st = strings.TrimSpace(st)
			zombie = strings.HasPrefix(st, "Z") || strings.HasPrefix(st, "X")
			continue
		}
		rest, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, false, fmt.Errorf("/proc/%s/status: Uid line %q", pid, rest)
			}
			uids = append(uids, n)
		}
	}
	if uids == nil {
		return nil, false, fmt.Errorf("/proc/%s/status has no Uid line", pid)
	}
	return uids, zombie, nil
}
