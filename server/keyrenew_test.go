package server

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/pki"
	"github.com/gnt-cluster/gnt/rpc"
)

// TestKeyRotationPhases feeds the key renewal's state machine the joins
// of three nodes and an offline one, in the order a rolling renewal sees
// them.
func TestKeyRotationPhases(t *testing.T) {
	const oldID, newID = "0ld0", "3e30"
	r := &keyRotation{}
	members := []rotationMember{{name: "n1"}, {name: "n2"}, {name: "n3"}, {name: "n4", offline: true}}
	next := func(phase string) string { return nextKeyPhase(phase, newID, members, r.reports) }
	for _, ph := range []string{"", fsm.KeyPhaseDone, "bogus"} {
		if got := next(ph); got != "" {
			t.Errorf("phase %q moves to %q; only trust and use move", ph, got)
		}
	}
	if got := next(fsm.KeyPhaseTrust); got != "" {
		t.Fatalf("trust with no reports moves to %q", got)
	}
	r.record("n1", []string{oldID, newID})
	r.record("n2", []string{oldID, newID})
	r.record("n3", []string{oldID})
	if got := next(fsm.KeyPhaseTrust); got != "" {
		t.Fatalf("trust moves to %q while n3 holds only the old key", got)
	}
	r.record("n3", []string{oldID, newID})
	if got := next(fsm.KeyPhaseTrust); got != fsm.KeyPhaseUse {
		t.Fatalf("every online node holds the new key: trust moves to %q, want use", got)
	}
	if got := next(fsm.KeyPhaseUse); got != "" {
		t.Fatalf("use moves to %q while every node signs with the old key", got)
	}
	r.record("n1", []string{newID, oldID})
	r.record("n2", []string{newID, oldID})
	if got := next(fsm.KeyPhaseUse); got != "" {
		t.Fatalf("use moves to %q while n3 signs with the old key", got)
	}
	r.record("n3", []string{newID, oldID})
	if got := next(fsm.KeyPhaseUse); got != fsm.KeyPhaseDone {
		t.Fatalf("every online node signs with the new key: use moves to %q, want done", got)
	}
	members[3].offline = false
	if got := next(fsm.KeyPhaseUse); got != "" {
		t.Fatalf("use moves to %q while n4, back online, has not reported", got)
	}
	if got := nextKeyPhase(fsm.KeyPhaseTrust, newID, []rotationMember{{name: "x", offline: true}}, nil); got != "" {
		t.Fatalf("no online node: trust moves to %q", got)
	}
	prog := keyProgress(newID, members, r.reports, r.reports["n1"].at)
	if len(prog) != 4 || !prog[2].HoldsNew || !prog[2].UsesNew || prog[3].Reported || prog[3].HoldsNew {
		t.Fatalf("progress: %+v", prog)
	}
}

