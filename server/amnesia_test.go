package server

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// memberDir makes a data dir of a member that has been in a Raft
// configuration: node.json with its membership, the cluster key and a
// raft.db with a term and logs.
func memberDir(t *testing.T, member string) dataDir {
	t.Helper()
	d := dataDir{t.TempDir()}
	if err := d.writeIdentity(identity{Name: "node12", ClusterUUID: "c-uuid", ClusterName: "c", RaftMember: member}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.createKey(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d.raftPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	writeRaftDB(t, filepath.Join(d.raftPath(), raftDBFile), 20, 100)
	return d
}

func TestCheckRaftStore(t *testing.T) {
	db := func(d dataDir) string { return filepath.Join(d.raftPath(), raftDBFile) }
	cases := []struct {
		name    string
		member  string
		spoil   func(t *testing.T, d dataDir)
		lost    string // in the lost reason; "" none
		corrupt bool
	}{
		{"sound", "node12", func(*testing.T, dataDir) {}, "", false},
		{"never a member, no Raft dir", "", func(t *testing.T, d dataDir) { os.RemoveAll(d.raftPath()) }, "", false},
		{"never a member, empty raft.db", "", func(t *testing.T, d dataDir) { os.Truncate(db(d), 0) }, "", false},
		{"Raft dir deleted", "node12", func(t *testing.T, d dataDir) { os.RemoveAll(d.raftPath()) }, "Raft directory", false},
		{"raft.db deleted", "node12", func(t *testing.T, d dataDir) { os.Remove(db(d)) }, "raft.db is missing", false},
		{"raft.db truncated to 0", "node12", func(t *testing.T, d dataDir) { os.Truncate(db(d), 0) }, "empty (0 bytes)", false},
		{"raft.db an empty bolt db", "node12", func(t *testing.T, d dataDir) {
			os.Remove(db(d))
			if err := openBolt(t, db(d)).Close(); err != nil {
				t.Fatal(err)
			}
		}, "no current term", false},
		{"a term but no log and no snapshot", "node12", func(t *testing.T, d dataDir) {
			os.Remove(db(d))
			writeRaftDB(t, db(d), 0, 0)
		}, "no log entries", false},
		{"a term and a snapshot, no log (installed snapshot)", "node12", func(t *testing.T, d dataDir) {
			os.Remove(db(d))
			writeRaftDB(t, db(d), 0, 0)
			snap := filepath.Join(d.raftPath(), "snapshots", "3-120-1700000000000")
			os.MkdirAll(snap, 0o700)
			os.WriteFile(filepath.Join(snap, "meta.json"), []byte("{}"), 0o600)
		}, "", false},
		{"corrupt", "node12", func(t *testing.T, d dataDir) { spoilFile(t, db(d)) }, "", true},
		{"corrupt, never a member", "", func(t *testing.T, d dataDir) { spoilFile(t, db(d)) }, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := memberDir(t, c.member)
			c.spoil(t, d)
			st, err := d.checkRaftStore(c.member)
			if err != nil {
				t.Fatal(err)
			}
			if (st.lost == "") != (c.lost == "") || !strings.Contains(st.lost, c.lost) {
				t.Errorf("lost %q, want %q", st.lost, c.lost)
			}
			if (st.corrupt != nil) != c.corrupt {
				t.Errorf("corrupt: %v, want %v", st.corrupt, c.corrupt)
			}
		})
	}
}

// spoilFile writes random bytes over everything but the meta pages.
func spoilFile(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rand.New(rand.NewSource(3)).Read(data[2*os.Getpagesize():])
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// New refuses a member's lost or corrupt Raft state with one line that
// says what happened and what to do; with Rejoin it starts, to rejoin.
func TestNewRefusesLostRaftState(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, d dataDir)
		want  []string
	}{
		{"truncated", func(t *testing.T, d dataDir) { os.Truncate(filepath.Join(d.raftPath(), raftDBFile), 0) },
			[]string{"refusing to start", "node12", "empty (0 bytes)", "gntd agent --rejoin"}},
		{"deleted", func(t *testing.T, d dataDir) { os.RemoveAll(d.raftPath()) },
			[]string{"refusing to start", "Raft directory", "gntd agent --rejoin"}},
		{"corrupt", func(t *testing.T, d dataDir) { spoilFile(t, filepath.Join(d.raftPath(), raftDBFile)) },
			[]string{"refusing to start", filepath.Join(raftDir, raftDBFile) + " is corrupt", "--rejoin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := memberDir(t, "node12")
			c.spoil(t, d)
			cfg := DefaultConfig()
			cfg.Name, cfg.Bind, cfg.DataDir = "node12", "127.0.0.1", d.path
			_, err := New(cfg, nil)
			if err == nil {
				t.Fatal("started over a lost Raft state")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			cfg.Rejoin = true
			s, err := New(cfg, nil)
			if err != nil {
				t.Fatalf("with --rejoin: %v", err)
			}
			if !s.rejoinFirst {
				t.Error("with --rejoin the gntd does not rejoin first")
			}
		})
	}
	// A sound state starts, and --rejoin then does nothing.
	d := memberDir(t, "node12")
	cfg := DefaultConfig()
	cfg.Name, cfg.Bind, cfg.DataDir, cfg.Rejoin = "node12", "127.0.0.1", d.path, true
	s, err := New(cfg, nil)
	if err != nil || s.rejoinFirst {
		t.Fatalf("sound state with --rejoin: %v, rejoin first %v", err, s != nil && s.rejoinFirst)
	}
}
