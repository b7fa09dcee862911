package agent

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// threadOutlivesLeader is a process whose main thread exits first (its
// stat says zombie) while a second thread still runs for a second, then
// writes the marker file named by its first argument and ends the
// process. qemu killed by SIGKILL can look like this for a moment: its
// main thread a zombie, its other threads still holding its files.
const threadOutlivesLeader = `
import ctypes, os, sys, threading, time
def worker():
    time.sleep(1.0)
    open(sys.argv[1], "w").close()
    os._exit(0)
threading.Thread(target=worker).start()
sys.stdout.write("ready\n")
sys.stdout.flush()
ctypes.CDLL(None).pthread_exit(None)
`

// TestWaitGoneWaitsForEveryThread: waitGone returns only once every
// thread of the process is gone, not when its main thread is a zombie
// (the wait TestKVMQcow2's offline grow needs: the image's lock is free
// only then).
func TestWaitGoneWaitsForEveryThread(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("SKIP: no python3 to run a process whose thread outlives its main thread")
	}
	const uuid = "6b5a1c1e-0000-4000-8000-0000000e0417"
	marker := filepath.Join(t.TempDir(), "last-thread-done")
	cmd := exec.Command(py, "-c", threadOutlivesLeader, marker, "-uuid", uuid)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("helper: %q %v", l, err)
	}
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); procAlive(pid); {
		if time.Now().After(deadline) {
			t.Fatal("the helper's main thread did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the helper's second thread finished before its main thread was seen a zombie: nothing tested")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitGone(ctx, pid, uuid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("waitGone returned while a thread of the process still ran: %v", err)
	}
}
