package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Data dir layout.
const (
	keyFile      = "cluster.key"
	identityFile = "node.json"
	raftDir      = "raft"
	raftDBFile   = "raft.db"
)

// identity is what a data dir says about who owns it.
type identity struct {
	Name        string `json:"name"`
	ClusterUUID string `json:"cluster_uuid,omitempty"`
	ClusterName string `json:"cluster_name,omitempty"`
	// RaftMember is this gntd's Raft server ID once it has been in a Raft
	// configuration with state: from then on its Raft store must not go
	// missing (amnesia.go). Cleared when it leaves the Raft group.
	RaftMember string `json:"raft_member,omitempty"`
}

// dataDir wraps the on-disk layout of one gntd.
type dataDir struct{ path string }

func (d dataDir) file(name string) string { return filepath.Join(d.path, name) }
func (d dataDir) raftPath() string        { return filepath.Join(d.path, raftDir) }

// open checks the data dir before anything starts. It refuses a dir that
// belongs to another node, and Raft state without its cluster key or
// identity: a gntd never starts a new cluster over old data.
func (d dataDir) open(name string) (identity, error) {
	if err := os.MkdirAll(d.path, 0o700); err != nil {
		return identity{}, fmt.Errorf("data dir %s: %w", d.path, err)
	}
	id, err := d.readIdentity()
	switch {
	case errors.Is(err, os.ErrNotExist):
		id = identity{Name: name}
	case err != nil:
		return identity{}, err
	case id.Name != name:
		return identity{}, fmt.Errorf("data dir %s belongs to node %q, not %q", d.path, id.Name, name)
	}
	hasRaft := d.hasRaft()
	_, keyErr := os.Stat(d.file(keyFile))
	if hasRaft {
		// A member's missing raft.db is refused by checkRaftStore, with
		// what to do about it.
		if _, err := os.Stat(filepath.Join(d.raftPath(), raftDBFile)); err != nil && id.RaftMember == "" {
			return identity{}, fmt.Errorf("data dir %s is corrupt: %s exists but %s is missing", d.path, raftDir, raftDBFile)
		}
		if keyErr != nil {
			return identity{}, fmt.Errorf("data dir %s is corrupt: Raft state without %s", d.path, keyFile)
		}
		if id.ClusterUUID == "" {
			return identity{}, fmt.Errorf("data dir %s is corrupt: Raft state without a cluster identity in %s", d.path, identityFile)
		}
	}
	if keyErr == nil {
		if _, err := d.readKey(); err != nil {
			return identity{}, err
		}
	}
	if err := d.writeIdentity(id); err != nil {
		return identity{}, err
	}
	return id, nil
}

func (d dataDir) hasRaft() bool {
	_, err := os.Stat(d.raftPath())
	return err == nil
}

func (d dataDir) readIdentity() (identity, error) {
	var id identity
	data, err := os.ReadFile(d.file(identityFile))
	if err != nil {
		return id, err
	}
	if err := json.Unmarshal(data, &id); err != nil || id.Name == "" {
		return id, fmt.Errorf("data dir %s is corrupt: %s is unreadable", d.path, identityFile)
	}
	return id, nil
}

func (d dataDir) writeIdentity(id identity) error {
	data, _ := json.MarshalIndent(id, "", "  ")
	return writeFileAtomic(d.file(identityFile), append(data, '\n'), 0o600)
}

// readKey loads cluster.key: Ganeti's format, 40 hex characters and a
// newline. The whole file is the confd HMAC key; other keys derive from it.
func (d dataDir) readKey() ([]byte, error) {
	path := d.file(keyFile)
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %o; it must not be readable by group or others (chmod 600)", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k := strings.TrimSpace(string(data))
	if len(k) < 32 {
		return nil, fmt.Errorf("%s is too short to be a cluster key", path)
	}
	if _, err := hex.DecodeString(k); err != nil {
		return nil, fmt.Errorf("%s is not a hex cluster key", path)
	}
	return data, nil
}

// createKey writes a new cluster key; it refuses to overwrite one.
func (d dataDir) createKey() ([]byte, error) {
	if _, err := os.Stat(d.file(keyFile)); err == nil {
		return nil, fmt.Errorf("%s already exists; refusing to replace a cluster key", d.file(keyFile))
	}
	buf := make([]byte, 20)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	key := []byte(hex.EncodeToString(buf) + "\n")
	if err := writeFileAtomic(d.file(keyFile), key, 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

// archiveRaft moves Raft state aside when this node stops being a
// candidate, so a later promotion starts from a clean replica.
func (d dataDir) archiveRaft(now time.Time) error {
	if !d.hasRaft() {
		return nil
	}
	return os.Rename(d.raftPath(), d.raftPath()+".removed-"+now.UTC().Format("20060102T150405"))
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
