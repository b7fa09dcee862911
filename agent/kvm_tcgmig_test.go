package agent

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestKVMTCGMigrationKeepsMemory: the driver's command line under TCG
// (QEMUMemory's size) migrates a running guest live without losing its
// writes. Two qemus of the test guest with that command line, the target
// started with -S so that it stays paused once the memory arrived; after
// each of three migrations there and back the guest's memory is read on
// both sides (QMP pmemsave) and must be the same page for page (QEMU 7.2
// with a RAM size of a multiple of 256 KiB leaves some pages stale now
// and then, docs/agent.md), then the target runs on and its counter goes
// on.
func TestKVMTCGMigrationKeepsMemory(t *testing.T) {
	kernel, initrd := needGuest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	inst := guestInstance(kernel, initrd, "diskless")
	args := commandLine(t, inst)
	// The two qemus' directories, where killAll finds them.
	roots := []string{t.TempDir(), t.TempDir()}
	dirs := make([]string, 2)
	for i, r := range roots {
		dirs[i] = filepath.Join(r, "run", inst.UUID)
		if err := os.MkdirAll(dirs[i], 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { killAll(r) })
	}
	start := func(dir string, extra ...string) {
		t.Helper()
		os.Remove(filepath.Join(dir, "qemu.pid"))
		cmd := exec.Command("qemu-system-x86_64", append(append([]string{}, args...), extra...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("qemu: %v\n%s", err, out)
		}
	}
	qmp := func(dir, cmd string, args, out any) {
		t.Helper()
		if err := QMPCall(ctx, filepath.Join(dir, "qmp.sock"), cmd, args, out); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
	var size struct {
		Base int64 `json:"base-memory"`
	}
	mem := func(dir string) []byte {
		t.Helper()
		f := filepath.Join(dir, "memory")
		qmp(dir, "pmemsave", map[string]any{"val": 0, "size": size.Base, "filename": f}, nil)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(f)
		return data
	}

	start(dirs[0])
	qmp(dirs[0], "query-memory-size-summary", nil, &size)
	if size.Base%(256<<10) == 0 {
		t.Fatalf("the guest's RAM is %d bytes, a multiple of 256 KiB (QEMUMemory)", size.Base)
	}
	lines := serialLines(t, filepath.Join(dirs[0], "serial.sock"))
	n := waitCount(t, lines, 30, 3*time.Minute)
	for i := 0; i < 3; i++ {
		src, dst := dirs[i%2], dirs[1-i%2]
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		start(dst, "-incoming", "tcp:"+addr, "-S")
		next := serialLines(t, filepath.Join(dst, "serial.sock"))
		qmp(src, "migrate-set-parameters", map[string]any{"max-bandwidth": 32 << 20, "downtime-limit": 30}, nil)
		qmp(src, "migrate", map[string]any{"uri": "tcp:" + addr}, nil)
		for {
			var st queryMigrate
			qmp(src, "query-migrate", nil, &st)
			if st.Status == "completed" {
				break
			}
			if st.Status == "failed" || st.Status == "cancelled" {
				t.Fatalf("migration %d %s: %s", i+1, st.Status, st.ErrorDesc)
			}
			time.Sleep(50 * time.Millisecond)
		}
		a, b := mem(src), mem(dst)
		if len(a) != len(b) || len(a) != int(size.Base) {
			t.Fatalf("migration %d: %d and %d bytes of memory read, want %d", i+1, len(a), len(b), size.Base)
		}
		var stale []string
		for off := 0; off < len(a); off += 4096 {
			if !bytes.Equal(a[off:off+4096], b[off:off+4096]) {
				stale = append(stale, "0x"+strconv.FormatInt(int64(off), 16))
			}
		}
		if len(stale) > 0 {
			t.Fatalf("migration %d: %d pages differ between source and target, at %v", i+1, len(stale), stale)
		}
		// The last count the source printed; the target's go on from it.
		for drained := false; !drained; {
			select {
			case l := <-lines:
				if c, ok := guestCount(l); ok && c > n {
					n = c
				}
			default:
				drained = true
			}
		}
		qmp(dst, "cont", nil, nil)
		killAll(roots[i%2])
		lines = next
		n = waitCount(t, lines, n+10, 3*time.Minute)
	}
}
