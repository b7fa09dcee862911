package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDataDirRefusals checks that gntd refuses to start on a damaged or
// foreign data dir, saying what is wrong, without touching it; and that a
// gntd that already belongs to a cluster refuses POST /2/gnt/init.
func TestDataDirRefusals(t *testing.T) {
	start := time.Now()
	c := NewCluster(t, ClusterOptions{Candidates: 1, Nodes: 1})
	cand, node := c.Member("node11"), c.Member("node21")
	c.WaitConverged(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := c.Client().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(20*time.Second, 50*time.Millisecond, node.Name+" joins", func() error {
		st, err := c.Status(node)
		if err != nil {
			return err
		}
		if st.ClusterUUID != info.UUID {
			return &mismatch{node.Name + " cluster", st.ClusterUUID, info.UUID}
		}
		return nil
	})

	if info, err = c.Client().Info(ctx); err != nil {
		t.Fatal(err)
	}

	// ---- POST /2/gnt/init on gntds that belong to the cluster: the
	// initialised candidate, and a plain node that joined with the key.
	keyBefore := readFileT(t, filepath.Join(node.DataDir, "cluster.key"))
	idBefore := readFileT(t, filepath.Join(node.DataDir, "node.json"))
	refusedUnchanged(ctx, t, c, true, "refused init", func() { refuseInit(ctx, t, c, cand, node) })
	if info2, err := c.Client().Info(ctx); err != nil || info2.UUID != info.UUID || info2.Name != info.Name {
		t.Errorf("after refused init: cluster %s %s (%v), want %s %s", info2.Name, info2.UUID, err, info.Name, info.UUID)
	}
	if k := readFileT(t, filepath.Join(node.DataDir, "cluster.key")); !bytes.Equal(k, keyBefore) {
		t.Errorf("refused init changed %s's cluster.key", node.Name)
	}
	if id := readFileT(t, filepath.Join(node.DataDir, "node.json")); !bytes.Equal(id, idBefore) {
		t.Errorf("refused init changed %s's node.json: %s -> %s", node.Name, idBefore, id)
	}
	if _, err := os.Stat(filepath.Join(node.DataDir, "raft")); err == nil {
		t.Errorf("refused init created raft state on plain node %s", node.Name)
	}
	if st, err := c.Status(node); err != nil || st.Candidate || st.ClusterUUID != info.UUID {
		t.Errorf("%s after refused init: %+v (%v)", node.Name, st, err)
	}

	// ---- A real data dir (stopped cleanly), then damaged copies of it.
	cand.Stop()
	node.Stop()
	golden := cand.DataDir
	for _, f := range []string{"cluster.key", "node.json", "raft/raft.db"} {
		if _, err := os.Stat(filepath.Join(golden, f)); err != nil {
			t.Fatalf("the stopped candidate's data dir lacks %s: %v", f, err)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(dir string)
		args   []string // replaces --name when set
		want   []string // substrings of stderr
	}{
		{"raft.db without cluster.key", func(d string) { mustT(t, os.Remove(filepath.Join(d, "cluster.key"))) }, nil,
			[]string{"cluster.key"}},
		{"node.json names another node", func(d string) {
			mustT(t, os.WriteFile(filepath.Join(d, "node.json"),
				bytes.Replace(readFileT(t, filepath.Join(d, "node.json")), []byte(`"node11"`), []byte(`"node99"`), 1), 0o600))
		}, nil, []string{"node99", "node11"}},
		{"started under another name", func(string) {}, []string{"--name", "node77"}, []string{"node11", "node77"}},
		{"cluster.key mode 0644", func(d string) { mustT(t, os.Chmod(filepath.Join(d, "cluster.key"), 0o644)) }, nil,
			[]string{"cluster.key", "644"}},
		{"raft/ without raft.db", func(d string) { mustT(t, os.Remove(filepath.Join(d, "raft", "raft.db"))) }, nil,
			[]string{"raft.db"}},
		{"raft state without node.json", func(d string) { mustT(t, os.Remove(filepath.Join(d, "node.json"))) }, nil,
			[]string{"node.json"}},
		{"unreadable node.json", func(d string) { mustT(t, os.WriteFile(filepath.Join(d, "node.json"), []byte("{garbage"), 0o600)) }, nil,
			[]string{"node.json"}},
		{"cluster.key not a key", func(d string) { mustT(t, os.WriteFile(filepath.Join(d, "cluster.key"), []byte("hello\n"), 0o600)) }, nil,
			[]string{"cluster.key"}},
	} {
		dir := filepath.Join(c.Dir, "damaged-"+strings.NewReplacer(" ", "-", "/", "", ".", "").Replace(tc.name))
		copyDirT(t, golden, dir)
		tc.damage(dir)
		snap := snapshotDirT(t, dir)
		args := memberArgs(cand, dir, tc.args)
		t0 := time.Now()
		stderr, code, timedOut := runGntd(args, 15*time.Second)
		took := time.Since(t0)
		switch {
		case timedOut:
			t.Errorf("%s: gntd did not exit within 15s (it started?); stderr:\n%s", tc.name, stderr)
			continue
		case code == 0:
			t.Errorf("%s: gntd exited 0; stderr:\n%s", tc.name, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr does not mention %q:\n%s", tc.name, w, stderr)
			}
		}
		if after := snapshotDirT(t, dir); after != snap {
			t.Errorf("%s: the refused start changed the data dir:\nbefore:\n%s\nafter:\n%s", tc.name, snap, after)
		}
		t.Logf("%s: refused in %v, exit %d: %s", tc.name, took.Round(time.Millisecond), code, strings.TrimSpace(lastLine(stderr)))
	}

	// ---- The undamaged dir still starts, as the same cluster.
	cand.Start(t)
	c.WaitHTTP(cand)
	node.Start(t)
	c.WaitLeader(20 * time.Second)
	c.Eventually(20*time.Second, 100*time.Millisecond, "the restarted cluster answers", func() error {
		ictx, icancel := context.WithTimeout(ctx, 2*time.Second)
		defer icancel()
		i, err := c.Client().Info(ictx)
		if err != nil {
			return err
		}
		if i.UUID != info.UUID || i.SerialNo != info.SerialNo {
			return &mismatch{"cluster after restart", i.UUID + " serial " + itoa(i.SerialNo), info.UUID + " serial " + itoa(info.SerialNo)}
		}
		return nil
	})
	c.Eventually(20*time.Second, 100*time.Millisecond, node.Name+" rejoins", func() error {
		st, err := c.Status(node)
		if err != nil {
			return err
		}
		if st.ClusterUUID != info.UUID {
			return &mismatch{node.Name + " cluster", st.ClusterUUID, info.UUID}
		}
		return nil
	})
	t.Logf("whole test %v", time.Since(start).Round(time.Millisecond))
}

// refuseInit sends POST /2/gnt/init to gntds that belong to a cluster:
// the initialised candidate (without credentials too) and a plain node
// that joined with the key; each must answer 409 wrong_state (401
// without credentials).
func refuseInit(ctx context.Context, t *testing.T, c *Cluster, members ...*Member) {
	t.Helper()
	for i, m := range members {
		body := []byte(`{"cluster_name":"other.example.com"}`)
		if i == 0 {
			// Once the cluster exists, init needs write access like
			// any change: refused before it is even looked at.
			if res := rawAPI(ctx, insecureHTTP, "POST", "https://"+m.APIAddr()+"/2/gnt/init", body); res.Status != http.StatusUnauthorized {
				t.Errorf("init on %s without credentials: %d %s, want 401", m.Name, res.Status, res.Body)
			}
		}
		res := rawAPI(ctx, c.HTTP(), "POST", "https://"+m.APIAddr()+"/2/gnt/init", body)
		if res.Err != nil || res.Status != http.StatusConflict || res.API.ErrorCode != "wrong_state" || res.API.Message == "" {
			t.Errorf("init on %s: %d %s %q (%v); want 409 wrong_state", m.Name, res.Status, res.API.ErrorCode, res.API.Message, res.Err)
		} else {
			t.Logf("init on %s refused: %s", m.Name, res.API.Message)
		}
	}
}

type mismatch struct{ what, got, want string }

func (m *mismatch) Error() string { return m.what + ": got " + m.got + ", want " + m.want }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// memberArgs is m's command line with another data dir, and the given
// flags replacing the ones of the same name.
func memberArgs(m *Member, dir string, repl []string) []string {
	args := append([]string(nil), m.Args...)
	set := func(flag, val string) {
		for i := 0; i+1 < len(args); i++ {
			if args[i] == flag {
				args[i+1] = val
				return
			}
		}
		args = append(args, flag, val)
	}
	set("--data-dir", dir)
	for i := 0; i+1 < len(repl); i += 2 {
		set(repl[i], repl[i+1])
	}
	return args
}

// runGntd runs a gntd that should refuse to start, killing it after
// timeout, and returns its stderr and exit status.
func runGntd(args []string, timeout time.Duration) (stderr string, code int, timedOut bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return errb.String() + out.String(), -1, true
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return errb.String(), ee.ExitCode(), false
		}
		return err.Error(), -1, false
	}
	return errb.String(), 0, false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustT(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// copyDirT copies a directory tree, keeping file modes.
func copyDirT(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm())
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshotDirT describes a tree: every path with its mode, size and
// content hash: enough to tell that nothing was written.
func snapshotDirT(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel + " " + info.Mode().String())
		if !d.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(fmt.Sprintf(" %d %x", len(data), sha256.Sum256(data)))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