// TestFollowKeyRenewal walks one gntd's keys through a renewal as its
// join answers tell it, restarting it at every step: the files of its
// data dir, the keys it signs with and accepts, the sealed CA key it can
// open. Answers it cannot use change nothing.
func TestFollowKeyRenewal(t *testing.T) {
	dir := t.TempDir()
	oldKey := []byte("00112233445566778899aabbccddeeff00112233\n")
	if err := os.WriteFile(filepath.Join(dir, keyFile), oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *Server {
		t.Helper()
		s := &Server{dir: dataDir{dir}, log: hclog.NewNullLogger()}
		if err := s.loadKeys(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := start()
	newKey, err := newClusterKey()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := pki.Seal(keySealKey(oldKey), newKey)
	if err != nil {
		t.Fatal(err)
	}
	oldID, newID := keyID(oldKey), keyID(newKey)
	check := func(step string, primary, other []byte, files map[string][]byte) {
		t.Helper()
		p, o := s.clusterKeys()
		if !bytes.Equal(p, primary) || !bytes.Equal(o, other) {
			t.Fatalf("%s: keys %q %q, want %q %q", step, p, o, primary, other)
		}
		if !bytes.Equal(s.joinKey, rpc.DeriveKey(primary, rpc.JoinKeyLabel)) {
			t.Fatalf("%s: the join key is not the primary's", step)
		}
		for _, name := range []string{keyFile, keyNewFile} {
			data, err := os.ReadFile(filepath.Join(dir, name))
			want, ok := files[name]
			switch {
			case !ok && !os.IsNotExist(err):
				t.Fatalf("%s: %s exists (%v)", step, name, err)
			case ok && !bytes.Equal(data, want):
				t.Fatalf("%s: %s holds %q, want %q (%v)", step, name, data, want, err)
			case ok:
				if st, _ := os.Stat(filepath.Join(dir, name)); st.Mode().Perm() != 0o600 {
					t.Fatalf("%s: %s has mode %o", step, name, st.Mode().Perm())
				}
			}
		}
	}
	check("start", oldKey, nil, map[string][]byte{keyFile: oldKey})

	// Answers this gntd cannot use change nothing.
	otherSealed, _ := pki.Seal(keySealKey([]byte("another cluster's key")), newKey)
	for _, kr := range []*rpc.KeyRenewal{
		nil,
		{Phase: fsm.KeyPhaseTrust, ID: newID, Sealed: otherSealed},
		{Phase: fsm.KeyPhaseTrust, ID: "ffff", Sealed: sealed},
		{Phase: fsm.KeyPhaseTrust, ID: newID, Sealed: "junk"},
		{Phase: fsm.KeyPhaseDone, ID: newID},
	} {
		s.followKeyRenewal(kr)
		check("unusable answer", oldKey, nil, map[string][]byte{keyFile: oldKey})
	}

	trust := &rpc.KeyRenewal{Phase: fsm.KeyPhaseTrust, ID: newID, Sealed: sealed}
	s.followKeyRenewal(trust)
	both := map[string][]byte{keyFile: oldKey, keyNewFile: newKey}
	check("trust", oldKey, newKey, both)
	if ids := s.keyIDs(); len(ids) != 2 || ids[0] != oldID || ids[1] != newID {
		t.Fatalf("trust: reports %q", ids)
	}
	if jk := s.JoinKeys(); len(jk) != 2 {
		t.Fatalf("trust: %d join keys accepted", len(jk))
	}
	s = start() // restarted in phase trust: both keys, signing with the old
	check("restart in trust", oldKey, newKey, both)
	s.followKeyRenewal(trust)
	check("trust again", oldKey, newKey, both)

	use := &rpc.KeyRenewal{Phase: fsm.KeyPhaseUse, ID: newID, Sealed: sealed}
	s.followKeyRenewal(use)
	check("use", newKey, oldKey, both)
	// The CA key sealed under either key opens.
	for _, k := range [][]byte{oldKey, newKey} {
		ca, _ := pki.Seal(pki.SealKey(k), []byte("ca key"))
		if got, err := s.unsealWithKeys(pki.SealKey, ca); err != nil || string(got) != "ca key" {
			t.Fatalf("use: the CA key sealed under %q: %q %v", k, got, err)
		}
	}
	s = start() // restarted in phase use: signs with the old key until its join
	check("restart in use", oldKey, newKey, both)
	s.followKeyRenewal(use)
	check("use after restart", newKey, oldKey, both)

	done := &rpc.KeyRenewal{Phase: fsm.KeyPhaseDone, ID: newID}
	s.followKeyRenewal(done)
	only := map[string][]byte{keyFile: newKey}
	check("done", newKey, nil, only)
	if ids := s.keyIDs(); len(ids) != 1 || ids[0] != newID {
		t.Fatalf("done: reports %q", ids)
	}
	ca, _ := pki.Seal(pki.SealKey(oldKey), []byte("ca key"))
	if _, err := s.unsealWithKeys(pki.SealKey, ca); err == nil {
		t.Fatal("done: a value sealed under the old key still opens")
	}
	// A stale answer of an earlier phase does not bring the old key back.
	s.followKeyRenewal(use)
	s.followKeyRenewal(trust)
	check("stale answers after done", newKey, nil, only)
	s = start()
	check("restart after done", newKey, nil, only)

	// A crash between the two steps of done leaves both files equal.
	os.WriteFile(filepath.Join(dir, keyNewFile), newKey, 0o600)
	s = start()
	check("restart after a crash in done", newKey, nil, only)
	// A new key file readable by others stops the start.
	os.WriteFile(filepath.Join(dir, keyNewFile), oldKey, 0o644)
	if err := (&Server{dir: dataDir{dir}, log: hclog.NewNullLogger()}).loadKeys(); err == nil {
		t.Fatal("a cluster.key.new readable by others was loaded")
	}
}
